//! The send side of a connection: sequence state, the peer's window, the SACK
//! scoreboard, the record of every segment in flight (`sent.rs`), and the choice of
//! the next segment (segments taken as lost first, sent again as they were, then new
//! ones; whole records when the layer above queued records). Congestion control and
//! its undo live in `cc.rs`, loss detection in `rack.rs`, the RTT estimator in
//! `rtt.rs`.
//!
//! Positions count our sequence space from our SYN (position 0) and never wrap; stream
//! offset `o` is position `o + 1`, and our FIN, once queued, takes the position after
//! the last octet.

use super::rack::Rack;
use super::rtt::RttEstimator;
use super::send_buffer::SendBuffer;
use super::sent::{Sent, SentSeg};
use super::timing::{HoleWait, Timing};
use crate::config::Config;
use crate::range_set::RangeSet;
use crate::segment::SackBlock;
use crate::seq::SeqNum;
use std::time::Duration;

#[derive(Debug)]
pub(crate) struct Tx {
    pub iss: SeqNum,
    /// Oldest unacknowledged position (SND.UNA).
    pub una: u64,
    /// Next new position to send (the highest sent, plus one).
    pub nxt: u64,
    /// The peer's window, scaled (SND.WND), from `una`.
    pub wnd: u64,
    /// The largest window the peer offered.
    pub max_wnd: u64,
    /// Receive position and ack position of the segment that last set the window.
    pub wl1: u64,
    pub wl2: u64,
    /// The peer's window scale shift.
    pub wscale: u8,
    /// Both sides offered window scaling.
    pub scaling: bool,
    /// Largest payload per segment.
    pub mss: u64,
    /// The peer takes SACK options.
    pub sack_ok: bool,
    pub buf: SendBuffer,
    /// Position of our FIN, once the user closed.
    pub fin: Option<u64>,
    /// What the peer told us it holds above `una`.
    pub scoreboard: RangeSet,
    pub rtt: RttEstimator,
    /// The segment being timed: (end position, when sent).
    pub timed: Option<(u64, Duration)>,
    pub cwnd: u64,
    pub ssthresh: u64,
    /// Octets acknowledged towards the next congestion-avoidance increase.
    pub acked_accum: u64,
    pub dupacks: u32,
    pub in_recovery: bool,
    /// A retransmission timeout's recovery is under way (until `una` reaches
    /// `recover`).
    pub rto_recovery: bool,
    /// `nxt` when the last recovery (or timeout) began (RFC 6582 "recover").
    pub recover: u64,
    /// Send the first lost segment now, whatever the pipe says.
    pub rtx_now: bool,
    /// Every segment in flight: send times, SACKed, lost.
    pub sent: Sent,
    pub rack: Rack,
    /// What the last reduction of the congestion window changed, to put back if the
    /// peer reports every retransmission since as a duplicate.
    pub undo: Option<Undo>,
    /// The loss probe in flight (RFC 8985 7).
    pub tlp: Option<Tlp>,
    /// When the last retransmission timeout fired.
    pub rto_at: Option<Duration>,
    /// Since that timeout, the peer acknowledged a segment sent before it and never
    /// sent again.
    pub original_after_rto: bool,
    /// The ranges sent again most recently (a ring), to tell a duplicate the peer
    /// reports of our retransmission (reordering RACK did not wait for) from one the
    /// network made.
    recent_rtx: [(u64, u64); RECENT_RTX],
    recent_rtx_next: usize,
}

/// Retransmitted ranges remembered for D-SACKs: more than a recovery sends again
/// before the peer's report of the first comes back, in the common case.
const RECENT_RTX: usize = 64;

/// The state before a reduction of the congestion window (RFC 3708-style undo).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Undo {
    pub cwnd: u64,
    pub ssthresh: u64,
    /// `una` and `nxt` when the reduction began: its retransmissions lie between.
    pub from: u64,
    pub to: u64,
    /// Retransmissions since, not yet reported as duplicates.
    pub retransmissions: u32,
}

/// A loss probe that went out: `nxt` after it (TLP.end_seq), the range it sent
/// again, if it was a retransmission, and whether a recovery was under way (whose
/// reduction of the window covers what the probe repairs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tlp {
    pub end: u64,
    pub resent: Option<(u64, u64)>,
    pub in_recovery: bool,
    /// Probes sent in a row with no answer, this one included.
    pub sent: u32,
}

