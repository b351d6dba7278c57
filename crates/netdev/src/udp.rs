//! Ethernet frames carried one per UDP datagram: how QEMU's `-netdev dgram` (with
//! inet `local` and `remote` addresses) and `-netdev socket,udp=...,localaddr=...`
//! join a guest's NIC to the outside. No privilege, no tap: the QEMU guest (the siw
//! rig's `--net udp`) is a peer on a link of its own.
//!
//! The socket is connected to the remote address, so the kernel drops datagrams from
//! anyone else. A remote that is not listening yet loses frames, as a wire with nobody
//! on it would; the "port unreachable" errors that loopback reports for them are
//! absorbed and counted ([`UdpDevice::peer_unreachable`]).

use crate::device::{DEFAULT_MTU, FrameDevice, MacAddr, check_recv_len, check_send_len};
use crate::sys;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};

/// A frame device on a UDP socket; see the module documentation.
#[derive(Debug)]
pub struct UdpDevice {
    socket: UdpSocket,
    remote: SocketAddr,
    mac: MacAddr,
    mtu: usize,
    peer_unreachable: u64,
}

impl UdpDevice {
    /// Binds `local` and sends frames to `remote`, taking only `remote`'s datagrams.
    /// `mac` is this end's MAC (choose a locally administered one, e.g. `02:...`).
    ///
    /// For a QEMU guest started with
    /// `-netdev dgram,id=n0,local.type=inet,local.host=127.0.0.1,local.port=P,remote.type=inet,remote.host=127.0.0.1,remote.port=Q`,
    /// open `local = 127.0.0.1:Q`, `remote = 127.0.0.1:P`.
    pub fn open(local: SocketAddr, remote: SocketAddr, mac: MacAddr) -> io::Result<UdpDevice> {
        UdpDevice::from_socket(UdpSocket::bind(local)?, remote, mac)
    }

    /// [`UdpDevice::open`] on a socket the caller bound already (e.g. to port 0, to
    /// learn its port before the peer starts).
    pub fn from_socket(
        socket: UdpSocket,
        remote: SocketAddr,
        mac: MacAddr,
    ) -> io::Result<UdpDevice> {
        socket.connect(remote)?;
        socket.set_nonblocking(true)?;
        Ok(UdpDevice {
            socket,
            remote,
            mac,
            mtu: DEFAULT_MTU,
            peer_unreachable: 0,
        })
    }

    /// Sets the IP MTU (the guest's NIC MTU; 1500 unless it was changed).
    pub fn with_mtu(mut self, mtu: usize) -> UdpDevice {
        self.mtu = mtu;
        self
    }

    /// The local address frames arrive on.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// The address frames go to.
    pub fn remote_addr(&self) -> SocketAddr {
        self.remote
    }

    /// How many times the remote was found not listening (its frames were lost).
    pub fn peer_unreachable(&self) -> u64 {
        self.peer_unreachable
    }

    /// An error that only reports an earlier datagram's "port unreachable": the
    /// kernel clears it once reported, so the call is made once more.
    fn absorb(&mut self, e: &io::Error) -> bool {
        let refused = e.kind() == io::ErrorKind::ConnectionRefused;
        if refused {
            self.peer_unreachable += 1;
        }
        refused
    }
}

impl FrameDevice for UdpDevice {
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        check_send_len(frame, self.mtu)?;
        match self.socket.send(frame) {
            Err(e) if self.absorb(&e) => self.socket.send(frame).map(drop),
            r => r.map(drop),
        }
    }

    fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let fd = self.socket.as_raw_fd();
        let len = match sys::recv_trunc(fd, buf) {
            Err(e) if self.absorb(&e) => sys::recv_trunc(fd, buf)?,
            r => r?,
        };
        check_recv_len(len, buf.len())
    }

    fn mtu(&self) -> usize {
        self.mtu
    }

    fn mac(&self) -> MacAddr {
        self.mac
    }
}

impl AsRawFd for UdpDevice {
    fn as_raw_fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }
}
