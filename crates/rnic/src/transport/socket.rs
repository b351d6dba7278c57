//! Kernel TCP under a QP: a non-blocking mio socket.

use super::polled::PolledTransport;
use super::stream::ConnStream;
use super::{ClaimedRead, Transport};
use crate::region::RegionSlice;
use crate::socket_buffers::{Seat, SocketBuffers};
use crate::sys;
use crate::sys::socket::IoVecs;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

/// A connected kernel TCP socket.
pub(crate) struct SocketTransport {
    sock: mio::net::TcpStream,
    /// Its share of the device's send buffer budget, applied before a send.
    seat: Seat,
}

impl SocketTransport {
    /// Takes over a connected stream: non-blocking, with Nagle's algorithm off (an FPDU
    /// is sent whole, and a small one must not wait for an ACK), a seat in the device's
    /// send buffer budget, and, if its peer is on this host, unpaced with a fixed
    /// receive buffer (`same_host.rs`).
    pub(crate) fn new(
        sock: std::net::TcpStream,
        buffers: &Arc<SocketBuffers>,
    ) -> io::Result<SocketTransport> {
        sock.set_nonblocking(true)?;
        sock.set_nodelay(true)?;
        let mut seat = buffers.join();
        crate::same_host::apply(
            buffers.same_host,
            sock.as_raw_fd(),
            sock.local_addr()?,
            sock.peer_addr()?,
        );
        seat.apply(sock.as_raw_fd());
        Ok(SocketTransport {
            sock: mio::net::TcpStream::from_std(sock),
            seat,
        })
    }
}

impl SocketTransport {
    /// [`Transport::read`], for a caller that holds this type (the polled transport):
    /// `recv(2)` as std makes it, without glibc's cancellation-point wrapper
    /// (`sys::socket::recv`): this is the busy-polling consumer's every spin.
    #[inline]
    pub(crate) fn read_inline(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        sys::socket::recv(self.sock.as_raw_fd(), buf)
    }

    /// [`SocketTransport::read_inline`] with its outcome as a [`ClaimedRead`]: an empty
    /// socket's `EAGAIN` needs no `io::Error`.
    #[inline]
    pub(crate) fn read_claimed(&mut self, buf: &mut [u8]) -> ClaimedRead {
        match sys::socket::recv_errno(self.sock.as_raw_fd(), buf) {
            Ok(n) => ClaimedRead::Got(n),
            Err(libc::EAGAIN) => ClaimedRead::Empty,
            Err(code) => ClaimedRead::Failed(io::Error::from_raw_os_error(code)),
        }
    }

    /// [`Transport::send`], for a caller that holds this type (a single post through
    /// the polled transport): the socket's share of the send buffer budget applied,
    /// then `send(2)`.
    #[inline(always)]
    pub(crate) fn send_inline(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.seat.apply(self.sock.as_raw_fd());
        sys::socket::send(self.sock.as_raw_fd(), buf)
    }

    /// The socket's descriptor (for tests that wait on it).
    #[cfg(test)]
    pub(crate) fn fd(&self) -> std::os::fd::RawFd {
        self.sock.as_raw_fd()
    }
}

impl Transport for SocketTransport {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_inline(buf)
    }

    fn read_into(&mut self, dst: &RegionSlice<'_>) -> io::Result<usize> {
        sys::socket::read_into(self.sock.as_raw_fd(), dst)
    }

    fn read_into_then(&mut self, dst: &RegionSlice<'_>, tail: &mut [u8]) -> io::Result<usize> {
        sys::socket::read_into_then(self.sock.as_raw_fd(), dst, tail)
    }

    fn send(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.send_inline(buf)
    }

    fn send_gather(&mut self, iov: IoVecs<'_>) -> io::Result<usize> {
        self.seat.apply(self.sock.as_raw_fd());
        sys::socket::sendmsg(self.sock.as_raw_fd(), iov)
    }

    fn shutdown(&mut self, how: Shutdown) -> io::Result<()> {
        self.sock.shutdown(how)
    }

    fn abort(&mut self) {
        sys::socket::set_linger_zero(self.sock.as_raw_fd());
    }

    /// What the kernel holds for the socket: octets that arrived and wait to be read
    /// (a reader that waits while they sit there was not run, or not told), and octets
    /// not yet sent or acknowledged.
    fn stall_report(&self) -> String {
        match sys::socket::queued(self.sock.as_raw_fd()) {
            Some((unread, unsent)) => {
                format!("kernel socket: {unread} octets unread, {unsent} unsent or unacknowledged")
            }
            None => "kernel socket: queues unknown".to_string(),
        }
    }
}

source_via!(SocketTransport, sock);

/// A kernel TCP connection in streaming mode, before it carries FPDUs: blocking, every
/// call bounded by the caller's deadline.
#[derive(Debug)]
pub(crate) struct KernelStream(TcpStream);

impl KernelStream {
    /// Takes over a connected stream, blocking, with Nagle's algorithm off (an MPA
    /// frame must not wait for an ACK).
    pub(crate) fn new(s: TcpStream) -> io::Result<KernelStream> {
        s.set_nonblocking(false)?;
        s.set_nodelay(true)?;
        Ok(KernelStream(s))
    }

    /// What is left of the time until `deadline`, or `WouldBlock` if nothing is.
    fn left(deadline: Instant) -> io::Result<Duration> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(left)
    }
}

