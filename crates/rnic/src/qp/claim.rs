//! Who drives a QP's socket: a polling consumer's drives, the claim of the socket from
//! the engine and its release ([`crate::handoff`] decides when), and the engine's
//! readiness events and timers, which skip a socket that is no longer theirs.

use super::{QpInner, QpShared};
use crate::cq_direct::Direct;
use crate::device::Shared;
use crate::handoff::Action;
use crate::receive::Quick;
use softrnic_proto::QpState;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::progress::Pass;

impl QpShared {
    /// A polling consumer's drive (`ready`: it has driven often enough to claim the
    /// socket, see [`crate::handoff`]): progress if nobody else is; whether anything
    /// moved, or `None` if another thread holds the QP's lock (the consumer should then
    /// give that thread its CPU rather than spin: see `Cq::poll`).
    ///
    /// With `engine_reads` (a CQ with many QPs, see `cq::CONSUMER_READS_MAX_QPS`), the
    /// engine keeps the socket and reads it: the consumer only sends what is queued,
    /// and gives back a socket it had claimed.
    ///
    /// With `to` (the poll of a CQ whose only QP this is), a completion the claimed
    /// pass releases for that CQ may go straight to the poll's caller
    /// (`crate::cq_direct`).
    pub(crate) fn consumer_progress(
        self: &Arc<Self>,
        ready: bool,
        engine_reads: bool,
        to: Option<&mut Direct<'_>>,
    ) -> Option<bool> {
        crate::chaos::point();
        let Ok(mut g) = self.inner.try_lock() else {
            return None;
        };
        // The general drive, unless the quiet mark (`QpInner::quiet_claimed`) is set:
        // only consumers' drives have held the lock since one found the QP claimed,
        // working and quiet, so the answers its checks gave stand. The general drive
        // of such a QP sets the mark and leaves it the claimed read.
        let marked = g.quiet_claimed && !engine_reads;
        if !marked {
            let Some(dev) = self.pass_dev(&mut g) else {
                return Some(false);
            };
            let done = self.consumer_pass(&mut g, &dev, ready, engine_reads);
            let spare = self.end_pass(&mut g, dev);
            if let Some(moved) = done {
                // The lock first: the device must never be dropped under it.
                drop(g);
                drop(spare);
                return Some(moved);
            }
        } else {
            g.marked_drive();
        }
        // The claimed read, with the device the claim keeps borrowed. An empty read
        // leaves everything as it was, the mark too.
        let mut to = to;
        let quick = self.quiet_read(&mut g, marked, to.as_deref_mut());
        if quick == Some(Quick::Empty) {
            return Some(false);
        }
        g.quiet_claimed = false;
        if quick == Some(Quick::Simple) && self.simple_read_done(&g) {
            // A Write placed, or a Send whose completion went to the caller: the rest
            // of the drive (device out and back, delivery, release) has nothing to do.
            return Some(true);
        }
        let Some(dev) = self.pass_dev(&mut g) else {
            return Some(false);
        };
        let moved = self.after_claimed_read(&mut g, &dev, quick.unwrap_or(Quick::General), to);
        self.release_unless_rts(&mut g, &dev);
        let spare = self.end_pass(&mut g, dev);
        // The lock first: the device must never be dropped under it.
        drop(g);
        drop(spare);
        Some(moved)
    }

    /// The device for a pass under the QP's lock: the one held while the socket is
    /// claimed (moved out: no reference count touched), or the weak reference upgraded.
    /// Hand it to [`QpShared::end_pass`] afterwards.
    pub(super) fn pass_dev(&self, g: &mut QpInner) -> Option<Arc<Shared>> {
        g.claimed_dev.take().or_else(|| self.dev.upgrade())
    }

    /// Keeps the device of a pass while a consumer holds the socket; otherwise returns
    /// it, to be dropped once the QP's lock is released (it may be the last reference,
    /// and dropping a device stops its engines, which may be waiting for this lock).
    pub(super) fn end_pass(&self, g: &mut QpInner, dev: Arc<Shared>) -> Option<Arc<Shared>> {
        if g.owner.is_claimed() && g.claimed_dev.is_none() {
            g.claimed_dev = Some(dev);
            None
        } else {
            Some(dev)
        }
    }

