//! Where the threads of a loopback run ran: the client's and the server's program
//! threads and each device's engines. On two CPUs a run's figure depends on it (an
//! engine beside the other side's busy-polling thread halves what that CPU can move),
//! so every softrnic result says it, and a slow run explains itself.
//!
//! A sampler thread reads, every [`PERIOD`], each watched thread's time on a CPU so
//! far (`/proc/self/task/<tid>/schedstat`, nanoseconds) and the CPU it last ran on
//! (field 39 of `.../stat`), and books the time run since the previous sample to that
//! CPU. A thread that moved within a period is booked to where it ended; over a run of
//! seconds the shares are what each CPU gave it. The sampler costs two file reads per
//! thread and period (about 4 us of CPU a pair here: some 30 us per sample, 0.15% of a
//! CPU), and wakes rarely enough not to disturb a latency run's tail much.

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// How often the sampler looks.
pub const PERIOD: Duration = Duration::from_millis(20);

/// A watched thread: what it is, and its kernel id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watched {
    pub role: String,
    pub tid: i32,
}

/// Each watched thread's CPU time by CPU, nanoseconds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placement {
    pub threads: Vec<(Watched, BTreeMap<usize, u64>)>,
}

/// Samples until [`Sampler::finish`].
pub struct Sampler {
    stop: Arc<AtomicBool>,
    /// Samples taken so far.
    taken: Arc<AtomicU64>,
    thread: Option<JoinHandle<Placement>>,
}

