//! The receive side of a connection: the next expected position, the window we offer,
//! the out-of-order ranges the layer above kept (our SACK blocks), the peer's FIN, and
//! when to acknowledge (at once, or delayed: every second segment or on a timer).
//!
//! Positions count the peer's sequence space from its SYN (position 0) and never wrap;
//! stream offset `o` is position `o + 1`.

use crate::range_set::RangeSet;
use crate::receiver::{Arrival, Receiver};
use crate::segment::{MAX_SACK_BLOCKS, SackBlock};
use crate::seq::SeqNum;
use arrayvec::ArrayVec;
use std::time::Duration;

#[derive(Debug)]
pub(crate) struct Rx {
    /// The peer's initial sequence number (position 0).
    pub irs: SeqNum,
    /// Next expected position (RCV.NXT).
    pub nxt: u64,
    /// Stream offset up to which the user gave octets back.
    pub released: u64,
    /// Receive buffer size: the window's bound.
    cap: u64,
    /// Right edge of the window we may offer; never moves left.
    pub right: u64,
    /// Right edge as last announced to the peer: the window it knows.
    announced: u64,
    /// Our window scale shift.
    pub wscale: u8,
    /// Kept out-of-order ranges (positions), above `nxt`.
    pub ooo: RangeSet,
    /// Position of the peer's FIN, once seen.
    fin: Option<u64>,
    /// The FIN is in order (consumed).
    pub fin_received: bool,
    /// In-order octets not yet acknowledged.
    unacked: u64,
    /// An ACK must go out now.
    pub ack_now: bool,
    /// Data arrived out of order or twice: the ACK must go out bare (no payload), so
    /// that the peer counts it as a duplicate ACK even while we send data too.
    pub dup_ack_due: bool,
    /// A delayed ACK is due then.
    pub delack_at: Option<Duration>,
    /// Octets that arrived a second time (positions), to report in the next ACK as a
    /// D-SACK block (RFC 2883), so the peer learns its retransmission was not needed.
    pub dsack: Option<(u64, u64)>,
    /// How long an ACK may wait (`None`: never).
    delack: Option<Duration>,
    /// The out-of-order set's clock when every range that had grown was reported.
    reported_clock: u64,
    /// Of the ranges grown since, the most recent this many went in the ACKs sent
    /// since; the next ACK reports the ones after them.
    sack_skip: usize,
    /// Out-of-order ranges the ACK being written reports.
    reporting: usize,
    /// The peer's segment size: two of them earn an ACK at once.
    pub mss: u64,
    /// Since when `nxt` has stood below held out-of-order data (for `Timing`).
    blocked_since: Option<Duration>,
    /// Since when the layer above has read everything up to such a hole (for `Timing`).
    starved_since: Option<Duration>,
}

/// What a segment's payload did.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct DataOutcome {
    /// Octets newly kept, in order or not.
    pub kept: u64,
    /// Octets the receiver refused or the limits dropped.
    pub dropped: u64,
    /// The payload (or part of it) arrived out of order.
    pub out_of_order: bool,
    /// The peer's FIN became in order now.
    pub fin: bool,
    /// `nxt` moved on from a hole: how long it stood there, and the out-of-order
    /// octets held above it then.
    pub hole_filled: Option<(Duration, u64)>,
    /// `nxt` moved on from a hole the layer above had read up to: how long it waited.
    pub starved: Option<Duration>,
}

impl Rx {
    pub fn new(cap: u32, max_ranges: usize, delack: Option<Duration>, mss: u64) -> Rx {
        Rx {
            irs: SeqNum(0),
            nxt: 0,
            released: 0,
            cap: u64::from(cap),
            right: 0,
            announced: 0,
            wscale: 0,
            ooo: RangeSet::new(max_ranges),
            fin: None,
            fin_received: false,
            unacked: 0,
            ack_now: false,
            dup_ack_due: false,
            delack_at: None,
            dsack: None,
            reported_clock: 0,
            sack_skip: 0,
            reporting: 0,
            delack,
            mss,
            blocked_since: None,
            starved_since: None,
        }
    }

    /// The peer's SYN arrived with `irs`.
    pub fn synchronize(&mut self, irs: SeqNum) {
        self.irs = irs;
        self.nxt = 1;
        self.right = 1 + self.cap;
        // The SYN's window field is not scaled, so it may say less than the buffer;
        // the first ACK says the rest (not worth a segment of its own).
        self.announced = self.right;
    }

    pub fn seq(&self, pos: u64) -> SeqNum {
        self.irs + pos as u32
    }

