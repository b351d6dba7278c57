//! Two frame devices joined back to back, for tests and for two stacks in one process.
//!
//! The link is a datagram socket pair: each frame stays one datagram, the kernel's
//! socket buffer holds the frames in flight (so the link is bounded: a full one says
//! `WouldBlock`), nothing touches a network, no privilege is needed, and each end has
//! a real file descriptor that epoll can wait on.

use crate::device::{DEFAULT_MTU, FrameDevice, MacAddr, check_recv_len, check_send_len};
use crate::sys;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixDatagram;

/// One end of a [`pair`].
#[derive(Debug)]
pub struct MemoryDevice {
    socket: UnixDatagram,
    mac: MacAddr,
    mtu: usize,
}

/// The MAC of the first end of [`pair`] (locally administered).
pub const PAIR_MAC_A: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x0a]);
/// The MAC of the second end of [`pair`].
pub const PAIR_MAC_B: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x0b]);

/// Two devices on one link, with MACs [`PAIR_MAC_A`] and [`PAIR_MAC_B`] and the
/// Ethernet MTU: what one sends, the other receives.
pub fn pair() -> io::Result<(MemoryDevice, MemoryDevice)> {
    pair_with(PAIR_MAC_A, PAIR_MAC_B, DEFAULT_MTU)
}

/// [`pair`] with chosen MACs and MTU.
pub fn pair_with(a: MacAddr, b: MacAddr, mtu: usize) -> io::Result<(MemoryDevice, MemoryDevice)> {
    let (sa, sb) = UnixDatagram::pair()?;
    sa.set_nonblocking(true)?;
    sb.set_nonblocking(true)?;
    Ok((
        MemoryDevice {
            socket: sa,
            mac: a,
            mtu,
        },
        MemoryDevice {
            socket: sb,
            mac: b,
            mtu,
        },
    ))
}

impl FrameDevice for MemoryDevice {
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        check_send_len(frame, self.mtu)?;
        self.socket.send(frame).map(drop)
    }

    fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let len = sys::recv_trunc(self.socket.as_raw_fd(), buf)?;
        check_recv_len(len, buf.len())
    }

    fn mtu(&self) -> usize {
        self.mtu
    }

    fn mac(&self) -> MacAddr {
        self.mac
    }
}

impl AsRawFd for MemoryDevice {
    fn as_raw_fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }
}
