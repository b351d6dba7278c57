//! The server side of the softrnic benchmarks (the client's metadata in MPA private
//! data, not `-R`): it serves one client round after another, and trusts no client.
//!
//! - Every parameter a client sends is checked before anything is allocated: the QPs
//!   of the round ([`MAX_ROUND_QPS`], and the device's `max_qp`), the message size
//!   (`MAX_SIZE`), the receive depth (the device's `max_qp_wr`), the CQ the round needs
//!   (`max_cqe`, and what is left of `max_cq_entries`) and the memory it registers
//!   (what is left of `max_registered`; [`SERVER_MEMORY`] for the standalone server).
//!   A round that does not fit is rejected with the reason in the reject's private
//!   data, and the server goes on.
//! - A client has [`ServerOpts::setup`] after its first QP to open the rest of its round;
//!   a Request that belongs to no round in progress (another client's first QP) waits
//!   for the next round, anything else is rejected, and a round left incomplete is
//!   dropped (its QPs reset).
//! - A round whose QPs move nothing for [`ServerOpts::idle`] is dropped: a client
//!   that connects and then stays silent holds the server no longer than that.
//!
//! Whatever a client does ends its own round only; only a failure of the listener
//! itself ends the server.

use super::cqs::CqSet;
use super::meta::{FLAG_SHARED_BUFFERS, Meta};
use super::rdma::{
    CREDIT_CHECK, CREDIT_LEN, CREDIT_SLOTS, WAIT, Watch, credit_every, e2s, engines_line, next_tag,
    recv_wr, stats_line,
};
use super::stall::StallWatch;
use super::{MAX_SIZE, Test};
use softrnic_rnic::{
    Access, Completion, ConnRequest, Device, Listener, Mr, Qp, QpId, QpInit, SendOp, SendWr,
    WcOpcode, WcStatus,
};
use std::collections::HashMap;
use std::net::IpAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// QPs one round may have.
pub const MAX_ROUND_QPS: u16 = 256;
/// Octets the standalone server lets all its rounds register together (its device's
/// `max_registered`).
pub const SERVER_MEMORY: u64 = 2 << 30;
/// How long a client has, by default, after its round's first QP to open the others
/// (less than an initiator's MPA timer, so a round queued behind is served in time).
pub const ROUND_SETUP: Duration = Duration::from_secs(5);

/// One of the server's connections.
struct SEp {
    qp: Qp,
    id: QpId,
    /// The exposed buffer: Write target, Read source, receive buffer (shared by the
    /// round's QPs if the client asked for `--shared-buffers`).
    buf: Rc<Mr>,
    /// Source of the echo (write_lat, send_lat) or of the credit Writes (send_bw).
    src: Option<Mr>,
    /// The client's metadata (its exposed buffer).
    peer: Meta,
    received: u64,
    /// send_bw: receives completed in this poll batch, to post again.
    repost: u64,
    reported: u64,
    credit_outstanding: usize,
    next_slot: usize,
}

/// The server's own options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerOpts {
    /// Busy-poll the CQ in the one-sided tests.
    pub poll: bool,
    /// Print QP counters per round.
    pub verbose: bool,
    /// A round whose QPs move no octet for this long is dropped.
    pub idle: Duration,
    /// A client has this long after its round's first QP to open the others.
    pub setup: Duration,
}

impl Default for ServerOpts {
    fn default() -> Self {
        ServerOpts {
            poll: false,
            verbose: false,
            idle: Duration::from_secs(30),
            setup: ROUND_SETUP,
        }
    }
}

/// Why a round ended early.
#[derive(Debug)]
enum RoundError {
    /// The client's doing (or not enough room for what it asked): its round is over,
    /// the server goes on.
    Client(String),
    /// The listener failed: the server cannot go on.
    Server(String),
}

impl From<String> for RoundError {
    fn from(s: String) -> Self {
        RoundError::Client(s)
    }
}

/// Serves rounds until the client's last one.
pub fn serve(dev: &Device, listener: &Listener, opts: ServerOpts) -> Result<(), String> {
    let mut next = None;
    loop {
        match serve_round(dev, listener, opts, &mut next) {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(RoundError::Client(e)) => eprintln!("softrnic server: {e}"),
            Err(RoundError::Server(e)) => return Err(e),
        }
    }
}

