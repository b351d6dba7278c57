//! The measuring loops of a `-R` run: bandwidth as client and server, and the three
//! latency ping-pongs.

use super::*;
use crate::bench::stall::StallWatch;

/// A bandwidth result from a peer's report (bandwidths in the reporting unit). It was
/// not timed here: no clock, and no elapsed time (none is back-computed).
pub(super) fn from_report(r: &BwReport, gbits: bool) -> BwResult {
    let to_bps = |v: f64| if gbits { v * 1e9 / 8.0 } else { v * MB };
    let avg_bps = to_bps(r.bw_avg);
    let bytes = r.size as usize;
    BwResult {
        cpu: None,
        per_qp: None,
        calls: None,
        bytes,
        iterations: r.iters,
        elapsed: Duration::ZERO,
        clock: None,
        peak_bps: to_bps(r.bw_peak),
        avg_bps,
        msg_rate: r.msg_rate * 1e6,
    }
}

/// write_bw, read_bw, send_bw as the client: `tx-depth` requests outstanding per QP,
/// one in `cq-mod` signaled; send_bw within the server's credits. Against a softrnic
/// peer, write_bw and send_bw probe delivery and end with a closing Read, as softrnic's
/// own mode does. Against perftest they do not: its exchange opens these QPs with IRD =
/// ORD = 0, so a Read there would rely on the peer's RNIC granting more than asked (siw's
/// relaxed IRD negotiation did in a rig run; others need not), and the clock stops at the
/// last local completion, as perftest's does. read_bw's completions are arrivals.
pub(super) fn bw_client(
    cfg: &BenchConfig,
    s: &mut Session,
    progress: &mut Progress,
) -> Result<BwResult, String> {
    let test = cfg.test;
    let size = s.size;
    let iters = cfg.iters;
    let depth = u64::from(cfg.tx_depth);
    let cq_mod = u64::from(cfg.cq_mod);
    let window = pt::send_window(cfg.rx_depth, iters);
    let mut wcs = vec![Completion::default(); 64];
    let mut batch: Vec<SendWr> = Vec::with_capacity(depth as usize);
    let start = Instant::now();
    let mut meter = BwMeter::start(start);
    let mut total = 0u64;
    let mut watch = StallWatch::new(start, STALL);
    let probing = closing_read_used(test, s.side, s.softrnic_peer);
    let mut prober = Prober::new(start);
    loop {
        for t in s.qps.iter_mut() {
            let mut room = (depth - (t.posted - t.completed)).min(iters - t.posted);
            if test == Test::SendBw {
                t.refresh_credit();
                room = room.min(window.saturating_sub(t.posted - t.credit));
            }
            if room == 0 {
                continue;
            }
            let op = bw_op(test, t.remote.vaddr, t.remote.rkey);
            post_window(
                &t.qp,
                &mut batch,
                op,
                t.local.sge(0, size),
                t.posted,
                room,
                Signals {
                    cq_mod,
                    last: Some(iters),
                },
            )
            .map_err(|e| format!("post_send: {e} ({})", t.diag()))?;
            t.posted += room;
        }
        if probing {
            let posted: u64 = s.qps.iter().map(|t| t.posted).sum();
            prober.maybe_post(Instant::now(), posted, &targets(&s.qps))?;
        }
        let n = s.cq.poll(&mut wcs);
        let now = Instant::now();
        for c in &wcs[..n] {
            check_wc(c, "client")?;
            if prober.completion(c, now, &mut meter) {
                continue;
            }
            if let Some(t) = s.qps.iter_mut().find(|t| t.id == c.qp) {
                let done = c.wr_id + 1;
                total += done.saturating_sub(t.completed);
                t.completed = t.completed.max(done);
            }
        }
        if n > 0 {
            if !probing {
                meter.record(now, total);
            }
            progress.tick(now, total);
            watch.progressed(now);
        } else if watch.nothing(now) {
            let d: Vec<String> = s.qps.iter().map(TestQp::diag).collect();
            return Err(format!("client stalled: {}", d.join("; ")));
        }
        if s.qps.iter().all(|t| t.completed == iters) {
            break;
        }
    }
    let end = if probing {
        let diag = || {
            s.qps
                .iter()
                .map(TestQp::diag)
                .collect::<Vec<_>>()
                .join("; ")
        };
        let end = closing_read(&s.cq, &targets(&s.qps), &mut wcs, STALL, &diag)?;
        prober.closed(end, total, &mut meter);
        end
    } else {
        Instant::now()
    };
    Ok(meter.finish(end, total, size))
}

