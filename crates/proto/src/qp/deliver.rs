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

impl CqSide {
    /// A completion's CQ: the receive CQ for a receive (its opcode is `Recv`, whatever
    /// its status), the send CQ for every send-queue request.
    pub fn of(c: &Completion) -> CqSide {
        match c.opcode {
            WcOpcode::Recv => CqSide::Recv,
            WcOpcode::Send | WcOpcode::Write | WcOpcode::Read | WcOpcode::LocalInvalidate => {
                CqSide::Send
            }
        }
    }
}

/// Where a receive completion may go instead of the outbox's queue: the I/O layer's
/// caller that is polling the completion's CQ right now, when nothing older could be
/// overtaken (the I/O layer's rules; the outbox adds its own: it holds no completion
/// released before). Saves the queue's push and the delivery's pop on a ping-pong's
/// Send.
pub trait RecvHandoff {
    /// Takes `c`, the next completion this QP releases; false: it is queued as usual.
    fn take(&mut self, c: &Completion) -> bool;
}

/// No hand-off: every completion is queued.
pub struct Queued;

impl RecvHandoff for Queued {
    #[inline(always)]
    fn take(&mut self, _: &Completion) -> bool {
        false
    }
}

/// What [`Outbox::push`] writes before the completion itself (see there).
static EMPTY_COMPLETION: Completion = Completion {
    wr_id: 0,
    status: WcStatus::Success,
    opcode: WcOpcode::Send,
    byte_len: 0,
    qp: QpId(0),
    solicited: false,
    invalidated: None,
};

/// Completions and events on their way out, in order.
#[derive(Debug)]
pub(crate) struct Outbox {
    qp: QpId,
    /// Released completions, in order; each one's CQ follows from its opcode
    /// ([`CqSide::of`]), so a run of them can be handed over as one slice.
    completions: VecDeque<Completion>,
    /// The completion queue's room before [`Outbox::shrink_idle`] gave it back: the next
    /// burst takes it again in one allocation instead of regrowing by doubling (five or
    /// six reallocations for send_bw's bursts of about 40 receive completions).
    completions_room: usize,
    events: VecDeque<QpEvent>,
    /// Sequence number of the next send-queue post.
    next_seq: u64,
    /// Sequence number of the next send-queue completion to release.
    release: u64,
    /// Send-queue requests from `release` on, in posting order, while an earlier one is
    /// unfinished: `None` not finished yet, `Some(None)` an unsignaled success. Posting
    /// order numbers are dense and the send queue bounded, so a ring indexed by
    /// `seq - release` does what a map would, without a node per request.
    done: VecDeque<Option<Option<Completion>>>,
}

impl super::Qp {
    /// The delivery of a pass that released one completion and nothing else: `f`
    /// gets it and true is returned, the completion queue then empty; false (nothing
    /// taken) when an event waits or there are more or fewer completions. The I/O
    /// layer's general delivery ([`super::Qp::poll_event`],
    /// [`super::Qp::drain_completions`]) takes those.
    #[inline]
    pub fn drain_lone_completion(&mut self, f: impl FnOnce(CqSide, &Completion)) -> bool {
        self.out.drain_lone(f)
    }
}

