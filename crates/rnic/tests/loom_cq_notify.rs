//! Exhaustive interleaving checks of the arm/poll race with loom: a consumer that arms
//! a CQ and then polls it either finds every completion published before, or gets an
//! event; an arm raises at most one event; a solicited-only arm is not taken by an
//! unsolicited completion. The ring is the real `CqRing`, the arm the real `Arm`.
//!
//! Run with:
//! `RUSTFLAGS="--cfg loom" cargo test -p softrnic-rnic --test loom_cq_notify --release`
//!
//! The last test models the naive arm (a flag stored by the consumer and loaded by the
//! producer) and expects loom to find the lost wake-up in it, which shows the checks
//! can fail.
#![cfg(loom)]

use loom::sync::Arc;
use loom::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use loom::thread;

use softrnic_proto::verbs::{Completion, QpId, WcOpcode, WcStatus};
use softrnic_rnic::cq_notify::{Arm, Armed};
use softrnic_rnic::cq_ring::CqRing;

fn comp(producer: u32, solicited: bool) -> Completion {
    Completion {
        wr_id: u64::from(producer),
        status: WcStatus::Success,
        opcode: WcOpcode::Recv,
        byte_len: 0,
        qp: QpId(producer),
        solicited,
        invalidated: None,
    }
}

struct Cq {
    ring: CqRing,
    arm: Arm,
    /// Events raised, and by which producer (bit per producer).
    events: AtomicUsize,
    raisers: AtomicUsize,
    /// The ring position each producer's completion took.
    positions: [AtomicUsize; 2],
}

impl Cq {
    fn new() -> Cq {
        Cq {
            ring: CqRing::new(4).unwrap(),
            arm: Arm::new(),
            events: AtomicUsize::new(0),
            raisers: AtomicUsize::new(0),
            positions: [AtomicUsize::new(0), AtomicUsize::new(0)],
        }
    }

    /// What a producer does: publish, then let the arm decide.
    fn produce(&self, p: u32, solicited: bool) {
        let pos = self.ring.push_pos(comp(p, solicited)).unwrap();
        self.positions[p as usize].store(pos, Ordering::Relaxed);
        if self
            .arm
            .completion_added(solicited, || self.ring.claimed_after(pos))
        {
            self.events.fetch_add(1, Ordering::Relaxed);
            self.raisers.fetch_or(1 << p, Ordering::Relaxed);
        }
    }

    /// What the consumer does after finding the CQ empty: arm, then poll once more.
    /// Returns the producers whose completions that poll found.
    fn arm_and_poll(&self, solicited_only: bool) -> Vec<u32> {
        self.arm.arm(solicited_only);
        // As `CqShared::pop_into`: an empty ring is answered from its head and tail,
        // without claiming the consumer role.
        if self.ring.is_empty() {
            return Vec::new();
        }
        let mut rx = self.ring.consumer().unwrap();
        let mut got = Vec::new();
        while let Some(c) = rx.pop() {
            got.push(c.qp.0);
        }
        got
    }
}

/// One producer, one consumer: the poll after the arm finds the completion, or the
/// completion raises the event; never neither, never two events.
#[test]
fn arm_then_poll_never_misses_one_producer() {
    loom::model(|| {
        let cq = Arc::new(Cq::new());
        let p = {
            let cq = cq.clone();
            thread::spawn(move || cq.produce(0, false))
        };
        let got = cq.arm_and_poll(false);
        p.join().unwrap();
        let events = cq.events.load(Ordering::Relaxed);
        assert!(events <= 1, "{events} events for one arm");
        assert!(
            got == [0] || events == 1,
            "lost wake-up: polled {got:?}, no event"
        );
    });
}

/// Two producers racing the consumer's arm and poll: if the poll missed any completion,
/// exactly one event was raised.
#[test]
fn arm_then_poll_never_misses_two_producers() {
    loom::model(|| {
        let cq = Arc::new(Cq::new());
        let ps: Vec<_> = (0..2)
            .map(|i| {
                let cq = cq.clone();
                thread::spawn(move || cq.produce(i, false))
            })
            .collect();
        let got = cq.arm_and_poll(false);
        for p in ps {
            p.join().unwrap();
        }
        let events = cq.events.load(Ordering::Relaxed);
        assert!(events <= 1, "{events} events for one arm");
        if got.len() < 2 {
            assert_eq!(events, 1, "lost wake-up: polled {got:?}, no event");
        }
        assert_eq!(
            cq.arm.armed(),
            if events == 1 { Armed::No } else { Armed::Next }
        );
    });
}

/// Solicited-only: an unsolicited and a solicited producer race the consumer. The event
/// is raised when the poll missed the solicited completion. The unsolicited producer
/// may raise it only when it held the solicited one up (took the ring position before
/// it): that is the case where the solicited one's own check came before the arm, and
/// the poll after the arm could not see it behind the unpublished slot. (Without that
/// rule loom finds exactly this lost wake-up.)
#[test]
fn solicited_only_is_taken_by_the_solicited_completion_only() {
    loom::model(|| {
        let cq = Arc::new(Cq::new());
        let ps: Vec<_> = [(0, false), (1, true)]
            .into_iter()
            .map(|(i, se)| {
                let cq = cq.clone();
                thread::spawn(move || cq.produce(i, se))
            })
            .collect();
        let got = cq.arm_and_poll(true);
        for p in ps {
            p.join().unwrap();
        }
        let events = cq.events.load(Ordering::Relaxed);
        let raisers = cq.raisers.load(Ordering::Relaxed);
        assert!(events <= 1);
        let pos = |i: usize| cq.positions[i].load(Ordering::Relaxed);
        if raisers & 1 != 0 {
            assert!(
                pos(0) < pos(1),
                "the unsolicited completion raised the event without holding up the solicited one"
            );
        }
        if !got.contains(&1) {
            assert_eq!(events, 1, "lost wake-up for the solicited completion");
        }
    });
}

/// The naive arm: the consumer stores a flag, the producer loads it after publishing.
/// Both may read the other's old value (the ring's empty slot, the unarmed flag), so
/// the consumer sleeps through the completion. loom must find that interleaving.
#[test]
#[should_panic(expected = "lost wake-up")]
fn the_naive_store_load_arm_loses_wake_ups() {
    loom::model(|| {
        let ring = Arc::new(CqRing::new(4).unwrap());
        let armed = Arc::new(AtomicU8::new(0));
        let events = Arc::new(AtomicUsize::new(0));
        let p = {
            let (ring, armed, events) = (ring.clone(), armed.clone(), events.clone());
            thread::spawn(move || {
                ring.push(comp(0, false)).unwrap();
                if armed.load(Ordering::Acquire) == 1 {
                    armed.store(0, Ordering::Release);
                    events.fetch_add(1, Ordering::Relaxed);
                }
            })
        };
        armed.store(1, Ordering::Release);
        let got = ring.consumer().unwrap().pop().is_some();
        p.join().unwrap();
        assert!(got || events.load(Ordering::Relaxed) == 1, "lost wake-up");
    });
}
