//! The softrnic side of the benchmarks: the client's measuring loops and the server's
//! part, on the public verbs API.
//!
//! - write_bw / read_bw: the client keeps `tx-depth` RDMA Writes (Reads) of the size
//!   outstanding per QP into (from) the server's buffer, signaling one in `cq-mod`; the
//!   server's program does nothing (its engine threads serve the peer), unless
//!   `--server-poll` has its thread busy-poll the CQ.
//! - send_bw: the server keeps its receive queue full (a repost per completion) and
//!   returns credits: every eighth of its receive depth it RDMA-Writes the count of
//!   receives reposted into a small buffer the client exposes, and the client never has
//!   more Sends beyond that count than the receive depth. On iWARP a Send that finds no
//!   receive is fatal, and TCP lets a sender run arbitrarily far ahead of the receiving
//!   program, so a benchmark without credits would fail at random.
//! - write_bw and send_bw end with a 1-octet RDMA Read: its response comes only after
//!   the server has placed everything before it, so the clock stops when the data is
//!   there, not at the last local completion (a Write or Send completes once its FPDUs
//!   are in the send path: copied into the connection's transmit buffer, or written to
//!   the socket, long before they arrive). Their peak bandwidth comes from delivery
//!   probes, the same 1-octet Read every [`BwMeter::WINDOW`] ([`Prober`]).
//! - write_lat: ping-pong of RDMA Writes: each side polls the last octet of its own
//!   buffer (`Mr::read`) until the peer's Write has changed it to the iteration's tag,
//!   polling its CQ in between (in hybrid progress mode that is what drives the socket).
//! - send_lat: ping-pong of Sends. read_lat: one Read at a time, full round trip.

use super::cqs::CqSet;
use super::meta::{FLAG_EVENTS, FLAG_LAST, FLAG_SHARED_BUFFERS, Meta};
use super::stats::{BwMeter, BwResult, CpuClock, LatResult, LatStats, Progress};
use super::{BenchConfig, Measured, Mode, Test};
use softrnic_rnic::{
    Access, AsyncEvent, Completion, Device, Mr, Qp, QpId, QpInit, QpStats, RecvWr, SendOp, SendWr,
    Sge, WcOpcode, WcStatus,
};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// A client loop that sees nothing happen for this long gives up.
const STALL: Duration = Duration::from_secs(10);
/// With `-e`, the longest sleep on completion events before a loop looks around.
pub(super) const WAIT: Duration = Duration::from_millis(100);
/// Credit buffer: the count of reposted receives, and the count XOR [`CREDIT_CHECK`], so
/// a torn read is recognised.
pub(super) const CREDIT_LEN: usize = 16;
pub(super) const CREDIT_CHECK: u64 = 0xa5a5_5a5a_c3c3_3c3c;
/// Credit Writes the server may have outstanding per QP (one source slot each).
pub(super) const CREDIT_SLOTS: usize = 32;
/// wr_id of the closing Read.
pub(super) const BARRIER_ID: u64 = u64::MAX;
/// wr_id of the delivery probes.
pub(super) const PROBE_ID: u64 = u64::MAX - 1;

pub(super) fn e2s(what: &str) -> impl Fn(softrnic_rnic::Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// Tracks the disconnection of a set of QPs from the device's asynchronous events.
pub(super) struct Watch {
    ids: Vec<QpId>,
    gone: Vec<bool>,
    pub(super) problems: Vec<String>,
}

impl Watch {
    pub(super) fn new(ids: Vec<QpId>) -> Watch {
        let gone = vec![false; ids.len()];
        Watch {
            ids,
            gone,
            problems: Vec::new(),
        }
    }

    fn note(&mut self, e: AsyncEvent) {
        let qp = match &e {
            AsyncEvent::Disconnected { qp } => *qp,
            AsyncEvent::ConnectionLost { qp, error } => {
                self.problems
                    .push(format!("QP {}: connection lost ({error:?})", qp.0));
                *qp
            }
            AsyncEvent::QpFatal { qp, cause, remote } => {
                self.problems.push(format!(
                    "QP {}: Terminate {} ({cause:?})",
                    qp.0,
                    if *remote { "received" } else { "sent" }
                ));
                *qp
            }
            _ => return,
        };
        if let Some(i) = self.ids.iter().position(|&x| x == qp) {
            self.gone[i] = true;
        }
    }

    fn all_gone(&self) -> bool {
        self.gone.iter().all(|&g| g)
    }

    /// Takes the queued events; true once every QP is gone.
    pub(super) fn check(&mut self, dev: &Device) -> bool {
        while let Some(e) = dev.poll_event() {
            self.note(e);
        }
        self.all_gone()
    }

    /// Blocks until every QP is gone, or `timeout` (None: forever) passes.
    pub(super) fn wait(&mut self, dev: &Device, timeout: Option<Duration>) -> bool {
        let deadline = timeout.map(|t| Instant::now() + t);
        while !self.check(dev) {
            let left = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(l) if !l.is_zero() => l,
                    _ => return false,
                },
                None => Duration::from_secs(1),
            };
            if let Some(e) = dev.wait_event(left.min(Duration::from_secs(1))) {
                self.note(e);
            }
        }
        true
    }
}

