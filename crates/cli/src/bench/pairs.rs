//! `--pairs N`: an extra measurement beside the headline, never instead of it.
//!
//! The busy-polling TCP stream at 64 KiB swings by up to 25% between rounds on this
//! machine (session 15: 6.7-8.7 GB/s) while softrnic's own rate, measured a few seconds
//! later, does not follow it, so one headline ratio per round mostly reads the
//! baseline's swing; TCP's own 8-octet ping-pong moves as much between runs (session 18:
//! t_typical 5.0-8.1 us). After a size's headline, `--pairs N` runs the busy-polling
//! baseline (same discipline, sockets, sizes and buffers as the headline's) and softrnic
//! in N pairs of short sub-runs, alternating which goes first (..., softrnic, TCP, TCP,
//! softrnic) so that a slow drift of the machine favours neither, and reports each
//! pair's ratio, their median, and the ratio of all sub-runs pooled: bandwidth here,
//! latency ([`lat`]: t_typical, t_avg and the 99%) in the sibling module.

mod counts;
mod lat;

use super::{BenchArgs, BenchConfig, CpuUse, Measured, PairsWith, TcpKind, Test};
pub use counts::run_sizes as run_count_pairs;
pub use lat::{LatPairs, LatStat};
use serde_json::{Value, json};
use std::time::Duration;

/// The baseline the pairs measure against by default (`--pairs-with`): the
/// busy-polling stream (or ping-pong) of the 64 KiB, 1 MiB and latency targets.
pub const KIND: TcpKind = TcpKind::BusyPoll;

/// The fewest measured iterations of a latency sub-run: its 99% then rests on the 10
/// slowest samples rather than on one.
pub const MIN_LAT_SUB_ITERS: u64 = 1000;

/// Refuses `--pairs` and `--pairs-with` where they have nothing to pair with.
pub fn check(test: Test, a: &BenchArgs) -> Result<(), String> {
    if a.pairs == 0 {
        return match a.pairs_with {
            Some(_) => Err("--pairs-with needs --pairs N".into()),
            None => Ok(()),
        };
    }
    if a.qps.len() > 1 {
        if !test.is_bw() {
            return Err("--pairs with several -q counts: bandwidth tests only".into());
        }
        if a.pairs_with.is_some() {
            return Err(
                "--pairs-with: with several -q counts --pairs pairs the first count \
                        with the last (softrnic with softrnic): there is no TCP baseline \
                        to name"
                    .into(),
            );
        }
        return Ok(());
    }
    if a.baseline.is_none() || a.rdma_cm {
        return Err(
            "--pairs needs --baseline tcp, without -R (it pairs softrnic with a TCP \
             baseline), or several -q counts (it then pairs the first with the last)"
                .into(),
        );
    }
    let kind = a.pairs_with.map_or(KIND, PairsWith::kind);
    if !TcpKind::for_test(test, a.events).contains(&kind) {
        return Err(format!(
            "--pairs-with {}: {} has no such TCP baseline{}",
            kind.label(),
            test.name(),
            if a.events { " with -e" } else { "" }
        ));
    }
    Ok(())
}

/// The configuration of one sub-run: a 1/`n` share of the headline's duration, or of its
/// iterations (bandwidth: at least one; latency: at least [`MIN_LAT_SUB_ITERS`], each
/// sub-run after the headline's warm-up, and keeping its samples for the pooled figures).
pub fn sub_config(cfg: &BenchConfig, n: u32) -> BenchConfig {
    let n = n.max(1);
    let least = if cfg.test.is_bw() {
        1
    } else {
        MIN_LAT_SUB_ITERS
    };
    BenchConfig {
        duration: cfg.duration.map(|d| d / n),
        iters: (cfg.iters / u64::from(n)).max(least),
        keep_samples: !cfg.test.is_bw(),
        ..cfg.clone()
    }
}

/// Whether softrnic goes first in pair `i` (0-based) of `n`: the last pair TCP first,
/// the one before it softrnic first, and so on back, so the round's last sub-run is
/// always softrnic's: the one marked last, after which a standalone server ends (with
/// the TCP sub-run after it, an even `n` found the server gone in client mode).
pub fn softrnic_first(i: u32, n: u32) -> bool {
    (n - 1 - i) % 2 == 1
}

