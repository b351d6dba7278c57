//! `softrnic cq-bench`: a short run reports what it did, exactly: with one message in
//! flight per CQ every completion is its own event, the per-handler figures add up to
//! the totals, each handler is on the CPU it was given, and the JSON line carries the
//! fields the issue asks for. No figure is judged (they depend on the machine's load).

use softrnic_cli::cq_bench::{CqBenchArgs, run_once};
use softrnic_rnic::affinity;

fn args(handlers: usize, cqs: usize) -> CqBenchArgs {
    CqBenchArgs {
        handlers,
        cqs,
        cpus: Vec::new(),
        sender_cpus: Vec::new(),
        window: 1,
        duration: 0.3,
        priority: 0,
        probe_priority: None,
        probe_interval_us: 200,
        runs: 1,
        json: true,
    }
}

#[test]
fn a_run_accounts_for_every_event_and_reports_the_issue_fields() {
    let cpus = affinity::process_cpus();
    let r = run_once(&args(2, 6)).unwrap();
    assert_eq!((r.handlers, r.cqs, r.window), (2, 6, 1));
    assert_eq!(r.cpus, vec![cpus[0], cpus[1 % cpus.len()]]);
    assert_eq!(
        r.sender_cpus, r.cpus,
        "senders default to their handler's CPU"
    );
    assert!(r.events > 0);
    // One message in flight per CQ: the next is sent only after the callback re-armed,
    // so each completion raised its own event.
    assert_eq!(r.events, r.completions);
    assert_eq!(r.per_handler.len(), 2);
    assert_eq!(
        r.per_handler.iter().map(|h| h.latency.events).sum::<u64>(),
        r.events
    );
    assert_eq!(
        r.per_handler.iter().map(|h| h.completions).sum::<u64>(),
        r.completions
    );
    for h in &r.per_handler {
        assert_eq!(h.cpu, r.cpus[h.id]);
        assert!(h.latency.events > 0, "handler {} got events", h.id);
        assert!(h.latency.wakeup_p50_usec <= h.latency.wakeup_p99_usec);
    }
    assert!(r.probe.is_none());
    let v: serde_json::Value = serde_json::to_value(&r).unwrap();
    for k in [
        "handlers",
        "cqs",
        "events",
        "events_per_sec",
        "wakeup_p50_usec",
        "wakeup_p99_usec",
    ] {
        assert!(v.get(k).is_some(), "no {k} in {v}");
    }
    assert_eq!(
        v["per_handler"][0]["events"],
        v["per_handler"][0]["completions"]
    );
}

#[test]
fn the_probe_is_reported_apart_with_its_priority() {
    let mut a = args(1, 2);
    a.probe_priority = Some(200);
    a.priority = 3;
    let r = run_once(&a).unwrap();
    let p = r.probe.expect("probe reported");
    assert_eq!((p.id, p.priority, p.cpu), (1, 200, r.cpus[0]));
    assert_eq!(r.per_handler[0].priority, 3);
    assert!(p.latency.events > 0);
    assert_eq!(p.latency.events, p.completions);
    // The probe's events are not in the bulk totals.
    assert_eq!(r.events, r.per_handler[0].latency.events);
}

#[test]
fn bad_arguments_are_errors() {
    let mut a = args(0, 1);
    assert!(run_once(&a).is_err());
    a = args(1, 1);
    a.window = 0;
    assert!(run_once(&a).is_err());
    a = args(1, 1);
    a.cpus = vec![1 << 20];
    assert!(run_once(&a).is_err());
}
