//! The RDMAP Terminate message (RFC 5040 section 4.8) and the error codes it carries.
//!
//! A Terminate travels untagged on queue 2. Its body starts with the Terminate Control
//! word (layer, error type, error code, and the M/D/R flags that say which headers of
//! the offending segment follow), then optionally the offending segment's length and
//! DDP header (D), and its RDMA Read Request header (R).

use crate::ddp::{TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN};
use crate::rdmap::READ_REQUEST_LEN;
use crate::{Result, WireError, be16, be32, need, room};

/// Longest Terminate body: the control word (4), the offending segment's length (2), its
/// untagged DDP header (18) and an RDMA Read Request header (28).
pub const MAX_LEN: usize = 4 + 2 + UNTAGGED_HEADER_LEN + READ_REQUEST_LEN;

/// The layer that detected the error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layer {
    /// RDMAP (RFC 5040).
    Rdmap,
    /// DDP (RFC 5041).
    Ddp,
    /// The lower-layer protocol: MPA over TCP (RFC 5044).
    Llp,
    /// A layer value the RFCs do not define (kept so a received Terminate still decodes).
    Other(u8),
}

impl Layer {
    /// The 4-bit wire value.
    pub fn to_bits(self) -> u8 {
        match self {
            Layer::Rdmap => 0,
            Layer::Ddp => 1,
            Layer::Llp => 2,
            Layer::Other(v) => v & 0x0f,
        }
    }

    /// Decodes the 4-bit wire value.
    pub fn from_bits(v: u8) -> Layer {
        match v & 0x0f {
            0 => Layer::Rdmap,
            1 => Layer::Ddp,
            2 => Layer::Llp,
            v => Layer::Other(v),
        }
    }
}

/// RDMAP error types (RFC 5040 section 7.2).
pub mod rdmap_etype {
    /// Local catastrophic error.
    pub const LOCAL_CATASTROPHIC: u8 = 0x0;
    /// Remote protection error (STag, bounds, access rights).
    pub const REMOTE_PROTECTION: u8 = 0x1;
    /// Remote operation error (version, opcode, stream errors).
    pub const REMOTE_OPERATION: u8 = 0x2;
}

/// RDMAP error codes (RFC 5040 section 7.2).
pub mod rdmap_code {
    /// Invalid STag.
    pub const INVALID_STAG: u8 = 0x00;
    /// Base or bounds violation.
    pub const BASE_BOUNDS: u8 = 0x01;
    /// Access rights violation.
    pub const ACCESS_RIGHTS: u8 = 0x02;
    /// STag not associated with this RDMAP stream (wrong protection domain).
    pub const STAG_NOT_ASSOCIATED: u8 = 0x03;
    /// Tagged offset wrap.
    pub const TO_WRAP: u8 = 0x04;
    /// Invalid RDMAP version.
    pub const INVALID_VERSION: u8 = 0x05;
    /// Unexpected opcode.
    pub const UNEXPECTED_OPCODE: u8 = 0x06;
    /// Catastrophic error, localized to this RDMAP stream.
    pub const CATASTROPHIC_STREAM: u8 = 0x07;
    /// Catastrophic error, global.
    pub const CATASTROPHIC_GLOBAL: u8 = 0x08;
    /// The STag cannot be invalidated.
    pub const CANNOT_INVALIDATE: u8 = 0x09;
    /// Unspecified error.
    pub const UNSPECIFIED: u8 = 0xff;
}

/// DDP error types (RFC 5041 section 7.2).
pub mod ddp_etype {
    /// Local catastrophic error.
    pub const LOCAL_CATASTROPHIC: u8 = 0x0;
    /// Tagged buffer error.
    pub const TAGGED_BUFFER: u8 = 0x1;
    /// Untagged buffer error.
    pub const UNTAGGED_BUFFER: u8 = 0x2;
    /// Reserved for the use of the RDMA layer above DDP.
    pub const RSVD_FOR_RDMAP: u8 = 0x3;
}

