//! The harness for connection tests: two connections (a connects, b listens) joined by
//! an in-memory link with a fixed one-way delay and virtual time, each with a
//! [`Reassembly`] its application reads from. A test may filter what crosses (drop,
//! delay or rewrite a packet) and reads the log of every segment sent. No sockets, no
//! threads, no sleeps: every run replays exactly.

#![allow(dead_code)]

use softrnic_tcp::sim::{End, Impairments, Wire};
use softrnic_tcp::{
    Config, Connection, Event, Flags, Reassembly, SackBlock, Segment, SeqNum, State,
};
use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

pub const MS: Duration = Duration::from_millis(1);

pub fn addr_a() -> SocketAddrV4 {
    SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 40000)
}

pub fn addr_b() -> SocketAddrV4 {
    SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 7)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    A,
    B,
}

/// What a filter does with a packet.
pub enum Verdict {
    Pass,
    Drop,
    /// Deliver it this much later than the link delay.
    Delay(Duration),
    /// Deliver these octets instead.
    Replace(Vec<u8>),
}

/// A segment as logged (owned).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logged {
    pub at: Duration,
    pub from: Side,
    pub seq: SeqNum,
    pub ack: SeqNum,
    pub flags: Flags,
    pub len: usize,
    pub window: u16,
    pub sack: Vec<SackBlock>,
    pub mss: Option<u16>,
    pub wscale: Option<u8>,
    pub sack_permitted: bool,
    pub payload: Vec<u8>,
}

pub struct Peer {
    pub conn: Connection,
    pub rx: Reassembly,
    /// Everything the application read, in order.
    pub got: Vec<u8>,
    pub events: Vec<Event>,
    /// What the application still wants to send (queued as the buffer allows).
    pub outbox: VecDeque<u8>,
    /// Close once the outbox is queued.
    pub close_when_sent: bool,
    /// The application reads (and releases) what arrives.
    pub reading: bool,
    /// Every state the connection passed through.
    pub states: Vec<State>,
}

impl Peer {
    fn new(conn: Connection) -> Peer {
        let rx = Reassembly::for_connection(&conn);
        let state = conn.state();
        Peer {
            conn,
            rx,
            got: Vec::new(),
            events: Vec::new(),
            outbox: VecDeque::new(),
            close_when_sent: false,
            reading: true,
            states: vec![state],
        }
    }

    fn app(&mut self) {
        while !self.outbox.is_empty() {
            let (head, _) = self.outbox.as_slices();
            match self.conn.send(head) {
                Ok(n) if n > 0 => {
                    self.outbox.drain(..n);
                }
                _ => break,
            }
        }
        // (A listening connection closed would stop listening: wait for the peer.)
        if self.close_when_sent && self.outbox.is_empty() && self.conn.state() != State::Listen {
            self.close_when_sent = false;
            self.conn.close();
        }
        if self.reading {
            let mut buf = [0u8; 4096];
            loop {
                let n = self.rx.read_from(&mut self.conn, &mut buf);
                if n == 0 {
                    break;
                }
                self.got.extend_from_slice(&buf[..n]);
            }
        }
        while let Some(e) = self.conn.poll_event() {
            self.events.push(e);
        }
        self.note_state();
    }

    fn note_state(&mut self) {
        while let Some(e) = self.conn.poll_event() {
            self.events.push(e);
        }
        let s = self.conn.state();
        if self.states.last() != Some(&s) {
            self.states.push(s);
        }
    }
}

