//! `softrnic rping`: the exchange of rdma-core's `rping`, compatible with it in both
//! roles, so softrnic can be checked against Linux siw with the tool RDMA users run
//! first.
//!
//! Each iteration: the client advertises its source buffer with a Send (address, rkey,
//! size: 16 octets, network order); the server RDMA-Reads it, answers with a Send; the
//! client advertises its sink buffer; the server RDMA-Writes what it read into it and
//! Sends again. With verify, the client checks that the sink holds the source's bytes.

use clap::{Args, ValueEnum};
use softrnic_rnic::*;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

/// `softrnic rping`'s command line: rping's flags with their meaning, plus the MPA
/// knobs interop testing needs.
#[derive(Debug, Clone, Args)]
pub struct RpingArgs {
    /// Server: listen for one client (on `-a`, default every address).
    #[arg(
        short = 's',
        conflicts_with = "client",
        required_unless_present = "client"
    )]
    pub server: bool,
    /// Client: connect to the server at `-a`.
    #[arg(short = 'c')]
    pub client: bool,
    /// Address: the server's (client) or the one to listen on (server).
    #[arg(short = 'a')]
    pub addr: Option<String>,
    /// TCP port.
    #[arg(short = 'p', default_value_t = 7174)]
    pub port: u16,
    /// Iterations (0: until interrupted, like rping).
    #[arg(short = 'C', default_value_t = 0)]
    pub count: u64,
    /// Ping buffer size in octets (at least 16).
    #[arg(short = 'S', default_value_t = 64)]
    pub size: usize,
    /// Print each ping's data.
    #[arg(short = 'v')]
    pub verbose: bool,
    /// Verify the data the server wrote back (client).
    #[arg(short = 'V')]
    pub verify: bool,
    /// Server: serve clients one after another, until killed.
    #[arg(short = 'P', requires = "server")]
    pub persistent: bool,
    /// Take receive buffers from a shared receive queue (the QP has no receive queue
    /// of its own).
    #[arg(long)]
    pub srq: bool,
    /// Server: make this bad remote access into the client's memory, to check the
    /// client's Terminate (its layer/type/code is printed).
    #[arg(long, value_enum, requires = "server")]
    pub inject: Option<Fault>,
    /// Print nothing but errors.
    #[arg(short = 'q')]
    pub quiet: bool,
    /// MPA CRC32c: off (use it only if the peer asks), required (ask for it), strict
    /// (and refuse a peer that does not).
    #[arg(long, value_enum, default_value_t = CrcArg::Off)]
    pub crc: CrcArg,
    /// MPA markers (RFC 5044): ask the peer to insert them in what it sends us. A
    /// server asks back when its client asks, so a client's `--markers` means both ways.
    #[arg(long)]
    pub markers: bool,
    /// Our inbound RDMA Read depth, announced in the MPA frame (RFC 6581).
    #[arg(long, default_value_t = 1)]
    pub ird: u16,
    /// Our outbound RDMA Read depth, announced in the MPA frame (RFC 6581).
    #[arg(long, default_value_t = 1)]
    pub ord: u16,
    /// RFC 6581 peer-to-peer mode: an RTR message opens the connection.
    #[arg(long)]
    pub p2p: bool,
    /// The RTR message types we offer (client) or accept (server) in peer-to-peer mode.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [RtrArg::Write, RtrArg::Read])]
    pub rtr: Vec<RtrArg>,
    /// MPA revision (1: plain RFC 5044, no IRD/ORD exchange).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=2))]
    pub mpa_rev: u8,
    /// Seconds to wait for each step before giving up.
    #[arg(long, default_value_t = 10)]
    pub timeout: u64,
    /// Record this side's connections (MPA exchange and FPDUs, with synthetic TCP/IP
    /// headers) into a pcap file, for `softrnic decode` or Wireshark.
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<PathBuf>,
    /// Client: after the server's MPA Reply, hold the first message for this many MPA
    /// round trips (a Linux siw server takes its socket into RDMA mode only after its
    /// Reply, and misses anything that arrives earlier; docs/INTEROP.md).
    #[arg(long, default_value_t = FirstFpduHold::default().rtts, value_name = "N")]
    pub hold_rtts: u32,
    /// Client: the hold's upper bound, in milliseconds.
    #[arg(long, default_value_t = FirstFpduHold::default().max.as_millis() as u64, value_name = "MS")]
    pub hold_max_ms: u64,
    /// What carries the QPs. With `--transport user:sim` both roles run in this
    /// process (give `-c`): the server at 10.0.0.2, the client at 10.0.0.1.
    #[command(flatten)]
    pub net: crate::transport::TransportArgs,
}