/// DDP error codes (RFC 5041 section 7.2). The same number means different things for
/// tagged and untagged buffer errors, hence two modules.
pub mod ddp_code {
    /// Tagged buffer error codes.
    pub mod tagged {
        /// Invalid STag.
        pub const INVALID_STAG: u8 = 0x00;
        /// Base or bounds violation.
        pub const BASE_BOUNDS: u8 = 0x01;
        /// STag not associated with this DDP stream.
        pub const STAG_NOT_ASSOCIATED: u8 = 0x02;
        /// Tagged offset wrap.
        pub const TO_WRAP: u8 = 0x03;
        /// Invalid DDP version.
        pub const INVALID_VERSION: u8 = 0x04;
    }
    /// Untagged buffer error codes.
    pub mod untagged {
        /// Invalid queue number.
        pub const INVALID_QN: u8 = 0x01;
        /// Invalid MSN: no buffer available (the fatal "receive queue empty" case).
        pub const NO_BUFFER: u8 = 0x02;
        /// Invalid MSN: MSN out of range.
        pub const MSN_RANGE: u8 = 0x03;
        /// Invalid message offset.
        pub const INVALID_MO: u8 = 0x04;
        /// DDP message too long for the available buffer.
        pub const TOO_LONG: u8 = 0x05;
        /// Invalid DDP version.
        pub const INVALID_VERSION: u8 = 0x06;
    }
    /// Local catastrophic error code.
    pub const LOCAL_CATASTROPHIC: u8 = 0x00;
}

/// LLP (MPA) error type: all MPA errors use type 0.
pub mod llp_etype {
    /// MPA error.
    pub const MPA: u8 = 0x0;
}

/// LLP (MPA) error codes (RFC 5044 section 8, RFC 6581 section 9).
pub mod llp_code {
    /// TCP connection closed, reset or otherwise lost.
    pub const STREAM_LOST: u8 = 0x01;
    /// Received MPA CRC does not match the computed one.
    pub const CRC_MISMATCH: u8 = 0x02;
    /// Marker and ULPDU length disagree (the FPDU start was lost).
    pub const FPDU_START: u8 = 0x03;
    /// Invalid MPA request or reply frame.
    pub const INVALID_REQ_REP: u8 = 0x04;
    /// Local catastrophic error (RFC 6581).
    pub const LOCAL_CATASTROPHIC: u8 = 0x05;
    /// Insufficient IRD resources (RFC 6581).
    pub const INSUFFICIENT_IRD: u8 = 0x06;
    /// No matching RTR message type (RFC 6581).
    pub const NO_MATCHING_RTR: u8 = 0x07;
}

/// What a Terminate says went wrong: layer, error type and error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TerminateCause {
    /// The layer that detected the error.
    pub layer: Layer,
    /// The error type (4 bits), whose meaning depends on the layer.
    pub etype: u8,
    /// The error code (8 bits), whose meaning depends on layer and type.
    pub code: u8,
}

impl TerminateCause {
    /// Shorthand constructor.
    pub const fn new(layer: Layer, etype: u8, code: u8) -> Self {
        TerminateCause { layer, etype, code }
    }

