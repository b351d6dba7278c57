//! The client's bandwidth loop: keeps `tx-depth` requests outstanding per QP, with
//! credits for send_bw, delivery probes and the closing Read.

use super::{Ep, Prober, ReadTarget, STALL, Signals, bw_op, check_wc, closing_read, post_window};
use crate::bench::cqs::CqSet;
use crate::bench::stall::StallWatch;
use crate::bench::stats::{BwMeter, BwResult, PerQpCompletions, Progress, Spread};
use crate::bench::{BenchConfig, Test};
use softrnic_rnic::{Completion, QpId, SendWr};
use std::collections::HashMap;
use std::time::Instant;

pub(super) fn bw_client(
    cfg: &BenchConfig,
    size: usize,
    cq: &CqSet,
    eps: &mut [Ep],
    progress: &mut Progress,
) -> Result<BwResult, String> {
    let test = cfg.test;
    let depth = u64::from(cfg.tx_depth);
    let cq_mod = u64::from(cfg.cq_mod);
    let rx_depth = u64::from(cfg.rx_depth);
    let iters = cfg.iters;
    let mut wcs = vec![Completion::default(); 64];
    let mut batch: Vec<SendWr> = Vec::with_capacity(depth as usize);
    let start = Instant::now();
    let deadline = cfg.duration.map(|d| start + d);
    let mut meter = BwMeter::start(start);
    let mut stop = false;
    // Completions per QP when the duration was up (fairness, in the JSON output).
    let mut at_deadline = None;
    let mut total: u64 = 0;
    let mut watch = StallWatch::new(start, STALL);
    // Write and Send: delivery is confirmed by Reads (see the module notes). Read: a
    // completion means the data has landed here.
    let probing = test != Test::ReadBw;
    let mut prober = Prober::new(start);
    // Completions find their QP in one look-up, whatever the number of QPs.
    let index: HashMap<QpId, usize> = eps.iter().enumerate().map(|(i, e)| (e.id, i)).collect();
    let mut now = start;
    loop {
        for ep in eps.iter_mut() {
            let mut room = depth - (ep.posted - ep.completed);
            if test == Test::SendBw {
                ep.refresh_credit();
                room = room.min(rx_depth.saturating_sub(ep.posted - ep.credit));
            }
            if deadline.is_none() {
                room = room.min(iters - ep.posted);
            } else if stop {
                // Finish the current signaling group, so the last request is signaled.
                let r = ep.posted % cq_mod;
                room = if r == 0 { 0 } else { room.min(cq_mod - r) };
            }
            if room == 0 {
                continue;
            }
            let op = bw_op(test, ep.remote.addr, ep.remote.rkey);
            let last = (deadline.is_none()).then_some(iters);
            post_window(
                &ep.qp,
                &mut batch,
                op,
                ep.local.sge(0, size),
                ep.posted,
                room,
                Signals { cq_mod, last },
            )
            .map_err(|e| format!("post_send: {e} ({})", ep.diag()))?;
            ep.posted += room;
        }
        // Due against the clock read after the last poll (a few microseconds ago, of a
        // 10 ms window): one clock read per turn of the loop, not two.
        if probing && prober.due(now) {
            let posted: u64 = eps.iter().map(|e| e.posted).sum();
            prober.maybe_post(Instant::now(), posted, &targets(eps))?;
        }
        let n = cq.next(&mut wcs, BwMeter::WINDOW);
        now = Instant::now();
        for c in &wcs[..n] {
            check_wc(c, "client")?;
            if prober.completion(c, now, &mut meter) {
                continue;
            }
            if let Some(ep) = index.get(&c.qp).and_then(|&i| eps.get_mut(i)) {
                let done = c.wr_id + 1;
                total += done - ep.completed;
                ep.completed = done;
            }
        }
        if n > 0 {
            if !probing {
                meter.record(now, total);
            }
            progress.tick(now, total);
            watch.progressed(now);
        } else if watch.nothing(now) {
            let d: Vec<String> = eps.iter().map(Ep::diag).collect();
            let report = crate::bench::stall_report();
            return Err(format!(
                "client stalled ({:?} of polling without progress): {}{report}",
                watch.waited(),
                d.join("; ")
            ));
        }
        if let Some(d) = deadline
            && now >= d
            && !stop
        {
            stop = true;
            at_deadline = Spread::of(eps.iter().map(|e| e.completed));
        }
        let done = eps.iter().all(|e| {
            e.completed == e.posted
                && match deadline {
                    Some(_) => stop && e.posted % cq_mod == 0,
                    None => e.posted == iters,
                }
        });
        if done {
            break;
        }
    }
    let end = if probing {
        let diag = || eps.iter().map(Ep::diag).collect::<Vec<_>>().join("; ");
        let end = closing_read(cq, &targets(eps), &mut wcs, STALL, &diag)?;
        prober.closed(end, total, &mut meter);
        end
    } else {
        Instant::now()
    };
    let mut result = meter.finish(end, total, size);
    if eps.len() > 1 {
        result.per_qp =
            Spread::of(eps.iter().map(|e| e.completed)).map(|at_end| PerQpCompletions {
                at_deadline,
                at_end,
            });
    }
    Ok(result)
}

/// The probes' and closing Read's targets: the server's buffer, into the first octet of
/// the local one.
fn targets(eps: &[Ep]) -> Vec<ReadTarget<'_>> {
    eps.iter()
        .map(|e| ReadTarget {
            qp: &e.qp,
            sink: e.local.sge(0, 1),
            addr: e.remote.addr,
            rkey: e.remote.rkey,
        })
        .collect()
}
