//! CPU time used, from `getrusage(2)`: for the whole process (every thread, the engine
//! threads included) or for the calling thread, so a benchmark can report what its work
//! cost in CPU, not only in wall time.

use std::io;
use std::time::Duration;

/// CPU time spent in user mode and in the kernel.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTime {
    /// User mode.
    pub user: Duration,
    /// Kernel (system calls, and the network stack's work done on their behalf).
    pub system: Duration,
}

impl CpuTime {
    /// User and system together.
    pub fn total(&self) -> Duration {
        self.user + self.system
    }

    /// What was spent since `earlier` (zero where a clock went backwards).
    pub fn since(&self, earlier: &CpuTime) -> CpuTime {
        CpuTime {
            user: self.user.saturating_sub(earlier.user),
            system: self.system.saturating_sub(earlier.system),
        }
    }
}

fn of(who: libc::c_int) -> io::Result<CpuTime> {
    // SAFETY: rusage is plain data; all zeroes is a valid value to be overwritten.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `who` is RUSAGE_SELF or RUSAGE_THREAD, and `u` is a valid, correctly
    // sized out-buffer that lives across the call.
    let r = unsafe { libc::getrusage(who, &mut u) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    let tv = |t: libc::timeval| {
        Duration::from_secs(u64::try_from(t.tv_sec).unwrap_or(0))
            + Duration::from_micros(u64::try_from(t.tv_usec).unwrap_or(0))
    };
    Ok(CpuTime {
        user: tv(u.ru_utime),
        system: tv(u.ru_stime),
    })
}

/// CPU time of the whole process so far: every thread, those that ended included.
pub fn process() -> io::Result<CpuTime> {
    of(libc::RUSAGE_SELF)
}

/// CPU time of the calling thread so far.
pub fn thread() -> io::Result<CpuTime> {
    of(libc::RUSAGE_THREAD)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// Burns CPU on this thread until its own clock has advanced by `d` (or 10 s of
    /// wall time passed, which fails the caller's assertion).
    fn burn(d: Duration) -> CpuTime {
        let start = thread().unwrap();
        let wall = Instant::now();
        let mut x = 0u64;
        loop {
            for i in 0..10_000u64 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
            }
            std::hint::black_box(x);
            let now = thread().unwrap();
            if now.since(&start).total() >= d || wall.elapsed() > Duration::from_secs(10) {
                return now.since(&start);
            }
        }
    }

    #[test]
    fn a_busy_thread_is_counted_by_its_thread_and_its_process() {
        let p0 = process().unwrap();
        let spent = burn(Duration::from_millis(20));
        assert!(spent.total() >= Duration::from_millis(20), "{spent:?}");
        assert!(spent.user > Duration::ZERO, "{spent:?}");
        let p1 = process().unwrap();
        assert!(p1.since(&p0).total() >= spent.total(), "{p0:?} {p1:?}");
    }

    /// Another thread's work counts for the process, not for this thread.
    #[test]
    fn other_threads_count_for_the_process_only() {
        let me0 = thread().unwrap();
        let p0 = process().unwrap();
        let spent = std::thread::spawn(|| burn(Duration::from_millis(20)))
            .join()
            .unwrap();
        let me1 = thread().unwrap();
        let p1 = process().unwrap();
        assert!(p1.since(&p0).total() >= spent.total(), "{p0:?} {p1:?}");
        assert!(me1.since(&me0).total() < spent.total(), "{me0:?} {me1:?}");
    }

    #[test]
    fn since_saturates() {
        let a = CpuTime {
            user: Duration::from_millis(5),
            system: Duration::from_millis(1),
        };
        let b = CpuTime {
            user: Duration::from_millis(7),
            system: Duration::ZERO,
        };
        assert_eq!(
            b.since(&a),
            CpuTime {
                user: Duration::from_millis(2),
                system: Duration::ZERO
            }
        );
        assert_eq!(a.total(), Duration::from_millis(6));
    }
}
