//! The receive path: a state machine fed with the octets of the MPA stream, in order.
//!
//! It is header-directed so that payload need not be copied: the I/O layer asks
//! [`Qp::rx_need`] what the next octets are. Header, control bodies (Read Request,
//! Terminate) and trailers go into the QP's small internal buffer; payload is announced
//! as a [`Chunk`] of registered memory, already checked against the TPT, into which the
//! I/O layer can read straight from the socket, then reports with [`Qp::rx_placed`].
//! [`Qp::handle_input`] drives the same machine from a byte slice (a copy into place),
//! for segment-fed transports, tests, and octets an I/O layer read ahead. Which payload
//! is read directly and which is copied is the I/O layer's choice (the kernel-socket
//! path's policy and its measured cost: `softrnic_rnic::RX_DIRECT_MIN`).
//!
//! Any violation stops receive processing for good: the QP queues a Terminate carrying
//! the RFC's layer/type/code and the offending headers, and flushes.

use super::tx::Chunk;
use super::{CqSide, Qp, QpEvent, QpParams};
use crate::tpt::{RemoteAccess, Tpt};
use crate::verbs::*;
use softrnic_wire::crc::crc32c_append;
use softrnic_wire::ddp::{DdpRepr, Placement, TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN};
use softrnic_wire::mpa;
use softrnic_wire::rdmap::{Opcode, READ_REQUEST_LEN, ReadRequest};
use softrnic_wire::terminate::{
    Layer, TerminateCause, TerminateRepr, ddp_code, ddp_etype, rdmap_code, rdmap_etype,
};
use softrnic_wire::{Result as WireResult, WireError};

/// What the receive path needs next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxNeed {
    /// Up to this many octets into [`Qp::rx_buffer`], then [`Qp::rx_filled`].
    Internal(usize),
    /// The next octets (up to `len`) are payload for this memory; read them there, then
    /// call [`Qp::rx_placed`].
    Place(Chunk),
    /// Receive processing has stopped (Terminate or Error): read nothing more.
    Stopped,
}

/// Headers of the offending segment, copied into the Terminate we send.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CopiedHeaders {
    /// The offending segment's length (MPA ULPDU length), if it was read.
    pub segment_len: Option<u16>,
    /// The offending DDP header (with RDMAP control) and its length (0: none).
    pub ddp_header: ([u8; UNTAGGED_HEADER_LEN], usize),
    /// The offending Read Request header.
    pub read_request: Option<[u8; READ_REQUEST_LEN]>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// ULPDU length and DDP/RDMAP control: 4 octets.
    Prefix,
    /// The rest of the DDP header.
    Header,
    /// A control body (Read Request, Terminate) into the buffer.
    Body,
    /// Payload into memory.
    Payload,
    /// Pad and CRC.
    Trailer,
    /// Stopped for good.
    Stopped,
}

/// The longest control body accepted: a Terminate with both copied headers.
const MAX_BODY: usize = 4 + 2 + UNTAGGED_HEADER_LEN + READ_REQUEST_LEN;
const BUF_LEN: usize = 2 + UNTAGGED_HEADER_LEN + MAX_BODY;

/// Receive-side state of a QP.
#[derive(Debug)]
pub(crate) struct RxState {
    phase: Phase,
    buf: [u8; BUF_LEN],
    have: usize,
    want: usize,
    crc_on: bool,
    crc: u32,
    ulpdu_len: usize,
    header_len: usize,
    header: Option<DdpRepr>,
    /// Destination of the current payload, front first.
    dest: Vec<Chunk>,
    payload_len: usize,
    payload_done: usize,
    trailer_at: usize,
    /// Expected MSN of the next Send message (queue 0) and Read Request (queue 1).
    recv_msn: u32,
    rreq_msn: u32,
    /// Octets placed into the receive at the head of the RQ by the current message.
    await_rtr: bool,
    /// Total payload octets placed (for tests and statistics).
    pub(crate) placed_bytes: u64,
}

impl Default for RxState {
    fn default() -> Self {
        RxState {
            phase: Phase::Prefix,
            buf: [0; BUF_LEN],
            have: 0,
            want: 4,
            crc_on: false,
            crc: 0,
            ulpdu_len: 0,
            header_len: 0,
            header: None,
            dest: Vec::with_capacity(MAX_SGE),
            payload_len: 0,
            payload_done: 0,
            trailer_at: 0,
            recv_msn: 1,
            rreq_msn: 1,
            await_rtr: false,
            placed_bytes: 0,
        }
    }
}

