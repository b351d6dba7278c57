//! The receive path's copy policy, octet for octet (see `RX_DIRECT_MIN`): for each
//! message size, how many payload octets were copied in user space and how many were
//! read straight into registered memory; and a payload that cannot be placed (its region
//! deregistered after the TPT check) is an error, never a silent drop.
//!
//! The split is deterministic whatever the timing: in exact mode no read goes beyond the
//! current FPDU's payload or the next FPDU's header, and read-ahead only ever meets
//! small FPDUs after the first large one; only the first large message on a connection
//! has a timing-dependent split, bounded by one staging buffer.

mod common;

use common::*;
use softrnic_rnic::*;
use softrnic_wire::ddp::{DdpRepr, Placement, UNTAGGED_HEADER_LEN};
use softrnic_wire::mpa;
use softrnic_wire::rdmap::Opcode;
use std::io::{Read, Write};
use std::time::Instant;

/// Messages per size: the first one on a fresh connection, then the steady state.
const N: usize = 6;

const SIZES: [usize; 10] = [
    1,
    4096,
    16 << 10,
    RX_DIRECT_MIN - 1,
    RX_DIRECT_MIN,
    48 << 10,
    64 << 10,
    (64 << 10) + 1,
    256 << 10,
    1 << 20,
];

/// Payload octets the QP has placed: (copied, direct).
fn split(qp: &Qp) -> (u64, u64) {
    let s = qp.stats();
    (s.rx_copied_bytes, s.rx_direct_bytes)
}

/// Waits until `qp` has placed `total` payload octets (the engine thread places a
/// Write's payload without any completion at the target). Panics after [`WAIT`].
fn wait_placed(qp: &Qp, total: u64) {
    let end = Instant::now() + WAIT;
    loop {
        let (c, d) = split(qp);
        if c + d == total {
            return;
        }
        assert!(c + d < total, "placed {} octets, expected {total}", c + d);
        assert!(Instant::now() < end, "placed {} of {total} octets", c + d);
        std::thread::yield_now();
    }
}

/// The split the policy promises for messages 2..N of `size` octets: small FPDUs are
/// copied (read ahead), large ones and a large message's short last FPDU go straight
/// into memory. (With the default loopback FPDU of 65000 octets, every FPDU of a message
/// of `RX_DIRECT_MIN` or more is large except its last.)
fn steady(size: usize) -> (u64, u64) {
    let octets = ((N - 1) * size) as u64;
    if size >= RX_DIRECT_MIN {
        (0, octets)
    } else {
        (octets, 0)
    }
}

/// Checks the first message's split: a small one is copied whole; of a large one at
/// most one staging buffer's worth (what came in with the connection's first read-ahead)
/// is copied.
fn check_first(what: &str, size: usize, (c, d): (u64, u64)) {
    assert_eq!(c + d, size as u64, "{what} {size}: first message placed");
    if size < RX_DIRECT_MIN {
        assert_eq!((c, d), (size as u64, 0), "{what} {size}: first message");
    } else {
        assert!(
            c <= RX_STAGING_LEN as u64,
            "{what} {size}: first message copied {c} octets"
        );
    }
}