    /// [`QpShared::consumer_progress`]'s general drive, under the lock: whether
    /// anything moved, or `None` when the QP is claimed, in RTS and quiet, with no
    /// close timer and no close under way: the quiet mark is then set and the claimed
    /// read (`receive::receive_claimed`) is the caller's to make.
    fn consumer_pass(
        self: &Arc<Self>,
        g: &mut QpInner,
        dev: &Shared,
        ready: bool,
        engine_reads: bool,
    ) -> Option<bool> {
        if engine_reads {
            if g.owner.is_claimed() {
                self.release(g, dev);
            }
            let queued =
                g.core.send_queue_len() > 0 || g.conn.as_ref().is_some_and(|c| !c.tx.is_flushed());
            return Some(
                queued
                    && !self.waits_for_room(g, Pass::TransmitOnly)
                    && self.progress_pass(g, dev, Pass::TransmitOnly),
            );
        }
        if let Action::Claim(at) = g.owner.on_consumer_drive(ready, crate::engine::now) {
            self.claim(g, dev, at);
        }
        // Every posted request is out and nothing is queued: only the receive path
        // can make something to send (a Read Response, a Terminate), and it is
        // followed by a transmit pass. (A busy-polling consumer's pass then costs
        // one `read(2)` and no transmit bookkeeping.)
        let quiet =
            g.core.send_queue_len() == 0 && g.conn.as_ref().is_some_and(|c| c.tx.is_flushed());
        let moved = if !quiet {
            self.progress_pass(g, dev, Pass::Full)
        } else if g.owner.is_claimed() && self.claimed_read_applies(g) {
            // The socket is this consumer's: a small message's receive in one pass.
            g.mark_quiet();
            return None;
        } else {
            // (A claimed QP with a close timer or a close under way, or out of RTS:
            // the outcome the claimed pass would have.)
            self.progress_pass(g, dev, Pass::ReceiveFirst)
        };
        self.release_unless_rts(g, dev);
        Some(moved)
    }

    /// A claimed QP that left RTS (closing or failed) goes back to the engine, which
    /// sees it through.
    #[inline]
    fn release_unless_rts(self: &Arc<Self>, g: &mut QpInner, dev: &Shared) {
        if g.owner.is_claimed() && g.core.state() != QpState::Rts {
            self.release(g, dev);
        }
    }

    /// The consumer of one of the QP's CQs is going to sleep on its events: the engine
    /// takes the socket back.
    pub(crate) fn consumer_sleeps(self: &Arc<Self>, dev: &Shared) {
        if !self.claimed.load(Ordering::Acquire) {
            return;
        }
        if let Ok(mut g) = self.lock()
            && g.owner.on_arm() == Action::Release
        {
            self.release(&mut g, dev);
            self.progress_locked(&mut g, dev);
        }
    }

    /// Engine `engine` saw the socket ready: progress (calling `count` first), unless
    /// the socket is no longer that engine's: the event was fetched before a polling
    /// consumer claimed it or before the QP moved to another engine. Checked again under
    /// the lock, since either may happen between the fetch and the lock; the new owner
    /// drives the QP (a socket added to an epoll set is reported at once if ready).
    /// `ends`: the event carried an end of stream or an error, so this pass reads
    /// until the socket says so, past a short read. Returns whether the pass moved
    /// something while the stream carries large FPDUs: the engine then drives the QP
    /// again without waiting for an event (`engine::HOT_DRIVES`).
    pub(crate) fn on_ready(
        &self,
        dev: &Shared,
        engine: usize,
        ends: bool,
        count: impl FnOnce(),
    ) -> bool {
        if self.claimed.load(Ordering::Acquire) {
            return false;
        }
        crate::chaos::point();
        if let Ok(mut g) = self.lock()
            && !g.owner.is_claimed()
            && self.engine() == engine
        {
            count();
            if let Some(conn) = g.conn.as_mut() {
                conn.transport.event_ends(ends);
            }
            return self.progress_locked(&mut g, dev) && g.staging.streams_large();
        }
        false
    }

