//! How long holes and repairs take ([`Timing`], in [`super::Stats`]): where a lossy
//! run's time goes is in these durations, not in the counts. On the receiver, how long
//! RCV.NXT stayed at a hole with data held above it; on the sender, for each segment
//! taken as lost, how long from its sending to the verdict, to its retransmission, and
//! to the retransmission's delivery; the reordering window RACK used; and, while new
//! data waited for a window held by a hole, what the segment at SND.UNA was waiting
//! for. Recording is a few additions per event (log2 buckets of microseconds).

use std::time::Duration;

/// Buckets of a [`Histogram`]: bucket `b > 0` holds `[2^(b-1), 2^b)` microseconds,
/// bucket 0 holds 0, the last everything from 2^(BUCKETS-2) on (16 ms).
pub const BUCKETS: usize = 16;

/// Durations in log2 buckets of microseconds, with their count, sum and largest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Histogram {
    pub buckets: [u64; BUCKETS],
    pub count: u64,
    pub sum_us: u64,
    pub max_us: u64,
}

impl Histogram {
    pub fn record(&mut self, d: Duration) {
        let us = d.as_micros().min(u128::from(u64::MAX)) as u64;
        let b = (64 - us.leading_zeros() as usize).min(BUCKETS - 1);
        self.buckets[b] += 1;
        self.count += 1;
        self.sum_us += us;
        self.max_us = self.max_us.max(us);
    }

    pub fn add(&mut self, o: &Histogram) {
        for (a, b) in self.buckets.iter_mut().zip(o.buckets.iter()) {
            *a += b;
        }
        self.count += o.count;
        self.sum_us += o.sum_us;
        self.max_us = self.max_us.max(o.max_us);
    }

    /// What was recorded after `before` (an earlier look at the same histogram; the
    /// largest is the whole run's).
    pub fn since(&self, before: &Histogram) -> Histogram {
        let mut h = self.clone();
        for (a, b) in h.buckets.iter_mut().zip(before.buckets.iter()) {
            *a -= b;
        }
        h.count -= before.count;
        h.sum_us -= before.sum_us;
        h
    }

    /// The upper bound (microseconds) of the bucket holding the `q`-quantile (0..=1).
    pub fn quantile_us(&self, q: f64) -> u64 {
        let want = (q * self.count as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (b, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= want {
                return if b == 0 { 0 } else { (1u64 << b) - 1 };
            }
        }
        self.max_us
    }
}

/// What the segment at SND.UNA waited for while new data waited for a peer's window
/// held by a hole (the split of `Stats::rwnd_hole_limited_us`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HoleWait {
    /// Sent once, not yet taken as lost: RACK's reordering window (or no later
    /// segment delivered yet).
    Verdict,
    /// Taken as lost, not yet sent again (the congestion window, or its turn).
    Resend,
    /// Sent again, waiting for the acknowledgment.
    Repair,
}

/// The durations of holes and their repairs (see the module's doc).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Timing {
    /// Receiver: from RCV.NXT stopping below held out-of-order data (or moving to a
    /// place below more of it) until it moves on.
    pub hole_at_nxt: Histogram,
    /// Receiver: out-of-order octets held above RCV.NXT when it moved on, summed and
    /// the largest (divide by `hole_at_nxt.count` for the mean).
    pub ooo_bytes_at_fill_sum: u64,
    pub ooo_bytes_at_fill_max: u64,
    /// Receiver: from the layer above having read everything up to a hole with data
    /// held above it (it can read nothing more) until the hole filled.
    pub reader_starved: Histogram,
    /// Sender: from a segment's (last) sending until RACK took it as lost.
    pub send_to_verdict: Histogram,
    /// Sender: of those, the segments that were retransmissions already (lost twice).
    pub rtx_lost_again: u64,
    /// Sender: from the verdict until the segment went again.
    pub verdict_to_resend: Histogram,
    /// Sender: from a retransmission until the peer had the segment (ACK or SACK).
    pub resend_to_delivery: Histogram,
    /// Sender: from a repaired segment's first sending until the peer had it.
    pub first_send_to_delivery: Histogram,
    /// Sender: RACK's reordering window at each loss detection that marked a segment.
    pub reo_wnd: Histogram,
    /// Sender: the least round trip RACK saw (ns), and the smoothed one at the end (us).
    pub min_rtt_ns: u64,
    pub srtt_us: u64,
    /// Sender: the split of `rwnd_hole_limited_us` by what the segment at SND.UNA
    /// waited for ([`HoleWait`]).
    pub hole_limited_verdict_us: u64,
    pub hole_limited_resend_us: u64,
    pub hole_limited_repair_us: u64,
    /// Sender: SACKed octets (the peer's out-of-order data) when a wait for a window
    /// held by a hole began: summed over the waits, and the largest.
    pub hole_limited_waits: u64,
    pub hole_limited_sacked_sum: u64,
    pub hole_limited_sacked_max: u64,
}

