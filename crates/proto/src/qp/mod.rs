//! A reliable-connected queue pair: the verbs-facing state (send and receive queues,
//! completions, state changes) around the two halves of the protocol engine:
//! [`tx`] (work requests -> FPDUs) and [`rx`] (FPDUs -> placement and completions).
//!
//! The QP never touches memory or sockets. The I/O layer asks [`Qp::poll_transmit`] for
//! the next FPDU (header octets plus the memory chunks to gather), feeds received octets
//! through [`Qp::rx_need`] / [`Qp::handle_input`], and drains [`Qp::poll_completion`].
//! Every posted work request completes exactly once: with success, an error, or a flush.

mod rx;
mod tx;

pub use rx::RxNeed;
pub use tx::{Chunk, TxFpdu};

use crate::tpt::Tpt;
use crate::verbs::*;
use arrayvec::ArrayVec;
use softrnic_wire::TerminateCause;
use softrnic_wire::terminate::Layer;
use std::collections::{BTreeMap, VecDeque};

/// Negotiated connection parameters the QP runs with (from the MPA exchange).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpParams {
    /// CRC32c on in both directions.
    pub crc: bool,
    /// Inbound Read Requests accepted concurrently.
    pub ird: u16,
    /// Outbound Reads outstanding at most; more wait in the send queue.
    pub ord: u16,
    /// Largest FPDU to send (the TCP MSS by default).
    pub max_fpdu: usize,
    /// RFC 6581 peer-to-peer: this side sends the RTR message first.
    pub send_rtr: Option<RtrKind>,
    /// RFC 6581 peer-to-peer: this side must receive the RTR before it transmits.
    pub await_rtr: bool,
}

impl Default for QpParams {
    fn default() -> Self {
        QpParams {
            crc: false,
            ird: 16,
            ord: 16,
            max_fpdu: 1448,
            send_rtr: None,
            await_rtr: false,
        }
    }
}

/// The zero-length message that serves as RFC 6581 ready-to-receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RtrKind {
    /// Zero-length Send.
    Send,
    /// Zero-length RDMA Write.
    Write,
    /// Zero-length RDMA Read.
    Read,
}

/// Static attributes of a QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpConfig {
    /// Its number.
    pub id: QpId,
    /// Its protection domain.
    pub pd: PdId,
    /// Send queue depth.
    pub sq_depth: usize,
    /// Receive queue depth.
    pub rq_depth: usize,
}

/// Why a post was refused (the request was not queued and will not complete).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PostError {
    /// The queue is full.
    #[error("queue full")]
    QueueFull,
    /// More scatter/gather elements than the device supports.
    #[error("too many scatter/gather elements ({0}, max {MAX_SGE})")]
    TooManySge(usize),
    /// An RDMA Read needs exactly one sink SGE.
    #[error("an RDMA Read takes exactly one sink SGE")]
    ReadNeedsOneSge,
    /// A message longer than 4 GiB - 1.
    #[error("message too long")]
    TooLong,
    /// The QP is not in a state that accepts this post.
    #[error("QP in state {0:?} does not accept work requests")]
    BadState(QpState),
}

/// Something the I/O layer must act on besides completions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpEvent {
    /// The QP went to error because of a Terminate, sent (local detection) or received.
    Fatal {
        /// The cause carried by the Terminate.
        cause: TerminateCause,
        /// Whether the peer sent it (otherwise we did).
        remote: bool,
    },
    /// A Send with the Solicited Event flag arrived (and completed).
    Solicited,
}

/// Which CQ a completion goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CqSide {
    /// The send CQ.
    Send,
    /// The receive CQ.
    Recv,
}

/// Releases send-queue completions in posting order.
#[derive(Debug, Default)]
struct SendOrder {
    /// Sequence number of the next post.
    next_seq: u64,
    /// Sequence number of the next completion to release.
    release: u64,
    /// Finished requests waiting for earlier ones (None: unsignaled success).
    done: BTreeMap<u64, Option<Completion>>,
}

impl SendOrder {
    fn next(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq - 1
    }
}

