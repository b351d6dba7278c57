//! Statistical provisioning through the verbs: advisory mode tells the program the
//! target depth computed from known per-QP demand (exact values), and managed mode
//! provisions the SRQ itself, growing and giving memory back as demand rises and falls
//! while traffic runs, without losing a message.

mod common;

use common::WAIT as T;
use common::srq::{events, message, srq_pairs};
use softrnic_rnic::*;
use std::sync::mpsc;

#[test]
fn advisory_mode_reports_the_target_from_known_demand() {
    let init = SrqInit {
        provision: ProvisionConfig {
            z: 2.0,
            alpha: 0.5,
            window: 8,
            estimator: Estimator::Empirical,
            min_depth: 1,
            auto_soft_z: None,
            soft_floor: 1,
        },
        ..SrqInit::new(64, 1)
    };
    let (srv, cl) = srq_pairs(DeviceConfig::default(), 2, init, 8);
    for i in 0..8 {
        srv.post_slot(i);
    }
    let mut sent = [0usize; 2];
    let mut targets = Vec::new();
    // QP 0 sends 2, 4, 6 messages in three intervals; QP 1 sends 1, 1, 4.
    for (a, b) in [(2, 1), (4, 1), (6, 4)] {
        for (i, k) in [(0, a), (1, b)] {
            for _ in 0..k {
                cl.send(i, sent[i], 32);
                cl.sent(1);
                sent[i] += 1;
                let c = common::one(&srv.cq);
                assert_eq!(c.status, WcStatus::Success);
                srv.post_slot(c.wr_id);
            }
        }
        targets.push(srv.srq.end_interval().unwrap());
    }
    // Means 4 and 2, variances 4 and 3: 4 + 2 + 2 * sqrt(7) = 11.29 -> 12.
    assert_eq!(targets[2], 12);
    let u0 = srv.srq.usage(srv.qps[0].id()).unwrap().unwrap();
    let u1 = srv.srq.usage(srv.qps[1].id()).unwrap().unwrap();
    assert_eq!((u0.mean, u0.variance, u0.taken), (4.0, 4.0, 12));
    assert_eq!((u1.mean, u1.variance, u1.taken), (2.0, 3.0, 6));
    assert_eq!((u0.ewma_mean, u0.ewma_variance), (4.5, 2.75));
    let a = srv.srq.query().unwrap();
    assert_eq!((a.target, a.posted), (12, 8));
    let below: Vec<_> = events(&srv.dev)
        .into_iter()
        .filter_map(|e| match e {
            AsyncEvent::SrqBelowTarget { target, posted, .. } => Some((target, posted)),
            _ => None,
        })
        .collect();
    // Targets after each interval: 2 + 1 = 3 (no variance from one sample), then
    // means 3 and 1, variances 2 and 0: 4 + 2 * sqrt(2) = 6.83 -> 7, then 12. Posted
    // stays 8, so only the last interval advises.
    assert_eq!(targets, vec![3, 7, 12]);
    assert_eq!(below, vec![(12, 8)]);
}

