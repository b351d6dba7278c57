//! The transmit path: turns the send queue, the inbound Read queue (responses), the RTR
//! message and a pending Terminate into FPDUs sized to the connection's MSS.
//!
//! Priority: Terminate, then RTR, then Read Responses, then the send queue in order.
//! RDMA Reads honour ORD: a Read that finds ORD Reads outstanding waits at the head of
//! the send queue (it does not fail). A fenced request waits for all outstanding Reads.
//! A Send or Write completes once its last FPDU has been handed to the transport
//! (`Qp::transmit_done`), so its buffers are never reused while still being sent.

use super::fpdu::{Chunk, CopiedHeaders, TxFpdu, covering, covering_sges};
use super::params::{QpParams, RtrKind};
use crate::verbs::*;
use arrayvec::ArrayVec;
use softrnic_wire::ddp::{DdpRepr, Placement, TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN};
use softrnic_wire::mpa;
use softrnic_wire::rdmap::{Opcode, QN_READ_REQUEST, QN_SEND, QN_TERMINATE, ReadRequest};
use softrnic_wire::terminate::{TerminateCause, TerminateLayout, TerminateRepr, TerminatedDdp};
use std::collections::VecDeque;

mod run;
mod segment;
pub use run::{Gathered, SingleSmall, SmallRunEnd};
use segment::SegmentFill;

struct SqEntry {
    /// Posting order, for in-order completion.
    seq: u64,
    wr_id: u64,
    op: SendOp,
    chunks: ArrayVec<Chunk, MAX_SGE>,
    total: u32,
    signaled: bool,
    fence: bool,
    /// Payload octets already put into FPDUs.
    sent: u32,
    /// The MSN this Send uses (assigned at its first FPDU).
    msn: u32,
    /// For a Read: the sink SGE's lkey and address, which go on the wire.
    sink: (STag, u64),
}

struct OutRead {
    seq: u64,
    wr_id: u64,
    sink_stag: STag,
    sink_to: u64,
    len: u32,
    received: u32,
    signaled: bool,
}

struct InRead {
    sink_stag: STag,
    sink_to: u64,
    source: Chunk,
    sent: u32,
}

/// What the FPDU handed out last will finish once written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InFlight {
    Nothing,
    /// The last FPDU of the send-queue head.
    SqHead,
    /// The last FPDU of the inbound Read queue head.
    ReadResponseDone,
    Terminate,
    Rtr,
}

/// Transmit-side state of a QP.
pub(crate) struct TxState {
    sq: VecDeque<SqEntry>,
    orq: VecDeque<OutRead>,
    irq: VecDeque<InRead>,
    ord: usize,
    ird: usize,
    tagged_max: u32,
    untagged_max: u32,
    crc: bool,
    send_msn: u32,
    read_msn: u32,
    terminate: Option<(TerminateCause, CopiedHeaders)>,
    terminate_done: bool,
    rtr: Option<RtrKind>,
    /// Transmission held until the peer's RTR arrives.
    pub(crate) hold_for_rtr: bool,
    in_flight: InFlight,
    /// Writes and Sends at the head of the send queue whose last FPDU was polled ahead
    /// (see [`TxState::poll`]) and is not yet written: the oldest finish first, at
    /// their `transmit_done`, before anything in `in_flight`.
    ahead: usize,
    /// The send queue's room before [`TxState::shrink_idle`] gave it back: a QP that
    /// streams bursts (post 128, send, empty, post 128 ...) takes it again in one
    /// allocation on its next post, instead of regrowing by doubling (6 reallocations
    /// and copies per burst, ~37 instructions per 64-octet Write).
    sq_room: usize,
    /// The segment being filled, when FPDUs are sized to it (see `segment.rs`).
    seg: SegmentFill,
}

impl std::fmt::Debug for TxState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxState")
            .field("sq", &self.sq.len())
            .field("orq", &self.orq.len())
            .field("irq", &self.irq.len())
            .field("in_flight", &self.in_flight)
            .field("ahead", &self.ahead)
            .finish()
    }
}

