//! Completion notification with the verbs rules, seen through a completion channel:
//! one event per arm, solicited-only arming (a Send with the Solicited Event bit, or a
//! completion in error, wakes it; nothing else does), a file descriptor that epoll
//! sees readable exactly while events are queued, events acknowledged in batches, and
//! the arm/poll race, which must never lose a wake-up.
//!
//! Negative checks ("no event was raised") are exact, not timed: completions are added
//! to a CQ, and their events raised, while the QP's lock is held, so once a completion
//! has been polled, taking that QP's lock (`Qp::state`) waits for anything its push
//! raised.

mod common;

use common::*;
use softrnic_rnic::*;
use std::time::Duration;

/// A pair whose passive side `b` has its CQ bound to handler 0, a channel.
fn pair_on_channel(cfg: DeviceConfig) -> (End, End, CompChannel) {
    let (a, b) = end().config(cfg).queues(256, 256).pair();
    let ch = CompChannel::new().unwrap();
    b.dev.set_handler(0, Handler::channel(&ch)).unwrap();
    b.dev.modify_cq(&b.cq, Some(0)).unwrap();
    assert_eq!(b.cq.handler(), Some(0));
    (a, b, ch)
}

fn recvs(e: &End, n: usize, len: usize) -> Mr {
    let m = e.pd.alloc_mr(len * n, Access::LOCAL_WRITE).unwrap();
    for i in 0..n {
        e.qp.post_recv(RecvWr::new(i as u64, m.sge(i * len, len)))
            .unwrap();
    }
    m
}

fn send_se(wr_id: u64, src: &Mr, solicited: bool) -> SendWr {
    let wr = SendWr::send(wr_id, src.sge(0, 8));
    if solicited { wr.solicited() } else { wr }
}

fn blank() -> Completion {
    Completion {
        wr_id: 0,
        status: WcStatus::GeneralError,
        opcode: WcOpcode::Recv,
        byte_len: 0,
        qp: QpId(0),
        solicited: false,
        invalidated: None,
    }
}

/// Polls `cq` (never arming it) until one completion is there.
fn poll_one_spin(cq: &Cq) -> Completion {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        if let Some(c) = cq.poll_one() {
            return c;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no completion in {WAIT:?}"
        );
        std::thread::yield_now();
    }
}

/// Sends one message from `a` and returns `b`'s receive completion, then waits (by
/// taking the QP lock) until anything its push raised has been raised.
fn deliver_one(a: &End, b: &End, src: &Mr, wr_id: u64, solicited: bool) -> Completion {
    a.qp.post_send(send_se(wr_id, src, solicited)).unwrap();
    let c = poll_one_spin(&b.cq);
    let _ = b.qp.state();
    assert_eq!(poll_one_spin(&a.cq).wr_id, wr_id);
    c
}

#[test]
fn solicited_only_ignores_unsolicited_and_wakes_on_solicited() {
    let (a, b, ch) = pair_on_channel(DeviceConfig::default());
    let _bufs = recvs(&b, 8, 8);
    let src = a.pd.alloc_mr(8, Access::empty()).unwrap();
    b.cq.req_notify(true);
    assert_eq!(b.cq.armed(), Armed::Solicited);
    for i in 0..3 {
        let c = deliver_one(&a, &b, &src, 10 + i, false);
        assert_eq!((c.wr_id, c.solicited), (i, false));
        assert!(
            ch.try_get_event().unwrap().is_none(),
            "unsolicited #{i} woke it"
        );
        assert_eq!(b.cq.armed(), Armed::Solicited);
    }
    assert_eq!(b.cq.event_counts().raised, 0);

    let c = deliver_one(&a, &b, &src, 13, true);
    assert_eq!((c.wr_id, c.solicited), (3, true));
    let ev = ch
        .try_get_event()
        .unwrap()
        .expect("the solicited Send raised an event");
    assert!(ev.cq().same_as(&b.cq));
    assert_eq!(b.cq.armed(), Armed::No);
    // One event per arm: another solicited Send without a new arm raises nothing.
    let c = deliver_one(&a, &b, &src, 14, true);
    assert!(c.solicited);
    assert!(ch.try_get_event().unwrap().is_none());
    assert_eq!(
        b.cq.event_counts(),
        EventCounts {
            raised: 1,
            delivered: 1,
            acked: 0
        }
    );
    b.cq.ack_events(1).unwrap();
}

