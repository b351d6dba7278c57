//! Reliability over a link that a filter makes lossy in chosen ways: retransmission
//! timeouts and their backoff (data and SYN), fast retransmit and NewReno recovery,
//! SACK recovery that resends only the holes, the congestion window, delayed ACKs,
//! zero-window probes, keep-alive, giving up.

mod common;

use common::*;
use softrnic_tcp::{Config, Event, Flags, Keepalive, State};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

/// Data segments from a (their sequence numbers, relative to the first) that the
/// filter drops once each.
fn drop_once(n: &mut Net, which: &[u32]) -> Rc<RefCell<Vec<u32>>> {
    let left = Rc::new(RefCell::new(which.to_vec()));
    let l = left.clone();
    let mut base = None::<u32>;
    n.filter = Some(Box::new(move |from, seg| {
        if from != Side::A || seg.payload.is_empty() {
            return Verdict::Pass;
        }
        let base = *base.get_or_insert(seg.seq.0);
        let idx = seg.seq.0.wrapping_sub(base) / 1000;
        let mut l = l.borrow_mut();
        if let Some(i) = l.iter().position(|&x| x == idx) {
            l.remove(i);
            return Verdict::Drop;
        }
        Verdict::Pass
    }));
    left
}

fn transfer(n: &mut Net, len: usize, seed: u64) {
    n.a.outbox.extend(pattern(len, seed));
    n.run_until(120_000 * MS, |n| n.b.got.len() == len);
    assert_bytes(&n.b.got, &pattern(len, seed));
}

#[test]
fn the_initial_window_limits_the_first_flight() {
    let mut n = Net::new(
        cfg(),
        Config {
            recv_buffer: 1 << 20,
            ..cfg()
        },
    );
    n.established();
    n.a.outbox.extend(pattern(100_000, 1));
    n.step();
    let first_flight = n.sent(Side::A, |l| l.len > 0);
    assert_eq!(
        first_flight.len(),
        10,
        "RFC 6928: ten segments before any ACK"
    );
    assert!(first_flight.iter().all(|l| l.at == first_flight[0].at));
    n.run_until(60_000 * MS, |n| n.b.got.len() == 100_000);
    // Slow start over a loss-free path: the window only grew.
    assert!(n.a.conn.congestion_window() > 10 * 1000);
}

#[test]
fn fast_retransmit_recovers_a_single_loss_without_a_timeout() {
    let mut n = Net::new(cfg(), cfg());
    n.established();
    let left = drop_once(&mut n, &[2]);
    transfer(&mut n, 60_000, 2);
    assert!(left.borrow().is_empty());
    let s = n.a.conn.stats();
    assert_eq!(s.timeouts, 0);
    assert_eq!(s.fast_retransmits, 1);
    assert_eq!((s.retransmitted_segments, s.retransmitted_bytes), (1, 1000));
}

#[test]
fn newreno_without_sack_recovers_two_losses_in_one_window() {
    let no_sack = Config {
        sack: false,
        ..cfg()
    };
    let mut n = Net::new(no_sack.clone(), no_sack);
    n.established();
    drop_once(&mut n, &[3, 6]);
    transfer(&mut n, 60_000, 3);
    let s = n.a.conn.stats();
    assert_eq!(s.timeouts, 0);
    assert_eq!(
        s.fast_retransmits, 1,
        "one recovery; the partial ACK sends the second hole"
    );
    assert_eq!(s.retransmitted_segments, 2);
    assert!(n.log.iter().all(|l| l.sack.is_empty()));
}

