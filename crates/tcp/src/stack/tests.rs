//! Two stacks on the simulated wire (`crate::sim`), each with applications that use
//! the stack's API as a program would: many connections at once, listeners and their
//! bounds, resets for strays, raw pieces, ids and ports given back. Virtual time, seeded
//! impairments: every run replays.

use super::*;
use crate::conn::{Lent, State};
use crate::segment::{Flags, IPV4_HEADER_LEN, Options, ParseError};
use crate::seq::SeqNum;
use crate::sim::{End, Impairments, Wire};
use std::collections::{BTreeMap, HashMap};

const MS: Duration = Duration::from_millis(1);

fn ip_a() -> Ipv4Addr {
    Ipv4Addr::new(10, 0, 0, 1)
}

fn ip_b() -> Ipv4Addr {
    Ipv4Addr::new(10, 0, 0, 2)
}

fn server() -> SocketAddrV4 {
    SocketAddrV4::new(ip_b(), 7)
}

/// Small buffers and fast timers, so transfers take few steps.
fn cfg() -> StackConfig {
    StackConfig {
        tcp: Config {
            mss: 1000,
            send_buffer: 16 * 1024,
            recv_buffer: 16 * 1024,
            rto_initial: 100 * MS,
            rto_min: 50 * MS,
            msl: 500 * MS,
            ..Config::default()
        },
        ..StackConfig::default()
    }
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    (0..len as u64)
        .map(|i| ((i ^ seed.rotate_left(17)).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as u8)
        .collect()
}

/// One connection as an application drives it: send all of `out`, read everything,
/// shut down once sent, give the id back once the peer has finished too.
#[derive(Debug)]
struct App {
    id: ConnId,
    out: Vec<u8>,
    sent: usize,
    got: Vec<u8>,
    shut: bool,
    /// Shut down only after the peer's FIN (so that the peer closes first).
    shut_after_eof: bool,
    eof: bool,
    closed: bool,
    seen: Readiness,
    /// Packet buffers the stack gave back after they were read (zero-copy receive).
    spent: usize,
    /// Send records of up to this many octets instead of a plain stream.
    records: Option<usize>,
}

impl App {
    fn new(id: ConnId, out: Vec<u8>) -> App {
        App {
            id,
            out,
            sent: 0,
            got: Vec::new(),
            shut: false,
            shut_after_eof: false,
            eof: false,
            closed: false,
            seen: Readiness::empty(),
            spent: 0,
            records: None,
        }
    }

    fn run(&mut self, s: &mut Stack) {
        if self.closed {
            return;
        }
        while self.sent < self.out.len() {
            let r = match self.records {
                // Records of changing sizes, from a few octets to more than a segment.
                Some(max) => {
                    let len = (1 + (self.sent * 31) % max).min(self.out.len() - self.sent);
                    let rec = &self.out[self.sent..self.sent + len];
                    s.send_record(self.id, rec).map(|()| len)
                }
                None => s.send(self.id, &self.out[self.sent..]),
            };
            match r {
                Ok(n) => self.sent += n,
                Err(StackError::WouldBlock) => break,
                Err(e) => panic!("send on {}: {e}", self.id),
            }
        }
        if self.sent == self.out.len() && !self.shut && (self.eof || !self.shut_after_eof) {
            s.shutdown(self.id).unwrap();
            self.shut = true;
        }
        let mut buf = [0u8; 3000];
        loop {
            // Reads of changing sizes end inside segments as often as between them.
            let want = 500 + (self.got.len() * 7) % 2500;
            match s.read(self.id, &mut buf[..want]) {
                Ok(0) => {
                    self.eof = true;
                    break;
                }
                Ok(n) => self.got.extend_from_slice(&buf[..n]),
                Err(StackError::WouldBlock) => break,
                Err(e) => panic!("read on {}: {e}", self.id),
            }
        }
        let mut spent = Vec::new();
        s.take_spent(self.id, &mut spent);
        self.spent += spent.len();
        if self.eof && !self.shut && self.sent == self.out.len() {
            s.shutdown(self.id).unwrap();
            self.shut = true;
        }
        if self.eof && self.shut {
            s.close(self.id).unwrap();
            self.closed = true;
        }
    }
}

/// A stack on one end of the wire, its listener and its applications.
struct Host {
    end: End,
    stack: Stack,
    listener: Option<ListenerId>,
    /// What each accepted connection sends, by accept order.
    reply: Box<dyn FnMut(usize) -> Vec<u8>>,
    /// Accept what comes in (else leave it in the accept queue).
    accepting: bool,
    apps: Vec<App>,
    accepted: usize,
    /// Every event, in order.
    events: Vec<StackEvent>,
    /// The accepted connections send records of up to this many octets.
    records: Option<usize>,
    /// Packet buffers given back after the stack kept them (zero-copy receive).
    spent: usize,
}

impl Host {
    fn new(end: End, cfg: StackConfig, ip: Ipv4Addr) -> Host {
        Host {
            end,
            stack: Stack::new(cfg, &[ip]),
            listener: None,
            reply: Box::new(|_| Vec::new()),
            accepting: true,
            apps: Vec::new(),
            accepted: 0,
            events: Vec::new(),
            spent: 0,
            records: None,
        }
    }

    fn app(&mut self) {
        while let Some(ev) = self.stack.poll_event() {
            self.events.push(ev);
            match ev {
                StackEvent::Conn { id, what } => {
                    if let Some(a) = self.apps.iter_mut().find(|a| a.id == id) {
                        a.seen |= what;
                    }
                }
                StackEvent::Incoming(_) => {}
            }
        }
        if let (Some(l), true) = (self.listener, self.accepting) {
            while let Some(id) = self.stack.accept(l).unwrap() {
                let out = (self.reply)(self.accepted);
                self.accepted += 1;
                let mut app = App::new(id, out);
                app.records = self.records;
                self.apps.push(app);
            }
        }
        for a in &mut self.apps {
            a.run(&mut self.stack);
            self.spent += a.spent;
            a.spent = 0;
        }
    }
}

struct World {
    wire: Wire,
    a: Host,
    b: Host,
    now: Duration,
    buf: Vec<u8>,
    /// Packets arrive in buffers the stacks may keep ([`Stack::handle_packet_buf`]) of
    /// at least this many octets (so a small payload is not worth keeping).
    owned: Option<usize>,
    /// Payloads travel by reference ([`Stack::poll_transmit_lent`]): the wire carries
    /// the whole packet, and an arriving one whose headers were sent with a lent
    /// payload is handed over split, with that payload
    /// ([`Stack::handle_packet_split`]). Needs a wire that does not corrupt.
    lent: Option<HashMap<Vec<u8>, Lent>>,
    /// Packets whose payload was lent.
    lent_packets: u64,
}

impl World {
    fn new(imp: Impairments, seed: u64, ca: StackConfig, cb: StackConfig) -> World {
        World {
            wire: Wire::new(imp, seed),
            a: Host::new(End::A, ca, ip_a()),
            b: Host::new(End::B, cb, ip_b()),
            now: Duration::ZERO,
            buf: vec![0; 1500],
            owned: None,
            lent: None,
            lent_packets: 0,
        }
    }

    fn host(&mut self, e: End) -> &mut Host {
        match e {
            End::A => &mut self.a,
            End::B => &mut self.b,
        }
    }

    fn flush(&mut self) {
        for e in [End::A, End::B] {
            let now = self.now;
            let mut buf = std::mem::take(&mut self.buf);
            let h = match e {
                End::A => &mut self.a,
                End::B => &mut self.b,
            };
            h.app();
            let end = h.end;
            let mut out = Vec::new();
            if let Some(map) = &mut self.lent {
                while let Some((n, lent)) = h.stack.poll_transmit_lent(now, &mut buf) {
                    let mut p = buf[..n].to_vec();
                    if let Some(l) = lent {
                        p.extend_from_slice(l.octets());
                        map.insert(buf[..n].to_vec(), l);
                        self.lent_packets += 1;
                    }
                    out.push(p);
                }
            } else {
                while let Some(n) = h.stack.poll_transmit(now, &mut buf) {
                    out.push(buf[..n].to_vec());
                }
            }
            for p in out {
                self.wire.send(end, now, &p);
            }
            self.buf = buf;
        }
    }

    /// One step: everything due goes out, time moves to the next arrival or timer.
    fn step(&mut self) -> bool {
        self.flush();
        let next = [
            self.wire.next_arrival(),
            self.a.stack.poll_timeout(),
            self.b.stack.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min();
        let Some(t) = next else {
            return false;
        };
        self.now = self.now.max(t);
        while let Some((to, p)) = self.wire.poll_arrival(self.now) {
            let p = p.to_vec();
            let now = self.now;
            // The headers' length: IPv4's, then TCP's data offset.
            let ihl = usize::from(p[0] & 0xf) * 4;
            let head = ihl + usize::from(p.get(ihl + 12).copied().unwrap_or(0) >> 4) * 4;
            let lent = self
                .lent
                .as_ref()
                .and_then(|m| m.get(p.get(..head)?))
                .cloned();
            if let Some(l) = lent {
                assert_eq!(&p[head..], l.octets(), "the wire must not corrupt here");
                let s = &mut self.host(to).stack;
                let check = LinkChecksum::Good;
                let back =
                    s.handle_packet_split(now, p[..head].to_vec(), head, &l, &mut NoRaw, check);
                assert_eq!(back.len(), head);
                self.flush();
                continue;
            }
            match self.owned {
                Some(size) => {
                    let mut buf = vec![0xa5; size.max(p.len())];
                    buf[..p.len()].copy_from_slice(&p);
                    let check = LinkChecksum::Unchecked;
                    let s = &mut self.host(to).stack;
                    let _ = s.handle_packet_buf(now, buf, p.len(), &mut NoRaw, check);
                }
                None => {
                    let _ = self.host(to).stack.handle_packet(now, &p, &mut NoRaw);
                }
            }
            self.flush();
        }
        for e in [End::A, End::B] {
            let now = self.now;
            self.host(e).stack.handle_timeout(now);
        }
        true
    }

    fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&World) -> bool) {
        let end = self.now + limit;
        while !done(self) {
            assert!(self.now <= end, "not done after {limit:?}");
            if !self.step() {
                self.flush();
                if !done(self) {
                    eprintln!("a: {:#?}\nb: {:#?}", self.a.apps, self.b.apps);
                }
                assert!(done(self), "nothing left to happen and not done");
                return;
            }
        }
    }
}

