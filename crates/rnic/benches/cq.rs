//! Micro-benchmarks of the completion path with no network in it: the lock-free CQ ring
//! (`cq_ring::CqRing`, which every `Cq` is built on) pushed and polled one at a time
//! and in batches, handed over between two threads, and the public `Cq::poll` on an
//! empty CQ (what a busy-polling consumer pays per miss). They exist so that a change to
//! the ring's atomics or to the CQ layer shows up as a number, not only as a bandwidth
//! drift in the end-to-end benchmarks.
//!
//! The ring is benchmarked directly: `Cq`'s producer side is crate-private (only QPs
//! push), and the ring is the public module it wraps. `cargo bench -p softrnic-rnic
//! --bench cq`.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use softrnic_rnic::cq_ring::CqRing;
use softrnic_rnic::{Completion, Device, DeviceConfig, ProgressMode, QpId, WcOpcode, WcStatus};
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn completion(wr_id: u64) -> Completion {
    Completion {
        wr_id,
        status: WcStatus::Success,
        opcode: WcOpcode::Write,
        byte_len: 65536,
        qp: QpId(7),
        solicited: false,
        invalidated: None,
    }
}

/// One push then one poll, as a latency test with one outstanding request sees it (the
/// consumer role is claimed per poll, as `Cq::poll` does).
fn push_poll_one(c: &mut Criterion) {
    let ring = CqRing::new(1024).expect("capacity");
    let mut wr_id = 0u64;
    c.bench_function("cq_ring/push_poll_one", |b| {
        b.iter(|| {
            wr_id = wr_id.wrapping_add(1);
            ring.push(black_box(completion(wr_id))).expect("not full");
            ring.consumer().expect("one consumer").pop()
        })
    });
}

/// Push N, then poll all N into one array, as a bandwidth test that signals every
/// request and polls in batches does.
fn push_n_poll_n(c: &mut Criterion) {
    let mut g = c.benchmark_group("cq_ring/push_n_poll_n");
    for n in [16usize, 256, 4096] {
        let ring = CqRing::new(n).expect("capacity");
        let mut out = vec![completion(0); n];
        g.throughput(Throughput::Elements(n as u64));
        g.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter(|| {
                for i in 0..n {
                    ring.push(black_box(completion(i as u64)))
                        .expect("not full");
                }
                let got = ring.consumer().expect("one consumer").pop_into(&mut out);
                assert_eq!(got, n);
                got
            })
        });
    }
    g.finish();
}

/// A producer thread pushing and the benchmark thread polling in batches of up to 64:
/// the cross-CPU hand-off an engine thread and a polling consumer do. Both sides yield
/// when they cannot progress. Noisy on a busy machine: it needs two free CPUs.
fn cross_thread(c: &mut Criterion) {
    let mut g = c.benchmark_group("cq_ring/cross_thread");
    g.throughput(Throughput::Elements(1));
    g.bench_function("push_vs_poll64", |b| {
        b.iter_custom(|iters| {
            let ring = Arc::new(CqRing::new(1024).expect("capacity"));
            let producer = {
                let ring = ring.clone();
                std::thread::spawn(move || {
                    for i in 0..iters {
                        let mut wc = completion(i);
                        while let Err(full) = ring.push(wc) {
                            wc = full.0;
                            std::thread::yield_now();
                        }
                    }
                })
            };
            let mut out = vec![completion(0); 64];
            let mut got = 0u64;
            let start = Instant::now();
            let mut consumer = ring.consumer().expect("one consumer");
            while got < iters {
                let k = consumer.pop_into(&mut out);
                if k == 0 {
                    // Yield rather than spin: on a machine with fewer free CPUs than
                    // threads, spinning would wait out the producer's time slice.
                    std::thread::yield_now();
                }
                got += k as u64;
            }
            let elapsed = start.elapsed();
            drop(consumer);
            producer.join().expect("producer thread");
            elapsed
        })
    });
    g.finish();
}

/// `Cq::poll` on an empty CQ through the public API, in both progress modes (hybrid
/// also looks for QPs to drive; this CQ has none).
fn poll_empty(c: &mut Criterion) {
    let mut g = c.benchmark_group("cq/poll_empty");
    for (name, progress) in [
        ("engine", ProgressMode::Engine),
        ("hybrid", ProgressMode::Hybrid),
    ] {
        let dev = Device::open(DeviceConfig {
            progress,
            engine_spin: Duration::ZERO,
            ..DeviceConfig::default()
        })
        .expect("device");
        let cq = dev.create_cq(1024).expect("CQ");
        let mut out = vec![completion(0); 16];
        g.bench_function(name, |b| b.iter(|| cq.poll(black_box(&mut out))));
    }
    g.finish();
}

criterion_group!(
    benches,
    push_poll_one,
    push_n_poll_n,
    cross_thread,
    poll_empty
);
criterion_main!(benches);