impl ConnStream for KernelStream {
    fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.0.peer_addr()
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.local_addr()
    }

    fn read_by(&mut self, buf: &mut [u8], deadline: Instant) -> io::Result<usize> {
        self.0.set_read_timeout(Some(Self::left(deadline)?))?;
        self.0.read(buf)
    }

    fn write_all_by(&mut self, buf: &[u8], deadline: Instant) -> io::Result<()> {
        // One timeout for the whole write: the frames the CM writes fit any send
        // buffer, so this bounds only a peer that stopped reading altogether.
        self.0.set_write_timeout(Some(Self::left(deadline)?))?;
        self.0.write_all(buf)
    }

    fn mss(&self) -> Option<usize> {
        sys::socket::tcp_mss(self.0.as_raw_fd())
    }

    fn shutdown(&mut self) -> io::Result<()> {
        self.0.shutdown(Shutdown::Both)
    }

    fn reset(self: Box<Self>) {
        sys::socket::set_linger_zero(self.0.as_raw_fd());
    }

    fn into_transport(
        self: Box<Self>,
        keepalive: Duration,
        buffers: &Arc<SocketBuffers>,
    ) -> io::Result<Box<dyn Transport>> {
        Ok(Box::new((*self).into_socket(keepalive, buffers)?))
    }

    fn into_polled(
        self: Box<Self>,
        keepalive: Duration,
        buffers: &Arc<SocketBuffers>,
        claimed: Arc<AtomicBool>,
    ) -> io::Result<PolledTransport> {
        Ok(PolledTransport::over_socket(
            (*self).into_socket(keepalive, buffers)?,
            claimed,
        ))
    }
}

impl KernelStream {
    /// The stream in RDMA mode ([`ConnStream::into_transport`]) as its own type.
    fn into_socket(
        self,
        keepalive: Duration,
        buffers: &Arc<SocketBuffers>,
    ) -> io::Result<SocketTransport> {
        sys::socket::set_keepalive(self.0.as_raw_fd(), keepalive);
        self.0.set_read_timeout(None)?;
        self.0.set_write_timeout(None)?;
        SocketTransport::new(self.0, buffers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::socket_buffers::MIN_SHARE;
    use std::net::TcpListener;

    fn send_buffer(t: &SocketTransport) -> libc::c_int {
        let mut v: libc::c_int = -1;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: a valid socket fd and a correctly sized out-parameter pair.
        let r = unsafe {
            libc::getsockopt(
                t.sock.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_SNDBUF,
                (&mut v as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        assert_eq!(r, 0);
        v
    }

    fn transport(buffers: &Arc<SocketBuffers>) -> (SocketTransport, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (SocketTransport::new(a, buffers).unwrap(), b)
    }

    #[test]
    fn a_socket_takes_its_share_of_the_budget_on_its_next_send() {
        // 1 MiB for all: 16 connections share 64 KiB each, one alone takes 1 MiB.
        let buffers = SocketBuffers::new(1 << 20, crate::SameHostTcp::System);
        let (mut t, _peer) = transport(&buffers);
        let tuned = send_buffer(&t);
        assert_eq!(tuned, 2 << 20, "alone: all of it, doubled by Linux");
        let others: Vec<_> = (0..15).map(|_| buffers.join()).collect();
        assert_eq!(buffers.share(), MIN_SHARE);
        assert_eq!(send_buffer(&t), tuned, "nothing changes before a send");
        assert_eq!(t.send(b"x").unwrap(), 1);
        // Linux doubles what it is given, for its bookkeeping.
        assert_eq!(send_buffer(&t), 2 * MIN_SHARE as libc::c_int);
        drop(others);
        assert_eq!(buffers.share(), 1 << 20);
        assert_eq!(t.send(b"y").unwrap(), 1);
        assert_eq!(send_buffer(&t), 2 << 20);
    }

    #[test]
    fn the_hang_report_tells_the_octets_waiting_in_the_kernel() {
        let buffers = SocketBuffers::new(0, crate::SameHostTcp::System);
        let (mut t, mut peer) = transport(&buffers);
        assert_eq!(
            t.stall_report(),
            "kernel socket: 0 octets unread, 0 unsent or unacknowledged"
        );
        peer.write_all(b"hello").unwrap();
        // Readable: the five octets have arrived (one segment on loopback).
        let mut pfd = libc::pollfd {
            fd: t.sock.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, and its count.
        assert_eq!(unsafe { libc::poll(&mut pfd, 1, -1) }, 1);
        assert!(
            t.stall_report()
                .starts_with("kernel socket: 5 octets unread, "),
            "{}",
            t.stall_report()
        );
        // The peer reads nothing: what this side sends fills the peer's window, and
        // the rest waits in this side's send queue.
        let chunk = vec![7u8; 1 << 16];
        let mut sent = 0usize;
        loop {
            match t.send(&chunk) {
                Ok(n) => sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("send: {e}"),
            }
        }
        let report = t.stall_report();
        let unsent: usize = report
            .split(", ")
            .nth(1)
            .and_then(|s| s.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{report}"));
        assert!(unsent > 0 && unsent <= sent, "{unsent} of {sent}: {report}");
    }

    #[test]
    fn a_connection_to_this_host_is_taken_over_unpaced_unless_the_device_keeps_bbr() {
        for (policy, want_bbr) in [
            (crate::SameHostTcp::Tuned, false),
            (crate::SameHostTcp::System, true),
        ] {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
            let _peer = l.accept().unwrap();
            if let Err(e) = sys::socket::set_tcp_congestion(a.as_raw_fd(), "bbr") {
                eprintln!("SKIPPED: this host cannot set bbr on a socket: {e}");
                return;
            }
            let t = SocketTransport::new(a, &SocketBuffers::new(0, policy)).unwrap();
            let now = sys::socket::tcp_congestion(t.sock.as_raw_fd()).unwrap();
            assert_eq!(now == "bbr", want_bbr, "{policy:?}: {now}");
        }
    }
}
