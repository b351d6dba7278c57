//! Packets handed to a device's stack while another thread holds it (the peer's ACKs
//! to what that thread just sent, most often) are taken by the holder before it lets
//! go, not left for the stack thread to wake up for.

use super::SimNet;
use super::pair_fixture::{self, stack};
use super::stack::UserStack;
use softrnic_tcp::ConnId;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

const A: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const PORT: u16 = 7000;

/// Waits on `s`'s condition variable until `done` holds of its stack.
fn wait_for<T>(s: &UserStack, mut done: impl FnMut(&mut softrnic_tcp::Stack) -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut g = s.lock().unwrap();
    loop {
        if let Some(v) = done(&mut g.stack) {
            return v;
        }
        g = s
            .wait_until(g, deadline)
            .unwrap()
            .expect("nothing happened in 60 s");
    }
}

/// A connection from `a` to `b`, established at both ends.
fn connect(a: &UserStack, b: &UserStack) -> (ConnId, ConnId) {
    pair_fixture::connect(a, b, A, SocketAddrV4::new(B, PORT))
}

#[test]
fn packets_that_arrive_while_the_stack_is_held_are_taken_before_it_is_let_go() {
    let net = SimNet::new(Default::default());
    let a = stack(&net, A, 1);
    let b = stack(&net, B, 2);
    let (id_a, id_b) = connect(&a.stack, &b.stack);
    let data: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();

    // This thread holds b's stack while a sends: the packets cannot be taken in this
    // thread (b is busy) nor by b's stack thread (it waits for the lock).
    let mut gb = b.stack.lock().unwrap();
    {
        let mut ga = a.stack.lock().unwrap();
        assert_eq!(ga.stack.send(id_a, &data).unwrap(), data.len());
        a.stack.after(&mut ga, id_a);
    }
    assert_eq!(gb.stack.readable(id_b), 0, "b was held: nothing taken yet");
    // The holder's call ends: what came meanwhile is taken before b is let go.
    b.stack.after(&mut gb, id_b);
    assert_eq!(gb.stack.readable(id_b), data.len());
    let mut got = vec![0u8; data.len()];
    assert_eq!(gb.stack.read(id_b, &mut got).unwrap(), data.len());
    assert_eq!(got, data);
}

#[test]
fn a_hand_over_to_a_holder_that_takes_it_wakes_no_thread() {
    let net = SimNet::new(Default::default());
    let a = stack(&net, A, 1);
    let b = stack(&net, B, 2);
    let (id_a, id_b) = connect(&a.stack, &b.stack);
    let data: Vec<u8> = (0..3000u32).map(|i| (i * 11) as u8).collect();

    // This thread holds b as a QP's read or send does, promising to take what comes.
    let gb = b.stack.lock_taking().unwrap();
    b.stack.wake.clear().unwrap();
    {
        let mut ga = a.stack.lock().unwrap();
        assert_eq!(ga.stack.send(id_a, &data).unwrap(), data.len());
        a.stack.after(&mut ga, id_a);
    }
    assert!(
        !b.stack.wake.wait_readable(Some(Duration::ZERO)).unwrap(),
        "b's stack thread was woken for packets its holder takes"
    );
    assert_eq!(gb.stack.readable(id_b), 0, "b was held: nothing taken yet");
    // Letting go takes them.
    drop(gb);
    let mut g = b.stack.lock().unwrap();
    assert_eq!(g.stack.readable(id_b), data.len());
    let mut got = vec![0u8; data.len()];
    assert_eq!(g.stack.read(id_b, &mut got).unwrap(), data.len());
    assert_eq!(got, data);
}

