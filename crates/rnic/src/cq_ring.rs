//! The completion queue ring: a bounded, lock-free, multi-producer single-consumer
//! queue of [`Completion`]s.
//!
//! Producers are engine threads and QPs progressed by polling consumers; they call
//! [`CqRing::push`] from any thread. The single consumer is `poll_cq`: it claims the
//! ring's unique [`CqConsumer`] handle and pops through it, so two pollers can never
//! run the consumer side at once.
//!
//! # Algorithm
//!
//! An array of `capacity` slots (a power of two) and two ever-increasing positions:
//! `tail`, the next position a producer will claim, and `head`, the next position the
//! consumer will read. Position `p` lives in slot `p % capacity`. Every slot carries a
//! sequence number saying whose turn it is, in the manner of D. Vyukov's bounded
//! queue:
//!
//! - `seq == p`: the slot is free for the producer of position `p`;
//! - `seq == p + 1`: the producer of `p` has written it; the consumer may read it;
//! - after reading, the consumer sets `seq = p + capacity`, handing the slot to the
//!   producer of the next lap.
//!
//! A producer reads `tail`, looks at that slot's sequence, and claims the position by
//! compare-and-swapping `tail` forward only when the slot is free for it. If the slot
//! still belongs to the previous lap, every one of the last `capacity` positions is
//! claimed and not yet consumed: the ring is full and `push` fails with [`Full`]. It
//! never overwrites and never blocks; the CQ layer turns `Full` into a CQ-overflow
//! error event.
//!
//! The sequence numbers carry the synchronisation: a producer's release store of
//! `p + 1` publishes the completion to the consumer's acquire load, and the consumer's
//! release store of `p + capacity` tells the next producer the old value has been read.
//! Completions come out in the order their positions were claimed (so per producer in
//! push order). A producer that is preempted between claiming and publishing holds up
//! the completions claimed after it until it resumes; `pop` reports "empty" meanwhile.
//!
//! The capacity is at least 2: with one slot, "written for position `p`" (`p + 1`) and
//! "free for position `p + 1`" would be the same sequence number.
//!
//! Under `--cfg loom` the atomics and the slot cell come from `loom`, so
//! `tests/loom_cq_ring.rs` can check the algorithm under every interleaving.

use std::fmt;
use std::mem::MaybeUninit;

use softrnic_proto::verbs::Completion;

use self::sync::{AtomicBool, AtomicUsize, Ordering, UnsafeCell};

/// The smallest capacity the ring uses (see the module documentation).
pub const MIN_CAPACITY: usize = 2;

/// The largest capacity that may be requested.
pub const MAX_CAPACITY: usize = 1 << 20;

/// Atomics and cells: `std`'s normally, `loom`'s when built with `--cfg loom` (the
/// CQ's notification state, `cq_notify`, and the polling streak, `handoff`, use them
/// too).
pub(crate) mod sync {
    #[cfg(loom)]
    pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
    #[cfg(not(loom))]
    pub(crate) use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};

    /// An `UnsafeCell` with loom's closure-based API, so the ring's code is the same
    /// in both builds and loom can track every access to slot contents.
    #[derive(Debug)]
    pub(crate) struct UnsafeCell<T>(
        #[cfg(loom)] loom::cell::UnsafeCell<T>,
        #[cfg(not(loom))] std::cell::UnsafeCell<T>,
    );

    impl<T> UnsafeCell<T> {
        pub(crate) fn new(value: T) -> Self {
            #[cfg(loom)]
            return Self(loom::cell::UnsafeCell::new(value));
            #[cfg(not(loom))]
            return Self(std::cell::UnsafeCell::new(value));
        }

        /// Runs `f` with a pointer for reading the contents.
        pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
            #[cfg(loom)]
            return self.0.with(f);
            #[cfg(not(loom))]
            return f(self.0.get());
        }

        /// Runs `f` with a pointer for writing the contents.
        pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
            #[cfg(loom)]
            return self.0.with_mut(f);
            #[cfg(not(loom))]
            return f(self.0.get());
        }
    }
}

// Slots are never dropped in place: a `MaybeUninit<Completion>` left in the ring when
// it drops needs no destructor because `Completion` has none.
const _: () = assert!(!std::mem::needs_drop::<Completion>());

/// Errors from [`CqRing::new`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RingError {
    /// The requested capacity is 0 or over [`MAX_CAPACITY`].
    #[error("CQ ring capacity {0} is outside 1..={MAX_CAPACITY}")]
    Capacity(usize),
}

/// [`CqRing::push`] found the ring full; the completion is handed back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("completion queue ring is full")]
pub struct Full(pub Completion);