/// An error naming the work request unless the completion is a success.
/// The verb a bandwidth test repeats against the peer's buffer.
pub(super) fn bw_op(test: Test, remote_addr: u64, rkey: u32) -> SendOp {
    match test {
        Test::WriteBw => SendOp::Write { remote_addr, rkey },
        Test::ReadBw => SendOp::Read { remote_addr, rkey },
        _ => SendOp::Send {
            solicited: false,
            invalidate: None,
        },
    }
}

/// Posts `room` copies of `op` on `sge` in one batch, numbered from `first`;
/// `signaled(number)` says which of them complete.
pub(super) fn post_window(
    qp: &Qp,
    batch: &mut Vec<SendWr>,
    op: SendOp,
    sge: Sge,
    first: u64,
    room: u64,
    signaled: impl Fn(u64) -> bool,
) -> Result<(), softrnic_rnic::Error> {
    batch.extend((first..first + room).map(|idx| {
        let wr = SendWr::new(idx, op, sge);
        if signaled(idx) { wr } else { wr.unsignaled() }
    }));
    let posted = qp.post_send_batch(batch.iter());
    batch.clear();
    posted
}

pub(super) fn check_wc(c: &Completion, side: &str) -> Result<(), String> {
    if c.status == WcStatus::Success {
        Ok(())
    } else {
        Err(format!(
            "{side}: {:?} work request {} on QP {} completed with {:?}",
            c.opcode, c.wr_id, c.qp.0, c.status
        ))
    }
}

pub(super) fn recv_wr(buf: &Mr, size: usize) -> RecvWr {
    RecvWr::new(0, buf.sge(0, size))
}

/// One of the client's connections.
struct Ep {
    qp: Qp,
    id: QpId,
    /// Source (Write, Send) or sink (Read, and the closing Read) of the size: its own,
    /// or with `--shared-buffers` the one all QPs share.
    local: Rc<Mr>,
    /// What the client exposes: the landing buffer of write_lat, the credit word of send_bw.
    exposed: Option<Mr>,
    /// send_lat's receive buffer.
    recv: Option<Mr>,
    /// The server's buffer.
    remote: Meta,
    posted: u64,
    completed: u64,
    credit: u64,
}

impl Ep {
    /// Reads the server's latest credit (send_bw).
    fn refresh_credit(&mut self) {
        let Some(m) = &self.exposed else { return };
        let mut b = [0u8; CREDIT_LEN];
        if m.read(0, &mut b).is_err() {
            return;
        }
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[..8]);
        let v = u64::from_be_bytes(a);
        a.copy_from_slice(&b[8..]);
        if v ^ CREDIT_CHECK == u64::from_be_bytes(a) && v > self.credit {
            self.credit = v;
        }
    }

    fn diag(&self) -> String {
        format!(
            "QP {} state {:?}, posted {}, completed {}, credit {}, {:?}",
            self.id.0,
            self.qp.state(),
            self.posted,
            self.completed,
            self.credit,
            self.qp.stats()
        )
    }
}

