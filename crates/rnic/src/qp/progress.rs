//! A QP's progress pass: transmit, receive, close and deliver under the QP's lock,
//! until the socket would block; the passes a post or a busy poll needs skip parts.

use super::{QpInner, QpShared};
use crate::close::close_if_done;
use crate::cq_direct::{Direct, RecvDirect};
use crate::device::{AsyncEvent, Shared};
use crate::receive::{Driven, Quick, receive, receive_applying, receive_claimed};
use crate::transmit::transmit;
use softrnic_proto::qp::{CqSide, QpEvent};
use softrnic_proto::{Completion, QpState};
use std::time::Duration;

impl QpShared {
    /// Progress, waiting for the lock.
    pub(crate) fn progress(&self, dev: &Shared) {
        if let Ok(mut g) = self.lock() {
            self.progress_locked(&mut g, dev);
        }
    }

    /// Drives receive and transmit until the socket would block, then delivers
    /// completions and events. Returns whether anything moved.
    ///
    /// [`AsyncEvent::Disconnected`] is posted only after every completion the QP has
    /// produced (the flushes included) is in its CQ, so a consumer that sees it can
    /// poll the CQ once and find everything.
    pub(crate) fn progress_locked(&self, g: &mut QpInner, dev: &Shared) -> bool {
        self.progress_pass(g, dev, Pass::Full)
    }

    /// [`QpShared::progress_locked`], with the parts `pass` leaves out skipped.
    pub(super) fn progress_pass(&self, g: &mut QpInner, dev: &Shared, pass: Pass) -> bool {
        let timer = fire_close_timer(g);
        if g.conn.is_none() {
            crate::chaos::point();
            self.deliver(g, dev);
            return false;
        }
        let mut moved = false;
        // Transmit first: a request just posted leaves before the receive path's read
        // (often an empty one) is paid; what the receive path queues (Read Responses,
        // Terminates) goes out in the second pass.
        if pass != Pass::ReceiveFirst && !self.waits_for_room(g, pass) {
            moved |= self.transmit(g, dev);
        }
        if pass != Pass::TransmitOnly && self.receive(g, dev) {
            return self.after_receive(g, dev, pass, timer);
        }
        if pass == Pass::ReceiveFirst && !timer && !g.core.is_closing() {
            // A busy-polling consumer's empty poll: nothing was read, nothing was
            // queued to send, no timer ran, so the core is as the last pass (which
            // delivered) left it. Nothing to close, arm or deliver.
            return false;
        }
        self.finish_pass(g, dev);
        moved
    }

    /// Whether a claimed, quiet QP's drive (nothing queued to send, the socket the
    /// consumer's) may take the receive in one pass (`receive::receive_claimed`): in
    /// RTS, no close timer runs and no close is under way. Otherwise a
    /// [`Pass::ReceiveFirst`] has the same outcome. These answers, with the caller's,
    /// are what the consumer's quiet mark keeps (`QpInner::quiet_claimed`).
    #[inline]
    pub(super) fn claimed_read_applies(&self, g: &QpInner) -> bool {
        g.core.state() == QpState::Rts && g.core.poll_timeout().is_none() && !g.core.is_closing()
    }

    /// The claimed read of a QP with its quiet mark set, with the device the claim
    /// keeps (borrowed, not moved out). `None` if the QP holds no connection or device
    /// (it cannot while marked and claimed: the general pass then runs). With
    /// `marked`, the mark was set before this drive, so the receive's own checks held
    /// at its last read and still do (`receive::receive_applying`). With `to`, a
    /// receive completion the read releases may go straight to the poll's caller
    /// (`crate::cq_direct::RecvDirect`).
    #[inline]
    pub(super) fn quiet_read(
        &self,
        g: &mut QpInner,
        marked: bool,
        to: Option<&mut Direct<'_>>,
    ) -> Option<Quick> {
        let QpInner {
            core,
            conn,
            stats,
            staging,
            claimed_dev,
            ..
        } = g;
        let (Some(conn), Some(dev)) = (conn.as_mut(), claimed_dev.as_deref()) else {
            return None;
        };
        let at = Driven {
            qp: self.id,
            engine: self.engine(),
        };
        let srq = self.srq.as_deref();
        let mut to = RecvDirect {
            to,
            cq: &self.recv_cq,
        };
        Some(if marked {
            receive_applying(at, core, conn, stats, staging, dev, srq, &mut to)
        } else {
            receive_claimed(at, core, conn, stats, staging, dev, srq, &mut to)
        })
    }

