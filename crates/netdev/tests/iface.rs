//! The interface, driven through its public API against a host the test plays on a
//! memory link: ARP both ways, ping both ways, TCP handed up, sending, the bounded
//! neighbour machinery in virtual time, and every bad packet dropped and counted.

mod common;

use common::*;
use etherparse::{ArpOperation, PacketBuilder};
use softrnic_netdev::memory;
use softrnic_netdev::{
    ConfigError, FrameDevice, Ingress, Interface, InterfaceConfig, Ipv4Cidr, MacAddr, SendError,
    Sent, Stats,
};
use std::net::Ipv4Addr;

fn assert_accounted(s: &Stats) {
    assert_eq!(s.frames_accounted(), s.rx_frames, "{s:#?}");
}

#[test]
fn answers_arp_requests_for_each_of_its_addresses_only() {
    let (mut iface, mut host) = setup();
    for ip in [IFACE_IP, IFACE_IP2] {
        host.send(&host.arp_request(ip));
        expect_nothing_up(&mut iface, secs(0));
        let frames = host.drain();
        assert_eq!(frames.len(), 1);
        let (eth_dst, arp) = parse_arp(&frames[0]);
        assert_eq!(eth_dst, HOST_MAC);
        assert_eq!(arp.operation, ArpOperation::REPLY);
        assert_eq!(arp.sender_mac, IFACE_MAC.0);
        assert_eq!(arp.sender_ipv4_addr(), ip);
        assert_eq!(arp.target_mac, HOST_MAC.0);
        assert_eq!(arp.target_ipv4_addr(), HOST_IP);
    }
    host.send(&host.arp_request(Ipv4Addr::new(10, 0, 0, 9)));
    expect_nothing_up(&mut iface, secs(0));
    assert!(host.drain().is_empty());

    let s = iface.stats();
    assert_eq!(s.arp_requests_answered, 2);
    assert_eq!(s.arp_not_for_us, 1);
    assert_eq!(s.tx_frames, 2);
    assert_accounted(s);
    // Asking taught the interface the host's MAC.
    assert_eq!(iface.neighbor(HOST_IP, secs(0)), Some(HOST_MAC));
}

#[test]
fn answers_a_ping_resolving_the_pinger_first() {
    let (mut iface, mut host) = setup();
    let data = b"softrnic ping payload".repeat(10);
    host.send(&host.ping(IFACE_IP, 0x1234, 7, &data));
    expect_nothing_up(&mut iface, secs(0));
    // The pinger is unknown: the reply waits while the interface asks who it is.
    let frames = host.drain();
    assert_eq!(frames.len(), 1);
    let (eth_dst, req) = parse_arp(&frames[0]);
    assert_eq!(eth_dst, MacAddr::BROADCAST);
    assert_eq!(req.operation, ArpOperation::REQUEST);
    assert_eq!(req.target_ipv4_addr(), HOST_IP);
    assert_eq!(req.sender_ipv4_addr(), IFACE_IP);

    host.send(&host.arp_reply());
    expect_nothing_up(&mut iface, secs(0));
    let frames = host.drain();
    assert_eq!(frames.len(), 1);
    assert_eq!(&frames[0][..6], &HOST_MAC.0);
    let (src, dst, id, seq, got) = parse_echo_reply(&frames[0]);
    assert_eq!((src, dst, id, seq), (IFACE_IP, HOST_IP, 0x1234, 7));
    assert_eq!(got, data);

    // Now known: the next ping is answered at once.
    host.send(&host.ping(IFACE_IP, 0x1234, 8, b"x"));
    expect_nothing_up(&mut iface, secs(1));
    let frames = host.drain();
    assert_eq!(parse_echo_reply(&frames[0]).3, 8);
    let s = iface.stats();
    assert_eq!(s.icmp_echo_requests, 2);
    assert_eq!(s.arp_replies, 1);
    assert_eq!(s.arp_requests_sent, 1);
    assert_eq!(s.delivered, 0);
    assert_accounted(s);
}