/// The next Request with benchmark metadata, waiting at most `timeout` (`None`:
/// forever). Anything else is rejected and reported; `Ok(None)` then, or on timeout.
fn accept_one(
    listener: &Listener,
    timeout: Option<Duration>,
) -> Result<Option<(ConnRequest, Meta)>, RoundError> {
    let r = match timeout {
        None => listener.accept().map(Some),
        Some(t) => listener.accept_timeout(t),
    };
    let Some(req) = r.map_err(|e| RoundError::Server(format!("accept: {e}")))? else {
        return Ok(None);
    };
    match Meta::decode(req.private_data()) {
        Ok(m) => Ok(Some((req, m))),
        Err(e) => {
            let peer = req.peer_addr();
            let _ = req.reject(b"not a softrnic benchmark");
            eprintln!("softrnic server: {peer}: {e}");
            Ok(None)
        }
    }
}

/// What a round takes, from the client's metadata, checked against the device's
/// limits and what its objects already hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Shape {
    qps: usize,
    size: usize,
    rx_depth: usize,
    cq_depth: usize,
    sq_depth: usize,
    rq_depth: usize,
}

fn shape(dev: &Device, m: &Meta) -> Result<Shape, String> {
    let (attr, used) = (dev.query(), dev.usage());
    let q = usize::from(m.num_qps);
    if q == 0 || m.num_qps > MAX_ROUND_QPS || used.qps + q > attr.max_qp as usize {
        return Err(format!("{q} QPs (at most {MAX_ROUND_QPS})"));
    }
    if m.size == 0 || m.size > MAX_SIZE as u64 {
        return Err(format!("message size {} (1 to {MAX_SIZE})", m.size));
    }
    if m.depth as usize > attr.max_qp_wr {
        return Err(format!(
            "receive depth {} (at most {})",
            m.depth, attr.max_qp_wr
        ));
    }
    let size = m.size as usize;
    let rx_depth = (m.depth as usize).max(2);
    let (cq_depth, sq_depth, rq_depth, src) = match m.test {
        Test::SendBw => (
            q * (rx_depth + CREDIT_SLOTS) + 64,
            CREDIT_SLOTS + 2,
            rx_depth,
            CREDIT_LEN * CREDIT_SLOTS,
        ),
        Test::WriteLat | Test::SendLat => (64, 16, 16, size),
        _ => (64, 1, 1, 0),
    };
    if cq_depth > attr.max_cqe || used.cq_entries + cq_depth as u64 > attr.max_cq_entries {
        return Err(format!("a CQ of {cq_depth} entries"));
    }
    let memory = (q as u64) * (size + src) as u64;
    if used.registered + memory > attr.max_registered {
        return Err(format!("{memory} octets of buffers"));
    }
    Ok(Shape {
        qps: q,
        size,
        rx_depth,
        cq_depth,
        sq_depth,
        rq_depth,
    })
}

/// Whether the Request `m` from `peer` is QP `i` of the round `first` opened from
/// `ip`.
fn belongs(m: &Meta, peer: IpAddr, first: &Meta, ip: IpAddr, i: usize) -> bool {
    peer == ip
        && m.test == first.test
        && m.size == first.size
        && m.num_qps == first.num_qps
        && usize::from(m.qp_index) == i
}

