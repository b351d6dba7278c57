//! `-R`: the benchmarks as perftest runs them with RDMA CM, so that softrnic and Linux
//! perftest (`ib_write_bw -R` ...) can be each other's client or server.
//!
//! perftest opens two kinds of connection to the same port: first a control connection
//! on which the sides exchange small Sends (versions, system data, MTU, QP descriptions,
//! barriers, reports; [`super::perftest`] has their formats and order), then one
//! connection per test QP. The MPA private data is empty; the test QPs ask for IRD = ORD
//! = 128 in the read tests and 0 otherwise, the control connection for 0.
//!
//! Unlike softrnic's own mode, the client's parameters do not travel to the server:
//! both sides must be started with the same flags (`-s`, `-n`, `-q`, `-r` ...), as with
//! perftest. One size per run; no `-D`, `-a` or baseline.

use super::cqs::CqSet;
use super::perftest::{self as pt, BwReport, Dest, Step};
use super::rdma::{Prober, ReadTarget, Watch, bw_op, check_wc, closing_read, post_window};
use super::report::{Reporter, bw_unit};
use super::stats::{BwMeter, BwResult, LatResult, LatStats, MB, Progress};
use super::{BenchConfig, Clock, Measured, Mode, ResultRow, Test, resolve_addr};
use softrnic_rnic::{
    Access, Completion, Cq, Device, Error, Listener, MpaConfig, Mr, Pd, Qp, QpId, QpInit, RecvWr,
    SendOp, SendWr, WcOpcode, WcStatus,
};
use std::collections::VecDeque;
use std::io::Write;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// The longest wait for a control message: the peer may be running a long measurement
/// (and the rig's guest runs under emulation).
const CTRL_TIMEOUT: Duration = Duration::from_secs(600);
/// A measuring loop that sees no progress for this long gives up.
const STALL: Duration = Duration::from_secs(60);
/// How long a client keeps retrying a refused connection: perftest's server only starts
/// listening for test QPs after it has answered the barrier before them.
const CONNECT_RETRY: Duration = Duration::from_secs(60);
/// The MPA exchange may take long with a peer under emulation.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(60);
/// Receives kept posted on the control connection (perftest keeps one; a peer never has
/// more than one message in flight, so this leaves room to spare).
const CTRL_SLOTS: usize = 4;
/// Size of each control receive: the largest message is a 56-octet QP description.
const CTRL_SLOT_LEN: usize = 64;
/// wr_id of control Sends (receives use their slot index).
const CTRL_SEND_ID: u64 = u64::MAX;
/// IRD and ORD of the read tests' QPs, what perftest asks for on siw.
const OUT_READS: u16 = 128;
/// The cycle buffer softrnic announces (a page, as perftest on x86-64): the span within
/// which a perftest peer walks its remote address for small messages.
const CYCLE_BUFFER: u32 = 4096;
/// The cache line softrnic announces (x86-64's), the step of that walk.
const CACHE_LINE: u32 = 64;
/// How long a server leaves the client to close first at the end (see [`close`]):
/// perftest's client closes by itself at once.
const SERVER_LINGER: Duration = Duration::from_secs(10);
/// The client's wait for the server to close first; shorter than the server's, so two
/// softrnic sides do not wait for each other for long.
const CLIENT_LINGER: Duration = Duration::from_secs(2);
/// Credit Writes a send_bw server may have in flight per QP (one source slot each).
const CREDIT_SLOTS: usize = 32;

/// Maps a verbs error to a message naming the step that failed.
fn e2s(what: &str) -> impl Fn(Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// Which end of the exchange this side is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Connects, and Sends first in every exchange.
    Client,
    /// Listens, and answers.
    Server,
}

/// MPA settings with perftest's IRD/ORD and no private data.
fn mpa(cfg: &BenchConfig, depth: u16) -> MpaConfig {
    let mut m = cfg.device_config().mpa;
    m.ird = depth;
    m.ord = depth;
    m.private_data.clear();
    m
}

/// Whether perftest's test QPs take Reads in this test.
fn read_test(test: Test) -> bool {
    matches!(test, Test::ReadBw | Test::ReadLat)
}

/// IRD/ORD of a test's QPs: perftest's (128 in the read tests, else 0), and 128 in the
/// write and send bandwidth tests too when both sides are softrnic, for the closing Read
/// and the delivery probes.
fn test_depth(test: Test, softrnic_peer: bool) -> u16 {
    if read_test(test) || (softrnic_peer && matches!(test, Test::WriteBw | Test::SendBw)) {
        OUT_READS
    } else {
        0
    }
}

