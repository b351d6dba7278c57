//! An engine's pass over a kernel socket ends after a short read, without the empty
//! `read(2)` it used to make to hear `EAGAIN` (epoll(7): a short read of a stream
//! socket has exhausted it, and the edge-triggered set reports whatever arrives next).
//! The passive side here never polls, so its engine alone reads its socket.
//!
//! Nothing depends on timing: a round is one Read Request, one `sendto` of 52 octets,
//! so one arrival and one readiness event at the engine, and the next round starts only
//! once the Read's response has come back. (A round of Writes with a Read behind them,
//! as in session 30's version of this test, leaves in two `sendto` calls, the Writes'
//! and the Read Request's: the engine saw them as one arrival or two depending on
//! whether its pass ran in between, so the count swung between 51 and 78 for 39
//! rounds whatever the code under test did.)

mod common;

use common::*;
use softrnic_rnic::*;

const ROUNDS: usize = 40;

#[test]
fn an_engine_reads_each_arrival_once_and_still_sees_the_next_one() {
    let (a, b) = pair();
    let sink = a.pd.alloc_mr(ROUNDS, Access::LOCAL_WRITE).unwrap();
    let target =
        b.pd.alloc_mr(ROUNDS, Access::LOCAL_WRITE | Access::REMOTE_READ)
            .unwrap();
    let data = pattern(ROUNDS, 31);
    target.write(0, &data).unwrap();
    let mut reads_before = 0;
    for round in 0..ROUNDS {
        if round == 1 {
            // The connection's set-up and the first round's start are not counted.
            reads_before = b.qp.stats().rx_syscalls;
        }
        let read = SendWr::read(
            round as u64,
            sink.sge(round, 1),
            target.addr() + round as u64,
            target.rkey(),
        );
        a.qp.post_send(read).unwrap();
        let c = one(&a.cq);
        assert_eq!(
            (c.wr_id, c.status, c.opcode, c.byte_len),
            (round as u64, WcStatus::Success, WcOpcode::Read, 1),
            "round {round}"
        );
    }
    let mut got = vec![0u8; ROUNDS];
    sink.read(0, &mut got).unwrap();
    assert_eq!(got, data, "each Read's octet, where it was read to");
    let reads = b.qp.stats().rx_syscalls - reads_before;
    let rounds = (ROUNDS - 1) as u64;
    // One arrival a round, one read for it (39 here, every run); reading until
    // `EAGAIN` made two a round (78). A pass with nothing to read (a timer's, an
    // event for the socket's send side) would add one each, never 39.
    assert!(
        reads >= rounds && reads < 2 * rounds,
        "{reads} reads for {rounds} rounds (each round is one arrival)"
    );
}
