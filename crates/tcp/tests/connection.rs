//! The connection state machine over a clean in-memory link: the handshakes (active,
//! passive, simultaneous), option negotiation, data both ways through a small window,
//! records kept whole in segments, out-of-order pieces handed up with their offsets,
//! the closes (graceful, simultaneous, TIME-WAIT), resets and their validation.

mod common;

use common::*;
use softrnic_tcp::{
    Arrival, Config, Connection, Event, Flags, Options, Receiver, Segment, SendError, SeqNum, State,
};
use std::time::Duration;

#[test]
fn three_way_handshake_negotiates_mss_window_scale_and_sack() {
    let mut n = Net::new(
        Config { mss: 1400, ..cfg() },
        Config {
            mss: 1000,
            recv_buffer: 1 << 20,
            ..cfg()
        },
    );
    n.established();
    let syn = &n.sent(Side::A, |l| l.flags == Flags::SYN)[0];
    assert_eq!(syn.seq, SeqNum(0xffff_f000));
    assert_eq!(
        (syn.mss, syn.wscale, syn.sack_permitted),
        (Some(1400), Some(0), true)
    );
    let synack = &n.sent(Side::B, |l| l.flags == Flags::SYN | Flags::ACK)[0];
    assert_eq!(synack.ack, SeqNum(0xffff_f001));
    // 1 MiB needs a shift of 5 to fit the 16-bit field.
    assert_eq!(
        (synack.mss, synack.wscale, synack.sack_permitted),
        (Some(1000), Some(5), true)
    );
    assert_eq!(n.a.conn.max_payload(), 1000);
    assert_eq!(n.b.conn.max_payload(), 1000);
    assert_eq!(n.a.events, [Event::Established]);
    assert_eq!(n.b.events, [Event::Established]);
    assert_eq!(n.a.states, [State::SynSent, State::Established]);
    assert_eq!(
        n.b.states,
        [State::Listen, State::SynReceived, State::Established]
    );
    // b's windows after the handshake are scaled: one octet taken of 1 MiB, >> 5.
    n.a.outbox.extend(b"x");
    n.run_until(1000 * MS, |n| {
        n.b.got.len() == 1 && n.sent(Side::B, |l| l.flags == Flags::ACK).len() == 1
    });
    assert_eq!(
        n.sent(Side::B, |l| l.flags == Flags::ACK)[0].window,
        (((1u32 << 20) - 1) >> 5) as u16
    );
}

#[test]
fn options_are_not_used_unless_both_offer_them() {
    let mut n = Net::new(
        cfg(),
        Config {
            sack: false,
            window_scale: false,
            ..cfg()
        },
    );
    n.established();
    let synack = &n.sent(Side::B, |l| l.flags.contains(Flags::SYN))[0];
    assert_eq!((synack.wscale, synack.sack_permitted), (None, false));
    // Without scaling, a's window field says its whole 16 KiB buffer unscaled.
    n.a.outbox.extend(pattern(50_000, 1));
    n.run_until(5000 * MS, |n| n.b.got.len() == 50_000);
    assert_bytes(&n.b.got, &pattern(50_000, 1));
    assert!(n.log.iter().all(|l| l.sack.is_empty()));
}

#[test]
fn data_both_ways_through_a_small_window() {
    let mut n = Net::new(cfg(), cfg());
    n.established();
    let (x, y) = (pattern(300_000, 2), pattern(200_001, 3));
    n.a.outbox.extend(&x);
    n.b.outbox.extend(&y);
    n.run_until(60_000 * MS, |n| {
        n.b.got.len() == x.len() && n.a.got.len() == y.len()
    });
    assert_bytes(&n.b.got, &x);
    assert_bytes(&n.a.got, &y);
    // Nothing was lost, nothing sent twice.
    assert_eq!(n.a.conn.stats().retransmitted_segments, 0);
    assert_eq!(n.a.conn.stats().bytes_out, x.len() as u64);
    assert_eq!(n.b.conn.stats().bytes_in, x.len() as u64);
    // No segment carries more than the MSS.
    assert!(n.log.iter().all(|l| l.len <= 1000));
}

