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

pub mod cqs;
pub mod meta;
pub mod perftest;
pub mod rdma;
pub mod rdma_cm;
pub mod report;
pub mod server;
pub mod stats;
pub mod tcp;
pub mod tcp_streams;

use clap::{Args, Parser, Subcommand, ValueEnum};
use softrnic_rnic::{CrcPolicy, Device, DeviceConfig, ProgressMode, affinity};
use std::io::Write;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

pub use stats::{BwResult, CpuClock, CpuUse, LatResult, LatStats};
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

/// A list of message sizes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SizeList(pub Vec<usize>);

/// Parses a size: a number with an optional K/M/G suffix (powers of 1024; `KiB`, `KB`,
/// `k` all mean 1024).
pub fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    let n: usize = num.parse().map_err(|_| format!("bad size {s:?}"))?;
    let mult: usize = match suffix.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return Err(format!("bad size suffix in {s:?}")),
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("size {s:?} too large"))
}

/// Parses `-s`: one size or a comma-separated list; every size must be at least 1.
pub fn parse_size_list(s: &str) -> Result<SizeList, String> {
    let v = s
        .split(',')
        .map(parse_size)
        .collect::<Result<Vec<_>, _>>()?;
    if v.contains(&0) {
        return Err("sizes must be at least 1 octet".into());
    }
    Ok(SizeList(v))
}

/// The baseline to compare with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Baseline {
    /// Plain TCP sockets, in each discipline ([`TcpKind`]): a stream for bandwidth
    /// (blocking, busy-polling, batching), a ping-pong for latency (blocking,
    /// busy-polling).
    Tcp,
}

/// The devices' progress model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProgressArg {
    /// Engine threads serve the sockets, and a polling consumer drives its QPs too.
    Hybrid,
    /// Engine threads only.
    Engine,
}

