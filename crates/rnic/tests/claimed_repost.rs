//! A busy-polling consumer that holds its QP's socket reposts each receive as its
//! completion comes back, as perftest's send_lat does: the single repost
//! (`Qp::post_recv` with the device the claim keeps). Every Send of a ping-pong lands
//! its octets in the reposted buffer, in order, completed once with its length; on
//! the claimed QP the queue's room is still answered at once (`QueueFull`), a repost
//! into a deregistered region still fails the QP with a local protection error and
//! closes the connection, and a post to the failed QP is flushed.

mod common;

use common::*;
use softrnic_proto::qp::PostError;
use softrnic_rnic::handoff::CLAIM_AFTER;
use softrnic_rnic::*;

const SLOT: usize = 64;
const SLOTS: usize = 4;

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Busy-polls `cq` (never arming it: the consumer keeps its claim) until a receive
/// completion comes; returns it, with the send completions seen before it.
fn spin_recv(cq: &Cq) -> (Completion, usize) {
    let mut sends = 0;
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        match cq.poll_one() {
            Some(c) if c.opcode == WcOpcode::Recv => return (c, sends),
            Some(c) => {
                assert_eq!((c.opcode, c.status), (WcOpcode::Send, WcStatus::Success));
                sends += 1;
            }
            None => assert!(
                std::time::Instant::now() < deadline,
                "no receive completion within {WAIT:?}"
            ),
        }
    }
}

/// One side's receive buffers and what it sends from.
struct Side {
    end: End,
    recv: Mr,
    src: Mr,
    /// The slot the next receive completion must name.
    next: usize,
    sent: usize,
    send_completions: usize,
}

impl Side {
    fn new(end: End) -> Side {
        let recv = end.pd.alloc_mr(SLOTS * SLOT, Access::LOCAL_WRITE).unwrap();
        let src = end.pd.alloc_mr(SLOT, Access::LOCAL_WRITE).unwrap();
        for s in 0..SLOTS {
            end.qp.post_recv(repost(&recv, s)).unwrap();
        }
        Side {
            end,
            recv,
            src,
            next: 0,
            sent: 0,
            send_completions: 0,
        }
    }

    fn send(&mut self, msg: &[u8]) {
        self.src.write(0, msg).unwrap();
        self.end
            .qp
            .post_send(SendWr::send(
                1000 + self.sent as u64,
                self.src.sge(0, msg.len()),
            ))
            .unwrap();
        self.sent += 1;
    }

    /// Waits for the next Send, checks its slot, length and octets, and reposts the
    /// slot's buffer at once.
    fn receive(&mut self, msg: &[u8]) {
        let (c, sends) = spin_recv(self.end.recv_cq());
        self.send_completions += sends;
        assert_eq!(
            (c.wr_id, c.status, c.byte_len),
            (self.next as u64, WcStatus::Success, msg.len() as u32)
        );
        let mut got = vec![0u8; msg.len()];
        self.recv.read(self.next * SLOT, &mut got).unwrap();
        assert_eq!(got, msg);
        self.end
            .qp
            .post_recv(repost(&self.recv, self.next))
            .unwrap();
        self.next = (self.next + 1) % SLOTS;
    }
}

fn repost(recv: &Mr, slot: usize) -> RecvWr {
    RecvWr::new(slot as u64, recv.sge(slot * SLOT, SLOT))
}

#[test]
fn a_claimed_send_ping_pong_reposts_and_lands_every_octet() {
    let (a, b) = end().queues(16, SLOTS).pair();
    let (mut a, mut b) = (Side::new(a), Side::new(b));
    // Both consumers poll until they hold their sockets.
    for _ in 0..2 * CLAIM_AFTER {
        assert!(a.end.cq.poll_one().is_none());
        assert!(b.end.cq.poll_one().is_none());
    }
    const ROUNDS: u64 = 3000;
    for i in 0..ROUNDS {
        let len = 1 + (splitmix(i) % SLOT as u64) as usize;
        let ping = pattern(len, i);
        a.send(&ping);
        b.receive(&ping);
        let pong = pattern(len, !i);
        b.send(&pong);
        a.receive(&pong);
    }
    // The reposts kept the queue exactly full: one more is refused at once, on the
    // claimed QP, and nothing else changed.
    for s in [&a, &b] {
        match s.end.qp.post_recv(repost(&s.recv, 0)) {
            Err(Error::Post(PostError::QueueFull)) => {}
            other => panic!("a post beyond the queue's room: {other:?}"),
        }
        assert_eq!(s.end.qp.state(), QpState::Rts);
    }
    // Every send completed once: those seen while waiting and the rest now.
    for s in [&mut a, &mut b] {
        let rest = std::iter::from_fn(|| s.end.cq.poll_one()).count();
        assert_eq!(s.send_completions + rest, ROUNDS as usize);
    }

    // A repost into a deregistered region, on the claimed QP: its receive completes
    // with a local protection error, the QP fails (the buffers still queued are
    // flushed) and the connection closes.
    let spare = b.end.pd.alloc_mr(SLOT, Access::LOCAL_WRITE).unwrap();
    let wr = RecvWr::new(99, spare.sge(0, SLOT));
    drop(spare);
    // Room for it: a Send takes the front buffer, not reposted.
    a.send(&[7u8; 8]);
    let (c, _) = spin_recv(b.end.recv_cq());
    assert_eq!(
        (c.wr_id, c.status, c.byte_len),
        (b.next as u64, WcStatus::Success, 8)
    );
    b.end.qp.post_recv(wr).unwrap();
    disconnected(&b.end.dev, &b.end.qp);
    assert_eq!(b.end.qp.state(), QpState::Error);
    let recvs: Vec<(u64, WcStatus)> = drained(b.end.recv_cq())
        .into_iter()
        .filter(|c| c.opcode == WcOpcode::Recv)
        .map(|c| (c.wr_id, c.status))
        .collect();
    assert_eq!(
        recvs
            .iter()
            .filter(|r| **r == (99, WcStatus::LocalProtectionError))
            .count(),
        1,
        "{recvs:?}"
    );
    assert_eq!(recvs.len(), SLOTS, "{recvs:?}");
    assert!(
        recvs
            .iter()
            .all(|r| r.0 == 99 || r.1 == WcStatus::WrFlushError),
        "{recvs:?}"
    );
    // A post to the failed QP is flushed.
    b.end.qp.post_recv(repost(&b.recv, 0)).unwrap();
    let c = spin_recv(b.end.recv_cq()).0;
    assert_eq!((c.wr_id, c.status), (0, WcStatus::WrFlushError));
}