    /// The rest of a claimed drive after its read ([`QpShared::quiet_read`]), by what
    /// the read did: with `to`, the completion a quiet receive released may go
    /// straight to the poll's caller ([`QpShared::deliver_to`]).
    pub(super) fn after_claimed_read(
        &self,
        g: &mut QpInner,
        dev: &Shared,
        quick: Quick,
        to: Option<&mut Direct<'_>>,
    ) -> bool {
        match quick {
            Quick::Empty => false,
            // Nothing to send, no close under way, the timer as armed (a placed Write,
            // a received Send): what `after_receive` would do comes down to
            // delivering what was released, asked inline.
            Quick::Took | Quick::Simple if self.received_quiet(g) => {
                match to {
                    Some(to) => self.deliver_to(g, dev, to),
                    None => self.deliver_if_output(g, dev),
                }
                true
            }
            Quick::Took | Quick::Simple => self.after_receive(g, dev, Pass::ReceiveFirst, false),
            Quick::Rest => {
                self.receive(g, dev);
                self.after_receive(g, dev, Pass::ReceiveFirst, false)
            }
            Quick::General => self.progress_pass(g, dev, Pass::ReceiveFirst),
        }
    }

    /// The rest of a pass whose receive moved something; returns true (it moved).
    fn after_receive(&self, g: &mut QpInner, dev: &Shared, pass: Pass, timer: bool) -> bool {
        // Only if the receive path queued something (a Read Response, a Terminate) or
        // octets wait: after a Write or a Send arrives there is nothing, and this pass
        // is on the way to the program's reply.
        let waiting = g.conn.as_ref().is_some_and(|c| !c.tx.is_flushed());
        if g.core.may_transmit() || waiting {
            self.transmit(g, dev);
        } else if pass == Pass::ReceiveFirst && !timer && self.received_quietly(g) {
            // A consumer's pass that placed a Write: the reply the program posts next
            // waits for nothing after the placement.
            return true;
        }
        self.finish_pass(g, dev);
        true
    }

    /// The end of a connected QP's pass: close what is done, arm the close timer,
    /// deliver completions and events.
    fn finish_pass(&self, g: &mut QpInner, dev: &Shared) {
        let disconnected = g.core.is_closing() && self.close_if_done(g, crate::engine::now(), dev);
        self.arm_timer(g, dev);
        crate::chaos::point();
        self.deliver(g, dev);
        if disconnected {
            dev.post_event(AsyncEvent::Disconnected { qp: self.id });
        }
    }

    /// The pass after a post (a [`Pass::TransmitOnly`] one), cut to what a post that
    /// sent everything it gathered leaves to do (`transmit::post_sent_all`): with no
    /// close timer, no close under way and the timer as armed, only its completion is
    /// delivered (an 8-octet ping-pong's reply: about 170 instructions less per
    /// message). Anything else takes the whole pass.
    pub(super) fn post_pass(&self, g: &mut QpInner, dev: &Shared) {
        let quiet =
            g.core.poll_timeout().is_none() && g.timer_armed.is_none() && !g.core.is_closing() && {
                let QpInner { core, conn, .. } = &mut *g;
                conn.as_mut()
                    .is_some_and(|c| crate::transmit::post_sent_all(core, c))
            };
        if quiet {
            self.deliver_if_output(g, dev);
        } else {
            self.progress_pass(g, dev, Pass::TransmitOnly);
        }
    }

    /// After the claimed pass's receive: nothing to send (nothing queued by the core,
    /// no octets waiting), no close under way, the timer as armed. The rest of the
    /// pass is then only the delivery of what the receive released, if anything.
    #[inline]
    fn received_quiet(&self, g: &QpInner) -> bool {
        !g.core.may_transmit()
            && g.conn.as_ref().is_some_and(|c| c.tx.is_flushed())
            && !g.core.is_closing()
            && g.core.poll_timeout() == g.timer_armed
    }

