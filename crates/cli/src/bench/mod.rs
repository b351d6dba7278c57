//! perftest-style benchmarks: `write_bw`, `read_bw`, `send_bw`, `write_lat`, `read_lat`,
//! `send_lat`, with perftest's main flags and output columns, a `--loopback` mode that
//! runs both sides in one process (two devices, each side's thread on its own CPU), and
//! a `--baseline tcp` mode that runs the same pattern over plain TCP sockets right before
//! each softrnic run, in each discipline ([`TcpKind`]: blocking, busy-polling, batching),
//! and prints the ratio to the strongest of them.
//!
//! Roles are perftest's: without an address this side is the server; with one it is the
//! client, and the client's parameters (sizes, iterations, depths) rule: they travel to
//! the server in the MPA private data of each connection ([`meta`]). Each message size is
//! one *round*: the client connects its QPs, runs, proves that the server has received
//! everything (a final RDMA Read, which the server answers only after all that came
//! before it), and disconnects. What each figure means (when a message counts as done,
//! when the clock stops, what the peak is made of) is [`Clock`], printed in the header
//! of every run and as `clock` in every JSON result.

mod args;
mod config;
pub mod cpu_distance;
pub mod cqs;
pub mod meta;
mod pairs;
pub mod perftest;
pub mod placement;
pub mod rdma;
pub mod rdma_cm;
pub mod report;
mod result_row;
pub mod server;
mod stall;
pub mod stats;
pub mod tcp;
pub mod tcp_sockets;
pub mod tcp_streams;

use clap::{Args, Parser, Subcommand, ValueEnum};
use softrnic_rnic::{CrcPolicy, Device, DeviceConfig, ProgressMode, affinity};
use std::io::Write;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

pub use args::*;
pub use config::*;
pub use result_row::*;
pub use stats::{BwResult, CpuClock, CpuUse, LatResult, LatStats, StreamCalls};
pub use tcp::TcpKind;

/// The six tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Test {
    /// RDMA Write bandwidth.
    WriteBw,
    /// RDMA Read bandwidth.
    ReadBw,
    /// Send/Recv bandwidth.
    SendBw,
    /// RDMA Write ping-pong latency (half round trip).
    WriteLat,
    /// RDMA Read latency (full round trip).
    ReadLat,
    /// Send/Recv ping-pong latency (half round trip).
    SendLat,
}

impl Test {
    /// All tests, in code order.
    pub const ALL: [Test; 6] = [
        Test::WriteBw,
        Test::ReadBw,
        Test::SendBw,
        Test::WriteLat,
        Test::ReadLat,
        Test::SendLat,
    ];

    /// The subcommand name.
    pub fn name(self) -> &'static str {
        match self {
            Test::WriteBw => "write_bw",
            Test::ReadBw => "read_bw",
            Test::SendBw => "send_bw",
            Test::WriteLat => "write_lat",
            Test::ReadLat => "read_lat",
            Test::SendLat => "send_lat",
        }
    }

    /// perftest's title line.
    pub fn title(self) -> &'static str {
        match self {
            Test::WriteBw => "RDMA_Write BW Test",
            Test::ReadBw => "RDMA_Read BW Test",
            Test::SendBw => "Send BW Test",
            Test::WriteLat => "RDMA_Write Latency Test",
            Test::ReadLat => "RDMA_Read Latency Test",
            Test::SendLat => "Send Latency Test",
        }
    }

    /// Whether it measures bandwidth (else latency).
    pub fn is_bw(self) -> bool {
        matches!(self, Test::WriteBw | Test::ReadBw | Test::SendBw)
    }

    /// Code in the metadata.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// From a metadata code.
    pub fn from_code(c: u8) -> Option<Test> {
        Test::ALL.get(usize::from(c)).copied()
    }
}