fn harsh() -> Impairments {
    Impairments {
        jitter: MS / 2,
        loss: 0.02,
        reorder: 0.05,
        duplicate: 0.02,
        corrupt: 0.01,
        ..Impairments::default()
    }
}

/// `n` connections from a to b's listener, each carrying its own octets both ways,
/// then closed by both; returns the world once every slot is free again.
fn many(imp: Impairments, seed: u64, n: usize, len: usize) -> World {
    many_with(imp, seed, n, len, cfg())
}

/// [`many`] with both stacks on `c`.
fn many_with(imp: Impairments, seed: u64, n: usize, len: usize, c: StackConfig) -> World {
    many_in(imp, seed, n, len, c, None)
}

/// [`many_with`]; `owned`: packets arrive in buffers of at least that many octets,
/// which the stacks may keep.
fn many_in(
    imp: Impairments,
    seed: u64,
    n: usize,
    len: usize,
    c: StackConfig,
    owned: Option<usize>,
) -> World {
    many_lent(imp, seed, n, len, c, owned, None)
}

/// [`many_in`]; `records`: both sides send records of up to that many octets, with
/// payloads lent to the packets that carry them.
fn many_lent(
    imp: Impairments,
    seed: u64,
    n: usize,
    len: usize,
    c: StackConfig,
    owned: Option<usize>,
    records: Option<usize>,
) -> World {
    let mut w = World::new(imp, seed, c.clone(), c);
    w.owned = owned;
    if records.is_some() {
        w.lent = Some(HashMap::new());
        // Packets as large as the wire's MTU allows, so segments reach the MSS.
        w.buf = vec![0; w.wire.impairments().mtu];
    }
    w.b.listener = Some(w.b.stack.listen(server(), 64, RxMode::Stream).unwrap());
    w.b.reply = Box::new(move |i| pattern(len / 2 + i, 1000 + i as u64));
    w.b.records = records;
    for i in 0..n {
        let id =
            w.a.stack
                .connect(w.now, None, server(), RxMode::Stream)
                .unwrap();
        let mut app = App::new(id, pattern(len + i, i as u64));
        app.records = records;
        w.a.apps.push(app);
    }
    w.run_until(120_000 * MS, |w| {
        w.b.apps.len() == n
            && w.a.apps.iter().chain(&w.b.apps).all(|a| a.closed)
            && w.a.stack.connections() == 0
            && w.b.stack.connections() == 0
    });
    w
}

