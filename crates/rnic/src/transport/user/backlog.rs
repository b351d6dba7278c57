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

impl UserStack {
    /// Locks the stack for a call that takes what is handed over meanwhile before it
    /// lets go, so that the hand-over wakes no thread.
    pub(crate) fn lock_taking(&self) -> io::Result<Taking<'_>> {
        let g = self.lock()?;
        self.taker.store(true, Ordering::SeqCst);
        Ok(Taking { stack: self, g })
    }

    /// Takes the backlog until none is left, and stops promising to. A hand-over
    /// either sets `backlog` before the last look here, or finds `taker` false and
    /// wakes the stack thread (all sequentially consistent).
    pub(super) fn release(&self, g: &mut Inner) {
        loop {
            self.take_backlog(g);
            self.taker.store(false, Ordering::SeqCst);
            if !self.backlog.load(Ordering::SeqCst) {
                break;
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
        if pumped
            && let Some(next) = g.next_wake()
            && g.planned.is_none_or(|p| next < p)
        {
            g.planned = Some(next);
            let _ = self.wake.set();
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
