//! CPU affinity: the CPUs a thread may run on, pinning a thread to one of them (engine
//! threads, and the benchmark's busy-polling sides, which must sit on different CPUs),
//! and where a thread runs now. Linux `sched_*` calls on a plain-data CPU set.

use std::io;

fn empty_set() -> libc::cpu_set_t {
    // SAFETY: cpu_set_t is a plain bit array; all zeroes is the empty set.
    unsafe { std::mem::zeroed() }
}

fn get() -> io::Result<libc::cpu_set_t> {
    get_of(0)
}

/// The affinity of thread `tid` (0: the calling thread).
fn get_of(tid: i32) -> io::Result<libc::cpu_set_t> {
    let mut set = empty_set();
    // SAFETY: `tid` names a thread (0: the calling one; the kernel checks it exists);
    // `set` is a valid, correctly sized out-buffer.
    let r =
        unsafe { libc::sched_getaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if r == 0 {
        Ok(set)
    } else {
        Err(io::Error::last_os_error())
    }
}

fn set(set: &libc::cpu_set_t) -> io::Result<()> {
    set_of(0, set)
}

/// Sets the affinity of thread `tid` (0: the calling thread).
fn set_of(tid: i32, set: &libc::cpu_set_t) -> io::Result<()> {
    // SAFETY: `tid` names a thread (0: the calling one; the kernel checks it exists and
    // that we may change it); `set` is a valid, correctly sized CPU set.
    let r = unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), set) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The CPUs the calling thread may run on, ascending (empty if unknown).
pub fn allowed_cpus() -> Vec<usize> {
    thread_cpus(0)
}

/// The CPUs thread `tid` of this process may run on (0: the calling thread), ascending;
/// empty if unknown.
pub fn thread_cpus(tid: i32) -> Vec<usize> {
    let Ok(s) = get_of(tid) else {
        return Vec::new();
    };
    members(&s)
}

fn members(s: &libc::cpu_set_t) -> Vec<usize> {
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: `c` is below CPU_SETSIZE, so the bit lies inside `s`.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, s) })
        .collect()
}

/// Lets thread `tid` of this process run on `cpus` only (an engine thread placed by
/// another thread, see `placement.rs`). An empty list, or a CPU beyond what a CPU set
/// can name, is `InvalidInput`; CPUs none of which exist or may be used are the
/// kernel's `EINVAL` (`InvalidInput` too).
pub fn set_thread_cpus(tid: i32, cpus: &[usize]) -> io::Result<()> {
    if cpus.is_empty() || cpus.iter().any(|&c| c >= libc::CPU_SETSIZE as usize) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "no CPU, or a CPU out of range",
        ));
    }
    let mut s = empty_set();
    for &c in cpus {
        // SAFETY: `c` is below CPU_SETSIZE (checked above), so the bit lies inside `s`.
        unsafe { libc::CPU_SET(c, &mut s) };
    }
    set_of(tid, &s)
}

/// The CPUs the process may run on (its main thread's affinity, which threads inherit
/// unless they change theirs), ascending; empty if unknown.
pub fn process_cpus() -> Vec<usize> {
    let mut s = empty_set();
    // SAFETY: the pid names the main thread of this process; `s` is a valid, correctly
    // sized out-buffer.
    let r = unsafe {
        libc::sched_getaffinity(
            libc::getpid(),
            std::mem::size_of::<libc::cpu_set_t>(),
            &mut s,
        )
    };
    if r != 0 {
        return Vec::new();
    }
    members(&s)
}

/// Pins the calling thread to `cpu` for good. A CPU beyond what a CPU set can name is
/// `InvalidInput`; one that does not exist or that this process may not use is the
/// kernel's `EINVAL` (`InvalidInput` too).
pub fn pin_thread(cpu: usize) -> io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "CPU out of range",
        ));
    }
    let mut s = empty_set();
    // SAFETY: `cpu` is below CPU_SETSIZE (checked above), so the bit lies inside `s`.
    unsafe { libc::CPU_SET(cpu, &mut s) };
    set(&s)
}

