//! `--pairs N` for the latency tests: each pair compares t_typical, t_avg and the 99% of
//! a busy-polling TCP ping-pong sub-run and a softrnic one, run back to back, so that
//! the machine's drift between the headline's TCP run and its softrnic run (larger here
//! than the 5% issue 12's t_typical target allows) cancels within a pair.
//!
//! Two summaries of the pairs: the median of their ratios (one slow sub-run moves it
//! little), and the pooled ratio: all of one side's sub-run samples merged into one
//! distribution, its figure over the other side's (the tail of ten short sub-runs
//! together is as long as the headline's).

use super::{each, median_of};
use crate::bench::TcpKind;
use crate::bench::{BenchConfig, LatResult, LatStats};
use serde_json::{Map, Value, json};
use std::time::Duration;

/// A figure the latency pairs compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LatStat {
    /// The median (perftest's t_typical).
    Typical,
    /// The mean.
    Avg,
    /// The 99th percentile (nearest rank).
    P99,
}

impl LatStat {
    /// Every figure compared, in the order shown.
    pub const ALL: [LatStat; 3] = [LatStat::Typical, LatStat::Avg, LatStat::P99];

    /// This figure of `s`.
    pub fn of(self, s: &LatStats) -> f64 {
        match self {
            LatStat::Typical => s.typical,
            LatStat::Avg => s.avg,
            LatStat::P99 => s.p99,
        }
    }

    /// Its key in JSON (as in `lat_ratios_vs_tcp`).
    pub fn key(self) -> &'static str {
        match self {
            LatStat::Typical => "t_typical",
            LatStat::Avg => "t_avg",
            LatStat::P99 => "p99",
        }
    }

    /// Its label in text (as in the summary table's columns).
    pub fn label(self) -> &'static str {
        match self {
            LatStat::Typical => "t_typical",
            LatStat::Avg => "t_avg",
            LatStat::P99 => "99%",
        }
    }
}

/// The pairs of one size of a latency test.
#[derive(Debug, Clone, PartialEq)]
pub struct LatPairs {
    /// The TCP discipline paired with.
    pub baseline: TcpKind,
    /// Each sub-run's length (duration, or measured iterations), and its warm-up.
    pub sub_duration: Option<Duration>,
    pub sub_iters: u64,
    pub warmup: u64,
    /// (TCP, softrnic) figures of each pair, in the order run.
    pub runs: Vec<(LatStats, LatStats)>,
    /// (TCP, softrnic): each side's sub-run samples merged into one distribution.
    pub pooled: (LatStats, LatStats),
    /// How far apart the two CPUs were before each sub-run, beside `runs`.
    pub cpu_round_trip_ns: Vec<super::RoundTrips>,
}

impl LatPairs {
    /// The pairs of `runs` (TCP, softrnic), run with `sub`; each sub-run must have kept
    /// its samples (`sub.keep_samples`).
    pub fn new(sub: &BenchConfig, runs: Vec<(LatResult, LatResult)>) -> Result<LatPairs, String> {
        let pool = |side: fn(&(LatResult, LatResult)) -> &LatResult| {
            let mut all = Vec::new();
            for r in &runs {
                let s = side(r).samples.as_deref();
                all.extend_from_slice(s.ok_or("--pairs: a sub-run kept no samples")?);
            }
            LatStats::from_samples(&all).ok_or_else(|| "--pairs: no samples".to_string())
        };
        let pooled = (pool(|r| &r.0)?, pool(|r| &r.1)?);
        Ok(LatPairs {
            baseline: sub.pairs_with,
            sub_duration: sub.duration,
            sub_iters: sub.iters,
            warmup: sub.warmup,
            runs: runs.iter().map(|(t, s)| (t.stats, s.stats)).collect(),
            pooled,
            cpu_round_trip_ns: vec![(None, None); runs.len()],
        })
    }

    /// softrnic / TCP of `stat` in each pair (below 1: softrnic faster).
    pub fn ratios(&self, stat: LatStat) -> Vec<f64> {
        self.runs
            .iter()
            .map(|(t, s)| ratio(stat.of(s), stat.of(t)).unwrap_or(f64::NAN))
            .collect()
    }

    /// The median of the pairs' ratios of `stat`.
    pub fn median_ratio(&self, stat: LatStat) -> Option<f64> {
        median_of(self.ratios(stat))
    }

    /// softrnic's pooled `stat` over TCP's.
    pub fn pooled_ratio(&self, stat: LatStat) -> Option<f64> {
        ratio(stat.of(&self.pooled.1), stat.of(&self.pooled.0))
    }