impl Outbox {
    pub(crate) fn new(qp: QpId) -> Self {
        Outbox {
            qp,
            completions: VecDeque::new(),
            completions_room: 0,
            events: VecDeque::new(),
            next_seq: 0,
            release: 0,
            done: VecDeque::new(),
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
    /// Inlined: the one-step Send receive calls it once per message.
    #[inline(always)]
    pub(crate) fn recv(&mut self, c: Completion) {
        self.push(c);
    }

    /// [`Outbox::recv`], or handed to `to` when the outbox holds no completion
    /// released before it: then it is the QP's oldest undelivered completion, and
    /// handing it over first keeps the QP's order. (Events are not completions: a
    /// solicited Send's event still waits here for the delivery, as before.)
    #[inline(always)]
    pub(crate) fn recv_to(&mut self, c: Completion, to: &mut impl RecvHandoff) {
        if self.completions.is_empty() && to.take(&c) {
            return;
        }
        self.push(c);
    }

    /// Queues a released completion, taking back the room of the last burst first if
    /// the queue gave it back.
    #[inline(always)]
    fn push(&mut self, c: Completion) {
        if let Some(slot) = self.push_empty() {
            *slot = c;
        }
    }

    /// Appends an empty entry (copied from a static) for the caller to write the
    /// completion's fields into: handed by value to the queue's out-of-line
    /// `push_back`, a completion went through the stack, written field by field and
    /// read back in 16-octet pieces, and the CPU stalled on every one (a load its
    /// earlier stores could not serve).
    #[inline(always)]
    fn push_empty(&mut self) -> Option<&mut Completion> {
        if self.completions.capacity() == 0 {
            self.regrow();
        }
        self.completions.push_back(EMPTY_COMPLETION);
        self.completions.back_mut()
    }

    /// Takes back the room the completion queue gave back after its last burst.
    #[cold]
    fn regrow(&mut self) {
        self.completions
            .reserve_exact(std::mem::take(&mut self.completions_room));
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
    /// earlier one has. The in-order case is inlined (once per small message); the
    /// ring is out of line.
    #[inline]
    pub(crate) fn finish_send(&mut self, seq: u64, c: Option<Completion>) {
        if seq == self.release && self.done.is_empty() {
            // The usual case, every request finishing in posting order: released at
            // once, without the map (its insert and remove were most of a small
            // Write's completion cost).
            self.release += 1;
            if let Some(c) = c {
                self.push(c);
            }
            return;
        }
        self.finish_send_behind(seq, c);
    }

    /// [`Outbox::finish_send`] of a request that succeeded (a small post or run, once
    /// per message). Released at once, its completion is written field by field into
    /// the queue's entry: built first and then pushed, it went through the stack and
    /// was read back in 16-octet pieces the CPU could not serve from the stores that
    /// had just made it (the stall [`Outbox::push`] describes).
    #[inline]
    pub(crate) fn finish_send_success(
        &mut self,
        seq: u64,
        signaled: bool,
        wr_id: u64,
        opcode: WcOpcode,
        byte_len: u32,
    ) {
        if seq != self.release || !self.done.is_empty() {
            let c = signaled.then(|| self.completion(wr_id, WcStatus::Success, opcode, byte_len));
            self.finish_send_behind(seq, c);
            return;
        }
        self.release += 1;
        if !signaled {
            return;
        }
        let qp = self.qp;
        if let Some(slot) = self.push_empty() {
            slot.wr_id = wr_id;
            slot.opcode = opcode;
            slot.byte_len = byte_len;
            slot.qp = qp;
        }
    }

    /// [`Outbox::finish_send`] while an earlier request is unfinished (a Read
    /// outstanding): the request waits in the ring.
    #[inline(never)]
    fn finish_send_behind(&mut self, seq: u64, c: Option<Completion>) {
        // A sequence number is finished once, and not before it was posted.
        let Some(at) = seq
            .checked_sub(self.release)
            .and_then(|d| usize::try_from(d).ok())
        else {
            return;
        };
        if at >= self.done.len() {
            self.done.resize(at + 1, None);
        }
        self.done[at] = Some(c);
        while let Some(Some(c)) = self.done.front() {
            let c = *c;
            self.done.pop_front();
            self.release += 1;
            if let Some(c) = c {
                self.push(c);
            }
        }
    }

    /// Gives back the room of emptied queues that a burst grew.
    pub(crate) fn shrink_idle(&mut self) {
        let room = self.completions.capacity();
        if super::tx::shrink_if_idle(&mut self.completions) {
            self.completions_room = room;
        }
        super::tx::shrink_if_idle(&mut self.events);
        super::tx::shrink_if_idle(&mut self.done);
    }

    pub(crate) fn poll_completion(&mut self) -> Option<(CqSide, Completion)> {
        self.completions.pop_front().map(|c| (CqSide::of(&c), c))
    }

    /// Hands every released completion to `f` in order, as runs bound for one CQ
    /// each (slices of the queue, no copy), and empties the queue.
    pub(crate) fn drain_completions(&mut self, mut f: impl FnMut(CqSide, &[Completion])) {
        let (front, back) = self.completions.as_slices();
        if let ([one], []) = (front, back) {
            // One completion (a ping-pong's pass): no runs to look for.
            f(CqSide::of(one), std::slice::from_ref(one));
            self.completions.clear();
            return;
        }
        for mut rest in [front, back] {
            while let Some(first) = rest.first() {
                let side = CqSide::of(first);
                let n = rest
                    .iter()
                    .position(|c| CqSide::of(c) != side)
                    .unwrap_or(rest.len());
                f(side, &rest[..n]);
                rest = &rest[n..];
            }
        }
        self.completions.clear();
    }

    pub(crate) fn poll_event(&mut self) -> Option<QpEvent> {
        self.events.pop_front()
    }

    /// [`Outbox::drain_completions`] when the outbox holds one completion and no
    /// event (a ping-pong's pass releases exactly that): `f` gets it, the queue is
    /// emptied, true. Anything else is left as it is: false.
    #[inline]
    pub(crate) fn drain_lone(&mut self, f: impl FnOnce(CqSide, &Completion)) -> bool {
        if !self.events.is_empty() || self.completions.len() != 1 {
            return false;
        }
        if let Some(one) = self.completions.front() {
            f(CqSide::of(one), one);
        }
        self.completions.clear();
        true
    }

    /// The outbox in one line, for a hang report: completions and events released
    /// and not yet delivered, the next send-queue sequence number to post and to
    /// release, and the requests held behind an unfinished one.
    pub(crate) fn report(&self) -> String {
        format!(
            "outbox {} completions {} events, seq posted {} released {}, held {}",
            self.completions.len(),
            self.events.len(),
            self.next_seq,
            self.release,
            self.done.len()
        )
    }

    /// Whether a completion or an event waits.
    pub(crate) fn has_output(&self) -> bool {
        !self.completions.is_empty() || !self.events.is_empty()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn drained(out: &mut Outbox) -> Vec<(CqSide, Vec<(u64, WcStatus)>)> {
        let mut runs = Vec::new();
        out.drain_completions(|side, run| {
            runs.push((side, run.iter().map(|c| (c.wr_id, c.status)).collect()))
        });
        runs
    }

    /// Completions leave in release order, as runs bound for one CQ each: a receive's
    /// CQ is the receive CQ whatever its status, a send-queue request's the send CQ.
    #[test]
    fn completions_drain_in_order_as_runs_per_cq() {
        let mut out = Outbox::new(QpId(3));
        let ok = WcStatus::Success;
        let flushed = WcStatus::WrFlushError;
        out.recv(out.completion(1, ok, WcOpcode::Recv, 8));
        let seq = out.next_send_seq();
        out.finish_send(seq, Some(out.completion(2, ok, WcOpcode::Write, 8)));
        out.recv(out.completion(3, ok, WcOpcode::Recv, 8));
        out.recv(out.completion(4, flushed, WcOpcode::Recv, 0));
        let seq = out.next_send_seq();
        out.finish_send(seq, Some(out.completion(5, flushed, WcOpcode::Read, 0)));
        assert_eq!(
            drained(&mut out),
            vec![
                (CqSide::Recv, vec![(1, ok)]),
                (CqSide::Send, vec![(2, ok)]),
                (CqSide::Recv, vec![(3, ok), (4, flushed)]),
                (CqSide::Send, vec![(5, flushed)]),
            ]
        );
        assert_eq!(out.poll_completion(), None);
        // Around the end of the queue's buffer (a run may come in two slices): the
        // same order.
        for i in 0..3 {
            out.recv(out.completion(10 + i, ok, WcOpcode::Recv, 8));
        }
        assert_eq!(out.poll_completion().map(|(_, c)| c.wr_id), Some(10));
        for i in 3..9 {
            out.recv(out.completion(10 + i, ok, WcOpcode::Recv, 8));
        }
        let runs = drained(&mut out);
        assert!(runs.iter().all(|(side, _)| *side == CqSide::Recv));
        let ids: Vec<u64> = runs.into_iter().flat_map(|(_, r)| r).map(|c| c.0).collect();
        assert_eq!(ids, (11..19).collect::<Vec<_>>());
    }
}
