//! The segments sent and not yet acknowledged, one record each, in sequence order:
//! when each was last sent, whether it was sent again, whether the peer SACKed it, and
//! whether it is taken as lost. RACK (RFC 8985) compares send times to tell loss from
//! reordering; retransmissions resend a record's own range, so a segment goes again
//! with the boundaries it first had (whole FPDUs stay whole, RFC 5044).
//!
//! The records tile `[una, nxt)` without gaps. Their number is bounded (see
//! [`Sent::new`]); when the bound is reached, new data waits for acknowledgments.

use std::collections::VecDeque;
use std::time::Duration;

/// One segment as sent: positions `[start, end)` (a FIN counts as the last position).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SentSeg {
    pub start: u64,
    pub end: u64,
    /// When it was last sent.
    pub xmit: Duration,
    /// The order of that sending among all (segments sent at one instant differ).
    pub order: u64,
    /// It was sent more than once.
    pub rtx: bool,
    /// The peer holds all of it (SACKed).
    pub sacked: bool,
    /// Taken as lost and not sent again since.
    pub lost: bool,
    /// When it was first sent (for [`super::Timing`]).
    pub first: Duration,
    /// When RACK last took it as lost (for [`super::Timing`]).
    pub lost_at: Option<Duration>,
}

impl SentSeg {
    fn len(&self) -> u64 {
        self.end - self.start
    }
}

#[derive(Debug)]
pub(crate) struct Sent {
    segs: VecDeque<SentSeg>,
    max: usize,
    /// Octets of the records marked lost (and not sent again).
    lost_bytes: u64,
    /// No record marked lost starts below this position.
    lost_from: u64,
    /// Sendings so far.
    sendings: u64,
}

impl Sent {
    /// Room for `max` records, of which `prealloc` are allocated now; the rest only if
    /// small segments ever fill them (growth stops at `max`).
    pub fn new(max: usize, prealloc: usize) -> Sent {
        Sent {
            segs: VecDeque::with_capacity(prealloc.min(max)),
            max,
            lost_bytes: 0,
            lost_from: u64::MAX,
            sendings: 0,
        }
    }

    pub fn is_full(&self) -> bool {
        self.segs.len() >= self.max
    }

    pub fn len(&self) -> usize {
        self.segs.len()
    }

    pub fn get(&self, i: usize) -> SentSeg {
        self.segs[i]
    }

    /// Octets marked lost and not yet sent again.
    pub fn lost_bytes(&self) -> u64 {
        self.lost_bytes
    }

    /// A new segment `[start, end)` went out at `now` (`start` is the previous end).
    pub fn push(&mut self, start: u64, end: u64, now: Duration) {
        debug_assert!(self.segs.back().is_none_or(|s| s.end == start));
        self.sendings += 1;
        self.segs.push_back(SentSeg {
            start,
            end,
            xmit: now,
            order: self.sendings,
            rtx: false,
            sacked: false,
            lost: false,
            first: now,
            lost_at: None,
        });
    }

    /// The index of the record holding position `pos` (or `len()` past the end).
    pub fn index_of(&self, pos: u64) -> usize {
        self.segs.partition_point(|s| s.end <= pos)
    }

    /// Everything below `una` is acknowledged: the records it covers go, each passed
    /// to `delivered` (the ones not SACKed before: newly delivered).
    pub fn ack_to(&mut self, una: u64, mut delivered: impl FnMut(&SentSeg)) {
        while let Some(s) = self.segs.front().copied() {
            if s.end > una {
                break;
            }
            self.segs.pop_front();
            if s.lost {
                self.lost_bytes -= s.len();
            }
            if !s.sacked {
                delivered(&s);
            }
        }
    }

    /// Marks SACKed the records in `[from, to)` that `covered` says the peer holds
    /// whole, passing each newly SACKed one to `delivered`.
    pub fn sack(
        &mut self,
        from: u64,
        to: u64,
        covered: impl Fn(u64, u64) -> bool,
        mut delivered: impl FnMut(&SentSeg),
    ) {
        let mut i = self.index_of(from);
        while let Some(s) = self.segs.get_mut(i) {
            if s.start >= to {
                break;
            }
            if !s.sacked && covered(s.start, s.end) {
                s.sacked = true;
                if s.lost {
                    s.lost = false;
                    self.lost_bytes -= s.end - s.start;
                }
                delivered(s);
            }
            i += 1;
        }
    }

    /// Forgets the SACK of the first record, if it has one.
    pub fn unsack_first(&mut self) {
        if let Some(s) = self.segs.front_mut() {
            s.sacked = false;
        }
    }