/// Runs one size as the client: connects `-q` QPs (the metadata goes in the private data),
/// measures, disconnects.
pub fn client_round(
    cfg: &BenchConfig,
    dev: &Device,
    addr: SocketAddr,
    size: usize,
    last: bool,
) -> Result<Measured, String> {
    let test = cfg.test;
    let q = usize::from(cfg.qps);
    let pd = dev.alloc_pd();
    let bw = test.is_bw();
    let cq_depth = if bw {
        q * (cfg.tx_depth as usize + 2) + 16
    } else {
        64
    };
    let cq = CqSet::with_events(dev, q, cq_depth, cfg.events)?;
    let sq_depth = if bw { cfg.tx_depth as usize + 2 } else { 16 };
    let rq_depth = if test == Test::SendLat { 16 } else { 1 };
    let mut eps: Vec<Ep> = Vec::with_capacity(q);
    for i in 0..q {
        let qp = dev
            .create_qp(&pd, QpInit::new(cq.for_qp(i), sq_depth, rq_depth))
            .map_err(e2s("create QP"))?;
        let local = match eps.first() {
            Some(first) if cfg.shared_buffers => Rc::clone(&first.local),
            _ => {
                let m = pd
                    .alloc_mr(size, Access::LOCAL_WRITE)
                    .map_err(e2s("register buffer"))?;
                m.fill(0, size, 0x5a).map_err(e2s("fill"))?;
                Rc::new(m)
            }
        };
        let exposed = match test {
            Test::WriteLat => Some(size),
            Test::SendBw => Some(CREDIT_LEN),
            _ => None,
        }
        .map(|len| pd.alloc_mr(len, Access::LOCAL_WRITE | Access::REMOTE_WRITE))
        .transpose()
        .map_err(e2s("register buffer"))?;
        let recv = if test == Test::SendLat {
            let m = pd
                .alloc_mr(size, Access::LOCAL_WRITE)
                .map_err(e2s("register buffer"))?;
            for _ in 0..rq_depth {
                qp.post_recv(recv_wr(&m, size)).map_err(e2s("post_recv"))?;
            }
            Some(m)
        } else {
            None
        };
        let meta = Meta {
            test,
            flags: if last { FLAG_LAST } else { 0 }
                | if cfg.events { FLAG_EVENTS } else { 0 }
                | if cfg.shared_buffers {
                    FLAG_SHARED_BUFFERS
                } else {
                    0
                },
            qp_index: i as u16,
            num_qps: cfg.qps,
            size: size as u64,
            iters: if cfg.duration.is_some() {
                0
            } else if bw {
                cfg.iters
            } else {
                cfg.iters + cfg.warmup
            },
            duration_ms: cfg.duration.map_or(0, |d| d.as_millis() as u32),
            depth: cfg.rx_depth,
            addr: exposed.as_ref().map_or(0, Mr::addr),
            rkey: exposed.as_ref().map_or(0, Mr::rkey),
            len: exposed.as_ref().map_or(0, |m| m.len() as u64),
        };
        let conn = dev
            .connect(addr, &qp, &meta.encode())
            .map_err(e2s("connect"))?;
        let remote = Meta::decode(conn.peer_private_data()).map_err(|e| e.to_string())?;
        if remote.len < size as u64 {
            return Err(format!(
                "server exposes {} octets, the size is {size}",
                remote.len
            ));
        }
        let id = qp.id();
        eps.push(Ep {
            qp,
            id,
            local,
            exposed,
            recv,
            remote,
            posted: 0,
            completed: 0,
            credit: 0,
        });
    }
    let label = format!("{} {} B softrnic", test.name(), size);
    let mut progress = Progress::new(label, size, bw, cfg.show_progress);
    let cpu = CpuClock::start(cfg.mode == Mode::Loopback);
    let result = match test {
        Test::WriteBw | Test::ReadBw | Test::SendBw => {
            bw_client(cfg, size, &cq, &mut eps, &mut progress).map(Measured::Bw)
        }
        _ => lat_client(cfg, size, &cq, &mut eps[0], &mut progress).map(Measured::Lat),
    }
    .map(|m| m.with_cpu(&cpu, if bw { 0 } else { cfg.warmup }));
    progress.finish();
    if cfg.verbose {
        let msgs = match &result {
            Ok(m) => m.iterations() + if bw { 0 } else { cfg.warmup },
            Err(_) => 0,
        };
        eprintln!(
            "[{} {} B client] {}, {}",
            test.name(),
            size,
            stats_line(eps.iter().map(|e| e.qp.stats()), msgs),
            engines_line(dev)
        );
    }
    // Graceful close, then wait for both directions to finish before the buffers go.
    let mut watch = Watch::new(eps.iter().map(|e| e.id).collect());
    for ep in &eps {
        let _ = ep.qp.disconnect();
    }
    watch.wait(dev, Some(Duration::from_secs(5)));
    drop(eps);
    result
}