    /// A short English name for the cause, as RFC 5040/5041/5044 call it.
    pub fn describe(&self) -> &'static str {
        use Layer::*;
        match (self.layer, self.etype, self.code) {
            (Rdmap, 0, _) => "RDMAP local catastrophic error",
            (Rdmap, 1, 0x00) => "RDMAP invalid STag",
            (Rdmap, 1, 0x01) => "RDMAP base or bounds violation",
            (Rdmap, 1, 0x02) => "RDMAP access rights violation",
            (Rdmap, 1, 0x03) => "RDMAP STag not associated with RDMAP stream",
            (Rdmap, 1, 0x04) => "RDMAP TO wrap",
            (Rdmap, 1, 0x09) => "RDMAP STag cannot be invalidated",
            (Rdmap, 1, _) => "RDMAP remote protection error",
            (Rdmap, 2, 0x05) => "RDMAP invalid RDMAP version",
            (Rdmap, 2, 0x06) => "RDMAP unexpected opcode",
            (Rdmap, 2, 0x07) => "RDMAP catastrophic error localized to stream",
            (Rdmap, 2, 0x08) => "RDMAP catastrophic error global",
            (Rdmap, 2, 0x09) => "RDMAP STag cannot be invalidated",
            (Rdmap, 2, _) => "RDMAP remote operation error",
            (Rdmap, _, _) => "RDMAP error",
            (Ddp, 0, _) => "DDP local catastrophic error",
            (Ddp, 1, 0x00) => "DDP tagged invalid STag",
            (Ddp, 1, 0x01) => "DDP tagged base or bounds violation",
            (Ddp, 1, 0x02) => "DDP tagged STag not associated with DDP stream",
            (Ddp, 1, 0x03) => "DDP tagged TO wrap",
            (Ddp, 1, 0x04) => "DDP tagged invalid DDP version",
            (Ddp, 2, 0x01) => "DDP untagged invalid QN",
            (Ddp, 2, 0x02) => "DDP untagged invalid MSN, no buffer available",
            (Ddp, 2, 0x03) => "DDP untagged invalid MSN, MSN range not valid",
            (Ddp, 2, 0x04) => "DDP untagged invalid MO",
            (Ddp, 2, 0x05) => "DDP untagged message too long for buffer",
            (Ddp, 2, 0x06) => "DDP untagged invalid DDP version",
            (Ddp, _, _) => "DDP error",
            (Llp, 0, 0x01) => "MPA TCP connection lost",
            (Llp, 0, 0x02) => "MPA CRC error",
            (Llp, 0, 0x03) => "MPA marker and ULPDU length mismatch",
            (Llp, 0, 0x04) => "MPA invalid request or reply",
            (Llp, 0, 0x05) => "MPA local catastrophic error",
            (Llp, 0, 0x06) => "MPA insufficient IRD resources",
            (Llp, 0, 0x07) => "MPA no matching RTR",
            (Llp, _, _) => "MPA error",
            (Other(_), _, _) => "unknown layer",
        }
    }
}

impl core::fmt::Display for TerminateCause {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "{} (layer {}, type {:#x}, code {:#04x})",
            self.describe(),
            self.layer.to_bits(),
            self.etype,
            self.code
        )
    }
}

/// Length of the Terminate Control word.
pub const CONTROL_LEN: usize = 4;
/// Length of the "DDP segment length" field that precedes a copied DDP header.
pub const SEGMENT_LEN_LEN: usize = 2;

const FLAG_M: u8 = 0x80;
const FLAG_D: u8 = 0x40;
const FLAG_R: u8 = 0x20;

/// How the Terminate Control word was laid out by its sender.
///
/// RFC 5040 puts Layer in the high nibble of the first octet, EType in the low one, and
/// the M, D, R flags in the top three bits of the third octet. Linux siw (checked with
/// 6.1, x86) declares the word as C bit-fields in the order of the RFC's figure also
/// for little-endian hosts, so on x86 the two nibbles trade places and M, D, R land in
/// the three *lowest* bits of the third octet. The error code octet is right either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TerminateLayout {
    /// RFC 5040's layout (what softrnic emits).
    Rfc5040,
    /// siw's little-endian bit-field layout. Recognised only when the flags prove it:
    /// none of the RFC flag bits set, one of siw's flag bits set (they sit in bits the
    /// RFC reserves, which a conforming sender zeroes), and the copied headers exactly
    /// as long as siw's flags say. A siw Terminate without copied headers cannot be
    /// told apart and is read as RFC 5040.
    SiwLittleEndian,
}

