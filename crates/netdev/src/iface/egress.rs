//! The send path: IPv4 packets out, next hops found, neighbours resolved by ARP.

use super::neighbor::Lookup;
use super::packet::{self, ICMP_ECHO_HEADER_LEN, IPV4_HEADER_LEN, PROTO_ICMP};
use super::{Interface, SendError, Sent, Stats};
use crate::device::{ETHERNET_HEADER_LEN, FrameDevice, MacAddr};
use etherparse::{ArpOperation, EtherType};
use std::io;
use std::net::Ipv4Addr;
use std::time::Duration;

impl<D: FrameDevice> Interface<D> {
    /// Sends a frame the interface made itself (ARP, a released packet); a busy
    /// device drops it, as a full NIC ring would.
    pub(super) fn send_own(device: &mut D, stats: &mut Stats, frame: &[u8]) {
        match device.send(frame) {
            Ok(()) => stats.tx_frames += 1,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => stats.tx_device_busy += 1,
            Err(_) => stats.tx_device_errors += 1,
        }
    }

    /// Sends a held IPv4 packet to a neighbour that just answered.
    pub(super) fn transmit_to(&mut self, mac: MacAddr, ip_packet: &[u8]) {
        let len = ETHERNET_HEADER_LEN + ip_packet.len();
        packet::write_ethernet(&mut self.tx, mac, self.mac, EtherType::IPV4);
        self.tx[ETHERNET_HEADER_LEN..len].copy_from_slice(ip_packet);
        Self::send_own(&mut self.device, &mut self.stats, &self.tx[..len]);
    }

    /// Sends `packet`, a whole IPv4 packet (header with its checksum, then payload)
    /// from one of the interface's addresses, as given. It goes out now if its next
    /// hop is known, else it is held while ARP resolves it (`Sent::Queued`).
    pub fn send(&mut self, now: Duration, packet: &[u8]) -> Result<Sent, SendError> {
        let p = packet::check_outgoing(packet).map_err(SendError::Malformed)?;
        if packet.len() > self.mtu() {
            return Err(SendError::TooBig {
                len: packet.len(),
                mtu: self.mtu(),
            });
        }
        if !self.owns(p.src()) {
            return Err(SendError::NotOurAddress(p.src()));
        }
        let hop = self.next_hop(p.dst())?;
        self.tx[ETHERNET_HEADER_LEN..ETHERNET_HEADER_LEN + packet.len()].copy_from_slice(packet);
        self.transmit(now, hop, packet.len())
    }

    /// Builds an IPv4 header (no options, DF set, the configured TTL) for `payload`
    /// and sends the packet as [`Interface::send`] does.
    pub fn send_payload(
        &mut self,
        now: Duration,
        src: Ipv4Addr,
        dst: Ipv4Addr,
        protocol: u8,
        payload: &[u8],
    ) -> Result<Sent, SendError> {
        let len = IPV4_HEADER_LEN + payload.len();
        if len > self.mtu() {
            return Err(SendError::TooBig {
                len,
                mtu: self.mtu(),
            });
        }
        if !self.owns(src) {
            return Err(SendError::NotOurAddress(src));
        }
        let at = ETHERNET_HEADER_LEN + IPV4_HEADER_LEN;
        self.tx[at..at + payload.len()].copy_from_slice(payload);
        self.send_built(now, src, dst, protocol, payload.len())
    }

