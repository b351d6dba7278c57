//! Queue pairs: the verbs (`post_send`, `post_recv`, disconnect, abort) and progress
//! control. The protocol decisions are `softrnic_proto::qp::Qp`'s; the I/O is in the
//! crate's private modules `receive` (the stream read, staging and the copy policy:
//! payload is copied out of a read-ahead or read straight into registered memory, see
//! [`RX_DIRECT_MIN`]), `transmit` (small FPDUs gathered into a buffer, see
//! [`TX_GATHER_MAX`]; large ones sent from registered memory) and `close` (FIN, RST,
//! end of stream). Raw system calls are in `sys`; the
//! stream itself is a `transport::Transport` (kernel TCP, or a wrapper around it).
//!
//! Whoever holds a QP's lock drives it until the socket would block: the engine thread
//! on readiness events, the posting thread for transmission, and, in hybrid progress
//! mode, a thread polling the QP's CQ. A thread that keeps polling claims the socket
//! from the engine for as long as it polls ([`crate::handoff`]).

use crate::close::{close_if_done, drop_conn};
use crate::cq::{Cq, CqShared};
use crate::device::{AsyncEvent, Shared};
use crate::error::{Error, Result};
use crate::handoff::{Action, Owner};
use crate::receive::{Staging, feed, receive};
use crate::srq::SrqShared;
use crate::transmit::{TxQueue, post_gathered, transmit};
use crate::transport::Transport;
use crate::transport::fault::FaultTransport;
use crate::transport::pcap::{ConnRecorder, PcapTransport};
use crate::transport::polled::PolledTransport;
use crate::transport::stream::ConnStream;
use softrnic_proto::qp::{CqSide, QpConfig, QpEvent, QpParams};
use softrnic_proto::{Completion, PdId, QpId, QpState, RecvWr, SendWr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

pub use crate::receive::{RX_DIRECT_MIN, RX_STAGING_LEN};
pub use crate::transmit::TX_GATHER_MAX;

/// QP creation attributes.
pub struct QpInit<'a> {
    /// CQ for send-queue completions.
    pub send_cq: &'a Cq,
    /// CQ for receive completions.
    pub recv_cq: &'a Cq,
    /// Send queue depth.
    pub sq_depth: usize,
    /// Receive queue depth.
    pub rq_depth: usize,
}

impl<'a> QpInit<'a> {
    /// Send and receive completions both go to `cq`.
    pub fn new(cq: &'a Cq, sq_depth: usize, rq_depth: usize) -> Self {
        QpInit::with_cqs(cq, cq, sq_depth, rq_depth)
    }

    /// Send completions go to `send_cq`, receive completions to `recv_cq`.
    pub fn with_cqs(send_cq: &'a Cq, recv_cq: &'a Cq, sq_depth: usize, rq_depth: usize) -> Self {
        QpInit {
            send_cq,
            recv_cq,
            sq_depth,
            rq_depth,
        }
    }
}

/// Statistics of one QP's I/O.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QpStats {
    /// Payload octets read from the socket straight into registered memory.
    pub rx_direct_bytes: u64,
    /// Payload octets copied in user space: those that came in with a read-ahead (see
    /// [`RX_DIRECT_MIN`]), and those that arrived together with the MPA frame during
    /// connection setup.
    pub rx_copied_bytes: u64,
    /// `read` calls on the socket.
    pub rx_syscalls: u64,
    /// `sendmsg` calls on the socket.
    pub tx_syscalls: u64,
    /// FPDUs sent.
    pub tx_fpdus: u64,
}

/// A QP's connection: the stream and what is queued for it. (How far closing went is
/// the core's close machine's.)
pub(crate) struct Conn {
    pub(crate) transport: Box<dyn Transport>,
    pub(crate) tx: TxQueue,
}

pub(crate) struct QpInner {
    pub(crate) core: softrnic_proto::qp::Qp,
    pub(crate) conn: Option<Conn>,
    stats: QpStats,
    staging: Staging,
    /// The close-timer deadline the engine was last asked to wake the QP at.
    timer_armed: Option<Duration>,
    /// The SRQ has been told that this QP went to error.
    srq_flushed: bool,
    /// Who drives the socket: the engine, or a polling consumer.
    owner: Owner,
    /// The device, held while a polling consumer holds the socket: its passes (a poll
    /// that drives, a post) move it out and back instead of upgrading the QP's weak
    /// reference (two atomic read-modify-writes, about 35 ns here, on every empty poll
    /// and on every post). Dropped when the socket goes back to the engine, so a QP
    /// keeps its device alive only while a consumer is polling it.
    claimed_dev: Option<Arc<Shared>>,
    /// The state last reported to tracing.
    traced_state: QpState,
}

