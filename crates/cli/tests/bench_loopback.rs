//! The benchmark subcommands end to end in loopback mode, through the library function
//! the `softrnic` binary calls (no process spawned). Only the shape of the output, the
//! iteration counts and what the output says its figures mean are checked: timings are
//! never asserted (`bench_clock.rs` checks the order of the clock's stop and delivery).

use serde_json::Value;
use softrnic_cli::bench::{self, BenchCommand, Measured};

fn run_json(argv: &[&str]) -> (Vec<Value>, Vec<bench::ResultRow>) {
    let cmd = BenchCommand::parse_from(argv.iter().copied()).expect("flags parse");
    let mut out = Vec::new();
    let rows = bench::run(&cmd, &mut out).expect("benchmark runs");
    let text = String::from_utf8(out).expect("UTF-8 output");
    let lines = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l:?}: {e}")))
        .collect();
    (lines, rows)
}

fn num(v: &Value, key: &str) -> f64 {
    v.get(key)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("{key} missing or not a number in {v}"))
}

#[test]
fn write_bw_loopback_json() {
    let (lines, rows) = run_json(&["write_bw", "--loopback", "-n", "50", "-s", "4096", "--json"]);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let v = &lines[0];
    assert_eq!(v["type"], "result");
    assert_eq!(v["test"], "write_bw");
    assert_eq!(v["transport"], "softrnic");
    assert_eq!(v["bytes"], 4096);
    assert_eq!(v["iterations"], 50);
    assert_eq!(v["bw_unit"], "MB/sec");
    assert_eq!(v["clock"], "closing_read");
    for k in ["bw_peak", "bw_average", "msg_rate_mpps", "seconds"] {
        assert!(num(v, k) > 0.0, "{k} in {v}");
    }
    assert_eq!(rows.len(), 1);
    assert!(matches!(rows[0].softrnic, Measured::Bw(b) if b.iterations == 50));
}

#[test]
fn send_lat_loopback_json() {
    let (lines, rows) = run_json(&["send_lat", "--loopback", "-n", "50", "-s", "8", "--json"]);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let v = &lines[0];
    assert_eq!(v["test"], "send_lat");
    assert_eq!(v["transport"], "softrnic");
    assert_eq!(v["bytes"], 8);
    assert_eq!(v["iterations"], 50);
    assert_eq!(v["clock"], "per_iteration");
    let keys = [
        "t_min_usec",
        "t_max_usec",
        "t_typical_usec",
        "t_avg_usec",
        "t_stdev_usec",
        "p99_usec",
        "p99_9_usec",
    ];
    for k in keys {
        assert!(num(v, k) >= 0.0, "{k} in {v}");
    }
    assert!(num(v, "t_min_usec") <= num(v, "t_max_usec"));
    assert!(matches!(&rows[0].softrnic, Measured::Lat(l) if l.iterations == 50));
}

