//! What an rping run does: the options behind rping's flags, and the faults the
//! server can inject on purpose.

use super::Advert;
use clap::ValueEnum;
use softrnic_rnic::{FirstFpduHold, MpaConfig, UserTcp};
use std::path::PathBuf;
use std::time::Duration;

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
    pub(super) fn read(self, a: &Advert) -> (u64, u32) {
        match self {
            Fault::ReadBadStag => (a.addr, a.rkey ^ 0x5a5a_5a00),
            Fault::ReadBeyondBounds => (a.addr + 1, a.rkey),
            _ => (a.addr, a.rkey),
        }
    }

    /// Where the Write step goes with this fault.
    pub(super) fn write(self, a: &Advert) -> (u64, u32) {
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
