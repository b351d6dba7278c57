//! Packet views and builders the interface needs: the IPv4 packet handed up, the
//! checks a received packet must pass, and the Ethernet, ARP, IPv4 and ICMP echo
//! headers it writes. Parsing and header layout are etherparse's.

use crate::device::{ETHERNET_HEADER_LEN, MacAddr};
use etherparse::checksum::Sum16BitWords;
use etherparse::{
    ArpEthIpv4Packet, ArpOperation, EtherType, Ethernet2Header, IcmpEchoHeader, Icmpv4Header,
    Icmpv4Slice, Icmpv4Type, IpNumber, Ipv4Header, Ipv4HeaderSlice,
};
use std::net::Ipv4Addr;

/// IP protocol number of ICMP.
pub const PROTO_ICMP: u8 = 1;
/// IP protocol number of TCP.
pub const PROTO_TCP: u8 = 6;
/// An IPv4 header without options.
pub const IPV4_HEADER_LEN: usize = 20;
/// An ARP packet for Ethernet and IPv4.
pub(crate) const ARP_LEN: usize = ArpEthIpv4Packet::LEN;
/// An ICMP echo header (type, code, checksum, identifier, sequence number).
pub(crate) const ICMP_ECHO_HEADER_LEN: usize = 8;

/// A checked IPv4 packet addressed to the interface: version 4, a sound header and
/// total length, a correct header checksum, not a fragment. Trimmed to its total
/// length (Ethernet padding is gone).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpPacket<'a> {
    bytes: &'a [u8],
    header_len: usize,
}

impl<'a> IpPacket<'a> {
    /// A packet checked already, `header_len` octets of header included.
    pub(crate) fn new(bytes: &'a [u8], header_len: usize) -> IpPacket<'a> {
        IpPacket { bytes, header_len }
    }

    /// The whole packet: header (with any options) and payload.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The header, options included.
    pub fn header(&self) -> &'a [u8] {
        &self.bytes[..self.header_len]
    }

    /// What follows the header (a TCP segment, an ICMP message...).
    pub fn payload(&self) -> &'a [u8] {
        &self.bytes[self.header_len..]
    }

    /// The source address.
    pub fn src(&self) -> Ipv4Addr {
        addr(&self.bytes[12..16])
    }

    /// The destination address (one of the interface's).
    pub fn dst(&self) -> Ipv4Addr {
        addr(&self.bytes[16..20])
    }

    /// The protocol number ([`PROTO_TCP`], [`PROTO_ICMP`]).
    pub fn protocol(&self) -> u8 {
        self.bytes[9]
    }

    /// The time to live it arrived with.
    pub fn ttl(&self) -> u8 {
        self.bytes[8]
    }
}

fn addr(b: &[u8]) -> Ipv4Addr {
    Ipv4Addr::new(b[0], b[1], b[2], b[3])
}

/// Why a received IPv4 packet was dropped before its addresses were looked at.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Ipv4Fault {
    Malformed,
    BadChecksum,
    Fragment,
}

/// Checks an IPv4 packet (Ethernet padding may follow it).
pub(crate) fn check_ipv4(data: &[u8]) -> Result<IpPacket<'_>, Ipv4Fault> {
    let h = Ipv4HeaderSlice::from_slice(data).map_err(|_| Ipv4Fault::Malformed)?;
    let header_len = h.slice().len();
    let total = usize::from(h.total_len());
    if total < header_len || total > data.len() {
        return Err(Ipv4Fault::Malformed);
    }
    if Sum16BitWords::new().add_slice(h.slice()).ones_complement() != 0 {
        return Err(Ipv4Fault::BadChecksum);
    }
    if h.more_fragments() || h.fragments_offset().value() != 0 {
        return Err(Ipv4Fault::Fragment);
    }
    Ok(IpPacket {
        bytes: &data[..total],
        header_len,
    })
}

