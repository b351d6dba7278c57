//! The QP's lock (`qp_lock.rs`) under every interleaving: threads that find it held
//! sleep and are woken by a release that is a plain store (the holder's barrier a
//! fence, the sleeper's `membarrier` modelled as one too), each holder alone with the
//! value. A lost wake-up leaves a thread asleep for good, which loom reports as a
//! deadlock. The wake-once rule (a release wakes only while no wake is outstanding) is
//! exercised by threads that sleep more than once: a wake that is never seen as used up
//! would leave the second sleep without one.
//!
//! Run with:
//! `RUSTFLAGS="--cfg loom" cargo test -p softrnic-rnic --test loom_qp_lock --release`
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use softrnic_rnic::qp_lock::QpLock;

/// Each thread adds one under the lock, in two steps a second holder would split.
fn add_one(lock: &QpLock<(u32, u32)>) {
    let mut g = lock.lock().unwrap();
    g.0 += 1;
    thread::yield_now();
    g.1 += 1;
}

#[test]
fn two_threads_take_turns_and_none_sleeps_for_good() {
    loom::model(|| {
        let lock = Arc::new(QpLock::new((0, 0)));
        let other = {
            let lock = lock.clone();
            thread::spawn(move || add_one(&lock))
        };
        add_one(&lock);
        other.join().unwrap();
        assert_eq!(*lock.lock().unwrap(), (2, 2));
    });
}

#[test]
fn three_threads_take_turns_and_none_sleeps_for_good() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(|| {
        let lock = Arc::new(QpLock::new((0, 0)));
        let others: Vec<_> = (0..2)
            .map(|_| {
                let lock = lock.clone();
                thread::spawn(move || add_one(&lock))
            })
            .collect();
        add_one(&lock);
        for t in others {
            t.join().unwrap();
        }
        assert_eq!(*lock.lock().unwrap(), (3, 3));
    });
}

/// Two threads that each take the lock twice beside a third: sleeps follow wakes that
/// are still outstanding, and every one must end.
#[test]
fn repeated_sleeps_each_get_a_wake() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.check(|| {
        let lock = Arc::new(QpLock::new((0, 0)));
        let others: Vec<_> = (0..2)
            .map(|_| {
                let lock = lock.clone();
                thread::spawn(move || {
                    add_one(&lock);
                    add_one(&lock);
                })
            })
            .collect();
        add_one(&lock);
        for t in others {
            t.join().unwrap();
        }
        assert_eq!(*lock.lock().unwrap(), (5, 5));
    });
}