/// The other four tests, several sizes, and the TCP baseline: every size gets a TCP
/// line and a softrnic line with its ratio.
#[test]
fn other_tests_with_tcp_baseline() {
    for test in ["read_bw", "send_bw", "write_lat", "read_lat"] {
        let (lines, rows) = run_json(&[
            test,
            "--loopback",
            "-n",
            "20",
            "-s",
            "1,4K,100000",
            "--baseline",
            "tcp",
            "--json",
            "--quiet",
        ]);
        assert_eq!(lines.len(), 6, "{test}: {lines:?}");
        for (pair, size) in lines.chunks(2).zip([1, 4096, 100000]) {
            assert_eq!(pair[0]["transport"], "tcp", "{test}");
            assert_eq!(pair[1]["transport"], "softrnic", "{test}");
            for v in pair {
                assert_eq!(v["test"], test);
                assert_eq!(v["bytes"], size);
                assert_eq!(v["iterations"], 20, "{test} {v}");
            }
            assert!(num(&pair[1], "ratio_vs_tcp") > 0.0);
            // Every discipline ran; the tcp line is the strongest, and the ratio is
            // against it.
            let kinds: &[&str] = if test.ends_with("_bw") {
                &["batching", "blocking", "busy_poll"]
            } else {
                &["blocking", "busy_poll"]
            };
            let all = pair[0]["baselines"].as_object().expect("baselines");
            let mut names: Vec<&str> = all.keys().map(String::as_str).collect();
            names.sort_unstable();
            assert_eq!(names, kinds, "{test}");
            for (k, v) in all {
                assert_eq!(v["iterations"], 20, "{test} {k}");
            }
            let best = pair[0]["baseline"].as_str().expect("baseline");
            assert_eq!(pair[1]["ratio_baseline"], best, "{test}");
            let key = if test.ends_with("_bw") {
                "bw_average"
            } else {
                "t_typical_usec"
            };
            assert_eq!(pair[0][key], all[best][key], "{test}");
            for k in kinds {
                assert!(num(&pair[1]["ratios_vs_tcp"], k) > 0.0, "{test} {k}");
            }
            let clock = if test == "read_bw" {
                "last_completion"
            } else if test == "send_bw" {
                "closing_read"
            } else {
                "per_iteration"
            };
            assert_eq!(pair[1]["clock"], clock, "{test}");
        }
        assert!(rows.iter().all(|r| r.tcp.is_some() && r.ratio().is_some()));
    }
}

/// Selective signaling with more QPs, a depth that is not a multiple of the moderation,
/// and a duration instead of an iteration count.
#[test]
fn write_bw_qps_and_duration() {
    let (lines, _) = run_json(&[
        "write_bw",
        "--loopback",
        "-q",
        "3",
        "-t",
        "10",
        "-Q",
        "3",
        "-n",
        "101",
        "-s",
        "512",
        "--json",
    ]);
    assert_eq!(lines[0]["iterations"], 303);
    let (lines, _) = run_json(&[
        "send_bw",
        "--loopback",
        "-D",
        "0.2",
        "-s",
        "64",
        "-r",
        "16",
        "--json",
        "--quiet",
    ]);
    assert!(num(&lines[0], "iterations") > 0.0);
}

/// With more than one QP the JSON line says how the messages spread over the QPs
/// (fairness): every QP's count at the end of a counted run, and with a duration also
/// when the duration was up; one QP's line has no such field.
#[test]
fn many_qps_report_completions_per_qp() {
    let spread = |v: &Value| {
        let u = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"));
        (u("min"), u("median"), u("max"))
    };
    let (lines, _) = run_json(&[
        "write_bw",
        "--loopback",
        "-q",
        "3",
        "-n",
        "50",
        "-s",
        "4096",
        "--json",
        "--quiet",
    ]);
    let f = &lines[0]["per_qp_completions"];
    assert_eq!(spread(&f["at_end"]), (50, 50, 50), "{f}");
    assert!(f["at_deadline"].is_null(), "{f}");
    let (lines, _) = run_json(&[
        "write_bw",
        "--loopback",
        "-q",
        "2",
        "-D",
        "0.2",
        "-s",
        "4096",
        "--json",
        "--quiet",
    ]);
    let f = &lines[0]["per_qp_completions"];
    let (end_min, _, end_max) = spread(&f["at_end"]);
    let (dl_min, _, dl_max) = spread(&f["at_deadline"]);
    assert!(dl_max > 0 && dl_min <= end_min && dl_max <= end_max, "{f}");
    // Together the QPs completed every message the line counts.
    assert!(
        end_min + end_max == num(&lines[0], "iterations") as u64,
        "{f}"
    );
    let (lines, _) = run_json(&[
        "write_bw",
        "--loopback",
        "-n",
        "20",
        "-s",
        "4096",
        "--json",
        "--quiet",
    ]);
    assert!(
        lines[0].get("per_qp_completions").is_none(),
        "{:?}",
        lines[0]
    );
}

