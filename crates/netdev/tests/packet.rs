//! The AF_PACKET backend with the kernel as the peer, across a veth pair in a network
//! namespace the test makes: the kernel (on one end) pings the interface's address and
//! gets replies, and its TCP connect to that address shows up as a SYN handed up.

mod netns;

use softrnic_netdev::packet::PacketDevice;
use softrnic_netdev::{FrameDevice, Interface, InterfaceConfig, Ipv4Cidr, MacAddr};
use std::net::Ipv4Addr;

const OUR_IP: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 2);

#[test]
fn af_packet_on_a_veth_with_the_kernel_as_peer() {
    let _ = netns::run_in_netns(
        "af_packet_inside_a_namespace",
        "af_packet_inside_a_namespace",
    );
}

/// The MAC `ip link show NAME` prints.
fn kernel_mac(name: &str) -> MacAddr {
    let out = netns::ip(&format!("link show {name}"));
    let at = out.find("link/ether ").expect("an Ethernet link") + "link/ether ".len();
    let mut mac = [0u8; 6];
    for (m, part) in mac.iter_mut().zip(out[at..at + 17].split(':')) {
        *m = u8::from_str_radix(part, 16).unwrap();
    }
    MacAddr(mac)
}

#[test]
#[ignore = "changes the network: run by af_packet_on_a_veth_with_the_kernel_as_peer in a namespace"]
fn af_packet_inside_a_namespace() {
    assert!(
        netns::in_child(),
        "this test creates interfaces: run it through af_packet_on_a_veth_with_the_kernel_as_peer"
    );
    // No IPv6 chatter (router solicitations, MLD) on the link: every frame the
    // interface sees is one the test caused.
    for conf in ["all", "default"] {
        std::fs::write(format!("/proc/sys/net/ipv6/conf/{conf}/disable_ipv6"), "1").unwrap();
    }
    netns::ip("link add srva type veth peer name srvb");
    netns::ip("addr add 10.78.0.1/24 dev srva");
    netns::ip("link set srva up");
    netns::ip("link set srvb up");

    let dev = PacketDevice::open("srvb").unwrap();
    assert_eq!(dev.name(), "srvb");
    assert_eq!(dev.mac(), kernel_mac("srvb"));
    assert_eq!(dev.mtu(), 1500);
    let mac = dev.mac();
    let cfg = InterfaceConfig::new([Ipv4Cidr::new(OUR_IP, 24)]);
    let mut iface = Interface::new(dev, cfg).unwrap();

    let _ = netns::kernel_pings(&mut iface, OUR_IP);
    netns::kernel_connects(&mut iface, OUR_IP, 5000);
    let neigh = netns::ip(&format!("neigh show {OUR_IP}"));
    assert!(
        neigh.contains(&mac.to_string()),
        "the kernel learned us: {neigh}"
    );
    // Our own frames never came back to us, and nothing else was on the link.
    assert_eq!(iface.stats().rx_not_for_us, 0, "{:#?}", iface.stats());
    assert_eq!(iface.stats().rx_other_ethertype, 0, "{:#?}", iface.stats());

    // Jumbo frames on the link: a 3000-octet ping does not fit the interface's
    // 1514-octet buffer and is dropped, counted.
    netns::ip("link set srva mtu 9000");
    netns::ip("link set srvb mtu 9000");
    if netns::have_ping("af_packet: an oversized frame") {
        let (ok, out) = netns::run_ping(&mut iface, &format!("-n -c 1 -s 3000 -w 1 {OUR_IP}"));
        assert!(!ok, "no reply to a ping that cannot fit: {out}");
        assert!(iface.stats().rx_too_long >= 1, "{:#?}", iface.stats());
    }

    // Another MAC than the interface's: on a veth, frames to it reach the socket
    // too (a real NIC would need promiscuous mode).
    drop(iface);
    let other_mac = MacAddr([0x02, 0x77, 0, 0, 0, 9]);
    let other = PacketDevice::open("srvb").unwrap().with_mac(other_mac);
    assert_eq!((other.mac(), other.mtu()), (other_mac, 9000));
    let other_ip = Ipv4Addr::new(10, 78, 0, 3);
    let cfg = InterfaceConfig::new([Ipv4Cidr::new(other_ip, 24)]);
    let mut iface = Interface::new(other, cfg).unwrap();
    if netns::kernel_pings(&mut iface, other_ip) {
        // The kernel learned the other MAC from our ARP reply.
        let neigh = netns::ip(&format!("neigh show {other_ip}"));
        assert!(neigh.contains(&other_mac.to_string()), "{neigh}");
    }
    assert!(PacketDevice::open("nosuchif0").is_err());
}
