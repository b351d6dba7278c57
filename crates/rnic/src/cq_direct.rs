//! A polling consumer's completion handed straight to its caller: the poll of a CQ
//! whose only QP the consumer has claimed reads the message under the QP's lock, and
//! the one completion that pass releases for this CQ goes into the caller's `out`
//! instead of into the CQ's ring and out of it again (a push's compare-exchange on the
//! tail and a pop's on the consumer role, about 190 instructions of a Send's side).
//!
//! Why this keeps every rule of the ring (`Direct::take` checks each time, under the
//! QP's lock, before it takes a completion; otherwise the completion is pushed as
//! before):
//!
//! - **Order.** A QP's completions are released and pushed under its lock, which the
//!   poll holds. The ring is empty at the check (nothing published, no slot claimed by
//!   a producer still writing: `CqRing::is_empty` counts claimed slots) and the
//!   overflow list is not in use, so every earlier completion of this QP for this CQ
//!   has already been popped by some consumer; this one comes after all of them. A
//!   completion another QP pushes after the check has no order to keep with it (and
//!   the direct poll runs only while the CQ lists one QP).
//! - **Exactly once.** The completion is either copied into `out` (and counted in the
//!   poll's return) or pushed; never both. It never enters the ring, so no second
//!   consumer can pop it.
//! - **A second consumer** polling the same CQ from another thread either takes the
//!   QP's lock first (this poll's try-lock then fails and it pops the ring) or polls
//!   the ring meanwhile, which holds nothing of this QP's that could overtake.
//! - **A send CQ that is another CQ**: only completions for the polled CQ are taken;
//!   the others are pushed to their CQ.
//! - **Depth and overflow**: the ring is not touched, so neither changes; at most
//!   `out.len()` completions are taken.
//! - **The arm**: only a claimed QP's completions are taken, and a CQ with a claimed
//!   QP is never armed (`QpShared::claim`, `Cq::req_notify`), just as a claimed QP's
//!   pushes do not look at the arm (`CqShared::push_run`).

use crate::cq::CqShared;
use softrnic_proto::Completion;
use softrnic_proto::qp::RecvHandoff;

/// The caller's `out` of a poll that may take completions directly.
pub(crate) struct Direct<'a> {
    cq: &'a CqShared,
    out: &'a mut [Completion],
    taken: usize,
}

impl<'a> Direct<'a> {
    pub(crate) fn new(cq: &'a CqShared, out: &'a mut [Completion]) -> Direct<'a> {
        Direct { cq, out, taken: 0 }
    }

    /// Takes `c`, a claimed QP's completion for `cq` released under the QP's lock (the
    /// caller holds it), if it is safe (see the module's comment); false: the caller
    /// pushes it as usual.
    #[inline]
    pub(crate) fn take(&mut self, cq: &CqShared, c: &Completion) -> bool {
        if !std::ptr::eq(cq, self.cq) || !self.cq.holds_nothing() {
            return false;
        }
        let Some(slot) = self.out.get_mut(self.taken) else {
            return false;
        };
        crate::chaos::point();
        *slot = *c;
        self.taken += 1;
        true
    }

    /// How many completions were taken into `out`, from its start.
    pub(crate) fn taken(&self) -> usize {
        self.taken
    }
}

/// A claimed QP's receive completions offered to the poll's `out` while the core
/// releases them (`receive::receive_claimed`, under the QP's lock, the quiet mark
/// set so the QP is claimed and in RTS): `cq` is the QP's receive CQ. The core offers
/// a completion only while it holds none released before it
/// (`softrnic_proto::qp::RecvHandoff`), so it is the QP's oldest undelivered one, as
/// when `deliver_to` offers a lone completion; [`Direct::take`] checks the rest.
/// Saves the Outbox's push, its pop in the delivery and the delivery's bookkeeping.
pub(crate) struct RecvDirect<'d, 'a> {
    pub(crate) to: Option<&'d mut Direct<'a>>,
    pub(crate) cq: &'d CqShared,
}

impl RecvHandoff for RecvDirect<'_, '_> {
    #[inline(always)]
    fn take(&mut self, c: &Completion) -> bool {
        match &mut self.to {
            Some(to) => to.take(self.cq, c),
            None => false,
        }
    }
}

#[cfg(all(test, not(loom)))]
#[path = "cq_direct_tests.rs"]
mod tests;
