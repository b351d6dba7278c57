//! Exhaustive interleaving checks, with loom, of the hand-off of a QP's socket between
//! its engine and a polling consumer (`softrnic_rnic::handoff`): whatever the order in
//! which the consumer polls, claims and stops, the engine's lease checks run, and data
//! arrives (with or without an epoll event, depending on whether the socket is in the
//! engine's set at that moment), every octet is read in the end, and the socket ends
//! with its engine. The state machine and the poll counts are the real `Owner` and
//! `PollCount`; the QP around them (its lock, the epoll set, the socket) is modelled as
//! `qp.rs` drives it: every change of owner and every read under the QP's lock, the
//! engine skipping events while the lock-free "claimed" mirror, or the owner under the
//! lock, says the consumer owns the socket, and epoll reporting a ready socket when it
//! is added back.
//!
//! Run with:
//! `RUSTFLAGS="--cfg loom" cargo test -p softrnic-rnic --test loom_handoff --release`
//!
//! The engine never reads a socket the consumer holds. The last two tests break the
//! model on purpose (a release that forgets the epoll set; an engine that does not
//! check the owner again under the lock) and expect loom to find the failure, which
//! shows the checks can fail.
#![cfg(loom)]

use loom::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;
use softrnic_rnic::handoff::{Action, CLAIM_AFTER, LEASE, Owner, PollCount};
use std::time::Duration;

/// The socket and who serves it, under the QP's lock.
struct Inner {
    owner: Owner,
    /// In the engine's epoll set.
    registered: bool,
    /// Octets read so far.
    read: u32,
}

struct Qp {
    inner: Mutex<Inner>,
    claimed: AtomicBool,
    /// Octets that have arrived in the kernel's receive queue.
    arrived: AtomicU32,
    /// An epoll event is pending for the engine.
    event: AtomicBool,
    polls: PollCount,
    /// Whether releasing puts the socket back into the epoll set (a bug switch).
    resume_on_release: bool,
    /// Whether the engine checks the owner again under the lock before it reads (a
    /// bug switch: without it, an event fetched before a claim reads the consumer's
    /// socket).
    recheck_under_lock: bool,
}

impl Qp {
    fn new(resume_on_release: bool, recheck_under_lock: bool) -> Qp {
        Qp {
            inner: Mutex::new(Inner {
                owner: Owner::new(),
                registered: true,
                read: 0,
            }),
            claimed: AtomicBool::new(false),
            arrived: AtomicU32::new(0),
            event: AtomicBool::new(false),
            polls: PollCount::new(),
            resume_on_release,
            recheck_under_lock,
        }
    }

    /// Reads everything in the receive queue (the receive path, under the lock).
    fn drain(&self, g: &mut Inner) {
        g.read = self.arrived.load(Ordering::Acquire);
    }

    /// A message arrives: the kernel queues it, then wakes epoll if the socket is in
    /// the set (the callback runs under the epoll and socket locks, modelled by the
    /// QP's lock for the membership check).
    fn arrive(&self) {
        self.arrived.fetch_add(1, Ordering::AcqRel);
        let g = self.inner.lock().unwrap();
        if g.registered {
            self.event.store(true, Ordering::Release);
        }
    }

    fn release(&self, g: &mut Inner) {
        g.owner.released();
        self.claimed.store(false, Ordering::Release);
        if self.resume_on_release {
            g.registered = true;
            // epoll_ctl(ADD) reports a socket that is ready already.
            if self.arrived.load(Ordering::Acquire) > g.read {
                self.event.store(true, Ordering::Release);
            }
        }
    }

    /// One poll of an empty CQ by the consumer (`Cq::poll` -> `consumer_progress`).
    fn consumer_poll(&self, now: Duration) {
        self.polls.poll();
        let ready = self.polls.drive();
        // try_lock: a poll that finds the lock taken does nothing.
        let Ok(mut g) = self.inner.try_lock() else {
            return;
        };
        if let Action::Claim(at) = g.owner.on_consumer_drive(ready, || now) {
            g.registered = false;
            g.owner.claimed(at, self.polls.polls());
            self.claimed.store(true, Ordering::Release);
        }
        self.drain(&mut g);
    }