#[test]
fn sack_resends_only_the_holes() {
    let mut n = Net::new(
        cfg(),
        Config {
            recv_buffer: 1 << 20,
            ..cfg()
        },
    );
    n.established();
    // Open the window first, then lose three segments of one flight.
    transfer(&mut n, 30_000, 4);
    n.b.got.clear();
    let mut seen = 0;
    let dropped = Rc::new(Cell::new(0));
    let d = dropped.clone();
    n.filter = Some(Box::new(move |from, seg| {
        if from == Side::A && !seg.payload.is_empty() {
            seen += 1;
            if [3, 5, 8].contains(&seen) {
                d.set(d.get() + 1);
                return Verdict::Drop;
            }
        }
        Verdict::Pass
    }));
    let before = n.a.conn.stats().clone();
    transfer(&mut n, 40_000, 5);
    assert_eq!(dropped.get(), 3);
    let s = n.a.conn.stats();
    assert_eq!(s.timeouts, before.timeouts);
    assert_eq!(s.fast_retransmits - before.fast_retransmits, 1);
    assert_eq!(
        s.retransmitted_bytes - before.retransmitted_bytes,
        3000,
        "the holes, nothing else"
    );
    assert!(n.log.iter().any(|l| l.from == Side::B && l.sack.len() >= 2));
}

#[test]
fn retransmission_timeouts_back_off_then_give_up() {
    let mut n = Net::new(
        cfg(),
        Config {
            max_retransmissions: 6,
            ..cfg()
        },
    );
    let mut c = cfg();
    c.max_retransmissions = 6;
    n.a.conn = softrnic_tcp::Connection::connect(c, addr_a(), addr_b(), softrnic_tcp::SeqNum(9));
    n.established();
    // From now on nothing reaches b.
    n.filter = Some(Box::new(|from, _| {
        if from == Side::A {
            Verdict::Drop
        } else {
            Verdict::Pass
        }
    }));
    n.a.outbox.extend(pattern(500, 6));
    n.run_out(60_000 * MS);
    let sends: Vec<Duration> = n
        .sent(Side::A, |l| l.len == 500)
        .iter()
        .map(|l| l.at)
        .collect();
    assert_eq!(
        sends.len(),
        8,
        "the first send, a loss probe and six retransmissions"
    );
    let gaps: Vec<Duration> = sends.windows(2).map(|w| w[1] - w[0]).collect();
    // The RTO from a 2 ms round trip is clamped to rto_min (50 ms). The loss probe
    // would wait longer (one segment out: 200 ms for a delayed ACK), so it goes when
    // the timer would have fired and the timer starts again (RFC 8985 7.2); from then
    // on the timeout doubles.
    assert_eq!(gaps, [50, 50, 100, 200, 400, 800, 1600].map(|m| m * MS));
    assert_eq!(n.a.conn.stats().loss_probes, 1);
    assert_eq!(n.a.conn.stats().timeouts, 7);
    assert_eq!(n.a.conn.stats().handshake_timeouts, 0);
    assert_eq!(n.a.events, [Event::Established, Event::TimedOut]);
    assert_eq!(n.a.conn.state(), State::Closed);
    assert_eq!(n.sent(Side::A, |l| l.flags.contains(Flags::RST)).len(), 1);
}

#[test]
fn the_backed_off_timeout_is_capped() {
    let c = Config {
        rto_max: 100 * MS,
        max_retransmissions: 5,
        ..cfg()
    };
    let mut n = Net::new(c, cfg());
    n.established();
    n.filter = Some(Box::new(|from, _| {
        if from == Side::A {
            Verdict::Drop
        } else {
            Verdict::Pass
        }
    }));
    n.a.outbox.extend(pattern(10, 6));
    n.run_out(60_000 * MS);
    let sends: Vec<Duration> = n
        .sent(Side::A, |l| l.len == 10)
        .iter()
        .map(|l| l.at)
        .collect();
    let gaps: Vec<Duration> = sends.windows(2).map(|w| w[1] - w[0]).collect();
    // A loss probe first, then timeouts, doubling up to the cap.
    assert_eq!(gaps, [50, 50, 100, 100, 100, 100].map(|m| m * MS));
}

