//! Delivery probes and the closing Read: 1-octet RDMA Reads that complete only once the
//! peer has placed everything before them, so a bandwidth clock stops at delivery.

use super::{BARRIER_ID, PROBE_ID, check_wc};
use crate::bench::cqs::CqSet;
use crate::bench::stall::StallWatch;
use crate::bench::stats::BwMeter;
use softrnic_rnic::{Completion, Qp, SendWr, Sge};
use std::time::{Duration, Instant};

/// Where a QP's delivery probes and closing Read go: a 1-octet local sink and the peer's
/// buffer.
pub(in crate::bench) struct ReadTarget<'a> {
    /// The QP.
    pub qp: &'a Qp,
    /// One local octet the response lands in.
    pub sink: Sge,
    /// The peer's buffer.
    pub addr: u64,
    /// Its STag.
    pub rkey: u32,
}

impl ReadTarget<'_> {
    fn post(&self, wr_id: u64) -> Result<(), softrnic_rnic::Error> {
        self.qp
            .post_send(SendWr::read(wr_id, self.sink, self.addr, self.rkey))
    }
}

/// A probe round in flight: one Read per QP.
struct Round {
    posted_at: Instant,
    ops: u64,
    pending: usize,
}

/// Delivery probes of a Write or Send bandwidth client. Every [`BwMeter::WINDOW`], one
/// 1-octet RDMA Read per QP; the peer answers each only after it has placed everything
/// before it on that connection, so when a round has completed, every message posted
/// before it has been delivered. The messages posted between two rounds were posted and
/// delivered between the first round's post and the second's completion: that window
/// goes to [`BwMeter::confirmed`]. Each QP has at most one probe and the closing Read
/// outstanding beside its `tx-depth` requests (its send queue has two spare slots).
pub(in crate::bench) struct Prober {
    round: Option<Round>,
    /// Post time and operation count of the last confirmed round (the start at first).
    last: (Instant, u64),
}

impl Prober {
    /// No probe yet; the run started at `start`.
    pub(in crate::bench) fn new(start: Instant) -> Prober {
        Prober {
            round: None,
            last: (start, 0),
        }
    }

    /// Whether a round is due: none in flight, and the last one posted a window ago.
    pub(in crate::bench) fn due(&self, now: Instant) -> bool {
        self.round.is_none() && now.duration_since(self.last.0) >= BwMeter::WINDOW
    }

    /// Posts a round if one is due ([`Prober::due`]); `ops` is the count of messages
    /// posted so far, on all QPs.
    pub(in crate::bench) fn maybe_post(
        &mut self,
        now: Instant,
        ops: u64,
        targets: &[ReadTarget<'_>],
    ) -> Result<(), String> {
        if !self.due(now) {
            return Ok(());
        }
        for t in targets {
            t.post(PROBE_ID)
                .map_err(|e| format!("post delivery probe: {e}"))?;
        }
        self.round = Some(Round {
            posted_at: now,
            ops,
            pending: targets.len(),
        });
        Ok(())
    }

    /// Takes a completion: true if it was a probe's.
    pub(in crate::bench) fn completion(
        &mut self,
        c: &Completion,
        now: Instant,
        meter: &mut BwMeter,
    ) -> bool {
        if c.wr_id != PROBE_ID {
            return false;
        }
        if let Some(r) = &mut self.round {
            r.pending -= 1;
            if r.pending == 0 {
                meter.confirmed(self.last.0, now, r.ops - self.last.1);
                self.last = (r.posted_at, r.ops);
                self.round = None;
            }
        }
        true
    }

    /// The closing Read completed at `end`, with `ops` messages in all before it.
    pub(in crate::bench) fn closed(&self, end: Instant, ops: u64, meter: &mut BwMeter) {
        meter.confirmed(self.last.0, end, ops - self.last.1);
    }
}

/// The closing Read: a 1-octet Read per QP, answered only after the peer has placed all
/// before it. Returns the moment the last of them completed: the end of the run.
pub(in crate::bench) fn closing_read(
    cq: &CqSet,
    targets: &[ReadTarget<'_>],
    wcs: &mut [Completion],
    stall: Duration,
    diag: &dyn Fn() -> String,
) -> Result<Instant, String> {
    for t in targets {
        t.post(BARRIER_ID)
            .map_err(|e| format!("post closing Read: {e} ({})", diag()))?;
    }
    let mut got = 0;
    let mut watch = StallWatch::new(Instant::now(), stall);
    loop {
        let n = cq.next(wcs, BwMeter::WINDOW);
        let now = Instant::now();
        for c in &wcs[..n] {
            check_wc(c, "client")?;
            if c.wr_id == BARRIER_ID {
                got += 1;
            }
        }
        if got == targets.len() {
            return Ok(now);
        }
        if n > 0 {
            watch.progressed(now);
        } else if watch.nothing(now) {
            let report = crate::bench::stall_report();
            return Err(format!(
                "closing Read stalled ({:?} of polling): {}{report}",
                watch.waited(),
                diag()
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use softrnic_rnic::{WcOpcode, WcStatus};

    fn probe_done() -> Completion {
        Completion {
            wr_id: PROBE_ID,
            status: WcStatus::Success,
            opcode: WcOpcode::Read,
            ..Completion::default()
        }
    }

    /// A probe window runs from the previous round's post to this round's completion and
    /// counts the messages posted between the two rounds: each of them was posted and
    /// delivered inside it, so the rate is a lower bound of the delivered rate.
    #[test]
    fn probe_windows_count_only_what_was_posted_and_confirmed_inside() {
        let t0 = Instant::now();
        let ms = |x: u64| t0 + Duration::from_millis(x);
        let mut meter = BwMeter::start(t0);
        let mut p = Prober::new(t0);
        // Round 1 posted at 10 ms after 100 messages, confirmed at 30 ms: 100 in [0, 30].
        p.round = Some(Round {
            posted_at: ms(10),
            ops: 100,
            pending: 2,
        });
        assert!(p.completion(&probe_done(), ms(20), &mut meter));
        assert!(p.round.is_some(), "one QP's probe is not the round");
        assert!(p.completion(&probe_done(), ms(30), &mut meter));
        assert!(p.round.is_none());
        // Round 2 posted at 30 ms after 400, confirmed at 40 ms: 300 in [10, 40] (not in
        // [30, 40]: they may have been delivered before round 2 was posted).
        p.round = Some(Round {
            posted_at: ms(30),
            ops: 400,
            pending: 1,
        });
        assert!(p.completion(&probe_done(), ms(40), &mut meter));
        // The closing Read at 60 ms, 500 in all: 100 in [30, 60].
        p.closed(ms(60), 500, &mut meter);
        let r = meter.finish(ms(60), 500, 1);
        assert!((r.peak_bps - 10_000.0).abs() < 1e-6, "{r:?}");
        // Other completions are not probes.
        let mut w = probe_done();
        w.wr_id = 7;
        assert!(!p.completion(&w, ms(61), &mut meter));
    }
}