    /// RCV.NXT as a sequence number.
    pub fn nxt_seq(&self) -> SeqNum {
        self.seq(self.nxt)
    }

    /// The position of `seq`, relative to RCV.NXT (may be negative: old).
    pub fn pos(&self, seq: SeqNum) -> i64 {
        self.nxt as i64 + i64::from(seq.delta(self.nxt_seq()))
    }

    /// RCV.WND: what we accept beyond `nxt`.
    pub fn window(&self) -> u64 {
        self.right.saturating_sub(self.nxt)
    }

    /// The window the peer was last told of (from `nxt`).
    pub fn announced_window(&self) -> u64 {
        self.announced.saturating_sub(self.nxt)
    }

    /// The furthest the right edge may go: the user's released offset plus the buffer.
    fn limit(&self) -> u64 {
        self.released + 1 + self.cap
    }

    /// Moves the right edge when the buffer has room for it, avoiding silly windows
    /// (RFC 9293 3.8.6.2.2): only by at least a segment or half the buffer.
    pub fn open_window(&mut self, mss: u64) {
        let limit = self.limit();
        if limit > self.right && limit - self.right >= self.sws_step(mss) {
            self.right = limit;
        }
    }

    /// The least a window may open by (RFC 9293 3.8.6.2.2): a segment, or half the
    /// buffer if that is less.
    fn sws_step(&self, mss: u64) -> u64 {
        mss.min(self.cap / 2).max(1)
    }

    /// After the layer above gave octets back: whether a window update is worth a
    /// segment of its own now, rather than waiting for the next ACK (which a delayed
    /// ACK may hold back while the sender, short of window, has nothing to send). It
    /// is when the window the peer knows would grow by at least the silly-window step
    /// and at least double (as Linux decides after a read), so a reader that frees
    /// space a little at a time sends few updates, and a sender that is short of
    /// window hears of the space at once.
    pub fn window_update_due(&mut self, mss: u64) -> bool {
        self.open_window(mss);
        let known = self.announced.saturating_sub(self.nxt);
        let offer = self.window();
        offer >= known + self.sws_step(mss) && offer >= 2 * known
    }

    /// The layer above has read everything in order while data waits above a hole:
    /// it starves from `now` (for `Timing`).
    pub fn note_starved(&mut self, now: Duration) {
        if self.starved_since.is_none() && self.released + 1 >= self.nxt && !self.ooo.is_empty() {
            self.starved_since = Some(now);
        }
    }

    /// The window field to send; the peer will know the window it says.
    pub fn announce_window(&mut self) -> u16 {
        let field = (self.window() >> self.wscale).min(u64::from(u16::MAX));
        self.announced = self.announced.max(self.nxt + (field << self.wscale));
        field as u16
    }

