//! Statistics: latency summaries (perftest's columns), bandwidth meters with a peak over
//! short windows, the CPU a run used, and the progress line shown on stderr for runs
//! longer than a second.

use softrnic_rnic::usage::{self, CpuTime};
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// A summary of latency samples, in microseconds (perftest's latency columns).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatStats {
    /// Samples.
    pub count: usize,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
    /// The median (perftest's t_typical).
    pub typical: f64,
    /// Mean.
    pub avg: f64,
    /// Sample standard deviation (n - 1 in the denominator; 0 for fewer than 2 samples).
    pub stdev: f64,
    /// 99th percentile (nearest rank).
    pub p99: f64,
    /// 99.9th percentile (nearest rank).
    pub p999: f64,
}

/// The nearest-rank percentile of sorted samples: the smallest sample such that at least
/// `p` percent of the samples are at or below it. `None` for no samples.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let n = sorted.len();
    // The epsilon keeps float noise (0.99 * 1000 = 990.0000000000001) out of the rank.
    let rank = (p * n as f64 / 100.0 - 1e-9).ceil() as usize;
    Some(sorted[rank.clamp(1, n) - 1])
}

/// The median of sorted samples (mean of the two middle ones for an even count).
pub fn median(sorted: &[f64]) -> Option<f64> {
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

impl LatStats {
    /// Summarises samples (any order); `None` for no samples.
    pub fn from_samples(samples: &[f64]) -> Option<LatStats> {
        if samples.is_empty() {
            return None;
        }
        let mut s = samples.to_vec();
        s.sort_by(f64::total_cmp);
        let n = s.len();
        let avg = s.iter().sum::<f64>() / n as f64;
        let stdev = if n < 2 {
            0.0
        } else {
            (s.iter().map(|x| (x - avg) * (x - avg)).sum::<f64>() / (n - 1) as f64).sqrt()
        };
        Some(LatStats {
            count: n,
            min: s[0],
            max: s[n - 1],
            typical: median(&s)?,
            avg,
            stdev,
            p99: percentile(&s, 99.0)?,
            p999: percentile(&s, 99.9)?,
        })
    }
}

/// Measures a bandwidth run: the average over the whole run, and the peak over windows
/// of at least [`BwMeter::WINDOW`].
///
/// Windows come from one of two sources, and the peak is only as good as its source:
/// - [`BwMeter::confirmed`]: delivery probes. A window runs from the post of one probe (a
///   1-octet RDMA Read, which the peer answers only after everything before it on the
///   connection) to the completion of the next, and counts the messages posted between
///   the two probes: each of them was both posted and delivered inside the window, so the
///   rate is a lower bound of what was delivered. This is the peak of the Write and Send
///   tests whenever the peer answers Reads.
/// - [`BwMeter::record`]: completions. Right for Reads (a Read completes when its data has
///   landed here); for Writes and Sends it counts local completions, which can run ahead
///   of delivery by what the transmit and socket buffers hold (so the first window is
///   left out when there are at least three). Used for those only against a peer that
///   cannot be probed (Linux perftest), and the output says so.
#[derive(Debug, Clone)]
pub struct BwMeter {
    start: Instant,
    win_start: Instant,
    win_ops: u64,
    windows: u32,
    first_rate: f64,
    peak_rate: f64,
}

impl BwMeter {
    /// Shortest peak window.
    pub const WINDOW: Duration = Duration::from_millis(10);

    /// Starts measuring now.
    pub fn start(now: Instant) -> BwMeter {
        BwMeter {
            start: now,
            win_start: now,
            win_ops: 0,
            windows: 0,
            first_rate: 0.0,
            peak_rate: 0.0,
        }
    }

    /// When the run started.
    pub fn started(&self) -> Instant {
        self.start
    }

    /// Records that `ops` operations in all have completed by `now`.
    pub fn record(&mut self, now: Instant, ops: u64) {
        let dt = now.saturating_duration_since(self.win_start);
        if dt >= Self::WINDOW {
            let rate = (ops - self.win_ops) as f64 / dt.as_secs_f64();
            if self.windows == 0 {
                self.first_rate = rate;
            } else {
                self.peak_rate = self.peak_rate.max(rate);
            }
            self.windows += 1;
            self.win_start = now;
            self.win_ops = ops;
        }
    }

    /// Records a confirmed window: `ops` operations were posted at or after `from` and
    /// had all been delivered by `to` (windows shorter than [`BwMeter::WINDOW`] are not
    /// counted).
    pub fn confirmed(&mut self, from: Instant, to: Instant, ops: u64) {
        let dt = to.saturating_duration_since(from);
        if dt >= Self::WINDOW {
            self.peak_rate = self.peak_rate.max(ops as f64 / dt.as_secs_f64());
            // Not a completion window: nothing to leave out.
            self.windows = self.windows.max(3);
        }
    }

    /// Finishes: `ops` operations of `size` octets completed by `end`.
    pub fn finish(&self, end: Instant, ops: u64, size: usize) -> BwResult {
        let elapsed = end.saturating_duration_since(self.start);
        let secs = elapsed.as_secs_f64().max(1e-9);
        let msg_rate = ops as f64 / secs;
        let mut peak = if self.windows >= 3 {
            self.peak_rate
        } else {
            self.peak_rate.max(self.first_rate)
        };
        peak = peak.max(msg_rate);
        BwResult {
            bytes: size,
            iterations: ops,
            elapsed,
            clock: Some((self.start, end)),
            peak_bps: peak * size as f64,
            avg_bps: msg_rate * size as f64,
            msg_rate,
            cpu: None,
            per_qp: None,
            calls: None,
        }
    }
}

/// The CPU a run used: `getrusage(RUSAGE_SELF)` deltas around its measuring loop, so
/// every thread of the process counts (in loopback mode both sides, their engine
/// threads and the TCP baseline's server thread; otherwise this side only), beside what
/// the run moved in that time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuUse {
    /// User and system CPU time.
    pub time: CpuTime,
    /// Messages moved while it was counted (latency tests: both directions, warm-up
    /// included).
    pub messages: u64,
    /// Payload octets moved while it was counted.
    pub bytes: u64,
    /// Whether both sides ran in this process (loopback), else this side only.
    pub both_sides: bool,
}