/// What a result's figures mean: when a message counts as done, when the clock stops,
/// and what the peak is made of. The header of every run states it, and every JSON
/// result carries [`Clock::code`] as `clock`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clock {
    /// write_bw and send_bw clients with a peer that answers Reads: the clock stops when
    /// a closing 1-octet Read per QP returns; the peak comes from delivery probes.
    ClosingRead,
    /// write_bw and send_bw clients against Linux perftest (`-R`), which opens their QPs
    /// with IRD 0: the clock stops at the last local completion, before delivery.
    LastLocalCompletion,
    /// read_bw client: a Read completes when its data has landed here.
    LastCompletion,
    /// A `-R` server's own count of what arrived (write_bw: Write payload placed in its
    /// memory; send_bw: receives completed), timed on its clock.
    ServerArrivals,
    /// The figures are the peer's report, not timed here (`-R` read_bw server).
    PeerReport,
    /// Latency tests: per iteration.
    Latency,
}

impl Clock {
    /// The short name in JSON results.
    pub fn code(self) -> &'static str {
        match self {
            Clock::ClosingRead => "closing_read",
            Clock::LastLocalCompletion => "last_local_completion",
            Clock::LastCompletion => "last_completion",
            Clock::ServerArrivals => "server_arrivals",
            Clock::PeerReport => "peer_report",
            Clock::Latency => "per_iteration",
        }
    }

    /// The header lines that say it, for `test`; `rdma_cm` selects perftest's latency
    /// method.
    pub fn describe(self, test: Test, rdma_cm: bool) -> Vec<String> {
        let verb = if test == Test::SendBw {
            "Send"
        } else {
            "Write"
        };
        let sent = format!(
            " Completion      : a {verb} completes once its FPDUs are in the send path (up to \
             16 KiB copied into the connection's transmit buffer, larger ones written to the \
             TCP socket), which is before they arrive"
        );
        match self {
            Clock::ClosingRead => vec![
                sent,
                " Clock stops     : when a closing 1-octet RDMA Read per QP has returned; the \
                 peer answers it only after placing everything before it"
                    .into(),
                " BW peak         : best window of at least 10 ms between delivery probes (a \
                 1-octet Read per QP every 10 ms), counting the messages posted and \
                 confirmed delivered inside it"
                    .into(),
            ],
            Clock::LastLocalCompletion => vec![
                sent,
                " Clock stops     : at the last local completion, so the last data may still \
                 be in transit: the peer is perftest, which opens this test's QPs with IRD 0 \
                 (no closing Read, no probes)"
                    .into(),
                " BW peak         : best 10 ms window of local completions (as perftest's), \
                 which can run ahead of delivery"
                    .into(),
            ],
            Clock::LastCompletion => vec![
                " Completion      : a Read completes when its response has landed in local \
                 memory"
                    .into(),
                " Clock stops     : at the last completion".into(),
                " BW peak         : best 10 ms window of completions".into(),
            ],
            Clock::ServerArrivals if test == Test::WriteBw => vec![
                " Measured here   : the Write payload this server's QPs placed in its memory \
                 (their counters), from the first octet seen to the last, on this side's clock"
                    .into(),
                " BW peak         : best 10 ms window of those placements".into(),
            ],
            Clock::ServerArrivals => vec![
                " Measured here   : the receives completed here (a receive completes once the \
                 Send's data is placed), from the first to the last, on this side's clock"
                    .into(),
                " BW peak         : best 10 ms window of those receives".into(),
            ],
            Clock::PeerReport => vec![
                " Result line     : the client's report, timed on the client: this server \
                 cannot count the Reads it serves"
                    .into(),
            ],
            Clock::Latency => vec![match (test, rdma_cm) {
                (Test::ReadLat, _) => {
                    " Latency         : from posting a Read to its completion (the response \
                     landed here), the full round trip"
                }
                (_, true) => {
                    " Latency         : half the interval between two consecutive posts of this \
                     side (one round trip each, as perftest): -n N gives N - 1 samples"
                }
                (Test::WriteLat, false) => {
                    " Latency         : half the time from posting a Write to seeing the peer's \
                     answering Write change the last octet of the local buffer"
                }
                _ => {
                    " Latency         : half the time from posting a Send to the completion of \
                     the receive of the peer's answer"
                }
            }
            .into()],
        }
    }
}

