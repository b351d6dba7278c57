//! The in-memory frame pair: frames cross whole and in order, limits give clear
//! errors, and readiness follows the queue.

use softrnic_netdev::memory::{self, PAIR_MAC_A, PAIR_MAC_B};
use softrnic_netdev::{FrameDevice, MacAddr, is_frame_too_long, wait_readable};
use std::io::ErrorKind;
use std::time::Duration;

/// A frame from `src` to `dst` whose payload is `len` octets of a pattern seeded by `seed`.
fn frame(dst: MacAddr, src: MacAddr, len: usize, seed: u8) -> Vec<u8> {
    let mut f = Vec::with_capacity(14 + len);
    f.extend_from_slice(&dst.0);
    f.extend_from_slice(&src.0);
    f.extend_from_slice(&[0x88, 0xb5]); // the local experimental EtherType
    f.extend((0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)));
    f
}

#[test]
fn frames_cross_both_ways_whole_and_in_order() {
    let (mut a, mut b) = memory::pair().unwrap();
    assert_eq!(a.mac(), PAIR_MAC_A);
    assert_eq!(b.mac(), PAIR_MAC_B);
    assert_eq!(a.mtu(), 1500);
    assert_eq!(a.max_frame_len(), 1514);

    let sent: Vec<Vec<u8>> = [0, 1, 46, 1499, 1500]
        .iter()
        .enumerate()
        .map(|(i, &len)| frame(PAIR_MAC_B, PAIR_MAC_A, len, i as u8))
        .collect();
    for f in &sent {
        a.send(f).unwrap();
    }
    let mut buf = vec![0u8; b.max_frame_len()];
    for f in &sent {
        let n = b.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], &f[..]);
    }
    assert_eq!(b.recv(&mut buf).unwrap_err().kind(), ErrorKind::WouldBlock);

    let back = frame(PAIR_MAC_A, PAIR_MAC_B, 100, 7);
    b.send(&back).unwrap();
    let n = a.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], &back[..]);
}

#[test]
fn a_frame_longer_than_the_buffer_is_dropped_with_a_clear_error() {
    let (mut a, mut b) = memory::pair().unwrap();
    let big = frame(PAIR_MAC_B, PAIR_MAC_A, 200, 1);
    let next = frame(PAIR_MAC_B, PAIR_MAC_A, 20, 2);
    a.send(&big).unwrap();
    a.send(&next).unwrap();
    let mut small = [0u8; 100];
    let e = b.recv(&mut small).unwrap_err();
    assert!(is_frame_too_long(&e), "{e}");
    assert_eq!(e.kind(), ErrorKind::InvalidData);
    assert_eq!(
        e.to_string(),
        "a 214-octet frame did not fit a 100-octet buffer: dropped"
    );
    // The link goes on with the next frame.
    let n = b.recv(&mut small).unwrap();
    assert_eq!(&small[..n], &next[..]);
}

#[test]
fn frames_outside_the_mtu_are_refused() {
    let (mut a, _b) = memory::pair().unwrap();
    let e = a.send(&[0u8; 13]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    let e = a.send(&frame(PAIR_MAC_B, PAIR_MAC_A, 1501, 0)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(!is_frame_too_long(&e));

    let (mut small, other) = memory::pair_with(PAIR_MAC_A, PAIR_MAC_B, 500).unwrap();
    assert_eq!(small.max_frame_len(), 514);
    assert!(small.send(&frame(PAIR_MAC_B, PAIR_MAC_A, 500, 0)).is_ok());
    assert_eq!(
        small
            .send(&frame(PAIR_MAC_B, PAIR_MAC_A, 501, 0))
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidInput
    );
    // With the other end gone, a send says so.
    drop(other);
    let e = small
        .send(&frame(PAIR_MAC_B, PAIR_MAC_A, 10, 0))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ConnectionRefused);
}

#[test]
fn readiness_follows_the_queue() {
    let (mut a, mut b) = memory::pair().unwrap();
    assert!(!wait_readable(&b, Some(Duration::ZERO)).unwrap());
    a.send(&frame(PAIR_MAC_B, PAIR_MAC_A, 10, 0)).unwrap();
    // No limit: returns because a frame is there.
    assert!(wait_readable(&b, None).unwrap());
    let mut buf = [0u8; 1514];
    b.recv(&mut buf).unwrap();
    assert!(!wait_readable(&b, Some(Duration::ZERO)).unwrap());
}

#[test]
fn a_full_link_says_would_block_and_loses_nothing_it_took() {
    let (mut a, mut b) = memory::pair().unwrap();
    let mut taken = 0usize;
    let blocked = loop {
        let f = frame(PAIR_MAC_B, PAIR_MAC_A, 1500, taken as u8);
        match a.send(&f) {
            Ok(()) => taken += 1,
            Err(e) => break e,
        }
        assert!(taken < 1_000_000, "the link never filled");
    };
    assert_eq!(blocked.kind(), ErrorKind::WouldBlock);
    assert!(taken > 0);
    let mut buf = [0u8; 1514];
    for i in 0..taken {
        let n = b.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], &frame(PAIR_MAC_B, PAIR_MAC_A, 1500, i as u8)[..]);
    }
    assert_eq!(b.recv(&mut buf).unwrap_err().kind(), ErrorKind::WouldBlock);
    // Room again.
    a.send(&frame(PAIR_MAC_B, PAIR_MAC_A, 1500, 0)).unwrap();
}

#[test]
fn mac_address_classes() {
    assert!(MacAddr::BROADCAST.is_multicast());
    assert!(!MacAddr::BROADCAST.is_unicast());
    assert!(MacAddr([0x01, 0, 0x5e, 0, 0, 1]).is_multicast());
    assert!(MacAddr::default().is_zero());
    assert!(!MacAddr::default().is_unicast());
    assert!(PAIR_MAC_A.is_unicast());
    assert_eq!(PAIR_MAC_A.to_string(), "02:00:00:00:00:0a");
}
