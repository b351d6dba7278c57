//! A QP's read copies a large segment's payload out of its packet buffer without the
//! stack's lock held: a reading thread descheduled mid-copy then holds back only its
//! own reading, and the stack goes on taking the peer's packets and answering them
//! (ACKs, SACKs, the repair of a hole). Under the lock, the whole receiving TCP waited
//! for that thread.

use super::SimNet;
use super::pair_fixture::{self, stack};
use super::stack::UserStack;
use super::transport::UserTransport;
use crate::engine::now;
use crate::transport::Transport;
use softrnic_tcp::ConnId;
use std::cell::RefCell;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

const A: Ipv4Addr = Ipv4Addr::new(10, 0, 3, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 0, 3, 2);
const PORT: u16 = 7003;

thread_local! {
    /// For each copy out of the reading transport: whether the stack was locked then.
    static LOCKED_AT_COPY: RefCell<Vec<bool>> = const { RefCell::new(Vec::new()) };
}

fn note_copy(s: &UserStack) {
    let locked = s.inner.try_lock().is_err();
    LOCKED_AT_COPY.with(|v| v.borrow_mut().push(locked));
}

/// A connection from `a` to `b`, established at both ends.
fn connect(a: &UserStack, b: &UserStack) -> (ConnId, ConnId) {
    pair_fixture::connect(a, b, A, SocketAddrV4::new(B, PORT))
}

#[test]
fn a_large_payload_is_copied_out_with_the_stack_free_and_the_window_reopens_after() {
    let net = SimNet::default();
    let a = stack(&net, A, 1);
    let b = stack(&net, B, 2);
    let (id_a, id_b) = connect(&a.stack, &b.stack);
    let mut reader = UserTransport::new(b.stack.clone(), id_b, false).unwrap();
    reader.on_copy = note_copy;

    // Three records of a segment each, as FPDUs sized to the MSS travel: each stays
    // in the packet buffer it arrived in at b (zero-copy receive).
    const RECORD: usize = 60_000;
    let data: Vec<u8> = (0..3 * RECORD).map(|i| (i * 13 + i / 251) as u8).collect();
    {
        let mut g = a.stack.lock().unwrap();
        for r in data.chunks(RECORD) {
            g.stack.send_record(id_a, r).unwrap();
        }
        a.stack.after(&mut g, id_a);
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while b.stack.lock().unwrap().stack.readable(id_b) < data.len() {
        assert!(Instant::now() < deadline, "the records did not arrive");
        std::thread::yield_now();
    }
    let window_before = b
        .stack
        .lock()
        .unwrap()
        .stack
        .stall_reports(now())
        .join("\n");

    // Read as a QP does: a header into staging, the payload into region memory, the
    // trailer with the next header.
    let mut got = vec![0u8; data.len()];
    let mut at = 0;
    for want in [16, RECORD - 20, 20, RECORD - 20, 20, RECORD - 16] {
        let n = reader.read(&mut got[at..at + want]).unwrap();
        assert_eq!(n, want, "a read of {want} at {at}");
        at += n;
    }
    assert_eq!(got, data, "bytes read are the bytes sent");
    let locked = LOCKED_AT_COPY.with(|v| v.borrow().clone());
    assert!(!locked.is_empty());
    assert!(
        locked.iter().all(|l| !l),
        "every copy out of a held segment ran with the stack's lock free: {locked:?}"
    );
    assert!(
        matches!(reader.read(&mut [0u8; 8]), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "nothing more to read"
    );

    // Every octet read is given back: b's window is whole again and nothing is unread.
    let report = b
        .stack
        .lock()
        .unwrap()
        .stack
        .stall_reports(now())
        .join("\n");
    assert!(report.contains(" unread 0 "), "{report}");
    assert!(
        window_before.contains(&format!(" unread {} ", data.len())),
        "{window_before}"
    );
    drop(reader);
}

#[test]
fn a_packet_handed_to_a_stack_another_thread_holds_is_counted() {
    let net = SimNet::default();
    let a = stack(&net, A, 3);
    let b = stack(&net, B, 4);
    let (id_a, id_b) = connect(&a.stack, &b.stack);
    let before = b.stack.stats().busy_handovers;
    {
        let _held = b.stack.lock().unwrap();
        let mut g = a.stack.lock().unwrap();
        assert_eq!(g.stack.send(id_a, b"x").unwrap(), 1);
        a.stack.after(&mut g, id_a);
    }
    assert!(b.stack.stats().busy_handovers > before);
    // And it was not lost: the stack took it once let go.
    let deadline = Instant::now() + Duration::from_secs(60);
    while b.stack.lock().unwrap().stack.readable(id_b) < 1 {
        assert!(Instant::now() < deadline, "the octet never arrived");
        std::thread::yield_now();
    }
}
