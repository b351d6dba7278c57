//! perftest's `-R` exchange: replayed against the captures of two Linux perftest 6.06
//! peers (every control message has the length and, where softrnic sends the same, the
//! octets the encoders produce), and run softrnic against softrnic over loopback TCP in
//! every test, so both roles are exercised without the siw rig. Timings are never
//! asserted.

use softrnic_cli::bench::perftest::{self as pt, BwReport, Dest};
use softrnic_cli::bench::{BenchCommand, BenchConfig, Measured, Test, rdma_cm};
use softrnic_cli::decode::{Dir, Event, decode_all, stream};
use softrnic_rnic::Device;
use softrnic_wire::ddp::Placement;
use softrnic_wire::rdmap::Opcode;
use std::path::{Path, PathBuf};

fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/testdata/siw")
}

/// The payloads of the Sends on a capture's first (control) connection, per direction.
fn control_messages(name: &str) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let tcp = softrnic_capture::read_capture(&testdata().join(name))
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let decoded = decode_all(&tcp);
    let ctrl = decoded.first().expect("an MPA connection");
    let conn = &tcp[ctrl.index];
    let mut out = (Vec::new(), Vec::new());
    for e in &ctrl.events {
        let Event::Fpdu(f) = e else { continue };
        if f.header.opcode != Opcode::Send {
            continue;
        }
        assert!(matches!(
            f.header.placement,
            Placement::Untagged { qn: 0, .. }
        ));
        // 2 octets of MPA length, 18 of untagged DDP/RDMAP header, then the payload.
        let octets = &stream(conn, f.dir)[f.range.clone()];
        let payload = octets[20..2 + f.ulpdu_len].to_vec();
        match f.dir {
            Dir::ToServer => out.0.push(payload),
            Dir::ToClient => out.1.push(payload),
        }
    }
    out
}

#[test]
fn control_exchange_matches_captures() {
    for (name, test) in [
        ("siw-ib_write_bw.pcap", Test::WriteBw),
        ("siw-ib_write_bw-crc.pcap", Test::WriteBw),
        ("siw-ib_read_bw.pcap", Test::ReadBw),
        ("siw-ib_send_bw.pcap", Test::SendBw),
        ("siw-ib_write_lat.pcap", Test::WriteLat),
        ("siw-ib_send_lat.pcap", Test::SendLat),
    ] {
        let (to_server, to_client) = control_messages(name);
        let lengths = pt::message_lengths(test, 1);
        for (dir, msgs) in [("client", &to_server), ("server", &to_client)] {
            let got: Vec<usize> = msgs.iter().map(Vec::len).collect();
            assert_eq!(got, lengths, "{name}: {dir}'s message lengths");
            // The opening is what softrnic sends too, octet for octet.
            assert_eq!(msgs[0], pt::encode_version(pt::VERSION), "{name} {dir}");
            assert_eq!(msgs[1], pt::encode_u32(4096), "{name} {dir}");
            assert_eq!(msgs[2], pt::encode_u32(64), "{name} {dir}");
            assert_eq!(msgs[3], pt::encode_mtu(pt::MTU_1024), "{name} {dir}");
            // The two barriers around the test connections carry zeros.
            assert_eq!(msgs[4], Dest::default().encode(), "{name} {dir}");
            assert_eq!(msgs[5], Dest::default().encode(), "{name} {dir}");
            // The QP description: read tests ask for 128 outstanding Reads.
            let d = Dest::decode(&msgs[6]).expect("a QP description");
            let reads = if test == Test::ReadBw { 128 } else { 1 };
            assert_eq!(d.out_reads, reads, "{name} {dir}");
            assert_ne!((d.rkey, d.vaddr), (0, 0), "{name} {dir}");
            // Every later barrier repeats QP 0's description (padding aside).
            for m in msgs[7..].iter().filter(|m| m.len() == pt::DEST_LEN) {
                assert_eq!(Dest::decode(m), Some(d), "{name} {dir}");
            }
        }
        if matches!(test, Test::WriteBw | Test::ReadBw) {
            // The client's report: 4096 octets, 5 iterations (the captures' -s and -n).
            let r = BwReport::decode(&to_server[10..15]).expect("a report");
            assert_eq!((r.size, r.iters), (4096, 5), "{name}");
            assert!(r.bw_avg > 0.0 && r.bw_peak >= r.bw_avg && r.msg_rate > 0.0);
        }
    }
}

fn config(argv: &[&str]) -> BenchConfig {
    BenchCommand::parse_from(argv.iter().copied())
        .expect("flags parse")
        .config()
        .expect("flags valid")
}