#[test]
fn managed_mode_grows_and_gives_memory_back_without_losing_a_message() {
    const QPS: usize = 8;
    const WINDOW: usize = 16;
    let init = SrqInit {
        provision: ProvisionConfig {
            z: 2.0,
            alpha: 0.5,
            min_depth: WINDOW,
            ..ProvisionConfig::default()
        },
        managed: Some(ManagedInit {
            buf_size: 1024,
            per_chunk: 8,
            initial: WINDOW,
            min_posted: WINDOW,
            max_buffers: 4096,
        }),
        ..SrqInit::new(WINDOW, 1)
    };
    let (srv, cl) = srq_pairs(DeviceConfig::default(), QPS, init, 1);
    assert!(matches!(
        srv.srq.post_recv(RecvWr::new(0, [])),
        Err(Error::BadState(_))
    ));
    let start = srv.srq.query().unwrap();
    assert_eq!(start.posted, WINDOW);
    // Demand per interval: high, low, high, low (messages over all QPs).
    let phases: Vec<usize> = [64, 4, 64, 4]
        .iter()
        .flat_map(|&per| std::iter::repeat_n(per, 6))
        .collect();
    let total: usize = phases.iter().sum();
    let len = |m: usize| 1 + (m * 37) % 1024;
    let (credit_tx, credit_rx) = mpsc::channel::<()>();
    for _ in 0..WINDOW {
        credit_tx.send(()).unwrap();
    }
    let mut bytes = Vec::new();
    std::thread::scope(|s| {
        // The client: message m goes on QP m mod 8, at most WINDOW unreceived.
        let cl = &cl;
        s.spawn(move || {
            for m in 0..total {
                credit_rx.recv_timeout(T).expect("a credit");
                cl.send(m % QPS, m / QPS, len(m));
                cl.sent(1);
            }
        });
        let mut next = [0usize; QPS];
        let mut m = 0;
        for per in &phases {
            for _ in 0..*per {
                let c = common::one(&srv.cq);
                assert_eq!(c.status, WcStatus::Success, "message {m}: {c:?}");
                let i = srv.index_of(c.qp);
                let n = next[i];
                next[i] += 1;
                let got = srv.srq.take_message(&c).unwrap();
                assert!(got == message(i, n, len(n * QPS + i)), "QP {i} #{n}");
                m += 1;
                let _ = credit_tx.send(());
            }
            srv.srq.end_interval().unwrap();
            bytes.push(srv.srq.query().unwrap().managed_bytes);
        }
        assert_eq!(m, total);
    });
    let a = srv.srq.query().unwrap();
    assert_eq!(a.counters.empty, 0, "no message found the SRQ empty");
    assert_eq!(a.counters.taken as usize, total);
    assert!(
        !events(&srv.dev)
            .iter()
            .any(|e| matches!(e, AsyncEvent::QpFatal { .. })),
        "no Terminate"
    );
    assert!(srv.qps.iter().all(|q| q.state() == QpState::Rts));
    // The pool grew in the high phases and gave at least half of it back in the low
    // ones (whole chunks whose buffers were all idle).
    let max = |r: std::ops::Range<usize>| bytes[r].iter().copied().max().unwrap();
    let min = |r: std::ops::Range<usize>| bytes[r].iter().copied().min().unwrap();
    assert!(2 * min(6..12) <= max(0..6), "{bytes:?}");
    assert!(max(12..18) > min(6..12), "grew again: {bytes:?}");
    assert!(2 * min(18..24) <= max(12..18), "{bytes:?}");
    assert_eq!(
        a.managed_peak_bytes,
        *bytes.iter().max().unwrap().max(&a.managed_peak_bytes)
    );
    // A completion given back twice, or not from this SRQ, is refused.
    let fake = Completion {
        wr_id: 7 << 32,
        status: WcStatus::Success,
        opcode: WcOpcode::Recv,
        byte_len: 1,
        qp: srv.qps[0].id(),
        solicited: false,
        invalidated: None,
    };
    assert!(matches!(
        srv.srq.take_message(&fake),
        Err(Error::InvalidArgument(_))
    ));
}

/// Only a buffer that carried a message to the program may be given back, and once: a
/// completion naming a buffer still posted in the SRQ (the pool's first buffer, before
/// any message) is refused, and so is a real completion given back a second time after
/// its buffer was posted again. Accepting either would free a buffer the SRQ still
/// holds, and the next message into it would overwrite one the pool handed out again.
#[test]
fn a_managed_srq_takes_back_only_buffers_that_carried_a_message() {
    let init = SrqInit {
        managed: Some(ManagedInit {
            buf_size: 256,
            per_chunk: 4,
            initial: 4,
            min_posted: 4,
            max_buffers: 64,
        }),
        ..SrqInit::new(8, 1)
    };
    let (srv, cl) = srq_pairs(DeviceConfig::default(), 1, init, 1);
    let fake = |wr_id| Completion {
        wr_id,
        status: WcStatus::Success,
        opcode: WcOpcode::Recv,
        byte_len: 1,
        qp: srv.qps[0].id(),
        solicited: false,
        invalidated: None,
    };
    // Chunk 0, slot 0: posted at creation, no message in it.
    assert!(matches!(
        srv.srq.take_message(&fake(0)),
        Err(Error::InvalidArgument(_))
    ));
    cl.send(0, 0, 32);
    cl.sent(1);
    let c = common::one(&srv.cq);
    assert_eq!(c.status, WcStatus::Success);
    assert_eq!(srv.srq.take_message(&c).unwrap(), message(0, 0, 32));
    // The buffer went straight back into the SRQ (below its target): not the
    // program's any more.
    assert_eq!(srv.srq.query().unwrap().posted, 4);
    assert!(matches!(
        srv.srq.take_message(&c),
        Err(Error::InvalidArgument(_))
    ));
    // Messages still arrive whole after the refusals.
    for n in 1..6 {
        cl.send(0, n, 40 + n);
        cl.sent(1);
        let c = common::one(&srv.cq);
        assert_eq!(c.status, WcStatus::Success);
        assert_eq!(srv.srq.take_message(&c).unwrap(), message(0, n, 40 + n));
    }
}
