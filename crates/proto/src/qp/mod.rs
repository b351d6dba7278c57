//! A reliable-connected queue pair: the verbs-facing state (send queue, receive
//! buffers, completions, state changes) around the protocol engine's parts:
//! [`tx`] (work requests -> FPDUs), and the receive path in three parts, `stream` (MPA
//! deframing), `place` (where one FPDU's payload goes) and `deliver` (completions in
//! order), driven by `receive`.
//!
//! The QP never touches memory or sockets. The I/O layer asks [`Qp::poll_transmit`] for
//! the next FPDU (header octets plus the memory chunks to gather), feeds received octets
//! through [`Qp::rx_need`] / [`Qp::handle_input`] (or hands it TCP segments found
//! anywhere in the stream with [`Qp::handle_segment`]), and drains
//! [`Qp::poll_completion`]. Receive buffers come from the QP's own [`Rq`] or from a
//! shared queue passed in [`RxCtx`]. Every posted work request completes exactly once:
//! with success, an error, or a flush.

mod close;
mod deliver;
mod fpdu;
mod params;
mod place;
mod post_recv;
mod receive;
mod rq;
mod rq_ring;
mod stream;
mod tx;

pub use close::CloseAction;
pub use deliver::{CqSide, QpEvent, Queued, RecvHandoff};
pub use fpdu::{
    Chunk, CopiedHeaders, MAX_TX_HEADER, SMALL_HEADER_MAX, SingleFpdu, SmallFpdu, TxFpdu,
};
pub use params::{DEFAULT_CLOSE_TIMEOUT, QpConfig, QpParams, RtrKind};
pub use rq::{Grant, RecvSource, RecvWqe, Rq};
pub use stream::RxNeed;
pub use tx::{Gathered, SingleSmall, SmallRunEnd};

use crate::tpt::Tpt;
use crate::verbs::*;
use arrayvec::ArrayVec;
use close::{Closer, Facts, Next};
use deliver::Outbox;
pub use receive::RxRun;
use receive::{Fatal, Receiver, RxDeps};
use softrnic_wire::TerminateCause;
use softrnic_wire::terminate::Layer;
use std::time::Duration;
use tx::TxState;

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
    /// An RDMA Read on a connection that negotiated ORD 0: the peer accepts no Read
    /// Requests (its IRD is 0), so none may be sent.
    #[error("RDMA Read on a connection with ORD 0 (the peer's IRD is 0)")]
    NoReadCredits,
    /// The QP takes its receive buffers from a shared receive queue: post there.
    #[error("the QP has no receive queue of its own (it uses a shared receive queue)")]
    SharedRq,
    /// A receive posted to a shared receive queue names memory that is not registered
    /// with local write access in the queue's protection domain, or lies out of
    /// bounds (there is no QP to complete it with an error).
    #[error("an SGE is not registered local-writable memory of the queue's PD")]
    InvalidSge,
}

/// What a receive step borrows from the device: the TPT and, for a QP that takes its
/// receive buffers from a shared receive queue, that queue (otherwise the QP's own
/// [`Rq`] serves).
pub struct RxCtx<'a> {
    tpt: &'a Tpt,
    srq: Option<&'a mut dyn RecvSource>,
}

impl<'a> RxCtx<'a> {
    /// Receive buffers from the QP's own queue.
    pub fn new(tpt: &'a Tpt) -> Self {
        RxCtx { tpt, srq: None }
    }

    /// Receive buffers from a shared queue.
    pub fn with_srq(tpt: &'a Tpt, srq: &'a mut dyn RecvSource) -> Self {
        RxCtx {
            tpt,
            srq: Some(srq),
        }
    }
}

/// What became of a segment handed to [`Qp::handle_segment`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentOutcome {
    /// Everything in it was taken (or had been already): the transport may forget it.
    Taken,
    /// It lies ahead of the stream and could not be placed yet, or the receive path
    /// waits for a buffer (back-pressure, [`RxNeed::Wait`]): the transport keeps it and
    /// hands it in again once the octets before it have come, or once woken (octets
    /// taken already are skipped by their sequence numbers).
    Keep,
    /// Receive processing has stopped: nothing more is taken.
    Stopped,
}

