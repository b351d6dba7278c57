//! softrnic's own TCP (`softrnic-tcp`'s stack) against Linux TCP: in a network
//! namespace the test makes, the stack connects to a kernel echo server (a plain
//! `std::net` socket) through this crate's interface, sends 100 MB, reads every octet
//! back and checks it, and both sides close gracefully: on a TAP interface, and (16
//! MB) over AF_PACKET on one end of a veth pair whose other end is the kernel's.
//!
//! `SOFTRNIC_TCP_ECHO_MB` sets the TAP run's size (100 by default).

mod netns;

use softrnic_netdev::packet::PacketDevice;
use softrnic_netdev::tap::TapDevice;
use softrnic_netdev::{
    FrameDevice, Ingress, Interface, InterfaceConfig, Ipv4Cidr, MacAddr, wait_readable,
};
use softrnic_tcp::{Config, NoRaw, RxMode, Stack, StackConfig, StackError, State};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::time::{Duration, Instant};

const MAC: MacAddr = MacAddr([0x02, 0x5a, 0, 0, 0, 9]);
/// A bound on the whole exchange, never reached when all is well.
const HANG_GUARD: Duration = Duration::from_secs(120);

/// The octet at stream offset `i`: every octet depends on its offset, so a lost,
/// duplicated or misplaced one shows.
fn octet(i: u64) -> u8 {
    (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 57) as u8 ^ (i >> 11) as u8
}

fn size() -> u64 {
    std::env::var("SOFTRNIC_TCP_ECHO_MB")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(100)
        << 20
}

#[test]
fn own_tcp_echoes_100_mb_with_linux_tcp_over_a_tap() {
    if !std::path::Path::new("/dev/net/tun").exists() {
        return softrnic_testkit::skip_as(
            "own_tcp_echoes_100_mb_with_linux_tcp_over_a_tap",
            "no /dev/net/tun",
            "own_tcp_echoes_100_mb_with_linux_tcp_over_a_tap",
        );
    }
    let _ = netns::run_in_netns("tcp_echo_inside_a_namespace", "tcp_echo_inside_a_namespace");
}

/// The kernel's side: accept one connection and echo it until it ends.
fn kernel_echo(l: TcpListener) -> std::io::Result<u64> {
    let (mut s, _) = l.accept()?;
    let mut buf = vec![0u8; 256 << 10];
    let mut n = 0;
    loop {
        let k = s.read(&mut buf)?;
        if k == 0 {
            s.shutdown(std::net::Shutdown::Write)?;
            return Ok(n);
        }
        s.write_all(&buf[..k])?;
        n += k as u64;
    }
}

#[test]
#[ignore = "changes the network: run by own_tcp_echoes_100_mb_with_linux_tcp_over_a_tap in a namespace"]
fn tcp_echo_inside_a_namespace() {
    assert!(
        netns::in_child(),
        "run it through own_tcp_echoes_100_mb_with_linux_tcp_over_a_tap"
    );
    let dev = TapDevice::open("srtcp0", MAC).unwrap();
    netns::ip("addr add 10.79.0.1/24 dev srtcp0");
    netns::ip("link set srtcp0 up");
    let kernel = SocketAddrV4::new(Ipv4Addr::new(10, 79, 0, 1), 7007);
    echo(dev, kernel, Ipv4Addr::new(10, 79, 0, 2), size());
}

#[test]
fn own_tcp_echoes_with_linux_tcp_over_af_packet_on_a_veth() {
    let _ = netns::run_in_netns(
        "af_packet_echo_inside_a_namespace",
        "af_packet_echo_inside_a_namespace",
    );
}

#[test]
#[ignore = "changes the network: run by own_tcp_echoes_with_linux_tcp_over_af_packet_on_a_veth in a namespace"]
fn af_packet_echo_inside_a_namespace() {
    assert!(
        netns::in_child(),
        "run it through own_tcp_echoes_with_linux_tcp_over_af_packet_on_a_veth"
    );
    netns::ip("link add srea type veth peer name sreb");
    // A veth does segmentation offload: without this the kernel hands over 64 KiB
    // "frames" that no Ethernet carries (ethtool -K srea tso off does the same).
    netns::ip("link set srea gso_max_segs 1");
    netns::ip("addr add 10.81.0.1/24 dev srea");
    netns::ip("link set srea up");
    netns::ip("link set sreb up");
    let dev = PacketDevice::open("sreb").unwrap();
    let kernel = SocketAddrV4::new(Ipv4Addr::new(10, 81, 0, 1), 7007);
    echo(dev, kernel, Ipv4Addr::new(10, 81, 0, 2), 16 << 20);
}

