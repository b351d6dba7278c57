//! The bridge from a connection's arriving segments to its receive side: the stream
//! reassembly (keeping one piece per packet in place) or the caller's raw receiver.

use super::{ConnId, Rx, StackReceiver};
use crate::reassembly::{HoldSpec, PacketBuf};
use crate::receiver::{Arrival, Receiver};

/// A connection's receive side as the [`Receiver`] its segments are handed to.
pub(super) struct Sink<'a, R: StackReceiver> {
    pub(super) id: ConnId,
    pub(super) rx: &'a mut Rx,
    pub(super) raw: &'a mut R,
    /// The packet's buffer, if the stream may keep a piece of it (zero-copy).
    pub(super) whole: Option<PacketBuf>,
    /// The piece it keeps there: the buffer must be handed over.
    pub(super) hold: Option<HoldSpec>,
}

impl<R: StackReceiver> Receiver for Sink<'_, R> {
    fn arrive(&mut self, piece: Arrival<'_>) -> bool {
        match self.rx {
            Rx::Stream(Some(r)) => {
                // One piece per packet stays in its buffer; the others are copied.
                if let Some(whole) = self.whole.filter(|_| self.hold.is_none())
                    && let Some(spec) = r.hold_later(&piece, whole)
                {
                    self.hold = Some(spec);
                    return true;
                }
                r.arrive(piece)
            }
            Rx::Stream(None) => false,
            Rx::Raw => self.raw.arrive(self.id, piece),
            Rx::Discard => true,
        }
    }

    fn in_order(&mut self, end: u64) {
        match self.rx {
            Rx::Stream(Some(r)) => r.in_order(end),
            Rx::Stream(None) => {}
            Rx::Raw => self.raw.in_order(self.id, end),
            Rx::Discard => {}
        }
    }
}