#[test]
fn write_copy_split_per_size() {
    for size in SIZES {
        let (a, b) = pair();
        let data = pattern(N * size, size as u64);
        let src = a.pd.alloc_mr(N * size, Access::empty()).unwrap();
        src.write(0, &data).unwrap();
        let dst =
            b.pd.alloc_mr(N * size, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
                .unwrap();
        let post = |i: usize| {
            a.qp.post_send(SendWr::write(
                i as u64,
                src.sge(i * size, size),
                dst.addr() + (i * size) as u64,
                dst.rkey(),
            ))
            .unwrap();
        };
        post(0);
        wait_placed(&b.qp, size as u64);
        let first = split(&b.qp);
        check_first("write", size, first);
        for i in 1..N {
            post(i);
        }
        wait_placed(&b.qp, (N * size) as u64);
        let (c, d) = split(&b.qp);
        assert_eq!(
            (c - first.0, d - first.1),
            steady(size),
            "write {size}: (copied, direct) of messages 2..{N}"
        );
        let done = take(&a.cq, N);
        assert!(
            done.iter().all(|c| c.status == WcStatus::Success),
            "{done:?}"
        );
        assert!(dst.to_vec() == data, "write {size}: data");
    }
}

#[test]
fn send_copy_split_per_size() {
    for size in SIZES {
        let (a, b) = pair();
        let data = pattern(N * size, 7 + size as u64);
        let src = a.pd.alloc_mr(N * size, Access::empty()).unwrap();
        src.write(0, &data).unwrap();
        let dst = b.pd.alloc_mr(N * size, Access::LOCAL_WRITE).unwrap();
        for i in 0..N {
            b.qp.post_recv(RecvWr::new(100 + i as u64, dst.sge(i * size, size)))
                .unwrap();
        }
        let post = |i: usize| {
            a.qp.post_send(SendWr::send(i as u64, src.sge(i * size, size)))
        };
        post(0).unwrap();
        let r = one(&b.cq);
        assert_eq!(
            (r.wr_id, r.status, r.byte_len),
            (100, WcStatus::Success, size as u32)
        );
        let first = split(&b.qp);
        check_first("send", size, first);
        for i in 1..N {
            post(i).unwrap();
        }
        let got = take(&b.cq, N - 1);
        assert!(
            got.iter().all(|c| c.opcode == WcOpcode::Recv
                && c.status == WcStatus::Success
                && c.byte_len == size as u32),
            "{got:?}"
        );
        let sent = take(&a.cq, N);
        assert!(
            sent.iter().all(|c| c.status == WcStatus::Success),
            "{sent:?}"
        );
        let (c, d) = split(&b.qp);
        assert_eq!(
            (c - first.0, d - first.1),
            steady(size),
            "send {size}: (copied, direct) of messages 2..{N}"
        );
        assert!(dst.to_vec() == data, "send {size}: data");
    }
}

/// An untagged Send FPDU (MSN 1, the first Send) carrying `payload`, CRC off.
fn send_fpdu(payload: &[u8]) -> Vec<u8> {
    let mut hdr = [0u8; UNTAGGED_HEADER_LEN];
    DdpRepr {
        last: true,
        opcode: Opcode::Send,
        placement: Placement::Untagged {
            rsvd_ulp: 0,
            qn: 0,
            msn: 1,
            mo: 0,
        },
    }
    .emit(&mut hdr)
    .unwrap();
    let mut out = vec![0u8; mpa::fpdu_len(UNTAGGED_HEADER_LEN + payload.len())];
    let n = mpa::emit_fpdu(&[&hdr, payload], false, None, &mut out).unwrap();
    out.truncate(n);
    out
}

/// The receive buffer's region is deregistered after the Send's header passed the TPT
/// check and its first payload octet was placed: the rest cannot be placed. The QP goes
/// to error, the receive completes with an error (not Success with octets that were
/// never placed), and the connection closes. `size` picks the path that meets the
/// missing region: a small payload is read ahead and copied, a large one is read
/// directly.
fn region_gone_mid_payload(size: usize) {
    let b = end().cq(64).queues(4, 4).build();
    let buf = b.pd.alloc_mr(size, Access::LOCAL_WRITE).unwrap();
    b.qp.post_recv(RecvWr::new(7, buf.sge(0, size))).unwrap();
    let mut c = raw_initiator(&b);
    let fpdu = send_fpdu(&pattern(size, 3));
    let first = 2 + UNTAGGED_HEADER_LEN + 1;
    c.write_all(&fpdu[..first]).unwrap();
    // The header was checked against the TPT and one payload octet placed (copied: it
    // came in with the header).
    wait_placed(&b.qp, 1);
    assert_eq!(split(&b.qp), (1, 0));
    drop(buf);
    c.write_all(&fpdu[first..]).unwrap();
    let r = one(&b.cq);
    assert_eq!(r.wr_id, 7);
    assert_ne!(
        r.status,
        WcStatus::Success,
        "{size}: a receive never placed"
    );
    disconnected(&b.dev, &b.qp);
    assert_eq!(b.qp.state(), QpState::Error);
    // Nothing more was counted as placed, and the peer sees the connection end.
    assert_eq!(split(&b.qp), (1, 0));
    let mut rest = Vec::new();
    match c.read_to_end(&mut rest) {
        Ok(_) => {}
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}"),
    }
    assert!(b.cq.poll_one().is_none());
}