#[test]
fn syn_retransmissions_back_off_and_the_open_times_out() {
    let c = Config {
        syn_retries: 3,
        ..cfg()
    };
    let mut n = Net::new(c, cfg());
    n.filter = Some(Box::new(|_, _| Verdict::Drop));
    n.run_out(60_000 * MS);
    let syns: Vec<Duration> = n
        .sent(Side::A, |l| l.flags == Flags::SYN)
        .iter()
        .map(|l| l.at)
        .collect();
    assert_eq!(syns, [0, 100, 300, 700].map(|m| m * MS));
    // Three timeouts resent the SYN, the fourth gave up: all in the handshake.
    assert_eq!(n.a.conn.stats().timeouts, 4);
    assert_eq!(n.a.conn.stats().handshake_timeouts, 4);
    assert_eq!(n.a.events, [Event::TimedOut]);
    assert_eq!(n.a.conn.state(), State::Closed);
    assert!(
        n.sent(Side::A, |l| l.flags.contains(Flags::RST)).is_empty(),
        "nothing to reset"
    );
}

#[test]
fn a_lost_syn_ack_is_sent_again() {
    let mut n = Net::new(cfg(), cfg());
    let mut first = true;
    n.filter = Some(Box::new(move |from, seg| {
        if from == Side::B && seg.flags.contains(Flags::SYN) && std::mem::take(&mut first) {
            return Verdict::Drop;
        }
        Verdict::Pass
    }));
    n.established();
    transfer(&mut n, 5000, 7);
    // Sent again both by b's timer and in answer to a's retransmitted SYN.
    assert!(n.sent(Side::B, |l| l.flags.contains(Flags::SYN)).len() >= 2);
    assert_eq!(n.b.conn.stats().timeouts, 1);
    assert_eq!(n.b.conn.stats().handshake_timeouts, 1);
}

#[test]
fn delayed_acks_cover_two_segments_or_wait_40_ms() {
    let mut n = Net::new(
        cfg(),
        Config {
            recv_buffer: 1 << 20,
            ..cfg()
        },
    );
    n.established();
    // One small segment: its ACK waits for the delayed-ACK timer.
    n.a.outbox.extend(b"hello");
    n.run_until(1000 * MS, |n| {
        !n.sent(Side::B, |l| l.flags == Flags::ACK).is_empty()
    });
    let data = n.sent(Side::A, |l| l.len == 5)[0].at;
    let ack = n.sent(Side::B, |l| l.flags == Flags::ACK)[0].at;
    assert_eq!(ack - data, n.delay + 40 * MS);
    // A long run of segments: an ACK once two full segments' worth arrived, not
    // for each segment.
    let acks_before = n.sent(Side::B, |l| l.flags == Flags::ACK).len();
    n.b.got.clear();
    transfer(&mut n, 200_000, 8);
    let acks: Vec<u32> = n.sent(Side::B, |l| l.flags == Flags::ACK)[acks_before - 1..]
        .iter()
        .map(|l| l.ack.0)
        .collect();
    let steps: Vec<u32> = acks.windows(2).map(|w| w[1].wrapping_sub(w[0])).collect();
    let segs = n.sent(Side::A, |l| l.len > 0).len() - 1;
    assert!(steps.iter().all(|&s| s < 3000), "{steps:?}");
    assert!(
        steps.iter().filter(|&&s| s >= 2000).count() >= steps.len() * 9 / 10,
        "{steps:?}"
    );
    assert!(
        steps.len() <= segs / 2 + 5,
        "{} ACKs for {segs} segments",
        steps.len()
    );
}

