//! MPA connection setup (RFC 5044, with the RFC 6581 enhanced setup): the Request and
//! Reply frames that open a connection, and the IRD/ORD word in their private data.

use crate::{Result, WireError, be16, need, room};

/// Key that opens an MPA Request frame.
pub const REQ_KEY: &[u8; 16] = b"MPA ID Req Frame";
/// Key that opens an MPA Reply frame.
pub const REP_KEY: &[u8; 16] = b"MPA ID Rep Frame";
/// Key, flags, revision and private-data length.
pub const FRAME_HEADER_LEN: usize = 20;
/// RFC 5044's limit on private data.
pub const MAX_PRIVATE_DATA: usize = 512;
/// Length of the RFC 6581 IRD/ORD word at the start of the private data.
pub const RFC6581_LEN: usize = 4;

const FLAG_MARKERS: u8 = 0x80;
const FLAG_CRC: u8 = 0x40;
const FLAG_REJECT: u8 = 0x20;
const FLAG_ENHANCED: u8 = 0x10;
const RESERVED_MASK: u8 = 0x0f;

/// Request (from the initiator) or Reply (from the responder).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MpaFrameKind {
    /// "MPA ID Req Frame".
    Request,
    /// "MPA ID Rep Frame".
    Reply,
}

impl MpaFrameKind {
    /// The 16-octet key.
    pub fn key(self) -> &'static [u8; 16] {
        match self {
            MpaFrameKind::Request => REQ_KEY,
            MpaFrameKind::Reply => REP_KEY,
        }
    }
}

/// Zero-copy view of an MPA Request or Reply frame.
#[derive(Debug, Clone, Copy)]
pub struct MpaFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> MpaFrame<T> {
    /// Wraps a buffer after checking the key and that the whole frame is present.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let buf = buffer.as_ref();
        // A partial key that already differs is not worth waiting for.
        let probe = buf.len().min(16);
        if buf[..probe] != REQ_KEY[..probe] && buf[..probe] != REP_KEY[..probe] {
            return Err(WireError::BadMpaKey);
        }
        need(buf, FRAME_HEADER_LEN)?;
        let pd_len = be16(buf, 18);
        if usize::from(pd_len) > MAX_PRIVATE_DATA {
            return Err(WireError::PrivateDataTooLong(pd_len));
        }
        need(buf, FRAME_HEADER_LEN + usize::from(pd_len))?;
        Ok(MpaFrame { buffer })
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// Request or Reply.
    pub fn kind(&self) -> MpaFrameKind {
        if &self.b()[..16] == REQ_KEY {
            MpaFrameKind::Request
        } else {
            MpaFrameKind::Reply
        }
    }
    /// M: the sender wants markers in the FPDUs it receives.
    pub fn markers(&self) -> bool {
        self.b()[16] & FLAG_MARKERS != 0
    }
    /// C: the sender wants CRC32c.
    pub fn crc(&self) -> bool {
        self.b()[16] & FLAG_CRC != 0
    }
    /// R: the responder rejects the connection.
    pub fn reject(&self) -> bool {
        self.b()[16] & FLAG_REJECT != 0
    }
    /// The RFC 6581 enhanced-setup flag.
    pub fn enhanced(&self) -> bool {
        self.b()[16] & FLAG_ENHANCED != 0
    }
    /// The remaining reserved flag bits.
    pub fn reserved(&self) -> u8 {
        self.b()[16] & RESERVED_MASK
    }
    /// The MPA revision.
    pub fn revision(&self) -> u8 {
        self.b()[17]
    }
    /// PD_Length.
    pub fn private_data_len(&self) -> u16 {
        be16(self.b(), 18)
    }
    /// The private data (including the RFC 6581 word, if any).
    pub fn private_data(&self) -> &[u8] {
        &self.b()[FRAME_HEADER_LEN..self.frame_len()]
    }
    /// Octets the frame occupies on the stream.
    pub fn frame_len(&self) -> usize {
        FRAME_HEADER_LEN + usize::from(self.private_data_len())
    }
}

/// The RFC 6581 enhanced connection setup word: IRD/ORD and the peer-to-peer
/// ready-to-receive (RTR) negotiation. Bit names follow their meaning: in a Request the
/// RTR flags are the message types the initiator can send, in a Reply the one chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Rfc6581 {
    /// Peer-to-peer mode: an RTR message follows the setup (IRD half, bit 15).
    pub peer_to_peer: bool,
    /// A zero-length Send can serve as RTR (IRD half, bit 14).
    pub rtr_send: bool,
    /// Inbound RDMA Read queue depth (14 bits).
    pub ird: u16,
    /// A zero-length RDMA Write can serve as RTR (ORD half, bit 15).
    pub rtr_write: bool,
    /// A zero-length RDMA Read can serve as RTR (ORD half, bit 14).
    pub rtr_read: bool,
    /// Outbound RDMA Read queue depth (14 bits).
    pub ord: u16,
}

impl Rfc6581 {
    /// Largest IRD or ORD value the 14-bit fields carry.
    pub const MAX_DEPTH: u16 = 0x3fff;