/// Restores the thread's previous affinity when dropped.
pub struct PinGuard {
    previous: Option<libc::cpu_set_t>,
}

impl std::fmt::Debug for PinGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PinGuard")
    }
}

impl Drop for PinGuard {
    fn drop(&mut self) {
        if let Some(p) = self.previous.take() {
            let _ = set(&p);
        }
    }
}

/// Pins the calling thread to `cpu` until the guard is dropped.
pub fn pin_current(cpu: usize) -> io::Result<PinGuard> {
    let previous = get()?;
    pin_thread(cpu)?;
    Ok(PinGuard {
        previous: Some(previous),
    })
}

/// The CPU the calling thread runs on at this instant (it may move at once unless it is
/// pinned); `None` if the kernel cannot say.
pub fn current_cpu() -> Option<usize> {
    // SAFETY: sched_getcpu takes no arguments and only reads the calling thread's state.
    let c = unsafe { libc::sched_getcpu() };
    usize::try_from(c).ok()
}

/// The kernel's id of the calling thread (what `/proc/self/task/<tid>` names).
pub fn thread_id() -> i32 {
    // SAFETY: gettid takes no arguments and cannot fail.
    unsafe { libc::gettid() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pin_and_restore() {
        let before = allowed_cpus();
        assert!(!before.is_empty());
        std::thread::spawn(move || {
            {
                let _g = pin_current(before[0]).unwrap();
                assert_eq!(allowed_cpus(), vec![before[0]]);
                assert_eq!(current_cpu(), Some(before[0]));
            }
            assert_eq!(allowed_cpus(), before);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn pin_for_good() {
        let last = *allowed_cpus().last().unwrap();
        std::thread::spawn(move || {
            pin_thread(last).unwrap();
            assert_eq!(allowed_cpus(), vec![last]);
            assert_eq!(current_cpu(), Some(last));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn cpus_that_cannot_be_had_are_errors() {
        std::thread::spawn(|| {
            let before = allowed_cpus();
            let too_big = libc::CPU_SETSIZE as usize;
            assert_eq!(
                pin_thread(too_big).unwrap_err().kind(),
                io::ErrorKind::InvalidInput
            );
            // Nameable but not a CPU of this machine: the kernel says EINVAL.
            let absent = too_big - 1;
            if !before.contains(&absent) {
                let e = pin_current(absent).unwrap_err();
                assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}");
            }
            assert_eq!(allowed_cpus(), before, "a failed pin changes nothing");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_pinned_thread_does_not_narrow_the_process_cpus() {
        let all = process_cpus();
        assert!(!all.is_empty());
        let got = std::thread::spawn(move || {
            pin_thread(all[0]).unwrap();
            process_cpus()
        })
        .join()
        .unwrap();
        assert_eq!(got, process_cpus());
    }

    #[test]
    fn another_thread_can_be_placed_and_read() {
        let all = allowed_cpus();
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            tx.send(thread_id()).unwrap();
            let _ = done.recv();
            allowed_cpus()
        });
        let tid = rx.recv().unwrap();
        let last = *all.last().unwrap();
        set_thread_cpus(tid, &[last]).unwrap();
        assert_eq!(thread_cpus(tid), vec![last]);
        set_thread_cpus(tid, &all).unwrap();
        assert_eq!(thread_cpus(tid), all);
        assert_eq!(
            set_thread_cpus(tid, &[]).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        done_tx.send(()).unwrap();
        assert_eq!(t.join().unwrap(), all, "a failed placement changes nothing");
    }

    #[test]
    fn thread_ids_differ_between_threads() {
        let here = thread_id();
        let there = std::thread::spawn(thread_id).join().unwrap();
        assert!(here > 0 && there > 0);
        assert_ne!(here, there);
    }
}