/// The pairs of one size.
#[derive(Debug, Clone, PartialEq)]
pub enum Paired {
    /// Bandwidth tests.
    Bw(BwPairs),
    /// Latency tests.
    Lat(LatPairs),
}

impl Paired {
    /// As the JSON field `paired` of softrnic's result.
    pub fn json(&self) -> Value {
        match self {
            Paired::Bw(p) => p.json(),
            Paired::Lat(p) => p.json(),
        }
    }

    /// The line(s) under the row in text mode.
    pub fn text(&self) -> String {
        match self {
            Paired::Bw(p) => p.text(),
            Paired::Lat(p) => p.text(),
        }
    }

    /// How many pairs ran.
    pub fn pairs(&self) -> usize {
        match self {
            Paired::Bw(p) => p.runs.len(),
            Paired::Lat(p) => p.runs.len(),
        }
    }

    /// The latency pairs, if these are.
    pub fn lat(&self) -> Option<&LatPairs> {
        match self {
            Paired::Lat(p) => Some(p),
            Paired::Bw(_) => None,
        }
    }
}

/// The median of `x`'s finite values.
fn median_of(x: impl IntoIterator<Item = f64>) -> Option<f64> {
    let mut r: Vec<f64> = x.into_iter().filter(|x| x.is_finite()).collect();
    r.sort_by(f64::total_cmp);
    super::stats::median(&r)
}

/// The second over the first of each pair (`NaN` where the first is 0).
fn ratios_of(runs: &[(f64, f64)]) -> Vec<f64> {
    runs.iter()
        .map(|&(a, b)| if a > 0.0 { b / a } else { f64::NAN })
        .collect()
}

/// All pairs pooled: the seconds' sum over the firsts'.
fn pooled_of(runs: &[(f64, f64)]) -> Option<f64> {
    let (a, b) = runs.iter().fold((0.0, 0.0), |(a, b), r| (a + r.0, b + r.1));
    (a > 0.0).then(|| b / a)
}

/// How long each sub-run was, for the text line.
fn each(sub_duration: Option<Duration>, sub_iters: u64) -> String {
    match sub_duration {
        Some(d) => format!("{:.2} s", d.as_secs_f64()),
        None => format!("{sub_iters} iterations"),
    }
}

/// The pairs of one size of a bandwidth test: average bandwidth (octets a second) of
/// TCP and softrnic.
#[derive(Debug, Clone, PartialEq)]
pub struct BwPairs {
    /// The TCP discipline paired with.
    pub baseline: TcpKind,
    /// Each sub-run's length (duration, or iterations per QP).
    pub sub_duration: Option<Duration>,
    pub sub_iters: u64,
    /// (TCP, softrnic) average bandwidth of each pair, in the order run.
    pub runs: Vec<(f64, f64)>,
    /// (TCP, softrnic) CPU each sub-run used, beside `runs`: the CPU per GB of both
    /// sides of one pair are taken minutes apart at most, as the bandwidths are.
    pub cpu: Vec<CpuPair>,
    /// How far apart the two CPUs were before each sub-run, beside `runs`.
    pub cpu_round_trip_ns: Vec<RoundTrips>,
}

/// (TCP, softrnic) CPU of one pair's sub-runs, each `None` if not counted.
pub type CpuPair = (Option<CpuUse>, Option<CpuUse>);

impl BwPairs {
    /// softrnic / TCP of each pair.
    pub fn ratios(&self) -> Vec<f64> {
        ratios_of(&self.runs)
    }

    /// The median of the pairs' ratios.
    pub fn median_ratio(&self) -> Option<f64> {
        median_of(self.ratios())
    }

    /// All sub-runs pooled: softrnic's summed bandwidths over TCP's. Each side runs as
    /// often in each position of the alternation, so a rhythm of the machine that makes
    /// every other sub-run slow (e.g. real-time throttling under `chrt`, 50 ms a second)
    /// weighs on both alike.
    pub fn pooled_ratio(&self) -> Option<f64> {
        pooled_of(&self.runs)
    }

    /// softrnic / TCP CPU seconds per GB of each pair (`NaN` where a side was not
    /// counted).
    pub fn cpu_ratios(&self) -> Vec<f64> {
        let per_gb = |u: &Option<CpuUse>| u.as_ref().and_then(CpuUse::per_gb);
        self.cpu
            .iter()
            .map(|(t, s)| match (per_gb(t), per_gb(s)) {
                (Some(t), Some(s)) if t > 0.0 => s / t,
                _ => f64::NAN,
            })
            .collect()
    }