pub(crate) struct QpShared {
    pub(crate) id: QpId,
    pub(crate) pd: PdId,
    dev: Weak<Shared>,
    send_cq: Arc<CqShared>,
    recv_cq: Arc<CqShared>,
    /// The shared receive queue its receive buffers come from, if any.
    pub(crate) srq: Option<Arc<SrqShared>>,
    pub(crate) inner: Mutex<QpInner>,
    /// The engine serving the socket: chosen when the connection is attached, by the
    /// receive CQ's vector, and changed (under the QP lock) when that CQ moves.
    engine: AtomicUsize,
    /// A polling consumer holds the socket (`owner.is_claimed()`, readable without the
    /// lock, so the engine skips stale readiness events; shared with the transport,
    /// which then skips empty reads, see `transport::polled`).
    claimed: Arc<AtomicBool>,
}

impl QpShared {
    pub(crate) fn new(
        id: QpId,
        pd: PdId,
        dev: &Arc<Shared>,
        init: QpInit<'_>,
        srq: Option<Arc<SrqShared>>,
    ) -> Result<QpShared> {
        let rq_ok = srq.is_some() || (1..=16384).contains(&init.rq_depth);
        if init.sq_depth == 0 || init.sq_depth > 16384 || !rq_ok {
            return Err(Error::InvalidArgument("queue depth must be 1..=16384"));
        }
        for cq in [init.send_cq, init.recv_cq] {
            if !cq.shared.belongs_to(dev) {
                return Err(Error::InvalidArgument("CQ of another device"));
            }
        }
        let cfg = QpConfig {
            id,
            pd,
            sq_depth: init.sq_depth,
            rq_depth: init.rq_depth,
        };
        let core = match srq {
            Some(_) => softrnic_proto::qp::Qp::new_on_srq(cfg),
            None => softrnic_proto::qp::Qp::new(cfg),
        };
        Ok(QpShared {
            id,
            pd,
            dev: Arc::downgrade(dev),
            send_cq: init.send_cq.shared.clone(),
            recv_cq: init.recv_cq.shared.clone(),
            srq,
            inner: Mutex::new(QpInner {
                core,
                conn: None,
                stats: QpStats::default(),
                staging: Staging::default(),
                timer_armed: None,
                srq_flushed: false,
                owner: Owner::new(),
                claimed_dev: None,
                traced_state: QpState::Idle,
            }),
            engine: AtomicUsize::new(0),
            claimed: Arc::new(AtomicBool::new(false)),
        })
    }

    pub(crate) fn recv_cq(&self) -> &Arc<CqShared> {
        &self.recv_cq
    }

    /// The engine serving the QP's socket.
    pub(crate) fn engine(&self) -> usize {
        self.engine.load(Ordering::Relaxed)
    }

    /// Moves the QP's socket to engine `to` (its receive CQ moved to a handler on
    /// another CPU). Under the QP lock: the old engine forgets the socket, the new one
    /// registers it (epoll reports a socket that is ready at registration, so nothing
    /// that arrived in between is missed), and the QP is driven once. An event or a
    /// timer the old engine already fetched is skipped ([`QpShared::on_ready`]), and
    /// its later timers find the QP gone from its map.
    pub(crate) fn move_to_engine(self: &Arc<Self>, dev: &Shared, to: usize) -> Result<()> {
        let mut g = self.lock()?;
        let from = self.engine();
        if from == to {
            return Ok(());
        }
        if g.conn.is_none() {
            // Not attached: attach chooses by the CQ's vector then.
            self.engine.store(to, Ordering::Relaxed);
            return Ok(());
        }
        if g.core.transport_closed() {
            // Closing for good: it stays with the engine it has, which deregisters it.
            return Ok(());
        }
        let (Some(old), Some(new)) = (dev.engines.get(from), dev.engines.get(to)) else {
            return Err(Error::Internal("no such engine"));
        };
        if g.owner.is_claimed() {
            // A polling consumer holds the socket: the new engine only learns the QP
            // and keeps its lease (the socket joins its epoll set when handed back).
            if let Some(conn) = g.conn.as_mut() {
                old.deregister(&mut *conn.transport, self.id);
            }
            new.adopt(self);
            self.engine.store(to, Ordering::Relaxed);
            g.timer_armed = None;
            let at = g.owner.lease_at().unwrap_or_else(crate::engine::now);
            new.arm_timer(at, self.id);
            return Ok(());
        }
        let Some(conn) = g.conn.as_mut() else {
            return Ok(());
        };
        old.deregister(&mut *conn.transport, self.id);
        if let Err(e) = new.register(&mut *conn.transport, self) {
            // Stay where it was rather than with no engine at all.
            old.register(&mut *conn.transport, self)?;
            return Err(e);
        }
        self.engine.store(to, Ordering::Relaxed);
        // The old engine's timer for this QP finds it gone from its map; the new engine
        // is asked for the close timer afresh by this drive.
        g.timer_armed = None;
        self.progress_locked(&mut g, dev);
        Ok(())
    }

