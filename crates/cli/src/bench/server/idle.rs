//! A round dropped once its QPs move nothing for the server's idle limit.

use softrnic_rnic::Qp;
use std::time::{Duration, Instant};

/// Watches a round's QPs for traffic: the octets they placed and the FPDUs they sent.
pub(super) struct Idle {
    limit: Duration,
    moved: u64,
    since: Instant,
}

impl Idle {
    pub(super) fn new(limit: Duration, qps: &[&Qp]) -> Idle {
        Idle {
            limit,
            moved: Idle::count(qps.iter().copied()),
            since: Instant::now(),
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
        if moved != self.moved {
            self.moved = moved;
            self.since = Instant::now();
            return Ok(());
        }
        if self.since.elapsed() >= self.limit {
            return Err(format!("no traffic for {:?}; round dropped", self.limit));
        }
        Ok(())
    }
}