/// The flags every benchmark subcommand takes (perftest's, plus softrnic's own).
#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// Server to connect to (client mode). Without it, this side is the server.
    pub address: Option<String>,
    /// Message size, or a comma-separated list of sizes (suffixes K, M: 4K, 1M)
    /// [default: 65536 for bandwidth, 2 for latency].
    #[arg(short = 's', long = "size", value_parser = parse_size_list, value_name = "SIZE[,SIZE...]")]
    pub size: Option<SizeList>,
    /// Iterations per QP and size [default: 5000 for bandwidth, 1000 for latency].
    #[arg(short = 'n', long = "iters", conflicts_with = "duration")]
    pub iters: Option<u64>,
    /// Run each size for this many seconds instead of a number of iterations.
    #[arg(short = 'D', long = "duration", value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// Every size from 2 octets to 8 MiB, powers of two.
    #[arg(short = 'a', long = "all", conflicts_with = "size")]
    pub all: bool,
    /// Number of QPs (bandwidth tests), or a comma-separated list of counts: each
    /// count runs every size, and prints its own table.
    #[arg(short = 'q', long = "qp", value_delimiter = ',', default_value = "1")]
    pub qps: Vec<u16>,
    /// Work requests kept outstanding per QP (bandwidth tests) [default: 128].
    #[arg(short = 't', long = "tx-depth")]
    pub tx_depth: Option<u32>,
    /// Receive queue depth at the receiver of Sends [default: 512 for send_bw].
    #[arg(short = 'r', long = "rx-depth")]
    pub rx_depth: Option<u32>,
    /// Signal one work request in N (selective signaling) [default: tx depth / 8].
    #[arg(short = 'Q', long = "cq-mod")]
    pub cq_mod: Option<u32>,
    /// Report bandwidth in Gb/s instead of MB/s (MB = 2^20 octets, as perftest).
    #[arg(long = "report_gbits", alias = "report-gbits")]
    pub report_gbits: bool,
    /// The server's TCP port (the TCP baseline uses the next one).
    #[arg(short = 'p', long = "port", default_value_t = 18515)]
    pub port: u16,
    /// Server and client in this process: two devices over loopback TCP, each side's
    /// thread pinned to its own CPU.
    #[arg(long, conflicts_with = "address")]
    pub loopback: bool,
    /// Require MPA CRC32c.
    #[arg(long)]
    pub crc: bool,
    /// MPA markers (RFC 5044) both ways: each side asks the other for them (a softrnic
    /// server asks back when the client asks).
    #[arg(long)]
    pub markers: bool,
    /// Also run the same pattern over plain TCP right before each softrnic run (every
    /// TCP discipline: blocking, busy-polling and, for bandwidth, batching), and print
    /// the ratio softrnic/TCP per size against the strongest of them.
    #[arg(long, value_enum)]
    pub baseline: Option<Baseline>,
    /// TCP baseline, bandwidth tests: set TCP_NODELAY on the stream (as softrnic does on
    /// its sockets) instead of leaving Nagle on.
    #[arg(long)]
    pub tcp_nodelay: bool,
    /// One JSON object per result line on stdout, for scripts.
    #[arg(long)]
    pub json: bool,
    /// Largest FPDU to send (suffixes K, M) [default: the TCP MSS].
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    pub fpdu: Option<usize>,
    /// Progress model of the devices.
    #[arg(long, value_enum, default_value_t = ProgressArg::Hybrid)]
    pub progress_mode: ProgressArg,
    /// Engine threads per device.
    #[arg(long, default_value_t = 1)]
    pub engine_threads: usize,
    /// How long an idle engine thread spins before it blocks, microseconds
    /// [default: the device default].
    #[arg(long, value_name = "USEC")]
    pub engine_spin_us: Option<u64>,
    /// Loopback: pin each device's engine threads to its side's CPU (by default they may
    /// run anywhere).
    #[arg(long)]
    pub pin_engines: bool,
    /// Kernel socket send buffer shared by each device's connections (e.g. 64M; 0
    /// leaves every socket to Linux's tuning) [default: the device default, 64 MiB].
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    pub socket_send_budget: Option<usize>,
    /// Sleep on completion events instead of busy-polling (perftest's -e): each side
    /// arms its CQs and waits on a completion channel; the engine threads do all the
    /// socket work (progress mode engine) and block at once when idle (engine spin 0
    /// unless --engine-spin-us). The TCP baselines are then those that do not spin
    /// either (blocking, batching). send_lat, read_lat, write_bw, read_bw.
    #[arg(short = 'e', long = "events")]
    pub events: bool,
    /// In the one-sided tests, the server's thread busy-polls its CQ (driving its
    /// sockets) instead of leaving the passive side to the engine threads.
    #[arg(long)]
    pub server_poll: bool,
    /// Server: a round whose QPs move nothing for this many seconds is dropped, so a
    /// silent client cannot hold the server.
    #[arg(long, default_value_t = 30, value_name = "SECONDS")]
    pub idle_timeout: u64,
    /// Latency tests: iterations run before measuring.
    #[arg(long, default_value_t = 100)]
    pub warmup: u64,
    /// Address the server binds to.
    #[arg(long, default_value = "0.0.0.0")]
    pub bind: String,
    /// No progress line on stderr.
    #[arg(long)]
    pub quiet: bool,
    /// Print each round's QP I/O counters (FPDUs, syscalls) of both sides to stderr.
    #[arg(short = 'v', long)]
    pub verbose: bool,
    /// perftest's -R: a control connection for perftest's parameter exchange, then the
    /// test QPs, all by RDMA CM to the same port, so either side can be Linux perftest
    /// (`ib_write_bw -R ...`). Both sides need the same flags; one size, -n only.
    #[arg(short = 'R', long = "rdma-cm")]
    pub rdma_cm: bool,
    /// Record this side's connections (with --loopback, the client's) into a pcap file,
    /// with synthetic TCP/IP headers, for `softrnic decode` or Wireshark. Every octet
    /// is recorded: keep runs short. The TCP baseline is not recorded.
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<PathBuf>,
    /// What carries the QPs (kernel TCP, or softrnic's own TCP on a simulated network).
    #[command(flatten)]
    pub net: crate::transport::TransportArgs,
}

/// The benchmark subcommands.
#[derive(Subcommand, Debug, Clone)]
pub enum BenchCommand {
    /// RDMA Write bandwidth (as perftest's ib_write_bw).
    #[command(name = "write_bw", alias = "write-bw")]
    WriteBw(BenchArgs),
    /// RDMA Read bandwidth (ib_read_bw).
    #[command(name = "read_bw", alias = "read-bw")]
    ReadBw(BenchArgs),
    /// Send/Recv bandwidth (ib_send_bw).
    #[command(name = "send_bw", alias = "send-bw")]
    SendBw(BenchArgs),
    /// RDMA Write ping-pong latency (ib_write_lat).
    #[command(name = "write_lat", alias = "write-lat")]
    WriteLat(BenchArgs),
    /// RDMA Read latency (ib_read_lat).
    #[command(name = "read_lat", alias = "read-lat")]
    ReadLat(BenchArgs),
    /// Send/Recv ping-pong latency (ib_send_lat).
    #[command(name = "send_lat", alias = "send-lat")]
    SendLat(BenchArgs),
}

