//! The timers and buffers a device's own TCP gets on a [`SimNet`] ([`tcp_for`]), driven
//! in virtual time the way the stack threads drive them: a stalled thread takes nothing
//! until it runs again, then every packet that waited, then its timers, then it sends.

use super::{SIM_RTO_MIN, SimNet, UserLink, tcp_for};
use softrnic_tcp::{Connection, Reassembly, Refuse, SeqNum, State};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

const US: Duration = Duration::from_micros(1);
const MS: Duration = Duration::from_millis(1);

/// Two connections with the simulated network's settings, 10 us apart.
struct Pair {
    a: Connection,
    b: Connection,
    rb: Reassembly,
    now: Duration,
    /// (arrival, to b?, packet), in arrival order.
    queue: Vec<(Duration, bool, Vec<u8>)>,
    a_stalled_until: Duration,
    b_stalled_until: Duration,
    /// Packets from a are lost while this holds.
    a_cut: bool,
    /// When a sent each data segment (for the timeouts' spacing).
    a_data_sent: Vec<Duration>,
    got: usize,
    buf: Vec<u8>,
}

impl Pair {
    fn new() -> Pair {
        let cfg = tcp_for(&UserLink::Sim(SimNet::default()));
        let a_addr = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 1000);
        let b_addr = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 2000);
        let a = Connection::connect(cfg.clone(), a_addr, b_addr, SeqNum(1));
        let b = Connection::listen(cfg, b_addr, SeqNum(9));
        let rb = Reassembly::for_connection(&b);
        let mut p = Pair {
            a,
            b,
            rb,
            now: Duration::ZERO,
            queue: Vec::new(),
            a_stalled_until: Duration::ZERO,
            b_stalled_until: Duration::ZERO,
            a_cut: false,
            a_data_sent: Vec::new(),
            got: 0,
            buf: vec![0; 65535],
        };
        p.run_until(|p| p.a.state() == State::Established && p.b.state() == State::Established);
        p
    }

    fn send_from(&mut self, from_a: bool) {
        loop {
            let c = if from_a { &mut self.a } else { &mut self.b };
            let Some(n) = c.poll_transmit(self.now, &mut self.buf) else {
                return;
            };
            if from_a && n > 60 {
                self.a_data_sent.push(self.now);
            }
            if from_a && self.a_cut {
                continue;
            }
            let at = self.now + 10 * US;
            let i = self.queue.partition_point(|(t, _, _)| *t <= at);
            self.queue.insert(i, (at, from_a, self.buf[..n].to_vec()));
        }
    }

    /// One turn of an end's stack thread: what arrived, then its timers, then it sends.
    fn turn(&mut self, is_a: bool) {
        let now = self.now;
        while let Some(i) = self
            .queue
            .iter()
            .position(|(t, to_b, _)| *t <= now && *to_b != is_a)
        {
            let (_, _, p) = self.queue.remove(i);
            if is_a {
                let _ = self.a.handle_packet(now, &p, &mut Refuse);
            } else {
                let _ = self.b.handle_packet(now, &p, &mut self.rb);
            }
        }
        if !is_a {
            let mut out = vec![0u8; 1 << 20];
            loop {
                match self.rb.read_from(&mut self.b, &mut out) {
                    0 => break,
                    n => self.got += n,
                }
            }
        }
        let c = if is_a { &mut self.a } else { &mut self.b };
        if c.poll_timeout().is_some_and(|t| t <= now) {
            c.handle_timeout(now);
        }
        self.send_from(is_a);
    }

    fn run_until(&mut self, done: impl Fn(&Pair) -> bool) {
        let limit = self.now + Duration::from_secs(30);
        while !done(self) {
            assert!(self.now < limit, "not done: {:?}", self.a.stats());
            if self.now >= self.a_stalled_until {
                self.turn(true);
            }
            if self.now >= self.b_stalled_until {
                self.turn(false);
            }
            let next_of = |is_a: bool, c: &Connection, until: Duration| {
                [
                    c.poll_timeout(),
                    self.queue.iter().find(|q| q.1 != is_a).map(|q| q.0),
                ]
                .into_iter()
                .flatten()
                .min()
                .map(|t| t.max(until))
            };
            let next = [
                next_of(true, &self.a, self.a_stalled_until),
                next_of(false, &self.b, self.b_stalled_until),
            ]
            .into_iter()
            .flatten()
            .min();
            if done(self) {
                return;
            }
            self.now = self.now.max(next.expect("something is due"));
        }
    }

    /// Queues `len` octets at a and lets them out.
    fn send(&mut self, len: usize) {
        let data = vec![0x5a; len];
        let mut off = 0;
        while off < len {
            off += self.a.send(&data[off..]).expect("room in the send buffer");
        }
        self.send_from(true);
    }
}

