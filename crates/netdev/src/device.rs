//! The frame device seam: what every packet backend offers the interface above it.

use std::fmt;
use std::io;
use std::os::fd::AsRawFd;

/// Octets of an Ethernet II header (two MACs and the EtherType); no VLAN tag.
pub const ETHERNET_HEADER_LEN: usize = 14;

/// The IP MTU a device has unless told otherwise: Ethernet's 1500.
pub const DEFAULT_MTU: usize = 1500;

/// A 48-bit Ethernet (MAC) address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// ff:ff:ff:ff:ff:ff.
    pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);

    /// True for group addresses (broadcast included): the I/G bit of the first octet.
    pub fn is_multicast(&self) -> bool {
        self.0[0] & 1 == 1
    }

    /// True for 00:00:00:00:00:00, which no station owns.
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 6]
    }

    /// True for an address a station may own (not a group address, not zero).
    pub fn is_unicast(&self) -> bool {
        !self.is_multicast() && !self.is_zero()
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

impl fmt::Debug for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// One end of an Ethernet link that carries whole frames (no preamble, no FCS).
///
/// Every call is non-blocking: `WouldBlock` means "not now", and the file descriptor
/// from [`AsRawFd`] becomes readable when a frame is waiting, so an engine can register
/// it with epoll or mio and sleep until then.
pub trait FrameDevice: AsRawFd {
    /// Sends one frame of at most [`FrameDevice::max_frame_len`] octets.
    ///
    /// `WouldBlock` when the device cannot take it now (the frame was not sent);
    /// `InvalidInput` for a frame shorter than an Ethernet header or longer than the
    /// MTU allows.
    fn send(&mut self, frame: &[u8]) -> io::Result<()>;

    /// Receives one frame into `buf`, with no allocation; returns its length.
    ///
    /// `WouldBlock` when none is waiting. A frame longer than `buf` is dropped and
    /// reported as an error that [`is_frame_too_long`] recognises (the caller counts it
    /// and goes on). Give a buffer of [`FrameDevice::max_frame_len`] octets.
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize>;

    /// The largest IPv4 packet a frame carries (the IP MTU: 1500 on Ethernet).
    fn mtu(&self) -> usize;

    /// The MAC address frames from this end carry as their source.
    fn mac(&self) -> MacAddr;

    /// The longest frame: the MTU plus the Ethernet header.
    fn max_frame_len(&self) -> usize {
        self.mtu() + ETHERNET_HEADER_LEN
    }
}

/// The error a device gives for a frame longer than the caller's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameTooLong {
    /// The frame's real length.
    pub len: usize,
    /// The buffer it did not fit.
    pub capacity: usize,
}

impl fmt::Display for FrameTooLong {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a {}-octet frame did not fit a {}-octet buffer: dropped",
            self.len, self.capacity
        )
    }
}

impl std::error::Error for FrameTooLong {}

impl FrameTooLong {
    /// As an `io::Error` of kind `InvalidData`.
    pub fn into_io(self) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, self)
    }
}

/// True when `e` says a received frame did not fit the buffer (and was dropped).
pub fn is_frame_too_long(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<FrameTooLong>())
}

/// The length a truncating receive reported (`len`, the frame's real length), or
/// [`FrameTooLong`] if the frame did not fit the `capacity`-octet buffer.
pub(crate) fn check_recv_len(len: usize, capacity: usize) -> io::Result<usize> {
    if len > capacity {
        return Err(FrameTooLong { len, capacity }.into_io());
    }
    Ok(len)
}

/// Checks a frame against a device's limits before it is sent.
pub(crate) fn check_send_len(frame: &[u8], mtu: usize) -> io::Result<()> {
    if frame.len() < ETHERNET_HEADER_LEN || frame.len() > mtu + ETHERNET_HEADER_LEN {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "a frame must be {ETHERNET_HEADER_LEN}..={} octets, not {}",
                mtu + ETHERNET_HEADER_LEN,
                frame.len()
            ),
        ));
    }
    Ok(())
}
