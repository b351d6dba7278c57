//! `--pairs N` with several `-q` counts: softrnic's first count against its last, in
//! alternating sub-runs, for the many-QP target (256 QPs at least 0.9 of one QP).
//!
//! Each count's headline runs seconds apart from the other's, and this machine's host
//! changes state for seconds at a time (1 MiB at one QP: 6.5-7.2 GB/s in some runs,
//! 1.7-3.0 in others), so one headline ratio mostly says which state each half met.
//! Short sub-runs of the two counts, alternated as the TCP pairs are, meet the same
//! states alike. Every sub-run is an ordinary round: its QPs are connected before its
//! clock starts and disconnected after it stops, as the headline's are (the server
//! serves one round of QPs at a time, so two sets cannot stay connected side by side).
//!
//! A write_bw round ends by draining what its QPs have posted, and the drain is in the
//! measured time: at the default tx depth, 256 QPs of 1 MiB hold 32 GiB posted, seconds
//! of drain, where one QP holds 128 MiB. Both counts still run at the run's own tx depth
//! and cq-mod, as their headlines do, so a 256-QP sub-run lasts its share plus its drain.
//! Scaling the larger count's depth down to the same octets outstanding (tried first)
//! measured the depth instead of the count: 256 QPs of 1 MiB Writes at depth 1 moved
//! 3.4-4.4 GB/s on the quiet machine where depth 32 moved 5.9-6.5 and depth 128 6.5
//! (`write_bw --loopback -q 256 -s 1M -D 2 -t T`, session 29): a QP that holds one
//! request has nothing queued when its turn to send comes round.

use super::{alternate, bw_of, each, median_of, pooled_of, ratios_of};
use crate::bench::report::{RULE, bw_unit, human_size};
use crate::bench::{BenchConfig, Measured};
use serde_json::{Value, json};
use std::cell::RefCell;
use std::io::Write;
use std::time::Duration;

/// The configuration of a sub-run of `qps` QPs: a 1/`n` share of the run, as every
/// pair's sub-run ([`super::sub_config`]), with the run's own tx depth and cq-mod.
pub fn sub_config(cfg: &BenchConfig, n: u32, qps: u16) -> BenchConfig {
    BenchConfig {
        qps,
        ..super::sub_config(cfg, n)
    }
}

/// The count pairs of one size: aggregate average bandwidth of the first `-q` count
/// and of the last.
#[derive(Debug, Clone, PartialEq)]
pub struct CountPairs {
    pub size: usize,
    /// The (first, last) count.
    pub counts: (u16, u16),
    /// The tx depth a QP of both counts' sub-runs: the run's own.
    pub tx_depth: u32,
    /// Each sub-run's length (duration, or iterations per QP).
    pub sub_duration: Option<Duration>,
    pub sub_iters: u64,
    /// (first count, last count) average bandwidth of each pair, octets a second, in
    /// the order run.
    pub runs: Vec<(f64, f64)>,
}

impl CountPairs {
    /// Last count over first of each pair.
    pub fn ratios(&self) -> Vec<f64> {
        ratios_of(&self.runs)
    }

    /// The median of the pairs' ratios.
    pub fn median_ratio(&self) -> Option<f64> {
        median_of(self.ratios())
    }

    /// All sub-runs pooled: the last count's summed bandwidths over the first's.
    pub fn pooled_ratio(&self) -> Option<f64> {
        pooled_of(&self.runs)
    }

