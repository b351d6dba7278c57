//! Exhaustive interleaving checks of the CQ ring with loom.
//!
//! Run with:
//! `RUSTFLAGS="--cfg loom" cargo test -p softrnic-rnic --test loom_cq_ring --release`
//!
//! Waiting loops call `loom::thread::yield_now`, which tells loom the thread cannot
//! make progress until another runs, so spinning does not blow up the search; at most
//! one thread per test waits on the others (see `two_producers_one_consumer`). Tests
//! with waiting loops use a preemption bound of 3 (bugs in structures like this one
//! show up within two or three preemptions; the unbounded search takes far longer than
//! is reasonable for CI).
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

/// A model builder with a preemption bound of `preemptions`, unless
/// `LOOM_MAX_PREEMPTIONS` asks for another one (e.g. a deeper search before a release).
fn bounded(preemptions: usize) -> loom::model::Builder {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(preemptions);
    }
    b
}

/// Counters shared by producers and the consumer to check that a `Full` is justified.
struct Counters {
    /// Pushes begun and not failed: incremented before `push`, decremented on `Full`.
    claimed: AtomicUsize,
    /// Completions the consumer has popped (incremented after `pop` returns).
    popped: AtomicUsize,
    /// Producers that have finished.
    done: AtomicUsize,
}

/// Pushes `c` once and checks that a `Full` is real: at the moment the producer
/// decided, at least `capacity` pushes had claimed a slot and not been popped.
/// `claimed` read after the decision over-counts claims and `popped` read before the
/// push under-counts pops (a pop counted there happened-before the push through the
/// SeqCst counters, so its slot release is visible to the push), so the inequality
/// below follows from "really full", and a spurious `Full` in some interleaving would
/// break it.
fn push_checked(ring: &CqRing, ctr: &Counters, c: Completion) -> bool {
    let popped_before = ctr.popped.load(SeqCst);
    ctr.claimed.fetch_add(1, SeqCst);
    match ring.push(c) {
        Ok(()) => true,
        Err(Full(back)) => {
            assert_eq!(back, c, "Full hands the completion back");
            let others = ctr.claimed.load(SeqCst) - 1; // minus this attempt
            assert!(
                others - popped_before >= ring.capacity(),
                "spurious Full: {others} claimed, {popped_before} popped"
            );
            ctr.claimed.fetch_sub(1, SeqCst);
            false
        }
    }
}

