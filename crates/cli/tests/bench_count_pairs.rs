//! `--pairs N` with several `-q` counts, and `--pairs-with`, end to end in loopback mode
//! through the library function the `softrnic` binary calls. Only the structure is
//! checked (which sub-runs ran, that each ratio is its pair's own quotient, finite and
//! positive, that the run ends): bandwidths are never asserted.

use serde_json::Value;
use softrnic_cli::bench::{self, BenchCommand};

fn json_lines(argv: &[&str]) -> Vec<Value> {
    let cmd = BenchCommand::parse_from(argv.iter().copied()).expect("flags parse");
    let mut out = Vec::new();
    bench::run(&cmd, &mut out).expect("benchmark runs");
    String::from_utf8(out)
        .expect("UTF-8 output")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect()
}

fn nums(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|x| x.as_f64().unwrap_or_else(|| panic!("not a number: {x}")))
        .collect()
}

/// After both counts' tables (with their TCP baselines, but no softrnic/TCP pairs), one
/// line per size pairs the first count with the last; the run ends (the servers, TCP's
/// included, were told their last round).
#[test]
fn several_counts_pair_the_first_with_the_last_after_the_tables() {
    let lines = json_lines(&[
        "write_bw",
        "--loopback",
        "-q",
        "1,4",
        "-s",
        "4K,64K",
        "-n",
        "40",
        "--baseline",
        "tcp",
        "--pairs",
        "2",
        "--json",
        "--quiet",
    ]);
    let soft: Vec<&Value> = lines
        .iter()
        .filter(|v| v["transport"] == "softrnic")
        .collect();
    assert_eq!(soft.len(), 4, "two counts, two sizes: {lines:?}");
    assert!(soft.iter().all(|v| v.get("paired").is_none()), "{soft:?}");
    let pairs: Vec<&Value> = lines
        .iter()
        .filter(|v| v.get("paired_qps").is_some())
        .collect();
    assert_eq!(pairs.len(), 2, "{lines:?}");
    let last_row = lines.iter().rposition(|v| v.get("transport").is_some());
    let first_pairs = lines.iter().position(|v| v.get("paired_qps").is_some());
    assert!(
        last_row < first_pairs,
        "the pairs follow every table: {lines:?}"
    );
    for (v, bytes) in pairs.iter().zip([4096, 65536]) {
        assert_eq!(v["test"], "write_bw");
        assert_eq!(v["bytes"], bytes, "{v}");
        let p = &v["paired_qps"];
        assert_eq!(p["qps"], serde_json::json!([1, 4]), "{p}");
        assert_eq!(p["tx_depth"], 128, "{p}");
        assert_eq!(p["sub_iterations"], 20, "{p}");
        let (first, last, ratios) = (
            nums(&p["first_bw"]),
            nums(&p["last_bw"]),
            nums(&p["ratios"]),
        );
        assert_eq!((first.len(), last.len(), ratios.len()), (2, 2, 2), "{p}");
        for i in 0..2 {
            assert!(ratios[i].is_finite() && ratios[i] > 0.0, "{p}");
            assert!((ratios[i] - last[i] / first[i]).abs() < 1e-9, "{p}");
        }
        let median = p["median_ratio"].as_f64().unwrap();
        assert!((median - (ratios[0] + ratios[1]) / 2.0).abs() < 1e-9, "{p}");
        let pooled = p["pooled_ratio"].as_f64().unwrap();
        let own = last.iter().sum::<f64>() / first.iter().sum::<f64>();
        assert!((pooled - own).abs() < 1e-9, "{p}");
    }
}

/// `--pairs-with batching` pairs softrnic with the batching stream: the pairs name it.
#[test]
fn the_64_octet_rate_pairs_with_the_batching_stream() {
    let lines = json_lines(&[
        "write_bw",
        "--loopback",
        "-s",
        "64",
        "-n",
        "2000",
        "--baseline",
        "tcp",
        "--pairs",
        "2",
        "--pairs-with",
        "batching",
        "--json",
        "--quiet",
    ]);
    let soft: Vec<&Value> = lines
        .iter()
        .filter(|v| v["transport"] == "softrnic")
        .collect();
    assert_eq!(soft.len(), 1, "{lines:?}");
    let p = &soft[0]["paired"];
    assert_eq!(p["baseline"], "batching", "{p}");
    let (tcp, rdma, ratios) = (
        nums(&p["tcp_bw"]),
        nums(&p["softrnic_bw"]),
        nums(&p["ratios"]),
    );
    assert_eq!((tcp.len(), rdma.len(), ratios.len()), (2, 2, 2), "{p}");
    for i in 0..2 {
        assert!(ratios[i].is_finite() && ratios[i] > 0.0, "{p}");
        assert!((ratios[i] - rdma[i] / tcp[i]).abs() < 1e-9, "{p}");
    }
}
