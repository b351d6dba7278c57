//! The seam to the layer above on the receive side: every arriving payload goes up with
//! its position, in order or not, and the layer above decides what to keep.
//!
//! A hardware RNIC places DDP segments that arrive out of order straight into memory and
//! records per hole what completes when it closes; so this TCP does not hide segments in
//! an assembler of its own. It offers each new piece of payload to a [`Receiver`]; what
//! the receiver keeps out of order is acknowledged selectively (SACK) and never asked
//! for again; what it refuses the peer sends again. [`crate::Reassembly`] is the simple
//! receiver for users that want a byte stream.

use crate::seq::SeqNum;

/// A piece of payload that arrived, not seen before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival<'a> {
    /// Stream offset of `data[0]` (octet 0 is the first after the peer's SYN).
    pub offset: u64,
    /// Its sequence number on the wire.
    pub seq: SeqNum,
    /// The octets. A piece is never offered twice once kept; when a segment overlaps
    /// octets already kept, only the new parts are offered (so a piece may begin inside
    /// a segment).
    pub data: &'a [u8],
    /// The piece begins at the next expected octet: everything before it has arrived.
    pub in_order: bool,
}

/// Takes what the connection receives.
pub trait Receiver {
    /// A new piece inside the receive window. Return true to keep it (the connection
    /// then acknowledges it, selectively if out of order), false to refuse it (the peer
    /// will send it again). An in-order piece that is kept counts against the window
    /// until [`crate::Connection::release`] gives it back.
    fn arrive(&mut self, piece: Arrival<'_>) -> bool;

    /// Every octet before stream offset `end` has arrived (and was kept): a hole closed
    /// or the stream simply moved on. Called once per handled segment that moves it.
    fn in_order(&mut self, end: u64) {
        let _ = end;
    }
}

/// Refuses everything: for segments that carry no payload the caller cares about.
#[derive(Debug, Default, Clone, Copy)]
pub struct Refuse;

impl Receiver for Refuse {
    fn arrive(&mut self, _: Arrival<'_>) -> bool {
        false
    }
}