#[test]
fn hands_tcp_up_without_ethernet_padding() {
    let (mut iface, mut host) = setup();
    let mut frame = host.tcp_syn(IFACE_IP2, 40000, 7174, 1000);
    let ip_len = frame.len() - 14;
    frame.resize(60 + 4, 0); // minimum frame plus junk padding
    host.send(&frame);
    let mut buf = vec![0u8; iface.frame_buffer_len()];
    let Ingress::Packet(p) = iface.receive(secs(0), &mut buf).unwrap() else {
        panic!("no packet")
    };
    check_view(&p);
    assert_eq!(p.bytes(), &frame[14..14 + ip_len]);
    assert_eq!(p.src(), HOST_IP);
    assert_eq!(p.dst(), IFACE_IP2);
    assert_eq!(p.protocol(), softrnic_netdev::iface::PROTO_TCP);
    assert_eq!(p.ttl(), 64);
    assert_eq!(p.header().len(), 20);
    let tcp = etherparse::TcpHeaderSlice::from_slice(p.payload()).unwrap();
    assert_eq!((tcp.source_port(), tcp.destination_port()), (40000, 7174));
    assert!(tcp.syn());
    // The packet borrows the caller's buffer, not the interface: it can answer now.
    assert_eq!(
        iface.send_ping(secs(0), p.src(), 1, 1, b"").unwrap(),
        Sent::Queued
    );
    assert_eq!(p.dst(), IFACE_IP2);
    assert!(matches!(
        iface.receive(secs(0), &mut buf).unwrap(),
        Ingress::Drained
    ));
    assert_eq!(iface.stats().delivered, 1);
    assert_accounted(iface.stats());
}

#[test]
fn icmp_other_than_echo_requests_goes_up() {
    let (mut iface, mut host) = setup();
    let reply = PacketBuilder::ethernet2(HOST_MAC.0, IFACE_MAC.0)
        .ipv4(HOST_IP.octets(), IFACE_IP.octets(), 64)
        .icmpv4_echo_reply(9, 1);
    host.send(&build(reply, b"pong"));
    let up = expect_packet(&mut iface, secs(0));
    assert_eq!(up[9], 1, "ICMP");
    assert_eq!(&up[20..22], &[0, 0], "echo reply");
    assert!(host.drain().is_empty(), "a reply is not answered");
}

#[test]
fn sends_after_resolving_and_then_at_once() {
    let (mut iface, mut host) = setup();
    let pkt = |seq: u32| {
        let b = PacketBuilder::ipv4(IFACE_IP.octets(), HOST_IP.octets(), 64)
            .tcp(7174, 40000, seq, 1000)
            .syn();
        let mut v = Vec::new();
        b.write(&mut v, &[]).unwrap();
        v
    };
    assert_eq!(iface.send(secs(0), &pkt(1)).unwrap(), Sent::Queued);
    assert_eq!(iface.send(secs(0), &pkt(2)).unwrap(), Sent::Queued);
    let frames = host.drain();
    assert_eq!(frames.len(), 1, "one request for both packets");
    assert_eq!(parse_arp(&frames[0]).1.target_ipv4_addr(), HOST_IP);
    assert_eq!(iface.poll_timeout(), Some(secs(1)));

    host.send(&host.arp_reply());
    expect_nothing_up(&mut iface, secs(0));
    let frames = host.drain();
    assert_eq!(frames.len(), 2);
    for (f, seq) in frames.iter().zip([1, 2]) {
        let (dst, ip) = parse_ipv4(f);
        assert_eq!(dst, HOST_MAC);
        assert_eq!(ip, pkt(seq));
    }
    assert_eq!(iface.poll_timeout(), None);

    assert_eq!(iface.send(secs(1), &pkt(3)).unwrap(), Sent::Transmitted);
    assert_eq!(parse_ipv4(&host.recv().unwrap()).1, pkt(3));
    assert_eq!(iface.stats().tx_frames, 4);
}

