//! A host played by the test on the other end of a memory link: it builds frames with
//! etherparse and reads what the interface sent.

#![allow(dead_code)]

use etherparse::{
    ArpEthIpv4Packet, ArpOperation, EtherType, Ethernet2Header, NetSlice, PacketBuilder,
    SlicedPacket, TransportSlice,
};
use softrnic_netdev::memory::{self, MemoryDevice};
use softrnic_netdev::{
    FrameDevice, Ingress, Interface, InterfaceConfig, IpPacket, Ipv4Cidr, MacAddr,
};
use std::io::ErrorKind;
use std::net::Ipv4Addr;
use std::time::Duration;

pub const IFACE_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 1]);
pub const HOST_MAC: MacAddr = MacAddr([0x52, 0x54, 0, 0x12, 0x34, 0x56]);
pub const IFACE_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
pub const IFACE_IP2: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 1);
pub const HOST_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

pub fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// The test's end of the link.
pub struct Host {
    pub dev: MemoryDevice,
    pub mac: MacAddr,
    pub ip: Ipv4Addr,
}

pub fn config() -> InterfaceConfig {
    InterfaceConfig::new([Ipv4Cidr::new(IFACE_IP, 24), Ipv4Cidr::new(IFACE_IP2, 24)])
}

/// An interface (10.0.0.1/24 and 10.0.1.1/24) and a host 10.0.0.2 on one link.
pub fn setup() -> (Interface<MemoryDevice>, Host) {
    setup_with(config())
}

pub fn setup_with(config: InterfaceConfig) -> (Interface<MemoryDevice>, Host) {
    let (a, b) = memory::pair_with(IFACE_MAC, HOST_MAC, 1500).unwrap();
    let iface = Interface::new(a, config).unwrap();
    (
        iface,
        Host {
            dev: b,
            mac: HOST_MAC,
            ip: HOST_IP,
        },
    )
}

/// A memory link end whose receive side also takes raw frames from the test, even
/// ones no device would send (runts, oversize), ahead of the link's.
pub struct Injecting {
    pub dev: MemoryDevice,
    raw: std::collections::VecDeque<Vec<u8>>,
}

impl Injecting {
    pub fn inject(&mut self, frame: &[u8]) {
        self.raw.push_back(frame.to_vec());
    }
}

impl FrameDevice for Injecting {
    fn send(&mut self, frame: &[u8]) -> std::io::Result<()> {
        self.dev.send(frame)
    }

    fn recv(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self.raw.pop_front() {
            Some(f) if f.len() > buf.len() => Err(softrnic_netdev::FrameTooLong {
                len: f.len(),
                capacity: buf.len(),
            }
            .into_io()),
            Some(f) => {
                buf[..f.len()].copy_from_slice(&f);
                Ok(f.len())
            }
            None => self.dev.recv(buf),
        }
    }

    fn mtu(&self) -> usize {
        self.dev.mtu()
    }

    fn mac(&self) -> MacAddr {
        self.dev.mac()
    }
}

impl std::os::fd::AsRawFd for Injecting {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.dev.as_raw_fd()
    }
}

/// [`setup_with`] on an [`Injecting`] device.
pub fn setup_injecting(config: InterfaceConfig) -> (Interface<Injecting>, Host) {
    let (a, b) = memory::pair_with(IFACE_MAC, HOST_MAC, 1500).unwrap();
    let dev = Injecting {
        dev: a,
        raw: Default::default(),
    };
    let iface = Interface::new(dev, config).unwrap();
    (
        iface,
        Host {
            dev: b,
            mac: HOST_MAC,
            ip: HOST_IP,
        },
    )
}

impl Host {
    pub fn send(&mut self, frame: &[u8]) {
        self.dev.send(frame).unwrap();
    }

    /// The next frame the interface sent, if any (its sends are synchronous).
    pub fn recv(&mut self) -> Option<Vec<u8>> {
        let mut buf = vec![0u8; 9014];
        match self.dev.recv(&mut buf) {
            Ok(n) => {
                buf.truncate(n);
                Some(buf)
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => None,
            Err(e) => panic!("{e}"),
        }
    }

    /// Every frame the interface sent so far.
    pub fn drain(&mut self) -> Vec<Vec<u8>> {
        std::iter::from_fn(|| self.recv()).collect()
    }

    pub fn arp(&self, eth_dst: MacAddr, op: ArpOperation, target: (MacAddr, Ipv4Addr)) -> Vec<u8> {
        arp_frame(eth_dst, op, (self.mac, self.ip), target)
    }

    /// "Who has `ip`?", broadcast.
    pub fn arp_request(&self, ip: Ipv4Addr) -> Vec<u8> {
        self.arp(
            MacAddr::BROADCAST,
            ArpOperation::REQUEST,
            (MacAddr::default(), ip),
        )
    }

    /// "10.0.0.2 is at HOST_MAC", to the interface.
    pub fn arp_reply(&self) -> Vec<u8> {
        self.arp(IFACE_MAC, ArpOperation::REPLY, (IFACE_MAC, IFACE_IP))
    }

    pub fn ping(&self, dst: Ipv4Addr, id: u16, seq: u16, data: &[u8]) -> Vec<u8> {
        let b = PacketBuilder::ethernet2(self.mac.0, IFACE_MAC.0)
            .ipv4(self.ip.octets(), dst.octets(), 64)
            .icmpv4_echo_request(id, seq);
        build(b, data)
    }

    pub fn tcp_syn(&self, dst: Ipv4Addr, sport: u16, dport: u16, seq: u32) -> Vec<u8> {
        let b = PacketBuilder::ethernet2(self.mac.0, IFACE_MAC.0)
            .ipv4(self.ip.octets(), dst.octets(), 64)
            .tcp(sport, dport, seq, 65535)
            .syn();
        build(b, &[])
    }
}

pub fn build<B: Built>(b: B, payload: &[u8]) -> Vec<u8> {
    b.build(payload)
}

/// The last step of an etherparse PacketBuilder.
pub trait Built {
    fn build(self, payload: &[u8]) -> Vec<u8>;
}

impl Built for etherparse::PacketBuilderStep<etherparse::Icmpv4Header> {
    fn build(self, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.size(payload.len()));
        self.write(&mut v, payload).unwrap();
        v
    }
}