/// Runs `test` with `flags` as a softrnic `-R` server and client over loopback; returns
/// (client's result, server's result).
fn pair(test: &str, flags: &[&str]) -> (Measured, Option<Measured>) {
    let mut s_argv = vec![test, "-R", "--quiet"];
    s_argv.extend_from_slice(flags);
    let scfg = config(&s_argv);
    let sdev = Device::open(scfg.device_config()).expect("device");
    let listener = sdev.listen("127.0.0.1:0").expect("listen");
    let port = listener.local_addr().expect("address").port().to_string();
    let mut c_argv = s_argv.clone();
    c_argv.extend_from_slice(&["-p", &port, "127.0.0.1"]);
    let ccfg = config(&c_argv);
    let server = std::thread::spawn(move || {
        let mut out = Vec::new();
        let r = rdma_cm::serve(&scfg, &sdev, &listener, &mut out);
        (r, String::from_utf8(out).expect("UTF-8"))
    });
    let cdev = Device::open(ccfg.device_config()).expect("device");
    let addr = format!("127.0.0.1:{port}").parse().expect("address");
    let mut out = Vec::new();
    let row = rdma_cm::client(&ccfg, &cdev, addr, &mut out).expect("client runs");
    let text = String::from_utf8(out).expect("UTF-8");
    assert!(
        text.contains("perftest -R exchange (peer version 6.06)"),
        "{text}"
    );
    let (srow, stext) = server.join().expect("server thread");
    let srow = srow.unwrap_or_else(|e| panic!("server failed: {e}\n{stext}"));
    (row.softrnic, srow.map(|r| r.softrnic))
}

fn bw(m: &Measured) -> (u64, f64) {
    match m {
        Measured::Bw(b) => (b.iterations, b.avg_bps),
        Measured::Lat(_) => panic!("a bandwidth result expected"),
    }
}

fn lat(m: &Measured) -> u64 {
    match m {
        Measured::Lat(l) => {
            assert!(l.stats.min <= l.stats.max);
            l.iterations
        }
        Measured::Bw(_) => panic!("a latency result expected"),
    }
}

#[test]
fn write_bw_softrnic_pair() {
    let (c, s) = pair("write_bw", &["-n", "300", "-s", "4096", "-q", "2"]);
    let (iters, avg) = bw(&c);
    assert_eq!(iters, 600);
    // The server prints the client's report: all QPs' iterations, the client's bandwidth.
    let (s_iters, s_avg) = bw(&s.expect("the server shows the client's report"));
    assert_eq!(s_iters, 600);
    assert!((s_avg - avg).abs() <= avg * 1e-9 + 1.0, "{s_avg} vs {avg}");
}

#[test]
fn read_bw_softrnic_pair() {
    let (c, s) = pair("read_bw", &["-n", "200", "-s", "65536"]);
    assert_eq!(bw(&c).0, 200);
    assert_eq!(bw(&s.expect("report")).0, 200);
}

#[test]
fn send_bw_softrnic_pair_with_credits() {
    // A receive depth far below the iterations: only credits keep the client going.
    let (c, s) = pair(
        "send_bw",
        &["-n", "2000", "-s", "64", "-r", "16", "-q", "2"],
    );
    assert_eq!(bw(&c).0, 4000);
    assert_eq!(bw(&s.expect("own measurement")).0, 4000);
}

#[test]
fn write_lat_softrnic_pair() {
    // More than 256 iterations: the one-octet tag wraps.
    let (c, s) = pair("write_lat", &["-n", "300", "-s", "32"]);
    assert_eq!(lat(&c), 300);
    assert_eq!(lat(&s.expect("own measurement")), 300);
}

#[test]
fn send_lat_softrnic_pair() {
    let (c, s) = pair("send_lat", &["-n", "200", "-s", "8"]);
    assert_eq!(lat(&c), 200);
    assert_eq!(lat(&s.expect("own measurement")), 200);
}

#[test]
fn read_lat_softrnic_pair() {
    let (c, s) = pair("read_lat", &["-n", "100", "-s", "4096"]);
    assert_eq!(lat(&c), 100);
    assert!(s.is_none(), "only the client measures read_lat");
}

#[test]
fn rdma_cm_flag_limits() {
    for argv in [
        &["write_bw", "-R", "-a"][..],
        &["write_bw", "-R", "-s", "64,128"],
        &["write_bw", "-R", "-D", "1"],
        &["write_bw", "-R", "--baseline", "tcp"],
    ] {
        let r = BenchCommand::parse_from(argv.iter().copied())
            .map_err(|e| e.to_string())
            .and_then(|c| c.config());
        assert!(r.is_err(), "{argv:?} accepted");
    }
    assert!(config(&["send_lat", "--rdma-cm", "-s", "64", "host"]).rdma_cm);
}