#[test]
fn send_payload_and_send_ping_build_the_headers() {
    let (mut iface, mut host) = setup();
    host.send(&host.arp_request(IFACE_IP));
    expect_nothing_up(&mut iface, secs(0));
    host.drain();

    let payload = b"a udp-ish payload";
    assert_eq!(
        iface
            .send_payload(secs(0), IFACE_IP, HOST_IP, 17, payload)
            .unwrap(),
        Sent::Transmitted
    );
    let (_, ip) = parse_ipv4(&host.recv().unwrap());
    let h = etherparse::Ipv4HeaderSlice::from_slice(&ip).unwrap();
    assert_eq!((h.source_addr(), h.destination_addr()), (IFACE_IP, HOST_IP));
    assert_eq!((h.protocol().0, h.ttl()), (17, 64));
    assert!(h.dont_fragment());
    assert_eq!(&ip[20..], payload);

    assert_eq!(
        iface.send_ping(secs(0), HOST_IP, 5, 6, b"hello").unwrap(),
        Sent::Transmitted
    );
    let f = host.recv().unwrap();
    let s = etherparse::SlicedPacket::from_ethernet(&f).unwrap();
    let Some(etherparse::TransportSlice::Icmpv4(icmp)) = s.transport else {
        panic!("not ICMP")
    };
    let etherparse::Icmpv4Type::EchoRequest(e) = icmp.icmp_type() else {
        panic!("not a request")
    };
    assert_eq!((e.id, e.seq, icmp.payload()), (5, 6, &b"hello"[..]));
    assert_eq!(
        icmp.checksum(),
        icmp.header().icmp_type.calc_checksum(icmp.payload())
    );
}

#[test]
fn an_unanswered_neighbour_is_asked_three_times_then_its_packets_dropped() {
    let (mut iface, mut host) = setup();
    for seq in 0..3 {
        assert_eq!(
            iface.send_ping(secs(10), HOST_IP, 1, seq, b"").unwrap(),
            Sent::Queued
        );
    }
    assert_eq!(host.drain().len(), 1);
    assert_eq!(iface.poll_timeout(), Some(secs(11)));
    iface.handle_timeout(secs(10) + secs(1) / 2);
    assert!(host.drain().is_empty(), "not due yet");
    iface.handle_timeout(secs(11));
    iface.handle_timeout(secs(12));
    let retries = host.drain();
    assert_eq!(retries.len(), 2);
    for f in &retries {
        let (dst, arp) = parse_arp(f);
        assert_eq!(dst, MacAddr::BROADCAST);
        assert_eq!(arp.target_ipv4_addr(), HOST_IP);
    }
    assert_eq!(iface.poll_timeout(), Some(secs(13)));
    iface.handle_timeout(secs(13));
    assert!(host.drain().is_empty());
    assert_eq!(iface.poll_timeout(), None);
    let s = iface.stats();
    assert_eq!(s.arp_requests_sent, 3);
    assert_eq!(s.arp_resolution_failed, 1);
    assert_eq!(s.tx_unresolved_dropped, 3);

    // A late answer helps the next packets only.
    host.send(&host.arp_reply());
    expect_nothing_up(&mut iface, secs(14));
    assert!(host.drain().is_empty());
}

#[test]
fn packets_waiting_for_arp_are_bounded() {
    let mut cfg = config();
    cfg.pending_capacity = 2;
    cfg.pending_per_neighbor = 3;
    let (mut iface, _host) = setup_with(cfg);
    for seq in 0..3 {
        iface.send_ping(secs(0), HOST_IP, 1, seq, b"").unwrap();
    }
    assert!(matches!(
        iface.send_ping(secs(0), HOST_IP, 1, 3, b""),
        Err(SendError::QueueFull(ip)) if ip == HOST_IP
    ));
    let other = Ipv4Addr::new(10, 0, 0, 3);
    iface.send_ping(secs(0), other, 1, 0, b"").unwrap();
    let third = Ipv4Addr::new(10, 0, 0, 4);
    assert!(matches!(
        iface.send_ping(secs(0), third, 1, 0, b""),
        Err(SendError::QueueFull(ip)) if ip == third
    ));
}

#[test]
fn a_neighbour_in_use_is_refreshed_by_unicast_and_forgotten_when_it_expires() {
    let (mut iface, mut host) = setup();
    host.send(&host.arp_request(IFACE_IP));
    expect_nothing_up(&mut iface, secs(0));
    host.drain();
    // Last quarter of the 60 s: the packet goes, and a unicast request with it.
    assert_eq!(
        iface.send_ping(secs(50), HOST_IP, 1, 1, b"").unwrap(),
        Sent::Transmitted
    );
    let frames = host.drain();
    assert_eq!(frames.len(), 2);
    let (dst, arp) = parse_arp(&frames[0]);
    assert_eq!((dst, arp.target_ipv4_addr()), (HOST_MAC, HOST_IP));
    assert_eq!(parse_ipv4(&frames[1]).0, HOST_MAC);
    // Unanswered: at 60 s the entry is gone and the next packet waits for ARP.
    assert_eq!(iface.neighbor(HOST_IP, secs(60)), None);
    assert_eq!(
        iface.send_ping(secs(60), HOST_IP, 1, 2, b"").unwrap(),
        Sent::Queued
    );
    let frames = host.drain();
    assert_eq!(parse_arp(&frames[0]).0, MacAddr::BROADCAST);
}

