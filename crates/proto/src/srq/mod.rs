//! A shared receive queue (SRQ) and its manager, free of I/O: one queue of posted
//! receive buffers that many QPs take from ([`RecvSource`]), as libibverbs'
//! `ibv_srq`, plus what no RNIC offers: per-QP limits with a soft and a hard level
//! ([`limits`]) and statistical provisioning ([`stats`]).
//!
//! The I/O layer owns the clock and the locking: it lends the `Srq` to a QP's receive
//! step (wrapped so that it locks per take), closes an interval with
//! [`Srq::end_interval`] on its timer, drains [`Srq::poll_event`] into async events, and
//! re-drives the QPs that [`Srq::wake`] names after anything that may end
//! back-pressure (a post, the end of an interval).
//!
//! The limit event follows libibverbs: armed with a limit, it fires once when a take
//! leaves fewer buffers posted than the limit, and is disarmed until armed again
//! ([`Srq::arm`]).

pub mod limits;
pub mod stats;

use crate::qp::{Grant, PostError, RecvSource, RecvWqe};
use crate::verbs::{PdId, QpId};
use limits::{Analysis, LimitKind, QpLimits, Verdict, judge};
use softrnic_wire::terminate::{Layer, TerminateCause, ddp_code, ddp_etype};
use stats::{Demand, ProvisionConfig, soft_limit, target_depth};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Largest SRQ depth.
pub const MAX_SRQ_WR: usize = 1 << 20;

/// How an SRQ is created.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SrqConfig {
    /// Its protection domain: posted SGEs must be memory of it.
    pub pd: PdId,
    /// Buffers it holds at most (`max_wr`).
    pub max_wr: usize,
    /// SGEs per receive at most.
    pub max_sge: usize,
    /// Limit event level: armed when non-zero (`srq_limit`).
    pub limit: usize,
    /// Buffers kept for QPs within their limits: a QP over a soft limit is answered
    /// with back-pressure rather than take the pool below this (see [`limits`]).
    pub reserve: usize,
    /// The limits every QP attached to it starts with.
    pub qp_limits: QpLimits,
    /// The statistics and target parameters.
    pub provision: ProvisionConfig,
}

impl SrqConfig {
    /// `max_wr` buffers of up to `max_sge` SGEs in `pd`, no limit event, no reserve,
    /// no per-QP limits, default provisioning.
    pub fn new(pd: PdId, max_wr: usize, max_sge: usize) -> SrqConfig {
        SrqConfig {
            pd,
            max_wr,
            max_sge,
            limit: 0,
            reserve: 0,
            qp_limits: QpLimits::default(),
            provision: ProvisionConfig::default(),
        }
    }
}

/// Why an SRQ verb was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SrqError {
    /// `max_wr` must be 1..=[`MAX_SRQ_WR`], `max_sge` 1..=[`crate::MAX_SGE`].
    #[error("SRQ size out of range")]
    BadSize,
    /// Shrinking below the buffers posted now would drop posted receives.
    #[error("cannot resize below the {posted} receives posted")]
    BelowPosted {
        /// Buffers posted now.
        posted: usize,
    },
    /// The limit must not exceed `max_wr`.
    #[error("SRQ limit above its size")]
    LimitAboveSize,
}

/// Something the program should learn about.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SrqEvent {
    /// Fewer buffers than the armed limit are posted (once per arm).
    LimitReached {
        /// Buffers posted after the take.
        posted: usize,
        /// The limit it was armed with.
        limit: usize,
    },
    /// A QP crossed a soft limit (once per episode: until it is back under it, or the
    /// interval ends, or the verdict changes).
    SoftLimit(Analysis),
    /// A QP crossed a hard limit: its connection terminates.
    HardLimit(Analysis),
    /// An interval ended with fewer buffers posted than the target: post the
    /// difference (advisory provisioning).
    BelowTarget {
        /// Buffers the SRQ should hold.
        target: usize,
        /// Buffers posted.
        posted: usize,
    },
}

/// Counters since creation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SrqCounters {
    /// Buffers taken by messages.
    pub taken: u64,
    /// Messages that found the SRQ empty (fatal to their connection).
    pub empty: u64,
    /// Takes answered with back-pressure.
    pub waits: u64,
    /// Takes refused by a hard limit.
    pub refused: u64,
    /// Soft-limit crossings absorbed.
    pub absorbed: u64,
    /// Intervals ended.
    pub intervals: u64,
}