impl RxState {
    pub(crate) fn start(&mut self, p: &QpParams) {
        self.crc_on = p.crc;
        self.await_rtr = p.await_rtr;
    }

    fn copied(&self) -> CopiedHeaders {
        let mut c = CopiedHeaders::default();
        if self.have >= 2 {
            c.segment_len = Some(u16::from_be_bytes([self.buf[0], self.buf[1]]));
        }
        if self.header_len > 0 && self.have >= 2 + self.header_len {
            c.ddp_header.0[..self.header_len].copy_from_slice(&self.buf[2..2 + self.header_len]);
            c.ddp_header.1 = self.header_len;
        }
        if self.header.is_some_and(|h| h.opcode == Opcode::ReadRequest)
            && self.have >= 2 + self.header_len + READ_REQUEST_LEN
        {
            let mut r = [0u8; READ_REQUEST_LEN];
            let at = 2 + self.header_len;
            r.copy_from_slice(&self.buf[at..at + READ_REQUEST_LEN]);
            c.read_request = Some(r);
        }
        c
    }

    fn reset(&mut self) {
        self.phase = Phase::Prefix;
        self.have = 0;
        self.want = 4;
        self.crc = 0;
        self.header = None;
        self.header_len = 0;
        self.dest.clear();
        self.payload_done = 0;
        self.payload_len = 0;
    }
}

fn ddp_untagged(code: u8) -> TerminateCause {
    TerminateCause::new(Layer::Ddp, ddp_etype::UNTAGGED_BUFFER, code)
}

fn rdmap_op(code: u8) -> TerminateCause {
    TerminateCause::new(Layer::Rdmap, rdmap_etype::REMOTE_OPERATION, code)
}

/// Appends the chunks covering `[skip, skip + len)` of a receive's SGEs.
fn sge_chunks(sges: &[(RegionId, u64, u32)], mut skip: u64, mut len: u64, out: &mut Vec<Chunk>) {
    for &(region, offset, l) in sges {
        if len == 0 {
            break;
        }
        let l = u64::from(l);
        if skip >= l {
            skip -= l;
            continue;
        }
        let take = (l - skip).min(len);
        out.push(Chunk {
            region,
            offset: offset + skip,
            len: take as usize,
        });
        skip = 0;
        len -= take;
    }
}

impl Qp {
    /// What the receive path needs next.
    pub fn rx_need(&self) -> RxNeed {
        let rx = &self.rx;
        match rx.phase {
            Phase::Stopped => RxNeed::Stopped,
            Phase::Payload => match rx.dest.first() {
                Some(c) => RxNeed::Place(*c),
                None => RxNeed::Stopped,
            },
            _ => RxNeed::Internal(rx.want - rx.have),
        }
    }

    /// Where to put the octets [`RxNeed::Internal`] asks for.
    pub fn rx_buffer(&mut self) -> &mut [u8] {
        let (have, want) = (self.rx.have, self.rx.want);
        &mut self.rx.buf[have..want]
    }

    /// `n` octets were written into [`Qp::rx_buffer`].
    pub fn rx_filled(&mut self, n: usize, tpt: &mut Tpt) {
        self.rx.have = (self.rx.have + n).min(self.rx.want);
        if self.rx.have < self.rx.want {
            return;
        }
        match self.rx.phase {
            Phase::Prefix => self.on_prefix(),
            Phase::Header => self.on_header(tpt),
            Phase::Body => self.on_body(tpt),
            Phase::Trailer => self.on_trailer(tpt),
            Phase::Payload | Phase::Stopped => {}
        }
    }

    /// Payload octets were read into the memory [`RxNeed::Place`] named; `placed` is
    /// those octets (the CRC is computed over them while they are hot in cache).
    pub fn rx_placed(&mut self, placed: &[u8]) {
        self.rx_placed_with(placed.len(), |crc| crc32c_append(crc, placed));
    }

    /// As [`Qp::rx_placed`] for an I/O layer that does not hold the octets as a slice:
    /// `n` octets were placed, and `crc_append` extends a running CRC32c over them (it
    /// is called only when CRC is on).
    pub fn rx_placed_with(&mut self, n: usize, crc_append: impl FnOnce(u32) -> u32) {
        let rx = &mut self.rx;
        let Some(front) = rx.dest.first_mut() else {
            return;
        };
        let n = n.min(front.len);
        if rx.crc_on {
            rx.crc = crc_append(rx.crc);
        }
        front.len -= n;
        front.offset += n as u64;
        if front.len == 0 {
            rx.dest.remove(0);
        }
        rx.payload_done += n;
        rx.placed_bytes += n as u64;
        if rx.dest.is_empty() {
            self.enter_trailer();
        }
    }

