//! `--pcap FILE` on `softrnic rping` and the benchmarks: the recordings (synthetic
//! TCP/IP headers around what crossed each connection) decode with `softrnic decode`
//! with no error, every CRC good, the exact FPDUs the run sent, and, when tshark is
//! installed, with no malformed frame and no warning from Wireshark's dissectors
//! (except the known warning about MPA revision 2, see tshark_conformance.rs).

mod rig;

use softrnic_cli::decode::{ConnectionDecode, DirSummary};
use softrnic_wire::Opcode;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_softrnic");

fn scratch(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("pcap-option");
    std::fs::create_dir_all(&d).expect("scratch directory");
    let p = d.join(name);
    let _ = std::fs::remove_file(&p);
    p
}

fn ok(what: &str, o: Output) -> String {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "{what} failed:\n{text}");
    text
}

/// `softrnic decode` of `pcap` succeeds, and the library's decode of it has no error
/// and a good CRC on every FPDU (when `crc`) in both directions of every connection.
fn decodes_cleanly(pcap: &Path, crc: bool) -> Vec<ConnectionDecode> {
    ok(
        "softrnic decode",
        Command::new(BIN)
            .arg("decode")
            .arg(pcap)
            .output()
            .expect("decode runs"),
    );
    let conns = rig::decode(pcap);
    for c in &conns {
        assert_eq!(c.crc, crc, "conn {}: CRC negotiated", c.index);
        for (d, dir) in [(&c.to_server, "c->s"), (&c.to_client, "s->c")] {
            let at = format!("{} conn {} {dir}", pcap.display(), c.index);
            assert_eq!(d.error, None, "{at}");
            assert_eq!(d.trailing_bytes, 0, "{at}: trailing octets");
            assert_eq!(d.crc_bad, 0, "{at}");
            let checked = if crc { d.crc_good } else { d.crc_not_used };
            assert_eq!(checked, d.fpdus, "{at}: CRC of every FPDU");
            assert!(d.fin && !d.rst, "{at}: closed with FIN");
        }
    }
    conns
}

/// tshark (if installed) decodes `pcap` with no malformed frame and no warning but
/// the known MPA revision 2 ones, and sees `fpdus` FPDUs.
fn tshark_decodes_cleanly(pcap: &Path, fpdus: usize) {
    if Command::new("tshark").arg("-v").output().is_err() {
        rig::skip_test(
            "tshark check of --pcap recordings",
            "tshark not installed (Debian package tshark)",
        );
        return;
    }
    rig::record("ran");
    let tshark = |args: &[&str]| {
        ok(
            "tshark",
            Command::new("tshark")
                .args(["-n", "-r"])
                .arg(pcap)
                .args(args)
                .stderr(Stdio::null())
                .output()
                .expect("tshark runs"),
        )
    };
    // tshark's MPA dissector knows only RFC 5044: it warns that revision-2 frames have
    // Rev=2 and the Res bits set (see tshark_conformance.rs).
    let known = [
        "Rev field is NOT set to one",
        "Res field is NOT set to zero",
    ];
    for pass in [&[][..], &["-2"][..]] {
        let mut args = pass.to_vec();
        args.extend([
            "-Y",
            "_ws.malformed || _ws.expert.severity >= warning",
            "-T",
            "fields",
            "-e",
            "frame.number",
            "-e",
            "_ws.expert.message",
        ]);
        let bad: Vec<String> = tshark(&args)
            .lines()
            .filter(|l| !known.iter().any(|k| l.contains(k)))
            .map(str::to_string)
            .collect();
        assert!(
            bad.is_empty(),
            "{}: tshark {pass:?}:\n{bad:#?}",
            pcap.display()
        );
    }
    let theirs: usize = tshark(&[
        "-Y",
        "iwarp_mpa.fpdu",
        "-T",
        "fields",
        "-E",
        "occurrence=a",
        "-E",
        "aggregator=,",
        "-e",
        "iwarp_mpa.ulpdulength",
    ])
    .lines()
    .map(|l| l.split(',').filter(|v| !v.is_empty()).count())
    .sum();
    assert_eq!(theirs, fpdus, "{}: FPDUs tshark decodes", pcap.display());
}

fn count(d: &DirSummary, op: Opcode) -> usize {
    d.opcodes.get(&op).copied().unwrap_or(0)
}

fn fpdus(conns: &[ConnectionDecode]) -> usize {
    conns
        .iter()
        .map(|c| c.to_server.fpdus + c.to_client.fpdus)
        .sum()
}

