//! QPs over softrnic's own TCP: two devices in one process, each with its address on a
//! simulated network, connect through the CM and pass Sends, Writes and Reads (small
//! and 1 MiB, data verified), close gracefully, and end a Write beyond bounds with the
//! exact Terminate; on a clean network and on one that loses, reorders, duplicates and
//! corrupts packets (seeded, so a failure replays).

mod common;

use common::*;
use softrnic_rnic::*;
use softrnic_wire::terminate::Layer;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

const A: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

fn device(net: &SimNet, addr: Ipv4Addr) -> EndBuilder {
    end().config(DeviceConfig {
        user_tcp: Some(UserTcp::sim(net, addr)),
        ..DeviceConfig::default()
    })
}

/// Connects `a` (active) to `b` (passive) on the simulated network.
fn connect_user(a: &End, b: &End) -> SocketAddr {
    let listener = b.dev.listen((B, 0)).unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::scope(|s| {
        let h = s.spawn(|| {
            let req = listener.accept().unwrap();
            assert_eq!(req.private_data(), b"active");
            assert_eq!(req.peer_addr().ip(), A);
            req.accept(&b.qp, b"passive").unwrap();
        });
        let c = a.dev.connect(addr, &a.qp, b"active").unwrap();
        assert_eq!(c.peer_private_data(), b"passive");
        assert_eq!(c.peer_addr, addr);
        h.join().unwrap();
    });
    addr
}

fn pair_on(net: &SimNet) -> (End, End) {
    let a = device(net, A).build();
    let b = device(net, B).build();
    connect_user(&a, &b);
    (a, b)
}

const SIZES: [usize; 3] = [64, 4000, 1 << 20];

/// Sends, Writes and Reads of every size, data verified at the other end.
fn every_operation(a: &End, b: &End, seed: u64) {
    let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    for (i, &size) in SIZES.iter().enumerate() {
        let tag = seed * 100 + i as u64;
        let data = pattern(size, tag);
        let src = a.pd.alloc_mr(size, Access::empty()).unwrap();
        src.write(0, &data).unwrap();
        // Send.
        let dst = b.pd.alloc_mr(size, Access::LOCAL_WRITE).unwrap();
        b.qp.post_recv(RecvWr::new(tag, dst.sge(0, size))).unwrap();
        a.qp.post_send(SendWr::send(tag, src.sge(0, size))).unwrap();
        let s = one(&a.cq);
        assert_eq!((s.wr_id, s.status), (tag, WcStatus::Success));
        let r = one(&b.cq);
        assert_eq!(
            (r.wr_id, r.status, r.opcode, r.byte_len),
            (tag, WcStatus::Success, WcOpcode::Recv, size as u32)
        );
        assert!(dst.to_vec() == data, "send of {size} (seed {seed})");
        // Write, then a Send that says it is there.
        let target = b.pd.alloc_mr(size, rw).unwrap();
        a.qp.post_send(SendWr::write(
            1,
            src.sge(0, size),
            target.addr(),
            target.rkey(),
        ))
        .unwrap();
        b.qp.post_recv(RecvWr::new(2, dst.sge(0, 4))).unwrap();
        a.qp.post_send(SendWr::send(3, src.sge(0, 4))).unwrap();
        take(&a.cq, 2);
        assert_eq!(one(&b.cq).status, WcStatus::Success);
        assert!(target.to_vec() == data, "write of {size} (seed {seed})");
        // Read it back from b.
        let sink = a.pd.alloc_mr(size, Access::LOCAL_WRITE).unwrap();
        a.qp.post_send(SendWr::read(
            4,
            sink.sge(0, size),
            target.addr(),
            target.rkey(),
        ))
        .unwrap();
        let c = one(&a.cq);
        assert_eq!(
            (c.wr_id, c.status, c.opcode, c.byte_len),
            (4, WcStatus::Success, WcOpcode::Read, size as u32)
        );
        assert!(sink.to_vec() == data, "read of {size} (seed {seed})");
    }
}

/// A graceful close from `a`: both QPs learn, both end in Error with nothing pending.
fn graceful_close(a: &End, b: &End) {
    a.qp.disconnect().unwrap();
    disconnected(&a.dev, &a.qp);
    disconnected(&b.dev, &b.qp);
    assert_eq!(a.qp.state(), QpState::Error);
    assert_eq!(b.qp.state(), QpState::Error);
}

