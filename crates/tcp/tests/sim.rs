//! Deterministic simulation over thousands of seeds: two connections on the simulated
//! wire with seeded loss, reordering, duplication, jitter, corruption and rate limits.
//! Every byte arrives once and in order, both ends close cleanly through TIME-WAIT,
//! timeouts back off, single losses and SACK holes are repaired without a timeout, a
//! stalled reader resumes, a reset aborts both. A failing seed is printed so it
//! replays (`SOFTRNIC_TCP_SEED=n`).

mod common;

use common::*;
use softrnic_tcp::sim::{Impairments, Rng};
use softrnic_tcp::{Config, Event, State};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

/// Impairments drawn from the seed: delay 1-20 ms with jitter, up to 10% loss, 10%
/// reordering, 5% duplication, 5% corruption, sometimes a rate limit.
fn random_impairments(r: &mut Rng) -> Impairments {
    let delay = MS * (1 + r.below(20) as u32);
    Impairments {
        delay,
        jitter: delay.mul_f64(r.unit()),
        loss: r.unit() * 0.10,
        reorder: r.unit() * 0.10,
        reorder_delay: delay.mul_f64(0.1 + 2.0 * r.unit()),
        duplicate: r.unit() * 0.05,
        corrupt: r.unit() * 0.05,
        rate: r.chance(0.3).then(|| 200_000 + r.below(10_000_000)),
        queue_limit: 64 + r.below(1000) as usize,
        ..Impairments::default()
    }
}

/// A config drawn from the seed: MSS, buffers, SACK, window scaling, delayed ACKs.
fn random_config(r: &mut Rng) -> Config {
    Config {
        mss: [536, 1000, 1460][r.below(3) as usize],
        send_buffer: 4096 + r.below(60_000) as usize,
        recv_buffer: 4096 + r.below(60_000) as u32,
        sack: r.chance(0.8),
        window_scale: r.chance(0.8),
        delayed_ack: r.chance(0.7).then_some(40 * MS),
        // A long TIME-WAIT, so the peer's retransmitted FINs are still answered.
        msl: 5000 * MS,
        ..cfg()
    }
}

#[test]
fn every_byte_arrives_once_in_order_and_both_ends_close() {
    for_seeds(
        "every_byte_arrives_once_in_order_and_both_ends_close",
        2000,
        |seed| {
            let mut r = Rng::new(seed);
            let imp = random_impairments(&mut r);
            let (ca, cb) = (random_config(&mut r), random_config(&mut r));
            let (la, lb) = (1 + r.below(30_000) as usize, r.below(10_000) as usize);
            let mut n = Net::sim(ca, cb, imp, seed);
            let (x, y) = (pattern(la, seed), pattern(lb, !seed));
            n.a.outbox.extend(&x);
            n.b.outbox.extend(&y);
            n.a.close_when_sent = true;
            n.b.close_when_sent = true;
            n.run_out(3_600_000 * MS);
            assert_bytes(&n.b.got, &x);
            assert_bytes(&n.a.got, &y);
            for p in [&n.a, &n.b] {
                assert_eq!(p.conn.state(), State::Closed, "seed {seed}");
                assert_eq!(p.events.first(), Some(&Event::Established), "seed {seed}");
                assert!(
                    p.events.contains(&Event::PeerClosed),
                    "seed {seed}: {:?}",
                    p.events
                );
                assert_eq!(
                    p.events.last(),
                    Some(&Event::Closed),
                    "seed {seed}: {:?}",
                    p.events
                );
                assert_eq!(p.events.len(), 3, "seed {seed}: {:?}", p.events);
            }
            // Exactly one side waited in TIME-WAIT (or both, after a simultaneous close).
            let waited = [&n.a, &n.b]
                .iter()
                .filter(|p| p.states.contains(&State::TimeWait))
                .count();
            assert!(waited >= 1, "seed {seed}");
        },
    );
}