/// `--crc` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CrcArg {
    /// C=0; CRC only if the peer sets C.
    Off,
    /// C=1.
    Required,
    /// C=1 and the peer must set C too.
    Strict,
}

/// `--rtr` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RtrArg {
    /// Zero-length Send.
    Send,
    /// Zero-length RDMA Write.
    Write,
    /// Zero-length RDMA Read.
    Read,
}

impl RpingArgs {
    /// The options these flags mean.
    pub fn opts(&self) -> std::result::Result<RpingOpts, String> {
        if self.size < MIN_SIZE {
            return Err(format!(
                "-S {}: the buffer must hold at least {MIN_SIZE} octets",
                self.size
            ));
        }
        if self.size > u32::MAX as usize {
            return Err(format!(
                "-S {}: larger than rping's 32-bit size field",
                self.size
            ));
        }
        if self.p2p && self.mpa_rev != 2 {
            return Err("--p2p needs MPA revision 2".into());
        }
        let mut rtr = RtrTypes::empty();
        for t in &self.rtr {
            rtr |= match t {
                RtrArg::Send => RtrTypes::SEND,
                RtrArg::Write => RtrTypes::WRITE,
                RtrArg::Read => RtrTypes::READ,
            };
        }
        let mpa = MpaConfig {
            revision: self.mpa_rev,
            crc: match self.crc {
                CrcArg::Off => CrcPolicy::Off,
                CrcArg::Required => CrcPolicy::Required,
                CrcArg::Strict => CrcPolicy::Strict,
            },
            ird: self.ird,
            ord: self.ord,
            markers: self.markers,
            peer_to_peer: self.p2p,
            rtr_types: rtr,
            ..MpaConfig::default()
        };
        Ok(RpingOpts {
            count: self.count,
            size: self.size,
            verbose: self.verbose && !self.quiet,
            verify: self.verify,
            timeout: Duration::from_secs(self.timeout),
            mpa,
            persistent: self.persistent,
            srq: self.srq,
            inject: self.inject,
            pcap: self.pcap.clone(),
            hold: FirstFpduHold {
                rtts: self.hold_rtts,
                max: Duration::from_millis(self.hold_max_ms),
            },
            user_tcp: if self.net.transport.in_process_only() {
                None
            } else {
                self.net.frame_link()?
            },
        })
    }

    /// The socket address `-a`/`-p` name.
    pub fn socket_addr(&self) -> std::result::Result<SocketAddr, String> {
        let host = match (&self.addr, self.server) {
            (Some(a), _) => a.as_str(),
            (None, true) => "0.0.0.0",
            (None, false) => return Err("-c needs the server's address (-a)".into()),
        };
        (host, self.port)
            .to_socket_addrs()
            .map_err(|e| format!("-a {host}: {e}"))?
            .next()
            .ok_or_else(|| format!("-a {host}: no address"))
    }
}

