//! What the SRQ verbs take and report: the creation and modify attributes, the query
//! result, one QP's use of the queue, and the error of a chain post.

use super::ManagedInit;
use crate::error::Error;
use softrnic_proto::srq::SrqCounters;
use softrnic_proto::srq::limits::QpLimits;
use softrnic_proto::srq::stats::ProvisionConfig;
use std::time::Duration;

// Named by the doc comments' links only.
#[cfg(doc)]
use {super::Srq, crate::device::AsyncEvent};

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