/// The text header says when a Write completes, when the clock stops and what the peak
/// is made of.
#[test]
fn write_bw_header_states_completion_semantics() {
    let cmd = BenchCommand::parse_from([
        "write_bw",
        "--loopback",
        "-n",
        "20",
        "-s",
        "4096",
        "--quiet",
    ])
    .expect("flags parse");
    let mut out = Vec::new();
    bench::run(&cmd, &mut out).expect("benchmark runs");
    let text = String::from_utf8(out).expect("UTF-8 output");
    for (key, says) in [
        ("Completion", "copied into the connection's transmit buffer"),
        ("Clock stops", "closing 1-octet RDMA Read"),
        ("BW peak", "delivery probes"),
    ] {
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with(key))
            .unwrap_or_else(|| panic!("no {key} line:\n{text}"));
        assert!(line.contains(says), "{line}");
    }
}

/// Every result carries the CPU it used (both sides in loopback), per GB and per
/// million messages, the baselines' too.
#[test]
fn cpu_cost_is_reported_for_softrnic_and_every_baseline() {
    let (lines, _) = run_json(&[
        "write_bw",
        "--loopback",
        "-n",
        "40",
        "-s",
        "4096",
        "--baseline",
        "tcp",
        "--json",
        "--quiet",
    ]);
    assert_eq!(lines.len(), 2, "{lines:?}");
    let mut results = vec![&lines[1]];
    results.extend(
        lines[0]["baselines"]
            .as_object()
            .expect("baselines")
            .values(),
    );
    assert_eq!(results.len(), 4);
    for v in results {
        let cpu = num(v, "cpu_seconds");
        assert!(cpu > 0.0, "{v}");
        let (user, sys) = (num(v, "cpu_user_seconds"), num(v, "cpu_system_seconds"));
        assert!((user + sys - cpu).abs() < 1e-9, "{v}");
        assert_eq!(v["cpu_scope"], "both_sides");
        // 40 messages of 4096 octets.
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b;
        assert!(
            close(num(v, "cpu_s_per_gb"), cpu / (40.0 * 4096.0 / 1e9)),
            "{v}"
        );
        assert!(close(num(v, "cpu_s_per_mmsg"), cpu / 40e-6), "{v}");
    }
}

/// -e: both sides sleep on completion events; the baselines are those that do not spin.
#[test]
fn events_mode_against_the_baselines_that_do_not_spin() {
    for (test, kinds) in [
        ("send_lat", vec!["blocking"]),
        ("read_lat", vec!["blocking"]),
        ("read_bw", vec!["batching", "blocking"]),
        ("write_bw", vec!["batching", "blocking"]),
    ] {
        let (lines, rows) = run_json(&[
            test,
            "--loopback",
            "-e",
            "-n",
            "30",
            "-s",
            "64,8K",
            "--baseline",
            "tcp",
            "--json",
            "--quiet",
        ]);
        assert_eq!(lines.len(), 4, "{test}: {lines:?}");
        for pair in lines.chunks(2) {
            let mut names: Vec<&str> = pair[0]["baselines"]
                .as_object()
                .expect("baselines")
                .keys()
                .map(String::as_str)
                .collect();
            names.sort_unstable();
            assert_eq!(names, kinds, "{test}");
            assert_eq!(pair[1]["transport"], "softrnic");
            assert_eq!(pair[1]["events"], true, "{test}");
            assert_eq!(pair[1]["iterations"], 30, "{test}");
            assert!(num(&pair[1], "cpu_seconds") > 0.0, "{test}");
        }
        assert!(rows.iter().all(|r| r.ratio().is_some()));
    }
}