/// Why an rping run failed.
#[derive(Debug, thiserror::Error)]
pub enum RpingError {
    /// A verbs call failed (connection refused, MPA rejected, ...).
    #[error(transparent)]
    Verbs(#[from] Error),
    /// No completion came within the step's time limit.
    #[error("no {0:?} completion within the time limit")]
    Timeout(WcOpcode),
    /// The server never answered the client's first advert (no Read Request, no
    /// Send): the connection is up, but the peer does not process what we sent.
    #[error("the server never answered our first Send")]
    NoFirstAnswer,
    /// A work request completed with an error status.
    #[error("{opcode:?} completed with {status:?}")]
    Failed {
        /// The work request's kind.
        opcode: WcOpcode,
        /// Its status.
        status: WcStatus,
    },
    /// The peer's advert was not 16 octets.
    #[error("the peer's buffer advert has {0} octets, not 16")]
    ShortAdvert(u32),
    /// The client's buffer does not fit ours (`-S` differs between the two sides).
    #[error(
        "the client's buffer ({theirs} octets) is larger than ours ({ours}): use the same -S on both sides"
    )]
    AdvertTooLarge {
        /// The client's advertised size.
        theirs: u32,
        /// Our buffer size.
        ours: usize,
    },
    /// A work request failed and the QP went to error with a Terminate.
    #[error("{opcode:?} completed with {status:?}; {} Terminate: {cause}", if *remote { "the peer sent" } else { "we sent" })]
    Terminated {
        /// The work request's kind.
        opcode: WcOpcode,
        /// Its status.
        status: WcStatus,
        /// The Terminate's layer/type/code.
        cause: TerminateCause,
        /// Whether the peer sent it.
        remote: bool,
    },
    /// Verify mode: the data written back differs from what was sent.
    #[error(
        "iteration {iteration}: data differs at octet {offset} (sent {sent:#04x}, got {got:#04x})"
    )]
    Mismatch {
        /// Iteration number (from 0).
        iteration: u64,
        /// First differing octet.
        offset: usize,
        /// What we sent there.
        sent: u8,
        /// What came back.
        got: u8,
    },
}

type Result<T> = std::result::Result<T, RpingError>;

/// The smallest ping buffer, as rping has it (room for "rdma-ping-N: " and more).
pub const MIN_SIZE: usize = 23;

/// Runs `softrnic rping` as the flags say.
pub fn main(args: &RpingArgs) -> std::result::Result<(), String> {
    let opts = args.opts()?;
    if args.net.transport.in_process_only() {
        return in_process(args, &opts);
    }
    let addr = args.socket_addr()?;
    let n = if args.server {
        server(addr, &opts, |a| {
            if !args.quiet {
                eprintln!("rping: server listening on {a}");
            }
        })
    } else {
        client(addr, &opts)
    }
    .map_err(|e| format!("rping: {e}"))?;
    if !args.quiet {
        let role = if args.server { "server" } else { "client" };
        let verified = if args.verify && args.client {
            ", data verified"
        } else {
            ""
        };
        eprintln!("rping: {role} done, {n} iterations{verified}");
    }
    Ok(())
}