pub type Filter = Box<dyn FnMut(Side, &Segment<'_>) -> Verdict>;

pub struct Net {
    pub a: Peer,
    pub b: Peer,
    pub now: Duration,
    pub delay: Duration,
    pub mtu: usize,
    /// Packets on the fixed-delay link: (arrival, to, octets), in arrival order.
    queue: Vec<(Duration, Side, Vec<u8>)>,
    pub filter: Option<Filter>,
    pub log: Vec<Logged>,
    /// Keep [`Net::log`] (off for the many-seed runs).
    pub logging: bool,
    /// When set, what passes the filter crosses this simulated wire instead of the
    /// fixed-delay link (A is a, B is b).
    pub wire: Option<Wire>,
    buf: Vec<u8>,
}

/// A test configuration: small buffers, fast timers, so transfers take few steps.
pub fn cfg() -> Config {
    Config {
        mss: 1000,
        send_buffer: 16 * 1024,
        recv_buffer: 16 * 1024,
        rto_initial: 100 * MS,
        // Above the delayed-ACK time (40 ms), as the default 200 ms is.
        rto_min: 50 * MS,
        rto_max: 10_000 * MS,
        msl: 500 * MS,
        ..Config::default()
    }
}

impl Net {
    /// a connects to b, which listens; nothing has moved yet.
    pub fn new(ca: Config, cb: Config) -> Net {
        let a = Connection::connect(ca, addr_a(), addr_b(), SeqNum(0xffff_f000));
        let b = Connection::listen(cb, addr_b(), SeqNum(7_000_000));
        Net::with(a, b)
    }

    pub fn with(a: Connection, b: Connection) -> Net {
        Net {
            a: Peer::new(a),
            b: Peer::new(b),
            now: Duration::ZERO,
            delay: MS,
            mtu: 1500,
            queue: Vec::new(),
            filter: None,
            log: Vec::new(),
            logging: true,
            wire: None,
            buf: vec![0; 1500],
        }
    }

    /// a connects to b over a simulated wire with these impairments and seed.
    pub fn sim(ca: Config, cb: Config, imp: Impairments, seed: u64) -> Net {
        let mut n = Net::new(ca, cb);
        n.mtu = imp.mtu;
        n.buf = vec![0; imp.mtu];
        n.wire = Some(Wire::new(imp, seed));
        n.logging = false;
        n
    }

    pub fn peer(&mut self, s: Side) -> &mut Peer {
        match s {
            Side::A => &mut self.a,
            Side::B => &mut self.b,
        }
    }

    /// Puts raw octets on the wire towards `to`, arriving after the link delay.
    pub fn inject(&mut self, to: Side, packet: Vec<u8>) {
        let at = self.now + self.delay;
        self.push(at, to, packet);
    }

    fn push(&mut self, at: Duration, to: Side, packet: Vec<u8>) {
        let i = self.queue.partition_point(|(t, _, _)| *t <= at);
        self.queue.insert(i, (at, to, packet));
    }

    /// Lets both applications act and both connections send what they have.
    fn transmit(&mut self) {
        for side in [Side::A, Side::B] {
            self.peer(side).app();
            let mut buf = std::mem::take(&mut self.buf);
            while let Some(n) = {
                let now = self.now;
                self.peer(side).conn.poll_transmit(now, &mut buf)
            } {
                let pkt = &buf[..n];
                if self.filter.is_none()
                    && !self.logging
                    && let Some(w) = &mut self.wire
                {
                    let end = if side == Side::A { End::A } else { End::B };
                    w.send(end, self.now, pkt);
                    continue;
                }
                let seg = Segment::parse(pkt).expect("we emit valid packets");
                if self.logging {
                    self.log.push(Logged {
                        at: self.now,
                        from: side,
                        seq: seg.seq,
                        ack: seg.ack,
                        flags: seg.flags,
                        len: seg.payload.len(),
                        window: seg.window,
                        sack: seg.options.sack.to_vec(),
                        mss: seg.options.mss,
                        wscale: seg.options.window_scale,
                        sack_permitted: seg.options.sack_permitted,
                        payload: seg.payload.to_vec(),
                    });
                }
                let to = match side {
                    Side::A => Side::B,
                    Side::B => Side::A,
                };
                let verdict = match &mut self.filter {
                    Some(f) => f(side, &seg),
                    None => Verdict::Pass,
                };
                let at = self.now + self.delay;
                match verdict {
                    Verdict::Pass => match &mut self.wire {
                        Some(w) => {
                            let end = if side == Side::A { End::A } else { End::B };
                            w.send(end, self.now, pkt)
                        }
                        None => self.push(at, to, pkt.to_vec()),
                    },
                    Verdict::Drop => {}
                    Verdict::Delay(d) => self.push(at + d, to, pkt.to_vec()),
                    Verdict::Replace(p) => self.push(at, to, p),
                }
            }
            self.buf = buf;
            self.peer(side).app();
        }
    }

    /// One step: send what is due, then move time to the next arrival or timer and
    /// handle it. False when nothing is left to happen.
    pub fn step(&mut self) -> bool {
        self.transmit();
        let next = [
            self.queue.first().map(|w| w.0),
            self.wire.as_ref().and_then(Wire::next_arrival),
            self.a.conn.poll_timeout(),
            self.b.conn.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min();
        let Some(t) = next else {
            return false;
        };
        self.now = self.now.max(t);
        while self.queue.first().is_some_and(|w| w.0 <= self.now) {
            let (_, to, pkt) = self.queue.remove(0);
            self.arrive(to, &pkt);
        }
        if let Some(mut w) = self.wire.take() {
            while let Some((end, pkt)) = w.poll_arrival(self.now) {
                let to = if end == End::A { Side::A } else { Side::B };
                let now = self.now;
                let p = self.peer(to);
                let _ = p.conn.handle_packet(now, pkt, &mut p.rx);
                p.note_state();
                self.wire = Some(w);
                self.transmit();
                w = self.wire.take().expect("the wire is back");
            }
            self.wire = Some(w);
        }
        for side in [Side::A, Side::B] {
            let now = self.now;
            let p = self.peer(side);
            if p.conn.poll_timeout().is_some_and(|t| t <= now) {
                p.conn.handle_timeout(now);
                p.note_state();
            }
        }
        true
    }

    fn arrive(&mut self, to: Side, pkt: &[u8]) {
        let now = self.now;
        let p = self.peer(to);
        let _ = p.conn.handle_packet(now, pkt, &mut p.rx);
        p.note_state();
        // Each packet is handled on its own: what it makes due goes out before the
        // next arrives (an ACK for every second segment, not one per batch).
        self.transmit();
    }

    /// Steps until `done` holds; panics after `limit` of virtual time.
    pub fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&Net) -> bool) {
        let end = self.now + limit;
        while !done(self) {
            assert!(
                self.now <= end,
                "not done after {:?} (a {:?}, b {:?})",
                limit,
                self.a.conn.state(),
                self.b.conn.state()
            );
            if !self.step() {
                self.transmit();
                if !done(self) {
                    for l in self.log.iter().rev().take(60).rev() {
                        eprintln!(
                            "{:?} {:?} seq {} ack {} {:?} len {} win {} sack {:?}",
                            l.at, l.from, l.seq, l.ack, l.flags, l.len, l.window, l.sack
                        );
                    }
                    eprintln!("a: {:#?}\nb: {:#?}", self.a.conn, self.b.conn);
                    panic!("nothing left to happen and not done");
                }
                return;
            }
        }
    }

    /// Steps until nothing is left to happen (both closed, no timers).
    pub fn run_out(&mut self, limit: Duration) {
        let end = self.now + limit;
        while self.step() {
            assert!(self.now <= end, "still running after {limit:?}");
        }
        self.transmit();
    }

    pub fn established(&mut self) {
        self.run_until(10 * 1000 * MS, |n| {
            n.a.conn.state() == State::Established && n.b.conn.state() == State::Established
        });
    }

    /// Segments `from` sent that match `f`.
    pub fn sent(&self, from: Side, f: impl Fn(&Logged) -> bool) -> Vec<&Logged> {
        self.log.iter().filter(|l| l.from == from && f(l)).collect()
    }
}

