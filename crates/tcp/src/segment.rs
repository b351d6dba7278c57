//! One TCP segment in one IPv4 packet: [`Segment::parse`] from the octets of a packet
//! (both checksums verified, the payload borrowed) and [`Segment::emit`] into a caller's
//! buffer (no allocation). The header codecs are etherparse's; what is ours is the
//! plain [`Segment`] value the connection works with and the option handling it needs
//! (MSS, window scale, SACK-permitted, SACK blocks, timestamps; unknown options are
//! skipped by their length).
//!
//! Every malformed packet is an [`Err`], never a panic: the connection counts it and
//! drops it.

use crate::seq::SeqNum;
use arrayvec::ArrayVec;
use bitflags::bitflags;
use etherparse::checksum::Sum16BitWords;
use etherparse::{
    IpNumber, Ipv4Header, Ipv4HeaderSlice, Ipv4Slice, TcpHeader, TcpHeaderSlice, TcpOptionElement,
    TcpOptions, TcpOptionsIterator, TcpSlice,
};
use std::net::SocketAddrV4;

bitflags! {
    /// The control bits of a TCP header.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
    pub struct Flags: u8 {
        const FIN = 0x01;
        const SYN = 0x02;
        const RST = 0x04;
        const PSH = 0x08;
        const ACK = 0x10;
        const URG = 0x20;
        const ECE = 0x40;
        const CWR = 0x80;
    }
}

/// One SACK block (RFC 2018): the receiver holds `[left, right)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SackBlock {
    pub left: SeqNum,
    pub right: SeqNum,
}

/// The most SACK blocks one segment carries (four fit in the 40 option octets).
pub const MAX_SACK_BLOCKS: usize = 4;

/// IPv4 header length (we emit no IP options).
pub const IPV4_HEADER_LEN: usize = 20;
/// TCP header length without options.
pub const TCP_HEADER_LEN: usize = 20;

/// The TCP options this stack understands.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Options {
    /// Maximum segment size (SYN only).
    pub mss: Option<u16>,
    /// Window scale shift (SYN only).
    pub window_scale: Option<u8>,
    /// SACK permitted (SYN only).
    pub sack_permitted: bool,
    /// SACK blocks, the most recent first.
    pub sack: ArrayVec<SackBlock, MAX_SACK_BLOCKS>,
    /// Timestamps (value, echo reply): parsed and emitted, not used by the connection.
    pub timestamp: Option<(u32, u32)>,
}

/// A TCP segment with its IPv4 addresses; the payload is borrowed from the packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment<'a> {
    pub src: SocketAddrV4,
    pub dst: SocketAddrV4,
    pub seq: SeqNum,
    pub ack: SeqNum,
    pub flags: Flags,
    /// The window field as sent (not scaled).
    pub window: u16,
    pub options: Options,
    pub payload: &'a [u8],
}

/// Why a packet is not a segment we take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("not a well-formed IPv4 packet")]
    Ipv4,
    #[error("IPv4 header checksum mismatch")]
    Ipv4Checksum,
    #[error("IPv4 fragment (fragments are not reassembled)")]
    Fragment,
    #[error("IPv4 protocol {0} is not TCP")]
    NotTcp(u8),
    #[error("not a well-formed TCP header")]
    Tcp,
    #[error("TCP checksum mismatch")]
    TcpChecksum,
    #[error("malformed TCP option of kind {0}")]
    Option(u8),
}

/// Why a segment could not be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EmitError {
    #[error("the packet needs {need} octets, the buffer has {have}")]
    BufferTooSmall { need: usize, have: usize },
    #[error("a payload of {0} octets does not fit in one IPv4 packet")]
    TooLong(usize),
    #[error("the TCP options need more than 40 octets")]
    OptionsTooLong,
}

impl Options {
    /// Octets these options take on the wire, padded to a multiple of 4.
    pub fn encoded_len(&self) -> usize {
        let mut n = 0;
        if self.mss.is_some() {
            n += 4;
        }
        if self.sack_permitted {
            n += 4;
        }
        if self.timestamp.is_some() {
            n += 12;
        }
        if self.window_scale.is_some() {
            n += 4;
        }
        if !self.sack.is_empty() {
            n += 4 + 8 * self.sack.len();
        }
        n
    }