/// `--transport user:sim`: a server and a client in this process, on a simulated
/// network of their own.
fn in_process(args: &RpingArgs, opts: &RpingOpts) -> std::result::Result<(), String> {
    use crate::transport::Net;
    if !args.client {
        return Err(format!(
            "--transport {} runs both roles in this process: give -c",
            args.net.transport.name()
        ));
    }
    let net = Net::new(&args.net);
    let sopts = RpingOpts {
        user_tcp: net.user_tcp(1),
        persistent: false,
        ..opts.clone()
    };
    let copts = RpingOpts {
        user_tcp: net.user_tcp(0),
        ..opts.clone()
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let listen = SocketAddr::from((Net::sim_addr(1), args.port));
    let srv = std::thread::spawn(move || {
        server(listen, &sopts, |a| {
            let _ = tx.send(a);
        })
    });
    let n = match rx.recv() {
        Ok(addr) => client(addr, &copts).map_err(|e| format!("rping client: {e}")),
        Err(_) => Err("the server ended before it listened".into()),
    };
    let served = srv
        .join()
        .map_err(|_| "the server thread panicked".to_string())?
        .map_err(|e| format!("rping server: {e}"));
    let n = n?;
    served?;
    if !args.quiet {
        let verified = if args.verify { ", data verified" } else { "" };
        eprintln!(
            "rping: client and server on {} done, {n} iterations{verified}",
            args.net.transport.name()
        );
    }
    Ok(())
}

/// rping options (the meaning of rping's flags).
#[derive(Debug, Clone)]
pub struct RpingOpts {
    /// `-C`: iterations (0: forever).
    pub count: u64,
    /// `-S`: buffer size (at least 16, the advert's own size... rping's minimum).
    pub size: usize,
    /// `-v`: print each ping's data.
    pub verbose: bool,
    /// `-V`: verify the data the server wrote back.
    pub verify: bool,
    /// Wait limit for each step.
    pub timeout: Duration,
    /// MPA settings (CRC policy etc.).
    pub mpa: MpaConfig,
    /// `-P`: the server serves clients one after another until killed.
    pub persistent: bool,
    /// `--srq`: receive buffers come from a shared receive queue.
    pub srq: bool,
    /// Server: make a bad remote access into the client's memory on purpose, to see
    /// the peer's Terminate.
    pub inject: Option<Fault>,
    /// `--pcap`: record the connections into this pcap file.
    pub pcap: Option<PathBuf>,
    /// Client: how long the first message waits after the MPA Reply.
    pub hold: FirstFpduHold,
    /// Run over softrnic's own TCP on this link (`None`: kernel TCP).
    pub user_tcp: Option<UserTcp>,
}

/// A bad remote access the server can make on purpose (`--inject`): checks that the
/// peer answers with the right Terminate and that both QPs flush.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Fault {
    /// RDMA Read with an STag the client never advertised.
    ReadBadStag,
    /// RDMA Read one octet beyond the client's advertised buffer.
    ReadBeyondBounds,
    /// RDMA Write with an STag the client never advertised.
    WriteBadStag,
    /// RDMA Write one octet beyond the client's advertised buffer.
    WriteBeyondBounds,
}

impl Fault {
    /// Where the Read step goes with this fault (the advert's own target otherwise).
    fn read(self, a: &Advert) -> (u64, u32) {
        match self {
            Fault::ReadBadStag => (a.addr, a.rkey ^ 0x5a5a_5a00),
            Fault::ReadBeyondBounds => (a.addr + 1, a.rkey),
            _ => (a.addr, a.rkey),
        }
    }

    /// Where the Write step goes with this fault.
    fn write(self, a: &Advert) -> (u64, u32) {
        match self {
            Fault::WriteBadStag => (a.addr, a.rkey ^ 0x5a5a_5a00),
            Fault::WriteBeyondBounds => (a.addr + 1, a.rkey),
            _ => (a.addr, a.rkey),
        }
    }
}

impl Default for RpingOpts {
    fn default() -> Self {
        let mpa = MpaConfig {
            ird: 1,
            ord: 1,
            ..MpaConfig::default()
        };
        RpingOpts {
            count: 10,
            size: 64,
            verbose: false,
            verify: false,
            timeout: Duration::from_secs(10),
            mpa,
            persistent: false,
            srq: false,
            inject: None,
            pcap: None,
            hold: FirstFpduHold::default(),
            user_tcp: None,
        }
    }
}

/// The 16-octet buffer advert rping sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Advert {
    /// Buffer address (tagged offset).
    pub addr: u64,
    /// Its rkey.
    pub rkey: u32,
    /// Its size.
    pub size: u32,
}

impl Advert {
    /// The advert for all of `size` octets of `mr`.
    pub fn of(mr: &Mr, size: usize) -> Advert {
        Advert {
            addr: mr.addr(),
            rkey: mr.rkey(),
            size: size as u32,
        }
    }

    /// Wire form.
    pub fn to_bytes(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.addr.to_be_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        b[12..].copy_from_slice(&self.size.to_be_bytes());
        b
    }

