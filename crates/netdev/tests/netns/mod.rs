//! Tests that need a network of their own: each runs one `#[ignore]`d test of its
//! binary again in a new network namespace (`unshare -n` as root, else `unshare -rn`),
//! where it may create interfaces without touching the host's. Where no namespace can
//! be made the test skips loudly.
//!
//! Inside, the kernel is the peer: it pings an address the interface owns and
//! connects a TCP socket to it, and the interface must answer ARP, answer the pings,
//! and hand the SYN up (the test answers it with a RST, which the kernel's connect
//! reports as refused).

#![allow(dead_code)]

pub use softrnic_testkit::netns::{in_child, ip, run_in_netns};

use softrnic_netdev::iface::PROTO_TCP;
use softrnic_netdev::{FrameDevice, Ingress, Interface, wait_readable};
use softrnic_testkit::text;
use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A bound on each exchange with the kernel, never reached when all is well.
const HANG_GUARD: Duration = Duration::from_secs(60);
/// How often the pump looks at a child process it waits for.
const CHECK_EVERY: Duration = Duration::from_millis(50);

/// Drives `iface` until `done` says so, handing each packet that comes up to
/// `on_packet`. Time starts at zero with the call.
fn pump<D: FrameDevice>(
    iface: &mut Interface<D>,
    mut on_packet: impl FnMut(&mut Interface<D>, Duration, Vec<u8>),
    mut done: impl FnMut() -> bool,
) {
    let start = Instant::now();
    let mut buf = vec![0u8; iface.frame_buffer_len()];
    loop {
        let now = start.elapsed();
        assert!(now < HANG_GUARD, "no end in sight: {:#?}", iface.stats());
        iface.handle_timeout(now);
        loop {
            match iface.receive(now, &mut buf).unwrap() {
                Ingress::Drained => break,
                Ingress::Yield => continue,
                Ingress::Packet(p) => {
                    let bytes = p.bytes().to_vec();
                    on_packet(iface, now, bytes);
                }
            }
        }
        if done() {
            return;
        }
        wait_readable(iface.device(), Some(CHECK_EVERY)).unwrap();
    }
}

/// True when there is a `ping` program; else a loud skip of `what`.
pub fn have_ping(what: &str) -> bool {
    let ok = Command::new("ping").arg("-V").output().is_ok();
    if !ok {
        softrnic_testkit::skip_as(
            what,
            "no `ping` program (Debian package iputils-ping)",
            what,
        );
    }
    ok
}

/// Runs `ping ARGS` while driving `iface`; its success and output.
pub fn run_ping<D: FrameDevice>(iface: &mut Interface<D>, args: &str) -> (bool, String) {
    let mut child = Command::new("ping")
        .args(args.split_whitespace())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ping starts");
    let mut status = None;
    pump(
        iface,
        |_, _, p| panic!("nothing is handed up while the kernel pings: {p:?}"),
        || {
            status = child.try_wait().unwrap();
            status.is_some()
        },
    );
    let out = text(&child.wait_with_output().unwrap());
    (status.unwrap().success(), out)
}

/// The kernel pings `addr` (owned by `iface`) three times and gets three replies.
/// Skips (loudly) when there is no `ping` program.
/// Returns whether it ran (false, loudly skipped, without `ping`).
pub fn kernel_pings<D: FrameDevice>(iface: &mut Interface<D>, addr: Ipv4Addr) -> bool {
    if !have_ping("kernel_pings") {
        return false;
    }
    let before = iface.stats().icmp_echo_requests;
    let (ok, out) = run_ping(iface, &format!("-n -c 3 -i 0.2 -w 30 {addr}"));
    assert!(ok, "ping failed:\n{out}");
    assert!(out.contains("3 received"), "{out}");
    let s = iface.stats();
    assert!(
        s.arp_requests_answered >= 1,
        "the kernel resolved us: {s:#?}"
    );
    // With a deadline (-w), ping goes on sending every 0.2 s until three replies are
    // in: a pump descheduled for longer makes it send a fourth. Each reply answered a
    // request we counted, and we counted no request ping did not send.
    let transmitted = transmitted(&out);
    let answered = s.icmp_echo_requests - before;
    assert!(
        (3..=transmitted).contains(&answered),
        "{answered} requests seen of {transmitted} sent: {s:#?}\n{out}"
    );
    assert_eq!(s.frames_accounted(), s.rx_frames);
    true
}

/// The number in ping's summary "N packets transmitted".
fn transmitted(out: &str) -> u64 {
    out.split(" packets transmitted")
        .next()
        .and_then(|head| head.rsplit(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no 'packets transmitted' in ping's output:\n{out}"))
}

/// The kernel connects a TCP socket to `addr:port`; the interface hands the SYN up
/// and the test answers with a RST, so the kernel's connect is refused.
pub fn kernel_connects<D: FrameDevice>(iface: &mut Interface<D>, addr: Ipv4Addr, port: u16) {
    let to = SocketAddr::from((addr, port));
    let connect = std::thread::spawn(move || TcpStream::connect_timeout(&to, HANG_GUARD));
    let mut syn = None;
    pump(
        iface,
        |iface, now, p| {
            assert_eq!(p[9], PROTO_TCP, "{p:?}");
            let ip = etherparse::Ipv4HeaderSlice::from_slice(&p).unwrap();
            let tcp = etherparse::TcpHeaderSlice::from_slice(&p[ip.slice().len()..]).unwrap();
            assert_eq!(ip.destination_addr(), addr);
            assert_eq!(tcp.destination_port(), port);
            assert!(tcp.syn() && !tcp.ack(), "a SYN: {tcp:?}");
            if syn.is_none() {
                syn = Some((ip.source_addr(), tcp.source_port(), tcp.sequence_number()));
                // RST+ACK, as a host with no listener answers.
                let (src, sport, seq) = syn.unwrap();
                let b = etherparse::PacketBuilder::ipv4(addr.octets(), src.octets(), 64)
                    .tcp(port, sport, 0, 0)
                    .rst()
                    .ack(seq.wrapping_add(1));
                let mut rst = Vec::new();
                b.write(&mut rst, &[]).unwrap();
                iface.send(now, &rst).unwrap();
            }
        },
        || connect.is_finished(),
    );
    let result = connect.join().unwrap();
    assert!(syn.is_some(), "a SYN came up");
    let e = result.expect_err("the connect was refused");
    assert_eq!(e.kind(), ErrorKind::ConnectionRefused, "{e}");
    assert!(iface.stats().delivered >= 1);
}
