//! Arbitrary input for one connection, for the `tcp_input` fuzz target (`fuzz/`) and the
//! replay of its seeds in `cargo test`: the peer is the fuzzer. The first octets choose
//! a configuration (MSS, buffers, SACK, window scaling, delayed ACKs, timers) and whether
//! the connection connects or listens; the rest is a script of events. Most packets are
//! built to fit the connection's own numbers (sequence numbers near what it expects,
//! acknowledgments of what it sent, SACK blocks near them, payloads, options), so that
//! the fuzzer reaches every state and recovery path; others are raw octets, or built ones
//! with a bit flipped, for the parser. Time moves, timers fire, the user sends, reads,
//! closes and aborts.
//!
//! After every event: every packet the connection emits parses and comes from its
//! address, emitting stops, events are bounded, what is unacknowledged stays within the
//! send buffer, and a connection with data to deliver always has a timer armed (no
//! stall). Any breach panics, which is what the fuzzer looks for.

use crate::config::Config;
use crate::conn::{Connection, State};
use crate::reassembly::Reassembly;
use crate::segment::{Flags, Options, SackBlock, Segment};
use crate::seq::SeqNum;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

const LOCAL: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 1000);
const REMOTE: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 2000);

/// Packets one event may make the connection emit at most (a window of the smallest
/// segments, and more): beyond, emitting does not stop.
const MAX_EMITTED: usize = 100_000;

/// Reads the script; an exhausted script reads as zeros.
struct Script<'a>(&'a [u8]);

impl Script<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    fn u32(&mut self) -> u32 {
        u32::from(self.u16()) | (u32::from(self.u16()) << 16)
    }

    fn bytes(&mut self, n: usize) -> &[u8] {
        let (head, rest) = self.0.split_at(n.min(self.0.len()));
        self.0 = rest;
        head
    }
}

/// What the fuzzer, as the peer, knows of the exchange.
struct Peer {
    /// The peer's next sequence number: its packets in order advance it.
    nxt: SeqNum,
    /// Our ISS, and how far past it we have sent.
    iss: SeqNum,
    sent: u32,
}

/// Runs one script; panics when an invariant breaks.
pub fn connection_input(data: &[u8]) {
    let mut s = Script(data);
    let flags = s.u8();
    let cfg = config(flags, &mut s);
    let iss = SeqNum(s.u32());
    let mut peer = Peer {
        nxt: SeqNum(s.u32()),
        iss,
        sent: 0,
    };
    let mut c = if flags & 1 == 0 {
        Connection::connect(cfg.clone(), LOCAL, REMOTE, iss)
    } else {
        Connection::listen(cfg.clone(), LOCAL, iss)
    };
    let mut rx = Reassembly::for_connection(&c);
    let mut now = Duration::ZERO;
    let mut packet = vec![0u8; usize::from(cfg.mss.max(64)) + 100];
    let mut out = vec![0u8; usize::from(cfg.mss.max(64)) + 40];
    let mut read = vec![0u8; 4096];
    let payload: Vec<u8> = (0..u32::from(u16::MAX)).map(|i| (i * 7) as u8).collect();
    drain(&mut c, now, &mut out, &mut peer);
    while !s.0.is_empty() {
        match s.u8() % 12 {
            0..=4 => {
                let n = build(&mut s, &mut peer, &payload, &mut packet);
                let _ = c.handle_packet(now, &packet[..n], &mut rx);
            }
            5 => {
                // A built packet with one bit flipped: the checksums must catch it.
                let n = build(&mut s, &mut peer, &payload, &mut packet);
                let bit = usize::from(s.u16()) % (n * 8);
                packet[bit / 8] ^= 1 << (bit % 8);
                assert!(c.handle_packet(now, &packet[..n], &mut rx).is_err());
            }
            6 => {
                let len = usize::from(s.u8());
                let raw = s.bytes(len).to_vec();
                let _ = c.handle_packet(now, &raw, &mut rx);
            }
            7 => {
                let step = u64::from(s.u16());
                now += if s.u8() & 1 == 0 {
                    Duration::from_micros(step)
                } else {
                    Duration::from_millis(step)
                };
                if c.poll_timeout().is_some_and(|t| t <= now) {
                    c.handle_timeout(now);
                }
            }
            8 => {
                if let Some(t) = c.poll_timeout() {
                    now = now.max(t);
                    c.handle_timeout(now);
                }
            }
            9 => {
                let n = usize::from(s.u16());
                let data = &payload[..n];
                let _ = if s.u8() & 1 == 0 {
                    c.send(data).map(|_| ())
                } else {
                    c.send_record(data)
                };
            }
            10 => while rx.read_from(&mut c, &mut read) > 0 {},
            _ => {
                if s.u8() % 8 == 0 {
                    c.abort();
                } else {
                    c.close();
                }
            }
        }
        drain(&mut c, now, &mut out, &mut peer);
    }
}

