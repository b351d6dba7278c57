//! The stream part of the receive path: MPA deframing of the in-order byte stream.
//!
//! Header-directed, so that payload need not be copied: the I/O layer asks what the next
//! octets are ([`RxNeed`]). The length field, DDP header, control bodies (Read Request,
//! Terminate) and trailers go into a small internal buffer; the payload goes wherever
//! the placement step said (a list of [`Chunk`]s), read there directly or copied. The
//! framing arithmetic and the CRC are `softrnic_wire::mpa`'s ([`FpduCheck`]).
//!
//! This module knows where FPDUs begin and end; what a header means is decided by the
//! caller, which answers each [`Step::Header`] with [`RxStream::expect_body`] or
//! [`RxStream::expect_payload`].

mod markers;

use super::fpdu::{Chunk, CopiedHeaders};
use crate::verbs::MAX_SGE;
use softrnic_wire::ddp::{self, DdpRepr, UNTAGGED_HEADER_LEN};
use softrnic_wire::mpa::{self, FpduCheck};
use softrnic_wire::rdmap::{Opcode, READ_REQUEST_LEN};
use softrnic_wire::{Result as WireResult, WireError};

/// What the receive path needs next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxNeed {
    /// Up to this many octets into the internal buffer (`Qp::rx_buffer`), then
    /// `Qp::rx_filled`.
    Internal(usize),
    /// The next octets (up to `len`) are payload for this memory; read them there, then
    /// call `Qp::rx_placed`.
    Place(Chunk),
    /// Receive processing has stopped (Terminate or Error): read nothing more.
    Stopped,
    /// Back-pressure: a Send waits for a receive buffer that its shared receive queue
    /// holds back. Read nothing until woken, then call `Qp::rx_retry`.
    Wait,
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
pub(crate) const MAX_BODY: usize = softrnic_wire::terminate::MAX_LEN;
const BUF_LEN: usize = mpa::ULPDU_LEN_LEN + UNTAGGED_HEADER_LEN + MAX_BODY;
/// Length field and the two DDP/RDMAP control octets that say which header follows.
const PREFIX_LEN: usize = mpa::ULPDU_LEN_LEN + ddp::CONTROL_LEN;

/// What a step of the stream completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Nothing complete yet.
    More,
    /// A DDP header is in; the ULPDU has `rest` more octets (control body or payload).
    /// Answer with [`RxStream::expect_body`] or [`RxStream::expect_payload`].
    Header(DdpRepr, usize),
    /// A control body is in ([`RxStream::body`]).
    Body(DdpRepr),
    /// An FPDU is complete and its CRC checked: `payload` octets were placed.
    Done(DdpRepr, usize),
}

/// The receiver's view of the in-order MPA stream.
#[derive(Debug)]
pub(crate) struct RxStream {
    phase: Phase,
    buf: [u8; BUF_LEN],
    have: usize,
    want: usize,
    crc_on: bool,
    check: FpduCheck,
    header_len: usize,
    header: Option<DdpRepr>,
    /// Destination of the current payload, front first.
    dest: Vec<Chunk>,
    payload_len: usize,
    trailer_at: usize,
    /// Payload octets placed (for statistics and the I/O layer's copy policy).
    placed_bytes: u64,
    /// Octets of the stream taken so far: the sequence number of the next one.
    position: u64,
    /// RFC 5044 markers in this stream (`None`: off).
    marks: Option<markers::RxMarks>,
}

impl Default for RxStream {
    fn default() -> Self {
        RxStream {
            phase: Phase::Prefix,
            buf: [0; BUF_LEN],
            have: 0,
            want: PREFIX_LEN,
            crc_on: false,
            check: FpduCheck::default(),
            header_len: 0,
            header: None,
            dest: Vec::with_capacity(MAX_SGE),
            payload_len: 0,
            trailer_at: 0,
            placed_bytes: 0,
            position: 0,
            marks: None,
        }
    }
}

impl RxStream {
    /// Starts the stream with CRC and markers as negotiated. With markers the CRC is
    /// kept by the marker side (it covers the markers, in stream order), so the
    /// per-FPDU check only frames.
    pub(crate) fn start(&mut self, crc_on: bool, markers: bool) {
        self.crc_on = crc_on && !markers;
        self.marks = markers.then(|| markers::RxMarks::new(crc_on));
    }

    /// What the stream needs next.
    pub(crate) fn need(&self) -> RxNeed {
        if self.marks.is_some() {
            return self.need_marked();
        }
        self.need_unmarked()
    }

