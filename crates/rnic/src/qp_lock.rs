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
//! Where the kernel has no expedited membarrier, the release is a swap and the
//! sleeper uses no barrier (both sides' read-modify-writes order the two words).
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
        loop {
            self.sleepers.fetch_add(1, Ordering::SeqCst);
            if park::asymmetric() {
                // After this, a holder that released before it is seen released, and
                // one that releases later sees this sleeper (module documentation).
                park::heavy_barrier();
            }
            let taken = self.take();
            if !taken {
                self.parking.wait(&self.state, HELD);
            }
            self.sleepers.fetch_sub(1, Ordering::Relaxed);
            if taken || self.take() {
                return;
            }
        }
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
            self.parking.wake_one(&self.state);
        }
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