impl CpuUse {
    /// CPU seconds (user + system).
    pub fn seconds(&self) -> f64 {
        self.time.total().as_secs_f64()
    }

    /// CPU seconds per GB (10^9 octets) moved.
    pub fn per_gb(&self) -> Option<f64> {
        (self.bytes > 0).then(|| self.seconds() / (self.bytes as f64 / 1e9))
    }

    /// CPU seconds per million messages moved.
    pub fn per_mmsg(&self) -> Option<f64> {
        (self.messages > 0).then(|| self.seconds() / (self.messages as f64 / 1e6))
    }

    /// Whose CPU: `both sides` or `this side`.
    pub fn scope(&self) -> &'static str {
        if self.both_sides {
            "both_sides"
        } else {
            "this_side"
        }
    }
}

/// Counts the process's CPU time from its start to [`CpuClock::stop`].
pub struct CpuClock {
    start: Option<CpuTime>,
    both_sides: bool,
}

impl CpuClock {
    /// Starts counting now; `both_sides`: both sides run in this process.
    pub fn start(both_sides: bool) -> CpuClock {
        CpuClock {
            start: usage::process().ok(),
            both_sides,
        }
    }

    /// The CPU used since the start, for `messages` messages and `bytes` octets; `None`
    /// if the kernel could not say.
    pub fn stop(&self, messages: u64, bytes: u64) -> Option<CpuUse> {
        let now = usage::process().ok()?;
        Some(CpuUse {
            time: now.since(self.start.as_ref()?),
            messages,
            bytes,
            both_sides: self.both_sides,
        })
    }
}

/// A bandwidth result.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BwResult {
    /// Message size.
    pub bytes: usize,
    /// Messages completed.
    pub iterations: u64,
    /// Wall time of the run.
    pub elapsed: Duration,
    /// When this side's clock started and stopped; `None` for figures a peer reported
    /// (perftest's client report), which this side did not time.
    pub clock: Option<(Instant, Instant)>,
    /// Peak bandwidth, octets per second.
    pub peak_bps: f64,
    /// Average bandwidth, octets per second.
    pub avg_bps: f64,
    /// Messages per second.
    pub msg_rate: f64,
    /// The CPU the run used, if counted.
    pub cpu: Option<CpuUse>,
    /// With more than one QP: how the completed messages spread over the QPs.
    pub per_qp: Option<PerQpCompletions>,
    /// A one-stream TCP baseline's system calls (write_bw, send_bw): what a round's
    /// speed went with.
    pub calls: Option<StreamCalls>,
}

/// The system calls of a one-stream TCP bandwidth baseline, counted on both sides (the
/// counting is an integer add beside each call; the calls are the discipline's own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StreamCalls {
    /// The reader's calls that returned octets, and the octets.
    pub reads: u64,
    pub read_octets: u64,
    /// The reader's calls that found the socket empty (busy-poll only).
    pub empty_reads: u64,
    /// The writer's calls that took octets, and those that found the socket full
    /// (busy-poll only; the batching writer is not counted).
    pub sends: u64,
    pub full_sends: u64,
}

