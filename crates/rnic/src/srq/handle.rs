//! The [`Srq`] handle: the verbs a program calls on a shared receive queue, and the
//! manager thread that closes its statistics intervals.

use super::{ChainError, SrqAttr, SrqCore, SrqInit, SrqModify, SrqShared, SrqUsage};
use crate::device::Shared;
use crate::error::{Error, Result};
use crate::mr::Pd;
use crate::srq_pool::Pool;
use softrnic_proto::qp::RecvWqe;
use softrnic_proto::srq::limits::QpLimits;
use softrnic_proto::srq::{Srq as Core, SrqConfig, SrqError};
use softrnic_proto::{QpId, RecvWr};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

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