impl Timing {
    /// Adds `o`'s durations and counts (the gauges take the larger).
    pub fn add(&mut self, o: &Timing) {
        self.hole_at_nxt.add(&o.hole_at_nxt);
        self.ooo_bytes_at_fill_sum += o.ooo_bytes_at_fill_sum;
        self.ooo_bytes_at_fill_max = self.ooo_bytes_at_fill_max.max(o.ooo_bytes_at_fill_max);
        self.reader_starved.add(&o.reader_starved);
        self.send_to_verdict.add(&o.send_to_verdict);
        self.rtx_lost_again += o.rtx_lost_again;
        self.verdict_to_resend.add(&o.verdict_to_resend);
        self.resend_to_delivery.add(&o.resend_to_delivery);
        self.first_send_to_delivery.add(&o.first_send_to_delivery);
        self.reo_wnd.add(&o.reo_wnd);
        self.min_rtt_ns = self.min_rtt_ns.max(o.min_rtt_ns);
        self.srtt_us = self.srtt_us.max(o.srtt_us);
        self.hole_limited_verdict_us += o.hole_limited_verdict_us;
        self.hole_limited_resend_us += o.hole_limited_resend_us;
        self.hole_limited_repair_us += o.hole_limited_repair_us;
        self.hole_limited_waits += o.hole_limited_waits;
        self.hole_limited_sacked_sum += o.hole_limited_sacked_sum;
        self.hole_limited_sacked_max = self.hole_limited_sacked_max.max(o.hole_limited_sacked_max);
    }

    /// What was recorded after `before` (an earlier look; gauges are the latest).
    pub fn since(&self, b: &Timing) -> Timing {
        Timing {
            hole_at_nxt: self.hole_at_nxt.since(&b.hole_at_nxt),
            ooo_bytes_at_fill_sum: self.ooo_bytes_at_fill_sum - b.ooo_bytes_at_fill_sum,
            reader_starved: self.reader_starved.since(&b.reader_starved),
            send_to_verdict: self.send_to_verdict.since(&b.send_to_verdict),
            rtx_lost_again: self.rtx_lost_again - b.rtx_lost_again,
            verdict_to_resend: self.verdict_to_resend.since(&b.verdict_to_resend),
            resend_to_delivery: self.resend_to_delivery.since(&b.resend_to_delivery),
            first_send_to_delivery: self.first_send_to_delivery.since(&b.first_send_to_delivery),
            reo_wnd: self.reo_wnd.since(&b.reo_wnd),
            hole_limited_verdict_us: self.hole_limited_verdict_us - b.hole_limited_verdict_us,
            hole_limited_resend_us: self.hole_limited_resend_us - b.hole_limited_resend_us,
            hole_limited_repair_us: self.hole_limited_repair_us - b.hole_limited_repair_us,
            hole_limited_waits: self.hole_limited_waits - b.hole_limited_waits,
            hole_limited_sacked_sum: self.hole_limited_sacked_sum - b.hole_limited_sacked_sum,
            ..self.clone()
        }
    }

    pub(crate) fn hole_limited(&mut self, wait: HoleWait, us: u64) {
        match wait {
            HoleWait::Verdict => self.hole_limited_verdict_us += us,
            HoleWait::Resend => self.hole_limited_resend_us += us,
            HoleWait::Repair => self.hole_limited_repair_us += us,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_fall_in_log2_buckets_of_microseconds() {
        let mut h = Histogram::default();
        for us in [0, 1, 3, 200, 200, 100_000] {
            h.record(Duration::from_micros(us));
        }
        assert_eq!(h.buckets[0], 1);
        assert_eq!(h.buckets[1], 1);
        assert_eq!(h.buckets[2], 1);
        assert_eq!(h.buckets[8], 2, "128..256 us");
        assert_eq!(h.buckets[BUCKETS - 1], 1, "16 ms and more");
        assert_eq!((h.count, h.sum_us, h.max_us), (6, 100_404, 100_000));
        assert_eq!(h.quantile_us(0.5), 3);
        assert_eq!(h.quantile_us(0.8), 255);
    }
}