/// Whether a failed connect is worth retrying: nothing listened yet (refused, or a
/// forwarding proxy that accepted and then closed).
fn retryable(e: &Error) -> bool {
    match e {
        Error::Io(io) => matches!(
            io.kind(),
            std::io::ErrorKind::ConnectionRefused
                | std::io::ErrorKind::ConnectionReset
                | std::io::ErrorKind::ConnectionAborted
                | std::io::ErrorKind::UnexpectedEof
                | std::io::ErrorKind::BrokenPipe
        ),
        _ => false,
    }
}

/// Connects `qp`, retrying while the peer is not listening yet.
fn connect(dev: &Device, addr: SocketAddr, qp: &Qp, m: &MpaConfig) -> Result<(), String> {
    let deadline = Instant::now() + CONNECT_RETRY;
    loop {
        match dev.connect_with(addr, qp, m.clone()) {
            Ok(_) => return Ok(()),
            Err(e) if retryable(&e) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => return Err(format!("connect to {addr}: {e}")),
        }
    }
}

/// The control connection: a QP with a few receives posted, used for one message at a
/// time in each direction.
struct Ctrl {
    /// Who sends first in an exchange.
    side: Side,
    /// The QP.
    qp: Qp,
    /// Its own CQ, so test traffic never mixes in.
    cq: Cq,
    /// Source of our messages (one at a time).
    send_buf: Mr,
    /// [`CTRL_SLOTS`] receive slots of [`CTRL_SLOT_LEN`] octets.
    recv_buf: Mr,
    /// Messages received but not yet asked for.
    arrived: VecDeque<Vec<u8>>,
    /// The PD (kept for the buffers' lifetime).
    _pd: Pd,
}

impl Ctrl {
    /// A control QP with its receives posted, ready to connect or accept (a message may
    /// arrive right after the MPA exchange).
    fn new(dev: &Device, side: Side) -> Result<Ctrl, String> {
        let pd = dev.alloc_pd();
        let cq = dev
            .create_cq(2 * CTRL_SLOTS + 4)
            .map_err(e2s("create CQ"))?;
        let qp = dev
            .create_qp(&pd, QpInit::new(&cq, 4, CTRL_SLOTS))
            .map_err(e2s("create QP"))?;
        let send_buf = pd
            .alloc_mr(CTRL_SLOT_LEN, Access::LOCAL_WRITE)
            .map_err(e2s("register buffer"))?;
        let recv_buf = pd
            .alloc_mr(CTRL_SLOT_LEN * CTRL_SLOTS, Access::LOCAL_WRITE)
            .map_err(e2s("register buffer"))?;
        let c = Ctrl {
            side,
            qp,
            cq,
            send_buf,
            recv_buf,
            arrived: VecDeque::new(),
            _pd: pd,
        };
        for slot in 0..CTRL_SLOTS {
            c.repost(slot)?;
        }
        Ok(c)
    }

    /// Posts the receive of one slot (again, after its message was read).
    fn repost(&self, slot: usize) -> Result<(), String> {
        self.qp
            .post_recv(RecvWr::new(
                slot as u64,
                self.recv_buf.sge(slot * CTRL_SLOT_LEN, CTRL_SLOT_LEN),
            ))
            .map_err(e2s("control post_recv"))
    }

    /// The next completion, sleeping on the CQ's notification between polls (the control
    /// path is not measured, and the peer may take seconds).
    fn next(&mut self) -> Result<Completion, String> {
        let deadline = Instant::now() + CTRL_TIMEOUT;
        loop {
            if let Some(c) = self.cq.poll_one() {
                return Ok(c);
            }
            self.cq.req_notify(false);
            if let Some(c) = self.cq.poll_one() {
                return Ok(c);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err("control connection: no message from the peer".into());
            }
            self.cq
                .wait_notify((deadline - now).min(Duration::from_millis(20)));
        }
    }

    /// Takes one completion: queues a received message (and reposts its receive), or
    /// returns whether it was our Send's.
    fn take(&mut self) -> Result<bool, String> {
        let c = self.next()?;
        if c.status != WcStatus::Success {
            return Err(format!(
                "control connection: {:?} completed with {:?} (peer gone?)",
                c.opcode, c.status
            ));
        }
        match c.opcode {
            WcOpcode::Recv => {
                let slot = c.wr_id as usize;
                let len = (c.byte_len as usize).min(CTRL_SLOT_LEN);
                let mut b = vec![0u8; len];
                self.recv_buf
                    .read(slot * CTRL_SLOT_LEN, &mut b)
                    .map_err(e2s("control read"))?;
                self.arrived.push_back(b);
                self.repost(slot)?;
                Ok(false)
            }
            _ => Ok(c.wr_id == CTRL_SEND_ID),
        }
    }