#[test]
fn an_arm_for_the_next_completion_raises_exactly_one_event() {
    let (a, b, ch) = pair_on_channel(DeviceConfig::default());
    let _bufs = recvs(&b, 8, 8);
    let src = a.pd.alloc_mr(8, Access::empty()).unwrap();
    // Not armed: nothing.
    deliver_one(&a, &b, &src, 1, true);
    assert!(ch.try_get_event().unwrap().is_none());
    b.cq.req_notify(false);
    for i in 2..5 {
        deliver_one(&a, &b, &src, i, false);
    }
    assert_eq!(ch.pending(), 1);
    let ev = ch.try_get_event().unwrap().unwrap();
    assert!(ev.cq().same_as(&b.cq));
    assert!(ch.try_get_event().unwrap().is_none());
    // Arming for solicited ones while armed for the next changes nothing.
    b.cq.req_notify(false);
    b.cq.req_notify(true);
    assert_eq!(b.cq.armed(), Armed::Next);
    deliver_one(&a, &b, &src, 5, false);
    assert!(ch.try_get_event().unwrap().is_some());
    assert_eq!(b.cq.event_counts().raised, 2);
}

#[test]
fn a_completion_in_error_wakes_a_solicited_arm() {
    let (_a, b, ch) = pair_on_channel(DeviceConfig::default());
    let _bufs = recvs(&b, 3, 8);
    b.cq.req_notify(true);
    // The posted receives flush (in error) when the QP is reset.
    b.qp.abort().unwrap();
    let ev = ch
        .get_event(Some(WAIT))
        .unwrap()
        .expect("a flush wakes a solicited arm");
    assert!(ev.cq().same_as(&b.cq));
    let got = b.cq.wait_for(3, WAIT);
    assert_eq!(got.len(), 3);
    assert!(
        got.iter().all(|c| c.status == WcStatus::WrFlushError),
        "{got:?}"
    );
    let _ = b.qp.state();
    assert!(ch.try_get_event().unwrap().is_none(), "one event for three");
}

#[test]
fn the_channel_fd_is_readable_while_events_are_queued() {
    use mio::unix::SourceFd;
    use mio::{Events, Interest, Poll, Token};
    use std::os::fd::AsRawFd;

    let (a, b, ch) = pair_on_channel(DeviceConfig::default());
    // A second CQ on the same handler, with its own QP pair.
    let cq2 = b.dev.create_cq_on(64, 0).unwrap();
    let qb2 = b.dev.create_qp(&b.pd, QpInit::new(&cq2, 8, 8)).unwrap();
    let qa2 = a.dev.create_qp(&a.pd, QpInit::new(&a.cq, 8, 8)).unwrap();
    connect_qps((&a.dev, &qa2), (&b.dev, &qb2));
    let _bufs = recvs(&b, 2, 8);
    let buf2 = b.pd.alloc_mr(8, Access::LOCAL_WRITE).unwrap();
    qb2.post_recv(RecvWr::new(77, buf2.sge(0, 8))).unwrap();
    let src = a.pd.alloc_mr(8, Access::empty()).unwrap();

    let mut poll = Poll::new().unwrap();
    let fd = ch.as_raw_fd();
    poll.registry()
        .register(&mut SourceFd(&fd), Token(7), Interest::READABLE)
        .unwrap();
    let mut events = Events::with_capacity(4);
    poll.poll(&mut events, Some(Duration::ZERO)).unwrap();
    assert!(events.is_empty(), "nothing queued yet");

    b.cq.req_notify(false);
    cq2.req_notify(false);
    a.qp.post_send(send_se(1, &src, false)).unwrap();
    qa2.post_send(send_se(2, &src, false)).unwrap();
    // Blocks until the first event makes the fd readable.
    poll.poll(&mut events, Some(WAIT)).unwrap();
    assert_eq!(
        events.iter().map(|e| e.token()).collect::<Vec<_>>(),
        [Token(7)]
    );
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let ev = ch.get_event(Some(WAIT)).unwrap().expect("two events");
        seen.push(ev.cq().id());
    }
    seen.sort_unstable();
    let mut want = vec![b.cq.id(), cq2.id()];
    want.sort_unstable();
    assert_eq!(seen, want);
    // Drained: the fd is not readable any more (level, not edge: poll with a zero
    // timeout asks the kernel now).
    assert_eq!(ch.pending(), 0);
    let mut p2 = Poll::new().unwrap();
    p2.registry()
        .register(&mut SourceFd(&fd), Token(8), Interest::READABLE)
        .unwrap();
    p2.poll(&mut events, Some(Duration::ZERO)).unwrap();
    assert!(events.is_empty(), "readable with no event queued");
    drop((qa2, qb2));
}

