//! The QP's lock: a mutex whose release is a plain store while nobody sleeps on it.
//!
//! A busy-polling consumer takes its QP's lock twice per message and side (the drive
//! that reads the message, the post of the reply), three times for a Send (and the
//! repost). `std::sync::Mutex` releases with an atomic swap, because it must see
//! whether a thread sleeps on the lock; each swap is a full barrier, about 8-10 ns
//! more than a store here between other work. Engines and other posting threads do
//! sleep on a QP's lock, so their presence must still be seen: a thread about to
//! sleep counts itself in `sleepers` and then makes every running thread of the
//! process pass a full barrier (`membarrier(2)`, the heavy side of an asymmetric
//! fence). The holder releases with a store, a compiler fence, and a load of
//! `sleepers`: either that load sees the sleeper (and wakes it through the futex), or
//! the barrier made the release store visible before the sleeper looks at the word
//! (and it does not sleep). Sleeping is rare (a consumer's passes are short); the
//! sleeper pays a system call of a few microseconds then, the holder nothing.
//!
//! **Wake once.** A sleeper that was woken stays counted in `sleepers` until it runs
//! again, and on two busy CPUs that can take a while: session 16's first version woke
//! on every release meanwhile (35,831-87,701 `futex(WAKE)` calls in one `write_lat -n
//! 100000`, against 3,223-3,762 with std's mutex). Now a release wakes only while no
//! wake is outstanding (`woken`, set by the waker). Sleepers sleep on a wake count
//! (`wakes`), not on the lock word: one read before the look at the lock, so a wake
//! given between that look and the sleep ends the sleep at once (the futex compares
//! the count). A sleeper reads the count, then clears `woken`, each time it is about
//! to look at the lock: a wake set after the clear moves the count after the read, so
//! it ends the sleep; one set before is cleared, and a later release wakes again. So
//! while a woken thread has not run, releases cost a load and a swap, no system call.
//!
//! Where the kernel has no expedited membarrier, the release is a swap and the
//! sleeper's barrier an ordinary full fence.
//! `tests/loom_qp_lock.rs` checks the protocol under every interleaving, with the
//! futex and the barriers modelled.

use crate::cq_ring::sync::UnsafeCell;
use std::ops::{Deref, DerefMut};

