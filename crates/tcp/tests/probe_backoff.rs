//! Loss probes in a row (RFC 8985's tail loss probe, backed off as QUIC's probe
//! timeout is, RFC 9002 6.2): a small message lost together with its first probe is
//! repaired by the next probe, not by the retransmission timer, whose floor on
//! softrnic's in-process network (100 ms) must outlast a stalled thread. After
//! three probes that hear nothing, the timer acts.

mod common;

use common::*;
use softrnic_tcp::Config;
use std::cell::Cell;
use std::rc::Rc;

/// ACKs not delayed, a 100 ms floor under the timeout, a 2 ms round trip.
fn config() -> Config {
    Config {
        delayed_ack: None,
        peer_max_ack_delay: MS,
        rto_min: 100 * MS,
        ..cfg()
    }
}

/// a and b connected, 1000 octets moved (the round trip is measured); then the
/// next `drop` sendings of a data segment from a are lost. Returns the counter of
/// sendings dropped.
fn lossy_after_warm_up(drop: u32) -> (Net, Rc<Cell<u32>>) {
    let mut n = Net::new(config(), config());
    n.established();
    n.a.outbox.extend(pattern(1000, 1));
    n.run_until(10_000 * MS, |n| {
        n.b.got.len() == 1000 && n.a.conn.unacknowledged() == 0
    });
    let dropped = Rc::new(Cell::new(0));
    let d = dropped.clone();
    n.filter = Some(Box::new(move |from, seg| {
        if from == Side::A && !seg.payload.is_empty() && d.get() < drop {
            d.set(d.get() + 1);
            Verdict::Drop
        } else {
            Verdict::Pass
        }
    }));
    (n, dropped)
}

#[test]
fn a_message_lost_with_its_first_probe_is_repaired_by_the_second() {
    let (mut n, dropped) = lossy_after_warm_up(2);
    let from = n.now;
    n.a.outbox.extend(pattern(100, 2));
    n.run_until(10_000 * MS, |n| {
        n.b.got.len() == 1100 && n.a.conn.unacknowledged() == 0
    });
    assert_eq!(dropped.get(), 2);
    assert_bytes(&n.b.got[1000..], &pattern(100, 2));
    let s = n.a.conn.stats();
    assert_eq!(s.timeouts, 0, "{s:?}");
    assert_eq!(s.loss_probes, 2, "{s:?}");
    // Two probe waits (about 5 ms and 10 ms) and a round trip, far below the floor.
    assert!(n.now - from < 30 * MS, "{:?}", n.now - from);
}

#[test]
fn after_three_unanswered_probes_the_timer_repairs_with_backoff() {
    let (mut n, dropped) = lossy_after_warm_up(4);
    let from = n.now;
    n.a.outbox.extend(pattern(100, 2));
    n.run_until(10_000 * MS, |n| {
        n.b.got.len() == 1100 && n.a.conn.unacknowledged() == 0
    });
    assert_eq!(dropped.get(), 4);
    assert_bytes(&n.b.got[1000..], &pattern(100, 2));
    let s = n.a.conn.stats();
    // The segment, three probes, then the timeout's retransmission (the fifth
    // sending) arrives.
    assert_eq!(s.loss_probes, 3, "{s:?}");
    assert_eq!(s.timeouts, 1, "{s:?}");
    assert!(n.now - from >= 100 * MS, "{:?}", n.now - from);
}

/// A lone message lost once and repaired by its probe: the acknowledgment covers
/// exactly the probe, with no duplicate reported, so the probe's episode waits for an
/// acknowledgment beyond it (RFC 8985 7.4), and none comes until the next message
/// (a Read Response after another). That next message, lost once too, still gets a
/// probe of its own instead of waiting for the retransmission timer.
#[test]
fn a_message_after_one_its_probe_repaired_gets_a_probe_of_its_own() {
    let (mut n, dropped) = lossy_after_warm_up(0);
    // Drop the first sending of each of the next two messages, not their probes.
    let d = dropped.clone();
    let mut sendings = 0u32;
    n.filter = Some(Box::new(move |from, seg| {
        if from == Side::A && !seg.payload.is_empty() {
            sendings += 1;
            if sendings == 1 || sendings == 3 {
                d.set(d.get() + 1);
                return Verdict::Drop;
            }
        }
        Verdict::Pass
    }));
    n.a.outbox.extend(pattern(100, 2));
    n.run_until(10_000 * MS, |n| {
        n.b.got.len() == 1100 && n.a.conn.unacknowledged() == 0
    });
    assert_eq!(n.a.conn.stats().loss_probes, 1);
    let from = n.now;
    n.a.outbox.extend(pattern(100, 3));
    n.run_until(10_000 * MS, |n| {
        n.b.got.len() == 1200 && n.a.conn.unacknowledged() == 0
    });
    assert_eq!(dropped.get(), 2);
    assert_bytes(&n.b.got[1000..1100], &pattern(100, 2));
    assert_bytes(&n.b.got[1100..], &pattern(100, 3));
    let s = n.a.conn.stats();
    assert_eq!(s.timeouts, 0, "{s:?}");
    assert_eq!(s.loss_probes, 2, "{s:?}");
    // The first probe was the only copy of its message that arrived: that is settled
    // when the second probe goes (the second's episode waits for a later message).
    assert_eq!(s.probe_recoveries, 1, "{s:?}");
    assert!(n.now - from < 30 * MS, "{:?}", n.now - from);
}

/// In a fast recovery, the retransmission of a hole is lost while the window holds
/// every new segment back (here the congestion window; on softrnic's in-process
/// network often the peer's, counted from the hole), so nothing sent after it can show
/// RACK the loss: the probe resends it. When that probe is lost too, the next
/// probe repairs the hole, not the retransmission timer.
#[test]
fn a_retransmission_lost_with_its_probe_is_repaired_by_the_next_probe() {
    let (mut n, dropped) = lossy_after_warm_up(0);
    // The second segment of the transfer: its first sending, its retransmission (RACK
    // sees that one lost by the segments sent after it and resends it again), that
    // third sending, sent when the window holds the rest back, and the probe that
    // resends it are lost.
    let d = dropped.clone();
    let mut hole = None;
    n.filter = Some(Box::new(move |from, seg| {
        if from == Side::A && !seg.payload.is_empty() {
            let target = *hole.get_or_insert(seg.seq + 1000);
            if seg.seq == target && d.get() < 4 {
                d.set(d.get() + 1);
                return Verdict::Drop;
            }
        }
        Verdict::Pass
    }));
    let from = n.now;
    n.a.outbox.extend(pattern(40_000, 2));
    n.run_until(10_000 * MS, |n| {
        n.b.got.len() == 41_000 && n.a.conn.unacknowledged() == 0
    });
    assert_eq!(dropped.get(), 4);
    assert_bytes(&n.b.got[1000..], &pattern(40_000, 2));
    let s = n.a.conn.stats();
    assert_eq!(s.fast_retransmits, 1, "{s:?}");
    assert_eq!(s.timeouts, 0, "{s:?}");
    assert_eq!(s.loss_probes, 2, "{s:?}");
    assert!(n.now - from < 100 * MS, "{:?}", n.now - from);
}
