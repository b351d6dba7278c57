//! Link-layer to TCP decoding of single frames.
//!
//! Uses etherparse's *lax* slicer so that a frame cut short by the snap
//! length still yields its TCP header and the captured part of the payload;
//! the IP length fields then tell how many payload bytes are missing.

use std::net::IpAddr;

use etherparse::{EtherType, LaxNetSlice, LaxSlicedPacket, TransportSlice};

use crate::Endpoint;

/// Link-layer types we can strip to reach the IP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LinkType {
    /// DLT_NULL (0) / DLT_LOOP (108): 4-byte address family, then IP.
    Null,
    /// Ethernet II, possibly VLAN-tagged.
    Ethernet,
    /// Raw IPv4 or IPv6, no link header.
    RawIp,
    /// Linux "cooked" capture v1: 16-byte header, protocol in bytes 14..16.
    LinuxSll,
    /// Linux "cooked" capture v2: 20-byte header, protocol in bytes 0..2.
    LinuxSll2,
}

impl LinkType {
    /// Maps a LINKTYPE_* number to a supported link type.
    pub(crate) fn from_code(code: u32) -> Option<Self> {
        match code {
            0 | 108 => Some(Self::Null),
            1 => Some(Self::Ethernet),
            101 | 228 | 229 => Some(Self::RawIp),
            113 => Some(Self::LinuxSll),
            276 => Some(Self::LinuxSll2),
            _ => None,
        }
    }
}

/// The parts of one TCP segment that reassembly needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TcpSegment<'a> {
    pub src: Endpoint,
    pub dst: Endpoint,
    pub seq: u32,
    pub syn: bool,
    pub ack: bool,
    pub fin: bool,
    pub rst: bool,
    /// The captured payload bytes.
    pub payload: &'a [u8],
    /// Payload bytes the IP header announces but the capture cut off.
    pub missing: u32,
}

