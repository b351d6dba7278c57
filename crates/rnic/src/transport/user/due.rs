//! Timed work of a device's own TCP (its timers, packets the simulated network held
//! back) and who does it: a thread that polls a connection when it finds the work
//! due ([`UserStack::serve_due`]), else the stack thread, on its timer descriptor,
//! which whoever plans an earlier deadline arms from its own thread
//! ([`UserStack::plan`]), without waking the stack thread to do it.

use super::stack::{Inner, UserStack, nanos};
use crate::engine::now;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How long the stack thread sleeps when nothing is planned (its timer must not stay
/// armed for a deadline that went away; a wake-up this rare costs nothing).
const IDLE: Duration = Duration::from_secs(3600);

/// How late the stack thread may wake for a deadline planned nearer than this: the
/// threads that poll do such work on time ([`UserStack::serve_due`]); the stack thread
/// is the fallback for a program that sleeps. Waking it for each loss probe planned
/// two sub-microsecond round trips ahead (a `timerfd_settime` per send, then a wake-up
/// that takes a CPU and the stack's lock from the two polling threads on 2 CPUs) cost
/// the clean simulated run about a fifth of its rate. Linux gives a thread's timers
/// 50 us of slack by default (`timerslack_ns`) for the same reason.
pub(super) const TIMER_SLACK: Duration = Duration::from_micros(50);

/// When the stack thread's timer is armed for a deadline `at` planned at `now`.
pub(super) fn timer_wake(at: Duration, now: Duration) -> Duration {
    at.max(now + TIMER_SLACK)
}

impl UserStack {
    /// For a thread that polls a connection of this stack anyway (a QP's consumer, or
    /// its engine on an event): does the work that has fallen due, this stack's timers
    /// (RACK's reordering timer, a loss probe) and the packets the simulated network
    /// held back (for any stack on it), in this thread, as a sender's thread hands
    /// over the packets due at once. The stack thread, which would do it otherwise,
    /// must first be woken and find a CPU, which on 2 CPUs with both ends polling is
    /// one of theirs, tens of microseconds later, while the sender may wait for the
    /// window that work reopens. It stays the fallback for a program that sleeps.
    /// Costs two atomic loads (and a clock read while a timer runs) when nothing is
    /// due. Call it without this stack's lock held.
    pub(crate) fn serve_due(&self) {
        let own = self.due.load(Ordering::SeqCst);
        let held = self.sim.as_ref().is_some_and(|n| n.holds());
        if own == u64::MAX && !held {
            return;
        }
        let t = now();
        if own <= nanos(t) && self.try_pump_due() {
            self.polled_pumps.fetch_add(1, Ordering::Relaxed);
        }
        if held && let Some(net) = &self.sim {
            let served = net.deliver_due(t);
            self.polled_pumps
                .fetch_add(served as u64, Ordering::Relaxed);
        }
    }

    /// Pumps the stack if nobody holds it: true if it did. What the pump's packets
    /// bring back meanwhile (the peer's answer to a probe) is taken before it lets go.
    fn try_pump_due(&self) -> bool {
        let Ok(mut g) = self.inner.try_lock() else {
            return false;
        };
        self.taker.store(true, Ordering::SeqCst);
        self.backlog.store(false, Ordering::SeqCst);
        if g.pump(now()) {
            self.cv.notify_all();
        }
        let next = g.next_wake();
        self.plan(&mut g, next);
        self.release(&mut g);
        true
    }

    /// Plans the stack thread's next wake at `next` if that comes before what it
    /// planned: arms its timer from this thread (under the stack's lock, as everyone
    /// who plans), instead of waking the thread so that it re-plans. Before, each
    /// packet the network held back and each send that started a timer woke the stack
    /// thread once to plan and once more when the time came.
    pub(crate) fn plan(&self, g: &mut Inner, next: Option<Duration>) {
        #[cfg(test)]
        if let Some(f) = self.on_plan.lock().ok().and_then(|mut f| f.take()) {
            f();
        }
        let Some(at) = next else {
            // Armed once per stack-thread turn: a stack with no timer running (a
            // receiver's, most of a clean run) plans nothing on each packet it takes.
            if g.planned.is_none() {
                g.planned = Some(now() + IDLE);
                let _ = self.timer.arm(IDLE);
            }
            return;
        };
        let t = now();
        let at = timer_wake(at, t);
        if g.planned.is_some_and(|p| p <= at) {
            return;
        }
        g.planned = Some(at);
        if self.timer.arm(at.saturating_sub(t)).is_err() {
            // The thread re-plans itself when woken.
            let _ = self.wake.set();
        }
    }
}
