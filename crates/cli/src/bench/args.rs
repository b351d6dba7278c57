//! The benchmark subcommands' command line: sizes, flags and subcommands, as clap
//! parses them, before [`super::BenchConfig`] resolves them.

use super::*;

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

/// The TCP discipline `--pairs` pairs softrnic with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PairsWith {
    /// The busy-polling stream or ping-pong.
    BusyPoll,
    /// The batching stream (bandwidth tests).
    Batching,
    /// The blocking stream or ping-pong.
    Blocking,
}

impl PairsWith {
    /// The baseline it names.
    pub fn kind(self) -> TcpKind {
        match self {
            PairsWith::BusyPoll => TcpKind::BusyPoll,
            PairsWith::Batching => TcpKind::Batching,
            PairsWith::Blocking => TcpKind::Blocking,
        }
    }
}

/// The devices' progress model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProgressArg {
    /// Engine threads serve the sockets, and a polling consumer drives its QPs too.
    Hybrid,
    /// Engine threads only.
    Engine,
}

/// Where engines that no flag pins run (`DeviceConfig::engine_placement`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PlacementArg {
    /// On the CPUs of the threads that connect or accept their QPs (the default).
    Follow,
    /// Wherever the scheduler puts them (the behaviour before session 12).
    Inherit,
}

/// softrnic's kernel TCP connections to this host (`DeviceConfig::same_host_tcp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SameHostArg {
    /// Not BBR (CUBIC or Reno where the system's default would pace) and a fixed
    /// receive buffer (the default).
    Tuned,
    /// The system's congestion control and Linux's receive buffer tuning, as before
    /// session 13.
    System,
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
    /// An extra measurement beside the headline. With one -q count (and --baseline
    /// tcp): after each size's headline, N pairs of sub-runs of a TCP baseline (the
    /// --pairs-with discipline, stream or ping-pong) and softrnic, each a 1/N share of
    /// the size's duration (or iterations; latency: at least 1000, each after its own
    /// warm-up), in the order TCP, softrnic, softrnic, TCP, ...; reports each pair's
    /// ratio (latency: of t_typical, t_avg and the 99%), their median, and the ratio of
    /// all sub-runs pooled. With several -q counts (bandwidth tests; no baseline
    /// needed): after every count's table, N pairs of sub-runs of the first count and
    /// the last, alternating the same way, and the ratio last/first of their aggregate
    /// bandwidth; both counts at the run's own tx depth a QP, as their headlines (a
    /// sub-run lasts its share plus the drain of what its QPs posted). The headline and
    /// its ratios are unchanged.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub pairs: u32,
    /// The TCP discipline --pairs pairs softrnic with (one -q count): busy-poll (the
    /// default: the 64 KiB and 1 MiB bandwidth and the latency targets' baseline),
    /// batching (the 64-octet message rate target's), or blocking; it must be one of
    /// the test's baselines (with -e, busy-poll is not).
    #[arg(long, value_enum, value_name = "KIND")]
    pub pairs_with: Option<PairsWith>,
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
    /// Loopback: pin each device's engine threads to its side's CPU from the start (by
    /// default they follow the side's thread there once it connects its QPs).
    #[arg(long)]
    pub pin_engines: bool,
    /// Where engines that --pin-engines does not pin run: `follow` the threads that
    /// connect or accept their QPs (the device default), or `inherit` (anywhere the
    /// device's opener may run, as the scheduler decides).
    #[arg(long, value_enum, default_value_t = PlacementArg::Follow)]
    pub engine_placement: PlacementArg,
    /// Kernel socket send buffer shared by each device's connections (e.g. 64M; 0
    /// leaves every socket to Linux's tuning) [default: the device default, 256 MiB].
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    pub socket_send_budget: Option<usize>,
    /// QPs of a device that send large messages at once, the others waiting their turn
    /// (0: all at once) [default: the device default, 2].
    #[arg(long, value_name = "N")]
    pub tx_turns: Option<usize>,
    /// Octets a QP sends in its turn before a waiting QP goes (e.g. 4M) [default: the
    /// device default, 16M].
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    pub tx_turn_quantum: Option<usize>,
    /// softrnic's kernel TCP connections to this host: `tuned` (no BBR, a fixed
    /// receive buffer: the device default) or as the `system` sets them. The TCP
    /// baselines' sockets are set the same way in the same run.
    #[arg(long, value_enum, default_value_t = SameHostArg::Tuned)]
    pub same_host_tcp: SameHostArg,
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
    /// An extra measurement, not perftest's pattern: all QPs of a round share one
    /// buffer on each side (instead of one per QP), so with many QPs the data stays in
    /// the caches; set beside a normal run, it shows what the buffers' memory costs.
    #[arg(long)]
    pub shared_buffers: bool,
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
