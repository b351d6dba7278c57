//! UDP-encapsulated Ethernet: two devices on 127.0.0.1 exchange frames as QEMU's
//! `-netdev dgram` would, strangers' datagrams are ignored, and a peer that is not
//! listening yet only loses frames.

use softrnic_netdev::udp::UdpDevice;
use softrnic_netdev::{FrameDevice, MacAddr, is_frame_too_long, wait_readable};
use std::io::ErrorKind;
use std::net::UdpSocket;
use std::time::Duration;

const MAC_A: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 1]);
const MAC_B: MacAddr = MacAddr([0x52, 0x54, 0, 0x12, 0x34, 0x56]);
/// A bound on waits for what loopback delivers at once (never reached when all is well).
const HANG_GUARD: Option<Duration> = Some(Duration::from_secs(60));

fn frame(dst: MacAddr, src: MacAddr, len: usize, seed: u8) -> Vec<u8> {
    let mut f = Vec::with_capacity(14 + len);
    f.extend_from_slice(&dst.0);
    f.extend_from_slice(&src.0);
    f.extend_from_slice(&[0x88, 0xb5]);
    f.extend((0..len).map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed)));
    f
}

/// Two devices joined over loopback, on ports the kernel chose.
fn joined() -> (UdpDevice, UdpDevice) {
    let sa = UdpSocket::bind("127.0.0.1:0").unwrap();
    let sb = UdpSocket::bind("127.0.0.1:0").unwrap();
    let (aa, ab) = (sa.local_addr().unwrap(), sb.local_addr().unwrap());
    let a = UdpDevice::from_socket(sa, ab, MAC_A).unwrap();
    let b = UdpDevice::from_socket(sb, aa, MAC_B).unwrap();
    (a, b)
}

fn recv_one(dev: &mut UdpDevice) -> Vec<u8> {
    assert!(wait_readable(dev, HANG_GUARD).unwrap(), "no frame arrived");
    let mut buf = vec![0u8; dev.max_frame_len()];
    let n = dev.recv(&mut buf).unwrap();
    buf.truncate(n);
    buf
}

#[test]
fn two_devices_exchange_frames_both_ways() {
    let (mut a, mut b) = joined();
    assert_eq!(a.mac(), MAC_A);
    assert_eq!(a.remote_addr(), b.local_addr().unwrap());
    for (i, len) in [0usize, 1, 46, 1000, 1500].into_iter().enumerate() {
        let f = frame(MAC_B, MAC_A, len, i as u8);
        a.send(&f).unwrap();
        assert_eq!(recv_one(&mut b), f);
        let g = frame(MAC_A, MAC_B, len, 100 + i as u8);
        b.send(&g).unwrap();
        assert_eq!(recv_one(&mut a), g);
    }
    let mut buf = [0u8; 1514];
    assert_eq!(a.recv(&mut buf).unwrap_err().kind(), ErrorKind::WouldBlock);
    assert_eq!(b.recv(&mut buf).unwrap_err().kind(), ErrorKind::WouldBlock);
    assert_eq!(a.peer_unreachable(), 0);
}

#[test]
fn datagrams_from_strangers_are_not_frames() {
    let (mut a, mut b) = joined();
    let stranger = UdpSocket::bind("127.0.0.1:0").unwrap();
    stranger
        .send_to(&frame(MAC_A, MAC_B, 50, 9), a.local_addr().unwrap())
        .unwrap();
    let f = frame(MAC_A, MAC_B, 60, 1);
    b.send(&f).unwrap();
    // The first (and only) frame a sees is its peer's.
    assert_eq!(recv_one(&mut a), f);
    let mut buf = [0u8; 1514];
    assert_eq!(a.recv(&mut buf).unwrap_err().kind(), ErrorKind::WouldBlock);
}

#[test]
fn frames_to_a_peer_not_yet_listening_are_lost_and_counted() {
    // Reserve a port, then free it: nobody listens there.
    let gone = UdpSocket::bind("127.0.0.1:0").unwrap();
    let remote = gone.local_addr().unwrap();
    drop(gone);
    let mut a = UdpDevice::open("127.0.0.1:0".parse().unwrap(), remote, MAC_A).unwrap();
    a.send(&frame(MAC_B, MAC_A, 10, 0)).unwrap();
    // The kernel's "port unreachable" makes the socket readable (in error)...
    assert!(wait_readable(&a, HANG_GUARD).unwrap());
    let mut buf = [0u8; 1514];
    // ...which the device absorbs: no frame, no error, one count.
    assert_eq!(a.recv(&mut buf).unwrap_err().kind(), ErrorKind::WouldBlock);
    assert_eq!(a.peer_unreachable(), 1);
    // A send that meets the same pending error still goes out (and is lost).
    a.send(&frame(MAC_B, MAC_A, 10, 1)).unwrap();
    assert!(wait_readable(&a, HANG_GUARD).unwrap());
    a.send(&frame(MAC_B, MAC_A, 10, 2)).unwrap();
    assert_eq!(a.peer_unreachable(), 2);

    // The peer comes up on that port: frames flow from then on.
    let mut b = UdpDevice::open(remote, a.local_addr().unwrap(), MAC_B).unwrap();
    let f = frame(MAC_B, MAC_A, 70, 3);
    a.send(&f).unwrap();
    assert_eq!(recv_one(&mut b), f);
}

#[test]
fn oversized_datagrams_are_dropped_with_a_clear_error() {
    let (mut a, mut b) = joined();
    b.send(&frame(MAC_A, MAC_B, 1500, 0)).unwrap();
    let next = frame(MAC_A, MAC_B, 20, 1);
    b.send(&next).unwrap();
    assert!(wait_readable(&a, HANG_GUARD).unwrap());
    let mut small = [0u8; 600];
    let e = a.recv(&mut small).unwrap_err();
    assert!(is_frame_too_long(&e), "{e}");
    assert_eq!(recv_one(&mut a), next);

    // Outside the MTU on send: refused before it leaves.
    let e = a.send(&frame(MAC_B, MAC_A, 1501, 0)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    // A jumbo MTU lets it through.
    let mut a = a.with_mtu(9000);
    let jumbo = frame(MAC_B, MAC_A, 9000, 5);
    a.send(&jumbo).unwrap();
    assert!(wait_readable(&b, HANG_GUARD).unwrap());
    let mut buf = vec![0u8; 9014];
    let n = b.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], &jumbo[..]);
}