/// Where the two sides' threads run in loopback mode: (client CPU, server CPU).
fn pick_cpus() -> Option<(usize, usize)> {
    let cpus = affinity::allowed_cpus();
    (cpus.len() >= 2).then(|| (cpus[0], cpus[1]))
}

fn resolve_addr(host: &str, port: u16) -> Result<SocketAddr, String> {
    let s = if host.contains(':') && !host.starts_with('[') && host.parse::<SocketAddr>().is_err() {
        format!("[{host}]:{port}")
    } else if host.parse::<SocketAddr>().is_ok() {
        host.to_string()
    } else {
        format!("{host}:{port}")
    };
    s.to_socket_addrs()
        .map_err(|e| format!("{host}: {e}"))?
        .next()
        .ok_or_else(|| format!("{host}: no address"))
}

/// Runs a benchmark command, printing its tables (or JSON lines) to `out`; returns the
/// client's results (none in server mode).
pub fn run(cmd: &BenchCommand, out: &mut dyn Write) -> Result<Vec<ResultRow>, String> {
    let cfg = cmd.config()?;
    run_config(&cfg, out)
}

/// Runs a resolved configuration.
pub fn run_config(cfg: &BenchConfig, out: &mut dyn Write) -> Result<Vec<ResultRow>, String> {
    if cfg.rdma_cm {
        return rdma_cm::run(cfg, out);
    }
    match &cfg.mode {
        Mode::Loopback => run_loopback(cfg, out),
        Mode::Server(bind) => run_server(cfg, bind),
        Mode::Client(host) => {
            let dev = Device::open(cfg.device_config()).map_err(|e| format!("device: {e}"))?;
            let addr = resolve_addr(host, cfg.port)?;
            let tcp_addr = cfg
                .baseline
                .map(|_| SocketAddr::new(addr.ip(), addr.port().wrapping_add(1)));
            let watch = Watch {
                net: crate::transport::Net::new(&cfg.net),
                devs: vec![dev.clone()],
                server_tid: None,
                loopback_cpus: None,
            };
            let rows = each_qp_count(cfg, |c, last| {
                let mut rep = report::Reporter::new(&mut *out, c, format!("client of {addr}"));
                client_rounds(c, &dev, addr, tcp_addr, &mut rep, last, Some(&watch))
            })?;
            count_pairs(cfg, &dev, addr, out, Some(&watch))?;
            Ok(rows)
        }
    }
}

fn run_server(cfg: &BenchConfig, bind: &str) -> Result<Vec<ResultRow>, String> {
    // A standalone server serves whoever connects: its device's memory is bounded.
    let dc = DeviceConfig {
        max_registered: server::SERVER_MEMORY,
        ..cfg.device_config()
    };
    let dev = Device::open(dc).map_err(|e| format!("device: {e}"))?;
    let addr = resolve_addr(bind, cfg.port)?;
    let listener = dev
        .listen(addr)
        .map_err(|e| format!("listen on {addr}: {e}"))?;
    if cfg.baseline.is_some() {
        let taddr = SocketAddr::new(addr.ip(), addr.port().wrapping_add(1));
        let tl = TcpListener::bind(taddr).map_err(|e| format!("listen on {taddr}: {e}"))?;
        tcp_sockets::listening(&tl, cfg.same_host_tcp);
        let policy = cfg.same_host_tcp;
        // Serves baseline connections for as long as the process lives.
        std::thread::spawn(move || tcp::serve(&tl, None, policy));
    }
    eprintln!(
        "softrnic {}: server waiting on {addr}{}",
        cfg.test.name(),
        if cfg.baseline.is_some() {
            " (TCP baseline on the next port)"
        } else {
            ""
        }
    );
    server::serve(&dev, &listener, cfg.server_opts())?;
    Ok(Vec::new())
}

