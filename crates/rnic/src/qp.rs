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
//!
//! This file holds the QP's state and its attachment to a connection and an engine;
//! `verbs` the program's handle ([`Qp`]), `progress` the pass that drives it, and
//! `claim` who drives it (a polling consumer's claim, the engine's events and timers).

mod claim;
mod progress;
mod report;
mod verbs;

use crate::cq::{Cq, CqShared};
use crate::device::{AsyncEvent, Shared};
use crate::error::{Error, Result};
use crate::handoff::Owner;
use crate::receive::{Staging, feed};
use crate::srq::SrqShared;
use crate::transmit::TxQueue;
use crate::transport::fault::FaultTransport;
use crate::transport::pcap::{ConnRecorder, PcapTransport};
use crate::transport::stream::ConnStream;
use crate::transport::{ConnTransport, Transport};
use softrnic_proto::qp::{QpConfig, QpParams};
use softrnic_proto::{PdId, QpId, QpState};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

pub use crate::receive::{RX_DIRECT_MIN, RX_STAGING_LEN};
pub use crate::transmit::TX_GATHER_MAX;
pub use verbs::Qp;

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
    /// Yields of the CPU by a polling consumer before it read again a stream of large
    /// FPDUs that it had found empty (`Transport::yield_before_reread`).
    pub rx_idle_yields: u64,
    /// `sendmsg` calls on the socket.
    pub tx_syscalls: u64,
    /// FPDUs sent.
    pub tx_fpdus: u64,
    /// Of `tx_syscalls`, those an engine thread made (the rest: the posting or polling
    /// program thread), so a run shows who transmits.
    pub tx_engine_syscalls: u64,
    /// Octets the socket took from all send calls.
    pub tx_bytes: u64,
    /// Octets the socket took from an engine thread's send calls.
    pub tx_engine_bytes: u64,
    /// Transmit passes a receive pass made in its middle, to answer a Read Request
    /// without waiting for the pass to end (`receive::answer_reads`).
    pub rx_read_answers: u64,
}

impl QpStats {
    /// Counts a send call that was made (`tx_syscalls` is counted by the caller) and
    /// what the socket took, by whether an engine thread made it.
    pub(crate) fn sent(&mut self, r: &std::io::Result<usize>) {
        let n = r.as_ref().map_or(0, |n| *n as u64);
        self.tx_bytes += n;
        if crate::engine::on_engine_thread() {
            self.tx_engine_syscalls += 1;
            self.tx_engine_bytes += n;
        }
    }
}

/// A QP's connection: the stream and what is queued for it. (How far closing went is
/// the core's close machine's.)
pub(crate) struct Conn {
    pub(crate) transport: ConnTransport,
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
    /// The consumer's quiet mark: the last holder of the lock was a claimed consumer's
    /// drive whose read found the stream empty, after checking that the QP is claimed
    /// and in RTS, has nothing queued or unsent, no close timer and no close under way
    /// (`QpShared::claimed_pass`). Nothing but such drives has held the lock since:
    /// every other taker clears it ([`QpShared::lock`]). While it is set, the next
    /// drive goes straight to the read (`QpShared::consumer_progress`), since every
    /// answer those checks gave still holds.
    quiet_claimed: bool,
    /// Tests: the mark is never set (every drive takes the general path), and the
    /// drives that went straight to the read.
    #[cfg(test)]
    pub(crate) test_no_quiet_mark: bool,
    #[cfg(test)]
    pub(crate) test_marked_drives: u64,
}

impl QpInner {
    /// Sets the consumer's quiet mark (`QpShared::consumer_pass` checked its inputs).
    #[inline]
    fn mark_quiet(&mut self) {
        #[cfg(test)]
        if self.test_no_quiet_mark {
            return;
        }
        self.quiet_claimed = true;
    }

    /// A drive found the mark set and went straight to the read (tests count them).
    #[inline]
    fn marked_drive(&mut self) {
        #[cfg(test)]
        {
            self.test_marked_drives += 1;
        }
    }
}

pub(crate) struct QpShared {
    pub(crate) id: QpId,
    pub(crate) pd: PdId,
    dev: Weak<Shared>,
    send_cq: Arc<CqShared>,
    recv_cq: Arc<CqShared>,
    /// The shared receive queue its receive buffers come from, if any.
    pub(crate) srq: Option<Arc<SrqShared>>,
    /// Taken through [`QpShared::lock`], which clears the consumer's quiet mark, by
    /// everyone but a consumer's drive (`QpShared::consumer_progress`).
    inner: Mutex<QpInner>,
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
                quiet_claimed: false,
                #[cfg(test)]
                test_no_quiet_mark: false,
                #[cfg(test)]
                test_marked_drives: 0,
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

    /// The QP's lock, for anything but a consumer's drive: whatever the taker changes,
    /// the consumer's next drive makes its checks again (`QpInner::quiet_claimed`).
    #[inline]
    pub(crate) fn lock(&self) -> Result<std::sync::MutexGuard<'_, QpInner>> {
        let mut g = self.inner.lock()?;
        g.quiet_claimed = false;
        Ok(g)
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
        let polled =
            stream.into_polled(dev.cfg.keepalive, &dev.socket_buffers, self.claimed.clone())?;
        let mut transport = if rec.is_none() && dev.cfg.fault.is_none() {
            ConnTransport::Polled(polled)
        } else {
            let mut t: Box<dyn Transport> = Box::new(polled);
            if let Some(rec) = rec {
                // Innermost: the recording shows what really crossed the socket.
                t = Box::new(PcapTransport::new(t, rec));
            }
            if let Some(plan) = &dev.cfg.fault {
                t = Box::new(FaultTransport::new(t, plan.clone()));
            }
            ConnTransport::Wrapped(t)
        };
        let mut g = self.lock()?;
        g.core.connect(params)?;
        g.core.pack_segments(transport.packed_segment());
        if !leftover.is_empty() {
            // These octets were read together with the MPA frame.
            let QpInner {
                core,
                stats,
                staging,
                ..
            } = &mut *g;
            // A failed placement leaves the QP in error; the first progress closes it.
            let _ = feed(
                core,
                stats,
                &mut staging.fed,
                dev,
                self.srq.as_deref(),
                leftover,
                &mut softrnic_proto::qp::Queued,
            );
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

#[cfg(all(test, not(loom)))]
#[path = "qp/quiet_mark_tests.rs"]
mod quiet_mark_tests;
