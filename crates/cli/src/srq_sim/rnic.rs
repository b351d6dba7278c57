//! The trace played end to end through softrnic: a server device whose QPs receive
//! from per-QP receive queues (`peak`), an SRQ that the server doubles on each limit
//! event (`grow`), or a managed SRQ provisioned by statistics (`stat`); a client
//! device with one QP per connection sends each tick's messages over loopback.
//!
//! The run goes in lockstep, one tick at a time: the client posts the tick's Sends,
//! the server receives all of them, and at the tick's end gives every buffer back
//! (the program processes a tick's completions together) and, for `stat`, closes the
//! statistics interval. As on any iWARP RNIC, a message that finds no buffer ends its
//! connection with a Terminate (DDP "no buffer"): that message and every later one of
//! the connection count as starved.

use super::traffic::Traffic;
use super::{Outcome, SimConfig, Strategy};
use softrnic_rnic::*;
use std::time::{Duration, Instant};

/// How long the server waits for a tick's messages without any progress before it
/// gives up (a lost connection that raised no event would otherwise hang the run).
const STUCK: Duration = Duration::from_secs(10);

type Res<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// The server's receive buffers.
enum Buffers {
    /// One region; QP `i`'s RQ has slots `[i * peak, (i + 1) * peak)`.
    Peak { mr: Mr, peak: usize },
    /// Regions added on each limit event; slot -> (region, offset).
    Grow {
        mrs: Vec<Mr>,
        slots: Vec<(usize, usize)>,
        depth: usize,
    },
    /// The SRQ's own pool.
    Stat,
}

struct Server {
    dev: Device,
    pd: Pd,
    cq: Cq,
    srq: Option<Srq>,
    qps: Vec<Qp>,
    bufs: Buffers,
    size: usize,
}

impl Server {
    fn sge(&self, slot: usize) -> Sge {
        match &self.bufs {
            Buffers::Peak { mr, .. } => mr.sge(slot * self.size, self.size),
            Buffers::Grow { mrs, slots, .. } => {
                let (m, off) = slots[slot];
                mrs[m].sge(off, self.size)
            }
            Buffers::Stat => unreachable!("a managed SRQ posts its own buffers"),
        }
    }

    fn post(&self, qp: usize, slot: usize) -> Res<()> {
        let wr = RecvWr::new(slot as u64, self.sge(slot));
        match (&self.bufs, &self.srq) {
            (Buffers::Peak { .. }, _) => self.qps[qp].post_recv(wr)?,
            (_, Some(srq)) => srq.post_recv(wr)?,
            _ => {}
        }
        Ok(())
    }

    /// Grow: doubles the SRQ (a new region for the new buffers) and re-arms its limit
    /// at a quarter of the new depth.
    fn grow(&mut self) -> Res<()> {
        let (Buffers::Grow { mrs, slots, depth }, Some(srq)) = (&mut self.bufs, &self.srq) else {
            return Ok(());
        };
        let add = *depth;
        let mr = self.pd.alloc_mr(add * self.size, Access::LOCAL_WRITE)?;
        mrs.push(mr);
        let first = slots.len();
        slots.extend((0..add).map(|k| (mrs.len() - 1, k * self.size)));
        *depth += add;
        srq.modify(SrqModify {
            max_wr: Some(*depth),
            limit: Some(*depth / 4),
            ..SrqModify::default()
        })?;
        let wrs = (first..first + add)
            .map(|s| RecvWr::new(s as u64, mrs[slots[s].0].sge(slots[s].1, self.size)));
        srq.post_recv_chain(wrs)?;
        Ok(())
    }

    /// Receive buffers provided now.
    fn depth(&self) -> Res<usize> {
        Ok(match (&self.bufs, &self.srq) {
            (Buffers::Peak { peak, .. }, _) => peak * self.qps.len(),
            (Buffers::Grow { depth, .. }, _) => *depth,
            (Buffers::Stat, Some(srq)) => {
                let a = srq.query()?;
                a.managed_bytes / self.size
            }
            _ => 0,
        })
    }
}