/// Whether a bandwidth client probes delivery and ends with a closing Read: in write_bw
/// and send_bw, when the peer is softrnic.
pub(super) fn closing_read_used(test: Test, side: Side, softrnic_peer: bool) -> bool {
    side == Side::Client && softrnic_peer && matches!(test, Test::WriteBw | Test::SendBw)
}

/// The probes' and closing Read's targets: the peer's exposed buffer (the Write target,
/// or the send_bw server's credit source), into the first octet of the local buffer.
pub(super) fn targets(qps: &[TestQp]) -> Vec<ReadTarget<'_>> {
    qps.iter()
        .map(|t| ReadTarget {
            qp: &t.qp,
            sink: t.local.sge(0, 1),
            addr: t.remote.vaddr,
            rkey: t.remote.rkey,
        })
        .collect()
}

/// write_bw as the server: counts the Write payload its QPs have placed in its memory
/// (their I/O counters; a counted octet is in memory) and times it on its own clock,
/// from the first octet seen to the last of `-n` x `-q` messages. It busy-polls the CQ
/// meanwhile, which in hybrid progress mode drives the sockets from this thread.
pub(super) fn write_bw_server(
    cfg: &BenchConfig,
    s: &mut Session,
    progress: &mut Progress,
) -> Result<BwResult, String> {
    let size = s.size as u64;
    let want = cfg.iters * s.qps.len() as u64 * size;
    let mut wcs = vec![Completion::default(); 16];
    let mut meter: Option<BwMeter> = None;
    let mut seen = 0u64;
    let mut watch = StallWatch::new(Instant::now(), STALL);
    loop {
        let n = s.cq.poll(&mut wcs);
        for c in &wcs[..n] {
            check_wc(c, "server")?;
        }
        let placed: u64 = s
            .qps
            .iter()
            .map(|t| {
                let st = t.qp.stats();
                st.rx_direct_bytes + st.rx_copied_bytes
            })
            .sum();
        let now = Instant::now();
        if placed > seen {
            seen = placed;
            let m = meter.get_or_insert_with(|| BwMeter::start(now));
            m.record(now, placed / size);
            progress.tick(now, placed / size);
            watch.progressed(now);
        } else if watch.nothing(now) {
            return Err(format!(
                "server: {seen} of {want} Write octets placed, then nothing for {STALL:?}"
            ));
        }
        if placed >= want {
            let m = meter.unwrap_or_else(|| BwMeter::start(now));
            return Ok(m.finish(now, placed / size, s.size));
        }
    }
}