    /// Sends one message and waits for its completion (it is then in the send path, not
    /// necessarily delivered; the peer's answer is what proves arrival).
    fn send(&mut self, msg: &[u8]) -> Result<(), String> {
        self.send_buf.write(0, msg).map_err(e2s("control write"))?;
        self.qp
            .post_send(SendWr::send(CTRL_SEND_ID, self.send_buf.sge(0, msg.len())))
            .map_err(e2s("control post_send"))?;
        while !self.take()? {}
        Ok(())
    }

    /// The next message from the peer.
    fn recv(&mut self) -> Result<Vec<u8>, String> {
        loop {
            if let Some(m) = self.arrived.pop_front() {
                return Ok(m);
            }
            self.take()?;
        }
    }

    /// One exchange: the client Sends first, the server answers. Returns the peer's
    /// message, which must have the length of ours (`what` names it in errors).
    fn xchg(&mut self, mine: &[u8], what: &str) -> Result<Vec<u8>, String> {
        let theirs = match self.side {
            Side::Client => {
                self.send(mine)?;
                self.recv()?
            }
            Side::Server => {
                let t = self.recv()?;
                self.send(mine)?;
                t
            }
        };
        if theirs.len() != mine.len() {
            return Err(format!(
                "perftest exchange out of step: expected the {what} ({} octets), got {} octets",
                mine.len(),
                theirs.len()
            ));
        }
        Ok(theirs)
    }

    /// A barrier: an exchange of QP descriptions.
    fn sync(&mut self, d: &Dest) -> Result<Dest, String> {
        let b = self.xchg(&d.encode(), "QP description")?;
        Dest::decode(&b).ok_or_else(|| "bad QP description".to_string())
    }
}

/// One test QP and its buffers.
struct TestQp {
    /// The QP.
    qp: Qp,
    /// Its id, to match completions and events.
    id: QpId,
    /// Source of Writes and Sends, sink of Reads (the message size).
    local: Mr,
    /// What the peer may access: the Write target or Read source, the landing buffer of
    /// write_lat, the credit word of send_bw.
    exposed: Mr,
    /// Receive buffer of the send tests.
    recv: Option<Mr>,
    /// The peer's description.
    remote: Dest,
    /// Requests posted (send_bw server: Sends received).
    posted: u64,
    /// Requests completed.
    completed: u64,
    /// send_bw: the last credit read (client) or written (server).
    credit: u64,
}

impl TestQp {
    /// This QP's description for the peer: its exposed buffer, and what perftest prints.
    fn dest(&self, test: Test, psn: u32) -> Dest {
        Dest {
            lid: 0,
            out_reads: if read_test(test) {
                u32::from(OUT_READS)
            } else {
                1
            },
            qpn: self.id.0,
            psn,
            rkey: self.exposed.rkey(),
            vaddr: self.exposed.addr(),
            ..Dest::default()
        }
    }

    /// Posts one signaled `op` on the first `size` octets of the local buffer (the
    /// latency tests' one request at a time).
    fn post_one(&self, wr_id: u64, op: SendOp, size: usize) -> Result<(), String> {
        self.qp
            .post_send(SendWr::new(wr_id, op, self.local.sge(0, size)))
            .map_err(|e| format!("post_send: {e} ({})", self.diag()))
    }

    /// The QP's state and counters, for error messages.
    fn diag(&self) -> String {
        format!(
            "QP {} state {:?}, posted {}, completed {}, credit {}",
            self.id.0,
            self.qp.state(),
            self.posted,
            self.completed,
            self.credit
        )
    }

    /// Reads the server's latest credit (send_bw client): the word must read the same
    /// twice (a Write may be landing) and lie between the last credit and what was sent.
    fn refresh_credit(&mut self) {
        let mut a = [0u8; pt::CREDIT_LEN];
        let mut b = [0u8; pt::CREDIT_LEN];
        if self.exposed.read(0, &mut a).is_err() || self.exposed.read(0, &mut b).is_err() {
            return;
        }
        if a != b {
            return;
        }
        // The word is 32 bits: extend it with the high part of what we have sent.
        let mut v = (self.posted & !0xffff_ffff) | u64::from(pt::decode_credit(a));
        if v > self.posted {
            v = v.wrapping_sub(1 << 32);
        }
        if v > self.credit && v <= self.posted {
            self.credit = v;
        }
    }
}

