//! Our TCP against Linux's, over a TAP device in a network namespace the test makes:
//! softrnic-netdev's interface answers ARP and carries the IPv4 packets; a plain
//! kernel socket is the peer. Both roles: we connect to a kernel echo server, and a
//! kernel client connects to our echo. Every echoed octet is checked, and both ends
//! close with FIN; and once more with packets dropped both ways at our end (seeded),
//! so that each side recovers from the other's SACKs. `SOFTRNIC_TCP_ECHO_MB` sets the
//! volume (8 MB by default); `SOFTRNIC_TCP_PCAP=file` records what our end sends and
//! receives (before its drops), for tshark.

mod common;
mod netns;

use common::pattern;
use softrnic_netdev::tap::TapDevice;
use softrnic_netdev::{Ingress, Interface, InterfaceConfig, Ipv4Cidr, MacAddr, SendError};
use softrnic_tcp::sim::{PcapSink, Rng};
use softrnic_tcp::{Config, Connection, Event, Reassembly, SeqNum, State, initial_sequence};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddrV4, TcpListener, TcpStream};
use std::time::{Duration, Instant};

const MAC: MacAddr = MacAddr([0x02, 0x5c, 0, 0, 0, 2]);
const KERNEL: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 1);
const OURS: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 2);
/// A bound on the whole exchange, far beyond what it takes.
const HANG_GUARD: Duration = Duration::from_secs(600);

fn volume() -> usize {
    std::env::var("SOFTRNIC_TCP_ECHO_MB")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8)
        * 1_000_000
}

fn config() -> Config {
    Config {
        send_buffer: 1 << 20,
        recv_buffer: 1 << 20,
        // TIME-WAIT is not what this test waits for.
        msl: Duration::from_millis(50),
        ..Config::default()
    }
}

/// A TAP link to the kernel (which has 10.78.0.1), with us at 10.78.0.2.
fn tap() -> Interface<TapDevice> {
    let dev = TapDevice::open("srtcp0", MAC).expect("tap device");
    netns::ip(&format!("addr add {KERNEL}/24 dev srtcp0"));
    netns::ip("link set srtcp0 up");
    Interface::new(dev, InterfaceConfig::new([Ipv4Cidr::new(OURS, 24)])).unwrap()
}

/// One connection of ours on the interface, driven in real time.
struct Stack {
    iface: Interface<TapDevice>,
    conn: Connection,
    rx: Reassembly,
    frame: Vec<u8>,
    out: Vec<u8>,
    /// A packet the device was too busy to take, sent again first.
    held: Option<Vec<u8>>,
    start: Instant,
    events: Vec<Event>,
    /// Drops packets both ways with this probability (seeded): (rng, p, dropped).
    loss: Option<(Rng, f64, u64)>,
    /// The capture `SOFTRNIC_TCP_PCAP` asks for.
    pcap: Option<PcapSink>,
}

impl Stack {
    fn new(iface: Interface<TapDevice>, conn: Connection) -> Stack {
        Stack {
            frame: vec![0; iface.frame_buffer_len()],
            out: vec![0; iface.mtu()],
            rx: Reassembly::for_connection(&conn),
            iface,
            conn,
            held: None,
            start: Instant::now(),
            events: Vec::new(),
            loss: None,
            pcap: std::env::var("SOFTRNIC_TCP_PCAP")
                .ok()
                .map(|p| PcapSink::new(Box::new(std::fs::File::create(p).unwrap())).unwrap()),
        }
    }

    fn now(&self) -> Duration {
        self.start.elapsed()
    }

