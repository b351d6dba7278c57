//! Work that falls due on a timer (a packet the simulated network held back, a loss
//! probe) is done by a thread that polls a connection ([`UserStack::serve_due`]), not
//! left to a stack thread that must first be woken and find a CPU. Both stack threads
//! are kept from taking a turn here, so only the poller can have done it.

use super::due::TIMER_SLACK;
use super::pair_fixture::{self, stack};
use super::stack::UserStack;
use super::{Impairments, SimNet};
use crate::engine::now;
use softrnic_tcp::ConnId;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

const A: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 2);
const PORT: u16 = 7001;

/// A connection from `a` to `b`, established at both ends.
fn connect(a: &UserStack, b: &UserStack) -> (ConnId, ConnId) {
    pair_fixture::connect(a, b, A, SocketAddrV4::new(B, PORT))
}

/// Keeps a stack's thread from taking a turn (it waits at the start of its next one).
fn hold_thread(s: &UserStack) -> MutexGuard<'_, ()> {
    s.gate.lock().unwrap()
}

fn turns(s: &UserStack) -> u64 {
    s.stats().stack_thread_turns
}

/// `poller` calls [`UserStack::serve_due`] until `b` has `n` octets to read on `id_b`.
fn poll_until_readable(poller: &UserStack, b: &UserStack, id_b: ConnId, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while b.lock().unwrap().stack.readable(id_b) < n {
        assert!(
            Instant::now() < deadline,
            "the poller did not deliver the octets in 60 s"
        );
        poller.serve_due();
        std::thread::yield_now();
    }
}

#[test]
fn a_held_back_packet_is_delivered_by_a_polling_thread_when_it_falls_due() {
    let net = SimNet::new(Impairments {
        reorder: 1.0,
        reorder_delay: Duration::from_millis(2),
        ..Impairments::default()
    });
    let a = stack(&net, A, 1);
    let b = stack(&net, B, 2);
    let (id_a, id_b) = connect(&a.stack, &b.stack);
    let data: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();

    let (hold_a, hold_b) = (hold_thread(&a.stack), hold_thread(&b.stack));
    let before = (turns(&a.stack), turns(&b.stack));
    let sent = Instant::now();
    {
        let mut ga = a.stack.lock().unwrap();
        assert_eq!(ga.stack.send(id_a, &data).unwrap(), data.len());
        a.stack.after(&mut ga, id_a);
    }
    let readable = b.stack.lock().unwrap().stack.readable(id_b);
    // Only a look taken within the 2 ms says anything (a test thread descheduled past
    // them, as under load, may find the packet handed on by then).
    if sent.elapsed() < Duration::from_millis(2) {
        assert_eq!(readable, 0, "the network holds the data back 2 ms");
    }
    // b's consumer polls: once the 2 ms have passed, its poll hands the packet to b.
    poll_until_readable(&b.stack, &b.stack, id_b, data.len());
    let mut got = vec![0u8; data.len()];
    assert_eq!(
        b.stack.lock().unwrap().stack.read(id_b, &mut got).unwrap(),
        data.len()
    );
    assert_eq!(got, data);
    assert_eq!(
        (turns(&a.stack), turns(&b.stack)),
        before,
        "a stack thread took a turn"
    );
    assert!(b.stack.stats().polled_pumps >= 1);
    drop((hold_a, hold_b));
}

#[test]
fn a_loss_probe_that_falls_due_is_sent_by_the_senders_polling_thread() {
    let net = SimNet::new(Impairments::default());
    let a = stack(&net, A, 1);
    let b = stack(&net, B, 2);
    let (id_a, id_b) = connect(&a.stack, &b.stack);
    let data: Vec<u8> = (0..3000u32).map(|i| (i * 5) as u8).collect();

    let (hold_a, hold_b) = (hold_thread(&a.stack), hold_thread(&b.stack));
    let before = (turns(&a.stack), turns(&b.stack));
    // The data is lost on the wire; then the wire is clean again.
    net.set_impairments(Impairments {
        loss: 1.0,
        ..Impairments::default()
    });
    {
        let mut ga = a.stack.lock().unwrap();
        assert_eq!(ga.stack.send(id_a, &data).unwrap(), data.len());
        a.stack.after(&mut ga, id_a);
    }
    net.set_impairments(Impairments::default());
    assert_eq!(net.stats().lost, 1);
    assert_eq!(b.stack.lock().unwrap().stack.readable(id_b), 0);
    // a's consumer polls: the loss probe (or the retransmission timer) falls due and
    // is sent from its thread, and b takes it in that thread too.
    poll_until_readable(&a.stack, &b.stack, id_b, data.len());
    let mut got = vec![0u8; data.len()];
    assert_eq!(
        b.stack.lock().unwrap().stack.read(id_b, &mut got).unwrap(),
        data.len()
    );
    assert_eq!(got, data);
    let tcp = a.stack.stats().tcp;
    assert_eq!(tcp.loss_probes, 1, "{tcp:?}");
    assert_eq!(tcp.timeouts, 0, "{tcp:?}");
    assert_eq!(
        (turns(&a.stack), turns(&b.stack)),
        before,
        "a stack thread took a turn"
    );
    drop((hold_a, hold_b));
}