impl Sampler {
    /// Starts watching `threads` (none: nothing to sample, no thread started).
    pub fn start(threads: Vec<Watched>) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let taken = Arc::new(AtomicU64::new(0));
        let (s, n) = (stop.clone(), taken.clone());
        let thread = (!threads.is_empty())
            .then(|| {
                std::thread::Builder::new()
                    .name("bench-placement".into())
                    .spawn(move || sample(&threads, &s, &n))
                    .ok()
            })
            .flatten();
        Sampler {
            stop,
            taken,
            thread,
        }
    }

    /// Samples taken so far (the first only reads where each thread stands).
    pub fn taken(&self) -> u64 {
        self.taken.load(Ordering::Acquire)
    }

    /// Stops and returns what was seen (empty if the sampler could not run).
    pub fn finish(mut self) -> Placement {
        self.stop.store(true, Ordering::Release);
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

fn sample(threads: &[Watched], stop: &AtomicBool, taken: &AtomicU64) -> Placement {
    let mut last: Vec<Option<u64>> = threads.iter().map(|t| run_ns(t.tid)).collect();
    let mut booked: Vec<BTreeMap<usize, u64>> = vec![BTreeMap::new(); threads.len()];
    taken.fetch_add(1, Ordering::Release);
    loop {
        let done = stop.load(Ordering::Acquire);
        for (i, t) in threads.iter().enumerate() {
            let (Some(now), Some(cpu)) = (run_ns(t.tid), last_cpu(t.tid)) else {
                continue;
            };
            if let Some(before) = last[i] {
                *booked[i].entry(cpu).or_default() += now.saturating_sub(before);
            }
            last[i] = Some(now);
        }
        taken.fetch_add(1, Ordering::Release);
        if done {
            break;
        }
        std::thread::sleep(PERIOD);
    }
    Placement {
        threads: threads.iter().cloned().zip(booked).collect(),
    }
}

/// Nanoseconds thread `tid` of this process has run (first field of its schedstat).
fn run_ns(tid: i32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    s.split_whitespace().next()?.parse().ok()
}

/// The CPU thread `tid` of this process last ran on (field 39 of its stat).
fn last_cpu(tid: i32) -> Option<usize> {
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    // The command name may hold spaces: fields are counted after its closing parenthesis.
    let (_, rest) = s.rsplit_once(')')?;
    rest.split_whitespace().nth(39 - 3)?.parse().ok()
}

impl Placement {
    /// Per thread: CPU time in ms and the share of it on each CPU.
    pub fn json(&self) -> Value {
        let threads: Vec<Value> = self
            .threads
            .iter()
            .map(|(w, by)| {
                let total: u64 = by.values().sum();
                let share: BTreeMap<String, f64> = by
                    .iter()
                    .map(|(c, ns)| (c.to_string(), share(*ns, total)))
                    .collect();
                json!({"role": w.role, "tid": w.tid, "cpu_ms": total as f64 / 1e6, "share_by_cpu": share})
            })
            .collect();
        json!({ "placement": threads })
    }

    /// One line: `role CPU:share ...` per thread, e.g. `client 0:100%`, with the
    /// thread's CPU time; threads that did not run are left out.
    pub fn text(&self) -> Option<String> {
        let parts: Vec<String> = self
            .threads
            .iter()
            .filter_map(|(w, by)| {
                let total: u64 = by.values().sum();
                (total > 0).then(|| {
                    let cpus: Vec<String> = by
                        .iter()
                        .filter(|(_, ns)| **ns > 0)
                        .map(|(c, ns)| format!("{c}:{:.0}%", 100.0 * share(*ns, total)))
                        .collect();
                    format!("{} {} ({} ms)", w.role, cpus.join(" "), total / 1_000_000)
                })
            })
            .collect();
        (!parts.is_empty()).then(|| format!("ran on CPU: {}", parts.join(" | ")))
    }
}

/// The summary's account of where each size's threads ran (share of each thread's CPU
/// time by CPU), from [`Placement::text`] per size.
pub fn where_ran(o: &mut dyn std::io::Write, ran: &[(usize, String)]) -> std::io::Result<()> {
    if ran.is_empty() {
        return Ok(());
    }
    writeln!(
        o,
        " where softrnic's threads ran (share of each one's CPU time by CPU):"
    )?;
    for (size, t) in ran {
        let t = t.strip_prefix("ran on CPU: ").unwrap_or(t);
        writeln!(o, " {:>10}  {t}", super::report::human_size(*size))?;
    }
    Ok(())
}

fn share(part: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        part as f64 / total as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use softrnic_rnic::affinity;

    /// A thread pinned to one CPU that burns CPU time is booked there, wholly.
    #[test]
    fn a_pinned_busy_thread_is_booked_to_its_cpu() {
        let cpu = *affinity::allowed_cpus().last().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let busy = std::thread::spawn(move || {
            affinity::pin_thread(cpu).unwrap();
            tx.send(affinity::thread_id()).unwrap();
            let mut x = 0u64;
            while !s.load(Ordering::Relaxed) {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
            }
            x
        });
        let tid = rx.recv().unwrap();
        let sampler = Sampler::start(vec![Watched {
            role: "busy".into(),
            tid,
        }]);
        // Until the sampler has looked a few times while the thread ran for a
        // measurable time (no clock involved: the kernel's own count of its run time).
        let start = run_ns(tid).unwrap();
        while sampler.taken() < 4 || run_ns(tid).unwrap() < start + 20_000_000 {
            std::thread::yield_now();
        }
        let p = sampler.finish();
        stop.store(true, Ordering::Relaxed);
        busy.join().unwrap();
        let (w, by) = &p.threads[0];
        assert_eq!(w.tid, tid);
        assert_eq!(by.keys().copied().collect::<Vec<_>>(), vec![cpu], "{p:?}");
        assert!(by[&cpu] > 0, "{p:?}");
        let text = p.text().unwrap();
        assert!(
            text.starts_with(&format!("ran on CPU: busy {cpu}:100% (")),
            "{text}"
        );
        assert_eq!(
            p.json()["placement"][0]["share_by_cpu"][cpu.to_string()],
            1.0
        );
    }

    #[test]
    fn nothing_watched_starts_nothing() {
        let s = Sampler::start(Vec::new());
        assert!(s.thread.is_none());
        assert_eq!(s.finish(), Placement::default());
    }
}