/// A queue pair.
#[derive(Debug)]
pub struct Qp {
    cfg: QpConfig,
    params: QpParams,
    state: QpState,
    tx: TxState,
    rx: Receiver,
    rq: Rq,
    /// Receive buffers come from a shared receive queue (the own `rq` stays empty).
    on_srq: bool,
    out: Outbox,
    /// The cause once the QP has failed.
    fatal: Option<(TerminateCause, bool)>,
    closer: Closer,
    /// With markers on in what we send: where the next FPDU starts in the marked
    /// stream.
    tx_marked_pos: u64,
}

impl Qp {
    /// A QP in Idle state.
    pub fn new(cfg: QpConfig) -> Self {
        Qp {
            cfg,
            params: QpParams::default(),
            state: QpState::Idle,
            tx: TxState::default(),
            rx: Receiver::default(),
            rq: Rq::new(cfg.rq_depth),
            on_srq: false,
            out: Outbox::new(cfg.id),
            fatal: None,
            closer: Closer::default(),
            tx_marked_pos: 0,
        }
    }

    /// A QP in Idle state whose receive buffers come from a shared receive queue: it
    /// has no receive queue of its own (`cfg.rq_depth` is not used), [`Qp::post_recv`]
    /// is refused, and every receive step must be given the queue ([`RxCtx::with_srq`]).
    pub fn new_on_srq(cfg: QpConfig) -> Self {
        let mut qp = Qp::new(QpConfig { rq_depth: 0, ..cfg });
        qp.on_srq = true;
        qp
    }

    /// Whether the QP takes its receive buffers from a shared receive queue.
    pub fn on_srq(&self) -> bool {
        self.on_srq
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
        self.rx
            .start(params.crc, params.markers_rx, params.await_rtr);
        Ok(())
    }

    /// Posts a receive to the QP's own queue. Allowed from Idle on (receives may be
    /// posted before connecting).
    pub fn post_recv(&mut self, wr: RecvWr, tpt: &Tpt) -> Result<(), PostError> {
        self.post_recv_ref(&wr, tpt)
    }

    /// [`Qp::post_recv`] from a borrowed request (a batch reposting one request many
    /// times copies nothing but the resolved buffer into the queue).
    pub fn post_recv_ref(&mut self, wr: &RecvWr, tpt: &Tpt) -> Result<(), PostError> {
        if self.on_srq {
            return Err(PostError::SharedRq);
        }
        match self.state {
            QpState::Idle | QpState::Rts | QpState::Closing => {}
            QpState::Terminate | QpState::Error => {
                // Verbs allow posting to an errored QP; the request is flushed at once.
                let c = self
                    .out
                    .completion(wr.wr_id, WcStatus::WrFlushError, WcOpcode::Recv, 0);
                self.out.recv(c);
                return Ok(());
            }
        }
        self.post_recv_postable(wr, tpt).map(|_| ())
    }

    /// Posts a send-queue work request (Send, Write, Read, local invalidate).
    pub fn post_send(&mut self, wr: SendWr, tpt: &Tpt) -> Result<(), PostError> {
        self.post_send_ref(&wr, tpt)
    }

    /// [`Qp::post_send`] from a borrowed request: a batch of posts then copies each
    /// request once, into the send queue, instead of moving it through every call.
    pub fn post_send_ref(&mut self, wr: &SendWr, tpt: &Tpt) -> Result<(), PostError> {
        let mut chunks = ArrayVec::<Chunk, MAX_SGE>::new();
        if let Some(total) = self.check_send(wr, tpt, &mut chunks)? {
            let seq = self.out.next_send_seq();
            self.queue_send(seq, wr, &chunks, total, tpt);
        }
        Ok(())
    }

