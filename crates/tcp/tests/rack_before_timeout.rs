//! A loss that the peer's SACKs show is repaired by fast recovery (RACK, RFC 8985),
//! not by the retransmission timer, even when those SACKs reach the sender only when
//! its timer is due: a sender whose thread was not scheduled for longer than the
//! timeout (softrnic's stacks run in threads on a shared machine) finds, when it runs
//! again, both the SACKs and the expired timer. It handles what arrived first, then
//! its timers, then sends, as softrnic's stack thread does.
//!
//! Two cases: before any reordering was seen (RACK takes the hole as lost at once),
//! and after (the hole is inside RACK's reordering window, whose timer must run out
//! before the retransmission timer may).
//!
//! The receiver's thread stalls too (the stall the CLI's clean runs showed): it takes
//! nothing for longer than the sender's timeout, then everything at once, and answers
//! with one acknowledgment of it all. The timeout that fired meanwhile is spurious,
//! and that acknowledgment must show it.

use softrnic_tcp::{
    Config, Connection, Flags, Options, Reassembly, Refuse, SackBlock, Segment, SeqNum, State,
};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

const US: Duration = Duration::from_micros(1);

/// Fast-link timers (a 5 ms floor under the timeout), ACKs not delayed.
fn config() -> Config {
    Config {
        mss: 1000,
        send_buffer: 64 * 1024,
        recv_buffer: 64 * 1024,
        delayed_ack: None,
        ..Config::fast_link()
    }
}

/// Two connections on a link with a fixed one-way delay, in virtual time; a's thread
/// may be stalled (it handles nothing until then).
struct Pair {
    a: Connection,
    b: Connection,
    rb: Reassembly,
    now: Duration,
    delay: Duration,
    /// (arrival, to a?, packet), in arrival order.
    queue: Vec<(Duration, bool, Vec<u8>)>,
    /// Data segments from a with these stream offsets are lost (first sending only).
    lose: Vec<u64>,
    /// A data segment from a with this stream offset arrives this much later.
    hold: Option<(u64, Duration)>,
    a_stalled_until: Duration,
    b_stalled_until: Duration,
    got: Vec<u8>,
    buf: Vec<u8>,
}

impl Pair {
    fn new() -> Pair {
        let a_addr = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 1000);
        let b_addr = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 2000);
        let a = Connection::connect(config(), a_addr, b_addr, SeqNum(1));
        let b = Connection::listen(config(), b_addr, SeqNum(9));
        let rb = Reassembly::for_connection(&b);
        Pair {
            a,
            b,
            rb,
            now: Duration::ZERO,
            delay: 100 * US,
            queue: Vec::new(),
            lose: Vec::new(),
            hold: None,
            a_stalled_until: Duration::ZERO,
            b_stalled_until: Duration::ZERO,
            got: Vec::new(),
            buf: vec![0; 1500],
        }
    }

    fn put(&mut self, at: Duration, to_a: bool, packet: Vec<u8>) {
        let i = self.queue.partition_point(|(t, _, _)| *t <= at);
        self.queue.insert(i, (at, to_a, packet));
    }

    fn send_from(&mut self, from_a: bool) {
        loop {
            let now = self.now;
            let c = if from_a { &mut self.a } else { &mut self.b };
            let Some(n) = c.poll_transmit(now, &mut self.buf) else {
                return;
            };
            let packet = self.buf[..n].to_vec();
            let mut at = now + self.delay;
            if from_a {
                let seg = Segment::parse_with(&packet, false).expect("a valid segment");
                let offset = u64::from(seg.seq.delta(SeqNum(2)) as u32);
                if !seg.payload.is_empty() && self.lose.contains(&offset) {
                    self.lose.retain(|&o| o != offset);
                    continue;
                }
                if let Some((o, extra)) = self.hold
                    && o == offset
                    && !seg.payload.is_empty()
                {
                    self.hold = None;
                    at += extra;
                }
            }
            self.put(at, !from_a, packet);
        }
    }

    /// One turn of `a` (or `b`): what arrived by now, then its timers, then it sends.
    fn turn(&mut self, is_a: bool) {
        let now = self.now;
        while let Some(i) = self
            .queue
            .iter()
            .position(|(t, to_a, _)| *t <= now && *to_a == is_a)
        {
            let (_, _, p) = self.queue.remove(i);
            if is_a {
                let _ = self.a.handle_packet(now, &p, &mut Refuse);
            } else {
                let _ = self.b.handle_packet(now, &p, &mut self.rb);
                let mut out = [0u8; 4096];
                loop {
                    let n = self.rb.read_from(&mut self.b, &mut out);
                    if n == 0 {
                        break;
                    }
                    self.got.extend_from_slice(&out[..n]);
                }
            }
        }
        let c = if is_a { &mut self.a } else { &mut self.b };
        if c.poll_timeout().is_some_and(|t| t <= now) {
            c.handle_timeout(now);
        }
        self.send_from(is_a);
    }

    /// Runs until `done`, moving time to the next arrival or timer (an end's only once
    /// its stall is over).
    fn run_until(&mut self, done: impl Fn(&Pair) -> bool) {
        let limit = self.now + Duration::from_secs(10);
        while !done(self) {
            assert!(self.now < limit, "not done: {:?}", self.a.stats());
            if self.now >= self.b_stalled_until {
                self.turn(false);
            }
            if self.now >= self.a_stalled_until {
                self.turn(true);
            }
            let a_next = [
                self.a.poll_timeout(),
                self.queue.iter().find(|q| q.1).map(|q| q.0),
            ]
            .into_iter()
            .flatten()
            .min()
            .map(|t| t.max(self.a_stalled_until));
            let b_next = [
                self.b.poll_timeout(),
                self.queue.iter().find(|q| !q.1).map(|q| q.0),
            ]
            .into_iter()
            .flatten()
            .min()
            .map(|t| t.max(self.b_stalled_until));
            let next = [a_next, b_next].into_iter().flatten().min();
            let Some(next) = next else {
                assert!(
                    done(self),
                    "nothing is due and not done: {:?}",
                    self.a.stats()
                );
                return;
            };
            if done(self) {
                // (Before time moves on: the state the turns left is the one asked for.)
                return;
            }
            self.now = self.now.max(next);
        }
    }

    fn send_all(&mut self, data: &[u8]) {
        let mut off = 0;
        while off < data.len() {
            off += self.a.send(&data[off..]).expect("room in the send buffer");
        }
    }
}