/// Keeps `head` and `tail` on separate cache lines (128 bytes covers the adjacent-line
/// prefetcher on x86), so producers bumping `tail` do not bounce the consumer's line.
#[repr(align(128))]
struct Padded<T>(T);

struct Slot {
    /// Whose turn it is; see the module documentation.
    seq: AtomicUsize,
    value: UnsafeCell<MaybeUninit<Completion>>,
}

/// A bounded MPSC ring of completions. See the [module documentation](self).
pub struct CqRing {
    /// Next position a producer claims.
    tail: Padded<AtomicUsize>,
    /// Next position the consumer reads. Written only by the holder of the consumer
    /// handle; read by `len`.
    head: Padded<AtomicUsize>,
    /// Whether a [`CqConsumer`] currently exists.
    consumer_claimed: AtomicBool,
    /// `capacity - 1`.
    mask: usize,
    slots: Box<[Slot]>,
}

// SAFETY: the slots' `UnsafeCell` contents are only accessed under the sequence-number
// protocol: a producer writes a slot only after winning the CAS for a position whose
// slot sequence said "free" (acquire), and publishes with a release store; the unique
// consumer reads a slot only after an acquire load saw "written", and frees it with a
// release store. So no two threads ever access one slot's value concurrently, and each
// access happens-after the previous one. `Completion` is `Send`, so moving values
// between threads through the ring is allowed. All other fields are atomics or
// immutable.
unsafe impl Sync for CqRing {}

// SAFETY: the ring owns its slots; the values are `Completion`s (`Send`), and the
// atomics are `Send`. Nothing in it is tied to a thread.
unsafe impl Send for CqRing {}

impl CqRing {
    /// Creates a ring holding at least `capacity` completions (`1..=`[`MAX_CAPACITY`]),
    /// rounded up to a power of two and to at least [`MIN_CAPACITY`]; see
    /// [`capacity`](Self::capacity) for the result.
    pub fn new(capacity: usize) -> Result<CqRing, RingError> {
        if !(1..=MAX_CAPACITY).contains(&capacity) {
            return Err(RingError::Capacity(capacity));
        }
        let cap = capacity.next_power_of_two().max(MIN_CAPACITY);
        let slots = (0..cap)
            .map(|i| Slot {
                seq: AtomicUsize::new(i),
                value: UnsafeCell::new(MaybeUninit::uninit()),
            })
            .collect();
        Ok(CqRing {
            tail: Padded(AtomicUsize::new(0)),
            head: Padded(AtomicUsize::new(0)),
            consumer_claimed: AtomicBool::new(false),
            mask: cap - 1,
            slots,
        })
    }

    /// The number of completions the ring holds when full.
    pub fn capacity(&self) -> usize {
        self.mask + 1
    }

    /// Appends `c`. Lock-free; callable from any thread.
    ///
    /// Fails with [`Full`] (returning `c`) when every slot is occupied — by published
    /// completions or by pushes still in progress — and never overwrites.
    pub fn push(&self, c: Completion) -> Result<(), Full> {
        self.push_pos(c).map(|_| ())
    }