/// One attached QP's use of the SRQ.
#[derive(Debug, Clone)]
pub struct Member {
    /// Its limits.
    pub limits: QpLimits,
    /// Buffers bound to its messages in progress.
    pub held: u32,
    /// Buffers taken in the current interval.
    pub this_interval: u32,
    /// Buffers taken in all.
    pub taken: u64,
    /// It asked to go over its soft per-interval limit in the previous interval
    /// (absorbed or held back): a second such interval makes it a sustained hog.
    pub over_last: bool,
    /// It asked to go over its soft per-interval limit in this interval.
    crossed: bool,
    /// The verdict of its current soft-limit episode.
    episode: Option<Verdict>,
    /// Its demand per interval.
    pub demand: Demand,
}

/// A shared receive queue with its manager's state.
#[derive(Debug)]
pub struct Srq {
    cfg: SrqConfig,
    armed: bool,
    queue: VecDeque<RecvWqe>,
    members: BTreeMap<QpId, Member>,
    waiting: BTreeSet<QpId>,
    events: VecDeque<SrqEvent>,
    counters: SrqCounters,
    target: usize,
}

fn no_buffer() -> TerminateCause {
    TerminateCause::new(
        Layer::Ddp,
        ddp_etype::UNTAGGED_BUFFER,
        ddp_code::untagged::NO_BUFFER,
    )
}

impl Srq {
    /// An empty SRQ (armed if `cfg.limit` is non-zero).
    pub fn new(cfg: SrqConfig) -> Result<Srq, SrqError> {
        if cfg.max_wr == 0
            || cfg.max_wr > MAX_SRQ_WR
            || !(1..=crate::MAX_SGE).contains(&cfg.max_sge)
        {
            return Err(SrqError::BadSize);
        }
        if cfg.limit > cfg.max_wr {
            return Err(SrqError::LimitAboveSize);
        }
        Ok(Srq {
            armed: cfg.limit > 0,
            target: cfg.provision.min_depth,
            cfg,
            queue: VecDeque::new(),
            members: BTreeMap::new(),
            waiting: BTreeSet::new(),
            events: VecDeque::new(),
            counters: SrqCounters::default(),
        })
    }

    /// Its configuration (size and limit as modified since).
    pub fn config(&self) -> &SrqConfig {
        &self.cfg
    }

    /// Buffers posted and not taken.
    pub fn posted(&self) -> usize {
        self.queue.len()
    }

    /// Whether the limit event is armed.
    pub fn armed(&self) -> bool {
        self.armed
    }

    /// Counters since creation.
    pub fn counters(&self) -> SrqCounters {
        self.counters
    }

    /// The target depth computed at the end of the last interval.
    pub fn target(&self) -> usize {
        self.target
    }

    /// The QPs attached.
    pub fn members(&self) -> impl Iterator<Item = (QpId, &Member)> {
        self.members.iter().map(|(q, m)| (*q, m))
    }

    /// One attached QP.
    pub fn member(&self, qp: QpId) -> Option<&Member> {
        self.members.get(&qp)
    }

    /// Whether `qp` is waiting (back-pressure).
    pub fn is_waiting(&self, qp: QpId) -> bool {
        self.waiting.contains(&qp)
    }

    /// QPs attached.
    pub fn attached(&self) -> usize {
        self.members.len()
    }

    /// Attaches a QP with the SRQ's default limits.
    pub fn attach(&mut self, qp: QpId) {
        let p = self.cfg.provision;
        self.members.entry(qp).or_insert_with(|| Member {
            limits: self.cfg.qp_limits,
            held: 0,
            this_interval: 0,
            taken: 0,
            over_last: false,
            crossed: false,
            episode: None,
            demand: Demand::new(p.window, p.alpha),
        });
    }

    /// Detaches a QP (destroyed): it is no longer counted, nor woken.
    pub fn detach(&mut self, qp: QpId) {
        self.members.remove(&qp);
        self.waiting.remove(&qp);
    }

