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

use crate::tpt::{Tpt, TptGeneration};
use crate::verbs::{Access, MAX_SGE, PdId, QpId, RecvWr, RegionId, Sgl, WcStatus};
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

/// A QP's own receive queue: buffers in posting order, at most `depth` of them not yet
/// bound to a message.
///
/// The first `bound` entries are bound to the Send messages in progress, oldest first
/// (MSN order): a message binds the next buffer by advancing `bound`, and its
/// completion removes the front entry. A buffer is never moved out of the queue to be
/// bound, so a run of small Sends reads each buffer where it was posted.
#[derive(Debug, Default)]
pub struct Rq {
    queue: VecDeque<RecvWqe>,
    depth: usize,
    bound: usize,
    /// The last receive this queue resolved, for reposts of the same buffers.
    last: Option<Resolved>,
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
    sges: arrayvec::ArrayVec<(RegionId, u64, u32), MAX_SGE>,
    total: u64,
}

impl Rq {
    /// An empty queue that holds up to `depth` buffers.
    pub fn new(depth: usize) -> Self {
        Rq {
            queue: VecDeque::new(),
            depth,
            bound: 0,
            last: None,
            missed: u64::MAX,
        }
    }

    /// Whether another buffer fits (buffers bound to messages no longer count).
    pub fn has_room(&self) -> bool {
        self.len() < self.depth
    }

    /// Appends a buffer (the caller checked [`Rq::has_room`]).
    pub fn push(&mut self, wqe: RecvWqe) {
        self.queue.push_back(wqe);
    }

    /// Resolves `wr` (as [`RecvWqe::resolve`]) into a new entry at the back, built in
    /// place rather than moved in (the caller checked [`Rq::has_room`]); on a fault
    /// nothing is added.
    pub fn push_resolved(&mut self, wr: &RecvWr, tpt: &Tpt, pd: PdId) -> Result<(), WcStatus> {
        if let Some(last) = &self.last
            && last.generation == tpt.generation()
            && last.pd == pd
            && last.sgl == wr.sgl
        {
            self.queue.push_back(RecvWqe {
                wr_id: wr.wr_id,
                sges: arrayvec::ArrayVec::new(),
                total: last.total,
            });
            // Copied in place, element by element: `ArrayVec::clone` built a second
            // array and moved it in, and the slice copy of a one-SGE list was a
            // `memcpy` call per repost.
            if let Some(wqe) = self.queue.back_mut() {
                for &sge in &last.sges {
                    // Same capacity: it fits.
                    let _ = wqe.sges.try_push(sge);
                }
            }
            return Ok(());
        }
        // Compared before anything is copied: only a list that comes again (its first
        // address as the previous miss's) is kept for the reposts after it; a ring of
        // different buffers pays neither the copy nor the table's generation.
        let first = wr.sgl.first().map_or(u64::MAX, |s| s.addr);
        // Taken before the check: a change during it makes the result one to redo.
        let generation = (self.missed == first).then(|| tpt.generation());
        self.missed = first;
        self.queue.push_back(RecvWqe {
            wr_id: wr.wr_id,
            sges: arrayvec::ArrayVec::new(),
            total: 0,
        });
        let Some(wqe) = self.queue.back_mut() else {
            return Ok(());
        };
        match wqe.resolve_into(wr, tpt, pd) {
            Ok(()) => {
                if let Some(generation) = generation {
                    keep(&mut self.last, generation, pd, wr, wqe);
                }
                Ok(())
            }
            Err(status) => {
                self.queue.pop_back();
                Err(status)
            }
        }
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
        self.queue.drain(..)
    }

    /// The oldest buffer, bound or not: the one the oldest Send message lands in.
    pub(crate) fn front(&self) -> Option<&RecvWqe> {
        self.queue.front()
    }

    /// Binds buffers in posting order until the `i`-th bound one (0: the oldest
    /// message's) exists, and returns it; `None` (nothing changed) when the queue does
    /// not hold that many.
    pub(crate) fn bind_through(&mut self, i: usize) -> Option<&RecvWqe> {
        if i >= self.queue.len() {
            return None;
        }
        self.bound = self.bound.max(i + 1);
        self.queue.get(i)
    }

    /// Unbinds and removes the oldest bound buffer (its message completed or failed).
    pub(crate) fn remove_oldest_bound(&mut self) -> Option<RecvWqe> {
        if self.bound == 0 {
            return None;
        }
        self.bound -= 1;
        self.queue.pop_front()
    }

    /// The front buffer's message completed, the buffer bound to it or not yet: it
    /// leaves the queue, and its work request id is returned.
    pub(crate) fn complete_front(&mut self) -> Option<u64> {
        let wr_id = self.queue.front()?.wr_id;
        self.bound = self.bound.saturating_sub(1);
        self.queue.pop_front();
        Some(wr_id)
    }