#[test]
fn events_are_acknowledged_in_batches_and_never_beyond_delivery() {
    let (a, b, ch) = pair_on_channel(DeviceConfig::default());
    let _bufs = recvs(&b, 8, 8);
    let src = a.pd.alloc_mr(8, Access::empty()).unwrap();
    for i in 0..5 {
        b.cq.req_notify(false);
        deliver_one(&a, &b, &src, i, false);
        ch.try_get_event().unwrap().expect("event");
    }
    let c = b.cq.event_counts();
    assert_eq!((c.raised, c.delivered, c.acked), (5, 5, 0));
    let e = b.cq.ack_events(6).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    assert_eq!(
        b.cq.event_counts().acked,
        0,
        "a refused ack acknowledges nothing"
    );
    b.cq.ack_events(3).unwrap();
    b.cq.ack_events(2).unwrap();
    assert_eq!(b.cq.event_counts().acked, 5);
    assert!(b.cq.ack_events(1).is_err());
    assert!(b.cq.ack_events(u64::MAX).is_err());
}

#[test]
fn a_cq_without_handler_wakes_wait_notify_even_when_raised_before_the_wait() {
    let (a, b) = end().queues(64, 64).pair();
    let _bufs = recvs(&b, 2, 8);
    let src = a.pd.alloc_mr(8, Access::empty()).unwrap();
    assert_eq!(b.cq.handler(), None);
    b.cq.req_notify(false);
    deliver_one(&a, &b, &src, 1, false);
    // The event came before anyone waited: it is kept, not missed.
    assert!(b.cq.wait_notify(Duration::ZERO));
    assert!(!b.cq.wait_notify(Duration::ZERO), "one event, taken once");
    let c = b.cq.event_counts();
    assert_eq!((c.raised, c.delivered, c.acked), (1, 1, 1));
}

/// A consumer that arms its CQ and then keeps polling it, never waiting, drives its
/// QP as often as a busy-polling one that would claim the socket. It must not claim
/// it while armed: a claimed QP's completions do not look at the arm (one atomic
/// operation less per completion), so the completion its polls find would raise no
/// event, and whoever waits for the arm's event would never get it.
#[test]
fn an_armed_cq_polled_busily_still_raises_its_event() {
    let (a, b) = end().progress(ProgressMode::Hybrid).queues(64, 64).pair();
    let _bufs = recvs(&b, 2, 8);
    let src = a.pd.alloc_mr(8, Access::empty()).unwrap();
    b.cq.req_notify(false);
    // Many more empty polls than a consumer drives before it claims (64).
    for _ in 0..1_000 {
        assert!(b.cq.poll_one().is_none());
    }
    let c = deliver_one(&a, &b, &src, 1, false);
    assert_eq!((c.wr_id, c.status), (0, WcStatus::Success));
    assert!(b.cq.wait_notify(Duration::ZERO), "the arm's event");
    let n = b.cq.event_counts();
    assert_eq!((n.raised, n.delivered), (1, 1));
}

