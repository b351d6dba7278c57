//! Wire conformance without the VM: softrnic talks to itself over loopback (rping's
//! Send, RDMA Read and RDMA Write at several sizes; MPA revision 1 and 2, CRC off and
//! on, peer-to-peer RTR, a Terminate), `dumpcap` captures it, and Wireshark's own
//! iWARP dissectors (tshark) must decode every FPDU we decode, with no malformed
//! packet and no error-level expert info, and find every CRC32c good.
//!
//! tshark's MPA dissector knows only RFC 5044, so it warns that revision-2 frames
//! (RFC 6581) have Rev=2 and Res bits set; warnings are allowed, errors are not.
//! Without tshark the test skips loudly (`.ci/run` installs it).

mod rig;

use rig::HostCapture;
use softrnic_cli::rping::{self, Fault, RpingError, RpingOpts};
use softrnic_rnic::{CrcPolicy, Device, DeviceConfig, MpaConfig};
use softrnic_wire::terminate::{Layer, TerminateCause, ddp_code, ddp_etype};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// One connection of the capture, as softrnic sets it up.
struct Case {
    name: &'static str,
    mpa: MpaConfig,
    size: usize,
    inject: Option<Fault>,
}

fn tshark(args: &[&str], pcap: &Path) -> String {
    let o = Command::new("tshark")
        .args(["-n", "--disable-protocol", "rpcordma", "-r"])
        .arg(pcap)
        .args(args)
        .output()
        .expect("tshark runs");
    assert!(
        o.status.success(),
        "tshark {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// All values of `field` over the capture (tshark prints one line per frame, values
/// joined by commas).
fn values(pcap: &Path, filter: &str, field: &str) -> Vec<String> {
    tshark(
        &[
            "-Y",
            filter,
            "-T",
            "fields",
            "-E",
            "occurrence=a",
            "-E",
            "aggregator=,",
            "-e",
            field,
        ],
        pcap,
    )
    .lines()
    .flat_map(|l| l.split(',').map(str::to_string).collect::<Vec<_>>())
    .filter(|v| !v.is_empty())
    .collect()
}

fn scratch() -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("tshark");
    std::fs::create_dir_all(&d).expect("scratch directory");
    d
}

#[test]
fn tshark_decodes_softrnic_traffic_without_errors() {
    if Command::new("tshark").arg("-v").output().is_err()
        || Command::new("dumpcap").arg("-v").output().is_err()
    {
        rig::skip_test(
            "tshark conformance test",
            "tshark/dumpcap not installed (Debian package tshark)",
        );
        return;
    }
    rig::record("ran");
    let crc = MpaConfig {
        crc: CrcPolicy::Required,
        ..MpaConfig::default()
    };
    let cases = [
        Case {
            name: "rev2, CRC off",
            mpa: MpaConfig::default(),
            size: 100,
            inject: None,
        },
        Case {
            name: "rev2, CRC off, 200000 B (several FPDUs per message)",
            mpa: MpaConfig::default(),
            size: 200_000,
            inject: None,
        },
        Case {
            name: "rev2, CRC on",
            mpa: crc.clone(),
            size: 100,
            inject: None,
        },
        Case {
            name: "rev2, CRC on, 200000 B",
            mpa: crc.clone(),
            size: 200_000,
            inject: None,
        },
        Case {
            name: "rev1, CRC on",
            mpa: MpaConfig {
                revision: 1,
                ..crc.clone()
            },
            size: 4096,
            inject: None,
        },
        Case {
            name: "rev2, peer-to-peer (RTR), CRC on",
            mpa: MpaConfig {
                peer_to_peer: true,
                ..crc.clone()
            },
            size: 4096,
            inject: None,
        },
        // Markers: tshark places them by stream position and checks each FPDU's
        // length and CRC around them. (Its MPA dissector follows a marked stream only
        // where each FPDU starts a TCP segment, as rping's one message per send does.)
        Case {
            name: "rev2, markers, CRC on, 4096 B",
            mpa: MpaConfig {
                markers: true,
                ..crc.clone()
            },
            size: 4096,
            inject: None,
        },
        Case {
            name: "rev2, markers, CRC off",
            mpa: MpaConfig {
                markers: true,
                ..MpaConfig::default()
            },
            size: 1000,
            inject: None,
        },
        Case {
            name: "rev2, CRC on, Terminate (Write beyond bounds)",
            mpa: crc.clone(),
            size: 100,
            inject: Some(Fault::WriteBeyondBounds),
        },
    ];
    let server_dev = Device::open(DeviceConfig::default()).expect("device");
    let l = server_dev
        .listen(SocketAddr::from(([127, 0, 0, 1], 0)))
        .expect("listen");
    let addr = l.local_addr().expect("bound");
    let capture =
        HostCapture::start(&scratch(), "softrnic", &[addr.port()]).expect("dumpcap starts");
    for c in &cases {
        let o = RpingOpts {
            count: 3,
            size: c.size,
            verify: true,
            timeout: Duration::from_secs(60),
            mpa: c.mpa.clone(),
            inject: c.inject,
            ..RpingOpts::default()
        };
        let server = {
            let (dev, so) = (server_dev.clone(), o.clone());
            let l = &l;
            std::thread::scope(|s| {
                let h = s.spawn(move || rping::serve_one(&dev, l, &so));
                let client = rping::client(addr, &o);
                (h.join().expect("server thread"), client)
            })
        };
        match (c.inject, server) {
            (None, (Ok(3), Ok(3))) => {}
            // The server's Write beyond the client's buffer: the client answers with
            // DDP tagged buffer error / base or bounds violation, which the server
            // receives; the client's own step fails with a local error.
            (
                Some(Fault::WriteBeyondBounds),
                (
                    Err(RpingError::Terminated {
                        cause,
                        remote: true,
                        ..
                    }),
                    Err(client),
                ),
            ) => {
                assert_eq!(
                    cause,
                    TerminateCause::new(
                        Layer::Ddp,
                        ddp_etype::TAGGED_BUFFER,
                        ddp_code::tagged::BASE_BOUNDS
                    ),
                    "{}: the Terminate the server received",
                    c.name
                );
                match client {
                    RpingError::Terminated {
                        cause: sent,
                        remote: false,
                        ..
                    } => assert_eq!(sent, cause, "{}: the client's Terminate", c.name),
                    other => panic!("{}: client {other:?}", c.name),
                }
            }
            (_, other) => panic!("{}: {other:?}", c.name),
        }
    }
    let (pcap, all) = capture.finish_with_path();
    assert_eq!(all.len(), cases.len());
    assert!(
        all.iter()
            .flat_map(|c| c.fpdus())
            .any(|p| p.header.opcode.to_bits() == 7),
        "a Terminate is in the capture"
    );

    // 1. Nothing malformed, no error-level expert info.
    let bad = tshark(
        &[
            "-Y",
            "_ws.malformed || _ws.expert.severity >= \"error\"",
            "-T",
            "fields",
            "-e",
            "frame.number",
            "-e",
            "_ws.expert.message",
        ],
        &pcap,
    );
    assert!(bad.trim().is_empty(), "tshark found errors:\n{bad}");

    // A connection whose capture shows a lost, reordered or repeated segment (the
    // kernel's loopback and dumpcap do that now and then: softrnic's decoder follows
    // sequence numbers, tshark's MPA reassembly then loses the FPDUs around it) is
    // left out of the counts below; the others must match exactly, and most must be
    // there.
    let server_port = addr.port();
    let disturbed: Vec<u16> = values(
        &pcap,
        "tcp.analysis.lost_segment || tcp.analysis.out_of_order || \
         tcp.analysis.retransmission || tcp.analysis.spurious_retransmission",
        "tcp.port",
    )
    .iter()
    .filter_map(|p| p.parse::<u16>().ok())
    .filter(|&p| p != server_port)
    .collect::<std::collections::BTreeSet<_>>()
    .into_iter()
    .collect();
    assert!(
        disturbed.len() <= cases.len() / 3,
        "the capture of {} of {} connections is disturbed (ports {disturbed:?})",
        disturbed.len(),
        cases.len()
    );
    let ours: Vec<_> = all
        .iter()
        .filter(|c| !disturbed.contains(&c.client.port))
        .collect();
    let clean = |filter: &str| -> String {
        disturbed.iter().fold(format!("({filter})"), |f, p| {
            format!("{f} && !(tcp.port == {p})")
        })
    };

    // 2. tshark sees every FPDU and MPA frame we see, with the same opcodes.
    let our_fpdus: usize = ours.iter().map(|c| c.fpdus().count()).sum();
    let their_fpdus = values(&pcap, &clean("iwarp_mpa.fpdu"), "iwarp_mpa.ulpdulength").len();
    assert_eq!(
        their_fpdus, our_fpdus,
        "FPDUs decoded by tshark vs softrnic (disturbed captures left out: {disturbed:?})"
    );
    let their_frames = values(&pcap, "iwarp_mpa.req || iwarp_mpa.rep", "tcp.stream").len();
    assert_eq!(their_frames, 2 * cases.len(), "MPA Requests and Replies");
    let mut their_ops = values(&pcap, &clean("iwarp_rdma"), "iwarp_rdma.opcode")
        .iter()
        .map(|v| u8::from_str_radix(v.trim_start_matches("0x"), 16).expect("opcode"))
        .collect::<Vec<_>>();
    let mut our_ops = ours
        .iter()
        .flat_map(|c| c.fpdus())
        .map(|p| p.header.opcode.to_bits())
        .collect::<Vec<_>>();
    their_ops.sort_unstable();
    our_ops.sort_unstable();
    assert_eq!(their_ops, our_ops, "RDMAP opcodes");

    // 3. Every CRC that tshark checks is good, and it checks all of the CRC connections.
    let with_crc: usize = ours
        .iter()
        .filter(|c| c.crc)
        .map(|c| c.fpdus().count())
        .sum();
    let text = tshark(&["-V", "-Y", &clean("tcp")], &pcap);
    assert_eq!(text.matches("Bad CRC32").count(), 0);
    assert_eq!(
        text.matches("Good CRC32").count(),
        with_crc,
        "CRC32c checked by tshark"
    );

    // 4. Markers were negotiated both ways on the two marked connections, and tshark
    //    read them: an FPDU of 512 octets or more on the wire spans a marker position,
    //    so there are at least as many markers as such FPDUs.
    let marked: Vec<_> = all.iter().filter(|c| c.markers != (false, false)).collect();
    assert_eq!(marked.len(), 2, "connections with markers");
    assert!(
        marked.iter().all(|c| c.markers == (true, true)),
        "both ways"
    );
    let spanning = marked
        .iter()
        .filter(|c| !disturbed.contains(&c.client.port))
        .flat_map(|c| c.fpdus())
        .filter(|f| f.range.len() >= 512)
        .count();
    let their_markers = text.matches("FPDU back pointer").count();
    assert!(spanning > 0, "marked FPDUs of 512 octets or more");
    assert!(
        their_markers >= spanning,
        "tshark read {their_markers} markers in {spanning} long marked FPDUs"
    );
    eprintln!(
        "tshark: {their_fpdus} FPDUs over {} connections, {with_crc} CRCs good, \
         {their_markers} markers, no errors; disturbed captures left out: {disturbed:?}",
        cases.len()
    );
}