    /// After a marked drive's read that the core's simple path took whole
    /// ([`Quick::Simple`]): whether the drive has nothing left to do, as after a placed
    /// Write or a Send whose completion went to the poll's caller
    /// (`crate::cq_direct::RecvDirect`). The mark's answers still hold (claimed, in
    /// RTS, nothing queued or unsent, no close timer, no close: the simple path changes
    /// none of them), so what [`QpShared::after_claimed_read`] and the release after
    /// it would still ask comes down to this: nothing released to deliver, the state
    /// as last traced and no timer left armed. The promise that the simple path
    /// changes no state and starts no close is also checked here (two loads, in
    /// release too), so a later change of the core that broke it would take the old
    /// way instead of leaving the change untraced; the timer's side of the promise
    /// (`poll_timeout`, out of line) is asserted in debug builds.
    #[inline]
    pub(super) fn simple_read_done(&self, g: &QpInner) -> bool {
        let done = !g.core.has_output()
            && g.traced_state == QpState::Rts
            && g.core.state() == QpState::Rts
            && !g.core.is_closing()
            && g.timer_armed.is_none();
        debug_assert!(
            !done || g.core.poll_timeout().is_none(),
            "the core's simple path armed a timer"
        );
        done
    }

    /// After a receive that queued nothing to send: whether it left the rest of the pass
    /// nothing to do (no completion or event released, the state as last delivered, no
    /// close under way, the timer as armed), as a placed Write does.
    #[inline]
    fn received_quietly(&self, g: &QpInner) -> bool {
        !g.core.has_output()
            && g.core.state() == g.traced_state
            && !g.core.is_closing()
            && g.core.poll_timeout() == g.timer_armed
    }

    /// Whether a `pass` that only transmits (after a post, or a many-QP consumer's poll)
    /// leaves the socket alone: it was full at the last send and the engine owns it, so
    /// the engine hears when there is room and sends then. (A socket a polling consumer
    /// has claimed is out of the engine's epoll set: the consumer's passes send.)
    pub(super) fn waits_for_room(&self, g: &QpInner, pass: Pass) -> bool {
        pass == Pass::TransmitOnly
            && !g.owner.is_claimed()
            && g.conn.as_ref().is_some_and(|c| c.tx.waits_for_room())
    }

    fn receive(&self, g: &mut QpInner, dev: &Shared) -> bool {
        let QpInner {
            core,
            conn,
            stats,
            staging,
            ..
        } = g;
        match conn.as_mut() {
            Some(conn) => receive(
                Driven {
                    qp: self.id,
                    engine: self.engine(),
                },
                core,
                conn,
                stats,
                staging,
                dev,
                self.srq.as_deref(),
            ),
            None => false,
        }
    }

    fn transmit(&self, g: &mut QpInner, dev: &Shared) -> bool {
        let QpInner {
            core, conn, stats, ..
        } = g;
        match conn.as_mut() {
            Some(conn) => transmit(self.id, self.engine(), core, conn, stats, dev),
            None => false,
        }
    }

    fn close_if_done(&self, g: &mut QpInner, now: Duration, dev: &Shared) -> bool {
        let QpInner { core, conn, .. } = g;
        close_if_done(core, conn, now, self.engine(), dev)
    }

    /// Asks the QP's engine to drive it when its close timer is due (once per deadline).
    fn arm_timer(&self, g: &mut QpInner, dev: &Shared) {
        let due = g.core.poll_timeout();
        if due != g.timer_armed {
            g.timer_armed = due;
            if let (Some(at), Some(e)) = (due, dev.engines.get(self.engine())) {
                e.arm_timer(at, self.id);
            }
        }
    }

    /// [`QpShared::deliver`], skipped when it has nothing to do: no completion or event
    /// waits and the state is the one last delivered (as after a receive posted to a
    /// working QP, on the path of every send_lat reply: about 70 instructions).
    pub(super) fn deliver_if_output(&self, g: &mut QpInner, dev: &Shared) {
        if g.core.has_output() || g.core.state() != g.traced_state {
            self.deliver(g, dev);
        }
    }

