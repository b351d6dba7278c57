//! An AF_PACKET socket bound to one Ethernet interface: raw frames in and out of a
//! real or virtual NIC (one end of a veth pair, a spare physical port), beside the
//! kernel's own stack on that interface.
//!
//! Needs CAP_NET_RAW (root, or a user and network namespace of one's own). Frames go
//! out as given; every frame the interface receives is seen, including those meant
//! for the kernel. By default this end uses the interface's own MAC, so frames for it
//! need no promiscuous mode; then give the kernel no address of ours on that
//! interface (best: no IPv4 address at all there), or both stacks would answer.

use crate::device::{FrameDevice, MacAddr, check_recv_len, check_send_len};
use crate::sys;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// A packet socket on one interface; see the module documentation.
#[derive(Debug)]
pub struct PacketDevice {
    socket: OwnedFd,
    name: String,
    mac: MacAddr,
    mtu: usize,
}

impl PacketDevice {
    /// Binds to interface `name` (it must exist; it need not be up yet), using its MAC
    /// and MTU.
    pub fn open(name: &str) -> io::Result<PacketDevice> {
        let ifindex = sys::interface_index(name)?;
        let mac = MacAddr(sys::interface_mac(name)?);
        let mtu = sys::interface_mtu(name)?;
        let socket = sys::packet_socket(ifindex)?;
        Ok(PacketDevice {
            socket,
            name: name.to_string(),
            mac,
            mtu,
        })
    }

    /// Uses `mac` instead of the interface's own (a real NIC then needs promiscuous
    /// mode to pass frames for it up).
    pub fn with_mac(mut self, mac: MacAddr) -> PacketDevice {
        self.mac = mac;
        self
    }

    /// The interface's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl FrameDevice for PacketDevice {
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        check_send_len(frame, self.mtu)?;
        sys::send(self.socket.as_raw_fd(), frame)
    }

    fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let (len, kind) = sys::recv_packet(self.socket.as_raw_fd(), buf)?;
            if kind == sys::PACKET_OUTGOING {
                // Our own frames, on kernels that cannot leave them out.
                continue;
            }
            return check_recv_len(len, buf.len());
        }
    }

    fn mtu(&self) -> usize {
        self.mtu
    }

    fn mac(&self) -> MacAddr {
        self.mac
    }
}

impl AsRawFd for PacketDevice {
    fn as_raw_fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }
}
