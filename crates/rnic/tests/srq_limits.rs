//! Per-QP limits on a shared receive queue, through the verbs over loopback: a QP over
//! its soft limit while the SRQ is short is held back (its socket unread) while the
//! others carry on, and resumes when the interval ends; a QP over its hard limit is
//! terminated with DDP "no buffer", seen exactly at its peer, and only it.

mod common;

use common::WAIT as T;
use common::srq::{events, message, srq_pairs};
use softrnic_rnic::*;
use softrnic_wire::terminate::{Layer, ddp_code, ddp_etype};

fn per_interval(soft: u32, hard: u32) -> QpLimits {
    QpLimits {
        per_interval: Level::new(soft, hard),
        ..QpLimits::default()
    }
}

fn soft_event(dev: &Device, qp: QpId) -> Analysis {
    let e = dev.wait_event_matching(
        T,
        |e| matches!(e, AsyncEvent::SrqSoftLimit { analysis, .. } if analysis.qp == qp),
    );
    match e {
        Some(AsyncEvent::SrqSoftLimit { analysis, .. }) => analysis,
        e => panic!("no soft-limit event for {qp:?}: {e:?}"),
    }
}

#[test]
fn soft_limit_back_pressure_stalls_the_hog_only_and_it_resumes() {
    // Soft limit 2 per interval; a reserve beyond the SRQ's size makes the pool short
    // whatever is posted, so every crossing is answered with back-pressure.
    let init = SrqInit {
        reserve: 1000,
        qp_limits: per_interval(2, u32::MAX),
        ..SrqInit::new(64, 1)
    };
    let (srv, cl) = srq_pairs(DeviceConfig::default(), 4, init, 64);
    for i in 0..64 {
        srv.post_slot(i);
    }
    let hog = srv.qps[0].id();
    let len = |i: usize, n: usize| 100 + 10 * i + n;
    for n in 0..6 {
        cl.send(0, n, len(0, n));
        if n % 4 == 3 {
            cl.sent(4);
        }
    }
    cl.sent(2);
    // Messages received per connection; each checked octet for octet, in order.
    let mut next = [0usize; 4];
    let mut check = |got: Vec<Completion>| {
        for c in got {
            assert_eq!(c.status, WcStatus::Success, "{c:?}");
            let i = srv.index_of(c.qp);
            let n = next[i];
            next[i] += 1;
            assert!(srv.received(&c) == message(i, n, len(i, n)), "QP {i} #{n}");
        }
    };
    for interval in 0..3 {
        if interval < 2 {
            // Held back at its third message of the interval.
            let a = soft_event(&srv.dev, hog);
            assert_eq!(
                (a.verdict, a.count, a.limit),
                (Verdict::BackPressure, 3, LimitKind::PerInterval)
            );
            assert_eq!(
                a.sustained,
                interval == 1,
                "over its limit the interval before"
            );
        }
        let got = srv.cq.wait_for(2, T);
        assert_eq!(got.len(), 2);
        assert!(got.iter().all(|c| c.qp == hog), "{got:?}");
        check(got);
        let u = srv.srq.usage(hog).unwrap().unwrap();
        assert_eq!(u.this_interval, 2);
        assert_eq!(u.waiting, interval < 2, "interval {interval}");
        if interval == 0 {
            // While the hog waits, the others are served.
            for i in 1..4 {
                cl.send(i, 0, len(i, 0));
                cl.send(i, 1, len(i, 1));
            }
            cl.sent(6);
            let got = srv.cq.wait_for(6, T);
            assert_eq!(got.len(), 6);
            assert!(got.iter().all(|c| c.qp != hog), "{got:?}");
            check(got);
            let u = srv.srq.usage(hog).unwrap().unwrap();
            assert!(u.waiting && u.taken == 2, "still held back: {u:?}");
            assert_eq!(srv.srq.query().unwrap().waiting, 1);
        }
        srv.srq.end_interval().unwrap();
    }
    assert_eq!(next, [6, 2, 2, 2]);
    let a = srv.srq.query().unwrap();
    assert_eq!(
        (a.counters.taken, a.counters.refused, a.counters.empty),
        (12, 0, 0)
    );
    assert!(a.stall > std::time::Duration::ZERO);
    assert!(srv.qps.iter().all(|q| q.state() == QpState::Rts));
    assert!(cl.qps.iter().all(|q| q.state() == QpState::Rts));
}

#[test]
fn hard_limit_terminates_only_the_offender_with_ddp_no_buffer_at_its_peer() {
    let init = SrqInit {
        qp_limits: per_interval(u32::MAX, 3),
        ..SrqInit::new(64, 1)
    };
    let (srv, cl) = srq_pairs(DeviceConfig::default(), 3, init, 64);
    for i in 0..64 {
        srv.post_slot(i);
    }
    let no_buffer = TerminateCause::new(
        Layer::Ddp,
        ddp_etype::UNTAGGED_BUFFER,
        ddp_code::untagged::NO_BUFFER,
    );
    let offender = srv.qps[0].id();
    for n in 0..4 {
        cl.send(0, n, 64);
    }
    // Its peer receives the Terminate: DDP, untagged buffer error, no buffer.
    let e = cl
        .dev
        .wait_event_matching(T, |e| matches!(e, AsyncEvent::QpFatal { .. }));
    assert_eq!(
        e,
        Some(AsyncEvent::QpFatal {
            qp: cl.qps[0].id(),
            cause: no_buffer,
            remote: true
        })
    );
    assert_eq!(cl.qps[0].fatal_cause(), Some((no_buffer, true)));
    let e = srv
        .dev
        .wait_event_matching(T, |e| matches!(e, AsyncEvent::SrqHardLimit { .. }));
    let Some(AsyncEvent::SrqHardLimit { analysis: a, .. }) = e else {
        panic!("{e:?}")
    };
    assert_eq!((a.qp, a.count, a.verdict), (offender, 4, Verdict::Drop));
    assert_eq!(srv.qps[0].fatal_cause(), Some((no_buffer, false)));
    // Its three messages within the limit were received; the fourth took nothing.
    let got = srv.cq.wait_for(3, T);
    assert_eq!(got.len(), 3);
    for (n, c) in got.iter().enumerate() {
        assert_eq!((c.qp, c.status), (offender, WcStatus::Success));
        assert!(srv.received(c) == message(0, n, 64));
    }
    assert_eq!(srv.srq.query().unwrap().posted, 61);
    let _ = cl.cq.wait_for(4, T);
    // The others carry on, untouched.
    for i in 1..3 {
        for n in 0..3 {
            cl.send(i, n, 200 + n);
        }
    }
    cl.sent(6);
    let got = srv.cq.wait_for(6, T);
    assert_eq!(got.len(), 6);
    for c in &got {
        assert_eq!(c.status, WcStatus::Success, "{c:?}");
        assert_ne!(c.qp, offender);
    }
    for i in 1..3 {
        assert_eq!(srv.qps[i].state(), QpState::Rts);
        assert_eq!(cl.qps[i].state(), QpState::Rts);
    }
    assert!(
        !events(&cl.dev)
            .iter()
            .any(|e| matches!(e, AsyncEvent::QpFatal { .. })),
        "one Terminate only"
    );
    assert_eq!(srv.srq.query().unwrap().counters.refused, 1);
}