fn data(len: usize, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ salt)
        .collect()
}

#[test]
fn a_loss_the_sacks_show_is_repaired_by_rack_even_when_they_arrive_with_the_timeout() {
    for reordering_seen in [false, true] {
        let mut p = Pair::new();
        p.run_until(|p| p.a.state() == State::Established && p.b.state() == State::Established);
        // A warm-up transfer measures the round trip (200 us; the timeout is its 5 ms
        // floor). In the second case one segment of it is held back 150 us, so that
        // RACK has seen reordering: its window is then above zero.
        if reordering_seen {
            p.hold = Some((10_000, 150 * US));
        }
        let warm = data(40_000, 1);
        p.send_all(&warm);
        p.run_until(|p| p.got.len() == warm.len() && p.a.unacknowledged() == 0);
        let before = p.a.stats().clone();
        assert_eq!(before.timeouts, 0, "{before:?}");
        // Twenty segments; the first is lost. Once they are out, a stalls for 6 ms,
        // past its retransmission timer (5 ms): it then finds the SACKs for the
        // others (sent at 200 us) and the expired timer together.
        p.lose = vec![40_000];
        let burst = data(20_000, 2);
        p.send_all(&burst);
        p.send_from(true);
        p.a_stalled_until = p.now + 6000 * US;
        p.run_until(|p| p.got.len() == warm.len() + burst.len() && p.a.unacknowledged() == 0);
        assert_eq!(&p.got[warm.len()..], &burst[..]);
        let s = p.a.stats();
        let case = format!("reordering seen before: {reordering_seen}: {s:?}");
        assert_eq!(s.timeouts, 0, "{case}");
        assert_eq!(s.fast_retransmits, before.fast_retransmits + 1, "{case}");
        assert_eq!(
            s.retransmitted_segments,
            before.retransmitted_segments + 1,
            "{case}"
        );
        if reordering_seen {
            assert!(before.reordered_segments + before.spurious_retransmits > 0);
        }
    }
}

