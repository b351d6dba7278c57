//! The receive path, in three parts: [`stream`](super::stream) finds FPDUs in the MPA
//! stream, [`place`](super::place) decides where each one's payload goes, and delivery
//! (here, with [`Outbox`] and [`Deferred`]) completes what each FPDU finishes, in stream
//! order. FPDUs found out of order ([`Receiver::take_ahead`]) are placed at once and
//! delivered when the stream reaches them.
//!
//! Any violation stops receive processing for good: the caller queues a Terminate
//! carrying the RFC's layer/type/code and the offending headers, and flushes.

mod sends;
mod simple;
mod writes;

use super::deliver::{Deferred, Outbox, QpEvent, Queued, RecvHandoff};
use super::fpdu::{Chunk, CopiedHeaders};
use super::place::{
    self, Arrival, SendSegment, Untagged, UntaggedFault, check_rdmap_rules, rdmap_op,
};
use super::rq::RecvSource;
use super::stream::{MAX_BODY, RxNeed, RxStream, Step};
use super::tx::TxState;
use crate::tpt::{RemoteKeyMemo, Tpt};
use crate::verbs::*;
use softrnic_wire::WireError;
use softrnic_wire::ddp::{DdpRepr, Placement};
use softrnic_wire::mpa;
use softrnic_wire::rdmap::{Opcode, READ_REQUEST_LEN, ReadRequest};
use softrnic_wire::terminate::{TerminateCause, ddp_code, rdmap_code};

/// FPDUs taken ahead of the stream and not yet delivered, at most (beyond, segments are
/// left to arrive in order).
const MAX_DEFERRED: usize = 1024;

/// What a receive step borrows from the rest of the QP and from the device.
pub(crate) struct RxDeps<'a> {
    pub qp: QpId,
    pub pd: PdId,
    pub tx: &'a mut TxState,
    pub tpt: &'a Tpt,
    pub buffers: &'a mut dyn RecvSource,
    pub out: &'a mut Outbox,
}

/// How receive processing ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fatal {
    /// We detected a violation: send a Terminate with these headers.
    Local(TerminateCause, CopiedHeaders),
    /// The peer sent a Terminate.
    Remote(TerminateCause),
}

/// Receive-side state of a QP.
#[derive(Debug, Default)]
pub(crate) struct Receiver {
    stream: RxStream,
    untagged: Untagged,
    /// RFC 6581: transmission waits for the peer's RTR message.
    await_rtr: bool,
    deferred: Deferred,
    /// A Send header whose message the receive source asked to wait for a buffer
    /// (back-pressure): (header, payload length). The stream reads nothing until
    /// [`Receiver::retry`] binds one.
    waiting: Option<(DdpRepr, usize)>,
    /// A Read Request whose body was taken and checked (MSN, TPT, IRD): its response
    /// is queued once its FPDU is whole, so that nothing is sent for a request whose
    /// CRC then fails.
    read_taken: Option<(ReadRequest, Chunk)>,
    /// The STag the last simple Write was checked through, while the table has not
    /// changed ([`RemoteKeyMemo`]).
    write_key: RemoteKeyMemo,
}

type Res = Result<(), Fatal>;

/// What [`crate::qp::Qp::rx_take_run`] took.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RxRun {
    /// Octets taken from the front of the data.
    pub taken: usize,
    /// Whole FPDUs among them.
    pub fpdus: usize,
    /// Whether the octets taken are exactly those FPDUs (false: the last octets
    /// taken begin an FPDU that was not taken whole).
    pub complete: bool,
}

impl Receiver {
    pub(crate) fn start(&mut self, crc: bool, markers: bool, await_rtr: bool) {
        self.stream.start(crc, markers);
        self.await_rtr = await_rtr;
    }

    pub(crate) fn need(&self) -> RxNeed {
        if self.waiting.is_some() {
            return RxNeed::Wait;
        }
        self.stream.need()
    }

