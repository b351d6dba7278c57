//! Congestion control and loss recovery on the send side: slow start and congestion
//! avoidance (RFC 5681, with byte counting, RFC 3465), fast recovery entered when RACK
//! (or, without SACK, the third duplicate ACK: RFC 6582's NewReno) finds a loss, the
//! pipe estimate of RFC 6675, the response to a retransmission timeout, and the undo
//! of a reduction that proves spurious: when the peer reports every retransmission
//! since as a duplicate (D-SACK, RFC 2883), nothing was lost, and the window goes back
//! to what it was (in the manner of RFC 3708's detection and RFC 4015's response).

use super::rack::DUP_THRESH;
use super::tx::{Tx, Undo};
use std::time::Duration;

/// Bound on the congestion window (far above any window a peer can offer).
const MAX_CWND: u64 = 1 << 32;

impl Tx {
    /// Octets taken to be in the network (RFC 6675 section 4): sent and not
    /// acknowledged, less what the peer holds (SACKed, or one segment per duplicate
    /// ACK without SACK), less what is taken as lost and not yet sent again.
    pub fn pipe(&self) -> u64 {
        let flight = self.flight();
        let held = if self.sack_ok {
            self.scoreboard.bytes()
        } else {
            (u64::from(self.dupacks) * self.mss).min(flight)
        };
        flight
            .saturating_sub(held)
            .saturating_sub(self.sent.lost_bytes())
    }

    /// A segment taken as lost waits to be sent again, and the windows let it go now
    /// (as [`Tx::pick`] will).
    pub fn retransmission_ready(&mut self) -> bool {
        let Some(i) = self.sent.first_lost() else {
            return false;
        };
        let s = self.sent.get(i);
        let pipe = self.pipe();
        self.rtx_now || pipe == 0 || pipe + (s.end - s.start) <= self.cwnd
    }

    /// A fast recovery or a timeout's recovery is under way.
    pub fn recovering(&self) -> bool {
        self.in_recovery || self.rto_recovery
    }

    /// Halves the window's threshold (RFC 5681 (4)), remembering what it was.
    fn reduce(&mut self) {
        self.undo = Some(Undo {
            cwnd: self.cwnd,
            ssthresh: self.ssthresh,
            from: self.una,
            to: self.nxt,
            retransmissions: 0,
        });
        self.ssthresh = (self.flight() / 2).max(2 * self.mss);
        self.acked_accum = 0;
    }

    /// A loss was found: fast recovery begins (RFC 6582 / 6675), unless one under way
    /// or the last one's window covers it (only data sent after a recovery began may
    /// start another). True when it began.
    pub fn enter_recovery(&mut self) -> bool {
        if self.in_recovery || self.una < self.recover {
            return false;
        }
        self.reduce();
        self.cwnd = self.ssthresh;
        self.recover = self.nxt;
        self.in_recovery = true;
        self.rtx_now = true;
        self.timed = None;
        self.tlp = None;
        true
    }

    /// New data was acknowledged (`acked` octets): grow the window, or go on with (or
    /// end) a recovery.
    pub fn grow(&mut self, acked: u64) {
        if self.rto_recovery && self.una >= self.recover {
            self.rto_recovery = false;
            self.rack.recovery_ended();
        }
        if self.in_recovery {
            if self.una >= self.recover {
                // Full acknowledgment: recovery is over (RFC 6582 3.2 step 3).
                self.in_recovery = false;
                self.cwnd = self.ssthresh.max(self.mss);
                self.dupacks = 0;
                self.rack.recovery_ended();
            } else if !self.sack_ok {
                // Partial acknowledgment without SACK: the segment at `una` is the next
                // one lost, and goes at once.
                self.dupacks = 0;
                if self.sent.len() > 0 {
                    self.sent.mark_lost(0);
                }
                self.rtx_now = true;
            }
            return;
        }
        self.dupacks = 0;
        if self.cwnd < self.ssthresh {
            self.cwnd += acked.min(2 * self.mss);
        } else {
            self.acked_accum += acked;
            if self.acked_accum >= self.cwnd {
                self.acked_accum -= self.cwnd;
                self.cwnd += self.mss;
            }
        }
        self.cwnd = self.cwnd.min(MAX_CWND);
    }