/// The consumer's loop of every verbs program that sleeps: poll until empty, arm, poll
/// once more, and only then wait for an event (an event may come early: an arm whose
/// completion that poll found still raises one). A sender posts random bursts with
/// random pauses; the consumer pauses at random between arming and polling. A lost
/// wake-up leaves the consumer waiting for an event that never comes (the wait's
/// timeout then fails the test); a completion counted twice or missing fails the
/// count.
fn arm_poll_race(progress: ProgressMode, seed: u64) {
    const MSGS: u64 = 3000;
    // Two vectors whatever the CPUs: the CQ moves to handler 1, which a process
    // allowed on one CPU would not have by default.
    let cfg = DeviceConfig {
        progress,
        comp_vectors: 2,
        ..DeviceConfig::default()
    };
    let (a, b) = end().config(cfg).queues(64, 4096).pair();
    let ch = CompChannel::new().unwrap();
    b.dev.set_handler(1, Handler::channel(&ch)).unwrap();
    b.dev.modify_cq(&b.cq, Some(1)).unwrap();
    let _bufs = recvs(&b, MSGS as usize, 8);
    let src = a.pd.alloc_mr(8, Access::empty()).unwrap();
    let mut rng = seed | 1;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut pauses: Vec<u64> = (0..2 * MSGS).map(|_| next() % 8).collect();
    let consumer_pauses = pauses.split_off(MSGS as usize);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut sent = 0u64;
            let mut done = 0u64;
            let mut i = 0usize;
            while sent < MSGS {
                let burst = (pauses[i % pauses.len()] + 1).min(MSGS - sent);
                i += 1;
                if sent - done + burst <= 48 {
                    let wrs = (sent..sent + burst).map(|k| send_se(k, &src, false));
                    a.qp.post_send_batch(wrs).unwrap();
                    sent += burst;
                }
                for _ in 0..pauses[(i * 7) % pauses.len()] {
                    std::thread::yield_now();
                }
                while let Some(c) = a.cq.poll_one() {
                    assert_eq!(c.status, WcStatus::Success);
                    done += 1;
                }
            }
            while done < MSGS {
                done += a.cq.wait_for(1, WAIT).len() as u64;
            }
        });
        let mut got = vec![false; MSGS as usize];
        let mut n = 0u64;
        let mut events = 0u64;
        let mut arms = 0u64;
        let mut buf = [blank(); 16];
        let mut k = 0usize;
        let take = |buf: &[Completion], got: &mut Vec<bool>| {
            for c in buf {
                assert_eq!(c.status, WcStatus::Success);
                assert!(!got[c.wr_id as usize], "completion {} twice", c.wr_id);
                got[c.wr_id as usize] = true;
            }
            buf.len() as u64
        };
        while n < MSGS {
            let m = b.cq.poll(&mut buf);
            if m > 0 {
                n += take(&buf[..m], &mut got);
                continue;
            }
            b.cq.req_notify(false);
            arms += 1;
            for _ in 0..consumer_pauses[k % consumer_pauses.len()] {
                std::thread::yield_now();
            }
            k += 1;
            let m = b.cq.poll(&mut buf);
            if m > 0 {
                n += take(&buf[..m], &mut got);
                continue;
            }
            let ev = ch.get_event(Some(WAIT)).unwrap();
            assert!(
                ev.is_some(),
                "lost wake-up (seed {seed:#x}): {n} of {MSGS} received, CQ armed {:?}",
                b.cq.armed()
            );
            events += 1;
            if events.is_multiple_of(16) {
                b.cq.ack_events(16).unwrap();
            }
        }
        assert!(got.iter().all(|&x| x));
        // Whatever the last arm raised has been raised once the QP lock is free.
        let _ = b.qp.state();
        b.cq.ack_events(events % 16).unwrap();
        let c = b.cq.event_counts();
        assert_eq!(c.delivered, events);
        assert_eq!(c.acked, events);
        // An arm whose completion the poll after it found still raises its event
        // (verbs allow such early events): those wait in the channel. Every event
        // raised is there or was taken, and no arm raised two.
        assert_eq!(c.raised, events + ch.pending() as u64, "{c:?}");
        assert!(c.raised <= arms, "{} events for {arms} arms", c.raised);
        eprintln!(
            "seed {seed:#x}: {MSGS} completions, {arms} arms, {events} events taken, {} raised",
            c.raised
        );
    });
}

#[test]
fn the_arm_poll_race_never_loses_a_wake_up() {
    let base = std::env::var("SOFTRNIC_SEED")
        .ok()
        .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
        .unwrap_or(0x5eed_cafe);
    for (i, mode) in [ProgressMode::Engine, ProgressMode::Hybrid]
        .into_iter()
        .enumerate()
    {
        arm_poll_race(mode, base.wrapping_add(i as u64 * 0x9e37_79b9));
    }
}