/// What the SACK blocks of an acknowledgment said.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SackNews {
    /// The scoreboard grew.
    pub new: bool,
    /// The first block reported a duplicate (RFC 2883): its positions.
    pub dsack: Option<(i64, i64)>,
}

/// Segment records per octet of send buffer at most (one per this many octets), so
/// that a stream of tiny segments is bounded too.
const MIN_RECORD_OCTETS: usize = 64;

/// A segment to send: positions `[start, end)`; it carries FIN when `end` passes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pick {
    pub start: u64,
    pub end: u64,
    pub rtx: bool,
}

/// Why no new data went out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Blocked {
    /// Nothing to send.
    Idle,
    /// The peer's window is closed, or too small for a sensible segment.
    Window,
    /// The congestion window is full.
    Cwnd,
}

/// Records at least this long are kept in chunks that packets may carry by reference
/// (on a link with checksum offload, an in-process one): half a segment, and never
/// small ones, whose allocation would cost more than the copy it saves.
fn share_min(mss: u16) -> usize {
    (usize::from(mss) / 2).max(8 * 1024)
}

impl Tx {
    pub fn new(cfg: &Config, iss: SeqNum) -> Tx {
        let mss = u64::from(cfg.mss);
        let max_records = (cfg.send_buffer / MIN_RECORD_OCTETS).clamp(64, 1 << 16);
        // Records for a send buffer of segments half the MSS or larger are allocated
        // now; smaller segments grow the records (to `max_records` at most).
        let half_segments = 2 * cfg.send_buffer / usize::from(cfg.mss) + 16;
        Tx {
            iss,
            una: 0,
            nxt: 0,
            wnd: 0,
            max_wnd: 0,
            wl1: 0,
            wl2: 0,
            wscale: 0,
            scaling: false,
            mss,
            sack_ok: false,
            buf: SendBuffer::new(
                cfg.send_buffer,
                cfg.max_records,
                usize::from(cfg.mss),
                cfg.checksum_offload.then(|| share_min(cfg.mss)),
            ),
            fin: None,
            scoreboard: RangeSet::new(cfg.max_ooo_ranges),
            rtt: RttEstimator::new(cfg.rto_initial, cfg.rto_min, cfg.rto_max),
            timed: None,
            cwnd: u64::from(cfg.initial_cwnd) * mss,
            ssthresh: u64::MAX,
            acked_accum: 0,
            dupacks: 0,
            in_recovery: false,
            rto_recovery: false,
            recover: 0,
            rtx_now: false,
            sent: Sent::new(max_records, half_segments),
            rack: Rack::default(),
            undo: None,
            tlp: None,
            rto_at: None,
            original_after_rto: false,
            recent_rtx: [(0, 0); RECENT_RTX],
            recent_rtx_next: 0,
        }
    }

    pub fn seq(&self, pos: u64) -> SeqNum {
        self.iss + pos as u32
    }

    /// The position an acknowledgment number names, relative to `una`.
    pub fn pos(&self, seq: SeqNum) -> i64 {
        self.una as i64 + i64::from(seq.delta(self.seq(self.una)))
    }

    /// Position one past the last queued octet.
    pub fn data_end(&self) -> u64 {
        1 + self.buf.end()
    }

    /// Position one past everything to send, FIN included.
    pub fn stream_end(&self) -> u64 {
        self.fin.map_or(self.data_end(), |f| f + 1)
    }

    /// Octets sent and not acknowledged (FlightSize).
    pub fn flight(&self) -> u64 {
        self.nxt - self.una
    }

    /// Everything, FIN included, is acknowledged.
    pub fn all_acked(&self) -> bool {
        self.fin.is_some_and(|f| self.una > f)
    }

    /// The segment end for a segment from `start` that may reach `limit`: at most one
    /// payload of `room` octets, ending on a record boundary when one is in reach, and
    /// carrying FIN when all data fits and the limit allows it.
    fn seg_end(&self, start: u64, limit: u64, room: u64) -> u64 {
        let data_end = self.data_end();
        let mut end = limit.min(start + room).min(data_end);
        if end > start {
            end = 1 + self.buf.align(start - 1, end - 1);
        } else {
            end = start;
        }
        match self.fin {
            Some(f) if end == f && limit > f => f + 1,
            _ => end,
        }
    }

