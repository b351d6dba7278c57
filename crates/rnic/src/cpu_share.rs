//! Whether a spinning thread shares its CPU with one of softrnic's that waits for it, so
//! that it yields the CPU only then.
//!
//! Two kinds of thread spin here. An engine that has just served its sockets spins
//! before it blocks (`DeviceConfig::engine_spin`); a consumer that busy-polls a CQ
//! drives its QPs, and while it owns a socket of large FPDUs it re-reads it
//! (`Transport::yield_before_reread`). Each used to call `sched_yield` on every empty
//! turn, so that the other, on the same CPU (where engines run by default:
//! `placement.rs`), got the CPU at once instead of at the end of a scheduler time
//! slice. But the kernel's scheduler (EEVDF, Linux 6.6 and later) pushes a yielding
//! thread's deadline back by a whole slice at every yield that finds another runnable
//! thread, so a thread spinning beside any other work (a compiler, a test suite) gave
//! much of its CPU away: on this 2-CPU machine, with a build running at nice 19, the
//! receiving engine of a 1 MiB `write_bw` ran about 1 s of each 2 s with the yields and
//! 1.7-1.8 s without them, and the reading consumer of a 1 MiB `read_bw` 1.1-1.3 s
//! against 1.9-2.0 s (docs/ARCHITECTURE.md, "The idle yield").
//!
//! So each kind marks the CPU it runs on, and a thread yields only when the other
//! kind's mark on its CPU changed since its last look: a consumer polled there (for an
//! engine), an engine ran a turn there (for a consumer). Anything else on the CPU gets
//! it by the scheduler's own turns. A mark is a plain load and store of a per-CPU word
//! (no read-modify-write: two threads of a kind on one CPU that race lose a count, and
//! a change is all a look needs).

use crate::sys::affinity::current_cpu;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// One word per CPU, each on its own cache line: a thread on one CPU never writes the
/// line a thread on another reads.
#[repr(align(64))]
#[derive(Default)]
struct Mark(AtomicU64);

/// The marks of a set of CPUs (a CPU above them is folded onto them).
struct Marks(Box<[Mark]>);

impl Marks {
    fn new(cpus: usize) -> Marks {
        Marks((0..cpus.max(1)).map(|_| Mark::default()).collect())
    }

    /// A CPU's word. The CPU is almost always one of those counted, so the fold (a
    /// division: tens of cycles, on every poll) is made only for one above them.
    #[inline]
    fn slot(&self, cpu: usize) -> &AtomicU64 {
        let n = self.0.len();
        let i = if cpu < n { cpu } else { cpu % n };
        &self.0[i].0
    }

    fn mark(&self, cpu: usize) {
        let s = self.slot(cpu);
        s.store(s.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
    }
}

/// One of the two kinds of spinning thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Spinner {
    /// A program thread polling a CQ.
    Consumer,
    /// An engine thread.
    Engine,
}

/// This process's marks of `kind`, one per CPU the system has configured.
fn marks(kind: Spinner) -> &'static Marks {
    static CONSUMERS: OnceLock<Marks> = OnceLock::new();
    static ENGINES: OnceLock<Marks> = OnceLock::new();
    let m = match kind {
        Spinner::Consumer => &CONSUMERS,
        Spinner::Engine => &ENGINES,
    };
    m.get_or_init(|| {
        // SAFETY: sysconf only reads a system constant.
        let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
        Marks::new(usize::try_from(n).unwrap_or(1).min(4096))
    })
}

/// A thread of `kind` runs on this CPU (a consumer polls a CQ, an engine turns its
/// loop): one of the other kind spinning here should let it run.
#[inline]
pub(crate) fn mark(kind: Spinner) {
    if let Some(cpu) = current_cpu() {
        marks(kind).mark(cpu);
    }
}

/// A spinning thread's view of the other kind's mark on its CPU: what it saw at its
/// last look.
#[derive(Debug)]
pub(crate) struct IdleYield {
    /// The kind it yields to.
    other: Spinner,
    seen: Option<(usize, u64)>,
}

impl IdleYield {
    /// The view of a thread that yields to threads of kind `other`.
    pub(crate) const fn to(other: Spinner) -> IdleYield {
        IdleYield { other, seen: None }
    }

    /// Whether the thread, idle, should yield now: a thread of the other kind ran on
    /// its CPU since the last look (or it moved to another CPU since; or where it runs
    /// is unknown: then it yields, as it always did).
    pub(crate) fn other_waits(&mut self) -> bool {
        match current_cpu() {
            Some(cpu) => self.look(marks(self.other), cpu),
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
    fn a_spinner_yields_only_after_the_other_kind_ran_on_its_cpu() {
        let marks = Marks::new(2);
        let mut engine = IdleYield::to(Spinner::Consumer);
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
    fn a_mark_is_of_the_cpu_the_caller_runs_on_and_seen_by_the_other_kind() {
        let cpu = current_cpu().expect("sched_getcpu works on Linux");
        // Pinned there, so the marks are made on `cpu`.
        let _pin = crate::sys::affinity::pin_current(cpu).expect("may stay where it runs");
        let mut engine = IdleYield::to(Spinner::Consumer);
        let mut consumer = IdleYield::to(Spinner::Engine);
        engine.other_waits();
        consumer.other_waits();
        mark(Spinner::Consumer);
        // (Other tests' marks on this CPU only add to a change.)
        assert!(engine.other_waits(), "the poll marked this CPU");
        mark(Spinner::Engine);
        assert!(consumer.other_waits(), "the engine's turn marked this CPU");
    }
}