    /// The median of the pairs' CPU-per-GB ratios.
    pub fn cpu_median_ratio(&self) -> Option<f64> {
        median_of(self.cpu_ratios())
    }

    /// All sub-runs pooled: softrnic's CPU seconds over its octets, against TCP's; `None`
    /// unless every sub-run was counted.
    pub fn cpu_pooled_ratio(&self) -> Option<f64> {
        let side = |pick: fn(&CpuPair) -> &Option<CpuUse>| {
            self.cpu
                .iter()
                .map(pick)
                .try_fold((0.0, 0u64), |(t, b), u| {
                    u.as_ref().map(|u| (t + u.seconds(), b + u.bytes))
                })
        };
        let (tt, tb) = side(|p| &p.0)?;
        let (st, sb) = side(|p| &p.1)?;
        (tt > 0.0 && tb > 0 && sb > 0).then(|| (st / sb as f64) / (tt / tb as f64))
    }

    /// As the JSON field `paired` of softrnic's result.
    pub fn json(&self) -> Value {
        let mb = |x: f64| x / (1u64 << 20) as f64;
        let per_gb = |u: &Option<CpuUse>| u.as_ref().and_then(CpuUse::per_gb);
        json!({
            "extra": "not the headline: alternating sub-runs, the last pair TCP first",
            "baseline": self.baseline.name(),
            "sub_seconds": self.sub_duration.map(|d| d.as_secs_f64()),
            "sub_iterations": self.sub_duration.is_none().then_some(self.sub_iters),
            "tcp_bw": self.runs.iter().map(|r| mb(r.0)).collect::<Vec<_>>(),
            "softrnic_bw": self.runs.iter().map(|r| mb(r.1)).collect::<Vec<_>>(),
            "bw_unit": "MB/sec",
            "ratios": self.ratios(),
            "median_ratio": self.median_ratio(),
            "pooled_ratio": self.pooled_ratio(),
            "tcp_cpu_s_per_gb": self.cpu.iter().map(|c| per_gb(&c.0)).collect::<Vec<_>>(),
            "softrnic_cpu_s_per_gb": self.cpu.iter().map(|c| per_gb(&c.1)).collect::<Vec<_>>(),
            "cpu_ratios": self.cpu_ratios(),
            "cpu_median_ratio": self.cpu_median_ratio(),
            "cpu_pooled_ratio": self.cpu_pooled_ratio(),
            "cpu_round_trip_ns": round_trips_json(&self.cpu_round_trip_ns),
        })
    }

    /// The line under the row in text mode.
    pub fn text(&self) -> String {
        let each = each(self.sub_duration, self.sub_iters);
        let ratios: Vec<String> = self.ratios().iter().map(|x| format!("{x:.2}")).collect();
        let show = |x: Option<f64>| x.map_or_else(|| "-".to_string(), |m| format!("{m:.2}"));
        let (median, pooled) = (show(self.median_ratio()), show(self.pooled_ratio()));
        let mut line = format!(
            "paired (extra, not the headline): softrnic/{} TCP in {} alternating sub-runs of \
             {each}: {}; median {median}, pooled {pooled}",
            self.baseline.label(),
            self.runs.len(),
            ratios.join(" ")
        );
        if let Some(m) = self.cpu_median_ratio() {
            let scope = self.cpu.iter().find_map(|c| c.1).map(|u| {
                if u.both_sides {
                    "both sides"
                } else {
                    "this side"
                }
            });
            let cpu: Vec<String> = self
                .cpu_ratios()
                .iter()
                .map(|x| format!("{x:.2}"))
                .collect();
            line += &format!(
                "\n  paired CPU per GB ({}): {}; median {m:.2}, pooled {}",
                scope.unwrap_or("-"),
                cpu.join(" "),
                show(self.cpu_pooled_ratio())
            );
        }
        if let Some(t) = round_trips_text(&self.cpu_round_trip_ns) {
            line += "\n";
            line += &t;
        }
        line
    }
}

