//! Ethernet frames carried one per UDP datagram: how QEMU's `-netdev dgram` (with
//! inet `local` and `remote` addresses) and `-netdev socket,udp=...,localaddr=...`
//! join a guest's NIC to the outside. No privilege, no tap: the QEMU guest (the siw
//! rig's `--net udp`) is a peer on a link of its own.
//!
//! The socket is connected to the remote address, so the kernel drops datagrams from
//! anyone else. A remote that is not listening yet loses frames, as a wire with nobody
//! on it would; the "port unreachable" errors that loopback reports for them are
//! absorbed and counted ([`UdpDevice::peer_unreachable`]), however many arrive at once.

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
}

/// How many "port unreachable" reports one call absorbs before it gives the error to its
/// caller. Each reports an earlier datagram's loss, and the kernel clears it once
/// reported; but it sets the next as the next datagram's ICMP error arrives, and under
/// load (the errors delivered late, from the kernel's softirq thread) that can be
/// between a call and its retry: one retry was not enough (an rping over this device
/// failed with "connection refused" while its peer was starting).
const REFUSED_RETRIES: u32 = 16;

/// `call`, made again while it fails with only an earlier datagram's "port
/// unreachable" (up to [`REFUSED_RETRIES`] times), each counted in `unreachable`.
fn absorbing_refused<T>(
    unreachable: &mut u64,
    mut call: impl FnMut() -> io::Result<T>,
) -> io::Result<T> {
    let mut retries = 0;
    loop {
        match call() {
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused && retries < REFUSED_RETRIES => {
                *unreachable += 1;
                retries += 1;
            }
            r => return r,
        }
    }
}

impl FrameDevice for UdpDevice {
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        check_send_len(frame, self.mtu)?;
        let socket = &self.socket;
        absorbing_refused(&mut self.peer_unreachable, || socket.send(frame)).map(drop)
    }

    fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let fd = self.socket.as_raw_fd();
        let len = absorbing_refused(&mut self.peer_unreachable, || sys::recv_trunc(fd, buf))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A call that reports "port unreachable" `refusals` times, then succeeds.
    fn refused(refusals: u32) -> impl FnMut() -> io::Result<u32> {
        let mut calls = 0;
        move || {
            calls += 1;
            if calls <= refusals {
                Err(io::ErrorKind::ConnectionRefused.into())
            } else {
                Ok(calls)
            }
        }
    }

    #[test]
    fn reports_of_earlier_losses_are_absorbed_and_counted_up_to_a_bound() {
        let mut count = 0;
        assert_eq!(absorbing_refused(&mut count, refused(0)).unwrap(), 1);
        assert_eq!(count, 0);
        // Two reports between a call and its retry (the late ICMP errors of a loaded
        // machine): the third call goes through.
        assert_eq!(absorbing_refused(&mut count, refused(2)).unwrap(), 3);
        assert_eq!(count, 2);
        let most = REFUSED_RETRIES;
        assert_eq!(
            absorbing_refused(&mut count, refused(most)).unwrap(),
            most + 1
        );
        // Beyond the bound the error is the caller's.
        let e = absorbing_refused(&mut count, refused(most + 1)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused);
        assert_eq!(count, 2 + 2 * u64::from(most));
        // Other errors are never retried.
        let mut calls = 0;
        let e = absorbing_refused(&mut count, || {
            calls += 1;
            Err::<(), _>(io::ErrorKind::WouldBlock.into())
        })
        .unwrap_err();
        assert_eq!((e.kind(), calls), (io::ErrorKind::WouldBlock, 1));
    }
}