impl Built for etherparse::PacketBuilderStep<etherparse::TcpHeader> {
    fn build(self, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.size(payload.len()));
        self.write(&mut v, payload).unwrap();
        v
    }
}

impl Built for etherparse::PacketBuilderStep<etherparse::UdpHeader> {
    fn build(self, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.size(payload.len()));
        self.write(&mut v, payload).unwrap();
        v
    }
}

pub fn arp_frame(
    eth_dst: MacAddr,
    op: ArpOperation,
    sender: (MacAddr, Ipv4Addr),
    target: (MacAddr, Ipv4Addr),
) -> Vec<u8> {
    let eth = Ethernet2Header {
        source: sender.0.0,
        destination: eth_dst.0,
        ether_type: EtherType::ARP,
    };
    let arp = ArpEthIpv4Packet {
        operation: op,
        sender_mac: sender.0.0,
        sender_ipv4: sender.1.octets(),
        target_mac: target.0.0,
        target_ipv4: target.1.octets(),
    };
    let mut f = eth.to_bytes().to_vec();
    f.extend_from_slice(&arp.to_bytes());
    f
}

/// The ARP packet in a frame the interface sent, with the frame's destination MAC.
pub fn parse_arp(frame: &[u8]) -> (MacAddr, ArpEthIpv4Packet) {
    let s = SlicedPacket::from_ethernet(frame).expect("a parsable frame");
    let eth = s
        .link
        .as_ref()
        .and_then(|l| l.to_header())
        .expect("Ethernet");
    let eth = match eth {
        etherparse::LinkHeader::Ethernet2(e) => e,
        other => panic!("not Ethernet II: {other:?}"),
    };
    assert_eq!(eth.source, IFACE_MAC.0, "from the interface's MAC");
    match s.net {
        Some(NetSlice::Arp(a)) => (
            MacAddr(eth.destination),
            a.to_packet().try_eth_ipv4().expect("Ethernet/IPv4 ARP"),
        ),
        other => panic!("not ARP: {other:?}"),
    }
}

/// The IPv4 packet in a frame the interface sent (destination MAC, the packet bytes),
/// its IPv4 header checksum checked.
pub fn parse_ipv4(frame: &[u8]) -> (MacAddr, Vec<u8>) {
    assert_eq!(&frame[6..12], &IFACE_MAC.0, "from the interface's MAC");
    assert_eq!(&frame[12..14], &[0x08, 0x00], "IPv4");
    let ip = &frame[14..];
    let h = etherparse::Ipv4HeaderSlice::from_slice(ip).unwrap();
    assert_eq!(
        h.header_checksum(),
        h.to_header().calc_header_checksum(),
        "IPv4 header checksum"
    );
    assert_eq!(
        usize::from(h.total_len()),
        ip.len(),
        "no padding on our frames"
    );
    (MacAddr(frame[..6].try_into().unwrap()), ip.to_vec())
}

/// The echo (id, seq, data) of an ICMP echo reply frame, checksums checked.
pub fn parse_echo_reply(frame: &[u8]) -> (Ipv4Addr, Ipv4Addr, u16, u16, Vec<u8>) {
    let s = SlicedPacket::from_ethernet(frame).unwrap();
    let Some(NetSlice::Ipv4(ip)) = &s.net else {
        panic!("not IPv4")
    };
    let (src, dst) = (ip.header().source_addr(), ip.header().destination_addr());
    let Some(TransportSlice::Icmpv4(icmp)) = &s.transport else {
        panic!("not ICMP")
    };
    let etherparse::Icmpv4Type::EchoReply(e) = icmp.icmp_type() else {
        panic!("not an echo reply: {:?}", icmp.icmp_type())
    };
    assert_eq!(
        icmp.checksum(),
        icmp.header().icmp_type.calc_checksum(icmp.payload()),
        "ICMP checksum"
    );
    (src, dst, e.id, e.seq, icmp.payload().to_vec())
}

/// Receives until the interface hands a packet up; panics if it does not.
pub fn expect_packet<D: FrameDevice>(iface: &mut Interface<D>, now: Duration) -> Vec<u8> {
    let mut buf = vec![0u8; iface.frame_buffer_len()];
    match iface.receive(now, &mut buf).unwrap() {
        Ingress::Packet(p) => p.bytes().to_vec(),
        other => panic!("expected a packet, got {other:?}"),
    }
}

/// Receives until the device is drained; panics if a packet comes up.
pub fn expect_nothing_up<D: FrameDevice>(iface: &mut Interface<D>, now: Duration) {
    let mut buf = vec![0u8; iface.frame_buffer_len()];
    loop {
        match iface.receive(now, &mut buf).unwrap() {
            Ingress::Drained => return,
            Ingress::Yield => continue,
            Ingress::Packet(p) => panic!("unexpected packet handed up: {p:?}"),
        }
    }
}

/// Checks a delivered packet view against its bytes.
pub fn check_view(p: &IpPacket<'_>) {
    assert_eq!(p.bytes().len(), p.header().len() + p.payload().len());
}