#[test]
fn an_arp_flood_is_answered_but_the_neighbour_table_stays_bounded() {
    let mut cfg = config();
    cfg.neighbor_capacity = 8;
    cfg.rx_budget = 1000;
    let (mut iface, mut host) = setup_with(cfg);
    for i in 0..50u8 {
        let sender = (
            MacAddr([0x02, 9, 9, 9, 9, i]),
            Ipv4Addr::new(10, 0, 0, 100 + i),
        );
        host.send(&arp_frame(
            MacAddr::BROADCAST,
            ArpOperation::REQUEST,
            sender,
            (MacAddr::default(), IFACE_IP),
        ));
        expect_nothing_up(&mut iface, secs(u64::from(i)));
    }
    assert_eq!(host.drain().len(), 50);
    assert_eq!(iface.neighbor_count(), 8);
    // The newest are kept.
    assert!(
        iface
            .neighbor(Ipv4Addr::new(10, 0, 0, 149), secs(50))
            .is_some()
    );
    assert!(
        iface
            .neighbor(Ipv4Addr::new(10, 0, 0, 100), secs(50))
            .is_none()
    );
    assert_eq!(iface.stats().arp_requests_answered, 50);
}

#[test]
fn arp_from_off_link_senders_is_answered_but_not_learned() {
    let (mut iface, mut host) = setup();
    let stranger = (
        MacAddr([0x02, 7, 7, 7, 7, 7]),
        Ipv4Addr::new(192, 168, 5, 5),
    );
    host.send(&arp_frame(
        MacAddr::BROADCAST,
        ArpOperation::REQUEST,
        stranger,
        (MacAddr::default(), IFACE_IP),
    ));
    // An RFC 5227 probe for our address: answered, nothing learned.
    let probe = (MacAddr([0x02, 7, 7, 7, 7, 8]), Ipv4Addr::UNSPECIFIED);
    host.send(&arp_frame(
        MacAddr::BROADCAST,
        ArpOperation::REQUEST,
        probe,
        (MacAddr::default(), IFACE_IP),
    ));
    expect_nothing_up(&mut iface, secs(0));
    let replies = host.drain();
    assert_eq!(replies.len(), 2);
    assert_eq!(
        parse_arp(&replies[1]).1.target_ipv4_addr(),
        Ipv4Addr::UNSPECIFIED
    );
    assert_eq!(iface.neighbor_count(), 0);
}

#[test]
fn routes_off_link_through_the_gateway_and_refuses_what_it_cannot_send() {
    let mut cfg = config();
    cfg.gateway = Some(HOST_IP);
    let (mut iface, mut host) = setup_with(cfg);
    host.send(&host.arp_request(IFACE_IP));
    expect_nothing_up(&mut iface, secs(0));
    host.drain();
    let far = Ipv4Addr::new(8, 8, 8, 8);
    assert_eq!(
        iface.send_ping(secs(0), far, 1, 1, b"").unwrap(),
        Sent::Transmitted
    );
    let (mac, ip) = parse_ipv4(&host.recv().unwrap());
    assert_eq!(mac, HOST_MAC);
    assert_eq!(&ip[16..20], &far.octets());

    let (mut bare, _h) = setup();
    for dst in [
        far,
        IFACE_IP,
        Ipv4Addr::BROADCAST,
        Ipv4Addr::new(10, 0, 0, 255),
        Ipv4Addr::new(224, 0, 0, 1),
        Ipv4Addr::UNSPECIFIED,
    ] {
        assert!(
            matches!(bare.send_ping(secs(0), dst, 1, 1, b""), Err(SendError::NoRoute(d)) if d == dst),
            "{dst}"
        );
    }
    let good = {
        let b = PacketBuilder::ipv4(IFACE_IP.octets(), HOST_IP.octets(), 64).udp(1, 2);
        let mut v = Vec::new();
        b.write(&mut v, b"data").unwrap();
        v
    };
    let mut spoofed = good.clone();
    spoofed[12..16].copy_from_slice(&[10, 0, 0, 77]);
    assert!(matches!(
        bare.send(secs(0), &spoofed),
        Err(SendError::NotOurAddress(a)) if a == Ipv4Addr::new(10, 0, 0, 77)
    ));
    assert!(matches!(
        bare.send(secs(0), &good[..good.len() - 1]),
        Err(SendError::Malformed(_))
    ));
    assert!(matches!(
        bare.send(secs(0), &good[..10]),
        Err(SendError::Malformed(_))
    ));
    assert!(matches!(
        bare.send_payload(secs(0), IFACE_IP, HOST_IP, 17, &[0u8; 1481]),
        Err(SendError::TooBig {
            len: 1501,
            mtu: 1500
        })
    ));
    assert!(matches!(
        bare.send_ping(secs(0), HOST_IP, 1, 1, &[0u8; 1473]),
        Err(SendError::TooBig {
            len: 1501,
            mtu: 1500
        })
    ));
    assert_eq!(bare.stats().tx_frames, 0);
}

