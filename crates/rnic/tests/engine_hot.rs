//! An engine keeps driving a QP that streams large FPDUs without asking epoll between
//! passes (`engine::HOT_DRIVES`), and still serves its other QPs while it does: here one
//! engine thread alone reads a passive device's two connections, one a stream of 1 MiB
//! Writes that runs until the other has taken its Sends one by one. The engine spins
//! for longer than the test waits, so the streaming QP stays the one it drives again;
//! an engine that kept to it would leave the Sends unread until `WAIT` ran out. Every
//! octet is checked where it landed: each Send's, and a last Write's, read after a Send
//! behind it on the same QP has arrived.

mod common;

use common::*;
use softrnic_rnic::*;
use std::sync::atomic::{AtomicBool, Ordering};

const WRITE_LEN: usize = 1 << 20;
/// Writes in flight on the streaming QP.
const IN_FLIGHT: usize = 4;
const SENDS: usize = 24;
const SEND_LEN: usize = 200;

/// A second QP on `e`'s device and PD, with a CQ of its own.
fn second_qp(e: &End) -> (Cq, Qp) {
    let cq = e.dev.create_cq(256).unwrap();
    let qp = e
        .dev
        .create_qp(&e.pd, QpInit::with_cqs(&cq, &cq, 64, 64))
        .unwrap();
    (cq, qp)
}

/// Clears its flag when dropped, on a panic too, so a failed wait ends the stream and
/// the test fails instead of waiting for the streaming thread forever.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

#[test]
fn an_engine_driving_a_streaming_qp_still_reads_its_other_qps() {
    // One engine for both connections, which spins (and so keeps driving the streaming
    // QP) for longer than any wait here: whether the Sends are read then depends on the
    // engine turning back to its epoll set between drives, not on a pause in the stream.
    let passive = DeviceConfig {
        engine_threads: 1,
        progress: ProgressMode::Engine,
        engine_spin: 2 * WAIT,
        ..DeviceConfig::default()
    };
    let b = end().config(passive).build();
    let a = end().build();
    connect(&a, &b);
    let (a_cq2, a_qp2) = second_qp(&a);
    let (b_cq2, b_qp2) = second_qp(&b);
    connect_qps((&a.dev, &a_qp2), (&b.dev, &b_qp2));

    let src = a.pd.alloc_mr(WRITE_LEN, Access::LOCAL_WRITE).unwrap();
    let sink =
        b.pd.alloc_mr(WRITE_LEN, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
    let sends =
        a.pd.alloc_mr(SENDS * SEND_LEN, Access::LOCAL_WRITE)
            .unwrap();
    let inbox =
        b.pd.alloc_mr(SENDS * SEND_LEN, Access::LOCAL_WRITE)
            .unwrap();
    let send_data = pattern(SENDS * SEND_LEN, 7);
    sends.write(0, &send_data).unwrap();
    for i in 0..SENDS {
        b_qp2
            .post_recv(RecvWr {
                wr_id: i as u64,
                sgl: [inbox.sge(i * SEND_LEN, SEND_LEN)].into(),
            })
            .unwrap();
    }
    let streaming = AtomicBool::new(true);
    let (flowing, stream_flows) = std::sync::mpsc::channel();

    std::thread::scope(|s| {
        // The stream: 1 MiB Writes, IN_FLIGHT at a time, until the Sends are through.
        let writer = s.spawn(|| {
            let write =
                |id: u64| SendWr::write(id, src.sge(0, WRITE_LEN), sink.addr(), sink.rkey());
            for id in 0..IN_FLIGHT as u64 {
                a.qp.post_send(write(id)).unwrap();
            }
            let mut next = IN_FLIGHT as u64;
            while streaming.load(Ordering::Acquire) {
                let c = one(&a.cq);
                assert_eq!((c.status, c.opcode), (WcStatus::Success, WcOpcode::Write));
                a.qp.post_send(write(next)).unwrap();
                if next == IN_FLIGHT as u64 {
                    flowing.send(()).unwrap();
                }
                next += 1;
            }
            for c in take(&a.cq, IN_FLIGHT) {
                assert_eq!((c.status, c.opcode), (WcStatus::Success, WcOpcode::Write));
            }
            next
        });
        // The stream flows: its first Write has completed and the next is posted.
        stream_flows.recv().unwrap();
        // The stream ends when the Sends are through, or when a wait for one fails.
        let _stop = StopOnDrop(&streaming);
        // The Sends, one at a time, each only after the last one's arrival, all
        // while the stream runs.
        for i in 0..SENDS {
            a_qp2
                .post_send(SendWr::send(
                    100 + i as u64,
                    sends.sge(i * SEND_LEN, SEND_LEN),
                ))
                .unwrap();
            let got = one(&b_cq2);
            assert_eq!(
                (got.wr_id, got.status, got.opcode, got.byte_len),
                (i as u64, WcStatus::Success, WcOpcode::Recv, SEND_LEN as u32),
                "Send {i} while the other QP streams"
            );
            let sent = one(&a_cq2);
            assert_eq!(
                (sent.wr_id, sent.status),
                (100 + i as u64, WcStatus::Success)
            );
        }
        drop(_stop);
        let writes = writer.join().unwrap();
        assert!(writes > IN_FLIGHT as u64, "the stream ran: {writes} Writes");
    });
    let mut got = vec![0u8; SENDS * SEND_LEN];
    inbox.read(0, &mut got).unwrap();
    assert_eq!(
        got, send_data,
        "every Send's octets, each in its own buffer"
    );

    // A last Write with its own octets, then a Send behind it on the same QP: once the
    // Send has arrived, the Write before it is placed.
    let last = pattern(WRITE_LEN, 99);
    src.write(0, &last).unwrap();
    let note = b.pd.alloc_mr(8, Access::LOCAL_WRITE).unwrap();
    b.qp.post_recv(RecvWr {
        wr_id: 500,
        sgl: [note.sge(0, 8)].into(),
    })
    .unwrap();
    a.qp.post_send(SendWr::write(
        501,
        src.sge(0, WRITE_LEN),
        sink.addr(),
        sink.rkey(),
    ))
    .unwrap();
    a.qp.post_send(SendWr::send(502, [])).unwrap();
    let c = one(b.recv_cq());
    assert_eq!((c.wr_id, c.status, c.byte_len), (500, WcStatus::Success, 0));
    exactly_once(&take(&a.cq, 2), [501, 502]);
    let mut placed = vec![0u8; WRITE_LEN];
    sink.read(0, &mut placed).unwrap();
    assert!(
        placed == last,
        "the last Write's octets, where it wrote them"
    );
}
