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
use crate::mr::Pd;
use crate::qp::QpShared;
pub use crate::srq_pool::ManagedInit;
use crate::srq_pool::Pool;
use softrnic_proto::qp::{Grant, RecvSource, RecvWqe};
use softrnic_proto::srq::limits::QpLimits;
use softrnic_proto::srq::stats::ProvisionConfig;
use softrnic_proto::srq::{Srq as Core, SrqConfig, SrqCounters, SrqError, SrqEvent};
use softrnic_proto::{PdId, QpId, RecvWr};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

pub use softrnic_proto::srq::MAX_SRQ_WR;

/// How an SRQ is created. `SrqInit::new(max_wr, max_sge)` and then set what differs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SrqInit {
    /// Receives it holds at most.
    pub max_wr: usize,
    /// SGEs per receive at most.
    pub max_sge: usize,
    /// Limit event level (`srq_limit`); non-zero arms it at creation.
    pub limit: usize,
    /// Buffers kept for QPs within their limits (see
    /// `softrnic_proto::srq::limits`).
    pub reserve: usize,
    /// The limits every QP created on it starts with.
    pub qp_limits: QpLimits,
    /// Statistics and target parameters.
    pub provision: ProvisionConfig,
    /// Length of a statistics interval, closed by a manager thread; None: the program
    /// closes intervals itself with [`Srq::end_interval`].
    pub interval: Option<Duration>,
    /// Managed provisioning: the SRQ posts receives itself from a pool it owns, up to
    /// the target depth, and gives memory back when demand falls; the program only
    /// takes messages out ([`Srq::take_message`]). None: advisory (the program posts,
    /// told the target by [`Srq::query`] and [`AsyncEvent::SrqBelowTarget`]).
    pub managed: Option<ManagedInit>,
}

impl SrqInit {
    /// `max_wr` receives of up to `max_sge` SGEs; no limit event, no per-QP limits,
    /// intervals closed by the program.
    pub fn new(max_wr: usize, max_sge: usize) -> SrqInit {
        SrqInit {
            max_wr,
            max_sge,
            limit: 0,
            reserve: 0,
            qp_limits: QpLimits::default(),
            provision: ProvisionConfig::default(),
            interval: None,
            managed: None,
        }
    }
}

/// A change to an SRQ (`ibv_modify_srq`): each field that is set is applied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SrqModify {
    /// Resize (up, or down to no fewer than the receives posted now).
    pub max_wr: Option<usize>,
    /// Arm the limit event at this level (0 disarms).
    pub limit: Option<usize>,
    /// Change the reserve.
    pub reserve: Option<usize>,
}

/// What [`Srq::query`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SrqAttr {
    /// Receives it holds at most.
    pub max_wr: usize,
    /// SGEs per receive at most.
    pub max_sge: usize,
    /// The limit event level.
    pub limit: usize,
    /// Whether the limit event is armed.
    pub armed: bool,
    /// Receives posted and not taken.
    pub posted: usize,
    /// QPs using it.
    pub qps: usize,
    /// QPs held back now (back-pressure).
    pub waiting: usize,
    /// The depth statistical provisioning asks for (advisory: post up to it).
    pub target: usize,
    /// Counters since creation.
    pub counters: SrqCounters,
    /// Time QPs spent held back, summed over QPs (ended stalls only).
    pub stall: Duration,
    /// Managed: buffer memory registered now, and at most since creation (0 when
    /// advisory).
    pub managed_bytes: usize,
    /// Managed: the most buffer memory registered at once.
    pub managed_peak_bytes: usize,
}

/// One QP's use of an SRQ ([`Srq::usage`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SrqUsage {
    /// Its limits.
    pub limits: QpLimits,
    /// Buffers bound to its messages in progress.
    pub held: u32,
    /// Buffers taken in the current interval.
    pub this_interval: u32,
    /// Buffers taken in all.
    pub taken: u64,
    /// Held back now.
    pub waiting: bool,
    /// Empirical mean and variance of buffers per interval, over the window.
    pub mean: f64,
    /// Empirical variance.
    pub variance: f64,
    /// Dynamic (exponentially weighted) mean.
    pub ewma_mean: f64,
    /// Dynamic variance.
    pub ewma_variance: f64,
}

/// A post of a chain stopped at a work request: those before it were posted (as
/// libibverbs' `bad_wr`).
#[derive(Debug, thiserror::Error)]
#[error("work request {posted} of the chain refused: {error}")]
pub struct ChainError {
    /// Work requests posted before the refused one.
    pub posted: usize,
    /// Why it was refused.
    pub error: Error,
}

impl From<ChainError> for Error {
    fn from(c: ChainError) -> Error {
        c.error
    }
}

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

/// A shared receive queue. Dropping the handle stops its manager thread; the queue
/// lives on while QPs use it.
pub struct Srq {
    pub(crate) shared: Arc<SrqShared>,
    manager: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for Srq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Srq({})", self.shared.id)
    }
}