#[cfg(loom)]
use loom::sync::atomic::{AtomicBool, AtomicU32, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

const FREE: u32 = 0;
const HELD: u32 = 1;

/// Tries of a contended lock before the thread goes to sleep (a drive or a post
/// holds it for a few microseconds at most; sleeping costs a system call each way).
#[cfg(not(loom))]
const SPINS: u32 = 200;
#[cfg(loom)]
const SPINS: u32 = 0;

/// A thread panicked while it held the lock (as `std::sync::PoisonError` says).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Poisoned;

impl From<Poisoned> for crate::error::Error {
    fn from(_: Poisoned) -> Self {
        crate::error::Error::Internal("a lock was poisoned by a thread that panicked holding it")
    }
}

/// A mutex for the QP's state (see the module documentation).
pub struct QpLock<T> {
    state: AtomicU32,
    /// Threads asleep on `state`, or about to be: counted before they look at it.
    sleepers: AtomicU32,
    /// A wake was given that no sleeper has seen yet (see "Wake once" in the module
    /// documentation).
    woken: AtomicBool,
    /// Wakes given: what sleepers sleep on.
    wakes: AtomicU32,
    /// `futex(WAKE)` calls made by releases, for the tests of the wake-once rule.
    #[cfg(test)]
    wake_calls: std::sync::atomic::AtomicU64,
    poisoned: AtomicBool,
    parking: park::Parking,
    value: UnsafeCell<T>,
}

// SAFETY: the value is reached only through a guard, and a guard exists only while
// `state` is HELD by its thread (taken with Acquire, given back with Release), so one
// thread at a time touches it and sees the last holder's writes; the value itself
// moves between threads, hence `T: Send`.
unsafe impl<T: Send> Sync for QpLock<T> {}

impl<T> QpLock<T> {
    pub fn new(value: T) -> Self {
        // Decided (and registered with the kernel) before any thread contends, so the
        // releases only read the answer.
        park::asymmetric();
        QpLock {
            state: AtomicU32::new(FREE),
            sleepers: AtomicU32::new(0),
            woken: AtomicBool::new(false),
            wakes: AtomicU32::new(0),
            #[cfg(test)]
            wake_calls: std::sync::atomic::AtomicU64::new(0),
            poisoned: AtomicBool::new(false),
            parking: park::Parking::new(),
            value: UnsafeCell::new(value),
        }
    }

    /// Takes the lock if it is free now.
    pub fn try_lock(&self) -> Option<Result<QpGuard<'_, T>, Poisoned>> {
        self.take().then(|| self.guard())
    }

    /// Takes the lock, sleeping while another thread holds it.
    pub fn lock(&self) -> Result<QpGuard<'_, T>, Poisoned> {
        if !self.take() {
            self.lock_contended();
        }
        self.guard()
    }

    fn take(&self) -> bool {
        self.state
            .compare_exchange(FREE, HELD, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    #[cold]
    fn lock_contended(&self) {
        for _ in 0..SPINS {
            std::hint::spin_loop();
            if self.state.load(Ordering::Relaxed) == FREE && self.take() {
                return;
            }
        }
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        loop {
            // The count first, then the clear: a wake that finds `woken` cleared moves
            // the count after this read, so the sleep below ends; a wake given before
            // the clear is cleared, and the next release wakes again. (The other order
            // loses a wake: cleared, then a wake given and counted, then read as seen.)
            let seen = self.wakes.load(Ordering::SeqCst);
            // A read-modify-write, as the waker's: the two are ordered whatever the
            // threads saw before (a store could be ordered before a waker's swap that
            // it did not see, and leave `woken` set; loom finds that).
            self.woken.swap(false, Ordering::SeqCst);
            if park::asymmetric() {
                // After this, a holder that released before it is seen released, and
                // one that releases later sees this sleeper and the cleared `woken`
                // (module documentation).
                park::heavy_barrier();
            } else {
                // The release is a swap then: a full fence orders this side as well.
                std::sync::atomic::fence(Ordering::SeqCst);
            }
            if self.take() {
                break;
            }
            self.parking.wait(&self.wakes, seen);
        }
        self.sleepers.fetch_sub(1, Ordering::Relaxed);
    }

    fn guard(&self) -> Result<QpGuard<'_, T>, Poisoned> {
        let g = QpGuard { lock: self };
        if self.poisoned.load(Ordering::Relaxed) {
            return Err(Poisoned);
        }
        Ok(g)
    }

    fn unlock(&self) {
        if park::asymmetric() {
            self.state.store(FREE, Ordering::Release);
            park::light_barrier();
        } else {
            self.state.swap(FREE, Ordering::SeqCst);
        }
        if self.sleepers.load(Ordering::SeqCst) != 0 {
            self.wake();
        }
    }

    /// Wakes a sleeper unless a wake is outstanding (see "Wake once").
    #[cold]
    fn wake(&self) {
        // Only when a sleeper is counted, so a read-modify-write is fine here (a load
        // first could return a `true` that a sleeper had already cleared).
        if self.woken.swap(true, Ordering::SeqCst) {
            return;
        }
        #[cfg(test)]
        self.wake_calls.fetch_add(1, Ordering::Relaxed);
        self.wakes.fetch_add(1, Ordering::SeqCst);
        self.parking.wake_one(&self.wakes);
    }
}

/// The lock, held; given back when dropped (poisoned if the holder is unwinding).
pub struct QpGuard<'a, T> {
    lock: &'a QpLock<T>,
}

impl<T> Deref for QpGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard holds the lock (type documentation of `QpLock`), so no other
        // reference to the value is live while this one is.
        self.lock.value.with(|p| unsafe { &*p })
    }
}

