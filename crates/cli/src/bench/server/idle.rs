//! A round dropped once its QPs move nothing for the server's idle limit.

use super::super::stall::StallWatch;
use softrnic_rnic::Qp;
use std::time::{Duration, Instant};

/// Watches a round's QPs for traffic: the octets they placed and the FPDUs they sent.
/// The idle time is counted over its checks, each gap at most [`IDLE_GAP_CAP`], so a
/// server thread that waited seconds for a CPU does not drop a live round
/// (`stall.rs`).
pub(super) struct Idle {
    limit: Duration,
    moved: u64,
    since: StallWatch,
}

/// The most one gap between two idle checks counts: the checks come after a sleep of
/// at most a second, or after 256-1024 polls.
const IDLE_GAP_CAP: Duration = Duration::from_secs(2);

impl Idle {
    pub(super) fn new(limit: Duration, qps: &[&Qp]) -> Idle {
        Idle {
            limit,
            moved: Idle::count(qps.iter().copied()),
            since: StallWatch::with_gap_cap(Instant::now(), limit, IDLE_GAP_CAP),
        }
    }

    fn count<'a>(qps: impl Iterator<Item = &'a Qp>) -> u64 {
        qps.map(|q| {
            let s = q.stats();
            s.rx_direct_bytes + s.rx_copied_bytes + s.tx_fpdus
        })
        .sum()
    }

    /// An error once the QPs have moved nothing for the limit.
    pub(super) fn check<'a>(&mut self, qps: impl Iterator<Item = &'a Qp>) -> Result<(), String> {
        let moved = Idle::count(qps);
        let now = Instant::now();
        if moved != self.moved {
            self.moved = moved;
            self.since.progressed(now);
            return Ok(());
        }
        if self.since.nothing(now) {
            return Err(format!("no traffic for {:?}; round dropped", self.limit));
        }
        Ok(())
    }
}
