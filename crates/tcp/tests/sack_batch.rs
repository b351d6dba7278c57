//! SACK from a receiver that takes segments in batches. softrnic's stacks take every
//! packet that arrived, then send: a receiver back from a stall answers a whole batch
//! at once. One ACK carries at most four SACK blocks (three beside a D-SACK), where one
//! ACK per out-of-order segment (RFC 5681 4.2) would have reported every range as it
//! grew; ranges never reported leave the sender taking octets the peer holds for
//! lost (resent for nothing) and its pipe too large. So the batch's answer is as many
//! bare ACKs as it takes to report every range it grew, the newest first.

use softrnic_tcp::{Config, Connection, Reassembly, Refuse, Segment, SeqNum, State};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

const US: Duration = Duration::from_micros(1);
const MSS: usize = 1000;

fn config() -> Config {
    Config {
        mss: MSS as u16,
        send_buffer: 256 * 1024,
        recv_buffer: 256 * 1024,
        delayed_ack: None,
        ..Config::fast_link()
    }
}

struct Ends {
    a: Connection,
    b: Connection,
    rb: Reassembly,
    now: Duration,
    buf: Vec<u8>,
}

impl Ends {
    /// a and b, connected.
    fn connected() -> Ends {
        let a_addr = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 1000);
        let b_addr = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 2000);
        let a = Connection::connect(config(), a_addr, b_addr, SeqNum(1));
        let b = Connection::listen(config(), b_addr, SeqNum(9));
        let rb = Reassembly::for_connection(&b);
        let mut e = Ends {
            a,
            b,
            rb,
            now: Duration::ZERO,
            buf: vec![0; 1500],
        };
        for _ in 0..4 {
            e.now += 10 * US;
            for p in e.from(true) {
                e.b.handle_packet(e.now, &p, &mut e.rb).expect("valid");
            }
            for p in e.from(false) {
                e.a.handle_packet(e.now, &p, &mut Refuse).expect("valid");
            }
        }
        assert_eq!(e.a.state(), State::Established);
        assert_eq!(e.b.state(), State::Established);
        // Slow start opens the window past twenty segments.
        let warm: Vec<u8> = vec![7; 40 * MSS];
        assert_eq!(e.a.send(&warm).expect("room"), warm.len());
        for _ in 0..8 {
            e.now += 10 * US;
            // (Each segment answered on its own, so each ACK grows the window.)
            for p in e.from(true) {
                e.b.handle_packet(e.now, &p, &mut e.rb).expect("valid");
                let mut sink = [0u8; 4096];
                while e.rb.read_from(&mut e.b, &mut sink) > 0 {}
                for ack in e.from(false) {
                    e.a.handle_packet(e.now, &ack, &mut Refuse).expect("valid");
                }
            }
        }
        assert_eq!(e.a.unacknowledged(), 0);
        assert!(e.a.congestion_window() >= 20 * MSS as u64);
        e
    }

    /// Everything a (or b) sends now.
    fn from(&mut self, a: bool) -> Vec<Vec<u8>> {
        let c = if a { &mut self.a } else { &mut self.b };
        let mut out = Vec::new();
        while let Some(n) = c.poll_transmit(self.now, &mut self.buf) {
            out.push(self.buf[..n].to_vec());
        }
        out
    }
}

/// The SACK blocks of an ACK, as (left, right) sequence numbers.
fn sack_of(p: &[u8]) -> Vec<(u32, u32)> {
    let s = Segment::parse_with(p, true).expect("a valid packet");
    assert!(s.payload.is_empty(), "a bare ACK");
    s.options
        .sack
        .iter()
        .map(|b| (b.left.0, b.right.0))
        .collect()
}

#[test]
fn a_batch_that_grew_more_ranges_than_one_ack_holds_is_answered_with_every_range() {
    let mut e = Ends::connected();
    // Twenty segments; every third one (after the first) is lost: six holes, six
    // out-of-order ranges (the last of one segment).
    let data: Vec<u8> = (0..20 * MSS).map(|i| (i % 251) as u8).collect();
    assert_eq!(e.a.send(&data).expect("room"), data.len());
    e.now += 10 * US;
    let segs: Vec<Vec<u8>> = e
        .from(true)
        .into_iter()
        .filter(|p| {
            !Segment::parse_with(p, true)
                .expect("valid")
                .payload
                .is_empty()
        })
        .collect();
    assert_eq!(segs.len(), 20);
    let mut ranges = Vec::new();
    // b takes the batch, then answers (as a stack's pump does).
    e.now += 10 * US;
    for (i, p) in segs.iter().enumerate() {
        if i % 3 == 0 && i > 0 {
            continue;
        }
        e.b.handle_packet(e.now, p, &mut e.rb).expect("valid");
        let s = Segment::parse_with(p, true).expect("valid");
        if i > 3 {
            // (The first three arrive in order.)
            ranges.push(s.seq.0);
        }
    }
    let acks = e.from(false);
    assert!(
        acks.len() >= 2,
        "{} ACK(s) for a batch with six new ranges",
        acks.len()
    );
    assert!(
        acks.len() <= 3,
        "no more ACKs than the ranges need: {}",
        acks.len()
    );
    assert_eq!(e.b.stats().sack_followup_acks, acks.len() as u64 - 1);
    let reported: Vec<(u32, u32)> = acks.iter().flat_map(|p| sack_of(p)).collect();
    // Every out-of-order segment b holds lies in a reported block.
    for seq in &ranges {
        assert!(
            reported.iter().any(|&(l, r)| l <= *seq && *seq < r),
            "segment {seq} never reported: {reported:?}"
        );
    }
    // The first ACK leads with the newest range (RFC 2018).
    let newest = Segment::parse_with(&segs[19], true).expect("valid").seq.0;
    let first = sack_of(&acks[0]);
    assert!(first[0].0 <= newest && newest < first[0].1, "{first:?}");
    // a learns of every range: what it resends is the six holes, nothing b holds.
    e.now += 10 * US;
    for p in &acks {
        e.a.handle_packet(e.now, p, &mut Refuse).expect("valid");
    }
    let holes: Vec<u32> = (1..7)
        .map(|k| {
            Segment::parse_with(&segs[3 * k], true)
                .expect("valid")
                .seq
                .0
        })
        .collect();
    let mut resent: Vec<u32> = e
        .from(true)
        .iter()
        .map(|p| Segment::parse_with(p, true).expect("valid"))
        .filter(|s| !s.payload.is_empty() && s.seq.0 < holes[5] + MSS as u32)
        .map(|s| s.seq.0)
        .collect();
    resent.sort_unstable();
    assert_eq!(resent, holes);
}

#[test]
fn one_segment_at_a_time_gets_one_ack_each() {
    let mut e = Ends::connected();
    let data: Vec<u8> = (0..10 * MSS).map(|i| (i % 251) as u8).collect();
    assert_eq!(e.a.send(&data).expect("room"), data.len());
    e.now += 10 * US;
    let segs = e.from(true);
    e.now += 10 * US;
    // The first is lost; each of the others is answered before the next arrives.
    for p in segs.iter().skip(1) {
        e.b.handle_packet(e.now, p, &mut e.rb).expect("valid");
        assert_eq!(e.from(false).len(), 1, "one ACK per segment");
    }
    assert_eq!(e.b.stats().sack_followup_acks, 0);
}