fn server(cfg: &SimConfig, strategy: Strategy, peak: usize) -> Res<Server> {
    let n = cfg.traffic.connections;
    let size = cfg.msg_size;
    let dev = Device::open(DeviceConfig::default())?;
    let pd = dev.alloc_pd();
    let cq = dev.create_cq((4 * n * peak).max(1 << 16))?;
    let init = |rq| QpInit {
        send_cq: &cq,
        recv_cq: &cq,
        sq_depth: 4,
        rq_depth: rq,
    };
    let (srq, bufs) = match strategy {
        Strategy::Peak => {
            let mr = pd.alloc_mr(n * peak * size, Access::LOCAL_WRITE)?;
            (None, Buffers::Peak { mr, peak })
        }
        Strategy::Grow => {
            let d = cfg.grow_initial;
            let srq = dev.create_srq(
                &pd,
                SrqInit {
                    limit: d / 4,
                    ..SrqInit::new(d, 1)
                },
            )?;
            let mr = pd.alloc_mr(d * size, Access::LOCAL_WRITE)?;
            let slots = (0..d).map(|k| (0, k * size)).collect();
            (
                Some(srq),
                Buffers::Grow {
                    mrs: vec![mr],
                    slots,
                    depth: d,
                },
            )
        }
        Strategy::Stat => {
            let srq = dev.create_srq(
                &pd,
                SrqInit {
                    provision: cfg.provision,
                    managed: Some(ManagedInit {
                        buf_size: size,
                        per_chunk: 16,
                        initial: cfg.grow_initial,
                        min_posted: 16,
                        max_buffers: softrnic_rnic::srq::MAX_SRQ_WR,
                    }),
                    ..SrqInit::new(cfg.grow_initial, 1)
                },
            )?;
            (Some(srq), Buffers::Stat)
        }
    };
    let qps = (0..n)
        .map(|_| match &srq {
            Some(s) => dev.create_qp_on_srq(&pd, init(0), s),
            None => dev.create_qp(&pd, init(peak)),
        })
        .collect::<Result<Vec<_>>>()?;
    let s = Server {
        dev,
        pd,
        cq,
        srq,
        qps,
        bufs,
        size,
    };
    match &s.bufs {
        Buffers::Peak { .. } => {
            for q in 0..n {
                for k in 0..peak {
                    s.post(q, q * peak + k)?;
                }
            }
        }
        Buffers::Grow { depth, .. } => {
            for k in 0..*depth {
                s.post(0, k)?;
            }
        }
        Buffers::Stat => {}
    }
    Ok(s)
}

