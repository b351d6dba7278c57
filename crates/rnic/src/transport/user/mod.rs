//! softrnic's own TCP under QPs (`softrnic-tcp`) instead of the kernel's, on a packet
//! link of the device's: the in-process [`SimNet`], or (item by item) a frame device of
//! `softrnic-netdev`.
//!
//! A device opened with [`crate::DeviceConfig::user_tcp`] owns one
//! [`softrnic_tcp::Stack`] with one IPv4 address on its link. A *stack thread* owns the
//! link's receive side: it waits for packets (the link's descriptor, or the wake a
//! [`SimNet`] gives when it queues one) and for the stack's earliest timer, hands
//! packets to the stack, sends what is due, and tells waiters what changed. Everything
//! else runs in the threads that use a connection: a QP's transmit path queues FPDUs in
//! the TCP send buffer and sends the segments at once, from its own thread; its receive
//! path copies octets out of the connection's reassembly into registered memory.
//!
//! - `stack.rs`: the stack behind its lock, the stack thread, readiness for waiters.
//! - `link.rs`: what a link is to the stack thread; [`SimNet`]'s link.
//! - `stream.rs`: [`crate::transport::stream::ConnStream`] for the CM's MPA exchange.
//! - `transport.rs`: [`crate::transport::Transport`] for the QP, with a waker the QP's
//!   engine waits on, and FPDUs queued as TCP records (one per segment).
//! - `listener.rs`: MPA Requests of incoming connections, read side by side.
//! - `report.rs`: the stack's and the network's state in a few lines, for a hang.

pub(crate) mod backlog;
#[cfg(test)]
mod backlog_tests;
pub(crate) mod due;
#[cfg(test)]
mod due_tests;
#[cfg(test)]
mod gather_tests;
pub(crate) mod link;
pub(crate) mod listener;
pub(crate) mod netlink;
#[cfg(test)]
mod pair_fixture;
#[cfg(test)]
mod piece_tests;
pub(crate) mod report;
#[cfg(test)]
mod report_tests;
pub mod simnet;
pub(crate) mod stack;
pub(crate) mod stream;
#[cfg(test)]
mod timer_floor_tests;
pub(crate) mod transport;

pub use netlink::{NetStats, mac_for};
pub use simnet::{Impairments, SimNet, WireStats};
use softrnic_netdev::MacAddr;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

/// The link a device's own TCP sends its packets on.
#[derive(Debug, Clone)]
pub enum UserLink {
    /// The in-process simulated network: devices of this process that attach to the
    /// same [`SimNet`] reach each other.
    Sim(SimNet),
    /// Ethernet frames in UDP datagrams, as QEMU's `-netdev dgram` speaks them: bind
    /// `local`, send to `remote` (no privilege; the siw rig's `--net udp`).
    Udp {
        /// Where frames arrive.
        local: SocketAddr,
        /// Where frames go.
        remote: SocketAddr,
    },
    /// A TAP interface of this name (created if needed; CAP_NET_ADMIN): the kernel's
    /// stack is on the other end.
    Tap {
        /// The interface's name.
        name: String,
    },
    /// AF_PACKET on an existing interface (CAP_NET_RAW), e.g. one end of a veth pair;
    /// give the kernel no address of the device's on it.
    Packet {
        /// The interface's name.
        ifname: String,
    },
}

/// A device's own TCP ([`crate::DeviceConfig::user_tcp`]): its link, its address there
/// and how its connections behave.
#[derive(Debug, Clone)]
pub struct UserTcp {
    /// Where packets go.
    pub link: UserLink,
    /// The device's IPv4 address on the link.
    pub addr: Ipv4Addr,
    /// The length of its subnet's prefix (frame links: who is reached directly).
    pub prefix_len: u8,
    /// Where packets to other subnets go (frame links).
    pub gateway: Option<Ipv4Addr>,
    /// The device's MAC on a frame link; `None`: [`mac_for`] its address (on
    /// AF_PACKET: the interface's own MAC).
    pub mac: Option<MacAddr>,
    /// Every connection's TCP settings. The MSS is capped to what the link's MTU
    /// carries; FPDUs are sized to the segment (RFC 5044).
    pub tcp: softrnic_tcp::Config,
    /// Connections at once (every state); each holds `tcp.send_buffer` and
    /// `tcp.recv_buffer` octets.
    pub max_connections: usize,
    /// Half-open connections per listener (a SYN flood holds no more).
    pub max_half_open: usize,
}

impl UserTcp {
    /// The device at `addr` on `net`, with the default settings: 8 MiB send and
    /// receive buffers, segments as large as the network's MTU allows.
    pub fn sim(net: &SimNet, addr: Ipv4Addr) -> UserTcp {
        UserTcp::on(UserLink::Sim(net.clone()), addr, 24)
    }