impl Default for TxState {
    fn default() -> Self {
        TxState {
            sq: VecDeque::new(),
            orq: VecDeque::new(),
            irq: VecDeque::new(),
            ord: 0,
            ird: 0,
            tagged_max: 0,
            untagged_max: 0,
            crc: false,
            send_msn: 1,
            read_msn: 1,
            terminate: None,
            terminate_done: false,
            rtr: None,
            hold_for_rtr: false,
            in_flight: InFlight::Nothing,
            ahead: 0,
            sq_room: 0,
            seg: SegmentFill::default(),
        }
    }
}

/// A queue that is empty keeps at most this many entries' room; beyond, its memory
/// goes back (a QP that once had 128 Writes outstanding kept about 30 KiB of send
/// queue for its life).
pub(crate) const IDLE_QUEUE_KEEP: usize = 32;

/// Frees an empty queue's room if a burst grew it beyond [`IDLE_QUEUE_KEEP`] entries.
/// Steady small traffic (a ping-pong) never gets there, so it never reallocates.
/// Returns whether it did.
pub(crate) fn shrink_if_idle<T>(q: &mut VecDeque<T>) -> bool {
    // Capacity first: most queues never grow, and this runs on every delivery pass
    // (a spinning consumer's too).
    let shrink = q.capacity() > IDLE_QUEUE_KEEP && q.is_empty();
    if shrink {
        q.shrink_to(0);
    }
    shrink
}

pub(crate) fn wc_opcode(op: &SendOp) -> WcOpcode {
    match op {
        SendOp::Send { .. } => WcOpcode::Send,
        SendOp::Write { .. } => WcOpcode::Write,
        SendOp::Read { .. } => WcOpcode::Read,
        SendOp::LocalInvalidate { .. } => WcOpcode::LocalInvalidate,
    }
}

impl TxState {
    pub(crate) fn start(&mut self, p: &QpParams) {
        // Markers we insert take room in the FPDU too: size the ULPDU so that the
        // marked FPDU still fits, wherever it starts.
        let max_fpdu = p.max_fpdu.max(64);
        let budget = if p.markers_tx {
            softrnic_wire::markers::unmarked_budget(max_fpdu)
        } else {
            max_fpdu
        };
        let ulpdu = mpa::max_ulpdu_for(budget).unwrap_or(42);
        self.tagged_max = (ulpdu - TAGGED_HEADER_LEN) as u32;
        self.untagged_max = (ulpdu - UNTAGGED_HEADER_LEN) as u32;
        self.crc = p.crc;
        self.ord = usize::from(p.ord);
        self.ird = usize::from(p.ird);
        self.rtr = p.send_rtr;
        self.hold_for_rtr = p.await_rtr;
    }

    /// FPDUs are sized to the room left in segments of `size` octets (a transport that
    /// packs whole FPDUs into full segments), or to the MSS alone (`None`). Not with
    /// markers, whose FPDUs are sized to where they fall.
    pub(crate) fn pack_segments(&mut self, size: Option<u32>) {
        self.seg = SegmentFill::new(size);
    }

    /// Everything handed out has left in segments: the next FPDU starts a new one.
    pub(crate) fn segments_sent(&mut self) {
        self.seg.restart();
    }

    /// Whether FPDUs are sized to segments.
    pub(crate) fn packs_segments(&self) -> bool {
        self.seg.on()
    }

    /// A small FPDU of `wire` octets built outside [`TxState::poll`] was handed out.
    pub(crate) fn handed_out(&mut self, wire: usize) {
        self.seg.add(wire);
    }

    pub(crate) fn sq_len(&self) -> usize {
        self.sq.len() + self.orq.len()
    }

