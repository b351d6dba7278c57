//! A link whose round trip is 50 microseconds, with [`Config::fast_link`]'s timers (a
//! 5 ms floor under the retransmission timeout, ACKs delayed 1 ms at most): timeouts
//! start at 5 ms and double; under 1% loss and 5% reordering, with the segments of
//! softrnic's in-process network (64 KiB) or of Ethernet (1500 octets), data moves
//! without a single retransmission timeout (only at the very end, a lost last segment
//! whose loss probes are all lost too leaves the timer as the only repair). A failing seed is printed so it replays
//! (`SOFTRNIC_TCP_SEED=n`).

mod common;

use common::*;
use softrnic_tcp::sim::{Impairments, Rng};
use softrnic_tcp::{Config, Event, State};
use std::time::Duration;

const US: Duration = Duration::from_micros(1);

fn fast(mss: u16, buffer: u32) -> Config {
    Config {
        mss,
        send_buffer: buffer as usize,
        recv_buffer: buffer,
        ..Config::fast_link()
    }
}

#[test]
fn timeouts_on_a_fast_link_start_at_five_milliseconds_and_double() {
    let imp = Impairments {
        delay: 25 * US,
        ..Impairments::default()
    };
    let c = Config {
        max_retransmissions: 5,
        ..fast(1460, 256 * 1024)
    };
    let mut n = Net::sim(c.clone(), c, imp, 1);
    n.a.outbox.extend(pattern(100_000, 1));
    n.run_until(1000 * MS, |n| n.b.got.len() == 100_000);
    assert!(n.a.conn.srtt().unwrap() < MS, "{:?}", n.a.conn.srtt());
    // The path dies.
    let mut dead = n.wire.as_ref().unwrap().impairments().clone();
    dead.loss = 1.0;
    n.wire.as_mut().unwrap().set_impairments(dead);
    n.logging = true;
    n.a.outbox.extend(pattern(100, 2));
    n.run_out(60_000 * MS);
    let sends: Vec<Duration> = n
        .sent(Side::A, |l| l.len == 100)
        .iter()
        .map(|l| l.at)
        .collect();
    let gaps: Vec<Duration> = sends.windows(2).map(|w| w[1] - w[0]).collect();
    // Three loss probes, each waiting longer than the one before (all within
    // the 5 ms floor), then timeouts from the floor, doubling.
    assert_eq!(sends.len(), 9, "{gaps:?}");
    assert!(gaps[..3].iter().all(|&g| g <= 5 * MS), "{gaps:?}");
    assert!(gaps[1] > gaps[0] && gaps[2] > gaps[1], "{gaps:?}");
    assert_eq!(gaps[3..], [5, 10, 20, 40, 80].map(|m| m * MS), "{gaps:?}");
    assert_eq!(n.a.conn.stats().loss_probes, 3);
    assert_eq!(n.a.events.last(), Some(&Event::TimedOut));
}

#[test]
fn loss_and_reordering_on_a_fast_link_cause_no_timeout() {
    let repaired = std::cell::Cell::new(0);
    let tail_timeouts = std::cell::Cell::new(0);
    for_seeds(
        "loss_and_reordering_on_a_fast_link_cause_no_timeout",
        100,
        |seed| {
            let mut r = Rng::new(seed);
            // The in-process network's segments and buffers, or Ethernet's.
            let (c, mtu) = if r.chance(0.5) {
                (fast(u16::MAX - 40, 1 << 20), 65535)
            } else {
                (fast(1460, 1 << 20), 1500)
            };
            let imp = Impairments {
                delay: 25 * US,
                jitter: 5 * US,
                loss: 0.01,
                reorder: 0.05,
                reorder_delay: (5 + r.below(20) as u32) * US,
                mtu,
                ..Impairments::default()
            };
            let mut n = Net::sim(c.clone(), c, imp, seed);
            let len = 2_000_000;
            n.a.outbox.extend(pattern(len, seed));
            n.b.outbox.extend(pattern(len / 10, !seed));
            n.run_until(60_000 * MS, |n| {
                n.a.conn.state() == State::Established && n.b.conn.state() == State::Established
            });
            // (A lost SYN or SYN-ACK is repaired by the timer: that is not counted.)
            let timeouts = |n: &Net| n.a.conn.stats().timeouts + n.b.conn.stats().timeouts;
            let at_open = timeouts(&n);
            // While data flows: not one timeout.
            n.run_until(60_000 * MS, |n| n.b.got.len() >= len - 200_000);
            let (sa, sb) = (n.a.conn.stats(), n.b.conn.stats());
            assert_eq!(timeouts(&n), at_open, "seed {seed}: {sa:?} {sb:?}");
            repaired.set(repaired.get() + sa.fast_retransmits + sa.loss_probes);
            n.run_until(60_000 * MS, |n| {
                n.b.got.len() == len && n.a.got.len() == len / 10
            });
            assert_bytes(&n.b.got, &pattern(len, seed));
            assert_bytes(&n.a.got, &pattern(len / 10, !seed));
            // At the very end, the last segment and the loss probe for it can both be
            // lost: then only the timer is left.
            tail_timeouts.set(tail_timeouts.get() + timeouts(&n) - at_open);
        },
    );
    // Losses there were, and RACK or a probe repaired them; at the ends, a probe
    // lost as well was rare.
    assert!(repaired.get() > 50, "{}", repaired.get());
    assert!(tail_timeouts.get() <= 2, "{}", tail_timeouts.get());
}

/// A network that holds packets back four round trips (as softrnic's in-process one,
/// 200 us against a round trip of microseconds): once the peer's duplicate reports have
/// widened RACK's window past the round trip, reordering stops costing a retransmission
/// per held-back packet.
#[test]
fn reordering_of_many_round_trips_is_learnt() {
    for_seeds("reordering_of_many_round_trips_is_learnt", 10, |seed| {
        let imp = Impairments {
            delay: 25 * US,
            reorder: 0.05,
            reorder_delay: 200 * US,
            ..Impairments::default()
        };
        // (A window of fewer holes than the receiver keeps out-of-order ranges.)
        let c = fast(1460, 256 * 1024);
        let mut n = Net::sim(c.clone(), c, imp, seed);
        let len = 8_000_000;
        n.a.outbox.extend(pattern(len, seed));
        n.run_until(60_000 * MS, |n| n.b.got.len() >= len / 4);
        let (before, held) = (
            n.a.conn.stats().retransmitted_segments,
            n.wire.as_ref().unwrap().stats().reordered,
        );
        n.run_until(60_000 * MS, |n| n.b.got.len() == len);
        assert_bytes(&n.b.got, &pattern(len, seed));
        let resent = n.a.conn.stats().retransmitted_segments - before;
        let held = n.wire.as_ref().unwrap().stats().reordered - held;
        assert!(held > 100, "seed {seed}: {held}");
        assert!(
            resent * 10 < held,
            "seed {seed}: {resent} retransmissions for {held} packets held back"
        );
    });
}