impl BenchCommand {
    /// The test.
    pub fn test(&self) -> Test {
        match self {
            BenchCommand::WriteBw(_) => Test::WriteBw,
            BenchCommand::ReadBw(_) => Test::ReadBw,
            BenchCommand::SendBw(_) => Test::SendBw,
            BenchCommand::WriteLat(_) => Test::WriteLat,
            BenchCommand::ReadLat(_) => Test::ReadLat,
            BenchCommand::SendLat(_) => Test::SendLat,
        }
    }

    /// Its flags.
    pub fn args(&self) -> &BenchArgs {
        match self {
            BenchCommand::WriteBw(a)
            | BenchCommand::ReadBw(a)
            | BenchCommand::SendBw(a)
            | BenchCommand::WriteLat(a)
            | BenchCommand::ReadLat(a)
            | BenchCommand::SendLat(a) => a,
        }
    }

    /// Parses a command line as `softrnic` would (`argv[0]` is the subcommand name),
    /// for tests and programs that drive the benchmarks.
    pub fn parse_from<I, T>(argv: I) -> Result<BenchCommand, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        #[derive(Parser)]
        #[command(name = "softrnic")]
        struct Wrap {
            #[command(subcommand)]
            cmd: BenchCommand,
        }
        let argv = std::iter::once(std::ffi::OsString::from("softrnic"))
            .chain(argv.into_iter().map(Into::into));
        Wrap::try_parse_from(argv).map(|w| w.cmd)
    }

    /// The run's configuration, with perftest's defaults filled in.
    pub fn config(&self) -> Result<BenchConfig, String> {
        BenchConfig::resolve(self.test(), self.args())
    }
}

/// Where the run takes place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// Both sides in this process.
    Loopback,
    /// Server, bound to this address.
    Server(String),
    /// Client of this server.
    Client(String),
}

/// A resolved benchmark configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchConfig {
    /// The test.
    pub test: Test,
    /// Message sizes, one round each.
    pub sizes: Vec<usize>,
    /// Iterations per QP (ignored with a duration).
    pub iters: u64,
    /// Duration of each round, instead of iterations.
    pub duration: Option<Duration>,
    /// QPs per round.
    pub qps: u16,
    /// Every QP count asked for (`-q` list; `qps` is the first): the rounds run for
    /// each in turn.
    pub qp_counts: Vec<u16>,
    /// Outstanding work requests per QP.
    pub tx_depth: u32,
    /// Receive depth at the receiver of Sends.
    pub rx_depth: u32,
    /// Signal one work request in this many.
    pub cq_mod: u32,
    /// Gb/s instead of MB/s.
    pub gbits: bool,
    /// Server port.
    pub port: u16,
    /// Loopback, server or client.
    pub mode: Mode,
    /// MPA CRC required.
    pub crc: bool,
    /// MPA markers asked for.
    pub markers: bool,
    /// TCP baseline.
    pub baseline: Option<Baseline>,
    /// TCP baseline stream with TCP_NODELAY.
    pub tcp_nodelay: bool,
    /// JSON lines output.
    pub json: bool,
    /// Largest FPDU.
    pub fpdu: Option<usize>,
    /// Devices' progress model.
    pub progress_mode: ProgressMode,
    /// Engine threads per device.
    pub engine_threads: usize,
    /// Engine spin time before blocking.
    pub engine_spin: Option<Duration>,
    /// Loopback: engine threads pinned to their side's CPU.
    pub pin_engines: bool,
    /// Kernel socket send buffer shared by a device's connections.
    pub socket_send_budget: Option<usize>,
    /// Server thread busy-polls in the one-sided tests.
    pub server_poll: bool,
    /// Both sides sleep on completion events; engine progress, no spinning.
    pub events: bool,
    /// Server: rounds silent this long are dropped.
    pub idle_timeout: Duration,
    /// Latency warm-up iterations.
    pub warmup: u64,
    /// Progress line on stderr.
    pub show_progress: bool,
    /// QP counters on stderr.
    pub verbose: bool,
    /// perftest's -R exchange instead of softrnic's own.
    pub rdma_cm: bool,
    /// Record this side's connections (the client's in loopback) into this pcap file.
    pub pcap: Option<PathBuf>,
    /// The transport under the QPs.
    pub net: crate::transport::TransportArgs,
}