/// A payload whose every 8-octet block depends on its offset (and the seed), so a lost,
/// duplicated or misplaced octet shows. (Made a block at a time: it is made often.)
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(len + 8);
    let mut k = seed.rotate_left(17);
    while v.len() < len {
        k = k.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let x = (k ^ (k >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        v.extend_from_slice(&(x ^ (x >> 32)).to_le_bytes());
    }
    v.truncate(len);
    v
}

/// Asserts two byte strings are equal, reporting lengths and the first difference
/// instead of printing them.
#[track_caller]
pub fn assert_bytes(got: &[u8], want: &[u8]) {
    if got != want {
        let at = got.iter().zip(want).position(|(a, b)| a != b);
        panic!(
            "bytes differ: got {} octets, want {}; first difference at {:?}",
            got.len(),
            want.len(),
            at
        );
    }
}

/// Runs `check` for seeds 0..`count` and reports every seed that failed, so that it
/// replays: `SOFTRNIC_TCP_SEED=n` runs that one seed alone, `SOFTRNIC_TCP_SEEDS=n`
/// changes how many run.
pub fn for_seeds(name: &str, count: u64, check: impl Fn(u64)) {
    if let Ok(s) = std::env::var("SOFTRNIC_TCP_SEED") {
        let seed = s.parse().expect("SOFTRNIC_TCP_SEED is a number");
        eprintln!("{name}: seed {seed} only");
        check(seed);
        return;
    }
    let count = std::env::var("SOFTRNIC_TCP_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(count);
    let mut failed = Vec::new();
    for seed in 0..count {
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(seed)));
        if run.is_err() {
            eprintln!("{name}: seed {seed} FAILED");
            failed.push(seed);
            if failed.len() >= 10 {
                break;
            }
        }
    }
    assert!(
        failed.is_empty(),
        "{name}: seeds {failed:?} failed; replay one with \
         SOFTRNIC_TCP_SEED={} cargo test -p softrnic-tcp --test sim {name}",
        failed[0]
    );
}