    /// As the JSON field `paired` of softrnic's result.
    pub fn json(&self) -> Value {
        let by_stat = |f: &dyn Fn(LatStat) -> Value| -> Value {
            Value::Object(
                LatStat::ALL
                    .iter()
                    .map(|&k| (k.key().to_string(), f(k)))
                    .collect::<Map<_, _>>(),
            )
        };
        let figures = |s: &LatStats| {
            json!({
                "iterations": s.count,
                "t_typical_usec": s.typical,
                "t_avg_usec": s.avg,
                "p99_usec": s.p99,
            })
        };
        json!({
            "extra": "not the headline: alternating sub-runs, the last pair TCP first",
            "baseline": self.baseline.name(),
            "sub_seconds": self.sub_duration.map(|d| d.as_secs_f64()),
            "sub_iterations": self.sub_duration.is_none().then_some(self.sub_iters),
            "warmup_per_sub_run": self.warmup,
            "tcp": self.runs.iter().map(|r| figures(&r.0)).collect::<Vec<_>>(),
            "softrnic": self.runs.iter().map(|r| figures(&r.1)).collect::<Vec<_>>(),
            "ratios": by_stat(&|k| json!(self.ratios(k))),
            "median_ratio": by_stat(&|k| json!(self.median_ratio(k))),
            "pooled_ratio": by_stat(&|k| json!(self.pooled_ratio(k))),
            "pooled": {"tcp": figures(&self.pooled.0), "softrnic": figures(&self.pooled.1)},
            "cpu_round_trip_ns": super::round_trips_json(&self.cpu_round_trip_ns),
        })
    }

    /// The lines under the row in text mode: a heading, then one line per figure.
    pub fn text(&self) -> String {
        let show = |x: Option<f64>| x.map_or_else(|| "-".to_string(), |m| format!("{m:.2}"));
        let mut t = format!(
            "paired (extra, not the headline): softrnic/{} TCP in {} alternating sub-runs of \
             {} (after {} warm-up iterations each):",
            self.baseline.label(),
            self.runs.len(),
            each(self.sub_duration, self.sub_iters),
            self.warmup
        );
        for k in LatStat::ALL {
            let r: Vec<String> = self.ratios(k).iter().map(|x| format!("{x:.2}")).collect();
            t += &format!(
                "\n     {:<9} {}; median {}, pooled {}",
                k.label(),
                r.join(" "),
                show(self.median_ratio(k)),
                show(self.pooled_ratio(k))
            );
        }
        if let Some(r) = super::round_trips_text(&self.cpu_round_trip_ns) {
            t += "\n   ";
            t += &r;
        }
        t
    }
}

/// `a / b`, for a positive `b`.
fn ratio(a: f64, b: f64) -> Option<f64> {
    (b > 0.0).then(|| a / b)
}

#[cfg(test)]
mod tests {
    use super::super::{Paired, run, sub_config};
    use super::*;
    use crate::bench::{BenchCommand, Measured};
    use std::cell::RefCell;
    use std::sync::Arc;

    fn cfg(argv: &[&str]) -> BenchConfig {
        BenchCommand::parse_from(argv.iter().copied())
            .unwrap()
            .config()
            .unwrap()
    }

    fn lat(samples: &[f64], keep: bool) -> Measured {
        Measured::Lat(LatResult::of_samples(8, samples.to_vec(), keep).unwrap())
    }

    /// A sub-run takes a 1/N share of the iterations, at least [`MIN_LAT_SUB_ITERS`],
    /// is warmed as the headline is, and keeps its samples; with -D, a 1/N share of it.
    #[test]
    fn a_latency_sub_run_takes_a_share_with_a_floor_and_its_warm_up() {
        let base = [
            "send_lat",
            "--loopback",
            "--baseline",
            "tcp",
            "--pairs",
            "10",
        ];
        let c = cfg(&[&base[..], &["-n", "100000", "--warmup", "300"]].concat());
        let sub = sub_config(&c, c.pairs);
        assert_eq!((sub.iters, sub.warmup, sub.duration), (10_000, 300, None));
        assert!(sub.keep_samples && !c.keep_samples);
        let c = cfg(&[&base[..], &["-n", "5000"]].concat());
        assert_eq!(
            sub_config(&c, c.pairs).iters,
            super::super::MIN_LAT_SUB_ITERS
        );
        let c = cfg(&[&base[..], &["-D", "2"]].concat());
        assert_eq!(
            sub_config(&c, c.pairs).duration,
            Some(Duration::from_millis(200))
        );
    }

