//! Receive buffers: where an untagged (Send) message finds the buffer it lands in.
//!
//! The receive path does not own a queue; it takes buffers from a [`RecvSource`]: the
//! QP's own receive queue ([`Rq`]) or a queue shared by many QPs (an SRQ,
//! [`crate::srq::Srq`]), passed in by the I/O layer. A buffer is taken when the first
//! segment of its message arrives, and stays bound to that message (by its MSN) until
//! the message completes or flushes.
//!
//! A shared source may answer something else than "here is one" or "none": it may ask
//! the QP to wait (back-pressure: the receive path stops reading until it is woken), or
//! refuse with a Terminate cause (a per-QP hard limit).

use super::rq_ring::Ring;
use crate::tpt::{Tpt, TptGeneration};
use crate::verbs::{Access, MAX_SGE, PdId, QpId, RecvWr, RegionId, Sge, Sgl, WcStatus};
use softrnic_wire::TerminateCause;
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

impl RecvWqe {
    /// Resolves a receive work request's SGEs through the TPT (each must name memory of
    /// `pd` with LOCAL_WRITE, in bounds). The caller checked the SGE count against its
    /// queue's maximum.
    pub fn resolve(wr: &RecvWr, tpt: &Tpt, pd: PdId) -> Result<RecvWqe, WcStatus> {
        let mut wqe = RecvWqe {
            wr_id: wr.wr_id,
            sges: arrayvec::ArrayVec::new(),
            total: 0,
        };
        wqe.resolve_into(wr, tpt, pd)?;
        Ok(wqe)
    }

    /// Fills this (empty) entry's SGEs and total from `wr`: see [`RecvWqe::resolve`].
    fn resolve_into(&mut self, wr: &RecvWr, tpt: &Tpt, pd: PdId) -> Result<(), WcStatus> {
        for s in &wr.sgl {
            let t = tpt.check_local(s.lkey, s.addr, u64::from(s.len), Access::LOCAL_WRITE, pd)?;
            // An Sgl holds at most MAX_SGE elements, as the array does.
            let _ = self.sges.try_push((t.region, t.offset, s.len));
            self.total += u64::from(s.len);
        }
        Ok(())
    }
}

/// A receive source's answer to a message that needs a buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Grant {
    /// This buffer, now bound to the message.
    Buffer(RecvWqe),
    /// No buffer is posted (on iWARP, fatal to the connection: DDP "no buffer").
    Empty,
    /// Back-pressure: the QP stops reading its stream until the source wakes it, and
    /// then asks again ([`crate::qp::Qp::rx_retry`]). Nothing was taken.
    Wait,
    /// Refused by a limit: the connection terminates with this cause.
    Refused(TerminateCause),
}

/// A supply of receive buffers for untagged messages.
pub trait RecvSource {
    /// The next buffer for a message arriving on `qp`; `ahead` when the message's first
    /// segment came ahead of the in-order stream (after a hole).
    fn take(&mut self, qp: QpId, ahead: bool) -> Grant;

    /// A buffer `qp` took has been given back to the program: its message completed.
    fn release(&mut self, _qp: QpId) {}

    /// The QP's own queue, whose buffers are bound where they lie ([`Rq::bind_through`])
    /// instead of being taken out one by one; `None` for a shared queue.
    fn in_place(&mut self) -> Option<&mut Rq> {
        None
    }
}

/// One SGE as a receive holds it: (region, offset in it, length).
type Span = (RegionId, u64, u32);

/// The SGEs of a receive in the queue, as the receive path reads them where they lie.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sges<'a>(&'a [Span]);

impl<'a> Sges<'a> {
    /// The SGEs in order.
    #[inline]
    pub(crate) fn iter(&self) -> std::slice::Iter<'a, Span> {
        self.0.iter()
    }
}

impl<'a> IntoIterator for &Sges<'a> {
    type Item = &'a Span;
    type IntoIter = std::slice::Iter<'a, Span>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

/// A receive in the queue, read in place (see [`Rq::front`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecvView<'a> {
    /// Octets the SGEs hold together.
    pub total: u64,
    /// The SGEs.
    pub sges: Sges<'a>,
}

/// Set in [`Slot::total`] when the SGE list lies in [`Rq::lists`] (any count but one);
/// a total is at most `MAX_SGE` times `u32::MAX`, far below this bit.
const LISTED: u64 = 1 << 63;

/// Entries the ring has room for from creation, at most (2 KB): the usual queue posts
/// its receives without a growth on the way. `VecDeque` started empty, so a queue of
/// depth 64 or more now holds up to 2 KB before its first post; a deeper queue's room
/// beyond this comes as the program posts. (`conn-scale`'s QPs, receive depth 1, hold
/// one 32-octet entry.)
const FIRST_ROOM: usize = 64;

