//! Who drives a QP's socket: its engine thread, or a consumer that busy-polls the QP's
//! CQ (hybrid progress).
//!
//! On a machine with few CPUs, a busy-polling consumer and an engine thread that also
//! serves the same socket fight: the engine is woken (or spins) for every message and
//! takes CPU time and the QP's lock from the pollers, which makes a latency tail of
//! tens to hundreds of microseconds (docs/ARCHITECTURE.md, "Progress model", has the
//! measurements). So a consumer that keeps polling *claims* the QPs of its CQ:
//!
//! - Every poll of a CQ counts in the CQ's [`PollCount`], and so does every poll that
//!   found the CQ empty and drove its QPs' sockets, until the consumer arms the CQ to
//!   sleep on its events. Counting needs no clock: the consumer's poll stays a few
//!   instructions longer, not a system call.
//! - When a consumer's poll drives a QP and has driven [`CLAIM_AFTER`] times in a row
//!   without arming, it claims the QP: the socket leaves the engine's epoll set (the
//!   engine is never woken for it again) and the consumer's polls drive it alone, under
//!   the QP's lock that nobody else contends for, sending replies from the same thread
//!   in the same pass.
//! - The claim is a lease: the engine looks at the QP every [`LEASE`] while it is
//!   claimed, and takes the socket back if the consumer has not polled since the last
//!   look (and the consumer must then drive [`CLAIM_AFTER`] times again to claim). A
//!   consumer that arms the CQ to sleep on its events (`Cq::req_notify`) hands the
//!   socket back at once, and so does a QP that leaves RTS (the engine sees a close
//!   through).
//! - Handing back puts the socket into the engine's epoll set again, which reports it
//!   at once if it is readable: nothing that arrived meanwhile waits for a later event.
//!
//! Every change of owner happens under the QP's lock ([`Owner`] lives there); the
//! engine reads a lock-free mirror of "claimed" only to skip stale readiness events
//! cheaply, and checks again under the lock (the consumer may claim between the two):
//! an engine drives a QP only while it serves the socket. The counts are relaxed: a stale one moves a hand-off by one poll or one
//! lease. `tests/loom_handoff.rs` checks with loom that, whatever the interleaving of a
//! consumer that claims and stops, the engine's lease checks and data arriving, the
//! data is read and the socket ends with its engine.

use crate::cq_ring::sync::{AtomicU64, Ordering};
use std::time::Duration;

/// Empty polls in a row (without arming) after which a consumer claims the QPs it
/// drives: about 30 us of busy-polling, far more than a consumer that drains its CQ,
/// arms it and sleeps ever does.
pub const CLAIM_AFTER: u64 = 64;
/// How often the engine looks at a claimed QP; a consumer that has not polled for
/// this long loses the claim.
pub const LEASE: Duration = Duration::from_millis(10);

/// A CQ's polls, counted by its consumers and read by engines.
#[derive(Debug, Default)]
pub struct PollCount {
    /// Every poll.
    polls: AtomicU64,
    /// Polls that found the CQ empty and drove its QPs, since it was last armed.
    drives: AtomicU64,
    /// Empty polls that gave the CPU away because another thread held what they waited
    /// for (`Cq::poll`).
    yields: AtomicU64,
}

impl PollCount {
    /// No poll yet.
    pub fn new() -> PollCount {
        PollCount::default()
    }

    /// Counts a poll. (Two pollers racing may count one: it only has to move.)
    pub fn poll(&self) {
        let n = self.polls.load(Ordering::Relaxed);
        self.polls.store(n.wrapping_add(1), Ordering::Relaxed);
    }

    /// Counts an empty poll that drives the QPs; returns whether the consumer has
    /// driven often enough to claim them.
    pub fn drive(&self) -> bool {
        let n = self.drives.load(Ordering::Relaxed).saturating_add(1);
        self.drives.store(n, Ordering::Relaxed);
        n >= CLAIM_AFTER
    }

    /// The consumer armed the CQ, or lost a claim: it drives [`CLAIM_AFTER`] times
    /// again before it claims.
    pub fn reset_drives(&self) {
        self.drives.store(0, Ordering::Relaxed);
    }

    /// Polls so far.
    pub fn polls(&self) -> u64 {
        self.polls.load(Ordering::Relaxed)
    }

    /// Counts an empty poll that yielded the CPU.
    pub fn yielded(&self) {
        self.yields.fetch_add(1, Ordering::Relaxed);
    }

    /// Empty polls that yielded the CPU so far.
    pub fn yields(&self) -> u64 {
        self.yields.load(Ordering::Relaxed)
    }
}

