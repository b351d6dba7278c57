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
use std::cell::Cell;
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

/// How many of a consumer's marks go to the CPU it last looked up before it asks the
/// kernel again (see [`mark_consumer`]).
const CONSUMER_CPU_RECHECK: u32 = 64;

/// A consumer thread's mark word, kept between its polls: the word of the CPU it ran on
/// when it last asked, and how many marks may still go there. Two cells, not one
/// copied pair: a poll that marks the kept word loads and stores the count and only
/// loads the word, where the pair was loaded, its `Option` tested and both stored back
/// (under callgrind about 6 instructions a poll fewer, session 30).
struct ConsumerMark {
    /// Marks that may still go to `slot`; while it is above 0, `slot` is the word of
    /// the CPU last asked. 0: ask again (and, where the CPU is unknown, mark nothing).
    left: Cell<u32>,
    slot: Cell<&'static AtomicU64>,
}

/// The word a consumer mark holds before it knows its CPU: never marked (`left` is 0).
static NO_CPU: AtomicU64 = AtomicU64::new(0);

impl ConsumerMark {
    const fn new() -> ConsumerMark {
        ConsumerMark {
            left: Cell::new(0),
            slot: Cell::new(&NO_CPU),
        }
    }

    /// One poll's mark, on `marks`, with `cpu` asked only when the kept word is used up
    /// (or none is kept: where the thread runs was unknown).
    #[inline]
    fn mark(&self, marks: impl FnOnce() -> &'static Marks, cpu: impl FnOnce() -> Option<usize>) {
        let left = self.left.get();
        let slot = if left > 0 {
            self.left.set(left - 1);
            self.slot.get()
        } else {
            let Some(slot) = cpu().map(|c| marks().slot(c)) else {
                return;
            };
            self.slot.set(slot);
            self.left.set(CONSUMER_CPU_RECHECK - 1);
            slot
        };
        slot.store(
            slot.load(Ordering::Relaxed).wrapping_add(1),
            Ordering::Relaxed,
        );
    }
}

thread_local! {
    /// This thread's consumer mark (a constant start and no destructor: plain
    /// thread-local words, no lazy set-up on each access).
    static CONSUMER_MARK: ConsumerMark = const { ConsumerMark::new() };
}