    /// From wire form.
    pub fn parse(b: &[u8]) -> Option<Advert> {
        Some(Advert {
            addr: u64::from_be_bytes(b.get(..8)?.try_into().ok()?),
            rkey: u32::from_be_bytes(b.get(8..12)?.try_into().ok()?),
            size: u32::from_be_bytes(b.get(12..16)?.try_into().ok()?),
        })
    }
}

/// rping's ping data: "rdma-ping-N: " then printable characters.
pub fn ping_data(iter: u64, size: usize) -> Vec<u8> {
    let mut v = format!("rdma-ping-{iter}: ").into_bytes();
    let mut c = 65 + (iter % 62) as u8;
    while v.len() < size {
        v.push(c);
        c = if c >= 122 { 65 } else { c + 1 };
    }
    v.truncate(size);
    if let Some(last) = v.last_mut() {
        *last = 0;
    }
    v
}

/// One connection's verbs objects (the device lives outside, so a persistent server
/// keeps one device and listener for all its clients).
struct Ends {
    dev: Device,
    cq: Cq,
    qp: Qp,
    pd: Pd,
    /// With `--srq`: where the receives go.
    srq: Option<Srq>,
}

fn open_device(opts: &RpingOpts) -> Result<Device> {
    Ok(Device::open(DeviceConfig {
        mpa: opts.mpa.clone(),
        pcap: opts.pcap.clone(),
        first_fpdu_hold: opts.hold,
        user_tcp: opts.user_tcp.clone(),
        ..DeviceConfig::default()
    })?)
}

fn open(dev: &Device, opts: &RpingOpts) -> Result<Ends> {
    let pd = dev.alloc_pd();
    let cq = dev.create_cq(16)?;
    let init = QpInit::new(&cq, 16, 16);
    let (qp, srq) = if opts.srq {
        let srq = dev.create_srq(&pd, SrqInit::new(16, 1))?;
        (dev.create_qp_on_srq(&pd, init, &srq)?, Some(srq))
    } else {
        (dev.create_qp(&pd, init)?, None)
    };
    Ok(Ends {
        dev: dev.clone(),
        cq,
        qp,
        pd,
        srq,
    })
}

/// Waits for the next completion of kind `op` (earlier ones of other kinds are
/// skipped). A failed work request is reported with the Terminate that put the QP into
/// error, when there was one: the QP posts that event before its completions, so it is
/// already queued.
fn wait(e: &Ends, opts: &RpingOpts, op: WcOpcode) -> Result<Completion> {
    let deadline = std::time::Instant::now() + opts.timeout;
    loop {
        let now = std::time::Instant::now();
        let wc = e.cq.wait_for(1, deadline.saturating_duration_since(now));
        let Some(c) = wc.first() else {
            return Err(RpingError::Timeout(op));
        };
        if c.status != WcStatus::Success {
            let id = e.qp.id();
            let fatal = e.dev.wait_event_matching(
                Duration::ZERO,
                |ev| matches!(ev, AsyncEvent::QpFatal { qp, .. } if *qp == id),
            );
            return Err(match fatal {
                Some(AsyncEvent::QpFatal { cause, remote, .. }) => RpingError::Terminated {
                    opcode: c.opcode,
                    status: c.status,
                    cause,
                    remote,
                },
                _ => RpingError::Failed {
                    opcode: c.opcode,
                    status: c.status,
                },
            });
        }
        if c.opcode == op {
            return Ok(*c);
        }
    }
}