    /// Timers, then every frame that waits, then what the connection has to send.
    fn turn(&mut self) {
        let now = self.now();
        assert!(now < HANG_GUARD, "no end in sight: {:?}", self.conn.state());
        self.iface.handle_timeout(now);
        if self.conn.poll_timeout().is_some_and(|t| t <= now) {
            self.conn.handle_timeout(now);
        }
        loop {
            match self.iface.receive(now, &mut self.frame).unwrap() {
                Ingress::Packet(p) => {
                    if let Some(c) = &mut self.pcap {
                        c.write(now, p.bytes());
                    }
                    if !drop_one(&mut self.loss) {
                        let _ = self.conn.handle_packet(now, p.bytes(), &mut self.rx);
                    }
                }
                Ingress::Yield => continue,
                Ingress::Drained => break,
            }
        }
        self.flush();
        while let Some(e) = self.conn.poll_event() {
            self.events.push(e);
        }
    }

    fn flush(&mut self) {
        let now = self.now();
        if let Some(p) = self.held.take() {
            match self.iface.send(now, &p) {
                Err(SendError::DeviceBusy) => return self.held = Some(p),
                r => {
                    r.unwrap();
                }
            }
        }
        while let Some(n) = self.conn.poll_transmit(now, &mut self.out) {
            if drop_one(&mut self.loss) {
                continue;
            }
            if let Some(c) = &mut self.pcap {
                c.write(now, &self.out[..n]);
            }
            match self.iface.send(now, &self.out[..n]) {
                Err(SendError::DeviceBusy) => return self.held = Some(self.out[..n].to_vec()),
                r => {
                    r.unwrap();
                }
            }
        }
    }