    /// What the stream needs next, markers aside.
    pub(crate) fn need_unmarked(&self) -> RxNeed {
        match self.phase {
            Phase::Stopped => RxNeed::Stopped,
            Phase::Payload => match self.dest.first() {
                Some(c) => RxNeed::Place(*c),
                None => RxNeed::Stopped,
            },
            _ => RxNeed::Internal(self.want - self.have),
        }
    }

    /// Where the octets [`RxNeed::Internal`] asks for go.
    pub(crate) fn buffer(&mut self) -> &mut [u8] {
        if self.marks.is_some() && self.in_marker() {
            return self.marker_buffer();
        }
        self.buffer_unmarked()
    }

    /// [`RxStream::buffer`] of a stream without markers.
    pub(crate) fn buffer_unmarked(&mut self) -> &mut [u8] {
        let (have, want) = (self.have, self.want);
        &mut self.buf[have..want]
    }

    /// `n` octets were written into [`RxStream::buffer`].
    pub(crate) fn filled(&mut self, n: usize) -> WireResult<Step> {
        if self.marks.is_some() {
            return self.filled_marked(n);
        }
        self.take_filled(n)
    }

    /// [`RxStream::filled`] for octets of the FPDU itself (not a marker).
    #[inline]
    pub(crate) fn take_filled(&mut self, n: usize) -> WireResult<Step> {
        let n = n.min(self.want - self.have);
        self.have += n;
        self.position += n as u64;
        if self.have < self.want {
            return Ok(Step::More);
        }
        match self.phase {
            Phase::Prefix => self.on_prefix().map(|()| Step::More),
            Phase::Header => self.on_header(),
            Phase::Body => Ok(self.header.map_or(Step::More, Step::Body)),
            Phase::Trailer => self.on_trailer(),
            Phase::Payload | Phase::Stopped => Ok(Step::More),
        }
    }

    /// While the payload's last destination chunk is wanted: the trailer's octets
    /// that follow it.
    pub(crate) fn trailer_after_place(&self) -> Option<usize> {
        (self.phase == Phase::Payload && self.dest.len() == 1).then(|| self.check.trailer_len())
    }

    /// `n` payload octets were placed into the chunk [`RxNeed::Place`] named;
    /// `crc_append` extends a running CRC32c over them (called only when CRC is on).
    pub(crate) fn placed_with(&mut self, n: usize, crc_append: impl FnOnce(u32) -> u32) {
        if self.marks.is_some() {
            self.placed_marked(n, crc_append);
            return;
        }
        self.placed_unmarked(n, crc_append);
    }

    /// [`RxStream::placed_with`] on a stream without markers.
    #[inline]
    pub(crate) fn placed_unmarked(&mut self, n: usize, crc_append: impl FnOnce(u32) -> u32) {
        if self.dest.is_empty() {
            return;
        }
        self.check.update_with(crc_append);
        self.advance_placed(n);
    }

    /// The placement bookkeeping of [`RxStream::placed_with`], the CRC aside.
    #[inline]
    fn advance_placed(&mut self, n: usize) {
        let Some(front) = self.dest.first_mut() else {
            return;
        };
        let n = n.min(front.len);
        front.len -= n;
        front.offset += n as u64;
        if front.len == 0 {
            self.dest.remove(0);
        }
        self.placed_bytes += n as u64;
        self.position += n as u64;
        if self.dest.is_empty() {
            self.enter_trailer();
        }
    }

    /// The header's control body follows: `len` octets (checked by the caller against
    /// [`MAX_BODY`]). Returns [`Step::Body`] at once for an empty body.
    pub(crate) fn expect_body(&mut self, len: usize) -> Step {
        self.phase = Phase::Body;
        self.want = mpa::ULPDU_LEN_LEN + self.header_len + len;
        match (len, self.header) {
            (0, Some(h)) => Step::Body(h),
            _ => Step::More,
        }
    }

    /// The body was handled: the FPDU goes on to its trailer.
    pub(crate) fn body_done(&mut self) {
        self.expect_payload(std::iter::empty(), 0);
    }

    /// The header's payload of `len` octets goes to `dest` (which covers `len` octets
    /// exactly; for `len == 0`, nothing).
    pub(crate) fn expect_payload(&mut self, dest: impl IntoIterator<Item = Chunk>, len: usize) {
        self.dest.clear();
        self.dest.extend(dest.into_iter().filter(|c| c.len > 0));
        self.enter_payload(len);
    }

