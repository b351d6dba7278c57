//! Exhaustive interleaving checks of the CQ ring with loom.
//!
//! Run with:
//! `RUSTFLAGS="--cfg loom" cargo test -p softrnic-rnic --test loom_cq_ring --release`
//!
//! Retry loops call `loom::thread::yield_now`, which tells loom the thread cannot make
//! progress until another runs, so spinning does not blow up the search. Tests with
//! retry loops use a preemption bound of 3 (bugs in structures like this one show up
//! within two or three preemptions; unbounded search of three threads with retries
//! takes far longer than is reasonable for CI).
#![cfg(loom)]

use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use loom::thread;

use softrnic_proto::verbs::{Completion, QpId, WcOpcode, WcStatus};
use softrnic_rnic::cq_ring::{CqRing, Full};

fn comp(producer: u32, seq: u64) -> Completion {
    Completion {
        wr_id: seq,
        status: WcStatus::Success,
        opcode: WcOpcode::Recv,
        byte_len: 0,
        qp: QpId(producer),
        solicited: false,
        invalidated: None,
    }
}

fn bounded(preemptions: usize) -> loom::model::Builder {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(preemptions);
    b
}

/// Counters shared by producers and the consumer to check that a `Full` is justified.
struct Counters {
    /// Pushes begun and not failed: incremented before `push`, decremented on `Full`.
    claimed: AtomicUsize,
    /// Completions the consumer has popped (incremented after `pop` returns).
    popped: AtomicUsize,
}

/// Pushes `c`, retrying on `Full`, and checks each `Full` is real: at the moment the
/// producer decided, at least `capacity` other pushes had claimed a slot and not been
/// popped. `claimed` read after the decision over-counts claims and `popped` read
/// before the push under-counts pops, so the inequality below is implied by "really
/// full" and a spurious `Full` would break it (when the ring is not full the counts
/// allow it to be violated in some interleaving, which loom will find).
fn push_checked(ring: &CqRing, ctr: &Counters, mut c: Completion) {
    loop {
        let popped_before = ctr.popped.load(SeqCst);
        ctr.claimed.fetch_add(1, SeqCst);
        match ring.push(c) {
            Ok(()) => return,
            Err(Full(back)) => {
                let claimed_now = ctr.claimed.load(SeqCst);
                let others = claimed_now - 1; // minus this attempt
                assert!(
                    others - popped_before >= ring.capacity(),
                    "spurious Full: {others} claimed, {popped_before} popped"
                );
                ctr.claimed.fetch_sub(1, SeqCst);
                c = back;
                thread::yield_now();
            }
        }
    }
}

/// Two producers push two completions each into a capacity-2 ring while one consumer
/// pops all four: each completion is popped exactly once, each producer's in order,
/// and `Full` is only ever reported when the ring is full.
#[test]
fn two_producers_one_consumer() {
    bounded(3).check(|| {
        let ring = Arc::new(CqRing::new(2).unwrap());
        let ctr = Arc::new(Counters {
            claimed: AtomicUsize::new(0),
            popped: AtomicUsize::new(0),
        });
        let producers: Vec<_> = (0..2u32)
            .map(|p| {
                let (ring, ctr) = (ring.clone(), ctr.clone());
                thread::spawn(move || {
                    for i in 0..2 {
                        push_checked(&ring, &ctr, comp(p, i));
                    }
                })
            })
            .collect();

        let mut rx = ring.consumer().unwrap();
        let mut next = [0u64; 2];
        let mut got = 0;
        while got < 4 {
            match rx.pop() {
                Some(c) => {
                    ctr.popped.fetch_add(1, SeqCst);
                    let p = c.qp.0 as usize;
                    assert_eq!(c.wr_id, next[p], "producer {p}: wrong order or duplicate");
                    next[p] += 1;
                    got += 1;
                }
                None => thread::yield_now(),
            }
        }
        assert_eq!(rx.pop(), None);
        drop(rx);
        for h in producers {
            h.join().unwrap();
        }
        assert_eq!(next, [2, 2]);
        assert!(ring.is_empty());
    });
}

/// Without a consumer, four concurrent pushes into a capacity-2 ring: exactly two
/// succeed (no spurious `Full`, no overfill), and what was pushed comes out once, in
/// per-producer order. No retry loops, so this one is checked exhaustively.
#[test]
fn concurrent_fill_is_exact() {
    loom::model(|| {
        let ring = Arc::new(CqRing::new(2).unwrap());
        let producers: Vec<_> = (0..2u32)
            .map(|p| {
                let ring = ring.clone();
                thread::spawn(move || {
                    let mut ok = Vec::new();
                    for i in 0..2 {
                        if ring.push(comp(p, i)).is_ok() {
                            ok.push(i);
                        }
                    }
                    ok
                })
            })
            .collect();
        let ok: Vec<Vec<u64>> = producers.into_iter().map(|h| h.join().unwrap()).collect();
        assert_eq!(ok[0].len() + ok[1].len(), 2, "pushed {ok:?}");
        assert_eq!(ring.len(), 2);

        let mut rx = ring.consumer().unwrap();
        let mut popped = [Vec::new(), Vec::new()];
        while let Some(c) = rx.pop() {
            popped[c.qp.0 as usize].push(c.wr_id);
        }
        assert_eq!(popped[0], ok[0]);
        assert_eq!(popped[1], ok[1]);
    });
}

/// One producer and one consumer on a capacity-2 ring, five completions: every slot is
/// reused across laps while the consumer races the producer, and `pop_into` batches
/// keep order.
#[test]
fn producer_consumer_wrap_around() {
    bounded(3).check(|| {
        const N: u64 = 5;
        let ring = Arc::new(CqRing::new(2).unwrap());
        let producer = {
            let ring = ring.clone();
            thread::spawn(move || {
                for i in 0..N {
                    let mut c = comp(0, i);
                    while let Err(Full(back)) = ring.push(c) {
                        c = back;
                        thread::yield_now();
                    }
                }
            })
        };
        let mut rx = ring.consumer().unwrap();
        let mut next = 0;
        let mut batch = [comp(9, 9); 2];
        while next < N {
            let n = rx.pop_into(&mut batch);
            if n == 0 {
                thread::yield_now();
            }
            for c in &batch[..n] {
                assert_eq!(c.wr_id, next);
                next += 1;
            }
        }
        producer.join().unwrap();
        assert_eq!(rx.pop(), None);
    });
}

/// The consumer role handed between threads: a consumer on another thread pops what
/// was pushed, and after it releases the role the main thread sees its progress.
#[test]
fn consumer_handover() {
    loom::model(|| {
        let ring = Arc::new(CqRing::new(2).unwrap());
        ring.push(comp(0, 0)).unwrap();
        ring.push(comp(0, 1)).unwrap();
        let t = {
            let ring = ring.clone();
            thread::spawn(move || {
                // May lose the race for the role to the main thread.
                ring.consumer().map(|mut rx| rx.pop())
            })
        };
        let mine = ring.consumer().map(|mut rx| rx.pop());
        let theirs = t.join().unwrap();
        let mut all: Vec<u64> = [mine, theirs]
            .into_iter()
            .flatten()
            .flatten()
            .map(|c| c.wr_id)
            .collect();
        let mut rx = ring.consumer().unwrap();
        while let Some(c) = rx.pop() {
            all.push(c.wr_id);
        }
        all.sort_unstable();
        assert_eq!(all, [0, 1], "each completion exactly once");
    });
}