fn run_loopback(cfg: &BenchConfig, out: &mut dyn Write) -> Result<Vec<ResultRow>, String> {
    let cpus = pick_cpus();
    // Engine threads inherit the affinity of the thread that opens their device: opened
    // here unpinned, each device's engines then follow the thread that connects (or
    // accepts) its QPs, which the product does by default
    // (`EnginePlacement::FollowConsumers`): the client's engine goes to the client's
    // CPU, the server's to the server's. With --pin-engines they are pinned there from
    // the start instead.
    // Only the client's device records (--pcap): one side shows the whole exchange.
    // Side 0 is the client, 1 the server (their addresses on a simulated network).
    let net = crate::transport::Net::new(&cfg.net);
    let open = |cpu: Option<usize>, record: bool, side: u8| {
        let mut dc = cfg.device_config();
        dc.user_tcp = net.user_tcp(side);
        if let Some(c) = cpu.filter(|_| cfg.pin_engines) {
            dc.engine_cpus = vec![c; cfg.engine_threads];
        }
        if !record {
            dc.pcap = None;
        }
        Device::open(dc).map_err(|e| format!("device: {e}"))
    };
    let sdev = open(cpus.map(|(_, s)| s), false, 1)?;
    let cdev = open(cpus.map(|(c, _)| c), true, 0)?;
    let (server_tid_tx, server_tid) = std::sync::mpsc::channel();
    let listener = sdev
        .listen(net.listen_addr())
        .map_err(|e| format!("listen: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let server_opts = cfg.server_opts();
    let server = std::thread::Builder::new()
        .name("bench-server".into())
        .spawn({
            let sdev = sdev.clone();
            move || {
                let _pin = cpus.and_then(|(_, s)| affinity::pin_current(s).ok());
                let _ = server_tid_tx.send(affinity::thread_id());
                server::serve(&sdev, &listener, server_opts)
            }
        })
        .map_err(|e| e.to_string())?;
    let watch = Watch {
        net: net.clone(),
        devs: vec![cdev.clone(), sdev],
        server_tid: server_tid.recv().ok(),
        loopback_cpus: cpus,
    };
    let mut tcp_server = None;
    let mut tcp_addr = None;
    if cfg.baseline.is_some() {
        let tl = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("listen: {e}"))?;
        tcp_addr = Some(tl.local_addr().map_err(|e| e.to_string())?);
        tcp_sockets::listening(&tl, cfg.same_host_tcp);
        let policy = cfg.same_host_tcp;
        let tcp_pairs = if cfg.count_pairs() { 0 } else { cfg.pairs };
        let per_size = cfg.tcp_kinds().len() + tcp_pairs as usize;
        let rounds = cfg.sizes.len() * per_size * cfg.qp_counts.len();
        tcp_server = Some(
            std::thread::Builder::new()
                .name("bench-tcp-server".into())
                .spawn(move || {
                    let _pin = cpus.and_then(|(_, s)| affinity::pin_current(s).ok());
                    tcp::serve(&tl, Some(rounds), policy)
                })
                .map_err(|e| e.to_string())?,
        );
    }
    let placement = match cpus {
        Some((c, s)) if cfg.pin_engines => {
            format!("loopback, client and its engine on CPU {c}, server and its engine on CPU {s}")
        }
        Some((c, s)) if cfg.engine_placement == softrnic_rnic::EnginePlacement::Inherit => {
            format!("loopback, client on CPU {c}, server on CPU {s}, engines anywhere")
        }
        Some((c, s)) => format!(
            "loopback, client on CPU {c}, server on CPU {s}; engines follow the side that connects their QPs"
        ),
        None => "loopback, one CPU: sides not pinned".to_string(),
    };
    let rows = {
        let _pin = cpus.and_then(|(c, _)| affinity::pin_current(c).ok());
        let rows = each_qp_count(cfg, |c, last| {
            let mut rep = report::Reporter::new(&mut *out, c, placement.clone());
            client_rounds(c, &cdev, addr, tcp_addr, &mut rep, last, Some(&watch))
        })?;
        count_pairs(cfg, &cdev, addr, out, Some(&watch))?;
        rows
    };
    // On success both servers have finished their last round.
    server
        .join()
        .map_err(|_| "server thread panicked".to_string())??;
    if let Some(t) = tcp_server {
        t.join()
            .map_err(|_| "TCP baseline server thread panicked".to_string())?
            .map_err(|e| format!("TCP baseline server: {e}"))?;
    }
    Ok(rows)
}

/// The transport of a run and the devices whose counters each round reports (the
/// client's first), and the server thread, whose place is reported too.
struct Watch {
    net: crate::transport::Net,
    devs: Vec<Device>,
    server_tid: Option<i32>,
    /// A loopback run's (client, server) CPUs, whose distance each paired sub-run
    /// records (`None` against a remote peer).
    loopback_cpus: Option<(usize, usize)>,
}

impl Watch {
    fn counters(&self) -> crate::transport::Counters {
        let devs: Vec<&Device> = self.devs.iter().collect();
        self.net.counters(&devs)
    }

    /// The threads whose CPUs a round reports: the calling (client) thread, the
    /// server's, and each device's engines.
    fn threads(&self) -> Vec<placement::Watched> {
        let w = |role: String, tid: i32| placement::Watched { role, tid };
        let mut t = vec![w("client".into(), affinity::thread_id())];
        t.extend(self.server_tid.map(|tid| w("server".into(), tid)));
        for (side, dev) in ["client", "server"].iter().zip(&self.devs) {
            let engines = dev.engines();
            let one = engines.len() == 1;
            for e in engines {
                let role = if one {
                    format!("{side} engine")
                } else {
                    format!("{side} engine {}", e.vector)
                };
                t.push(w(role, e.tid));
            }
        }
        t
    }
}

thread_local! {
    /// The loopback round in progress in this thread: both devices and the network.
    static STALL_REPORT: std::cell::RefCell<Option<(Vec<Device>, crate::transport::Net)>> =
        const { std::cell::RefCell::new(None) };
}

/// While it lives, a round that stalls in this thread can report both devices' state
/// and the network's ([`stall_report`]), taken while its QPs still exist.
struct StallReport;

impl StallReport {
    fn install(w: &Watch) -> StallReport {
        STALL_REPORT.with(|r| *r.borrow_mut() = Some((w.devs.clone(), w.net.clone())));
        StallReport
    }
}

impl Drop for StallReport {
    fn drop(&mut self) {
        STALL_REPORT.with(|r| r.borrow_mut().take());
    }
}

/// What a user needs to report a hang of the loopback round in progress: each
/// device's QPs (queues, Reads outstanding and queued) and own TCP (every connection's
/// state, timers, readiness flags), and the simulated network's held packets. Empty
/// outside a loopback round.
pub(crate) fn stall_report() -> String {
    STALL_REPORT.with(|r| {
        let Some((devs, net)) = &*r.borrow() else {
            return String::new();
        };
        let mut s = String::new();
        for (side, dev) in ["client", "server"].iter().zip(devs) {
            s += &format!("\n{side} device:\n{}", dev.stall_report());
        }
        if let Some(n) = net.stall_report() {
            s += &format!("\n{n}");
        }
        s
    })
}

/// Runs `f` with the configuration of each `-q` count in turn (and whether it is the
/// last); returns every row.
fn each_qp_count(
    cfg: &BenchConfig,
    mut f: impl FnMut(&BenchConfig, bool) -> Result<Vec<ResultRow>, String>,
) -> Result<Vec<ResultRow>, String> {
    let mut rows = Vec::new();
    for (k, &q) in cfg.qp_counts.iter().enumerate() {
        let c = BenchConfig {
            qps: q,
            ..cfg.clone()
        };
        rows.extend(f(&c, k + 1 == cfg.qp_counts.len())?);
    }
    Ok(rows)
}

/// With several `-q` counts and `--pairs`, after every count's table: the first count
/// against the last in alternating sub-runs, size by size; the run's last round is
/// among them.
fn count_pairs(
    cfg: &BenchConfig,
    dev: &Device,
    addr: SocketAddr,
    out: &mut dyn Write,
    watch: Option<&Watch>,
) -> Result<(), String> {
    if !cfg.count_pairs() {
        return Ok(());
    }
    pairs::run_count_pairs(cfg, out, |c, size, last| {
        let _report = watch.map(StallReport::install);
        rdma::client_round(c, dev, addr, size, last)
    })
    .map(|_| ())
}

/// One table: every size, with `cfg.qps` QPs; `last_count` says whether the server's
/// last round is among them.
fn client_rounds(
    cfg: &BenchConfig,
    dev: &Device,
    addr: SocketAddr,
    tcp_addr: Option<SocketAddr>,
    rep: &mut report::Reporter<'_>,
    last_count: bool,
    watch: Option<&Watch>,
) -> Result<Vec<ResultRow>, String> {
    let mut rows = Vec::new();
    rep.clock(match cfg.test {
        Test::WriteBw | Test::SendBw => Clock::ClosingRead,
        Test::ReadBw => Clock::LastCompletion,
        _ => Clock::Latency,
    });
    rep.header().map_err(|e| e.to_string())?;
    let kinds = cfg.tcp_kinds();
    for (i, &size) in cfg.sizes.iter().enumerate() {
        let last = last_count && i + 1 == cfg.sizes.len();
        let mut baselines = Vec::new();
        let mut sockets = None;
        if let Some(t) = tcp_addr {
            for &kind in &kinds {
                let (m, set) = tcp::client_round(cfg, t, size, kind)
                    .map_err(|e| format!("TCP baseline ({}): {e}", kind.label()))?;
                sockets.get_or_insert(set);
                baselines.push((kind, m));
            }
        }
        let before = watch.map(Watch::counters);
        let sampler = watch.map(|w| placement::Sampler::start(w.threads()));
        let softrnic = {
            let _report = watch.map(StallReport::install);
            rdma::client_round(cfg, dev, addr, size, last && cfg.pairs == 0)?
        };
        if let Some(s) = sampler {
            rep.ran(size, &s.finish());
        }
        if let (Some(w), Some(b)) = (watch, before) {
            let c = w.counters().since(&b);
            let mut v = c.json();
            if let serde_json::Value::Object(m) = &mut v {
                m.insert("rnic_transport".into(), w.net.name().into());
            }
            rep.annotate(v, c.text());
        }
        let mut row = ResultRow::new(cfg.test, size, softrnic, baselines);
        row.baseline_sockets = sockets;
        if let (Some(t), true) = (tcp_addr, cfg.pairs > 0 && !cfg.count_pairs()) {
            let sub = pairs::sub_config(cfg, cfg.pairs);
            // Over loopback both sides run here, on the two CPUs the host may move.
            let cpus = watch.and_then(|w| w.loopback_cpus);
            let p = pairs::run_placed(
                &sub,
                cfg.pairs,
                || {
                    cpus.and_then(|(a, b)| {
                        cpu_distance::round_trip_ns(a, b, cpu_distance::Probe::SUB_RUN)
                    })
                },
                |c| {
                    tcp::client_round(c, t, size, c.pairs_with)
                        .map(|(m, _)| m)
                        .map_err(|e| format!("TCP baseline ({}): {e}", c.pairs_with.label()))
                },
                |c, final_sub| {
                    let _report = watch.map(StallReport::install);
                    rdma::client_round(c, dev, addr, size, last && final_sub)
                },
            )?;
            row.paired = Some(p);
        }
        rep.row(&row).map_err(|e| e.to_string())?;
        rows.push(row);
    }
    rep.summary(&rows).map_err(|e| e.to_string())?;
    Ok(rows)
}

/// `softrnic <test> ...`: runs and prints to stdout.
pub fn main(cmd: &BenchCommand) -> Result<(), String> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    run(cmd, &mut out).map(|_| ())
}
