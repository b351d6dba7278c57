//! The tail loss probe (RFC 8985 section 7) and the RACK timers. When the last
//! segments of a flight are lost, no later segment is delivered for RACK to notice it
//! by, and only the retransmission timer would repair them. Instead, two round trips
//! after the last send or delivery with nothing heard (plus the peer's delayed-ACK
//! time when one segment is out), one segment goes out as a probe: new data, or the
//! last segment not SACKed, again. Its acknowledgment (with SACK) lets RACK find the
//! loss and fast recovery repair it, without a timeout. A probe that proves a loss
//! reduces the window as a recovery would; one that the peer reports as a duplicate
//! changes nothing.
//!
//! Beyond RFC 8985, which sends no probe during a recovery: when a recovery has sent
//! everything it took as lost and then hears nothing (a retransmission was lost, and
//! the window let nothing be sent after it for RACK to notice that by), the probe
//! resends the last segment not SACKed, rather than waiting for the timer.
//!
//! Beyond RFC 8985, which sends one probe and then leaves it to the timer: a probe
//! that hears nothing is followed by another after twice the wait (and at least an
//! eighth, then a quarter, of the retransmission timeout), up to [`MAX_PROBES`] in a
//! row (as QUIC's probe timeout backs off, RFC 9002 6.2), before the retransmission
//! timer acts. A small message lost together with its probe (or
//! with the acknowledgments of both) is then repaired in a few round trips; the timer,
//! whose floor must outlast a stalled thread on softrnic's in-process network, stays
//! the last resort. The same holds in a fast recovery: a retransmission lost while the
//! window held everything after it back, and then its probe, is repaired by the next
//! probe.

use super::{Connection, State};
use std::time::Duration;

/// The probe timeout before any round trip has been measured (RFC 8985 7.2).
const PTO_WITHOUT_RTT: Duration = Duration::from_secs(1);

/// Probes sent in a row without an answer before only the retransmission timer is
/// left.
pub(crate) const MAX_PROBES: u32 = 3;

impl Connection {
    /// Starts (or restarts) the probe timer after data went out or an acknowledgment
    /// delivered some, when a probe may be sent (RFC 8985 7.2): SACK in use, data in
    /// flight, no timeout's recovery under way, no probe outstanding, nothing that
    /// may be sent again now and no reordering timer running (RACK acts then).
    /// Otherwise the timer stops. Beyond RFC 8985: segments taken as lost that the
    /// congestion window holds back do not stop it (if the acknowledgments that
    /// would let them go never come, the probe sends the first of them).
    pub(super) fn arm_probe(&mut self, now: Duration) {
        let held_back = self.tx.sent.lost_bytes() > 0 && !self.tx.retransmission_ready();
        let t = &self.tx;
        let may = t.sack_ok
            && t.flight() > 0
            && !t.rto_recovery
            && t.tlp.is_none_or(|p| p.end <= t.una)
            && (t.sent.lost_bytes() == 0 || held_back)
            && self.timers.reo.is_none()
            && matches!(
                self.state,
                State::Established
                    | State::CloseWait
                    | State::FinWait1
                    | State::Closing
                    | State::LastAck
            );
        if !may {
            self.timers.pto = None;
            return;
        }
        let at = now + self.probe_timeout();
        self.timers.pto = Some(self.timers.rto.map_or(at, |rto| at.min(rto)));
    }

    /// The probe timeout (PTO): two round trips, and the peer's ACK delay when one
    /// segment is in flight (its ACK may wait for a second).
    fn probe_timeout(&self) -> Duration {
        let t = &self.tx;
        match t.rtt.srtt() {
            Some(srtt) if t.flight() <= t.mss => 2 * srtt + self.cfg.peer_max_ack_delay,
            Some(srtt) => 2 * srtt,
            None => PTO_WITHOUT_RTT,
        }
    }

