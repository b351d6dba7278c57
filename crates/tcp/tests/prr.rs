//! Proportional rate reduction (RFC 6937) through a fast recovery, in virtual time.
//! One segment of a full flight is lost; the peer's acknowledgments of the rest come
//! back one at a time. The sender must resend the loss at once and then keep sending
//! at about one segment for every two the peer reports delivered, from the start of
//! the recovery, not stop until half the flight has left the network (RFC 6675's
//! halving at once): on softrnic's in-process network that silence left a second hole
//! open and the receiver idle. Over the recovery it sends no more than the halved
//! window allows.

use softrnic_tcp::{Config, Connection, Reassembly, Refuse, Segment, SeqNum, State};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

const US: Duration = Duration::from_micros(1);
const MSS: usize = 1000;

/// Segments of 1000 octets, windows of 256 KiB (the congestion window bounds the
/// flight), every segment acknowledged.
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
    /// Octets queued at a so far (the data is a counter pattern).
    queued: usize,
}

impl Ends {
    fn new() -> Ends {
        let a_addr = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 1000);
        let b_addr = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 2000);
        let a = Connection::connect(config(), a_addr, b_addr, SeqNum(1));
        let b = Connection::listen(config(), b_addr, SeqNum(9));
        let rb = Reassembly::for_connection(&b);
        Ends {
            a,
            b,
            rb,
            now: Duration::ZERO,
            buf: vec![0; 1500],
            queued: 0,
        }
    }

    /// Everything a sends now.
    fn drain_a(&mut self) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        while let Some(n) = self.a.poll_transmit(self.now, &mut self.buf) {
            out.push(self.buf[..n].to_vec());
        }
        out
    }

    /// b takes `packet` and reads what is in order; its answers.
    fn deliver_to_b(&mut self, packet: &[u8]) -> Vec<Vec<u8>> {
        self.b
            .handle_packet(self.now, packet, &mut self.rb)
            .expect("a valid packet");
        let mut sink = [0u8; 4096];
        while self.rb.read_from(&mut self.b, &mut sink) > 0 {}
        let mut out = Vec::new();
        while let Some(n) = self.b.poll_transmit(self.now, &mut self.buf) {
            out.push(self.buf[..n].to_vec());
        }
        out
    }

    /// a's send buffer is kept full.
    fn fill_a(&mut self) {
        loop {
            let chunk: Vec<u8> = (self.queued..self.queued + MSS).map(|i| i as u8).collect();
            match self.a.send(&chunk) {
                Ok(n) if n > 0 => self.queued += n,
                _ => return,
            }
        }
    }

    /// Both ends exchange everything, 10 us apart, until nothing moves.
    fn settle(&mut self) {
        loop {
            self.now += 10 * US;
            self.fill_a();
            let from_a = self.drain_a();
            let mut moved = !from_a.is_empty();
            let mut answers = Vec::new();
            for p in &from_a {
                answers.extend(self.deliver_to_b(p));
            }
            self.now += 10 * US;
            for p in &answers {
                moved = true;
                self.a.handle_packet(self.now, p, &mut Refuse).ok();
            }
            if !moved {
                return;
            }
            if self.a.congestion_window() >= 48 * MSS as u64 {
                return;
            }
        }
    }
}

fn payload_len(p: &[u8]) -> usize {
    Segment::parse_with(p, true)
        .expect("a valid packet")
        .payload
        .len()
}

fn seq_of(p: &[u8]) -> u32 {
    Segment::parse_with(p, true).expect("a valid packet").seq.0
}

#[test]
fn a_fast_recovery_sends_in_proportion_to_what_is_delivered_from_its_first_ack() {
    let mut e = Ends::new();
    e.settle();
    assert_eq!(e.a.state(), State::Established);
    assert!(
        e.a.congestion_window() >= 40 * MSS as u64,
        "slow start grew the window: {}",
        e.a.congestion_window()
    );
    // Let the flight drain (b answered everything), then one full flight: its first
    // segment is lost.
    e.now += 100 * US;
    e.fill_a();
    let flight = e.drain_a();
    let flight: Vec<Vec<u8>> = flight.into_iter().filter(|p| payload_len(p) > 0).collect();
    let f = flight.len();
    assert!(f >= 40, "a full flight: {f} segments");
    let lost_seq = seq_of(&flight[0]);
    e.now += 50 * US;
    let mut acks = Vec::new();
    for p in &flight[1..] {
        acks.extend(e.deliver_to_b(p));
    }
    assert_eq!(acks.len(), f - 1, "one ACK (with SACK) per segment");
    // a takes them one by one; what it sends after each.
    e.now += 50 * US;
    let mut rtx_after: Option<usize> = None;
    let mut new_after: Vec<usize> = Vec::new();
    let mut sent_in_recovery = 0usize;
    for (k, ack) in acks.iter().enumerate() {
        e.a.handle_packet(e.now, ack, &mut Refuse)
            .expect("a valid ACK");
        e.fill_a();
        let out = e.drain_a();
        let mut this_ack = 0;
        for p in out.iter().filter(|p| payload_len(p) > 0) {
            if seq_of(p) == lost_seq {
                assert!(rtx_after.is_none(), "the loss is resent once");
                rtx_after = Some(k);
            } else if rtx_after.is_some() {
                new_after.push(k);
            }
            if rtx_after.is_some() {
                this_ack += 1;
                sent_in_recovery += 1;
            }
        }
        assert!(this_ack <= 2, "no burst: {this_ack} segments after ACK {k}");
    }
    // No reordering seen yet: the third SACK above the hole marks it lost (RFC 6675's
    // DupThresh), and it goes at once.
    let r = rtx_after.expect("the loss was resent");
    assert_eq!(r, 2, "resent on the third duplicate ACK");
    // New data resumes within a few ACKs of the retransmission (RFC 6675 alone would
    // send nothing more until about half the flight, f/2 ACKs, had been delivered).
    let first_new = *new_after.first().expect("new data during the recovery");
    assert!(
        first_new <= r + 4,
        "new data only after ACK {first_new} of {} (resent after ACK {r})",
        f - 1
    );
    // About one segment for every two delivered over the recovery: the window was
    // halved (RFC 6937 ends the recovery at ssthresh, half the flight).
    let delivered = acks.len() - r;
    assert!(
        sent_in_recovery.abs_diff(delivered / 2) <= 2,
        "{sent_in_recovery} sent for {delivered} delivered"
    );
}
