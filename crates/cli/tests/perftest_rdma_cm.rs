//! perftest's `-R` exchange: replayed against the captures of two Linux perftest 6.06
//! peers (every control message has the length and, where softrnic sends the same, the
//! octets the encoders produce), and run softrnic against softrnic over loopback TCP in
//! every test, so both roles are exercised without the siw rig. Timings are never
//! asserted; counts, clocks and what each side's header says its figures mean are.

use softrnic_cli::bench::perftest::{self as pt, BwReport, Dest};
use softrnic_cli::bench::{BenchCommand, BenchConfig, BwResult, Measured, Test, rdma_cm};
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

/// What a run printed and returned, per side.
struct Side {
    result: Option<Measured>,
    text: String,
}

/// Runs `test` with `flags` as a softrnic `-R` server and client over loopback; returns
/// (client, server).
fn pair(test: &str, flags: &[&str]) -> (Side, Side) {
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
    (
        Side {
            result: Some(row.softrnic),
            text,
        },
        Side {
            result: srow.map(|r| r.softrnic),
            text: stext,
        },
    )
}

fn bw(side: &Side) -> BwResult {
    match side.result {
        Some(Measured::Bw(b)) => b,
        _ => panic!("a bandwidth result expected:\n{}", side.text),
    }
}

/// A latency result's iteration count, which must be its sample count.
fn lat(side: &Side) -> u64 {
    match &side.result {
        Some(Measured::Lat(l)) => {
            assert!(l.stats.min <= l.stats.max);
            assert_eq!(l.stats.count as u64, l.iterations, "{}", side.text);
            l.iterations
        }
        _ => panic!("a latency result expected:\n{}", side.text),
    }
}

/// The header line that starts with `key`.
fn header<'a>(side: &'a Side, key: &str) -> &'a str {
    side.text
        .lines()
        .find(|l| l.trim_start().starts_with(key))
        .unwrap_or_else(|| panic!("no {key:?} line:\n{}", side.text))
}

#[test]
fn write_bw_softrnic_pair() {
    let (c, s) = pair("write_bw", &["-n", "300", "-s", "4096", "-q", "2"]);
    let cb = bw(&c);
    assert_eq!(cb.iterations, 600);
    // Two softrnic sides: the client's clock stops on a closing Read, as in the native
    // mode, and its header says so.
    assert!(
        header(&c, "Clock stops").contains("closing 1-octet RDMA Read"),
        "{}",
        c.text
    );
    assert!(header(&c, "BW peak").contains("delivery probes"));
    // The server measured on its own clock what its QPs placed: all QPs' messages, a
    // clock of its own (not the client's report, which has none).
    let sb = bw(&s);
    assert_eq!(sb.iterations, 600, "{}", s.text);
    assert!(
        sb.clock.is_some(),
        "the server's line is its own measurement"
    );
    assert!(header(&s, "Measured here").contains("Write payload"));
    assert!(
        s.text
            .contains("the client's report (its clock): 600 iterations"),
        "{}",
        s.text
    );
}

#[test]
fn read_bw_softrnic_pair() {
    let (c, s) = pair("read_bw", &["-n", "200", "-s", "65536"]);
    assert_eq!(bw(&c).iterations, 200);
    assert!(header(&c, "Clock stops").contains("last completion"));
    // The server cannot count the Reads it serves: its line is the client's report, said
    // so in the header, with no clock (and no back-computed time).
    let sb = bw(&s);
    assert_eq!((sb.iterations, sb.clock), (200, None));
    assert_eq!(sb.elapsed, std::time::Duration::ZERO);
    assert!(header(&s, "Result line").contains("the client's report"));
}

#[test]
fn send_bw_softrnic_pair_with_credits() {
    // A receive depth far below the iterations: only credits keep the client going.
    let (c, s) = pair(
        "send_bw",
        &["-n", "2000", "-s", "64", "-r", "16", "-q", "2"],
    );
    assert_eq!(bw(&c).iterations, 4000);
    assert!(header(&c, "Clock stops").contains("closing 1-octet RDMA Read"));
    let sb = bw(&s);
    assert_eq!(sb.iterations, 4000);
    assert!(sb.clock.is_some());
    assert!(header(&s, "Measured here").contains("receives completed here"));
}

// The latency tests compute perftest's way: half the interval between two consecutive
// posts, so -n N gives N - 1 samples, and the iteration count printed is that.

#[test]
fn write_lat_softrnic_pair() {
    // More than 256 iterations: the one-octet tag wraps.
    let (c, s) = pair("write_lat", &["-n", "300", "-s", "32"]);
    assert_eq!(lat(&c), 299);
    assert_eq!(lat(&s), 299);
    assert!(header(&c, "Latency").contains("N - 1 samples"));
}

#[test]
fn send_lat_softrnic_pair() {
    let (c, s) = pair("send_lat", &["-n", "200", "-s", "8"]);
    assert_eq!(lat(&c), 199);
    assert_eq!(lat(&s), 199);
}

#[test]
fn read_lat_softrnic_pair() {
    // One sample per Read.
    let (c, s) = pair("read_lat", &["-n", "100", "-s", "4096"]);
    assert_eq!(lat(&c), 100);
    assert!(s.result.is_none(), "only the client measures read_lat");
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