impl Srq {
    pub(crate) fn create(dev: &Arc<Shared>, id: u32, pd: &Pd, init: SrqInit) -> Result<Srq> {
        if !Arc::ptr_eq(&pd.dev, dev) {
            return Err(Error::InvalidArgument("PD of another device"));
        }
        let mut cfg = SrqConfig::new(pd.id, init.max_wr, init.max_sge);
        cfg.limit = init.limit;
        cfg.reserve = init.reserve;
        cfg.qp_limits = init.qp_limits;
        cfg.provision = init.provision;
        let core = Core::new(cfg).map_err(srq_error)?;
        let shared = Arc::new(SrqShared {
            id,
            pd: pd.id,
            dev: Arc::downgrade(dev),
            core: Mutex::new(SrqCore {
                srq: core,
                qps: HashMap::new(),
                stalled: HashMap::new(),
                stall_total: Duration::ZERO,
                taken: HashSet::new(),
            }),
            destroyed: AtomicBool::new(false),
            manager_cv: Condvar::new(),
            manager_stop: Mutex::new(false),
            pool: match init.managed {
                Some(m) => Some(Mutex::new(Pool::new(m, pd.clone())?)),
                None => None,
            },
        });
        if let Some(pool) = &shared.pool {
            let mut p = pool.lock()?;
            let t = p.target();
            p.retarget(&shared, &dev.tpt, t)?;
        }
        let manager = match init.interval {
            Some(every) if !every.is_zero() => {
                let w = Arc::downgrade(&shared);
                Some(
                    std::thread::Builder::new()
                        .name(format!("softrnic-srq-{id}"))
                        .spawn(move || manage(w, every))?,
                )
            }
            _ => None,
        };
        Ok(Srq { shared, manager })
    }

    /// Its number in the device (async events name it).
    pub fn id(&self) -> u32 {
        self.shared.id
    }

    fn dev(&self) -> Result<Arc<Shared>> {
        self.shared
            .dev
            .upgrade()
            .ok_or(Error::BadState("device closed"))
    }

    fn live(&self) -> Result<()> {
        if self.shared.destroyed.load(Ordering::Acquire) {
            return Err(Error::BadState("SRQ destroyed"));
        }
        Ok(())
    }

    /// Posts a receive.
    pub fn post_recv(&self, wr: RecvWr) -> Result<()> {
        self.post_recv_chain(std::iter::once(wr))
            .map_err(|c| c.error)
    }

    /// Posts a chain of receives under one lock (one doorbell). It stops at the first
    /// receive it refuses (too many SGEs, memory not local-writable in the SRQ's PD,
    /// SRQ full): those before it stay posted ([`ChainError::posted`]).
    pub fn post_recv_chain(
        &self,
        wrs: impl IntoIterator<Item = RecvWr>,
    ) -> std::result::Result<(), ChainError> {
        let fail = |posted, error| ChainError { posted, error };
        self.live().map_err(|e| fail(0, e))?;
        if self.shared.pool.is_some() {
            return Err(fail(
                0,
                Error::BadState("a managed SRQ posts its own receives"),
            ));
        }
        let dev = self.dev().map_err(|e| fail(0, e))?;
        let mut posted = 0;
        let mut result = Ok(());
        {
            let mut g = self.shared.lock().map_err(|e| fail(0, e))?;
            let max_sge = g.srq.config().max_sge;
            for wr in wrs {
                if wr.sgl.len() > max_sge {
                    let e = softrnic_proto::qp::PostError::TooManySge(wr.sgl.len());
                    result = Err(fail(posted, e.into()));
                    break;
                }
                let wqe = match RecvWqe::resolve(&wr, &dev.tpt, self.shared.pd) {
                    Ok(w) => w,
                    Err(_) => {
                        let e = softrnic_proto::qp::PostError::InvalidSge;
                        result = Err(fail(posted, e.into()));
                        break;
                    }
                };
                if let Err(e) = g.srq.post(wqe) {
                    result = Err(fail(posted, e.into()));
                    break;
                }
                posted += 1;
            }
        }
        if posted > 0 {
            self.shared.wake(&dev);
        }
        result
    }

    /// Resizes, re-arms the limit event, changes the reserve (`ibv_modify_srq`). A
    /// size below the receives posted now, or a limit above the size, is refused and
    /// nothing changes.
    pub fn modify(&self, m: SrqModify) -> Result<()> {
        self.live()?;
        let dev = self.dev()?;
        {
            let mut g = self.shared.lock()?;
            let (old_size, old_limit) = (g.srq.config().max_wr, g.srq.config().limit);
            let old_armed = g.srq.armed();
            if let Some(n) = m.max_wr {
                g.srq.resize(n).map_err(srq_error)?;
            }
            if let Some(l) = m.limit
                && let Err(e) = g.srq.arm(l)
            {
                // All or nothing: undo the resize.
                let _ = g.srq.resize(old_size);
                if old_armed {
                    let _ = g.srq.arm(old_limit);
                }
                return Err(srq_error(e));
            }
            if let Some(r) = m.reserve {
                g.srq.set_reserve(r);
            }
        }
        self.shared.wake(&dev);
        Ok(())
    }