/// One round: accept the client's QPs, serve, wait for the disconnects. Returns whether
/// it was the last round. `next` holds the first Request of another client's round that
/// arrived while this one was being set up; it opens the next round.
fn serve_round(
    dev: &Device,
    listener: &Listener,
    opts: ServerOpts,
    next: &mut Option<(ConnRequest, Meta)>,
) -> Result<bool, RoundError> {
    let (first, meta) = match next.take() {
        Some(x) => x,
        None => match accept_one(listener, None)? {
            Some(x) => x,
            None => return Ok(false),
        },
    };
    let peer = first.peer_addr();
    if meta.qp_index != 0 {
        let _ = first.reject(b"no round in progress");
        return Err(format!("{peer}: QP {} of no round in progress", meta.qp_index).into());
    }
    let sh = match shape(dev, &meta) {
        Ok(s) => s,
        Err(why) => {
            let _ = first.reject(format!("bad benchmark parameters: {why}").as_bytes());
            return Err(format!("{peer}: bad benchmark parameters: {why}").into());
        }
    };
    let test = meta.test;
    let (q, size, rx_depth) = (sh.qps, sh.size, sh.rx_depth);
    let (sq_depth, rq_depth) = (sh.sq_depth, sh.rq_depth);
    let pd = dev.alloc_pd();
    // The tests -e allows (a client's flag on another is ignored: it polls).
    let events = meta.events() && !matches!(test, Test::WriteLat | Test::SendBw);
    let cq = CqSet::with_events(dev, q, sh.cq_depth, events)?;
    let setup_deadline = Instant::now() + opts.setup;
    let mut eps: Vec<SEp> = Vec::with_capacity(q);
    let mut pending = Some((first, meta));
    for i in 0..q {
        let (req, m) = loop {
            if let Some(x) = pending.take() {
                break x;
            }
            let left = setup_deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                // Dropping the QPs accepted so far resets their connections.
                return Err(format!(
                    "{peer}: opened {i} of the {q} QPs of its round in {:?}; round dropped",
                    opts.setup
                )
                .into());
            }
            let Some((req, m)) = accept_one(listener, Some(left))? else {
                continue;
            };
            if belongs(&m, req.peer_addr().ip(), &meta, peer.ip(), i) {
                break (req, m);
            }
            // Another client's first QP opens the next round; anything else is refused.
            if m.qp_index == 0 && next.is_none() {
                *next = Some((req, m));
            } else {
                let _ = req.reject(b"server busy with another round");
            }
        };
        let qp = dev
            .create_qp(&pd, QpInit::new(cq.for_qp(i), sq_depth, rq_depth))
            .map_err(e2s("create QP"))?;
        let buf = match eps.first() {
            Some(first) if m.flags & FLAG_SHARED_BUFFERS != 0 => Rc::clone(&first.buf),
            _ => {
                let b = pd
                    .alloc_mr(
                        size,
                        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
                    )
                    .map_err(e2s("register buffer"))?;
                b.fill(0, size, 0x3c).map_err(e2s("fill"))?;
                Rc::new(b)
            }
        };
        if test == Test::WriteLat {
            buf.write(size - 1, &[0]).map_err(e2s("fill"))?;
        }
        let src = match test {
            Test::WriteLat | Test::SendLat => Some(size),
            Test::SendBw => Some(CREDIT_LEN * CREDIT_SLOTS),
            _ => None,
        }
        .map(|len| pd.alloc_mr(len, Access::LOCAL_WRITE))
        .transpose()
        .map_err(e2s("register buffer"))?;
        if matches!(test, Test::SendBw | Test::SendLat) {
            for _ in 0..rq_depth {
                qp.post_recv(recv_wr(&buf, size))
                    .map_err(e2s("post_recv"))?;
            }
        }
        let reply = Meta {
            addr: buf.addr(),
            rkey: buf.rkey(),
            len: buf.len() as u64,
            ..m
        };
        req.accept_echoing_markers(&qp, &reply.encode())
            .map_err(e2s("accept"))?;
        let id = qp.id();
        eps.push(SEp {
            qp,
            id,
            buf,
            src,
            peer: m,
            received: 0,
            repost: 0,
            reported: 0,
            credit_outstanding: 0,
            next_slot: 0,
        });
    }
    let mut watch = Watch::new(eps.iter().map(|e| e.id).collect());
    // What the server saw arrive, counted here (echo tests: the messages it answered).
    let mut answered = 0u64;
    let qps: Vec<&Qp> = eps.iter().map(|e| &e.qp).collect();
    let mut idle = Idle::new(opts.idle, &qps);
    drop(qps);
    let r = match test {
        Test::WriteBw | Test::ReadBw | Test::ReadLat => {
            passive(dev, &cq, &eps, &mut watch, &mut idle, opts.poll)
        }
        Test::SendBw => send_bw_server(dev, &cq, &mut eps, &mut watch, &mut idle, rx_depth, size),
        Test::WriteLat | Test::SendLat => echo_server(
            dev,
            &cq,
            &mut eps[0],
            &mut watch,
            &mut idle,
            test,
            size,
            &mut answered,
        ),
    };
    // The client disconnects when it is done; the QPs are gone once our side closed too.
    watch.wait(dev, Some(Duration::from_secs(5)));
    if opts.verbose {
        // Messages counted on this side, not taken from the client's parameters.
        let msgs = match test {
            // The server has no count of the Reads it served: counters only.
            Test::ReadBw | Test::ReadLat => 0,
            Test::WriteBw => {
                let placed: u64 = eps
                    .iter()
                    .map(|e| {
                        let st = e.qp.stats();
                        st.rx_direct_bytes + st.rx_copied_bytes
                    })
                    .sum();
                placed / size as u64
            }
            Test::SendBw => eps.iter().map(|e| e.received).sum(),
            Test::WriteLat | Test::SendLat => answered,
        };
        eprintln!(
            "[{} {} B server] {}, {}",
            test.name(),
            size,
            stats_line(eps.iter().map(|e| e.qp.stats()), msgs),
            engines_line(dev)
        );
    }
    for p in &watch.problems {
        eprintln!("softrnic server: {p}");
    }
    drop(eps);
    r.map(|()| meta.is_last())
        .map_err(|e| RoundError::Client(format!("{peer}: {e}")))
}