/// -e needs an event to sleep on: the tests whose completions do not come where the
/// waiting side is are refused with the reason.
#[test]
fn events_mode_refuses_tests_without_an_event_to_wait_for() {
    for test in ["write_lat", "send_bw"] {
        let cmd = BenchCommand::parse_from([test, "--loopback", "-e"]).expect("flags parse");
        let e = cmd.config().expect_err(test);
        assert!(e.contains("-e"), "{e}");
    }
}

/// `-q` with a list: every count runs every size, each round with that many QPs (the
/// JSON line says which), and the iteration count is per QP.
#[test]
fn qp_count_list_runs_every_count_and_size() {
    let (lines, rows) = run_json(&[
        "send_bw",
        "--loopback",
        "-n",
        "40",
        "-s",
        "64,4K",
        "-q",
        "1,3",
        "--baseline",
        "tcp",
        "--json",
    ]);
    let soft: Vec<(u64, u64, u64)> = lines
        .iter()
        .filter(|v| v["transport"] == "softrnic")
        .map(|v| {
            let u = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"));
            (u("qps"), u("bytes"), u("iterations"))
        })
        .collect();
    assert_eq!(
        soft,
        [(1, 64, 40), (1, 4096, 40), (3, 64, 120), (3, 4096, 120)],
        "{lines:?}"
    );
    assert_eq!(rows.len(), 4);
    assert!(rows.iter().all(|r| r.tcp.is_some()), "a baseline per round");
}

/// With `-q N`, write_bw and send_bw's TCP baselines run N streams (one per QP), each
/// sending its share of the messages, and say so; read_bw's stays one stream.
#[test]
fn many_qps_have_as_many_tcp_streams() {
    for (test, streams) in [("write_bw", 3), ("send_bw", 3), ("read_bw", 1)] {
        let (lines, rows) = run_json(&[
            test,
            "--loopback",
            "-q",
            "3",
            "-n",
            "20",
            "-s",
            "100000",
            "--baseline",
            "tcp",
            "--json",
            "--quiet",
        ]);
        assert_eq!(lines.len(), 2, "{test}: {lines:?}");
        let tcp = &lines[0];
        assert_eq!(tcp["transport"], "tcp", "{test}");
        assert_eq!(tcp["qps"], 3, "{test}");
        assert_eq!(tcp["streams"], streams, "{test}");
        // Every stream sent its 20 messages, as every QP did.
        for (k, v) in tcp["baselines"].as_object().expect("baselines") {
            assert_eq!(v["iterations"], 60, "{test} {k}");
        }
        assert_eq!(lines[1]["iterations"], 60, "{test}");
        assert!(rows.iter().all(|r| r.tcp.is_some()));
    }
}

/// Every softrnic result says where its threads ran (share of each one's CPU time by
/// CPU), so a slow run explains itself; and by default (engines follow the side that
/// connects their QPs) each device's engine ran on its own side's CPU only: the
/// server's engine, which does all of the server's socket work in write_bw, never on
/// the busy client's.
#[test]
fn each_result_says_where_its_threads_ran() {
    let (lines, _) = run_json(&["write_bw", "--loopback", "-n", "300", "-s", "64K", "--json"]);
    let v = &lines[0];
    let threads = v["placement"]
        .as_array()
        .expect("placement in every result");
    let role = |r: &str| {
        threads
            .iter()
            .find(|t| t["role"] == r)
            .unwrap_or_else(|| panic!("no {r} in {v}"))
    };
    let cpus_of = |r: &str| -> Vec<usize> {
        role(r)["share_by_cpu"]
            .as_object()
            .unwrap()
            .iter()
            .filter(|(_, share)| share.as_f64().unwrap() > 0.0)
            .map(|(c, _)| c.parse().unwrap())
            .collect()
    };
    for r in ["client", "server", "client engine", "server engine"] {
        assert!(num(role(r), "cpu_ms") >= 0.0, "{r}");
    }
    assert!(
        num(role("server engine"), "cpu_ms") > 0.0,
        "it placed the data"
    );
    let allowed = softrnic_rnic::affinity::allowed_cpus();
    if allowed.len() >= 2 {
        // The CLI pins the client to the first allowed CPU, the server to the second.
        let (c, s) = (allowed[0], allowed[1]);
        assert_eq!(cpus_of("client"), vec![c], "{v}");
        assert_eq!(cpus_of("server engine"), vec![s], "{v}");
        assert!(cpus_of("server").iter().all(|&x| x == s), "{v}");
        assert!(cpus_of("client engine").iter().all(|&x| x == c), "{v}");
    }
}