fn check_many(w: &World, n: usize, len: usize, seed: u64) {
    // b accepts in the order the handshakes complete: match each by what it got.
    for (i, a) in w.a.apps.iter().enumerate() {
        let b = w.b.apps.iter().find(|b| b.got == a.out).unwrap_or_else(|| {
            panic!("seed {seed}: connection {i}'s octets arrived nowhere whole")
        });
        assert_eq!(a.got, b.out, "seed {seed}: connection {i}'s reply");
        for app in [a, b] {
            let want = Readiness::ESTABLISHED | Readiness::PEER_CLOSED | Readiness::READABLE;
            assert!(app.seen.contains(want), "seed {seed}: {:?}", app.seen);
        }
    }
    let _ = (n, len);
    for h in [&w.a, &w.b] {
        let s = h.stack.stats();
        assert_eq!(s.reaped, n as u64, "seed {seed}: every slot freed once");
        assert_eq!(h.stack.poll_timeout(), None);
    }
}

#[test]
fn many_connections_carry_their_own_octets_both_ways_and_are_freed() {
    let w = many(Impairments::default(), 1, 16, 20_000);
    check_many(&w, 16, 20_000, 1);
    let t = w.a.stack.tcp_totals();
    assert_eq!(t.retransmitted_segments, 0);
    assert_eq!(w.a.stack.stats().connected, 16);
    assert_eq!(w.b.stack.stats().accepted, 16);
}