    /// [`QpShared::deliver_if_output`] for a claimed QP's pass under a poll that may
    /// take a lone completion for its CQ directly (`crate::cq_direct`, which says why
    /// that keeps order and hands each completion out once); anything else is
    /// delivered as usual.
    fn deliver_to(&self, g: &mut QpInner, dev: &Shared, to: &mut Direct<'_>) {
        let state = g.core.state();
        if !g.core.has_output() && state == g.traced_state {
            return;
        }
        if state == g.traced_state && state != QpState::Error && g.owner.is_claimed() {
            let taken = g.core.drain_lone_completion(|side, one| {
                let cq = match side {
                    CqSide::Send => &self.send_cq,
                    CqSide::Recv => &self.recv_cq,
                };
                if !to.take(cq, one) {
                    self.push_run(side, std::slice::from_ref(one), true);
                }
            });
            if taken {
                g.core.shrink_idle_queues();
                return;
            }
        }
        self.deliver_general(g, dev);
    }

    /// Hands the program what the core released: events, completions into their
    /// CQs, the state change traced. A pass that released one completion and nothing
    /// else in a working state that was already traced (a Send received, a send
    /// completed) pushes it without the general walk (about 40 instructions less on
    /// a Send's way to its reply): the general walk would do just that.
    pub(super) fn deliver(&self, g: &mut QpInner, dev: &Shared) {
        let state = g.core.state();
        if state == g.traced_state && state != QpState::Error {
            let claimed = g.owner.is_claimed();
            if g.core.drain_lone_completion(|side, one| {
                self.push_run(side, std::slice::from_ref(one), claimed)
            }) {
                g.core.shrink_idle_queues();
                return;
            }
        }
        self.deliver_general(g, dev);
    }

    /// [`QpShared::deliver`] of anything: the state traced, an SRQ told its bound
    /// buffers were flushed, events posted, completions pushed in runs per CQ.
    #[inline(never)]
    fn deliver_general(&self, g: &mut QpInner, dev: &Shared) {
        crate::trace::qp_state(dev.serial, self.id, &mut g.traced_state, g.core.state());
        if let Some(srq) = &self.srq
            && g.core.state() == QpState::Error
            && !std::mem::replace(&mut g.srq_flushed, true)
        {
            // Its bound buffers were flushed to the program: it holds none now.
            srq.flushed(self.id);
        }
        while let Some(e) = g.core.poll_event() {
            if let QpEvent::Fatal { cause, remote } = e {
                dev.post_event(AsyncEvent::QpFatal {
                    qp: self.id,
                    cause,
                    remote,
                });
            }
        }
        // Runs of completions for one CQ go in with one claim of its ring and one look
        // at its arm (`CqShared::push_run`), in the order the core released them.
        let claimed = g.owner.is_claimed();
        g.core
            .drain_completions(|side, run| self.push_run(side, run, claimed));
        // Queues a burst grew give their room back once empty.
        g.core.shrink_idle_queues();
    }

    fn push_run(&self, side: CqSide, run: &[Completion], claimed: bool) {
        if run.is_empty() {
            return;
        }
        crate::chaos::point();
        match side {
            CqSide::Send => self.send_cq.push_run(run, claimed),
            CqSide::Recv => self.recv_cq.push_run(run, claimed),
        }
    }
}

/// Which parts of a drive of the QP run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Pass {
    /// Transmit, receive, transmit what the receive path queued.
    Full,
    /// No first transmit pass: the caller knows there is nothing to send unless the
    /// receive path queues it.
    ReceiveFirst,
    /// Transmit only (after a post).
    TransmitOnly,
}

/// Fires the close timer if one runs. The clock is read only for a QP that has a timer
/// (or, in the callers, is closing): a QP moving data has neither, and a clock read per
/// drive showed in the latency profile.
/// Returns whether there was one.
fn fire_close_timer(g: &mut QpInner) -> bool {
    let pending = g.core.poll_timeout().is_some();
    if pending {
        g.core.handle_timeout(crate::engine::now());
    }
    pending
}
