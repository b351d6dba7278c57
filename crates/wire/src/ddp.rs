//! DDP headers (RFC 5041), together with the RDMAP control octet that shares their
//! first two octets (RFC 5040 section 4).
//!
//! ```text
//! octet 0: T | L | rsvd(4) | DV(2)      octet 1: RV(2) | rsvd(2) | opcode(4)
//! tagged:   STag(4) TO(8)                                   -> 14 octets
//! untagged: rsvd-ULP(4) QN(4) MSN(4) MO(4)                  -> 18 octets
//! ```

use crate::rdmap::{Opcode, RDMAP_VERSION};
use crate::{Result, WireError, be32, be64, need, room};

/// The DDP version this crate speaks (RFC 5041).
pub const DDP_VERSION: u8 = 1;
/// Length of the shared DDP/RDMAP control field.
pub const CONTROL_LEN: usize = 2;
/// Length of a tagged header, control field included.
pub const TAGGED_HEADER_LEN: usize = 14;
/// Length of an untagged header, control field included.
pub const UNTAGGED_HEADER_LEN: usize = 18;

const FLAG_TAGGED: u8 = 0x80;
const FLAG_LAST: u8 = 0x40;
const DDP_RSVD_MASK: u8 = 0x3c;
const DV_MASK: u8 = 0x03;
const RV_SHIFT: u8 = 6;
const RDMAP_RSVD_MASK: u8 = 0x30;
const OPCODE_MASK: u8 = 0x0f;

/// Length of the DDP header that a ULPDU whose first octet is `control` starts with: the
/// T bit decides (tagged 14, untagged 18). A receiver reading a header piece by piece
/// learns from the first octet how many more to wait for.
pub fn header_len_of(control: u8) -> usize {
    if control & FLAG_TAGGED != 0 {
        TAGGED_HEADER_LEN
    } else {
        UNTAGGED_HEADER_LEN
    }
}

/// Zero-copy view of a DDP header at the start of a ULPDU.
#[derive(Debug, Clone, Copy)]
pub struct DdpHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> DdpHeader<T> {
    /// Wraps a buffer after checking it holds the whole header its T bit announces.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let buf = buffer.as_ref();
        need(buf, CONTROL_LEN)?;
        need(buf, header_len_of(buf[0]))?;
        Ok(DdpHeader { buffer })
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// T: tagged (direct placement by STag/TO) or untagged (into a posted buffer).
    pub fn tagged(&self) -> bool {
        self.b()[0] & FLAG_TAGGED != 0
    }
    /// L: last segment of the DDP message.
    pub fn last(&self) -> bool {
        self.b()[0] & FLAG_LAST != 0
    }
    /// The reserved DDP control bits (zero from a conforming sender, ignored on receive).
    pub fn ddp_reserved(&self) -> u8 {
        (self.b()[0] & DDP_RSVD_MASK) >> 2
    }
    /// DV: the DDP version.
    pub fn ddp_version(&self) -> u8 {
        self.b()[0] & DV_MASK
    }
    /// RV: the RDMAP version.
    pub fn rdmap_version(&self) -> u8 {
        self.b()[1] >> RV_SHIFT
    }
    /// The reserved RDMAP control bits (zero from a conforming sender, ignored on
    /// receive).
    pub fn rdmap_reserved(&self) -> u8 {
        (self.b()[1] & RDMAP_RSVD_MASK) >> 4
    }
    /// The raw 4-bit opcode.
    pub fn opcode_bits(&self) -> u8 {
        self.b()[1] & OPCODE_MASK
    }
    /// Header length: 14 tagged, 18 untagged.
    pub fn header_len(&self) -> usize {
        if self.tagged() {
            TAGGED_HEADER_LEN
        } else {
            UNTAGGED_HEADER_LEN
        }
    }
    /// Tagged: the steering tag.
    pub fn stag(&self) -> u32 {
        be32(self.b(), 2)
    }
    /// Tagged: the tagged offset.
    pub fn tagged_offset(&self) -> u64 {
        be64(self.b(), 6)
    }
    /// Untagged: the reserved-for-ULP field (RDMAP puts the Invalidate STag here).
    pub fn rsvd_ulp(&self) -> u32 {
        be32(self.b(), 2)
    }
    /// Untagged: the queue number.
    pub fn queue_number(&self) -> u32 {
        be32(self.b(), 6)
    }
    /// Untagged: the message sequence number.
    pub fn msn(&self) -> u32 {
        be32(self.b(), 10)
    }
    /// Untagged: the message offset.
    pub fn message_offset(&self) -> u32 {
        be32(self.b(), 14)
    }
}

/// Where a DDP segment's payload goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Placement {
    /// Into a registered buffer, named by the sender.
    Tagged {
        /// Steering tag of the target buffer.
        stag: u32,
        /// Tagged offset of the first payload octet.
        to: u64,
    },
    /// Into the receiver's next posted buffer on queue `qn`.
    Untagged {
        /// Reserved for the ULP: RDMAP's Invalidate STag for Send with Invalidate.
        rsvd_ulp: u32,
        /// Queue number.
        qn: u32,
        /// Message sequence number (starts at 1 per queue).
        msn: u32,
        /// Message offset of the first payload octet.
        mo: u32,
    },
}

