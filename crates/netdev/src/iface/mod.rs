//! An IPv4 interface on a [`FrameDevice`]: it owns addresses and a MAC, answers ARP
//! and ICMP echo itself, resolves neighbours, checks every packet, and trades whole
//! IPv4 packets with the layer above (softrnic's TCP).
//!
//! Time is a parameter (a `Duration` since an origin the caller picks), as in the rest
//! of softrnic's sans-IO code: [`Interface::poll_timeout`] says when
//! [`Interface::handle_timeout`] is due; nothing here sleeps or reads a clock.
//!
//! Bounds: a hostile link can make the interface do at most one frame of work per
//! frame received, keep at most `neighbor_capacity` neighbours and hold at most
//! `pending_capacity * pending_per_neighbor` packets, and one [`Interface::receive`]
//! handles at most `rx_budget` frames.

mod egress;
mod ingress;
mod neighbor;
mod packet;
mod stats;

pub use packet::{IPV4_HEADER_LEN, IpPacket, PROTO_ICMP, PROTO_TCP};
pub use stats::Stats;

use crate::device::{ETHERNET_HEADER_LEN, FrameDevice, MacAddr};
use neighbor::{Due, Limits, Neighbors};
use std::io;
use std::net::Ipv4Addr;
use std::time::Duration;

/// An address the interface owns and the subnet it is on (`addr/prefix_len`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Cidr {
    pub addr: Ipv4Addr,
    pub prefix_len: u8,
}

impl Ipv4Cidr {
    pub fn new(addr: Ipv4Addr, prefix_len: u8) -> Ipv4Cidr {
        Ipv4Cidr { addr, prefix_len }
    }

    fn mask(&self) -> u32 {
        u32::MAX
            .checked_shl(32u32.saturating_sub(u32::from(self.prefix_len)))
            .unwrap_or(0)
    }

    /// True when `ip` is on this subnet (its broadcast address included).
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        (u32::from(ip) ^ u32::from(self.addr)) & self.mask() == 0
    }

    /// The subnet's directed broadcast address.
    pub fn broadcast(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.addr) | !self.mask())
    }
}

/// How an [`Interface`] is set up; [`InterfaceConfig::new`] gives the defaults.
#[derive(Debug, Clone)]
pub struct InterfaceConfig {
    /// The addresses the interface owns (at least one), with their subnets.
    pub addresses: Vec<Ipv4Cidr>,
    /// Where packets to other subnets go; must be on one of the subnets.
    pub gateway: Option<Ipv4Addr>,
    /// Neighbours remembered at once (64); the one nearest its expiry makes room.
    pub neighbor_capacity: usize,
    /// How long a learned neighbour is trusted (60 s); one in use is refreshed by a
    /// unicast request in the last quarter of that time.
    pub neighbor_ttl: Duration,
    /// Time between ARP requests for an unanswered neighbour (1 s).
    pub arp_retry_interval: Duration,
    /// Requests before a resolution gives up (3); it fails one interval after the last.
    pub arp_max_requests: u32,
    /// Neighbours being resolved at once (16).
    pub pending_capacity: usize,
    /// Packets held for one neighbour being resolved (16); more are refused.
    pub pending_per_neighbor: usize,
    /// TTL of the packets the interface builds (64).
    pub ttl: u8,
    /// Frames one [`Interface::receive`] handles by itself before it yields (64).
    pub rx_budget: usize,
}

impl InterfaceConfig {
    /// The defaults, with `addresses`.
    pub fn new(addresses: impl IntoIterator<Item = Ipv4Cidr>) -> InterfaceConfig {
        InterfaceConfig {
            addresses: addresses.into_iter().collect(),
            gateway: None,
            neighbor_capacity: 64,
            neighbor_ttl: Duration::from_secs(60),
            arp_retry_interval: Duration::from_secs(1),
            arp_max_requests: 3,
            pending_capacity: 16,
            pending_per_neighbor: 16,
            ttl: 64,
            rx_budget: 64,
        }
    }
}

/// A configuration the interface cannot work with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("an interface needs at least one address")]
    NoAddress,
    #[error("{0}/{1}: a prefix length is 0..=32, and the address must be a host's")]
    BadAddress(Ipv4Addr, u8),
    #[error("gateway {0} is on none of the interface's subnets")]
    GatewayNotOnLink(Ipv4Addr),
    #[error("the device's MAC {0} is not a unicast address")]
    MacNotUnicast(MacAddr),
    #[error("arp_max_requests and rx_budget must be at least 1")]
    ZeroLimit,
    #[error("the device's MTU of {0} is below IPv4's minimum of 68")]
    MtuTooSmall(usize),
}

/// What [`Interface::receive`] came back with.
#[derive(Debug)]
pub enum Ingress<'a> {
    /// An IPv4 packet for the layer above: TCP, or ICMP other than an echo request.
    Packet(IpPacket<'a>),
    /// The device has nothing more: wait until its fd is readable (or a timeout).
    Drained,
    /// `rx_budget` frames were handled with nothing for the layer above: there may be
    /// more; call again after other due work (timers).
    Yield,
}

/// What became of a packet given to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    /// The device took it.
    Transmitted,
    /// It waits for ARP to resolve its next hop; it leaves when the neighbour
    /// answers, or is dropped (and counted) if it never does.
    Queued,
}