/// A posted receive with its SGEs resolved through the TPT.
#[derive(Debug, Clone)]
pub(crate) struct RecvWqe {
    pub wr_id: u64,
    /// (region, offset, len) per SGE.
    pub sges: ArrayVec<(RegionId, u64, u32), MAX_SGE>,
    pub total: u64,
}

/// A queue pair.
#[derive(Debug)]
pub struct Qp {
    pub(crate) cfg: QpConfig,
    pub(crate) params: QpParams,
    pub(crate) state: QpState,
    pub(crate) tx: tx::TxState,
    pub(crate) rx: rx::RxState,
    pub(crate) rq: VecDeque<RecvWqe>,
    completions: VecDeque<(CqSide, Completion)>,
    /// Send-queue completions are released in posting order: a Send posted after a Read
    /// completes only after the Read does.
    send_order: SendOrder,
    events: VecDeque<QpEvent>,
    /// The cause once the QP has failed.
    pub(crate) fatal: Option<(TerminateCause, bool)>,
}

impl Qp {
    /// A QP in Idle state.
    pub fn new(cfg: QpConfig) -> Self {
        Qp {
            cfg,
            params: QpParams::default(),
            state: QpState::Idle,
            tx: tx::TxState::default(),
            rx: rx::RxState::default(),
            rq: VecDeque::new(),
            completions: VecDeque::new(),
            send_order: SendOrder::default(),
            events: VecDeque::new(),
            fatal: None,
        }
    }

    /// Its number.
    pub fn id(&self) -> QpId {
        self.cfg.id
    }

    /// Its configuration.
    pub fn config(&self) -> &QpConfig {
        &self.cfg
    }

    /// Current state.
    pub fn state(&self) -> QpState {
        self.state
    }

    /// The negotiated parameters (valid once connected).
    pub fn params(&self) -> &QpParams {
        &self.params
    }

    /// The Terminate cause and whether it came from the peer, once the QP has failed.
    pub fn fatal_cause(&self) -> Option<(TerminateCause, bool)> {
        self.fatal
    }

    /// Moves an Idle QP to RTS with the parameters the MPA exchange negotiated.
    pub fn connect(&mut self, params: QpParams) -> Result<(), PostError> {
        if self.state != QpState::Idle {
            return Err(PostError::BadState(self.state));
        }
        self.params = params;
        self.state = QpState::Rts;
        self.tx.start(&params);
        self.rx.start(&params);
        Ok(())
    }

    /// Posts a receive. Allowed from Idle on (receives may be posted before connecting).
    pub fn post_recv(&mut self, wr: RecvWr, tpt: &Tpt) -> Result<(), PostError> {
        match self.state {
            QpState::Idle | QpState::Rts | QpState::Closing => {}
            QpState::Terminate | QpState::Error => {
                // Verbs allow posting to an errored QP; the request is flushed at once.
                self.push(
                    CqSide::Recv,
                    self.completion(wr.wr_id, WcStatus::WrFlushError, WcOpcode::Recv, 0),
                );
                return Ok(());
            }
        }
        if wr.sgl.len() > MAX_SGE {
            return Err(PostError::TooManySge(wr.sgl.len()));
        }
        if self.rq.len() >= self.cfg.rq_depth {
            return Err(PostError::QueueFull);
        }
        let mut sges = ArrayVec::new();
        let mut total = 0u64;
        for s in &wr.sgl {
            match tpt.check_local(
                s.lkey,
                s.addr,
                u64::from(s.len),
                Access::LOCAL_WRITE,
                self.cfg.pd,
            ) {
                Ok(t) => sges.push((t.region, t.offset, s.len)),
                Err(status) => {
                    self.push(
                        CqSide::Recv,
                        self.completion(wr.wr_id, status, WcOpcode::Recv, 0),
                    );
                    self.local_error();
                    return Ok(());
                }
            }
            total += u64::from(s.len);
        }
        self.rq.push_back(RecvWqe {
            wr_id: wr.wr_id,
            sges,
            total,
        });
        Ok(())
    }