#[test]
fn rping_pcap_on_both_sides_decodes() {
    const N: usize = 3;
    let (srv_pcap, cli_pcap) = (scratch("rping-server.pcap"), scratch("rping-client.pcap"));
    let mut server = Command::new(BIN)
        .args([
            "rping",
            "-s",
            "-a",
            "127.0.0.1",
            "-p",
            "0",
            "-C",
            "3",
            "-S",
            "100",
        ])
        .arg("--pcap")
        .arg(&srv_pcap)
        .stderr(Stdio::piped())
        .spawn()
        .expect("server starts");
    let mut lines = BufReader::new(server.stderr.take().expect("stderr")).lines();
    let first = lines.next().expect("a line").expect("UTF-8");
    let addr = first
        .strip_prefix("rping: server listening on ")
        .unwrap_or_else(|| panic!("server said {first:?}"))
        .to_string();
    let (host, port) = addr.rsplit_once(':').expect("host:port");
    let client = Command::new(BIN)
        .args([
            "rping", "-c", "-a", host, "-p", port, "-C", "3", "-S", "100", "-V",
        ])
        .args(["--crc", "required", "--pcap"])
        .arg(&cli_pcap)
        .output()
        .expect("client runs");
    let client_text = ok("rping client", client);
    assert!(
        client_text.contains("3 iterations, data verified"),
        "{client_text}"
    );
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(
        server.wait().expect("server ends").success(),
        "server: {rest:?}"
    );

    for pcap in [&cli_pcap, &srv_pcap] {
        let conns = decodes_cleanly(pcap, true);
        assert_eq!(conns.len(), 1, "{}", pcap.display());
        let c = &conns[0];
        // Per iteration the client sends two adverts and answers one Read; the server
        // reads, writes back and sends two adverts.
        let (up, down) = (&c.to_server, &c.to_client);
        assert_eq!(
            (
                count(up, Opcode::Send),
                count(up, Opcode::ReadResponse),
                up.fpdus
            ),
            (2 * N, N, 3 * N),
            "{}: client to server",
            pcap.display()
        );
        assert_eq!(
            (
                count(down, Opcode::ReadRequest),
                count(down, Opcode::Write),
                count(down, Opcode::Send),
                down.fpdus
            ),
            (N, N, 2 * N, 4 * N),
            "{}: server to client",
            pcap.display()
        );
        assert_eq!((up.payload_bytes, down.payload_bytes), (396, 396));
        tshark_decodes_cleanly(pcap, fpdus(&conns));
    }
}

#[test]
fn write_bw_loopback_pcap_records_the_client_side() {
    const N: u64 = 20;
    // (size, FPDUs per Write): loopback FPDUs are 65000 octets.
    let sizes = [(4096u64, 1), (200_000, 4)];
    let pcap = scratch("write_bw.pcap");
    let o = Command::new(BIN)
        .args([
            "write_bw",
            "--loopback",
            "-n",
            "20",
            "-s",
            "4096,200000",
            "--crc",
            "--quiet",
        ])
        .arg("--pcap")
        .arg(&pcap)
        .output()
        .expect("write_bw runs");
    ok("write_bw", o);
    let conns = decodes_cleanly(&pcap, true);
    // One connection per size, in order, each carrying exactly the run's Writes; only
    // the client recorded (a second recorder would duplicate every segment).
    assert_eq!(conns.len(), sizes.len());
    for (c, (size, fpdus_per_write)) in conns.iter().zip(sizes) {
        assert_eq!(
            count(&c.to_server, Opcode::Write),
            N as usize * fpdus_per_write
        );
        assert_eq!(c.to_server.payload_bytes, N * size, "size {size}");
        assert_eq!(count(&c.to_client, Opcode::Write), 0);
    }
    tshark_decodes_cleanly(&pcap, fpdus(&conns));
}

#[test]
fn write_lat_loopback_pcap_decodes() {
    let pcap = scratch("write_lat.pcap");
    let o = Command::new(BIN)
        .args([
            "write_lat",
            "--loopback",
            "-n",
            "50",
            "--warmup",
            "5",
            "-s",
            "8",
            "--quiet",
        ])
        .arg("--pcap")
        .arg(&pcap)
        .output()
        .expect("write_lat runs");
    ok("write_lat", o);
    let conns = decodes_cleanly(&pcap, false);
    assert_eq!(conns.len(), 1);
    // Every ping-pong iteration (warm-up included) is one Write each way.
    assert_eq!(count(&conns[0].to_server, Opcode::Write), 55);
    assert_eq!(count(&conns[0].to_client, Opcode::Write), 55);
    tshark_decodes_cleanly(&pcap, fpdus(&conns));
}

#[test]
fn write_bw_with_markers_pcap_decodes_with_every_marker_checked() {
    const N: u64 = 20;
    // (size, FPDUs per Write): loopback FPDUs of 65000 octets, markers included.
    let sizes = [(64u64, 1), (4096, 1), (200_000, 4)];
    let pcap = scratch("write_bw_markers.pcap");
    let o = Command::new(BIN)
        .args([
            "write_bw",
            "--loopback",
            "-n",
            "20",
            "-s",
            "64,4096,200000",
            "--crc",
            "--markers",
            "--quiet",
        ])
        .arg("--pcap")
        .arg(&pcap)
        .output()
        .expect("write_bw runs");
    ok("write_bw", o);
    // The decoder strips every marker and checks its FPDU pointer (a bad one stops the
    // direction with an error, which decodes_cleanly rejects), and checks every CRC.
    let conns = decodes_cleanly(&pcap, true);
    assert_eq!(conns.len(), sizes.len());
    for (c, (size, fpdus_per_write)) in conns.iter().zip(sizes) {
        assert_eq!(c.markers, (true, true), "markers both ways");
        assert_eq!(
            count(&c.to_server, Opcode::Write),
            N as usize * fpdus_per_write
        );
        assert_eq!(c.to_server.payload_bytes, N * size, "size {size}");
        assert!(c.to_client.fpdus > 0, "the Read Responses came back marked");
    }
}