/// [`mark`] for a consumer's poll (`Cq::poll`, every call), without asking the kernel
/// where the thread runs on every poll (`sched_getcpu` and the look-up of the word
/// were about 27 instructions of an empty poll of about 270): the word of the CPU found
/// at one poll takes the marks of the next [`CONSUMER_CPU_RECHECK`] - 1 polls too.
///
/// The engine's promise holds: an engine yields when the consumers' word of its CPU
/// changed since its last look. A consumer that stays on its CPU changes that word on
/// every poll, as before. One that moved marks its old CPU's word for at most
/// [`CONSUMER_CPU_RECHECK`] - 1 more polls, then its new CPU's: an engine on the new CPU
/// yields to it at most that many of its polls late (a few tens of microseconds of
/// polling; the consumer polls only while it runs, so the delay is counted in its own
/// polls, not in the engine's spin), and one on the old CPU may yield that many times
/// for nothing. A busy-polling consumer is normally pinned, so neither happens.
#[inline]
pub(crate) fn mark_consumer() {
    CONSUMER_MARK.with(|m| m.mark(|| marks(Spinner::Consumer), current_cpu));
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
        // A thread of its own: its consumer mark starts with no CPU kept.
        std::thread::spawn(|| {
            let cpu = current_cpu().expect("sched_getcpu works on Linux");
            // Pinned there, so the marks are made on `cpu`.
            let _pin = crate::sys::affinity::pin_current(cpu).expect("may stay where it runs");
            let mut engine = IdleYield::to(Spinner::Consumer);
            let mut consumer = IdleYield::to(Spinner::Engine);
            engine.other_waits();
            consumer.other_waits();
            // Every poll is seen, the ones that reuse the kept CPU too.
            // (Other tests' marks on this CPU only add to a change.)
            for poll in 0..3 * CONSUMER_CPU_RECHECK {
                mark_consumer();
                assert!(engine.other_waits(), "poll {poll} marked this CPU");
            }
            mark(Spinner::Engine);
            assert!(consumer.other_waits(), "the engine's turn marked this CPU");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_consumer_marks_every_poll_and_asks_for_its_cpu_once_per_recheck() {
        // A static's, not leaked: the marks live as the test's words must (`'static`),
        // and LeakSanitizer sees them reachable.
        static MARKS: OnceLock<Marks> = OnceLock::new();
        let marks: &'static Marks = MARKS.get_or_init(|| Marks::new(2));
        let consumer = ConsumerMark::new();
        let (mut on, mut asked) = (0, 0);
        let mut engine0 = IdleYield::to(Spinner::Consumer);
        let mut engine1 = IdleYield::to(Spinner::Consumer);
        engine0.look(marks, 0);
        engine1.look(marks, 1);
        let poll = |consumer: &ConsumerMark, on: usize, asked: &mut u32| {
            consumer.mark(
                || marks,
                || {
                    *asked += 1;
                    Some(on)
                },
            );
        };
        for n in 0..3 * CONSUMER_CPU_RECHECK {
            poll(&consumer, on, &mut asked);
            assert!(
                engine0.look(marks, 0),
                "poll {n} seen by the engine on its CPU"
            );
            assert!(
                !engine1.look(marks, 1),
                "poll {n} not seen on the other CPU"
            );
        }
        assert_eq!(
            asked, 3,
            "the CPU asked once per {CONSUMER_CPU_RECHECK} polls"
        );
        // The consumer moves to CPU 1: the engine there sees it within the recheck,
        // and from then on at every poll; the old CPU's marks stop.
        on = 1;
        let mut late = 0;
        while !engine1.look(marks, 1) {
            poll(&consumer, on, &mut asked);
            late += 1;
            assert!(
                late <= CONSUMER_CPU_RECHECK,
                "the move not seen in {late} polls"
            );
        }
        engine0.look(marks, 0);
        for n in 0..2 * CONSUMER_CPU_RECHECK {
            poll(&consumer, on, &mut asked);
            assert!(engine1.look(marks, 1), "poll {n} after the move seen");
            assert!(
                !engine0.look(marks, 0),
                "poll {n} after the move not on the old CPU"
            );
        }
        // Where it runs unknown: nothing marked, and asked again at the next poll.
        let lost = ConsumerMark::new();
        let before = asked;
        for _ in 0..3 {
            lost.mark(
                || marks,
                || {
                    asked += 1;
                    None
                },
            );
        }
        assert_eq!(asked - before, 3, "an unknown CPU is asked at every poll");
        assert!(!engine0.look(marks, 0) && !engine1.look(marks, 1));
    }

    #[test]
    fn a_consumer_that_moved_marks_its_new_cpu_within_the_recheck() {
        let cpus = crate::sys::affinity::allowed_cpus();
        let [a, b, ..] = cpus[..] else {
            return; // one CPU: nowhere to move
        };
        std::thread::spawn(move || {
            let pin_a = crate::sys::affinity::pin_current(a).expect("may run on a");
            mark_consumer();
            drop(pin_a);
            let _pin_b = crate::sys::affinity::pin_current(b).expect("may run on b");
            let mut engine = IdleYield::to(Spinner::Consumer);
            engine.other_waits();
            // Other tests' marks on b could only make this pass early; the recheck
            // must make it pass without them.
            for _ in 0..CONSUMER_CPU_RECHECK {
                mark_consumer();
            }
            assert!(engine.other_waits(), "the consumer's new CPU marked");
        })
        .join()
        .unwrap();
    }
}