#[test]
fn many_connections_survive_loss_reordering_duplication_and_corruption() {
    let (mut lost, mut corrupted, mut retransmitted) = (0, 0, 0);
    let (mut duplicated, mut dsacks_out, mut reported) = (0, 0, 0);
    for seed in 0..100 {
        let w = many(harsh(), seed, 6, 12_000);
        check_many(&w, 6, 12_000, seed);
        lost += w.wire.stats().lost;
        corrupted += w.wire.stats().corrupted;
        duplicated += w.wire.stats().duplicated;
        let (a, b) = (w.a.stack.tcp_totals(), w.b.stack.tcp_totals());
        retransmitted += a.retransmitted_segments;
        // The totals count every counter of the connections, the recovery ones too
        // (they once left out D-SACKs, loss probes and spurious timeouts).
        dsacks_out += a.dsacks_out + b.dsacks_out;
        reported += a.spurious_retransmits + b.spurious_retransmits;
    }
    assert!(lost > 100 && corrupted > 20 && retransmitted > 100);
    assert!(duplicated > 50 && dsacks_out > 50 && reported > 50);
}

#[test]
fn payload_kept_in_packet_buffers_reads_back_whole_under_loss_reordering_duplication() {
    // Packets in buffers of 1500 octets: a full segment (1000) is kept in its buffer,
    // smaller ones are copied into the ring, so the reader crosses from one to the
    // other, in and out of order, with duplicates and corruption on the wire.
    let (mut held, mut spent, mut reordered) = (0, 0, 0);
    for seed in 0..100 {
        let w = many_in(harsh(), seed, 4, 12_000, cfg(), Some(1500));
        check_many(&w, 4, 12_000, seed);
        held += w.a.stack.stats().packets_held + w.b.stack.stats().packets_held;
        spent += (w.a.spent + w.b.spent) as u64;
        reordered += w.wire.stats().reordered;
    }
    assert!(reordered > 100, "the wire reordered {reordered}");
    assert!(held > 5_000, "{held} packets kept");
    assert_eq!(spent, held, "every kept packet comes back once read");
}

#[test]
fn payloads_lent_to_packets_arrive_whole_under_loss_reordering_duplication() {
    // Segments of up to 16000 octets on a link that checks checksums for its ends:
    // records of 8 KiB or more are kept in chunks of their own, packets carry
    // their payload by reference, and the receiver keeps a large one until read,
    // while loss, reordering and duplicates make retransmissions of lent ranges.
    let mut c = cfg();
    c.tcp.checksum_offload = true;
    c.tcp.mss = 16_000;
    c.tcp.send_buffer = 128 * 1024;
    c.tcp.recv_buffer = 128 * 1024;
    let imp = Impairments {
        jitter: MS / 2,
        loss: 0.02,
        reorder: 0.05,
        duplicate: 0.02,
        mtu: 65_535,
        ..Impairments::default()
    };
    let (mut lent, mut held, mut retransmitted) = (0, 0, 0);
    for seed in 0..60 {
        let w = many_lent(imp.clone(), seed, 3, 300_000, c.clone(), None, Some(30_000));
        check_many(&w, 3, 300_000, seed);
        lent += w.lent_packets;
        held += w.a.stack.stats().packets_held + w.b.stack.stats().packets_held;
        retransmitted += w.a.stack.tcp_totals().retransmitted_segments;
    }
    assert!(lent > 5_000, "{lent} packets lent their payload");
    assert!(held > 2_000, "{held} payloads kept by reference");
    assert!(retransmitted > 100, "{retransmitted} retransmitted");
}