/// Largest message size (and the top of `-a`).
pub const MAX_SIZE: usize = 8 << 20;

impl BenchConfig {
    /// Fills in perftest's defaults and checks the flags.
    pub fn resolve(test: Test, a: &BenchArgs) -> Result<BenchConfig, String> {
        let sizes = if a.all {
            (1..=23).map(|p| 1usize << p).collect()
        } else if let Some(s) = &a.size {
            s.0.clone()
        } else if test.is_bw() {
            vec![65536]
        } else {
            vec![2]
        };
        if let Some(&s) = sizes.iter().find(|&&s| s > MAX_SIZE) {
            return Err(format!("size {s} above the largest, {MAX_SIZE}"));
        }
        let duration = match a.duration {
            Some(d) if !(d > 0.0 && d <= 3600.0) => {
                return Err("duration must be in (0, 3600] seconds".into());
            }
            Some(d) => Some(Duration::from_secs_f64(d)),
            None => None,
        };
        let iters = a.iters.unwrap_or(if test.is_bw() { 5000 } else { 1000 });
        if iters == 0 {
            return Err("iterations must be at least 1".into());
        }
        let qps = a.qps.first().copied().unwrap_or(1);
        if a.qps.contains(&0) || (a.qps.iter().any(|&q| q > 1) && !test.is_bw()) {
            return Err("-q: 1 or more QPs, and only 1 for latency tests".into());
        }
        if a.qps.len() > 1 && a.rdma_cm {
            return Err("-q: one count with -R".into());
        }
        let tx_depth = if test.is_bw() {
            a.tx_depth.unwrap_or(128)
        } else {
            1
        };
        if !(1..=8192).contains(&tx_depth) {
            return Err("tx depth must be 1..=8192".into());
        }
        let rx_depth = a
            .rx_depth
            .unwrap_or(if test == Test::SendBw { 512 } else { 16 });
        if !(2..=16384).contains(&rx_depth) {
            return Err("rx depth must be 2..=16384".into());
        }
        let cq_mod = a.cq_mod.unwrap_or((tx_depth / 8).max(1));
        if cq_mod == 0 || cq_mod > tx_depth {
            return Err("cq-mod must be 1..=tx depth".into());
        }
        if a.engine_threads == 0 {
            return Err("engine threads must be at least 1".into());
        }
        if a.net.transport.in_process_only() && (!a.loopback || a.rdma_cm) {
            return Err(format!(
                "--transport {} runs both sides in this process: add --loopback (without -R)",
                a.net.transport.name()
            ));
        }
        let frame_link = !a.net.transport.in_process_only()
            && a.net.transport != crate::transport::TransportSpec::Kernel;
        if frame_link && a.loopback {
            return Err(format!(
                "--transport {} is one side's link: run the server and the client apart",
                a.net.transport.name()
            ));
        }
        if frame_link {
            a.net.frame_link()?;
        }
        if a.events {
            match test {
                Test::WriteLat => {
                    return Err(
                        "-e: write_lat's answer is a Write, which completes nothing at \
                                its target, so there is no event to sleep on; use send_lat"
                            .into(),
                    );
                }
                Test::SendBw => {
                    return Err("-e: send_bw's credits come back as RDMA Writes, which \
                                complete nothing at the client, so a client out of credit \
                                would have no event to wake it"
                        .into());
                }
                _ => {}
            }
            if a.rdma_cm || a.server_poll {
                return Err("-e cannot be combined with -R or --server-poll".into());
            }
        }
        let mode = match (&a.address, a.loopback) {
            (_, true) => Mode::Loopback,
            (Some(addr), false) => Mode::Client(addr.clone()),
            (None, false) => Mode::Server(a.bind.clone()),
        };
        Ok(BenchConfig {
            test,
            sizes,
            iters,
            duration,
            qps,
            qp_counts: if a.qps.is_empty() {
                vec![1]
            } else {
                a.qps.clone()
            },
            tx_depth,
            rx_depth,
            cq_mod,
            gbits: a.report_gbits,
            port: a.port,
            mode,
            crc: a.crc,
            markers: a.markers,
            baseline: a.baseline,
            tcp_nodelay: a.tcp_nodelay,
            json: a.json,
            fpdu: a.fpdu,
            progress_mode: match a.progress_mode {
                _ if a.events => ProgressMode::Engine,
                ProgressArg::Hybrid => ProgressMode::Hybrid,
                ProgressArg::Engine => ProgressMode::Engine,
            },
            engine_threads: a.engine_threads,
            engine_spin: a
                .engine_spin_us
                .or(a.events.then_some(0))
                .map(Duration::from_micros),
            pin_engines: a.pin_engines,
            socket_send_budget: a.socket_send_budget,
            server_poll: a.server_poll,
            events: a.events,
            idle_timeout: Duration::from_secs(a.idle_timeout.max(1)),
            warmup: a.warmup,
            show_progress: !a.quiet,
            verbose: a.verbose,
            rdma_cm: a.rdma_cm,
            pcap: a.pcap.clone(),
            net: a.net.clone(),
        })
        .and_then(|c| {
            if c.rdma_cm {
                rdma_cm::check(&c)?;
            }
            Ok(c)
        })
    }