/// Checks the framing of a packet the layer above gives to send: IPv4, a sound
/// header length, and a total length equal to the packet's.
pub(crate) fn check_outgoing(packet: &[u8]) -> Result<IpPacket<'_>, &'static str> {
    let h = Ipv4HeaderSlice::from_slice(packet)
        .map_err(|_| "not an IPv4 header (version 4, header length 20..=60)")?;
    if usize::from(h.total_len()) != packet.len() {
        return Err("the total length field differs from the packet's length");
    }
    Ok(IpPacket {
        bytes: packet,
        header_len: h.slice().len(),
    })
}

/// True when the one's-complement sum over `data` checks out (ICMP, IPv4 header).
pub(crate) fn checksum_ok(data: &[u8]) -> bool {
    Sum16BitWords::new().add_slice(data).ones_complement() == 0
}

/// Writes an Ethernet II header at the start of `frame`.
pub(crate) fn write_ethernet(frame: &mut [u8], dst: MacAddr, src: MacAddr, ether_type: EtherType) {
    let h = Ethernet2Header {
        destination: dst.0,
        source: src.0,
        ether_type,
    };
    frame[..ETHERNET_HEADER_LEN].copy_from_slice(&h.to_bytes());
}

/// An ARP frame (Ethernet header included), from `(sender_mac, sender_ip)`.
pub(crate) fn arp_frame(
    eth_dst: MacAddr,
    op: ArpOperation,
    sender: (MacAddr, Ipv4Addr),
    target: (MacAddr, Ipv4Addr),
) -> [u8; ETHERNET_HEADER_LEN + ARP_LEN] {
    let mut f = [0u8; ETHERNET_HEADER_LEN + ARP_LEN];
    write_ethernet(&mut f, eth_dst, sender.0, EtherType::ARP);
    let arp = ArpEthIpv4Packet {
        operation: op,
        sender_mac: sender.0.0,
        sender_ipv4: sender.1.octets(),
        target_mac: target.0.0,
        target_ipv4: target.1.octets(),
    };
    f[ETHERNET_HEADER_LEN..].copy_from_slice(&arp.to_bytes());
    f
}

/// Writes an IPv4 header without options (DF set, checksum filled in) at the start
/// of `buf`, for a payload of `payload_len` octets. The caller checked the length.
pub(crate) fn write_ipv4_header(
    buf: &mut [u8],
    src: Ipv4Addr,
    dst: Ipv4Addr,
    protocol: u8,
    payload_len: usize,
    identification: u16,
    ttl: u8,
) {
    let mut h = Ipv4Header::new(
        payload_len as u16,
        ttl,
        IpNumber(protocol),
        src.octets(),
        dst.octets(),
    )
    .expect("payload length checked against the MTU");
    h.identification = identification;
    h.header_checksum = h.calc_header_checksum();
    buf[..IPV4_HEADER_LEN].copy_from_slice(&h.to_bytes());
}

/// Writes an ICMP echo message (request or reply) with `data` at the start of `buf`.
pub(crate) fn write_echo(buf: &mut [u8], reply: bool, id: u16, seq: u16, data: &[u8]) {
    let echo = IcmpEchoHeader { id, seq };
    let kind = if reply {
        Icmpv4Type::EchoReply(echo)
    } else {
        Icmpv4Type::EchoRequest(echo)
    };
    let h = Icmpv4Header::with_checksum(kind, data);
    buf[..ICMP_ECHO_HEADER_LEN].copy_from_slice(&h.to_bytes());
    buf[ICMP_ECHO_HEADER_LEN..ICMP_ECHO_HEADER_LEN + data.len()].copy_from_slice(data);
}

/// The identifier and sequence number of an ICMP echo request with a good
/// checksum, else `None` (`Err` when the message is too short or its checksum bad).
pub(crate) fn echo_request(icmp: &[u8]) -> Result<Option<(u16, u16)>, ()> {
    let msg = Icmpv4Slice::from_slice(icmp).map_err(drop)?;
    if !checksum_ok(icmp) {
        return Err(());
    }
    Ok(match msg.icmp_type() {
        Icmpv4Type::EchoRequest(e) if msg.code_u8() == 0 => Some((e.id, e.seq)),
        _ => None,
    })
}