/// send_bw as the server: keeps receives posted, RDMA-Writes the count received every
/// third of the receive depth into the client's credit word, and measures from the first
/// arrival to the last.
pub(super) fn send_bw_server(
    cfg: &BenchConfig,
    s: &mut Session,
    progress: &mut Progress,
) -> Result<BwResult, String> {
    let size = s.size;
    let iters = cfg.iters;
    let want = iters * s.qps.len() as u64;
    let period = pt::credit_period(cfg.rx_depth, iters);
    let mut wcs = vec![Completion::default(); 64];
    // Per QP: received (posted), credit reported (credit), credit Writes in flight.
    let mut inflight = vec![0usize; s.qps.len()];
    let mut slot = vec![0usize; s.qps.len()];
    let mut total = 0u64;
    let mut meter: Option<BwMeter> = None;
    let mut watch = StallWatch::new(Instant::now(), STALL);
    while total < want {
        let n = s.cq.poll(&mut wcs);
        let now = Instant::now();
        for c in &wcs[..n] {
            check_wc(c, "server")?;
            let Some(i) = s.qps.iter().position(|t| t.id == c.qp) else {
                continue;
            };
            let t = &mut s.qps[i];
            match c.opcode {
                WcOpcode::Recv => {
                    t.posted += 1;
                    total += 1;
                    if let Some(r) = &t.recv {
                        // Fails only once the connection is closing.
                        let _ = t.qp.post_recv(RecvWr::new(0, r.sge(0, size)));
                    }
                }
                _ => inflight[i] = inflight[i].saturating_sub(1),
            }
        }
        if n > 0 {
            let m = meter.get_or_insert_with(|| BwMeter::start(now));
            m.record(now, total);
            progress.tick(now, total);
            watch.progressed(now);
        } else if watch.nothing(now) {
            let d: Vec<String> = s.qps.iter().map(TestQp::diag).collect();
            return Err(format!("server stalled: {}", d.join("; ")));
        }
        for (i, t) in s.qps.iter_mut().enumerate() {
            if t.posted - t.credit < period || inflight[i] >= CREDIT_SLOTS {
                continue;
            }
            let v = t.posted;
            let off = slot[i] * pt::CREDIT_LEN;
            t.exposed
                .write(off, &pt::encode_credit(v as u32))
                .map_err(e2s("credit"))?;
            let credit = t.exposed.sge(off, pt::CREDIT_LEN);
            t.qp.post_send(SendWr::write(v, credit, t.remote.vaddr, t.remote.rkey))
                .map_err(|e| format!("credit Write: {e} ({})", t.diag()))?;
            t.credit = v;
            inflight[i] += 1;
            slot[i] = (slot[i] + 1) % CREDIT_SLOTS;
        }
    }
    let end = Instant::now();
    let m = meter.unwrap_or_else(|| BwMeter::start(end));
    Ok(m.finish(end, total, size))
}

/// Latency from the post times of a ping-pong: half of each interval between two of our
/// posts (one round trip each), as perftest computes it.
pub(super) fn half_intervals(posts: &[Instant]) -> Vec<f64> {
    posts
        .windows(2)
        .map(|w| w[1].duration_since(w[0]).as_secs_f64() * 1e6 / 2.0)
        .collect()
}

/// A latency result from samples in microseconds (at least one needed). The iteration
/// count is the number of samples: `-n N` ping-pong iterations give N - 1 intervals
/// between posts, and that is what the statistics are made of.
pub(super) fn lat_result(size: usize, samples: &[f64]) -> Result<LatResult, String> {
    let stats = LatStats::from_samples(samples).ok_or("too few iterations for latency")?;
    Ok(LatResult {
        cpu: None,
        bytes: size,
        iterations: samples.len() as u64,
        stats,
        samples: None,
    })
}

/// Reaps send completions (the latency loops signal every request).
pub(super) fn reap(
    cq: &CqSet,
    wcs: &mut [Completion],
    side: &str,
) -> Result<(usize, bool), String> {
    let n = cq.poll(wcs);
    let mut recv = false;
    for c in &wcs[..n] {
        check_wc(c, side)?;
        recv |= c.opcode == WcOpcode::Recv;
    }
    Ok((n, recv))
}

/// The side's name in error messages.
pub(super) fn side_name(side: Side) -> &'static str {
    match side {
        Side::Client => "client",
        Side::Server => "server",
    }
}

/// write_lat, either side: iteration k writes the message with k (mod 256) in its last
/// octet into the peer's buffer, then waits for the peer's Write to put k into the last
/// octet of ours; perftest's server writes first.
pub(super) fn write_lat(
    cfg: &BenchConfig,
    s: &mut Session,
    side: Side,
    progress: &mut Progress,
) -> Result<LatResult, String> {
    let size = s.size;
    let last = size - 1;
    let first = pt::schedule(Test::WriteLat).server_starts == (side == Side::Server);
    let name = side_name(side);
    let mut wcs = vec![Completion::default(); 16];
    let mut posts = Vec::with_capacity(cfg.iters as usize);
    let t = &s.qps[0];
    let wait = |tag: u8, wcs: &mut [Completion]| -> Result<(), String> {
        let mut watch = StallWatch::new(Instant::now(), STALL);
        let mut spins = 0u32;
        loop {
            let mut b = [0u8];
            t.exposed.read(last, &mut b).map_err(e2s("read"))?;
            if b[0] == tag {
                return Ok(());
            }
            reap(&s.cq, wcs, name)?;
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(4096) && watch.nothing(Instant::now()) {
                return Err(format!("{name}: no Write with tag {tag}: {}", t.diag()));
            }
        }
    };
    for k in 1..=cfg.iters {
        let tag = k as u8;
        if !first {
            wait(tag, &mut wcs)?;
        }
        t.local.write(last, &[tag]).map_err(e2s("write tag"))?;
        posts.push(Instant::now());
        t.post_one(
            k,
            SendOp::Write {
                remote_addr: t.remote.vaddr,
                rkey: t.remote.rkey,
            },
            size,
        )?;
        if first {
            wait(tag, &mut wcs)?;
        }
        reap(&s.cq, &mut wcs, name)?;
        progress.tick(Instant::now(), k);
    }
    lat_result(size, &half_intervals(&posts))
}

