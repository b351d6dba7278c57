//! The siw rig as a peer over UDP-encapsulated Ethernet (`siw-vm.sh --net udp`): the
//! path softrnic's own TCP takes to Linux siw, with no privilege and no tap.
//!
//! The guest (Linux, 192.168.78.2) pings us at 192.168.78.1, so it has to resolve us
//! by ARP: the interface answers its requests and its echo requests. We ping it back
//! (resolving it by ARP), and a hand-built SYN to its rping port gets a SYN/ACK.
//!
//! Without a usable rig the test skips loudly; `SOFTRNIC_RIG=require` makes that a
//! failure, `SOFTRNIC_RIG=skip` skips on purpose. Each run writes `ran` or `skipped`
//! to the file `SOFTRNIC_INTEROP_LOG` names, as the CLI's interop tests do.

use etherparse::{PacketBuilder, TcpHeaderSlice};
use softrnic_netdev::iface::PROTO_TCP;
use softrnic_netdev::udp::UdpDevice;
use softrnic_netdev::{
    FrameDevice, Ingress, Interface, InterfaceConfig, Ipv4Cidr, MacAddr, wait_readable,
};
use softrnic_testkit::text;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const OUR_IP: Ipv4Addr = Ipv4Addr::new(192, 168, 78, 1);
const GUEST_IP: Ipv4Addr = Ipv4Addr::new(192, 168, 78, 2);
const GUEST_MAC: MacAddr = MacAddr([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]);
const OUR_MAC: MacAddr = MacAddr([0x02, 0x00, 0x00, 0x00, 0x00, 0x01]);
const RPING_PORT: u16 = 7174;
const OUR_PORT: u16 = 40000;
const OUR_ISN: u32 = 1000;
/// The guest runs under software emulation: a bound on the whole conversation that
/// is never reached when all is well.
const HANG_GUARD: Duration = Duration::from_secs(180);
/// How often an unanswered ping or SYN is sent again.
const RESEND: Duration = Duration::from_secs(1);
const NAME: &str = "netdev-udp";

/// How this test is named in the interop log.
const LOGGED_AS: &str = "siw_udp::netdev-udp";

fn skip(why: &str) {
    softrnic_testkit::skip_test_as("siw rig over UDP frames", why, LOGGED_AS);
}

