//! Recording connections into pcap files (`DeviceConfig::pcap`): both ends of one
//! connection record it, each into its own file, and the two recordings, read back with
//! softrnic-capture, hold the same complete TCP connection: handshake, MPA Request and
//! Reply, every FPDU, and the close.

mod common;

use common::*;
use softrnic_capture::{Connection, read_capture};
use softrnic_rnic::*;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};

fn scratch(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("pcap");
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// The one connection recorded in `path`.
fn only_connection(path: &Path) -> Connection {
    let mut conns = read_capture(path).unwrap();
    assert_eq!(conns.len(), 1, "{path:?}: connections");
    conns.remove(0)
}

/// Where `needle` first occurs in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// A Send, a Write and a Read between two recording devices (`fault` on both), then a
/// graceful close; checks the two recordings.
fn record_both_ends(name: &str, fault: Option<FaultPlan>) {
    let (pa, pb) = (
        scratch(&format!("{name}-a.pcap")),
        scratch(&format!("{name}-b.pcap")),
    );
    let cfg = |p: &Path| DeviceConfig {
        pcap: Some(p.to_path_buf()),
        fault: fault.clone(),
        ..DeviceConfig::default()
    };
    let (sent, written, read_back) = (pattern(4096, 7), pattern(200_000, 8), pattern(100_000, 9));
    {
        let a = end().config(cfg(&pa)).cq(64).queues(16, 16).build();
        let b = end().config(cfg(&pb)).cq(64).queues(16, 16).build();
        connect(&a, &b);
        let src = a.pd.alloc_mr(300_000, Access::empty()).unwrap();
        src.write(0, &sent).unwrap();
        src.write(4096, &written).unwrap();
        let sink = a.pd.alloc_mr(100_000, Access::LOCAL_WRITE).unwrap();
        let inbox = b.pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
        let target =
            b.pd.alloc_mr(
                300_000,
                Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
            )
            .unwrap();
        target.write(200_000, &read_back).unwrap();
        b.qp.post_recv(RecvWr::new(100, inbox.sge(0, 4096)))
            .unwrap();
        a.qp.post_send_batch([
            SendWr::send(1, src.sge(0, 4096)),
            SendWr::write(2, src.sge(4096, 200_000), target.addr(), target.rkey()),
            SendWr::read(
                3,
                sink.sge(0, 100_000),
                target.addr() + 200_000,
                target.rkey(),
            ),
        ])
        .unwrap();
        let ga = take(&a.cq, 3);
        assert!(ga.iter().all(|c| c.status == WcStatus::Success), "{ga:?}");
        let gb = take(&b.cq, 1);
        assert_eq!((gb[0].wr_id, gb[0].status), (100, WcStatus::Success));
        assert!(sink.to_vec() == read_back);
        a.qp.disconnect().unwrap();
        disconnected(&a.dev, &a.qp);
        disconnected(&b.dev, &b.qp);
    }
    let (ca, cb) = (only_connection(&pa), only_connection(&pb));
    // The same connection, seen from both ends: same endpoints, same octets.
    assert_eq!((ca.client, ca.server), (cb.client, cb.server));
    assert_eq!(ca.to_server.bytes, cb.to_server.bytes, "client -> server");
    assert_eq!(ca.to_client.bytes, cb.to_client.bytes, "server -> client");
    for (c, file) in [(&ca, &pa), (&cb, &pb)] {
        for (d, what) in [(&c.to_server, "to server"), (&c.to_client, "to client")] {
            assert!(d.gaps.is_empty(), "{file:?} {what}: gaps {:?}", d.gaps);
            assert!(d.syn && d.fin && !d.rst, "{file:?} {what}: syn/fin/rst");
        }
    }
    // The MPA exchange opens each direction; the data is in the FPDUs.
    let up = &ca.to_server.bytes;
    let down = &ca.to_client.bytes;
    assert_eq!(&up[..16], b"MPA ID Req Frame");
    assert_eq!(&down[..16], b"MPA ID Rep Frame");
    assert!(find(up, &sent).is_some(), "the Send's payload");
    assert!(
        find(up, &written[..60_000]).is_some(),
        "the Write's first FPDU"
    );
    assert!(
        find(down, &read_back[..60_000]).is_some(),
        "the Read Response's first FPDU"
    );
}

#[test]
fn both_ends_record_the_same_connection() {
    record_both_ends("plain", None);
}

#[test]
fn recordings_show_what_crossed_the_socket_under_short_reads_and_writes() {
    record_both_ends(
        "short",
        Some(FaultPlan {
            max_read: NonZeroUsize::new(5),
            max_write: NonZeroUsize::new(7),
            ..FaultPlan::default()
        }),
    );
}

#[test]
fn a_pcap_path_that_cannot_be_created_is_an_error() {
    let e = Device::open(DeviceConfig {
        pcap: Some(scratch("no-such-dir").join("x.pcap")),
        ..DeviceConfig::default()
    })
    .unwrap_err();
    assert!(
        matches!(e, Error::Io(ref io) if io.kind() == std::io::ErrorKind::NotFound),
        "{e:?}"
    );
}