#[test]
fn a_held_back_packet_and_the_timer_it_starts_arm_the_stack_threads_timers_without_waking_them() {
    let net = SimNet::new(Impairments {
        reorder: 1.0,
        reorder_delay: Duration::from_millis(2),
        ..Impairments::default()
    });
    let a = stack(&net, A, 1);
    let b = stack(&net, B, 2);
    let (id_a, id_b) = connect(&a.stack, &b.stack);
    let data: Vec<u8> = (0..3000u32).map(|i| (i * 3) as u8).collect();

    a.stack.wake.clear().unwrap();
    b.stack.wake.clear().unwrap();
    {
        let mut ga = a.stack.lock().unwrap();
        assert_eq!(ga.stack.send(id_a, &data).unwrap(), data.len());
        a.stack.after(&mut ga, id_a);
        assert!(ga.planned.is_some(), "a's timer was not planned");
    }
    assert!(
        !b.stack.wake.wait_readable(Some(Duration::ZERO)).unwrap(),
        "b's stack thread was woken to plan for a packet held back"
    );
    assert!(
        !a.stack.wake.wait_readable(Some(Duration::ZERO)).unwrap(),
        "a's stack thread was woken to plan the timer the send started"
    );
    assert!(
        b.stack
            .lock()
            .unwrap()
            .planned
            .is_some_and(|p| p < now() + Duration::from_secs(1)),
        "b's timer was not planned for the held-back packet"
    );
    // Nobody polls here: b's stack thread, on the timer armed from this thread,
    // delivers the data when it falls due.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut g = b.stack.lock().unwrap();
    while g.stack.readable(id_b) < data.len() {
        g = b
            .stack
            .wait_until(g, deadline)
            .unwrap()
            .expect("b's stack thread did not deliver in 60 s");
    }
    let mut got = vec![0u8; data.len()];
    assert_eq!(g.stack.read(id_b, &mut got).unwrap(), data.len());
    assert_eq!(got, data);
}

#[test]
fn a_deadline_nearer_than_the_slack_arms_the_stack_threads_timer_at_the_slack() {
    let net = SimNet::new(Impairments::default());
    let a = stack(&net, A, 1);
    let hold = hold_thread(&a.stack);
    let mut g = a.stack.lock().unwrap();
    g.planned = None;
    let t0 = now();
    a.stack.plan(&mut g, Some(t0 + Duration::from_micros(1)));
    let first = g.planned.expect("nothing was planned");
    assert!(
        first >= t0 + TIMER_SLACK,
        "armed {:?} after planning, not the slack",
        first - t0
    );
    // A deadline planned meanwhile that is nearer still leaves the timer as armed:
    // the polling threads do that work on time.
    a.stack.plan(&mut g, Some(t0));
    assert_eq!(g.planned, Some(first));
    // A deadline beyond the slack is armed for its own time.
    g.planned = None;
    let far = now() + 10 * TIMER_SLACK;
    a.stack.plan(&mut g, Some(far));
    assert_eq!(g.planned, Some(far));
    drop(g);
    drop(hold);
}

#[test]
fn a_stack_with_nothing_planned_arms_its_idle_timer_once_not_on_every_plan() {
    let net = SimNet::new(Impairments::default());
    let a = stack(&net, A, 1);
    let hold = hold_thread(&a.stack);
    let mut g = a.stack.lock().unwrap();
    g.planned = None;
    a.stack.plan(&mut g, None);
    let idle = g.planned.expect("the idle wake was not recorded");
    // Planning nothing again leaves the timer as armed (no timerfd_settime).
    a.stack.plan(&mut g, None);
    assert_eq!(g.planned, Some(idle));
    // A real deadline still comes first.
    let soon = now() + 10 * TIMER_SLACK;
    a.stack.plan(&mut g, Some(soon));
    assert_eq!(g.planned, Some(soon));
    drop(g);
    drop(hold);
}