/// The rig's directory once it is built, or why it cannot be.
fn built_rig() -> Result<PathBuf, String> {
    if softrnic_testkit::rig::skipped_on_purpose() {
        return Err("SOFTRNIC_RIG=skip".into());
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/rig");
    if !dir.join("siw-vm.sh").exists() {
        return Err(format!("no rig at {}", dir.display()));
    }
    match Command::new(dir.join("build-artifacts.sh")).output() {
        Ok(o) if o.status.success() => Ok(dir),
        Ok(o) => Err(format!("build-artifacts.sh failed: {}", text(&o))),
        Err(e) => Err(format!("build-artifacts.sh did not run: {e}")),
    }
}

/// Our socket on port P+1 where QEMU can take P (`siw-vm.sh --udp-port P`), bound
/// before the guest boots so that none of its frames are lost.
fn our_socket() -> (UdpSocket, u16) {
    for _ in 0..100 {
        let s = UdpSocket::bind("127.0.0.1:0").expect("a UDP port");
        let port = s.local_addr().unwrap().port();
        if port > 1024 && UdpSocket::bind(("127.0.0.1", port - 1)).is_ok() {
            return (s, port - 1);
        }
    }
    panic!("no pair of free UDP ports");
}

/// A guest booted by `siw-vm.sh serve`; stopped when dropped.
struct Guest {
    script: PathBuf,
    stopped: bool,
}

impl Guest {
    fn stop(mut self) -> String {
        self.stopped = true;
        let o = Command::new(&self.script)
            .args(["stop", "--name", NAME])
            .output()
            .expect("siw-vm.sh stop runs");
        text(&o)
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        if !self.stopped {
            let _ = Command::new(&self.script)
                .args(["stop", "--name", NAME])
                .output();
        }
    }
}

fn tcp(flags: &str, seq: u32, ack: u32) -> Vec<u8> {
    let b = PacketBuilder::ipv4(OUR_IP.octets(), GUEST_IP.octets(), 64)
        .tcp(OUR_PORT, RPING_PORT, seq, 65535);
    let b = match flags {
        "syn" => b.syn(),
        "rst" => b.rst().ack(ack),
        other => panic!("{other}"),
    };
    let mut v = Vec::new();
    b.write(&mut v, &[]).unwrap();
    v
}

#[test]
fn siw_guest_resolves_and_pings_us_and_answers_ping_and_syn_over_udp_frames() {
    let dir = match built_rig() {
        Ok(d) => d,
        Err(why) => return skip(&why),
    };
    softrnic_testkit::record_as("ran", LOGGED_AS);
    let _lock = softrnic_testkit::rig::lock_guest();
    let (socket, qemu_port) = our_socket();
    let qemu: SocketAddr = ([127, 0, 0, 1], qemu_port).into();
    let dev = UdpDevice::from_socket(socket, qemu, OUR_MAC).unwrap();
    let mut iface = Interface::new(dev, InterfaceConfig::new([Ipv4Cidr::new(OUR_IP, 24)])).unwrap();

    // The guest pings us (so it must resolve us) while rping listens.
    let cmd = "ping -c 3 -w 120 $HOST_IP & rping -s -a $GUEST_IP -v -C 1";
    let script = dir.join("siw-vm.sh");
    let o = Command::new(&script)
        .args(["serve", cmd, "--net", "udp", "--name", NAME])
        .args(["--udp-port", &qemu_port.to_string()])
        .args(["--port", &RPING_PORT.to_string()])
        .output()
        .expect("siw-vm.sh serve runs");
    let out = text(&o);
    assert!(
        o.status.success() && out.contains("READY"),
        "siw guest did not come up:\n{out}"
    );
    let guest = Guest {
        script,
        stopped: false,
    };

    let start = Instant::now();
    let data = b"softrnic netdev -> siw guest".to_vec();
    let mut buf = vec![0u8; iface.frame_buffer_len()];
    let (mut pinged_at, mut syn_at) = (None::<Duration>, None::<Duration>);
    let (mut ping_seq, mut echo_ok, mut synack) = (0u16, false, None);
    loop {
        let now = start.elapsed();
        assert!(
            now < HANG_GUARD,
            "no progress: echo reply {echo_ok}, SYN/ACK {synack:?}, {:#?}",
            iface.stats()
        );
        iface.handle_timeout(now);
        if !echo_ok && pinged_at.is_none_or(|t| now >= t + RESEND) {
            ping_seq += 1;
            iface
                .send_ping(now, GUEST_IP, 0x5157, ping_seq, &data)
                .unwrap();
            pinged_at = Some(now);
        }
        if echo_ok && synack.is_none() && syn_at.is_none_or(|t| now >= t + RESEND) {
            iface.send(now, &tcp("syn", OUR_ISN, 0)).unwrap();
            syn_at = Some(now);
        }
        let answered_guest = iface.stats().icmp_echo_requests >= 3;
        if echo_ok && synack.is_some() && answered_guest {
            break;
        }
        loop {
            match iface.receive(now, &mut buf).unwrap() {
                Ingress::Drained => break,
                Ingress::Yield => continue,
                Ingress::Packet(p) if p.protocol() == PROTO_TCP => {
                    assert_eq!(p.src(), GUEST_IP);
                    let t = TcpHeaderSlice::from_slice(p.payload()).unwrap();
                    if (t.source_port(), t.destination_port()) == (RPING_PORT, OUR_PORT)
                        && t.syn()
                        && t.ack()
                    {
                        synack = Some((t.acknowledgment_number(), t.sequence_number()));
                    }
                }
                Ingress::Packet(p) => {
                    let icmp = etherparse::Icmpv4Slice::from_slice(p.payload()).unwrap();
                    if let etherparse::Icmpv4Type::EchoReply(e) = icmp.icmp_type() {
                        assert_eq!(p.src(), GUEST_IP);
                        assert_eq!(e.id, 0x5157);
                        assert_eq!(icmp.payload(), &data[..]);
                        echo_ok = true;
                    }
                }
            }
        }
        // Wake for a frame, a timer of the interface, or the next resend.
        let next = iface
            .poll_timeout()
            .map_or(RESEND, |t| t.saturating_sub(now).min(RESEND));
        wait_readable(iface.device(), Some(next)).unwrap();
    }
    let (ack, guest_isn) = synack.unwrap();
    assert_eq!(ack, OUR_ISN + 1, "the SYN/ACK acknowledges our SYN");
    // Tidy: reset the half-open connection.
    iface
        .send(
            start.elapsed(),
            &tcp("rst", OUR_ISN + 1, guest_isn.wrapping_add(1)),
        )
        .unwrap();

    let s = iface.stats().clone();
    let guest_out = guest.stop();
    eprintln!("interface: {s:?}\nguest:\n{guest_out}");
    assert_eq!(iface.neighbor(GUEST_IP, start.elapsed()), Some(GUEST_MAC));
    assert!(
        s.arp_requests_answered >= 1,
        "the guest resolved us by ARP: {s:#?}"
    );
    assert!(s.arp_replies >= 1, "we resolved the guest: {s:#?}");
    assert_eq!(s.frames_accounted(), s.rx_frames);
    assert_eq!(
        s.ipv4_bad_checksum + s.icmp_malformed + s.ipv4_malformed,
        0,
        "{s:#?}"
    );
    assert!(
        guest_out.contains(", 3 packets received"),
        "the guest's ping got its 3 replies:\n{guest_out}"
    );
    assert_eq!(iface.device().mac(), OUR_MAC);
}