/// Two producers push two completions each into a capacity-2 ring while one consumer
/// pops concurrently: every completion that was pushed is popped exactly once, each
/// producer's in push order, nothing that failed with `Full` appears, and `Full` is
/// only ever reported when the ring is really full.
///
/// Producers do not retry on `Full`: with two spinning producers waiting on a third
/// thread, loom's exhaustive scheduler would also explore the schedules in which the
/// two spinners take turns forever. Only the consumer waits (for the producers to
/// finish), which keeps every explored execution finite.
#[test]
fn two_producers_one_consumer() {
    bounded(3).check(|| {
        let ring = Arc::new(CqRing::new(2).unwrap());
        let ctr = Arc::new(Counters {
            claimed: AtomicUsize::new(0),
            popped: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
        });
        let producers: Vec<_> = (0..2u32)
            .map(|p| {
                let (ring, ctr) = (ring.clone(), ctr.clone());
                thread::spawn(move || {
                    let pushed: Vec<u64> = (0..2)
                        .filter(|&i| push_checked(&ring, &ctr, comp(p, i)))
                        .collect();
                    ctr.done.fetch_add(1, SeqCst);
                    pushed
                })
            })
            .collect();

        let mut rx = ring.consumer().unwrap();
        let mut popped = [Vec::new(), Vec::new()];
        loop {
            // Read `done` before popping: if both producers had finished, the pop
            // below sees everything they pushed.
            let finished = ctr.done.load(SeqCst) == 2;
            match rx.pop() {
                Some(c) => {
                    popped[c.qp.0 as usize].push(c.wr_id);
                    ctr.popped.fetch_add(1, SeqCst);
                }
                None if finished => break,
                None => thread::yield_now(),
            }
        }
        drop(rx);
        let pushed: Vec<Vec<u64>> = producers.into_iter().map(|h| h.join().unwrap()).collect();
        // Exactly once and in per-producer order: the popped sequence of each producer
        // is exactly what it successfully pushed, in push order.
        assert_eq!(popped[0], pushed[0]);
        assert_eq!(popped[1], pushed[1]);
        // Two completions always fit in a capacity-2 ring: at least two succeed.
        assert!(pushed[0].len() + pushed[1].len() >= 2, "{pushed:?}");
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

/// A run claimed with one compare-and-swap (`push_run`) races a producer pushing one by
/// one and a consumer popping, on a capacity-2 ring across laps: a run goes in whole
/// or not at all, every completion pushed is popped exactly once, each producer's in
/// its order, and the run's slots are written only after the consumer has read their
/// previous lap (loom reports any unsynchronised access to a slot's value).
#[test]
fn a_run_races_single_pushes_and_the_consumer() {
    bounded(3).check(|| {
        let ring = Arc::new(CqRing::new(2).unwrap());
        // One completion first, so the run's slots belong to the second lap once the
        // consumer frees them.
        ring.push(comp(2, 0)).unwrap();
        let done = Arc::new(AtomicUsize::new(0));
        let runner = {
            let (ring, done) = (ring.clone(), done.clone());
            thread::spawn(move || {
                let pushed = ring.push_run(&[comp(0, 0), comp(0, 1)]).is_some();
                done.fetch_add(1, SeqCst);
                pushed
            })
        };
        let single = {
            let (ring, done) = (ring.clone(), done.clone());
            thread::spawn(move || {
                let pushed = ring.push(comp(1, 0)).is_ok();
                done.fetch_add(1, SeqCst);
                pushed
            })
        };
        let mut rx = ring.consumer().unwrap();
        let mut popped = [Vec::new(), Vec::new(), Vec::new()];
        loop {
            let finished = done.load(SeqCst) == 2;
            match rx.pop() {
                Some(c) => popped[c.qp.0 as usize].push(c.wr_id),
                None if finished => break,
                None => thread::yield_now(),
            }
        }
        drop(rx);
        let run = runner.join().unwrap();
        let one = single.join().unwrap();
        assert_eq!(popped[2], [0]);
        assert_eq!(popped[0], if run { vec![0, 1] } else { vec![] });
        assert_eq!(popped[1], if one { vec![0] } else { vec![] });
        assert!(ring.is_empty());
    });
}

/// Two runs race for an empty capacity-2 ring with no consumer: exactly one goes in,
/// whole; the other pushes nothing (never half a run, never an overfill).
#[test]
fn two_runs_race_for_the_room_of_one() {
    loom::model(|| {
        let ring = Arc::new(CqRing::new(2).unwrap());
        let runners: Vec<_> = (0..2u32)
            .map(|p| {
                let ring = ring.clone();
                thread::spawn(move || ring.push_run(&[comp(p, 0), comp(p, 1)]).is_some())
            })
            .collect();
        let ok: Vec<bool> = runners.into_iter().map(|h| h.join().unwrap()).collect();
        assert_eq!(ok.iter().filter(|&&b| b).count(), 1, "{ok:?}");
        let winner = ok.iter().position(|&b| b).unwrap() as u32;
        let mut rx = ring.consumer().unwrap();
        let all: Vec<(u32, u64)> = std::iter::from_fn(|| rx.pop())
            .map(|c| (c.qp.0, c.wr_id))
            .collect();
        assert_eq!(all, [(winner, 0), (winner, 1)]);
    });
}

/// `pop_into` bounded by the positions claimed when it starts (`tail`, read once): a
/// run and a single push race a consumer that pops in batches larger than what is
/// there, on a capacity-2 ring across laps: a slot claimed but not yet written is never
/// read (loom reports an unsynchronised access to its value), every completion pushed
/// comes out exactly once, each producer's in order, and what a pop's bound left out
/// is taken by a later pop.
#[test]
fn a_batch_pop_takes_only_what_was_published() {
    bounded(3).check(|| {
        let ring = Arc::new(CqRing::new(2).unwrap());
        // One completion first, so the producers' slots are reused across laps.
        ring.push(comp(2, 0)).unwrap();
        let done = Arc::new(AtomicUsize::new(0));
        let runner = {
            let (ring, done) = (ring.clone(), done.clone());
            thread::spawn(move || {
                let pushed = ring.push_run(&[comp(0, 0), comp(0, 1)]).is_some();
                done.fetch_add(1, SeqCst);
                pushed
            })
        };
        let single = {
            let (ring, done) = (ring.clone(), done.clone());
            thread::spawn(move || {
                let pushed = ring.push(comp(1, 0)).is_ok();
                done.fetch_add(1, SeqCst);
                pushed
            })
        };
        let mut rx = ring.consumer().unwrap();
        let mut popped = [Vec::new(), Vec::new(), Vec::new()];
        let mut batch = [comp(9, 9); 3];
        loop {
            let finished = done.load(SeqCst) == 2;
            let n = rx.pop_into(&mut batch);
            for c in &batch[..n] {
                popped[c.qp.0 as usize].push(c.wr_id);
            }
            match n {
                0 if finished => break,
                0 => thread::yield_now(),
                _ => {}
            }
        }
        drop(rx);
        let run = runner.join().unwrap();
        let one = single.join().unwrap();
        assert_eq!(popped[2], [0]);
        assert_eq!(popped[0], if run { vec![0, 1] } else { vec![] });
        assert_eq!(popped[1], if one { vec![0] } else { vec![] });
        assert!(ring.is_empty());
    });
}
