//! Turns a packet capture into reassembled TCP connections.
//!
//! iWARP (MPA/DDP/RDMAP) framing is independent of TCP segmentation: an FPDU
//! can span segments and a segment can hold several FPDUs (siw even sends the
//! 4-byte MPA CRC in its own segment). Decoders therefore need each
//! direction's *byte stream*, not packets. This crate reads classic pcap or
//! pcapng, picks out the TCP segments and reassembles both directions of every
//! connection in sequence order, remembering which frame carried which bytes
//! so decoders can point back into the capture.
//!
//! Capture files are untrusted input: nothing here panics on malformed data.
//! Problems with the file itself are returned as [`CaptureError`]; problems
//! with individual packets (non-TCP, IP fragments, broken headers) make the
//! packet be skipped, and bytes that were never captured show up as
//! [`Direction::gaps`].
//!
//! ```no_run
//! let conns = softrnic_capture::read_capture("siw-rping.pcap".as_ref())?;
//! for c in conns.iter().filter(|c| !c.to_server.bytes.is_empty()) {
//!     println!(
//!         "{} -> {}: {} bytes sent, {} received, complete: {}",
//!         c.client,
//!         c.server,
//!         c.to_server.bytes.len(),
//!         c.to_client.bytes.len(),
//!         c.to_server.gaps.is_empty() && c.to_client.gaps.is_empty(),
//!     );
//! }
//! # Ok::<(), softrnic_capture::CaptureError>(())
//! ```

#![forbid(unsafe_code)]

mod decode;
mod pcap;
mod reassembly;

use std::net::IpAddr;
use std::path::Path;

/// One TCP endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Endpoint {
    /// IPv4 or IPv6 address.
    pub addr: IpAddr,
    /// TCP port.
    pub port: u16,
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.addr {
            IpAddr::V4(a) => write!(f, "{a}:{}", self.port),
            IpAddr::V6(a) => write!(f, "[{a}]:{}", self.port),
        }
    }
}

/// A TCP segment's payload position within its direction's reassembled stream.
///
/// Lets a stream decoder map any byte back to the frame that carried it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentInfo {
    /// 1-based frame number in the file (as Wireshark counts).
    pub frame: u64,
    /// Stream offset of the first payload byte this segment contributed.
    pub offset: u64,
    /// Number of new bytes this segment contributed.
    pub len: u32,
    /// Capture timestamp in nanoseconds since the Unix epoch.
    pub timestamp_ns: u64,
}

/// One direction of a TCP connection, reassembled in sequence order.
#[derive(Debug, Clone, Default)]
pub struct Direction {
    /// Payload bytes in order, starting at ISN+1 (or at the first seen
    /// sequence number if no SYN was captured). Only the contiguous prefix
    /// is kept: reassembly stops at the first gap, because a decoder cannot
    /// resynchronise an MPA stream across missing bytes anyway.
    pub bytes: Vec<u8>,
    /// Payload-carrying segments in stream order, covering exactly `bytes`.
    /// Retransmitted duplicates are dropped; a segment that partly overlaps
    /// earlier data keeps only its new part (the first-seen bytes win), so
    /// a segment whose new bytes are split by earlier data appears once per
    /// new part, with the same frame number.
    pub segments: Vec<SegmentInfo>,
    /// `(offset, len)` of every stream range known to exist but never
    /// captured, in stream order. The first one is where `bytes` ends; their
    /// lengths add up to the total number of missing bytes.
    pub gaps: Vec<(u64, u64)>,
    /// A SYN was seen in this direction.
    pub syn: bool,
    /// A FIN was seen in this direction.
    pub fin: bool,
    /// A RST was seen in this direction.
    pub rst: bool,
}

/// A TCP connection with both directions reassembled.
#[derive(Debug, Clone)]
pub struct Connection {
    /// 0-based position, in order of each connection's first packet.
    pub index: usize,
    /// The side that sent the first SYN (without ACK); if no SYN was
    /// captured, the side that sent the first packet seen (or the receiver
    /// of a SYN+ACK, whose sender is clearly the server).
    pub client: Endpoint,
    /// The other side.
    pub server: Endpoint,
    /// Bytes sent by `client`.
    pub to_server: Direction,
    /// Bytes sent by `server`.
    pub to_client: Direction,
    /// 1-based frame number of the connection's first packet.
    pub first_frame: u64,
}

/// Why a capture could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// The file could not be read from disk.
    #[error("cannot read capture file: {0}")]
    Io(#[from] std::io::Error),
    /// The data is not a pcap or pcapng file (bad magic, empty, header cut short).
    #[error("not a pcap/pcapng capture: {0}")]
    NotACapture(String),
    /// The capture's link-layer type is one this crate cannot decode.
    #[error(
        "unsupported link type {0} (supported: 0 null, 1 Ethernet, 101/228/229 raw IP, \
         108 loop, 113 Linux SLL, 276 Linux SLL2)"
    )]
    UnsupportedLinkType(u32),
    /// The file started out valid but a later block or record is corrupt.
    #[error("malformed capture at byte offset {offset}: {reason}")]
    Malformed {
        /// Byte offset in the file where the bad block or record starts.
        offset: u64,
        /// What is wrong with it.
        reason: String,
    },
}

/// Reads a pcap or pcapng file and returns its TCP connections.
///
/// See [`parse_capture`] for the details.
pub fn read_capture(path: &Path) -> Result<Vec<Connection>, CaptureError> {
    let data = std::fs::read(path)?;
    parse_capture(&data)
}

/// Parses a pcap or pcapng file held in memory and returns its TCP
/// connections, in order of their first packet.
///
/// The format is detected from the magic number. Non-TCP packets, IP
/// fragments and packets whose headers do not parse are skipped. A packet cut
/// short by the snap length (or a last record cut short by the end of the
/// file) contributes what was captured, and the rest becomes a gap.
/// Connections without payload (a bare handshake, say) are returned too.
pub fn parse_capture(data: &[u8]) -> Result<Vec<Connection>, CaptureError> {
    let mut tracker = reassembly::Tracker::default();
    pcap::for_each_frame(data, |frame| {
        if let Some(seg) = decode::decode_tcp(frame.link, frame.data) {
            tracker.push(&seg, frame.number, frame.timestamp_ns);
        }
    })?;
    Ok(tracker.finish())
}