    /// Forgets every SACK (the peer may have dropped what it SACKed).
    pub fn clear_sacks(&mut self) {
        for s in &mut self.segs {
            s.sacked = false;
        }
    }

    /// Marks record `i` lost (unless it is SACKed or already marked); returns whether
    /// it was newly marked.
    pub fn mark_lost(&mut self, i: usize) -> bool {
        let s = &mut self.segs[i];
        if s.sacked || s.lost {
            return false;
        }
        s.lost = true;
        self.lost_bytes += s.end - s.start;
        self.lost_from = self.lost_from.min(s.start);
        true
    }

    /// Marks record `i` lost at `now` (RACK's verdict, timed for [`super::Timing`]);
    /// returns whether it was newly marked.
    pub fn mark_lost_at(&mut self, i: usize, now: Duration) -> bool {
        let marked = self.mark_lost(i);
        if marked {
            self.segs[i].lost_at = Some(now);
        }
        marked
    }

    /// The first record marked lost, if any.
    pub fn first_lost(&mut self) -> Option<usize> {
        if self.lost_bytes == 0 {
            self.lost_from = u64::MAX;
            return None;
        }
        let from = self.index_of(self.lost_from);
        let i = (from..self.segs.len()).find(|&i| self.segs[i].lost)?;
        self.lost_from = self.segs[i].start;
        Some(i)
    }

    /// Records taken as lost that were sent only once are not taken as lost any more.
    pub fn unmark_unsent(&mut self) {
        for s in &mut self.segs {
            if s.lost && !s.rtx {
                s.lost = false;
                self.lost_bytes -= s.end - s.start;
            }
        }
    }

    /// Record `i` went out again at `now`.
    pub fn resent(&mut self, i: usize, now: Duration) {
        let s = &mut self.segs[i];
        if s.lost {
            s.lost = false;
            self.lost_bytes -= s.end - s.start;
        }
        s.rtx = true;
        s.xmit = now;
        self.sendings += 1;
        s.order = self.sendings;
    }

    /// Cuts record `i` in two at position `at` (inside it), so that its first part
    /// fits a smaller packet; both parts keep its state.
    pub fn split(&mut self, i: usize, at: u64) {
        let s = self.segs[i];
        debug_assert!(s.start < at && at < s.end);
        self.segs[i].end = at;
        self.segs.insert(i + 1, SentSeg { start: at, ..s });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_millis(1);

    fn filled() -> Sent {
        let mut s = Sent::new(8, 2);
        for k in 0..5u64 {
            s.push(1 + 10 * k, 11 + 10 * k, T * k as u32);
        }
        s
    }

    #[test]
    fn lost_records_are_found_in_order_and_counted() {
        let mut s = filled();
        assert_eq!(s.first_lost(), None);
        s.mark_lost(3);
        s.mark_lost(1);
        s.mark_lost(1);
        assert_eq!(s.lost_bytes(), 20);
        assert_eq!(s.first_lost(), Some(1));
        s.resent(1, T * 9);
        assert_eq!(s.first_lost(), Some(3));
        assert!(s.get(1).rtx && s.get(1).xmit == T * 9);
        s.sack(31, 41, |_, _| true, |_| {});
        assert_eq!(s.first_lost(), None, "a SACKed record is not lost");
        assert_eq!(s.lost_bytes(), 0);
    }

    #[test]
    fn acknowledgment_delivers_what_was_not_sacked() {
        let mut s = filled();
        let mut seen = vec![];
        s.sack(21, 31, |_, _| true, |r| seen.push(r.start));
        s.mark_lost(0);
        s.ack_to(31, |r| seen.push(r.start));
        assert_eq!(seen, [21, 1, 11]);
        assert_eq!(s.len(), 2);
        assert_eq!(s.lost_bytes(), 0);
        assert_eq!(s.index_of(35), 0);
        assert_eq!(s.index_of(51), 2);
    }

    #[test]
    fn partial_sack_is_not_a_sack_and_split_keeps_state() {
        let mut s = filled();
        s.sack(1, 51, |a, b| a >= 11 && b <= 21, |_| {});
        assert!(!s.get(0).sacked && s.get(1).sacked && !s.get(2).sacked);
        s.mark_lost(2);
        s.split(2, 25);
        assert_eq!((s.get(2).start, s.get(2).end), (21, 25));
        assert_eq!((s.get(3).start, s.get(3).end), (25, 31));
        assert!(s.get(2).lost && s.get(3).lost);
        assert_eq!(s.len(), 6);
        s.clear_sacks();
        assert!(!s.get(1).sacked);
        assert!(!s.is_full());
    }
}