#[test]
fn every_operation_and_a_graceful_close_on_a_clean_network() {
    let net = SimNet::new(SimImpairments::default());
    let (a, b) = pair_on(&net);
    // FPDUs are sized to the segment: the largest IPv4 packet less 40.
    assert_eq!(a.qp.params().max_fpdu, 65495);
    every_operation(&a, &b, 1);
    graceful_close(&a, &b);
    let st = a.dev.user_tcp_stats().unwrap();
    // No hole is ever acknowledged on a clean wire. Probes and timeouts are not
    // asserted: the timers run on real time, and a descheduled side may be probed.
    assert_eq!(st.tcp.fast_retransmits, 0, "{st:?}");
    // Two MiB of Send and Write out, the Read's MiB in.
    assert!(
        st.tcp.bytes_out > 2 << 20 && st.tcp.bytes_in > 1 << 20,
        "{st:?}"
    );
    assert_eq!(st.stack.connected, 1);
    let stb = b.dev.user_tcp_stats().unwrap();
    assert_eq!(stb.stack.accepted, 1);
    assert_eq!(net.stats().lost, 0);
    // Full segments were read straight out of the packets they came in (zero-copy
    // receive), both ways: the Send and Write into b, the Read Response into a.
    assert!(stb.stack.packets_held >= 24, "{stb:?}");
    assert!(st.stack.packets_held >= 12, "{st:?}");
    // And sent without copying the send buffer's octets into the packet: a's Send and
    // Write, b's Read Response.
    assert!(st.stack.packets_lent >= 24, "{st:?}");
    assert!(stb.stack.packets_lent >= 12, "{stb:?}");
}

#[test]
fn full_segments_read_out_of_their_packets_under_loss_reordering_duplication() {
    // Segments of the largest IPv4 packet (as write_bw runs): each carries its
    // payload by reference to the sender's send buffer and is read straight from
    // there, kept by the receiving stack until the QP has read it, while losses,
    // reordering and duplicates mix kept payloads with copied pieces.
    for seed in 1..=3 {
        let net = SimNet::new(SimImpairments {
            loss: 0.02,
            reorder: 0.05,
            duplicate: 0.02,
            seed,
            ..SimImpairments::default()
        });
        let (a, b) = pair_on(&net);
        every_operation(&a, &b, seed);
        graceful_close(&a, &b);
        let w = net.stats();
        assert!(
            w.lost + w.reordered + w.duplicated > 0,
            "seed {seed}: {w:?}"
        );
        let (st, stb) = (
            a.dev.user_tcp_stats().unwrap(),
            b.dev.user_tcp_stats().unwrap(),
        );
        assert!(stb.stack.packets_held >= 24, "seed {seed}: {stb:?}");
        assert!(st.stack.packets_held >= 12, "seed {seed}: {st:?}");
        assert!(st.stack.packets_lent >= 24, "seed {seed}: {st:?}");
        assert!(stb.stack.packets_lent >= 12, "seed {seed}: {stb:?}");
    }
}

#[test]
fn every_operation_on_a_network_that_loses_reorders_duplicates_and_corrupts() {
    for seed in 1..=3 {
        let net = SimNet::new(SimImpairments {
            loss: 0.01,
            reorder: 0.05,
            duplicate: 0.01,
            corrupt: 0.01,
            // Segments of a common Ethernet, so a message is many packets.
            mtu: 1500,
            seed,
            ..SimImpairments::default()
        });
        let (a, b) = pair_on(&net);
        assert_eq!(a.qp.params().max_fpdu, 1460);
        every_operation(&a, &b, seed);
        graceful_close(&a, &b);
        let w = net.stats();
        assert!(w.lost > 0 && w.reordered > 0, "seed {seed}: {w:?}");
        let st = a.dev.user_tcp_stats().unwrap();
        assert!(st.tcp.retransmitted_segments > 0, "seed {seed}: {st:?}");
        // The network checksums for its ends (offload): what it damaged, it marked, and
        // the stacks dropped those packets (the octets above prove none slipped
        // through; a damaged packet may still be on the wire when the test ends).
        let stb = b.dev.user_tcp_stats().unwrap();
        let dropped = st.stack.dropped_checksum + stb.stack.dropped_checksum;
        assert!(w.corrupted > 0, "seed {seed}: {w:?}");
        assert!(
            dropped > 0 && dropped <= w.corrupted,
            "seed {seed}: {dropped} {w:?}"
        );
        // Full segments were read out of their packets (1460 of 1500 octets).
        assert!(stb.stack.packets_held > 1000, "seed {seed}: {stb:?}");
    }
}

