//! Whether an idle engine shares its CPU with a polling consumer, so that it yields the
//! CPU only to one.
//!
//! An engine that has just served its sockets spins for a while before it blocks
//! (`DeviceConfig::engine_spin`). It used to call `sched_yield` after every empty turn, so
//! that a program thread polling a CQ on the same CPU (where engines run by default:
//! `placement.rs`) got the CPU at once instead of at the end of a scheduler time slice.
//! But the kernel's scheduler (EEVDF, Linux 6.6 and later) pushes a yielding thread's
//! deadline back by a whole slice at every yield that finds another runnable thread, so
//! an engine spinning beside any other work (a compiler, a test suite) gave most of its
//! CPU away: on this 2-CPU machine, with a build running at nice 19, the receiving
//! engine of a 1 MiB `write_bw` ran 0.97-1.11 s of each 2 s run with the yields and
//! 1.80-1.95 s without them (docs/ARCHITECTURE.md, "The engine's idle yield").
//!
//! So a consumer's CQ poll marks its CPU, and an idle engine yields only when a poll was
//! marked on its CPU since its last look: a consumer that polls there is runnable and
//! waits for the CPU. Anything else on the CPU gets it by the scheduler's own turns. A
//! mark is a plain load and store of a per-CPU word (no read-modify-write: two
//! consumers on one CPU that race lose a count, and a change is all the engine reads).

use crate::sys::affinity::current_cpu;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// One word per CPU, each on its own cache line: a consumer on one CPU never writes the
/// line an engine on another reads.
#[repr(align(64))]
#[derive(Default)]
struct Mark(AtomicU64);

/// The marks of a set of CPUs (a CPU above them is folded onto them).
struct Marks(Box<[Mark]>);

impl Marks {
    fn new(cpus: usize) -> Marks {
        Marks((0..cpus.max(1)).map(|_| Mark::default()).collect())
    }

    fn slot(&self, cpu: usize) -> &AtomicU64 {
        &self.0[cpu % self.0.len()].0
    }

    /// A poll on `cpu`.
    fn mark(&self, cpu: usize) {
        let s = self.slot(cpu);
        s.store(s.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
    }
}

/// This process's marks, one per CPU the system has configured.
fn marks() -> &'static Marks {
    static MARKS: OnceLock<Marks> = OnceLock::new();
    MARKS.get_or_init(|| {
        // SAFETY: sysconf only reads a system constant.
        let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
        Marks::new(usize::try_from(n).unwrap_or(1).min(4096))
    })
}

/// A consumer polls a CQ on this CPU: an engine spinning here should let it run.
#[inline]
pub(crate) fn consumer_polls() {
    if let Some(cpu) = current_cpu() {
        marks().mark(cpu);
    }
}

/// An engine's view of its CPU's mark: what it saw at its last look.
#[derive(Debug, Default)]
pub(crate) struct IdleYield {
    seen: Option<(usize, u64)>,
}

impl IdleYield {
    /// Whether the engine, idle, should yield now: a consumer polled on its CPU since
    /// the last look (or the engine moved to another CPU since; or where it runs is
    /// unknown: then it yields, as engines always did).
    pub(crate) fn consumer_waits(&mut self) -> bool {
        match current_cpu() {
            Some(cpu) => self.look(marks(), cpu),
            None => true,
        }
    }

    fn look(&mut self, marks: &Marks, cpu: usize) -> bool {
        let now = marks.slot(cpu).load(Ordering::Relaxed);
        // The first look has nothing to compare with: it only records.
        let changed = self.seen.is_some_and(|seen| seen != (cpu, now));
        self.seen = Some((cpu, now));
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_engine_yields_only_after_a_poll_on_its_cpu() {
        let marks = Marks::new(2);
        let mut engine = IdleYield::default();
        assert!(!engine.look(&marks, 0), "the first look only records");
        assert!(!engine.look(&marks, 0), "no poll since: no yield");
        marks.mark(0);
        assert!(engine.look(&marks, 0), "a poll on its CPU: yield");
        assert!(!engine.look(&marks, 0), "once per poll seen");
        marks.mark(1);
        assert!(!engine.look(&marks, 0), "a poll on another CPU: no yield");
        assert!(engine.look(&marks, 1), "moved to another CPU: yield once");
        assert!(!engine.look(&marks, 1));
        // CPUs beyond the configured ones share the slots (cpu % n).
        marks.mark(2);
        assert!(engine.look(&marks, 0), "CPU 2 folds onto slot 0");
    }

    #[test]
    fn a_poll_marks_the_cpu_the_caller_runs_on() {
        let cpu = current_cpu().expect("sched_getcpu works on Linux");
        // Pinned there, so the poll runs on `cpu`.
        let _pin = crate::sys::affinity::pin_current(cpu).expect("may stay where it runs");
        let mut engine = IdleYield::default();
        engine.consumer_waits();
        consumer_polls();
        // (Other tests' polls on this CPU only add to the change.)
        assert!(engine.consumer_waits(), "the poll marked this CPU");
    }
}
