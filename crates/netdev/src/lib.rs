//! Packet backends for softrnic's own TCP: the layer that moves Ethernet frames and
//! IPv4 packets without kernel TCP.
//!
//! - [`FrameDevice`]: one end of an Ethernet link, non-blocking, with an fd to wait on.
//!   Backends: [`memory::pair`] (two ends in one process), [`udp::UdpDevice`] (one
//!   frame per UDP datagram, as QEMU's `-netdev dgram` speaks; no privilege),
//!   [`tap::TapDevice`] (the kernel's stack on the other end), and
//!   [`packet::PacketDevice`] (AF_PACKET on a real or veth interface).
//! - [`Interface`]: IPv4 on a frame device: answers ARP and ICMP echo for its
//!   addresses, resolves neighbours, checks and hands up TCP (and ICMP) packets, and
//!   sends the IPv4 packets the layer above gives it.
//! - docs/NETDEV.md says how to use each and what is bounded.
//! - No `unsafe` outside the `sys` module, which wraps the few system calls std lacks.

pub mod device;
pub mod iface;
pub mod memory;
pub mod packet;
mod sys;
pub mod tap;
pub mod udp;

pub use device::{
    DEFAULT_MTU, ETHERNET_HEADER_LEN, FrameDevice, FrameTooLong, MacAddr, is_frame_too_long,
};
pub use iface::{
    ConfigError, Ingress, Interface, InterfaceConfig, IpPacket, Ipv4Cidr, SendError, Sent, Stats,
};

use std::io;
use std::os::fd::AsRawFd;
use std::time::Duration;

/// Waits until `dev` has something to read, or `timeout` passes (`None`: no limit);
/// true when it is readable. For simple loops that own no epoll of their own.
pub fn wait_readable(dev: &impl AsRawFd, timeout: Option<Duration>) -> io::Result<bool> {
    sys::poll_readable(dev.as_raw_fd(), timeout)
}