/// Decodes one frame down to TCP. Returns `None` for anything that is not a
/// complete-enough, unfragmented TCP segment.
pub(crate) fn decode_tcp(link: LinkType, frame: &[u8]) -> Option<TcpSegment<'_>> {
    let sliced = match link {
        LinkType::Ethernet => LaxSlicedPacket::from_ethernet(frame).ok()?,
        LinkType::RawIp => LaxSlicedPacket::from_ip(frame).ok()?,
        // The family word is in the capturing host's byte order, so rather
        // than trusting it we let the IP version nibble decide.
        LinkType::Null => LaxSlicedPacket::from_ip(frame.get(4..)?).ok()?,
        LinkType::LinuxSll => {
            let proto = u16::from_be_bytes([*frame.get(14)?, *frame.get(15)?]);
            LaxSlicedPacket::from_ether_type(EtherType(proto), frame.get(16..)?)
        }
        LinkType::LinuxSll2 => {
            let proto = u16::from_be_bytes([*frame.first()?, *frame.get(1)?]);
            LaxSlicedPacket::from_ether_type(EtherType(proto), frame.get(20..)?)
        }
    };

    let net = sliced.net.as_ref()?;
    let TransportSlice::Tcp(tcp) = sliced.transport.as_ref()? else {
        return None;
    };

    // `declared` is the IP payload length the header announces (None when
    // the header gives no usable length, e.g. TSO-style zero lengths).
    let (src_ip, dst_ip, ip_payload, declared): (IpAddr, IpAddr, _, Option<usize>) = match net {
        LaxNetSlice::Ipv4(v4) => {
            let h = v4.header();
            let auth_len = v4.extensions().auth.map_or(0, |a| a.slice().len());
            let declared = usize::from(h.total_len())
                .checked_sub(h.slice().len())
                .and_then(|n| n.checked_sub(auth_len));
            (
                h.source_addr().into(),
                h.destination_addr().into(),
                v4.payload(),
                declared,
            )
        }
        LaxNetSlice::Ipv6(v6) => {
            let h = v6.header();
            let declared = match h.payload_length() {
                0 => None, // jumbogram or unknown
                n => usize::from(n).checked_sub(v6.extensions().slice().len()),
            };
            (
                h.source_addr().into(),
                h.destination_addr().into(),
                v6.payload(),
                declared,
            )
        }
        LaxNetSlice::Arp(_) => return None,
    };
    if ip_payload.fragmented {
        return None;
    }

    let payload = tcp.payload();
    let missing = if ip_payload.incomplete {
        declared
            .and_then(|d| d.checked_sub(tcp.header_slice().len()))
            .and_then(|d| d.checked_sub(payload.len()))
            .and_then(|m| u32::try_from(m).ok())
            .unwrap_or(0)
    } else {
        0
    };

    Some(TcpSegment {
        src: Endpoint {
            addr: src_ip,
            port: tcp.source_port(),
        },
        dst: Endpoint {
            addr: dst_ip,
            port: tcp.destination_port(),
        },
        seq: tcp.sequence_number(),
        syn: tcp.syn(),
        ack: tcp.ack(),
        fin: tcp.fin(),
        rst: tcp.rst(),
        payload,
        missing,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::PacketBuilder;

    fn eth_tcp(payload: &[u8]) -> Vec<u8> {
        let b = PacketBuilder::ethernet2([1; 6], [2; 6])
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .tcp(1000, 2000, 77, 1024)
            .ack(5);
        let mut out = Vec::new();
        b.write(&mut out, payload).expect("build packet");
        out
    }

    #[test]
    fn decodes_ethernet_tcp() {
        let frame = eth_tcp(b"hello");
        let seg = decode_tcp(LinkType::Ethernet, &frame).expect("tcp");
        assert_eq!(seg.src.port, 1000);
        assert_eq!(seg.dst.port, 2000);
        assert_eq!(seg.seq, 77);
        assert!(seg.ack && !seg.syn && !seg.fin && !seg.rst);
        assert_eq!(seg.payload, b"hello");
        assert_eq!(seg.missing, 0);
    }

    #[test]
    fn snaplen_cut_reports_missing_bytes() {
        let frame = eth_tcp(&[7u8; 100]);
        let cut = &frame[..frame.len() - 60];
        let seg = decode_tcp(LinkType::Ethernet, cut).expect("tcp");
        assert_eq!(seg.payload.len(), 40);
        assert_eq!(seg.missing, 60);
    }

    #[test]
    fn ethernet_padding_is_not_payload() {
        let mut frame = eth_tcp(b"");
        frame.resize(60, 0);
        let seg = decode_tcp(LinkType::Ethernet, &frame).expect("tcp");
        assert!(seg.payload.is_empty());
    }

    #[test]
    fn header_cut_is_skipped() {
        let frame = eth_tcp(b"x");
        assert!(decode_tcp(LinkType::Ethernet, &frame[..40]).is_none());
        assert!(decode_tcp(LinkType::LinuxSll, &frame[..10]).is_none());
        assert!(decode_tcp(LinkType::LinuxSll2, &[]).is_none());
        assert!(decode_tcp(LinkType::Null, &[0, 0]).is_none());
    }

    #[test]
    fn ipv4_fragment_is_skipped() {
        let mut frame = eth_tcp(b"abcdef");
        // Set "more fragments" in the IPv4 flags (byte 6 of the IP header);
        // etherparse does not check the IP header checksum.
        frame[14 + 6] |= 0x20;
        assert!(decode_tcp(LinkType::Ethernet, &frame).is_none());
    }

    #[test]
    fn udp_is_skipped() {
        let b = PacketBuilder::ipv4([1, 1, 1, 1], [2, 2, 2, 2], 9).udp(1, 2);
        let mut out = Vec::new();
        b.write(&mut out, b"x").expect("build");
        assert!(decode_tcp(LinkType::RawIp, &out).is_none());
    }
}
