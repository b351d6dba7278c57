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
            let got = sys::recv_packet(self.socket.as_raw_fd(), buf)?;
            if got.kind == sys::PACKET_OUTGOING {
                // Our own frames, on kernels that cannot leave them out.
                continue;
            }
            let len = check_recv_len(got.len, buf.len())?;
            if got.csum_not_ready {
                // Sent by this host with checksum offload (a veth peer): the checksum
                // field holds only the pseudo-header's sum. Finish it, as the NIC
                // would have, so the frame is what crossed the wire.
                finish_checksum(&mut buf[..len]);
            }
            return Ok(len);
        }
    }

    fn mtu(&self) -> usize {
        self.mtu
    }

    fn mac(&self) -> MacAddr {
        self.mac
    }
}

/// Computes the TCP or UDP checksum of an Ethernet frame carrying IPv4 and writes it
/// in place; anything else (or a malformed frame) is left as it is, for the interface
/// to judge.
pub fn finish_checksum(frame: &mut [u8]) {
    const ETH: usize = crate::ETHERNET_HEADER_LEN;
    if frame.len() < ETH + 20 || frame[12..14] != [0x08, 0x00] || frame[ETH] >> 4 != 4 {
        return;
    }
    let ip = &frame[ETH..];
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    let field = match ip[9] {
        6 => 16,
        17 => 6,
        _ => return,
    };
    if ihl < 20 || total < ihl + field + 2 || total > ip.len() {
        return;
    }
    let l4 = ETH + ihl;
    let at = l4 + field;
    frame[at..at + 2].copy_from_slice(&[0, 0]);
    let ip = &frame[ETH..];
    let mut sum: u64 = 0;
    let mut add = |b: &[u8]| {
        for c in b.chunks(2) {
            sum += u64::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
        }
    };
    add(&ip[12..20]);
    add(&[0, ip[9]]);
    add(&((total - ihl) as u16).to_be_bytes());
    add(&frame[l4..ETH + total]);
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    let mut c = !(sum as u16);
    if c == 0 && field == 6 {
        // UDP sends an all-ones checksum for a computed zero (RFC 768).
        c = 0xffff;
    }
    frame[at..at + 2].copy_from_slice(&c.to_be_bytes());
}

impl AsRawFd for PacketDevice {
    fn as_raw_fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::finish_checksum;

    fn frame(udp: bool, payload: &[u8]) -> Vec<u8> {
        let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]).ipv4(
            [10, 0, 0, 1],
            [10, 0, 0, 2],
            64,
        );
        let mut out = Vec::new();
        if udp {
            b.udp(1000, 2000).write(&mut out, payload).unwrap();
        } else {
            b.tcp(1000, 2000, 7, 100)
                .ack(9)
                .write(&mut out, payload)
                .unwrap();
        }
        out
    }

    #[test]
    fn a_partial_checksum_is_finished_as_the_wire_would_carry_it() {
        for udp in [false, true] {
            for len in [0, 1, 2, 333] {
                let good = frame(udp, &vec![0xa5; len]);
                let at = 14 + 20 + if udp { 6 } else { 16 };
                let mut partial = good.clone();
                // What a sender with offload leaves there: anything but the sum.
                partial[at] ^= 0x5a;
                finish_checksum(&mut partial);
                assert_eq!(partial, good, "udp {udp}, {len} octets");
            }
        }
        // Not IPv4 TCP/UDP, or cut short: untouched.
        let mut arp = vec![0u8; 60];
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        let before = arp.clone();
        finish_checksum(&mut arp);
        assert_eq!(arp, before);
        let mut short = frame(false, b"xyz");
        short.truncate(40);
        let before = short.clone();
        finish_checksum(&mut short);
        assert_eq!(short, before);
    }
}
