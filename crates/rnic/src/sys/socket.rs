//! Socket system calls: reads into region memory, sends of a buffer or of a gather list,
//! and the socket options the connection manager and the close path set. [`recv`],
//! [`send`] and [`tcp_congestion`] are public so the benchmark's TCP baselines make the
//! same system calls as softrnic's data path.

use crate::region::RegionSlice;
use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

/// A data-path system call made without glibc's wrapper, returning its result as
/// `read(2)` and `send(2)` report theirs.
///
/// glibc's `read`, `readv`, `recv`, `send` and `sendmsg` are cancellation points: in a
/// process with more than one thread each call switches the thread's cancellation type
/// on and off around the system call, two locked compare-exchanges (glibc 2.36). softrnic
/// never cancels a thread and its data sockets are non-blocking, so that buys nothing;
/// the generic `syscall(2)` entry makes the same system call without it. Measured here:
/// an empty `recv` on a non-blocking socket 173 ns through the wrapper, 155 ns direct
/// (alternating runs of 2,000,000 calls, minimum of six).
fn direct(r: libc::c_long) -> io::Result<usize> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// An `int` argument widened for `syscall(2)`, which reads every argument as a `long`.
fn long(v: libc::c_int) -> libc::c_long {
    libc::c_long::from(v)
}

/// Receives from `fd` into `buf` (`recvfrom(2)` without flags or address, as `recv`
/// makes it): at most `buf.len()` octets. [`recv_errno`] with the failure as an
/// `io::Error`.
pub fn recv(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    recv_errno(fd, buf).map_err(io::Error::from_raw_os_error)
}

/// [`recv`] whose failure is the bare `errno` value: the busy-polling consumer's empty
/// read (`EAGAIN`, nearly every poll) is then answered without building and decoding
/// an `io::Error` (about 15 instructions a poll). Public so the benchmark's
/// busy-polling TCP baseline polls the same way. Inline: the claimed read then keeps
/// the outcome in registers instead of a frame of its own (about 8 instructions on a
/// message's way from its `recvfrom` to the receive path, and on every empty poll).
#[inline]
pub fn recv_errno(fd: RawFd, buf: &mut [u8]) -> Result<usize, i32> {
    // SAFETY: the pointer and length describe `buf`, a unique borrow alive for the
    // call; the kernel writes at most `buf.len()` octets there and reads no address
    // (both address arguments are null). `__errno_location` gives the
    // calling thread's own `errno`, valid for the thread's life; it is read once,
    // right after the failed call set it.
    unsafe {
        let r = libc::syscall(
            libc::SYS_recvfrom,
            long(fd),
            buf.as_mut_ptr(),
            buf.len(),
            long(0),
            std::ptr::null_mut::<libc::sockaddr>(),
            std::ptr::null_mut::<libc::socklen_t>(),
        );
        if r < 0 {
            Err(*libc::__errno_location())
        } else {
            Ok(r as usize)
        }
    }
}

/// Reads from `fd` straight into region memory (at most `dst.len()` octets).
///
/// The region stays alive for the call (`dst` borrows it); whether the kernel writing
/// these octets is wanted is the caller's decision, as for any iovec: the receive path
/// only reads into a range the TPT granted to the payload being placed.
pub(crate) fn read_into(fd: RawFd, dst: &RegionSlice<'_>) -> io::Result<usize> {
    // SAFETY: `dst` is a bounds-checked view of live region memory (its borrow keeps the
    // region alive); `read(2)` writes at most `dst.len()` octets through the raw pointer,
    // and no Rust reference to that memory is formed here.
    direct(unsafe { libc::syscall(libc::SYS_read, long(fd), dst.as_ptr(), dst.len()) })
}

/// Reads from `fd` into region memory and, once that is full, on into `tail`
/// (`readv(2)`): a payload and the octets that follow it in one call. At most
/// `dst.len() + tail.len()` octets.
pub(crate) fn read_into_then(
    fd: RawFd,
    dst: &RegionSlice<'_>,
    tail: &mut [u8],
) -> io::Result<usize> {
    let iov = [
        dst.as_iovec(),
        libc::iovec {
            iov_base: tail.as_mut_ptr().cast(),
            iov_len: tail.len(),
        },
    ];
    // SAFETY: the first entry is a bounds-checked view of live region memory (as in
    // `read_into`), the second the unique borrow `tail`; both stay alive and are
    // written only by the kernel, at most their lengths, during the call. No Rust
    // reference to the region memory is formed.
    direct(unsafe { libc::syscall(libc::SYS_readv, long(fd), iov.as_ptr(), long(2)) })
}