/// send_lat, either side: the client Sends first and each side answers every Send it
/// receives with one of its own, `iters` each way.
pub(super) fn send_lat(
    cfg: &BenchConfig,
    s: &mut Session,
    side: Side,
    progress: &mut Progress,
) -> Result<LatResult, String> {
    let size = s.size;
    let name = side_name(side);
    let mut wcs = vec![Completion::default(); 16];
    let mut posts = Vec::with_capacity(cfg.iters as usize);
    let t = &s.qps[0];
    let recv_buf = t.recv.as_ref().ok_or("no receive buffer")?;
    let mut posted_recvs = u64::from(cfg.rx_depth).min(cfg.iters).max(1);
    let mut wait_recv = |wcs: &mut [Completion]| -> Result<(), String> {
        let mut watch = StallWatch::new(Instant::now(), STALL);
        let mut spins = 0u32;
        loop {
            let (_, got) = reap(&s.cq, wcs, name)?;
            if got {
                if posted_recvs < cfg.iters {
                    t.qp.post_recv(RecvWr::new(0, recv_buf.sge(0, size)))
                        .map_err(e2s("post_recv"))?;
                    posted_recvs += 1;
                }
                return Ok(());
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(4096) && watch.nothing(Instant::now()) {
                return Err(format!("{name}: no Send arrived: {}", t.diag()));
            }
        }
    };
    let send = SendOp::Send {
        solicited: false,
        invalidate: None,
    };
    for k in 1..=cfg.iters {
        if side == Side::Server {
            wait_recv(&mut wcs)?;
        }
        posts.push(Instant::now());
        t.post_one(k, send, size)?;
        if side == Side::Client {
            wait_recv(&mut wcs)?;
        }
        progress.tick(Instant::now(), k);
    }
    // The last Send's completion, so nothing is left on the queue.
    reap(&s.cq, &mut wcs, name)?;
    lat_result(size, &half_intervals(&posts))
}

/// read_lat as the client: one Read at a time, the full round trip each.
pub(super) fn read_lat(
    cfg: &BenchConfig,
    s: &mut Session,
    progress: &mut Progress,
) -> Result<LatResult, String> {
    let size = s.size;
    let mut wcs = vec![Completion::default(); 16];
    let mut samples = Vec::with_capacity(cfg.iters as usize);
    let t = &s.qps[0];
    for k in 1..=cfg.iters {
        let t0 = Instant::now();
        t.post_one(
            k,
            SendOp::Read {
                remote_addr: t.remote.vaddr,
                rkey: t.remote.rkey,
            },
            size,
        )?;
        let mut watch = StallWatch::new(t0, STALL);
        let mut spins = 0u32;
        let t1 = loop {
            let n = s.cq.poll(&mut wcs);
            let mut done = false;
            for c in &wcs[..n] {
                check_wc(c, "client")?;
                done |= c.opcode == WcOpcode::Read && c.wr_id == k;
            }
            if done {
                break Instant::now();
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(4096) && watch.nothing(Instant::now()) {
                return Err(format!("no Read response for iteration {k}: {}", t.diag()));
            }
        };
        samples.push(t1.duration_since(t0).as_secs_f64() * 1e6);
        progress.tick(t1, k);
    }
    lat_result(size, &samples)
}
