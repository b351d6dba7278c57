//! MPA connection setup (RFC 5044 section 7, with the RFC 6581 enhanced setup) as two
//! sans-IO state machines: [`Initiator`] for the active side and [`Responder`] for the
//! passive side.
//!
//! Both are fed the octets received so far and answer with octets to send and, once the
//! exchange is over, the [`Negotiated`] parameters the QP must run with. Neither owns a
//! socket or a clock: the connection manager in `softrnic-rnic` moves the octets and
//! gives up on a peer that stays silent.
//!
//! ```text
//! initiator                                        responder
//!   Request  key | M C 0 E | rev | len | PD  ---->
//!                                          <----  Reply  key | M C R E | rev | len | PD
//!   RTR (zero-length FPDU, P2P mode only)    ---->
//!   FPDUs                                    <--->  FPDUs
//! ```
//!
//! The frames can also turn an existing TCP byte stream into RDMA mode, so whatever
//! follows a frame on the stream is not ours: `handle_input` reports exactly how many
//! octets the frame took (`consumed`) and leaves the rest, FPDUs or, after a reject,
//! whatever the peer sends, to the caller.
//!
//! # What gets negotiated, and how
//!
//! - **Revision.** The initiator sends its configured revision. A responder answers with
//!   the lower of its own and the request's; an initiator that sent 2 and gets 1 back
//!   falls back to revision-1 semantics. A reply with a higher revision than the request
//!   is a protocol error. Only revision 2 frames with the enhanced flag carry the RFC 6581
//!   word (IRD/ORD and RTR bits) in front of the private data, and a reply carries it
//!   only when the request did.
//! - **CRC.** C=1 in either frame turns CRC32c on in both directions (RFC 5044 section
//!   7.1). A responder echoes a request's C=1 even when its own policy is
//!   [`CrcPolicy::Off`], as Linux siw does. [`CrcPolicy::Strict`] insists that the peer
//!   sets C too.
//! - **Markers.** M in a frame asks the *other* side to insert markers in what it sends.
//!   We honour a peer's M=1 (the wire crate can insert markers) and set M ourselves only
//!   when configured to; siw never asks and refuses to be asked.
//! - **IRD/ORD** (RFC 6581, relaxed as siw does it). The responder answers with its own
//!   IRD and ORD = min(its ORD, initiator's IRD); the initiator then takes ORD = min(its
//!   ORD, responder's IRD). Each side may accept as many inbound Reads as it configured
//!   (its IRD). Nobody is rejected for a short IRD: the other side's ORD simply shrinks.
//!   A peer that carries no IRD/ORD (revision 1) is assumed to have
//!   [`MpaConfig::rev1_ird_ord`].
//! - **Peer-to-peer RTR** (RFC 6581). In client/server mode the initiator must send the
//!   first FPDU. In peer-to-peer mode the initiator offers the message types it can send
//!   as a "ready to receive" signal; the responder picks one (Write, then Read, then Send)
//!   and must not send anything before that RTR arrives.
//!
//! # Errors
//!
//! Truncated input is never an error: it is [`InitiatorProgress::NeedMore`] or
//! [`ResponderProgress::NeedMore`]. Malformed input and policy conflicts are a
//! [`CmError`], whose [`CmError::terminate_cause`] gives the LLP/MPA code to report.
//! No input makes these functions panic.

mod config;
mod error;
mod initiator;
mod responder;

pub use config::{CrcPolicy, MpaConfig, RtrType, RtrTypes};
pub use error::{CmError, RefusalReason};
pub use initiator::{Initiator, InitiatorProgress};
pub use responder::{ConnectRequest, Responder, ResponderProgress};

use softrnic_wire::{MpaFrameKind, MpaFrameRepr, Rfc6581, WireError};

/// What an MPA exchange settled: everything the QP's transmit and receive paths need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiated {
    /// The MPA revision in force: 1 (RFC 5044) or 2 (RFC 6581).
    pub revision: u8,
    /// CRC32c is computed and checked in both directions (some side set C=1).
    pub crc: bool,
    /// We must insert markers into what we send (the peer set M).
    pub markers_tx: bool,
    /// The peer inserts markers into what it sends us (we set M).
    pub markers_rx: bool,
    /// Inbound RDMA Read Requests we must be able to serve concurrently.
    pub ird: u16,
    /// Outbound RDMA Read Requests we may have outstanding.
    pub ord: u16,
    /// Peer-to-peer mode: the RTR message and who sends it. `None` in client/server mode,
    /// where the initiator sends the first FPDU.
    pub rtr: Option<Rtr>,
    /// The peer's ULP private data (without the RFC 6581 word).
    pub peer_private_data: Vec<u8>,
    /// The peer's RFC 6581 word as received, if it sent one.
    pub peer_rfc6581: Option<Rfc6581>,
}

/// The ready-to-receive message of peer-to-peer mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rtr {
    /// The zero-length message that serves as RTR.
    pub kind: RtrType,
    /// True on the initiator: it sends the RTR as its first FPDU. False on the
    /// responder: it waits for the RTR and must not send before it arrives.
    pub we_send: bool,
}

/// Takes the frame of kind `expected` off the start of `input`: `Ok(None)` while it is
/// incomplete. A key that already differs in its first octets is refused at once, so a
/// peer that speaks something else is not waited for.
fn take_frame(input: &[u8], expected: MpaFrameKind) -> Result<Option<MpaFrameRepr<'_>>, CmError> {
    let other = match expected {
        MpaFrameKind::Request => MpaFrameKind::Reply,
        MpaFrameKind::Reply => MpaFrameKind::Request,
    };
    let probe = input.len().min(expected.key().len());
    if input[..probe] != expected.key()[..probe] {
        return Err(if input[..probe] == other.key()[..probe] {
            CmError::UnexpectedFrame
        } else {
            CmError::Wire(WireError::BadMpaKey)
        });
    }
    match MpaFrameRepr::parse(input) {
        // The key was compared in full: `parse` only succeeds on 20 or more octets.
        Ok(frame) => Ok(Some(frame)),
        Err(e) if e.is_truncated() => Ok(None),
        Err(e) => Err(CmError::Wire(e)),
    }
}

/// Serialises a frame.
fn emit_frame(repr: &MpaFrameRepr<'_>) -> Result<Vec<u8>, CmError> {
    let mut out = vec![0; repr.buffer_len()];
    let len = repr.emit(&mut out)?;
    out.truncate(len);
    Ok(out)
}