    /// Drives the receive path from a byte slice: internal octets are buffered, payload
    /// is handed to `place` with its destination. Returns the octets consumed (all of
    /// them, unless receive processing stopped).
    pub fn handle_input(
        &mut self,
        data: &[u8],
        tpt: &mut Tpt,
        place: &mut dyn FnMut(Chunk, &[u8]),
    ) -> usize {
        let mut at = 0;
        while at < data.len() {
            match self.rx_need() {
                RxNeed::Stopped => break,
                RxNeed::Internal(n) => {
                    let k = n.min(data.len() - at);
                    self.rx_buffer()[..k].copy_from_slice(&data[at..at + k]);
                    at += k;
                    self.rx_filled(k, tpt);
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

    /// Whether the stream is inside an FPDU: some of its octets have arrived, not all.
    /// A stream that ends here was truncated (lost), not closed between messages.
    pub fn rx_mid_fpdu(&self) -> bool {
        match self.rx.phase {
            Phase::Stopped => false,
            Phase::Prefix => self.rx.have > 0,
            _ => true,
        }
    }

    /// Total payload octets placed so far.
    pub fn rx_placed_bytes(&self) -> u64 {
        self.rx.placed_bytes
    }

    fn fail_rx(&mut self, cause: TerminateCause) {
        let copied = self.rx.copied();
        self.rx.phase = Phase::Stopped;
        self.fail_local(cause, copied);
    }

    fn fail_wire(&mut self, e: WireError) {
        self.fail_rx(e.terminate_cause());
    }

    fn on_prefix(&mut self) {
        let rx = &mut self.rx;
        rx.ulpdu_len = usize::from(u16::from_be_bytes([rx.buf[0], rx.buf[1]]));
        rx.header_len = if rx.buf[2] & 0x80 != 0 {
            TAGGED_HEADER_LEN
        } else {
            UNTAGGED_HEADER_LEN
        };
        if rx.ulpdu_len < rx.header_len {
            let len = rx.ulpdu_len as u16;
            rx.header_len = 0;
            return self.fail_wire(WireError::BadUlpduLength(len));
        }
        rx.phase = Phase::Header;
        rx.want = 2 + rx.header_len;
    }

    fn on_header(&mut self, tpt: &mut Tpt) {
        let hl = self.rx.header_len;
        let h = match DdpRepr::parse_bytes(&self.rx.buf[2..2 + hl]).and_then(check_rdmap_rules) {
            Ok(h) => h,
            Err(e) => return self.fail_wire(e),
        };
        self.rx.header = Some(h);
        let body_len = self.rx.ulpdu_len - hl;
        match h.opcode {
            Opcode::ReadRequest | Opcode::Terminate => {
                if h.opcode == Opcode::ReadRequest && body_len != READ_REQUEST_LEN {
                    return self.fail_wire(WireError::BadReadRequestLength(body_len));
                }
                if body_len > MAX_BODY {
                    return self.fail_wire(WireError::BadTerminate("longer than any Terminate"));
                }
                self.rx.phase = Phase::Body;
                self.rx.want = 2 + hl + body_len;
                if body_len == 0 {
                    self.on_body(tpt);
                }
            }
            Opcode::Write | Opcode::ReadResponse => self.tagged_destination(h, body_len, tpt),
            op if op.is_send() => self.send_destination(h, body_len),
            _ => self.fail_rx(rdmap_op(rdmap_code::UNEXPECTED_OPCODE)),
        }
    }

    fn tagged_destination(&mut self, h: DdpRepr, len: usize, tpt: &mut Tpt) {
        let Placement::Tagged { stag, to } = h.placement else {
            return self.fail_rx(rdmap_op(rdmap_code::UNEXPECTED_OPCODE));
        };
        let pd = self.cfg.pd;
        if h.opcode == Opcode::Write {
            if len == 0 {
                // Zero-length Writes place nothing (RFC 6581 uses one as RTR): no lookup.
                return self.enter_payload(len);
            }
            match tpt.check_remote(
                stag,
                to,
                len as u64,
                Access::REMOTE_WRITE,
                pd,
                RemoteAccess::TaggedPlacement,
            ) {
                Ok(t) => self.rx.dest.push(Chunk {
                    region: t.region,
                    offset: t.offset,
                    len,
                }),
                Err(cause) => return self.fail_rx(cause),
            }
        } else {
            if self.tx.match_read_response(stag, to, len as u32).is_none() {
                return self.fail_rx(TerminateCause::new(
                    Layer::Ddp,
                    ddp_etype::TAGGED_BUFFER,
                    ddp_code::tagged::INVALID_STAG,
                ));
            }
            if len > 0 {
                match tpt.check_remote(
                    stag,
                    to,
                    len as u64,
                    Access::LOCAL_WRITE,
                    pd,
                    RemoteAccess::TaggedPlacement,
                ) {
                    Ok(t) => self.rx.dest.push(Chunk {
                        region: t.region,
                        offset: t.offset,
                        len,
                    }),
                    Err(cause) => return self.fail_rx(cause),
                }
            }
        }
        self.enter_payload(len);
    }

    fn send_destination(&mut self, h: DdpRepr, len: usize) {
        let Placement::Untagged { msn, mo, .. } = h.placement else {
            return self.fail_rx(rdmap_op(rdmap_code::UNEXPECTED_OPCODE));
        };
        if msn != self.rx.recv_msn {
            return self.fail_rx(ddp_untagged(ddp_code::untagged::MSN_RANGE));
        }
        if self.rx.await_rtr && h.opcode == Opcode::Send && len == 0 && mo == 0 && h.last {
            // RFC 6581 RTR as a zero-length Send: consumes no receive buffer.
            return self.enter_payload(0);
        }
        let Some(wqe) = self.rq.front() else {
            // On iWARP an empty receive queue is fatal.
            return self.fail_rx(ddp_untagged(ddp_code::untagged::NO_BUFFER));
        };
        let end = u64::from(mo) + len as u64;
        if end > wqe.total {
            let wr_id = wqe.wr_id;
            self.rq.pop_front();
            let c = self.completion(wr_id, WcStatus::LocalLengthError, WcOpcode::Recv, 0);
            self.push(CqSide::Recv, c);
            return self.fail_rx(ddp_untagged(ddp_code::untagged::TOO_LONG));
        }
        let mut dest = std::mem::take(&mut self.rx.dest);
        sge_chunks(&wqe.sges, u64::from(mo), len as u64, &mut dest);
        self.rx.dest = dest;
        self.enter_payload(len);
    }

    fn enter_payload(&mut self, len: usize) {
        let rx = &mut self.rx;
        if rx.crc_on {
            rx.crc = crc32c_append(rx.crc, &rx.buf[..rx.have]);
        }
        rx.payload_len = len;
        rx.payload_done = 0;
        rx.phase = Phase::Payload;
        if len == 0 {
            rx.dest.clear();
            self.enter_trailer();
        }
    }

    fn enter_trailer(&mut self) {
        let rx = &mut self.rx;
        rx.phase = Phase::Trailer;
        rx.trailer_at = rx.have;
        rx.want = rx.have + mpa::pad_len(rx.ulpdu_len) + mpa::CRC_LEN;
    }

    fn on_body(&mut self, tpt: &mut Tpt) {
        let Some(h) = self.rx.header else { return };
        let at = 2 + self.rx.header_len;
        let body_end = self.rx.want;
        match h.opcode {
            Opcode::ReadRequest => {
                let rr = match ReadRequest::parse(&self.rx.buf[at..body_end]) {
                    Ok(rr) => rr,
                    Err(e) => return self.fail_wire(e),
                };
                let Placement::Untagged { msn, .. } = h.placement else {
                    return;
                };
                if msn != self.rx.rreq_msn {
                    return self.fail_rx(ddp_untagged(ddp_code::untagged::MSN_RANGE));
                }
                self.rx.rreq_msn = self.rx.rreq_msn.wrapping_add(1);
                let source = if rr.size == 0 {
                    Chunk {
                        region: RegionId(u32::MAX),
                        offset: 0,
                        len: 0,
                    }
                } else {
                    match tpt.check_remote(
                        rr.source_stag,
                        rr.source_to,
                        u64::from(rr.size),
                        Access::REMOTE_READ,
                        self.cfg.pd,
                        RemoteAccess::ReadSource,
                    ) {
                        Ok(t) => Chunk {
                            region: t.region,
                            offset: t.offset,
                            len: rr.size as usize,
                        },
                        Err(cause) => return self.fail_rx(cause),
                    }
                };
                if self.rx.await_rtr && rr.size == 0 {
                    // RFC 6581 RTR as a zero-length Read: answered like any Read.
                    self.rx.await_rtr = false;
                    self.tx.hold_for_rtr = false;
                }
                if !self.tx.push_inbound_read(&rr, source) {
                    // More Read Requests than the IRD we advertised.
                    return self.fail_rx(ddp_untagged(ddp_code::untagged::NO_BUFFER));
                }
            }
            Opcode::Terminate => match TerminateRepr::parse(&self.rx.buf[at..body_end]) {
                Ok(t) => {
                    self.rx.phase = Phase::Stopped;
                    return self.fail_remote(t.cause);
                }
                Err(e) => return self.fail_wire(e),
            },
            _ => {}
        }
        self.enter_payload(0);
    }

    fn on_trailer(&mut self, tpt: &mut Tpt) {
        let rx = &mut self.rx;
        let pad_end = rx.want - mpa::CRC_LEN;
        if rx.crc_on {
            let crc = crc32c_append(rx.crc, &rx.buf[rx.trailer_at..pad_end]);
            let b = &rx.buf[pad_end..rx.want];
            let received = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            if crc != received {
                return self.fail_wire(WireError::CrcMismatch {
                    received,
                    computed: crc,
                });
            }
        }
        let Some(h) = rx.header else { return };
        let len = rx.payload_len;
        rx.reset();
        self.complete_segment(h, len, tpt);
    }

    /// The segment is in place and intact: complete what it finishes.
    fn complete_segment(&mut self, h: DdpRepr, len: usize, tpt: &mut Tpt) {
        match h.opcode {
            Opcode::Write if self.rx.await_rtr && len == 0 => {
                // RFC 6581 RTR as a zero-length Write: the responder may now send.
                self.rx.await_rtr = false;
                self.tx.hold_for_rtr = false;
            }
            Opcode::ReadResponse => {
                if let Some((seq, wr_id, total, signaled)) =
                    self.tx.read_response_placed(len as u32, h.last)
                {
                    let c = self.completion(wr_id, WcStatus::Success, WcOpcode::Read, total);
                    self.finish_send(seq, signaled.then_some(c));
                }
            }
            op if op.is_send() => {
                let Placement::Untagged { mo, rsvd_ulp, .. } = h.placement else {
                    return;
                };
                if self.rx.await_rtr && len == 0 && op == Opcode::Send && h.last && mo == 0 {
                    self.rx.await_rtr = false;
                    self.tx.hold_for_rtr = false;
                    self.rx.recv_msn = self.rx.recv_msn.wrapping_add(1);
                    return;
                }
                if !h.last {
                    return;
                }
                self.rx.recv_msn = self.rx.recv_msn.wrapping_add(1);
                if op.invalidates() && tpt.invalidate(rsvd_ulp, self.cfg.pd).is_err() {
                    return self.fail_rx(TerminateCause::new(
                        Layer::Rdmap,
                        rdmap_etype::REMOTE_PROTECTION,
                        rdmap_code::CANNOT_INVALIDATE,
                    ));
                }
                let Some(wqe) = self.rq.pop_front() else {
                    return;
                };
                let mut c = self.completion(
                    wqe.wr_id,
                    WcStatus::Success,
                    WcOpcode::Recv,
                    mo + len as u32,
                );
                c.solicited = op.solicited();
                c.invalidated = op.invalidates().then_some(rsvd_ulp);
                self.push(CqSide::Recv, c);
                if op.solicited() {
                    self.push_event(QpEvent::Solicited);
                }
            }
            _ => {}
        }
    }
}

/// The RDMAP rules a header alone decides: queue numbers, single-segment messages.
fn check_rdmap_rules(h: DdpRepr) -> WireResult<DdpRepr> {
    if let Placement::Untagged { qn, mo, .. } = h.placement {
        if let Some(expected) = h.opcode.queue_number()
            && qn != expected
        {
            return Err(WireError::InvalidQueueNumber {
                qn,
                opcode: h.opcode.to_bits(),
            });
        }
        if matches!(h.opcode, Opcode::ReadRequest | Opcode::Terminate) && (mo != 0 || !h.last) {
            return Err(WireError::NotSingleSegment { mo, last: h.last });
        }
    }
    Ok(h)
}
