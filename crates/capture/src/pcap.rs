//! Walking the frames of a classic pcap or pcapng file.
//!
//! pcap-file does the block and record framing. On top of it this module
//! resolves per-interface link types and timestamp resolutions, numbers the
//! frames, and salvages a last record that the end of the file cut short
//! (tcpdump killed mid-write), so its captured bytes still count.

use std::borrow::Cow;

use pcap_file::pcap::PcapParser;
use pcap_file::pcapng::PcapNgParser;
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::blocks::{
    ENHANCED_PACKET_BLOCK, INTERFACE_DESCRIPTION_BLOCK, PACKET_BLOCK, SECTION_HEADER_BLOCK,
    SIMPLE_PACKET_BLOCK,
};
use pcap_file::{Endianness, PcapError, TsResolution};

use crate::CaptureError;
use crate::decode::LinkType;

/// One captured frame, borrowed from the file data.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Frame<'a> {
    /// 1-based frame number.
    pub number: u64,
    pub timestamp_ns: u64,
    pub link: LinkType,
    /// The captured bytes (possibly fewer than were on the wire).
    pub data: &'a [u8],
}

const NANOS_PER_SEC: u64 = 1_000_000_000;

/// libpcap's largest snap length. A cut-short last record or block claiming
/// more than this (and more than the file's own snap length) is treated as
/// corrupt rather than salvaged.
const MAX_SNAPLEN: u32 = 262_144;

/// Calls `f` for every frame in the capture, in file order.
pub(crate) fn for_each_frame<'a>(
    data: &'a [u8],
    f: impl FnMut(Frame<'a>),
) -> Result<(), CaptureError> {
    let Some(magic) = data.get(..4).and_then(|m| <[u8; 4]>::try_from(m).ok()) else {
        return Err(CaptureError::NotACapture(if data.is_empty() {
            "the file is empty".into()
        } else {
            format!("only {} bytes, too short for a file header", data.len())
        }));
    };
    match magic {
        [0xd4, 0xc3, 0xb2, 0xa1]
        | [0xa1, 0xb2, 0xc3, 0xd4]
        | [0x4d, 0x3c, 0xb2, 0xa1]
        | [0xa1, 0xb2, 0x3c, 0x4d] => classic(data, f),
        [0x0a, 0x0d, 0x0d, 0x0a] => pcapng(data, f),
        m => Err(CaptureError::NotACapture(format!(
            "unknown magic number {:08x}",
            u32::from_be_bytes(m)
        ))),
    }
}

/// Reads a `u32` at `at` in the given byte order, if the bytes are there.
fn read_u32(data: &[u8], at: usize, endianness: Endianness) -> Option<u32> {
    let b: [u8; 4] = data.get(at..at.checked_add(4)?)?.try_into().ok()?;
    Some(match endianness {
        Endianness::Big => u32::from_be_bytes(b),
        Endianness::Little => u32::from_le_bytes(b),
    })
}

fn offset_in(data: &[u8], rest: &[u8]) -> u64 {
    u64::try_from(data.len().saturating_sub(rest.len())).unwrap_or(u64::MAX)
}

fn link_type(code: u32) -> Result<LinkType, CaptureError> {
    LinkType::from_code(code).ok_or(CaptureError::UnsupportedLinkType(code))
}