/// siw's M, D, R positions in the third octet (see [`TerminateLayout::SiwLittleEndian`]).
const SIW_FLAG_M: u8 = 0x01;
const SIW_FLAG_D: u8 = 0x02;
const SIW_FLAG_R: u8 = 0x04;

/// The DDP part of a Terminate: the offending segment's length and its DDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TerminatedDdp<'a> {
    /// The DDP segment length of the offending segment (MPA's ULPDU length).
    pub segment_len: u16,
    /// The copied DDP header (with RDMAP control): 14 octets tagged, 18 untagged.
    pub header: &'a [u8],
}

/// A Terminate message body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TerminateRepr<'a> {
    /// Layer, error type and code.
    pub cause: TerminateCause,
    /// M: the copied DDP segment length is valid.
    pub segment_len_valid: bool,
    /// D: the offending DDP segment's length and header, if copied.
    pub ddp: Option<TerminatedDdp<'a>>,
    /// R: the offending RDMA Read Request header, if copied.
    pub rdmap: Option<&'a [u8]>,
    /// The 13 reserved bits of the control word (zero on emit by a conforming sender).
    pub reserved: u16,
    /// The layout the sender used (always [`TerminateLayout::Rfc5040`] on emit).
    pub layout: TerminateLayout,
}

/// What a received Terminate says went wrong, read as leniently as its body allows:
/// the whole body parsed (in either layout) if it can be, else the control word alone
/// in RFC 5040's layout (a sender that copies headers wrongly or adds octets still
/// said why), else, with fewer than four octets, RDMAP remote operation error,
/// unspecified. A Terminate is the last message of a stream (RFC 5040): it is never
/// answered with another, however malformed, so this never fails.
pub fn received_cause(body: &[u8]) -> TerminateCause {
    if let Ok(t) = TerminateRepr::parse(body) {
        return t.cause;
    }
    match body.get(..CONTROL_LEN) {
        Some(c) => TerminateCause::new(Layer::from_bits(c[0] >> 4), c[0] & 0x0f, c[1]),
        None => UNREADABLE,
    }
}

/// The cause reported for a received Terminate whose control word is missing.
pub const UNREADABLE: TerminateCause = TerminateCause::new(
    Layer::Rdmap,
    rdmap_etype::REMOTE_OPERATION,
    rdmap_code::UNSPECIFIED,
);

impl<'a> TerminateRepr<'a> {
    /// Parses a Terminate body (the ULPDU after the untagged DDP header), in RFC 5040's
    /// layout or, where its flags prove it, in siw's (see [`TerminateLayout`]).
    pub fn parse(body: &'a [u8]) -> Result<Self> {
        need(body, CONTROL_LEN)
            .map_err(|_| WireError::BadTerminate("shorter than its control word"))?;
        let third = body[2];
        let siw_flags = third & (SIW_FLAG_M | SIW_FLAG_D | SIW_FLAG_R);
        if third & (FLAG_M | FLAG_D | FLAG_R) == 0
            && siw_flags != 0
            && let Ok(t) = Self::parse_as(body, TerminateLayout::SiwLittleEndian)
        {
            return Ok(t);
        }
        Self::parse_as(body, TerminateLayout::Rfc5040)
    }

