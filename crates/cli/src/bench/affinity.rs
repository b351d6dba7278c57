//! CPU affinity for the benchmark's threads (busy-polling sides must sit on different
//! CPUs). The only `unsafe` of the CLI: two libc calls on a plain-data CPU set.
#![allow(unsafe_code)]

use std::io;

fn empty_set() -> libc::cpu_set_t {
    // SAFETY: cpu_set_t is a plain bit array; all zeroes is the empty set.
    unsafe { std::mem::zeroed() }
}

fn get() -> io::Result<libc::cpu_set_t> {
    let mut set = empty_set();
    // SAFETY: pid 0 is the calling thread; `set` is a valid, correctly sized out-buffer.
    let r = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if r == 0 {
        Ok(set)
    } else {
        Err(io::Error::last_os_error())
    }
}

fn set(set: &libc::cpu_set_t) -> io::Result<()> {
    // SAFETY: pid 0 is the calling thread; `set` is a valid, correctly sized CPU set.
    let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The CPUs the calling thread may run on, ascending (empty if unknown).
pub fn allowed_cpus() -> Vec<usize> {
    let Ok(s) = get() else {
        return Vec::new();
    };
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: `c` is below CPU_SETSIZE, so the bit lies inside `s`.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &s) })
        .collect()
}

/// Restores the thread's previous affinity when dropped.
pub struct PinGuard {
    previous: Option<libc::cpu_set_t>,
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
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "CPU out of range",
        ));
    }
    let previous = get()?;
    let mut s = empty_set();
    // SAFETY: `cpu` is below CPU_SETSIZE (checked above), so the bit lies inside `s`.
    unsafe { libc::CPU_SET(cpu, &mut s) };
    set(&s)?;
    Ok(PinGuard {
        previous: Some(previous),
    })
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
            }
            assert_eq!(allowed_cpus(), before);
        })
        .join()
        .unwrap();
    }
}