    /// Offers a segment's payload (at position `start`) to `sink` and records what it
    /// kept; `fin` when the segment carries FIN.
    pub fn on_data(
        &mut self,
        start: u64,
        payload: &[u8],
        fin: bool,
        sink: &mut dyn Receiver,
        now: Duration,
    ) -> DataOutcome {
        let mut out = DataOutcome::default();
        let mut end = start + payload.len() as u64;
        if !payload.is_empty() {
            let dup = if start < self.nxt {
                Some((start, end.min(self.nxt)))
            } else {
                self.ooo.first_overlap(start, end)
            };
            if dup.is_some() {
                self.dsack = dup;
            }
        }
        if fin && self.fin.is_none() && end >= self.nxt && end <= self.right {
            self.fin = Some(end);
        }
        if let Some(f) = self.fin {
            end = end.min(f);
        }
        let lo = start.max(self.nxt);
        let hi = end.min(self.right);
        let was_in_order = lo == self.nxt && self.ooo.is_empty();
        let before = self.nxt;
        let held_before = if self.blocked_since.is_some() {
            self.ooo.bytes()
        } else {
            0
        };
        if lo < hi {
            for (a, b) in self.ooo.gaps(lo, hi) {
                let in_order = a == self.nxt;
                if !in_order && !self.ooo.can_insert(a, b) {
                    out.dropped += b - a;
                    continue;
                }
                let piece = Arrival {
                    offset: a - 1,
                    seq: self.seq(a),
                    data: &payload[(a - start) as usize..(b - start) as usize],
                    in_order,
                };
                if !sink.arrive(piece) {
                    out.dropped += b - a;
                    continue;
                }
                out.kept += b - a;
                if in_order {
                    self.nxt = b;
                    while let Some(s) = self.ooo.pop_reached(self.nxt) {
                        self.nxt = self.nxt.max(s.end);
                    }
                } else {
                    out.out_of_order = true;
                    self.ooo.insert(a, b);
                }
            }
        }
        if self.nxt > before {
            sink.in_order(self.nxt - 1);
            if let Some(since) = self.blocked_since.take() {
                out.hole_filled = Some((now.saturating_sub(since), held_before));
            }
            if let Some(since) = self.starved_since.take() {
                out.starved = Some(now.saturating_sub(since));
            }
        }
        if !self.ooo.is_empty() {
            if self.blocked_since.is_none() {
                self.blocked_since = Some(now);
            }
            self.note_starved(now);
        }
        if let Some(f) = self.fin
            && self.nxt == f
            && !self.fin_received
        {
            self.nxt += 1;
            self.fin_received = true;
            out.fin = true;
        }
        // Acknowledge at once what is out of order, fills a hole, duplicates or ends
        // the stream (RFC 5681 4.2); delay the plain in-order ACK.
        let plain = was_in_order && out.dropped == 0 && !out.fin && out.kept > 0;
        if !payload.is_empty() || fin {
            if let Some(delay) = self.delack.filter(|_| plain) {
                self.unacked += out.kept;
                // More than a full segment's worth: a second segment arrived (full or
                // not), which is acknowledged at once (as Linux does), so that the
                // sender's loss probe can count on an ACK for two segments.
                if self.unacked > self.mss {
                    self.ack_now = true;
                } else if self.delack_at.is_none() {
                    self.delack_at = Some(now + delay);
                }
            } else {
                self.ack_now = true;
                self.dup_ack_due |= out.out_of_order || out.kept == 0 || !self.ooo.is_empty();
                if out.out_of_order {
                    // The next ACK leads with the newest range again (RFC 2018).
                    self.sack_skip = 0;
                }
            }
        }
        out
    }

    /// An ACK carrying the current state went out. When segments were taken in a
    /// batch (a stack's pump takes every packet that arrived, then sends), one ACK
    /// can report only the newest few of the ranges they grew, where one ACK per
    /// out-of-order segment (RFC 5681 4.2) would have reported each as it grew: then
    /// another bare ACK follows for the ones not yet reported, so that the sender's
    /// scoreboard (and its pipe) learns of everything that arrived.
    pub fn acked(&mut self) {
        self.dsack = None;
        self.ack_now = false;
        self.dup_ack_due = false;
        self.delack_at = None;
        self.unacked = 0;
        let reported = std::mem::take(&mut self.reporting);
        self.sack_skip += reported;
        if reported > 0 && self.ooo.grown_since(self.reported_clock) > self.sack_skip {
            self.ack_now = true;
            self.dup_ack_due = true;
        } else {
            self.reported_clock = self.ooo.clock();
            self.sack_skip = 0;
        }
    }

    /// Our SACK blocks, at most `n`: a D-SACK block first when a duplicate arrived,
    /// then the out-of-order range holding it if one does (RFC 2883), then the others,
    /// the most recently changed first (RFC 2018 section 4).
    /// The next ACK continues a series: it reports ranges the ones before it could not.
    pub fn sack_followup(&self) -> bool {
        self.sack_skip > 0
    }

    /// Ranges already reported in this series of ACKs ([`Rx::acked`]) are passed over.
    pub fn sack_blocks(&mut self, n: usize) -> ArrayVec<SackBlock, MAX_SACK_BLOCKS> {
        let n = n.min(MAX_SACK_BLOCKS);
        let block = |(start, end): (u64, u64)| SackBlock {
            left: self.seq(start),
            right: self.seq(end),
        };
        let mut out = ArrayVec::new();
        let mut holding = None;
        if let Some(d) = self.dsack.filter(|_| n > 0) {
            out.push(block(d));
            holding = self.ooo.containing(d.0, d.1);
            if let Some(h) = holding.filter(|_| out.len() < n) {
                out.push(block(h));
            }
        }
        let mut reporting = usize::from(holding.is_some() && out.len() > 1);
        let recent = self.ooo.most_recent(self.sack_skip + n);
        for s in recent.iter().skip(self.sack_skip) {
            if out.len() == n {
                break;
            }
            if holding != Some((s.start, s.end)) {
                out.push(block((s.start, s.end)));
                reporting += 1;
            }
        }
        if out.is_empty() && self.sack_skip > 0 {
            // Nothing left past the ones reported: start again from the newest.
            self.sack_skip = 0;
            return self.sack_blocks(n);
        }
        self.reporting = reporting;
        out
    }
}
