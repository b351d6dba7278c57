//! The fast model: the traffic trace played tick by tick against each strategy's
//! receive buffers, with the same statistics code the RNIC's SRQ manager runs
//! (`softrnic_proto::srq`). A tick is one replenishment period: buffers posted at its
//! start serve its messages, and every buffer consumed is posted again at its end (the
//! program processes its completions once per tick). A message that finds no buffer
//! is starved (on iWARP that is fatal to its connection; here it is only counted).
//! `grow` doubles its SRQ when a quarter of it is left (effective the next tick);
//! `stat` posts the target at each tick's start and, as the managed SRQ does, an
//! eighth of it more at once when fewer than a sixteenth of it are left.

use super::traffic::{Traffic, TrafficSpec};
use super::{Outcome, SimConfig, Strategy};
use softrnic_proto::qp::{Grant, RecvSource, RecvWqe};
use softrnic_proto::srq::{Srq, SrqConfig, SrqEvent};
use softrnic_proto::{PdId, QpId};
use softrnic_rnic::srq_pool::{EMERGENCY, LOW_WATER};

/// The per-connection peak: the most messages one connection received in one tick,
/// over a calibration run of the same length with another seed (what a program sizing
/// every receive queue for its peak would measure beforehand).
pub fn calibrate_peak(spec: TrafficSpec, ticks: usize) -> u32 {
    let mut t = Traffic::new(TrafficSpec {
        seed: spec.seed ^ 0xca11_b4a7_e000_0000,
        ..spec
    });
    let mut a = Vec::new();
    let mut peak = 1;
    for _ in 0..ticks {
        t.tick(&mut a);
        peak = peak.max(a.iter().copied().max().unwrap_or(0));
    }
    peak
}

fn blank(i: u64) -> RecvWqe {
    RecvWqe {
        wr_id: i,
        sges: Default::default(),
        total: 0,
    }
}

/// Plays the trace against one strategy.
pub fn run(cfg: &SimConfig, strategy: Strategy, peak: u32) -> Outcome {
    let n = cfg.traffic.connections;
    let mut traffic = Traffic::new(cfg.traffic);
    let mut arrivals = Vec::with_capacity(n);
    let mut out = Outcome::new(strategy, "model", n);
    // Grow: one SRQ, doubled when a limit event (a quarter left) fires, never shrunk.
    let mut grow_depth = cfg.grow_initial;
    // Stat: the SRQ manager's statistics decide the depth of the next tick.
    let mut srq = Srq::new(SrqConfig {
        provision: cfg.provision,
        ..SrqConfig::new(PdId(1), softrnic_proto::srq::MAX_SRQ_WR, 1)
    })
    .expect("valid SRQ configuration");
    let mut stat_depth = cfg.grow_initial;
    for t in 0..cfg.ticks {
        traffic.tick(&mut arrivals);
        let demand: u64 = arrivals.iter().map(|&a| u64::from(a)).sum();
        let (depth, starved) = match strategy {
            Strategy::Peak => {
                let s: u64 = arrivals
                    .iter()
                    .map(|&a| u64::from(a.saturating_sub(peak)))
                    .sum();
                (n * peak as usize, s)
            }
            Strategy::Grow => {
                let depth = grow_depth;
                let served = demand.min(depth as u64);
                if (depth as u64 - served) < (depth / 4) as u64 {
                    grow_depth = (depth * 2).min(softrnic_proto::srq::MAX_SRQ_WR);
                }
                (depth, demand - served)
            }
            Strategy::Stat => {
                // As the managed SRQ: the target posted at the tick's start, the limit
                // armed at a sixteenth of it, an eighth more when it fires.
                let target = stat_depth;
                while srq.posted() < target {
                    let _ = srq.post(blank(0));
                }
                let _ = srq.arm((target / LOW_WATER).max(1));
                let mut provided = target;
                let mut starved = 0;
                for (i, &a) in arrivals.iter().enumerate() {
                    for _ in 0..a {
                        match srq.take(QpId(i as u32), false) {
                            Grant::Buffer(_) => srq.release(QpId(i as u32)),
                            _ => starved += 1,
                        }
                        while let Some(e) = srq.poll_event() {
                            if let SrqEvent::LimitReached { .. } = e {
                                for _ in 0..(target / EMERGENCY).max(1) {
                                    let _ = srq.post(blank(0));
                                }
                                provided += (target / EMERGENCY).max(1);
                                let _ = srq.arm((target / LOW_WATER).max(1));
                            }
                        }
                    }
                }
                stat_depth = srq.end_interval();
                while srq.poll_event().is_some() {}
                // What was not taken stays posted; the next tick tops up to the target
                // (or gives back beyond it).
                let extra = srq.posted().saturating_sub(stat_depth);
                srq.withdraw(extra, |_| true);
                (provided, starved)
            }
        };
        out.depth.push(depth as u32);
        out.demand.push(demand as u32);
        if t >= cfg.warmup {
            out.buffers_peak = out.buffers_peak.max(depth);
            out.messages += demand;
            out.starved += starved;
        }
    }
    let measured = cfg.ticks.saturating_sub(cfg.warmup) as f64 * cfg.tick_secs;
    out.seconds = measured;
    out.finish(cfg.msg_size);
    out
}