    #[inline]
    pub(crate) fn enqueue(&mut self, seq: u64, wr: &SendWr, chunks: &[Chunk], total: u32) {
        if self.sq.capacity() == 0 {
            self.sq.reserve_exact(std::mem::take(&mut self.sq_room));
        }
        // The entry goes in with no chunks and gets them in place: moving a full
        // `ArrayVec` (room for MAX_SGE chunks, most of the entry) by value cost a copy
        // of the whole array per post, however few SGEs the request has.
        self.sq.push_back(SqEntry {
            seq,
            wr_id: wr.wr_id,
            op: wr.op,
            chunks: ArrayVec::new(),
            total,
            signaled: wr.signaled,
            fence: wr.fence,
            sent: 0,
            msn: 0,
            sink: wr.sgl.first().map_or((0, 0), |s| (s.lkey, s.addr)),
        });
        if let Some(e) = self.sq.back_mut() {
            // At most MAX_SGE chunks: the caller built them in an array of that size.
            let _ = e.chunks.try_extend_from_slice(chunks);
        }
    }

    /// Nothing left to hand to the transport (graceful close may send FIN).
    pub(crate) fn idle(&self) -> bool {
        self.sq.is_empty() && self.irq.is_empty() && self.in_flight == InFlight::Nothing
    }

    /// Gives back the memory of empty queues that a burst grew (see
    /// [`shrink_if_idle`]).
    pub(crate) fn shrink_idle(&mut self) {
        let room = self.sq.capacity();
        if shrink_if_idle(&mut self.sq) {
            self.sq_room = room;
        }
        shrink_if_idle(&mut self.orq);
        shrink_if_idle(&mut self.irq);
    }

    /// Whether [`TxState::poll`] may have an FPDU (or a local operation may run): a
    /// cheap test for the I/O layer's drives that have nothing to send.
    pub(crate) fn may_send(&self) -> bool {
        self.in_flight == InFlight::Nothing
            && (self.terminate.is_some()
                || self.rtr.is_some()
                || !self.irq.is_empty()
                || self.sq.len() > self.ahead)
    }

    pub(crate) fn queue_terminate(&mut self, cause: TerminateCause, copied: CopiedHeaders) {
        self.terminate = Some((cause, copied));
    }

    pub(crate) fn terminate_done(&self) -> bool {
        self.terminate_done
    }

    /// Removes every outstanding request: (seq, wr_id, opcode).
    pub(crate) fn drain_all(&mut self) -> Vec<(u64, u64, WcOpcode)> {
        let mut v: Vec<(u64, u64, WcOpcode)> = self
            .orq
            .drain(..)
            .map(|r| (r.seq, r.wr_id, WcOpcode::Read))
            .collect();
        v.extend(
            self.sq
                .drain(..)
                .map(|e| (e.seq, e.wr_id, wc_opcode(&e.op))),
        );
        self.irq.clear();
        self.ahead = 0;
        if self.in_flight == InFlight::SqHead || self.in_flight == InFlight::ReadResponseDone {
            self.in_flight = InFlight::Nothing;
        }
        v
    }

    pub(crate) fn take_first_outstanding_read(&mut self) -> Option<(u64, u64, u32)> {
        self.orq.pop_front().map(|r| (r.seq, r.wr_id, r.received))
    }

    /// Whether IRD has room for one more inbound Read Request.
    pub(crate) fn inbound_read_room(&self) -> bool {
        self.irq.len() < self.ird
    }

    /// An inbound Read Request, already checked against the TPT; false if IRD is full.
    pub(crate) fn push_inbound_read(&mut self, rr: &ReadRequest, source: Chunk) -> bool {
        if self.irq.len() >= self.ird {
            return false;
        }
        self.irq.push_back(InRead {
            sink_stag: rr.sink_stag,
            sink_to: rr.sink_to,
            source,
            sent: 0,
        });
        true
    }

    /// Where a Read Response segment at (stag, to) with `len` octets lands, checked
    /// against the oldest outstanding Read: its sink STag, in order, within its length.
    pub(crate) fn match_read_response(&self, stag: STag, to: u64, len: u32) -> Option<(STag, u64)> {
        let r = self.orq.front()?;
        let expected_to = r.sink_to.checked_add(u64::from(r.received))?;
        let fits = r.received.checked_add(len).is_some_and(|end| end <= r.len);
        (r.sink_stag == stag && to == expected_to && fits).then_some((r.sink_stag, to))
    }

