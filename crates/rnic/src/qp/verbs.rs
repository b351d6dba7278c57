//! The program's handle on a queue pair: its queries, the post verbs, disconnect and
//! abort, and the abortive close when it is dropped.

use super::{QpInner, QpShared, QpStats};
use crate::close::drop_conn;
use crate::device::{AsyncEvent, Shared};
use crate::error::{Error, Result};
use crate::transmit::{post_gathered, post_run, post_single, send_gathered};
use softrnic_proto::qp::QpParams;
use softrnic_proto::{PdId, QpId, QpState, RecvWr, SendWr};
use std::sync::Arc;

/// A queue pair.
pub struct Qp {
    pub(crate) shared: Arc<QpShared>,
}

impl std::fmt::Debug for Qp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Qp({})", self.shared.id.0)
    }
}

impl Qp {
    /// Its number.
    pub fn id(&self) -> QpId {
        self.shared.id
    }

    /// Its protection domain.
    pub fn pd(&self) -> PdId {
        self.shared.pd
    }

    pub(crate) fn shared_dev_is(&self, dev: &Arc<Shared>) -> bool {
        std::ptr::eq(self.shared.dev.as_ptr(), Arc::as_ptr(dev))
    }

    /// Current state.
    pub fn state(&self) -> QpState {
        self.shared
            .lock()
            .map(|g| g.core.state())
            .unwrap_or(QpState::Error)
    }

    /// I/O statistics.
    pub fn stats(&self) -> QpStats {
        self.shared.lock().map(|g| g.stats).unwrap_or_default()
    }

    /// Octets of data-path buffers (receive staging, transmit gather) the QP holds now.
    /// A QP takes them from a pool while it reads or sends and gives them back once
    /// drained, so this is 0 for an idle QP, whatever it moved before; only octets
    /// waiting in a buffer (a full socket, a stream held back by an SRQ) keep one, and
    /// a busy-polling consumer's claim keeps them until the socket goes back to the
    /// engine (at most a lease after the last poll, or at once when the CQ is armed).
    pub fn buffer_bytes(&self) -> usize {
        self.shared.lock().map_or(0, |g| {
            g.staging.held() + g.conn.as_ref().map_or(0, |c| c.tx.held())
        })
    }

    /// The negotiated parameters.
    pub fn params(&self) -> QpParams {
        self.shared
            .lock()
            .map(|g| *g.core.params())
            .unwrap_or_default()
    }

    /// The Terminate cause and whether the peer sent it, once the QP failed.
    pub fn fatal_cause(&self) -> Option<(softrnic_wire::TerminateCause, bool)> {
        self.shared.lock().ok()?.core.fatal_cause()
    }

    fn dev(&self) -> Result<Arc<Shared>> {
        self.shared
            .dev
            .upgrade()
            .ok_or(Error::BadState("device closed"))
    }

    /// Posts a receive work request.
    ///
    /// The usual repost (a QP whose socket a polling consumer holds, its own queue,
    /// working) is checked and queued with the device the claim keeps, borrowed, and
    /// ends there when the post released nothing (no completion, no event, the state
    /// as delivered): the general post's device taken and put back and its delivery
    /// check cost a Send's side about 30 instructions on its way to the reply.
    /// Anything else (no claim, an SRQ, an errored QP, a bad SGE that ends the QP)
    /// goes the general way ([`Qp::post_recv_batch`]), with the same checks and errors.
    pub fn post_recv(&self, wr: RecvWr) -> Result<()> {
        let mut g = self.shared.lock()?;
        let posted = {
            let QpInner {
                core, claimed_dev, ..
            } = &mut *g;
            match claimed_dev {
                Some(dev) => core.post_recv_working(&wr, &dev.tpt),
                None => None,
            }
        };
        match posted {
            None => self.post_recv_general(g, &wr),
            Some(Err(e)) => Err(e.into()),
            Some(Ok(())) if !g.core.has_output() && g.core.state() == g.traced_state => Ok(()),
            Some(Ok(())) => {
                // A fault ended the QP, or output waited: the general post's rest.
                let Some(dev) = self.shared.pass_dev(&mut g) else {
                    return Err(Error::BadState("device closed"));
                };
                self.end_post_recv(g, dev, Ok(()))
            }
        }
    }