/// Length of the buffer a side exposes, per test and role.
fn exposed_len(test: Test, side: Side, size: usize, cycle: usize) -> usize {
    match (test, side) {
        // perftest walks the remote address through a cycle buffer for small sizes.
        (Test::WriteBw | Test::ReadBw | Test::ReadLat, Side::Server) => size.max(cycle) + 64,
        (Test::WriteLat, _) => size,
        (Test::SendBw, _) => pt::CREDIT_LEN * CREDIT_SLOTS,
        _ => 64,
    }
}

/// Creates one test QP with its buffers (receives posted for the send tests).
fn test_qp(
    dev: &Device,
    pd: &Pd,
    cq: &Cq,
    cfg: &BenchConfig,
    side: Side,
    size: usize,
    cycle: usize,
) -> Result<TestQp, String> {
    let test = cfg.test;
    let iters = cfg.iters;
    let recvs = match (test, side) {
        (Test::SendBw, Side::Server) | (Test::SendLat, _) => {
            (u64::from(cfg.rx_depth).min(iters).max(1) as usize).min(16384)
        }
        _ => 0,
    };
    let sq_depth = match (test, side) {
        (Test::WriteBw | Test::ReadBw | Test::SendBw, Side::Client) => cfg.tx_depth as usize + 2,
        (Test::SendBw, Side::Server) => CREDIT_SLOTS + 2,
        _ => 16,
    };
    let qp = dev
        .create_qp(pd, QpInit::new(cq, sq_depth, recvs.max(1)))
        .map_err(e2s("create QP"))?;
    let local = pd
        .alloc_mr(size, Access::LOCAL_WRITE)
        .map_err(e2s("register buffer"))?;
    let exposed = pd
        .alloc_mr(
            exposed_len(test, side, size, cycle),
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        )
        .map_err(e2s("register buffer"))?;
    if test != Test::WriteLat && test != Test::SendBw {
        let n = exposed.len();
        exposed.fill(0, n, 0x3c).map_err(e2s("fill"))?;
    }
    if test != Test::WriteLat {
        local.fill(0, size, 0x5a).map_err(e2s("fill"))?;
    }
    let recv = if recvs > 0 {
        let m = pd
            .alloc_mr(size, Access::LOCAL_WRITE)
            .map_err(e2s("register buffer"))?;
        for _ in 0..recvs {
            qp.post_recv(RecvWr::new(0, m.sge(0, size)))
                .map_err(e2s("post_recv"))?;
        }
        Some(m)
    } else {
        None
    };
    let id = qp.id();
    Ok(TestQp {
        qp,
        id,
        local,
        exposed,
        recv,
        remote: Dest::default(),
        posted: 0,
        completed: 0,
        credit: 0,
    })
}

/// A pseudo-random 24-bit PSN, as perftest prints one (meaningless on iWARP).
fn psn() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    (t ^ std::process::id().rotate_left(12)).wrapping_mul(0x9e37_79b9) >> 8
}

/// What both sides hold once connected.
struct Session {
    /// Our role.
    side: Side,
    /// The control connection.
    ctrl: Ctrl,
    /// The test QPs, in connection order.
    qps: Vec<TestQp>,
    /// Their CQs, one per engine.
    cq: CqSet,
    /// Their PD (kept for the buffers' lifetime).
    _pd: Pd,
    /// Our QP 0's description, sent at every barrier.
    me: Dest,
    /// The version the peer announced (printed in the header).
    peer_version: f64,
    /// The peer marked its opening barrier with its role's mark: it is softrnic too
    /// ([`pt::SOFTRNIC_MARK_CLIENT`]).
    softrnic_peer: bool,
    /// Message size.
    size: usize,
}

/// The common opening up to the connection of the test QPs: the peer's version, the
/// cycle buffer, and whether the peer is softrnic (its barrier carries the mark).
fn opening(ctrl: &mut Ctrl) -> Result<(f64, usize, bool), String> {
    let v = ctrl.xchg(&pt::encode_version(pt::VERSION), "version")?;
    let peer = pt::parse_version(&v).ok_or("the peer sent no perftest version")?;
    if peer < pt::MIN_PEER_VERSION {
        return Err(format!(
            "peer runs perftest {peer}: -R needs {} or later",
            pt::MIN_PEER_VERSION
        ));
    }
    let cycle = ctrl.xchg(&pt::encode_u32(CYCLE_BUFFER), "cycle buffer size")?;
    let cycle = pt::decode_u32(&cycle)
        .unwrap_or(CYCLE_BUFFER)
        .max(CYCLE_BUFFER);
    ctrl.xchg(&pt::encode_u32(CACHE_LINE), "cache line size")?;
    ctrl.xchg(&pt::encode_mtu(pt::MTU_1024), "MTU")?;
    let server = ctrl.side == Side::Server;
    let barrier = ctrl.xchg(&pt::marked_barrier(server), "QP description")?;
    Dest::decode(&barrier).ok_or("bad QP description")?;
    Ok((peer, cycle as usize, pt::is_marked(&barrier, !server)))
}

