//! The CQs of one side of a benchmark: one per engine, each on its own completion
//! vector, QP `i` on CQ `i % engines`. A QP is driven by the engine of its receive CQ's
//! vector, so with `--engine-threads N` the QPs spread over the N engines; with all QPs
//! on one CQ (vector 0) every QP was driven by engine 0 and the other engines idled.
//! The side polls the set as it polled its one CQ.
//!
//! With `-e` the side sleeps instead: the set's CQs send their events to one completion
//! channel, and [`CqSet::next`] arms them, looks once more, and waits on the channel
//! (the verbs loop: poll until empty, arm, poll, wait).

use softrnic_rnic::{CompChannel, Completion, Cq, Device, Handler};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// The depth of each CQ: one per engine (at most one per QP, at least one), `total`
/// shared out in proportion to the QPs on each (QP `i` on CQ `i % n`), summing to
/// `total` exactly, each at least 1.
fn depths(engines: usize, qps: usize, total: usize) -> Vec<usize> {
    let qps = qps.max(1);
    let n = engines.clamp(1, qps);
    let on = |k: usize| qps / n + usize::from(k < qps % n);
    let mut d: Vec<usize> = (0..n).map(|k| (total * on(k) / qps).max(1)).collect();
    let sum: usize = d.iter().sum();
    for k in 0..total.saturating_sub(sum) {
        d[k % n] += 1;
    }
    d
}

/// One CQ per engine, polled in turn (or waited on, with events).
pub struct CqSet {
    cqs: Vec<Cq>,
    /// Which CQ the next poll starts with, so no CQ is always served last.
    next: AtomicUsize,
    /// Events mode: the channel every CQ's handler is, and the device (to remove the
    /// handlers when the set goes).
    events: Option<(CompChannel, Device)>,
}

impl CqSet {
    /// CQs for `qps` QPs on `dev`, `total` entries in all (what one CQ for all of them
    /// would take), shared out in proportion to the QPs on each, so the device's CQ
    /// entry budget sees the same total.
    pub fn new(dev: &Device, qps: usize, total: usize) -> Result<CqSet, String> {
        let cqs = depths(dev.engines().len(), qps, total)
            .into_iter()
            .enumerate()
            .map(|(v, depth)| dev.create_cq_on(depth, v))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("create CQ: {e}"))?;
        Ok(CqSet {
            cqs,
            next: AtomicUsize::new(0),
            events: None,
        })
    }

    /// As [`CqSet::new`], and with `events` the set's completion events go to one
    /// channel (registered as the handler of each of its vectors, removed when the set
    /// is dropped), which [`CqSet::next`] sleeps on.
    pub fn with_events(
        dev: &Device,
        qps: usize,
        total: usize,
        events: bool,
    ) -> Result<CqSet, String> {
        let mut set = CqSet::new(dev, qps, total)?;
        if events {
            let ch = CompChannel::new().map_err(|e| format!("completion channel: {e}"))?;
            for cq in &set.cqs {
                dev.set_handler(cq.vector(), Handler::channel(&ch))
                    .map_err(|e| format!("set handler: {e}"))?;
            }
            set.events = Some((ch, dev.clone()));
        }
        Ok(set)
    }

    /// The CQ of QP `i`.
    pub fn for_qp(&self, i: usize) -> &Cq {
        &self.cqs[i % self.cqs.len()]
    }

    /// How many CQs.
    pub fn len(&self) -> usize {
        self.cqs.len()
    }

    /// Whether there is none (never: `new` makes at least one).
    pub fn is_empty(&self) -> bool {
        self.cqs.is_empty()
    }

    /// Whether [`CqSet::next`] sleeps on events.
    pub fn sleeps(&self) -> bool {
        self.events.is_some()
    }

    /// Moves up to `out.len()` completions into `out` from the CQs in turn; returns how
    /// many. Completions of one QP keep their order (they are all on one CQ).
    ///
    /// Inlined into the benchmark loops, with one CQ (every latency test) polled as
    /// perftest polls its CQ: no turn counter, no division of the rotation, no call
    /// frames of the set's own (about 60 of the benchmark's own instructions in each
    /// spin of a ping-pong, callgrind).
    #[inline]
    pub fn poll(&self, out: &mut [Completion]) -> usize {
        if let [cq] = self.cqs.as_slice() {
            return cq.poll(out);
        }
        self.poll_in_turn(out)
    }

    /// [`CqSet::poll`] of more than one CQ.
    #[inline(never)]
    fn poll_in_turn(&self, out: &mut [Completion]) -> usize {
        let n = self.cqs.len();
        // A hint, not a count: a load and a store, not an atomic read-modify-write
        // (the busy-polling loops call this between every two socket reads).
        let turn = self.next.load(Ordering::Relaxed);
        self.next.store(turn.wrapping_add(1), Ordering::Relaxed);
        let start = turn % n;
        let mut got = 0;
        for k in 0..n {
            if got == out.len() {
                break;
            }
            got += self.cqs[(start + k) % n].poll(&mut out[got..]);
        }
        got
    }

    /// The next completions: a poll, or with events, when the CQs are empty, a sleep
    /// on the channel for at most `timeout` (then 0 if none came).
    #[inline]
    pub fn next(&self, out: &mut [Completion], timeout: Duration) -> usize {
        let n = self.poll(out);
        if n > 0 || out.is_empty() || self.events.is_none() {
            return n;
        }
        self.sleep_then_poll(out, timeout)
    }

    /// [`CqSet::next`] of a set that sleeps, once its CQs were found empty.
    #[inline(never)]
    fn sleep_then_poll(&self, out: &mut [Completion], timeout: Duration) -> usize {
        let Some((ch, _)) = &self.events else {
            return 0;
        };
        for cq in &self.cqs {
            cq.req_notify(false);
        }
        // A completion added before the arm is found here; one added after raises an
        // event.
        let n = self.poll(out);
        if n > 0 {
            return n;
        }
        if let Ok(Some(ev)) = ch.get_event(Some(timeout)) {
            // One event, acknowledged at once.
            let _ = ev.cq().ack_events(1);
        }
        self.poll(out)
    }
}