/// What the owner of a QP's socket should do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Nothing changes.
    Keep,
    /// The consumer takes the socket from the engine, which looks again at the given
    /// time.
    Claim(Duration),
    /// The consumer keeps the socket; the engine looks again at the given time.
    Extend(Duration),
    /// The socket goes back to the engine.
    Release,
}

/// Who drives a QP's socket, kept under the QP's lock. The caller carries out each
/// [`Action`] and reports it with [`Owner::claimed`], [`Owner::extended`] or
/// [`Owner::released`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    /// The consumer holds the socket.
    claimed: bool,
    /// When the engine looks at the lease next (its timer for it).
    lease_at: Option<Duration>,
    /// The polls of the QP's CQs at the last look.
    polls_seen: u64,
}

impl Owner {
    /// The engine drives the socket.
    pub fn new() -> Owner {
        Owner::default()
    }

    /// Whether a consumer holds the socket.
    pub fn is_claimed(&self) -> bool {
        self.claimed
    }

    /// The engine's lease timer, if one is pending.
    pub fn lease_at(&self) -> Option<Duration> {
        self.lease_at
    }

    /// A consumer's empty poll drives the QP; `ready` says it has driven often enough
    /// ([`PollCount::drive`]).
    pub fn on_consumer_drive(&self, ready: bool, now: impl FnOnce() -> Duration) -> Action {
        if ready && !self.claimed {
            Action::Claim(now() + LEASE)
        } else {
            Action::Keep
        }
    }

    /// One of the engine's timers for the QP fired at `now`; the QP's CQs have been
    /// polled `polls` times so far.
    pub fn on_timer(&self, now: Duration, polls: u64) -> Action {
        if !self.claimed {
            return Action::Keep;
        }
        match self.lease_at {
            // Another timer of the QP (its close timer) fired before the lease's.
            Some(at) if at > now => Action::Keep,
            _ if polls != self.polls_seen => Action::Extend(now + LEASE),
            _ => Action::Release,
        }
    }

    /// The consumer is going to sleep on the CQ's events.
    pub fn on_arm(&self) -> Action {
        if self.claimed {
            Action::Release
        } else {
            Action::Keep
        }
    }

    /// The consumer now holds the socket; the engine looks again at `lease_at`, and
    /// the QP's CQs have been polled `polls` times.
    pub fn claimed(&mut self, lease_at: Duration, polls: u64) {
        self.claimed = true;
        self.lease_at = Some(lease_at);
        self.polls_seen = polls;
    }

    /// The engine looks again at `lease_at`, having seen `polls` polls.
    pub fn extended(&mut self, lease_at: Duration, polls: u64) {
        self.lease_at = Some(lease_at);
        self.polls_seen = polls;
    }

    /// The engine drives the socket again.
    pub fn released(&mut self) {
        self.claimed = false;
        self.lease_at = None;
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn ms(x: u64) -> Duration {
        Duration::from_millis(x)
    }

    #[test]
    fn drives_in_a_row_until_armed() {
        let c = PollCount::new();
        for _ in 1..CLAIM_AFTER {
            c.poll();
            assert!(!c.drive());
        }
        assert!(c.drive());
        assert!(c.drive());
        assert_eq!(c.polls(), CLAIM_AFTER - 1);
        c.reset_drives();
        assert!(!c.drive());
    }

    #[test]
    fn a_consumer_that_drove_enough_claims() {
        let mut o = Owner::new();
        assert_eq!(o.on_consumer_drive(false, || ms(1)), Action::Keep);
        assert_eq!(
            o.on_consumer_drive(true, || ms(1)),
            Action::Claim(ms(1) + LEASE)
        );
        o.claimed(ms(1) + LEASE, 7);
        assert!(o.is_claimed());
        assert_eq!(o.lease_at(), Some(ms(1) + LEASE));
        assert_eq!(o.on_consumer_drive(true, || ms(2)), Action::Keep);
    }

    #[test]
    fn the_lease_is_extended_while_the_consumer_polls_and_lapses_after() {
        let mut o = Owner::new();
        assert_eq!(o.on_timer(ms(5), 0), Action::Keep);
        o.claimed(LEASE, 100);
        // The close timer fires first: the lease timer is still pending.
        assert_eq!(o.on_timer(ms(3), 500), Action::Keep);
        // The lease timer: polled since the claim, look again a lease later.
        assert_eq!(o.on_timer(LEASE, 900), Action::Extend(LEASE + LEASE));
        o.extended(LEASE + LEASE, 900);
        // No poll since the last look: it lapses.
        assert_eq!(o.on_timer(LEASE + LEASE, 900), Action::Release);
        assert_eq!(o.on_arm(), Action::Release);
        o.released();
        assert!(!o.is_claimed());
        assert_eq!(o.on_arm(), Action::Keep);
        assert_eq!(o.on_timer(ms(40), 901), Action::Keep);
    }
}