/// The common middle: a barrier, then the test's descriptions and barriers before the
/// run (the peer's buffers are taken from its last round of descriptions).
fn describe(s: &mut Session, test: Test) -> Result<(), String> {
    s.ctrl.sync(&Dest::default())?;
    let p = psn();
    let mine: Vec<Dest> = s.qps.iter().map(|t| t.dest(test, p)).collect();
    s.me = mine[0];
    for step in pt::schedule(test).before {
        match step {
            Step::Descriptions => {
                for (t, d) in s.qps.iter_mut().zip(&mine) {
                    t.remote = s.ctrl.sync(d)?;
                }
            }
            Step::Sync => {
                s.ctrl.sync(&s.me)?;
            }
            Step::BwReports => return Err("a report cannot precede the run".into()),
        }
    }
    Ok(())
}

/// The PD and the test QPs' CQs (one per engine), each deep enough for all their
/// requests.
fn new_test_cq(dev: &Device, cfg: &BenchConfig) -> Result<(Pd, CqSet), String> {
    let q = usize::from(cfg.qps);
    let depth = q * (cfg.tx_depth as usize + 2 + cfg.rx_depth as usize + CREDIT_SLOTS) + 64;
    let pd = dev.alloc_pd();
    let cq = CqSet::new(dev, q, depth)?;
    Ok((pd, cq))
}

/// The client: connects to a perftest (or softrnic `-R`) server at `addr`, runs the test,
/// prints the table to `out`, returns the result.
pub fn client(
    cfg: &BenchConfig,
    dev: &Device,
    addr: SocketAddr,
    out: &mut dyn Write,
) -> Result<ResultRow, String> {
    let test = cfg.test;
    let size = cfg.sizes[0];
    let mut ctrl = Ctrl::new(dev, Side::Client)?;
    // No pause before the first message (perftest's client sleeps a second here): the
    // device holds the first FPDU after the MPA Reply for as long as a responder like
    // Linux siw needs to take its socket into RDMA mode (DeviceConfig::first_fpdu_hold).
    connect(dev, addr, &ctrl.qp, &mpa(cfg, 0))?;
    let (peer_version, cycle, softrnic_peer) = opening(&mut ctrl)?;
    let (pd, cq) = new_test_cq(dev, cfg)?;
    let mut qps = Vec::new();
    let m = mpa(cfg, test_depth(test, softrnic_peer));
    for i in 0..usize::from(cfg.qps) {
        let t = test_qp(dev, &pd, cq.for_qp(i), cfg, Side::Client, size, cycle)?;
        connect(dev, addr, &t.qp, &m)?;
        qps.push(t);
    }
    let mut s = Session {
        side: Side::Client,
        ctrl,
        qps,
        cq,
        _pd: pd,
        me: Dest::default(),
        peer_version,
        softrnic_peer,
        size,
    };
    let r = run_session(cfg, &mut s, out, format!("client of {addr}"));
    close(dev, &s, CLIENT_LINGER);
    r?.ok_or_else(|| "no result".to_string())
}