    /// The engine handles a pending epoll event (`on_ready`): skipped if the consumer
    /// holds the socket, by the lock-free mirror and again under the lock (the
    /// consumer may claim in between).
    fn engine_event(&self) {
        if !self.event.swap(false, Ordering::AcqRel) {
            return;
        }
        if self.claimed.load(Ordering::Acquire) {
            return;
        }
        let mut g = self.inner.lock().unwrap();
        if self.recheck_under_lock && g.owner.is_claimed() {
            return;
        }
        assert!(
            !g.owner.is_claimed(),
            "the engine read a socket the consumer holds"
        );
        self.drain(&mut g);
    }

    /// The engine's timer fires at `now` (`on_timer`).
    fn engine_timer(&self, now: Duration) {
        let mut g = self.inner.lock().unwrap();
        if !g.owner.is_claimed() {
            return;
        }
        let polls = self.polls.polls();
        match g.owner.on_timer(now, polls) {
            Action::Extend(at) => g.owner.extended(at, polls),
            Action::Release => {
                self.release(&mut g);
                self.drain(&mut g);
            }
            Action::Claim(_) | Action::Keep => {}
        }
    }
}

/// A consumer that polls enough to claim, then one more time, and stops; a message
/// arriving meanwhile; the engine's lease timer firing once meanwhile. After the
/// consumer has stopped, the engine's timer fires until the lease lapses, and it
/// handles its events; then one more message arrives, for the engine alone. Every
/// message has been read, and the socket is the engine's.
fn scenario(resume_on_release: bool, recheck_under_lock: bool) {
    loom::model(move || {
        let qp = Arc::new(Qp::new(resume_on_release, recheck_under_lock));
        // Drives before the model's interleaved ones: the next drive may claim.
        for _ in 0..CLAIM_AFTER - 1 {
            qp.polls.poll();
            qp.polls.drive();
        }
        let consumer = {
            let qp = qp.clone();
            thread::spawn(move || {
                qp.consumer_poll(Duration::ZERO);
                qp.consumer_poll(Duration::ZERO);
            })
        };
        let network = {
            let qp = qp.clone();
            thread::spawn(move || qp.arrive())
        };
        // The engine, concurrently: its lease timer fires, and it handles an event.
        qp.engine_timer(LEASE);
        qp.engine_event();
        consumer.join().unwrap();
        network.join().unwrap();
        // The consumer has stopped: at most two more lease periods give the socket
        // back (the first may see the consumer's last polls).
        qp.engine_timer(LEASE * 2);
        qp.engine_timer(LEASE * 3);
        qp.engine_event();
        // A message after all that: only the engine can see it.
        qp.arrive();
        qp.engine_event();
        let g = qp.inner.lock().unwrap();
        assert_eq!(
            g.read,
            qp.arrived.load(Ordering::Acquire),
            "data left unread"
        );
        assert!(!g.owner.is_claimed(), "the consumer kept the socket");
        assert!(g.registered, "the socket is in no epoll set");
    });
}

#[test]
fn every_octet_is_read_and_the_socket_ends_with_its_engine() {
    scenario(true, true);
}

/// Releasing without putting the socket back into the epoll set: loom finds the
/// interleaving where the consumer claimed, and the message after the release is never
/// read.
#[test]
#[should_panic(expected = "data left unread")]
fn a_release_that_forgets_the_epoll_set_is_caught() {
    scenario(false, true);
}

/// An engine that trusts the lock-free mirror it read before taking the lock: loom
/// finds the interleaving where the consumer claims in between, and the engine reads
/// the consumer's socket (what served an RDMA Read from the wrong engine in session
/// 11, see `src/engine_tests.rs`).
#[test]
#[should_panic(expected = "the engine read a socket the consumer holds")]
fn an_engine_that_trusts_a_stale_mirror_is_caught() {
    scenario(true, false);
}