#[test]
fn freed_receive_space_is_announced_at_once_with_delayed_acks() {
    // A 16 KiB window of 1000-octet segments, ACKs delayed 40 ms; the reader is slow.
    let mut n = Net::new(cfg(), cfg());
    n.established();
    n.b.reading = false;
    let data = pattern(40_000, 21);
    n.a.outbox.extend(&data[..2000]);
    n.run_until(1000 * MS, |n| {
        n.b.rx.readable() == 2000 && n.a.conn.unacknowledged() == 0
    });
    // Freeing a little while the sender knows a large window is not worth a segment.
    let mut buf = vec![0u8; 8000];
    assert_eq!(n.b.rx.read_from(&mut n.b.conn, &mut buf[..1000]), 1000);
    n.b.got.extend_from_slice(&buf[..1000]);
    let quiet = n.now;
    n.a.outbox.extend(&data[2000..15_000]);
    // Fifteen segments in all: the last one's ACK waits for the delayed-ACK timer,
    // and then a knows a window of 2384 octets.
    n.run_until(1000 * MS, |n| {
        n.b.rx.readable() == 14_000 && n.a.conn.unacknowledged() == 0
    });
    assert!(n.sent(Side::B, |l| l.at == quiet).is_empty());
    let known = n
        .sent(Side::B, |l| l.flags == Flags::ACK)
        .last()
        .unwrap()
        .window;
    assert_eq!(known, 16 * 1024 - 14_000);
    // The reader frees 8000 octets while its window is still larger than a segment:
    // the sender hears of it at once, not with the next (delayed) ACK.
    assert_eq!(n.b.rx.read_from(&mut n.b.conn, &mut buf), 8000);
    n.b.got.extend_from_slice(&buf);
    let freed = n.now;
    n.a.outbox.extend(&data[15_000..]);
    n.step();
    n.b.reading = true;
    n.run_until(1000 * MS, |n| n.b.got.len() == 40_000);
    assert_bytes(&n.b.got, &data);
    let update = n.sent(Side::B, |l| l.at == freed && l.len == 0);
    assert_eq!(
        update.len(),
        1,
        "one window update when the space was freed"
    );
    assert_eq!(usize::from(update[0].window), 16 * 1024 - 14_000 + 8000);
    // No data segment of a waited for B's delayed-ACK timer (40 ms): the rest took a
    // few round trips of 2 ms.
    let data_times: Vec<Duration> = n
        .sent(Side::A, |l| l.len > 0 && l.at >= freed)
        .iter()
        .map(|l| l.at)
        .collect();
    let longest = data_times.windows(2).map(|w| w[1] - w[0]).max().unwrap();
    assert!(longest < 40 * MS, "the sender stalled for {longest:?}");
    assert_eq!(n.a.conn.stats().timeouts, 0);
}

#[test]
fn acks_are_immediate_without_delay() {
    let c = Config {
        delayed_ack: None,
        ..cfg()
    };
    let mut n = Net::new(cfg(), c);
    n.established();
    n.a.outbox.extend(b"hello");
    n.run_until(1000 * MS, |n| {
        !n.sent(Side::B, |l| l.flags == Flags::ACK).is_empty()
    });
    let ack = n.sent(Side::B, |l| l.flags == Flags::ACK)[0].at;
    assert_eq!(ack, n.sent(Side::A, |l| l.len == 5)[0].at + n.delay);
}

#[test]
fn zero_window_probes_resume_a_stalled_sender() {
    let mut n = Net::new(cfg(), cfg());
    n.established();
    n.b.reading = false;
    n.a.outbox.extend(pattern(40_000, 9));
    n.run_until(5000 * MS, |n| n.b.rx.readable() == 16 * 1024);
    n.run_until(5000 * MS, |n| n.a.conn.stats().window_probes >= 1);
    // The reader wakes up, but its window updates are all lost: only the persist
    // timer's probes (answered with the open window) can restart the sender.
    let lost_updates = Rc::new(Cell::new(0));
    let l = lost_updates.clone();
    n.filter = Some(Box::new(move |from, seg| {
        if from == Side::B && seg.flags == Flags::ACK && seg.window > 0 && l.get() < 3 {
            l.set(l.get() + 1);
            return Verdict::Drop;
        }
        Verdict::Pass
    }));
    n.b.reading = true;
    n.run_until(60_000 * MS, |n| n.b.got.len() == 40_000);
    assert_bytes(&n.b.got, &pattern(40_000, 9));
    assert!(lost_updates.get() >= 1);
    // Probes: an ACK one below SND.UNA; their intervals double.
    let probes: Vec<Duration> = n
        .sent(Side::A, |l| {
            l.len == 0 && l.flags == Flags::ACK && l.window > 0
        })
        .iter()
        .filter(|l| {
            n.log
                .iter()
                .any(|m| m.from == Side::A && m.len > 0 && m.seq == l.seq + 1)
        })
        .map(|l| l.at)
        .collect();
    assert!(probes.len() >= 2, "{probes:?}");
    let gaps: Vec<Duration> = probes.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        gaps.windows(2)
            .all(|g| g[1] == 2 * g[0] || g[1] == 10_000 * MS),
        "{gaps:?}"
    );
    assert_eq!(n.a.conn.stats().window_probes, probes.len() as u64);
    assert_eq!(n.a.conn.stats().timeouts, 0);
}