#[test]
fn a_receiver_that_does_not_read_closes_the_window() {
    let mut n = Net::new(cfg(), cfg());
    n.established();
    n.b.reading = false;
    n.a.outbox.extend(pattern(100_000, 4));
    // a fills b's 16 KiB window and stops.
    n.run_until(5000 * MS, |n| n.b.rx.readable() == 16 * 1024);
    for _ in 0..50 {
        n.step();
    }
    assert_eq!(n.b.rx.readable(), 16 * 1024);
    assert!(n.log.iter().any(|l| l.from == Side::B && l.window == 0));
    n.b.reading = true;
    n.run_until(60_000 * MS, |n| n.b.got.len() == 100_000);
    assert_bytes(&n.b.got, &pattern(100_000, 4));
}

#[test]
fn time_held_back_by_the_peers_window_is_counted() {
    let mut n = Net::new(cfg(), cfg());
    n.established();
    n.b.reading = false;
    n.a.outbox.extend(pattern(100_000, 5));
    n.run_until(5000 * MS, |n| n.b.rx.readable() == 16 * 1024);
    let closed = n.now;
    let before = n.a.conn.stats().rwnd_limited_us;
    // Held back for three seconds of window probes, then the reader drains it all.
    n.run_until(10_000 * MS, |n| n.now >= closed + 3000 * MS);
    n.b.reading = true;
    n.run_until(60_000 * MS, |n| n.b.got.len() == 100_000);
    assert_bytes(&n.b.got, &pattern(100_000, 5));
    let s = n.a.conn.stats();
    assert_eq!(
        s.rwnd_hole_limited_us, 0,
        "nothing was lost: the reader, not a hole, held the window"
    );
    assert!(
        s.rwnd_limited_us >= before + 3_000_000
            && s.rwnd_limited_us + s.cwnd_limited_us + s.sndbuf_limited_us
                <= n.now.as_micros() as u64,
        "{} us held back by the window ({before} before it closed) in {:?}",
        s.rwnd_limited_us,
        n.now
    );
}

#[test]
fn time_the_peers_window_is_held_by_a_hole_is_counted_as_such() {
    // b offers 4 KiB: four segments. The first is lost, and its first three
    // retransmissions too (a loss probe, then timeouts from 50 ms on), while b holds
    // the three after it: the window counts from the hole, so a waits for it, and
    // for nothing else (b reads at once).
    let small = Config {
        recv_buffer: 4096,
        ..cfg()
    };
    let mut n = Net::new(cfg(), small);
    n.established();
    let mut first: Option<softrnic_tcp::SeqNum> = None;
    let mut dropped = 0;
    n.filter = Some(Box::new(move |from, seg| {
        if from != Side::A || seg.payload.is_empty() {
            return Verdict::Pass;
        }
        let lost = *first.get_or_insert(seg.seq) == seg.seq && dropped < 4;
        dropped += usize::from(lost);
        if lost { Verdict::Drop } else { Verdict::Pass }
    }));
    n.a.outbox.extend(pattern(20_000, 12));
    n.run_until(60_000 * MS, |n| n.b.got.len() == 20_000);
    assert_bytes(&n.b.got, &pattern(20_000, 12));
    let s = n.a.conn.stats();
    assert!(
        s.rwnd_hole_limited_us >= 100_000
            && s.rwnd_hole_limited_us <= s.rwnd_limited_us
            && s.rwnd_hole_limited_us >= s.rwnd_limited_us * 9 / 10,
        "{} us held back by a hole, {} by the window",
        s.rwnd_hole_limited_us,
        s.rwnd_limited_us
    );
}