    /// Decodes the 4-octet word.
    pub fn parse(buf: &[u8]) -> Result<Self> {
        if buf.len() < RFC6581_LEN {
            return Err(WireError::MissingRfc6581Params);
        }
        let ird = be16(buf, 0);
        let ord = be16(buf, 2);
        Ok(Rfc6581 {
            peer_to_peer: ird & 0x8000 != 0,
            rtr_send: ird & 0x4000 != 0,
            ird: ird & Self::MAX_DEPTH,
            rtr_write: ord & 0x8000 != 0,
            rtr_read: ord & 0x4000 != 0,
            ord: ord & Self::MAX_DEPTH,
        })
    }

    /// Encodes the 4-octet word (IRD/ORD above 14 bits are clamped).
    pub fn to_bytes(&self) -> [u8; RFC6581_LEN] {
        let ird = self.ird.min(Self::MAX_DEPTH)
            | if self.peer_to_peer { 0x8000 } else { 0 }
            | if self.rtr_send { 0x4000 } else { 0 };
        let ord = self.ord.min(Self::MAX_DEPTH)
            | if self.rtr_write { 0x8000 } else { 0 }
            | if self.rtr_read { 0x4000 } else { 0 };
        let (i, o) = (ird.to_be_bytes(), ord.to_be_bytes());
        [i[0], i[1], o[0], o[1]]
    }
}

/// A parsed MPA Request or Reply frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MpaFrameRepr<'a> {
    /// Request or Reply.
    pub kind: MpaFrameKind,
    /// M flag.
    pub markers: bool,
    /// C flag.
    pub crc: bool,
    /// R flag (Reply only).
    pub reject: bool,
    /// The RFC 6581 enhanced-setup flag.
    pub enhanced: bool,
    /// Reserved flag bits, kept so that a frame re-emits exactly.
    pub reserved: u8,
    /// Revision: 1 (RFC 5044) or 2 (RFC 6581).
    pub revision: u8,
    /// The IRD/ORD word: present exactly when `revision == 2 && enhanced`.
    pub rfc6581: Option<Rfc6581>,
    /// The application's private data (after the RFC 6581 word, if any).
    pub private_data: &'a [u8],
}

impl<'a> MpaFrameRepr<'a> {
    /// Parses and validates a frame at the start of `buf` (octets after the frame are
    /// ignored: they are FPDUs or the application's own stream).
    pub fn parse(buf: &'a [u8]) -> Result<Self> {
        let f = MpaFrame::new_checked(buf)?;
        let kind = f.kind();
        let revision = f.revision();
        if revision != 1 && revision != 2 {
            return Err(WireError::BadMpaRevision(revision));
        }
        if kind == MpaFrameKind::Request && f.reject() {
            return Err(WireError::RejectInRequest);
        }
        let pd = &buf[FRAME_HEADER_LEN..f.frame_len()];
        let (rfc6581, private_data) = if revision == 2 && f.enhanced() {
            (Some(Rfc6581::parse(pd)?), &pd[RFC6581_LEN..])
        } else {
            (None, pd)
        };
        Ok(MpaFrameRepr {
            kind,
            markers: f.markers(),
            crc: f.crc(),
            reject: f.reject(),
            enhanced: f.enhanced(),
            reserved: f.reserved(),
            revision,
            rfc6581,
            private_data,
        })
    }

    /// Frame length on the wire.
    pub fn buffer_len(&self) -> usize {
        FRAME_HEADER_LEN + self.rfc6581.map_or(0, |_| RFC6581_LEN) + self.private_data.len()
    }

    /// Writes the frame; returns its length. Refuses frames that would not parse back.
    pub fn emit(&self, out: &mut [u8]) -> Result<usize> {
        if self.revision != 1 && self.revision != 2 {
            return Err(WireError::BadMpaRevision(self.revision));
        }
        if self.kind == MpaFrameKind::Request && self.reject {
            return Err(WireError::RejectInRequest);
        }
        if self.rfc6581.is_some() != (self.revision == 2 && self.enhanced) {
            return Err(WireError::MissingRfc6581Params);
        }
        let len = self.buffer_len();
        let pd_len = len - FRAME_HEADER_LEN;
        if pd_len > MAX_PRIVATE_DATA {
            return Err(WireError::PrivateDataTooLong(
                u16::try_from(pd_len).unwrap_or(u16::MAX),
            ));
        }
        room(out, len)?;
        out[..16].copy_from_slice(self.kind.key());
        let mut flags = self.reserved & RESERVED_MASK;
        for (on, bit) in [
            (self.markers, FLAG_MARKERS),
            (self.crc, FLAG_CRC),
            (self.reject, FLAG_REJECT),
            (self.enhanced, FLAG_ENHANCED),
        ] {
            if on {
                flags |= bit;
            }
        }
        out[16] = flags;
        out[17] = self.revision;
        out[18..20].copy_from_slice(&(pd_len as u16).to_be_bytes());
        let mut at = FRAME_HEADER_LEN;
        if let Some(p) = self.rfc6581 {
            out[at..at + RFC6581_LEN].copy_from_slice(&p.to_bytes());
            at += RFC6581_LEN;
        }
        out[at..len].copy_from_slice(self.private_data);
        Ok(len)
    }
}
