//! When a benchmark loop calls its run stalled: after its limit of waiting *that it
//! spent looking*, not of wall-clock time.
//!
//! A loop polls, then reads the clock, and gave up once the clock said the limit had
//! passed since the last progress. A thread taken off the CPU between its (empty) poll
//! and that clock read comes back to find the limit passed and gives up, though what it
//! waited for may have come meanwhile, unseen since nothing polled. Under `taskset -c 0
//! chrt -i 0` on a loaded machine the whole process gets a slice every few seconds:
//! then `write_bw --transport user:sim -s 64K -n 1500` reported "client stalled" about
//! once in a thousand runs with the probe's Read Response sitting unread in the
//! client's own TCP (it had arrived seconds before the report, after the last poll), and
//! with the process stopped 11 s by `SIGSTOP` in one run of three (docs/TCP.md, "The
//! 'client stalled' hang"). So the time between two looks counts only up to
//! [`GAP_CAP`]: a longer gap is the poller (or the process) off the CPU, during which it
//! could not have seen anything arrive.

use std::time::{Duration, Instant};

/// The most one gap between two looks counts towards a stall. A loop that looks keeps
/// its gaps far below this (a busy poll: microseconds; a sleep on completion events:
/// at most `rdma::WAIT`, 100 ms); a longer one is time off the CPU.
pub(crate) const GAP_CAP: Duration = Duration::from_millis(250);

/// How long a loop has waited for progress, counted over its looks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StallWatch {
    limit: Duration,
    /// The most one gap counts ([`GAP_CAP`] unless given).
    cap: Duration,
    /// Waiting counted since the last progress.
    waited: Duration,
    /// The last look.
    last: Instant,
}

impl StallWatch {
    /// A watch that calls a wait of `limit` a stall; the loop starts looking at `now`.
    pub(crate) fn new(now: Instant, limit: Duration) -> StallWatch {
        StallWatch::with_gap_cap(now, limit, GAP_CAP)
    }

    /// [`StallWatch::new`] for a loop that looks less often (the server's idle check
    /// after a sleep of up to a second): one gap counts up to `cap`.
    pub(crate) fn with_gap_cap(now: Instant, limit: Duration, cap: Duration) -> StallWatch {
        StallWatch {
            limit,
            cap,
            waited: Duration::ZERO,
            last: now,
        }
    }

    /// A look at `now` found progress: the wait starts again.
    pub(crate) fn progressed(&mut self, now: Instant) {
        self.waited = Duration::ZERO;
        self.last = now;
    }

    /// A look at `now` (the clock read right after an empty poll) found nothing;
    /// returns whether the loop has now waited its limit.
    pub(crate) fn nothing(&mut self, now: Instant) -> bool {
        self.waited += now.saturating_duration_since(self.last).min(self.cap);
        self.last = now;
        self.waited > self.limit
    }

    /// The waiting counted so far (for the stall's message).
    pub(crate) fn waited(&self) -> Duration {
        self.waited
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: Duration = Duration::from_secs(10);

    /// Empty looks every millisecond from `from` for `span`; returns when the watch first
    /// called a stall, if it did.
    fn look_every_ms(w: &mut StallWatch, from: Instant, span: Duration) -> Option<Duration> {
        let ms = Duration::from_millis(1);
        let mut t = Duration::ZERO;
        while t < span {
            t += ms;
            if w.nothing(from + t) {
                return Some(t);
            }
        }
        None
    }

    #[test]
    fn ten_seconds_of_empty_looks_are_a_stall() {
        let t0 = Instant::now();
        let mut w = StallWatch::new(t0, LIMIT);
        let at = look_every_ms(&mut w, t0, Duration::from_secs(11));
        assert_eq!(at, Some(Duration::from_millis(10_001)));
    }

    /// The hang of session 15: the poller found nothing, was off the CPU for seconds
    /// before its clock read, and the answer came meanwhile. The time off the CPU counts
    /// as one capped gap, so its next look (which finds the answer) still happens.
    #[test]
    fn a_poller_off_the_cpu_between_its_poll_and_its_clock_read_is_not_stalled() {
        let t0 = Instant::now();
        let mut w = StallWatch::new(t0, LIMIT);
        assert_eq!(look_every_ms(&mut w, t0, Duration::from_secs(6)), None);
        // Off the CPU for 4 s: 10 s of wall-clock time since the last progress.
        let back = t0 + Duration::from_secs(10) + Duration::from_millis(1);
        assert!(
            !w.nothing(back),
            "a stall called for time the poller did not look"
        );
        assert_eq!(w.waited(), Duration::from_secs(6) + GAP_CAP);
        // It keeps looking; only a full limit of looking without progress is a stall.
        let at = look_every_ms(&mut w, back, Duration::from_secs(5));
        assert_eq!(
            at,
            Some(LIMIT - Duration::from_secs(6) - GAP_CAP + Duration::from_millis(1))
        );
    }

    #[test]
    fn progress_starts_the_wait_again() {
        let t0 = Instant::now();
        let mut w = StallWatch::new(t0, LIMIT);
        assert_eq!(look_every_ms(&mut w, t0, Duration::from_secs(9)), None);
        let t1 = t0 + Duration::from_secs(9);
        w.progressed(t1);
        assert_eq!(w.waited(), Duration::ZERO);
        assert_eq!(look_every_ms(&mut w, t1, Duration::from_secs(9)), None);
    }

    /// Sleeps on completion events (at most `rdma::WAIT`) count whole: a loop that sleeps
    /// still calls a stall after its limit.
    #[test]
    fn sleeps_on_events_count_whole() {
        let t0 = Instant::now();
        let mut w = StallWatch::new(t0, LIMIT);
        let step = Duration::from_millis(100);
        let mut t = Duration::ZERO;
        let at = loop {
            t += step;
            if w.nothing(t0 + t) {
                break t;
            }
        };
        assert_eq!(at, Duration::from_millis(10_100));
    }

    /// The server's idle check looks after sleeps of up to a second: with its cap of
    /// 2 s those count whole, and a 20 s wait for a CPU counts 2 s.
    #[test]
    fn a_larger_cap_counts_longer_sleeps_whole() {
        let t0 = Instant::now();
        let limit = Duration::from_secs(30);
        let mut w = StallWatch::with_gap_cap(t0, limit, Duration::from_secs(2));
        let s = |n: u64| t0 + Duration::from_secs(n);
        for n in 1..=10 {
            assert!(!w.nothing(s(n)));
        }
        assert!(!w.nothing(s(30)), "20 s off the CPU count as 2 s");
        assert_eq!(w.waited(), Duration::from_secs(12));
        let at = (31..).find(|&n| w.nothing(s(n)));
        assert_eq!(at, Some(49));
    }
}
