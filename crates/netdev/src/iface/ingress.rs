//! The receive path: frames in, ARP and ICMP echo answered here, bad frames counted,
//! packets for the layer above handed up.

use super::packet::{
    self, ICMP_ECHO_HEADER_LEN, IPV4_HEADER_LEN, IpPacket, Ipv4Fault, PROTO_ICMP, PROTO_TCP,
};
use super::{Ingress, Interface};
use crate::device::{ETHERNET_HEADER_LEN, FrameDevice, MacAddr, is_frame_too_long};
use etherparse::{ArpHardwareId, ArpOperation, ArpPacketSlice, EtherType, Ethernet2HeaderSlice};
use std::io;
use std::net::Ipv4Addr;
use std::ops::Range;
use std::time::Duration;

impl<D: FrameDevice> Interface<D> {
    /// Reads frames from the device into `buf` (at least
    /// [`Interface::frame_buffer_len`] octets) and handles ARP, ICMP echo and every
    /// bad frame itself, until a packet for the layer above arrives, the device is
    /// empty, or `rx_budget` frames were handled. The packet lives in `buf`.
    ///
    /// Errors are the device's (other than `WouldBlock` and frames too long, which
    /// are counted, as are frames longer than the MTU allows).
    pub fn receive<'b>(&mut self, now: Duration, buf: &'b mut [u8]) -> io::Result<Ingress<'b>> {
        for _ in 0..self.config.rx_budget {
            let len = match self.device.recv(buf) {
                Ok(len) => len,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Ingress::Drained),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if is_frame_too_long(&e) => {
                    self.stats.rx_too_long += 1;
                    continue;
                }
                Err(e) => return Err(e),
            };
            // A buffer larger than asked for must not let in more than the MTU.
            if len > self.frame_buffer_len() {
                self.stats.rx_too_long += 1;
                continue;
            }
            self.stats.rx_frames += 1;
            if let Some((range, header_len)) = self.handle_frame(now, &buf[..len]) {
                self.stats.delivered += 1;
                let buf: &'b [u8] = buf;
                return Ok(Ingress::Packet(IpPacket::new(&buf[range], header_len)));
            }
        }
        Ok(Ingress::Yield)
    }

    /// One frame: handled here, or the range of `frame` holding a packet to hand up
    /// (and its header length).
    fn handle_frame(&mut self, now: Duration, frame: &[u8]) -> Option<(Range<usize>, usize)> {
        let Ok(eth) = Ethernet2HeaderSlice::from_slice(frame) else {
            self.stats.rx_runt += 1;
            return None;
        };
        let dst = MacAddr(eth.destination());
        if dst != self.mac && dst != MacAddr::BROADCAST {
            self.stats.rx_not_for_us += 1;
            return None;
        }
        let src = MacAddr(eth.source());
        if !src.is_unicast() {
            self.stats.rx_bad_source_mac += 1;
            return None;
        }
        let body = &frame[ETHERNET_HEADER_LEN..];
        match eth.ether_type() {
            EtherType::ARP => {
                self.handle_arp(now, body);
                None
            }
            EtherType::IPV4 if dst == self.mac => self.handle_ipv4(now, body).map(|(r, h)| {
                (
                    r.start + ETHERNET_HEADER_LEN..r.end + ETHERNET_HEADER_LEN,
                    h,
                )
            }),
            EtherType::IPV4 => {
                // IPv4 to the broadcast MAC is never for one of our unicast addresses.
                self.stats.ipv4_not_our_address += 1;
                None
            }
            _ => {
                self.stats.rx_other_ethertype += 1;
                None
            }
        }
    }

    fn handle_arp(&mut self, now: Duration, body: &[u8]) {
        let Ok(arp) = ArpPacketSlice::from_slice(body) else {
            self.stats.arp_malformed += 1;
            return;
        };
        let op = arp.operation();
        if arp.hw_addr_type() != ArpHardwareId::ETHERNET
            || arp.proto_addr_type() != EtherType::IPV4
            || arp.hw_addr_size() != 6
            || arp.proto_addr_size() != 4
            || (op != ArpOperation::REQUEST && op != ArpOperation::REPLY)
        {
            self.stats.arp_malformed += 1;
            return;
        }
        let mac_of = |b: &[u8]| MacAddr(b.try_into().expect("6 octets checked"));
        let ip_of = |b: &[u8]| Ipv4Addr::from(<[u8; 4]>::try_from(b).expect("4 octets checked"));
        let sender_mac = mac_of(arp.sender_hw_addr());
        let sender_ip = ip_of(arp.sender_protocol_addr());
        let target_ip = ip_of(arp.target_protocol_addr());
        if !sender_mac.is_unicast() || self.owns(sender_ip) {
            self.stats.arp_rejected += 1;
            return;
        }
        // RFC 826: a sender we know (or wait for) is updated whatever the target; one
        // that asks for us is added. Only senders on our subnets are learned, and an
        // RFC 5227 probe (sender 0.0.0.0) teaches nothing.
        let learnable = !sender_ip.is_unspecified() && self.on_link(sender_ip);
        let for_us = self.owns(target_ip);
        if learnable
            && (for_us || self.neighbors.knows(sender_ip))
            && let Some(waiting) = self.neighbors.learn(sender_ip, sender_mac, now, for_us)
        {
            for p in waiting {
                self.transmit_to(sender_mac, &p);
            }
        }
        if !for_us {
            self.stats.arp_not_for_us += 1;
        } else if op == ArpOperation::REQUEST {
            self.stats.arp_requests_answered += 1;
            let reply = packet::arp_frame(
                sender_mac,
                ArpOperation::REPLY,
                (self.mac, target_ip),
                (sender_mac, sender_ip),
            );
            Self::send_own(&mut self.device, &mut self.stats, &reply);
        } else {
            self.stats.arp_replies += 1;
        }
    }

    /// An IPv4 packet: the range of `body` to hand up and its header length, or
    /// `None` when handled here.
    fn handle_ipv4(&mut self, now: Duration, body: &[u8]) -> Option<(Range<usize>, usize)> {
        let p = match packet::check_ipv4(body) {
            Ok(p) => p,
            Err(Ipv4Fault::Malformed) => {
                self.stats.ipv4_malformed += 1;
                return None;
            }
            Err(Ipv4Fault::BadChecksum) => {
                self.stats.ipv4_bad_checksum += 1;
                return None;
            }
            Err(Ipv4Fault::Fragment) => {
                self.stats.ipv4_fragments += 1;
                return None;
            }
        };
        if !self.owns(p.dst()) {
            self.stats.ipv4_not_our_address += 1;
            return None;
        }
        let src = p.src();
        let subnet_broadcast = self
            .config
            .addresses
            .iter()
            .any(|a| a.prefix_len < 31 && a.broadcast() == src);
        if src.is_unspecified()
            || src.is_broadcast()
            || src.is_multicast()
            || subnet_broadcast
            || self.owns(src)
        {
            self.stats.ipv4_bad_source += 1;
            return None;
        }
        let up = Some((0..p.bytes().len(), p.header().len()));
        match p.protocol() {
            PROTO_TCP => up,
            PROTO_ICMP => match packet::echo_request(p.payload()) {
                Err(()) => {
                    self.stats.icmp_malformed += 1;
                    None
                }
                Ok(Some((id, seq))) => {
                    self.stats.icmp_echo_requests += 1;
                    let data = &p.payload()[ICMP_ECHO_HEADER_LEN..];
                    self.reply_echo(now, p.dst(), src, id, seq, data);
                    None
                }
                Ok(None) => up,
            },
            _ => {
                self.stats.ipv4_other_protocol += 1;
                None
            }
        }
    }

    fn reply_echo(
        &mut self,
        now: Duration,
        src: Ipv4Addr,
        dst: Ipv4Addr,
        id: u16,
        seq: u16,
        data: &[u8],
    ) {
        let icmp_len = ICMP_ECHO_HEADER_LEN + data.len();
        let at = ETHERNET_HEADER_LEN + IPV4_HEADER_LEN;
        // The request fitted the MTU, so the reply (no options) does too.
        packet::write_echo(&mut self.tx[at..], true, id, seq, data);
        if self
            .send_built(now, src, dst, packet::PROTO_ICMP, icmp_len)
            .is_err()
        {
            self.stats.tx_reply_unroutable += 1;
        }
    }
}