    /// Asks the receive source again for the buffer a waiting Send needs.
    pub(crate) fn retry(&mut self, d: &mut RxDeps<'_>) -> Res {
        match self.waiting.take() {
            Some((h, len)) => self.send_destination(h, len, d),
            None => Ok(()),
        }
    }

    pub(crate) fn buffer(&mut self) -> &mut [u8] {
        self.stream.buffer()
    }

    pub(crate) fn placed_with(&mut self, n: usize, crc_append: impl FnOnce(u32) -> u32) {
        self.stream.placed_with(n, crc_append);
    }

    pub(crate) fn trailer_after_place(&self) -> Option<usize> {
        if self.waiting.is_some() {
            return None;
        }
        self.stream.trailer_after_place()
    }

    /// At an FPDU boundary of an unmarked stream, neither stopped nor waiting for a
    /// buffer: the next octets are an FPDU's first, read ahead.
    #[inline]
    pub(crate) fn between_fpdus(&self) -> bool {
        self.waiting.is_none() && self.stream.at_plain_boundary()
    }

    pub(crate) fn mid_fpdu(&self) -> bool {
        self.stream.mid_fpdu()
    }

    pub(crate) fn placed_bytes(&self) -> u64 {
        self.stream.placed_bytes()
    }

    pub(crate) fn position(&self) -> u64 {
        self.stream.position()
    }

    pub(crate) fn stop(&mut self) {
        self.stream.stop();
        self.deferred.clear();
        self.waiting = None;
        self.read_taken = None;
    }

    pub(crate) fn untagged(&mut self) -> &mut Untagged {
        &mut self.untagged
    }

    /// `n` octets were written into the internal buffer.
    pub(crate) fn filled(&mut self, n: usize, d: &mut RxDeps<'_>) -> Res {
        let step = self.stream.filled(n);
        self.on_step(step, d)
    }

    /// What a step of the stream completed.
    fn on_step(&mut self, step: softrnic_wire::Result<Step>, d: &mut RxDeps<'_>) -> Res {
        match step.map_err(|e| self.fail_wire(e))? {
            Step::More => Ok(()),
            Step::Header(h, rest) => self.on_header(h, rest, d),
            Step::Body(h) => self.on_body(h, d),
            Step::Done(h, len) => {
                self.deliver(h, len, d)?;
                self.deliver_deferred(d)
            }
        }
    }

    /// The fast path for octets read ahead: takes the whole FPDU at the front of `data`
    /// (a data message: Write, Read Response or Send) with one step for its length
    /// field and header, its payload handed to `place`, and its trailer; the same
    /// checks and outcomes as the step path ([`Receiver::filled`]). `taken` is set to
    /// the octets taken once the header is in (the whole FPDU, or fewer if `place`
    /// returned false, or receive processing stopped or waits for a buffer); it stays
    /// `None` when `data` does not begin with such an FPDU, and then nothing changed.
    pub(crate) fn take_whole(
        &mut self,
        data: &[u8],
        d: &mut RxDeps<'_>,
        place: &mut dyn FnMut(Chunk, &[u8]) -> bool,
        taken: &mut Option<usize>,
    ) -> Res {
        if self.waiting.is_some() {
            return Ok(());
        }
        let Some((h, rest, mut at, wire_len)) = self.stream.take_whole_header(data) else {
            return Ok(());
        };
        *taken = Some(at);
        self.on_header(h, rest, d)?;
        // The fast path takes no marked stream (`take_whole_header`): the steps below
        // are the stream's unmarked ones.
        while at < wire_len {
            let need = match self.waiting {
                Some(_) => RxNeed::Wait,
                None => self.stream.need_unmarked(),
            };
            match need {
                RxNeed::Place(c) => {
                    let k = c.len.min(wire_len - at);
                    let bytes = &data[at..at + k];
                    if !place(Chunk { len: k, ..c }, bytes) {
                        break;
                    }
                    self.stream
                        .placed_unmarked(k, |crc| softrnic_wire::crc::crc32c_append(crc, bytes));
                    at += k;
                }
                RxNeed::Internal(n) => {
                    let k = n.min(wire_len - at);
                    if let Some(step) = self.stream.take_trailer(&data[at..at + k]) {
                        // The trailer, checked where it lies: the FPDU is done.
                        at += k;
                        *taken = Some(at);
                        if let Step::Done(h, len) = step.map_err(|e| self.fail_wire(e))? {
                            self.deliver(h, len, d)?;
                            self.deliver_deferred(d)?;
                        }
                        continue;
                    }
                    self.stream.buffer_unmarked()[..k].copy_from_slice(&data[at..at + k]);
                    at += k;
                    *taken = Some(at);
                    let step = self.stream.take_filled(k);
                    self.on_step(step, d)?;
                }
                RxNeed::Stopped | RxNeed::Wait => break,
            }
            *taken = Some(at);
        }
        Ok(())
    }