impl StreamCalls {
    /// Per message of the run (`msgs`), as JSON.
    pub fn json(&self, msgs: u64) -> serde_json::Value {
        let per = |x: u64| x as f64 / msgs.max(1) as f64;
        serde_json::json!({
            "reads_per_msg": per(self.reads),
            "octets_per_read": self.read_octets as f64 / self.reads.max(1) as f64,
            "empty_reads_per_msg": per(self.empty_reads),
            "sends_per_msg": per(self.sends),
            "full_sends_per_msg": per(self.full_sends),
        })
    }
}

/// Fairness of a many-QP bandwidth run: messages completed per QP, when the run's
/// duration was up (what each QP had moved while all competed) and at the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PerQpCompletions {
    /// At the deadline of a `-D` run; `None` in a run of a fixed count.
    pub at_deadline: Option<Spread>,
    /// When the run ended.
    pub at_end: Spread,
}

impl PerQpCompletions {
    /// As JSON: `{"at_deadline": {"min", "median", "max"} or null, "at_end": {...}}`.
    pub fn json(&self) -> serde_json::Value {
        let s = |s: &Spread| serde_json::json!({"min": s.min, "median": s.median, "max": s.max});
        serde_json::json!({
            "at_deadline": self.at_deadline.as_ref().map(s),
            "at_end": s(&self.at_end),
        })
    }
}

/// Smallest, median and largest of some counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spread {
    /// Smallest.
    pub min: u64,
    /// Median (the lower middle one of an even count).
    pub median: u64,
    /// Largest.
    pub max: u64,
}

impl Spread {
    /// The spread of `counts`; `None` if there are none.
    pub fn of(counts: impl IntoIterator<Item = u64>) -> Option<Spread> {
        let mut v: Vec<u64> = counts.into_iter().collect();
        v.sort_unstable();
        Some(Spread {
            min: *v.first()?,
            median: v[(v.len() - 1) / 2],
            max: *v.last()?,
        })
    }
}

/// A latency result.
#[derive(Debug, Clone, PartialEq)]
pub struct LatResult {
    /// Message size.
    pub bytes: usize,
    /// Iterations measured (warm-up excluded).
    pub iterations: u64,
    /// The summary, microseconds.
    pub stats: LatStats,
    /// The CPU the run used, if counted.
    pub cpu: Option<CpuUse>,
    /// Every sample, microseconds, in the order taken: kept only where asked
    /// (`BenchConfig::keep_samples`, the `--pairs` sub-runs, which pool them).
    pub samples: Option<std::sync::Arc<Vec<f64>>>,
}

impl LatResult {
    /// The result of `samples` (microseconds) of `bytes`-octet messages, keeping the
    /// samples if `keep`; `None` for no samples.
    pub fn of_samples(bytes: usize, samples: Vec<f64>, keep: bool) -> Option<LatResult> {
        Some(LatResult {
            bytes,
            iterations: samples.len() as u64,
            stats: LatStats::from_samples(&samples)?,
            cpu: None,
            samples: keep.then(|| std::sync::Arc::new(samples)),
        })
    }
}

/// Prints a progress line to stderr once a run has lasted more than a second, then once a
/// second; on a terminal the line is rewritten in place and cleared at the end.
pub struct Progress {
    label: String,
    start: Instant,
    next: Instant,
    enabled: bool,
    tty: bool,
    printed: bool,
    size: usize,
    bw: bool,
}

impl Progress {
    /// A progress reporter for one run; `bw` selects bandwidth or latency wording.
    pub fn new(label: String, size: usize, bw: bool, enabled: bool) -> Progress {
        let now = Instant::now();
        Progress {
            label,
            start: now,
            next: now + Duration::from_secs(1),
            enabled,
            tty: std::io::stderr().is_terminal(),
            printed: false,
            size,
            bw,
        }
    }

    /// Called often from the run's loop with the operations completed so far.
    #[inline]
    pub fn tick(&mut self, now: Instant, ops: u64) {
        if self.enabled && now >= self.next {
            self.print(now, ops);
        }
    }

    #[cold]
    fn print(&mut self, now: Instant, ops: u64) {
        self.next = now + Duration::from_secs(1);
        let secs = now.duration_since(self.start).as_secs_f64();
        let rate = if self.bw {
            format!("{:.1} MB/s", ops as f64 * self.size as f64 / secs / MB)
        } else {
            format!("{:.2} us/iter", secs * 1e6 / ops.max(1) as f64)
        };
        let line = format!("[{}] {secs:.1} s, {ops} iterations, {rate}", self.label);
        let mut e = std::io::stderr().lock();
        if self.tty {
            let _ = write!(e, "\r\x1b[K{line}");
        } else {
            let _ = writeln!(e, "{line}");
        }
        let _ = e.flush();
        self.printed = true;
    }