#[test]
fn a_busy_device_refuses_a_send_without_losing_it_silently() {
    let (mut iface, mut host) = setup();
    host.send(&host.arp_request(IFACE_IP));
    expect_nothing_up(&mut iface, secs(0));
    host.drain();
    let payload = [0u8; 1400];
    let mut sent = 0u64;
    let err = loop {
        match iface.send_payload(secs(0), IFACE_IP, HOST_IP, 17, &payload) {
            Ok(Sent::Transmitted) => sent += 1,
            Ok(Sent::Queued) => panic!("the neighbour is known"),
            Err(e) => break e,
        }
        assert!(sent < 1_000_000, "the link never filled");
    };
    assert!(matches!(err, SendError::DeviceBusy), "{err}");
    assert_eq!(
        host.drain().len() as u64,
        sent,
        "every packet taken arrived"
    );
    assert_eq!(
        iface
            .send_payload(secs(0), IFACE_IP, HOST_IP, 17, &payload)
            .unwrap(),
        Sent::Transmitted
    );
}

/// Every kind of bad frame, one each: dropped, counted under its own name, never
/// handed up, never answered.
#[test]
fn bad_frames_are_dropped_and_counted() {
    let (mut iface, host) = setup_injecting(config());
    let syn = host.tcp_syn(IFACE_IP, 1, 2, 3);
    let ip_sum = |f: &mut Vec<u8>| {
        f[24] = 0;
        f[25] = 0;
        let h = etherparse::Ipv4HeaderSlice::from_slice(&f[14..]).unwrap();
        let c = h.to_header().calc_header_checksum().to_be_bytes();
        f[24..26].copy_from_slice(&c);
    };
    let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
    cases.push(("rx_runt", vec![0u8; 13]));
    let mut f = syn.clone();
    f[0..6].copy_from_slice(&[0x02, 1, 1, 1, 1, 1]);
    cases.push(("rx_not_for_us", f));
    let mut f = syn.clone();
    f[0..6].copy_from_slice(&[0x01, 0, 0x5e, 0, 0, 1]);
    cases.push(("rx_not_for_us", f));
    let mut f = syn.clone();
    f[6..12].copy_from_slice(&[0x03, 1, 1, 1, 1, 1]);
    cases.push(("rx_bad_source_mac", f));
    let mut f = syn.clone();
    f[12..14].copy_from_slice(&[0x86, 0xdd]);
    cases.push(("rx_other_ethertype", f));
    let mut f = host.arp_request(IFACE_IP);
    f[18] = 8; // hardware address length
    cases.push(("arp_malformed", f));
    let mut f = host.arp_request(IFACE_IP);
    f.truncate(14 + 20);
    cases.push(("arp_malformed", f));
    let mut f = host.arp_request(IFACE_IP);
    f[21] = 3; // RARP request
    cases.push(("arp_malformed", f));
    let claim = arp_frame(
        MacAddr::BROADCAST,
        ArpOperation::REQUEST,
        (HOST_MAC, IFACE_IP),
        (MacAddr::default(), IFACE_IP2),
    );
    cases.push(("arp_rejected", claim));
    let mut f = syn.clone();
    f[14] = 0x65; // version 6
    cases.push(("ipv4_malformed", f));
    let mut f = syn.clone();
    f[14] = 0x44; // header length 16
    cases.push(("ipv4_malformed", f));
    let mut f = syn.clone();
    f[16..18].copy_from_slice(&2000u16.to_be_bytes()); // longer than the frame
    ip_sum(&mut f);
    cases.push(("ipv4_malformed", f));
    let mut f = syn.clone();
    f[16..18].copy_from_slice(&19u16.to_be_bytes()); // shorter than the header
    ip_sum(&mut f);
    cases.push(("ipv4_malformed", f));
    let mut f = syn.clone();
    f[24] ^= 0xff;
    cases.push(("ipv4_bad_checksum", f));
    let mut f = syn.clone();
    f[20] = 0x20; // more fragments
    ip_sum(&mut f);
    cases.push(("ipv4_fragments", f));
    let mut f = syn.clone();
    f[20..22].copy_from_slice(&[0x00, 0x10]); // offset 128
    ip_sum(&mut f);
    cases.push(("ipv4_fragments", f));
    let mut f = syn.clone();
    f[30..34].copy_from_slice(&[10, 0, 0, 99]);
    ip_sum(&mut f);
    cases.push(("ipv4_not_our_address", f));
    let mut f = syn.clone();
    f[0..6].copy_from_slice(&[0xff; 6]);
    cases.push(("ipv4_not_our_address", f));
    for src in [
        [255, 255, 255, 255],
        [10, 0, 0, 255],
        [0, 0, 0, 0],
        [224, 0, 0, 1],
        [10, 0, 0, 1],
    ] {
        let mut f = syn.clone();
        f[26..30].copy_from_slice(&src);
        ip_sum(&mut f);
        cases.push(("ipv4_bad_source", f));
    }
    let udp = PacketBuilder::ethernet2(HOST_MAC.0, IFACE_MAC.0)
        .ipv4(HOST_IP.octets(), IFACE_IP.octets(), 64)
        .udp(1, 2);
    cases.push(("ipv4_other_protocol", build(udp, b"hi")));
    let mut f = host.ping(IFACE_IP, 1, 1, b"data");
    let last = f.len() - 1;
    f[last] ^= 1;
    cases.push(("icmp_malformed", f));
    let mut f = host.ping(IFACE_IP, 1, 1, b"");
    f.truncate(14 + 20 + 4);
    f[16..18].copy_from_slice(&24u16.to_be_bytes());
    ip_sum(&mut f);
    cases.push(("icmp_malformed", f));

    let count = |s: &Stats, name: &str| -> u64 {
        match name {
            "rx_runt" => s.rx_runt,
            "rx_not_for_us" => s.rx_not_for_us,
            "rx_bad_source_mac" => s.rx_bad_source_mac,
            "rx_other_ethertype" => s.rx_other_ethertype,
            "arp_malformed" => s.arp_malformed,
            "arp_rejected" => s.arp_rejected,
            "ipv4_malformed" => s.ipv4_malformed,
            "ipv4_bad_checksum" => s.ipv4_bad_checksum,
            "ipv4_fragments" => s.ipv4_fragments,
            "ipv4_not_our_address" => s.ipv4_not_our_address,
            "ipv4_bad_source" => s.ipv4_bad_source,
            "ipv4_other_protocol" => s.ipv4_other_protocol,
            "icmp_malformed" => s.icmp_malformed,
            other => panic!("no counter {other}"),
        }
    };
    let mut host = host;
    for (name, frame) in &cases {
        let before = count(iface.stats(), name);
        iface.device_mut().inject(frame);
        expect_nothing_up(&mut iface, secs(0));
        assert_eq!(count(iface.stats(), name), before + 1, "{name}");
        assert!(host.drain().is_empty(), "{name}: answered");
    }
    let s = iface.stats();
    assert_eq!(s.rx_frames, cases.len() as u64);
    assert_eq!(s.delivered, 0);
    assert_accounted(s);
    assert_eq!(iface.neighbor_count(), 0, "nothing learned from bad frames");
}

