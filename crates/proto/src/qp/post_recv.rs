//! Receives posted to the QP's own queue, one or a run of them: what every request is
//! checked for, and a run's way of checking the QP's own conditions once.

use super::{PostError, Qp, QpState};
use crate::tpt::Tpt;
use crate::verbs::{MAX_SGE, RecvWr, WcOpcode};
use std::borrow::Borrow;

impl Qp {
    /// Posts receives in order, as [`Qp::post_recv_ref`] posts each one, and stops at the
    /// first refused one (those before it are posted). A program that reposts the
    /// buffers a poll gave back posts a run: the QP's own queue and its state are looked
    /// at once for it (a post changes neither, unless it fails: then the rest go the
    /// general way), and no call is made per request. Each request is still checked
    /// for its SGE count, the queue's room and its memory (through the TPT), and fails
    /// with the same value.
    pub fn post_recv_run<W: Borrow<RecvWr>>(
        &mut self,
        wrs: impl IntoIterator<Item = W>,
        tpt: &Tpt,
    ) -> Result<(), PostError> {
        let mut wrs = wrs.into_iter();
        if !self.on_srq && matches!(self.state, QpState::Idle | QpState::Rts | QpState::Closing) {
            for wr in wrs.by_ref() {
                if !self.post_recv_postable(wr.borrow(), tpt)? {
                    // A bad SGE ended the QP: the rest are flushed.
                    break;
                }
            }
        }
        for wr in wrs {
            self.post_recv_ref(wr.borrow(), tpt)?;
        }
        Ok(())
    }

    /// One receive, when the QP takes it on its own queue (not on an SRQ, not in
    /// error): the request's checks and its buffer resolved into the queue, as
    /// [`Qp::post_recv_ref`] does; `None`, with nothing done, when the QP's state or
    /// its shared queue leave it to [`Qp::post_recv_ref`]. The I/O layer's single
    /// repost (a program's receive given back after its completion) takes this way,
    /// without the run's iterator and the general post's state handling.
    #[inline]
    pub fn post_recv_working(&mut self, wr: &RecvWr, tpt: &Tpt) -> Option<Result<(), PostError>> {
        if self.on_srq || !matches!(self.state, QpState::Idle | QpState::Rts | QpState::Closing) {
            return None;
        }
        Some(self.post_recv_postable(wr, tpt).map(|_| ()))
    }

    /// One receive to a QP that takes it (its own queue, not errored): the request's
    /// checks, then its buffer resolved into the queue (true), or its fault completed
    /// and the QP ended (false). Inlined into the single post and the run.
    #[inline(always)]
    pub(super) fn post_recv_postable(&mut self, wr: &RecvWr, tpt: &Tpt) -> Result<bool, PostError> {
        if wr.sgl.len() > MAX_SGE {
            return Err(PostError::TooManySge(wr.sgl.len()));
        }
        if !self.rq.has_room() {
            return Err(PostError::QueueFull);
        }
        match self.rq.push_resolved(wr, tpt, self.cfg.pd) {
            Ok(()) => Ok(true),
            Err(status) => {
                let c = self.out.completion(wr.wr_id, status, WcOpcode::Recv, 0);
                self.out.recv(c);
                self.to_error();
                Ok(false)
            }
        }
    }
}

#[cfg(test)]
#[path = "post_recv_tests.rs"]
mod tests;
