//! Every system call the crate makes that std does not wrap, and so every `unsafe`
//! block of the crate. Each wrapper takes safe Rust types and returns `io::Result`.

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

/// `-1` from a libc call becomes the thread's `errno`.
fn check(ret: libc::ssize_t) -> io::Result<usize> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
}

/// Receives one datagram or packet without blocking. Returns its *real* length
/// (`MSG_TRUNC`), which exceeds `buf.len()` when the tail was cut off.
pub(crate) fn recv_trunc(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is a live, writable allocation of `buf.len()` octets for the whole
    // call, and recv writes at most that many; an invalid fd only yields EBADF.
    let n = unsafe {
        libc::recv(
            fd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_TRUNC | libc::MSG_DONTWAIT,
        )
    };
    check(n)
}

/// Waits until `fd` is readable or `timeout` passes (`None`: no limit). True when
/// readable (or in error or hung up: the next read tells which).
pub(crate) fn poll_readable(fd: RawFd, timeout: Option<Duration>) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.map_or(-1, |t| {
        // Round up so that a short wait does not become a busy poll of 0 ms.
        let ms = t.as_nanos().div_ceil(1_000_000);
        ms.min(i32::MAX as u128) as libc::c_int
    });
    loop {
        // SAFETY: `pfd` is one valid pollfd that lives across the call, and the count
        // passed is 1.
        let ret = unsafe { libc::poll(&mut pfd, 1, ms) };
        if ret >= 0 {
            return Ok(ret > 0);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}