    /// Accounts placed Read Response octets; returns the finished Read when `last`:
    /// (seq, wr_id, octets, signaled).
    pub(crate) fn read_response_placed(
        &mut self,
        len: u32,
        last: bool,
    ) -> Option<(u64, u64, u32, bool)> {
        let r = self.orq.front_mut()?;
        r.received += len;
        if last {
            let r = self.orq.pop_front()?;
            return Some((r.seq, r.wr_id, r.received, r.signaled));
        }
        None
    }
}

impl TxState {
    /// Fills `out` with the next FPDU to send; false when there is nothing to send now.
    /// `sending`: the QP is in a state that transmits (RTS or Closing); a Terminate goes
    /// out regardless. One FPDU is in flight at a time (until [`TxState::transmit_done`]),
    /// which keeps completion ordering exact. With `ahead`, the last FPDU of a Write or
    /// Send does not hold the queue: the next Writes and Sends may be polled behind it
    /// (and nothing else until the ones ahead are done), so an I/O layer can prepare
    /// several messages before it writes them; their `transmit_done` calls come in
    /// the order the FPDUs were polled.
    pub(crate) fn poll(&mut self, sending: bool, ahead: bool, out: &mut TxFpdu) -> bool {
        let before = self.ahead;
        let has = self.poll_next(sending, ahead, out);
        if has {
            self.seg.add(out.wire_len());
        }
        // The FPDU that puts something in flight is the one whose full write
        // `transmit_done` must wait for; the FPDUs before it complete nothing.
        out.completes = has && (self.in_flight != InFlight::Nothing || self.ahead > before);
        has
    }

    fn poll_next(&mut self, sending: bool, ahead: bool, out: &mut TxFpdu) -> bool {
        let tx = self;
        if tx.in_flight != InFlight::Nothing {
            return false;
        }
        out.chunks.clear();
        out.crc = tx.crc;
        if tx.ahead > 0 {
            // Only further Writes and Sends go behind messages polled ahead.
            return sending && tx.poll_sq(ahead, out);
        }
        if let Some((cause, copied)) = tx.terminate.take() {
            let h = DdpRepr {
                last: true,
                opcode: Opcode::Terminate,
                placement: Placement::Untagged {
                    rsvd_ulp: 0,
                    qn: QN_TERMINATE,
                    msn: 1,
                    mo: 0,
                },
            };
            let (ddp, ddp_len) = copied.ddp_header;
            let t = TerminateRepr {
                cause,
                segment_len_valid: copied.segment_len.is_some(),
                ddp: (ddp_len > 0).then(|| TerminatedDdp {
                    segment_len: copied.segment_len.unwrap_or(0),
                    header: &ddp[..ddp_len],
                }),
                rdmap: copied.read_request.as_ref().map(|r| &r[..]),
                reserved: 0,
                layout: TerminateLayout::Rfc5040,
            };
            let mut body = [0u8; softrnic_wire::terminate::MAX_LEN];
            let n = t.emit(&mut body).unwrap_or(0);
            out.set_header(&h, &body[..n], 0);
            tx.in_flight = InFlight::Terminate;
            return true;
        }
        if !sending {
            return false;
        }
        if let Some(kind) = tx.rtr.take() {
            let h = match kind {
                RtrKind::Write => DdpRepr {
                    last: true,
                    opcode: Opcode::Write,
                    // Linux siw sends STag 1; no region is named by it here either.
                    placement: Placement::Tagged { stag: 1, to: 0 },
                },
                RtrKind::Send => DdpRepr {
                    last: true,
                    opcode: Opcode::Send,
                    placement: Placement::Untagged {
                        rsvd_ulp: 0,
                        qn: QN_SEND,
                        msn: tx.send_msn,
                        mo: 0,
                    },
                },
                RtrKind::Read => DdpRepr {
                    last: true,
                    opcode: Opcode::ReadRequest,
                    placement: Placement::Untagged {
                        rsvd_ulp: 0,
                        qn: QN_READ_REQUEST,
                        msn: tx.read_msn,
                        mo: 0,
                    },
                },
            };
            let body = match kind {
                RtrKind::Read => {
                    tx.read_msn += 1;
                    ReadRequest {
                        sink_stag: 1,
                        sink_to: 0,
                        size: 0,
                        source_stag: 1,
                        source_to: 0,
                    }
                    .to_bytes()
                    .to_vec()
                }
                RtrKind::Send => {
                    tx.send_msn += 1;
                    Vec::new()
                }
                RtrKind::Write => Vec::new(),
            };
            out.set_header(&h, &body, 0);
            tx.in_flight = InFlight::Rtr;
            return true;
        }
        if tx.hold_for_rtr {
            return false;
        }
        if let Some(r) = tx.irq.front_mut() {
            let left = r.source.len as u32 - r.sent;
            let n = left.min(tx.seg.cap(tx.tagged_max, TAGGED_HEADER_LEN));
            let last = n == left;
            let h = DdpRepr {
                last,
                opcode: Opcode::ReadResponse,
                placement: Placement::Tagged {
                    stag: r.sink_stag,
                    to: r.sink_to.wrapping_add(u64::from(r.sent)),
                },
            };
            covering([r.source], r.sent as usize, n as usize, &mut out.chunks);
            out.set_header(&h, &[], n as usize);
            r.sent += n;
            if last {
                tx.in_flight = InFlight::ReadResponseDone;
            }
            return true;
        }
        tx.poll_sq(ahead, out)
    }