#[test]
fn with_checksum_offload_segments_leave_unsummed_and_marked_packets_are_dropped() {
    let mut c = cfg();
    c.tcp.checksum_offload = true;
    let w = many_with(Impairments::default(), 3, 4, 20_000, c.clone());
    check_many(&w, 4, 20_000, 3);
    // What such a stack sends carries no TCP checksum: a verifying parser refuses it.
    let mut s = Stack::new(c.clone(), &[ip_a()]);
    s.connect(Duration::ZERO, None, server(), RxMode::Stream)
        .unwrap();
    let mut buf = [0u8; 1500];
    let n = s.poll_transmit(Duration::ZERO, &mut buf).unwrap();
    assert_eq!(buf[IPV4_HEADER_LEN + 16..IPV4_HEADER_LEN + 18], [0, 0]);
    assert_eq!(Segment::parse(&buf[..n]), Err(ParseError::TcpChecksum));
    assert!(Segment::parse_with(&buf[..n], false).is_ok());
    // The receiving stack takes the link's word: unverified when good, dropped and
    // counted when the link marks it bad.
    let mut b = Stack::new(c, &[ip_b()]);
    let l = b.listen(server(), 4, RxMode::Stream).unwrap();
    let marked = b.handle_packet_checked(Duration::ZERO, &buf[..n], &mut NoRaw, LinkChecksum::Bad);
    assert_eq!(marked, Err(ParseError::TcpChecksum));
    assert_eq!((b.stats().dropped_checksum, b.half_open(l)), (1, 0));
    b.handle_packet(Duration::ZERO, &buf[..n], &mut NoRaw)
        .unwrap();
    assert_eq!((b.stats().dropped_checksum, b.half_open(l)), (1, 1));
}

/// A SYN from `src` to `dst`.
fn syn(src: SocketAddrV4, dst: SocketAddrV4, seq: u32) -> Vec<u8> {
    segment(src, dst, SeqNum(seq), SeqNum(0), Flags::SYN, &[])
}

fn segment(
    src: SocketAddrV4,
    dst: SocketAddrV4,
    seq: SeqNum,
    ack: SeqNum,
    flags: Flags,
    payload: &[u8],
) -> Vec<u8> {
    let seg = Segment {
        src,
        dst,
        seq,
        ack,
        flags,
        window: 1000,
        options: Options {
            mss: flags.contains(Flags::SYN).then_some(1000),
            ..Options::default()
        },
        payload,
    };
    let mut buf = vec![0; seg.packet_len()];
    seg.emit(&mut buf).unwrap();
    buf
}

/// Everything `s` sends now, parsed.
fn drain(s: &mut Stack, now: Duration) -> Vec<(SocketAddrV4, Flags, SeqNum, SeqNum)> {
    let mut buf = [0u8; 1500];
    let mut out = Vec::new();
    while let Some(n) = s.poll_transmit(now, &mut buf) {
        let seg = Segment::parse(&buf[..n]).unwrap();
        out.push((seg.dst, seg.flags, seg.seq, seg.ack));
    }
    out
}

#[test]
fn a_syn_flood_holds_at_most_max_half_open_and_a_real_client_still_gets_in() {
    let cb = StackConfig {
        max_half_open: 8,
        ..cfg()
    };
    let mut w = World::new(Impairments::default(), 3, cfg(), cb);
    let l = w.b.stack.listen(server(), 16, RxMode::Stream).unwrap();
    w.b.listener = Some(l);
    let flood = |w: &mut World, from: u32, n: u32| {
        for i in from..from + n {
            let src = SocketAddrV4::new(Ipv4Addr::from(0x0b00_0000 + i), 1024 + i as u16);
            let now = w.now;
            w.b.stack
                .handle_packet(now, &syn(src, server(), i), &mut NoRaw)
                .unwrap();
            assert!(w.b.stack.half_open(l) <= 8);
            assert!(w.b.stack.connections() <= 8);
        }
        // The SYN-ACKs go to addresses nobody answers from.
        let now = w.now;
        drain(&mut w.b.stack, now);
    };
    flood(&mut w, 0, 1000);
    assert_eq!(w.b.stack.half_open(l), 8);
    assert_eq!(w.b.stack.stats().half_open_evicted, 992);
    // A real client's handshake completes within a round trip, while fewer SYNs than
    // the bound arrive.
    let id =
        w.a.stack
            .connect(w.now, None, server(), RxMode::Stream)
            .unwrap();
    w.a.apps.push(App::new(id, b"through the flood".to_vec()));
    w.step();
    flood(&mut w, 1000, 5);
    w.run_until(5_000 * MS, |w| {
        w.b.apps
            .first()
            .is_some_and(|b| b.got == b"through the flood")
    });
    assert!(w.b.stack.connections() <= 9);
    // The flood's half-open connections give up on their own (SYN-ACK retries).
    w.run_until(600_000 * MS, |w| w.b.stack.half_open(l) == 0);
}

