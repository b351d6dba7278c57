//! Kernel TCP under a QP: a non-blocking mio socket.

use super::Transport;
use crate::region::RegionSlice;
use crate::sys;
use crate::sys::socket::IoVecs;
use mio::{Interest, Registry, Token};
use std::io::{self, Read};
use std::net::Shutdown;
use std::os::fd::AsRawFd;

/// A connected kernel TCP socket.
pub(crate) struct SocketTransport {
    sock: mio::net::TcpStream,
}

impl SocketTransport {
    /// Takes over a connected stream: non-blocking, and with Nagle's algorithm off
    /// (an FPDU is sent whole, and a small one must not wait for an ACK).
    pub(crate) fn new(sock: std::net::TcpStream) -> io::Result<SocketTransport> {
        sock.set_nonblocking(true)?;
        sock.set_nodelay(true)?;
        Ok(SocketTransport {
            sock: mio::net::TcpStream::from_std(sock),
        })
    }
}

impl Transport for SocketTransport {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        (&self.sock).read(buf)
    }

    fn read_into(&mut self, dst: &RegionSlice<'_>) -> io::Result<usize> {
        sys::socket::read_into(self.sock.as_raw_fd(), dst)
    }

    fn send(&mut self, buf: &[u8]) -> io::Result<usize> {
        sys::socket::send(self.sock.as_raw_fd(), buf)
    }

    fn send_gather(&mut self, iov: IoVecs<'_>) -> io::Result<usize> {
        sys::socket::sendmsg(self.sock.as_raw_fd(), iov)
    }

    fn shutdown(&mut self, how: Shutdown) -> io::Result<()> {
        self.sock.shutdown(how)
    }

    fn abort(&mut self) {
        sys::socket::set_linger_zero(self.sock.as_raw_fd());
    }
}

impl mio::event::Source for SocketTransport {
    fn register(
        &mut self,
        registry: &Registry,
        token: Token,
        interests: Interest,
    ) -> io::Result<()> {
        self.sock.register(registry, token, interests)
    }

    fn reregister(
        &mut self,
        registry: &Registry,
        token: Token,
        interests: Interest,
    ) -> io::Result<()> {
        self.sock.reregister(registry, token, interests)
    }

    fn deregister(&mut self, registry: &Registry) -> io::Result<()> {
        self.sock.deregister(registry)
    }
}