/// A parsed DDP header with its RDMAP control: everything before the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DdpRepr {
    /// L: this segment ends the message.
    pub last: bool,
    /// The RDMAP opcode.
    pub opcode: Opcode,
    /// Tagged or untagged placement information.
    pub placement: Placement,
}

impl DdpRepr {
    /// Parses and validates a header: versions, opcode, and that the opcode fits the T
    /// bit. The reserved control bits are not checked: RFC 5041 (section 4.2) and
    /// RFC 5040 (section 4.1) have a sender zero them and a receiver ignore them, so a
    /// later revision may use them without breaking this one (the view's
    /// [`DdpHeader::ddp_reserved`] and [`DdpHeader::rdmap_reserved`] still show them).
    pub fn parse<T: AsRef<[u8]>>(h: &DdpHeader<T>) -> Result<Self> {
        let tagged = h.tagged();
        if h.ddp_version() != DDP_VERSION {
            return Err(WireError::BadDdpVersion {
                version: h.ddp_version(),
                tagged,
            });
        }
        if h.rdmap_version() != RDMAP_VERSION {
            return Err(WireError::BadRdmapVersion(h.rdmap_version()));
        }
        let opcode = Opcode::from_bits(h.opcode_bits())?;
        if opcode.is_tagged() != tagged {
            return Err(WireError::OpcodeTagMismatch {
                opcode: opcode.to_bits(),
                tagged,
            });
        }
        let placement = if tagged {
            Placement::Tagged {
                stag: h.stag(),
                to: h.tagged_offset(),
            }
        } else {
            Placement::Untagged {
                rsvd_ulp: h.rsvd_ulp(),
                qn: h.queue_number(),
                msn: h.msn(),
                mo: h.message_offset(),
            }
        };
        Ok(DdpRepr {
            last: h.last(),
            opcode,
            placement,
        })
    }

    /// Parses the header at the start of `buf`.
    #[inline]
    pub fn parse_bytes(buf: &[u8]) -> Result<Self> {
        // The receive path parses one header per FPDU: the header is checked once and
        // copied into a fixed array, whose field reads then need no bounds checks.
        need(buf, CONTROL_LEN)?;
        let mut h = [0u8; UNTAGGED_HEADER_LEN];
        if buf[0] & FLAG_TAGGED != 0 {
            need(buf, TAGGED_HEADER_LEN)?;
            h[..TAGGED_HEADER_LEN].copy_from_slice(&buf[..TAGGED_HEADER_LEN]);
        } else {
            need(buf, UNTAGGED_HEADER_LEN)?;
            h.copy_from_slice(&buf[..UNTAGGED_HEADER_LEN]);
        }
        Self::parse(&DdpHeader { buffer: h })
    }

    /// Whether the segment is tagged.
    pub fn tagged(&self) -> bool {
        matches!(self.placement, Placement::Tagged { .. })
    }

    /// Header length on the wire.
    pub fn header_len(&self) -> usize {
        if self.tagged() {
            TAGGED_HEADER_LEN
        } else {
            UNTAGGED_HEADER_LEN
        }
    }

    /// The header's first two octets: the DDP control (T, L, version) and the RDMAP
    /// control (version, opcode).
    #[inline(always)]
    pub fn control_octets(&self) -> [u8; 2] {
        let mut c0 = DDP_VERSION;
        if self.tagged() {
            c0 |= FLAG_TAGGED;
        }
        if self.last {
            c0 |= FLAG_LAST;
        }
        [c0, (RDMAP_VERSION << RV_SHIFT) | self.opcode.to_bits()]
    }

    /// Writes the header; returns its length.
    #[inline]
    pub fn emit(&self, out: &mut [u8]) -> Result<usize> {
        let len = self.header_len();
        room(out, len)?;
        out[..2].copy_from_slice(&self.control_octets());
        match self.placement {
            Placement::Tagged { stag, to } => {
                out[2..6].copy_from_slice(&stag.to_be_bytes());
                out[6..14].copy_from_slice(&to.to_be_bytes());
            }
            Placement::Untagged {
                rsvd_ulp,
                qn,
                msn,
                mo,
            } => {
                out[2..6].copy_from_slice(&rsvd_ulp.to_be_bytes());
                out[6..10].copy_from_slice(&qn.to_be_bytes());
                out[10..14].copy_from_slice(&msn.to_be_bytes());
                out[14..18].copy_from_slice(&mo.to_be_bytes());
            }
        }
        Ok(len)
    }

    /// The header as a fixed array plus its length, for vectored transmit.
    pub fn to_bytes(&self) -> ([u8; UNTAGGED_HEADER_LEN], usize) {
        let mut b = [0u8; UNTAGGED_HEADER_LEN];
        // Cannot fail: the array holds the longest header.
        let n = self.emit(&mut b).unwrap_or(0);
        (b, n)
    }
}