#[test]
fn segments_nobody_takes_get_resets_and_the_resets_are_bounded() {
    let mut s = Stack::new(cfg(), &[ip_b()]);
    let client = SocketAddrV4::new(ip_a(), 5555);
    let now = Duration::ZERO;
    // A SYN to a port nobody listens on: RST|ACK acknowledging the SYN.
    s.handle_packet(now, &syn(client, server(), 100), &mut NoRaw)
        .unwrap();
    assert_eq!(
        drain(&mut s, now),
        vec![(client, Flags::RST | Flags::ACK, SeqNum(0), SeqNum(101))]
    );
    // A stray ACK: RST with its acknowledgment number as sequence number.
    let ack = segment(client, server(), SeqNum(5), SeqNum(77), Flags::ACK, b"x");
    s.handle_packet(now, &ack, &mut NoRaw).unwrap();
    assert_eq!(
        drain(&mut s, now),
        vec![(client, Flags::RST, SeqNum(77), SeqNum(0))]
    );
    // A reset is never answered; another address is not ours.
    let rst = segment(client, server(), SeqNum(5), SeqNum(0), Flags::RST, &[]);
    s.handle_packet(now, &rst, &mut NoRaw).unwrap();
    let elsewhere = SocketAddrV4::new(Ipv4Addr::new(10, 9, 9, 9), 7);
    s.handle_packet(now, &syn(client, elsewhere, 1), &mut NoRaw)
        .unwrap();
    assert!(drain(&mut s, now).is_empty());
    assert_eq!(s.stats().not_local, 1);
    // A corrupted packet is an error and a count.
    let mut bad = syn(client, server(), 1);
    let last = bad.len() - 1;
    bad[last] ^= 1;
    assert!(s.handle_packet(now, &bad, &mut NoRaw).is_err());
    assert_eq!(s.stats().dropped_checksum, 1);
    // A flood of strays: at most max_pending_resets wait.
    for i in 0..100 {
        s.handle_packet(now, &syn(client, server(), i), &mut NoRaw)
            .unwrap();
    }
    assert_eq!(drain(&mut s, now).len(), 64);
    assert_eq!(s.stats().resets_suppressed, 36);
    assert_eq!(s.connections(), 0);
}

#[test]
fn the_accept_queue_is_bounded_and_waiting_clients_get_in_once_there_is_room() {
    let mut w = World::new(Impairments::default(), 4, cfg(), cfg());
    let l = w.b.stack.listen(server(), 2, RxMode::Stream).unwrap();
    w.b.listener = Some(l);
    w.b.accepting = false;
    w.b.reply = Box::new(|i| vec![i as u8; 10]);
    let connect = |w: &mut World, i: u8| {
        let id =
            w.a.stack
                .connect(w.now, None, server(), RxMode::Stream)
                .unwrap();
        w.a.apps.push(App::new(id, vec![100 + i; 10]));
    };
    // Four SYNs at once find the queue empty: their handshakes all complete (the
    // queue holds at most `backlog` plus the handshakes under way when it filled).
    for i in 0..4 {
        connect(&mut w, i);
    }
    w.run_until(500 * MS, |w| w.b.stack.pending_accepts(l) == 4);
    // Now it is full: SYNs are dropped, and their clients send them again.
    connect(&mut w, 4);
    connect(&mut w, 5);
    w.run_until(500 * MS, |w| w.b.stack.stats().syn_backlog_full >= 2);
    assert_eq!(w.b.stack.pending_accepts(l), 4);
    assert_eq!(w.b.stack.connections(), 4);
    w.b.accepting = true;
    w.run_until(20_000 * MS, |w| {
        w.a.apps.iter().all(|a| a.closed) && w.b.apps.len() == 6
    });
    let mut got: Vec<Vec<u8>> = w.b.apps.iter().map(|a| a.got.clone()).collect();
    got.sort();
    assert_eq!(got, (0..6).map(|i| vec![100 + i; 10]).collect::<Vec<_>>());
}