    /// [`push`](Self::push), returning the position the completion took (for
    /// [`claimed_after`](Self::claimed_after)).
    pub fn push_pos(&self, c: Completion) -> Result<usize, Full> {
        let mut pos = self.tail.0.load(Ordering::Relaxed);
        loop {
            let slot = &self.slots[pos & self.mask];
            // Acquire: if the slot is free for `pos`, the consumer's read of the
            // previous lap's value happened before our write below.
            let seq = slot.seq.load(Ordering::Acquire);
            // Positions wrap around `usize`; the signed distance is what matters.
            let diff = seq.wrapping_sub(pos) as isize;
            if diff == 0 {
                // The slot is free for `pos`: try to claim the position. Relaxed is
                // enough: the CAS only decides who owns `pos`; ordering with the
                // consumer goes through `seq`.
                match self.tail.0.compare_exchange_weak(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        // SAFETY: we won position `pos`, and the slot's sequence (`pos`)
                        // says its previous value was consumed; no other producer can
                        // claim `pos` again and the consumer will not read the slot until
                        // we store `pos + 1` below, so this write is the only access.
                        slot.value
                            .with_mut(|p| unsafe { p.write(MaybeUninit::new(c)) });
                        // Release: publishes the value to the consumer.
                        slot.seq.store(pos.wrapping_add(1), Ordering::Release);
                        return Ok(pos);
                    }
                    Err(current) => pos = current,
                }
            } else if diff < 0 {
                // The slot still holds (or is being filled with) the completion of
                // position `pos - capacity`, so positions `pos - capacity .. pos` are
                // all claimed and unconsumed: really full.
                return Err(Full(c));
            } else {
                // Another producer claimed `pos` already; catch up.
                pos = self.tail.0.load(Ordering::Relaxed);
            }
        }
    }

    /// Appends a run of completions with one claim: the positions `p .. p + n` are
    /// taken by a single compare-and-swap of `tail` when all their slots are free, then
    /// each slot is written and published in order, as [`push_pos`](Self::push_pos)
    /// publishes one. Returns `p`, or `None` (nothing pushed) when the run is empty or
    /// does not fit now; the caller then pushes one by one, which reports [`Full`] at
    /// the right completion.
    ///
    /// One check suffices for the whole run: the consumer frees slots in position order,
    /// so the slot of `p + n - 1` being free for that position (seen with acquire)
    /// means every slot before it was read too, and its read happened before ours.
    pub fn push_run(&self, run: &[Completion]) -> Option<usize> {
        let n = run.len();
        if n == 0 || n > self.capacity() {
            return None;
        }
        let mut pos = self.tail.0.load(Ordering::Relaxed);
        loop {
            let last = pos.wrapping_add(n - 1);
            // Acquire: the consumer's reads of the previous lap's values in every slot
            // of the run happened before the writes below.
            let seq = self.slots[last & self.mask].seq.load(Ordering::Acquire);
            let diff = seq.wrapping_sub(last) as isize;
            if diff == 0 {
                // Free for `last`, so for every position of the run: claim them all.
                // (No producer can claim `last` without moving `tail` past `pos`.)
                match self.tail.0.compare_exchange_weak(
                    pos,
                    pos.wrapping_add(n),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        for (i, c) in run.iter().enumerate() {
                            let p = pos.wrapping_add(i);
                            let slot = &self.slots[p & self.mask];
                            // SAFETY: we won positions `pos .. pos + n`, and their slots
                            // were read by the consumer (see above); no producer can
                            // claim them again and the consumer will not read a slot
                            // until we store `p + 1`, so this write is the only access.
                            slot.value
                                .with_mut(|ptr| unsafe { ptr.write(MaybeUninit::new(*c)) });
                            crate::chaos::point();
                            // Release: publishes the value to the consumer.
                            slot.seq.store(p.wrapping_add(1), Ordering::Release);
                        }
                        return Some(pos);
                    }
                    Err(current) => pos = current,
                }
            } else if diff < 0 {
                // The last slot still holds an unconsumed completion: no room for all.
                return None;
            } else {
                // Another producer claimed positions of the run; catch up.
                pos = self.tail.0.load(Ordering::Relaxed);
            }
        }
    }

    /// Whether a producer has claimed a position after `pos` (a position returned by
    /// [`push_pos`](Self::push_pos)). While `pos` was being written, the consumer could
    /// not see those (completions come out in position order).
    pub fn claimed_after(&self, pos: usize) -> bool {
        self.tail.0.load(Ordering::Acquire) != pos.wrapping_add(1)
    }

    /// Claims the consumer role. Returns `None` while another [`CqConsumer`] of this
    /// ring exists. The role is released when the handle drops, and may move between
    /// threads (the claim synchronises the consumer state with the previous holder).
    pub fn consumer(&self) -> Option<CqConsumer<'_>> {
        // Acquire pairs with the release in `CqConsumer::drop`, so the new holder sees
        // the previous holder's `head` and slot reads as done. A compare-exchange
        // rather than a swap: a failed claim then writes nothing.
        self.consumer_claimed
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| CqConsumer { ring: self })
    }

    /// The number of completions claimed by producers and not yet consumed (a snapshot;
    /// it may include pushes that are still being written).
    pub fn len(&self) -> usize {
        // Read `head` first: `tail` read afterwards is at least as new, and
        // `head <= tail` always holds, so the difference cannot underflow.
        let head = self.head.0.load(Ordering::Acquire);
        let tail = self.tail.0.load(Ordering::Acquire);
        tail.wrapping_sub(head).min(self.capacity())
    }

    /// Pushes so far (the tail's position): tests tell a completion that went through
    /// the ring from one handed over without it (`crate::cq_direct`).
    #[cfg(test)]
    pub(crate) fn pushed(&self) -> usize {
        self.tail.0.load(Ordering::Acquire)
    }

    /// Whether [`len`](Self::len) is zero.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reads the completion at position `head` if it has been published, and frees its
    /// slot for the next lap. Does not advance `head`.
    ///
    /// Only the holder of the consumer role may call this, with `head` equal to the
    /// consumer's current position (`CqConsumer` guarantees both).
    fn take(&self, head: usize) -> Option<Completion> {
        let slot = &self.slots[head & self.mask];
        // Acquire: pairs with the producer's release of `head + 1`.
        if slot.seq.load(Ordering::Acquire) != head.wrapping_add(1) {
            // Empty, or the producer of `head` has not finished writing.
            return None;
        }
        // SAFETY: the sequence `head + 1` means the producer of `head` wrote the slot and
        // released it to us (our acquire load makes the write visible); we are the only
        // consumer, and producers will not touch the slot until we store
        // `head + capacity` below. The value is initialised by that write, and
        // `Completion: Copy`, so reading it out leaves nothing to drop.
        let c = slot.value.with(|p| unsafe { (*p).assume_init() });
        // Release: our read of the value happens before the next lap's producer write.
        slot.seq
            .store(head.wrapping_add(self.capacity()), Ordering::Release);
        Some(c)
    }
}