/// A receive as the ring holds it: 32 octets, two to a cache line, so a queue of 512
/// fits in 16 KB and stays in L1 (the full 120-octet [`RecvWqe`] made a 60 KB ring that
/// every post and every Send cycled through). Its one SGE lies inline; a list of any
/// other length lies in [`Rq::lists`], and `first.1` holds its sequence number there.
#[derive(Debug, Clone, Copy)]
struct Slot {
    wr_id: u64,
    /// Octets of the SGEs, with [`LISTED`] set when the list lies elsewhere.
    total: u64,
    first: Span,
}

impl Default for Slot {
    /// What an unused ring position holds.
    fn default() -> Self {
        Slot {
            wr_id: 0,
            total: 0,
            first: (RegionId(0), 0, 0),
        }
    }
}

/// A QP's own receive queue: buffers in posting order, at most `depth` of them not yet
/// bound to a message.
///
/// The first `bound` entries are bound to the Send messages in progress, oldest first
/// (MSN order): a message binds the next buffer by advancing `bound`, and its
/// completion removes the front entry. A buffer is never moved out of the queue to be
/// bound, so a run of small Sends reads each buffer where it was posted.
#[derive(Debug)]
pub struct Rq {
    /// Sized at creation for `depth`, at most [`FIRST_ROOM`] of it (a deeper queue's
    /// room comes as the program posts), grown by doubling past that.
    queue: Ring<Slot>,
    /// The SGE lists of entries that have not exactly one, oldest first, numbered from
    /// `lists_base`; a list whose entry left the queue goes when an entry after it does.
    lists: VecDeque<arrayvec::ArrayVec<Span, MAX_SGE>>,
    lists_base: u64,
    depth: usize,
    bound: usize,
    /// The last receive this queue resolved, for reposts of the same buffers.
    last: Option<Resolved>,
    /// `last` when its list is one SGE, laid flat: the usual repost's compare.
    /// Boxed: laid inline it made the QP larger, and the client's batch post (which
    /// never reposts) about 15 instructions longer a message on send_bw.
    one: Option<Box<KeptOne>>,
    /// The first address of the last list that missed `last` (`u64::MAX` for an empty
    /// list): a list is kept only when it misses twice in a row, so a program that
    /// posts a ring of different buffers never pays the copy into `last`.
    missed: u64,
}

/// A scatter list that passed the TPT check, and what it resolved to. A program that
/// reposts the buffer a completion gave back posts the same list again and again: while
/// the table has not changed since (same [`TptGeneration`]), the check would give the
/// same answer, so the post copies it instead of looking every SGE up again. Any change
/// to the table (a deregistration, an invalidation) makes the next post check afresh.
/// A list is kept from its second post in a row ([`Rq::missed`]): a ring of different
/// buffers would replace it at every post and never use it.
#[derive(Debug)]
struct Resolved {
    generation: TptGeneration,
    pd: PdId,
    sgl: Sgl,
    sges: arrayvec::ArrayVec<Span, MAX_SGE>,
    total: u64,
}

/// A kept list of one SGE ([`Resolved`]), flat: the repost compares its one SGE,
/// the PD and the table's generation, and copies the span, with no list length or
/// slice compare on the way (about 29 instructions with the general kept list).
#[derive(Debug, Clone, Copy)]
struct KeptOne {
    sge: Sge,
    pd: PdId,
    generation: TptGeneration,
    span: Span,
    total: u64,
}

impl Rq {
    /// An empty queue that holds up to `depth` buffers.
    pub fn new(depth: usize) -> Self {
        Rq {
            queue: Ring::with_room(depth.min(FIRST_ROOM)),
            lists: VecDeque::new(),
            lists_base: 0,
            depth,
            bound: 0,
            last: None,
            one: None,
            missed: u64::MAX,
        }
    }

    /// Whether another buffer fits (buffers bound to messages no longer count).
    pub fn has_room(&self) -> bool {
        self.len() < self.depth
    }

    /// Appends a buffer (the caller checked [`Rq::has_room`]).
    pub fn push(&mut self, wqe: RecvWqe) {
        self.push_sges(wqe.wr_id, wqe.total, &wqe.sges);
    }