/// Plays the trace through two devices over loopback.
pub fn run(cfg: &SimConfig, strategy: Strategy, peak: u32) -> Res<Outcome> {
    let n = cfg.traffic.connections;
    let peak = peak as usize;
    let mut srv = server(cfg, strategy, peak)?;
    let cdev = Device::open(DeviceConfig::default())?;
    let cpd = cdev.alloc_pd();
    let ccq = cdev.create_cq(1 << 16)?;
    let sq = 4 * peak + 16;
    let cqps = (0..n)
        .map(|_| {
            cdev.create_qp(
                &cpd,
                QpInit {
                    send_cq: &ccq,
                    recv_cq: &ccq,
                    sq_depth: sq,
                    rq_depth: 1,
                },
            )
        })
        .collect::<Result<Vec<_>>>()?;
    let src = cpd.alloc_mr(cfg.msg_size, Access::empty())?;
    connect(&srv, &cdev, &cqps)?;
    let mut out = Outcome::new(strategy, "rnic", n);
    let mut traffic = Traffic::new(cfg.traffic);
    let mut arrivals = Vec::with_capacity(n);
    let mut dead = vec![false; n];
    let index: std::collections::HashMap<QpId, usize> = srv
        .qps
        .iter()
        .enumerate()
        .map(|(i, q)| (q.id(), i))
        .collect();
    let mut wcs = vec![empty(); 256];
    let mut done = Vec::new();
    let mut measured = Duration::ZERO;
    for t in 0..cfg.ticks {
        traffic.tick(&mut arrivals);
        let demand: u64 = arrivals.iter().map(|&a| u64::from(a)).sum();
        let depth = srv.depth()?;
        let started = Instant::now();
        // The client: this tick's Sends, unsignaled (a failure still completes).
        let mut remaining = 0u64;
        let mut starved = 0u64;
        let mut got = vec![0u32; n];
        for (i, &a) in arrivals.iter().enumerate() {
            if a == 0 {
                continue;
            }
            if dead[i] {
                starved += u64::from(a);
                continue;
            }
            let sge = src.sge(0, cfg.msg_size);
            let wr = |k: u32| SendWr::send(u64::from(k), sge).unsignaled();
            cqps[i].post_send_batch((0..a).map(wr))?;
            remaining += u64::from(a);
        }
        // The server: every message of the tick, or its connection's end.
        let mut last = Instant::now();
        while remaining > 0 {
            let k = srv.cq.poll(&mut wcs);
            for c in &wcs[..k] {
                let i = index[&c.qp];
                if c.status == WcStatus::Success {
                    got[i] += 1;
                    remaining = remaining.saturating_sub(1);
                }
                done.push((i, *c));
            }
            while let Some(e) = srv.dev.poll_event() {
                match e {
                    // Posted once every completion of the QP is in the CQ: what did
                    // not arrive now never will.
                    AsyncEvent::Disconnected { qp } => {
                        let i = index[&qp];
                        if !dead[i] {
                            dead[i] = true;
                            let lost = u64::from(arrivals[i].saturating_sub(got[i]));
                            starved += lost;
                            remaining = remaining.saturating_sub(lost);
                        }
                    }
                    AsyncEvent::SrqLimitReached { .. } => srv.grow()?,
                    _ => {}
                }
            }
            if k > 0 {
                last = Instant::now();
            } else if last.elapsed() > STUCK {
                return Err(format!("tick {t}: {remaining} messages never arrived").into());
            }
        }
        // The tick's end: every buffer goes back.
        for (i, c) in done.drain(..) {
            match (&srv.bufs, &srv.srq) {
                (Buffers::Stat, Some(srq)) => {
                    srq.take_message(&c)?;
                }
                (Buffers::Peak { .. }, _) if c.status == WcStatus::Success => {
                    srv.post(i, c.wr_id as usize)?;
                }
                (Buffers::Grow { .. }, _) => srv.post(i, c.wr_id as usize)?,
                _ => {}
            }
        }
        if let (Buffers::Stat, Some(srq)) = (&srv.bufs, &srv.srq) {
            srq.end_interval()?;
        }
        let _ = ccq.poll(&mut wcs);
        out.depth.push(depth as u32);
        out.demand.push(demand as u32);
        if t >= cfg.warmup {
            measured += started.elapsed();
            out.buffers_peak = out.buffers_peak.max(depth).max(srv.depth()?);
            out.messages += demand;
            out.starved += starved;
        }
    }
    if let Some(srq) = &srv.srq {
        out.stall_seconds = srq.query()?.stall.as_secs_f64();
    }
    out.seconds = measured.as_secs_f64();
    out.finish(cfg.msg_size);
    drop(cqps);
    Ok(out)
}

fn empty() -> Completion {
    Completion {
        wr_id: 0,
        status: WcStatus::GeneralError,
        opcode: WcOpcode::Recv,
        byte_len: 0,
        qp: QpId(0),
        solicited: false,
        invalidated: None,
    }
}

/// Connects client QP `i` to server QP `i` (the index travels in the private data).
fn connect(srv: &Server, cdev: &Device, cqps: &[Qp]) -> Res<()> {
    let listener = srv.dev.listen("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let n = cqps.len();
    std::thread::scope(|s| {
        let h = s.spawn(|| -> Result<()> {
            for _ in 0..n {
                let req = listener.accept()?;
                let mut b = [0u8; 4];
                b.copy_from_slice(req.private_data().get(..4).unwrap_or(&[0; 4]));
                let i = (u32::from_le_bytes(b) as usize).min(n - 1);
                req.accept(&srv.qps[i], b"")?;
            }
            Ok(())
        });
        for (i, qp) in cqps.iter().enumerate() {
            cdev.connect(addr, qp, &(i as u32).to_le_bytes())?;
        }
        h.join()
            .map_err(|_| Error::Internal("accept thread panicked"))?
    })?;
    Ok(())
}