#[test]
fn retransmission_timeouts_double_up_to_the_cap() {
    for_seeds(
        "retransmission_timeouts_double_up_to_the_cap",
        200,
        |seed| {
            let mut r = Rng::new(seed);
            let delay = MS * (1 + r.below(100) as u32);
            let c = Config {
                max_retransmissions: 8,
                rto_max: MS * (500 + r.below(5000) as u32),
                ..cfg()
            };
            let mut n = Net::sim(
                c,
                cfg(),
                Impairments {
                    delay,
                    ..Impairments::default()
                },
                seed,
            );
            n.logging = true;
            n.established();
            let syn_timeouts = n.a.conn.stats().timeouts;
            // The path dies: nothing crosses from now on.
            let mut dead = n.wire.as_ref().unwrap().impairments().clone();
            dead.loss = 1.0;
            n.wire.as_mut().unwrap().set_impairments(dead);
            n.a.outbox.extend(pattern(100, seed));
            n.run_out(3_600_000 * MS);
            let sends: Vec<Duration> = n
                .sent(Side::A, |l| l.len == 100)
                .iter()
                .map(|l| l.at)
                .collect();
            // The first send, one to three loss probes (RFC 8985; each next one waits
            // twice as long, while that comes before the timer), eight
            // retransmissions.
            let probes = n.a.conn.stats().loss_probes as usize;
            assert!((1..=3).contains(&probes), "seed {seed}: {probes}");
            assert_eq!(sends.len(), 9 + probes, "seed {seed}");
            let gaps: Vec<Duration> = sends.windows(2).map(|w| w[1] - w[0]).collect();
            let cap = n.a.conn.config().rto_max;
            assert!(gaps[0] >= 2 * delay, "seed {seed}: {gaps:?}");
            for g in gaps[..probes].windows(2) {
                assert!(g[1] > g[0], "seed {seed}: {gaps:?}");
            }
            // The last probe restarted the timer: from it on, timeouts double.
            for g in gaps[probes..].windows(2) {
                assert_eq!(g[1], (2 * g[0]).min(cap), "seed {seed}: {gaps:?}");
            }
            assert!(
                gaps[1] >= cfg().rto_min && gaps[1] >= 2 * delay,
                "seed {seed}: {gaps:?}"
            );
            assert_eq!(n.a.conn.stats().timeouts - syn_timeouts, 9);
            assert_eq!(n.a.events.last(), Some(&Event::TimedOut));
        },
    );
}

/// A clean wire with a seeded delay and jitter, and a filter that drops the data
/// segments from a whose indices (in order of first sending) are listed, once each.
fn lossy_at(seed: u64, drops: Vec<usize>, c: Config) -> (Net, Rc<RefCell<Vec<usize>>>) {
    let mut r = Rng::new(seed ^ 0x5eed);
    let delay = MS * (1 + r.below(30) as u32);
    let imp = Impairments {
        delay,
        jitter: delay.mul_f64(r.unit() * 0.5),
        ..Impairments::default()
    };
    let mut n = Net::sim(c.clone(), c, imp, seed);
    let dropped = Rc::new(RefCell::new(Vec::new()));
    let d = dropped.clone();
    let mut next = 0usize;
    let mut seen = std::collections::HashSet::new();
    n.filter = Some(Box::new(move |from, seg| {
        if from != Side::A || seg.payload.is_empty() || !seen.insert(seg.seq.0) {
            return Verdict::Pass;
        }
        let i = next;
        next += 1;
        if drops.contains(&i) {
            d.borrow_mut().push(seg.payload.len());
            return Verdict::Drop;
        }
        Verdict::Pass
    }));
    (n, dropped)
}

fn big_window() -> Config {
    Config {
        send_buffer: 1 << 20,
        recv_buffer: 1 << 20,
        ..cfg()
    }
}