#[test]
fn a_frame_too_long_for_the_mtu_is_counted_and_the_next_one_handled() {
    // The link carries 9000-octet frames; the interface's device says 1500, so its
    // buffer holds 1514 octets.
    let (a, mut big) = memory::pair_with(IFACE_MAC, HOST_MAC, 9000).unwrap();
    let mut iface = Interface::new(MtuOverride { dev: a, mtu: 1500 }, config()).unwrap();
    let (_, host) = setup(); // builds the frames
    let mut jumbo = host.tcp_syn(IFACE_IP, 1, 2, 3);
    jumbo.resize(3000, 0);
    big.send(&jumbo).unwrap();
    big.send(&host.tcp_syn(IFACE_IP, 1, 2, 4)).unwrap();
    let mut buf = vec![0u8; iface.frame_buffer_len()];
    assert!(matches!(
        iface.receive(secs(0), &mut buf).unwrap(),
        Ingress::Packet(_)
    ));
    assert_eq!(iface.stats().rx_too_long, 1);
    assert_eq!(iface.stats().rx_frames, 1);

    // A caller's buffer larger than asked for does not let it in either.
    big.send(&jumbo).unwrap();
    let mut huge = vec![0u8; 9014];
    assert!(matches!(
        iface.receive(secs(0), &mut huge).unwrap(),
        Ingress::Drained
    ));
    assert_eq!(iface.stats().rx_too_long, 2);
    assert_eq!(iface.stats().rx_frames, 1);
}