#[test]
fn time_held_back_by_a_full_send_buffer_is_counted() {
    // 8 KiB of send buffer, less than the initial congestion window (ten 1000-octet
    // segments) and the peer's window: what holds the sender back is its own buffer,
    // with octets the peer has not acknowledged yet, for most of each 400 ms round
    // trip.
    let slow = Config {
        send_buffer: 8 * 1024,
        rto_initial: 3000 * MS,
        rto_min: 3000 * MS,
        ..cfg()
    };
    let mut n = Net::new(slow.clone(), slow);
    n.delay = 200 * MS;
    n.established();
    let start = n.now;
    // Records of 3000 octets: two fill 6000 of the 8192, and the third is refused
    // while room for a whole segment is left.
    let data = pattern(99_000, 6);
    let mut queued = 0;
    while n.b.got.len() < data.len() && n.now < start + 60_000 * MS {
        if queued < data.len() && n.a.conn.send_record(&data[queued..queued + 3000]).is_ok() {
            queued += 3000;
            continue;
        }
        n.step();
    }
    assert_bytes(&n.b.got, &data);
    let s = n.a.conn.stats();
    let elapsed = (n.now - start).as_micros() as u64;
    assert!(
        s.sndbuf_limited_us >= elapsed * 3 / 4 && s.sndbuf_limited_us <= elapsed,
        "{} us held back by the send buffer in {elapsed} us",
        s.sndbuf_limited_us,
    );
    assert_eq!((s.cwnd_limited_us, s.rwnd_limited_us), (0, 0));
}

#[test]
fn records_go_out_whole() {
    let mut n = Net::new(cfg(), cfg());
    n.established();
    let mss = n.a.conn.max_payload();
    // Records of 700 octets: one per segment (two would exceed 1000).
    let records: Vec<Vec<u8>> = (0..40).map(|i| pattern(700, 100 + i)).collect();
    let mut queued = 0;
    let mut sent_all = Vec::new();
    while queued < records.len() {
        match n.a.conn.send_record(&records[queued]) {
            Ok(()) => {
                sent_all.extend_from_slice(&records[queued]);
                queued += 1
            }
            Err(SendError::Full) => {
                n.step();
            }
            Err(e) => panic!("{e}"),
        }
    }
    n.run_until(10_000 * MS, |n| n.b.got.len() == sent_all.len());
    assert_bytes(&n.b.got, &sent_all);
    let data = n.sent(Side::A, |l| l.len > 0);
    assert!(
        data.iter().all(|l| l.len == 700),
        "{:?}",
        data.iter().map(|l| l.len).collect::<Vec<_>>()
    );
    // Records of 300: three to a segment, never cut.
    let before = n.log.len();
    let small: Vec<u8> = (0..30).flat_map(|i| pattern(300, 500 + i)).collect();
    for r in small.chunks(300) {
        n.a.conn.send_record(r).unwrap();
    }
    let total = sent_all.len() + small.len();
    n.run_until(10_000 * MS, |n| n.b.got.len() == total);
    let lens: Vec<usize> = n.log[before..]
        .iter()
        .filter(|l| l.from == Side::A && l.len > 0)
        .map(|l| l.len)
        .collect();
    assert!(lens.iter().all(|&l| l % 300 == 0 && l <= mss), "{lens:?}");
    assert_eq!(lens.iter().sum::<usize>(), small.len());
    // A record larger than a segment is cut at the segment size; one larger than the
    // buffer is refused whole.
    assert_eq!(
        n.a.conn.send_record(&pattern(20_000, 9)),
        Err(SendError::Full)
    );
    let before = n.log.len();
    n.a.conn.send_record(&pattern(2500, 9)).unwrap();
    n.run_until(10_000 * MS, |n| n.b.got.len() == total + 2500);
    let lens: Vec<usize> = n.log[before..]
        .iter()
        .filter(|l| l.from == Side::A && l.len > 0)
        .map(|l| l.len)
        .collect();
    assert_eq!(lens, [1000, 1000, 500]);
}

/// Records what the connection hands up, piece by piece.
#[derive(Default)]
struct Pieces {
    seen: Vec<(u64, Vec<u8>, bool)>,
    in_order_end: u64,
}

