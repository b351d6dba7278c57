use super::*;
use crate::segment::{Flags, Options, Segment};
use crate::seq::SeqNum;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::{Arc, Mutex};

const MS: Duration = Duration::from_millis(1);

fn packet(i: u32, len: usize) -> Vec<u8> {
    let payload = vec![i as u8; len];
    let seg = Segment {
        src: SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 1),
        dst: SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 2),
        seq: SeqNum(i),
        ack: SeqNum(0),
        flags: Flags::ACK,
        window: 0,
        options: Options::default(),
        payload: &payload,
    };
    let mut buf = vec![0; seg.packet_len()];
    seg.emit(&mut buf).unwrap();
    buf
}

/// Sends `n` packets from A, one every `gap`, and collects (arrival, octets) at B.
fn run(wire: &mut Wire, n: u32, gap: Duration, len: usize) -> Vec<(Duration, Vec<u8>)> {
    let mut got = Vec::new();
    let mut now = Duration::ZERO;
    for i in 0..n {
        wire.send(End::A, now, &packet(i, len));
        now += gap;
        while let Some(t) = wire.next_arrival().filter(|&t| t <= now) {
            let (to, p) = wire.poll_arrival(t).unwrap();
            assert_eq!(to, End::B);
            got.push((t, p.to_vec()));
        }
    }
    while let Some(t) = wire.next_arrival() {
        let (_, p) = wire.poll_arrival(t).unwrap();
        got.push((t, p.to_vec()));
    }
    got
}

fn seqs(got: &[(Duration, Vec<u8>)]) -> Vec<u32> {
    got.iter()
        .filter_map(|(_, p)| Segment::parse(p).ok().map(|s| s.seq.0))
        .collect()
}

fn harsh() -> Impairments {
    Impairments {
        jitter: MS,
        loss: 0.05,
        reorder: 0.05,
        duplicate: 0.05,
        corrupt: 0.05,
        ..Impairments::default()
    }
}

#[test]
fn a_clean_wire_delivers_everything_in_order_after_the_delay() {
    let mut w = Wire::new(Impairments::default(), 1);
    let got = run(&mut w, 100, MS / 10, 100);
    assert_eq!(seqs(&got), (0..100).collect::<Vec<_>>());
    assert_eq!(got[0].0, MS);
    assert_eq!(w.stats().delivered, 100);
}

#[test]
fn every_run_replays_from_its_seed() {
    let a = run(&mut Wire::new(harsh(), 42), 2000, MS / 10, 200);
    let b = run(&mut Wire::new(harsh(), 42), 2000, MS / 10, 200);
    let c = run(&mut Wire::new(harsh(), 43), 2000, MS / 10, 200);
    assert_eq!(a, b);
    assert_ne!(a, c);
}

#[test]
fn impairments_happen_at_their_rates() {
    let mut w = Wire::new(harsh(), 7);
    let got = run(&mut w, 20_000, MS / 10, 60);
    let s = w.stats().clone();
    for (what, n) in [
        ("lost", s.lost),
        ("reordered", s.reordered),
        ("duplicated", s.duplicated),
        ("corrupted", s.corrupted),
    ] {
        assert!((800..1200).contains(&n), "{what}: {n} of 20000 at 5%");
    }
    assert_eq!(s.delivered as usize, got.len());
    assert_eq!(s.delivered, s.sent - s.lost + s.duplicated);
    // Every corrupted packet is caught by a checksum; every other one parses.
    let bad = got
        .iter()
        .filter(|(_, p)| Segment::parse(p).is_err())
        .count();
    assert_eq!(bad as u64, s.corrupted);
    // Reordered packets arrive after later ones.
    let order = seqs(&got);
    let inversions = order.windows(2).filter(|w| w[1] < w[0]).count();
    assert!(inversions > 500, "{inversions}");
}

#[test]
fn the_rate_limit_spaces_packets_and_the_queue_is_bounded() {
    let imp = Impairments {
        rate: Some(1_000_000),
        queue_limit: 5,
        ..Impairments::default()
    };
    let mut w = Wire::new(imp, 1);
    // Ten 1000-octet packets at once: 1 ms each to serialize, five fit the queue.
    let p = packet(0, 1000 - 40);
    for _ in 0..10 {
        w.send(End::A, Duration::ZERO, &p);
    }
    assert_eq!(w.stats().queue_drops, 5);
    let mut times = Vec::new();
    while let Some(t) = w.next_arrival() {
        w.poll_arrival(t).unwrap();
        times.push(t);
    }
    assert_eq!(times, [2, 3, 4, 5, 6].map(|m| m * MS));
}

#[test]
fn packets_above_the_mtu_are_dropped() {
    let mut w = Wire::new(
        Impairments {
            mtu: 576,
            ..Impairments::default()
        },
        1,
    );
    w.send(End::B, Duration::ZERO, &packet(0, 600));
    w.send(End::B, Duration::ZERO, &packet(1, 500));
    assert_eq!(w.stats().too_big, 1);
    let (to, p) = w.poll_arrival(MS).unwrap();
    assert_eq!((to, Segment::parse(p).unwrap().seq), (End::A, SeqNum(1)));
    assert!(w.poll_arrival(10 * MS).is_none());
}

/// A `Write` into shared memory, so the test can read what the capture wrote.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn the_capture_is_a_pcap_of_ipv4_packets_at_their_arrival_times() {
    let out = Shared::default();
    let mut w = Wire::new(Impairments::default(), 1);
    w.capture(Box::new(out.clone())).unwrap();
    let got = run(&mut w, 5, MS, 100);
    w.finish_capture().unwrap();
    let bytes = out.0.lock().unwrap().clone();
    let mut r = pcap_file::pcap::PcapReader::new(&bytes[..]).unwrap();
    assert_eq!(r.header().datalink, pcap_file::DataLink::IPV4);
    let mut n = 0;
    while let Some(p) = r.next_packet() {
        let p = p.unwrap();
        assert_eq!(p.timestamp, got[n].0);
        assert_eq!(&p.data[..], &got[n].1[..]);
        n += 1;
    }
    assert_eq!(n, 5);
}