    /// Sends an ICMP echo request ("ping") to `dst` from the interface's first address
    /// on `dst`'s subnet (else its first address); the reply comes up through
    /// [`Interface::receive`] as an ICMP packet.
    pub fn send_ping(
        &mut self,
        now: Duration,
        dst: Ipv4Addr,
        id: u16,
        seq: u16,
        data: &[u8],
    ) -> Result<Sent, SendError> {
        let icmp_len = ICMP_ECHO_HEADER_LEN + data.len();
        if IPV4_HEADER_LEN + icmp_len > self.mtu() {
            return Err(SendError::TooBig {
                len: IPV4_HEADER_LEN + icmp_len,
                mtu: self.mtu(),
            });
        }
        let addrs = &self.config.addresses;
        let src = addrs
            .iter()
            .find(|a| a.contains(dst))
            .unwrap_or(&addrs[0])
            .addr;
        let at = ETHERNET_HEADER_LEN + IPV4_HEADER_LEN;
        packet::write_echo(&mut self.tx[at..], false, id, seq, data);
        self.send_built(now, src, dst, PROTO_ICMP, icmp_len)
    }

    /// Writes the IPv4 header before a payload already in `tx` and sends.
    pub(super) fn send_built(
        &mut self,
        now: Duration,
        src: Ipv4Addr,
        dst: Ipv4Addr,
        protocol: u8,
        payload_len: usize,
    ) -> Result<Sent, SendError> {
        let hop = self.next_hop(dst)?;
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        packet::write_ipv4_header(
            &mut self.tx[ETHERNET_HEADER_LEN..],
            src,
            dst,
            protocol,
            payload_len,
            id,
            self.config.ttl,
        );
        self.transmit(now, hop, IPV4_HEADER_LEN + payload_len)
    }

    /// The neighbour a packet to `dst` goes to: `dst` itself when on a subnet of
    /// ours, else the gateway.
    fn next_hop(&self, dst: Ipv4Addr) -> Result<Ipv4Addr, SendError> {
        let not_unicast = dst.is_unspecified()
            || dst.is_broadcast()
            || dst.is_multicast()
            || self.owns(dst)
            || self
                .config
                .addresses
                .iter()
                .any(|a| a.prefix_len < 31 && a.broadcast() == dst);
        if not_unicast {
            return Err(SendError::NoRoute(dst));
        }
        if self.on_link(dst) {
            return Ok(dst);
        }
        self.config.gateway.ok_or(SendError::NoRoute(dst))
    }

    /// Sends the IPv4 packet of `len` octets in `tx` to `hop`, or holds it for ARP.
    fn transmit(&mut self, now: Duration, hop: Ipv4Addr, len: usize) -> Result<Sent, SendError> {
        let mac = match self.neighbors.lookup(hop, now) {
            Lookup::Known(mac) => mac,
            Lookup::Refresh(mac) => {
                self.send_arp_request(hop, mac);
                mac
            }
            Lookup::Unknown => {
                let p = &self.tx[ETHERNET_HEADER_LEN..ETHERNET_HEADER_LEN + len];
                let first = self
                    .neighbors
                    .enqueue(hop, p, now)
                    .map_err(|_| SendError::QueueFull(hop))?;
                if first {
                    self.send_arp_request(hop, MacAddr::BROADCAST);
                }
                return Ok(Sent::Queued);
            }
        };
        packet::write_ethernet(&mut self.tx, mac, self.mac, EtherType::IPV4);
        match self.device.send(&self.tx[..ETHERNET_HEADER_LEN + len]) {
            Ok(()) => {
                self.stats.tx_frames += 1;
                Ok(Sent::Transmitted)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Err(SendError::DeviceBusy),
            Err(e) => Err(SendError::Device(e)),
        }
    }

    /// Asks who has `ip`: broadcast, or unicast to `to` when refreshing an entry.
    pub(super) fn send_arp_request(&mut self, ip: Ipv4Addr, to: MacAddr) {
        let addrs = &self.config.addresses;
        let src = addrs
            .iter()
            .find(|a| a.contains(ip))
            .unwrap_or(&addrs[0])
            .addr;
        let req = packet::arp_frame(
            to,
            ArpOperation::REQUEST,
            (self.mac, src),
            (MacAddr::default(), ip),
        );
        self.stats.arp_requests_sent += 1;
        Self::send_own(&mut self.device, &mut self.stats, &req);
    }
}