/// Warms up, then sends twenty segments while b's thread is off the CPU until just
/// after a's timer fired (nothing is lost): b then acknowledges all twenty at once,
/// and the timeout's retransmission reaches it after that. Returns a's stats and
/// congestion window from before.
fn timeout_while_the_receiver_stalls(p: &mut Pair) -> (softrnic_tcp::Stats, u64) {
    p.run_until(|p| p.a.state() == State::Established && p.b.state() == State::Established);
    let warm = data(40_000, 1);
    p.send_all(&warm);
    p.run_until(|p| p.got.len() == warm.len() && p.a.unacknowledged() == 0);
    let before = p.a.stats().clone();
    let cwnd = p.a.congestion_window();
    let burst = data(20_000, 2);
    p.send_all(&burst);
    p.send_from(true);
    p.b_stalled_until = p.now + Duration::from_secs(1);
    p.run_until(|p| p.a.stats().timeouts > before.timeouts);
    // b runs again before the timeout's retransmission reaches it (100 us): it takes
    // the twenty originals and acknowledges them all in one ACK.
    p.b_stalled_until = p.now + 50 * US;
    p.run_until(|p| p.a.unacknowledged() == 0);
    (before, cwnd)
}

#[test]
fn a_timeout_while_the_receiver_stalled_is_found_spurious_from_one_cumulative_ack() {
    let mut p = Pair::new();
    let (before, cwnd) = timeout_while_the_receiver_stalls(&mut p);
    let s = p.a.stats().clone();
    assert_eq!(s.timeouts, before.timeouts + 1, "{s:?}");
    assert_eq!(s.spurious_timeouts, before.spurious_timeouts + 1, "{s:?}");
    // The window is back where it was, at once (not after the duplicate's report).
    assert!(
        p.a.congestion_window() >= cwnd,
        "{} < {cwnd}",
        p.a.congestion_window()
    );
    p.run_until(|p| p.got.len() == 60_000 && p.b.poll_timeout().is_none());
    assert_eq!(&p.got[40_000..], &data(20_000, 2)[..]);
    // Sent again: the timeout's segment, and at most one loss probe before it.
    let s = p.a.stats();
    assert!(
        s.retransmitted_segments <= before.retransmitted_segments + 2,
        "{s:?}"
    );
}

#[test]
fn the_duplicate_of_a_timeouts_retransmission_does_not_make_rack_wait_for_reordering() {
    let mut p = Pair::new();
    timeout_while_the_receiver_stalls(&mut p);
    // The timeout's retransmission reaches b after the originals: b reports it as a
    // duplicate (D-SACK). That says the timer was early, not that the network reorders.
    p.run_until(|p| p.queue.is_empty() && p.b.poll_timeout().is_none());
    let s = p.a.stats().clone();
    assert!(s.spurious_retransmits >= 1, "{s:?}");
    assert_eq!(s.reordered_segments, 0, "{s:?}");
    // Twenty more segments, the first lost: the SACKs of the other nineteen come back
    // one round trip (200 us) after they were sent, and RACK, having seen no
    // reordering, takes the hole as lost then, with no reordering window to wait out.
    p.lose = vec![60_000];
    let more = data(20_000, 3);
    p.send_all(&more);
    p.send_from(true);
    let sent = p.now;
    p.run_until(|p| p.a.stats().fast_retransmits > s.fast_retransmits);
    assert_eq!(p.now - sent, 200 * US, "{:?}", p.a.stats());
    p.run_until(|p| p.got.len() == 80_000 && p.a.unacknowledged() == 0);
    assert_eq!(&p.got[60_000..], &more[..]);
}

