use super::*;
use softrnic_proto::verbs::{QpId, WcOpcode, WcStatus};

fn comp(qp: u32, wr_id: u64) -> Completion {
    Completion {
        wr_id,
        status: WcStatus::Success,
        opcode: WcOpcode::Send,
        byte_len: wr_id as u32,
        qp: QpId(qp),
        solicited: false,
        invalidated: None,
    }
}

#[test]
fn capacity_rounding_and_limits() {
    assert_eq!(CqRing::new(0).unwrap_err(), RingError::Capacity(0));
    assert_eq!(
        CqRing::new(MAX_CAPACITY + 1).unwrap_err(),
        RingError::Capacity(MAX_CAPACITY + 1)
    );
    assert_eq!(CqRing::new(1).unwrap().capacity(), 2);
    assert_eq!(CqRing::new(2).unwrap().capacity(), 2);
    assert_eq!(CqRing::new(3).unwrap().capacity(), 4);
    assert_eq!(CqRing::new(1000).unwrap().capacity(), 1024);
    assert_eq!(CqRing::new(MAX_CAPACITY).unwrap().capacity(), MAX_CAPACITY);
    assert!(RingError::Capacity(0).to_string().contains("outside"));
}

#[test]
fn fifo_and_full() {
    let ring = CqRing::new(4).unwrap();
    let mut rx = ring.consumer().unwrap();
    assert!(ring.is_empty());
    assert_eq!(rx.pop(), None);
    for i in 0..4 {
        ring.push(comp(1, i)).unwrap();
        assert_eq!(ring.len(), i as usize + 1);
    }
    let err = ring.push(comp(1, 99)).unwrap_err();
    assert_eq!(err, Full(comp(1, 99)));
    assert_eq!(err.to_string(), "completion queue ring is full");
    assert_eq!(ring.len(), 4);
    for i in 0..4 {
        assert_eq!(rx.pop(), Some(comp(1, i)));
    }
    assert_eq!(rx.pop(), None);
    assert!(ring.is_empty());
    // Room again after popping one.
    ring.push(comp(1, 5)).unwrap();
    assert_eq!(rx.pop(), Some(comp(1, 5)));
    assert!(format!("{rx:?}").contains("capacity: 4"));
}

#[test]
fn full_frees_exactly_one_slot_per_pop() {
    let ring = CqRing::new(2).unwrap();
    let mut rx = ring.consumer().unwrap();
    ring.push(comp(0, 0)).unwrap();
    ring.push(comp(0, 1)).unwrap();
    assert!(ring.push(comp(0, 2)).is_err());
    assert_eq!(rx.pop(), Some(comp(0, 0)));
    ring.push(comp(0, 2)).unwrap();
    assert!(ring.push(comp(0, 3)).is_err());
    assert_eq!(rx.pop(), Some(comp(0, 1)));
    assert_eq!(rx.pop(), Some(comp(0, 2)));
    assert_eq!(rx.pop(), None);
}

#[test]
fn wrap_around_many_times() {
    let ring = CqRing::new(8).unwrap();
    let mut rx = ring.consumer().unwrap();
    let mut next_out = 0u64;
    let mut next_in = 0u64;
    // Varying fill levels so positions cross the slot boundary at every offset.
    for round in 0..10_000u64 {
        let k = round % 9;
        for _ in 0..k {
            if ring.push(comp(0, next_in)).is_ok() {
                next_in += 1;
            }
        }
        for _ in 0..(round % 7) {
            match rx.pop() {
                Some(c) => {
                    assert_eq!(c.wr_id, next_out);
                    next_out += 1;
                }
                None => {
                    assert_eq!(next_out, next_in);
                    break;
                }
            }
        }
        assert_eq!(ring.len() as u64, next_in - next_out);
    }
    while let Some(c) = rx.pop() {
        assert_eq!(c.wr_id, next_out);
        next_out += 1;
    }
    assert_eq!(next_out, next_in);
    assert!(next_in > 8 * 1000, "wrapped {} times", next_in / 8);
}

#[test]
fn positions_wrap_around_usize() {
    let ring = CqRing::new(4).unwrap();
    // Start just before the positions overflow, as a long-lived ring eventually
    // would on a 32-bit target. Slot `p % 4` must hold sequence `p`.
    let start = usize::MAX - 5;
    ring.tail.0.store(start, Ordering::Relaxed);
    ring.head.0.store(start, Ordering::Relaxed);
    for p in start..start + 4 {
        ring.slots[p & ring.mask].seq.store(p, Ordering::Relaxed);
    }
    let mut rx = ring.consumer().unwrap();
    let mut next_in = 0u64;
    let mut next_out = 0u64;
    for _ in 0..10 {
        // Fill to capacity (Full exactly then), drain three, across the overflow.
        while ring.push(comp(0, next_in)).is_ok() {
            next_in += 1;
        }
        assert_eq!(ring.len(), 4);
        for _ in 0..3 {
            assert_eq!(rx.pop().unwrap().wr_id, next_out);
            next_out += 1;
        }
    }
    assert!(
        ring.tail.0.load(Ordering::Relaxed) < start,
        "positions wrapped"
    );
    assert_eq!(rx.pop().unwrap().wr_id, next_out);
    assert_eq!(rx.pop(), None);
}