/// A large payload whose start came in with a read-ahead (all of it but its last 100
/// octets, in one TCP segment) is finished by reading the rest directly, even though
/// the rest is short: the payload, not the piece, decides.
#[test]
fn large_payload_begun_in_read_ahead_is_finished_directly() {
    const S: usize = RX_DIRECT_MIN;
    const TAIL: usize = 100;
    // What goes first fits one read-ahead.
    const { assert!(2 + UNTAGGED_HEADER_LEN + S - TAIL <= RX_STAGING_LEN) };
    let b = end().cq(64).queues(4, 4).build();
    let buf = b.pd.alloc_mr(S, Access::LOCAL_WRITE).unwrap();
    b.qp.post_recv(RecvWr::new(7, buf.sge(0, S))).unwrap();
    let mut c = raw_initiator(&b);
    let data = pattern(S, 5);
    let fpdu = send_fpdu(&data);
    let head = 2 + UNTAGGED_HEADER_LEN + S - TAIL;
    c.write_all(&fpdu[..head]).unwrap();
    wait_placed(&b.qp, (S - TAIL) as u64);
    c.write_all(&fpdu[head..]).unwrap();
    let r = one(&b.cq);
    assert_eq!(
        (r.wr_id, r.status, r.byte_len),
        (7, WcStatus::Success, S as u32)
    );
    let (copied, direct) = split(&b.qp);
    assert_eq!(copied + direct, S as u64);
    // (If the kernel split the first part, some of it was read directly too.)
    assert!(direct >= TAIL as u64, "copied {copied}, direct {direct}");
    assert!(buf.to_vec() == data);
}

#[test]
fn region_gone_mid_small_payload_is_an_error() {
    region_gone_mid_payload(100);
}

#[test]
fn region_gone_mid_large_payload_is_an_error() {
    region_gone_mid_payload(RX_DIRECT_MIN + 4096);
}

/// Large Writes, each followed by a small Send (a rendezvous handshake): the Write's
/// short last FPDU and the Send are two small FPDUs in a row, which do not end exact
/// mode, so after the first Write nothing is copied, the small Sends included.
#[test]
fn large_writes_with_small_sends_between_stay_direct() {
    const W: usize = 64 << 10;
    const S: usize = 8;
    let (a, b) = pair();
    let data = pattern(N * (W + S), 11);
    let src = a.pd.alloc_mr(N * (W + S), Access::empty()).unwrap();
    src.write(0, &data).unwrap();
    let dst =
        b.pd.alloc_mr(N * W, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
    let small = b.pd.alloc_mr(N * S, Access::LOCAL_WRITE).unwrap();
    for i in 0..N {
        b.qp.post_recv(RecvWr::new(100 + i as u64, small.sge(i * S, S)))
            .unwrap();
    }
    let post = |i: usize| {
        a.qp.post_send(SendWr::write(
            2 * i as u64,
            src.sge(i * W, W),
            dst.addr() + (i * W) as u64,
            dst.rkey(),
        ))
        .unwrap();
        a.qp.post_send(SendWr::send(2 * i as u64 + 1, src.sge(N * W + i * S, S)))
            .unwrap();
    };
    post(0);
    assert_eq!(one(&b.cq).status, WcStatus::Success);
    let first = split(&b.qp);
    check_first("write + send", W + S, first);
    for i in 1..N {
        post(i);
    }
    let got = take(&b.cq, N - 1);
    assert!(got.iter().all(|c| c.status == WcStatus::Success), "{got:?}");
    let (c, d) = split(&b.qp);
    assert_eq!(
        (c - first.0, d - first.1),
        (0, ((N - 1) * (W + S)) as u64),
        "(copied, direct) of rounds 2..{N}"
    );
    let sent = take(&a.cq, 2 * N);
    assert!(
        sent.iter().all(|c| c.status == WcStatus::Success),
        "{sent:?}"
    );
    assert!(dst.to_vec() == data[..N * W], "Write data");
    assert!(small.to_vec() == data[N * W..], "Send data");
}