    /// Posts a chain of receive work requests under one lock of the QP (as
    /// `ibv_post_recv` takes a list). Stops at the first refused one: those before it
    /// are posted.
    /// The requests may be borrowed (`std::iter::repeat_n(&wr, n)`).
    pub fn post_recv_batch<W: std::borrow::Borrow<RecvWr>>(
        &self,
        wrs: impl IntoIterator<Item = W>,
    ) -> Result<()> {
        let mut g = self.shared.lock()?;
        // A `let else`, not `ok_or`: the error value was built and dropped on every
        // post (about 20 instructions).
        let Some(dev) = self.shared.pass_dev(&mut g) else {
            return Err(Error::BadState("device closed"));
        };
        // One look at the QP's state for the run; each request keeps its checks.
        let posted = g.core.post_recv_run(wrs, &dev.tpt).map_err(Into::into);
        self.end_post_recv(g, dev, posted)
    }

    /// [`Qp::post_recv`] the general way, out of line: inlined, its run and device
    /// handling made the compiler call the repost's queue push and key compare.
    #[inline(never)]
    fn post_recv_general(
        &self,
        mut g: std::sync::MutexGuard<'_, QpInner>,
        wr: &RecvWr,
    ) -> Result<()> {
        let Some(dev) = self.shared.pass_dev(&mut g) else {
            return Err(Error::BadState("device closed"));
        };
        let posted = g.core.post_recv_run(std::slice::from_ref(wr), &dev.tpt);
        self.end_post_recv(g, dev, posted.map_err(Into::into))
    }

    /// The rest of a receive post, with the pass's device taken: an ended QP closed,
    /// what the post released delivered, the device put back.
    #[inline(never)]
    fn end_post_recv(
        &self,
        mut g: std::sync::MutexGuard<'_, QpInner>,
        dev: Arc<Shared>,
        posted: Result<()>,
    ) -> Result<()> {
        if posted.is_ok() {
            if g.core.state() == QpState::Error {
                // A bad receive SGE is a local error: close the connection now
                // (nothing else may wake this QP), so the peer learns.
                self.shared.progress_locked(&mut g, &dev);
            } else {
                // Usually a no-op: a receive posted to a working QP releases nothing.
                self.shared.deliver_if_output(&mut g, &dev);
            }
        }
        let spare = self.shared.end_pass(&mut g, dev);
        drop(g);
        drop(spare);
        posted
    }

    /// Posts a send-queue work request and starts transmitting it on this thread.
    pub fn post_send(&self, wr: SendWr) -> Result<()> {
        // `post_send_batch`'s steps for a batch of one, with the single post inlined
        // here and not in the batch callers (see `post_single_call`).
        let mut g = self.shared.lock()?;
        let Some(dev) = self.shared.pass_dev(&mut g) else {
            return Err(Error::BadState("device closed"));
        };
        let posted = if self.post_single(&mut g, &dev, &wr) {
            Ok(())
        } else {
            // Borrowed: the request is copied once, into the send queue.
            self.post_locked(&mut g, &dev, std::slice::from_ref(&wr).iter())
        };
        self.end_post_send(g, dev, posted)
    }

    /// Posts a chain of send-queue work requests, transmitting once after all are queued
    /// (one doorbell for the batch). The requests may be borrowed (`batch.iter()`): each
    /// is then copied once, into the send queue.
    pub fn post_send_batch<W: std::borrow::Borrow<SendWr>>(
        &self,
        wrs: impl IntoIterator<Item = W>,
    ) -> Result<()> {
        let mut g = self.shared.lock()?;
        // A `let else`, not `ok_or`: the error value was built and dropped on every
        // post (about 20 instructions).
        let Some(dev) = self.shared.pass_dev(&mut g) else {
            return Err(Error::BadState("device closed"));
        };
        let mut wrs = wrs.into_iter();
        let posted = if wrs.size_hint().1 == Some(1) {
            // A request posted alone (`post_send`): a small one goes to the socket from
            // the post itself (`transmit::post_single`); anything else, and a second
            // request an iterator yields against its size hint, the general way.
            match wrs.next() {
                Some(wr) if self.post_single_call(&mut g, &dev, wr.borrow()) => match wrs.next() {
                    None => Ok(()),
                    Some(next) => self.post_locked(&mut g, &dev, std::iter::once(next).chain(wrs)),
                },
                Some(wr) => self.post_locked(&mut g, &dev, std::iter::once(wr).chain(wrs)),
                None => self.post_locked(&mut g, &dev, wrs),
            }
        } else {
            self.post_locked(&mut g, &dev, wrs)
        };
        self.end_post_send(g, dev, posted)
    }

    /// The rest of a send post, with the pass's device taken. After a post that was
    /// taken, what was posted goes out and what completed is delivered, without the
    /// receive path's `read(2)` (usually an empty one): what arrives is for the
    /// engine, which sees the socket readable, or for the polling consumer. Then the
    /// device is put back, and dropped (if it is not kept) after the lock.
    #[inline(always)]
    fn end_post_send(
        &self,
        mut g: std::sync::MutexGuard<'_, QpInner>,
        dev: Arc<Shared>,
        posted: Result<()>,
    ) -> Result<()> {
        if posted.is_ok() {
            self.shared.post_pass(&mut g, &dev);
        }
        let spare = self.shared.end_pass(&mut g, dev);
        drop(g);
        drop(spare);
        posted
    }