#[test]
fn fast_retransmit_repairs_a_single_loss_without_a_timeout() {
    for_seeds(
        "fast_retransmit_repairs_a_single_loss_without_a_timeout",
        200,
        |seed| {
            let mut r = Rng::new(seed);
            // 100 segments; the lost one has at least three behind it.
            let k = r.below(96) as usize;
            let sack = r.chance(0.5);
            let (mut n, dropped) = lossy_at(
                seed,
                vec![k],
                Config {
                    sack,
                    ..big_window()
                },
            );
            n.a.outbox.extend(pattern(100_000, seed));
            n.run_until(600_000 * MS, |n| n.b.got.len() == 100_000);
            assert_bytes(&n.b.got, &pattern(100_000, seed));
            assert_eq!(dropped.borrow().len(), 1);
            let s = n.a.conn.stats();
            assert_eq!(s.timeouts, 0, "seed {seed}: lost segment {k}");
            assert_eq!(s.fast_retransmits, 1, "seed {seed}");
            assert_eq!(s.retransmitted_segments, 1, "seed {seed}");
        },
    );
}

#[test]
fn sack_resends_only_the_holes() {
    for_seeds("sack_resends_only_the_holes", 200, |seed| {
        let mut r = Rng::new(seed);
        let mut drops: Vec<usize> = (0..1 + r.below(5)).map(|_| r.below(92) as usize).collect();
        drops.sort_unstable();
        drops.dedup();
        let (mut n, dropped) = lossy_at(seed, drops.clone(), big_window());
        n.a.outbox.extend(pattern(100_000, seed));
        n.run_until(600_000 * MS, |n| n.b.got.len() == 100_000);
        assert_bytes(&n.b.got, &pattern(100_000, seed));
        let lost: usize = dropped.borrow().iter().sum();
        let s = n.a.conn.stats();
        assert_eq!(dropped.borrow().len(), drops.len());
        assert_eq!(
            s.retransmitted_bytes, lost as u64,
            "seed {seed}: holes {drops:?}"
        );
        assert_eq!(s.timeouts, 0, "seed {seed}: holes {drops:?}");
    });
}

#[test]
fn a_stalled_reader_resumes_under_loss() {
    for_seeds("a_stalled_reader_resumes_under_loss", 300, |seed| {
        let mut r = Rng::new(seed);
        let imp = Impairments {
            delay: MS * (1 + r.below(10) as u32),
            loss: 0.05 * r.unit(),
            ..Impairments::default()
        };
        let mut n = Net::sim(cfg(), cfg(), imp, seed);
        n.a.outbox.extend(pattern(60_000, seed));
        n.b.reading = false;
        let pause = MS * (100 + r.below(5000) as u32);
        n.run_until(600_000 * MS, |n| n.now >= pause);
        n.b.reading = true;
        n.run_until(600_000 * MS, |n| n.b.got.len() == 60_000);
        assert_bytes(&n.b.got, &pattern(60_000, seed));
        assert!(
            n.a.events.iter().all(|e| *e == Event::Established),
            "seed {seed}"
        );
    });
}

#[test]
fn a_reset_aborts_both_ends() {
    for_seeds("a_reset_aborts_both_ends", 200, |seed| {
        let mut r = Rng::new(seed);
        let imp = Impairments {
            delay: MS * (1 + r.below(10) as u32),
            loss: 0.1 * r.unit(),
            ..Impairments::default()
        };
        // b probes when idle: if the reset is lost after everything was sent, a's
        // answer to a probe (a reset too) still reaches b.
        let cb = Config {
            keepalive: Some(softrnic_tcp::Keepalive {
                idle: 1000 * MS,
                interval: 100 * MS,
                probes: 10,
            }),
            ..cfg()
        };
        let mut n = Net::sim(cfg(), cb, imp, seed);
        let (x, y) = (pattern(200_000, seed), pattern(200_000, !seed));
        n.a.outbox.extend(&x);
        n.b.outbox.extend(&y);
        n.established();
        let at = n.now + MS * r.below(200) as u32;
        n.run_until(600_000 * MS, |n| n.now >= at);
        n.a.conn.abort();
        n.run_until(600_000 * MS, |n| n.b.conn.state() == State::Closed);
        assert_eq!(n.a.conn.state(), State::Closed);
        assert_eq!(
            n.b.events,
            [Event::Established, Event::Reset],
            "seed {seed}"
        );
        // What arrived before the reset is a prefix of what was sent.
        assert_bytes(&n.b.got, &x[..n.b.got.len()]);
        assert_bytes(&n.a.got, &y[..n.a.got.len()]);
    });
}