    /// A post's checks (state, SGEs, room, length, the TPT): the request's payload in
    /// `chunks` and its length, or None if it completed already (flushed in a failed
    /// QP, or a local protection error, which fails the QP).
    #[inline(always)]
    fn check_send(
        &mut self,
        wr: &SendWr,
        tpt: &Tpt,
        chunks: &mut ArrayVec<Chunk, MAX_SGE>,
    ) -> Result<Option<u32>, PostError> {
        match self.state {
            QpState::Rts => {}
            QpState::Terminate | QpState::Error => {
                let op = tx::wc_opcode(&wr.op);
                let seq = self.out.next_send_seq();
                let c = self.out.completion(wr.wr_id, WcStatus::WrFlushError, op, 0);
                self.out.finish_send(seq, Some(c));
                return Ok(None);
            }
            s => return Err(PostError::BadState(s)),
        }
        if wr.sgl.len() > MAX_SGE {
            return Err(PostError::TooManySge(wr.sgl.len()));
        }
        if matches!(wr.op, SendOp::Read { .. }) {
            if wr.sgl.len() != 1 {
                return Err(PostError::ReadNeedsOneSge);
            }
            if self.params.ord == 0 {
                return Err(PostError::NoReadCredits);
            }
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
        for s in wr.sgl.iter() {
            match tpt.check_local(s.lkey, s.addr, u64::from(s.len), need, self.cfg.pd) {
                Ok(t) => chunks.push(Chunk {
                    region: t.region,
                    offset: t.offset,
                    len: s.len as usize,
                }),
                Err(status) => {
                    let op = tx::wc_opcode(&wr.op);
                    let seq = self.out.next_send_seq();
                    let c = self.out.completion(wr.wr_id, status, op, 0);
                    self.out.finish_send(seq, Some(c));
                    self.to_error();
                    return Ok(None);
                }
            }
        }
        Ok(Some(total as u32))
    }

    /// Puts a checked request (posting order `seq`) into the send queue.
    #[inline(always)]
    fn queue_send(&mut self, seq: u64, wr: &SendWr, chunks: &[Chunk], total: u32, tpt: &Tpt) {
        let local_op = matches!(wr.op, SendOp::LocalInvalidate { .. });
        self.tx.enqueue(seq, wr, chunks, total);
        if local_op {
            // Executes in order with the rest of the send queue, needing no wire.
            self.run_local_ops(tpt);
        }
    }

    /// Runs local invalidates that reached the head of the send queue; the I/O layer
    /// calls this (with the TPT) whenever [`Qp::poll_transmit`] returns false.
    pub fn run_local_ops(&mut self, tpt: &Tpt) -> bool {
        let mut ran = false;
        while let Some((seq, wr_id, stag, signaled)) = self.tx.next_local_op() {
            ran = true;
            match tpt.invalidate(stag, self.cfg.pd) {
                Ok(()) => {
                    let c =
                        self.out
                            .completion(wr_id, WcStatus::Success, WcOpcode::LocalInvalidate, 0);
                    self.out.finish_send(seq, signaled.then_some(c));
                }
                Err(_) => {
                    let c = self.out.completion(
                        wr_id,
                        WcStatus::LocalAccessError,
                        WcOpcode::LocalInvalidate,
                        0,
                    );
                    self.out.finish_send(seq, Some(c));
                    self.to_error();
                }
            }
        }
        ran
    }

    /// Fills `out` with the next FPDU to send; false when there is nothing to send now.
    /// After writing it completely, call [`Qp::transmit_done`]. If it
    /// [`completes`](TxFpdu::completes) something, this returns false until then (one
    /// finishing FPDU in flight at a time keeps completion ordering exact); the FPDUs
    /// before it may be polled ahead and written together, in order.
    pub fn poll_transmit(&mut self, out: &mut TxFpdu) -> bool {
        if self.params.markers_tx {
            return self.poll_transmit_marked(out);
        }
        let sending = matches!(self.state, QpState::Rts | QpState::Closing);
        self.tx.poll(sending, false, out)
    }

    /// [`Qp::poll_transmit`] that may go on past a Write's or Send's last FPDU: the next
    /// Writes and Sends are polled behind it (nothing else until those ahead are done),
    /// so that an I/O layer can prepare several messages (their CRCs back to back)
    /// before it writes them in one call. Every FPDU that
    /// [`completes`](TxFpdu::completes) something then needs its own
    /// [`Qp::transmit_done`] once written, in the order polled. Without markers only.
    pub fn poll_transmit_ahead(&mut self, out: &mut TxFpdu) -> bool {
        if self.params.markers_tx {
            return self.poll_transmit_marked(out);
        }
        let sending = matches!(self.state, QpState::Rts | QpState::Closing);
        self.tx.poll(sending, true, out)
    }

    /// [`Qp::poll_transmit`] with markers: the FPDU gets its position, where the
    /// previous one ended in the marked stream (FPDUs are written in the order they
    /// are polled).
    #[cold]
    #[inline(never)]
    fn poll_transmit_marked(&mut self, out: &mut TxFpdu) -> bool {
        let sending = matches!(self.state, QpState::Rts | QpState::Closing);
        let has = self.tx.poll(sending, false, out);
        if has {
            out.marker_pos = Some(self.tx_marked_pos);
            self.tx_marked_pos += out.wire_len() as u64;
        }
        has
    }

    /// Whether [`Qp::poll_transmit`] (or [`Qp::run_local_ops`]) may have something: false
    /// when the send queue, the inbound Read queue and the control messages are empty,
    /// or an FPDU that completes something is still being written. An I/O layer skips
    /// its transmit bookkeeping on a drive that finds this false.
    pub fn may_transmit(&self) -> bool {
        self.tx.may_send()
    }

    /// Whether a Read Request was taken (its FPDU whole, CRC checked) whose response
    /// has not begun (none of its FPDUs polled): an I/O layer in the middle of a receive
    /// pass may transmit now, so that the response does not wait behind everything
    /// else the pass reads.
    pub fn read_response_unstarted(&self) -> bool {
        self.tx.read_response_unstarted()
    }

    /// Whether the FPDU from the last [`Qp::poll_transmit`] is the last of a Read
    /// Response. Its [`Qp::transmit_done`] completes nothing the program sees (it frees
    /// the inbound Read's IRD slot), so an I/O layer that keeps the source memory alive
    /// until the octets are out may call it once the FPDU is queued, and send the
    /// responses behind it in the same call.
    pub fn read_response_in_flight(&self) -> bool {
        self.tx.read_response_in_flight()
    }

    /// The FPDU from the last [`Qp::poll_transmit`] has been written completely (with
    /// FPDUs polled ahead: the one that [`completes`](TxFpdu::completes) something;
    /// for the others the call is not needed, and does nothing while none is in
    /// flight).
    pub fn transmit_done(&mut self) {
        if let Some((seq, wr_id, op, total, signaled)) = self.tx.transmit_done() {
            let c = self.out.completion(wr_id, WcStatus::Success, op, total);
            self.out.finish_send(seq, signaled.then_some(c));
        }
    }

    /// Starts a graceful close: queued work is still transmitted, then FIN
    /// ([`Qp::poll_close`]).
    pub fn close(&mut self) {
        if self.state == QpState::Rts {
            self.state = QpState::Closing;
        }
    }

    /// The peer's FIN came in: the stream has ended.
    pub fn peer_fin(&mut self) {
        self.closer.peer_fin();
    }

    /// Whether the peer's FIN has come in.
    pub fn peer_finished(&self) -> bool {
        self.closer.peer_finished()
    }

    /// The stream failed under the QP (reset, broken pipe, ended mid-FPDU): it is
    /// closed, and the QP goes to Error, flushing all outstanding work.
    pub fn transport_lost(&mut self) {
        self.closer.lost();
        self.to_error();
    }

    /// Whether the stream is closed (or failed): no more reads or writes on it.
    pub fn transport_closed(&self) -> bool {
        self.closer.is_closed()
    }

    /// The I/O layer drops the connection itself (an abortive close, or the QP is
    /// destroyed): the QP goes to Error. Returns whether the QP was connected until now,
    /// that is, whether to report that it is disconnected.
    pub fn abandon_transport(&mut self) -> bool {
        self.to_error();
        self.closer.abandon()
    }

    /// Whether [`Qp::poll_close`] can have anything to do: the QP has left RTS, sent a
    /// Terminate, seen the peer's FIN or lost its transport. While it has not, the I/O
    /// layer may skip `poll_close`, and reading the clock for it, on its hot path.
    pub fn is_closing(&self) -> bool {
        self.closer
            .may_act(self.state == QpState::Rts, self.terminate_sent())
    }

    /// The next close step for the I/O layer to take on its transport, given whether
    /// the transport has written everything it was handed (`flushed`) and the time.
    /// Call it after every round of progress until it returns `None`.
    pub fn poll_close(&mut self, flushed: bool, now: Duration) -> Option<CloseAction> {
        loop {
            let facts = Facts {
                state: self.state,
                terminate_sent: self.terminate_sent(),
                ready_to_fin: self.state == QpState::Closing && self.tx.idle(),
                flushed,
                now,
            };
            match self.closer.next(facts) {
                Next::Wait => return None,
                Next::BeginClose => self.close(),
                Next::ToError => self.to_error(),
                Next::Act { action, to_error } => {
                    if to_error {
                        self.to_error();
                    }
                    return Some(action);
                }
            }
        }
    }

    /// When [`Qp::handle_timeout`] must be called next (the close timer), if ever.
    pub fn poll_timeout(&self) -> Option<Duration> {
        self.closer.deadline(self.params.close_timeout)
    }

    /// Time has reached `now`: a close timer that has expired makes the next
    /// [`Qp::poll_close`] reset the connection.
    pub fn handle_timeout(&mut self, now: Duration) {
        self.closer.handle_timeout(now, self.params.close_timeout);
    }

    /// Moves the QP to Error and flushes all outstanding work requests.
    pub fn to_error(&mut self) {
        if self.state == QpState::Error {
            return;
        }
        self.state = QpState::Error;
        self.flush();
    }

    fn flush(&mut self) {
        self.rx.stop();
        for (seq, wr_id, op) in self.tx.drain_all() {
            let c = self.out.completion(wr_id, WcStatus::WrFlushError, op, 0);
            self.out.finish_send(seq, Some(c));
        }
        // Buffers bound to messages in progress first (they were posted first), then
        // the rest of the own queue (which keeps its bound ones at its front). Buffers of a shared queue that no message took
        // stay there for the other QPs.
        let Qp { rx, rq, out, .. } = self;
        for r in rx.untagged().unbind_all().chain(rq.drain()) {
            let c = out.completion(r.wr_id, WcStatus::WrFlushError, WcOpcode::Recv, 0);
            out.recv(c);
        }
    }

    /// Local detection of a protocol error: queue a Terminate to the peer, go to the
    /// Terminate state (no more receive processing), flush. The I/O layer closes the
    /// connection once the Terminate is out ([`Qp::terminate_sent`]).
    fn fail_local(&mut self, cause: TerminateCause, copied: CopiedHeaders) {
        if matches!(self.state, QpState::Terminate | QpState::Error) {
            return;
        }
        self.fatal = Some((cause, false));
        self.out.event(QpEvent::Fatal {
            cause,
            remote: false,
        });
        self.tx.queue_terminate(cause, copied);
        self.state = QpState::Terminate;
        self.flush();
    }

    /// The peer sent a Terminate: outstanding Reads complete with the matching remote
    /// error, everything else flushes.
    fn fail_remote(&mut self, cause: TerminateCause) {
        if matches!(self.state, QpState::Terminate | QpState::Error) {
            return;
        }
        self.fatal = Some((cause, true));
        self.out.event(QpEvent::Fatal {
            cause,
            remote: true,
        });
        let status = match (cause.layer, cause.etype) {
            (Layer::Rdmap, 1) | (Layer::Ddp, 1) => WcStatus::RemoteAccessError,
            (Layer::Ddp, 2) => WcStatus::RemoteInvalidRequestError,
            _ => WcStatus::RemoteOperationError,
        };
        if let Some((seq, wr_id, len)) = self.tx.take_first_outstanding_read() {
            let c = self.out.completion(wr_id, status, WcOpcode::Read, len);
            self.out.finish_send(seq, Some(c));
        }
        self.state = QpState::Error;
        self.flush();
    }

    fn fail(&mut self, f: Fatal) {
        match f {
            Fatal::Local(cause, copied) => self.fail_local(cause, copied),
            Fatal::Remote(cause) => self.fail_remote(cause),
        }
    }

    /// Whether a Terminate we queued has been handed to the transport, so the
    /// connection can be closed.
    pub fn terminate_sent(&self) -> bool {
        self.state == QpState::Terminate && self.tx.terminate_done()
    }

    /// Gives back the memory of queues that a burst grew and that are empty now (the
    /// send queue, the Read queues, completions and events waiting in the QP); the I/O
    /// layer calls this after delivering. Receive buffers posted stay.
    pub fn shrink_idle_queues(&mut self) {
        self.tx.shrink_idle();
        self.out.shrink_idle();
    }

    /// Next completion for the I/O layer to deliver to the named CQ.
    pub fn poll_completion(&mut self) -> Option<(CqSide, Completion)> {
        self.out.poll_completion()
    }

    /// Every completion released so far, in order, as runs bound for one CQ each
    /// (slices: a run goes into its CQ in one step); afterwards none is left to poll.
    pub fn drain_completions(&mut self, f: impl FnMut(CqSide, &[Completion])) {
        self.out.drain_completions(f);
    }

    /// Next event (fatal error, solicited arrival).
    pub fn poll_event(&mut self) -> Option<QpEvent> {
        self.out.poll_event()
    }

    /// Whether a completion or an event waits for [`Qp::drain_completions`] or
    /// [`Qp::poll_event`]: after a pass that released neither (a Write placed), the
    /// I/O layer may skip its delivery.
    pub fn has_output(&self) -> bool {
        self.out.has_output()
    }

    /// Work requests queued or in flight on the send side (for tests and stats).
    pub fn send_queue_len(&self) -> usize {
        self.tx.sq_len()
    }

    /// The transmit side in one line, for a hang report: requests queued (`sq`), RDMA
    /// Reads outstanding (`orq`: ORD in use), inbound Read Requests whose responses
    /// wait (`irq`: IRD in use), what is being handed to the transport.
    pub fn transmit_report(&self) -> String {
        format!("{:?}, {}", self.tx, self.out.report())
    }

    /// Receives posted to the own queue and not yet taken by a message.
    pub fn recv_queue_len(&self) -> usize {
        self.rq.len()
    }

    // ---- The receive path's entry points (see `receive`). ----

    /// Runs one receive step with the rest of the QP lent to the receiver; a fatal
    /// outcome fails the QP.
    fn rx_step(
        &mut self,
        ctx: &mut RxCtx<'_>,
        step: impl FnOnce(&mut Receiver, &mut RxDeps<'_>) -> Result<(), Fatal>,
    ) {
        let mut deps = RxDeps {
            qp: self.cfg.id,
            pd: self.cfg.pd,
            tx: &mut self.tx,
            tpt: ctx.tpt,
            buffers: match ctx.srq.as_deref_mut() {
                Some(s) => s,
                None => &mut self.rq,
            },
            out: &mut self.out,
        };
        if let Err(f) = step(&mut self.rx, &mut deps) {
            self.fail(f);
        }
    }

    /// What the receive path needs next.
    pub fn rx_need(&self) -> RxNeed {
        self.rx.need()
    }

    /// Where to put the octets [`RxNeed::Internal`] asks for.
    pub fn rx_buffer(&mut self) -> &mut [u8] {
        self.rx.buffer()
    }

    /// `n` octets were written into [`Qp::rx_buffer`].
    pub fn rx_filled(&mut self, n: usize, ctx: &mut RxCtx<'_>) {
        self.rx_step(ctx, |rx, d| rx.filled(n, d));
    }

    /// The fast path for octets read ahead: if `data` begins with a whole FPDU of a
    /// data message (Write, Read Response, Send) and the stream is at an FPDU boundary,
    /// takes it in one call, its payload handed to `place` (which returns false if it
    /// could not place it: then the FPDU is left there, and the I/O layer must fail the
    /// QP). Returns the octets taken, or `None` when the fast path does not apply (take
    /// the octets with [`Qp::rx_need`] and its steps, or [`Qp::handle_input`]). The
    /// outcome, faults included, is the step path's.
    pub fn rx_take_fpdu(
        &mut self,
        data: &[u8],
        ctx: &mut RxCtx<'_>,
        place: &mut dyn FnMut(Chunk, &[u8]) -> bool,
    ) -> Option<usize> {
        if self.params.markers_rx {
            // A marker may sit anywhere: FPDUs are taken step by step.
            return None;
        }
        let mut taken = None;
        self.rx_step(ctx, |rx, d| rx.take_whole(data, d, place, &mut taken));
        taken
    }

    /// [`Qp::rx_take_fpdu`] for a run: up to `max` whole data FPDUs at the front of
    /// `data` in one call (a read-ahead of small messages taken in one pass), with the
    /// same outcome as taking them one by one. `None` when the first octets are not
    /// such an FPDU; a run that stops early says so ([`RxRun::complete`]).
    pub fn rx_take_run(
        &mut self,
        data: &[u8],
        max: usize,
        ctx: &mut RxCtx<'_>,
        place: &mut dyn FnMut(Chunk, &[u8]) -> bool,
    ) -> Option<RxRun> {
        let mut run = RxRun::default();
        self.rx_step(ctx, |rx, d| rx.take_run(data, max, d, place, &mut run));
        (run.taken > 0).then_some(run)
    }

    /// The shortest way for a read-ahead of small messages on a QP with its own
    /// receive queue: whole simple Writes and Sends at the front of `data` (the one-step
    /// paths of [`Qp::rx_take_run`], which check everything before they change
    /// anything), taken with only the table of STags. Stops at the first FPDU they do
    /// not take, which is left untouched for [`Qp::rx_take_run`] and the steps: so the
    /// outcome, faults included, is theirs. Nothing is taken on a QP that uses a shared
    /// queue. Skips the general run's set-up (the receive context, a dynamic buffer
    /// source, the step's fault handling): a ping-pong's FPDU pays none of it.
    #[inline]
    pub fn rx_take_simple(
        &mut self,
        data: &[u8],
        tpt: &Tpt,
        place: &mut dyn FnMut(Chunk, &[u8]) -> bool,
    ) -> RxRun {
        self.rx_take_simple_to(data, tpt, place, &mut Queued)
    }

    /// [`Qp::rx_take_simple`], with each receive completion offered to `to` first
    /// while the QP holds no completion released before it ([`RecvHandoff`]); what
    /// `to` refuses is queued as usual, and so is every later one.
    #[inline]
    pub fn rx_take_simple_to(
        &mut self,
        data: &[u8],
        tpt: &Tpt,
        place: &mut dyn FnMut(Chunk, &[u8]) -> bool,
        to: &mut impl RecvHandoff,
    ) -> RxRun {
        let mut run = RxRun::default();
        if !self.on_srq {
            let mut d = RxDeps {
                qp: self.cfg.id,
                pd: self.cfg.pd,
                tx: &mut self.tx,
                tpt,
                buffers: &mut self.rq,
                out: &mut self.out,
            };
            self.rx.take_simple_run(data, &mut d, place, &mut run, to);
        }
        run
    }

    /// Payload octets were read into the memory [`RxNeed::Place`] named; `placed` is
    /// those octets (the CRC is computed over them while they are hot in cache).
    pub fn rx_placed(&mut self, placed: &[u8]) {
        self.rx.placed_with(placed.len(), |crc| {
            softrnic_wire::crc::crc32c_append(crc, placed)
        });
    }

    /// As [`Qp::rx_placed`] for an I/O layer that does not hold the octets as a slice:
    /// `n` octets were placed, and `crc_append` extends a running CRC32c over them (it
    /// is called only when CRC is on).
    pub fn rx_placed_with(&mut self, n: usize, crc_append: impl FnOnce(u32) -> u32) {
        self.rx.placed_with(n, crc_append);
    }

    /// When [`RxNeed::Place`] names the last piece of the payload: how many trailer
    /// octets (pad and CRC) follow it, so that an I/O layer can read them in the same
    /// call as the payload. `None` otherwise.
    pub fn rx_trailer_after_place(&self) -> Option<usize> {
        self.rx.trailer_after_place()
    }

    /// Whether the receive path is between FPDUs of an unmarked stream and takes
    /// octets (not stopped, not waiting for a receive buffer): an I/O layer may read
    /// ahead and offer the octets to [`Qp::rx_take_run`] first. A few loads, inlined:
    /// a busy-polling consumer asks on every poll.
    #[inline]
    pub fn rx_between_fpdus(&self) -> bool {
        self.rx.between_fpdus()
    }

    /// Whether the stream is inside an FPDU: some of its octets have arrived, not all.
    /// A stream that ends here was truncated (lost), not closed between messages.
    pub fn rx_mid_fpdu(&self) -> bool {
        self.rx.mid_fpdu()
    }

    /// Total payload octets placed so far by the in-order stream.
    pub fn rx_placed_bytes(&self) -> u64 {
        self.rx.placed_bytes()
    }

    /// Sequence number (octets since the first FPDU) of the next octet the stream
    /// expects.
    pub fn rx_position(&self) -> u64 {
        self.rx.position()
    }

    /// A Send waiting for a receive buffer ([`RxNeed::Wait`]) asks its shared receive
    /// queue again; afterwards [`Qp::rx_need`] says whether it got one. The I/O layer
    /// calls this when the queue wakes the QP.
    pub fn rx_retry(&mut self, ctx: &mut RxCtx<'_>) {
        if self.rx.need() == RxNeed::Wait {
            self.rx_step(ctx, |rx, d| rx.retry(d));
        }
    }

    /// Drives the receive path from the next octets of the stream: internal octets are
    /// buffered, payload is handed to `place` with its destination. Returns the octets
    /// consumed (all of them, unless receive processing stopped).
    pub fn handle_input(
        &mut self,
        data: &[u8],
        ctx: &mut RxCtx<'_>,
        place: &mut dyn FnMut(Chunk, &[u8]),
    ) -> usize {
        let mut at = 0;
        while at < data.len() {
            match self.rx_need() {
                RxNeed::Stopped | RxNeed::Wait => break,
                RxNeed::Internal(n) => {
                    let k = n.min(data.len() - at);
                    self.rx_buffer()[..k].copy_from_slice(&data[at..at + k]);
                    at += k;
                    self.rx_filled(k, ctx);
                }
                RxNeed::Place(c) => {
                    let k = c.len.min(data.len() - at);
                    let bytes = &data[at..at + k];
                    place(Chunk { len: k, ..c }, bytes);
                    at += k;
                    self.rx_placed(bytes);
                }
            }
        }
        at
    }

    /// Takes a TCP segment found at stream sequence number `seq` (octets since the first
    /// FPDU), whether it is next in order, overlaps octets taken already, or lies ahead
    /// of a hole. In-order octets are taken as by [`Qp::handle_input`]; a segment ahead
    /// is placed at once if it holds whole FPDUs whose CRC checks (see
    /// [`SegmentOutcome`]), and what those FPDUs complete is delivered when the stream
    /// reaches them, so completions keep their order.
    pub fn handle_segment(
        &mut self,
        seq: u64,
        data: &[u8],
        ctx: &mut RxCtx<'_>,
        place: &mut dyn FnMut(Chunk, &[u8]),
    ) -> SegmentOutcome {
        match self.rx_need() {
            RxNeed::Stopped => return SegmentOutcome::Stopped,
            RxNeed::Wait => return SegmentOutcome::Keep,
            _ => {}
        }
        let pos = self.rx.position();
        if seq > pos {
            // Out-of-order placement finds FPDUs by their CRC at a segment's start;
            // with markers, segments are taken in order only.
            let crc = self.params.crc && !self.params.markers_rx;
            let mut taken = false;
            self.rx_step(ctx, |rx, d| {
                taken = rx.take_ahead(seq, data, crc, d, place);
                Ok(())
            });
            return if taken {
                SegmentOutcome::Taken
            } else {
                SegmentOutcome::Keep
            };
        }
        // In order (perhaps partly seen): feed from the stream's position on, and step
        // over FPDUs taken ahead as the stream reaches them.
        let mut at_seq = seq;
        let mut rest = data;
        loop {
            let pos = self.rx.position();
            let seen = usize::try_from(pos - at_seq)
                .unwrap_or(usize::MAX)
                .min(rest.len());
            rest = &rest[seen..];
            at_seq += seen as u64;
            if rest.is_empty() {
                return SegmentOutcome::Taken;
            }
            // One need at a time: a step may skip FPDUs taken ahead.
            let k = match self.rx_need() {
                RxNeed::Stopped => return SegmentOutcome::Stopped,
                RxNeed::Wait => return SegmentOutcome::Keep,
                RxNeed::Internal(n) => n.min(rest.len()),
                RxNeed::Place(c) => c.len.min(rest.len()),
            };
            let used = self.handle_input(&rest[..k], ctx, place);
            if used == 0 {
                return match self.rx_need() {
                    RxNeed::Wait => SegmentOutcome::Keep,
                    _ => SegmentOutcome::Stopped,
                };
            }
            rest = &rest[used..];
            at_seq += used as u64;
        }
    }
}

#[cfg(test)]
mod tests;
