//! The `softrnic rping` command line and its translation into [`RpingOpts`] and the
//! address to use.

use super::{Fault, MIN_SIZE, RpingOpts};
use clap::{Args, ValueEnum};
use softrnic_rnic::{CrcPolicy, FirstFpduHold, MpaConfig, RtrTypes};
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