    /// [`Qp::post_single`] for a batch of one, as a call: inlined into a batch caller
    /// (the benches' `post_window`), the single post's code changed how that caller's
    /// runs of posts were compiled, and they cost more (session 28, `write_bw -s 64`).
    #[inline(never)]
    fn post_single_call(&self, g: &mut QpInner, dev: &Shared, wr: &SendWr) -> bool {
        self.post_single(g, dev, wr)
    }

    /// The direct single post (`transmit::post_single`) under the QP's lock; false if
    /// it did not take `wr` (nothing was done).
    #[inline(always)]
    fn post_single(&self, g: &mut QpInner, dev: &Shared, wr: &SendWr) -> bool {
        let QpInner {
            core, conn, stats, ..
        } = g;
        conn.as_mut()
            .and_then(|conn| post_single(self.shared.id, core, conn, stats, dev, wr))
            .is_some()
    }

    /// Posts `wrs` under the QP's lock, as runs of small requests and the general way,
    /// then sends what they gathered; stops at the first refused one (those before it
    /// are posted).
    #[inline(always)]
    fn post_locked<W: std::borrow::Borrow<SendWr>>(
        &self,
        g: &mut QpInner,
        dev: &Shared,
        mut wrs: impl Iterator<Item = W>,
    ) -> Result<()> {
        let QpInner {
            core, conn, stats, ..
        } = g;
        loop {
            // Runs of small requests to an idle send queue go straight into the
            // transmit buffer (`transmit::post_run`); the request that ends a run goes
            // the general way (`transmit::post_gathered`).
            let r = match conn.as_mut() {
                Some(conn) => match post_run(core, conn, stats, dev, &mut wrs) {
                    Some(wr) => post_gathered(core, conn, stats, dev, wr.borrow()),
                    None => break,
                },
                None => match wrs.next() {
                    Some(wr) => core.post_send_ref(wr.borrow(), &dev.tpt),
                    None => break,
                },
            };
            r?;
        }
        // What the posts gathered leaves first (`transmit::send_gathered`).
        if let Some(conn) = conn.as_mut() {
            send_gathered(self.shared.id, core, conn, stats, dev);
        }
        Ok(())
    }

    /// Graceful close: queued sends finish, then FIN; the QP goes to error (flushing what
    /// is left) once the peer closes too. [`crate::AsyncEvent::Disconnected`] follows.
    pub fn disconnect(&self) -> Result<()> {
        let dev = self.dev()?;
        let mut g = self.shared.lock()?;
        g.core.close();
        if g.owner.is_claimed() {
            // The engine sees the close through (the peer's FIN, the close timer),
            // whether or not the program keeps polling.
            self.shared.release(&mut g, &dev);
        }
        self.shared.progress_locked(&mut g, &dev);
        Ok(())
    }

    /// Abortive close: the connection is reset (RST) and all outstanding work flushes.
    pub fn abort(&self) -> Result<()> {
        let dev = self.dev()?;
        let mut g = self.shared.lock()?;
        g.core.to_error();
        let mut disconnected = false;
        if let Some(c) = g.conn.take() {
            // Closing the socket with a zero linger time sends RST, not FIN (a
            // `shutdown` would send FIN, and the peer would take it for a graceful
            // close). The engine forgets the socket before it is closed.
            disconnected = drop_conn(c, &mut g.core, self.shared.engine(), &dev);
        }
        // The flushes reach the CQ before Disconnected is posted.
        self.shared.progress_locked(&mut g, &dev);
        if disconnected {
            dev.post_event(AsyncEvent::Disconnected { qp: self.shared.id });
        }
        Ok(())
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        if let Some(dev) = self.shared.dev.upgrade() {
            if let Ok(mut g) = self.shared.lock()
                && let Some(c) = g.conn.take()
            {
                // Destroying a connected QP is an abortive close: RST.
                drop_conn(c, &mut g.core, self.shared.engine(), &dev);
            }
            if let Ok(mut q) = dev.qps.lock() {
                q.remove(&self.shared.id.0);
            }
        }
        if let Some(srq) = &self.shared.srq {
            srq.detach(self.shared.id);
        }
        // The CQs hold their QPs (for their consumers' drives) until now.
        let s = &self.shared;
        s.send_cq.remove_qp(s);
        if !Arc::ptr_eq(&s.send_cq, &s.recv_cq) {
            s.recv_cq.remove_qp(s);
        }
    }
}
