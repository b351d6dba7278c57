//! Exhaustive interleaving checks of a CQ's QP list (`cq_qps.rs`) with loom: its
//! try-lock released by a plain store keeps readers and writers apart, and a reader
//! sees a whole list.
//!
//! Run with:
//! `RUSTFLAGS="--cfg loom" cargo test -p softrnic-rnic --test loom_cq_qps --release`
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;

use softrnic_rnic::cq_qps::QpList;

#[test]
fn a_drive_and_a_replace_never_overlap() {
    loom::model(|| {
        let l = Arc::new(QpList::<u32>::new());
        let w = {
            let l = Arc::clone(&l);
            thread::spawn(move || {
                l.replace(|_| vec![2, 2]);
            })
        };
        // A drive either finds the list busy, or sees it whole (loom's cell flags an
        // access under a writer's).
        if let Some(v) = l.try_with(|v| v.to_vec()) {
            assert!(v.is_empty() || v == [2, 2], "half a list: {v:?}");
        }
        w.join().unwrap();
        assert_eq!(*l.get(), vec![2, 2]);
    });
}

#[test]
fn two_writers_both_land() {
    loom::model(|| {
        let l = Arc::new(QpList::<u32>::new());
        let add = |n: u32| {
            let l = Arc::clone(&l);
            thread::spawn(move || {
                l.replace(|v| {
                    let mut v = v.to_vec();
                    v.push(n);
                    v
                });
            })
        };
        let (a, b) = (add(1), add(2));
        a.join().unwrap();
        b.join().unwrap();
        let mut v = l.get().to_vec();
        v.sort_unstable();
        assert_eq!(v, [1, 2]);
    });
}