impl<T> DerefMut for QpGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` makes this the only reference through it.
        self.lock.value.with_mut(|p| unsafe { &mut *p })
    }
}

impl<T> Drop for QpGuard<'_, T> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.lock.poisoned.store(true, Ordering::Relaxed);
        }
        self.lock.unlock();
    }
}

/// Sleeping, waking and the two barriers: the kernel's (`sys::futex`) normally, loom's
/// primitives when built with `--cfg loom` (a futex modelled by a mutex and a condition
/// variable, both barriers by SeqCst fences, which is what membarrier promises).
#[cfg(not(loom))]
mod park {
    use crate::sys::futex;
    use std::sync::atomic::{AtomicU32, Ordering, compiler_fence};

    pub(super) struct Parking;

    impl Parking {
        pub(super) fn new() -> Self {
            Parking
        }

        pub(super) fn wait(&self, word: &AtomicU32, expected: u32) {
            futex::wait(word, expected);
        }

        pub(super) fn wake_one(&self, word: &AtomicU32) {
            futex::wake_one(word);
        }
    }

    pub(super) fn asymmetric() -> bool {
        futex::asymmetric_fences()
    }

    pub(super) fn heavy_barrier() {
        futex::heavy_barrier();
    }

    /// The holder's side: only the compiler is kept from moving the load of
    /// `sleepers` before the release store; the CPU's reordering is what the heavy
    /// barrier undoes.
    pub(super) fn light_barrier() {
        compiler_fence(Ordering::SeqCst);
    }
}

#[cfg(loom)]
mod park {
    use loom::sync::atomic::{AtomicU32, Ordering, fence};
    use loom::sync::{Condvar, Mutex};

    pub(super) struct Parking {
        m: Mutex<()>,
        cv: Condvar,
    }

    impl Parking {
        pub(super) fn new() -> Self {
            Parking {
                m: Mutex::new(()),
                cv: Condvar::new(),
            }
        }

        pub(super) fn wait(&self, word: &AtomicU32, expected: u32) {
            let g = self.m.lock().unwrap();
            if word.load(Ordering::Relaxed) == expected {
                drop(self.cv.wait(g).unwrap());
            }
        }

        pub(super) fn wake_one(&self, _word: &AtomicU32) {
            let _g = self.m.lock().unwrap();
            self.cv.notify_one();
        }
    }

    pub(super) fn asymmetric() -> bool {
        true
    }

    pub(super) fn heavy_barrier() {
        fence(Ordering::SeqCst);
    }

    pub(super) fn light_barrier() {
        fence(Ordering::SeqCst);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn contending_threads_each_get_the_lock_for_every_increment() {
        let lock = Arc::new(QpLock::new(0u64));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let lock = lock.clone();
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        let mut g = lock.lock().unwrap();
                        // A read and a write apart: a second holder would lose counts.
                        let v = *g;
                        std::hint::black_box(&v);
                        *g = v + 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*lock.lock().unwrap(), 80_000);
    }

    /// A thread that sleeps on the lock is woken by the holder's release (a store, when
    /// the kernel has expedited membarrier), not left asleep.
    #[test]
    fn a_sleeping_waiter_is_woken_by_the_release() {
        let lock = Arc::new(QpLock::new(Vec::new()));
        let mut g = lock.lock().unwrap();
        let waiter = {
            let lock = lock.clone();
            std::thread::spawn(move || lock.lock().unwrap().push(2))
        };
        // Until the waiter has given up spinning and counted itself as a sleeper.
        while lock.sleepers.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        g.push(1);
        drop(g);
        waiter.join().unwrap();
        assert_eq!(*lock.lock().unwrap(), [1, 2]);
        assert_eq!(lock.sleepers.load(Ordering::SeqCst), 0);
    }

    /// While a wake is outstanding (its sleeper has not run since), releases make no
    /// further `futex(WAKE)`; once a sleeper has looked again, the next release wakes.
    /// (Session 16's rule woke on every release while the sleeper stayed counted.)
    #[test]
    fn releases_while_a_wake_is_outstanding_make_no_wake_call() {
        let lock = QpLock::new(());
        // A sleeper counted, as one that was woken but has not run yet stays.
        lock.sleepers.fetch_add(1, Ordering::SeqCst);
        for _ in 0..1000 {
            drop(lock.lock().unwrap());
        }
        assert_eq!(lock.wake_calls.load(Ordering::Relaxed), 1);
        assert_eq!(lock.wakes.load(Ordering::SeqCst), 1);
        // It runs and looks at the lock again (and is about to sleep once more).
        lock.woken.store(false, Ordering::SeqCst);
        drop(lock.lock().unwrap());
        drop(lock.lock().unwrap());
        assert_eq!(lock.wake_calls.load(Ordering::Relaxed), 2);
    }

    /// Two threads that keep taking the lock from a third that sleeps on it now and
    /// then: every sleep ends (a lost wake-up hangs the test) and every increment lands.
    #[test]
    fn a_waiter_that_sleeps_again_and_again_is_woken_each_time() {
        let lock = Arc::new(QpLock::new(0u64));
        let threads: Vec<_> = (0..3)
            .map(|_| {
                let lock = lock.clone();
                std::thread::spawn(move || {
                    for i in 0..20_000u32 {
                        let mut g = lock.lock().unwrap();
                        *g += 1;
                        if i % 64 == 0 {
                            // Held long enough now and then that the others sleep.
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*lock.lock().unwrap(), 60_000);
        assert_eq!(lock.sleepers.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_holder_that_panics_poisons_the_lock_and_gives_it_back() {
        let lock = Arc::new(QpLock::new(1u32));
        let l = lock.clone();
        let r = std::thread::spawn(move || {
            let _g = l.lock().unwrap();
            panic!("holder fails");
        })
        .join();
        assert!(r.is_err());
        assert_eq!(lock.lock().err(), Some(Poisoned));
        assert!(matches!(lock.try_lock(), Some(Err(Poisoned))));
    }

    #[test]
    fn try_lock_fails_while_held_and_succeeds_after() {
        let lock = QpLock::new(());
        let g = lock.lock().unwrap();
        assert!(lock.try_lock().is_none());
        drop(g);
        assert!(matches!(lock.try_lock(), Some(Ok(_))));
    }
}
