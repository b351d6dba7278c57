//! RDMAP (RFC 5040): opcodes, queue numbers and the RDMA Read Request body.

use crate::{Result, WireError, be32, be64, need, room};

/// The RDMAP version this crate speaks (RFC 5040).
pub const RDMAP_VERSION: u8 = 1;

/// Untagged queue for Send messages.
pub const QN_SEND: u32 = 0;
/// Untagged queue for RDMA Read Requests.
pub const QN_READ_REQUEST: u32 = 1;
/// Untagged queue for Terminate messages.
pub const QN_TERMINATE: u32 = 2;

/// Length of the RDMA Read Request body.
pub const READ_REQUEST_LEN: usize = 28;

/// RDMAP opcodes (RFC 5040, plus the RFC 7306 extensions so they decode by name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Opcode {
    /// RDMA Write (tagged).
    Write,
    /// RDMA Read Request (untagged, queue 1).
    ReadRequest,
    /// RDMA Read Response (tagged).
    ReadResponse,
    /// Send.
    Send,
    /// Send with Invalidate.
    SendInvalidate,
    /// Send with Solicited Event.
    SendSe,
    /// Send with Solicited Event and Invalidate.
    SendSeInvalidate,
    /// Terminate (untagged, queue 2).
    Terminate,
    /// Immediate Data (RFC 7306).
    ImmediateData,
    /// Immediate Data with Solicited Event (RFC 7306).
    ImmediateDataSe,
    /// Atomic Request (RFC 7306).
    AtomicRequest,
    /// Atomic Response (RFC 7306).
    AtomicResponse,
}

impl Opcode {
    /// All opcodes, in wire order.
    pub const ALL: [Opcode; 12] = [
        Opcode::Write,
        Opcode::ReadRequest,
        Opcode::ReadResponse,
        Opcode::Send,
        Opcode::SendInvalidate,
        Opcode::SendSe,
        Opcode::SendSeInvalidate,
        Opcode::Terminate,
        Opcode::ImmediateData,
        Opcode::ImmediateDataSe,
        Opcode::AtomicRequest,
        Opcode::AtomicResponse,
    ];

    /// Decodes the 4-bit opcode field.
    pub fn from_bits(v: u8) -> Result<Opcode> {
        Opcode::ALL
            .get(usize::from(v))
            .copied()
            .ok_or(WireError::UnknownOpcode(v))
    }

    /// The 4-bit wire value.
    pub fn to_bits(self) -> u8 {
        self as u8
    }

    /// Whether this opcode travels in tagged DDP segments.
    pub fn is_tagged(self) -> bool {
        matches!(self, Opcode::Write | Opcode::ReadResponse)
    }

    /// Whether this is one of the four Send variants.
    pub fn is_send(self) -> bool {
        matches!(
            self,
            Opcode::Send | Opcode::SendInvalidate | Opcode::SendSe | Opcode::SendSeInvalidate
        )
    }

    /// Whether the message asks for a solicited event at the receiver.
    pub fn solicited(self) -> bool {
        matches!(
            self,
            Opcode::SendSe | Opcode::SendSeInvalidate | Opcode::ImmediateDataSe
        )
    }

    /// Whether the untagged header's reserved ULP field carries an STag to invalidate.
    pub fn invalidates(self) -> bool {
        matches!(self, Opcode::SendInvalidate | Opcode::SendSeInvalidate)
    }

    /// The untagged queue number RFC 5040 assigns, where it assigns one.
    pub fn queue_number(self) -> Option<u32> {
        match self {
            o if o.is_send() => Some(QN_SEND),
            Opcode::ReadRequest => Some(QN_READ_REQUEST),
            Opcode::Terminate => Some(QN_TERMINATE),
            _ => None,
        }
    }

    /// Short name, as tools print it.
    pub fn name(self) -> &'static str {
        match self {
            Opcode::Write => "Write",
            Opcode::ReadRequest => "ReadReq",
            Opcode::ReadResponse => "ReadResp",
            Opcode::Send => "Send",
            Opcode::SendInvalidate => "SendInv",
            Opcode::SendSe => "SendSE",
            Opcode::SendSeInvalidate => "SendSEInv",
            Opcode::Terminate => "Terminate",
            Opcode::ImmediateData => "ImmData",
            Opcode::ImmediateDataSe => "ImmDataSE",
            Opcode::AtomicRequest => "AtomicReq",
            Opcode::AtomicResponse => "AtomicResp",
        }
    }
}

impl core::fmt::Display for Opcode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// The body of an RDMA Read Request: where the responder reads from and where the
/// requester wants the data placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReadRequest {
    /// STag of the requester's buffer (the Read Response targets it).
    pub sink_stag: u32,
    /// Tagged offset in the requester's buffer.
    pub sink_to: u64,
    /// Octets to read.
    pub size: u32,
    /// STag of the responder's buffer.
    pub source_stag: u32,
    /// Tagged offset in the responder's buffer.
    pub source_to: u64,
}

impl ReadRequest {
    /// Parses a Read Request body, which must be exactly 28 octets.
    pub fn parse(body: &[u8]) -> Result<Self> {
        if body.len() != READ_REQUEST_LEN {
            return Err(WireError::BadReadRequestLength(body.len()));
        }
        Ok(ReadRequest {
            sink_stag: be32(body, 0),
            sink_to: be64(body, 4),
            size: be32(body, 12),
            source_stag: be32(body, 16),
            source_to: be64(body, 20),
        })
    }

    /// Parses the first 28 octets of a longer buffer (a header copied into a Terminate).
    pub fn parse_prefix(buf: &[u8]) -> Result<Self> {
        need(buf, READ_REQUEST_LEN)?;
        Self::parse(&buf[..READ_REQUEST_LEN])
    }

    /// Writes the 28-octet body.
    pub fn emit(&self, out: &mut [u8]) -> Result<usize> {
        room(out, READ_REQUEST_LEN)?;
        out[0..4].copy_from_slice(&self.sink_stag.to_be_bytes());
        out[4..12].copy_from_slice(&self.sink_to.to_be_bytes());
        out[12..16].copy_from_slice(&self.size.to_be_bytes());
        out[16..20].copy_from_slice(&self.source_stag.to_be_bytes());
        out[20..28].copy_from_slice(&self.source_to.to_be_bytes());
        Ok(READ_REQUEST_LEN)
    }

    /// The body as an array, for building Terminates and transmit buffers.
    pub fn to_bytes(&self) -> [u8; READ_REQUEST_LEN] {
        let mut b = [0u8; READ_REQUEST_LEN];
        // Cannot fail: the array has exactly the room the body needs.
        let _ = self.emit(&mut b);
        b
    }
}