impl Receiver for Pieces {
    fn arrive(&mut self, p: Arrival<'_>) -> bool {
        self.seen.push((p.offset, p.data.to_vec(), p.in_order));
        true
    }
    fn in_order(&mut self, end: u64) {
        self.in_order_end = end;
    }
}

fn data_segment<'a>(seq: SeqNum, ack: SeqNum, payload: &'a [u8]) -> Segment<'a> {
    Segment {
        src: addr_a(),
        dst: addr_b(),
        seq,
        ack,
        flags: Flags::ACK,
        window: 1000,
        options: Options::default(),
        payload,
    }
}

/// Handshake by hand with b, returning b and the sequence numbers a would use.
fn hand_established() -> (Connection, SeqNum, SeqNum) {
    let mut b = Connection::listen(cfg(), addr_b(), SeqNum(5000));
    let mut syn = data_segment(SeqNum(100), SeqNum(0), b"");
    syn.flags = Flags::SYN;
    syn.options.sack_permitted = true;
    syn.options.mss = Some(1000);
    b.handle_segment(Duration::ZERO, &syn, &mut Pieces::default());
    let mut buf = [0u8; 1500];
    let n = b.poll_transmit(Duration::ZERO, &mut buf).unwrap();
    let synack = Segment::parse(&buf[..n]).unwrap();
    assert_eq!(synack.flags, Flags::SYN | Flags::ACK);
    let ack = data_segment(SeqNum(101), synack.seq + 1, b"");
    b.handle_segment(MS, &ack, &mut Pieces::default());
    assert_eq!(b.state(), State::Established);
    (b, SeqNum(101), synack.seq + 1)
}

fn drain(c: &mut Connection) -> Vec<Segment<'static>> {
    let mut out = Vec::new();
    let mut buf = [0u8; 1500];
    while let Some(n) = c.poll_transmit(10 * MS, &mut buf) {
        let bytes: &'static [u8] = Box::leak(buf[..n].to_vec().into_boxed_slice());
        out.push(Segment::parse(bytes).unwrap());
    }
    out
}

#[test]
fn out_of_order_segments_go_up_with_their_offsets_and_are_sacked() {
    let (mut b, seq, ack) = hand_established();
    let mut p = Pieces::default();
    let body = pattern(3000, 7);
    // Third, then first, then an overlapping second.
    b.handle_segment(
        2 * MS,
        &data_segment(seq + 2000, ack, &body[2000..]),
        &mut p,
    );
    let acks = drain(&mut b);
    assert_eq!(
        acks.len(),
        1,
        "an out-of-order segment is acknowledged at once"
    );
    assert_eq!(acks[0].ack, seq);
    assert_eq!(
        acks[0].options.sack.as_slice(),
        [softrnic_tcp::SackBlock {
            left: seq + 2000,
            right: seq + 3000
        }]
    );
    b.handle_segment(3 * MS, &data_segment(seq, ack, &body[..1000]), &mut p);
    b.handle_segment(
        4 * MS,
        &data_segment(seq + 500, ack, &body[500..2500]),
        &mut p,
    );
    assert_eq!(
        p.seen,
        [
            (2000, body[2000..].to_vec(), false),
            (0, body[..1000].to_vec(), true),
            (1000, body[1000..2000].to_vec(), true),
        ],
        "only new octets go up, once"
    );
    assert_eq!(p.in_order_end, 3000, "the hole closed");
    let acks = drain(&mut b);
    assert_eq!(acks.last().unwrap().ack, seq + 3000);
    assert_eq!(
        acks.last().unwrap().options.sack.as_slice(),
        [softrnic_tcp::SackBlock {
            left: seq + 500,
            right: seq + 1000
        }],
        "the octets that came twice, as a D-SACK block (below the ACK), and no other"
    );
    assert_eq!(b.stats().dsacks_out, 1);
}