impl fmt::Debug for CqRing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CqRing")
            .field("capacity", &self.capacity())
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

/// The unique consumer side of a [`CqRing`], obtained from [`CqRing::consumer`].
///
/// At most one exists per ring at a time, and popping takes `&mut self`, so the
/// single-consumer requirement of the algorithm is enforced by the types. (`Sync` is
/// harmless: a shared `&CqConsumer` cannot pop.)
pub struct CqConsumer<'a> {
    ring: &'a CqRing,
}

impl CqConsumer<'_> {
    /// The ring this handle consumes.
    pub fn ring(&self) -> &CqRing {
        self.ring
    }

    /// Removes the oldest published completion.
    pub fn pop(&mut self) -> Option<Completion> {
        // Relaxed: only the consumer writes `head`, and a new holder synchronised with
        // the previous one through the claim flag.
        let head = self.ring.head.0.load(Ordering::Relaxed);
        let c = self.ring.take(head)?;
        self.ring
            .head
            .0
            .store(head.wrapping_add(1), Ordering::Release);
        Some(c)
    }

    /// Moves up to `out.len()` completions, oldest first, into `out`; returns how many.
    ///
    /// Looks only at the positions producers had claimed when it started (`tail`, read
    /// once): a slot beyond them cannot be published yet, and checking it cost every
    /// pop a second turn of the loop (a ping-pong pops one completion at a time). A
    /// completion claimed after that read is what a pop a moment earlier would have
    /// missed too; the next pop takes it. The ring's fields are read once, not per slot.
    pub fn pop_into(&mut self, out: &mut [Completion]) -> usize {
        let ring = self.ring;
        let start = ring.head.0.load(Ordering::Relaxed);
        // Relaxed: only a bound; each slot's sequence (acquire) publishes its value. It
        // is at least `start` (the claims of everything consumed happened before).
        let tail = ring.tail.0.load(Ordering::Relaxed);
        let mut head = start;
        for dst in out.iter_mut() {
            if head == tail {
                break;
            }
            let slot = &ring.slots[head & ring.mask];
            // Acquire: pairs with the producer's release of `head + 1`.
            if slot.seq.load(Ordering::Acquire) != head.wrapping_add(1) {
                // The producer of `head` has not finished writing.
                break;
            }
            // SAFETY: as in `CqRing::take`: the sequence `head + 1` means the producer
            // of `head` wrote the slot and released it to us, this handle is the only
            // consumer (`&mut self`), and no producer touches the slot before we store
            // `head + capacity` below. The value is initialised, `MaybeUninit<Completion>`
            // has `Completion`'s layout, and `dst` is a distinct, valid
            // `&mut Completion` (the slot belongs to the ring alone); `Completion:
            // Copy`, so nothing is dropped.
            slot.value
                .with(|p| unsafe { std::ptr::copy_nonoverlapping(p.cast::<Completion>(), dst, 1) });
            // Release: our read of the value happens before the next lap's producer write.
            slot.seq.store(
                head.wrapping_add(ring.mask).wrapping_add(1),
                Ordering::Release,
            );
            head = head.wrapping_add(1);
        }
        if head != start {
            ring.head.0.store(head, Ordering::Release);
        }
        head.wrapping_sub(start)
    }
}

impl Drop for CqConsumer<'_> {
    fn drop(&mut self) {
        // Release: hands our `head` and slot reads to the next holder.
        self.ring.consumer_claimed.store(false, Ordering::Release);
    }
}

impl fmt::Debug for CqConsumer<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CqConsumer")
            .field("ring", self.ring)
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
#[path = "cq_ring_tests.rs"]
mod tests;