#[test]
fn a_receiver_off_the_cpu_for_40_ms_causes_no_timeout() {
    let mut p = Pair::new();
    p.send(1 << 20);
    p.run_until(|p| p.got == 1 << 20 && p.a.unacknowledged() == 0);
    // A window's worth goes out, and b's thread is off the CPU for 40 ms (packets
    // waited that long on a busy 2-vCPU machine): nothing is lost.
    p.send(3 << 20);
    p.b_stalled_until = p.now + 40 * MS;
    p.run_until(|p| p.got == 4 << 20 && p.a.unacknowledged() == 0);
    let s = p.a.stats();
    assert_eq!(s.timeouts, 0, "{s:?}");
    assert_eq!(s.fast_retransmits, 0, "{s:?}");
}

#[test]
fn a_tail_lost_with_its_probes_is_repaired_by_the_timer_with_backoff() {
    let mut p = Pair::new();
    p.send(1 << 20);
    p.run_until(|p| p.got == 1 << 20 && p.a.unacknowledged() == 0);
    // Everything a sends is lost: the tail, its loss probes and the first two
    // timeouts' retransmissions; then the link heals.
    p.a_cut = true;
    p.send(256 << 10);
    let first = p.a_data_sent.len();
    p.run_until(|p| p.a.stats().timeouts == 2);
    p.a_cut = false;
    p.run_until(|p| p.got == (1 << 20) + (256 << 10) && p.a.unacknowledged() == 0);
    let s = p.a.stats();
    assert_eq!(s.timeouts, 3, "{s:?}");
    assert_eq!(s.spurious_timeouts, 0, "{s:?}");
    assert_eq!(s.loss_probes, 3, "{s:?}");
    // The sendings after the tail: three probes, spread over less than the floor
    // (the later ones wait an eighth and a quarter of it, to outlast a stalled
    // thread), then one retransmission per timeout, the first at least the floor
    // after the last probe, each next one twice as long.
    let resent: Vec<Duration> = p.a_data_sent[first..].to_vec();
    assert!(resent.len() >= 6, "{resent:?}");
    assert!(resent[1] - resent[0] >= SIM_RTO_MIN / 8, "{resent:?}");
    assert!(resent[2] - resent[0] < SIM_RTO_MIN, "{resent:?}");
    assert!(resent[3] - resent[2] >= SIM_RTO_MIN, "{resent:?}");
    assert!(resent[4] - resent[3] >= 2 * SIM_RTO_MIN, "{resent:?}");
    assert!(resent[5] - resent[4] >= 4 * SIM_RTO_MIN, "{resent:?}");
}

/// Octets of one paced write: an FPDU of a segment's size.
const WRITE: usize = 65_000;

/// How long the sender takes to write [`WRITE`] octets at softrnic's memory speed on
/// this machine (about 6.5 GB/s).
const WRITE_TIME: Duration = Duration::from_nanos(10_000);

#[test]
fn a_hole_open_while_the_receiver_is_off_the_cpu_for_1_ms_does_not_stop_the_sender() {
    let mut p = Pair::new();
    p.send(1 << 20);
    p.run_until(|p| p.got == 1 << 20 && p.a.unacknowledged() == 0);
    let data = vec![0x5a; WRITE];
    let start = p.got;
    let mut queued = 0;
    let mut refused = 0;
    for step in 0..400 {
        match p.a.send(&data) {
            Ok(n) if n == WRITE => {}
            Ok(n) => refused += WRITE - n,
            Err(_) => refused += WRITE,
        }
        queued += WRITE;
        p.send_from(true);
        if step == 10 {
            // The segment just sent is held back 200 us (a reordered packet, or a
            // loss repaired about as late), and the receiver's thread is off the
            // CPU for 1 ms meanwhile (stalls of milliseconds are seen on 2 vCPUs).
            let last = p.queue.iter().rposition(|q| q.1).expect("a data segment");
            let (at, to_b, pkt) = p.queue.remove(last);
            let later = at + 200 * US;
            let i = p.queue.partition_point(|(t, _, _)| *t <= later);
            p.queue.insert(i, (later, to_b, pkt));
            p.b_stalled_until = p.now + MS;
        }
        let until = p.now + WRITE_TIME;
        while p.now < until {
            if p.now >= p.a_stalled_until {
                p.turn(true);
            }
            if p.now >= p.b_stalled_until {
                p.turn(false);
            }
            let next = p.queue.iter().map(|q| q.0).filter(|t| *t > p.now).min();
            p.now = next.map_or(until, |t| t.min(until));
        }
    }
    let total = start + queued - refused;
    p.run_until(|p| p.got == total && p.a.unacknowledged() == 0);
    let s = p.a.stats();
    // The send buffer and the window cover what the sender writes over the stall and
    // the hole: no write is refused (with 4 MiB, 2.5 MB were).
    assert_eq!(refused, 0, "{s:?}");
    assert_eq!(s.sndbuf_limited_us, 0, "{s:?}");
    assert_eq!(s.timeouts, 0, "{s:?}");
}