fn bw_client(
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
    let mut total: u64 = 0;
    let mut last_activity = start;
    // Write and Send: delivery is confirmed by Reads (see the module notes). Read: a
    // completion means the data has landed here.
    let probing = test != Test::ReadBw;
    let mut prober = Prober::new(start);
    // Completions find their QP in one look-up, whatever the number of QPs.
    let index: HashMap<QpId, usize> = eps.iter().enumerate().map(|(i, e)| (e.id, i)).collect();
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
                |idx| (idx + 1) % cq_mod == 0 || Some(idx + 1) == last,
            )
            .map_err(|e| format!("post_send: {e} ({})", ep.diag()))?;
            ep.posted += room;
        }
        if probing && prober.due(Instant::now()) {
            let posted: u64 = eps.iter().map(|e| e.posted).sum();
            prober.maybe_post(Instant::now(), posted, &targets(eps))?;
        }
        let n = cq.next(&mut wcs, BwMeter::WINDOW);
        let now = Instant::now();
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
            last_activity = now;
        } else if now.duration_since(last_activity) > STALL {
            let d: Vec<String> = eps.iter().map(Ep::diag).collect();
            return Err(format!("client stalled: {}", d.join("; ")));
        }
        if let Some(d) = deadline
            && now >= d
        {
            stop = true;
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
    Ok(meter.finish(end, total, size))
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

/// Where a QP's delivery probes and closing Read go: a 1-octet local sink and the peer's
/// buffer.
pub(super) struct ReadTarget<'a> {
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
pub(super) struct Prober {
    round: Option<Round>,
    /// Post time and operation count of the last confirmed round (the start at first).
    last: (Instant, u64),
}

impl Prober {
    /// No probe yet; the run started at `start`.
    pub(super) fn new(start: Instant) -> Prober {
        Prober {
            round: None,
            last: (start, 0),
        }
    }

    /// Whether a round is due: none in flight, and the last one posted a window ago.
    pub(super) fn due(&self, now: Instant) -> bool {
        self.round.is_none() && now.duration_since(self.last.0) >= BwMeter::WINDOW
    }

    /// Posts a round if one is due ([`Prober::due`]); `ops` is the count of messages
    /// posted so far, on all QPs.
    pub(super) fn maybe_post(
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
    pub(super) fn completion(&mut self, c: &Completion, now: Instant, meter: &mut BwMeter) -> bool {
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
    pub(super) fn closed(&self, end: Instant, ops: u64, meter: &mut BwMeter) {
        meter.confirmed(self.last.0, end, ops - self.last.1);
    }
}

/// The closing Read: a 1-octet Read per QP, answered only after the peer has placed all
/// before it. Returns the moment the last of them completed: the end of the run.
pub(super) fn closing_read(
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
    let mut last = Instant::now();
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
            last = now;
        } else if now.duration_since(last) > stall {
            return Err(format!("closing Read stalled: {}", diag()));
        }
    }
}

pub(super) fn next_tag(t: u8) -> u8 {
    if t == 255 { 1 } else { t + 1 }
}

fn lat_client(
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
            if (spins.is_multiple_of(4096) || cq.sleeps()) && t0.elapsed() > STALL {
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
    let stats = LatStats::from_samples(&samples).ok_or("no samples")?;
    Ok(LatResult {
        bytes: size,
        iterations: samples.len() as u64,
        stats,
        cpu: None,
    })
}

/// The I/O counters of some QPs, summed, as one line; per message too when `msgs` is
/// known (non-zero).
/// Per engine: the QPs it serves, the readiness events it handled so far, and the CPU
/// time its thread used so far (user + system, ms), which, unlike a bandwidth, does not
/// depend on what else the machine runs: with `--engine-spin-us 0` it is the engine's
/// work.
pub(super) fn engines_line(dev: &Device) -> String {
    let e = dev.engines();
    let qps: Vec<usize> = e.iter().map(|e| e.qps).collect();
    let events: Vec<u64> = e.iter().map(|e| e.events).collect();
    let cpu: Vec<u64> = e.iter().map(|e| thread_cpu_ms(e.tid)).collect();
    format!("engine QPs {qps:?}, engine events {events:?}, engine CPU ms {cpu:?}")
}

/// User + system time of one of this process's threads, ms (0 if unknown): fields 14
/// and 15 of `/proc/self/task/<tid>/stat`, in USER_HZ (100 per second on Linux).
fn thread_cpu_ms(tid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap_or_default();
    // The command name may hold spaces: fields are counted after its closing parenthesis.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
    let tick = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    (tick(11) + tick(12)) * 10
}

pub(super) fn stats_line(stats: impl Iterator<Item = QpStats>, msgs: u64) -> String {
    let mut t = QpStats::default();
    for s in stats {
        t.rx_direct_bytes += s.rx_direct_bytes;
        t.rx_copied_bytes += s.rx_copied_bytes;
        t.rx_syscalls += s.rx_syscalls;
        t.tx_syscalls += s.tx_syscalls;
        t.tx_fpdus += s.tx_fpdus;
    }
    let c = |name: &str, x: u64| {
        if msgs > 0 {
            format!("{name} {x} ({:.2}/msg)", x as f64 / msgs as f64)
        } else {
            format!("{name} {x}")
        }
    };
    format!(
        "{msgs} msgs: {}, {}, {}, rx_direct_bytes {}, rx_copied_bytes {}",
        c("tx_fpdus", t.tx_fpdus),
        c("tx_syscalls", t.tx_syscalls),
        c("rx_syscalls", t.rx_syscalls),
        t.rx_direct_bytes,
        t.rx_copied_bytes
    )
}

#[cfg(test)]
mod tests {
    use super::*;

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
