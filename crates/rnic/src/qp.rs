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
//! mode, a thread polling the QP's CQ.

use crate::close::{close_if_done, drop_conn};
use crate::cq::{Cq, CqShared};
use crate::device::{AsyncEvent, Shared};
use crate::error::{Error, Result};
use crate::receive::{Staging, feed, receive};
use crate::transmit::{TxQueue, transmit};
use crate::transport::Transport;
use crate::transport::fault::FaultTransport;
use crate::transport::pcap::{ConnRecorder, PcapTransport};
use crate::transport::socket::SocketTransport;
use softrnic_proto::qp::{CqSide, QpConfig, QpEvent, QpParams};
use softrnic_proto::{PdId, QpId, QpState, RecvWr, SendWr};
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
    /// The state last reported to tracing.
    traced_state: QpState,
}

pub(crate) struct QpShared {
    pub(crate) id: QpId,
    pub(crate) pd: PdId,
    dev: Weak<Shared>,
    send_cq: Arc<CqShared>,
    recv_cq: Arc<CqShared>,
    pub(crate) inner: Mutex<QpInner>,
    pub(crate) engine: usize,
}

impl QpShared {
    pub(crate) fn new(id: QpId, pd: PdId, dev: &Arc<Shared>, init: QpInit<'_>) -> Result<QpShared> {
        if init.sq_depth == 0
            || init.rq_depth == 0
            || init.sq_depth > 16384
            || init.rq_depth > 16384
        {
            return Err(Error::InvalidArgument("queue depth must be 1..=16384"));
        }
        for cq in [init.send_cq, init.recv_cq] {
            if !cq.shared.belongs_to(dev) {
                return Err(Error::InvalidArgument("CQ of another device"));
            }
        }
        let core = softrnic_proto::qp::Qp::new(QpConfig {
            id,
            pd,
            sq_depth: init.sq_depth,
            rq_depth: init.rq_depth,
        });
        Ok(QpShared {
            id,
            pd,
            dev: Arc::downgrade(dev),
            send_cq: init.send_cq.shared.clone(),
            recv_cq: init.recv_cq.shared.clone(),
            inner: Mutex::new(QpInner {
                core,
                conn: None,
                stats: QpStats::default(),
                staging: Staging::default(),
                timer_armed: None,
                traced_state: QpState::Idle,
            }),
            engine: init.recv_cq.shared.vector,
        })
    }

    pub(crate) fn lock(&self) -> Result<std::sync::MutexGuard<'_, QpInner>> {
        Ok(self.inner.lock()?)
    }

    /// Progress if nobody else is; true if anything moved.
    pub(crate) fn try_progress(&self, dev: &Shared) -> bool {
        match self.inner.try_lock() {
            Ok(mut g) => self.progress_locked(&mut g, dev),
            Err(_) => false,
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
        let mut moved = false;
        let mut disconnected = false;
        let now = crate::engine::now();
        g.core.handle_timeout(now);
        if g.conn.is_some() {
            // Transmit first: a request just posted leaves before the receive path's
            // read (often an empty one) is paid; what the receive path queues (Read
            // Responses, Terminates) goes out in the second pass.
            moved |= self.transmit(g, dev);
            if self.receive(g, dev) {
                moved = true;
                self.transmit(g, dev);
            }
            disconnected = self.close_if_done(g, now, dev);
            self.arm_timer(g, dev);
        }
        self.deliver(g, dev);
        if disconnected {
            dev.post_event(AsyncEvent::Disconnected { qp: self.id });
        }
        moved
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
            Some(conn) => receive(self.id, core, conn, stats, staging, dev),
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
        match conn.as_mut() {
            Some(c) => close_if_done(core, c, now, self.engine, dev),
            None => false,
        }
    }

    /// Asks the QP's engine to drive it when its close timer is due (once per deadline).
    fn arm_timer(&self, g: &mut QpInner, dev: &Shared) {
        let due = g.core.poll_timeout();
        if due != g.timer_armed {
            g.timer_armed = due;
            if let (Some(at), Some(e)) = (due, dev.engines.get(self.engine)) {
                e.arm_timer(at, self.id);
            }
        }
    }

    fn deliver(&self, g: &mut QpInner, dev: &Shared) {
        crate::trace::qp_state(dev.serial, self.id, &mut g.traced_state, g.core.state());
        while let Some(e) = g.core.poll_event() {
            if let QpEvent::Fatal { cause, remote } = e {
                dev.post_event(AsyncEvent::QpFatal {
                    qp: self.id,
                    cause,
                    remote,
                });
            }
        }
        while let Some((side, c)) = g.core.poll_completion() {
            match side {
                CqSide::Send => self.send_cq.push(c, false),
                CqSide::Recv => self.recv_cq.push(c, c.solicited),
            }
        }
    }

    /// Connects the QP to an established MPA stream: parameters, leftover octets that
    /// arrived with the MPA frame, and the socket, handed to the engine (under the
    /// recording of the connection, if there is one, and the device's fault plan).
    pub(crate) fn attach(
        self: &Arc<Self>,
        dev: &Shared,
        sock: std::net::TcpStream,
        params: QpParams,
        leftover: &[u8],
        rec: Option<ConnRecorder>,
    ) -> Result<()> {
        let mut transport: Box<dyn Transport> = Box::new(SocketTransport::new(sock)?);
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
            let _ = feed(core, stats, staging, dev, leftover);
        }
        let engine = dev
            .engines
            .get(self.engine)
            .ok_or(Error::Internal("no engine for the CQ's vector"))?;
        engine.register(&mut *transport, self)?;
        g.conn = Some(Conn {
            transport,
            tx: TxQueue::default(),
        });
        dev.post_event(AsyncEvent::Established { qp: self.id });
        self.progress_locked(&mut g, dev);
        Ok(())
    }
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
        let dev = self.dev()?;
        let mut g = self.shared.lock()?;
        g.core.post_recv(wr, &dev.tpt)?;
        if g.core.state() == QpState::Error {
            // A bad receive SGE is a local error: close the connection now (nothing
            // else may wake this QP), so the peer learns.
            self.shared.progress_locked(&mut g, &dev);
        } else {
            self.shared.deliver(&mut g, &dev);
        }
        Ok(())
    }

    /// Posts a send-queue work request and starts transmitting it on this thread.
    pub fn post_send(&self, wr: SendWr) -> Result<()> {
        self.post_send_batch(std::iter::once(wr))
    }

    /// Posts a chain of send-queue work requests, transmitting once after all are queued
    /// (one doorbell for the batch).
    pub fn post_send_batch(&self, wrs: impl IntoIterator<Item = SendWr>) -> Result<()> {
        let dev = self.dev()?;
        let mut g = self.shared.lock()?;
        for wr in wrs {
            g.core.post_send(wr, &dev.tpt)?;
        }
        self.shared.progress_locked(&mut g, &dev);
        Ok(())
    }

    /// Graceful close: queued sends finish, then FIN; the QP goes to error (flushing what
    /// is left) once the peer closes too. [`crate::AsyncEvent::Disconnected`] follows.
    pub fn disconnect(&self) -> Result<()> {
        let dev = self.dev()?;
        let mut g = self.shared.lock()?;
        g.core.close();
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
            disconnected = drop_conn(c, &mut g.core, self.shared.engine, &dev);
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
                drop_conn(c, &mut g.core, self.shared.engine, &dev);
            }
            if let Ok(mut q) = dev.qps.lock() {
                q.remove(&self.shared.id.0);
            }
        }
    }
}
