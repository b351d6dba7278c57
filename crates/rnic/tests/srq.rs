//! Shared receive queues through the verbs, over loopback: many QPs on one SRQ with
//! one shared CQ, every octet checked; the limit event once per arm; the SRQ verbs'
//! refusals (post on a QP that has no RQ, resize below what is posted, destroy while
//! in use).

mod common;

use common::WAIT as T;
use common::srq::{SLOT, events, message, srq_pairs};
use softrnic_rnic::*;

fn cfg() -> DeviceConfig {
    DeviceConfig::default()
}

#[test]
fn sixty_four_qps_share_one_srq_and_one_cq_with_all_data_verified() {
    const QPS: usize = 64;
    const ROUNDS: usize = 6;
    const PER_ROUND: usize = 3;
    let slots = 256;
    let (srv, cl) = srq_pairs(cfg(), QPS, SrqInit::new(slots, 1), slots);
    for i in 0..slots as u64 {
        srv.post_slot(i);
    }
    let len = |i: usize, n: usize| 1 + (i * 131 + n * 977) % (SLOT - 1);
    let mut next = [0usize; QPS];
    for round in 0..ROUNDS {
        for k in 0..PER_ROUND {
            for i in 0..QPS {
                let n = round * PER_ROUND + k;
                cl.send(i, n, len(i, n));
            }
        }
        let got = srv.cq.wait_for(QPS * PER_ROUND, T);
        assert_eq!(got.len(), QPS * PER_ROUND, "round {round}");
        for c in &got {
            assert_eq!(
                (c.status, c.opcode),
                (WcStatus::Success, WcOpcode::Recv),
                "{c:?}"
            );
            // Per QP, receives complete in message order.
            let i = srv.index_of(c.qp);
            let n = next[i];
            next[i] += 1;
            assert_eq!(c.byte_len as usize, len(i, n), "QP {i} message {n}");
            assert!(
                srv.received(c) == message(i, n, len(i, n)),
                "QP {i} message {n}"
            );
            srv.post_slot(c.wr_id);
        }
        cl.sent(QPS * PER_ROUND);
    }
    assert!(next.iter().all(|&n| n == ROUNDS * PER_ROUND), "{next:?}");
    let a = srv.srq.query().unwrap();
    assert_eq!((a.qps, a.posted), (QPS, slots));
    assert_eq!(a.counters.taken, (QPS * ROUNDS * PER_ROUND) as u64);
    assert_eq!(a.counters.empty, 0);
    for qp in &srv.qps {
        assert_eq!(qp.state(), QpState::Rts);
        let u = srv.srq.usage(qp.id()).unwrap().unwrap();
        assert_eq!((u.taken, u.held), ((ROUNDS * PER_ROUND) as u64, 0));
    }
    assert!(
        events(&srv.dev)
            .iter()
            .all(|e| matches!(e, AsyncEvent::Established { .. })),
        "no SRQ or QP event"
    );
}

fn limit_events(dev: &Device) -> usize {
    events(dev)
        .iter()
        .filter(|e| matches!(e, AsyncEvent::SrqLimitReached { .. }))
        .count()
}

#[test]
fn limit_event_fires_exactly_once_per_arm() {
    let init = SrqInit {
        limit: 16,
        ..SrqInit::new(64, 1)
    };
    let (srv, cl) = srq_pairs(cfg(), 1, init, 64);
    for i in 0..64 {
        srv.post_slot(i);
    }
    assert!(srv.srq.query().unwrap().armed);
    let mut n = 0;
    let mut send = |count: usize| {
        for _ in 0..count {
            cl.send(0, n, 8);
            cl.sent(1);
            n += 1;
        }
        let got = srv.cq.wait_for(count, T);
        assert_eq!(got.len(), count);
        assert!(got.iter().all(|c| c.status == WcStatus::Success));
    };
    // 64 -> 14 posted: below 16 once (at 15), one event.
    send(50);
    assert_eq!(limit_events(&srv.dev), 1);
    let a = srv.srq.query().unwrap();
    assert_eq!((a.posted, a.armed, a.limit), (14, false, 16));
    // Disarmed: more takes, no event.
    send(2);
    assert_eq!(limit_events(&srv.dev), 0);
    // Re-armed at 10 with 12 posted: 12 -> 10 nothing, 10 -> 9 fires, then nothing.
    srv.srq
        .modify(SrqModify {
            limit: Some(10),
            ..SrqModify::default()
        })
        .unwrap();
    send(2);
    assert_eq!(limit_events(&srv.dev), 0);
    send(1);
    assert_eq!(limit_events(&srv.dev), 1);
    send(3);
    assert_eq!(limit_events(&srv.dev), 0);
    // Armed above what is posted (6): the next take fires it, once.
    srv.srq
        .modify(SrqModify {
            limit: Some(20),
            ..SrqModify::default()
        })
        .unwrap();
    send(2);
    assert_eq!(limit_events(&srv.dev), 1);
    assert_eq!(srv.srq.query().unwrap().posted, 4);
}