/// The server: serves one run on `listener` (the control connection first, then the test
/// QPs), prints its table to `out` (the client's report in write_bw and read_bw, its own
/// measurement in send_bw and the latency tests; nothing in read_lat, where only the
/// client measures), returns the result it printed.
pub fn serve(
    cfg: &BenchConfig,
    dev: &Device,
    listener: &Listener,
    out: &mut dyn Write,
) -> Result<Option<ResultRow>, String> {
    let test = cfg.test;
    let size = cfg.sizes[0];
    let mut ctrl = Ctrl::new(dev, Side::Server)?;
    let req = listener.accept().map_err(e2s("accept"))?;
    let peer = req.peer_addr();
    if !req.private_data().is_empty() {
        let _ = req.reject(b"this softrnic server runs perftest's -R exchange");
        return Err(format!(
            "{peer}: not a perftest -R client (MPA private data present; start the client with -R)"
        ));
    }
    let mut m = mpa(cfg, 0);
    // A client that asks for markers gets them both ways.
    m.markers |= req.request().markers;
    req.accept_with(&ctrl.qp, m).map_err(e2s("accept"))?;
    let (peer_version, cycle, softrnic_peer) = opening(&mut ctrl)?;
    let (pd, cq) = new_test_cq(dev, cfg)?;
    let mut qps = Vec::new();
    let m = mpa(cfg, test_depth(test, softrnic_peer));
    for i in 0..usize::from(cfg.qps) {
        let t = test_qp(dev, &pd, cq.for_qp(i), cfg, Side::Server, size, cycle)?;
        let req = listener.accept().map_err(e2s("accept test QP"))?;
        let mut m = m.clone();
        m.markers |= req.request().markers;
        req.accept_with(&t.qp, m).map_err(e2s("accept test QP"))?;
        qps.push(t);
    }
    let mut s = Session {
        side: Side::Server,
        ctrl,
        qps,
        cq,
        _pd: pd,
        me: Dest::default(),
        peer_version,
        softrnic_peer,
        size,
    };
    let r = run_session(cfg, &mut s, out, format!("server, client {peer}"));
    close(dev, &s, SERVER_LINGER);
    r
}

/// Graceful close of every connection. The peer gets `linger` to close first: once on the
/// rig, a perftest client whose server closed right after the last message saw its own
/// last Send fail with LOC_QP_OP_ERR (siw fails the request still in its transmit path
/// when the connection goes), though the Send had arrived. A peer's FIN is answered at
/// once by the device.
fn close(dev: &Device, s: &Session, linger: Duration) {
    let mut ids: Vec<QpId> = s.qps.iter().map(|t| t.id).collect();
    ids.push(s.ctrl.qp.id());
    let mut watch = Watch::new(ids);
    if !watch.wait(dev, Some(linger)) {
        for t in &s.qps {
            let _ = t.qp.disconnect();
        }
        let _ = s.ctrl.qp.disconnect();
        watch.wait(dev, Some(Duration::from_secs(10)));
    }
}

/// From the descriptions to the end of the exchange; prints the table.
fn run_session(
    cfg: &BenchConfig,
    s: &mut Session,
    out: &mut dyn Write,
    placement: String,
) -> Result<Option<ResultRow>, String> {
    let test = cfg.test;
    describe(s, test)?;
    let placement = format!(
        "{placement}, perftest -R exchange (peer version {:.2})",
        s.peer_version
    );
    let mut rep = Reporter::new(out, cfg, placement);
    let clock = match (test, s.side) {
        (Test::WriteBw | Test::SendBw, Side::Client) if s.softrnic_peer => Clock::ClosingRead,
        (Test::WriteBw | Test::SendBw, Side::Client) => Clock::LastLocalCompletion,
        (Test::ReadBw, Side::Client) => Clock::LastCompletion,
        (Test::WriteBw | Test::SendBw, Side::Server) => Clock::ServerArrivals,
        (Test::ReadBw, Side::Server) => Clock::PeerReport,
        _ => Clock::Latency,
    };
    rep.clock(clock);
    rep.header().map_err(|e| e.to_string())?;
    let label = format!("{} {} B -R", test.name(), s.size);
    let mut progress = Progress::new(label, s.size, test.is_bw(), cfg.show_progress);
    let measured = match (test, s.side) {
        (Test::WriteBw | Test::ReadBw | Test::SendBw, Side::Client) => {
            Some(Measured::Bw(bw_client(cfg, s, &mut progress)?))
        }
        (Test::SendBw, Side::Server) => Some(Measured::Bw(send_bw_server(cfg, s, &mut progress)?)),
        (Test::WriteBw, Side::Server) => {
            Some(Measured::Bw(write_bw_server(cfg, s, &mut progress)?))
        }
        (Test::ReadBw | Test::ReadLat, Side::Server) => None,
        (Test::WriteLat, side) => Some(Measured::Lat(write_lat(cfg, s, side, &mut progress)?)),
        (Test::SendLat, side) => Some(Measured::Lat(send_lat(cfg, s, side, &mut progress)?)),
        (Test::ReadLat, Side::Client) => Some(Measured::Lat(read_lat(cfg, s, &mut progress)?)),
    };
    progress.finish();
    let mut shown = measured;
    // The client's report, as the server received it.
    let mut peer_report = None;
    for step in pt::schedule(test).after {
        match step {
            Step::Sync => {
                s.ctrl.sync(&s.me)?;
            }
            Step::Descriptions => {
                for t in &s.qps {
                    s.ctrl.sync(&t.dest(test, s.me.psn))?;
                }
            }
            Step::BwReports => {
                let mine = match (&measured, s.side) {
                    (Some(Measured::Bw(b)), Side::Client) => BwReport {
                        size: s.size as u64,
                        // All QPs' together, as perftest's client reports them.
                        iters: b.iterations,
                        bw_peak: bw_unit(b.peak_bps, cfg.gbits),
                        bw_avg: bw_unit(b.avg_bps, cfg.gbits),
                        msg_rate: b.msg_rate / 1e6,
                    },
                    // perftest's server sends an uninitialised report; softrnic's zeros.
                    _ => BwReport::default(),
                };
                let mut theirs = Vec::with_capacity(5);
                for f in mine.encode() {
                    theirs.push(s.ctrl.xchg(&f, "bandwidth report")?);
                }
                let r = BwReport::decode(&theirs).ok_or("bad bandwidth report")?;
                if s.side == Side::Server {
                    peer_report = Some(from_report(&r, cfg.gbits));
                }
            }
        }
    }
    if shown.is_none() && clock == Clock::PeerReport {
        // read_bw's server: the line is the client's report, as the header says.
        shown = peer_report.take().map(Measured::Bw);
    }
    let Some(m) = shown else {
        rep.note(&format!("only the client measures {}", test.name()))
            .map_err(|e| e.to_string())?;
        return Ok(None);
    };
    let row = ResultRow::new(test, s.size, m, Vec::new());
    rep.row(&row).map_err(|e| e.to_string())?;
    rep.summary(std::slice::from_ref(&row))
        .map_err(|e| e.to_string())?;
    if let Some(r) = peer_report {
        let u = if cfg.gbits { "Gb/sec" } else { "MB/sec" };
        rep.note(&format!(
            "the client's report (its clock): {} iterations, BW peak {:.2}, BW average {:.2} {u}, {:.6} Mpps",
            r.iterations,
            bw_unit(r.peak_bps, cfg.gbits),
            bw_unit(r.avg_bps, cfg.gbits),
            r.msg_rate / 1e6
        ))
        .map_err(|e| e.to_string())?;
    }
    Ok(Some(row))
}