    /// A run of whole data FPDUs at the front of `data`, at most `max` of them, each
    /// taken as [`Receiver::take_whole`] takes one, in one call: the read-ahead of a
    /// stream of small messages is taken in one pass. Stops at the first octets that
    /// are not a whole data FPDU (a control message, a cut FPDU: left for the step
    /// path), after an FPDU that was not taken whole (placement refused, receive
    /// stopped or waiting: `run.complete` is false), or at a fault (returned, with
    /// `run` counting what was taken up to and including the faulty FPDU's header).
    pub(crate) fn take_run(
        &mut self,
        data: &[u8],
        max: usize,
        d: &mut RxDeps<'_>,
        place: &mut dyn FnMut(Chunk, &[u8]) -> bool,
        run: &mut RxRun,
    ) -> Res {
        run.complete = true;
        while run.fpdus < max && run.taken < data.len() {
            let rest = &data[run.taken..];
            if sends::untagged_first(rest)
                && let Some(n) = self.take_simple_send(rest, d, place, &mut Queued)
            {
                run.taken += n;
                run.fpdus += 1;
                continue;
            }
            if writes::tagged_first(rest)
                && let Some(n) = self.take_simple_write(rest, d, place)
            {
                run.taken += n;
                run.fpdus += 1;
                continue;
            }
            let mut one = None;
            let r = self.take_whole(&data[run.taken..], d, place, &mut one);
            let Some(n) = one else {
                return r;
            };
            run.taken += n;
            if r.is_err() || !self.stream.at_boundary() {
                run.complete = false;
                return r;
            }
            run.fpdus += 1;
        }
        Ok(())
    }

    /// The one-step paths alone, over whole FPDUs at the front of `data`: stops at the
    /// first FPDU neither takes (then nothing of it changed). `run.complete` stays
    /// true: every FPDU counted is taken whole.
    #[inline]
    pub(crate) fn take_simple_run(
        &mut self,
        data: &[u8],
        d: &mut RxDeps<'_>,
        place: &mut dyn FnMut(Chunk, &[u8]) -> bool,
        run: &mut RxRun,
        to: &mut impl RecvHandoff,
    ) {
        run.complete = true;
        while run.taken < data.len() {
            let rest = &data[run.taken..];
            let took = if sends::untagged_first(rest) {
                self.take_simple_send(rest, d, place, to)
            } else if writes::tagged_first(rest) {
                self.take_simple_write(rest, d, place)
            } else {
                None
            };
            let Some(n) = took else {
                return;
            };
            run.taken += n;
            run.fpdus += 1;
        }
    }

    fn fail(&mut self, cause: TerminateCause) -> Fatal {
        let copied = self.stream.copied();
        self.stop();
        Fatal::Local(cause, copied)
    }

    fn fail_wire(&mut self, e: WireError) -> Fatal {
        self.fail(e.terminate_cause())
    }

