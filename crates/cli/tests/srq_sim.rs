//! `softrnic srq-sim` as a user runs it: one JSON line per strategy with the fields the
//! issue names, the same trace (message count) in the model and through the RNIC, and
//! a PNG written. The model is seeded and has no clock, so its figures are exact.

use std::process::Command;

fn sim(args: &[&str]) -> Vec<serde_json::Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_softrnic"))
        .arg("srq-sim")
        .args(args)
        .output()
        .expect("run softrnic");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

fn field<'a>(v: &'a serde_json::Value, k: &str) -> &'a serde_json::Value {
    v.get(k).unwrap_or_else(|| panic!("no {k} in {v}"))
}

#[test]
fn model_and_rnic_report_every_strategy_and_stat_needs_far_less_memory() {
    let dir = std::env::temp_dir().join(format!("srq-sim-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let png = dir.join("model.png");
    let model = sim(&[
        "--json",
        "-n",
        "300",
        "--ticks",
        "400",
        "--plot",
        png.to_str().unwrap(),
    ]);
    let names: Vec<&str> = model
        .iter()
        .map(|v| field(v, "strategy").as_str().unwrap())
        .collect();
    assert_eq!(names, ["peak", "grow", "stat"]);
    for v in &model {
        for k in [
            "mode",
            "connections",
            "buffer_bytes",
            "messages",
            "starved",
            "stall_seconds",
            "throughput_msgs_per_sec",
        ] {
            field(v, k);
        }
        assert_eq!(field(v, "mode"), "model");
        assert_eq!(field(v, "connections"), 300);
    }
    let bytes = |v: &serde_json::Value| field(v, "buffer_bytes").as_u64().unwrap();
    let (peak, grow, stat) = (&model[0], &model[1], &model[2]);
    assert!(5 * bytes(stat) <= bytes(peak), "{stat} vs {peak}");
    assert!(bytes(stat) < bytes(grow), "{stat} vs {grow}");
    assert_eq!(field(stat, "starved"), 0);
    let messages = field(stat, "messages").clone();
    assert!(messages.as_u64().unwrap() > 10_000);
    let head = std::fs::read(&png).unwrap();
    assert_eq!(&head[..8], b"\x89PNG\r\n\x1a\n");
    // Through the RNIC: the same trace.
    let rnic = sim(&[
        "--json", "--mode", "rnic", "-n", "300", "--ticks", "400", "--plot", "-",
    ]);
    assert_eq!(rnic.len(), 3);
    for v in &rnic {
        assert_eq!(field(v, "mode"), "rnic");
        assert_eq!(field(v, "messages"), &messages);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