    /// The latency pairs alternate as the bandwidth ones do, compare each pair's own
    /// sub-runs figure by figure, and pool by merging the samples (the pooled median is
    /// not a mean of the sub-runs' medians).
    #[test]
    fn latency_pairs_alternate_and_pool_the_samples() {
        let c = cfg(&[
            "write_lat",
            "--loopback",
            "--baseline",
            "tcp",
            "--pairs",
            "2",
        ]);
        let sub = sub_config(&c, c.pairs);
        let order = RefCell::new(Vec::new());
        let tcp = RefCell::new([[2.0, 2.0, 2.0, 10.0], [4.0, 4.0, 4.0, 4.0]].into_iter());
        let soft = RefCell::new([[3.0, 3.0, 3.0, 3.0], [4.0, 4.0, 4.0, 20.0]].into_iter());
        let p = match run(
            &sub,
            c.pairs,
            |s| {
                assert!(s.keep_samples);
                order.borrow_mut().push("tcp");
                Ok(lat(&tcp.borrow_mut().next().unwrap(), true))
            },
            |_, last| {
                order
                    .borrow_mut()
                    .push(if last { "softrnic last" } else { "softrnic" });
                Ok(lat(&soft.borrow_mut().next().unwrap(), true))
            },
        ) {
            Ok(Paired::Lat(p)) => p,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            order.into_inner(),
            ["softrnic", "tcp", "tcp", "softrnic last"]
        );
        assert_eq!(p.ratios(LatStat::Typical), [1.5, 1.0]);
        assert_eq!(p.ratios(LatStat::Avg), [0.75, 2.0]);
        assert_eq!(p.ratios(LatStat::P99), [0.3, 5.0]);
        assert_eq!(p.median_ratio(LatStat::Typical), Some(1.25));
        assert_eq!(p.median_ratio(LatStat::Avg), Some(1.375));
        assert!((p.median_ratio(LatStat::P99).unwrap() - 2.65).abs() < 1e-12);
        // TCP pooled: 2 2 2 4 4 4 4 10 (median 4, mean 4, 99% 10); softrnic: 3 3 3 3 4 4
        // 4 20 (median 3.5, mean 5.5, 99% 20).
        assert_eq!((p.pooled.0.count, p.pooled.1.count), (8, 8));
        assert_eq!(p.pooled_ratio(LatStat::Typical), Some(0.875));
        assert_eq!(p.pooled_ratio(LatStat::Avg), Some(1.375));
        assert_eq!(p.pooled_ratio(LatStat::P99), Some(2.0));
        let t = p.text();
        assert!(
            t.contains("t_typical 1.50 1.00; median 1.25, pooled 0.88"),
            "{t}"
        );
        assert!(
            t.contains("99%       0.30 5.00; median 2.65, pooled 2.00"),
            "{t}"
        );
        let j = p.json();
        assert_eq!(j["median_ratio"]["t_avg"], json!(1.375));
        assert_eq!(j["pooled_ratio"]["t_typical"], json!(0.875));
        assert_eq!(j["ratios"]["p99"], json!([0.3, 5.0]));
        assert_eq!(j["tcp"][0]["p99_usec"], json!(10.0));
        assert_eq!(j["softrnic"][1]["t_avg_usec"], json!(8.0));
        assert_eq!(j["pooled"]["softrnic"]["t_typical_usec"], json!(3.5));
        assert_eq!(j["cpu_round_trip_ns"], json!([[null, null], [null, null]]));
        // With the CPUs' distance measured, the latency pairs keep it the same way.
        let at = RefCell::new([70.0, 71.0, 340.0, 72.0].into_iter());
        let p = match super::super::run_placed(
            &sub,
            c.pairs,
            || at.borrow_mut().next(),
            |_| Ok(lat(&[2.0, 2.0], true)),
            |_, _| Ok(lat(&[2.0, 2.0], true)),
        ) {
            Ok(Paired::Lat(p)) => p,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            p.cpu_round_trip_ns,
            [(Some(71.0), Some(70.0)), (Some(340.0), Some(72.0))]
        );
        assert!(
            p.text().contains("(ns, TCP/softrnic): 71/70 340/72"),
            "{}",
            p.text()
        );
        assert_eq!(j["sub_iterations"], json!(sub.iters));
    }

    /// A sub-run that kept no samples cannot be pooled: an error, not a made-up figure.
    #[test]
    fn pooling_needs_every_sub_runs_samples() {
        let c = cfg(&[
            "send_lat",
            "--loopback",
            "--baseline",
            "tcp",
            "--pairs",
            "1",
        ]);
        let one = |keep| match lat(&[1.0, 2.0], keep) {
            Measured::Lat(l) => l,
            Measured::Bw(_) => unreachable!(),
        };
        let e = LatPairs::new(&c, vec![(one(true), one(false))]).unwrap_err();
        assert!(e.contains("kept no samples"), "{e}");
        let p = LatPairs::new(&c, vec![(one(true), one(true))]).unwrap();
        assert_eq!(p.pooled_ratio(LatStat::Typical), Some(1.0));
        assert_eq!(
            one(true).samples,
            Some(Arc::new(vec![1.0, 2.0])),
            "kept in the order taken"
        );
    }
}