/// An acknowledgment of a number before our ISS is refused like any too-old one, even
/// while SND.UNA is still within a window of the ISS (found by fuzzing: it was taken
/// as acknowledging nearly 2^64 octets).
#[test]
fn an_ack_before_our_iss_is_refused() {
    let (mut b, seq, ack) = hand_established();
    let mut p = Pieces::default();
    b.send(b"hello").unwrap();
    let sent = drain(&mut b);
    assert_eq!(sent.len(), 1);
    let before = b.stats().dropped_unacceptable;
    b.handle_segment(2 * MS, &data_segment(seq, ack - 1000, b""), &mut p);
    assert_eq!(b.stats().dropped_unacceptable, before + 1);
    let answer = drain(&mut b);
    assert_eq!(answer.len(), 1, "an ACK answers it");
    assert_eq!(answer[0].ack, seq);
    assert_eq!(b.unacknowledged(), 5);
    b.handle_segment(3 * MS, &data_segment(seq, ack + 5, b""), &mut p);
    assert_eq!(b.unacknowledged(), 0);
    assert_eq!(b.state(), State::Established);
}

/// A peer that SACKs data and then acknowledges only part of it (it reneged): at the
/// timeout, the segment at the left edge goes again whatever was SACKed of it (RFC 2018
/// section 8), and the timer keeps running (found by fuzzing: nothing was resent and no
/// timer was left).
#[test]
fn a_peer_that_reneges_on_a_sack_gets_the_left_edge_again() {
    let (mut b, seq, ack) = hand_established();
    let mut p = Pieces::default();
    let wide = |acked: u32| Segment {
        window: 60_000,
        ..data_segment(seq, ack + acked, b"")
    };
    b.handle_segment(MS, &wide(0), &mut p);
    b.send(&pattern(3000, 3)).unwrap();
    assert_eq!(drain(&mut b).len(), 3);
    let mut sack = wide(0);
    sack.options.sack.push(softrnic_tcp::SackBlock {
        left: ack + 1000,
        right: ack + 3000,
    });
    b.handle_segment(2 * MS, &sack, &mut p);
    b.handle_segment(3 * MS, &wide(1500), &mut p);
    drain(&mut b);
    let mut again = Vec::new();
    while b.stats().timeouts == 0 {
        let at = b.poll_timeout().expect("a timer runs");
        b.handle_timeout(at);
        again.extend(drain(&mut b));
    }
    assert_eq!(again.len(), 1, "{again:?}");
    assert_eq!(again[0].seq, ack + 1500);
    assert_eq!(again[0].payload, &pattern(3000, 3)[1500..2000]);
    assert!(b.poll_timeout().is_some(), "the timer still runs");
    assert_eq!(b.stats().timeouts, 1);
}

/// Data that arrives a second time is reported in the next ACK as a D-SACK block
/// (RFC 2883): the duplicate octets first, then the out-of-order range holding them if
/// there is one, then the other ranges; once only.
#[test]
fn duplicates_are_reported_as_dsack_blocks() {
    let (mut b, seq, ack) = hand_established();
    let mut p = Pieces::default();
    let body = pattern(6000, 9);
    let block = |l: u32, r: u32| softrnic_tcp::SackBlock {
        left: seq + l,
        right: seq + r,
    };
    b.handle_segment(2 * MS, &data_segment(seq, ack, &body[..1000]), &mut p);
    b.handle_segment(
        2 * MS,
        &data_segment(seq + 1000, ack, &body[1000..2000]),
        &mut p,
    );
    drain(&mut b);
    // Wholly below RCV.NXT: not acceptable, but reported.
    b.handle_segment(
        3 * MS,
        &data_segment(seq + 1000, ack, &body[1000..2000]),
        &mut p,
    );
    let acks = drain(&mut b);
    assert_eq!(acks.len(), 1);
    assert_eq!(acks[0].ack, seq + 2000);
    assert_eq!(acks[0].options.sack.as_slice(), [block(1000, 2000)]);
    // Two out-of-order ranges, then a duplicate inside the older one.
    b.handle_segment(
        4 * MS,
        &data_segment(seq + 3000, ack, &body[3000..4000]),
        &mut p,
    );
    b.handle_segment(
        4 * MS,
        &data_segment(seq + 5000, ack, &body[5000..]),
        &mut p,
    );
    drain(&mut b);
    b.handle_segment(
        5 * MS,
        &data_segment(seq + 3000, ack, &body[3000..4000]),
        &mut p,
    );
    let acks = drain(&mut b);
    assert_eq!(acks.len(), 1);
    assert_eq!(acks[0].ack, seq + 2000);
    assert_eq!(
        acks[0].options.sack.as_slice(),
        [block(3000, 4000), block(3000, 4000), block(5000, 6000)],
        "the duplicate, the range holding it, the other range"
    );
    // The next ACK (the hole filled) carries no D-SACK block any more.
    b.handle_segment(
        6 * MS,
        &data_segment(seq + 2000, ack, &body[2000..3000]),
        &mut p,
    );
    let acks = drain(&mut b);
    assert_eq!(acks.last().unwrap().ack, seq + 4000);
    assert_eq!(
        acks.last().unwrap().options.sack.as_slice(),
        [block(5000, 6000)]
    );
    assert_eq!(b.stats().dsacks_out, 2);
    assert_eq!(p.in_order_end, 4000);
}

