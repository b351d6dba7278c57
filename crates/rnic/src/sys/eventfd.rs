//! An eventfd used as a level: readable while something is pending. A completion
//! channel keeps it readable exactly while its event queue is non-empty, so a program
//! can hand the descriptor to epoll/poll (or Tokio's `AsyncFd`) as it would an
//! `ibv_comp_channel`'s.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// A non-blocking, close-on-exec eventfd.
#[derive(Debug)]
pub(crate) struct EventFd {
    fd: OwnedFd,
}

impl EventFd {
    pub(crate) fn new() -> io::Result<EventFd> {
        // SAFETY: eventfd takes an initial count and flags and returns a new descriptor
        // or -1; it touches no memory of ours.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by eventfd, is valid and owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(EventFd { fd })
    }

    /// Makes the descriptor readable (adds 1 to the counter).
    pub(crate) fn set(&self) -> io::Result<()> {
        let one: u64 = 1;
        loop {
            // SAFETY: writes the 8 octets of `one`, a live local, to our own descriptor.
            let r = unsafe {
                libc::write(
                    self.fd.as_raw_fd(),
                    (&one as *const u64).cast(),
                    std::mem::size_of::<u64>(),
                )
            };
            if r == 8 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => continue,
                // The counter is at its maximum: it is readable already.
                io::ErrorKind::WouldBlock => return Ok(()),
                _ => return Err(e),
            }
        }
    }

    /// Makes the descriptor unreadable (reads the counter back to zero).
    pub(crate) fn clear(&self) -> io::Result<()> {
        let mut v: u64 = 0;
        loop {
            // SAFETY: reads at most 8 octets into `v`, a live local of that size.
            let r = unsafe {
                libc::read(
                    self.fd.as_raw_fd(),
                    (&mut v as *mut u64).cast(),
                    std::mem::size_of::<u64>(),
                )
            };
            if r == 8 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => continue,
                // Already zero.
                io::ErrorKind::WouldBlock => return Ok(()),
                _ => return Err(e),
            }
        }
    }

    /// Waits up to `timeout` (`None`: for ever) for the descriptor to be readable;
    /// returns whether it is. An interrupted wait returns false (the caller re-checks).
    pub(crate) fn wait_readable(&self, timeout: Option<Duration>) -> io::Result<bool> {
        poll_readable(self.fd.as_fd(), timeout)
    }
}

impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Waits up to `timeout` for `fd` to be readable (`poll(2)`); a timeout beyond what
/// poll takes is capped (the caller loops on its own deadline).
pub(crate) fn poll_readable(fd: BorrowedFd<'_>, timeout: Option<Duration>) -> io::Result<bool> {
    let ms: libc::c_int = match timeout {
        None => -1,
        // Rounded up, so a short wait does not become a busy loop of zero timeouts.
        Some(t) => t
            .as_nanos()
            .div_ceil(1_000_000)
            .min(libc::c_int::MAX as u128) as libc::c_int,
    };
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, a live local, and its count.
    let r = unsafe { libc::poll(&mut p, 1, ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok(false)
        } else {
            Err(e)
        };
    }
    Ok(r > 0 && p.revents & libc::POLLIN != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readable_exactly_between_set_and_clear() {
        let e = EventFd::new().unwrap();
        assert!(!e.wait_readable(Some(Duration::ZERO)).unwrap());
        e.clear().unwrap(); // clearing a clear one is fine
        e.set().unwrap();
        e.set().unwrap();
        assert!(e.wait_readable(Some(Duration::ZERO)).unwrap());
        assert!(e.wait_readable(None).unwrap());
        e.clear().unwrap();
        assert!(!e.wait_readable(Some(Duration::from_millis(1))).unwrap());
    }

    #[test]
    fn a_waiter_wakes_when_another_thread_sets() {
        let e = std::sync::Arc::new(EventFd::new().unwrap());
        let e2 = e.clone();
        let t = std::thread::spawn(move || e2.wait_readable(None).unwrap());
        e.set().unwrap();
        assert!(t.join().unwrap());
    }
}