    /// The wire form, aligned with NOPs the way common stacks lay it out.
    fn encode(&self) -> Result<TcpOptions, EmitError> {
        use TcpOptionElement::*;
        let mut e: ArrayVec<TcpOptionElement, 16> = ArrayVec::new();
        if let Some(mss) = self.mss {
            e.push(MaximumSegmentSize(mss));
        }
        if self.sack_permitted {
            e.extend([Noop, Noop, SelectiveAcknowledgementPermitted]);
        }
        if let Some((val, echo)) = self.timestamp {
            e.extend([Noop, Noop, Timestamp(val, echo)]);
        }
        if let Some(shift) = self.window_scale {
            e.extend([Noop, WindowScale(shift)]);
        }
        if let Some((first, rest)) = self.sack.split_first() {
            let mut more = [None; 3];
            for (slot, b) in more.iter_mut().zip(rest) {
                *slot = Some((b.left.0, b.right.0));
            }
            e.extend([
                Noop,
                Noop,
                SelectiveAcknowledgement((first.left.0, first.right.0), more),
            ]);
        }
        TcpOptions::try_from_elements(&e).map_err(|_| EmitError::OptionsTooLong)
    }

    /// Reads the options area of a TCP header; unknown kinds are skipped by their
    /// length, an option whose length is impossible is an error.
    fn parse(raw: &[u8]) -> Result<Options, ParseError> {
        let mut opts = Options::default();
        let mut rest = raw;
        while let Some(&kind) = rest.first() {
            match kind {
                0 => break,
                1 => rest = &rest[1..],
                2 | 3 | 4 | 5 | 8 => {
                    let mut it = TcpOptionsIterator::from_slice(rest);
                    match it.next() {
                        Some(Ok(e)) => opts.take(e),
                        _ => return Err(ParseError::Option(kind)),
                    }
                    rest = it.rest();
                }
                _ => {
                    let len = rest.get(1).map_or(0, |&l| usize::from(l));
                    if len < 2 || len > rest.len() {
                        return Err(ParseError::Option(kind));
                    }
                    rest = &rest[len..];
                }
            }
        }
        Ok(opts)
    }

    fn take(&mut self, e: TcpOptionElement) {
        use TcpOptionElement::*;
        match e {
            Noop => {}
            MaximumSegmentSize(v) => self.mss = Some(v),
            WindowScale(v) => self.window_scale = Some(v),
            SelectiveAcknowledgementPermitted => self.sack_permitted = true,
            SelectiveAcknowledgement(first, rest) => {
                self.sack.clear();
                for (l, r) in std::iter::once(first).chain(rest.into_iter().flatten()) {
                    self.sack.push(SackBlock {
                        left: SeqNum(l),
                        right: SeqNum(r),
                    });
                }
            }
            Timestamp(v, echo) => self.timestamp = Some((v, echo)),
        }
    }
}

impl<'a> Segment<'a> {
    /// The sequence space the segment occupies: payload, plus one each for SYN and FIN.
    pub fn seq_len(&self) -> u32 {
        self.payload.len() as u32
            + u32::from(self.flags.contains(Flags::SYN))
            + u32::from(self.flags.contains(Flags::FIN))
    }

    /// Octets of the whole IPv4 packet.
    pub fn packet_len(&self) -> usize {
        IPV4_HEADER_LEN + TCP_HEADER_LEN + self.options.encoded_len() + self.payload.len()
    }