/// Out-of-order data is answered by a bare ACK (a duplicate ACK, with SACK blocks)
/// even when data is waiting to go: an ACK riding on a data segment is not a duplicate
/// ACK to the peer, which would then wait for its timer. (Found against Linux.)
#[test]
fn out_of_order_data_is_answered_by_a_bare_ack_before_any_data() {
    let (mut b, seq, ack) = hand_established();
    b.send(&pattern(5000, 1)).unwrap();
    let mut p = Pieces::default();
    let body = pattern(2000, 2);
    b.handle_segment(
        2 * MS,
        &data_segment(seq + 1000, ack, &body[1000..]),
        &mut p,
    );
    let out = drain(&mut b);
    assert_eq!(out[0].payload.len(), 0, "a bare ACK first");
    assert_eq!(out[0].ack, seq);
    assert_eq!(
        out[0].options.sack.as_slice(),
        [softrnic_tcp::SackBlock {
            left: seq + 1000,
            right: seq + 2000
        }]
    );
    assert!(
        out[1..].iter().all(|s| !s.payload.is_empty()),
        "then the data"
    );
    assert!(out.len() > 1);
}

#[test]
fn a_hostile_peer_cannot_make_the_receiver_hold_more() {
    let (mut b, seq, ack) = hand_established();
    let mut p = Pieces::default();
    // Beyond the 16 KiB window: dropped, never offered.
    b.handle_segment(2 * MS, &data_segment(seq + 16 * 1024, ack, b"x"), &mut p);
    assert!(p.seen.is_empty());
    assert_eq!(b.stats().dropped_unacceptable, 1);
    // Many one-octet holes: only max_ooo_ranges (32) ranges are kept.
    for i in 0..100u32 {
        b.handle_segment(2 * MS, &data_segment(seq + 2 + 2 * i, ack, b"y"), &mut p);
    }
    assert_eq!(p.seen.len(), 32);
    assert_eq!(b.stats().bytes_refused, 68);
    // A segment reaching back over the SYN is trimmed to what is new.
    b.handle_segment(2 * MS, &data_segment(seq - 10, ack, &[1u8; 11]), &mut p);
    assert_eq!(p.seen.last().unwrap(), &(0, vec![1u8], true));
}