impl Drop for CqSet {
    fn drop(&mut self) {
        if let Some((_, dev)) = &self.events {
            for cq in &self.cqs {
                let _ = dev.remove_handler(cq.vector());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use softrnic_rnic::DeviceConfig;

    #[test]
    fn depths_share_the_total_by_qps() {
        assert_eq!(depths(1, 8, 100), [100]);
        assert_eq!(depths(2, 4, 100), [50, 50]);
        // 5 QPs on 2 CQs: 3 and 2 of them.
        assert_eq!(depths(2, 5, 100), [60, 40]);
        assert_eq!(depths(3, 2, 64), [32, 32]);
        assert_eq!(depths(4, 7, 703).iter().sum::<usize>(), 703);
        assert_eq!(depths(2, 1, 64), [64]);
    }

    #[test]
    fn one_cq_per_engine_and_qps_round_robin() {
        let dev = Device::open(DeviceConfig {
            engine_threads: 3,
            ..DeviceConfig::default()
        })
        .unwrap();
        let set = CqSet::new(&dev, 8, 64).unwrap();
        assert_eq!(set.len(), 3);
        let vectors: Vec<usize> = (0..6).map(|i| set.for_qp(i).vector()).collect();
        assert_eq!(vectors, [0, 1, 2, 0, 1, 2]);
        // Fewer QPs than engines: no CQ without a QP.
        assert_eq!(CqSet::new(&dev, 2, 64).unwrap().len(), 2);
        let one = Device::open(DeviceConfig::default()).unwrap();
        assert_eq!(CqSet::new(&one, 8, 64).unwrap().len(), 1);
    }

    /// The point of the set: connected QPs spread over the engines (all QPs on one CQ
    /// put every one of them on engine 0).
    #[test]
    fn connected_qps_spread_over_the_engines() {
        use softrnic_rnic::QpInit;
        let dev = Device::open(DeviceConfig {
            engine_threads: 2,
            ..DeviceConfig::default()
        })
        .unwrap();
        let peer = Device::open(DeviceConfig::default()).unwrap();
        let (pd, ppd) = (dev.alloc_pd(), peer.alloc_pd());
        let set = CqSet::new(&dev, 4, 64).unwrap();
        let pcq = peer.create_cq(64).unwrap();
        let listener = dev.listen("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let mut keep = Vec::new();
        for i in 0..4 {
            let cq = set.for_qp(i);
            let init = |cq| QpInit {
                send_cq: cq,
                recv_cq: cq,
                sq_depth: 4,
                rq_depth: 4,
            };
            let qp = dev.create_qp(&pd, init(cq)).unwrap();
            let pqp = peer.create_qp(&ppd, init(&pcq)).unwrap();
            std::thread::scope(|s| {
                let h = s.spawn(|| listener.accept().unwrap().accept(&qp, b"").unwrap());
                peer.connect(addr, &pqp, b"").unwrap();
                h.join().unwrap();
            });
            keep.push((qp, pqp));
        }
        let qps: Vec<usize> = dev.engines().iter().map(|e| e.qps).collect();
        assert_eq!(qps, [2, 2]);
    }
}
