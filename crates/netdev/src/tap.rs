//! A TAP device: a virtual Ethernet interface whose other end is the kernel's network
//! stack. Frames the kernel sends out of the interface are read here; frames written
//! here arrive at the kernel as if from a wire.
//!
//! Needs CAP_NET_ADMIN in the network namespace: root, or a user and network
//! namespace of one's own (`unshare -rn`). The kernel side (its address, `up`) is set
//! up as for any interface (`ip addr add 10.0.0.1/24 dev tap0; ip link set tap0 up`);
//! this end is another station on that link, with a MAC of its own.

use crate::device::{FrameDevice, MacAddr, check_recv_len, check_send_len};
use crate::sys;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;

/// The most a TAP read can return (an IPv4 packet's largest size plus an Ethernet
/// header): what does not fit the caller's buffer spills here and is dropped.
const SPILL_LEN: usize = 65535 + 14;

/// An open TAP interface; see the module documentation.
#[derive(Debug)]
pub struct TapDevice {
    tun: File,
    name: String,
    mac: MacAddr,
    mtu: usize,
    spill: Box<[u8]>,
}

impl TapDevice {
    /// Opens TAP interface `name` (created if it does not exist, e.g. "tap0"),
    /// non-blocking, with `mac` as this end's address. The MTU is the interface's
    /// as the kernel has it now.
    pub fn open(name: &str, mac: MacAddr) -> io::Result<TapDevice> {
        let tun = File::options()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open("/dev/net/tun")?;
        let name = sys::tap_attach(&tun, name)?;
        let mtu = sys::interface_mtu(&name)?;
        Ok(TapDevice {
            tun,
            name,
            mac,
            mtu,
            spill: vec![0u8; SPILL_LEN].into_boxed_slice(),
        })
    }

    /// The interface's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Reads the MTU again (after `ip link set NAME mtu N`).
    pub fn refresh_mtu(&mut self) -> io::Result<usize> {
        self.mtu = sys::interface_mtu(&self.name)?;
        Ok(self.mtu)
    }
}

impl FrameDevice for TapDevice {
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        check_send_len(frame, self.mtu)?;
        // One write is one frame; the kernel takes it whole or not at all.
        self.tun.write(frame).map(drop)
    }

    fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let len = sys::read_spill(self.tun.as_raw_fd(), buf, &mut self.spill)?;
        check_recv_len(len, buf.len())
    }

    fn mtu(&self) -> usize {
        self.mtu
    }

    fn mac(&self) -> MacAddr {
        self.mac
    }
}

impl AsRawFd for TapDevice {
    fn as_raw_fd(&self) -> RawFd {
        self.tun.as_raw_fd()
    }
}