#[test]
fn graceful_close_and_time_wait() {
    let mut n = Net::new(cfg(), cfg());
    n.established();
    n.a.outbox.extend(pattern(10_000, 5));
    n.a.close_when_sent = true;
    n.run_until(5000 * MS, |n| {
        n.b.events.contains(&Event::PeerClosed) && n.b.got.len() == 10_000
    });
    assert_bytes(&n.b.got, &pattern(10_000, 5));
    assert_eq!(n.b.conn.state(), State::CloseWait);
    assert_eq!(
        n.b.conn.send(b"late"),
        Ok(4),
        "a half-closed peer still sends"
    );
    n.b.conn.close();
    n.run_until(5000 * MS, |n| n.b.conn.state() == State::Closed);
    assert_bytes(&n.a.got, b"late");
    assert_eq!(n.a.conn.state(), State::TimeWait);
    let entered = n.now;
    n.run_out(5000 * MS);
    assert_eq!(n.a.conn.state(), State::Closed);
    assert!(
        n.now >= entered + 1000 * MS - 2 * MS,
        "TIME-WAIT lasts 2 MSL"
    );
    assert_eq!(
        n.a.states,
        [
            State::SynSent,
            State::Established,
            State::FinWait1,
            State::FinWait2,
            State::TimeWait,
            State::Closed
        ]
    );
    assert_eq!(
        n.b.states,
        [
            State::Listen,
            State::SynReceived,
            State::Established,
            State::CloseWait,
            State::LastAck,
            State::Closed
        ]
    );
    assert_eq!(
        n.a.events,
        [Event::Established, Event::PeerClosed, Event::Closed]
    );
    assert_eq!(
        n.b.events,
        [Event::Established, Event::PeerClosed, Event::Closed]
    );
    assert_eq!(n.a.conn.send(b"x"), Err(SendError::Closed));
}

#[test]
fn simultaneous_close_goes_through_closing() {
    let mut n = Net::new(cfg(), cfg());
    n.established();
    n.a.conn.close();
    n.b.conn.close();
    n.run_out(5000 * MS);
    for p in [&n.a, &n.b] {
        assert!(
            p.states.ends_with(&[
                State::FinWait1,
                State::Closing,
                State::TimeWait,
                State::Closed
            ]),
            "{:?}",
            p.states
        );
        assert!(p.events.ends_with(&[Event::PeerClosed, Event::Closed]));
    }
}

#[test]
fn simultaneous_open() {
    let a = Connection::connect(cfg(), addr_a(), addr_b(), SeqNum(1));
    let b = Connection::connect(cfg(), addr_b(), addr_a(), SeqNum(u32::MAX));
    let mut n = Net::with(a, b);
    n.established();
    for p in [&n.a, &n.b] {
        assert_eq!(
            p.states,
            [State::SynSent, State::SynReceived, State::Established]
        );
    }
    n.a.outbox.extend(pattern(5000, 1));
    n.b.outbox.extend(pattern(5000, 2));
    n.run_until(5000 * MS, |n| {
        n.a.got.len() == 5000 && n.b.got.len() == 5000
    });
    assert_bytes(&n.b.got, &pattern(5000, 1));
    assert_bytes(&n.a.got, &pattern(5000, 2));
}

#[test]
fn abort_resets_the_peer() {
    let mut n = Net::new(cfg(), cfg());
    n.established();
    n.a.outbox.extend(pattern(5000, 1));
    n.step();
    n.a.conn.abort();
    assert_eq!(n.a.conn.state(), State::Closed);
    n.run_out(5000 * MS);
    assert_eq!(n.b.conn.state(), State::Closed);
    assert_eq!(n.b.events, [Event::Established, Event::Reset]);
    let rst = n.sent(Side::A, |l| l.flags.contains(Flags::RST));
    assert_eq!(rst[0].flags, Flags::RST);
}

#[test]
fn connecting_to_nobody_is_refused() {
    let a = Connection::connect(cfg(), addr_a(), addr_b(), SeqNum(1));
    // b is closed: it answers every segment with a reset.
    let b = Connection::listen(cfg(), addr_b(), SeqNum(2));
    let mut n = Net::with(a, b);
    n.b.conn.close();
    n.run_out(5000 * MS);
    assert_eq!(n.a.events, [Event::Reset]);
    assert_eq!(n.a.conn.state(), State::Closed);
    let rst = &n.sent(Side::B, |_| true)[0];
    assert_eq!(rst.flags, Flags::RST | Flags::ACK);
    assert_eq!(rst.ack, SeqNum(2));
}