    /// A duplicate acknowledgment from a peer without SACK. Returns true when it starts
    /// a fast retransmit (the third, RFC 5681 3.2).
    pub fn on_dupack(&mut self) -> bool {
        self.dupacks = self.dupacks.saturating_add(1);
        if self.in_recovery || u64::from(self.dupacks) < DUP_THRESH || self.una < self.recover {
            return false;
        }
        if self.sent.len() > 0 {
            self.sent.mark_lost(0);
        }
        self.enter_recovery()
    }

    /// A loss probe repaired a loss (RFC 8985 7.4.2): the window is reduced as for a
    /// recovery, without one.
    pub fn probe_repaired_loss(&mut self) {
        if self.recovering() {
            return;
        }
        self.reduce();
        self.ssthresh = (self.cwnd / 2).max(2 * self.mss);
        self.cwnd = self.ssthresh;
    }

    /// The peer reported `[left, right)` as received twice (D-SACK). Returns true when
    /// that proves the last reduction spurious and undoes it: every retransmission
    /// since has been reported, and nothing is waiting to be sent again.
    pub fn on_dsack(&mut self, left: i64, right: i64) -> bool {
        // Only a duplicate of our retransmission says that RACK did not wait long
        // enough; one the network made says nothing of reordering.
        if self.resent_lately(left.max(0) as u64, right.max(0) as u64) {
            self.rack.on_dsack(self.una, self.nxt);
        }
        let Some(u) = &mut self.undo else {
            return false;
        };
        if left < u.from as i64 || right > u.to as i64 || u.retransmissions == 0 {
            return false;
        }
        u.retransmissions -= 1;
        if u.retransmissions > 0 || self.sent.lost_bytes() > 0 {
            return false;
        }
        let u = *u;
        self.undo = None;
        self.cwnd = self.cwnd.max(u.cwnd);
        self.ssthresh = self.ssthresh.max(u.ssthresh);
        self.in_recovery = false;
        self.rto_recovery = false;
        self.dupacks = 0;
        true
    }

    /// After a timeout, the peer acknowledged (or SACKed) a segment sent before it and
    /// never sent again: the path was delivering, and the timer fired too early (RFC
    /// 5682's detection, by SACK). The segments taken as lost and not yet sent again
    /// go back to RACK, which finds the ones really lost, and the window goes back to
    /// what it was (RFC 4015). Returns true when it was so.
    pub fn timeout_was_spurious(&mut self) -> bool {
        if !self.original_after_rto || !self.rto_recovery {
            return false;
        }
        self.original_after_rto = false;
        self.rto_recovery = false;
        self.sent.unmark_unsent();
        self.rack.forget_latest();
        if let Some(u) = self.undo.take() {
            self.cwnd = self.cwnd.max(u.cwnd);
            self.ssthresh = self.ssthresh.max(u.ssthresh);
        }
        true
    }

    /// The retransmission timer expired (RFC 5681 3.1, RFC 6298 5.5): one segment of
    /// window, everything unacknowledged taken as lost and sent again (except what the
    /// peer SACKed, unless it keeps timing out: it may have dropped what it SACKed).
    pub fn on_rto(&mut self, consecutive: u32, now: Duration) {
        self.rto_at = Some(now);
        self.original_after_rto = false;
        if consecutive <= 1 {
            self.reduce();
        } else {
            self.ssthresh = (self.flight() / 2).max(2 * self.mss);
            self.acked_accum = 0;
        }
        self.cwnd = self.mss;
        self.in_recovery = false;
        self.rto_recovery = true;
        self.dupacks = 0;
        self.recover = self.nxt;
        self.rtx_now = true;
        self.timed = None;
        self.tlp = None;
        if consecutive >= 3 {
            self.scoreboard.clear();
            self.sent.clear_sacks();
        } else if self.sent.len() > 0 {
            // The segment at the left edge goes again whatever was SACKed of it (RFC
            // 2018 section 8): a peer that SACKed it and then acknowledged only part
            // of it would otherwise leave nothing to resend and no timer.
            self.scoreboard.remove_below(self.sent.get(0).end);
            self.sent.unsack_first();
        }
        for i in 0..self.sent.len() {
            self.sent.mark_lost(i);
        }
        self.rtt.back_off();
    }
}
