//! RACK (RFC 8985 section 6): loss detection by time instead of by counting. A segment
//! is taken as lost when a segment sent after it has been delivered and more than a
//! round trip plus a reordering window has passed since it was sent. The window
//! starts at a quarter of the minimum round trip once reordering has been seen,
//! grows by a quarter (at least by a quarter of the minimum round trip) each round
//! trip in which the peer reports a duplicate of one of our recent retransmissions
//! (D-SACK: a retransmission was not needed; a duplicate the network made, or one of
//! a loss probe's range, says nothing of reordering and leaves the window alone), and
//! halves after each sixteen recoveries without one. RFC 8985 bounds it by the
//! smoothed round trip; here the bound is the larger of that and half the
//! retransmission timeout, so that a network which holds packets
//! back for many round trips (softrnic's in-process network: 200 us against a round
//! trip of microseconds) stops costing a spurious retransmission and recovery per
//! reordered packet once the D-SACKs have widened the window; without D-SACKs the
//! window never grows past a quarter round trip. Until reordering is seen, a loss is
//! declared as soon as three segments' worth above it are SACKed (the classic
//! duplicate threshold) or while a recovery is under way.

use super::Timing;
use super::sent::SentSeg;
use super::tx::Tx;
use std::time::Duration;

/// Three segments SACKed above a hole (RFC 6675's DupThresh) mean a loss while no
/// reordering has been seen.
pub(crate) const DUP_THRESH: u64 = 3;

/// The minimum round trip is the least sample of this long (a windowed minimum, so a
/// path that became slower is followed).
const MIN_RTT_WINDOW: Duration = Duration::from_secs(30);

/// Recoveries without a D-SACK after which the reordering window returns to its
/// smallest size.
const REO_WND_PERSIST: u32 = 16;

/// The widest reordering window, in quarters of the minimum round trip, less one (it is
/// bounded by time too: see [`Rack::reo_wnd`]'s `cap`).
const REO_WND_MAX_STEPS: u32 = 1023;

#[derive(Debug, Default)]
pub(crate) struct Rack {
    /// The most recently sent delivered segment: when it was sent (RACK.xmit_ts) and
    /// the order of that sending (in place of RACK.end_seq, which cannot order a
    /// retransmission against new segments sent at the same instant).
    latest: Option<(Duration, u64)>,
    /// The round trip of that segment (RACK.rtt).
    rtt: Duration,
    /// The windowed minimum round trip and when it was measured.
    min_rtt: Option<(Duration, Duration)>,
    /// The highest end of a delivered segment (RACK.fack).
    fack: u64,
    /// A segment was delivered below one delivered before it without being sent again.
    reordering_seen: bool,
    /// Segments so delivered.
    pub reordered: u64,
    /// The reordering window in quarters of the minimum round trip, less one.
    reo_wnd_steps: u32,
    reo_wnd_persist: u32,
    /// A D-SACK widened the window; until `una` reaches this, another does not.
    dsack_round: Option<u64>,
}

/// Whether a sending at `t1` (the `o1`th) came after one at `t2` (the `o2`th).
fn sent_after(t1: Duration, o1: u64, t2: Duration, o2: u64) -> bool {
    t1 > t2 || (t1 == t2 && o1 > o2)
}

impl Rack {
    /// Segment `s` was delivered (acknowledged or SACKed) at `now` (RFC 8985 6.2
    /// steps 2 and 3).
    pub fn delivered(&mut self, s: &SentSeg, now: Duration) {
        let rtt = now.saturating_sub(s.xmit);
        if s.rtx && self.min_rtt.is_some_and(|(m, _)| rtt < m) {
            // Sooner than any round trip: the original's delivery, not the copy's.
            return;
        }
        if !s.rtx
            && self
                .min_rtt
                .is_none_or(|(m, at)| rtt <= m || now.saturating_sub(at) > MIN_RTT_WINDOW)
        {
            self.min_rtt = Some((rtt, now));
        }
        if self
            .latest
            .is_none_or(|(t, o)| sent_after(s.xmit, s.order, t, o))
        {
            self.latest = Some((s.xmit, s.order));
            self.rtt = rtt;
        }
        if !s.rtx && s.end < self.fack {
            self.reordering_seen = true;
            self.reordered += 1;
        }
        self.fack = self.fack.max(s.end);
    }

    /// Forgets the latest delivered segment: what was taken for the delivery of a
    /// retransmission was its original's (a timeout proved spurious).
    pub fn forget_latest(&mut self) {
        self.latest = None;
    }

    /// The peer reported a duplicate (D-SACK) while `una` and `nxt` are as given: the
    /// window widens, once per round trip (RFC 8985 6.2 step 4).
    pub fn on_dsack(&mut self, una: u64, nxt: u64) {
        self.reordering_seen = true;
        if self.dsack_round.is_some_and(|r| una >= r) {
            self.dsack_round = None;
        }
        if self.dsack_round.is_none() {
            self.dsack_round = Some(nxt);
            // The window grows by a quarter (RFC 8985 adds a quarter of the minimum
            // round trip): a network that holds packets back for hundreds of round
            // trips is matched in tens of rounds, not hundreds. Not by doubling: that
            // overshot the reordering by up to twice, and every real loss waits out
            // the window before its repair (session 21: a 200 us hold gave windows of
            // 250-550 us, and the hole of a loss lasted 400-550 us).
            let steps = self.reo_wnd_steps;
            self.reo_wnd_steps = (steps + steps / 4 + 1).min(REO_WND_MAX_STEPS);
            self.reo_wnd_persist = REO_WND_PERSIST;
        }
    }