    /// Ends the progress display (clears the line on a terminal).
    pub fn finish(&mut self) {
        if self.printed && self.tty {
            let mut e = std::io::stderr().lock();
            let _ = write!(e, "\r\x1b[K");
            let _ = e.flush();
        }
        self.printed = false;
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

/// perftest's MB: 2^20 octets.
pub const MB: f64 = 1_048_576.0;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_nearest_rank() {
        let s: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&s, 99.0), Some(99.0));
        assert_eq!(percentile(&s, 99.9), Some(100.0));
        assert_eq!(percentile(&s, 50.0), Some(50.0));
        assert_eq!(percentile(&s, 100.0), Some(100.0));
        assert_eq!(percentile(&s, 0.0), Some(1.0));
        let s: Vec<f64> = (1..=1000).map(f64::from).collect();
        assert_eq!(percentile(&s, 99.0), Some(990.0));
        assert_eq!(percentile(&s, 99.9), Some(999.0));
        assert_eq!(percentile(&[], 99.0), None);
        assert_eq!(percentile(&[7.0], 99.9), Some(7.0));
    }

    #[test]
    fn median_odd_and_even() {
        assert_eq!(median(&[1.0, 2.0, 3.0]), Some(2.0));
        assert_eq!(median(&[1.0, 2.0, 3.0, 10.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn lat_stats_known_input() {
        // Unsorted on purpose. Mean 5, sample variance 32/7.
        let s = [4.0, 2.0, 5.0, 4.0, 5.0, 7.0, 9.0, 4.0];
        let st = LatStats::from_samples(&s).unwrap();
        assert_eq!(st.count, 8);
        assert_eq!(st.min, 2.0);
        assert_eq!(st.max, 9.0);
        assert_eq!(st.avg, 5.0);
        assert_eq!(st.typical, 4.5);
        assert!((st.stdev - (32.0f64 / 7.0).sqrt()).abs() < 1e-12);
        assert_eq!(st.p99, 9.0);
        assert_eq!(st.p999, 9.0);
        assert!(LatStats::from_samples(&[]).is_none());
        let one = LatStats::from_samples(&[3.5]).unwrap();
        assert_eq!((one.stdev, one.typical, one.p99), (0.0, 3.5, 3.5));
    }

    #[test]
    fn a_spread_is_the_smallest_lower_median_and_largest() {
        let s = Spread::of([7, 3, 9, 5]).unwrap();
        assert_eq!((s.min, s.median, s.max), (3, 5, 9));
        let s = Spread::of([4]).unwrap();
        assert_eq!((s.min, s.median, s.max), (4, 4, 4));
        assert_eq!(Spread::of([]), None);
    }

    #[test]
    fn bw_meter_average_and_peak() {
        let t0 = Instant::now();
        let mut m = BwMeter::start(t0);
        // 100 ops per 10 ms window for 5 windows, one window at 300.
        let mut ops = 0;
        for (i, per) in [100u64, 100, 300, 100, 100].iter().enumerate() {
            ops += per;
            m.record(t0 + Duration::from_millis(10 * (i as u64 + 1)), ops);
        }
        let r = m.finish(t0 + Duration::from_millis(50), ops, 1000);
        assert_eq!(r.iterations, 700);
        assert!((r.msg_rate - 14_000.0).abs() < 1e-6);
        assert!((r.avg_bps - 14_000_000.0).abs() < 1e-3);
        assert!((r.peak_bps - 30_000_000.0).abs() < 1e-3);
        // A run shorter than a window: peak is the average.
        let m = BwMeter::start(t0);
        let r = m.finish(t0 + Duration::from_millis(2), 10, 100);
        assert!((r.peak_bps - r.avg_bps).abs() < 1e-6);
        assert_eq!(r.clock, Some((t0, t0 + Duration::from_millis(2))));
    }

    #[test]
    fn bw_meter_confirmed_windows() {
        let t0 = Instant::now();
        let ms = |x: u64| t0 + Duration::from_millis(x);
        let mut m = BwMeter::start(t0);
        // 100 ops posted in [0, 10), confirmed at 20: 100 in 20 ms.
        m.confirmed(ms(0), ms(20), 100);
        // 400 ops posted in [10, 25), confirmed at 30: 400 in 20 ms.
        m.confirmed(ms(10), ms(30), 400);
        // Too short to count: 1000 ops in 5 ms.
        m.confirmed(ms(25), ms(30), 1000);
        let r = m.finish(ms(40), 600, 10);
        assert!((r.peak_bps - 20_000.0 * 10.0).abs() < 1e-3, "{r:?}");
        assert!((r.avg_bps - 15_000.0 * 10.0).abs() < 1e-3, "{r:?}");
    }
}