    /// The destination list of the payload to come, emptied, for the caller to fill in
    /// place before [`RxStream::expect_payload_in_dest`] (no list built elsewhere and
    /// copied over).
    pub(crate) fn payload_dest(&mut self) -> &mut Vec<Chunk> {
        self.dest.clear();
        &mut self.dest
    }

    /// [`RxStream::expect_payload`] for a destination written by way of
    /// [`RxStream::payload_dest`].
    pub(crate) fn expect_payload_in_dest(&mut self, len: usize) {
        self.dest.retain(|c| c.len > 0);
        self.enter_payload(len);
    }

    /// The payload phase begins: its `len` octets go to the chunks in `dest`.
    fn enter_payload(&mut self, len: usize) {
        self.check.update(&self.buf[mpa::ULPDU_LEN_LEN..self.have]);
        self.payload_len = len;
        self.phase = Phase::Payload;
        if self.dest.is_empty() {
            self.enter_trailer();
        }
    }

    /// The control body received ([`Step::Body`]).
    pub(crate) fn body(&self) -> &[u8] {
        &self.buf[mpa::ULPDU_LEN_LEN + self.header_len..self.want]
    }

    /// Stops receive processing for good.
    pub(crate) fn stop(&mut self) {
        self.phase = Phase::Stopped;
    }

    /// Whether the stream is inside an FPDU: some of its octets have arrived, not all.
    pub(crate) fn mid_fpdu(&self) -> bool {
        match self.phase {
            Phase::Stopped => false,
            Phase::Prefix => self.have > 0 || (self.marks.is_some() && self.in_leading_marker()),
            _ => true,
        }
    }

    /// Whether the next octet starts an FPDU.
    #[inline]
    pub(crate) fn at_boundary(&self) -> bool {
        self.phase == Phase::Prefix && self.have == 0
    }

    /// At an FPDU boundary of a stream without markers: a whole FPDU may be taken
    /// in one step there ([`RxStream::took_whole`]).
    #[inline]
    pub(crate) fn at_plain_boundary(&self) -> bool {
        self.at_boundary() && self.marks.is_none()
    }

    /// Whether CRC is checked per FPDU (negotiated, no markers).
    pub(crate) fn crc_on(&self) -> bool {
        self.crc_on
    }

    /// A whole FPDU of `wire_len` octets, `payload` of them placed, was taken by the
    /// caller at a plain boundary ([`RxStream::at_plain_boundary`]), checked as the
    /// steps would check it: the stream moves past it and stays at a boundary.
    pub(crate) fn took_whole(&mut self, wire_len: usize, payload: usize) {
        debug_assert!(self.at_plain_boundary());
        self.position += wire_len as u64;
        self.placed_bytes += payload as u64;
    }

    /// Payload octets placed so far.
    pub(crate) fn placed_bytes(&self) -> u64 {
        self.placed_bytes
    }

    /// Sequence number (octets from the stream's first FPDU) of the next octet.
    pub(crate) fn position(&self) -> u64 {
        self.position
    }

    /// Skips `n` octets at an FPDU boundary: FPDUs already taken out of order.
    pub(crate) fn skip(&mut self, n: u64) {
        debug_assert!(self.at_boundary());
        self.position += n;
    }

    /// The headers of the FPDU in progress, for a Terminate that reports it.
    pub(crate) fn copied(&self) -> CopiedHeaders {
        let mut c = CopiedHeaders::default();
        let at = mpa::ULPDU_LEN_LEN;
        if self.have >= at {
            c.segment_len = Some(u16::from_be_bytes([self.buf[0], self.buf[1]]));
        }
        if self.header_len > 0 && self.have >= at + self.header_len {
            c.ddp_header.0[..self.header_len].copy_from_slice(&self.buf[at..at + self.header_len]);
            c.ddp_header.1 = self.header_len;
        }
        let rr_at = at + self.header_len;
        if self.header.is_some_and(|h| h.opcode == Opcode::ReadRequest)
            && self.have >= rr_at + READ_REQUEST_LEN
        {
            let mut r = [0u8; READ_REQUEST_LEN];
            r.copy_from_slice(&self.buf[rr_at..rr_at + READ_REQUEST_LEN]);
            c.read_request = Some(r);
        }
        c
    }