/// A device whose MTU says less than its link carries.
struct MtuOverride {
    dev: memory::MemoryDevice,
    mtu: usize,
}

impl FrameDevice for MtuOverride {
    fn send(&mut self, frame: &[u8]) -> std::io::Result<()> {
        self.dev.send(frame)
    }
    fn recv(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.dev.recv(buf)
    }
    fn mtu(&self) -> usize {
        self.mtu
    }
    fn mac(&self) -> MacAddr {
        self.dev.mac()
    }
}

impl std::os::fd::AsRawFd for MtuOverride {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.dev.as_raw_fd()
    }
}

#[test]
fn receive_yields_after_its_budget_of_frames_it_handled_itself() {
    let mut cfg = config();
    cfg.rx_budget = 4;
    let (mut iface, _host) = setup_injecting(cfg);
    for _ in 0..6 {
        iface.device_mut().inject(&[0u8; 10]);
    }
    let mut buf = vec![0u8; iface.frame_buffer_len()];
    assert!(matches!(
        iface.receive(secs(0), &mut buf).unwrap(),
        Ingress::Yield
    ));
    assert_eq!(iface.stats().rx_frames, 4);
    assert!(matches!(
        iface.receive(secs(0), &mut buf).unwrap(),
        Ingress::Drained
    ));
    assert_eq!(iface.stats().rx_runt, 6);
}

#[test]
fn configurations_it_cannot_work_with_are_refused() {
    let dev = || memory::pair().unwrap().0;
    let err = |cfg: InterfaceConfig| Interface::new(dev(), cfg).unwrap_err();
    assert_eq!(err(InterfaceConfig::new([])), ConfigError::NoAddress);
    for (addr, len) in [
        (Ipv4Addr::new(10, 0, 0, 1), 33),
        (Ipv4Addr::new(10, 0, 0, 255), 24),
        (Ipv4Addr::UNSPECIFIED, 8),
        (Ipv4Addr::new(224, 0, 0, 5), 4),
    ] {
        assert_eq!(
            err(InterfaceConfig::new([Ipv4Cidr::new(addr, len)])),
            ConfigError::BadAddress(addr, len)
        );
    }
    let mut cfg = config();
    cfg.gateway = Some(Ipv4Addr::new(192, 168, 0, 1));
    assert_eq!(
        err(cfg),
        ConfigError::GatewayNotOnLink(Ipv4Addr::new(192, 168, 0, 1))
    );
    let mut cfg = config();
    cfg.rx_budget = 0;
    assert_eq!(err(cfg), ConfigError::ZeroLimit);
    let (group, _) = memory::pair_with(MacAddr([1, 0, 0, 0, 0, 1]), HOST_MAC, 1500).unwrap();
    assert_eq!(
        Interface::new(group, config()).unwrap_err(),
        ConfigError::MacNotUnicast(MacAddr([1, 0, 0, 0, 0, 1]))
    );
    let (tiny, _) = memory::pair_with(IFACE_MAC, HOST_MAC, 67).unwrap();
    assert_eq!(
        Interface::new(tiny, config()).unwrap_err(),
        ConfigError::MtuTooSmall(67)
    );
    // A /32 and a /31 are fine.
    let ok = InterfaceConfig::new([
        Ipv4Cidr::new(Ipv4Addr::new(10, 9, 9, 9), 32),
        Ipv4Cidr::new(Ipv4Addr::new(10, 8, 8, 1), 31),
    ]);
    assert!(Interface::new(dev(), ok).is_ok());
}