    /// The TCP baselines to run (none without `--baseline`).
    pub fn tcp_kinds(&self) -> Vec<TcpKind> {
        match self.baseline {
            Some(Baseline::Tcp) => TcpKind::for_test(self.test, self.events),
            None => Vec::new(),
        }
    }

    /// What the server side takes from the flags (the rest comes from the client).
    pub fn server_opts(&self) -> server::ServerOpts {
        server::ServerOpts {
            poll: self.server_poll,
            verbose: self.verbose,
            idle: self.idle_timeout,
            ..server::ServerOpts::default()
        }
    }

    /// The device configuration: the defaults with the chosen progress model, FPDU size,
    /// CRC policy, and IRD/ORD 128 (as Linux siw's maximum) so Reads can fill the pipe.
    pub fn device_config(&self) -> DeviceConfig {
        let mut c = DeviceConfig {
            engine_threads: self.engine_threads,
            progress: self.progress_mode,
            max_fpdu: self.fpdu,
            pcap: self.pcap.clone(),
            ..DeviceConfig::default()
        };
        if let Some(s) = self.engine_spin {
            c.engine_spin = s;
        }
        if let Some(b) = self.socket_send_budget {
            c.socket_send_budget = b as u64;
        }
        // A frame link (one device per process); a simulated network is set per side.
        c.user_tcp = self.net.frame_link().ok().flatten();
        if self.crc {
            c.mpa.crc = CrcPolicy::Required;
        }
        c.mpa.markers = self.markers;
        c.mpa.ird = 128;
        c.mpa.ord = 128;
        c
    }
}

/// One measurement.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Measured {
    /// Bandwidth.
    Bw(BwResult),
    /// Latency.
    Lat(LatResult),
}

impl Measured {
    /// The CPU the run used, if counted.
    pub fn cpu(&self) -> Option<&CpuUse> {
        match self {
            Measured::Bw(b) => b.cpu.as_ref(),
            Measured::Lat(l) => l.cpu.as_ref(),
        }
    }

    /// Adds the CPU counted by `clock` since the run began, with what the run moved:
    /// bandwidth, its messages; latency, two messages per iteration (both directions),
    /// the `warmup` iterations included, since the clock ran through them too.
    pub fn with_cpu(mut self, clock: &CpuClock, warmup: u64) -> Measured {
        match &mut self {
            Measured::Bw(b) => {
                b.cpu = clock.stop(b.iterations, b.iterations * b.bytes as u64);
            }
            Measured::Lat(l) => {
                let msgs = 2 * (l.iterations + warmup);
                l.cpu = clock.stop(msgs, msgs * l.bytes as u64);
            }
        }
        self
    }

    /// Iterations measured.
    pub fn iterations(&self) -> u64 {
        match self {
            Measured::Bw(b) => b.iterations,
            Measured::Lat(l) => l.iterations,
        }
    }
}

/// The results of one size.
#[derive(Debug, Clone, PartialEq)]
pub struct ResultRow {
    /// The test.
    pub test: Test,
    /// Message size.
    pub size: usize,
    /// softrnic's result.
    pub softrnic: Measured,
    /// The strongest TCP baseline's result, if any ran: the one [`ResultRow::ratio`]
    /// compares with (the highest average bandwidth, or the lowest typical latency).
    pub tcp: Option<Measured>,
    /// Which baseline `tcp` is.
    pub tcp_kind: Option<TcpKind>,
    /// Every TCP baseline run for this size, in the order run.
    pub baselines: Vec<(TcpKind, Measured)>,
}