    /// The QP went to error: the buffers bound to its messages were flushed to the
    /// program, so it holds none, and it waits for nothing.
    pub fn flushed(&mut self, qp: QpId) {
        if let Some(m) = self.members.get_mut(&qp) {
            m.held = 0;
        }
        self.waiting.remove(&qp);
    }

    /// Sets one QP's limits.
    pub fn set_limits(&mut self, qp: QpId, limits: QpLimits) {
        if let Some(m) = self.members.get_mut(&qp) {
            m.limits = limits;
        }
    }

    /// Posts a resolved receive (see [`RecvWqe::resolve`]); the caller checked its SGE
    /// count against `max_sge`.
    pub fn post(&mut self, wqe: RecvWqe) -> Result<(), PostError> {
        if self.queue.len() >= self.cfg.max_wr {
            return Err(PostError::QueueFull);
        }
        self.queue.push_back(wqe);
        Ok(())
    }

    /// Resizes: up to [`MAX_SRQ_WR`], down to no fewer than the buffers posted now
    /// (nothing posted is ever dropped; the limit must stay within the size).
    pub fn resize(&mut self, max_wr: usize) -> Result<(), SrqError> {
        if max_wr == 0 || max_wr > MAX_SRQ_WR {
            return Err(SrqError::BadSize);
        }
        if max_wr < self.queue.len() {
            return Err(SrqError::BelowPosted {
                posted: self.queue.len(),
            });
        }
        if self.armed && self.cfg.limit > max_wr {
            return Err(SrqError::LimitAboveSize);
        }
        self.cfg.max_wr = max_wr;
        Ok(())
    }

    /// Arms the limit event at `limit` (0 disarms): it fires at the next take that
    /// leaves fewer than `limit` buffers posted.
    pub fn arm(&mut self, limit: usize) -> Result<(), SrqError> {
        if limit > self.cfg.max_wr {
            return Err(SrqError::LimitAboveSize);
        }
        self.cfg.limit = limit;
        self.armed = limit > 0;
        Ok(())
    }

    /// Sets the reserve (see [`SrqConfig::reserve`]).
    pub fn set_reserve(&mut self, reserve: usize) {
        self.cfg.reserve = reserve;
    }

    /// Takes back up to `max` posted buffers that no message has taken, newest first,
    /// among those `pick` accepts (the managed pool shrinking). No message loses its
    /// buffer: a take is atomic with respect to this.
    pub fn withdraw(&mut self, max: usize, mut pick: impl FnMut(&RecvWqe) -> bool) -> Vec<RecvWqe> {
        let mut out = Vec::new();
        let mut i = self.queue.len();
        while i > 0 && out.len() < max {
            i -= 1;
            if pick(&self.queue[i])
                && let Some(w) = self.queue.remove(i)
            {
                out.push(w);
            }
        }
        out
    }

    /// The posted buffers no message has taken, oldest first.
    pub fn queued(&self) -> impl Iterator<Item = &RecvWqe> {
        self.queue.iter()
    }

