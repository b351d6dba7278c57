//! `--pairs N` in the latency tests, end to end in loopback mode through the library
//! function the `softrnic` binary calls: after the headline, N pairs of busy-polling TCP
//! ping-pong and softrnic sub-runs, each of at least 1000 measured iterations after its
//! own warm-up. Only the structure is checked (counts, that each ratio is its pair's own
//! quotient, finite and positive): timings are never asserted.

use serde_json::Value;
use softrnic_cli::bench::{self, BenchCommand};

fn run(argv: &[&str]) -> (String, Vec<bench::ResultRow>) {
    let cmd = BenchCommand::parse_from(argv.iter().copied()).expect("flags parse");
    let mut out = Vec::new();
    let rows = bench::run(&cmd, &mut out).expect("benchmark runs");
    (String::from_utf8(out).expect("UTF-8 output"), rows)
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

const STATS: [(&str, &str); 3] = [
    ("t_typical", "t_typical_usec"),
    ("t_avg", "t_avg_usec"),
    ("p99", "p99_usec"),
];

#[test]
fn latency_pairs_follow_the_headline_with_each_pairs_ratios() {
    for test in ["send_lat", "write_lat", "read_lat"] {
        let argv = [
            test,
            "--loopback",
            "-s",
            "8",
            "-n",
            "200",
            "--baseline",
            "tcp",
            "--pairs",
            "2",
            "--json",
            "--quiet",
        ];
        let (text, rows) = run(&argv);
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
            .collect();
        let soft: Vec<&Value> = lines
            .iter()
            .filter(|v| v["transport"] == "softrnic")
            .collect();
        assert_eq!(soft.len(), 1, "{test}: {lines:?}");
        let v = soft[0];
        assert_eq!(v["iterations"], 200, "{test}: the headline keeps -n");
        let p = &v["paired"];
        assert_eq!(p["baseline"], "busy_poll", "{test}: {p}");
        assert_eq!(p["sub_iterations"], 1000, "{test}: at least 1000 each");
        assert_eq!(
            p["warmup_per_sub_run"], 100,
            "{test}: warmed as the headline"
        );
        for side in ["tcp", "softrnic"] {
            let runs = p[side].as_array().unwrap_or_else(|| panic!("{side}: {p}"));
            assert_eq!(runs.len(), 2, "{test}: {p}");
            for r in runs {
                assert_eq!(r["iterations"], 1000, "{test}: {r}");
            }
            assert_eq!(p["pooled"][side]["iterations"], 2000, "{test}: {p}");
        }
        for (k, field) in STATS {
            let ratios: Vec<f64> = p["ratios"][k]
                .as_array()
                .unwrap_or_else(|| panic!("{k}: {p}"))
                .iter()
                .map(f)
                .collect();
            assert_eq!(ratios.len(), 2, "{test} {k}: {p}");
            for (i, &r) in ratios.iter().enumerate() {
                assert!(r.is_finite() && r > 0.0, "{test} {k}: {p}");
                let own = f(&p["softrnic"][i][field]) / f(&p["tcp"][i][field]);
                assert!((r - own).abs() < 1e-9, "{test} {k} pair {i}: {p}");
            }
            let median = f(&p["median_ratio"][k]);
            assert!((median - (ratios[0] + ratios[1]) / 2.0).abs() < 1e-9, "{p}");
            let pooled = f(&p["pooled_ratio"][k]);
            assert!(pooled.is_finite() && pooled > 0.0, "{test} {k}: {p}");
            let own = f(&p["pooled"]["softrnic"][field]) / f(&p["pooled"]["tcp"][field]);
            assert!((pooled - own).abs() < 1e-9, "{test} {k}: {p}");
        }
        assert!(
            rows.iter()
                .all(|r| r.paired.as_ref().is_some_and(|p| p.pairs() == 2)),
            "{test}"
        );
    }
}

/// In text mode the pairs' lines follow the row, and the closing table shows the
/// paired median and pooled ratios beside the headline's, labelled as paired.
#[test]
fn the_latency_summary_shows_the_paired_ratios_labelled() {
    let (text, rows) = run(&[
        "send_lat",
        "--loopback",
        "-s",
        "8,64",
        "-n",
        "100",
        "--baseline",
        "tcp",
        "--pairs",
        "2",
        "--quiet",
    ]);
    let under_rows = text
        .matches("paired (extra, not the headline): softrnic/busy-poll TCP in 2 alternating")
        .count();
    assert_eq!(under_rows, 2, "{text}");
    assert_eq!(rows.len(), 2, "a row for each size");
    for (size, row) in ["8 B", "64 B"].into_iter().zip(&rows) {
        // The headline's ratio row is against this run's stronger TCP discipline (the
        // busy-polling ping-pong as a rule, the blocking one on a loaded machine), and
        // says which; the paired rows are always against the busy-polling one.
        let chosen = row.tcp_kind.expect("a TCP baseline ran").label();
        let headline = format!("softrnic/{chosen}");
        for label in [headline.as_str(), "paired median", "paired pooled"] {
            let line = text
                .lines()
                .find(|l| l.trim_start().starts_with(size) && l.contains(label))
                .unwrap_or_else(|| panic!("no {label} line for {size}: {text}"));
            // Four figures: t_typical, t_avg, 99%, 99.9% (the pairs have no 99.9%).
            let cells: Vec<&str> = line.split_whitespace().rev().take(4).collect();
            assert_eq!(cells.len(), 4, "{line}");
        }
    }
    assert!(text.contains("paired median, paired pooled: softrnic/busy-poll TCP from --pairs 2"));
}
