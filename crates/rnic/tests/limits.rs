//! Limits that must slow work down, never lose it: more RDMA Reads than ORD allows
//! outstanding (they wait their turn and all complete, in order), and a CQ that
//! overflows (the device reports it, and every completion is still delivered in order).

mod common;

use common::*;
use softrnic_rnic::*;

#[test]
fn more_reads_than_ord_complete_in_order() {
    const READS: usize = 16;
    const SZ: usize = 8192 + 77;
    let mut cfg = DeviceConfig::default();
    cfg.mpa.ird = 2;
    cfg.mpa.ord = 2;
    let (a, b) = end().config(cfg).queues(64, 64).pair();
    assert_eq!((a.qp.params().ord, a.qp.params().ird), (2, 2));
    assert_eq!((b.qp.params().ord, b.qp.params().ird), (2, 2));
    let data = pattern(READS * SZ, 21);
    let source =
        b.pd.alloc_mr(READS * SZ, Access::LOCAL_WRITE | Access::REMOTE_READ)
            .unwrap();
    source.write(0, &data).unwrap();
    let sink = a.pd.alloc_mr(READS * SZ, Access::LOCAL_WRITE).unwrap();
    // Read range i into sink range READS-1-i, so a misplaced response shows.
    a.qp.post_send_batch((0..READS).map(|i| {
        SendWr::read(
            i as u64,
            sink.sge((READS - 1 - i) * SZ, SZ),
            source.addr() + (i * SZ) as u64,
            source.rkey(),
        )
    }))
    .unwrap();
    let got = take(&a.cq, READS);
    assert_eq!(
        got.iter()
            .map(|c| (c.wr_id, c.status, c.opcode, c.byte_len))
            .collect::<Vec<_>>(),
        (0..READS as u64)
            .map(|i| (i, WcStatus::Success, WcOpcode::Read, SZ as u32))
            .collect::<Vec<_>>(),
        "all Reads succeed, in posting order"
    );
    let s = sink.to_vec();
    for i in 0..READS {
        let at = (READS - 1 - i) * SZ;
        assert!(s[at..at + SZ] == data[i * SZ..(i + 1) * SZ], "read {i}");
    }
    // The target never saw more Read Requests than its IRD of 2 (it would have
    // terminated), and nothing failed.
    assert_eq!(a.qp.fatal_cause(), None);
    assert_eq!(b.qp.fatal_cause(), None);
    assert_eq!(a.qp.state(), QpState::Rts);
    assert_eq!(b.qp.state(), QpState::Rts);
    assert_eq!(b.cq.poll_one(), None);
}

#[test]
fn cq_overflow_is_reported_and_loses_nothing() {
    const SENDS: usize = 16;
    const SZ: usize = 3000;
    let a = end().cq(64).queues(64, 64).build();
    // The receive CQ the test will let overflow.
    let b = end().cq(64).recv_cq(4).queues(64, 64).build();
    assert_eq!(b.recv_cq().depth(), 4);
    connect(&a, &b);

    let data = pattern(SENDS * SZ, 31);
    let src = a.pd.alloc_mr(SENDS * SZ, Access::empty()).unwrap();
    src.write(0, &data).unwrap();
    let dst =
        b.pd.alloc_mr(SENDS * SZ, Access::LOCAL_WRITE | Access::REMOTE_READ)
            .unwrap();
    for i in 0..SENDS {
        b.qp.post_recv(RecvWr::new(100 + i as u64, dst.sge(i * SZ, SZ)))
            .unwrap();
    }
    a.qp.post_send_batch((0..SENDS).map(|i| SendWr::send(i as u64, src.sge(i * SZ, SZ))))
        .unwrap();
    // Nobody polls the receive CQ: it overflows, and the device says so.
    let e = event(&b.dev, "CqOverflow", |e| {
        matches!(e, AsyncEvent::CqOverflow { .. })
    });
    assert_eq!(
        e,
        AsyncEvent::CqOverflow {
            cq: b.recv_cq().id()
        }
    );
    // A fenced Read after the Sends: when it completes, the target has processed
    // every Send before it (the stream is in order).
    let back = a.pd.alloc_mr(SZ, Access::LOCAL_WRITE).unwrap();
    let last = dst.addr() + ((SENDS - 1) * SZ) as u64;
    a.qp.post_send(SendWr::read(99, back.sge(0, SZ), last, dst.rkey()).fence())
        .unwrap();
    let sent = take(&a.cq, SENDS + 1);
    assert!(
        sent.iter()
            .map(|c| (c.wr_id, c.status))
            .eq((0..SENDS as u64)
                .chain([99])
                .map(|w| (w, WcStatus::Success)))
    );
    // The pass that sent the Read Response delivered the receive completions before
    // releasing the QP; taking the QP's lock (reading its state) waits for that pass.
    // So all 16 are in the CQ now: 4 in its ring, the rest kept beside it.
    assert_eq!(b.qp.state(), QpState::Rts);
    // Every receive completion is there, in order, none dropped.
    let got = take(b.recv_cq(), SENDS);
    assert_eq!(
        got.iter()
            .map(|c| (c.wr_id, c.status, c.opcode, c.byte_len))
            .collect::<Vec<_>>(),
        (0..SENDS as u64)
            .map(|i| (100 + i, WcStatus::Success, WcOpcode::Recv, SZ as u32))
            .collect::<Vec<_>>()
    );
    assert!(dst.to_vec() == data, "received data");
    assert_eq!(b.recv_cq().poll_one(), None);
    assert_eq!(b.cq.poll_one(), None);
    // The overflow was reported once.
    let later: Vec<AsyncEvent> = std::iter::from_fn(|| b.dev.poll_event()).collect();
    assert_eq!(later, vec![AsyncEvent::Established { qp: b.qp.id() }]);
    assert_eq!(b.qp.fatal_cause(), None);
    // The CQ works normally afterwards.
    b.qp.post_recv(RecvWr::new(500, dst.sge(0, SZ))).unwrap();
    a.qp.post_send(SendWr::send(50, src.sge(0, SZ))).unwrap();
    assert_eq!(take(&a.cq, 1)[0].status, WcStatus::Success);
    let c = take(b.recv_cq(), 1)[0];
    assert_eq!((c.wr_id, c.status), (500, WcStatus::Success));
}
