//! The receive queue's ring: the few queue operations [`super::rq::Rq`] uses, each a
//! handful of inlined instructions.
//!
//! `VecDeque::push_back` is a call into std on every repost (about 34 instructions
//! with its argument, traced in session 27). Here the capacity is a power of two, so a
//! position is `head + i` masked, and the push stores its slot in place; growing (a
//! doubling, as the queue only grows past what a program posted while messages held
//! entries bound) is out of line.

/// A FIFO of `Copy` entries in a power-of-two ring: `len` entries from `head` on.
#[derive(Debug)]
pub(super) struct Ring<T> {
    slots: Box<[T]>,
    head: usize,
    len: usize,
}

impl<T: Copy + Default> Ring<T> {
    /// An empty ring with room for `room` entries before its first growth (no
    /// allocation for 0).
    pub(super) fn with_room(room: usize) -> Self {
        let cap = if room == 0 {
            0
        } else {
            room.next_power_of_two()
        };
        Ring {
            slots: vec![T::default(); cap].into_boxed_slice(),
            head: 0,
            len: 0,
        }
    }

    /// Entries held.
    #[inline(always)]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The mask of a position (capacity less one; unused while the capacity is 0).
    #[inline(always)]
    fn mask(&self) -> usize {
        self.slots.len().wrapping_sub(1)
    }

    /// Appends `value` at the back.
    #[inline(always)]
    pub(super) fn push_back(&mut self, value: T) {
        if self.len == self.slots.len() {
            self.grow();
        }
        let at = (self.head + self.len) & self.mask();
        if let Some(slot) = self.slots.get_mut(at) {
            *slot = value;
            self.len += 1;
        }
    }

    /// Doubles the capacity (at least 4), the entries moved to start at position 0.
    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        let cap = (self.slots.len() * 2).max(4);
        let mut slots = vec![T::default(); cap].into_boxed_slice();
        for (i, s) in slots.iter_mut().take(self.len).enumerate() {
            *s = self.slots[(self.head + i) & self.mask()];
        }
        self.slots = slots;
        self.head = 0;
    }

    /// Removes and returns the front entry.
    #[inline(always)]
    pub(super) fn pop_front(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        let value = *self.slots.get(self.head)?;
        self.head = (self.head + 1) & self.mask();
        self.len -= 1;
        Some(value)
    }

    /// The front entry (`head` is always a position in the ring, so no mask).
    #[inline(always)]
    pub(super) fn front(&self) -> Option<&T> {
        if self.len == 0 {
            return None;
        }
        self.slots.get(self.head)
    }

    /// The `i`-th entry from the front.
    #[inline(always)]
    pub(super) fn get(&self, i: usize) -> Option<&T> {
        if i >= self.len {
            return None;
        }
        self.slots.get((self.head + i) & self.mask())
    }

    /// The entries, front first.
    pub(super) fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        (0..self.len).filter_map(move |i| self.get(i))
    }

    /// Removes every entry (the capacity stays).
    pub(super) fn clear(&mut self) {
        self.head = 0;
        self.len = 0;
    }

    /// Removes and returns the `i`-th entry; those after it move one place forward.
    pub(super) fn remove(&mut self, i: usize) -> Option<T> {
        let value = *self.get(i)?;
        let mask = self.mask();
        for j in i..self.len - 1 {
            self.slots[(self.head + j) & mask] = self.slots[(self.head + j + 1) & mask];
        }
        self.len -= 1;
        Some(value)
    }
}

#[cfg(test)]
#[path = "rq_ring_tests.rs"]
mod tests;