    /// The device at `addr/prefix_len` on `link`, with the default settings.
    pub fn on(link: UserLink, addr: Ipv4Addr, prefix_len: u8) -> UserTcp {
        UserTcp {
            tcp: tcp_for(&link),
            link,
            addr,
            prefix_len,
            gateway: None,
            mac: None,
            max_connections: 256,
            max_half_open: 64,
        }
    }
}

/// The TCP settings a device's own TCP starts from on `link`: buffers for a fast link
/// (the window and the send buffer bound how much is in flight), the MSS of the
/// largest IPv4 packet (capped to the link's MTU when the stack starts), and an ACK for
/// every segment (with segments of up to 64 KiB an ACK costs little; delaying them
/// gained nothing on the simulated network and drew loss probes for an odd last
/// segment whose ACK waited). On a simulated network, whose ends are softrnic stacks with
/// round trips of microseconds, the timers of [`softrnic_tcp::Config::fast_link`] with
/// `SIM_RTO_MIN` (100 ms) under the retransmission timeout, and checksum offload (the network
/// checksums for its ends and marks what it damages, as loopback and veth do; a
/// property of that link: real links keep TCP's checksums); on a frame link, whose
/// peer may be Linux (ACKs delayed up to 200 ms), the defaults.
pub fn tcp_for(link: &UserLink) -> softrnic_tcp::Config {
    // On the in-process network a hole (a packet lost or held back) takes a round trip
    // and RACK's reordering window to fill, while the sender goes on at memory speed
    // (about 6.5 GB/s): the window must cover that and a stall of the receiver's
    // thread on top (a millisecond is common on 2 vCPUs). 8 MiB do (1.3 ms); 4 MiB
    // (0.65 ms) left the sender waiting for the window most of a lossy run. Pages are
    // touched only as traffic fills them.
    let buffer = match link {
        UserLink::Sim(_) => 8 << 20,
        _ => 1 << 20,
    };
    let base = match link {
        UserLink::Sim(_) => softrnic_tcp::Config::fast_link(),
        _ => softrnic_tcp::Config::default(),
    };
    let rto_min = match link {
        UserLink::Sim(_) => SIM_RTO_MIN,
        _ => base.rto_min,
    };
    softrnic_tcp::Config {
        mss: u16::MAX - 40,
        send_buffer: buffer,
        recv_buffer: buffer as u32,
        delayed_ack: None,
        checksum_offload: matches!(link, UserLink::Sim(_)),
        rto_min,
        ..base
    }
}

/// The floor under the retransmission timeout on a [`SimNet`]: longer than a thread of
/// this process stays off the CPU. The network there is threads: a packet waits until
/// the receiving stack's thread (or the thread holding its lock) runs, and so does its
/// ACK, so a round trip that is microseconds most of the time is now and then as long
/// as the scheduler keeps a thread waiting. On 2 vCPUs shared with builds (load 5-10),
/// `write_bw --loopback --transport user:sim` saw packets wait up to 50 ms, and a 5 ms
/// floor fired on a third of the runs with no loss at all. Losses do not wait for this
/// timer: RACK and the loss probe (RFC 8985) repair them on timers of a few round trips;
/// it is the last resort (a retransmission lost with its probe), as Linux's 200 ms
/// `rto_min` is on loopback. A timeout that fires anyway during a stall is found
/// spurious by the acknowledgment that follows and undone (RFC 5682/4015).
pub(crate) const SIM_RTO_MIN: Duration = Duration::from_millis(100);

/// What a device's own TCP has done ([`crate::Device::user_tcp_stats`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserTcpStats {
    /// The stack: packets, resets, listeners' drops, connections opened and freed.
    pub stack: softrnic_tcp::StackStats,
    /// Every connection's TCP counters added up (retransmissions, timeouts...).
    pub tcp: softrnic_tcp::Stats,
    /// The frame link's counters (`None` on a simulated network, whose counters are
    /// [`SimNet::stats`]).
    pub link: Option<NetStats>,
    /// Turns of the stack thread: its wake-ups (for a timer, a packet handed over
    /// while the stack was busy, or a packet held back by the network).
    pub stack_thread_turns: u64,
    /// Stacks pumped by threads that poll a connection, for timers and held-back
    /// packets that fell due (work the stack thread would otherwise wake up for).
    pub polled_pumps: u64,
    /// Hand-overs of packets (on a SimNet, inline from the sender's thread) that
    /// found the stack held by another thread: they waited in the backlog for it.
    pub busy_handovers: u64,
}