/// The stack at `ours` on `dev` sends `total` octets to the kernel's echo server at
/// `kernel` and checks every octet that comes back; both sides close.
fn echo<D: FrameDevice>(dev: D, kernel: SocketAddrV4, ours: Ipv4Addr, total: u64) {
    let listener = TcpListener::bind(kernel).unwrap();
    let echo = std::thread::spawn(move || kernel_echo(listener));
    let mut iface = Interface::new(dev, InterfaceConfig::new([Ipv4Cidr::new(ours, 24)])).unwrap();
    let cfg = StackConfig {
        tcp: Config {
            mss: 1460,
            send_buffer: 1 << 20,
            recv_buffer: 1 << 20,
            ..Config::default()
        },
        ..StackConfig::default()
    };
    let mut st = Stack::new(cfg, &[ours]);
    let start = Instant::now();
    let id = st
        .connect(start.elapsed(), None, kernel, RxMode::Stream)
        .unwrap();
    let (mut sent, mut got, mut shut, mut eof) = (0u64, 0u64, false, false);
    let mut tx_lost = 0u64;
    let mut chunk = vec![0u8; 64 << 10];
    let mut frame = vec![0u8; iface.frame_buffer_len()];
    let mut packet = vec![0u8; iface.mtu()];
    while !(eof && shut) {
        let now = start.elapsed();
        assert!(
            now < HANG_GUARD,
            "stuck: sent {sent}, got {got}, lost on send {tx_lost}, {:?}\n{:#?}\n{:#?}\n{:#?}",
            st.state(id),
            st.tcp_totals(),
            st.stats(),
            iface.stats()
        );
        iface.handle_timeout(now);
        if st.poll_timeout().is_some_and(|t| t <= now) {
            st.handle_timeout(now);
        }
        loop {
            match iface.receive(now, &mut frame).unwrap() {
                Ingress::Packet(p) => {
                    let _ = st.handle_packet(now, p.bytes(), &mut NoRaw);
                }
                Ingress::Yield => continue,
                Ingress::Drained => break,
            }
        }
        // The application: send what fits, read and check what came back.
        while sent < total && st.state(id).is_ok_and(|s| s != State::SynSent) {
            let n = chunk.len().min((total - sent) as usize);
            for (k, b) in chunk[..n].iter_mut().enumerate() {
                *b = octet(sent + k as u64);
            }
            match st.send(id, &chunk[..n]) {
                Ok(k) => sent += k as u64,
                Err(StackError::WouldBlock) => break,
                Err(e) => panic!("send: {e}"),
            }
        }
        if sent == total && !shut {
            st.shutdown(id).unwrap();
            shut = true;
        }
        loop {
            match st.read(id, &mut chunk) {
                Ok(0) => {
                    eof = true;
                    break;
                }
                Ok(k) => {
                    if let Some(i) = (0..k).find(|&i| chunk[i] != octet(got + i as u64)) {
                        panic!("octet {} came back as {:#x}", got + i as u64, chunk[i]);
                    }
                    got += k as u64;
                }
                Err(StackError::WouldBlock) => break,
                Err(e) => panic!("read: {e}"),
            }
        }
        while let Some(n) = st.poll_transmit(now, &mut packet) {
            // A busy device loses the packet; TCP sends it again.
            if iface.send(now, &packet[..n]).is_err() {
                tx_lost += 1;
            }
        }
        let next = [st.poll_timeout(), iface.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
            .map_or(Duration::from_millis(10), |t| {
                t.saturating_sub(start.elapsed())
            });
        wait_readable(iface.device(), Some(next.min(Duration::from_millis(10)))).unwrap();
    }
    assert_eq!(got, total, "every octet came back");
    st.close(id).unwrap();
    assert_eq!(
        echo.join().unwrap().unwrap(),
        total,
        "the kernel echoed it all"
    );
    let t = st.tcp_totals();
    eprintln!(
        "echo of {} MiB in {:?}: {} segments out, {} retransmitted, {} timeouts",
        total >> 20,
        start.elapsed(),
        t.segments_out,
        t.retransmitted_segments,
        t.timeouts
    );
}
