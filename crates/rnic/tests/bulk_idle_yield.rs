//! A busy-polling consumer that owns a socket carrying large FPDUs (the receive path in
//! exact mode) and finds it empty gives up the CPU before it reads it again
//! (`Transport::yield_before_reread`, counted in `QpStats::rx_idle_yields`); a stream
//! of small messages (read-ahead) never does, so a latency ping-pong's spin is as before.
//! Nothing here depends on timing: each consumer poll that drives the QP makes one read,
//! and after the message nothing more arrives.

mod common;

use common::*;
use softrnic_rnic::handoff::CLAIM_AFTER;
use softrnic_rnic::*;

/// Polls `cq` while it is empty, often enough to claim its QPs.
fn claim_by_polling(cq: &Cq) {
    for _ in 0..2 * CLAIM_AFTER {
        assert!(cq.poll_one().is_none(), "no traffic expected yet");
    }
}

/// Busy-polls `cq` until a receive completes; returns it.
fn spin_recv(cq: &Cq) -> Completion {
    let mut spins = 0u64;
    loop {
        if let Some(c) = cq.poll_one()
            && c.opcode == WcOpcode::Recv
        {
            return c;
        }
        spins += 1;
        assert!(spins < 500_000_000, "no receive completion");
    }
}

/// Empty polls after the message: enough for a consumer to claim the socket again
/// had the engine taken it back meanwhile (a descheduled test thread), and to yield
/// many times over.
const IDLE_POLLS: usize = 100 * CLAIM_AFTER as usize;

/// Sends one message of `size` octets to a receiver whose consumer busy-polls, checks
/// the octets placed, then polls the empty CQ until it has yielded `enough` times or
/// [`IDLE_POLLS`] polls were made; returns the receiver's idle yields.
fn idle_yields_after_one_send(size: usize, enough: u64) -> u64 {
    let (a, b) = pair();
    let src = a.pd.alloc_mr(size, Access::LOCAL_WRITE).unwrap();
    let dst = b.pd.alloc_mr(size, Access::LOCAL_WRITE).unwrap();
    b.qp.post_recv(RecvWr::new(7, dst.sge(0, size))).unwrap();
    claim_by_polling(&b.cq);
    let data = pattern(size, size as u64);
    src.write(0, &data).unwrap();
    let send = SendOp::Send {
        solicited: false,
        invalidate: None,
    };
    a.qp.post_send(SendWr::new(1, send, src.sge(0, size)))
        .unwrap();
    let c = spin_recv(&b.cq);
    assert_eq!(
        (c.wr_id, c.status, c.byte_len as usize),
        (7, WcStatus::Success, size)
    );
    let mut got = vec![0; size];
    dst.read(0, &mut got).unwrap();
    assert!(got == data, "the octets placed are the octets sent");
    for _ in 0..IDLE_POLLS {
        assert!(b.cq.poll_one().is_none(), "nothing more was sent");
        if b.qp.stats().rx_idle_yields >= enough {
            break;
        }
    }
    b.qp.stats().rx_idle_yields
}

#[test]
fn a_polling_consumer_yields_between_empty_reads_of_a_bulk_stream_only() {
    // 64 KiB: two FPDUs, the first 65,000 octets long: exact mode. Each poll after
    // the first empty read yields once before it reads.
    let bulk = idle_yields_after_one_send(64 << 10, CLAIM_AFTER);
    assert!(
        bulk >= CLAIM_AFTER,
        "{bulk} yields in up to {IDLE_POLLS} empty polls of a bulk stream"
    );
    // 8 octets: read-ahead mode, the spin of a latency ping-pong: no yield, however
    // long it polls.
    assert_eq!(idle_yields_after_one_send(8, 1), 0);
}
