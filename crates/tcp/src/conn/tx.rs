//! The send side of a connection: sequence state, the peer's window, the SACK
//! scoreboard, and the choice of the next segment (lost octets first, then new ones;
//! whole records when the layer above queued records). Congestion control lives in
//! `cc.rs`, the RTT estimator in `rtt.rs`.
//!
//! Positions count our sequence space from our SYN (position 0) and never wrap; stream
//! offset `o` is position `o + 1`, and our FIN, once queued, takes the position after
//! the last octet.

use super::rtt::RttEstimator;
use super::send_buffer::SendBuffer;
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
    /// `nxt` when the last recovery (or timeout) began (RFC 6582 "recover").
    pub recover: u64,
    /// Unsacked octets below this are taken as lost.
    pub lost_end: u64,
    /// Lost octets below this have been sent again (RFC 6675 HighRxt).
    pub high_rxt: u64,
    /// Send the first lost segment now, whatever the pipe says.
    pub rtx_now: bool,
}

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

impl Tx {
    pub fn new(cfg: &Config, iss: SeqNum) -> Tx {
        let mss = u64::from(cfg.mss);
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
            buf: SendBuffer::new(cfg.send_buffer, cfg.max_records),
            fin: None,
            scoreboard: RangeSet::new(cfg.max_ooo_ranges),
            rtt: RttEstimator::new(cfg.rto_initial, cfg.rto_min, cfg.rto_max),
            timed: None,
            cwnd: u64::from(cfg.initial_cwnd) * mss,
            ssthresh: u64::MAX,
            acked_accum: 0,
            dupacks: 0,
            in_recovery: false,
            recover: 0,
            lost_end: 0,
            high_rxt: 0,
            rtx_now: false,
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

    /// The next segment: lost octets first (RFC 6675 NextSeg), then new octets within
    /// the peer's window and the congestion window. `room` bounds the payload; `force`
    /// (the persist timer) sends a small segment the silly-window rule would hold.
    pub fn pick(&mut self, room: u64, force: bool) -> Result<Pick, Blocked> {
        let room = room.min(self.mss).max(1);
        let pipe = self.pipe();
        let lost_to = self.lost_end.min(self.nxt);
        let from = self.scoreboard.next_uncovered(self.high_rxt.max(self.una));
        if from < lost_to {
            let limit = self.scoreboard.next_start_after(from).unwrap_or(lost_to);
            let end = self.seg_end(from, limit.min(self.nxt), room);
            if end > from {
                if self.rtx_now || pipe == 0 || pipe + (end - from) <= self.cwnd {
                    return Ok(Pick {
                        start: from,
                        end,
                        rtx: true,
                    });
                }
                return Err(Blocked::Cwnd);
            }
        }
        let start = self.nxt;
        let all = self.stream_end();
        if start >= all {
            return Err(Blocked::Idle);
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

    /// `pick` went out at `now`.
    pub fn sent(&mut self, pick: Pick, now: Duration) {
        if pick.rtx {
            self.high_rxt = self.high_rxt.max(pick.end);
            self.rtx_now = false;
            self.timed = None;
        } else {
            self.nxt = pick.end;
            if self.timed.is_none() {
                self.timed = Some((pick.end, now));
            }
        }
    }

    /// Records the SACK blocks of an incoming ACK; blocks outside `(una, nxt]` are
    /// ignored (a D-SACK or a lie).
    pub fn take_sack(&mut self, blocks: &[SackBlock]) -> bool {
        if !self.sack_ok {
            return false;
        }
        let mut new = false;
        for b in blocks {
            let (l, r) = (self.pos(b.left), self.pos(b.right));
            if l > self.una as i64 && l < r && r <= self.nxt as i64 {
                let before = self.scoreboard.bytes();
                self.scoreboard.insert(l as u64, r as u64);
                new |= self.scoreboard.bytes() != before;
            }
        }
        new
    }

    /// The acknowledgment moved `una` to `ack` (> una): frees the buffer, takes an RTT
    /// sample when it covers the timed segment. Returns the octets newly acknowledged.
    pub fn advance(&mut self, ack: u64, now: Duration) -> u64 {
        let acked = ack - self.una;
        self.una = ack;
        self.buf.ack_to((ack.saturating_sub(1)).min(self.buf.end()));
        self.scoreboard.remove_below(ack);
        if let Some((end, at)) = self.timed
            && ack >= end
        {
            self.rtt.sample(now.saturating_sub(at));
            self.timed = None;
        }
        self.rtt.progress();
        self.high_rxt = self.high_rxt.max(ack);
        self.lost_end = self.lost_end.max(ack);
        acked
    }
}
