//! A one-shot timer descriptor (`timerfd`, CLOCK_MONOTONIC) for a poll set: epoll's
//! own timeout counts whole milliseconds (mio rounds a shorter wait up to one), which
//! is far too coarse for timers of tens or hundreds of microseconds, such as the own
//! TCP's loss probes and the simulated network's held-back packets.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// A non-blocking, close-on-exec monotonic timer descriptor: readable once it expires.
#[derive(Debug)]
pub(crate) struct TimerFd {
    fd: OwnedFd,
}

impl TimerFd {
    pub(crate) fn new() -> io::Result<TimerFd> {
        // SAFETY: timerfd_create takes a clock id and flags and returns a new
        // descriptor or -1; it touches no memory of ours.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by timerfd_create, is valid and owned by
        // nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(TimerFd { fd })
    }

    /// Expires once, `after` from now (at least a nanosecond: zero would disarm it);
    /// replaces any earlier setting.
    pub(crate) fn arm(&self, after: Duration) -> io::Result<()> {
        let after = after.max(Duration::from_nanos(1));
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: after.as_secs().min(i64::MAX as u64) as libc::time_t,
                tv_nsec: after.subsec_nanos() as libc::c_long,
            },
        };
        // SAFETY: `spec` is a live, initialised itimerspec; the old value is not
        // asked for (null), and the descriptor is our own.
        let r =
            unsafe { libc::timerfd_settime(self.fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Takes the expiry back (reads the count), so that the next one is a new event.
    pub(crate) fn clear(&self) {
        let mut count: u64 = 0;
        // SAFETY: reads at most 8 octets into `count`, a live local of that size. A
        // timer that has not expired answers EAGAIN, which is fine.
        let _ = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                (&mut count as *mut u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
    }
}

impl AsFd for TimerFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::eventfd::poll_readable;
    use std::time::Instant;

    #[test]
    fn expires_once_after_the_time_asked_and_is_cleared() {
        let t = TimerFd::new().expect("timerfd");
        assert!(!poll_readable(t.as_fd(), Some(Duration::ZERO)).expect("poll"));
        let start = Instant::now();
        t.arm(Duration::from_micros(300)).expect("arm");
        assert!(poll_readable(t.as_fd(), Some(Duration::from_secs(5))).expect("poll"));
        // Never before the time asked (a lower bound only: no upper bound is asserted
        // on a busy machine).
        assert!(start.elapsed() >= Duration::from_micros(300));
        t.clear();
        assert!(!poll_readable(t.as_fd(), Some(Duration::ZERO)).expect("poll"));
        // Armed again with a zero wait, it still fires (zero would disarm timerfd).
        t.arm(Duration::ZERO).expect("arm");
        assert!(poll_readable(t.as_fd(), Some(Duration::from_secs(5))).expect("poll"));
    }
}