/// Sends `buf` (without SIGPIPE: a closed peer is an `EPIPE` error).
pub fn send(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: the pointer and length describe the initialised octets of `buf`, which the
    // borrow keeps alive and unchanged during the call; the kernel only reads them.
    direct(unsafe {
        libc::syscall(
            libc::SYS_sendto,
            long(fd),
            buf.as_ptr(),
            buf.len(),
            long(libc::MSG_NOSIGNAL),
            std::ptr::null::<libc::sockaddr>(),
            long(0),
        )
    })
}

/// A gather list for [`sendmsg`]: raw pieces of memory that stay readable for `'a`.
///
/// Its entries may point at region memory, which the program may (against the rules of
/// a posted send) change concurrently: the kernel reading it then sends whatever is
/// there, never anything outside the pieces.
#[derive(Clone, Copy)]
pub(crate) struct IoVecs<'a> {
    iov: &'a [libc::iovec],
}

impl<'a> IoVecs<'a> {
    /// # Safety
    ///
    /// Every entry of `iov` must describe memory that is valid for reads of `iov_len`
    /// octets for all of `'a`.
    pub(crate) unsafe fn new(iov: &'a [libc::iovec]) -> IoVecs<'a> {
        IoVecs { iov }
    }

    /// Octets in the list.
    pub(crate) fn len(&self) -> usize {
        self.iov.iter().map(|v| v.iov_len).sum()
    }

    /// The first `len` octets of the list, with its entries copied into `storage` (the
    /// last one shortened).
    pub(crate) fn prefix<'b>(&self, len: usize, storage: &'b mut Vec<libc::iovec>) -> IoVecs<'b>
    where
        'a: 'b,
    {
        storage.clear();
        let mut left = len;
        for v in self.iov {
            if left == 0 {
                break;
            }
            let take = v.iov_len.min(left);
            storage.push(libc::iovec {
                iov_base: v.iov_base,
                iov_len: take,
            });
            left -= take;
        }
        // Every entry is a leading part of an entry of `self`, readable for `'a`.
        IoVecs { iov: storage }
    }

    /// Calls `f` with the first `len` octets of the list, piece by piece, e.g. to
    /// record what a send took.
    ///
    /// Region memory among them may be changed by the program meanwhile (against the
    /// rules of a posted send); `f` then sees some mix of old and new octets, as the
    /// kernel does.
    pub(crate) fn for_each_piece(&self, len: usize, mut f: impl FnMut(&[u8])) {
        let mut left = len;
        for v in self.iov {
            if left == 0 {
                break;
            }
            let take = v.iov_len.min(left);
            // SAFETY: by `IoVecs::new`'s contract the entry is readable for `'a`, which
            // outlives this call, and `take <= iov_len`; the slice lives only for `f`.
            // Nothing in the RNIC writes octets being sent; the program can only by
            // breaking the rule not to touch a buffer while its send is outstanding,
            // the race the transmit path's CRC over the same memory documents.
            f(unsafe { std::slice::from_raw_parts(v.iov_base as *const u8, take) });
            left -= take;
        }
    }
}

/// Sends a gather list with one `sendmsg(2)` (without SIGPIPE).
pub(crate) fn sendmsg(fd: RawFd, iov: IoVecs<'_>) -> io::Result<usize> {
    // SAFETY: a zeroed msghdr is a valid empty header; we then point it at the entries.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.iov.as_ptr().cast_mut();
    msg.msg_iovlen = iov.iov.len() as _;
    // SAFETY: `IoVecs::new`'s contract makes every entry readable memory for the call;
    // the kernel only reads through `msg_iov` (it does not write the iovec array either,
    // for a send).
    direct(unsafe {
        libc::syscall(
            libc::SYS_sendmsg,
            long(fd),
            &msg as *const libc::msghdr,
            long(libc::MSG_NOSIGNAL),
        )
    })
}