#[test]
fn resets_and_syns_are_validated() {
    let (mut b, seq, ack) = hand_established();
    let mut p = Pieces::default();
    let mut rst = data_segment(seq + 100, ack, b"");
    rst.flags = Flags::RST;
    // In the window but not exact: a challenge ACK, the connection lives.
    b.handle_segment(2 * MS, &rst, &mut p);
    assert_eq!(b.state(), State::Established);
    let out = drain(&mut b);
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].flags, out[0].ack), (Flags::ACK, seq));
    assert_eq!(b.stats().challenge_acks, 1);
    // Outside the window: ignored silently.
    rst.seq = seq + 100_000;
    b.handle_segment(2 * MS, &rst, &mut p);
    assert!(drain(&mut b).is_empty());
    // A SYN on an established connection: a challenge ACK too.
    let mut syn = data_segment(seq, ack, b"");
    syn.flags = Flags::SYN;
    b.handle_segment(2 * MS, &syn, &mut p);
    assert_eq!(drain(&mut b).len(), 1);
    assert_eq!(b.state(), State::Established);
    // Challenge ACKs are rate limited (100 a second by default).
    rst.seq = seq + 1;
    for _ in 0..500 {
        b.handle_segment(3 * MS, &rst, &mut p);
        drain(&mut b);
    }
    assert_eq!(b.stats().challenge_acks, 100);
    // Exactly RCV.NXT: the reset is taken.
    rst.seq = seq;
    b.handle_segment(4 * MS, &rst, &mut p);
    assert_eq!(b.state(), State::Closed);
    assert_eq!(b.poll_event(), Some(Event::Established));
    assert_eq!(b.poll_event(), Some(Event::Reset));
}

#[test]
fn an_ack_for_unsent_data_is_answered_and_ignored() {
    let (mut b, seq, ack) = hand_established();
    b.send(b"hello").unwrap();
    drain(&mut b);
    let bogus = data_segment(seq, ack + 1000, b"");
    b.handle_segment(2 * MS, &bogus, &mut Pieces::default());
    assert_eq!(b.stats().dropped_unacceptable, 1);
    assert_eq!(b.unacknowledged(), 5);
    assert_eq!(drain(&mut b).len(), 1, "answered with an ACK");
}

#[test]
fn corrupted_packets_are_counted_and_dropped() {
    let mut n = Net::new(cfg(), cfg());
    n.established();
    let mut hit = 0;
    n.filter = Some(Box::new(move |_, seg| {
        hit += 1;
        if hit % 3 == 0 {
            let mut buf = vec![0u8; seg.packet_len()];
            seg.emit(&mut buf).unwrap();
            let i = buf.len() - 1;
            buf[i] ^= 0x10;
            Verdict::Replace(buf)
        } else {
            Verdict::Pass
        }
    }));
    n.a.outbox.extend(pattern(50_000, 11));
    n.run_until(60_000 * MS, |n| n.b.got.len() == 50_000);
    assert_bytes(&n.b.got, &pattern(50_000, 11));
    assert!(n.b.conn.stats().dropped_checksum + n.a.conn.stats().dropped_checksum > 0);
}

#[test]
fn time_wait_acknowledges_a_retransmitted_fin() {
    let mut n = Net::new(cfg(), cfg());
    n.established();
    n.a.conn.close();
    n.run_until(5000 * MS, |n| n.b.conn.state() == State::CloseWait);
    // Lose a's final ACK once: b sends its FIN again, a in TIME-WAIT answers it.
    let mut dropped = false;
    n.filter = Some(Box::new(move |from, seg| {
        if from == Side::A && seg.flags == Flags::ACK && !dropped {
            dropped = true;
            return Verdict::Drop;
        }
        Verdict::Pass
    }));
    n.b.conn.close();
    n.run_out(10_000 * MS);
    assert_eq!(n.b.conn.state(), State::Closed);
    assert_eq!(n.a.conn.state(), State::Closed);
    assert_eq!(n.sent(Side::B, |l| l.flags.contains(Flags::FIN)).len(), 2);
    assert_eq!(n.b.events.last(), Some(&Event::Closed));
}