    /// The fast path for octets read ahead: if the stream is at an FPDU boundary and
    /// `data` begins with a whole FPDU whose header parses, takes its length field and
    /// DDP header in one step (exactly as the two [`RxStream::filled`] steps would) and
    /// returns the header, the octets left in the ULPDU, the octets taken and the
    /// FPDU's length on the wire. Only data messages (Write, Read Response, Send) go
    /// this way. `None` leaves the stream untouched: the step path then takes the
    /// octets and reports any fault in them.
    pub(crate) fn take_whole_header(
        &mut self,
        data: &[u8],
    ) -> Option<(DdpRepr, usize, usize, usize)> {
        // With markers, FPDUs are taken step by step (a marker may sit anywhere).
        if !self.at_boundary() || data.len() < PREFIX_LEN || self.marks.is_some() {
            return None;
        }
        let ulpdu_len = usize::from(u16::from_be_bytes([data[0], data[1]]));
        let wire_len = mpa::fpdu_len(ulpdu_len);
        let header_len = ddp::header_len_of(data[mpa::ULPDU_LEN_LEN]);
        let end = mpa::ULPDU_LEN_LEN + header_len;
        if data.len() < wire_len || ulpdu_len < header_len || end > BUF_LEN {
            return None;
        }
        let h = DdpRepr::parse_bytes(&data[mpa::ULPDU_LEN_LEN..end]).ok()?;
        if !(matches!(h.opcode, Opcode::Write | Opcode::ReadResponse) || h.opcode.is_send()) {
            return None;
        }
        self.buf[..end].copy_from_slice(&data[..end]);
        self.check = FpduCheck::begin([data[0], data[1]], self.crc_on);
        self.header_len = header_len;
        self.phase = Phase::Header;
        self.have = end;
        self.want = end;
        self.position += end as u64;
        self.header = Some(h);
        Some((h, ulpdu_len - header_len, end, wire_len))
    }

    /// The fast path's trailer: when the stream waits for the whole trailer of the FPDU
    /// in progress and `trailer` is exactly that, checks it where it lies (no copy into
    /// the internal buffer) with the outcome [`RxStream::filled`] would have. `None`
    /// when the stream is elsewhere; nothing changed then.
    pub(crate) fn take_trailer(&mut self, trailer: &[u8]) -> Option<WireResult<Step>> {
        if self.phase != Phase::Trailer
            || self.have != self.trailer_at
            || trailer.len() != self.want - self.have
        {
            return None;
        }
        self.position += trailer.len() as u64;
        self.have = self.want;
        if let Err(e) = self.check.finish(trailer) {
            return Some(Err(e));
        }
        let Some(h) = self.header else {
            return Some(Ok(Step::More));
        };
        let len = self.payload_len;
        self.reset();
        Some(Ok(Step::Done(h, len)))
    }

    fn on_prefix(&mut self) -> WireResult<()> {
        self.check = FpduCheck::begin([self.buf[0], self.buf[1]], self.crc_on);
        let ulpdu_len = self.check.ulpdu_len();
        self.header_len = ddp::header_len_of(self.buf[mpa::ULPDU_LEN_LEN]);
        if ulpdu_len < self.header_len {
            self.header_len = 0;
            return Err(WireError::BadUlpduLength(ulpdu_len as u16));
        }
        self.phase = Phase::Header;
        self.want = mpa::ULPDU_LEN_LEN + self.header_len;
        Ok(())
    }

    fn on_header(&mut self) -> WireResult<Step> {
        let at = mpa::ULPDU_LEN_LEN;
        let h = DdpRepr::parse_bytes(&self.buf[at..at + self.header_len])?;
        self.header = Some(h);
        Ok(Step::Header(h, self.check.ulpdu_len() - self.header_len))
    }

    fn enter_trailer(&mut self) {
        self.phase = Phase::Trailer;
        self.trailer_at = self.have;
        self.want = self.have + self.check.trailer_len();
    }

    fn on_trailer(&mut self) -> WireResult<Step> {
        self.check.finish(&self.buf[self.trailer_at..self.want])?;
        let Some(h) = self.header else {
            return Ok(Step::More);
        };
        let len = self.payload_len;
        self.reset();
        Ok(Step::Done(h, len))
    }

    fn reset(&mut self) {
        self.phase = Phase::Prefix;
        self.have = 0;
        self.want = PREFIX_LEN;
        self.header = None;
        self.header_len = 0;
        self.dest.clear();
        self.payload_len = 0;
        if let Some(m) = &mut self.marks {
            m.next_fpdu(self.position);
        }
    }
}
