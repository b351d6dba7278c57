//! The ring against `VecDeque`: the same operations, the same answers.

use super::Ring;
use std::collections::VecDeque;

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Seeded mixes of every operation `Rq` uses, from several starting capacities (0, 1,
/// 3, 8), with pushes weighted so the ring wraps and grows; after each step the two
/// queues must answer the same and hold the same entries in the same order.
#[test]
fn seeded_operation_mixes_match_vecdeque() {
    for room in [0usize, 1, 3, 8] {
        for seed in 0..300u64 {
            let mut ring: Ring<u64> = Ring::with_room(room);
            let mut model: VecDeque<u64> = VecDeque::new();
            let steps = 20 + splitmix(seed) % 200;
            for step in 0..steps {
                let r = splitmix(seed.wrapping_mul(1_000_003) ^ (step + 1) ^ ((room as u64) << 48));
                let i = (r >> 8) as usize % (model.len() + 2);
                let what = match r % 16 {
                    0..=6 => {
                        ring.push_back(r);
                        model.push_back(r);
                        "push_back"
                    }
                    7..=10 => {
                        assert_eq!(
                            ring.pop_front(),
                            model.pop_front(),
                            "seed {seed} step {step}"
                        );
                        "pop_front"
                    }
                    11 => {
                        assert_eq!(ring.front(), model.front(), "seed {seed} step {step}");
                        "front"
                    }
                    12 | 13 => {
                        assert_eq!(ring.get(i), model.get(i), "seed {seed} step {step} get {i}");
                        "get"
                    }
                    14 => {
                        assert_eq!(
                            ring.remove(i),
                            model.remove(i),
                            "seed {seed} step {step} remove {i}"
                        );
                        "remove"
                    }
                    _ => {
                        if r & 0x300 == 0 {
                            ring.clear();
                            model.clear();
                        }
                        "clear"
                    }
                };
                assert_eq!(
                    ring.len(),
                    model.len(),
                    "room {room} seed {seed} step {step} {what}"
                );
                let a: Vec<u64> = ring.iter().copied().collect();
                let b: Vec<u64> = model.iter().copied().collect();
                assert_eq!(a, b, "room {room} seed {seed} step {step} {what}");
            }
        }
    }
}

/// A ring run full, drained to one and filled again wraps its positions; growth from
/// a wrapped state keeps the order.
#[test]
fn a_wrapped_ring_grows_in_order() {
    let mut ring: Ring<u32> = Ring::with_room(4);
    for v in 0..4 {
        ring.push_back(v);
    }
    for v in 0..3 {
        assert_eq!(ring.pop_front(), Some(v));
    }
    for v in 4..7 {
        ring.push_back(v);
    }
    // Full (4 of 4), head at position 3: the next push grows.
    ring.push_back(7);
    assert_eq!(
        ring.iter().copied().collect::<Vec<_>>(),
        vec![3, 4, 5, 6, 7]
    );
    assert_eq!(ring.remove(1), Some(4));
    assert_eq!(ring.get(3), Some(&7));
    assert_eq!(ring.get(4), None);
    assert_eq!(ring.remove(4), None);
    assert_eq!(ring.iter().copied().collect::<Vec<_>>(), vec![3, 5, 6, 7]);
}