fn classic<'a>(data: &'a [u8], mut f: impl FnMut(Frame<'a>)) -> Result<(), CaptureError> {
    let (mut rest, parser) = PcapParser::new(data).map_err(|e| match e {
        PcapError::IncompleteBuffer => {
            CaptureError::NotACapture("pcap file header is cut short".into())
        }
        e => CaptureError::NotACapture(e.to_string()),
    })?;
    let header = parser.header();
    // The upper 16 bits of the link-type field carry FCS flags, not the type.
    let link = link_type(u32::from(header.datalink) & 0xffff)?;
    let frac_scale: u64 = match header.ts_resolution {
        TsResolution::MicroSecond => 1_000,
        TsResolution::NanoSecond => 1,
    };
    let timestamp = |sec: u32, frac: u32| {
        u64::from(sec)
            .saturating_mul(NANOS_PER_SEC)
            .saturating_add(u64::from(frac).saturating_mul(frac_scale))
    };

    let mut number: u64 = 0;
    while !rest.is_empty() {
        number = number.saturating_add(1);
        match parser.next_raw_packet(rest) {
            Ok((next, packet)) => {
                let Cow::Borrowed(bytes) = packet.data else {
                    return Err(owned_data(offset_in(data, rest)));
                };
                f(Frame {
                    number,
                    timestamp_ns: timestamp(packet.ts_sec, packet.ts_frac),
                    link,
                    data: bytes,
                });
                rest = next;
            }
            Err(PcapError::IncompleteBuffer) => {
                // The last record is cut short. If its 16-byte header is
                // complete, keep whatever payload made it into the file.
                let e = header.endianness;
                let (Some(sec), Some(frac), Some(incl_len), Some(bytes)) = (
                    read_u32(rest, 0, e),
                    read_u32(rest, 4, e),
                    read_u32(rest, 8, e),
                    rest.get(16..),
                ) else {
                    return Ok(());
                };
                // A length no capture could have produced is more likely a
                // corrupt record than a cut-short one.
                if incl_len > header.snaplen.max(MAX_SNAPLEN) {
                    return Err(CaptureError::Malformed {
                        offset: offset_in(data, rest),
                        reason: format!(
                            "record claims {incl_len} bytes, more than the snap length \
                             and the {} bytes left in the file",
                            bytes.len()
                        ),
                    });
                }
                f(Frame {
                    number,
                    timestamp_ns: timestamp(sec, frac),
                    link,
                    data: bytes,
                });
                return Ok(());
            }
            Err(e) => {
                return Err(CaptureError::Malformed {
                    offset: offset_in(data, rest),
                    reason: e.to_string(),
                });
            }
        }
    }
    Ok(())
}

/// pcap-file hands out borrowed data when parsing from a slice; an owned
/// buffer would mean its behaviour changed. Report that instead of panicking.
fn owned_data(offset: u64) -> CaptureError {
    CaptureError::Malformed {
        offset,
        reason: "internal: pcap-file returned a copy instead of a borrowed slice".into(),
    }
}

/// What we need to know about a pcapng interface.
#[derive(Debug, Clone, Copy)]
struct Interface {
    /// `None` if the link type is unsupported; that is only an error once a
    /// packet actually arrives on the interface.
    link: Option<LinkType>,
    link_code: u32,
    /// Timestamp units per second (`if_tsresol`, default microseconds).
    units_per_sec: u128,
    /// `if_tsoffset`, in seconds.
    offset_sec: u64,
}

impl Interface {
    fn from_idb(idb: &InterfaceDescriptionBlock<'_>) -> Self {
        let link_code = u32::from(idb.linktype);
        let mut units_per_sec: u128 = 1_000_000;
        let mut offset_sec = 0;
        for opt in &idb.options {
            match *opt {
                InterfaceDescriptionOption::IfTsResol(r) => {
                    let exp = u32::from(r & 0x7f);
                    let base: u128 = if r & 0x80 == 0 { 10 } else { 2 };
                    // A resolution too fine for u128 is nonsense; treat the
                    // timestamps as unusable (0) rather than fail the file.
                    units_per_sec = base.checked_pow(exp).unwrap_or(0);
                }
                InterfaceDescriptionOption::IfTsOffset(o) => offset_sec = o,
                _ => {}
            }
        }
        Self {
            link: LinkType::from_code(link_code),
            link_code,
            units_per_sec,
            offset_sec,
        }
    }

    fn timestamp_ns(&self, ticks: u64) -> u64 {
        let ns = u128::from(ticks)
            .checked_mul(u128::from(NANOS_PER_SEC))
            .and_then(|n| n.checked_div(self.units_per_sec))
            .map_or(0, |n| u64::try_from(n).unwrap_or(u64::MAX));
        ns.saturating_add(self.offset_sec.saturating_mul(NANOS_PER_SEC))
    }
}

