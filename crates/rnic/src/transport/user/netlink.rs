//! A device's own TCP on a frame device of `softrnic-netdev` (UDP-encapsulated
//! Ethernet, TAP, AF_PACKET): its [`Interface`] answers ARP and ICMP echo for the
//! device's address and trades whole IPv4 packets with the stack. The device's
//! descriptor is what the stack thread waits on.

use super::link::{Incoming, Link, Receive};
use super::{UserLink, UserTcp};
use softrnic_netdev::iface::PROTO_TCP;
use softrnic_netdev::packet::PacketDevice;
use softrnic_netdev::tap::TapDevice;
use softrnic_netdev::udp::UdpDevice;
use softrnic_netdev::{
    FrameDevice, Ingress, Interface, InterfaceConfig, Ipv4Cidr, MacAddr, SendError, Stats,
};
use softrnic_tcp::LinkChecksum;
use std::io;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The interface's counters, readable while the stack thread owns the interface.
pub(crate) type SharedStats = Arc<Mutex<NetStats>>;

/// What a frame link did ([`crate::UserTcpStats::link`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetStats {
    /// The interface's counters (ARP, IPv4 checks, ICMP echo, frames in and out).
    pub iface: Stats,
    /// Packets the stack gave that did not leave: the device was busy, no neighbour
    /// answered, or the packet was refused. TCP sends them again.
    pub tx_dropped: u64,
    /// Errors reading the device.
    pub rx_errors: u64,
}

/// An [`Interface`] on frame device `D`, as a link.
pub(crate) struct NetLink<D: FrameDevice> {
    /// `None` once the device has closed: the frame device (its socket, its port) is
    /// given back then, not when the last QP that still names the stack lets go.
    iface: Option<Interface<D>>,
    mtu: usize,
    frame: Vec<u8>,
    tx_dropped: u64,
    rx_errors: u64,
    shared: SharedStats,
}

/// The MAC a device uses on a link where it needs one of its own: locally
/// administered, from its IPv4 address (02:5a:a.b.c.d).
pub fn mac_for(addr: std::net::Ipv4Addr) -> MacAddr {
    let o = addr.octets();
    MacAddr([0x02, 0x5a, o[0], o[1], o[2], o[3]])
}

/// Opens the frame device `cfg.link` names and puts an interface with the device's
/// address on it.
pub(crate) fn open(cfg: &UserTcp) -> io::Result<(Box<dyn Link>, SharedStats)> {
    let mac = cfg.mac.unwrap_or_else(|| mac_for(cfg.addr));
    let shared = SharedStats::default();
    let link: Box<dyn Link> = match &cfg.link {
        UserLink::Sim(_) => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a simulated network is not a frame device",
            ));
        }
        UserLink::Udp { local, remote } => Box::new(NetLink::new(
            UdpDevice::open(*local, *remote, mac)?,
            cfg,
            &shared,
        )?),
        UserLink::Tap { name } => {
            Box::new(NetLink::new(TapDevice::open(name, mac)?, cfg, &shared)?)
        }
        UserLink::Packet { ifname } => {
            let mut dev = PacketDevice::open(ifname)?;
            if let Some(m) = cfg.mac {
                dev = dev.with_mac(m);
            }
            Box::new(NetLink::new(dev, cfg, &shared)?)
        }
    };
    Ok((link, shared))
}

impl<D: FrameDevice> NetLink<D> {
    fn new(device: D, cfg: &UserTcp, shared: &SharedStats) -> io::Result<NetLink<D>> {
        let mut ic = InterfaceConfig::new([Ipv4Cidr::new(cfg.addr, cfg.prefix_len)]);
        ic.gateway = cfg.gateway;
        let iface = Interface::new(device, ic)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let frame = vec![0; iface.frame_buffer_len()];
        Ok(NetLink {
            mtu: iface.mtu(),
            iface: Some(iface),
            frame,
            tx_dropped: 0,
            rx_errors: 0,
            shared: shared.clone(),
        })
    }

    fn publish(&self) {
        if let Ok(mut s) = self.shared.lock()
            && let Some(iface) = &self.iface
        {
            s.iface.clone_from(iface.stats());
            s.tx_dropped = self.tx_dropped;
            s.rx_errors = self.rx_errors;
        }
    }
}

impl<D: FrameDevice + Send> Link for NetLink<D> {
    fn mtu(&self) -> usize {
        self.mtu
    }

    fn send(&mut self, now: Duration, packet: &[u8]) {
        let Some(iface) = &mut self.iface else {
            self.tx_dropped += 1;
            return;
        };
        match iface.send(now, packet) {
            Ok(_) => {}
            // Lost, as on any network: the retransmission timer covers it.
            Err(SendError::DeviceBusy | SendError::QueueFull(_) | SendError::NoRoute(_)) => {
                self.tx_dropped += 1;
            }
            Err(_) => self.tx_dropped += 1,
        }
    }

    fn receive(&mut self, now: Duration, f: &mut Receive<'_>) -> bool {
        let Some(iface) = &mut self.iface else {
            return false;
        };
        let more = loop {
            match iface.receive(now, &mut self.frame) {
                Ok(Ingress::Packet(p)) => {
                    if p.protocol() == PROTO_TCP {
                        // A frame's octets are the device's: nothing to keep.
                        let _ = f(Incoming::Slice(p.bytes()), LinkChecksum::Unchecked);
                    }
                }
                Ok(Ingress::Drained) => break false,
                Ok(Ingress::Yield) => break true,
                Err(_) => {
                    self.rx_errors += 1;
                    break false;
                }
            }
        };
        self.publish();
        more
    }

    fn poll_timeout(&self) -> Option<Duration> {
        self.iface.as_ref()?.poll_timeout()
    }

    fn handle_timeout(&mut self, now: Duration) {
        if let Some(iface) = &mut self.iface {
            iface.handle_timeout(now);
        }
    }

    fn fd(&self) -> Option<RawFd> {
        Some(self.iface.as_ref()?.device().as_raw_fd())
    }

    /// Closes the frame device, so a device opened next can bind the same port.
    fn detach(&mut self) {
        self.publish();
        self.iface = None;
    }
}