    /// Appends an entry: one SGE inline, any other count in `lists`.
    #[inline]
    fn push_sges(&mut self, wr_id: u64, total: u64, sges: &[Span]) {
        let slot = if let [one] = sges {
            Slot {
                wr_id,
                total,
                first: *one,
            }
        } else {
            let number = self.lists_base + self.lists.len() as u64;
            let mut list = arrayvec::ArrayVec::new();
            // At most MAX_SGE, as the list: it fits.
            let _ = list.try_extend_from_slice(sges);
            self.lists.push_back(list);
            Slot {
                wr_id,
                total: total | LISTED,
                first: (RegionId(0), number, 0),
            }
        };
        self.queue.push_back(slot);
    }

    /// Resolves `wr` (as [`RecvWqe::resolve`]) into a new entry at the back (the
    /// caller checked [`Rq::has_room`]); on a fault nothing is added. The usual repost
    /// (the kept list again, one SGE) is inlined into the post; anything else is a
    /// call ([`Rq::push_checked`]): called for the repost too, the call's register
    /// saves cost as much as the repost itself.
    #[inline(always)]
    pub fn push_resolved(&mut self, wr: &RecvWr, tpt: &Tpt, pd: PdId) -> Result<(), WcStatus> {
        if let Some(kept) = &self.one
            && let [sge] = wr.sgl[..]
            && sge == kept.sge
            && kept.pd == pd
            && kept.generation == tpt.generation()
        {
            self.queue.push_back(Slot {
                wr_id: wr.wr_id,
                total: kept.total,
                first: kept.span,
            });
            return Ok(());
        }
        self.push_checked(wr, tpt, pd)
    }

    /// [`Rq::push_resolved`] of any other list: the kept one of another length copied,
    /// or the list checked through the TPT. (The kept single SGE never gets here:
    /// `push_resolved` takes it.)
    #[inline(never)]
    fn push_checked(&mut self, wr: &RecvWr, tpt: &Tpt, pd: PdId) -> Result<(), WcStatus> {
        if let Some(last) = &self.last
            && last.generation == tpt.generation()
            && last.pd == pd
            && last.sgl == wr.sgl
        {
            let (total, sges) = (last.total, last.sges.clone());
            self.push_sges(wr.wr_id, total, &sges);
            return Ok(());
        }
        // Compared before anything is copied: only a list that comes again (its first
        // address as the previous miss's) is kept for the reposts after it; a ring of
        // different buffers pays neither the copy nor the table's generation.
        let first = wr.sgl.first().map_or(u64::MAX, |s| s.addr);
        // Taken before the check: a change during it makes the result one to redo.
        let generation = (self.missed == first).then(|| tpt.generation());
        self.missed = first;
        let mut wqe = RecvWqe {
            wr_id: wr.wr_id,
            sges: arrayvec::ArrayVec::new(),
            total: 0,
        };
        wqe.resolve_into(wr, tpt, pd)?;
        if let Some(generation) = generation {
            keep(&mut self.last, generation, pd, wr, &wqe);
            self.one = match (&wr.sgl[..], &wqe.sges[..]) {
                ([sge], [span]) => Some(Box::new(KeptOne {
                    sge: *sge,
                    pd,
                    generation,
                    span: *span,
                    total: wqe.total,
                })),
                _ => None,
            };
        }
        self.push_sges(wqe.wr_id, wqe.total, &wqe.sges);
        Ok(())
    }

    /// Buffers posted and not yet taken (bound to a message).
    pub fn len(&self) -> usize {
        self.queue.len() - self.bound
    }

