//! A CQ's arm: the verbs notification rules as one atomic state.
//!
//! A consumer arms the CQ for the next completion or for solicited ones only
//! (`ibv_req_notify_cq`); the request is one-shot: the first completion that matches
//! disarms it and raises exactly one event. A completion is *solicited* when it is a
//! receive of a Send with the Solicited Event bit, or when its status is not success
//! (the libibverbs rule). Arming for solicited completions while armed for the next
//! one changes nothing; arming for the next one while armed for solicited ones widens
//! the request.
//!
//! # The arm/poll race
//!
//! The consumer's pattern is: poll until empty, arm, poll once more, then sleep until
//! an event. A producer publishes a completion in the ring, then looks at the arm. If
//! each side only stored its own flag and loaded the other's, both could read the old
//! value (the store-buffer pattern): the consumer finds the ring empty, the producer
//! finds the CQ unarmed, and the consumer sleeps through a completion. Here both sides
//! do a read-modify-write on the arm itself, the producer after publishing ([`Arm::
//! completion_added`] always writes, even when nothing changes) and the consumer to
//! arm ([`Arm::arm`]). Read-modify-writes of one location are totally ordered, and
//! they are acquire-release, so either the producer's comes first and the consumer's
//! arm synchronises with it (its next poll sees the completion), or the consumer's
//! comes first and the producer sees the arm (and raises the event). No wake-up is
//! lost, whatever the interleaving; `tests/loom_cq_notify.rs` checks this with loom,
//! which models these orderings exactly.
//!
//! One more case, found by loom: completions leave the ring in position order, so a
//! producer that has claimed a position and not yet written it hides the completions
//! claimed after it. If a solicited one among them was checked against the arm before
//! the consumer armed, and the producer holding it up is unsolicited, a solicited-only
//! arm would be taken by nobody while the consumer's poll cannot see the solicited
//! completion. So an unsolicited completion that had others claimed behind it takes a
//! solicited-only arm (a spurious event, only when producers race).

use crate::cq_ring::sync::{AtomicU8, Ordering};

const DISARMED: u8 = 0;
const NEXT: u8 = 1;
const SOLICITED: u8 = 2;

/// What a CQ is armed for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Armed {
    /// Not armed: completions raise no event.
    No,
    /// The next completion raises an event.
    Next,
    /// The next solicited completion (or one in error) raises an event.
    Solicited,
}

/// The arm state of one CQ. See the [module documentation](self).
#[derive(Debug)]
pub struct Arm {
    state: AtomicU8,
}

impl Default for Arm {
    fn default() -> Self {
        Arm::new()
    }
}

impl Arm {
    /// A disarmed CQ.
    pub fn new() -> Arm {
        Arm {
            state: AtomicU8::new(DISARMED),
        }
    }

    /// Applies `f` to the state in one read-modify-write (a compare-exchange loop that
    /// writes even an unchanged value, so the access is always in the location's
    /// modification order); returns the previous state.
    fn update(&self, f: impl Fn(u8) -> u8) -> u8 {
        let mut cur = self.state.load(Ordering::Relaxed);
        loop {
            match self
                .state
                .compare_exchange_weak(cur, f(cur), Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(prev) => return prev,
                Err(now) => cur = now,
            }
        }
    }

    /// Arms for the next completion, or for the next solicited one. The consumer polls
    /// once more afterwards: what was published before the arm is seen by that poll,
    /// what is published after raises the event.
    pub fn arm(&self, solicited_only: bool) {
        self.update(|s| match (solicited_only, s) {
            (true, NEXT) => NEXT,
            (true, _) => SOLICITED,
            (false, _) => NEXT,
        });
    }

    /// Called by a producer after it published a completion: disarms and returns true
    /// if the completion matches the arm (exactly one caller per arm gets true).
    ///
    /// `later_claimed` says whether other completions were claimed behind this one in
    /// the ring (`CqRing::claimed_after`). They could not be seen while this one was
    /// being written, so a solicited one among them, published and checked against
    /// the arm before the consumer armed, would be hidden from the consumer's poll
    /// after arming, and its producer found nothing to wake. So an unsolicited
    /// completion that may have hidden others takes a solicited-only arm too: a
    /// spurious event, possible only when producers race, instead of a lost one.
    pub fn completion_added(&self, solicited: bool, later_claimed: impl FnOnce() -> bool) -> bool {
        let fires = |s: u8| s == NEXT || (s == SOLICITED && solicited);
        let prev = self.update(|s| if fires(s) { DISARMED } else { s });
        if fires(prev) {
            return true;
        }
        // Read after the read-modify-write above: if the consumer armed before it, the
        // claims made before that arm are visible here.
        prev == SOLICITED
            && later_claimed()
            && self
                .state
                .compare_exchange(SOLICITED, DISARMED, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
    }

    /// The current state (a snapshot).
    pub fn armed(&self) -> Armed {
        match self.state.load(Ordering::Acquire) {
            NEXT => Armed::Next,
            SOLICITED => Armed::Solicited,
            _ => Armed::No,
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn one_event_per_arm() {
        let a = Arm::new();
        assert!(!a.completion_added(false, || false));
        assert!(!a.completion_added(true, || false));
        a.arm(false);
        assert_eq!(a.armed(), Armed::Next);
        assert!(a.completion_added(false, || false));
        assert_eq!(a.armed(), Armed::No);
        assert!(!a.completion_added(false, || false));
        assert!(!a.completion_added(true, || false));
    }

    #[test]
    fn solicited_only_ignores_unsolicited() {
        let a = Arm::new();
        a.arm(true);
        for _ in 0..3 {
            assert!(!a.completion_added(false, || false));
            assert_eq!(a.armed(), Armed::Solicited);
        }
        assert!(a.completion_added(true, || false));
        assert_eq!(a.armed(), Armed::No);
    }

    #[test]
    fn an_unsolicited_completion_that_held_others_up_takes_a_solicited_arm() {
        let a = Arm::new();
        a.arm(true);
        assert!(!a.completion_added(false, || false));
        assert!(a.completion_added(false, || true));
        assert_eq!(a.armed(), Armed::No);
        // Not armed for solicited ones: nothing to take.
        assert!(!a.completion_added(false, || true));
    }

    #[test]
    fn next_wins_over_solicited_in_either_order() {
        let a = Arm::new();
        a.arm(false);
        a.arm(true);
        assert_eq!(a.armed(), Armed::Next);
        assert!(a.completion_added(false, || false));
        let b = Arm::new();
        b.arm(true);
        b.arm(false);
        assert_eq!(b.armed(), Armed::Next);
        assert!(b.completion_added(false, || false));
    }
}