    /// Waits for a frame, at most until the next timer (and at most 5 ms, so a held
    /// packet is tried again soon).
    fn wait(&self) {
        let now = self.now();
        let next = [self.conn.poll_timeout(), self.iface.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
            .map_or(Duration::from_millis(5), |t| t.saturating_sub(now))
            .min(Duration::from_millis(5));
        softrnic_netdev::wait_readable(self.iface.device(), Some(next)).unwrap();
    }
}

/// Whether the next packet (either way) is dropped.
fn drop_one(loss: &mut Option<(Rng, f64, u64)>) -> bool {
    let Some((rng, p, n)) = loss else {
        return false;
    };
    let drop = rng.chance(*p);
    *n += u64::from(drop);
    drop
}

fn report(what: &str, s: &Stack, bytes: usize) {
    let secs = s.now().as_secs_f64();
    let st = s.conn.stats();
    println!(
        "echo: {what}: {} MB each way in {secs:.2} s ({:.1} MB/s); retransmitted {} segments, {} timeouts, {} fast retransmits",
        bytes / 1_000_000,
        bytes as f64 / secs / 1e6,
        st.retransmitted_segments,
        st.timeouts,
        st.fast_retransmits
    );
}

#[test]
fn echo_through_a_linux_server() {
    netns::run_in_netns(
        "echo_through_a_linux_server",
        "we_connect_to_a_kernel_echo_server",
    );
}

#[test]
#[ignore = "changes the network: run by echo_through_a_linux_server in a namespace"]
fn we_connect_to_a_kernel_echo_server() {
    assert!(netns::in_child(), "run through echo_through_a_linux_server");
    connect_and_echo(None);
}

#[test]
fn echo_through_a_linux_server_with_loss() {
    netns::run_in_netns(
        "echo_through_a_linux_server_with_loss",
        "we_connect_to_a_kernel_echo_server_with_loss",
    );
}

#[test]
#[ignore = "changes the network: run by echo_through_a_linux_server_with_loss in a namespace"]
fn we_connect_to_a_kernel_echo_server_with_loss() {
    assert!(
        netns::in_child(),
        "run through echo_through_a_linux_server_with_loss"
    );
    connect_and_echo(Some(0.01));
}

/// We connect to a kernel echo server and check every octet that comes back;
/// `loss` drops that share of packets both ways.
fn connect_and_echo(loss: Option<f64>) {
    let iface = tap();
    let server = TcpListener::bind((KERNEL, 7000)).unwrap();
    let echo = std::thread::spawn(move || {
        let (mut s, _) = server.accept().unwrap();
        let mut buf = vec![0u8; 1 << 16];
        let mut n = 0usize;
        loop {
            let k = s.read(&mut buf).unwrap();
            if k == 0 {
                break;
            }
            s.write_all(&buf[..k]).unwrap();
            n += k;
        }
        s.shutdown(Shutdown::Write).unwrap();
        n
    });
    let local = SocketAddrV4::new(OURS, 40_000);
    let remote = SocketAddrV4::new(KERNEL, 7000);
    let iss = initial_sequence(0x5eed, local, remote, Duration::from_nanos(12345));
    let mut s = Stack::new(iface, Connection::connect(config(), local, remote, iss));
    s.loss = loss.map(|p| (Rng::new(7), p, 0));
    let total = volume();
    let data = pattern(total, 77);
    let (mut sent, mut got) = (0, 0);
    let mut tmp = vec![0u8; 1 << 16];
    loop {
        s.turn();
        while sent < total {
            match s.conn.send(&data[sent..(sent + (1 << 16)).min(total)]) {
                Ok(n) => sent += n,
                Err(_) => break,
            }
        }
        if sent == total && s.conn.state() == State::Established {
            s.conn.close();
        }
        loop {
            let n = s.rx.read_from(&mut s.conn, &mut tmp);
            if n == 0 {
                break;
            }
            assert!(
                tmp[..n] == data[got..got + n],
                "echo differs near octet {got}"
            );
            got += n;
        }
        s.flush();
        if s.conn.state() == State::Closed {
            break;
        }
        s.wait();
    }
    report("we connect", &s, total);
    assert_eq!(got, total);
    assert_eq!(echo.join().unwrap(), total);
    assert_eq!(
        s.events,
        [Event::Established, Event::PeerClosed, Event::Closed]
    );
    assert_eq!(s.conn.stats().dropped_checksum, 0);
}

#[test]
fn echo_for_a_linux_client() {
    netns::run_in_netns(
        "echo_for_a_linux_client",
        "a_kernel_client_connects_to_our_echo",
    );
}

#[test]
#[ignore = "changes the network: run by echo_for_a_linux_client in a namespace"]
fn a_kernel_client_connects_to_our_echo() {
    assert!(netns::in_child(), "run through echo_for_a_linux_client");
    let iface = tap();
    let local = SocketAddrV4::new(OURS, 7001);
    let mut s = Stack::new(
        iface,
        Connection::listen(config(), local, SeqNum(0xdead_0000)),
    );
    let total = volume();
    let client = std::thread::spawn(move || {
        let mut c = TcpStream::connect((OURS, 7001)).unwrap();
        let mut w = c.try_clone().unwrap();
        let writer = std::thread::spawn(move || {
            let data = pattern(total, 78);
            w.write_all(&data).unwrap();
            w.shutdown(Shutdown::Write).unwrap();
        });
        let data = pattern(total, 78);
        let mut got = 0usize;
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let k = c.read(&mut buf).unwrap();
            if k == 0 {
                break;
            }
            assert!(
                buf[..k] == data[got..got + k],
                "echo differs near octet {got}"
            );
            got += k;
        }
        writer.join().unwrap();
        got
    });
    let mut tmp = vec![0u8; 1 << 16];
    let mut echoed = 0usize;
    loop {
        s.turn();
        // Echo what arrived, as far as the send buffer takes it.
        loop {
            let room = s.conn.send_capacity().min(tmp.len());
            if room == 0 {
                break;
            }
            let n = s.rx.read_from(&mut s.conn, &mut tmp[..room]);
            if n == 0 {
                break;
            }
            assert_eq!(s.conn.send(&tmp[..n]), Ok(n));
            echoed += n;
        }
        if s.conn.state() == State::CloseWait && s.rx.readable() == 0 {
            s.conn.close();
        }
        s.flush();
        if s.conn.state() == State::Closed {
            break;
        }
        s.wait();
    }
    report("the kernel connects", &s, total);
    assert_eq!(echoed, total);
    assert_eq!(client.join().unwrap(), total);
    assert_eq!(
        s.events,
        [Event::Established, Event::PeerClosed, Event::Closed]
    );
}
