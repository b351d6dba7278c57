//! Property tests: whatever arrives (random bytes, or good frames with bytes flipped
//! and tails cut), the interface never panics, counts every frame exactly once, and
//! hands up only sound packets addressed to it. Whatever the layer above gives it to
//! send, it answers with a value, never a panic.

mod common;

use common::*;
use etherparse::{ArpOperation, PacketBuilder};
use proptest::prelude::*;
use softrnic_netdev::iface::{PROTO_ICMP, PROTO_TCP};
use softrnic_netdev::{Ingress, Interface};
use std::time::Duration;

/// Receives until drained, checking every packet handed up.
fn pump(iface: &mut Interface<Injecting>, now: Duration) {
    let mut buf = vec![0u8; iface.frame_buffer_len()];
    loop {
        match iface.receive(now, &mut buf).unwrap() {
            Ingress::Drained => break,
            Ingress::Yield => continue,
            Ingress::Packet(p) => {
                let ours: Vec<_> = iface.addresses().iter().map(|a| a.addr).collect();
                assert!(ours.contains(&p.dst()), "{p:?}");
                assert!(matches!(p.protocol(), PROTO_TCP | PROTO_ICMP), "{p:?}");
                let h = etherparse::Ipv4HeaderSlice::from_slice(p.bytes()).unwrap();
                assert_eq!(usize::from(h.total_len()), p.bytes().len());
                assert_eq!(h.header_checksum(), h.to_header().calc_header_checksum());
                assert!(!h.more_fragments() && h.fragments_offset().value() == 0);
                assert_eq!(p.header().len() + p.payload().len(), p.bytes().len());
            }
        }
    }
}

/// Good frames of every kind the interface handles.
fn seeds(host: &Host) -> Vec<Vec<u8>> {
    let udp = PacketBuilder::ethernet2(HOST_MAC.0, IFACE_MAC.0)
        .ipv4(HOST_IP.octets(), IFACE_IP.octets(), 64)
        .udp(5, 6);
    let reply = PacketBuilder::ethernet2(HOST_MAC.0, IFACE_MAC.0)
        .ipv4(HOST_IP.octets(), IFACE_IP.octets(), 64)
        .icmpv4_echo_reply(1, 2);
    vec![
        host.arp_request(IFACE_IP),
        host.arp_reply(),
        host.arp(IFACE_MAC, ArpOperation::REQUEST, (IFACE_MAC, IFACE_IP2)),
        host.ping(IFACE_IP, 1, 2, b"ping data"),
        host.tcp_syn(IFACE_IP2, 1000, 7174, 42),
        build(udp, b"udp"),
        build(reply, b"pong"),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_frames_never_panic_and_are_all_counted(
        frames in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..1600), 1..20),
        times in prop::collection::vec(0u64..200_000, 1..20),
    ) {
        let (mut iface, mut host) = setup_injecting(config());
        for (f, t) in frames.iter().zip(times.iter().cycle()) {
            let now = Duration::from_millis(*t);
            iface.device_mut().inject(f);
            pump(&mut iface, now);
            iface.handle_timeout(now);
        }
        let s = iface.stats();
        prop_assert_eq!(s.rx_frames + s.rx_too_long, frames.len() as u64);
        prop_assert_eq!(s.frames_accounted(), s.rx_frames);
        host.drain();
    }

    #[test]
    fn mutated_good_frames_never_panic_and_only_sound_packets_go_up(
        which in 0usize..7,
        flips in prop::collection::vec((0usize..1600, 1u8..=255), 0..6),
        cut in prop::option::of(0usize..1600),
        pad in 0usize..64,
        now_ms in 0u64..100_000,
    ) {
        let (mut iface, mut host) = setup_injecting(config());
        let mut f = seeds(&host)[which].clone();
        for (at, x) in flips {
            let i = at % f.len();
            f[i] ^= x;
        }
        if let Some(c) = cut {
            f.truncate(c % (f.len() + 1));
        }
        f.resize(f.len() + pad, 0);
        let now = Duration::from_millis(now_ms);
        iface.device_mut().inject(&f);
        pump(&mut iface, now);
        let s = iface.stats();
        prop_assert_eq!(s.frames_accounted(), s.rx_frames);
        // What it sent in answer is well formed.
        for out in host.drain() {
            prop_assert!(out.len() >= 14 && out.len() <= 1514);
            prop_assert_eq!(&out[6..12], &IFACE_MAC.0[..]);
        }
    }

    #[test]
    fn anything_given_to_send_gets_an_answer_not_a_panic(
        packets in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..1600), 1..10),
        fix_header in any::<bool>(),
    ) {
        let (mut iface, _host) = setup_injecting(config());
        for mut p in packets {
            if fix_header && p.len() >= 20 {
                // Make it look like IPv4 from us to the host, to get further in.
                p[0] = 0x45;
                let len = (p.len() as u16).to_be_bytes();
                p[2..4].copy_from_slice(&len);
                p[12..16].copy_from_slice(&IFACE_IP.octets());
                p[16..20].copy_from_slice(&HOST_IP.octets());
            }
            let _ = iface.send(Duration::ZERO, &p);
            let _ = iface.send_payload(Duration::ZERO, IFACE_IP, HOST_IP, 6, &p);
        }
        // Resolutions started on the way end within their retries.
        let mut steps = 0;
        while let Some(t) = iface.poll_timeout() {
            iface.handle_timeout(t);
            steps += 1;
            prop_assert!(steps <= 16 * 3, "timers never settle");
        }
    }
}