/// Runs the client side against an rping server; returns the iterations done.
pub fn client(addr: SocketAddr, opts: &RpingOpts) -> Result<u64> {
    let dev = open_device(opts)?;
    let e = open(&dev, opts)?;
    let start =
        e.pd.alloc_mr(opts.size, Access::LOCAL_WRITE | Access::REMOTE_READ)?;
    let sink =
        e.pd.alloc_mr(opts.size, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let adv = e.pd.alloc_mr(16, Access::LOCAL_WRITE)?;
    let rx = e.pd.alloc_mr(16, Access::LOCAL_WRITE)?;
    repost(&e, &rx)?;
    let mut cfg = opts.mpa.clone();
    cfg.private_data.clear();
    dev.connect_with(addr, &e.qp, cfg)?;
    let mut i = 0;
    while opts.count == 0 || i < opts.count {
        let data = ping_data(i, opts.size);
        start.write(0, &data)?;
        sink.fill(0, opts.size, 0)?;
        adv.write(0, &Advert::of(&start, opts.size).to_bytes())?;
        send_advert(&e, &adv, opts, 10)?;
        // The server has read our buffer when it answers.
        match wait(&e, opts, WcOpcode::Recv) {
            Err(RpingError::Timeout(_)) if i == 0 => return Err(RpingError::NoFirstAnswer),
            other => other?,
        };
        repost(&e, &rx)?;
        adv.write(0, &Advert::of(&sink, opts.size).to_bytes())?;
        send_advert(&e, &adv, opts, 11)?;
        // The server has written our sink when it answers again.
        wait(&e, opts, WcOpcode::Recv)?;
        repost(&e, &rx)?;
        let got = sink.to_vec();
        if opts.verify
            && let Some(offset) = got.iter().zip(&data).position(|(g, d)| g != d)
        {
            return Err(RpingError::Mismatch {
                iteration: i,
                offset,
                sent: data[offset],
                got: got[offset],
            });
        }
        if opts.verbose {
            let end = got.iter().position(|&b| b == 0).unwrap_or(got.len());
            println!("ping data: {}", String::from_utf8_lossy(&got[..end]));
        }
        i += 1;
    }
    e.qp.disconnect()?;
    let _ = dev.wait_event_matching(opts.timeout, |ev| {
        matches!(ev, AsyncEvent::Disconnected { .. })
    });
    Ok(i)
}

/// Sends the 16-octet advert held in `adv` and waits until the Send completed.
fn send_advert(e: &Ends, adv: &Mr, opts: &RpingOpts, wr_id: u64) -> Result<()> {
    e.qp.post_send(SendWr::send(wr_id, adv.sge(0, 16)))?;
    wait(e, opts, WcOpcode::Send)?;
    Ok(())
}

/// Posts the one receive an rping side keeps for the peer's next advert.
fn repost(e: &Ends, rx: &Mr) -> Result<()> {
    let wr = RecvWr::new(1, rx.sge(0, 16));
    match &e.srq {
        Some(srq) => srq.post_recv(wr)?,
        None => e.qp.post_recv(wr)?,
    }
    Ok(())
}

/// Reads the advert a receive completion brought and re-posts the receive.
fn take_advert(e: &Ends, rx: &Mr, c: Completion) -> Result<Advert> {
    if c.byte_len != 16 {
        return Err(RpingError::ShortAdvert(c.byte_len));
    }
    let mut b = [0u8; 16];
    rx.read(0, &mut b)?;
    repost(e, rx)?;
    Ok(Advert::parse(&b).expect("16 octets"))
}

/// Serves rping clients on `listen`: one, or one after another with
/// [`RpingOpts::persistent`] (a failed client is then reported and the next one
/// served). Returns the iterations done.
pub fn server(listen: SocketAddr, opts: &RpingOpts, ready: impl FnOnce(SocketAddr)) -> Result<u64> {
    let dev = open_device(opts)?;
    let l = dev.listen(listen)?;
    ready(l.local_addr()?);
    let mut total = 0;
    loop {
        match serve_one(&dev, &l, opts) {
            Ok(n) => total += n,
            Err(e) if opts.persistent => eprintln!("rping: client failed: {e}"),
            Err(e) => return Err(e),
        }
        if !opts.persistent {
            return Ok(total);
        }
    }
}

/// Accepts the next client on `l` and serves it until it disconnects or `-C`
/// iterations are done; returns the iterations done.
pub fn serve_one(dev: &Device, l: &Listener, opts: &RpingOpts) -> Result<u64> {
    let e = open(dev, opts)?;
    let buf = e.pd.alloc_mr(opts.size.max(16), Access::LOCAL_WRITE)?;
    let adv = e.pd.alloc_mr(16, Access::LOCAL_WRITE)?;
    let rx = e.pd.alloc_mr(16, Access::LOCAL_WRITE)?;
    repost(&e, &rx)?;
    let req = l.accept()?;
    let mut cfg = opts.mpa.clone();
    cfg.private_data.clear();
    cfg.markers |= req.request().markers;
    req.accept_with(&e.qp, cfg)?;
    adv.write(0, &Advert::of(&buf, opts.size).to_bytes())?;
    let mut i = 0;
    loop {
        // The client's source buffer, or the end. After a fault we injected, how the
        // connection ended is the outcome being checked: a flush with no Terminate is
        // reported, not taken for a client that left.
        let first = match wait(&e, opts, WcOpcode::Recv) {
            Ok(c) => c,
            Err(RpingError::Failed { .. } | RpingError::Timeout(_))
                if (i > 0 || opts.count > 0) && opts.inject.is_none() =>
            {
                break;
            }
            Err(err) => return Err(err),
        };
        let src = take_advert(&e, &rx, first)?;
        let len = src.size as usize;
        if len > buf.len() {
            return Err(RpingError::AdvertTooLarge {
                theirs: src.size,
                ours: buf.len(),
            });
        }
        let (remote_addr, rkey) = opts.inject.map_or((src.addr, src.rkey), |f| f.read(&src));
        e.qp.post_send(SendWr::read(20, buf.sge(0, len), remote_addr, rkey))?;
        wait(&e, opts, WcOpcode::Read)?;
        if opts.verbose {
            let got = buf.to_vec();
            let end = got[..len].iter().position(|&b| b == 0).unwrap_or(len);
            println!("server ping data: {}", String::from_utf8_lossy(&got[..end]));
        }
        send_advert(&e, &adv, opts, 21)?;
        let c = wait(&e, opts, WcOpcode::Recv)?;
        let dst = take_advert(&e, &rx, c)?;
        let len = (dst.size as usize).min(len);
        let (remote_addr, rkey) = opts.inject.map_or((dst.addr, dst.rkey), |f| f.write(&dst));
        e.qp.post_send(SendWr::write(22, buf.sge(0, len), remote_addr, rkey))?;
        // A Write completes locally once sent; the Send behind it tells whether the
        // peer took it (a Terminate would flush the Send).
        wait(&e, opts, WcOpcode::Write)?;
        send_advert(&e, &adv, opts, 23)?;
        i += 1;
        if opts.count != 0 && i >= opts.count {
            break;
        }
    }
    let _ = dev.wait_event_matching(
        opts.timeout,
        |ev| matches!(ev, AsyncEvent::Disconnected { qp } if *qp == e.qp.id()),
    );
    Ok(i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advert_round_trip() {
        let a = Advert {
            addr: 0x5629_408c_7700,
            rkey: 0x8d6b_a600,
            size: 100,
        };
        assert_eq!(Advert::parse(&a.to_bytes()), Some(a));
        assert_eq!(Advert::parse(&[0; 15]), None);
    }

    #[test]
    fn softrnic_client_and_server_verify() {
        let opts = RpingOpts {
            count: 5,
            size: 100,
            verify: true,
            ..RpingOpts::default()
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let o = opts.clone();
        let s = std::thread::spawn(move || {
            server("127.0.0.1:0".parse().unwrap(), &o, |a| tx.send(a).unwrap())
        });
        let addr = rx.recv().unwrap();
        assert_eq!(client(addr, &opts).unwrap(), 5);
        assert_eq!(s.join().unwrap().unwrap(), 5);
    }
}