    /// A probe went out (the `sent`th in a row): unless that was the last allowed, the
    /// next one follows after twice the wait of this one if nothing is heard, provided
    /// that comes before the retransmission timer (a probe never takes the timer's
    /// place and its backoff). An acknowledgment meanwhile re-arms or stops the probe
    /// timer ([`Connection::arm_probe`]).
    pub(super) fn arm_next_probe(&mut self, now: Duration, sent: u32) {
        if sent >= MAX_PROBES || self.tx.rto_recovery {
            return;
        }
        // Twice the last wait, and at least an eighth, then a quarter, of the
        // retransmission timeout: a probe that went while the peer's thread was off
        // the CPU is answered with everything else when it runs again, in one ACK; if
        // that one is lost, the next probe should come after the stall, not inside it.
        let wait = (self.probe_timeout() * (1 << sent))
            .max(self.tx.rtt.timeout() / (1 << (MAX_PROBES + 1 - sent)));
        let at = now + wait;
        if self.timers.rto.is_none_or(|rto| at < rto) {
            self.timers.pto = Some(at);
        }
    }

    /// The probe timer expired: a probe is due, and the retransmission timer starts
    /// again behind it.
    pub(super) fn on_probe_timeout(&mut self, now: Duration) {
        self.settle_stale_probe();
        if self.tx.flight() == 0
            || self.tx.rto_recovery
            || self.tx.tlp.is_some_and(|p| p.sent >= MAX_PROBES)
        {
            return;
        }
        self.tlp_due = true;
        self.timers.rto = Some(now + self.tx.rtt.timeout());
    }

    /// Ends an episode whose octets are all acknowledged (its end at or below
    /// `una`) but that no acknowledgment beyond its end has settled yet: a new flight
    /// needs a probe of its own. No D-SACK came for the probe's range in the round
    /// trips since (the probe timer ran at least two of them), so the probe was the
    /// only copy that arrived and repaired a loss, as an acknowledgment beyond its end
    /// would have said (RFC 8985 7.4.2).
    pub(super) fn settle_stale_probe(&mut self) {
        let Some(tlp) = self.tx.tlp.filter(|p| p.end <= self.tx.una) else {
            return;
        };
        self.tx.tlp = None;
        if tlp.resent.is_some() {
            if !tlp.in_recovery {
                self.tx.probe_repaired_loss();
            }
            self.stats.probe_recoveries += 1;
        }
    }

    /// What an acknowledgment of `ack` says of the probe outstanding (RFC 8985 7.4):
    /// `dsack` is a duplicate the peer reported in it.
    pub(super) fn probe_answered(&mut self, ack: u64, dsack: Option<(i64, i64)>) {
        let Some(tlp) = self.tx.tlp else {
            return;
        };
        match tlp.resent {
            Some((from, to)) if dsack.is_some_and(|(l, r)| l < to as i64 && r > from as i64) => {
                // The original and the probe both arrived: nothing was lost.
                self.tx.tlp = None;
            }
            None if ack >= tlp.end => self.tx.tlp = None,
            Some(_) if ack > tlp.end => {
                // Acknowledged beyond the probe with no duplicate reported: the probe
                // was the only copy that arrived.
                self.tx.tlp = None;
                if !tlp.in_recovery {
                    self.tx.probe_repaired_loss();
                }
                self.stats.probe_recoveries += 1;
            }
            _ => {}
        }
    }

    /// Runs RACK's loss detection; a loss found starts fast recovery, and segments
    /// still inside the reordering window set the reordering timer.
    pub(super) fn detect_loss(&mut self, now: Duration) {
        let recovering = self.tx.recovering();
        let (marked, wait) = self.tx.detect_loss(now, recovering, &mut self.stats.timing);
        let t = &mut self.stats.timing;
        t.min_rtt_ns = self.tx.rack.min_rtt().map_or(0, |m| m.as_nanos() as u64);
        t.srtt_us = self.tx.rtt.srtt().map_or(0, |d| d.as_micros() as u64);
        if marked && self.tx.enter_recovery() {
            self.stats.fast_retransmits += 1;
            self.timers.pto = None;
        }
        self.timers.reo = wait.map(|w| now + w);
    }
}