    fn on_header(&mut self, h: DdpRepr, rest: usize, d: &mut RxDeps<'_>) -> Res {
        if h.opcode == Opcode::Terminate {
            return self.on_terminate_header(rest, d);
        }
        let h = check_rdmap_rules(h).map_err(|e| self.fail_wire(e))?;
        match h.opcode {
            Opcode::ReadRequest => {
                if rest != READ_REQUEST_LEN {
                    return Err(self.fail_wire(WireError::BadReadRequestLength(rest)));
                }
                match self.stream.expect_body(rest) {
                    Step::Body(h) => self.on_body(h, d),
                    _ => Ok(()),
                }
            }
            Opcode::Write | Opcode::ReadResponse => {
                let Placement::Tagged { stag, to } = h.placement else {
                    return Err(self.fail(rdmap_op(rdmap_code::UNEXPECTED_OPCODE)));
                };
                let need = if h.opcode == Opcode::Write {
                    Access::REMOTE_WRITE
                } else {
                    if d.tx.match_read_response(stag, to, rest as u32).is_none() {
                        return Err(self.fail(place::unexpected_read_response()));
                    }
                    Access::LOCAL_WRITE
                };
                let dest =
                    place::tagged(d.tpt, d.pd, stag, to, rest, need).map_err(|c| self.fail(c))?;
                self.stream.expect_payload(dest, rest);
                Ok(())
            }
            op if op.is_send() => self.send_destination(h, rest, d),
            _ => Err(self.fail(rdmap_op(rdmap_code::UNEXPECTED_OPCODE))),
        }
    }

    /// A Terminate from the peer ends the stream whatever is wrong with it (queue
    /// number, offset, L flag, length, body): RFC 5040 never answers a Terminate with
    /// another. Its body is read if it fits the buffer, for the cause it carries.
    fn on_terminate_header(&mut self, rest: usize, d: &mut RxDeps<'_>) -> Res {
        if rest > MAX_BODY {
            self.stop();
            return Err(Fatal::Remote(softrnic_wire::terminate::UNREADABLE));
        }
        match self.stream.expect_body(rest) {
            Step::Body(h) => self.on_body(h, d),
            _ => Ok(()),
        }
    }

    /// Whether a Send segment is an RFC 6581 RTR (a zero-length Send) we wait for.
    fn is_rtr_send(&self, h: &DdpRepr, len: usize) -> bool {
        matches!(h.placement, Placement::Untagged { mo: 0, .. })
            && self.await_rtr
            && h.opcode == Opcode::Send
            && len == 0
            && h.last
    }

    fn send_destination(&mut self, h: DdpRepr, len: usize, d: &mut RxDeps<'_>) -> Res {
        let Placement::Untagged { msn, mo, .. } = h.placement else {
            return Err(self.fail(rdmap_op(rdmap_code::UNEXPECTED_OPCODE)));
        };
        // In the stream, segments of one message arrive together and in MSN order.
        if msn != self.untagged.recv_msn() {
            return Err(self.fail(place::ddp_untagged(ddp_code::untagged::MSN_RANGE)));
        }
        if self.is_rtr_send(&h, len) {
            // RFC 6581 RTR as a zero-length Send: consumes no receive buffer.
            self.stream.expect_payload(std::iter::empty(), 0);
            return Ok(());
        }
        let seg = SendSegment { msn, mo, len };
        // The chunks go straight into the stream's destination list.
        let dest = self.stream.payload_dest();
        let r = self
            .untagged
            .send_dest(d.qp, seg, Arrival::InStream, d.buffers, dest);
        match r {
            Ok(()) => {
                self.stream.expect_payload_in_dest(len);
                Ok(())
            }
            Err(UntaggedFault::Wait) => {
                self.waiting = Some((h, len));
                Ok(())
            }
            Err(UntaggedFault::Terminate(c)) => Err(self.fail(c)),
            Err(UntaggedFault::TooLong(wqe)) => {
                d.buffers.release(d.qp);
                let c = d
                    .out
                    .completion(wqe.wr_id, WcStatus::LocalLengthError, WcOpcode::Recv, 0);
                d.out.recv(c);
                Err(self.fail(place::ddp_untagged(ddp_code::untagged::TOO_LONG)))
            }
        }
    }