/// Completions popped in batches come out whole (every field as pushed) and free
/// their slots: lap after lap of a small ring, through `pop_into`'s direct copy.
#[test]
fn pop_into_copies_every_field_and_frees_the_slots() {
    let ring = CqRing::new(4).unwrap();
    let mut rx = ring.consumer().unwrap();
    let mut out = [comp(0, 0); 4];
    for lap in 0..6u64 {
        let pushed: Vec<Completion> = (0..3)
            .map(|i| Completion {
                wr_id: lap * 10 + i,
                status: if i == 1 {
                    WcStatus::LocalLengthError
                } else {
                    WcStatus::Success
                },
                opcode: if i == 2 {
                    WcOpcode::Recv
                } else {
                    WcOpcode::Write
                },
                byte_len: 1000 + (lap * 10 + i) as u32,
                qp: QpId(7 + i as u32),
                solicited: i == 2,
                invalidated: (i == 0).then_some(0x1234_5600 + lap as u32),
            })
            .collect();
        for c in &pushed {
            ring.push(*c).unwrap();
        }
        assert_eq!(rx.pop_into(&mut out), 3, "lap {lap}");
        assert_eq!(&out[..3], pushed.as_slice(), "lap {lap}");
        assert_eq!(rx.pop_into(&mut out), 0);
    }
}

#[test]
fn pop_into_batches_in_order() {
    let ring = CqRing::new(16).unwrap();
    let mut rx = ring.consumer().unwrap();
    let mut out = [comp(0, 0); 5];
    assert_eq!(rx.pop_into(&mut out), 0);
    for i in 0..12 {
        ring.push(comp(2, i)).unwrap();
    }
    assert_eq!(rx.pop_into(&mut out), 5);
    assert_eq!(out.map(|c| c.wr_id), [0, 1, 2, 3, 4]);
    assert_eq!(rx.pop_into(&mut out[..0]), 0);
    assert_eq!(rx.pop_into(&mut out), 5);
    assert_eq!(out.map(|c| c.wr_id), [5, 6, 7, 8, 9]);
    assert_eq!(ring.len(), 2);
    assert_eq!(rx.pop_into(&mut out), 2);
    assert_eq!(
        out[..2].iter().map(|c| c.wr_id).collect::<Vec<_>>(),
        [10, 11]
    );
    assert!(ring.is_empty());
    // The freed slots are reusable: fill to capacity again.
    for i in 0..16 {
        ring.push(comp(2, i)).unwrap();
    }
    assert!(ring.push(comp(2, 16)).is_err());
}

#[test]
fn one_consumer_at_a_time() {
    let ring = CqRing::new(4).unwrap();
    let rx = ring.consumer().unwrap();
    assert!(ring.consumer().is_none());
    assert!(std::ptr::eq(rx.ring(), &ring));
    drop(rx);
    ring.push(comp(0, 1)).unwrap();
    // The role moves to another thread and sees the state left behind.
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut rx = ring.consumer().unwrap();
            assert_eq!(rx.pop(), Some(comp(0, 1)));
        });
    });
    let mut rx = ring.consumer().unwrap();
    assert_eq!(rx.pop(), None);
    assert!(format!("{ring:?}").contains("len: 0"));
}

#[test]
fn ring_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<CqRing>();
    assert_send_sync::<CqConsumer<'static>>();
}

/// 4 producers x 100k pushes into a small ring, one consumer checking that every
/// completion arrives exactly once and each producer's arrive in push order.
#[test]
fn stress_mpsc_exactly_once_in_order() {
    const PRODUCERS: u32 = 4;
    let per_producer: u64 = std::env::var("SOFTRNIC_RING_STRESS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let ring = CqRing::new(64).unwrap();
    let total = PRODUCERS as u64 * per_producer;
    let mut fulls = 0u64;
    std::thread::scope(|s| {
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let ring = &ring;
                s.spawn(move || {
                    let mut full = 0u64;
                    for i in 0..per_producer {
                        let mut c = comp(p, i);
                        loop {
                            match ring.push(c) {
                                Ok(()) => break,
                                Err(Full(back)) => {
                                    c = back;
                                    full += 1;
                                    std::thread::yield_now();
                                }
                            }
                        }
                    }
                    full
                })
            })
            .collect();

        let mut rx = ring.consumer().unwrap();
        let mut next = [0u64; PRODUCERS as usize];
        let mut got = 0u64;
        let mut batch = [comp(0, 0); 16];
        while got < total {
            let n = rx.pop_into(&mut batch);
            if n == 0 {
                std::thread::yield_now();
                continue;
            }
            for c in &batch[..n] {
                let p = c.qp.0 as usize;
                assert_eq!(c.wr_id, next[p], "producer {p} out of order or duplicated");
                assert_eq!(c.byte_len, c.wr_id as u32);
                next[p] += 1;
            }
            got += n as u64;
        }
        assert_eq!(next, [per_producer; PRODUCERS as usize]);
        assert_eq!(rx.pop(), None);
        fulls = producers.into_iter().map(|h| h.join().unwrap()).sum();
    });
    assert!(ring.is_empty());
    // Not an assertion on timing, just a sign the Full path was exercised.
    eprintln!("stress: {total} completions, {fulls} Full retries");
}
