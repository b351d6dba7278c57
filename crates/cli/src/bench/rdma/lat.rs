//! The client's latency loop: one ping-pong (or Read) at a time, each timed.

use super::{Ep, STALL, WAIT, check_wc, e2s, next_tag, recv_wr};
use crate::bench::cqs::CqSet;
use crate::bench::stall::StallWatch;
use crate::bench::stats::{LatResult, Progress};
use crate::bench::{BenchConfig, Test};
use softrnic_rnic::{Completion, SendOp, SendWr, WcOpcode};
use std::time::Instant;

pub(super) fn lat_client(
    cfg: &BenchConfig,
    size: usize,
    cq: &CqSet,
    ep: &mut Ep,
    progress: &mut Progress,
) -> Result<LatResult, String> {
    let test = cfg.test;
    let mut wcs = vec![Completion::default(); 16];
    let mut samples = Vec::with_capacity(cfg.iters as usize);
    let last_octet = size - 1;
    let mut tag = 1u8;
    let mut i = 0u64;
    let mut deadline = None;
    let half = test != Test::ReadLat;
    loop {
        if i == cfg.warmup {
            deadline = cfg.duration.map(|d| Instant::now() + d);
        }
        let wr = match test {
            Test::WriteLat => {
                ep.local
                    .write(last_octet, &[tag])
                    .map_err(e2s("write tag"))?;
                SendOp::Write {
                    remote_addr: ep.remote.addr,
                    rkey: ep.remote.rkey,
                }
            }
            Test::ReadLat => SendOp::Read {
                remote_addr: ep.remote.addr,
                rkey: ep.remote.rkey,
            },
            _ => SendOp::Send {
                solicited: false,
                invalidate: None,
            },
        };
        let t0 = Instant::now();
        ep.qp
            .post_send(SendWr::new(i, wr, ep.local.sge(0, size)))
            .map_err(|e| format!("post_send: {e} ({})", ep.diag()))?;
        let mut watch = StallWatch::new(t0, STALL);
        let mut spins = 0u32;
        let t1 = loop {
            let n = cq.next(&mut wcs, WAIT);
            let mut arrived = false;
            for c in &wcs[..n] {
                check_wc(c, "client")?;
                match c.opcode {
                    WcOpcode::Read => arrived = true,
                    WcOpcode::Recv => {
                        arrived = true;
                        if let Some(r) = &ep.recv {
                            ep.qp
                                .post_recv(recv_wr(r, size))
                                .map_err(e2s("post_recv"))?;
                        }
                    }
                    _ => {}
                }
            }
            if test == Test::WriteLat
                && let Some(land) = &ep.exposed
            {
                let mut b = [0u8];
                land.read(last_octet, &mut b).map_err(e2s("read"))?;
                arrived = b[0] == tag;
            }
            if arrived {
                break Instant::now();
            }
            spins = spins.wrapping_add(1);
            if (spins.is_multiple_of(4096) || cq.sleeps()) && watch.nothing(Instant::now()) {
                return Err(format!("no reply to iteration {i}: {}", ep.diag()));
            }
        };
        if i >= cfg.warmup {
            let us = t1.duration_since(t0).as_secs_f64() * 1e6;
            samples.push(if half { us / 2.0 } else { us });
            progress.tick(t1, samples.len() as u64);
        }
        tag = next_tag(tag);
        i += 1;
        match deadline {
            Some(d) if t1 >= d => break,
            None if i >= cfg.warmup + cfg.iters => break,
            _ => {}
        }
    }
    LatResult::of_samples(size, samples, cfg.keep_samples).ok_or_else(|| "no samples".into())
}