    fn on_body(&mut self, h: DdpRepr, d: &mut RxDeps<'_>) -> Res {
        match h.opcode {
            Opcode::ReadRequest => {
                let rr = ReadRequest::parse(self.stream.body()).map_err(|e| self.fail_wire(e))?;
                let Placement::Untagged { msn, .. } = h.placement else {
                    return Err(self.fail(rdmap_op(rdmap_code::UNEXPECTED_OPCODE)));
                };
                self.untagged.read_request(msn).map_err(|c| self.fail(c))?;
                let source = place::read_source(d.tpt, d.pd, &rr).map_err(|c| self.fail(c))?;
                if !d.tx.inbound_read_room() {
                    // More Read Requests than the IRD we advertised (with IRD 0, any).
                    return Err(self.fail(place::ddp_untagged(ddp_code::untagged::NO_BUFFER)));
                }
                self.read_taken = Some((rr, source));
            }
            Opcode::Terminate => {
                let cause = softrnic_wire::terminate::received_cause(self.stream.body());
                self.stop();
                return Err(Fatal::Remote(cause));
            }
            _ => {}
        }
        self.stream.body_done();
        Ok(())
    }

    /// The FPDU is in place and intact, and every FPDU before it in the stream has been
    /// delivered: complete what it finishes.
    fn deliver(&mut self, h: DdpRepr, len: usize, d: &mut RxDeps<'_>) -> Res {
        match h.opcode {
            Opcode::ReadRequest => {
                if let Some((rr, source)) = self.read_taken.take() {
                    if self.await_rtr && rr.size == 0 {
                        // RFC 6581 RTR as a zero-length Read: answered like any Read.
                        self.await_rtr = false;
                        d.tx.hold_for_rtr = false;
                    }
                    // Room was checked when its body was taken, and no other request
                    // came in between.
                    let queued = d.tx.push_inbound_read(&rr, source);
                    debug_assert!(queued, "IRD checked at the request's body");
                }
            }
            Opcode::Write if self.await_rtr && len == 0 => {
                // RFC 6581 RTR as a zero-length Write: the responder may now send.
                self.await_rtr = false;
                d.tx.hold_for_rtr = false;
            }
            Opcode::ReadResponse => {
                if let Some((seq, wr_id, total, signaled)) =
                    d.tx.read_response_placed(len as u32, h.last)
                {
                    let c = d
                        .out
                        .completion(wr_id, WcStatus::Success, WcOpcode::Read, total);
                    d.out.finish_send(seq, signaled.then_some(c));
                }
            }
            op if op.is_send() => {
                let Placement::Untagged { mo, rsvd_ulp, .. } = h.placement else {
                    return Ok(());
                };
                if self.is_rtr_send(&h, len) {
                    self.await_rtr = false;
                    d.tx.hold_for_rtr = false;
                    self.untagged.skip_rtr_send();
                    return Ok(());
                }
                if !h.last {
                    return Ok(());
                }
                if op.invalidates() && d.tpt.invalidate_remote(rsvd_ulp, d.pd).is_err() {
                    // The buffer stays bound and flushes with the rest. The FPDU's
                    // octets are behind us: its header is written again for the
                    // Terminate.
                    self.stop();
                    let copied = CopiedHeaders::of(&h, len);
                    return Err(Fatal::Local(place::cannot_invalidate(), copied));
                }
                let Some(wr_id) = self.untagged.deliver_send(d.buffers) else {
                    return Ok(());
                };
                d.buffers.release(d.qp);
                let mut c = d.out.completion(
                    wr_id,
                    WcStatus::Success,
                    WcOpcode::Recv,
                    mo.wrapping_add(len as u32),
                );
                c.solicited = op.solicited();
                c.invalidated = op.invalidates().then_some(rsvd_ulp);
                d.out.recv(c);
                if op.solicited() {
                    d.out.event(QpEvent::Solicited);
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Delivers the FPDUs taken ahead that the stream has now reached, and steps over
    /// their octets.
    pub(crate) fn deliver_deferred(&mut self, d: &mut RxDeps<'_>) -> Res {
        while self.deferred.len() > 0 && self.stream.at_boundary() {
            let at = self.stream.position();
            let Some((end, h, len)) = self.deferred.take_at(at) else {
                break;
            };
            self.stream.skip(end - at);
            self.deliver(h, len, d)?;
        }
        Ok(())
    }

    /// A segment found at stream position `seq`, ahead of the stream (a hole before
    /// it). It is taken only if it holds whole FPDUs that can be placed now without
    /// risk: CRC negotiated and correct (nothing else tells that an FPDU starts at the
    /// segment's first octet), RDMA Writes or Send segments whose buffers are known,
    /// every check passed. Then their payload goes to `place` and their delivery waits
    /// for the stream; otherwise nothing happens (false), and the segment must be
    /// handed in again when the stream reaches it, where any fault is reported in order.
    pub(crate) fn take_ahead(
        &mut self,
        seq: u64,
        data: &[u8],
        crc_on: bool,
        d: &mut RxDeps<'_>,
        place: &mut dyn FnMut(Chunk, &[u8]),
    ) -> bool {
        if !crc_on || seq <= self.stream.position() || data.is_empty() {
            return false;
        }
        // First pass: every FPDU whole, intact and placeable; nothing changes yet.
        let mut plan: Vec<(u64, u64, DdpRepr, usize, Vec<Chunk>, usize)> = Vec::new();
        let mut no_markers: [u8; 0] = [];
        let mut at = 0;
        while at < data.len() {
            let Ok(f) = mpa::parse_fpdu(&data[at..], None, true, &mut no_markers) else {
                return false;
            };
            if f.check_crc().is_err() {
                return false;
            }
            let Ok(h) = DdpRepr::parse_bytes(f.ulpdu).and_then(check_rdmap_rules) else {
                return false;
            };
            let hl = h.header_len();
            let len = f.ulpdu.len() - hl;
            let (start, end) = (seq + at as u64, seq + (at + f.consumed) as u64);
            if !self.deferred.is_free(start, end)
                || self.deferred.len() + plan.len() >= MAX_DEFERRED
            {
                return false;
            }
            let mut dest = Vec::new();
            match (h.opcode, h.placement) {
                (Opcode::Write, Placement::Tagged { stag, to }) => {
                    match place::tagged(d.tpt, d.pd, stag, to, len, Access::REMOTE_WRITE) {
                        Ok(c) => dest.extend(c),
                        Err(_) => return false,
                    }
                }
                (op, Placement::Untagged { msn, mo, .. })
                    if op.is_send() && !self.is_rtr_send(&h, len) && !self.await_rtr =>
                {
                    let seg = SendSegment { msn, mo, len };
                    let ok =
                        self.untagged
                            .send_dest(d.qp, seg, Arrival::Ahead, d.buffers, &mut dest);
                    if ok.is_err() {
                        return false;
                    }
                }
                _ => return false,
            }
            plan.push((start, end, h, len, dest, at + mpa::ULPDU_LEN_LEN + hl));
            at += f.consumed;
        }
        // Second pass: place, and remember what each FPDU completes.
        for (start, end, h, len, dest, payload_at) in plan {
            let mut p = payload_at;
            for c in dest {
                place(c, &data[p..p + c.len]);
                p += c.len;
            }
            self.deferred.insert(start, end, h, len);
        }
        true
    }
}
