//! The reference captures of Linux siw traffic reassemble cleanly.

mod common;

use std::path::{Path, PathBuf};

use common::{SIW_DIR, check_invariants};
use softrnic_capture::{Connection, read_capture};

fn load(name: &str) -> Vec<Connection> {
    let path = Path::new(SIW_DIR).join(name);
    let conns = read_capture(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    check_invariants(&conns);
    conns
}

fn all_captures() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(SIW_DIR)
        .unwrap_or_else(|e| panic!("{SIW_DIR}: {e}"))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "pcap"))
        .collect();
    files.sort();
    files
}

/// (to_server bytes, to_server segments, to_client bytes, to_client segments)
fn sizes(c: &Connection) -> (usize, usize, usize, usize) {
    (
        c.to_server.bytes.len(),
        c.to_server.segments.len(),
        c.to_client.bytes.len(),
        c.to_client.segments.len(),
    )
}

#[test]
fn every_capture_reassembles_without_gaps() {
    let files = all_captures();
    assert!(files.len() >= 13, "expected the siw captures in {SIW_DIR}");
    for path in files {
        let conns = read_capture(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        check_invariants(&conns);
        let name = path.display();
        assert!(
            conns
                .iter()
                .any(|c| !c.to_server.bytes.is_empty() && !c.to_client.bytes.is_empty()),
            "{name}: no connection with payload"
        );
        for c in &conns {
            for d in [&c.to_server, &c.to_client] {
                assert!(
                    d.gaps.is_empty(),
                    "{name}: conn {} has gaps {:?}",
                    c.index,
                    d.gaps
                );
                // Every run closes with FIN in both directions, no RST.
                assert!(d.syn && d.fin && !d.rst, "{name}: conn {} flags", c.index);
            }
            // rdma_cm always lets the active side speak first: MPA Request.
            assert!(c.to_server.bytes.starts_with(b"MPA ID Req Frame"), "{name}");
            assert!(c.to_client.bytes.starts_with(b"MPA ID Rep Frame"), "{name}");
        }
    }
}

#[test]
fn rping() {
    let conns = load("siw-rping.pcap");
    assert_eq!(conns.len(), 1);
    let c = &conns[0];
    assert_eq!(c.server.port, 7174);
    assert_eq!(
        c.client.addr, c.server.addr,
        "both ends are 10.0.2.15 on lo"
    );
    assert_eq!(c.client.addr.to_string(), "10.0.2.15");
    assert_eq!(c.first_frame, 1);
    // Byte and segment counts cross-checked with an independent decoder.
    assert_eq!(sizes(c), (624, 10, 780, 13));
    // The MPA request is the first payload segment, after the 3-way handshake.
    assert_eq!(c.to_server.segments[0].frame, 4);
    assert!(c.to_server.segments[0].timestamp_ns > 1_600_000_000_000_000_000);
}

#[test]
fn ib_write_bw_has_exchange_and_test_connections() {
    let conns = load("siw-ib_write_bw.pcap");
    assert_eq!(conns.len(), 2);
    for c in &conns {
        assert_eq!(c.server.port, 18515);
    }
    assert_ne!(conns[0].client.port, conns[1].client.port);
    assert!(conns[0].first_frame < conns[1].first_frame);
    assert_eq!(sizes(&conns[0]), (868, 17, 868, 17));
    // Test connection: 5 x 4 KiB RDMA Writes client -> server.
    assert_eq!(sizes(&conns[1]), (20804, 28, 24, 1));
}

#[test]
fn ib_read_bw_read_responses_flow_to_the_client() {
    let conns = load("siw-ib_read_bw.pcap");
    assert_eq!(conns.len(), 2);
    assert_eq!(sizes(&conns[1]), (284, 6, 20804, 31));
}

#[test]
fn mpa_reject_captures_have_one_connection() {
    for name in ["siw-mpa-reject-client.pcap", "siw-mpa-reject-server.pcap"] {
        let conns = load(name);
        assert_eq!(conns.len(), 1, "{name}");
        let c = &conns[0];
        assert_eq!(sizes(c), (24, 1, 24, 1), "{name}");
        // Rep with R=1 (reject): byte 16 holds M|C|R|rsvd flags.
        assert_eq!(c.to_client.bytes[16] & 0x20, 0x20, "{name}: R bit");
    }
    assert_eq!(load("siw-mpa-reject-client.pcap")[0].server.port, 17174);
    assert_eq!(load("siw-mpa-reject-server.pcap")[0].server.port, 7174);
}

#[test]
fn rping_kill_long_stream() {
    let conns = load("siw-rping-kill.pcap");
    assert_eq!(conns.len(), 1);
    assert_eq!(sizes(&conns[0]), (89224, 1339, 112376, 1784));
}