    /// The next FPDU of the send queue (after the messages polled ahead, which only
    /// Writes and Sends may follow).
    fn poll_sq(&mut self, ahead: bool, out: &mut TxFpdu) -> bool {
        let tx = self;
        let behind = tx.ahead > 0;
        let Some(e) = tx.sq.get_mut(tx.ahead) else {
            return false;
        };
        if e.fence && !tx.orq.is_empty() {
            return false;
        }
        if behind && !matches!(e.op, SendOp::Send { .. } | SendOp::Write { .. }) {
            return false;
        }
        // Where a message's last FPDU puts it: ahead, or in flight.
        let finish = if ahead {
            InFlight::Nothing
        } else {
            InFlight::SqHead
        };
        match e.op {
            SendOp::Read { remote_addr, rkey } => {
                if tx.orq.len() >= tx.ord {
                    return false;
                }
                let rr = ReadRequest {
                    sink_stag: e.sink.0,
                    sink_to: e.sink.1,
                    size: e.total,
                    source_stag: rkey,
                    source_to: remote_addr,
                };
                let h = DdpRepr {
                    last: true,
                    opcode: Opcode::ReadRequest,
                    placement: Placement::Untagged {
                        rsvd_ulp: 0,
                        qn: QN_READ_REQUEST,
                        msn: tx.read_msn,
                        mo: 0,
                    },
                };
                tx.read_msn = tx.read_msn.wrapping_add(1);
                out.set_header(&h, &rr.to_bytes(), 0);
                // The Read is outstanding from now on; it completes when its response
                // has been placed.
                let read = OutRead {
                    seq: e.seq,
                    wr_id: e.wr_id,
                    sink_stag: rr.sink_stag,
                    sink_to: rr.sink_to,
                    len: e.total,
                    received: 0,
                    signaled: e.signaled,
                };
                tx.sq.pop_front();
                tx.orq.push_back(read);
                true
            }
            SendOp::Send {
                solicited,
                invalidate,
            } => {
                if e.sent == 0 {
                    e.msn = tx.send_msn;
                    tx.send_msn = tx.send_msn.wrapping_add(1);
                }
                let left = e.total - e.sent;
                let n = left.min(tx.seg.cap(tx.untagged_max, UNTAGGED_HEADER_LEN));
                let last = n == left;
                let opcode = send_opcode(solicited, invalidate.is_some());
                let h = DdpRepr {
                    last,
                    opcode,
                    placement: Placement::Untagged {
                        rsvd_ulp: invalidate.unwrap_or(0),
                        qn: QN_SEND,
                        msn: e.msn,
                        mo: e.sent,
                    },
                };
                covering_sges(&e.chunks, e.sent as usize, n as usize, &mut out.chunks);
                out.set_header(&h, &[], n as usize);
                e.sent += n;
                if last {
                    tx.finish_polled(finish);
                }
                true
            }
            SendOp::Write { remote_addr, rkey } => {
                let left = e.total - e.sent;
                let n = left.min(tx.seg.cap(tx.tagged_max, TAGGED_HEADER_LEN));
                let last = n == left;
                let h = DdpRepr {
                    last,
                    opcode: Opcode::Write,
                    placement: Placement::Tagged {
                        stag: rkey,
                        to: remote_addr.wrapping_add(u64::from(e.sent)),
                    },
                };
                covering_sges(&e.chunks, e.sent as usize, n as usize, &mut out.chunks);
                out.set_header(&h, &[], n as usize);
                e.sent += n;
                if last {
                    tx.finish_polled(finish);
                }
                true
            }
            SendOp::LocalInvalidate { .. } => {
                // Reached the head: execute it here, then go on with the queue.
                false
            }
        }
    }