/// Whether `a` is a stronger result than `b`: more bandwidth, or less typical latency.
fn stronger(a: &Measured, b: &Measured) -> bool {
    match (a, b) {
        (Measured::Bw(a), Measured::Bw(b)) => a.avg_bps > b.avg_bps,
        (Measured::Lat(a), Measured::Lat(b)) => a.stats.typical < b.stats.typical,
        _ => false,
    }
}

impl ResultRow {
    /// A row: softrnic's result beside the baselines run for the size; the strongest
    /// baseline becomes `tcp`.
    pub fn new(
        test: Test,
        size: usize,
        softrnic: Measured,
        baselines: Vec<(TcpKind, Measured)>,
    ) -> ResultRow {
        let best = baselines
            .iter()
            .fold(None::<&(TcpKind, Measured)>, |best, b| match best {
                Some(x) if !stronger(&b.1, &x.1) => Some(x),
                _ => Some(b),
            })
            .copied();
        ResultRow {
            test,
            size,
            softrnic,
            tcp: best.map(|b| b.1),
            tcp_kind: best.map(|b| b.0),
            baselines,
        }
    }

    /// softrnic / the strongest TCP baseline: average bandwidth ratio (above 1:
    /// softrnic faster), or typical latency ratio (below 1: softrnic faster).
    pub fn ratio(&self) -> Option<f64> {
        ratio_of(&self.softrnic, self.tcp.as_ref()?)
    }

    /// softrnic / the baseline `kind`, as [`ResultRow::ratio`].
    pub fn ratio_to(&self, kind: TcpKind) -> Option<f64> {
        let (_, t) = self.baselines.iter().find(|(k, _)| *k == kind)?;
        ratio_of(&self.softrnic, t)
    }
}