    fn parse_as(body: &'a [u8], layout: TerminateLayout) -> Result<Self> {
        let ctrl = be32(body, 0);
        let (layer, etype, flags, reserved) = match layout {
            TerminateLayout::Rfc5040 => (
                (ctrl >> 28) as u8,
                ((ctrl >> 24) & 0x0f) as u8,
                ((ctrl >> 8) & 0xff) as u8,
                (ctrl & 0x1fff) as u16,
            ),
            TerminateLayout::SiwLittleEndian => {
                let third = body[2];
                let mut flags = 0;
                for (siw, rfc) in [
                    (SIW_FLAG_M, FLAG_M),
                    (SIW_FLAG_D, FLAG_D),
                    (SIW_FLAG_R, FLAG_R),
                ] {
                    if third & siw != 0 {
                        flags |= rfc;
                    }
                }
                // siw's 13 reserved bits: the rest of the third octet and the fourth.
                let reserved = (u16::from(third >> 3) << 8) | u16::from(body[3]);
                (body[0] & 0x0f, body[0] >> 4, flags, reserved)
            }
        };
        let layer = Layer::from_bits(layer);
        let code = body[1];
        let mut at = CONTROL_LEN;
        let ddp = if flags & FLAG_D != 0 {
            if body.len() < at + SEGMENT_LEN_LEN + 1 {
                return Err(WireError::BadTerminate(
                    "D flag set but no DDP header copied",
                ));
            }
            let segment_len = be16(body, at);
            at += SEGMENT_LEN_LEN;
            // The copied header's own T bit says how long it is.
            let hlen = if body[at] & 0x80 != 0 {
                TAGGED_HEADER_LEN
            } else {
                UNTAGGED_HEADER_LEN
            };
            let header = body
                .get(at..at + hlen)
                .ok_or(WireError::BadTerminate("copied DDP header is truncated"))?;
            at += hlen;
            Some(TerminatedDdp {
                segment_len,
                header,
            })
        } else {
            None
        };
        let rdmap = if flags & FLAG_R != 0 {
            let h = body
                .get(at..at + READ_REQUEST_LEN)
                .ok_or(WireError::BadTerminate(
                    "copied RDMA Read Request header is truncated",
                ))?;
            at += READ_REQUEST_LEN;
            Some(h)
        } else {
            None
        };
        if at != body.len() {
            return Err(WireError::BadTerminate(
                "trailing octets after the copied headers",
            ));
        }
        Ok(TerminateRepr {
            cause: TerminateCause::new(layer, etype, code),
            segment_len_valid: flags & FLAG_M != 0,
            ddp,
            rdmap,
            reserved,
            layout,
        })
    }

    /// The body length this Terminate emits.
    pub fn buffer_len(&self) -> usize {
        CONTROL_LEN
            + self.ddp.map_or(0, |d| SEGMENT_LEN_LEN + d.header.len())
            + self.rdmap.map_or(0, |r| r.len())
    }

    /// Writes the body into `out`; returns the octets written.
    pub fn emit(&self, out: &mut [u8]) -> Result<usize> {
        if let Some(d) = self.ddp {
            let expected = match d.header.first() {
                Some(b) if b & 0x80 != 0 => TAGGED_HEADER_LEN,
                _ => UNTAGGED_HEADER_LEN,
            };
            if d.header.len() != expected {
                return Err(WireError::BadTerminate(
                    "copied DDP header has the wrong length",
                ));
            }
        }
        if self.rdmap.is_some_and(|r| r.len() != READ_REQUEST_LEN) {
            return Err(WireError::BadTerminate(
                "copied Read Request header has the wrong length",
            ));
        }
        let len = self.buffer_len();
        room(out, len)?;
        let mut flags = 0u8;
        if self.segment_len_valid {
            flags |= FLAG_M;
        }
        if self.ddp.is_some() {
            flags |= FLAG_D;
        }
        if self.rdmap.is_some() {
            flags |= FLAG_R;
        }
        let ctrl = (u32::from(self.cause.layer.to_bits()) << 28)
            | (u32::from(self.cause.etype & 0x0f) << 24)
            | (u32::from(self.cause.code) << 16)
            | (u32::from(flags) << 8)
            | u32::from(self.reserved & 0x1fff);
        out[..4].copy_from_slice(&ctrl.to_be_bytes());
        let mut at = CONTROL_LEN;
        if let Some(d) = self.ddp {
            out[at..at + 2].copy_from_slice(&d.segment_len.to_be_bytes());
            at += 2;
            out[at..at + d.header.len()].copy_from_slice(d.header);
            at += d.header.len();
        }
        if let Some(r) = self.rdmap {
            out[at..at + r.len()].copy_from_slice(r);
            at += r.len();
        }
        Ok(at)
    }
}