    /// The oldest bound buffer's message completed: the buffer leaves the queue, and
    /// its work request id is returned (nothing else of it is read or moved).
    pub(crate) fn complete_oldest_bound(&mut self) -> Option<u64> {
        self.remove_oldest_bound().map(|w| w.wr_id)
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
            Some(w) => Grant::Buffer(w),
            None => Grant::Empty,
        }
    }

    fn in_place(&mut self) -> Option<&mut Rq> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tpt::TptEntry;
    use crate::verbs::Sge;

    /// A repost of the same buffers is checked again once the table changed: after
    /// the region's deregistration, its invalidation, or in another PD, it is refused
    /// (the kept result of the earlier check is not used).
    #[test]
    fn a_repost_after_the_region_changed_is_checked_again() {
        let tpt = Tpt::new();
        let entry = TptEntry {
            pd: PdId(1),
            key: 1,
            base: 0x1000,
            len: 100,
            access: Access::LOCAL_WRITE,
            region: RegionId(3),
            valid: true,
        };
        let sge = |lkey| Sge {
            addr: 0x1010,
            len: 16,
            lkey,
        };
        let mut rq = Rq::new(16);
        let gone = tpt.insert(entry).unwrap();
        for id in 0..3 {
            rq.push_resolved(&RecvWr::new(id, sge(gone)), &tpt, PdId(1))
                .unwrap();
        }
        tpt.remove(gone).unwrap();
        assert_eq!(
            rq.push_resolved(&RecvWr::new(3, sge(gone)), &tpt, PdId(1)),
            Err(WcStatus::LocalProtectionError)
        );
        let invalid = tpt.insert(entry).unwrap();
        rq.push_resolved(&RecvWr::new(4, sge(invalid)), &tpt, PdId(1))
            .unwrap();
        assert_eq!(
            rq.push_resolved(&RecvWr::new(5, sge(invalid)), &tpt, PdId(2)),
            Err(WcStatus::LocalProtectionError)
        );
        rq.push_resolved(&RecvWr::new(6, sge(invalid)), &tpt, PdId(1))
            .unwrap();
        tpt.invalidate(invalid, PdId(1)).unwrap();
        assert_eq!(
            rq.push_resolved(&RecvWr::new(7, sge(invalid)), &tpt, PdId(1)),
            Err(WcStatus::LocalProtectionError)
        );
        let ids: Vec<u64> = rq.drain().map(|w| w.wr_id).collect();
        assert_eq!(ids, [0, 1, 2, 4, 6]);
        let again = tpt.insert(entry).unwrap();
        rq.push_resolved(&RecvWr::new(8, sge(again)), &tpt, PdId(1))
            .unwrap();
        let Grant::Buffer(w) = rq.take(QpId(1), false) else {
            panic!("the receive is there");
        };
        assert_eq!(w.wr_id, 8);
        assert_eq!(w.total, 16);
        assert_eq!(w.sges.as_slice(), &[(RegionId(3), 0x10, 16)]);
    }

    /// A ring of different buffers keeps no list (each post would replace it unused);
    /// one list posted twice in a row is kept and serves the reposts after it, and every
    /// post, kept or not, resolves to its own buffer.
    #[test]
    fn only_a_list_posted_twice_in_a_row_is_kept() {
        let tpt = Tpt::new();
        let key = tpt
            .insert(TptEntry {
                pd: PdId(1),
                key: 1,
                base: 0x1000,
                len: 0x1000,
                access: Access::LOCAL_WRITE,
                region: RegionId(3),
                valid: true,
            })
            .unwrap();
        let slot = |i: u64| Sge {
            addr: 0x1000 + 64 * i,
            len: 64,
            lkey: key,
        };
        let mut rq = Rq::new(64);
        for i in 0..32 {
            rq.push_resolved(&RecvWr::new(i, slot(i % 16)), &tpt, PdId(1))
                .unwrap();
            assert!(rq.last.is_none(), "post {i} of a ring kept its list");
        }
        for i in 32..35 {
            rq.push_resolved(&RecvWr::new(i, slot(5)), &tpt, PdId(1))
                .unwrap();
        }
        let kept = rq.last.as_ref().expect("the list posted twice is kept");
        assert_eq!(&kept.sgl[..], &[slot(5)]);
        assert_eq!(kept.sges.as_slice(), &[(RegionId(3), 5 * 64, 64)]);
        let placed: Vec<(u64, u64)> = rq.drain().map(|w| (w.wr_id, w.sges[0].1)).collect();
        let expected: Vec<(u64, u64)> = (0..35)
            .map(|i| (i, 64 * if i < 32 { i % 16 } else { 5 }))
            .collect();
        assert_eq!(placed, expected);
    }

    /// A receive resolved in place lands whole; one whose second SGE fails the TPT
    /// check leaves no entry behind (no half-built receive for the next Send).
    #[test]
    fn a_receive_that_fails_its_check_leaves_no_entry() {
        let tpt = Tpt::new();
        let mut entry = TptEntry {
            pd: PdId(1),
            key: 1,
            base: 0x1000,
            len: 100,
            access: Access::LOCAL_WRITE,
            region: RegionId(3),
            valid: true,
        };
        let rw = tpt.insert(entry).unwrap();
        entry.access = Access::empty();
        let ro = tpt.insert(entry).unwrap();
        let sge = |lkey, addr, len| Sge { addr, len, lkey };
        let mut rq = Rq::new(4);
        rq.push_resolved(
            &RecvWr::new(7, [sge(rw, 0x1000, 40), sge(rw, 0x1028, 60)]),
            &tpt,
            PdId(1),
        )
        .unwrap();
        assert_eq!(
            rq.push_resolved(
                &RecvWr::new(8, [sge(rw, 0x1000, 8), sge(ro, 0x1000, 8)]),
                &tpt,
                PdId(1),
            ),
            Err(WcStatus::LocalProtectionError)
        );
        assert_eq!(rq.len(), 1);
        let Grant::Buffer(w) = rq.take(QpId(1), false) else {
            panic!("the first receive is there");
        };
        assert_eq!(w.wr_id, 7);
        assert_eq!(w.total, 100);
        assert_eq!(
            w.sges.as_slice(),
            &[(RegionId(3), 0, 40), (RegionId(3), 0x28, 60)]
        );
        assert_eq!(rq.take(QpId(1), false), Grant::Empty);
    }
}