#[test]
fn losses_the_window_holds_back_are_probed_when_the_acknowledgments_stop() {
    let mut p = Pair::new();
    p.run_until(|p| p.a.state() == State::Established && p.b.state() == State::Established);
    let warm = data(40_000, 1);
    p.send_all(&warm);
    p.run_until(|p| p.got.len() == warm.len() && p.a.unacknowledged() == 0);
    let before = p.a.stats().clone();
    // Twenty segments go out and b takes none of them (its thread is off the CPU),
    // but one ACK of b's arrives a round trip later, SACKing the fifth to the eighth:
    // RACK takes the first three as lost, the recovery resends the first at once and
    // the window (half the flight) holds the other two back. Then nothing more comes.
    let burst = data(20_000, 2);
    p.send_all(&burst);
    p.send_from(true);
    p.b_stalled_until = p.now + Duration::from_secs(1);
    let sent = p.now;
    let mut sack = arrayvec::ArrayVec::new();
    sack.push(SackBlock {
        left: SeqNum(2 + 44_000),
        right: SeqNum(2 + 48_000),
    });
    let ack = Segment {
        src: SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 2000),
        dst: SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 1000),
        seq: SeqNum(10),
        ack: SeqNum(2 + 40_000),
        flags: Flags::ACK,
        window: u16::MAX,
        options: Options {
            sack,
            ..Options::default()
        },
        payload: &[],
    };
    let mut packet = vec![0; 100];
    let n = ack.emit(&mut packet).expect("an ACK fits");
    packet.truncate(n);
    p.put(p.now + 200 * US, true, packet);
    // Before the retransmission timer (5 ms): a loss probe sends the next segment the
    // window held back, so that its answer (or a later probe's) lets the rest go.
    p.run_until(|p| p.a.stats().loss_probes > before.loss_probes);
    assert!(p.now < sent + 2000 * US, "{:?}", p.now - sent);
    let s = p.a.stats();
    assert_eq!(s.timeouts, before.timeouts, "{s:?}");
    assert_eq!(s.fast_retransmits, before.fast_retransmits + 1, "{s:?}");
    assert_eq!(
        s.retransmitted_segments,
        before.retransmitted_segments + 2,
        "{s:?}"
    );
    // b hears nothing (it is off the CPU): two more probes follow, backed off, each
    // the next segment held back, and all before the timer.
    p.run_until(|p| p.now >= sent + 4000 * US);
    let s = p.a.stats();
    assert_eq!(s.timeouts, before.timeouts, "{s:?}");
    assert_eq!(s.loss_probes, before.loss_probes + 3, "{s:?}");
    assert_eq!(
        s.retransmitted_segments,
        before.retransmitted_segments + 4,
        "{s:?}"
    );
}

#[test]
fn the_time_a_hole_and_its_repair_took_is_recorded_on_both_sides() {
    let mut p = Pair::new();
    p.run_until(|p| p.a.state() == State::Established && p.b.state() == State::Established);
    let warm = data(40_000, 1);
    p.send_all(&warm);
    p.run_until(|p| p.got.len() == warm.len() && p.a.unacknowledged() == 0);
    let (ta, tb) = (p.a.stats().timing.clone(), p.b.stats().timing.clone());
    assert_eq!(ta.send_to_verdict.count + tb.hole_at_nxt.count, 0);
    // Twenty segments sent at once, the first lost. One way takes 100 us: the others
    // reach b at 100 us and open the hole, their SACKs reach a at 200 us (RACK, with
    // no reordering seen, takes the first as lost then and it goes again at once), the
    // retransmission fills the hole at 300 us and its acknowledgment comes at 400 us.
    p.lose = vec![40_000];
    let burst = data(20_000, 2);
    p.send_all(&burst);
    p.send_from(true);
    p.run_until(|p| p.got.len() == warm.len() + burst.len() && p.a.unacknowledged() == 0);
    assert_eq!(&p.got[warm.len()..], &burst[..]);
    let (a, b) = (&p.a.stats().timing, &p.b.stats().timing);
    let one = |h: &softrnic_tcp::Histogram, before: &softrnic_tcp::Histogram| {
        let d = h.since(before);
        assert_eq!(d.count, 1, "{h:?}");
        d.sum_us
    };
    assert_eq!(one(&a.send_to_verdict, &ta.send_to_verdict), 200, "{a:?}");
    assert_eq!(one(&a.verdict_to_resend, &ta.verdict_to_resend), 0, "{a:?}");
    assert_eq!(one(&a.resend_to_delivery, &ta.resend_to_delivery), 200);
    assert_eq!(
        one(&a.first_send_to_delivery, &ta.first_send_to_delivery),
        400
    );
    assert_eq!(a.rtx_lost_again, 0);
    assert_eq!(
        one(&a.reo_wnd, &ta.reo_wnd),
        0,
        "no reordering seen: no window"
    );
    assert_eq!(one(&b.hole_at_nxt, &tb.hole_at_nxt), 200, "{b:?}");
    // b read everything in order at once: it waited for the hole all along.
    assert_eq!(one(&b.reader_starved, &tb.reader_starved), 200, "{b:?}");
    // What arrived above the hole before its repair (the segments the window let go).
    assert!(
        b.ooo_bytes_at_fill_max >= 1000 && b.ooo_bytes_at_fill_max <= 19_000,
        "{b:?}"
    );
}
