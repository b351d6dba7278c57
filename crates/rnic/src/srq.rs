//! Shared receive queues: one queue of receive buffers that many QPs take from
//! (`ibv_srq`), with softrnic's SRQ manager around it: per-QP soft and hard limits
//! and statistical provisioning (`softrnic_proto::srq`, where the decisions are made).
//!
//! A QP created on an SRQ ([`crate::Device::create_qp_on_srq`]) has no receive queue of
//! its own. Its receive path takes a buffer from the SRQ when a Send's first segment
//! arrives, under the SRQ's lock for that take only (the QP's lock is held around it;
//! the order is always QP, then SRQ, never the reverse). A take may answer with
//! back-pressure: the QP then stops reading its socket, and is driven again by whoever
//! makes room (a post to the SRQ, the end of an interval, a resize), on that thread,
//! after the SRQ's lock is released.
//!
//! Destroying an SRQ that QPs still use is refused, as libibverbs refuses it (EBUSY);
//! the receives posted to it are discarded with it, without completions (libibverbs
//! does the same).

use crate::device::{AsyncEvent, Shared};
use crate::error::{Error, Result};
use crate::qp::QpShared;
pub use crate::srq_pool::ManagedInit;
use crate::srq_pool::Pool;
use softrnic_proto::qp::{Grant, RecvSource};
use softrnic_proto::srq::{Srq as Core, SrqEvent};
use softrnic_proto::{PdId, QpId};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

pub use softrnic_proto::srq::MAX_SRQ_WR;

/// The values the verbs take and report.
mod attributes;
/// The handle and its manager thread.
mod handle;

pub use attributes::{ChainError, SrqAttr, SrqInit, SrqModify, SrqUsage};
pub use handle::Srq;

pub(crate) struct SrqCore {
    pub(crate) srq: Core,
    /// The QPs created on it, to drive when they are woken.
    qps: HashMap<QpId, Weak<QpShared>>,
    /// When each held-back QP began to wait.
    stalled: HashMap<QpId, Instant>,
    stall_total: Duration,
    /// Managed: the work request ids of buffers a QP has taken from the queue (each
    /// ends in a completion) and the program has not given back yet. Only these may be
    /// given back: a guessed id of a buffer still posted, or one given back twice, is
    /// refused before the pool frees a buffer the SRQ still holds.
    pub(crate) taken: HashSet<u64>,
}

pub(crate) struct SrqShared {
    pub(crate) id: u32,
    pub(crate) pd: PdId,
    dev: Weak<Shared>,
    core: Mutex<SrqCore>,
    destroyed: AtomicBool,
    /// Wakes the manager thread (interval end, limit reached, stop).
    manager_cv: Condvar,
    manager_stop: Mutex<bool>,
    /// Managed provisioning's buffer pool (lock order: pool, then `core`).
    pool: Option<Mutex<Pool>>,
}

