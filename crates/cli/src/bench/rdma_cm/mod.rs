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

mod control;
mod measure;
mod test_qp;

use control::*;
use measure::*;
use test_qp::*;

use super::cqs::CqSet;
use super::perftest::{self as pt, BwReport, Dest, Step};
use super::rdma::{Prober, ReadTarget, Signals, Watch, bw_op, check_wc, closing_read, post_window};
use super::report::{Reporter, bw_unit};
use super::stats::{BwMeter, BwResult, LatResult, LatStats, MB, Progress};
use super::{BenchConfig, Clock, Measured, Mode, ResultRow, Test, resolve_addr};
use softrnic_rnic::{
    Access, AsyncEvent, Completion, Cq, Device, Error, Listener, MpaConfig, Mr, Pd, Qp, QpId,
    QpInit, RecvWr, SendOp, SendWr, WcOpcode, WcStatus,
};
use std::collections::VecDeque;
use std::io::Write;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// The longest wait for a control message: the peer may be running a long measurement
/// (and the rig's guest runs under emulation).
const CTRL_TIMEOUT: Duration = Duration::from_secs(600);
/// The longest wait for the peer's first control message: the peer answers it at once
/// (no measurement precedes it), so a longer silence is a lost message, not a busy peer
/// (the wait of session 29 that took the whole [`CTRL_TIMEOUT`]).
const FIRST_MESSAGE_TIMEOUT: Duration = Duration::from_secs(60);
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
    let mut shown = measured.clone();
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

#[cfg(test)]
#[path = "control_tests.rs"]
mod control_tests;