#[test]
fn ephemeral_ports_run_out_per_peer_and_come_back_when_freed() {
    let c = StackConfig {
        ephemeral_ports: (50000, 50002),
        ..cfg()
    };
    let mut s = Stack::new(c, &[ip_a()]);
    let now = Duration::ZERO;
    let ids: Vec<ConnId> = (0..3)
        .map(|_| s.connect(now, None, server(), RxMode::Stream).unwrap())
        .collect();
    let mut ports: Vec<u16> = ids
        .iter()
        .map(|&id| s.connection(id).unwrap().local().port())
        .collect();
    ports.sort();
    assert_eq!(ports, vec![50000, 50001, 50002]);
    assert_eq!(
        s.connect(now, None, server(), RxMode::Stream),
        Err(StackError::NoFreePorts)
    );
    let other = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 3), 7);
    assert!(s.connect(now, None, other, RxMode::Stream).is_ok());
    let bad = Ipv4Addr::new(10, 0, 0, 9);
    assert_eq!(
        s.connect(now, Some(bad), server(), RxMode::Stream),
        Err(StackError::AddrNotAvailable(bad))
    );
    // An aborted connection (never established: no RST) is freed at the next
    // transmit, and its id is never valid again even when its slot is reused.
    s.abort(ids[1]).unwrap();
    drain(&mut s, now);
    assert_eq!(s.state(ids[1]), Err(StackError::InvalidId));
    let again = s.connect(now, None, server(), RxMode::Stream).unwrap();
    assert_eq!(s.connection(again).unwrap().local().port(), ports[1]);
    assert_eq!(again.index, ids[1].index);
    assert_ne!(again, ids[1]);
    assert_eq!(s.send(ids[1], b"x"), Err(StackError::InvalidId));
}

#[test]
fn a_table_full_of_connections_refuses_more_and_listeners_conflict() {
    let c = StackConfig {
        max_connections: 2,
        ..cfg()
    };
    let mut s = Stack::new(c, &[ip_b()]);
    let now = Duration::ZERO;
    s.connect(now, None, SocketAddrV4::new(ip_a(), 1), RxMode::Stream)
        .unwrap();
    s.connect(now, None, SocketAddrV4::new(ip_a(), 2), RxMode::Stream)
        .unwrap();
    assert_eq!(
        s.connect(now, None, SocketAddrV4::new(ip_a(), 3), RxMode::Stream),
        Err(StackError::TooManyConnections)
    );
    s.listen(server(), 4, RxMode::Stream).unwrap();
    let any = SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 7);
    assert_eq!(
        s.listen(any, 4, RxMode::Stream),
        Err(StackError::AddrInUse(any))
    );
    // The SYN finds the table full (and the listener no half-open to give up).
    let client = SocketAddrV4::new(ip_a(), 4000);
    s.handle_packet(now, &syn(client, server(), 9), &mut NoRaw)
        .unwrap();
    assert_eq!(s.stats().syn_table_full, 1);
    assert_eq!(s.connections(), 2);
}

#[test]
fn a_reset_reaches_the_reader_and_the_writer() {
    let mut w = World::new(Impairments::default(), 5, cfg(), cfg());
    let l = w.b.stack.listen(server(), 4, RxMode::Stream).unwrap();
    let id =
        w.a.stack
            .connect(w.now, None, server(), RxMode::Stream)
            .unwrap();
    w.run_until(1000 * MS, |w| w.b.stack.pending_accepts(l) == 1);
    let bid = w.b.stack.accept(l).unwrap().unwrap();
    w.b.stack.abort(bid).unwrap();
    w.run_until(1000 * MS, |w| w.a.stack.state(id) == Ok(State::Closed));
    let mut what = Readiness::empty();
    for ev in &w.a.events {
        let StackEvent::Conn { id: i, what: x } = *ev else {
            panic!("{ev:?}");
        };
        assert_eq!(i, id);
        what |= x;
    }
    assert!(what.contains(Readiness::ESTABLISHED | Readiness::RESET | Readiness::READABLE));
    assert_eq!(w.a.stack.read(id, &mut [0; 8]), Err(StackError::Reset));
    assert_eq!(w.a.stack.send(id, b"x"), Err(StackError::Reset));
    w.a.stack.close(id).unwrap();
    w.run_until(1000 * MS, |w| w.a.stack.connections() == 0);
}

#[test]
fn a_syn_reopens_a_released_connection_in_time_wait() {
    // One ephemeral port: the second connection has the first one's addresses.
    let ca = StackConfig {
        ephemeral_ports: (40000, 40000),
        ..cfg()
    };
    let mut w = World::new(Impairments::default(), 6, ca, cfg());
    w.b.listener = Some(w.b.stack.listen(server(), 4, RxMode::Stream).unwrap());
    // b closes first (it has nothing to send), so b holds TIME-WAIT.
    w.b.reply = Box::new(|_| Vec::new());
    let id =
        w.a.stack
            .connect(w.now, None, server(), RxMode::Stream)
            .unwrap();
    let mut first = App::new(id, b"first".to_vec());
    first.shut_after_eof = true;
    w.a.apps.push(first);
    w.run_until(2000 * MS, |w| {
        w.a.stack.connections() == 0 && w.b.apps.first().is_some_and(|b| b.closed)
    });
    assert_eq!(w.b.stack.connections(), 1, "b's side waits in TIME-WAIT");
    let start = w.now;
    let id =
        w.a.stack
            .connect(w.now, None, server(), RxMode::Stream)
            .unwrap();
    w.a.apps.push(App::new(id, b"second".to_vec()));
    w.run_until(2000 * MS, |w| {
        w.b.apps.get(1).is_some_and(|b| b.got == b"second")
    });
    assert!(w.now - start < 100 * MS, "no wait for the old TIME-WAIT");
}

