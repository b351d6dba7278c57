//! Helpers for the error, close, limit, conversion and two-process tests: waiting for
//! asynchronous events with a timeout, connecting QPs the tests built themselves, and
//! counting completions per work request.
#![allow(dead_code)]

use softrnic_rnic::*;
use std::collections::BTreeMap;
use std::time::Duration;

/// How long any single wait may take before the test fails. Nothing sleeps: every wait
/// ends as soon as what it waits for arrives.
pub const WAIT: Duration = Duration::from_secs(10);

/// Connects `qa` (active, on `a`) to `qb` (passive, on `b`) over loopback TCP.
pub fn connect(a: &Device, qa: &Qp, b: &Device, qb: &Qp) {
    let listener = b.listen("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::scope(|s| {
        let h = s.spawn(|| {
            listener.accept().unwrap().accept(qb, b"passive").unwrap();
        });
        let c = a.connect(addr, qa, b"active").unwrap();
        assert_eq!(c.peer_private_data(), b"passive");
        h.join().unwrap();
    });
}

/// Waits for the first event about `qp` that `pick` accepts; panics after [`WAIT`].
pub fn event(dev: &Device, what: &str, mut pick: impl FnMut(&AsyncEvent) -> bool) -> AsyncEvent {
    dev.wait_event_matching(WAIT, |e| pick(e))
        .unwrap_or_else(|| panic!("no {what} event within {WAIT:?}"))
}

/// The QpFatal event of `qp`.
pub fn fatal_event(dev: &Device, qp: &Qp) -> AsyncEvent {
    let id = qp.id();
    event(
        dev,
        "QpFatal",
        |e| matches!(e, AsyncEvent::QpFatal { qp, .. } if *qp == id),
    )
}

/// Waits for the Disconnected event of `qp`.
pub fn disconnected(dev: &Device, qp: &Qp) {
    let id = qp.id();
    let e = event(
        dev,
        "Disconnected",
        |e| matches!(e, AsyncEvent::Disconnected { qp } if *qp == id),
    );
    assert_eq!(e, AsyncEvent::Disconnected { qp: id });
}

/// Collects exactly `n` completions (panics if fewer arrive within [`WAIT`]).
pub fn take(cq: &Cq, n: usize) -> Vec<Completion> {
    let v = cq.wait_for(n, WAIT);
    assert_eq!(
        v.len(),
        n,
        "expected {n} completions within {WAIT:?}, got {v:?}"
    );
    v
}

/// Asserts every work request in `wrs` completed exactly once in `got`, and that
/// nothing else completed.
pub fn exactly_once(got: &[Completion], wrs: impl IntoIterator<Item = u64>) {
    let mut count: BTreeMap<u64, usize> = BTreeMap::new();
    for c in got {
        *count.entry(c.wr_id).or_default() += 1;
    }
    let want: BTreeMap<u64, usize> = wrs.into_iter().map(|w| (w, 1)).collect();
    assert_eq!(count, want, "completions per wr_id");
}

/// Status of the completion of `wr_id` in `got`.
pub fn status_of(got: &[Completion], wr_id: u64) -> WcStatus {
    got.iter()
        .find(|c| c.wr_id == wr_id)
        .unwrap_or_else(|| panic!("no completion for wr_id {wr_id}"))
        .status
}

/// Everything in the CQ now, without waiting. Once a QP's Disconnected event has been
/// seen, every completion it produced (flushes included) is already in its CQ.
pub fn drained(cq: &Cq) -> Vec<Completion> {
    std::iter::from_fn(|| cq.poll_one()).collect()
}