    /// Posts a send-queue work request (Send, Write, Read, local invalidate).
    pub fn post_send(&mut self, wr: SendWr, tpt: &mut Tpt) -> Result<(), PostError> {
        match self.state {
            QpState::Rts => {}
            QpState::Terminate | QpState::Error => {
                let op = tx::wc_opcode(&wr.op);
                let seq = self.send_order.next();
                let c = self.completion(wr.wr_id, WcStatus::WrFlushError, op, 0);
                self.finish_send(seq, Some(c));
                return Ok(());
            }
            s => return Err(PostError::BadState(s)),
        }
        if wr.sgl.len() > MAX_SGE {
            return Err(PostError::TooManySge(wr.sgl.len()));
        }
        if matches!(wr.op, SendOp::Read { .. }) && wr.sgl.len() != 1 {
            return Err(PostError::ReadNeedsOneSge);
        }
        if self.tx.sq_len() >= self.cfg.sq_depth {
            return Err(PostError::QueueFull);
        }
        let total = wr.sgl.total_len();
        if total > u64::from(u32::MAX) {
            return Err(PostError::TooLong);
        }
        let need = if matches!(wr.op, SendOp::Read { .. }) {
            Access::LOCAL_WRITE
        } else {
            Access::empty()
        };
        let mut chunks = ArrayVec::new();
        for s in &wr.sgl {
            match tpt.check_local(s.lkey, s.addr, u64::from(s.len), need, self.cfg.pd) {
                Ok(t) => chunks.push(Chunk {
                    region: t.region,
                    offset: t.offset,
                    len: s.len as usize,
                }),
                Err(status) => {
                    let op = tx::wc_opcode(&wr.op);
                    let seq = self.send_order.next();
                    let c = self.completion(wr.wr_id, status, op, 0);
                    self.finish_send(seq, Some(c));
                    self.local_error();
                    return Ok(());
                }
            }
        }
        let seq = self.send_order.next();
        let local_op = matches!(wr.op, SendOp::LocalInvalidate { .. });
        self.tx.enqueue(seq, wr, chunks, total as u32);
        if local_op {
            // Executes in order with the rest of the send queue, needing no wire.
            self.run_local_ops(tpt);
        }
        Ok(())
    }

    /// A send-queue request finished (None: unsignaled success). Completions are
    /// released in posting order.
    pub(crate) fn finish_send(&mut self, seq: u64, c: Option<Completion>) {
        self.send_order.done.insert(seq, c);
        while let Some(c) = self.send_order.done.remove(&self.send_order.release) {
            self.send_order.release += 1;
            if let Some(c) = c {
                self.completions.push_back((CqSide::Send, c));
            }
        }
    }

    pub(crate) fn local_invalidate(
        &mut self,
        seq: u64,
        wr_id: u64,
        stag: STag,
        signaled: bool,
        tpt: &mut Tpt,
    ) {
        match tpt.invalidate(stag, self.cfg.pd) {
            Ok(()) => {
                let c = self.completion(wr_id, WcStatus::Success, WcOpcode::LocalInvalidate, 0);
                self.finish_send(seq, signaled.then_some(c));
            }
            Err(_) => {
                let c = self.completion(
                    wr_id,
                    WcStatus::LocalAccessError,
                    WcOpcode::LocalInvalidate,
                    0,
                );
                self.finish_send(seq, Some(c));
                self.local_error();
            }
        }
    }

    /// Starts a graceful close: queued work is still transmitted; when the send queue is
    /// empty the I/O layer sends FIN ([`Qp::ready_to_fin`]).
    pub fn close(&mut self) {
        if self.state == QpState::Rts {
            self.state = QpState::Closing;
        }
    }

    /// Graceful close: everything queued has been handed to the transport.
    pub fn ready_to_fin(&self) -> bool {
        self.state == QpState::Closing && self.tx.idle()
    }

    /// The transport closed (FIN after graceful close, EOF, reset, or a dead peer): the
    /// QP goes to Error and all outstanding work is flushed.
    pub fn transport_closed(&mut self) {
        self.to_error();
    }

    /// Moves the QP to Error and flushes all outstanding work requests.
    pub fn to_error(&mut self) {
        if self.state == QpState::Error {
            return;
        }
        self.state = QpState::Error;
        self.flush();
    }