/// softrnic / TCP: average bandwidth, or typical latency.
fn ratio_of(s: &Measured, t: &Measured) -> Option<f64> {
    match (s, t) {
        (Measured::Bw(s), Measured::Bw(t)) if t.avg_bps > 0.0 => Some(s.avg_bps / t.avg_bps),
        (Measured::Lat(s), Measured::Lat(t)) if t.stats.typical > 0.0 => {
            Some(s.stats.typical / t.stats.typical)
        }
        _ => None,
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
            };
            each_qp_count(cfg, |c, last| {
                let mut rep = report::Reporter::new(&mut *out, c, format!("client of {addr}"));
                client_rounds(c, &dev, addr, tcp_addr, &mut rep, last, Some(&watch))
            })
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
        // Serves baseline connections for as long as the process lives.
        std::thread::spawn(move || tcp::serve(&tl, None));
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
    // here unpinned, they may run anywhere; with --pin-engines, each side's engines pin
    // themselves to that side's CPU.
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
    let watch = Watch {
        net: net.clone(),
        devs: vec![cdev.clone(), sdev.clone()],
    };
    let listener = sdev
        .listen(net.listen_addr())
        .map_err(|e| format!("listen: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let server_opts = cfg.server_opts();
    let server = std::thread::Builder::new()
        .name("bench-server".into())
        .spawn(move || {
            let _pin = cpus.and_then(|(_, s)| affinity::pin_current(s).ok());
            server::serve(&sdev, &listener, server_opts)
        })
        .map_err(|e| e.to_string())?;
    let mut tcp_server = None;
    let mut tcp_addr = None;
    if cfg.baseline.is_some() {
        let tl = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("listen: {e}"))?;
        tcp_addr = Some(tl.local_addr().map_err(|e| e.to_string())?);
        let rounds = cfg.sizes.len() * cfg.tcp_kinds().len() * cfg.qp_counts.len();
        tcp_server = Some(
            std::thread::Builder::new()
                .name("bench-tcp-server".into())
                .spawn(move || {
                    let _pin = cpus.and_then(|(_, s)| affinity::pin_current(s).ok());
                    tcp::serve(&tl, Some(rounds))
                })
                .map_err(|e| e.to_string())?,
        );
    }
    let placement = match cpus {
        Some((c, s)) if cfg.pin_engines => {
            format!("loopback, client and its engine on CPU {c}, server and its engine on CPU {s}")
        }
        Some((c, s)) => format!("loopback, client on CPU {c}, server on CPU {s}"),
        None => "loopback, one CPU: sides not pinned".to_string(),
    };
    let rows = {
        let _pin = cpus.and_then(|(c, _)| affinity::pin_current(c).ok());
        each_qp_count(cfg, |c, last| {
            let mut rep = report::Reporter::new(&mut *out, c, placement.clone());
            client_rounds(c, &cdev, addr, tcp_addr, &mut rep, last, Some(&watch))
        })?
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

/// The transport of a run and the devices whose counters each round reports.
struct Watch {
    net: crate::transport::Net,
    devs: Vec<Device>,
}

impl Watch {
    fn counters(&self) -> crate::transport::Counters {
        let devs: Vec<&Device> = self.devs.iter().collect();
        self.net.counters(&devs)
    }
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
        if let Some(t) = tcp_addr {
            for &kind in &kinds {
                let m = tcp::client_round(cfg, t, size, kind)
                    .map_err(|e| format!("TCP baseline ({}): {e}", kind.label()))?;
                baselines.push((kind, m));
            }
        }
        let before = watch.map(Watch::counters);
        let softrnic = rdma::client_round(cfg, dev, addr, size, last)?;
        if let (Some(w), Some(b)) = (watch, before) {
            let c = w.counters().since(&b);
            let mut v = c.json();
            if let serde_json::Value::Object(m) = &mut v {
                m.insert("rnic_transport".into(), w.net.name().into());
            }
            rep.annotate(v, c.text());
        }
        let row = ResultRow::new(cfg.test, size, softrnic, baselines);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(argv: &[&str]) -> Result<BenchConfig, String> {
        BenchCommand::parse_from(argv.iter().copied())
            .map_err(|e| e.to_string())?
            .config()
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("64"), Ok(64));
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("1m"), Ok(1 << 20));
        assert_eq!(parse_size("8MB"), Ok(8 << 20));
        assert!(parse_size("").is_err());
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("K").is_err());
        assert_eq!(
            parse_size_list("64,4K,64K,1M"),
            Ok(SizeList(vec![64, 4096, 65536, 1 << 20]))
        );
        assert!(parse_size_list("0").is_err());
    }

    #[test]
    fn perftest_defaults() {
        let c = cfg(&["write_bw"]).unwrap();
        assert_eq!(c.test, Test::WriteBw);
        assert_eq!(c.sizes, vec![65536]);
        assert_eq!(
            (c.iters, c.duration, c.qps, c.tx_depth),
            (5000, None, 1, 128)
        );
        assert_eq!(c.cq_mod, 16);
        assert_eq!(c.port, 18515);
        assert_eq!(c.mode, Mode::Server("0.0.0.0".into()));
        assert!(!c.gbits && !c.crc && !c.json && c.baseline.is_none());
        assert_eq!(c.progress_mode, ProgressMode::Hybrid);
        assert_eq!(c.engine_threads, 1);
        let c = cfg(&["send_lat"]).unwrap();
        assert_eq!((c.sizes.clone(), c.iters, c.tx_depth), (vec![2], 1000, 1));
        assert_eq!(cfg(&["send_bw"]).unwrap().rx_depth, 512);
    }

    #[test]
    fn perftest_flags() {
        let c = cfg(&[
            "read_bw",
            "-s",
            "4096",
            "-n",
            "77",
            "-q",
            "4",
            "-t",
            "64",
            "-Q",
            "8",
            "-p",
            "9000",
            "--report_gbits",
            "--crc",
            "--fpdu",
            "16K",
            "--json",
            "10.0.0.1",
        ])
        .unwrap();
        assert_eq!(c.sizes, vec![4096]);
        assert_eq!(
            (c.iters, c.qps, c.tx_depth, c.cq_mod, c.port),
            (77, 4, 64, 8, 9000)
        );
        assert!(c.gbits && c.crc && c.json);
        assert_eq!(c.fpdu, Some(16384));
        assert_eq!(c.mode, Mode::Client("10.0.0.1".into()));
        let d = c.device_config();
        assert_eq!(d.mpa.crc, CrcPolicy::Required);
        assert_eq!(d.max_fpdu, Some(16384));

        let c = cfg(&["write_lat", "--loopback", "-D", "1.5", "--baseline", "tcp"]).unwrap();
        assert_eq!(c.mode, Mode::Loopback);
        assert_eq!(c.duration, Some(Duration::from_millis(1500)));
        assert_eq!(c.baseline, Some(Baseline::Tcp));

        let c = cfg(&["write-bw", "-a", "--report-gbits"]).unwrap();
        assert_eq!(c.sizes.len(), 23);
        assert_eq!((c.sizes[0], c.sizes[22]), (2, 8 << 20));
        assert!(c.gbits);

        let c = cfg(&["send_bw", "-s", "64,4K,64K,1M", "--progress-mode", "engine"]).unwrap();
        assert_eq!(c.sizes, vec![64, 4096, 65536, 1 << 20]);
        assert_eq!(c.progress_mode, ProgressMode::Engine);
        assert_eq!((c.qps, c.qp_counts.clone()), (1, vec![1]));

        let c = cfg(&["write_bw", "-q", "1,16,256"]).unwrap();
        assert_eq!((c.qps, c.qp_counts), (1, vec![1, 16, 256]));
    }

    #[test]
    fn bad_flags() {
        assert!(cfg(&["write_bw", "-n", "5", "-D", "2"]).is_err());
        assert!(cfg(&["write_bw", "-a", "-s", "64"]).is_err());
        assert!(cfg(&["write_bw", "--loopback", "host"]).is_err());
        assert!(cfg(&["write_bw", "-s", "16M"]).is_err());
        assert!(cfg(&["write_bw", "-n", "0"]).is_err());
        assert!(cfg(&["write_bw", "-D", "0"]).is_err());
        assert!(cfg(&["write_lat", "-q", "2"]).is_err());
        assert!(cfg(&["write_lat", "-q", "1,2"]).is_err());
        assert!(cfg(&["write_bw", "-q", "1,0"]).is_err());
        assert!(cfg(&["write_bw", "-R", "-q", "1,2"]).is_err());
        assert!(cfg(&["write_bw", "-t", "8", "-Q", "16"]).is_err());
        assert!(cfg(&["write_bw", "--baseline", "udp"]).is_err());
        assert!(cfg(&["nope_bw"]).is_err());
    }

    /// The row's `tcp` is the strongest baseline: most bandwidth, least typical latency.
    #[test]
    fn the_ratio_is_against_the_strongest_baseline() {
        let bw = |mbs: f64| {
            let t0 = std::time::Instant::now();
            let mut r = stats::BwMeter::start(t0).finish(t0 + Duration::from_secs(1), 10, 1);
            r.avg_bps = mbs;
            Measured::Bw(r)
        };
        let row = ResultRow::new(
            Test::WriteBw,
            64,
            bw(100.0),
            vec![
                (TcpKind::Blocking, bw(50.0)),
                (TcpKind::BusyPoll, bw(80.0)),
                (TcpKind::Batching, bw(400.0)),
            ],
        );
        assert_eq!(row.tcp_kind, Some(TcpKind::Batching));
        assert_eq!(row.ratio(), Some(0.25));
        assert_eq!(row.ratio_to(TcpKind::Blocking), Some(2.0));
        let lat = |typical: f64| {
            let s = [typical];
            Measured::Lat(LatResult {
                bytes: 8,
                iterations: 1,
                stats: LatStats::from_samples(&s).unwrap(),
                cpu: None,
            })
        };
        let row = ResultRow::new(
            Test::SendLat,
            8,
            lat(6.0),
            vec![
                (TcpKind::Blocking, lat(40.0)),
                (TcpKind::BusyPoll, lat(4.0)),
            ],
        );
        assert_eq!(row.tcp_kind, Some(TcpKind::BusyPoll));
        assert_eq!(row.ratio(), Some(1.5));
        let none = ResultRow::new(Test::SendLat, 8, lat(6.0), Vec::new());
        assert_eq!((none.tcp, none.tcp_kind, none.ratio()), (None, None, None));
    }

    #[test]
    fn test_codes() {
        for t in Test::ALL {
            assert_eq!(Test::from_code(t.code()), Some(t));
        }
        assert_eq!(Test::from_code(6), None);
    }

    #[test]
    fn addresses() {
        assert_eq!(
            resolve_addr("127.0.0.1", 18515).unwrap(),
            "127.0.0.1:18515".parse().unwrap()
        );
        assert_eq!(
            resolve_addr("127.0.0.1:9", 18515).unwrap(),
            "127.0.0.1:9".parse().unwrap()
        );
        assert_eq!(resolve_addr("::1", 7).unwrap(), "[::1]:7".parse().unwrap());
    }
}