/// Makes closing `fd` send RST instead of FIN (a zero linger time).
pub(crate) fn set_linger_zero(fd: RawFd) {
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a valid socket fd and a correctly sized, initialised `linger` value.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&l as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

/// Sets the socket's send buffer to `octets` (Linux doubles it for its bookkeeping and
/// caps it at `net.core.wmem_max`); this turns off Linux's own tuning of that socket.
pub(crate) fn set_send_buffer(fd: RawFd, octets: u64) {
    let v = libc::c_int::try_from(octets).unwrap_or(libc::c_int::MAX);
    // SAFETY: a valid socket fd and a correctly sized, initialised int option value.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

/// Sets the socket's receive buffer to `octets` (Linux doubles it for its bookkeeping
/// and caps it at `net.core.rmem_max`); this turns off Linux's own tuning of its
/// receive window.
pub(crate) fn set_receive_buffer(fd: RawFd, octets: u64) {
    let v = libc::c_int::try_from(octets).unwrap_or(libc::c_int::MAX);
    // SAFETY: a valid socket fd and a correctly sized, initialised int option value.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

/// The socket's TCP congestion control algorithm (`TCP_CONGESTION`), if the kernel
/// reports one.
pub fn tcp_congestion(fd: RawFd) -> Option<String> {
    let mut name = [0u8; 16];
    let mut len = name.len() as libc::socklen_t;
    // SAFETY: a valid socket fd, and `name`/`len` describe a writable buffer of `len`
    // octets, which the kernel fills with at most that many.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if r != 0 {
        return None;
    }
    let got = &name[..(len as usize).min(name.len())];
    let end = got.iter().position(|&b| b == 0).unwrap_or(got.len());
    std::str::from_utf8(&got[..end]).ok().map(str::to_owned)
}

/// Sets the socket's TCP congestion control algorithm (`TCP_CONGESTION`); the kernel
/// refuses one it does not have, or, without `CAP_NET_ADMIN`, one that
/// `net.ipv4.tcp_allowed_congestion_control` does not list.
pub(crate) fn set_tcp_congestion(fd: RawFd, name: &str) -> io::Result<()> {
    // SAFETY: a valid socket fd, and the pointer and length describe the octets of
    // `name`, which the borrow keeps alive during the call; the kernel only reads them.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_ptr().cast(),
            name.len() as libc::socklen_t,
        )
    };
    if r != 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The socket's TCP maximum segment size, if the kernel reports one.
pub(crate) fn tcp_mss(fd: RawFd) -> Option<usize> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: a valid socket fd, and `v`/`len` are a correctly sized out-parameter pair.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_MAXSEG,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    (r == 0 && v > 0).then_some(v as usize)
}