/// Collects raw pieces by offset, per connection, and what became in order.
#[derive(Default)]
struct Pieces {
    by_conn: BTreeMap<ConnId, (BTreeMap<u64, Vec<u8>>, u64)>,
    out_of_order: usize,
}

impl StackReceiver for Pieces {
    fn arrive(&mut self, id: ConnId, piece: Arrival<'_>) -> bool {
        self.out_of_order += usize::from(!piece.in_order);
        let e = self.by_conn.entry(id).or_default();
        e.0.insert(piece.offset, piece.data.to_vec());
        true
    }

    fn in_order(&mut self, id: ConnId, end: u64) {
        self.by_conn.entry(id).or_default().1 = end;
    }
}

#[test]
fn raw_connections_hand_every_piece_up_with_its_offset() {
    let imp = Impairments {
        reorder: 0.2,
        ..Impairments::default()
    };
    let mut wire = Wire::new(imp, 8);
    let mut a = Stack::new(cfg(), &[ip_a()]);
    let mut b = Stack::new(cfg(), &[ip_b()]);
    let l = b.listen(server(), 4, RxMode::Raw).unwrap();
    let data = pattern(60_000, 9);
    let id = a
        .connect(Duration::ZERO, None, server(), RxMode::Stream)
        .unwrap();
    let mut pieces = Pieces::default();
    let (mut sent, mut now, mut bid, mut released) = (0, Duration::ZERO, None, 0u64);
    let mut buf = [0u8; 1500];
    for _ in 0..100_000 {
        if sent < data.len()
            && let Ok(n) = a.send(id, &data[sent..])
        {
            sent += n;
        }
        if bid.is_none() {
            bid = b.accept(l).unwrap();
        }
        // The user of raw pieces gives back what became in order.
        if let Some(bid) = bid {
            let end = pieces.by_conn.get(&bid).map_or(0, |e| e.1);
            b.release(bid, (end - released) as usize).unwrap();
            released = end;
            if released == data.len() as u64 {
                break;
            }
        }
        for (end, s) in [(End::A, &mut a), (End::B, &mut b)] {
            while let Some(n) = s.poll_transmit(now, &mut buf) {
                wire.send(end, now, &buf[..n]);
            }
        }
        let next = [wire.next_arrival(), a.poll_timeout(), b.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
            .unwrap();
        now = now.max(next);
        while let Some((to, p)) = wire.poll_arrival(now) {
            let p = p.to_vec();
            match to {
                End::A => a.handle_packet(now, &p, &mut NoRaw).unwrap(),
                End::B => b.handle_packet(now, &p, &mut pieces).unwrap(),
            }
        }
        a.handle_timeout(now);
        b.handle_timeout(now);
    }
    let (got, end) = &pieces.by_conn[&bid.unwrap()];
    assert_eq!(*end, data.len() as u64);
    let mut stream = Vec::new();
    for (off, p) in got {
        assert_eq!(
            *off,
            stream.len() as u64,
            "pieces tile the stream, none twice"
        );
        stream.extend_from_slice(p);
    }
    assert_eq!(stream, data);
    assert!(pieces.out_of_order > 0, "reordering handed pieces up early");
    assert_eq!(
        b.read(bid.unwrap(), &mut [0; 8]),
        Err(StackError::WouldBlock)
    );
}

#[test]
fn initial_sequence_numbers_differ_per_peer_and_per_secret() {
    let now = Duration::ZERO;
    let isn = |secret: u64, port: u16| {
        let mut s = Stack::new(StackConfig { secret, ..cfg() }, &[ip_a()]);
        s.connect(now, None, SocketAddrV4::new(ip_b(), port), RxMode::Stream)
            .unwrap();
        let mut buf = [0u8; 100];
        let n = s.poll_transmit(now, &mut buf).unwrap();
        Segment::parse(&buf[..n]).unwrap().seq
    };
    assert_ne!(isn(1, 7), isn(1, 8));
    assert_ne!(isn(1, 7), isn(2, 7));
    assert_eq!(isn(1, 7), isn(1, 7));
}