#[test]
fn a_holder_stops_taking_hand_overs_after_the_cap_and_leaves_them_to_the_stack_thread() {
    use super::backlog::MAX_ROUNDS;
    use std::sync::atomic::Ordering;
    let net = SimNet::new(Default::default());
    let a = stack(&net, A, 1);
    let b = stack(&net, B, 2);
    let (id_a, id_b) = connect(&a.stack, &b.stack);
    // A peer that hands over again in every round: each round a sends a chunk, which
    // reaches b's backlog because this thread holds b.
    let chunks = 2 * MAX_ROUNDS;
    let chunk: usize = 1000;
    let mut sent: Vec<u8> = Vec::new();
    // Held as a QP's read does (promising to take the backlog), but with a plain
    // guard so that letting go below takes nothing itself.
    let mut gb = b.stack.lock().unwrap();
    b.stack.taker.store(true, Ordering::SeqCst);
    let rounds = b.stack.release_with(&mut gb, |s, g| {
        s.take_backlog(g);
        // Only the release itself may wake the stack thread from here on.
        s.wake.clear().unwrap();
        if sent.len() < chunks * chunk {
            let data: Vec<u8> = (0..chunk).map(|i| (sent.len() + i * 13) as u8).collect();
            let mut ga = a.stack.lock().unwrap();
            assert_eq!(ga.stack.send(id_a, &data).unwrap(), chunk);
            a.stack.after(&mut ga, id_a);
            sent.extend_from_slice(&data);
            assert!(
                s.backlog.load(Ordering::SeqCst),
                "a's chunk was not handed to b's backlog"
            );
        }
    });
    assert_eq!(rounds, MAX_ROUNDS, "the holder kept taking hand-overs");
    assert_eq!(sent.len(), MAX_ROUNDS * chunk);
    assert!(
        b.stack.wake.wait_readable(Some(Duration::ZERO)).unwrap(),
        "the holder left a backlog without waking the stack thread"
    );
    // The last round's chunk was left; everything before it was taken by the holder.
    assert_eq!(gb.stack.readable(id_b), (MAX_ROUNDS - 1) * chunk);
    drop(gb);
    // The stack thread takes the rest: every octet arrives, in order.
    let n = wait_for(&b.stack, |st| {
        (st.readable(id_b) == sent.len()).then_some(sent.len())
    });
    let mut got = vec![0u8; n];
    assert_eq!(
        b.stack.lock().unwrap().stack.read(id_b, &mut got).unwrap(),
        n
    );
    assert_eq!(got, sent);
}

#[test]
fn a_hand_over_while_an_inline_holder_arms_the_timer_is_taken_by_it_and_wakes_no_thread() {
    use std::sync::Arc;
    const C: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 3);
    let net = SimNet::new(Default::default());
    let a = stack(&net, A, 1);
    let b = stack(&net, B, 2);
    let c = stack(&net, C, 3);
    let (id_a, _) = connect(&a.stack, &b.stack);
    let (id_c, id_cb) =
        pair_fixture::connect(&c.stack, &b.stack, C, SocketAddrV4::new(B, PORT + 1));
    let first: Vec<u8> = (0..3000u32).map(|i| (i * 3) as u8).collect();
    let second: Vec<u8> = (0..2000u32).map(|i| (i * 5 + 1) as u8).collect();

    // b's stack thread takes no turn: only a holder can take what is handed over.
    let hold_b = b.stack.gate.lock().unwrap();
    b.stack.wake.clear().unwrap();
    // While a's packet is taken into b in a's sending thread (b was free), that holder
    // arms b's timer; right then c hands b a packet.
    let (c_stack, data) = (Arc::clone(&c.stack), second.clone());
    *b.stack.on_plan.lock().unwrap() = Some(Box::new(move || {
        let mut gc = c_stack.lock().unwrap();
        assert_eq!(gc.stack.send(id_c, &data).unwrap(), data.len());
        c_stack.after(&mut gc, id_c);
    }));
    {
        let mut ga = a.stack.lock().unwrap();
        assert_eq!(ga.stack.send(id_a, &first).unwrap(), first.len());
        a.stack.after(&mut ga, id_a);
    }
    assert!(
        b.stack.on_plan.lock().unwrap().is_none(),
        "b's inline holder armed no timer"
    );
    assert!(
        !b.stack.wake.wait_readable(Some(Duration::ZERO)).unwrap(),
        "c's hand-over woke b's stack thread: the holder had stopped promising to take it"
    );
    let mut g = b.stack.lock().unwrap();
    assert_eq!(
        g.stack.readable(id_cb),
        second.len(),
        "the holder let b go with c's packet in the backlog"
    );
    let mut got = vec![0u8; second.len()];
    assert_eq!(g.stack.read(id_cb, &mut got).unwrap(), second.len());
    assert_eq!(got, second);
    drop(g);
    drop(hold_b);
}