/// Turns TCP keepalive on: probes after `idle` without traffic, one a second, three
/// unanswered ones end the connection.
pub(crate) fn set_keepalive(fd: RawFd, idle: Duration) {
    let secs = idle.as_secs().clamp(1, 3600) as libc::c_int;
    for (level, opt, val) in [
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1),
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, secs),
        (libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, 1),
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 3),
    ] {
        // SAFETY: a valid socket fd and a correctly sized int option value.
        unsafe {
            libc::setsockopt(
                fd,
                level,
                opt,
                (&val as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }
}

/// Octets the kernel holds for a socket: received and not yet read (`FIONREAD`), and
/// sent and not yet acknowledged, or not yet sent (`SIOCOUTQ`). For a hang report: data
/// sitting unread while its reader waits means the reader was not run, or not told.
pub(crate) fn queued(fd: RawFd) -> Option<(usize, usize)> {
    let ask = |request| {
        let mut v: libc::c_int = 0;
        // SAFETY: a valid socket fd; both requests write one int into `v`.
        let r = unsafe { libc::ioctl(fd, request, &mut v as *mut libc::c_int) };
        (r == 0).then(|| usize::try_from(v).unwrap_or(0))
    };
    Some((ask(libc::FIONREAD)?, ask(libc::TIOCOUTQ)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::region::Region;
    use softrnic_proto::RegionId;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (a, b)
    }

    fn int_opt(s: &TcpStream, level: libc::c_int, opt: libc::c_int) -> libc::c_int {
        let mut v: libc::c_int = -1;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: a valid socket fd and a correctly sized out-parameter pair.
        let r = unsafe {
            libc::getsockopt(
                s.as_raw_fd(),
                level,
                opt,
                (&mut v as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        assert_eq!(r, 0);
        v
    }

    #[test]
    fn read_into_places_into_region_memory() {
        let (mut a, b) = pair();
        a.write_all(b"placed by the kernel").unwrap();
        let r = Region::alloc(RegionId(1), 64).unwrap();
        let mut got = 0;
        while got < 20 {
            got += read_into(b.as_raw_fd(), &r.io_slice(8 + got, 20 - got).unwrap()).unwrap();
        }
        let mut out = [0u8; 28];
        r.read(0, &mut out).unwrap();
        assert_eq!(&out[..8], &[0; 8]);
        assert_eq!(&out[8..], b"placed by the kernel");
    }

    #[test]
    fn recv_reports_an_empty_queue_then_the_octets_then_the_end() {
        let (mut a, b) = pair();
        b.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 16];
        let e = recv(b.as_raw_fd(), &mut buf).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        a.write_all(b"eight oc").unwrap();
        let mut got = Vec::new();
        while got.len() < 8 {
            match recv(b.as_raw_fd(), &mut buf) {
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::hint::spin_loop(),
                Err(e) => panic!("recv: {e}"),
            }
        }
        assert_eq!(got, b"eight oc");
        drop(a);
        loop {
            match recv(b.as_raw_fd(), &mut buf[..3]) {
                Ok(n) => {
                    assert_eq!(n, 0, "nothing after the eight octets");
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::hint::spin_loop(),
                Err(e) => panic!("recv: {e}"),
            }
        }
        assert_eq!(
            recv(-1, &mut buf).unwrap_err().raw_os_error(),
            Some(libc::EBADF)
        );
    }

    #[test]
    fn send_and_sendmsg_deliver_in_order() {
        let (a, mut b) = pair();
        assert_eq!(send(a.as_raw_fd(), b"one,").unwrap(), 4);
        let (x, y) = (b"two,".to_vec(), b"three".to_vec());
        let iov = [
            libc::iovec {
                iov_base: x.as_ptr() as *mut libc::c_void,
                iov_len: x.len(),
            },
            libc::iovec {
                iov_base: y.as_ptr() as *mut libc::c_void,
                iov_len: y.len(),
            },
        ];
        // SAFETY: both entries point at the live vectors above, unchanged until the end.
        let list = unsafe { IoVecs::new(&iov) };
        assert_eq!(sendmsg(a.as_raw_fd(), list).unwrap(), 9);
        drop(a);
        let mut got = String::new();
        b.read_to_string(&mut got).unwrap();
        assert_eq!(got, "one,two,three");
    }

    #[test]
    fn send_to_a_closed_peer_is_an_error_not_a_signal() {
        let (a, b) = pair();
        set_linger_zero(b.as_raw_fd());
        drop(b);
        let mut last = Ok(0);
        // The first send may still be accepted; the reset then fails the next ones.
        for _ in 0..100 {
            last = send(a.as_raw_fd(), &[0u8; 1024]);
            if last.is_err() {
                break;
            }
        }
        let kind = last.unwrap_err().kind();
        assert!(
            matches!(
                kind,
                io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe
            ),
            "{kind:?}"
        );
    }

    #[test]
    fn linger_zero_makes_close_a_reset() {
        let (a, mut b) = pair();
        set_linger_zero(a.as_raw_fd());
        drop(a);
        let e = b.read(&mut [0u8; 8]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ConnectionReset);
    }

    #[test]
    fn options_are_set_and_read() {
        let (a, _b) = pair();
        assert!(tcp_mss(a.as_raw_fd()).is_some_and(|m| m > 0));
        set_keepalive(a.as_raw_fd(), Duration::from_secs(7));
        assert_eq!(int_opt(&a, libc::SOL_SOCKET, libc::SO_KEEPALIVE), 1);
        assert_eq!(int_opt(&a, libc::IPPROTO_TCP, libc::TCP_KEEPIDLE), 7);
        assert_eq!(int_opt(&a, libc::IPPROTO_TCP, libc::TCP_KEEPINTVL), 1);
        assert_eq!(int_opt(&a, libc::IPPROTO_TCP, libc::TCP_KEEPCNT), 3);
        assert_eq!(tcp_mss(-1), None);
        assert_eq!(
            read_into(
                -1,
                &Region::alloc(RegionId(2), 8)
                    .unwrap()
                    .io_slice(0, 8)
                    .unwrap()
            )
            .unwrap_err()
            .raw_os_error(),
            Some(libc::EBADF)
        );
    }
}