fn pcapng<'a>(data: &'a [u8], mut f: impl FnMut(Frame<'a>)) -> Result<(), CaptureError> {
    let (mut rest, mut parser) = PcapNgParser::new(data).map_err(|e| match e {
        PcapError::IncompleteBuffer => {
            CaptureError::NotACapture("pcapng section header block is cut short".into())
        }
        e => CaptureError::NotACapture(format!("bad pcapng section header: {e}")),
    })?;
    let mut interfaces: Vec<Interface> = Vec::new();
    let mut number: u64 = 0;

    while !rest.is_empty() {
        let offset = offset_in(data, rest);
        let malformed = |e: PcapError| CaptureError::Malformed {
            offset,
            reason: e.to_string(),
        };
        let endianness = parser.section().endianness;
        let (next, raw) = match parser.next_raw_block(rest) {
            Ok(ok) => ok,
            Err(PcapError::IncompleteBuffer) => {
                return salvage_last_block(rest, offset, endianness, &interfaces, number, &mut f);
            }
            Err(e) => return Err(malformed(e)),
        };
        rest = next;

        match raw.type_ {
            SECTION_HEADER_BLOCK => interfaces.clear(),
            INTERFACE_DESCRIPTION_BLOCK => {
                // The parser has just decoded and stored this block.
                if let Some(idb) = parser.interfaces().last() {
                    interfaces.push(Interface::from_idb(idb));
                }
            }
            ENHANCED_PACKET_BLOCK | SIMPLE_PACKET_BLOCK | PACKET_BLOCK => {
                number = number.saturating_add(1);
                let Cow::Borrowed(body) = raw.body else {
                    return Err(owned_data(offset));
                };
                let packet = PacketBody::parse(raw.type_, body, endianness).ok_or_else(|| {
                    CaptureError::Malformed {
                        offset,
                        reason: "packet block is shorter than its fixed fields".into(),
                    }
                })?;
                let iface = interface(&interfaces, packet.interface_id, offset)?;
                f(Frame {
                    number,
                    timestamp_ns: packet.ticks.map_or(0, |t| iface.timestamp_ns(t)),
                    link: iface
                        .link
                        .ok_or(CaptureError::UnsupportedLinkType(iface.link_code))?,
                    data: packet.data,
                });
            }
            _ => {}
        }
    }
    Ok(())
}

fn interface(interfaces: &[Interface], id: u32, offset: u64) -> Result<Interface, CaptureError> {
    usize::try_from(id)
        .ok()
        .and_then(|i| interfaces.get(i))
        .copied()
        .ok_or_else(|| CaptureError::Malformed {
            offset,
            reason: format!("packet refers to undeclared interface {id}"),
        })
}

/// The fields of an enhanced, simple or (obsolete) packet block body.
///
/// Parsed here rather than by pcap-file because we want to be lenient about
/// options (a bad comment should not lose the packet) and pcap-file assumes
/// nanosecond ticks and reads the obsolete block's timestamp in the wrong
/// word order on little-endian files.
struct PacketBody<'a> {
    interface_id: u32,
    /// Raw timestamp in interface units; simple packet blocks have none.
    ticks: Option<u64>,
    data: &'a [u8],
}

impl<'a> PacketBody<'a> {
    /// Parses a block body. A captured length larger than the body is
    /// clamped, which is what lets a cut-short last block be salvaged.
    fn parse(block_type: u32, body: &'a [u8], e: Endianness) -> Option<Self> {
        let clamp = |data: &'a [u8], len: u32| {
            let len = usize::try_from(len).unwrap_or(usize::MAX).min(data.len());
            data.get(..len)
        };
        match block_type {
            ENHANCED_PACKET_BLOCK | PACKET_BLOCK => {
                let interface_id = if block_type == PACKET_BLOCK {
                    // 16-bit interface id followed by a 16-bit drop count.
                    let b: [u8; 2] = body.get(..2)?.try_into().ok()?;
                    u32::from(match e {
                        Endianness::Big => u16::from_be_bytes(b),
                        Endianness::Little => u16::from_le_bytes(b),
                    })
                } else {
                    read_u32(body, 0, e)?
                };
                let hi = read_u32(body, 4, e)?;
                let lo = read_u32(body, 8, e)?;
                let caplen = read_u32(body, 12, e)?;
                Some(Self {
                    interface_id,
                    ticks: Some((u64::from(hi) << 32) | u64::from(lo)),
                    data: clamp(body.get(20..)?, caplen)?,
                })
            }
            SIMPLE_PACKET_BLOCK => {
                // The data is padded to 4 bytes; the original length bounds
                // the real packet (the snap length may cut it further).
                let orig_len = read_u32(body, 0, e)?;
                Some(Self {
                    interface_id: 0,
                    ticks: None,
                    data: clamp(body.get(4..)?, orig_len)?,
                })
            }
            _ => None,
        }
    }
}