/// Watches a round's QPs for traffic: the octets they placed and the FPDUs they sent.
/// The idle time is counted over its checks, each gap at most [`IDLE_GAP_CAP`], so a
/// server thread that waited seconds for a CPU does not drop a live round
/// (`stall.rs`).
struct Idle {
    limit: Duration,
    moved: u64,
    since: StallWatch,
}

/// The most one gap between two idle checks counts: the checks come after a sleep of
/// at most a second, or after 256-1024 polls.
const IDLE_GAP_CAP: Duration = Duration::from_secs(2);

impl Idle {
    fn new(limit: Duration, qps: &[&Qp]) -> Idle {
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
    fn check<'a>(&mut self, qps: impl Iterator<Item = &'a Qp>) -> Result<(), String> {
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

/// The passive side of one-sided tests: the engine threads serve the peer; with
/// `server_poll`, this thread busy-polls the CQ as well (which drives the sockets).
fn passive(
    dev: &Device,
    cq: &CqSet,
    eps: &[SEp],
    watch: &mut Watch,
    idle: &mut Idle,
    server_poll: bool,
) -> Result<(), String> {
    let mut wcs = vec![Completion::default(); 16];
    let mut spins = 0u32;
    loop {
        if server_poll {
            cq.poll(&mut wcs);
            spins = spins.wrapping_add(1);
            if !spins.is_multiple_of(1024) {
                continue;
            }
            if watch.check(dev) {
                return Ok(());
            }
        } else if watch.wait(dev, Some(Duration::from_secs(1))) {
            return Ok(());
        }
        idle.check(eps.iter().map(|e| &e.qp))?;
    }
}

fn send_bw_server(
    dev: &Device,
    cq: &CqSet,
    eps: &mut [SEp],
    watch: &mut Watch,
    idle: &mut Idle,
    rx_depth: usize,
    size: usize,
) -> Result<(), String> {
    let every = credit_every(rx_depth);
    let mut wcs = vec![Completion::default(); 64];
    // A completion per message: each finds its QP in one look-up.
    let index: HashMap<QpId, usize> = eps.iter().enumerate().map(|(i, e)| (e.id, i)).collect();
    let mut empty = 0u32;
    let mut error = None;
    // Completions come in runs of one QP: the last one found is tried first.
    let mut last = 0;
    loop {
        let n = cq.poll(&mut wcs);
        for c in &wcs[..n] {
            if eps.get(last).is_none_or(|e| e.id != c.qp) {
                let Some(&i) = index.get(&c.qp) else {
                    continue;
                };
                last = i;
            }
            let Some(ep) = eps.get_mut(last) else {
                continue;
            };
            match (c.opcode, c.status) {
                (WcOpcode::Recv, WcStatus::Success) => {
                    ep.received += 1;
                    ep.repost += 1;
                }
                (WcOpcode::Write, _) => ep.credit_outstanding -= 1,
                (_, WcStatus::WrFlushError) => {}
                (op, st) => {
                    error.get_or_insert(format!("server: {op:?} completed with {st:?}"));
                }
            }
        }
        for ep in eps.iter_mut() {
            if ep.repost > 0 {
                // The batch's receives go back in one post (one lock of the QP).
                let wr = recv_wr(&ep.buf, size);
                // Fails only once the QP is closing; the client is done then.
                let n = usize::try_from(ep.repost).unwrap_or(usize::MAX);
                let _ = ep.qp.post_recv_batch(std::iter::repeat_n(&wr, n));
                ep.repost = 0;
            }
            if ep.received - ep.reported >= every && ep.credit_outstanding < CREDIT_SLOTS {
                let Some(src) = &ep.src else { continue };
                let off = ep.next_slot * CREDIT_LEN;
                let v = ep.received;
                let mut word = [0u8; CREDIT_LEN];
                word[..8].copy_from_slice(&v.to_be_bytes());
                word[8..].copy_from_slice(&(v ^ CREDIT_CHECK).to_be_bytes());
                src.write(off, &word).map_err(e2s("credit"))?;
                let credit = src.sge(off, CREDIT_LEN);
                let posted = ep
                    .qp
                    .post_send(SendWr::write(v, credit, ep.peer.addr, ep.peer.rkey));
                if posted.is_ok() {
                    ep.credit_outstanding += 1;
                    ep.next_slot = (ep.next_slot + 1) % CREDIT_SLOTS;
                    ep.reported = v;
                }
            }
        }
        if n == 0 {
            empty = empty.wrapping_add(1);
            if empty.is_multiple_of(256) {
                if watch.check(dev) {
                    break;
                }
                idle.check(eps.iter().map(|e| &e.qp))?;
            }
        }
    }
    error.map_or(Ok(()), Err)
}

/// write_lat and send_lat: answer each message in kind.
#[allow(clippy::too_many_arguments)]
fn echo_server(
    dev: &Device,
    cq: &CqSet,
    ep: &mut SEp,
    watch: &mut Watch,
    idle: &mut Idle,
    test: Test,
    size: usize,
    answered: &mut u64,
) -> Result<(), String> {
    let mut wcs = vec![Completion::default(); 16];
    let last_octet = size - 1;
    let mut expect = 1u8;
    let mut spins = 0u32;
    let mut error = None;
    let Some(src) = &ep.src else {
        return Err("no source buffer".into());
    };
    let write = SendOp::Write {
        remote_addr: ep.peer.addr,
        rkey: ep.peer.rkey,
    };
    let send = SendOp::Send {
        solicited: false,
        invalidate: None,
    };
    loop {
        let n = cq.next(&mut wcs, WAIT);
        let mut reply = false;
        for c in &wcs[..n] {
            match (c.opcode, c.status) {
                (WcOpcode::Recv, WcStatus::Success) => {
                    reply = true;
                    let _ = ep.qp.post_recv(recv_wr(&ep.buf, size));
                }
                (_, WcStatus::Success | WcStatus::WrFlushError) => {}
                (op, st) => {
                    error.get_or_insert(format!("server: {op:?} completed with {st:?}"));
                }
            }
        }
        if test == Test::WriteLat {
            let mut b = [0u8];
            if ep.buf.read(last_octet, &mut b).is_ok() && b[0] == expect {
                src.write(last_octet, &[expect]).map_err(e2s("write tag"))?;
                expect = next_tag(expect);
                reply = true;
            }
        }
        if reply {
            *answered += 1;
            let op = if test == Test::WriteLat { write } else { send };
            let _ = ep.qp.post_send(SendWr::new(0, op, src.sge(0, size)));
            continue;
        }
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(1024) || cq.sleeps() {
            if watch.check(dev) {
                break;
            }
            idle.check(std::iter::once(&ep.qp))?;
        }
    }
    error.map_or(Ok(()), Err)
}
