//! How far apart the host put the two CPUs of a loopback run, told by the time one
//! cache line takes from one CPU to the other and back.
//!
//! In a VM the host decides where the guest's CPUs run, and may move them while a
//! benchmark runs. On this project's 2-CPU guest (session 31) the round trip sat at
//! 60-90 ns for seconds (the two CPUs near each other), then at 300-380 ns (apart),
//! and a 1 MiB TCP stream over loopback moved about 4-6 GB/s or 2 GB/s with it (8-9
//! GB/s in a rarer state at 63-65 ns). A paired sub-run ([`super::pairs`]) records the
//! round trip just before it runs, so a pair whose two sides saw different placements
//! shows it, and a run's ratios can be read against the state they were taken in.

use softrnic_rnic::affinity;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How much a measurement does, and how long it may take.
#[derive(Debug, Clone, Copy)]
pub struct Probe {
    /// Round trips a batch.
    pub rounds: u64,
    /// Batches; the answer is their median, so one preempted batch does not move it.
    pub batches: u64,
    /// The longest the whole may take: a CPU busy with another thread (or not ours)
    /// ends it without an answer instead of stalling the benchmark.
    pub deadline: Duration,
}

impl Probe {
    /// A paired sub-run's: five batches of 2,000 (0.1-0.8 ms a batch at the round trips
    /// above), at most 100 ms.
    pub const SUB_RUN: Probe = Probe {
        rounds: 2_000,
        batches: 5,
        deadline: Duration::from_millis(100),
    };
}

/// The cache line the two threads pass: aligned so nothing else shares its line.
#[repr(align(128))]
struct Line(AtomicU64);

/// Pins the calling thread to `cpu` and checks that it runs there.
fn pinned_to(cpu: usize) -> bool {
    affinity::pin_thread(cpu).is_ok() && affinity::current_cpu() == Some(cpu)
}

/// Spins until `line` holds `want`; false if `quit` was raised or the deadline passed
/// (then it raises `quit` for the other side).
fn wait_for(line: &Line, want: u64, quit: &AtomicBool, deadline: Instant) -> bool {
    let mut spins = 0u32;
    while line.0.load(Ordering::Acquire) != want {
        spins = spins.wrapping_add(1);
        // The clock and the flag are read every 4,096 spins only: the loop itself is
        // what is measured, so it stays a bare load (no pause instruction either).
        if spins.is_multiple_of(4096) && (quit.load(Ordering::Relaxed) || Instant::now() > deadline)
        {
            quit.store(true, Ordering::Relaxed);
            return false;
        }
    }
    true
}

/// The median time, in nanoseconds, of a cache line's round trip between CPUs `a` and
/// `b`; `None` if they are the same CPU, if a thread cannot be pinned to either, or if
/// the measurement does not finish within the probe's deadline. The caller's own
/// thread is not moved: two short-lived threads do the work.
pub fn round_trip_ns(a: usize, b: usize, probe: Probe) -> Option<f64> {
    if a == b || probe.rounds == 0 || probe.batches == 0 {
        return None;
    }
    let line = Line(AtomicU64::new(0));
    let quit = AtomicBool::new(false);
    let deadline = Instant::now() + probe.deadline;
    let (rounds, batches) = (probe.rounds, probe.batches);
    let total = rounds * batches;
    std::thread::scope(|s| {
        let answer = s.spawn(|| {
            if !pinned_to(b) {
                quit.store(true, Ordering::Relaxed);
                return;
            }
            for i in 0..total {
                if !wait_for(&line, 2 * i + 1, &quit, deadline) {
                    return;
                }
                line.0.store(2 * i + 2, Ordering::Release);
            }
        });
        let ask = s.spawn(|| -> Option<Vec<f64>> {
            if !pinned_to(a) {
                quit.store(true, Ordering::Relaxed);
                return None;
            }
            let mut per_batch = Vec::with_capacity(batches as usize);
            for batch in 0..batches {
                let start = Instant::now();
                for i in batch * rounds..(batch + 1) * rounds {
                    line.0.store(2 * i + 1, Ordering::Release);
                    if !wait_for(&line, 2 * i + 2, &quit, deadline) {
                        return None;
                    }
                }
                per_batch.push(start.elapsed().as_nanos() as f64 / rounds as f64);
            }
            Some(per_batch)
        });
        let mut per_batch = ask.join().ok().flatten()?;
        answer.join().ok()?;
        per_batch.sort_by(f64::total_cmp);
        Some(per_batch[per_batch.len() / 2])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Small and patient: a loaded test machine may preempt the spinning threads, so
    /// the test's deadline is long and its round trips few; the answer's size is not
    /// judged (a benchmark reports it).
    const PATIENT: Probe = Probe {
        rounds: 50,
        batches: 3,
        deadline: Duration::from_secs(60),
    };

    #[test]
    fn two_cpus_give_a_round_trip_and_one_cpu_gives_none() {
        let cpus = affinity::allowed_cpus();
        assert!(round_trip_ns(cpus[0], cpus[0], PATIENT).is_none());
        if cpus.len() < 2 {
            eprintln!("one CPU only: the two-CPU half of this test does not apply");
            return;
        }
        let ns = round_trip_ns(cpus[0], cpus[1], PATIENT).expect("two CPUs of this process");
        assert!(ns > 0.0, "{ns} ns");
    }

    #[test]
    fn a_cpu_this_process_may_not_use_gives_none_not_a_hang() {
        let cpus = affinity::allowed_cpus();
        let not_ours = (0..libc::CPU_SETSIZE as usize)
            .find(|c| !cpus.contains(c))
            .expect("some CPU number outside this process's set");
        assert!(round_trip_ns(cpus[0], not_ours, PATIENT).is_none());
        assert!(round_trip_ns(not_ours, cpus[0], PATIENT).is_none());
    }

    #[test]
    fn an_empty_probe_measures_nothing() {
        let cpus = affinity::allowed_cpus();
        let other = *cpus.last().unwrap();
        let none = Probe {
            rounds: 0,
            ..PATIENT
        };
        assert!(round_trip_ns(cpus[0], other, none).is_none());
    }
}