    /// Reads an IPv4 packet carrying one TCP segment; both checksums must hold. Octets
    /// after the IPv4 total length (link padding) are ignored.
    pub fn parse(packet: &'a [u8]) -> Result<Segment<'a>, ParseError> {
        Segment::parse_with(packet, true)
    }

    /// [`Segment::parse`], verifying the TCP checksum only if `verify_tcp`: off for a
    /// link that checks it itself ([`crate::Config::checksum_offload`]). The IPv4
    /// header's checksum is always verified (20 octets).
    pub fn parse_with(packet: &'a [u8], verify_tcp: bool) -> Result<Segment<'a>, ParseError> {
        let ip = Ipv4Slice::from_slice(packet).map_err(|_| ParseError::Ipv4)?;
        let header = ip.header();
        if Sum16BitWords::new()
            .add_slice(header.slice())
            .ones_complement()
            != 0
        {
            return Err(ParseError::Ipv4Checksum);
        }
        if ip.is_payload_fragmented() {
            return Err(ParseError::Fragment);
        }
        if header.protocol() != IpNumber::TCP || ip.extensions().auth.is_some() {
            return Err(ParseError::NotTcp(header.protocol().0));
        }
        let (src, dst) = (header.source(), header.destination());
        let bytes = ip.payload().payload;
        let tcp = TcpSlice::from_slice(bytes).map_err(|_| ParseError::Tcp)?;
        if verify_tcp && tcp_checksum(src, dst, bytes) != 0 {
            return Err(ParseError::TcpChecksum);
        }
        let options = Options::parse(tcp.options())?;
        Ok(Segment {
            src: SocketAddrV4::new(src.into(), tcp.source_port()),
            dst: SocketAddrV4::new(dst.into(), tcp.destination_port()),
            seq: SeqNum(tcp.sequence_number()),
            ack: SeqNum(tcp.acknowledgment_number()),
            flags: Flags::from_bits_retain(bytes[13]),
            window: tcp.window_size(),
            options,
            payload: tcp.payload(),
        })
    }

    /// Writes the packet into `out`; returns its length.
    pub fn emit(&self, out: &mut [u8]) -> Result<usize, EmitError> {
        self.emit_parts([self.payload, &[]], out, true)
    }

    /// Writes the packet with the payload given in two parts (a ring buffer's two
    /// slices), ignoring `self.payload`; the TCP checksum is left zero unless
    /// `tcp_checksum` (off for a link that computes it, as a NIC with checksum offload
    /// does).
    pub(crate) fn emit_parts(
        &self,
        parts: [&[u8]; 2],
        out: &mut [u8],
        tcp_checksum: bool,
    ) -> Result<usize, EmitError> {
        self.emit_with(parts, parts[0].len() + parts[1].len(), out, tcp_checksum)
    }

    /// Writes the headers of a packet whose `payload_len` octets of payload travel
    /// apart (by reference, on a link that carries them so: [`crate::Lent`]); returns
    /// the headers' length. No TCP checksum: only such a link does this.
    pub(crate) fn emit_headers(
        &self,
        payload_len: usize,
        out: &mut [u8],
    ) -> Result<usize, EmitError> {
        let total = self.emit_with([&[], &[]], payload_len, out, false)?;
        Ok(total - payload_len)
    }

    /// Reads a packet whose headers (`head`, whose IPv4 total length counts the
    /// payload) and payload (`body`) lie apart, from a link that checks TCP checksums
    /// itself. The IPv4 header's checksum is verified.
    pub fn parse_split(head: &[u8], body: &'a [u8]) -> Result<Segment<'a>, ParseError> {
        let ip = Ipv4HeaderSlice::from_slice(head).map_err(|_| ParseError::Ipv4)?;
        if Sum16BitWords::new().add_slice(ip.slice()).ones_complement() != 0 {
            return Err(ParseError::Ipv4Checksum);
        }
        if ip.is_fragmenting_payload() {
            return Err(ParseError::Fragment);
        }
        if ip.protocol() != IpNumber::TCP {
            return Err(ParseError::NotTcp(ip.protocol().0));
        }
        let tcp_at = ip.slice().len();
        let tcp_bytes = head.get(tcp_at..).ok_or(ParseError::Tcp)?;
        let tcp = TcpHeaderSlice::from_slice(tcp_bytes).map_err(|_| ParseError::Tcp)?;
        let header_len = tcp_at + tcp.slice().len();
        if usize::from(ip.total_len()) != header_len + body.len() || head.len() < header_len {
            return Err(ParseError::Tcp);
        }
        let options = Options::parse(tcp.options())?;
        Ok(Segment {
            src: SocketAddrV4::new(ip.source_addr(), tcp.source_port()),
            dst: SocketAddrV4::new(ip.destination_addr(), tcp.destination_port()),
            seq: SeqNum(tcp.sequence_number()),
            ack: SeqNum(tcp.acknowledgment_number()),
            flags: Flags::from_bits_retain(tcp_bytes[13]),
            window: tcp.window_size(),
            options,
            payload: body,
        })
    }

    /// Writes the headers and `parts`, with the lengths of a payload of `payload_len`.
    fn emit_with(
        &self,
        parts: [&[u8]; 2],
        payload_len: usize,
        out: &mut [u8],
        tcp_checksum: bool,
    ) -> Result<usize, EmitError> {
        let mut tcp = TcpHeader::new(self.src.port(), self.dst.port(), self.seq.0, self.window);
        tcp.acknowledgment_number = self.ack.0;
        let f = self.flags;
        tcp.fin = f.contains(Flags::FIN);
        tcp.syn = f.contains(Flags::SYN);
        tcp.rst = f.contains(Flags::RST);
        tcp.psh = f.contains(Flags::PSH);
        tcp.ack = f.contains(Flags::ACK);
        tcp.urg = f.contains(Flags::URG);
        tcp.ece = f.contains(Flags::ECE);
        tcp.cwr = f.contains(Flags::CWR);
        tcp.options = self.options.encode()?;
        let tcp_len = tcp.header_len() + payload_len;
        let total = IPV4_HEADER_LEN + tcp_len;
        let tcp_len16 = u16::try_from(tcp_len)
            .ok()
            .filter(|&l| usize::from(l) + IPV4_HEADER_LEN <= usize::from(u16::MAX))
            .ok_or(EmitError::TooLong(payload_len))?;
        let written = total - payload_len + parts[0].len() + parts[1].len();
        if out.len() < written {
            return Err(EmitError::BufferTooSmall {
                need: written,
                have: out.len(),
            });
        }
        let (src, dst) = (self.src.ip().octets(), self.dst.ip().octets());
        let mut ip = Ipv4Header::new(tcp_len16, 64, IpNumber::TCP, src, dst)
            .map_err(|_| EmitError::TooLong(payload_len))?;
        ip.header_checksum = ip.calc_header_checksum();
        out[..IPV4_HEADER_LEN].copy_from_slice(&ip.to_bytes());
        let h = tcp.to_bytes();
        let mut at = IPV4_HEADER_LEN;
        for part in [&h[..], parts[0], parts[1]] {
            out[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        if tcp_checksum && written == total {
            // The checksum field is zero in `h`: the sum is over the rest.
            let sum = self::tcp_checksum(src, dst, &out[IPV4_HEADER_LEN..total]);
            out[IPV4_HEADER_LEN + 16..IPV4_HEADER_LEN + 18].copy_from_slice(&sum.to_ne_bytes());
        }
        Ok(total)
    }
}

/// The TCP checksum field for `tcp` (RFC 9293 3.1: the one's complement of the one's
/// complement sum of the IPv4 pseudo-header and the TCP octets), in the byte order of
/// the packet's octets read natively: write it with `to_ne_bytes`. Over a segment
/// whose checksum field holds it, the result is zero.
fn tcp_checksum(src: [u8; 4], dst: [u8; 4], tcp: &[u8]) -> u16 {
    let pseudo = u64::from(u32::from_ne_bytes(src))
        + u64::from(u32::from_ne_bytes(dst))
        + u64::from(u16::from_ne_bytes([0, IpNumber::TCP.0]))
        + u64::from(u16::from_ne_bytes((tcp.len() as u16).to_be_bytes()));
    !fold(pseudo + ones_sum(tcp))
}

/// The one's complement sum of `data` as 16-bit words in native order (RFC 1071), not
/// yet folded: 32-bit words are added into four 64-bit lanes, which the compiler
/// vectorizes, and carries are folded once at the end (RFC 1071 section 2: the sum is
/// the same in any byte order and any word width). `data` up to 2^32 octets.
fn ones_sum(data: &[u8]) -> u64 {
    let mut lanes = [0u64; 4];
    let mut blocks = data.chunks_exact(16);
    for b in &mut blocks {
        for (i, lane) in lanes.iter_mut().enumerate() {
            let w = [b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]];
            *lane += u64::from(u32::from_ne_bytes(w));
        }
    }
    let mut sum = lanes.iter().sum::<u64>();
    let mut words = blocks.remainder().chunks_exact(2);
    for w in &mut words {
        sum += u64::from(u16::from_ne_bytes([w[0], w[1]]));
    }
    if let [last] = words.remainder() {
        // An odd last octet is the high-order octet of a word padded with zero.
        sum += u64::from(u16::from_ne_bytes([*last, 0]));
    }
    sum
}

/// Folds a wide one's complement sum into 16 bits.
fn fold(mut sum: u64) -> u16 {
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

#[cfg(test)]
mod tests;