/// The configuration the script's first octets choose.
fn config(flags: u8, s: &mut Script<'_>) -> Config {
    let base = if flags & 2 == 0 {
        Config::default()
    } else {
        Config::fast_link()
    };
    let mss = [64, 536, 1000, 1460, 8960][usize::from(s.u8() % 5)];
    let buffer = |k: u8| 1024 * (1 + usize::from(k % 64));
    Config {
        mss,
        send_buffer: buffer(s.u8()),
        recv_buffer: buffer(s.u8()) as u32,
        max_records: 1 + usize::from(s.u8()),
        max_ooo_ranges: 1 + usize::from(s.u8() % 32),
        sack: flags & 4 == 0,
        window_scale: flags & 8 == 0,
        delayed_ack: (flags & 16 == 0).then_some(base.delayed_ack.unwrap_or_default()),
        keepalive: (flags & 32 != 0).then_some(crate::Keepalive {
            idle: Duration::from_millis(100),
            interval: Duration::from_millis(10),
            probes: 3,
        }),
        ..base
    }
}

/// A segment from the peer, written into `packet`: sequence and acknowledgment near
/// what the connection expects and has sent (or anywhere), flags, window, options,
/// payload, all from the script. Returns its length.
fn build(s: &mut Script<'_>, peer: &mut Peer, payload: &[u8], packet: &mut [u8]) -> usize {
    let mut flags = Flags::from_bits_retain(s.u8());
    if s.u8() & 3 != 0 {
        flags = (flags & (Flags::SYN | Flags::FIN | Flags::RST | Flags::PSH)) | Flags::ACK;
    }
    let how = s.u8();
    let seq = match how & 3 {
        0 => SeqNum(s.u32()),
        _ => peer.nxt + (i32::from(s.u16() as i16) * 16) as u32,
    };
    let ack = match (how >> 2) & 3 {
        0 => SeqNum(s.u32()),
        _ => peer.iss + (u32::from(s.u16()) % (peer.sent + 2)),
    };
    let window = s.u16();
    let len = usize::from(s.u16()) % 9100;
    let mut options = Options::default();
    let opts = s.u8();
    if opts & 1 != 0 {
        options.mss = Some(s.u16());
    }
    if opts & 2 != 0 {
        options.window_scale = Some(s.u8() % 16);
    }
    options.sack_permitted = opts & 4 != 0;
    for _ in 0..(opts >> 3) % 5 {
        let left = ack + (i32::from(s.u16() as i16) * 8) as u32;
        let right = left + u32::from(s.u16());
        options.sack.push(SackBlock { left, right });
    }
    let seg = Segment {
        src: REMOTE,
        dst: LOCAL,
        seq,
        ack,
        flags,
        window,
        options,
        payload: &payload[..len],
    };
    let (n, seg_len) = match seg.emit(packet) {
        Ok(n) => (n, seg.seq_len()),
        Err(_) => {
            // Too many options beside the payload, or too long: the bare header.
            let bare = Segment {
                options: Options::default(),
                payload: &[],
                ..seg
            };
            (
                bare.emit(packet).expect("a bare segment fits"),
                bare.seq_len(),
            )
        }
    };
    if seq == peer.nxt && !flags.contains(Flags::RST) {
        peer.nxt = seq + seg_len;
    }
    n
}

/// Takes every packet the connection has to send and the events, checking each.
fn drain(c: &mut Connection, now: Duration, out: &mut [u8], peer: &mut Peer) {
    let mut emitted = 0;
    while let Some(n) = c.poll_transmit(now, out) {
        emitted += 1;
        assert!(emitted <= MAX_EMITTED, "emitting does not stop");
        let seg = Segment::parse(&out[..n]).expect("every emitted packet parses");
        assert_eq!(seg.src, LOCAL);
        if seg.flags.contains(Flags::SYN) {
            peer.iss = seg.seq;
            peer.sent = 0;
            if seg.flags.contains(Flags::ACK) {
                // Our SYN-ACK answers the peer's SYN: its next number follows it.
                peer.nxt = seg.ack;
            }
        }
        let end = (seg.seq + seg.seq_len()).delta(peer.iss);
        if end > 0 {
            peer.sent = peer.sent.max(end as u32);
        }
    }
    let mut events = 0;
    while c.poll_event().is_some() {
        events += 1;
    }
    assert!(events <= 8, "events are bounded");
    // (Counting our SYN while it is unacknowledged.)
    assert!(c.unacknowledged() <= c.config().send_buffer as u64 + 1);
    let busy = matches!(
        c.state(),
        State::SynSent
            | State::SynReceived
            | State::Established
            | State::CloseWait
            | State::FinWait1
            | State::Closing
            | State::LastAck
    );
    if busy && c.unacknowledged() > 0 {
        assert!(
            c.poll_timeout().is_some(),
            "data to deliver and no timer: {c:#?}"
        );
    }
}
