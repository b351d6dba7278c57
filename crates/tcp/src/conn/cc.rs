//! Congestion control and loss recovery on the send side: slow start and congestion
//! avoidance (RFC 5681, with byte counting, RFC 3465), fast retransmit and NewReno
//! recovery (RFC 6582), SACK-based loss recovery in the simple form of RFC 6675 (the
//! pipe estimate, holes below the highest SACKed octet sent first), and the response
//! to a retransmission timeout.

use super::tx::Tx;

/// Duplicate ACKs (or that many segments SACKed) that signal a loss.
const DUP_THRESH: u64 = 3;

/// Bound on the congestion window (far above any window a peer can offer).
const MAX_CWND: u64 = 1 << 32;

impl Tx {
    /// Octets taken to be in the network (RFC 6675 section 4, simplified): sent and not
    /// acknowledged, less what the peer holds (SACKed, or one segment per duplicate ACK
    /// without SACK), less what is taken as lost and not yet sent again.
    pub fn pipe(&self) -> u64 {
        let flight = self.flight();
        let held = if self.sack_ok {
            self.scoreboard.bytes()
        } else {
            (u64::from(self.dupacks) * self.mss).min(flight)
        };
        let from = self.high_rxt.max(self.una);
        let to = self.lost_end.min(self.nxt);
        let lost = if to > from {
            (to - from) - self.scoreboard.covered(from, to)
        } else {
            0
        };
        flight.saturating_sub(held).saturating_sub(lost)
    }

    /// New data was acknowledged (`acked` octets): grow the window, or go on with (or
    /// end) a recovery.
    pub fn grow(&mut self, acked: u64) {
        if self.in_recovery {
            if self.una >= self.recover {
                // Full acknowledgment: recovery is over (RFC 6582 3.2 step 3).
                self.in_recovery = false;
                self.cwnd = self.ssthresh.max(self.mss);
                self.dupacks = 0;
            } else {
                // Partial acknowledgment: the next hole goes out at once; without SACK
                // the segment at `una` is the next one taken as lost.
                if !self.sack_ok {
                    self.lost_end = self.lost_end.max(self.una + self.mss);
                    self.dupacks = 0;
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

    /// A duplicate acknowledgment (or one with new SACK information) arrived. Returns
    /// true when it starts a fast retransmit.
    pub fn on_dupack(&mut self) -> bool {
        self.dupacks = self.dupacks.saturating_add(1);
        if self.in_recovery {
            self.extend_loss();
            return false;
        }
        let sacked_enough = self.sack_ok && self.scoreboard.bytes() >= DUP_THRESH * self.mss;
        // Only data sent after the last recovery began may start another (RFC 6582).
        if (u64::from(self.dupacks) < DUP_THRESH && !sacked_enough) || self.una < self.recover {
            return false;
        }
        self.ssthresh = (self.flight() / 2).max(2 * self.mss);
        self.cwnd = self.ssthresh;
        self.acked_accum = 0;
        self.recover = self.nxt;
        self.in_recovery = true;
        // What an earlier recovery already sent again is not sent a third time (if
        // that copy is lost too, the timer repairs it).
        self.high_rxt = self.high_rxt.max(self.una);
        self.lost_end = self.una + self.mss;
        self.extend_loss();
        self.rtx_now = true;
        self.timed = None;
        true
    }

    /// With SACK, every hole below the highest SACKed octet is taken as lost.
    pub fn extend_loss(&mut self) {
        if self.in_recovery
            && self.sack_ok
            && let Some(high) = self.scoreboard.highest_end()
        {
            self.lost_end = self.lost_end.max(high);
        }
    }

    /// The retransmission timer expired (RFC 5681 3.1, RFC 6298 5.5): one segment of
    /// window, everything unacknowledged taken as lost and sent again (except what the
    /// peer SACKed, unless it keeps timing out: it may have dropped what it SACKed).
    pub fn on_rto(&mut self, consecutive: u32) {
        self.ssthresh = (self.flight() / 2).max(2 * self.mss);
        self.cwnd = self.mss;
        self.acked_accum = 0;
        self.in_recovery = false;
        self.dupacks = 0;
        self.recover = self.nxt;
        self.lost_end = self.nxt;
        self.high_rxt = self.una;
        self.rtx_now = true;
        self.timed = None;
        if consecutive >= 3 {
            self.scoreboard.clear();
        }
        self.rtt.back_off();
    }
}