impl SrqShared {
    pub(crate) fn lock(&self) -> Result<MutexGuard<'_, SrqCore>> {
        Ok(self.core.lock()?)
    }

    pub(crate) fn belongs_to(&self, dev: &Arc<Shared>) -> bool {
        std::ptr::eq(self.dev.as_ptr(), Arc::as_ptr(dev))
    }

    /// A QP is created on it.
    pub(crate) fn attach(&self, qp: &Arc<QpShared>) -> Result<()> {
        if self.destroyed.load(Ordering::Acquire) {
            return Err(Error::BadState("SRQ destroyed"));
        }
        let mut g = self.lock()?;
        g.srq.attach(qp.id);
        g.qps.insert(qp.id, Arc::downgrade(qp));
        Ok(())
    }

    /// A QP on it is destroyed.
    pub(crate) fn detach(&self, qp: QpId) {
        if let Ok(mut g) = self.core.lock() {
            g.srq.detach(qp);
            g.qps.remove(&qp);
            g.stalled.remove(&qp);
        }
    }

    /// A QP on it went to error: what it held was flushed.
    pub(crate) fn flushed(&self, qp: QpId) {
        if let Ok(mut g) = self.core.lock() {
            g.srq.flushed(qp);
            g.stalled.remove(&qp);
        }
    }

    /// Posts the SRQ's events as async events (called after the lock is released).
    fn post_events(&self, events: Vec<SrqEvent>, dev: &Shared) {
        for e in events {
            let srq = self.id;
            dev.post_event(match e {
                SrqEvent::LimitReached { .. } => AsyncEvent::SrqLimitReached { srq },
                SrqEvent::SoftLimit(analysis) => AsyncEvent::SrqSoftLimit { srq, analysis },
                SrqEvent::HardLimit(analysis) => AsyncEvent::SrqHardLimit { srq, analysis },
                SrqEvent::BelowTarget { target, posted } => AsyncEvent::SrqBelowTarget {
                    srq,
                    target,
                    posted,
                },
            });
        }
    }

    /// Drives the QPs that the SRQ no longer holds back, on this thread.
    fn wake(&self, dev: &Shared) {
        let woken: Vec<Arc<QpShared>> = match self.core.lock() {
            Ok(mut g) => {
                let ids = g.srq.wake();
                ids.iter()
                    .filter_map(|q| g.qps.get(q).and_then(Weak::upgrade))
                    .collect()
            }
            Err(_) => return,
        };
        for qp in woken {
            qp.progress(dev);
        }
    }

    fn end_interval(&self, dev: &Shared) -> Result<usize> {
        let (target, mut events) = {
            let mut g = self.lock()?;
            let t = g.srq.end_interval();
            (t, drain(&mut g.srq))
        };
        if let Some(pool) = &self.pool {
            // Managed: the SRQ provisions itself; the program is not asked to.
            events.retain(|e| !matches!(e, SrqEvent::BelowTarget { .. }));
            pool.lock()?.retarget(self, &dev.tpt, target)?;
        }
        self.post_events(events, dev);
        self.wake(dev);
        Ok(target)
    }
}

fn drain(srq: &mut Core) -> Vec<SrqEvent> {
    std::iter::from_fn(|| srq.poll_event()).collect()
}

/// The SRQ as a QP's receive step sees it: locked per take.
pub(crate) struct SrqSource<'a> {
    pub(crate) srq: &'a SrqShared,
    pub(crate) dev: &'a Shared,
}

impl RecvSource for SrqSource<'_> {
    fn take(&mut self, qp: QpId, ahead: bool) -> Grant {
        let (grant, events) = {
            let Ok(mut g) = self.srq.core.lock() else {
                return Grant::Empty;
            };
            let grant = g.srq.take(qp, ahead);
            match &grant {
                Grant::Wait if !ahead => {
                    g.stalled.entry(qp).or_insert_with(Instant::now);
                }
                Grant::Buffer(wqe) => {
                    if let Some(t) = g.stalled.remove(&qp) {
                        g.stall_total += t.elapsed();
                    }
                    if self.srq.pool.is_some() {
                        g.taken.insert(wqe.wr_id);
                    }
                }
                _ => {}
            }
            (grant, drain(&mut g.srq))
        };
        let low = self.srq.pool.is_some()
            && events
                .iter()
                .any(|e| matches!(e, SrqEvent::LimitReached { .. }));
        self.srq.post_events(events, self.dev);
        if low && let Some(pool) = &self.srq.pool {
            // Managed: a burst beyond the statistics; provision now (QP lock held,
            // then the pool's, then the queue's: the order everyone uses).
            if let Ok(mut p) = pool.lock() {
                let _ = p.low_water(self.srq, &self.dev.tpt);
            }
        }
        grant
    }

    fn release(&mut self, qp: QpId) {
        if let Ok(mut g) = self.srq.core.lock() {
            g.srq.release(qp);
        }
    }
}