    /// A Write's or Send's last FPDU was polled: it goes ahead (`Nothing`: more may be
    /// polled behind it) or in flight (`SqHead`).
    fn finish_polled(&mut self, finish: InFlight) {
        if finish == InFlight::Nothing {
            self.ahead += 1;
        } else {
            self.in_flight = finish;
        }
    }

    /// Whether the newest inbound Read's response has not begun: none of its FPDUs
    /// has been polled yet.
    pub(crate) fn read_response_unstarted(&self) -> bool {
        self.irq.back().is_some_and(|r| r.sent == 0)
    }

    /// Whether the FPDU in flight is the last of a Read Response: its
    /// [`TxState::transmit_done`] frees an IRD slot and completes nothing.
    pub(crate) fn read_response_in_flight(&self) -> bool {
        self.in_flight == InFlight::ReadResponseDone
    }

    /// The FPDU from the last [`TxState::poll`] has been written completely; returns
    /// the send-queue request it finished, if any: (seq, wr_id, opcode, octets, signaled).
    pub(crate) fn transmit_done(&mut self) -> Option<(u64, u64, WcOpcode, u32, bool)> {
        if self.ahead > 0 {
            // The oldest message polled ahead: its FPDUs were polled before any in flight.
            self.ahead -= 1;
            let e = self.sq.front()?;
            let done = (e.seq, e.wr_id, wc_opcode(&e.op), e.total, e.signaled);
            self.sq.pop_front();
            return Some(done);
        }
        match std::mem::replace(&mut self.in_flight, InFlight::Nothing) {
            InFlight::Nothing | InFlight::Rtr => None,
            InFlight::Terminate => {
                self.terminate_done = true;
                None
            }
            InFlight::ReadResponseDone => {
                self.irq.pop_front();
                None
            }
            InFlight::SqHead => {
                // The fields, read in place: moving the whole entry out (its SGE
                // array is most of it) cost a copy per message.
                let e = self.sq.front()?;
                let done = (e.seq, e.wr_id, wc_opcode(&e.op), e.total, e.signaled);
                self.sq.pop_front();
                Some(done)
            }
        }
    }

    /// The local invalidate at the head of the send queue, removed, if it may run now
    /// (nothing in flight, no fence waiting on Reads): (seq, wr_id, stag, signaled).
    pub(crate) fn next_local_op(&mut self) -> Option<(u64, u64, STag, bool)> {
        if self.in_flight != InFlight::Nothing || self.ahead > 0 {
            return None;
        }
        let e = self.sq.front()?;
        let SendOp::LocalInvalidate { stag } = e.op else {
            return None;
        };
        if e.fence && !self.orq.is_empty() {
            return None;
        }
        let r = (e.seq, e.wr_id, stag, e.signaled);
        self.sq.pop_front();
        Some(r)
    }
}

/// The RDMAP opcode of a Send with these flags (RFC 5040 section 4.3).
#[inline]
pub(super) fn send_opcode(solicited: bool, invalidate: bool) -> Opcode {
    match (solicited, invalidate) {
        (false, false) => Opcode::Send,
        (true, false) => Opcode::SendSe,
        (false, true) => Opcode::SendInvalidate,
        (true, true) => Opcode::SendSeInvalidate,
    }
}