    /// Its JSON line (`--json`): `test` and `bytes` as a result row's, then the pairs.
    pub fn json(&self, cfg: &BenchConfig) -> Value {
        let mb = |x: f64| bw_unit(x, false);
        json!({
            "test": cfg.test.name(),
            "bytes": self.size,
            "paired_qps": {
                "extra": "not the headline: alternating sub-runs of the first -q count and \
                          the last, the last pair the first count first",
                "qps": [self.counts.0, self.counts.1],
                "tx_depth": self.tx_depth,
                "sub_seconds": self.sub_duration.map(|d| d.as_secs_f64()),
                "sub_iterations": self.sub_duration.is_none().then_some(self.sub_iters),
                "first_bw": self.runs.iter().map(|r| mb(r.0)).collect::<Vec<_>>(),
                "last_bw": self.runs.iter().map(|r| mb(r.1)).collect::<Vec<_>>(),
                "bw_unit": "MB/sec",
                "ratios": self.ratios(),
                "median_ratio": self.median_ratio(),
                "pooled_ratio": self.pooled_ratio(),
            }
        })
    }

    /// Its lines in text mode.
    pub fn text(&self, gbits: bool) -> String {
        let (a, b) = self.counts;
        let show = |x: Option<f64>| x.map_or_else(|| "-".to_string(), |m| format!("{m:.2}"));
        let list = |v: Vec<f64>| {
            v.iter()
                .map(|x| format!("{x:.2}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        format!(
            " {}: {b} QPs / {a} QP(s) in {} alternating sub-runs of {} (tx depth {} a QP): \
             {}; median {}, pooled {}\n   {a} QP(s): {}\n   {b} QPs: {}",
            human_size(self.size),
            self.runs.len(),
            each(self.sub_duration, self.sub_iters),
            self.tx_depth,
            list(self.ratios()),
            show(self.median_ratio()),
            show(self.pooled_ratio()),
            list(self.runs.iter().map(|r| bw_unit(r.0, gbits)).collect()),
            list(self.runs.iter().map(|r| bw_unit(r.1, gbits)).collect()),
        )
    }
}

/// Runs `cfg.pairs` pairs of sub-runs of size `size`: `round(sub, last)` runs one
/// softrnic round (`last`: the final sub-run, always the last count's).
pub fn run(
    cfg: &BenchConfig,
    size: usize,
    round: impl FnMut(&BenchConfig, bool) -> Result<Measured, String>,
) -> Result<CountPairs, String> {
    let first = *cfg.qp_counts.first().ok_or("--pairs: no -q count")?;
    let last = *cfg.qp_counts.last().ok_or("--pairs: no -q count")?;
    let a = sub_config(cfg, cfg.pairs, first);
    let b = sub_config(cfg, cfg.pairs, last);
    let round = RefCell::new(round);
    let runs = alternate(
        cfg.pairs,
        || bw_of((round.borrow_mut())(&a, false)?).map(|r| r.avg_bps),
        |end| bw_of((round.borrow_mut())(&b, end)?).map(|r| r.avg_bps),
    )?;
    Ok(CountPairs {
        size,
        counts: (first, last),
        tx_depth: cfg.tx_depth,
        sub_duration: a.duration,
        sub_iters: a.iters,
        runs,
    })
}

/// Runs the count pairs of every size (`round(sub, size, last)`: one softrnic round,
/// `last` the run's final one), printing each size's as it completes (text or a JSON
/// line) and, in text, a closing summary.
pub fn run_sizes(
    cfg: &BenchConfig,
    out: &mut dyn Write,
    mut round: impl FnMut(&BenchConfig, usize, bool) -> Result<Measured, String>,
) -> Result<Vec<CountPairs>, String> {
    let io = |e: std::io::Error| e.to_string();
    if !cfg.json {
        writeln!(out, "{RULE}").map_err(io)?;
        writeln!(
            out,
            " paired QP counts (extra, not the headline): {}, the last -q count's aggregate \
             BW over the first's, in --pairs {} alternating sub-runs of each",
            cfg.test.name(),
            cfg.pairs
        )
        .map_err(io)?;
    }
    let mut all = Vec::with_capacity(cfg.sizes.len());
    for (i, &size) in cfg.sizes.iter().enumerate() {
        let last_size = i + 1 == cfg.sizes.len();
        let p = run(cfg, size, |c, end| round(c, size, last_size && end))?;
        if cfg.json {
            writeln!(out, "{}", p.json(cfg)).map_err(io)?;
        } else {
            writeln!(out, "{}", p.text(cfg.gbits)).map_err(io)?;
        }
        out.flush().map_err(io)?;
        all.push(p);
    }
    if !cfg.json {
        summary(out, &all).map_err(io)?;
    }
    Ok(all)
}

/// The closing lines: each size's median and pooled ratio.
fn summary(out: &mut dyn Write, all: &[CountPairs]) -> std::io::Result<()> {
    let Some((a, b)) = all.first().map(|p| p.counts) else {
        return Ok(());
    };
    let show = |x: Option<f64>| x.map_or_else(|| "-".to_string(), |m| format!("{m:.2}"));
    writeln!(out, "{RULE}")?;
    writeln!(
        out,
        " summary: {b} QPs / {a} QP(s), aggregate BW, paired sub-runs (extra, not the headline)"
    )?;
    writeln!(
        out,
        " {:>10} {:>14} {:>14}",
        "size", "paired median", "paired pooled"
    )?;
    for p in all {
        writeln!(
            out,
            " {:>10} {:>14} {:>14}",
            human_size(p.size),
            show(p.median_ratio()),
            show(p.pooled_ratio())
        )?;
    }
    writeln!(out, "{RULE}")?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::{BenchCommand, BwResult};

    fn cfg(argv: &[&str]) -> BenchConfig {
        BenchCommand::parse_from(argv.iter().copied())
            .unwrap()
            .config()
            .unwrap()
    }

    fn bw(avg_bps: f64) -> Measured {
        Measured::Bw(BwResult {
            bytes: 1 << 20,
            iterations: 1,
            elapsed: Duration::from_secs(1),
            clock: None,
            peak_bps: avg_bps,
            avg_bps,
            msg_rate: 0.0,
            cpu: None,
            per_qp: None,
            calls: None,
        })
    }

    /// Both counts run at the run's own tx depth and cq-mod (a share of its duration
    /// each), as their headlines do: a scaled-down depth would measure the depth.
    #[test]
    fn both_counts_keep_the_runs_own_tx_depth_and_cq_mod() {
        let c = cfg(&[
            "write_bw",
            "--loopback",
            "-q",
            "1,256",
            "-D",
            "2",
            "--pairs",
            "8",
        ]);
        let depths = |c: &BenchConfig, q| {
            let s = sub_config(c, 8, q);
            (s.qps, s.tx_depth, s.cq_mod, s.duration)
        };
        let quarter = Some(Duration::from_millis(250));
        assert_eq!(depths(&c, 1), (1, 128, 16, quarter));
        assert_eq!(depths(&c, 256), (256, 128, 16, quarter));
        let c = cfg(&[
            "write_bw",
            "--loopback",
            "-q",
            "4,1",
            "-t",
            "64",
            "-Q",
            "32",
            "--pairs",
            "2",
        ]);
        assert_eq!((depths(&c, 4).1, depths(&c, 4).2), (64, 32));
        assert_eq!((depths(&c, 1).1, depths(&c, 1).2), (64, 32));
    }

    /// The pairs alternate the first -q count (not a middle one) with the last, each with
    /// its own configuration; only the last count's final sub-run is marked the run's
    /// last; each ratio is the last count's over the first's of its own pair.
    #[test]
    fn count_pairs_alternate_the_first_and_last_count() {
        let c = cfg(&[
            "write_bw",
            "--loopback",
            "-q",
            "1,16,256",
            "-s",
            "1M",
            "-D",
            "2",
            "--pairs",
            "4",
        ]);
        assert!(c.count_pairs());
        let mut order = Vec::new();
        let mut bws = [300.0, 100.0, 200.0, 190.0, 50.0, 100.0, 100.0, 120.0].into_iter();
        let p = run(&c, 1 << 20, |s, last| {
            order.push((s.qps, s.tx_depth, last));
            Ok(bw(bws.next().unwrap()))
        })
        .unwrap();
        assert_eq!(
            order,
            [
                (256, 128, false),
                (1, 128, false),
                (1, 128, false),
                (256, 128, false),
                (256, 128, false),
                (1, 128, false),
                (1, 128, false),
                (256, 128, true),
            ]
        );
        assert_eq!(
            p.runs,
            [
                (100.0, 300.0),
                (200.0, 190.0),
                (100.0, 50.0),
                (100.0, 120.0)
            ]
        );
        assert_eq!((p.counts, p.tx_depth), ((1, 256), 128));
        assert_eq!(p.ratios(), [3.0, 0.95, 0.5, 1.2]);
        // Median of 0.5, 0.95, 1.2, 3.0; pooled (300 + 190 + 50 + 120) / 500.
        assert!((p.median_ratio().unwrap() - 1.075).abs() < 1e-12);
        assert!((p.pooled_ratio().unwrap() - 660.0 / 500.0).abs() < 1e-12);
        let j = p.json(&c);
        assert_eq!(j["bytes"], json!(1 << 20));
        assert_eq!(j["paired_qps"]["qps"], json!([1, 256]));
        assert_eq!(j["paired_qps"]["tx_depth"], json!(128));
        assert_eq!(j["paired_qps"]["sub_seconds"], json!(0.5));
        assert_eq!(j["paired_qps"]["ratios"], json!([3.0, 0.95, 0.5, 1.2]));
        assert_eq!(j["paired_qps"]["median_ratio"], json!(p.median_ratio()));
        assert_eq!(j["paired_qps"]["pooled_ratio"], json!(p.pooled_ratio()));
        let t = p.text(false);
        assert!(
            t.contains(
                "1 MiB: 256 QPs / 1 QP(s) in 4 alternating sub-runs of 0.50 s (tx depth 128 a \
                 QP): 3.00 0.95 0.50 1.20; median 1.07, pooled 1.32"
            ),
            "{t}"
        );
    }

    /// Every size's pairs in turn, the run's last round the last size's final sub-run; a
    /// JSON line per size, or the text block and its summary.
    #[test]
    fn every_size_is_paired_and_only_the_very_last_sub_run_ends_the_run() {
        for json in [false, true] {
            let mut argv = vec![
                "write_bw",
                "--loopback",
                "-q",
                "2,8",
                "-s",
                "64,4K",
                "-n",
                "10",
                "--pairs",
                "3",
            ];
            if json {
                argv.push("--json");
            }
            let c = cfg(&argv);
            let mut out = Vec::new();
            let mut rounds = Vec::new();
            let all = run_sizes(&c, &mut out, |s, size, last| {
                rounds.push((s.qps, size, last));
                Ok(bw(if s.qps == 8 { 90.0 } else { 100.0 }))
            })
            .unwrap();
            assert_eq!(all.len(), 2);
            assert_eq!(rounds.len(), 12);
            assert_eq!(rounds.iter().filter(|r| r.2).count(), 1);
            assert_eq!(rounds.last(), Some(&(8, 4096, true)));
            let out = String::from_utf8(out).unwrap();
            if json {
                let lines: Vec<Value> = out
                    .lines()
                    .map(|l| serde_json::from_str(l).unwrap())
                    .collect();
                assert_eq!(lines.len(), 2);
                assert_eq!(lines[1]["bytes"], json!(4096));
                assert_eq!(lines[1]["paired_qps"]["median_ratio"], json!(0.9));
                assert_eq!(lines[0]["paired_qps"]["sub_iterations"], json!(3));
            } else {
                assert!(out.contains("summary: 8 QPs / 2 QP(s)"), "{out}");
                assert!(
                    out.contains("      4 KiB           0.90           0.90"),
                    "{out}"
                );
            }
        }
    }
}