    /// Its attributes and counters (`ibv_query_srq`, and more).
    pub fn query(&self) -> Result<SrqAttr> {
        // The pool first: its lock comes before the queue's.
        let (managed_bytes, managed_peak_bytes) = match &self.shared.pool {
            Some(p) => {
                let p = p.lock()?;
                (p.bytes, p.peak_bytes)
            }
            None => (0, 0),
        };
        let g = self.shared.lock()?;
        let c = g.srq.config();
        Ok(SrqAttr {
            max_wr: c.max_wr,
            max_sge: c.max_sge,
            limit: c.limit,
            armed: g.srq.armed(),
            posted: g.srq.posted(),
            qps: g.srq.attached(),
            waiting: g
                .srq
                .members()
                .filter(|(q, _)| g.srq.is_waiting(*q))
                .count(),
            target: g.srq.target(),
            counters: g.srq.counters(),
            stall: g.stall_total,
            managed_bytes,
            managed_peak_bytes,
        })
    }

    /// Managed: copies a receive completion's message out of its buffer and gives the
    /// buffer back to the pool (posted again while the SRQ is below its target). Every
    /// receive completion of a managed SRQ, flushed ones included (they carry no
    /// octets), must be given back this way once; a completion of another SRQ, or one
    /// given back twice, is refused.
    pub fn take_message(&self, wc: &softrnic_proto::Completion) -> Result<Vec<u8>> {
        let dev = self.dev()?;
        let pool = self
            .shared
            .pool
            .as_ref()
            .ok_or(Error::BadState("not a managed SRQ"))?;
        let out = pool.lock()?.take_message(&self.shared, &dev.tpt, wc)?;
        self.shared.wake(&dev);
        Ok(out)
    }

    /// One QP's use of the SRQ, if it is created on it.
    pub fn usage(&self, qp: QpId) -> Result<Option<SrqUsage>> {
        let g = self.shared.lock()?;
        Ok(g.srq.member(qp).map(|m| SrqUsage {
            limits: m.limits,
            held: m.held,
            this_interval: m.this_interval,
            taken: m.taken,
            waiting: g.srq.is_waiting(qp),
            mean: m.demand.mean(),
            variance: m.demand.variance(),
            ewma_mean: m.demand.ewma_mean(),
            ewma_variance: m.demand.ewma_variance(),
        }))
    }

    /// Sets one QP's limits.
    pub fn set_qp_limits(&self, qp: QpId, limits: QpLimits) -> Result<()> {
        let dev = self.dev()?;
        self.shared.lock()?.srq.set_limits(qp, limits);
        self.shared.wake(&dev);
        Ok(())
    }

    /// Closes a statistics interval now (the manager thread does this every
    /// [`SrqInit::interval`]): per-QP counts join their statistics, the target is
    /// recomputed, QPs held back by a per-interval limit are driven again. Returns the
    /// new target depth.
    pub fn end_interval(&self) -> Result<usize> {
        self.live()?;
        let dev = self.dev()?;
        self.shared.end_interval(&dev)
    }

    /// Destroys the SRQ, unless QPs still use it (refused with [`Error::BadState`], as
    /// libibverbs refuses with EBUSY). Its posted receives are discarded.
    pub fn destroy(&self) -> Result<()> {
        let mut g = self.shared.lock()?;
        if g.srq.attached() > 0 {
            return Err(Error::BadState("SRQ in use by QPs (destroy them first)"));
        }
        self.shared.destroyed.store(true, Ordering::Release);
        g.srq.drain().for_each(drop);
        drop(g);
        self.stop_manager();
        Ok(())
    }

    fn stop_manager(&self) {
        if let Ok(mut s) = self.shared.manager_stop.lock() {
            *s = true;
            self.shared.manager_cv.notify_all();
        }
    }
}

impl Drop for Srq {
    fn drop(&mut self) {
        self.stop_manager();
        if let Some(h) = self.manager.take() {
            let _ = h.join();
        }
    }
}

/// The manager thread: closes an interval every `every` until stopped.
fn manage(srq: Weak<SrqShared>, every: Duration) {
    let mut next = Instant::now() + every;
    loop {
        let Some(s) = srq.upgrade() else { return };
        {
            let Ok(mut stop) = s.manager_stop.lock() else {
                return;
            };
            loop {
                if *stop {
                    return;
                }
                let now = Instant::now();
                if now >= next {
                    break;
                }
                match s.manager_cv.wait_timeout(stop, next - now) {
                    Ok((g, _)) => stop = g,
                    Err(_) => return,
                }
            }
        }
        next += every;
        let Some(dev) = s.dev.upgrade() else { return };
        let _ = s.end_interval(&dev);
    }
}

fn srq_error(e: SrqError) -> Error {
    Error::InvalidArgument(match e {
        SrqError::BadSize => "SRQ size out of range (max_wr 1..=MAX_SRQ_WR, max_sge 1..=6)",
        SrqError::BelowPosted { .. } => "SRQ size below the receives posted",
        SrqError::LimitAboveSize => "SRQ limit above its size",
    })
}
