//! The TAP backend with the kernel as the peer, in a network namespace the test makes:
//! the kernel pings the interface's address and gets replies, and its TCP connect to
//! that address shows up as a SYN handed to the layer above.

mod netns;

use softrnic_netdev::tap::TapDevice;
use softrnic_netdev::{FrameDevice, Interface, InterfaceConfig, Ipv4Cidr, MacAddr};
use std::net::Ipv4Addr;

const MAC: MacAddr = MacAddr([0x02, 0x5a, 0, 0, 0, 2]);
const KERNEL_IP: &str = "10.77.0.1/24";
const OUR_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);

#[test]
fn tap_with_the_kernel_as_peer() {
    if !std::path::Path::new("/dev/net/tun").exists() {
        return softrnic_testkit::skip_as(
            "tap_with_the_kernel_as_peer",
            "no /dev/net/tun",
            "tap_with_the_kernel_as_peer",
        );
    }
    let _ = netns::run_in_netns("tap_inside_a_namespace", "tap_inside_a_namespace");
}

#[test]
#[ignore = "changes the network: run by tap_with_the_kernel_as_peer in a namespace"]
fn tap_inside_a_namespace() {
    assert!(
        netns::in_child(),
        "this test creates interfaces: run it through tap_with_the_kernel_as_peer"
    );
    let dev = TapDevice::open("srtap0", MAC).unwrap();
    assert_eq!(dev.name(), "srtap0");
    assert_eq!(dev.mtu(), 1500);
    assert_eq!(dev.mac(), MAC);
    netns::ip(&format!("addr add {KERNEL_IP} dev srtap0"));
    netns::ip("link set srtap0 up");
    let cfg = InterfaceConfig::new([Ipv4Cidr::new(OUR_IP, 24)]);
    let mut iface = Interface::new(dev, cfg).unwrap();

    let _ = netns::kernel_pings(&mut iface, OUR_IP);
    netns::kernel_connects(&mut iface, OUR_IP, 5000);
    let neigh = netns::ip(&format!("neigh show {OUR_IP}"));
    assert!(
        neigh.contains(&MAC.to_string()),
        "the kernel learned us: {neigh}"
    );

    // A bigger MTU on the kernel's side: its 3000-octet ping does not fit our
    // 1514-octet buffer and is dropped, counted.
    netns::ip("link set srtap0 mtu 9000");
    assert_eq!(iface.device_mut().refresh_mtu().unwrap(), 9000);
    assert_eq!(
        iface.mtu(),
        1500,
        "the interface keeps the MTU it was made with"
    );
    if netns::have_ping("tap: an oversized frame") {
        let (ok, out) = netns::run_ping(&mut iface, &format!("-n -c 1 -s 3000 -w 1 {OUR_IP}"));
        assert!(!ok, "no reply to a ping that cannot fit: {out}");
        assert!(iface.stats().rx_too_long >= 1, "{:#?}", iface.stats());
    }
}