    /// Whether no buffer is posted and free.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes every buffer, bound ones first, in posting order (for flushing).
    pub fn drain(&mut self) -> impl Iterator<Item = RecvWqe> + '_ {
        self.bound = 0;
        let all: Vec<RecvWqe> = self.queue.iter().map(|s| self.whole(s)).collect();
        self.queue.clear();
        self.lists_base += self.lists.len() as u64;
        self.lists.clear();
        all.into_iter()
    }

    /// An entry's SGEs, where they lie.
    #[inline(always)]
    fn sges_of<'a>(&'a self, slot: &'a Slot) -> &'a [Span] {
        if slot.total & LISTED == 0 {
            std::slice::from_ref(&slot.first)
        } else {
            self.listed(slot)
        }
    }

    /// The SGEs of an entry that has not exactly one: out of line, so reading the usual
    /// one-SGE entry stays a few instructions inlined into the receive path.
    #[cold]
    #[inline(never)]
    fn listed(&self, slot: &Slot) -> &[Span] {
        &self.lists[(slot.first.1 - self.lists_base) as usize]
    }

    /// An entry read in place.
    #[inline(always)]
    fn view<'a>(&'a self, slot: &'a Slot) -> RecvView<'a> {
        RecvView {
            total: slot.total & !LISTED,
            sges: Sges(self.sges_of(slot)),
        }
    }

    /// An entry as a whole receive, copied out.
    fn whole(&self, slot: &Slot) -> RecvWqe {
        let mut sges = arrayvec::ArrayVec::new();
        // At most MAX_SGE: it fits.
        let _ = sges.try_extend_from_slice(self.sges_of(slot));
        RecvWqe {
            wr_id: slot.wr_id,
            sges,
            total: slot.total & !LISTED,
        }
    }

    /// Forgets the lists up to the one of `slot`, which left the queue (lists of
    /// entries taken out of the middle went before it). The test is inline and the
    /// loop out of line: the usual one-SGE entry paid a call here on every Send.
    #[inline(always)]
    fn left(&mut self, slot: &Slot) {
        if slot.total & LISTED != 0 {
            self.forget_lists_through(slot.first.1);
        }
    }

    /// Forgets the lists numbered up to `number`.
    #[cold]
    #[inline(never)]
    fn forget_lists_through(&mut self, number: u64) {
        while self.lists_base <= number && self.lists.pop_front().is_some() {
            self.lists_base += 1;
        }
    }

    /// Removes the front entry.
    #[inline(always)]
    fn pop_front(&mut self) -> Option<Slot> {
        let slot = self.queue.pop_front()?;
        self.left(&slot);
        Some(slot)
    }

    /// The oldest buffer, bound or not: the one the oldest Send message lands in.
    #[inline(always)]
    pub(crate) fn front(&self) -> Option<RecvView<'_>> {
        self.queue.front().map(|s| self.view(s))
    }

    /// Binds buffers in posting order until the `i`-th bound one (0: the oldest
    /// message's) exists, and returns it; `None` (nothing changed) when the queue does
    /// not hold that many.
    #[inline]
    pub(crate) fn bind_through(&mut self, i: usize) -> Option<RecvView<'_>> {
        if i >= self.queue.len() {
            return None;
        }
        self.bound = self.bound.max(i + 1);
        self.queue.get(i).map(|s| self.view(s))
    }

    /// Unbinds and removes the oldest bound buffer (its message completed or failed).
    pub(crate) fn remove_oldest_bound(&mut self) -> Option<RecvWqe> {
        if self.bound == 0 {
            return None;
        }
        self.bound -= 1;
        let slot = *self.queue.front()?;
        let wqe = self.whole(&slot);
        self.pop_front();
        Some(wqe)
    }

    /// The front buffer's message completed, the buffer bound to it or not yet: it
    /// leaves the queue, and its work request id is returned.
    #[inline(always)]
    pub(crate) fn complete_front(&mut self) -> Option<u64> {
        let slot = self.pop_front()?;
        self.bound = self.bound.saturating_sub(1);
        Some(slot.wr_id)
    }

    /// The oldest bound buffer's message completed: the buffer leaves the queue, and
    /// its work request id is returned (nothing else of it is read or moved).
    #[inline]
    pub(crate) fn complete_oldest_bound(&mut self) -> Option<u64> {
        if self.bound == 0 {
            return None;
        }
        self.bound -= 1;
        self.pop_front().map(|s| s.wr_id)
    }
}

/// Keeps `wr`'s list, resolved as `wqe`, for the reposts of the same buffers (see
/// [`Resolved`]); out of line, as it runs once per list a program settles on.
#[cold]
fn keep(
    last: &mut Option<Resolved>,
    generation: TptGeneration,
    pd: PdId,
    wr: &RecvWr,
    wqe: &RecvWqe,
) {
    let kept = last.get_or_insert_with(|| Resolved {
        generation,
        pd,
        sgl: Sgl::new(),
        sges: arrayvec::ArrayVec::new(),
        total: 0,
    });
    kept.generation = generation;
    kept.pd = pd;
    kept.total = wqe.total;
    kept.sgl = wr.sgl.clone();
    kept.sges.clear();
    // Both hold at most MAX_SGE: it fits.
    let _ = kept.sges.try_extend_from_slice(&wqe.sges);
}

impl RecvSource for Rq {
    /// The oldest free buffer, taken out of the queue (the receive path binds in place
    /// instead, see [`RecvSource::in_place`]).
    fn take(&mut self, _qp: QpId, _ahead: bool) -> Grant {
        match self.queue.remove(self.bound) {
            // Its list (if any) stays until an entry after it leaves.
            Some(s) => Grant::Buffer(self.whole(&s)),
            None => Grant::Empty,
        }
    }

    fn in_place(&mut self) -> Option<&mut Rq> {
        Some(self)
    }
}

#[cfg(test)]
#[path = "rq_tests.rs"]
mod tests;