    /// One of the QP's timers fired at engine `engine`: the close timer (progress sees
    /// the time), or the lease of a polling consumer's claim, extended while it polls
    /// and ended once it has stopped. `count` is called first, unless the QP has moved
    /// to another engine since the timer was taken (the move armed its timers there).
    pub(crate) fn on_timer(self: &Arc<Self>, dev: &Shared, engine: usize, count: impl FnOnce()) {
        let Ok(mut g) = self.lock() else {
            return;
        };
        if self.engine() != engine {
            return;
        }
        count();
        if g.owner.is_claimed() {
            let polls = self.polls();
            match g.owner.on_timer(crate::engine::now(), polls) {
                Action::Extend(at) => {
                    g.owner.extended(at, polls);
                    if let Some(e) = dev.engines.get(self.engine()) {
                        e.arm_timer(at, self.id);
                    }
                    return;
                }
                Action::Release => {
                    // The consumer stopped polling: it drives as many times again
                    // before it claims.
                    self.send_cq.polls().reset_drives();
                    self.recv_cq.polls().reset_drives();
                    self.release(&mut g, dev);
                }
                Action::Claim(_) | Action::Keep => return,
            }
        }
        self.progress_locked(&mut g, dev);
    }

    /// Whether a polling consumer holds the socket, and whether the QP holds its
    /// device (as it does only while claimed), read together under the lock.
    #[cfg(test)]
    pub(crate) fn claim_state(&self) -> (bool, bool) {
        self.lock().map_or((false, false), |g| {
            (g.owner.is_claimed(), g.claimed_dev.is_some())
        })
    }

    /// Neither of the QP's CQs is armed.
    fn cqs_disarmed(&self) -> bool {
        self.send_cq.disarmed() && self.recv_cq.disarmed()
    }

    /// The polls of the QP's CQs so far.
    fn polls(&self) -> u64 {
        let s = self.send_cq.polls().polls();
        if Arc::ptr_eq(&self.send_cq, &self.recv_cq) {
            s
        } else {
            s.wrapping_add(self.recv_cq.polls().polls())
        }
    }

    /// Gives the socket to the polling consumer: out of the engine's epoll set, with a
    /// lease the engine checks at `lease_at`. Only while connected (the engine sees a
    /// close through).
    ///
    /// Never while one of the QP's CQs is armed: a claimed QP's completions do not look
    /// at the arm (`CqShared::push_run`). An arm that races with the claim is seen after
    /// it (the fence pairs with `Cq::req_notify`'s), and the claim given up.
    fn claim(self: &Arc<Self>, g: &mut QpInner, dev: &Shared, lease_at: Duration) {
        if g.core.state() != QpState::Rts || g.core.transport_closed() || !self.cqs_disarmed() {
            return;
        }
        let (Some(conn), Some(e)) = (g.conn.as_mut(), dev.engines.get(self.engine())) else {
            return;
        };
        if e.pause(&mut *conn.transport).is_err() {
            return;
        }
        g.owner.claimed(lease_at, self.polls());
        self.claimed.store(true, Ordering::Release);
        crate::chaos::point();
        std::sync::atomic::fence(Ordering::SeqCst);
        if !self.cqs_disarmed() {
            self.release(g, dev);
            return;
        }
        e.arm_timer(lease_at, self.id);
        // The consumer reads and sends on every poll while it holds the socket: the
        // staging and gather buffers stay with the QP until it is released, instead of
        // going to the thread's pool and back on every pass (about 50 instructions of
        // each empty poll, and of each message's path).
        g.staging.keep = true;
        if let Some(conn) = g.conn.as_mut() {
            conn.tx.keep = true;
        }
    }

    /// Gives the socket back to the engine: into its epoll set again, which reports it
    /// at once if it is ready.
    pub(super) fn release(self: &Arc<Self>, g: &mut QpInner, dev: &Shared) {
        g.owner.released();
        g.quiet_claimed = false;
        // Never the last reference: the caller's `dev` is another.
        drop(g.claimed_dev.take());
        self.claimed.store(false, Ordering::Release);
        crate::chaos::point();
        // The buffers the claim kept go back to the pool once drained, as after any
        // pass of an unclaimed QP.
        g.staging.keep = false;
        g.staging.release_if_drained(&g.core);
        if let Some(conn) = g.conn.as_mut() {
            conn.tx.keep = false;
            conn.tx.release_if_sent();
        }
        if let (Some(conn), Some(e)) = (g.conn.as_mut(), dev.engines.get(self.engine()))
            && !g.core.transport_closed()
        {
            // If this fails the QP has no engine; the program's own polls still drive
            // it, and its close ends it.
            let _ = e.resume(&mut *conn.transport, self);
        }
    }
}
