//! Where an engine thread runs when [`crate::DeviceConfig::engine_cpus`] pins it nowhere.
//!
//! By default it follows its consumers: the threads that connect or accept its QPs (or
//! move their CQ to its vector). An engine whose consumers are all pinned runs on their
//! CPUs; once a consumer that may run anywhere shows up, it may run anywhere too. This
//! is the design's rule that a CQ's work is done on the processor the CQ belongs to,
//! applied to a program that says so only by pinning its threads.
//!
//! An engine one of whose CQs is armed for events (an event-driven consumer, asleep
//! between completions) is freed too: with nobody spinning, the scheduler's wake-up
//! placement did better (loopback `write_bw -e` at load 11: 1,015-3,862 MB/s left to
//! the scheduler, 124-818 followed, and 0.23-0.31 against 0.37-0.62 CPU s per GB).
//!
//! Why (docs/ARCHITECTURE.md, "Where engines run"): left to the scheduler, the engine of
//! a passive side (the target of Writes, which does all of that side's socket work) was
//! woken by the sender's loopback transmit and often placed beside the busy-polling
//! sender, so one CPU did both sides' copies and checksums while the other idled: the
//! 1 MiB write_bw figure came out in two modes, one about 0.6x the other.

use std::collections::BTreeSet;

/// How a device places the engine threads that `engine_cpus` does not pin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EnginePlacement {
    /// On the CPUs of the threads that connect or accept the engine's QPs, once they
    /// are pinned (within the CPUs the device's opener may use); anywhere the opener
    /// may run while none is pinned, or once one is not. The default.
    #[default]
    FollowConsumers,
    /// Wherever the scheduler puts them, within the affinity inherited from the thread
    /// that opened the device.
    Inherit,
}

/// The CPU set of one engine that follows its consumers.
#[derive(Debug)]
pub(crate) struct Follow {
    /// The CPUs the engine may use at all: the affinity it inherited from the opener.
    allowed: Vec<usize>,
    /// The CPUs of its pinned consumers so far, within `allowed`.
    consumers: BTreeSet<usize>,
    /// A consumer that may run on every allowed CPU was seen: the engine stays free.
    free: bool,
    /// The set in force.
    now: Vec<usize>,
}

impl Follow {
    /// An engine that may use `allowed` (ascending) and has no consumer yet.
    pub(crate) fn new(allowed: Vec<usize>) -> Follow {
        Follow {
            now: allowed.clone(),
            allowed,
            consumers: BTreeSet::new(),
            free: false,
        }
    }

    /// A thread that may run on `thread` became a consumer of the engine: the engine's
    /// new CPU set, if it changes. CPUs outside the allowed set are ignored (a consumer
    /// on none of them changes nothing).
    pub(crate) fn consumer(&mut self, thread: &[usize]) -> Option<Vec<usize>> {
        let inside: Vec<usize> = thread
            .iter()
            .copied()
            .filter(|c| self.allowed.contains(c))
            .collect();
        if inside.is_empty() {
            return None;
        }
        if inside.len() == self.allowed.len() {
            self.free = true;
        } else {
            self.consumers.extend(inside);
        }
        let want: Vec<usize> = if self.free || self.consumers.is_empty() {
            self.allowed.clone()
        } else {
            self.consumers.iter().copied().collect()
        };
        (want != self.now).then(|| {
            self.now = want.clone();
            want
        })
    }

    /// A consumer of the engine sleeps on completion events (it armed a CQ): the
    /// engine is freed for good, its new CPU set returned if it changes.
    pub(crate) fn sleeper(&mut self) -> Option<Vec<usize>> {
        self.free = true;
        (self.now != self.allowed).then(|| {
            self.now = self.allowed.clone();
            self.now.clone()
        })
    }

    /// Freed for good (a consumer that may run anywhere, or one that sleeps on
    /// events): no consumer changes its set any more.
    pub(crate) fn is_free(&self) -> bool {
        self.free
    }

    /// The set in force.
    #[cfg(test)]
    pub(crate) fn cpus(&self) -> &[usize] {
        &self.now
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The loopback benchmark on two CPUs: the client thread pinned to CPU 0 connects
    /// on one device, the server thread pinned to CPU 1 accepts on the other; each
    /// device's engine goes with its side.
    #[test]
    fn two_cpus_each_side_pinned() {
        let mut client = Follow::new(vec![0, 1]);
        let mut server = Follow::new(vec![0, 1]);
        assert_eq!(client.cpus(), [0, 1], "free until a consumer shows up");
        assert_eq!(client.consumer(&[0]), Some(vec![0]));
        assert_eq!(server.consumer(&[1]), Some(vec![1]));
        // More QPs from the same threads change nothing (no further system call).
        for _ in 0..255 {
            assert_eq!(client.consumer(&[0]), None);
            assert_eq!(server.consumer(&[1]), None);
        }
        assert_eq!((client.cpus(), server.cpus()), (&[0][..], &[1][..]));
    }

    #[test]
    fn an_unpinned_consumer_frees_the_engine_for_good() {
        let mut e = Follow::new(vec![0, 1, 2, 3]);
        assert_eq!(e.consumer(&[2]), Some(vec![2]));
        assert_eq!(e.consumer(&[0, 1, 2, 3]), Some(vec![0, 1, 2, 3]));
        assert!(e.is_free());
        assert_eq!(e.consumer(&[1]), None, "it serves the unpinned one too");
        assert_eq!(e.cpus(), [0, 1, 2, 3]);
    }

    #[test]
    fn consumers_on_several_cpus_give_their_union() {
        let mut e = Follow::new(vec![0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(e.consumer(&[5]), Some(vec![5]));
        assert_eq!(e.consumer(&[2, 3]), Some(vec![2, 3, 5]));
        assert_eq!(e.consumer(&[3]), None);
        // Covering every allowed CPU one by one frees it as well.
        let mut two = Follow::new(vec![0, 1]);
        assert_eq!(two.consumer(&[1]), Some(vec![1]));
        assert_eq!(two.consumer(&[0]), Some(vec![0, 1]));
    }

    #[test]
    fn cpus_the_engine_may_not_use_are_ignored() {
        // The device was opened by a thread restricted to CPUs 2 and 3.
        let mut e = Follow::new(vec![2, 3]);
        assert_eq!(e.consumer(&[0]), None, "a consumer on none of them");
        assert_eq!(e.consumer(&[0, 1, 3]), Some(vec![3]));
        assert_eq!(e.consumer(&[0, 1, 2, 3]), Some(vec![2, 3]));
    }

    #[test]
    fn a_sleeping_consumer_frees_the_engine_for_good() {
        let mut e = Follow::new(vec![0, 1]);
        assert_eq!(e.consumer(&[1]), Some(vec![1]));
        assert_eq!(e.sleeper(), Some(vec![0, 1]));
        assert_eq!(e.sleeper(), None);
        assert_eq!(e.consumer(&[1]), None, "free for good");
        let mut fresh = Follow::new(vec![0, 1]);
        assert_eq!(fresh.sleeper(), None, "already free");
        assert_eq!(fresh.consumer(&[0]), None);
        assert_eq!(fresh.cpus(), [0, 1]);
    }

    #[test]
    fn one_cpu_machine() {
        let mut e = Follow::new(vec![0]);
        assert_eq!(e.consumer(&[0]), None, "already there");
        assert_eq!(e.cpus(), [0]);
    }
}