    /// The next segment: a segment taken as lost first (RFC 6675 NextSeg; sent again
    /// with its own boundaries), then new octets within the peer's window and the
    /// congestion window. `room` bounds the payload; `force` (the persist timer) sends
    /// a small segment the silly-window rule would hold.
    pub fn pick(&mut self, room: u64, force: bool) -> Result<Pick, Blocked> {
        let room = room.min(self.mss).max(1);
        let pipe = self.pipe();
        if let Some(i) = self.sent.first_lost() {
            let p = self.resend(i, room);
            if self.rtx_now || pipe == 0 || pipe + (p.end - p.start) <= self.cwnd {
                return Ok(p);
            }
            return Err(Blocked::Cwnd);
        }
        let start = self.nxt;
        let all = self.stream_end();
        if start >= all {
            return Err(Blocked::Idle);
        }
        if self.sent.is_full() {
            return Err(Blocked::Cwnd);
        }
        let limit = all.min(self.una + self.wnd);
        let end = self.seg_end(start, limit, room);
        if end <= start {
            return Err(Blocked::Window);
        }
        let len = end - start;
        let whole = len >= room
            || end == all
            || (end <= self.data_end() && self.buf.is_boundary(end - 1))
            || 2 * len >= self.max_wnd;
        if !whole && !force {
            return Err(Blocked::Window);
        }
        if pipe > 0 && pipe + len > self.cwnd {
            return Err(Blocked::Cwnd);
        }
        Ok(Pick {
            start,
            end,
            rtx: false,
        })
    }

    /// Record `i` sent again (from `una` if part of it is acknowledged), cut first if
    /// its payload exceeds `room` (the caller's buffer became smaller).
    fn resend(&mut self, i: usize, room: u64) -> Pick {
        let s = self.sent.get(i);
        let start = s.start.max(self.una);
        if s.end.min(self.data_end()) > start + room {
            self.sent.split(i, start + room);
        }
        Pick {
            start,
            end: self.sent.get(i).end,
            rtx: true,
        }
    }

    /// The loss probe (RFC 8985 7.3): the first segment taken as lost, if the window
    /// held it back; else a new segment if the peer's window takes one, whatever the
    /// congestion window says; else the last segment the peer has not SACKed, again
    /// (the last one sent, unless a recovery is under way).
    pub fn pick_probe(&mut self, room: u64) -> Option<Pick> {
        let room = room.min(self.mss).max(1);
        if let Some(i) = self.sent.first_lost() {
            // Taken as lost and held back by the window: the probe is its
            // retransmission.
            return Some(self.resend(i, room));
        }
        let all = self.stream_end();
        if self.nxt < all && !self.sent.is_full() {
            let end = self.seg_end(self.nxt, all.min(self.una + self.wnd), room);
            if end > self.nxt {
                return Some(Pick {
                    start: self.nxt,
                    end,
                    rtx: false,
                });
            }
        }
        let last = (0..self.sent.len())
            .rev()
            .find(|&i| !self.sent.get(i).sacked)?;
        Some(self.resend(last, room))
    }

    /// Whether `[left, right)` overlaps a range we sent again lately.
    pub fn resent_lately(&self, left: u64, right: u64) -> bool {
        self.recent_rtx
            .iter()
            .any(|&(s, e)| s < e && s < right && left < e)
    }

    /// A loss probe sent `[start, end)` again, with no loss in view: a duplicate of
    /// that range says nothing of reordering (RFC 8985 7.4), whichever copy it
    /// duplicates, so retransmissions of it are forgotten.
    pub fn probe_resent(&mut self, start: u64, end: u64) {
        for r in &mut self.recent_rtx {
            if r.0 < end && start < r.1 {
                *r = (0, 0);
            }
        }
    }

    /// `pick` went out at `now`.
    pub fn sent(&mut self, pick: Pick, now: Duration, timing: &mut Timing) {
        if pick.rtx {
            let i = self.sent.index_of(pick.start);
            if i < self.sent.len() {
                if let Some(at) = self.sent.get(i).lost_at.filter(|_| self.sent.get(i).lost) {
                    timing.verdict_to_resend.record(now.saturating_sub(at));
                }
                self.sent.resent(i, now);
            }
            self.rtx_now = false;
            self.timed = None;
            if !self.rto_recovery {
                // A timeout's retransmissions are the timer's decision, not RACK's: a
                // duplicate of one says the timer was early (a stalled peer), not that
                // RACK should wait longer for reordering.
                self.recent_rtx[self.recent_rtx_next] = (pick.start, pick.end);
                self.recent_rtx_next = (self.recent_rtx_next + 1) % RECENT_RTX;
            }
            if let Some(u) = &mut self.undo {
                u.retransmissions = u.retransmissions.saturating_add(1);
            }
        } else {
            self.nxt = pick.end;
            self.buf.sent_to(pick.end.saturating_sub(1));
            self.sent.push(pick.start, pick.end, now);
            if self.timed.is_none() {
                self.timed = Some((pick.end, now));
            }
        }
    }

