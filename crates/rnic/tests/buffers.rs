//! Data-path buffers are lent, not owned: a QP holds its receive staging buffer and its
//! transmit gather buffer only while octets wait in them (or while a busy-polling
//! consumer holds its socket), so an idle QP holds none (`Qp::buffer_bytes`), whatever
//! it moved before; octets a stalled stream left in a buffer stay there, exact, until
//! the stream moves again.

mod common;

use common::srq::{SLOT, srq_pairs};
use common::*;
use softrnic_rnic::*;
use softrnic_wire::ddp::UNTAGGED_HEADER_LEN;
use std::io::Read;

/// Writes and Sends of every size class (gathered or sent from memory; copied out of
/// staging or read directly), each checked octet for octet; afterwards neither QP holds
/// a buffer.
fn traffic_then_idle(progress: ProgressMode) {
    const SIZES: [usize; 5] = [64, 4096, 16 << 10, 64 << 10, 1 << 20];
    let total: usize = SIZES.iter().sum();
    let (a, b) = end().progress(progress).pair();
    assert_eq!(
        (a.qp.buffer_bytes(), b.qp.buffer_bytes()),
        (0, 0),
        "connected"
    );
    let data = pattern(total, 1);
    let src = a.pd.alloc_mr(total, Access::empty()).unwrap();
    src.write(0, &data).unwrap();
    let written =
        b.pd.alloc_mr(total, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
    let sent = b.pd.alloc_mr(total, Access::LOCAL_WRITE).unwrap();
    let mut at = 0;
    for (i, &len) in SIZES.iter().enumerate() {
        b.qp.post_recv(RecvWr::new(i as u64, sent.sge(at, len)))
            .unwrap();
        let w = SendWr::write(
            100 + i as u64,
            src.sge(at, len),
            written.addr() + at as u64,
            written.rkey(),
        );
        a.qp.post_send(w).unwrap();
        a.qp.post_send(SendWr::send(200 + i as u64, src.sge(at, len)))
            .unwrap();
        at += len;
    }
    // Each Send arrives after the Write before it: once every receive has completed,
    // every octet is in place.
    let got = take(&b.cq, SIZES.len());
    assert!(got.iter().all(|c| c.status == WcStatus::Success), "{got:?}");
    let done = take(&a.cq, 2 * SIZES.len());
    assert!(
        done.iter().all(|c| c.status == WcStatus::Success),
        "{done:?}"
    );
    assert!(written.to_vec() == data, "Writes placed exactly");
    assert!(sent.to_vec() == data, "Sends placed exactly");
    // The QP lock is taken to read the figure, so no drive is half done: every buffer
    // was given back when its octets were gone.
    assert_eq!(a.qp.buffer_bytes(), 0, "sender, idle");
    assert_eq!(b.qp.buffer_bytes(), 0, "receiver, idle");
}

#[test]
fn idle_qps_hold_no_buffer_after_traffic_hybrid() {
    traffic_then_idle(ProgressMode::Hybrid);
}

#[test]
fn idle_qps_hold_no_buffer_after_traffic_engine() {
    traffic_then_idle(ProgressMode::Engine);
}

/// A stream held back by its SRQ (a soft limit, back-pressure) stops inside what one
/// read brought in: the rest stays in the staging buffer, which the QP keeps. When the
/// SRQ lets it go, those octets are delivered exactly, and the buffer goes back.
#[test]
fn octets_left_in_staging_keep_their_buffer_until_taken() {
    let init = SrqInit {
        reserve: 1000,
        qp_limits: QpLimits {
            per_interval: Level::new(2, u32::MAX),
            ..QpLimits::default()
        },
        ..SrqInit::new(64, 1)
    };
    let (srv, cl) = srq_pairs(DeviceConfig::default(), 1, init, 8);
    for i in 0..8 {
        srv.post_slot(i);
    }
    // Four Sends in one batch: gathered into one send(2), read with one read(2).
    let msgs: Vec<Vec<u8>> = (0..4).map(|n| pattern(200 + n, 40 + n as u64)).collect();
    for (n, m) in msgs.iter().enumerate() {
        cl.src.write(n * SLOT, m).unwrap();
    }
    cl.qps[0]
        .post_send_batch(
            msgs.iter()
                .enumerate()
                .map(|(n, m)| SendWr::send(n as u64, cl.src.sge(n * SLOT, m.len()))),
        )
        .unwrap();
    cl.sent(4);
    // Two are taken; the third is held back at its header.
    let first = take(&srv.cq, 2);
    srv.dev
        .wait_event_matching(WAIT, |e| matches!(e, AsyncEvent::SrqSoftLimit { .. }))
        .expect("soft-limit event");
    let u = srv.srq.usage(srv.qps[0].id()).unwrap().unwrap();
    assert!(u.waiting, "held back: {u:?}");
    assert_eq!(
        srv.qps[0].buffer_bytes(),
        RX_STAGING_LEN,
        "the octets after the held header are kept in staging"
    );
    // Enough buffers for everyone: the soft limit is absorbed, the stream goes on.
    srv.srq
        .modify(SrqModify {
            reserve: Some(0),
            ..SrqModify::default()
        })
        .unwrap();
    let rest = take(&srv.cq, 2);
    let got: Vec<Completion> = first.into_iter().chain(rest).collect();
    for (n, c) in got.iter().enumerate() {
        assert_eq!(c.status, WcStatus::Success, "{c:?}");
        assert!(srv.received(c) == msgs[n], "message {n} exact");
    }
    assert_eq!(srv.qps[0].buffer_bytes(), 0, "drained: given back");
    assert_eq!(cl.qps[0].buffer_bytes(), 0);
}

/// A peer that stops reading fills the socket: small Sends keep being gathered up to
/// one buffer (64 KiB) and no further, whatever is posted, even though every send(2)
/// takes only part of what is gathered (at most 1000 octets, by the fault plan) and
/// more is gathered behind it. When the peer reads again, every FPDU arrives in order
/// and exact, and the buffer goes back.
#[test]
fn a_full_socket_keeps_gathered_octets_within_one_buffer() {
    const LEN: usize = 4000;
    const MAX: usize = 4096;
    const BATCH: usize = 32;
    let cfg = DeviceConfig {
        fault: Some(FaultPlan {
            max_write: std::num::NonZeroUsize::new(1000),
            ..FaultPlan::default()
        }),
        ..DeviceConfig::default()
    };
    let e = end().config(cfg).cq(8192).queues(64, 1).build();
    let src = e.pd.alloc_mr(MAX * LEN, Access::empty()).unwrap();
    let mut peer = raw_initiator(&e);
    // Post until Sends stop completing: the gather buffer is full and the socket
    // takes nothing more.
    let mut posted = 0;
    let mut completed = 0;
    let mut stalled = 0;
    while stalled < 64 {
        assert!(
            posted < MAX,
            "{MAX} Sends of {LEN} octets never filled the socket"
        );
        if posted - completed <= BATCH {
            // A batch: each FPDU is gathered behind the part of the last that the
            // socket did not take.
            for n in posted..posted + BATCH {
                src.write(n * LEN, &pattern(LEN, n as u64)).unwrap();
            }
            let wrs =
                (posted..posted + BATCH).map(|n| SendWr::send(n as u64, src.sge(n * LEN, LEN)));
            e.qp.post_send_batch(wrs).unwrap();
            posted += BATCH;
        } else {
            stalled += 1;
        }
        let done = drained(&e.cq);
        assert!(done.iter().all(|c| c.status == WcStatus::Success));
        completed += done.len();
        // The gather buffer (64 KiB at most) and, while these polls hold the socket
        // (a claim keeps it between passes), the receive staging buffer.
        let held = e.qp.buffer_bytes();
        assert!(
            held <= (64 << 10) + RX_STAGING_LEN,
            "gather buffer grew to {held}"
        );
    }
    // The peer reads every FPDU: MPA length, untagged DDP header, payload, pad, CRC.
    for n in 0..posted {
        let mut len = [0u8; 2];
        peer.read_exact(&mut len).unwrap();
        let ulpdu = u16::from_be_bytes(len) as usize;
        let mut rest = vec![0u8; ulpdu + (4 - (2 + ulpdu) % 4) % 4 + 4];
        peer.read_exact(&mut rest).unwrap();
        assert_eq!(ulpdu, UNTAGGED_HEADER_LEN + LEN, "FPDU {n}");
        assert!(
            rest[UNTAGGED_HEADER_LEN..ulpdu] == pattern(LEN, n as u64),
            "Send {n} exact"
        );
        if completed < posted {
            completed += drained(&e.cq).len();
        }
    }
    completed += take(&e.cq, posted - completed).len();
    assert_eq!(completed, posted);
    // The polls above may have claimed the socket, and a claim keeps the QP's buffers
    // between passes; arming the CQ (the consumer goes to sleep) ends it.
    e.cq.req_notify(false);
    assert_eq!(e.qp.buffer_bytes(), 0, "everything sent: given back");
}

/// A busy-polling consumer that has taken its QP's socket over (`handoff`) keeps the
/// QP's buffers between its passes; arming the CQ (the consumer is going to sleep)
/// gives the socket back to the engine and the drained buffers back to the pool.
#[test]
fn a_consumer_that_arms_its_cq_leaves_its_qp_no_buffer() {
    let (a, b) = end().progress(ProgressMode::Hybrid).pair();
    let src = a.pd.alloc_mr(64, Access::empty()).unwrap();
    src.write(0, &pattern(64, 5)).unwrap();
    let dst = b.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    b.qp.post_recv(RecvWr::new(1, dst.sge(0, 64))).unwrap();
    a.qp.post_send(SendWr::send(2, src.sge(0, 64))).unwrap();
    // Polled until the receive completes and well past the empty polls after which a
    // consumer claims the socket.
    let deadline = std::time::Instant::now() + WAIT;
    let mut got = Vec::new();
    let mut polls = 0;
    while got.is_empty() || polls < 1000 {
        assert!(
            std::time::Instant::now() < deadline,
            "no receive completion"
        );
        let mut wc = [Completion::default(); 4];
        let n = b.cq.poll(&mut wc);
        got.extend_from_slice(&wc[..n]);
        polls += 1;
    }
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].wr_id, got[0].status), (1, WcStatus::Success));
    assert_eq!(dst.to_vec(), pattern(64, 5));
    b.cq.req_notify(false);
    assert_eq!(b.qp.buffer_bytes(), 0, "the claim's buffers went back");
}
