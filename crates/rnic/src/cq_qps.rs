//! A CQ's list of QPs for its consumer's drives, behind a try-lock whose release is a
//! plain store.
//!
//! A busy-polling consumer takes the list on every empty poll, and on the poll that
//! brings a message. With `std::sync::Mutex` that cost two atomic read-modify-writes
//! per poll (the acquiring compare-and-swap and the releasing swap, which must see
//! whether a waiter sleeps); each is a full barrier, about 8-12 ns here, and the
//! release was a third of the list's whole cost. Here the release is a store: nobody
//! sleeps on this lock. Readers (the drives) only try it; the rare writers (a QP
//! connected or dropped, a consumer arming its CQ) spin on it, yielding the CPU, for
//! at most one drive.
//!
//! The list is replaced whole by a writer, never changed in place, so a reader that
//! needs it for longer than a drive clones the `Arc` and lets the lock go.
//! `tests/loom_cq_qps.rs` checks the lock under every interleaving.

use crate::cq_ring::sync::{AtomicBool, Ordering, UnsafeCell};
use std::sync::Arc;

/// A list read by try-lock, replaced whole under the same lock.
pub struct QpList<T> {
    /// Held by a reader or a writer.
    busy: AtomicBool,
    list: UnsafeCell<Arc<Vec<T>>>,
}

// SAFETY: the list is only reached under `busy` (taken with Acquire, given back with
// Release), so at most one thread touches the cell at a time and each sees the last
// holder's writes; what it holds (`Arc<Vec<T>>`) may move between and be shared by
// threads when `T` may.
unsafe impl<T: Send + Sync> Sync for QpList<T> {}

impl<T> Default for QpList<T> {
    fn default() -> Self {
        QpList::new()
    }
}

/// Gives the lock back when dropped, also when the holder unwinds.
struct Held<'a>(&'a AtomicBool);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl<T> QpList<T> {
    /// An empty list.
    pub fn new() -> QpList<T> {
        QpList {
            busy: AtomicBool::new(false),
            list: UnsafeCell::new(Arc::new(Vec::new())),
        }
    }

    fn try_hold(&self) -> Option<Held<'_>> {
        self.busy
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| Held(&self.busy))
    }

    fn hold(&self) -> Held<'_> {
        loop {
            if let Some(h) = self.try_hold() {
                return h;
            }
            // A drive holds it: it ends without waiting for anything.
            #[cfg(loom)]
            loom::thread::yield_now();
            #[cfg(not(loom))]
            std::thread::yield_now();
        }
    }

    /// Runs `f` on the list if nobody else holds it now; `None` otherwise. (`f` may
    /// clone the `Arc` to keep the list beyond the lock.)
    pub fn try_with<R>(&self, f: impl FnOnce(&Arc<Vec<T>>) -> R) -> Option<R> {
        let _held = self.try_hold()?;
        // SAFETY: `busy` is ours until `_held` drops after `f`: no other thread reads
        // or replaces the list meanwhile.
        Some(self.list.with(|p| f(unsafe { &*p })))
    }

    /// The list as it is now (a reference to it: later changes replace it whole).
    pub fn get(&self) -> Arc<Vec<T>> {
        let _held = self.hold();
        // SAFETY: as in `try_with`, the cell is ours while `_held` lives.
        self.list.with(|p| Arc::clone(unsafe { &*p }))
    }

    /// Replaces the list by `f(old)`; returns the old one, to be dropped by the caller
    /// after the lock is given back (its last references may end what it holds).
    pub fn replace(&self, f: impl FnOnce(&[T]) -> Vec<T>) -> Arc<Vec<T>> {
        let _held = self.hold();
        self.list.with_mut(|p| {
            // SAFETY: as in `try_with`, the cell is ours while `_held` lives; the shared
            // borrow for `f` ends before the write below.
            let new = Arc::new(f(unsafe { &*p }));
            // SAFETY: the cell is still ours, and no borrow of it is left.
            std::mem::replace(unsafe { &mut *p }, new)
        })
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::QpList;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn a_reader_finds_the_list_busy_while_a_writer_holds_it_and_whole_after() {
        let l = Arc::new(QpList::<u32>::new());
        l.replace(|_| vec![1, 2, 3]);
        assert_eq!(l.try_with(|v| v.to_vec()), Some(vec![1, 2, 3]));
        // A reader inside its drive keeps writers and other readers out.
        let inner = l.try_with(|_| l.try_with(|v| v.len()));
        assert_eq!(inner, Some(None));
        // Many readers and one writer racing: every list a reader sees is one a writer
        // made whole (n copies of n), never a mixture. The readers start on an empty
        // list, which is whole by that rule ([1, 2, 3] is not).
        l.replace(|_| Vec::new());
        let stop = Arc::new(AtomicBool::new(false));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (l, stop) = (Arc::clone(&l), Arc::clone(&stop));
                std::thread::spawn(move || {
                    let mut seen = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        if let Some(ok) = l.try_with(|v| v.iter().all(|&x| x as usize == v.len())) {
                            assert!(ok, "a list seen half replaced");
                            seen += 1;
                        }
                    }
                    seen
                })
            })
            .collect();
        for n in 0..300u32 {
            let old = l.replace(|_| vec![n; n as usize]);
            drop(old);
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            r.join().unwrap();
        }
        assert_eq!(l.get().len(), 299);
    }

    #[test]
    fn a_reader_that_panics_gives_the_list_back() {
        let l = QpList::<u32>::new();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            l.try_with(|_| panic!("drive failed"))
        }));
        assert!(r.is_err());
        assert_eq!(l.try_with(|v| v.len()), Some(0));
        assert_eq!(l.replace(|_| vec![7]).len(), 0);
    }
}
