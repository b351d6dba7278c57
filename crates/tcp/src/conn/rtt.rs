//! Round-trip time estimation and the retransmission timeout (RFC 6298): smoothed RTT
//! and its variation from samples (never from retransmitted segments, Karn's rule),
//! the timeout doubled on every expiry up to the configured maximum.

use std::time::Duration;

/// Clock granularity (G in RFC 6298): the virtual or real clock's resolution we assume.
const GRANULARITY: Duration = Duration::from_millis(1);

#[derive(Debug, Clone)]
pub(crate) struct RttEstimator {
    srtt: Option<Duration>,
    rttvar: Duration,
    rto: Duration,
    /// Expiries since the last progress: the timeout is `rto * 2^backoff`.
    backoff: u32,
    min: Duration,
    max: Duration,
}

impl RttEstimator {
    pub fn new(initial: Duration, min: Duration, max: Duration) -> RttEstimator {
        RttEstimator {
            srtt: None,
            rttvar: Duration::ZERO,
            rto: initial,
            backoff: 0,
            min,
            max,
        }
    }

    /// A measured round trip.
    pub fn sample(&mut self, r: Duration) {
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(srtt) => {
                let err = srtt.abs_diff(r);
                self.rttvar = self.rttvar * 3 / 4 + err / 4;
                self.srtt = Some(srtt * 7 / 8 + r / 8);
            }
        }
        let srtt = self.srtt.unwrap_or(r);
        self.rto = (srtt + (self.rttvar * 4).max(GRANULARITY)).clamp(self.min, self.max);
        self.backoff = 0;
    }

    /// The timeout to arm now, backed off.
    pub fn timeout(&self) -> Duration {
        let factor = 1u32 << self.backoff.min(20);
        self.rto.saturating_mul(factor).min(self.max)
    }

    /// The timer expired: the next timeout is twice as long.
    pub fn back_off(&mut self) {
        self.backoff = self.backoff.saturating_add(1);
    }

    /// New data was acknowledged: the backed-off timeout returns to the estimate.
    pub fn progress(&mut self) {
        self.backoff = 0;
    }

    /// The handshake completed after a SYN (or SYN-ACK) timed out, so with no sample:
    /// data starts with a conservative 3 s timeout (RFC 6298 5.7), within the bounds.
    pub fn after_syn_timeout(&mut self) {
        if self.srtt.is_none() {
            self.rto = self
                .rto
                .max(Duration::from_secs(3))
                .clamp(self.min, self.max);
        }
    }

    pub fn srtt(&self) -> Option<Duration> {
        self.srtt
    }

    pub fn rto(&self) -> Duration {
        self.rto
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn first_sample_then_smoothing() {
        let mut r = RttEstimator::new(1000 * MS, 200 * MS, 60_000 * MS);
        assert_eq!(r.timeout(), 1000 * MS);
        r.sample(100 * MS);
        // RTO = SRTT + 4 * RTTVAR = 100 + 4 * 50.
        assert_eq!(r.srtt(), Some(100 * MS));
        assert_eq!(r.timeout(), 300 * MS);
        r.sample(100 * MS);
        // RTTVAR = 3/4 * 50 = 37.5; RTO = 100 + 150.
        assert_eq!(r.timeout(), 250 * MS);
        for _ in 0..50 {
            r.sample(10 * MS);
        }
        assert_eq!(r.timeout(), 200 * MS, "clamped to the minimum");
    }

    #[test]
    fn a_syn_timeout_without_sample_starts_data_at_three_seconds() {
        let mut r = RttEstimator::new(1000 * MS, 200 * MS, 60_000 * MS);
        r.after_syn_timeout();
        assert_eq!(r.timeout(), 3000 * MS);
        let mut r = RttEstimator::new(1000 * MS, 200 * MS, 2000 * MS);
        r.after_syn_timeout();
        assert_eq!(r.timeout(), 2000 * MS, "within the maximum");
        let mut r = RttEstimator::new(1000 * MS, 200 * MS, 60_000 * MS);
        r.sample(10 * MS);
        r.after_syn_timeout();
        assert_eq!(r.timeout(), 200 * MS, "a sample wins");
    }

    #[test]
    fn backoff_doubles_up_to_the_maximum() {
        let mut r = RttEstimator::new(1000 * MS, 200 * MS, 5000 * MS);
        let mut seen = vec![];
        for _ in 0..5 {
            seen.push(r.timeout());
            r.back_off();
        }
        assert_eq!(
            seen,
            [1000 * MS, 2000 * MS, 4000 * MS, 5000 * MS, 5000 * MS]
        );
        r.progress();
        assert_eq!(r.timeout(), 1000 * MS);
    }
}