/// A bandwidth result from a peer's report (bandwidths in the reporting unit). It was
/// not timed here: no clock, and no elapsed time (none is back-computed).
fn from_report(r: &BwReport, gbits: bool) -> BwResult {
    let to_bps = |v: f64| if gbits { v * 1e9 / 8.0 } else { v * MB };
    let avg_bps = to_bps(r.bw_avg);
    let bytes = r.size as usize;
    BwResult {
        cpu: None,
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
fn bw_client(
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
    let mut last_activity = start;
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
                |idx| (idx + 1) % cq_mod == 0 || idx + 1 == iters,
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
            last_activity = now;
        } else if now.duration_since(last_activity) > STALL {
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
fn closing_read_used(test: Test, side: Side, softrnic_peer: bool) -> bool {
    side == Side::Client && softrnic_peer && matches!(test, Test::WriteBw | Test::SendBw)
}

/// The probes' and closing Read's targets: the peer's exposed buffer (the Write target,
/// or the send_bw server's credit source), into the first octet of the local buffer.
fn targets(qps: &[TestQp]) -> Vec<ReadTarget<'_>> {
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
fn write_bw_server(
    cfg: &BenchConfig,
    s: &mut Session,
    progress: &mut Progress,
) -> Result<BwResult, String> {
    let size = s.size as u64;
    let want = cfg.iters * s.qps.len() as u64 * size;
    let mut wcs = vec![Completion::default(); 16];
    let mut meter: Option<BwMeter> = None;
    let mut seen = 0u64;
    let mut last_activity = Instant::now();
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
            last_activity = now;
        } else if now.duration_since(last_activity) > STALL {
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
fn send_bw_server(
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
    let mut last_activity = Instant::now();
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
            last_activity = now;
        } else if now.duration_since(last_activity) > STALL {
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
fn half_intervals(posts: &[Instant]) -> Vec<f64> {
    posts
        .windows(2)
        .map(|w| w[1].duration_since(w[0]).as_secs_f64() * 1e6 / 2.0)
        .collect()
}

/// A latency result from samples in microseconds (at least one needed). The iteration
/// count is the number of samples: `-n N` ping-pong iterations give N - 1 intervals
/// between posts, and that is what the statistics are made of.
fn lat_result(size: usize, samples: &[f64]) -> Result<LatResult, String> {
    let stats = LatStats::from_samples(samples).ok_or("too few iterations for latency")?;
    Ok(LatResult {
        cpu: None,
        bytes: size,
        iterations: samples.len() as u64,
        stats,
    })
}

/// Reaps send completions (the latency loops signal every request).
fn reap(cq: &CqSet, wcs: &mut [Completion], side: &str) -> Result<(usize, bool), String> {
    let n = cq.poll(wcs);
    let mut recv = false;
    for c in &wcs[..n] {
        check_wc(c, side)?;
        recv |= c.opcode == WcOpcode::Recv;
    }
    Ok((n, recv))
}

/// The side's name in error messages.
fn side_name(side: Side) -> &'static str {
    match side {
        Side::Client => "client",
        Side::Server => "server",
    }
}

/// write_lat, either side: iteration k writes the message with k (mod 256) in its last
/// octet into the peer's buffer, then waits for the peer's Write to put k into the last
/// octet of ours; perftest's server writes first.
fn write_lat(
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
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            let mut b = [0u8];
            t.exposed.read(last, &mut b).map_err(e2s("read"))?;
            if b[0] == tag {
                return Ok(());
            }
            reap(&s.cq, wcs, name)?;
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(4096) && start.elapsed() > STALL {
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
fn send_lat(
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
        let start = Instant::now();
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
            if spins.is_multiple_of(4096) && start.elapsed() > STALL {
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
fn read_lat(
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
            if spins.is_multiple_of(4096) && t0.elapsed() > STALL {
                return Err(format!("no Read response for iteration {k}: {}", t.diag()));
            }
        };
        samples.push(t1.duration_since(t0).as_secs_f64() * 1e6);
        progress.tick(t1, k);
    }
    lat_result(size, &samples)
}

/// The device of a `-R` run: the configured one, with time for a slow peer's MPA.
fn open_device(cfg: &BenchConfig) -> Result<Device, String> {
    let mut c = cfg.device_config();
    c.connect_timeout = CONNECT_TIMEOUT;
    Device::open(c).map_err(|e| format!("device: {e}"))
}

/// Checks the flags `-R` supports.
pub fn check(cfg: &BenchConfig) -> Result<(), String> {
    if cfg.sizes.len() != 1 {
        return Err("-R runs one size per run (as perftest): give one -s, not -a or a list".into());
    }
    if cfg.duration.is_some() {
        return Err("-R supports -n iterations, not -D".into());
    }
    if cfg.baseline.is_some() {
        return Err("-R does not run the TCP baseline".into());
    }
    Ok(())
}

/// Runs a `-R` configuration in its mode: client, server (one run, then exit), or both
/// in this process.
pub fn run(cfg: &BenchConfig, out: &mut dyn Write) -> Result<Vec<ResultRow>, String> {
    check(cfg)?;
    match &cfg.mode {
        Mode::Client(host) => {
            let dev = open_device(cfg)?;
            let addr = resolve_addr(host, cfg.port)?;
            Ok(vec![client(cfg, &dev, addr, out)?])
        }
        Mode::Server(bind) => {
            let dev = open_device(cfg)?;
            let addr = resolve_addr(bind, cfg.port)?;
            let l = dev
                .listen(addr)
                .map_err(|e| format!("listen on {addr}: {e}"))?;
            eprintln!("softrnic {} -R: server waiting on {addr}", cfg.test.name());
            Ok(serve(cfg, &dev, &l, out)?.into_iter().collect())
        }
        Mode::Loopback => {
            // Only the client's device records (--pcap).
            let sdev = open_device(&BenchConfig {
                pcap: None,
                ..cfg.clone()
            })?;
            let cdev = open_device(cfg)?;
            let l = sdev
                .listen("127.0.0.1:0")
                .map_err(|e| format!("listen: {e}"))?;
            let addr = l.local_addr().map_err(|e| e.to_string())?;
            let scfg = BenchConfig {
                mode: Mode::Server("127.0.0.1".into()),
                show_progress: false,
                ..cfg.clone()
            };
            let server = std::thread::Builder::new()
                .name("bench-rdma-cm-server".into())
                .spawn(move || {
                    let mut sink = std::io::sink();
                    serve(&scfg, &sdev, &l, &mut sink)
                })
                .map_err(|e| e.to_string())?;
            let row = client(cfg, &cdev, addr, out);
            let srv = server
                .join()
                .map_err(|_| "server thread panicked".to_string())?;
            let row = row?;
            srv.map_err(|e| format!("server: {e}"))?;
            Ok(vec![row])
        }
    }
}