/// Why a packet was not sent; it was not consumed.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("malformed IPv4 packet: {0}")]
    Malformed(&'static str),
    #[error("a {len}-octet packet exceeds the MTU of {mtu}")]
    TooBig { len: usize, mtu: usize },
    #[error("source {0} is not an address of this interface")]
    NotOurAddress(Ipv4Addr),
    #[error("no route to {0}")]
    NoRoute(Ipv4Addr),
    #[error("no room to hold another packet while {0} is being resolved")]
    QueueFull(Ipv4Addr),
    #[error("the device is busy: send again when it is writable")]
    DeviceBusy,
    #[error("device error: {0}")]
    Device(#[from] io::Error),
}

/// An IPv4 interface on a frame device; see the module documentation.
#[derive(Debug)]
pub struct Interface<D: FrameDevice> {
    device: D,
    mac: MacAddr,
    /// The device's MTU when the interface was made: the buffers are sized for it.
    mtu: usize,
    config: InterfaceConfig,
    neighbors: Neighbors,
    /// The frame being sent: built here, so no allocation per packet.
    tx: Vec<u8>,
    next_id: u16,
    stats: Stats,
}

impl<D: FrameDevice> Interface<D> {
    /// An interface with `config`'s addresses on `device`, using the device's MAC.
    pub fn new(device: D, config: InterfaceConfig) -> Result<Interface<D>, ConfigError> {
        let mac = device.mac();
        if !mac.is_unicast() {
            return Err(ConfigError::MacNotUnicast(mac));
        }
        if device.mtu() < 68 {
            return Err(ConfigError::MtuTooSmall(device.mtu()));
        }
        if config.addresses.is_empty() {
            return Err(ConfigError::NoAddress);
        }
        for a in &config.addresses {
            let bad = a.prefix_len > 32
                || a.addr.is_unspecified()
                || a.addr.is_multicast()
                || a.addr.is_broadcast()
                || (a.prefix_len < 31 && a.addr == a.broadcast());
            if bad {
                return Err(ConfigError::BadAddress(a.addr, a.prefix_len));
            }
        }
        if let Some(gw) = config.gateway
            && !config.addresses.iter().any(|a| a.contains(gw))
        {
            return Err(ConfigError::GatewayNotOnLink(gw));
        }
        if config.arp_max_requests == 0 || config.rx_budget == 0 {
            return Err(ConfigError::ZeroLimit);
        }
        let neighbors = Neighbors::new(Limits {
            capacity: config.neighbor_capacity,
            ttl: config.neighbor_ttl,
            retry_interval: config.arp_retry_interval,
            max_requests: config.arp_max_requests,
            pending_capacity: config.pending_capacity,
            pending_per_neighbor: config.pending_per_neighbor,
        });
        let mtu = device.mtu();
        let tx = vec![0u8; mtu + ETHERNET_HEADER_LEN];
        Ok(Interface {
            device,
            mac,
            mtu,
            config,
            neighbors,
            tx,
            next_id: 1,
            stats: Stats::default(),
        })
    }

    pub fn device(&self) -> &D {
        &self.device
    }

    pub fn device_mut(&mut self) -> &mut D {
        &mut self.device
    }

    pub fn into_device(self) -> D {
        self.device
    }

    pub fn mac(&self) -> MacAddr {
        self.mac
    }

    /// The largest IPv4 packet [`Interface::send`] takes and [`Interface::receive`]
    /// lets in: the device's MTU when the interface was made.
    pub fn mtu(&self) -> usize {
        self.mtu
    }

    /// The buffer size [`Interface::receive`] needs: the largest frame.
    pub fn frame_buffer_len(&self) -> usize {
        self.mtu + ETHERNET_HEADER_LEN
    }

    pub fn addresses(&self) -> &[Ipv4Cidr] {
        &self.config.addresses
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The MAC learned for `ip`, if known and not expired at `now`.
    pub fn neighbor(&self, ip: Ipv4Addr, now: Duration) -> Option<MacAddr> {
        self.neighbors.get(ip, now)
    }

    /// Neighbour entries held (expired ones until they are looked up or evicted);
    /// never more than `neighbor_capacity`.
    pub fn neighbor_count(&self) -> usize {
        self.neighbors.len()
    }

    pub(super) fn owns(&self, ip: Ipv4Addr) -> bool {
        self.config.addresses.iter().any(|a| a.addr == ip)
    }

    pub(super) fn on_link(&self, ip: Ipv4Addr) -> bool {
        self.config.addresses.iter().any(|a| a.contains(ip))
    }

    /// When [`Interface::handle_timeout`] must run next (an ARP retry or give-up),
    /// if ever.
    pub fn poll_timeout(&self) -> Option<Duration> {
        self.neighbors.poll_timeout()
    }

    /// Time has reached `now`: repeats unanswered ARP requests and drops the packets
    /// of neighbours that never answered.
    pub fn handle_timeout(&mut self, now: Duration) {
        while let Some(due) = self.neighbors.due(now) {
            match due {
                Due::Request(ip) => self.send_arp_request(ip, MacAddr::BROADCAST),
                Due::GaveUp { dropped } => {
                    self.stats.arp_resolution_failed += 1;
                    self.stats.tx_unresolved_dropped += dropped as u64;
                }
            }
        }
    }
}