#[test]
fn a_write_beyond_bounds_ends_with_the_exact_terminate() {
    let net = SimNet::new(SimImpairments::default());
    let (a, b) = pair_on(&net);
    let target =
        b.pd.alloc_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
    let src = a.pd.alloc_mr(64, Access::empty()).unwrap();
    a.qp.post_send(SendWr::write(
        1,
        src.sge(0, 8),
        target.addr() + 4092,
        target.rkey(),
    ))
    .unwrap();
    assert_eq!(one(&a.cq).status, WcStatus::Success);
    let cause = TerminateCause::new(Layer::Ddp, 1, 0x01);
    assert_eq!(
        fatal_event(&b.dev, &b.qp),
        AsyncEvent::QpFatal {
            qp: b.qp.id(),
            cause,
            remote: false
        }
    );
    assert_eq!(
        fatal_event(&a.dev, &a.qp),
        AsyncEvent::QpFatal {
            qp: a.qp.id(),
            cause,
            remote: true
        }
    );
    disconnected(&a.dev, &a.qp);
    disconnected(&b.dev, &b.qp);
    assert!(target.to_vec().iter().all(|&x| x == 0), "nothing placed");
}

#[test]
fn nobody_listening_refuses_and_a_silent_peer_times_out() {
    let net = SimNet::new(SimImpairments::default());
    let a = device(&net, A).build();
    let _b = device(&net, B).build();
    // b has no listener: its stack answers the SYN with a reset.
    let err = a.dev.connect((B, 4000), &a.qp, b"").unwrap_err();
    assert!(
        matches!(&err, Error::Io(e) if e.kind() == std::io::ErrorKind::ConnectionRefused),
        "{err:?}"
    );
    // Nobody at all at that address: the connect gives up at its deadline.
    let cfg = DeviceConfig {
        user_tcp: Some(UserTcp::sim(&net, Ipv4Addr::new(10, 0, 0, 3))),
        connect_timeout: Duration::from_millis(300),
        ..DeviceConfig::default()
    };
    let c = end().config(cfg).build();
    let err = c
        .dev
        .connect((Ipv4Addr::new(10, 0, 0, 9), 4000), &c.qp, b"")
        .unwrap_err();
    assert!(
        matches!(&err, Error::Io(e) if e.kind() == std::io::ErrorKind::TimedOut),
        "{err:?}"
    );
    assert!(net.stats().unroutable > 0);
}

/// Two free UDP ports on loopback (bound, read, released: the devices bind them).
fn two_udp_ports() -> (SocketAddr, SocketAddr) {
    let a = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let b = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    (a.local_addr().unwrap(), b.local_addr().unwrap())
}

#[test]
fn every_operation_over_ethernet_frames_in_udp_datagrams() {
    // No privilege: each device's frames go to the other's UDP socket, as a QEMU guest's
    // would; ARP, IPv4 and TCP all run on them.
    let (pa, pb) = two_udp_ports();
    let (ia, ib) = (
        Ipv4Addr::new(192, 168, 77, 1),
        Ipv4Addr::new(192, 168, 77, 2),
    );
    let open = |local, remote, ip| {
        end()
            .config(DeviceConfig {
                user_tcp: Some(UserTcp::on(UserLink::Udp { local, remote }, ip, 24)),
                ..DeviceConfig::default()
            })
            .build()
    };
    let a = open(pa, pb, ia);
    let b = open(pb, pa, ib);
    let listener = b.dev.listen((ib, 0)).unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::scope(|s| {
        let h = s.spawn(|| listener.accept().unwrap().accept(&b.qp, b"").unwrap());
        let c = a.dev.connect(addr, &a.qp, b"").unwrap();
        assert_eq!(c.peer_addr, addr);
        h.join().unwrap();
    });
    // Segments of an Ethernet MTU.
    assert_eq!(a.qp.params().max_fpdu, 1460);
    every_operation(&a, &b, 9);
    graceful_close(&a, &b);
    let st = a.dev.user_tcp_stats().unwrap();
    let link = st.link.expect("a frame link's counters");
    assert!(
        link.iface.arp_replies + link.iface.arp_requests_answered >= 1,
        "{link:?}"
    );
    // The 1 MiB Read Response alone came in 719 segments of 1460 octets.
    assert!(link.iface.delivered >= 719, "{link:?}");
    assert_eq!(link.tx_dropped, 0, "{link:?}");
}

/// The own TCP's link belongs to the device's handles: when the program drops its last
/// `Device`, a UDP frame link's port is free at once, even while an object made from
/// the device (here a PD) still holds the device's core alive.
#[test]
fn dropping_the_last_device_handle_frees_its_udp_port() {
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let open = || {
        Device::open(DeviceConfig {
            user_tcp: Some(UserTcp::on(
                UserLink::Udp {
                    local: port,
                    remote: "127.0.0.1:9".parse().unwrap(),
                },
                Ipv4Addr::new(10, 9, 0, 1),
                24,
            )),
            ..DeviceConfig::default()
        })
    };
    let dev = open().expect("the port is free");
    let pd = dev.alloc_pd();
    assert!(open().is_err(), "a second device cannot bind the same port");
    drop(dev);
    let again = open().expect("the port was given back with the last handle");
    drop(pd);
    drop(again);
}
