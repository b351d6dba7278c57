//! The backlog of a device's stack: packets a sender on the simulated network handed
//! over while another thread held the stack. The holder takes them before it lets go,
//! as Linux's `release_sock` runs a socket's backlog, instead of leaving them to the
//! stack thread's wake-up (on 2 vCPUs with both busy-polling threads pinned, that
//! wake-up was the round trip); and a holder that promises so ([`Taking`]: a QP's
//! reads and sends, the stack thread's own turn) gets no wake-up written at all.

use super::stack::{Inner, UserStack};
use crate::engine::now;
use std::io;
use std::sync::MutexGuard;
use std::sync::atomic::Ordering;

/// Rounds of the backlog a holder takes before it leaves the rest to the stack thread.
/// Almost every release takes 0 or 1 (session 12's count over a 4 s lossy run: about
/// 400 took 7 or more).
pub(super) const MAX_ROUNDS: usize = 8;

impl UserStack {
    /// Locks the stack for a call that takes what is handed over meanwhile before it
    /// lets go, so that the hand-over wakes no thread.
    pub(crate) fn lock_taking(&self) -> io::Result<Taking<'_>> {
        let g = self.lock()?;
        self.taker.store(true, Ordering::SeqCst);
        Ok(Taking { stack: self, g })
    }

    /// Takes the backlog until none is left or [`MAX_ROUNDS`] have passed, and stops
    /// promising to. A hand-over either sets `backlog` before the last look here, or
    /// finds `taker` false and wakes the stack thread (all sequentially consistent).
    pub(super) fn release(&self, g: &mut Inner) {
        self.release_with(g, |s, g| s.take_backlog(g));
    }

    /// [`Self::release`] with the taking of one round given (a test counts the rounds
    /// and hands over more in each). Returns the rounds taken.
    pub(super) fn release_with(
        &self,
        g: &mut Inner,
        mut take: impl FnMut(&Self, &mut Inner),
    ) -> usize {
        let mut rounds = 0;
        loop {
            take(self, g);
            rounds += 1;
            self.taker.store(false, Ordering::SeqCst);
            if !self.backlog.load(Ordering::SeqCst) {
                return rounds;
            }
            if rounds == MAX_ROUNDS {
                // A peer that keeps handing over must not keep this thread (a QP's,
                // or the stack thread serving every peer): the rest is the stack
                // thread's, whose pump takes all the link holds.
                let _ = self.wake.set();
                return rounds;
            }
            self.taker.store(true, Ordering::SeqCst);
        }
    }

    /// Takes the packets handed over while this thread held the stack (the peer's
    /// answers to what it just sent, most often), and what they make due.
    pub(super) fn take_backlog(&self, g: &mut Inner) {
        let mut pumped = false;
        let mut notify = false;
        while self.backlog.swap(false, Ordering::SeqCst) {
            pumped = true;
            notify |= g.pump(now());
        }
        if notify {
            self.cv.notify_all();
        }
        // What the packets made due may come before the stack thread's planned wake.
        if pumped {
            let next = g.next_wake();
            self.plan(g, next);
        }
    }
}

/// The stack locked by a call that takes the backlog before it lets go
/// ([`UserStack::lock_taking`]).
pub(crate) struct Taking<'a> {
    stack: &'a UserStack,
    g: MutexGuard<'a, Inner>,
}

impl std::ops::Deref for Taking<'_> {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.g
    }
}

impl std::ops::DerefMut for Taking<'_> {
    fn deref_mut(&mut self) -> &mut Inner {
        &mut self.g
    }
}

impl Drop for Taking<'_> {
    fn drop(&mut self) {
        self.stack.release(&mut self.g);
    }
}