/// Runs `n` pairs of sub-runs with `sub`: `tcp` runs the baseline, `softrnic(last)` the
/// RDMA side (`last`: its final sub-run of the size).
#[cfg(test)]
pub fn run(
    sub: &BenchConfig,
    n: u32,
    tcp: impl FnMut(&BenchConfig) -> Result<Measured, String>,
    softrnic: impl FnMut(&BenchConfig, bool) -> Result<Measured, String>,
) -> Result<Paired, String> {
    run_placed(sub, n, || None, tcp, softrnic)
}

/// Runs `n` pairs of sub-runs with `sub` as `run` does (`tcp` the baseline,
/// `softrnic(last)` the RDMA side), with `distance` asked just before each sub-run how
/// far apart the host has put the run's two CPUs (a cache line's round trip, ns:
/// [`super::cpu_distance`]; `None` where not measured).
pub fn run_placed(
    sub: &BenchConfig,
    n: u32,
    distance: impl Fn() -> Option<f64>,
    mut tcp: impl FnMut(&BenchConfig) -> Result<Measured, String>,
    mut softrnic: impl FnMut(&BenchConfig, bool) -> Result<Measured, String>,
) -> Result<Paired, String> {
    let runs = alternate(
        n,
        || {
            let d = distance();
            tcp(sub).map(|m| (m, d))
        },
        |last| {
            let d = distance();
            softrnic(sub, last).map(|m| (m, d))
        },
    )?;
    let round_trips: Vec<RoundTrips> = runs.iter().map(|(t, s)| (t.1, s.1)).collect();
    let runs = runs.into_iter().map(|(t, s)| (t.0, s.0));
    if !sub.test.is_bw() {
        let lat = |m: Measured| -> Result<_, String> {
            match m {
                Measured::Lat(l) => Ok(l),
                Measured::Bw(_) => Err("--pairs: a bandwidth result in a latency test".into()),
            }
        };
        let runs = runs
            .map(|(t, s)| Ok((lat(t)?, lat(s)?)))
            .collect::<Result<Vec<_>, String>>()?;
        let mut p = LatPairs::new(sub, runs)?;
        p.cpu_round_trip_ns = round_trips;
        return Ok(Paired::Lat(p));
    }
    let runs = runs
        .map(|(t, s)| {
            let (t, s) = (bw_of(t)?, bw_of(s)?);
            Ok(((t.avg_bps, t.cpu), (s.avg_bps, s.cpu)))
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Paired::Bw(BwPairs {
        baseline: sub.pairs_with,
        sub_duration: sub.duration,
        sub_iters: sub.iters,
        runs: runs.iter().map(|(t, s)| (t.0, s.0)).collect(),
        cpu: runs.iter().map(|(t, s)| (t.1, s.1)).collect(),
        cpu_round_trip_ns: round_trips,
    }))
}

/// (TCP, softrnic): the CPUs' round trip measured just before each sub-run of a pair,
/// nanoseconds (`None`: not measured).
pub type RoundTrips = (Option<f64>, Option<f64>);

/// The round trips as JSON (`null` where not measured).
fn round_trips_json(r: &[RoundTrips]) -> Value {
    json!(r.iter().map(|(t, s)| [t, s]).collect::<Vec<_>>())
}

/// The text line of the round trips, if any was measured.
fn round_trips_text(r: &[RoundTrips]) -> Option<String> {
    if r.iter().all(|(t, s)| t.is_none() && s.is_none()) {
        return None;
    }
    let ns = |x: &Option<f64>| x.map_or_else(|| "-".to_string(), |v| format!("{v:.0}"));
    let each: Vec<String> = r
        .iter()
        .map(|(t, s)| format!("{}/{}", ns(t), ns(s)))
        .collect();
    Some(format!(
        "  CPUs' cache-line round trip before each pair's sub-runs (ns, TCP/softrnic): {}",
        each.join(" ")
    ))
}

/// A bandwidth sub-run's result.
fn bw_of(m: Measured) -> Result<super::BwResult, String> {
    match m {
        Measured::Bw(b) => Ok(b),
        Measured::Lat(_) => Err("--pairs: a latency result in a bandwidth test".into()),
    }
}

/// The alternation itself: `n` pairs (`first`, `second`) in the order run: the last
/// pair `first` first, the one before it `second` first, and so on back (see
/// [`softrnic_first`]); `second(last)` is told its final sub-run, the round's last.
fn alternate<T>(
    n: u32,
    mut first: impl FnMut() -> Result<T, String>,
    mut second: impl FnMut(bool) -> Result<T, String>,
) -> Result<Vec<(T, T)>, String> {
    let mut runs = Vec::with_capacity(n as usize);
    for i in 0..n {
        let last = i + 1 == n;
        let pair = if softrnic_first(i, n) {
            let s = second(last)?;
            (first()?, s)
        } else {
            let t = first()?;
            (t, second(last)?)
        };
        runs.push(pair);
    }
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::{BenchCommand, BwResult};
    use std::cell::RefCell;

    fn cfg(argv: &[&str]) -> Result<BenchConfig, String> {
        BenchCommand::parse_from(argv.iter().copied())
            .map_err(|e| e.to_string())?
            .config()
    }

    fn bw(avg_bps: f64) -> Measured {
        bw_cpu(avg_bps, None)
    }

    /// A bandwidth result of 1 GB that took `cpu_ms` of CPU, if counted.
    fn bw_cpu(avg_bps: f64, cpu_ms: Option<u64>) -> Measured {
        let cpu = cpu_ms.map(|ms| CpuUse {
            time: softrnic_rnic::usage::CpuTime {
                user: Duration::from_millis(ms),
                system: Duration::ZERO,
            },
            messages: 1,
            bytes: 1_000_000_000,
            both_sides: true,
        });
        Measured::Bw(BwResult {
            bytes: 65536,
            iterations: 1,
            elapsed: Duration::from_secs(1),
            clock: None,
            peak_bps: avg_bps,
            avg_bps,
            msg_rate: 0.0,
            cpu,
            per_qp: None,
            calls: None,
        })
    }

    /// Each pair's CPU per GB is softrnic's over the TCP sub-run of its own pair; the
    /// pooled figure is each side's CPU seconds over its octets; a sub-run that was not
    /// counted leaves its pair out of the median and the pooled figure out.
    #[test]
    fn pairs_compare_cpu_per_gb_within_each_pair() {
        let c = cfg(&[
            "write_bw",
            "--loopback",
            "--baseline",
            "tcp",
            "--pairs",
            "3",
        ])
        .unwrap();
        let tcp_cpu = RefCell::new([100, 200, 400].into_iter());
        let soft_cpu = RefCell::new([150, 200, 200].into_iter());
        let p = match run(
            &c,
            3,
            |_| Ok(bw_cpu(1.0, Some(tcp_cpu.borrow_mut().next().unwrap()))),
            |_, _| Ok(bw_cpu(1.0, Some(soft_cpu.borrow_mut().next().unwrap()))),
        ) {
            Ok(Paired::Bw(p)) => p,
            other => panic!("{other:?}"),
        };
        let near = |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(a, b)| (a - b).abs() < 1e-12);
        assert!(
            near(&p.cpu_ratios(), &[1.5, 1.0, 0.5]),
            "{:?}",
            p.cpu_ratios()
        );
        assert!(near(&[p.cpu_median_ratio().unwrap()], &[1.0]));
        // Pooled: (150 + 200 + 200) / (100 + 200 + 400) ms over 3 GB each.
        assert!((p.cpu_pooled_ratio().unwrap() - 550.0 / 700.0).abs() < 1e-12);
        assert!(
            p.text().contains(
                "paired CPU per GB (both sides): 1.50 1.00 0.50; median 1.00, pooled 0.79"
            ),
            "{}",
            p.text()
        );
        assert_eq!(p.json()["cpu_ratios"], json!(p.cpu_ratios()));
        assert!(near(
            &[p.json()["tcp_cpu_s_per_gb"][2].as_f64().unwrap()],
            &[0.4]
        ));

        let uncounted = RefCell::new([Some(100), None].into_iter());
        let p = match run(
            &c,
            2,
            |_| Ok(bw_cpu(1.0, uncounted.borrow_mut().next().unwrap())),
            |_, _| Ok(bw_cpu(1.0, Some(300))),
        ) {
            Ok(Paired::Bw(p)) => p,
            other => panic!("{other:?}"),
        };
        assert!(p.cpu_ratios()[1].is_nan());
        assert!(near(&[p.cpu_median_ratio().unwrap()], &[3.0]));
        assert_eq!(p.cpu_pooled_ratio(), None);
    }

    /// The pairs alternate which side goes first, the softrnic side is told its last
    /// sub-run, and each ratio is softrnic over the TCP run of its own pair.
    #[test]
    fn pairs_alternate_and_take_the_median_of_their_own_ratios() {
        let c = cfg(&[
            "write_bw",
            "--loopback",
            "--baseline",
            "tcp",
            "-D",
            "2",
            "--pairs",
            "4",
        ])
        .unwrap();
        assert_eq!(c.pairs, 4);
        let sub = sub_config(&c, c.pairs);
        assert_eq!(sub.duration, Some(Duration::from_millis(500)));
        let order = RefCell::new(Vec::new());
        let tcp_bw = RefCell::new([100.0, 200.0, 100.0, 50.0].into_iter());
        let soft_bw = RefCell::new([90.0, 220.0, 130.0, 50.0].into_iter());
        let p = match run(
            &sub,
            c.pairs,
            |s| {
                assert_eq!(s.duration, sub.duration);
                order.borrow_mut().push("tcp");
                Ok(bw(tcp_bw.borrow_mut().next().unwrap()))
            },
            |_, last| {
                order
                    .borrow_mut()
                    .push(if last { "softrnic last" } else { "softrnic" });
                Ok(bw(soft_bw.borrow_mut().next().unwrap()))
            },
        ) {
            Ok(Paired::Bw(p)) => p,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            order.into_inner(),
            [
                "softrnic",
                "tcp",
                "tcp",
                "softrnic",
                "softrnic",
                "tcp",
                "tcp",
                "softrnic last"
            ]
        );
        assert_eq!(
            p.runs,
            [(100.0, 90.0), (200.0, 220.0), (100.0, 130.0), (50.0, 50.0)]
        );
        assert_eq!(p.ratios(), [0.9, 1.1, 1.3, 1.0]);
        // Median of 0.9, 1.0, 1.1, 1.3.
        assert!((p.median_ratio().unwrap() - 1.05).abs() < 1e-12);
        // Pooled: (90 + 220 + 130 + 50) / (100 + 200 + 100 + 50).
        assert!((p.pooled_ratio().unwrap() - 490.0 / 450.0).abs() < 1e-12);
        assert!(
            p.text()
                .contains("0.90 1.10 1.30 1.00; median 1.05, pooled 1.09")
        );
        assert_eq!(p.json()["median_ratio"], json!(p.median_ratio().unwrap()));
    }

    /// The CPUs' distance is asked just before each sub-run and kept beside the sub-run
    /// it preceded, in the pair's (TCP, softrnic) order whichever ran first; a
    /// distance not measured is `null`, and a run that measured none prints no line.
    #[test]
    fn each_sub_run_keeps_the_cpu_distance_measured_before_it() {
        let c = cfg(&[
            "write_bw",
            "--loopback",
            "--baseline",
            "tcp",
            "--pairs",
            "2",
        ])
        .unwrap();
        let sub = sub_config(&c, c.pairs);
        let next = RefCell::new(0u32);
        let taken = RefCell::new(Vec::new());
        // Each sub-run reports the distance taken just before it, so a mix-up between
        // the distance and its sub-run shows.
        let distance = || {
            let mut n = next.borrow_mut();
            *n += 1;
            (*n != 3).then_some(f64::from(*n) * 100.0)
        };
        let p = match run_placed(
            &sub,
            c.pairs,
            distance,
            |_| {
                taken.borrow_mut().push(("tcp", *next.borrow()));
                Ok(bw(100.0))
            },
            |_, _| {
                taken.borrow_mut().push(("softrnic", *next.borrow()));
                Ok(bw(100.0))
            },
        ) {
            Ok(Paired::Bw(p)) => p,
            other => panic!("{other:?}"),
        };
        // Order run: softrnic, TCP, TCP, softrnic; distances 100, 200, (none), 400.
        assert_eq!(
            taken.into_inner(),
            [("softrnic", 1), ("tcp", 2), ("tcp", 3), ("softrnic", 4)]
        );
        assert_eq!(
            p.cpu_round_trip_ns,
            [(Some(200.0), Some(100.0)), (None, Some(400.0))]
        );
        assert_eq!(
            p.json()["cpu_round_trip_ns"],
            json!([[200.0, 100.0], [null, 400.0]])
        );
        let t = p.text();
        assert!(
            t.contains("round trip before each pair's sub-runs (ns, TCP/softrnic): 200/100 -/400"),
            "{t}"
        );
        // Unmeasured (a remote peer, or the probe's deadline each time): no line.
        let p = match run(&sub, c.pairs, |_| Ok(bw(100.0)), |_, _| Ok(bw(100.0))) {
            Ok(Paired::Bw(p)) => p,
            other => panic!("{other:?}"),
        };
        assert_eq!(p.cpu_round_trip_ns, [(None, None), (None, None)]);
        assert!(!p.text().contains("round trip"), "{}", p.text());
    }

    /// For any number of pairs the order alternates and softrnic's sub-run marked last
    /// is the round's last run: a standalone server ends after it, so a TCP sub-run
    /// after it would find no server (as with 2 pairs before, in client mode).
    #[test]
    fn the_last_sub_run_is_softrnics_marked_last() {
        let c = cfg(&["write_bw", "--loopback", "--baseline", "tcp", "-n", "9"]).unwrap();
        for n in 1..=7 {
            let order = RefCell::new(Vec::new());
            let p = run(
                &c,
                n,
                |_| {
                    order.borrow_mut().push(("tcp", false));
                    Ok(bw(1.0))
                },
                |_, last| {
                    order.borrow_mut().push(("softrnic", last));
                    Ok(bw(1.0))
                },
            )
            .unwrap();
            assert_eq!(p.pairs(), n as usize);
            let order = order.into_inner();
            assert_eq!(order.last(), Some(&("softrnic", true)), "n = {n}");
            assert_eq!(order.iter().filter(|o| o.1).count(), 1, "n = {n}");
            // Each pair's first is the previous pair's second.
            for w in order.chunks(2).collect::<Vec<_>>().windows(2) {
                assert_eq!(w[0][1].0, w[1][0].0, "n = {n}: {order:?}");
            }
        }
    }

    /// Without a duration each sub-run takes a share of the iterations, at least one.
    #[test]
    fn a_sub_run_takes_a_share_of_the_iterations() {
        let c = cfg(&[
            "send_bw",
            "--loopback",
            "--baseline",
            "tcp",
            "-n",
            "10",
            "--pairs",
            "3",
        ])
        .unwrap();
        assert_eq!(sub_config(&c, 3).iters, 3);
        assert_eq!(sub_config(&c, 30).iters, 1);
        assert_eq!(sub_config(&c, 3).duration, None);
    }

    /// `--pairs-with batching` pairs with the batching stream: the TCP sub-runs are run
    /// in that discipline, and the pairs, their JSON and the summary name it.
    #[test]
    fn pairs_with_batching_runs_and_names_the_batching_stream() {
        let c = cfg(&[
            "write_bw",
            "--loopback",
            "--baseline",
            "tcp",
            "-s",
            "64",
            "--pairs",
            "2",
            "--pairs-with",
            "batching",
        ])
        .unwrap();
        assert_eq!(c.pairs_with, TcpKind::Batching);
        let sub = sub_config(&c, c.pairs);
        let mut tcp_bw = [400.0, 200.0].into_iter();
        let p = match run(
            &sub,
            2,
            |s| {
                assert_eq!(s.pairs_with, TcpKind::Batching);
                Ok(bw(tcp_bw.next().unwrap()))
            },
            |_, _| Ok(bw(200.0)),
        ) {
            Ok(Paired::Bw(p)) => p,
            other => panic!("{other:?}"),
        };
        assert_eq!(p.baseline, TcpKind::Batching);
        assert_eq!(p.ratios(), [0.5, 1.0]);
        assert_eq!(p.json()["baseline"], json!("batching"));
        assert!(
            p.text().contains("softrnic/batching TCP in 2 alternating"),
            "{}",
            p.text()
        );
        let mut row = crate::bench::ResultRow::new(c.test, 64, bw(1.0), Vec::new());
        row.paired = Some(Paired::Bw(p));
        let mut out = Vec::new();
        crate::bench::report::Reporter::new(&mut out, &c, String::new())
            .summary(&[row])
            .unwrap();
        let out = String::from_utf8(out).unwrap();
        assert!(
            out.contains("paired softrnic/batching TCP from --pairs 2"),
            "{out}"
        );
        // Median of 0.5 and 1.0; pooled 400 / 600.
        assert!(
            out.contains("       64 B           0.75           0.67"),
            "{out}"
        );
        // Without the flag: the busy-polling stream, as before.
        let c = cfg(&[
            "write_bw",
            "--loopback",
            "--baseline",
            "tcp",
            "--pairs",
            "2",
        ])
        .unwrap();
        assert_eq!(c.pairs_with, TcpKind::BusyPoll);
    }

    /// `--pairs-with` and `--pairs` with several -q counts are refused where they have
    /// nothing to pair with; allowed where they have.
    #[test]
    fn pairs_with_and_count_pairs_are_refused_where_nothing_pairs() {
        for (argv, why) in [
            (
                &[
                    "write_bw",
                    "--loopback",
                    "--baseline",
                    "tcp",
                    "--pairs-with",
                    "batching",
                ][..],
                "--pairs-with needs --pairs",
            ),
            (
                &[
                    "write_bw",
                    "--loopback",
                    "-q",
                    "1,256",
                    "--baseline",
                    "tcp",
                    "--pairs",
                    "2",
                    "--pairs-with",
                    "batching",
                ],
                "no TCP baseline to name",
            ),
            (
                &["send_lat", "--loopback", "-q", "1,1", "--pairs", "2"],
                "bandwidth tests only",
            ),
            (
                &[
                    "send_lat",
                    "--loopback",
                    "--baseline",
                    "tcp",
                    "--pairs",
                    "2",
                    "--pairs-with",
                    "batching",
                ],
                "send_lat has no such TCP baseline",
            ),
            (
                &[
                    "read_bw",
                    "--loopback",
                    "--baseline",
                    "tcp",
                    "-e",
                    "--pairs",
                    "2",
                    "--pairs-with",
                    "busy-poll",
                ],
                "read_bw has no such TCP baseline with -e",
            ),
            (
                &[
                    "write_bw",
                    "--loopback",
                    "--pairs",
                    "2",
                    "--pairs-with",
                    "batching",
                ],
                "--pairs needs --baseline tcp",
            ),
        ] {
            let e = cfg(argv).unwrap_err();
            assert!(e.contains(why), "{argv:?}: {e}");
        }
        let ok = |argv: &[&str]| cfg(argv).unwrap();
        assert!(ok(&["write_bw", "--loopback", "-q", "1,256", "--pairs", "2"]).count_pairs());
        assert!(!ok(&["write_bw", "--loopback", "-q", "1,256"]).count_pairs());
        let c = ok(&[
            "read_bw",
            "--loopback",
            "--baseline",
            "tcp",
            "-e",
            "--pairs",
            "2",
            "--pairs-with",
            "blocking",
        ]);
        assert_eq!((c.pairs_with, c.count_pairs()), (TcpKind::Blocking, false));
    }

    /// `--pairs` needs the busy-polling baseline: refused without a baseline, and with
    /// -e (whose baselines do not spin) or -R (perftest's exchange, no TCP baseline);
    /// bandwidth and latency tests alike.
    #[test]
    fn pairs_are_refused_without_a_busy_polling_baseline() {
        for argv in [
            &["write_bw", "--loopback", "--pairs", "2"][..],
            &["send_lat", "--loopback", "--pairs", "2"],
            &["read_lat", "--loopback", "--pairs", "2"],
            &[
                "read_bw",
                "--loopback",
                "--baseline",
                "tcp",
                "-e",
                "--pairs",
                "2",
            ],
            &[
                "send_lat",
                "--loopback",
                "--baseline",
                "tcp",
                "-e",
                "--pairs",
                "2",
            ],
            &[
                "write_lat",
                "127.0.0.1",
                "-R",
                "--baseline",
                "tcp",
                "--pairs",
                "2",
            ],
        ] {
            let e = cfg(argv).unwrap_err();
            assert!(e.contains("--pairs"), "{argv:?}: {e}");
        }
        for t in ["read_bw", "write_lat", "send_lat", "read_lat"] {
            assert!(
                cfg(&[t, "--loopback", "--baseline", "tcp", "--pairs", "2"]).is_ok(),
                "{t}"
            );
        }
    }
}