    /// A local error (bad SGE, invalidation failure): verbs move the QP to Error.
    fn local_error(&mut self) {
        self.to_error();
    }

    fn flush(&mut self) {
        let id = self.cfg.id;
        for (seq, wr_id, op) in self.tx.drain_all() {
            let c = self.completion(wr_id, WcStatus::WrFlushError, op, 0);
            self.finish_send(seq, Some(c));
        }
        while let Some(r) = self.rq.pop_front() {
            self.completions.push_back((
                CqSide::Recv,
                Completion {
                    wr_id: r.wr_id,
                    status: WcStatus::WrFlushError,
                    opcode: WcOpcode::Recv,
                    byte_len: 0,
                    qp: id,
                    solicited: false,
                    invalidated: None,
                },
            ));
        }
    }

    /// Local detection of a protocol error: queue a Terminate to the peer, go to the
    /// Terminate state (no more receive processing), flush. The I/O layer closes the
    /// connection once the Terminate is out ([`Qp::terminate_sent`]).
    pub(crate) fn fail_local(&mut self, cause: TerminateCause, copied: rx::CopiedHeaders) {
        if matches!(self.state, QpState::Terminate | QpState::Error) {
            return;
        }
        self.fatal = Some((cause, false));
        self.events.push_back(QpEvent::Fatal {
            cause,
            remote: false,
        });
        self.tx.queue_terminate(cause, copied);
        self.state = QpState::Terminate;
        self.flush();
    }

    /// The peer sent a Terminate: outstanding Reads complete with the matching remote
    /// error, everything else flushes.
    pub(crate) fn fail_remote(&mut self, cause: TerminateCause) {
        if matches!(self.state, QpState::Terminate | QpState::Error) {
            return;
        }
        self.fatal = Some((cause, true));
        self.events.push_back(QpEvent::Fatal {
            cause,
            remote: true,
        });
        let status = match (cause.layer, cause.etype) {
            (Layer::Rdmap, 1) | (Layer::Ddp, 1) => WcStatus::RemoteAccessError,
            (Layer::Ddp, 2) => WcStatus::RemoteInvalidRequestError,
            _ => WcStatus::RemoteOperationError,
        };
        if let Some((seq, wr_id, len)) = self.tx.take_first_outstanding_read() {
            let c = self.completion_len(wr_id, status, WcOpcode::Read, len);
            self.finish_send(seq, Some(c));
        }
        self.state = QpState::Error;
        self.flush();
    }

    /// Whether a Terminate we queued has been handed to the transport, so the
    /// connection can be closed.
    pub fn terminate_sent(&self) -> bool {
        self.state == QpState::Terminate && self.tx.terminate_done()
    }

    /// Next completion for the I/O layer to deliver to the named CQ.
    pub fn poll_completion(&mut self) -> Option<(CqSide, Completion)> {
        self.completions.pop_front()
    }

    /// Next event (fatal error, solicited arrival).
    pub fn poll_event(&mut self) -> Option<QpEvent> {
        self.events.pop_front()
    }

    pub(crate) fn completion(
        &self,
        wr_id: u64,
        status: WcStatus,
        opcode: WcOpcode,
        byte_len: u32,
    ) -> Completion {
        self.completion_len(wr_id, status, opcode, byte_len)
    }

    pub(crate) fn completion_len(
        &self,
        wr_id: u64,
        status: WcStatus,
        opcode: WcOpcode,
        byte_len: u32,
    ) -> Completion {
        Completion {
            wr_id,
            status,
            opcode,
            byte_len,
            qp: self.cfg.id,
            solicited: false,
            invalidated: None,
        }
    }

    pub(crate) fn push(&mut self, side: CqSide, c: Completion) {
        self.completions.push_back((side, c));
    }

    pub(crate) fn push_event(&mut self, e: QpEvent) {
        self.events.push_back(e);
    }

    /// Work requests queued or in flight on the send side (for tests and stats).
    pub fn send_queue_len(&self) -> usize {
        self.tx.sq_len()
    }

    /// Receives posted and not yet consumed.
    pub fn recv_queue_len(&self) -> usize {
        self.rq.len()
    }
}

#[cfg(test)]
mod tests;
