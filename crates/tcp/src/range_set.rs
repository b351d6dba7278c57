//! A bounded set of disjoint ranges of stream positions: what the receiver holds beyond
//! the next expected octet (the SACK blocks it reports) and what the sender knows the
//! peer holds (its SACK scoreboard). Fixed capacity, no allocation: a peer that makes
//! many holes gets its extra ranges refused, not stored.

use arrayvec::ArrayVec;

/// The most ranges any set holds; [`RangeSet::new`] takes a lower limit.
pub const MAX_RANGES: usize = 32;

/// One range `[start, end)` and when it last grew (for "most recent first" SACK order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub start: u64,
    pub end: u64,
    pub stamp: u64,
}

/// Sorted, disjoint, non-adjacent ranges (adjacent ones are merged).
#[derive(Debug, Clone)]
pub(crate) struct RangeSet {
    spans: ArrayVec<Span, MAX_RANGES>,
    limit: usize,
    clock: u64,
}

impl RangeSet {
    pub fn new(limit: usize) -> RangeSet {
        RangeSet {
            spans: ArrayVec::new(),
            limit: limit.clamp(1, MAX_RANGES),
            clock: 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    pub fn clear(&mut self) {
        self.spans.clear();
    }

    /// Ranges held.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    #[cfg(test)]
    pub fn spans(&self) -> &[Span] {
        &self.spans
    }

    /// Octets covered in all.
    pub fn bytes(&self) -> u64 {
        self.spans.iter().map(|s| s.end - s.start).sum()
    }

    /// Whether `[start, end)` can be inserted without exceeding the limit.
    pub fn can_insert(&self, start: u64, end: u64) -> bool {
        self.spans.len() < self.limit || self.touching(start, end).next().is_some()
    }

    fn touching(&self, start: u64, end: u64) -> impl Iterator<Item = usize> + '_ {
        self.spans
            .iter()
            .enumerate()
            .filter(move |(_, s)| s.start <= end && s.end >= start)
            .map(|(i, _)| i)
    }

    /// Adds `[start, end)`, merging what it overlaps or touches; false (and nothing
    /// changes) when it would need a range beyond the limit.
    pub fn insert(&mut self, start: u64, end: u64) -> bool {
        if start >= end {
            return true;
        }
        if !self.can_insert(start, end) {
            return false;
        }
        self.clock += 1;
        let mut merged = Span {
            start,
            end,
            stamp: self.clock,
        };
        let mut at = self.spans.partition_point(|s| s.end < start);
        while at < self.spans.len() && self.spans[at].start <= end {
            let s = self.spans.remove(at);
            merged.start = merged.start.min(s.start);
            merged.end = merged.end.max(s.end);
        }
        at = self.spans.partition_point(|s| s.end < merged.start);
        self.spans.insert(at, merged);
        true
    }

    /// Forgets everything below `pos`.
    pub fn remove_below(&mut self, pos: u64) {
        let gone = self.spans.partition_point(|s| s.end <= pos);
        self.spans.drain(..gone);
        if let Some(s) = self.spans.first_mut() {
            s.start = s.start.max(pos);
        }
    }

    /// Removes and returns the first range if it starts at or before `pos`.
    pub fn pop_reached(&mut self, pos: u64) -> Option<Span> {
        match self.spans.first() {
            Some(s) if s.start <= pos => Some(self.spans.remove(0)),
            _ => None,
        }
    }

    /// The first position at or after `pos` that no range covers.
    pub fn next_uncovered(&self, pos: u64) -> u64 {
        match self.spans.iter().find(|s| s.end > pos) {
            Some(s) if s.start <= pos => s.end,
            _ => pos,
        }
    }

    /// Octets of `[start, end)` covered by ranges.
    pub fn covered(&self, start: u64, end: u64) -> u64 {
        self.spans
            .iter()
            .map(|s| s.end.min(end).saturating_sub(s.start.max(start)))
            .sum()
    }

    /// The first piece of `[start, end)` that a range covers.
    pub fn first_overlap(&self, start: u64, end: u64) -> Option<(u64, u64)> {
        self.spans
            .iter()
            .find(|s| s.end > start && s.start < end)
            .map(|s| (s.start.max(start), s.end.min(end)))
    }

    /// The range that holds all of `[start, end)`, if one does.
    pub fn containing(&self, start: u64, end: u64) -> Option<(u64, u64)> {
        self.spans
            .iter()
            .find(|s| s.start <= start && end <= s.end)
            .map(|s| (s.start, s.end))
    }

    /// The pieces of `[start, end)` that no range covers, in order.
    pub fn gaps(&self, start: u64, end: u64) -> ArrayVec<(u64, u64), { MAX_RANGES + 1 }> {
        let mut out = ArrayVec::new();
        let mut at = start;
        for s in &self.spans {
            if s.end <= at {
                continue;
            }
            if s.start >= end {
                break;
            }
            if s.start > at {
                out.push((at, s.start));
            }
            at = s.end;
        }
        if at < end {
            out.push((at, end));
        }
        out
    }

    /// Up to `n` ranges, the most recently grown first.
    pub fn most_recent(&self, n: usize) -> ArrayVec<Span, MAX_RANGES> {
        let mut v: ArrayVec<Span, MAX_RANGES> = self.spans.iter().copied().collect();
        v.sort_unstable_by_key(|s| std::cmp::Reverse(s.stamp));
        v.truncate(n);
        v
    }

    /// The count of insertions so far: a range grown after this is newer than it.
    pub fn clock(&self) -> u64 {
        self.clock
    }

    /// How many ranges grew after the insertion counted `clock`.
    pub fn grown_since(&self, clock: u64) -> usize {
        self.spans.iter().filter(|s| s.stamp > clock).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ranges(s: &RangeSet) -> Vec<(u64, u64)> {
        s.spans().iter().map(|s| (s.start, s.end)).collect()
    }

    #[test]
    fn merges_overlapping_and_adjacent() {
        let mut s = RangeSet::new(8);
        assert!(s.insert(10, 20));
        assert!(s.insert(30, 40));
        assert!(s.insert(20, 25));
        assert_eq!(ranges(&s), [(10, 25), (30, 40)]);
        assert!(s.insert(24, 31));
        assert_eq!(ranges(&s), [(10, 40)]);
        assert_eq!(s.gaps(0, 50).as_slice(), [(0, 10), (40, 50)]);
        assert_eq!(s.next_uncovered(15), 40);
        assert_eq!(s.next_uncovered(5), 5);
        assert_eq!(s.covered(0, 15), 5);
        assert_eq!(s.first_overlap(0, 12), Some((10, 12)));
        assert_eq!(s.first_overlap(40, 50), None);
        assert_eq!(s.containing(12, 20), Some((10, 40)));
        assert_eq!(s.containing(5, 20), None);
    }

    #[test]
    fn refuses_beyond_the_limit_but_still_merges() {
        let mut s = RangeSet::new(2);
        assert!(s.insert(10, 20));
        assert!(s.insert(30, 40));
        assert!(!s.insert(50, 60));
        assert!(s.insert(40, 45));
        assert_eq!(ranges(&s), [(10, 20), (30, 45)]);
    }

    #[test]
    fn recency_order() {
        let mut s = RangeSet::new(8);
        s.insert(10, 20);
        s.insert(30, 40);
        s.insert(50, 60);
        s.insert(20, 21);
        let r: Vec<_> = s.most_recent(2).iter().map(|s| s.start).collect();
        assert_eq!(r, [10, 50]);
    }

    proptest! {
        /// The set covers exactly the union of what was inserted (when under the limit)
        /// and stays sorted, disjoint and non-adjacent.
        #[test]
        fn covers_the_union(ops in proptest::collection::vec((0u64..200, 1u64..20), 0..40), cut in 0u64..220) {
            let mut s = RangeSet::new(MAX_RANGES);
            let mut model = vec![false; 240];
            for (a, len) in ops {
                if s.insert(a, a + len) {
                    for m in &mut model[a as usize..(a + len) as usize] {
                        *m = true;
                    }
                }
            }
            s.remove_below(cut);
            for m in &mut model[..cut as usize] {
                *m = false;
            }
            for w in s.spans().windows(2) {
                prop_assert!(w[0].end < w[1].start);
            }
            for (i, &m) in model.iter().enumerate() {
                prop_assert_eq!(s.covered(i as u64, i as u64 + 1) == 1, m);
            }
            prop_assert_eq!(s.bytes(), model.iter().filter(|&&m| m).count() as u64);
        }
    }
}