/// `--shared-buffers` (an extra measurement) runs every QP on one buffer per side and
/// says so in every result.
#[test]
fn shared_buffers_are_labelled() {
    let (lines, rows) = run_json(&[
        "write_bw",
        "--loopback",
        "-q",
        "3",
        "-n",
        "20",
        "-s",
        "4096",
        "--shared-buffers",
        "--json",
    ]);
    assert_eq!(lines[0]["shared_buffers"], true, "{}", lines[0]);
    assert_eq!(lines[0]["qps"], 3);
    assert!(matches!(rows[0].softrnic, Measured::Bw(b) if b.iterations == 60));
    let (plain, _) = run_json(&["write_bw", "--loopback", "-n", "5", "-s", "64", "--json"]);
    assert!(plain[0].get("shared_buffers").is_none());
}

/// `--pairs N` (an extra measurement): after each size's headline, N pairs of short
/// busy-polling TCP and softrnic sub-runs, each with its share of the iterations; the
/// headline keeps its iterations and ratios, and every size's pairs run (the server
/// ends only after the last size's last sub-run).
#[test]
fn pairs_follow_each_headline_and_leave_it_unchanged() {
    for test in ["write_bw", "send_bw"] {
        let (lines, rows) = run_json(&[
            test,
            "--loopback",
            "-n",
            "40",
            "-s",
            "4K,64K",
            "--baseline",
            "tcp",
            "--pairs",
            "3",
            "--json",
            "--quiet",
        ]);
        let soft: Vec<&Value> = lines
            .iter()
            .filter(|v| v["transport"] == "softrnic")
            .collect();
        assert_eq!(soft.len(), 2, "{test}: {lines:?}");
        for v in soft {
            assert_eq!(v["iterations"], 40, "{test}: the headline keeps -n");
            assert!(v["ratios_vs_tcp"]["busy_poll"].as_f64().is_some(), "{v}");
            let p = &v["paired"];
            assert_eq!(p["baseline"], "busy_poll", "{test}");
            assert_eq!(p["sub_iterations"], 13, "{test}");
            let arr = |k: &str| -> Vec<f64> {
                p[k].as_array()
                    .unwrap_or_else(|| panic!("{k} in {p}"))
                    .iter()
                    .map(|x| x.as_f64().unwrap())
                    .collect()
            };
            let (t, s, r) = (arr("tcp_bw"), arr("softrnic_bw"), arr("ratios"));
            assert_eq!((t.len(), s.len(), r.len()), (3, 3, 3), "{test}: {p}");
            for i in 0..3 {
                assert!(t[i] > 0.0 && s[i] > 0.0, "{test}: {p}");
                assert!((r[i] - s[i] / t[i]).abs() < 1e-9, "{test}: {p}");
            }
            let mut sorted = r.clone();
            sorted.sort_by(f64::total_cmp);
            assert_eq!(p["median_ratio"].as_f64(), Some(sorted[1]), "{test}: {p}");
            let pooled = s.iter().sum::<f64>() / t.iter().sum::<f64>();
            assert!(
                (p["pooled_ratio"].as_f64().unwrap() - pooled).abs() < 1e-9,
                "{p}"
            );
        }
        assert!(
            rows.iter()
                .all(|r| r.paired.as_ref().is_some_and(|p| p.pairs() == 3))
        );
    }
}
