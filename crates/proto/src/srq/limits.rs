//! Per-QP limits on a shared receive queue (the seeds' "limit queue"), decided locally
//! when a QP asks for a buffer, with no message to any node.
//!
//! Each limit has two levels ([`Level`]):
//! - **soft**: crossing it makes the manager look at the QP and the pool before it
//!   answers ([`Analysis`]): a QP over its soft limit may still take a buffer while
//!   the pool has room to spare (overcommit: a burst is absorbed); while the pool is
//!   short it is made to wait (back-pressure: its socket is not read until the pool
//!   recovers or the QP falls back under its limit). A QP whose previous interval was
//!   over the limit too is a *sustained* hog and is held to the reserve; a first burst
//!   may dip into half of it.
//! - **hard**: crossing it is answered at once: the message gets no buffer, and the
//!   connection terminates with DDP "Invalid MSN - no buffer available" (RFC 5041,
//!   untagged buffer error 0x02: this QP has no buffer it may use), the peer sees that
//!   Terminate, the program gets an event; the other QPs are not touched.
//!
//! What is limited: the buffers a QP holds at once (bound to messages in progress, in
//! order or ahead of a hole) and the buffers it takes per interval (messages per
//! interval). A message found ahead of the stream (after a hole) that would cross a
//! limit is simply not placed early: it waits for the stream, at no cost to anyone.
//! Limits on out-of-order segments and on the size of a hole belong to the coming own
//! TCP engine, which sees segments; the kernel-socket path has no holes.

use crate::verbs::QpId;

/// Soft and hard level of one limit; [`Level::NONE`] is no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Level {
    /// Crossing it: analysis, then absorb or back-pressure.
    pub soft: u32,
    /// Crossing it: Terminate.
    pub hard: u32,
}

impl Level {
    /// No limit at either level.
    pub const NONE: Level = Level {
        soft: u32::MAX,
        hard: u32::MAX,
    };

    /// A limit with both levels (`soft` above `hard` makes the soft level unreachable).
    pub const fn new(soft: u32, hard: u32) -> Level {
        Level { soft, hard }
    }
}

impl Default for Level {
    fn default() -> Self {
        Level::NONE
    }
}

/// The limits of one QP on its shared receive queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QpLimits {
    /// Buffers held at once (bound to messages not yet completed).
    pub held: Level,
    /// Buffers taken in one interval (messages per interval).
    pub per_interval: Level,
}

/// Which limit a decision is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitKind {
    /// Buffers held at once.
    Held,
    /// Buffers taken in the current interval.
    PerInterval,
}

/// What the manager answered a QP over a limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verdict {
    /// Over the soft level, and the pool can absorb it: the buffer is granted.
    Absorb,
    /// Over the soft level while the pool is short: the QP waits, its socket unread.
    BackPressure,
    /// Over the hard level: Terminate, connection dropped.
    Drop,
}

/// What the manager looked at before answering, carried by the event that reports a
/// soft or hard limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Analysis {
    /// The QP.
    pub qp: QpId,
    /// The limit crossed.
    pub limit: LimitKind,
    /// The count the QP would reach with this buffer.
    pub count: u32,
    /// The limit's levels.
    pub level: Level,
    /// The QP was over this soft level in the previous interval too.
    pub sustained: bool,
    /// Its dynamic mean of buffers per interval so far.
    pub mean_per_interval: f64,
    /// Buffers posted in the shared queue when it asked.
    pub available: usize,
    /// Buffers the pool keeps for QPs within their limits.
    pub reserve: usize,
    /// The answer.
    pub verdict: Verdict,
}

// The one float, the mean, is never NaN (a mean of counts), so equality is total.
impl Eq for Analysis {}

/// The verdict for a QP that would reach `count` against `level`, with `available`
/// buffers posted (at least one) and `reserve` kept for others; None while under the
/// soft level.
pub(crate) fn judge(
    count: u32,
    level: Level,
    sustained: bool,
    available: usize,
    reserve: usize,
) -> Option<Verdict> {
    if count > level.hard {
        return Some(Verdict::Drop);
    }
    if count <= level.soft {
        return None;
    }
    // Buffers left for everyone else once this one is granted.
    let left = available.saturating_sub(1);
    let room = if sustained { reserve } else { reserve / 2 };
    Some(if left >= room && left > 0 {
        Verdict::Absorb
    } else {
        Verdict::BackPressure
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts() {
        let l = Level::new(4, 8);
        assert_eq!(judge(4, l, true, 1, 100), None, "at the soft level: fine");
        assert_eq!(judge(9, l, false, 1000, 0), Some(Verdict::Drop));
        // Over soft: 11 left >= reserve 10 absorbs; 9 left does not for a hog...
        assert_eq!(judge(5, l, true, 12, 10), Some(Verdict::Absorb));
        assert_eq!(judge(5, l, true, 10, 10), Some(Verdict::BackPressure));
        // ... but does for a first burst, which may use half the reserve.
        assert_eq!(judge(5, l, false, 10, 10), Some(Verdict::Absorb));
        assert_eq!(judge(5, l, false, 5, 10), Some(Verdict::BackPressure));
        // The last buffer never goes to a QP over its soft limit.
        assert_eq!(judge(5, l, false, 1, 0), Some(Verdict::BackPressure));
        assert_eq!(judge(u32::MAX, Level::NONE, true, 0, 0), None);
    }
}