fn keepalive_net() -> Net {
    let ka = Keepalive {
        idle: 1000 * MS,
        interval: 100 * MS,
        probes: 3,
    };
    let c = Config {
        keepalive: Some(ka),
        ..cfg()
    };
    let mut n = Net::new(c, cfg());
    n.established();
    transfer(&mut n, 1000, 10);
    n.run_until(1000 * MS, |n| n.a.conn.unacknowledged() == 0);
    n
}

#[test]
fn keepalive_probes_an_idle_peer() {
    let mut n = keepalive_net();
    // A live peer answers: the connection stays up, one probe per idle second.
    let t = n.now;
    n.run_until(10_000 * MS, |n| n.now >= t + 5500 * MS);
    assert_eq!(n.a.conn.state(), State::Established);
    assert_eq!(n.a.conn.stats().keepalive_probes, 5);
    let probes = n.sent(Side::A, |l| l.len == 0 && l.at > t && l.flags == Flags::ACK);
    assert_eq!(probes.len(), 5);
    assert!(
        probes.iter().all(|p| p.seq + 1 == probes[0].seq + 1),
        "SND.UNA - 1 each time"
    );
}

#[test]
fn keepalive_gives_up_on_a_dead_peer() {
    let mut n = keepalive_net();
    let t = n.now;
    n.filter = Some(Box::new(|from, _| {
        if from == Side::B {
            Verdict::Drop
        } else {
            Verdict::Pass
        }
    }));
    n.run_until(10_000 * MS, |n| n.a.conn.state() == State::Closed);
    n.run_out(1000 * MS);
    assert_eq!(n.a.conn.stats().keepalive_probes, 3);
    let probes: Vec<Duration> = n
        .sent(Side::A, |l| l.len == 0 && l.at > t && l.flags == Flags::ACK)
        .iter()
        .map(|l| l.at - t)
        .collect();
    // Idle for 1 s (from the last segment received), then every 100 ms.
    let first = probes[0];
    assert_eq!(probes, [first, first + 100 * MS, first + 200 * MS]);
    assert!(first <= 1000 * MS && first > 900 * MS, "{first:?}");
    assert_eq!(n.a.events.last(), Some(&Event::TimedOut));
    assert_eq!(n.sent(Side::A, |l| l.flags.contains(Flags::RST)).len(), 1);
}

#[test]
fn a_timeout_shrinks_the_congestion_window_to_one_segment() {
    let mut n = Net::new(
        cfg(),
        Config {
            recv_buffer: 1 << 20,
            ..cfg()
        },
    );
    n.established();
    transfer(&mut n, 50_000, 11);
    n.b.got.clear();
    // Lose the whole next flight and the loss probes after it (three, each waiting
    // twice as long as the last): only the timer can recover.
    let lost = Rc::new(Cell::new(true));
    let l = lost.clone();
    n.filter = Some(Box::new(move |from, seg| {
        if from == Side::A && !seg.payload.is_empty() && l.get() {
            return Verdict::Drop;
        }
        Verdict::Pass
    }));
    n.a.outbox.extend(pattern(20_000, 12));
    let before = n.a.conn.stats().timeouts;
    let probes = n.a.conn.stats().loss_probes;
    n.run_until(10_000 * MS, |n| n.a.conn.stats().timeouts > before);
    lost.set(false);
    assert_eq!(n.a.conn.stats().loss_probes, probes + 3);
    assert_eq!(n.a.conn.congestion_window(), 1000);
    n.run_until(60_000 * MS, |n| n.b.got.len() == 20_000);
    assert_bytes(&n.b.got, &pattern(20_000, 12));
    assert_eq!(n.a.conn.stats().timeouts, before + 1);
}
