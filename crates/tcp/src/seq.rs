//! TCP sequence numbers: 32 bits that wrap around, compared within half the number
//! space (RFC 9293 section 3.4), so "before" and "after" stay right across the wrap.
//!
//! The connection itself counts in 64-bit stream positions that never wrap and converts
//! at the edge ([`SeqNum::offset_from`]); this type is what travels on the wire.

use std::fmt;
use std::ops::{Add, Sub};

/// A sequence (or acknowledgment) number as it travels in a TCP header.
///
/// Ordering is modular: `a.lt(b)` means `b` is less than 2^31 ahead of `a`. That
/// relation is not transitive over the whole space, which is why the type has methods
/// and not `Ord`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SeqNum(pub u32);

impl SeqNum {
    /// The signed distance from `other` to `self` (positive when `self` is after).
    pub fn delta(self, other: SeqNum) -> i32 {
        self.0.wrapping_sub(other.0) as i32
    }

    /// `self` comes strictly before `other`.
    pub fn lt(self, other: SeqNum) -> bool {
        self.delta(other) < 0
    }

    /// `self` comes before `other` or is `other`.
    pub fn le(self, other: SeqNum) -> bool {
        self.delta(other) <= 0
    }

    /// `self` comes strictly after `other`.
    pub fn gt(self, other: SeqNum) -> bool {
        self.delta(other) > 0
    }

    /// `self` comes after `other` or is `other`.
    pub fn ge(self, other: SeqNum) -> bool {
        self.delta(other) >= 0
    }

    /// `self` lies in the `len` numbers starting at `start` (empty when `len` is 0).
    pub fn in_window(self, start: SeqNum, len: u32) -> bool {
        self.0.wrapping_sub(start.0) < len
    }

    /// The later of the two.
    pub fn max(self, other: SeqNum) -> SeqNum {
        if self.lt(other) { other } else { self }
    }

    /// The earlier of the two.
    pub fn min(self, other: SeqNum) -> SeqNum {
        if self.lt(other) { self } else { other }
    }

    /// The stream position of `self`, given that `base` is at position `base_pos`:
    /// `self` is taken as the number within 2^31 of `base`. `None` when that would lie
    /// before position 0.
    pub fn offset_from(self, base: SeqNum, base_pos: u64) -> Option<u64> {
        base_pos.checked_add_signed(i64::from(self.delta(base)))
    }
}

impl Add<u32> for SeqNum {
    type Output = SeqNum;
    fn add(self, n: u32) -> SeqNum {
        SeqNum(self.0.wrapping_add(n))
    }
}

impl Sub<u32> for SeqNum {
    type Output = SeqNum;
    fn sub(self, n: u32) -> SeqNum {
        SeqNum(self.0.wrapping_sub(n))
    }
}

impl fmt::Debug for SeqNum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SeqNum({})", self.0)
    }
}

impl fmt::Display for SeqNum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const HALF: u32 = 1 << 31;

    proptest! {
        #[test]
        fn adding_moves_forward(a: u32, n in 1..HALF) {
            let a = SeqNum(a);
            let b = a + n;
            prop_assert!(a.lt(b) && a.le(b) && b.gt(a) && b.ge(a));
            prop_assert!(!b.lt(a) && !a.gt(b));
            prop_assert_eq!(b.delta(a), n as i32);
            prop_assert_eq!(a.delta(b), -(n as i32));
            prop_assert_eq!(b - n, a);
            prop_assert_eq!(a.max(b), b);
            prop_assert_eq!(a.min(b), a);
        }

        #[test]
        fn equal_is_neither_before_nor_after(a: u32) {
            let a = SeqNum(a);
            prop_assert!(a.le(a) && a.ge(a) && !a.lt(a) && !a.gt(a));
        }

        #[test]
        fn window_membership_wraps(start: u32, len in 0..HALF, k: u32) {
            let start = SeqNum(start);
            let x = start + k;
            prop_assert_eq!(x.in_window(start, len), k < len);
        }

        #[test]
        fn positions_round_trip(base: u32, base_pos in (1u64 << 31)..(1u64 << 40), d in -(HALF as i64 - 1)..(HALF as i64)) {
            let base = SeqNum(base);
            let x = SeqNum(base.0.wrapping_add(d as u32));
            prop_assert_eq!(x.offset_from(base, base_pos), Some((base_pos as i64 + d) as u64));
        }
    }

    #[test]
    fn across_the_wrap() {
        let a = SeqNum(u32::MAX - 1);
        let b = a + 3;
        assert_eq!(b, SeqNum(1));
        assert!(a.lt(b));
        assert_eq!(b.delta(a), 3);
        assert!(SeqNum(0).in_window(a, 3));
        assert!(!SeqNum(1).in_window(a, 3));
        assert_eq!(SeqNum(5).offset_from(SeqNum(10), 3), None);
    }
}