    /// A recovery (fast or after a timeout) ended: after sixteen without a D-SACK the
    /// window halves, and so on down to its smallest size (RFC 8985 resets it at once;
    /// with real losses beside the reordering, that brought the spurious
    /// retransmissions back every sixteen losses).
    pub fn recovery_ended(&mut self) {
        if self.reo_wnd_persist > 0 {
            self.reo_wnd_persist -= 1;
            if self.reo_wnd_persist == 0 {
                self.reo_wnd_steps /= 2;
                if self.reo_wnd_steps > 0 {
                    self.reo_wnd_persist = REO_WND_PERSIST;
                }
            }
        }
    }

    /// The windowed minimum round trip, once measured.
    pub fn min_rtt(&self) -> Option<Duration> {
        self.min_rtt.map(|(m, _)| m)
    }

    /// The reordering window (RFC 8985 6.2 step 4): none while no reordering has been
    /// seen and a recovery is under way or `dup_thresh_sacked`; else quarters of the
    /// minimum round trip, at most `cap`.
    pub fn reo_wnd(&self, recovering: bool, dup_thresh_sacked: bool, cap: Duration) -> Duration {
        if !self.reordering_seen && (recovering || dup_thresh_sacked) {
            return Duration::ZERO;
        }
        let min = self.min_rtt.map_or(Duration::ZERO, |(m, _)| m);
        (min / 4).saturating_mul(self.reo_wnd_steps + 1).min(cap)
    }
}

impl Tx {
    /// RACK's loss detection (RFC 8985 6.2 step 5): marks lost every segment sent
    /// before the latest delivered one whose round trip and reordering window have
    /// passed. Returns whether it marked any, and how long until the next one would
    /// pass (the reordering timer), if some wait.
    pub fn detect_loss(
        &mut self,
        now: Duration,
        recovering: bool,
        timing: &mut Timing,
    ) -> (bool, Option<Duration>) {
        let Some((latest_t, latest_o)) = self.rack.latest else {
            return (false, None);
        };
        let srtt = self.rtt.srtt().unwrap_or(self.rack.rtt);
        let cap = srtt.max(self.rtt.rto() / 2);
        let sacked_enough = self.scoreboard.bytes() >= DUP_THRESH * self.mss;
        let reo_wnd = self.rack.reo_wnd(recovering, sacked_enough, cap);
        let mut marked = false;
        let mut wait: Option<Duration> = None;
        let mut i = 0;
        while i < self.sent.len() {
            let s = self.sent.get(i);
            if s.sacked {
                // Skip the whole SACKed run at once.
                let past = self.scoreboard.next_uncovered(s.start);
                i = (i + 1).max(self.sent.index_of(past));
                continue;
            }
            if !sent_after(latest_t, latest_o, s.xmit, s.order) {
                if s.rtx {
                    i += 1;
                    continue;
                }
                // Segments are first sent in order, and sent again later still: no
                // record beyond this one was sent before the latest delivered one.
                break;
            }
            if !s.lost {
                let due = s.xmit + self.rack.rtt + reo_wnd;
                if due <= now {
                    if self.sent.mark_lost_at(i, now) {
                        timing.send_to_verdict.record(now.saturating_sub(s.xmit));
                        timing.rtx_lost_again += u64::from(s.rtx);
                    }
                    marked = true;
                } else {
                    let left = due - now;
                    wait = Some(wait.map_or(left, |w| w.max(left)));
                }
            }
            i += 1;
        }
        if marked {
            timing.reo_wnd.record(reo_wnd);
        }
        (marked, wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    /// A network that holds packets back longer than the window: every round trip
    /// brings a D-SACK until the window covers the hold. It then exceeds the hold by at
    /// most a quarter (and a step), so that a real loss waits little longer for its
    /// repair than a reordered packet takes to arrive.
    #[test]
    fn the_reordering_window_settles_at_most_a_quarter_above_the_reordering() {
        for hold_us in [10, 130, 200, 500] {
            let hold = hold_us * US;
            let mut r = Rack {
                min_rtt: Some((4 * US, Duration::ZERO)),
                ..Rack::default()
            };
            let cap = Duration::from_secs(1);
            let mut round = 0;
            while r.reo_wnd(false, false, cap) < hold {
                round += 1;
                assert!(round < 64, "{hold:?}: {:?}", r.reo_wnd(false, false, cap));
                r.on_dsack(round * 10, round * 10 + 10);
            }
            let w = r.reo_wnd(false, false, cap);
            assert!(
                w <= hold + hold / 4 + US,
                "{hold:?}: {w:?} after {round} rounds"
            );
            // One more D-SACK in the same round trip (una below that round's end) does
            // not widen it.
            r.on_dsack(round * 10 + 5, round * 10 + 20);
            assert_eq!(r.reo_wnd(false, false, cap), w);
        }
    }
}