/// Handles a pcapng file whose last block is cut short: if it is a packet
/// block with a complete fixed header, the captured bytes that made it into
/// the file are delivered as a (truncated) frame. Anything else is ignored.
fn salvage_last_block<'a>(
    rest: &'a [u8],
    offset: u64,
    endianness: Endianness,
    interfaces: &[Interface],
    number: u64,
    f: &mut impl FnMut(Frame<'a>),
) -> Result<(), CaptureError> {
    let (Some(block_type), Some(block_len), Some(body)) = (
        read_u32(rest, 0, endianness),
        read_u32(rest, 4, endianness),
        rest.get(8..),
    ) else {
        return Ok(());
    };
    if !matches!(
        block_type,
        ENHANCED_PACKET_BLOCK | PACKET_BLOCK | SIMPLE_PACKET_BLOCK
    ) {
        return Ok(());
    }
    // Block overhead (header, trailer, fixed fields, padding) is well under
    // 64 bytes; anything far past the snap length is a corrupt length.
    if block_len > MAX_SNAPLEN.saturating_add(64) {
        return Err(CaptureError::Malformed {
            offset,
            reason: format!(
                "packet block claims {block_len} bytes but only {} are left in the file",
                rest.len()
            ),
        });
    }
    let Some(packet) = PacketBody::parse(block_type, body, endianness) else {
        return Ok(());
    };
    let Some(iface) = usize::try_from(packet.interface_id)
        .ok()
        .and_then(|i| interfaces.get(i))
    else {
        return Ok(());
    };
    let Some(link) = iface.link else {
        return Err(CaptureError::UnsupportedLinkType(iface.link_code));
    };
    f(Frame {
        number: number.saturating_add(1),
        timestamp_ns: packet.ticks.map_or(0, |t| iface.timestamp_ns(t)),
        link,
        data: packet.data,
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn le(words: &[u32]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    #[test]
    fn obsolete_packet_block_timestamp_word_order() {
        // iface 1 | drops 0, ts high, ts low, caplen, origlen, data.
        let mut body = le(&[1, 0x0000_0002, 0x0000_0003, 3, 3]);
        body.extend_from_slice(b"abc\0");
        let p = PacketBody::parse(PACKET_BLOCK, &body, Endianness::Little).expect("parse");
        assert_eq!(p.interface_id, 1);
        assert_eq!(p.ticks, Some((2 << 32) | 3));
        assert_eq!(p.data, b"abc");
    }

    #[test]
    fn simple_packet_block_drops_padding() {
        let mut body = le(&[5]);
        body.extend_from_slice(b"hello\0\0\0");
        let p = PacketBody::parse(SIMPLE_PACKET_BLOCK, &body, Endianness::Little).expect("parse");
        assert_eq!((p.interface_id, p.ticks, p.data), (0, None, &b"hello"[..]));
    }

    #[test]
    fn short_packet_block_is_rejected() {
        assert!(PacketBody::parse(ENHANCED_PACKET_BLOCK, &[0; 19], Endianness::Big).is_none());
        assert!(PacketBody::parse(SIMPLE_PACKET_BLOCK, &[0; 3], Endianness::Big).is_none());
    }

    #[test]
    fn timestamp_resolutions() {
        let mut iface = Interface {
            link: Some(LinkType::Ethernet),
            link_code: 1,
            units_per_sec: 1_000_000,
            offset_sec: 0,
        };
        assert_eq!(iface.timestamp_ns(1_500_000), 1_500_000_000);
        iface.units_per_sec = 1 << 10; // if_tsresol 0x8a
        assert_eq!(iface.timestamp_ns(512), 500_000_000);
        iface.units_per_sec = 0; // unrepresentable resolution
        assert_eq!(iface.timestamp_ns(u64::MAX), 0);
        iface.units_per_sec = 1;
        iface.offset_sec = u64::MAX;
        assert_eq!(iface.timestamp_ns(u64::MAX), u64::MAX);
    }
}
