//! One ULPDU (the payload of an MPA FPDU): a DDP header, its RDMAP control, and a body
//! whose shape the opcode decides.

use crate::ddp::{DdpHeader, DdpRepr, Placement};
use crate::rdmap::{Opcode, READ_REQUEST_LEN, ReadRequest};
use crate::terminate::TerminateRepr;
use crate::{Result, WireError, room};

/// The body of a ULPDU after its DDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body<'a> {
    /// Payload octets (Write, Read Response, the Sends, Immediate Data).
    Payload(&'a [u8]),
    /// An RDMA Read Request.
    ReadRequest(ReadRequest),
    /// A Terminate.
    Terminate(TerminateRepr<'a>),
    /// A body this crate does not interpret (RFC 7306 atomics).
    Opaque(&'a [u8]),
}

impl Body<'_> {
    /// Body length on the wire.
    pub fn len(&self) -> usize {
        match self {
            Body::Payload(p) | Body::Opaque(p) => p.len(),
            Body::ReadRequest(_) => READ_REQUEST_LEN,
            Body::Terminate(t) => t.buffer_len(),
        }
    }

    /// Whether the body is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A parsed ULPDU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ulpdu<'a> {
    /// The DDP header and RDMAP control.
    pub header: DdpRepr,
    /// The body.
    pub body: Body<'a>,
}

impl<'a> Ulpdu<'a> {
    /// Parses a complete ULPDU and checks the RDMAP rules that the wire alone decides:
    /// the queue number of each untagged opcode, and that Read Requests and Terminates
    /// are single-segment messages.
    pub fn parse(ulpdu: &'a [u8]) -> Result<Self> {
        let ulpdu_len = u16::try_from(ulpdu.len()).unwrap_or(u16::MAX);
        let view = DdpHeader::new_checked(ulpdu).map_err(|e| match e {
            WireError::Truncated { .. } => WireError::BadUlpduLength(ulpdu_len),
            e => e,
        })?;
        let header = DdpRepr::parse(&view)?;
        let rest = &ulpdu[view.header_len()..];
        if let Placement::Untagged { qn, mo, .. } = header.placement {
            if let Some(expected) = header.opcode.queue_number()
                && qn != expected
            {
                return Err(WireError::InvalidQueueNumber {
                    qn,
                    opcode: header.opcode.to_bits(),
                });
            }
            if matches!(header.opcode, Opcode::ReadRequest | Opcode::Terminate)
                && (mo != 0 || !header.last)
            {
                return Err(WireError::NotSingleSegment {
                    mo,
                    last: header.last,
                });
            }
        }
        let body = match header.opcode {
            Opcode::ReadRequest => Body::ReadRequest(ReadRequest::parse(rest)?),
            Opcode::Terminate => Body::Terminate(TerminateRepr::parse(rest)?),
            Opcode::AtomicRequest | Opcode::AtomicResponse => Body::Opaque(rest),
            _ => Body::Payload(rest),
        };
        Ok(Ulpdu { header, body })
    }

    /// ULPDU length on the wire.
    pub fn buffer_len(&self) -> usize {
        self.header.header_len() + self.body.len()
    }

    /// Writes the ULPDU; returns its length.
    pub fn emit(&self, out: &mut [u8]) -> Result<usize> {
        let len = self.buffer_len();
        room(out, len)?;
        let h = self.header.emit(out)?;
        let b = &mut out[h..len];
        match &self.body {
            Body::Payload(p) | Body::Opaque(p) => b.copy_from_slice(p),
            Body::ReadRequest(rr) => {
                rr.emit(b)?;
            }
            Body::Terminate(t) => {
                t.emit(b)?;
            }
        }
        Ok(len)
    }
}
