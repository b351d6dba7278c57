//! The delivery part: what the QP hands the I/O layer besides FPDUs, in the order verbs
//! promise. Completions wait here for the CQ, send-queue completions are released in
//! posting order (a Send posted after a Read completes after the Read), and effects of
//! FPDUs taken ahead of the stream wait until the stream reaches them
//! ([`Deferred`]), so that receive completions come in MSN order whatever order the
//! segments arrived in.

use crate::verbs::*;
use softrnic_wire::TerminateCause;
use softrnic_wire::ddp::DdpRepr;
use std::collections::{BTreeMap, VecDeque};

/// Something the I/O layer must act on besides completions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpEvent {
    /// The QP went to error because of a Terminate, sent (local detection) or received.
    Fatal {
        /// The cause carried by the Terminate.
        cause: TerminateCause,
        /// Whether the peer sent it (otherwise we did).
        remote: bool,
    },
    /// A Send with the Solicited Event flag arrived (and completed).
    Solicited,
}

/// Which CQ a completion goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CqSide {
    /// The send CQ.
    Send,
    /// The receive CQ.
    Recv,
}

/// Completions and events on their way out, in order.
#[derive(Debug)]
pub(crate) struct Outbox {
    qp: QpId,
    completions: VecDeque<(CqSide, Completion)>,
    events: VecDeque<QpEvent>,
    /// Sequence number of the next send-queue post.
    next_seq: u64,
    /// Sequence number of the next send-queue completion to release.
    release: u64,
    /// Finished send-queue requests waiting for earlier ones (None: unsignaled success).
    done: BTreeMap<u64, Option<Completion>>,
}

impl Outbox {
    pub(crate) fn new(qp: QpId) -> Self {
        Outbox {
            qp,
            completions: VecDeque::new(),
            events: VecDeque::new(),
            next_seq: 0,
            release: 0,
            done: BTreeMap::new(),
        }
    }

    /// A completion of this QP.
    pub(crate) fn completion(
        &self,
        wr_id: u64,
        status: WcStatus,
        opcode: WcOpcode,
        byte_len: u32,
    ) -> Completion {
        Completion {
            wr_id,
            status,
            opcode,
            byte_len,
            qp: self.qp,
            solicited: false,
            invalidated: None,
        }
    }

    /// A receive completion, released at once (the receive path calls this in MSN order).
    pub(crate) fn recv(&mut self, c: Completion) {
        self.completions.push_back((CqSide::Recv, c));
    }

    pub(crate) fn event(&mut self, e: QpEvent) {
        self.events.push_back(e);
    }

    /// The posting-order number of a new send-queue request.
    pub(crate) fn next_send_seq(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq - 1
    }

    /// A send-queue request finished (None: unsignaled success); released once every
    /// earlier one has.
    pub(crate) fn finish_send(&mut self, seq: u64, c: Option<Completion>) {
        if seq == self.release && self.done.is_empty() {
            // The usual case, every request finishing in posting order: released at
            // once, without the map (its insert and remove were most of a small
            // Write's completion cost).
            self.release += 1;
            if let Some(c) = c {
                self.completions.push_back((CqSide::Send, c));
            }
            return;
        }
        self.done.insert(seq, c);
        while let Some(c) = self.done.remove(&self.release) {
            self.release += 1;
            if let Some(c) = c {
                self.completions.push_back((CqSide::Send, c));
            }
        }
    }

    /// Gives back the room of emptied queues that a burst grew.
    pub(crate) fn shrink_idle(&mut self) {
        super::tx::shrink_if_idle(&mut self.completions);
        super::tx::shrink_if_idle(&mut self.events);
    }

    pub(crate) fn poll_completion(&mut self) -> Option<(CqSide, Completion)> {
        self.completions.pop_front()
    }

    pub(crate) fn poll_event(&mut self) -> Option<QpEvent> {
        self.events.pop_front()
    }
}

/// FPDUs taken ahead of the in-order stream (out of order), by stream position: their
/// payload is placed; what their arrival completes waits until the stream reaches them.
#[derive(Debug, Default)]
pub(crate) struct Deferred {
    /// start -> (end, the FPDU's header and payload length).
    ranges: BTreeMap<u64, (u64, DdpRepr, usize)>,
}

impl Deferred {
    /// Whether an FPDU at `[start, end)` overlaps nothing taken already.
    pub(crate) fn is_free(&self, start: u64, end: u64) -> bool {
        let before = self.ranges.range(..end).next_back();
        before.is_none_or(|(_, &(e, _, _))| e <= start)
    }

    pub(crate) fn insert(&mut self, start: u64, end: u64, h: DdpRepr, len: usize) {
        self.ranges.insert(start, (end, h, len));
    }

    /// The FPDU taken ahead that starts at `at`, removed: (end, header, payload length).
    pub(crate) fn take_at(&mut self, at: u64) -> Option<(u64, DdpRepr, usize)> {
        self.ranges.remove(&at)
    }

    /// FPDUs waiting for the stream.
    pub(crate) fn len(&self) -> usize {
        self.ranges.len()
    }

    pub(crate) fn clear(&mut self) {
        self.ranges.clear();
    }
}