#[test]
fn srq_verbs_refuse_what_libibverbs_refuses() {
    let (srv, cl) = srq_pairs(cfg(), 2, SrqInit::new(8, 2), 8);
    // A QP on an SRQ has no receive queue of its own.
    let e = srv.qps[0]
        .post_recv(RecvWr::new(1, srv.bufs.sge(0, 64)))
        .unwrap_err();
    assert!(
        matches!(e, Error::Post(softrnic_proto::qp::PostError::SharedRq)),
        "{e:?}"
    );
    // A chain stops at the first refused receive; those before it stay posted.
    let good = |i: u64| RecvWr::new(i, srv.bufs.sge(i as usize * SLOT, SLOT));
    let three_sges = RecvWr::new(9, [srv.bufs.sge(0, 1); 3]);
    let foreign = cl.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let err = srv
        .srq
        .post_recv_chain([good(0), good(1), three_sges, good(2)])
        .unwrap_err();
    assert_eq!(err.posted, 2);
    let err = srv
        .srq
        .post_recv_chain([good(2), RecvWr::new(10, foreign.sge(0, 64))])
        .unwrap_err();
    assert_eq!(err.posted, 1);
    assert!(matches!(
        err.error,
        Error::Post(softrnic_proto::qp::PostError::InvalidSge)
    ));
    assert_eq!(srv.srq.query().unwrap().posted, 3);
    // Resize: not below what is posted; down to it and up again is fine; a limit
    // above the size is refused and changes nothing.
    let resize = |n| {
        srv.srq.modify(SrqModify {
            max_wr: Some(n),
            ..SrqModify::default()
        })
    };
    assert!(matches!(resize(2), Err(Error::InvalidArgument(_))));
    resize(3).unwrap();
    assert!(matches!(
        srv.srq.post_recv(good(3)),
        Err(Error::Post(softrnic_proto::qp::PostError::QueueFull))
    ));
    let both = SrqModify {
        max_wr: Some(100),
        limit: Some(101),
        ..SrqModify::default()
    };
    assert!(srv.srq.modify(both).is_err());
    assert_eq!(srv.srq.query().unwrap().max_wr, 3, "all or nothing");
    resize(8).unwrap();
    srv.srq.post_recv(good(3)).unwrap();
    // The SRQ's receives serve either QP.
    cl.send(1, 0, 100);
    cl.send(0, 0, 7);
    cl.sent(2);
    let got = srv.cq.wait_for(2, T);
    assert_eq!(got.len(), 2);
    // Destroy: refused while QPs use it.
    assert!(matches!(srv.srq.destroy(), Err(Error::BadState(_))));
    let qps = srv.qps.len();
    assert_eq!(srv.srq.query().unwrap().qps, qps);
    let common::srq::SrqServer { srq, qps, .. } = srv;
    // A QP in error still uses it until destroyed; the SRQ's receives that no message
    // took stay posted for the others (no flush).
    qps[0].abort().unwrap();
    assert_eq!(qps[0].state(), QpState::Error);
    assert_eq!(srq.query().unwrap().posted, 2);
    assert!(srq.destroy().is_err());
    drop(qps);
    assert_eq!(srq.query().unwrap().qps, 0);
    srq.destroy().unwrap();
    assert!(matches!(srq.post_recv(good(0)), Err(Error::BadState(_))));
}