    /// Removes every posted buffer (the SRQ is destroyed).
    pub fn drain(&mut self) -> impl Iterator<Item = RecvWqe> + '_ {
        self.queue.drain(..)
    }

    /// Next event for the program.
    pub fn poll_event(&mut self) -> Option<SrqEvent> {
        self.events.pop_front()
    }

    /// The waiting QPs that would now get a buffer (or no longer be held back), removed
    /// from the waiting set: the I/O layer re-drives them, and each asks again.
    pub fn wake(&mut self) -> Vec<QpId> {
        let waiting = std::mem::take(&mut self.waiting);
        let mut woken = Vec::new();
        for qp in waiting {
            let held_back = match self.members.get(&qp) {
                Some(m) => matches!(
                    self.verdict(m).map(|a| a.verdict),
                    Some(Verdict::BackPressure)
                ),
                None => false,
            };
            if held_back {
                self.waiting.insert(qp);
            } else {
                woken.push(qp);
            }
        }
        woken
    }

    /// Closes an interval: every QP's count joins its demand, counts start again, the
    /// target is recomputed (and, with automatic soft limits, each QP's soft
    /// per-interval limit), and [`SrqEvent::BelowTarget`] is raised if fewer buffers
    /// than the target are posted. Returns the new target.
    pub fn end_interval(&mut self) -> usize {
        let p = self.cfg.provision;
        let (mut sum_mean, mut sum_var) = (0.0, 0.0);
        for m in self.members.values_mut() {
            m.demand.push(m.this_interval);
            m.over_last = std::mem::take(&mut m.crossed);
            m.this_interval = 0;
            m.episode = None;
            let (mean, var) = m.demand.moments(p.estimator);
            sum_mean += mean;
            sum_var += var;
            if let Some(z) = p.auto_soft_z {
                m.limits.per_interval.soft = soft_limit(mean, var, z, p.soft_floor);
            }
        }
        self.counters.intervals += 1;
        self.target = target_depth(sum_mean, sum_var, p.z, p.min_depth);
        if self.queue.len() < self.target {
            self.events.push_back(SrqEvent::BelowTarget {
                target: self.target,
                posted: self.queue.len(),
            });
        }
        self.target
    }

    /// The worst limit `m` would cross with one more buffer, analysed.
    fn verdict(&self, m: &Member) -> Option<Analysis> {
        let checks = [
            (
                LimitKind::Held,
                m.held.saturating_add(1),
                m.limits.held,
                false,
            ),
            (
                LimitKind::PerInterval,
                m.this_interval.saturating_add(1),
                m.limits.per_interval,
                m.over_last,
            ),
        ];
        let mut worst: Option<Analysis> = None;
        for (limit, count, level, sustained) in checks {
            let available = self.queue.len();
            let Some(verdict) = judge(count, level, sustained, available, self.cfg.reserve) else {
                continue;
            };
            if worst.is_none_or(|w| verdict > w.verdict) {
                worst = Some(Analysis {
                    qp: QpId(0),
                    limit,
                    count,
                    level,
                    sustained,
                    mean_per_interval: m.demand.ewma_mean(),
                    available,
                    reserve: self.cfg.reserve,
                    verdict,
                });
            }
        }
        worst
    }
}

impl RecvSource for Srq {
    fn take(&mut self, qp: QpId, ahead: bool) -> Grant {
        if self.queue.is_empty() {
            if !ahead {
                self.counters.empty += 1;
            }
            return Grant::Empty;
        }
        self.attach(qp);
        let analysis = self
            .members
            .get(&qp)
            .and_then(|m| self.verdict(m))
            .map(|a| Analysis { qp, ..a });
        if let Some(a) = analysis {
            if ahead {
                // Ahead of a hole, a message over a limit just waits for the stream.
                return Grant::Wait;
            }
            let m = self.members.get_mut(&qp).expect("attached above");
            if a.limit == LimitKind::PerInterval && a.verdict != Verdict::Drop {
                m.crossed = true;
            }
            match a.verdict {
                Verdict::Drop => {
                    self.counters.refused += 1;
                    self.events.push_back(SrqEvent::HardLimit(a));
                    return Grant::Refused(no_buffer());
                }
                Verdict::BackPressure => {
                    if m.episode != Some(Verdict::BackPressure) {
                        m.episode = Some(Verdict::BackPressure);
                        self.events.push_back(SrqEvent::SoftLimit(a));
                    }
                    self.counters.waits += 1;
                    self.waiting.insert(qp);
                    return Grant::Wait;
                }
                Verdict::Absorb => {
                    if m.episode.is_none() {
                        m.episode = Some(Verdict::Absorb);
                        self.counters.absorbed += 1;
                        self.events.push_back(SrqEvent::SoftLimit(a));
                    }
                }
            }
        } else if let Some(m) = self.members.get_mut(&qp) {
            m.episode = None;
        }
        let Some(wqe) = self.queue.pop_front() else {
            return Grant::Empty;
        };
        if let Some(m) = self.members.get_mut(&qp) {
            m.held += 1;
            m.this_interval += 1;
            m.taken += 1;
        }
        self.waiting.remove(&qp);
        self.counters.taken += 1;
        if self.armed && self.queue.len() < self.cfg.limit {
            self.armed = false;
            self.events.push_back(SrqEvent::LimitReached {
                posted: self.queue.len(),
                limit: self.cfg.limit,
            });
        }
        Grant::Buffer(wqe)
    }

    fn release(&mut self, qp: QpId) {
        if let Some(m) = self.members.get_mut(&qp) {
            m.held = m.held.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests;