    pub(crate) fn lock(&self) -> Result<std::sync::MutexGuard<'_, QpInner>> {
        Ok(self.inner.lock()?)
    }

    /// A polling consumer's drive (`ready`: it has driven often enough to claim the
    /// socket, see [`crate::handoff`]): progress if nobody else is; true if anything
    /// moved.
    ///
    /// With `engine_reads` (a CQ with many QPs, see `cq::CONSUMER_READS_MAX_QPS`), the
    /// engine keeps the socket and reads it: the consumer only sends what is queued,
    /// and gives back a socket it had claimed.
    pub(crate) fn consumer_progress(self: &Arc<Self>, ready: bool, engine_reads: bool) -> bool {
        let Ok(mut g) = self.inner.try_lock() else {
            return false;
        };
        let Some(dev) = self.pass_dev(&mut g) else {
            return false;
        };
        let moved = self.consumer_pass(&mut g, &dev, ready, engine_reads);
        let spare = self.end_pass(&mut g, dev);
        // The lock first: the device must never be dropped under it.
        drop(g);
        drop(spare);
        moved
    }

    /// The device for a pass under the QP's lock: the one held while the socket is
    /// claimed (moved out: no reference count touched), or the weak reference upgraded.
    /// Hand it to [`QpShared::end_pass`] afterwards.
    fn pass_dev(&self, g: &mut QpInner) -> Option<Arc<Shared>> {
        g.claimed_dev.take().or_else(|| self.dev.upgrade())
    }

    /// Keeps the device of a pass while a consumer holds the socket; otherwise returns
    /// it, to be dropped once the QP's lock is released (it may be the last reference,
    /// and dropping a device stops its engines, which may be waiting for this lock).
    fn end_pass(&self, g: &mut QpInner, dev: Arc<Shared>) -> Option<Arc<Shared>> {
        if g.owner.is_claimed() && g.claimed_dev.is_none() {
            g.claimed_dev = Some(dev);
            None
        } else {
            Some(dev)
        }
    }

    /// [`QpShared::consumer_progress`] under the lock.
    fn consumer_pass(
        self: &Arc<Self>,
        g: &mut QpInner,
        dev: &Shared,
        ready: bool,
        engine_reads: bool,
    ) -> bool {
        if engine_reads {
            if g.owner.is_claimed() {
                self.release(g, dev);
            }
            let queued =
                g.core.send_queue_len() > 0 || g.conn.as_ref().is_some_and(|c| !c.tx.is_flushed());
            return queued
                && !self.waits_for_room(g, Pass::TransmitOnly)
                && self.progress_pass(g, dev, Pass::TransmitOnly);
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
        let pass = if quiet {
            Pass::ReceiveFirst
        } else {
            Pass::Full
        };
        let moved = self.progress_pass(g, dev, pass);
        if g.owner.is_claimed() && g.core.state() != QpState::Rts {
            // Closing or failed: the engine sees it through.
            self.release(g, dev);
        }
        moved
    }

    /// The consumer of one of the QP's CQs is going to sleep on its events: the engine
    /// takes the socket back.
    pub(crate) fn consumer_sleeps(self: &Arc<Self>, dev: &Shared) {
        if !self.claimed.load(Ordering::Acquire) {
            return;
        }
        if let Ok(mut g) = self.inner.lock()
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
    pub(crate) fn on_ready(&self, dev: &Shared, engine: usize, count: impl FnOnce()) {
        if self.claimed.load(Ordering::Acquire) {
            return;
        }
        if let Ok(mut g) = self.inner.lock()
            && !g.owner.is_claimed()
            && self.engine() == engine
        {
            count();
            self.progress_locked(&mut g, dev);
        }
    }

    /// One of the QP's timers fired at engine `engine`: the close timer (progress sees
    /// the time), or the lease of a polling consumer's claim, extended while it polls
    /// and ended once it has stopped. `count` is called first, unless the QP has moved
    /// to another engine since the timer was taken (the move armed its timers there).
    pub(crate) fn on_timer(self: &Arc<Self>, dev: &Shared, engine: usize, count: impl FnOnce()) {
        let Ok(mut g) = self.inner.lock() else {
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
    fn claim(&self, g: &mut QpInner, dev: &Shared, lease_at: Duration) {
        if g.core.state() != QpState::Rts || g.core.transport_closed() {
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
    fn release(self: &Arc<Self>, g: &mut QpInner, dev: &Shared) {
        g.owner.released();
        // Never the last reference: the caller's `dev` is another.
        drop(g.claimed_dev.take());
        self.claimed.store(false, Ordering::Release);
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

    /// Progress, waiting for the lock.
    pub(crate) fn progress(&self, dev: &Shared) {
        if let Ok(mut g) = self.inner.lock() {
            self.progress_locked(&mut g, dev);
        }
    }

    /// Drives receive and transmit until the socket would block, then delivers
    /// completions and events. Returns whether anything moved.
    ///
    /// [`AsyncEvent::Disconnected`] is posted only after every completion the QP has
    /// produced (the flushes included) is in its CQ, so a consumer that sees it can
    /// poll the CQ once and find everything.
    pub(crate) fn progress_locked(&self, g: &mut QpInner, dev: &Shared) -> bool {
        self.progress_pass(g, dev, Pass::Full)
    }

    /// [`QpShared::progress_locked`], with the parts `pass` leaves out skipped.
    fn progress_pass(&self, g: &mut QpInner, dev: &Shared, pass: Pass) -> bool {
        let mut moved = false;
        let mut disconnected = false;
        let timer = fire_close_timer(g);
        if g.conn.is_some() {
            // Transmit first: a request just posted leaves before the receive path's
            // read (often an empty one) is paid; what the receive path queues (Read
            // Responses, Terminates) goes out in the second pass.
            if pass != Pass::ReceiveFirst && !self.waits_for_room(g, pass) {
                moved |= self.transmit(g, dev);
            }
            if pass != Pass::TransmitOnly && self.receive(g, dev) {
                moved = true;
                // Only if the receive path queued something (a Read Response, a
                // Terminate) or octets wait: after a Write or a Send arrives there is
                // nothing, and this pass is on the way to the program's reply.
                let waiting = g.conn.as_ref().is_some_and(|c| !c.tx.is_flushed());
                if g.core.may_transmit() || waiting {
                    self.transmit(g, dev);
                } else if pass == Pass::ReceiveFirst && !timer && self.received_quietly(g) {
                    // A consumer's pass that placed a Write: the reply the program
                    // posts next waits for nothing after the placement.
                    return true;
                }
            } else if pass == Pass::ReceiveFirst && !timer && !g.core.is_closing() {
                // A busy-polling consumer's empty poll: nothing was read, nothing was
                // queued to send, no timer ran, so the core is as the last pass (which
                // delivered) left it. Nothing to close, arm or deliver.
                return false;
            }
            disconnected = g.core.is_closing() && self.close_if_done(g, crate::engine::now(), dev);
            self.arm_timer(g, dev);
        }
        self.deliver(g, dev);
        if disconnected {
            dev.post_event(AsyncEvent::Disconnected { qp: self.id });
        }
        moved
    }

    /// After a receive that queued nothing to send: whether it left the rest of the pass
    /// nothing to do (no completion or event released, the state as last delivered, no
    /// close under way, the timer as armed), as a placed Write does.
    fn received_quietly(&self, g: &QpInner) -> bool {
        !g.core.has_output()
            && g.core.state() == g.traced_state
            && !g.core.is_closing()
            && g.core.poll_timeout() == g.timer_armed
    }

    /// Whether a `pass` that only transmits (after a post, or a many-QP consumer's poll)
    /// leaves the socket alone: it was full at the last send and the engine owns it, so
    /// the engine hears when there is room and sends then. (A socket a polling consumer
    /// has claimed is out of the engine's epoll set: the consumer's passes send.)
    fn waits_for_room(&self, g: &QpInner, pass: Pass) -> bool {
        pass == Pass::TransmitOnly
            && !g.owner.is_claimed()
            && g.conn.as_ref().is_some_and(|c| c.tx.waits_for_room())
    }

    fn receive(&self, g: &mut QpInner, dev: &Shared) -> bool {
        let QpInner {
            core,
            conn,
            stats,
            staging,
            ..
        } = g;
        match conn.as_mut() {
            Some(conn) => receive(
                self.id,
                core,
                conn,
                stats,
                staging,
                dev,
                self.srq.as_deref(),
            ),
            None => false,
        }
    }

    fn transmit(&self, g: &mut QpInner, dev: &Shared) -> bool {
        let QpInner {
            core, conn, stats, ..
        } = g;
        match conn.as_mut() {
            Some(conn) => transmit(self.id, core, conn, stats, dev),
            None => false,
        }
    }

    fn close_if_done(&self, g: &mut QpInner, now: Duration, dev: &Shared) -> bool {
        let QpInner { core, conn, .. } = g;
        close_if_done(core, conn, now, self.engine(), dev)
    }

    /// Asks the QP's engine to drive it when its close timer is due (once per deadline).
    fn arm_timer(&self, g: &mut QpInner, dev: &Shared) {
        let due = g.core.poll_timeout();
        if due != g.timer_armed {
            g.timer_armed = due;
            if let (Some(at), Some(e)) = (due, dev.engines.get(self.engine())) {
                e.arm_timer(at, self.id);
            }
        }
    }

    fn deliver(&self, g: &mut QpInner, dev: &Shared) {
        crate::trace::qp_state(dev.serial, self.id, &mut g.traced_state, g.core.state());
        if let Some(srq) = &self.srq
            && g.core.state() == QpState::Error
            && !std::mem::replace(&mut g.srq_flushed, true)
        {
            // Its bound buffers were flushed to the program: it holds none now.
            srq.flushed(self.id);
        }
        while let Some(e) = g.core.poll_event() {
            if let QpEvent::Fatal { cause, remote } = e {
                dev.post_event(AsyncEvent::QpFatal {
                    qp: self.id,
                    cause,
                    remote,
                });
            }
        }
        // Runs of completions for one CQ go in with one claim of its ring and one look
        // at its arm (`CqShared::push_run`), in the order the core released them.
        g.core
            .drain_completions(|side, run| self.push_run(side, run));
        // Queues a burst grew give their room back once empty.
        g.core.shrink_idle_queues();
    }

    fn push_run(&self, side: CqSide, run: &[Completion]) {
        if run.is_empty() {
            return;
        }
        match side {
            CqSide::Send => self.send_cq.push_run(run),
            CqSide::Recv => self.recv_cq.push_run(run),
        }
    }

    /// Connects the QP to an established MPA stream: parameters, leftover octets that
    /// arrived with the MPA frame, and the socket, handed to the engine (under the
    /// recording of the connection, if there is one, and the device's fault plan).
    pub(crate) fn attach(
        self: &Arc<Self>,
        dev: &Shared,
        stream: Box<dyn ConnStream>,
        params: QpParams,
        leftover: &[u8],
        rec: Option<ConnRecorder>,
    ) -> Result<()> {
        let mut stream = stream;
        if params.markers_tx {
            stream.frames_marked();
        }
        let mut transport: Box<dyn Transport> = Box::new(PolledTransport::new(
            stream.into_transport(dev.cfg.keepalive, &dev.socket_buffers)?,
            self.claimed.clone(),
        ));
        if let Some(rec) = rec {
            // Innermost: the recording shows what really crossed the socket.
            transport = Box::new(PcapTransport::new(transport, rec));
        }
        if let Some(plan) = &dev.cfg.fault {
            transport = Box::new(FaultTransport::new(transport, plan.clone()));
        }
        let mut g = self.lock()?;
        g.core.connect(params)?;
        if !leftover.is_empty() {
            // These octets were read together with the MPA frame.
            let QpInner {
                core,
                stats,
                staging,
                ..
            } = &mut *g;
            // A failed placement leaves the QP in error; the first progress closes it.
            let _ = feed(core, stats, staging, dev, self.srq.as_deref(), leftover);
        }
        let index = dev.engine_for(self.recv_cq.vector());
        let engine = dev
            .engines
            .get(index)
            .ok_or(Error::Internal("no engine for the CQ's vector"))?;
        engine.register(&mut *transport, self)?;
        self.engine.store(index, Ordering::Relaxed);
        g.conn = Some(Conn {
            transport,
            tx: TxQueue::default(),
        });
        dev.post_event(AsyncEvent::Established { qp: self.id });
        self.progress_locked(&mut g, dev);
        Ok(())
    }
}

/// Which parts of a drive of the QP run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// Transmit, receive, transmit what the receive path queued.
    Full,
    /// No first transmit pass: the caller knows there is nothing to send unless the
    /// receive path queues it.
    ReceiveFirst,
    /// Transmit only (after a post).
    TransmitOnly,
}

/// Fires the close timer if one runs. The clock is read only for a QP that has a timer
/// (or, in the callers, is closing): a QP moving data has neither, and a clock read per
/// drive showed in the latency profile.
/// Returns whether there was one.
fn fire_close_timer(g: &mut QpInner) -> bool {
    let pending = g.core.poll_timeout().is_some();
    if pending {
        g.core.handle_timeout(crate::engine::now());
    }
    pending
}

/// A queue pair.
pub struct Qp {
    pub(crate) shared: Arc<QpShared>,
}

impl std::fmt::Debug for Qp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Qp({})", self.shared.id.0)
    }
}

impl Qp {
    /// Its number.
    pub fn id(&self) -> QpId {
        self.shared.id
    }

    /// Its protection domain.
    pub fn pd(&self) -> PdId {
        self.shared.pd
    }

    pub(crate) fn shared_dev_is(&self, dev: &Arc<Shared>) -> bool {
        std::ptr::eq(self.shared.dev.as_ptr(), Arc::as_ptr(dev))
    }

    /// Current state.
    pub fn state(&self) -> QpState {
        self.shared
            .lock()
            .map(|g| g.core.state())
            .unwrap_or(QpState::Error)
    }

    /// I/O statistics.
    pub fn stats(&self) -> QpStats {
        self.shared.lock().map(|g| g.stats).unwrap_or_default()
    }

    /// Octets of data-path buffers (receive staging, transmit gather) the QP holds now.
    /// A QP takes them from a pool while it reads or sends and gives them back once
    /// drained, so this is 0 for an idle QP, whatever it moved before; only octets
    /// waiting in a buffer (a full socket, a stream held back by an SRQ) keep one, and
    /// a busy-polling consumer's claim keeps them until the socket goes back to the
    /// engine (at most a lease after the last poll, or at once when the CQ is armed).
    pub fn buffer_bytes(&self) -> usize {
        self.shared.lock().map_or(0, |g| {
            g.staging.held() + g.conn.as_ref().map_or(0, |c| c.tx.held())
        })
    }

    /// The negotiated parameters.
    pub fn params(&self) -> QpParams {
        self.shared
            .lock()
            .map(|g| *g.core.params())
            .unwrap_or_default()
    }

    /// The Terminate cause and whether the peer sent it, once the QP failed.
    pub fn fatal_cause(&self) -> Option<(softrnic_wire::TerminateCause, bool)> {
        self.shared.lock().ok()?.core.fatal_cause()
    }

    fn dev(&self) -> Result<Arc<Shared>> {
        self.shared
            .dev
            .upgrade()
            .ok_or(Error::BadState("device closed"))
    }

    /// Posts a receive work request.
    pub fn post_recv(&self, wr: RecvWr) -> Result<()> {
        self.post_recv_batch(std::slice::from_ref(&wr))
    }

    /// Posts a chain of receive work requests under one lock of the QP (as
    /// `ibv_post_recv` takes a list). Stops at the first refused one: those before it
    /// are posted.
    /// The requests may be borrowed (`std::iter::repeat_n(&wr, n)`).
    pub fn post_recv_batch<W: std::borrow::Borrow<RecvWr>>(
        &self,
        wrs: impl IntoIterator<Item = W>,
    ) -> Result<()> {
        let mut g = self.shared.lock()?;
        let dev = self
            .shared
            .pass_dev(&mut g)
            .ok_or(Error::BadState("device closed"))?;
        let mut posted = Ok(());
        for wr in wrs {
            if let Err(e) = g.core.post_recv_ref(wr.borrow(), &dev.tpt) {
                posted = Err(e.into());
                break;
            }
        }
        if posted.is_ok() {
            if g.core.state() == QpState::Error {
                // A bad receive SGE is a local error: close the connection now
                // (nothing else may wake this QP), so the peer learns.
                self.shared.progress_locked(&mut g, &dev);
            } else {
                self.shared.deliver(&mut g, &dev);
            }
        }
        let spare = self.shared.end_pass(&mut g, dev);
        drop(g);
        drop(spare);
        posted
    }

    /// Posts a send-queue work request and starts transmitting it on this thread.
    pub fn post_send(&self, wr: SendWr) -> Result<()> {
        // Borrowed: the request is copied once, into the send queue (through
        // `iter::once` it was moved into the iterator and out again first).
        self.post_send_batch(std::slice::from_ref(&wr))
    }

    /// Posts a chain of send-queue work requests, transmitting once after all are queued
    /// (one doorbell for the batch). The requests may be borrowed (`batch.iter()`): each
    /// is then copied once, into the send queue.
    pub fn post_send_batch<W: std::borrow::Borrow<SendWr>>(
        &self,
        wrs: impl IntoIterator<Item = W>,
    ) -> Result<()> {
        let mut g = self.shared.lock()?;
        let dev = self
            .shared
            .pass_dev(&mut g)
            .ok_or(Error::BadState("device closed"))?;
        let mut posted = Ok(());
        let QpInner {
            core, conn, stats, ..
        } = &mut *g;
        for wr in wrs {
            // Small requests to an idle send queue go straight into the transmit
            // buffer (`transmit::post_gathered`).
            let r = match conn.as_mut() {
                Some(conn) => post_gathered(core, conn, stats, &dev, wr.borrow()),
                None => core.post_send_ref(wr.borrow(), &dev.tpt),
            };
            if let Err(e) = r {
                posted = Err(e.into());
                break;
            }
        }
        if posted.is_ok() {
            // After a post: what was posted goes out and what completed is delivered,
            // without the receive path's `read(2)` (usually an empty one): what
            // arrives is for the engine, which sees the socket readable, or for the
            // polling consumer.
            self.shared.progress_pass(&mut g, &dev, Pass::TransmitOnly);
        }
        let spare = self.shared.end_pass(&mut g, dev);
        drop(g);
        drop(spare);
        posted
    }

    /// Graceful close: queued sends finish, then FIN; the QP goes to error (flushing what
    /// is left) once the peer closes too. [`crate::AsyncEvent::Disconnected`] follows.
    pub fn disconnect(&self) -> Result<()> {
        let dev = self.dev()?;
        let mut g = self.shared.lock()?;
        g.core.close();
        if g.owner.is_claimed() {
            // The engine sees the close through (the peer's FIN, the close timer),
            // whether or not the program keeps polling.
            self.shared.release(&mut g, &dev);
        }
        self.shared.progress_locked(&mut g, &dev);
        Ok(())
    }

    /// Abortive close: the connection is reset (RST) and all outstanding work flushes.
    pub fn abort(&self) -> Result<()> {
        let dev = self.dev()?;
        let mut g = self.shared.lock()?;
        g.core.to_error();
        let mut disconnected = false;
        if let Some(c) = g.conn.take() {
            // Closing the socket with a zero linger time sends RST, not FIN (a
            // `shutdown` would send FIN, and the peer would take it for a graceful
            // close). The engine forgets the socket before it is closed.
            disconnected = drop_conn(c, &mut g.core, self.shared.engine(), &dev);
        }
        // The flushes reach the CQ before Disconnected is posted.
        self.shared.progress_locked(&mut g, &dev);
        if disconnected {
            dev.post_event(AsyncEvent::Disconnected { qp: self.shared.id });
        }
        Ok(())
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        if let Some(dev) = self.shared.dev.upgrade() {
            if let Ok(mut g) = self.shared.inner.lock()
                && let Some(c) = g.conn.take()
            {
                // Destroying a connected QP is an abortive close: RST.
                drop_conn(c, &mut g.core, self.shared.engine(), &dev);
            }
            if let Ok(mut q) = dev.qps.lock() {
                q.remove(&self.shared.id.0);
            }
        }
        if let Some(srq) = &self.shared.srq {
            srq.detach(self.shared.id);
        }
        // The CQs hold their QPs (for their consumers' drives) until now.
        let s = &self.shared;
        s.send_cq.remove_qp(s);
        if !Arc::ptr_eq(&s.send_cq, &s.recv_cq) {
            s.recv_cq.remove_qp(s);
        }
    }
}