    /// Records the SACK blocks of an acknowledgment of `ack` arriving at `now`: the
    /// scoreboard and the segments it covers (delivered, for RACK). A first block
    /// below `ack`, or inside the second block, reports a duplicate (D-SACK, RFC
    /// 2883) and is returned; other blocks outside `(una, nxt]` are ignored.
    pub fn take_sack(
        &mut self,
        blocks: &[SackBlock],
        ack: i64,
        now: Duration,
        timing: &mut Timing,
    ) -> SackNews {
        let mut news = SackNews::default();
        if !self.sack_ok || blocks.is_empty() {
            return news;
        }
        let (l0, r0) = (self.pos(blocks[0].left), self.pos(blocks[0].right));
        let inside_next = blocks
            .get(1)
            .is_some_and(|b| self.pos(b.left) <= l0 && r0 <= self.pos(b.right));
        let skip = if l0 < r0 && (r0 <= ack || inside_next) {
            news.dsack = Some((l0, r0));
            1
        } else {
            0
        };
        for b in &blocks[skip..] {
            let (l, r) = (self.pos(b.left), self.pos(b.right));
            if l > self.una as i64 && l < r && r <= self.nxt as i64 {
                let (l, r) = (l as u64, r as u64);
                let before = self.scoreboard.bytes();
                self.scoreboard.insert(l, r);
                if self.scoreboard.bytes() != before {
                    news.new = true;
                    // A FIN is never SACKed: a segment is the peer's once its octets are.
                    let data_end = self.data_end();
                    let (board, rack) = (&self.scoreboard, &mut self.rack);
                    let (rto_at, original) = (self.rto_at, &mut self.original_after_rto);
                    self.sent.sack(
                        l,
                        r,
                        |a, b| {
                            let b = b.min(data_end);
                            board.covered(a, b) == b - a
                        },
                        |s| {
                            rack.delivered(s, now);
                            *original |= sent_before(s, rto_at);
                            repaired(timing, s, now);
                        },
                    );
                }
            }
        }
        news
    }

    /// The acknowledgment moved `una` to `ack` (> una): frees the buffer and the
    /// records of the segments it covers, takes an RTT sample when it covers the timed
    /// segment. Returns the octets newly acknowledged.
    pub fn advance(&mut self, ack: u64, now: Duration, timing: &mut Timing) -> u64 {
        let acked = ack - self.una;
        self.una = ack;
        self.buf.ack_to((ack.saturating_sub(1)).min(self.buf.end()));
        self.scoreboard.remove_below(ack);
        let (rack, rto_at, original) = (&mut self.rack, self.rto_at, &mut self.original_after_rto);
        self.sent.ack_to(ack, |s| {
            rack.delivered(s, now);
            *original |= sent_before(s, rto_at);
            repaired(timing, s, now);
        });
        if let Some((end, at)) = self.timed
            && ack >= end
        {
            self.rtt.sample(now.saturating_sub(at));
            self.timed = None;
        }
        self.rtt.progress();
        acked
    }
}

/// A segment sent again was delivered at `now`: how long its repair took.
fn repaired(timing: &mut Timing, s: &SentSeg, now: Duration) {
    if s.rtx {
        timing.resend_to_delivery.record(now.saturating_sub(s.xmit));
        timing
            .first_send_to_delivery
            .record(now.saturating_sub(s.first));
    }
}

impl Tx {
    /// What the segment at `una` waits for, if one is in flight and not delivered.
    pub fn hole_wait(&self) -> Option<HoleWait> {
        (self.sent.len() > 0).then(|| {
            let s = self.sent.get(0);
            if s.lost {
                HoleWait::Resend
            } else if s.rtx {
                HoleWait::Repair
            } else {
                HoleWait::Verdict
            }
        })
    }
}

/// Whether `s` was sent once only, before the timeout at `rto_at`.
fn sent_before(s: &SentSeg, rto_at: Option<Duration>) -> bool {
    rto_at.is_some_and(|t| !s.rtx && s.xmit < t)
}
