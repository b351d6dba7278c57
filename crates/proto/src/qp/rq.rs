//! Receive buffers: where an untagged (Send) message finds the buffer it lands in.
//!
//! The receive path does not own a queue; it takes buffers from a [`RecvSource`]: the
//! QP's own receive queue ([`Rq`]) or a queue shared by many QPs (an SRQ), passed in by
//! the I/O layer. A buffer is taken when the first segment of its message arrives, and
//! stays bound to that message (by its MSN) until the message completes or flushes.

use crate::verbs::{MAX_SGE, QpId, RegionId};
use std::collections::VecDeque;

/// A posted receive with its SGEs resolved through the TPT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvWqe {
    /// The work request's identifier.
    pub wr_id: u64,
    /// (region, offset, len) per SGE.
    pub sges: arrayvec::ArrayVec<(RegionId, u64, u32), MAX_SGE>,
    /// Octets the SGEs hold together.
    pub total: u64,
}

/// A supply of receive buffers for untagged messages.
pub trait RecvSource {
    /// The next buffer for a message arriving on `qp`, or None when there is none (on
    /// iWARP, a Send that finds no buffer is fatal to the connection).
    fn take(&mut self, qp: QpId) -> Option<RecvWqe>;
}

/// A QP's own receive queue: buffers in posting order, at most `depth` of them.
#[derive(Debug, Default)]
pub struct Rq {
    queue: VecDeque<RecvWqe>,
    depth: usize,
}

impl Rq {
    /// An empty queue that holds up to `depth` buffers.
    pub fn new(depth: usize) -> Self {
        Rq {
            queue: VecDeque::new(),
            depth,
        }
    }

    /// Whether another buffer fits.
    pub fn has_room(&self) -> bool {
        self.queue.len() < self.depth
    }

    /// Appends a buffer (the caller checked [`Rq::has_room`]).
    pub fn push(&mut self, wqe: RecvWqe) {
        self.queue.push_back(wqe);
    }

    /// Buffers posted and not yet taken.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Whether no buffer is posted.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Removes every buffer, in posting order (for flushing).
    pub fn drain(&mut self) -> impl Iterator<Item = RecvWqe> + '_ {
        self.queue.drain(..)
    }
}

impl RecvSource for Rq {
    fn take(&mut self, _qp: QpId) -> Option<RecvWqe> {
        self.queue.pop_front()
    }
}
