//! An engine's pass over a kernel socket ends after a short read, without the empty
//! `read(2)` it used to make to hear `EAGAIN` (epoll(7): a short read of a stream
//! socket has exhausted it, and the edge-triggered set reports whatever arrives next).
//! The passive side here never polls, so its engine alone reads its socket.
//!
//! Nothing depends on timing: each round's Writes and the Read behind them go in one
//! batch post (one `sendto`, so one arrival and one readiness event at the engine), and
//! the next round starts only once the Read's response has come back, after the
//! engine placed every Write before it.

mod common;

use common::*;
use softrnic_rnic::*;

const ROUNDS: usize = 40;
const WRITES: usize = 4;
const LEN: usize = 64;

#[test]
fn an_engine_reads_each_arrival_once_and_still_sees_the_next_one() {
    let (a, b) = pair();
    let span = ROUNDS * WRITES * LEN;
    let src = a.pd.alloc_mr(span + 8, Access::LOCAL_WRITE).unwrap();
    let target =
        b.pd.alloc_mr(
            span,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        )
        .unwrap();
    let data = pattern(span, 30);
    src.write(0, &data).unwrap();
    let mut reads_before = 0;
    for round in 0..ROUNDS {
        if round == 1 {
            // The connection's set-up and the first round's start are not counted.
            reads_before = b.qp.stats().rx_syscalls;
        }
        let base = round * WRITES * LEN;
        let writes = (0..WRITES).map(|i| {
            let at = base + i * LEN;
            SendWr::write(
                i as u64,
                [src.sge(at, LEN)],
                target.addr() + at as u64,
                target.rkey(),
            )
            .unsignaled()
        });
        // The Read returns the round's last octet: it answers only after the Writes
        // before it were placed.
        let last = (base + WRITES * LEN - 1) as u64;
        let read = SendWr::read(
            1000 + round as u64,
            src.sge(span, 1),
            target.addr() + last,
            target.rkey(),
        );
        a.qp.post_send_batch(writes.chain([read])).unwrap();
        let c = one(&a.cq);
        assert_eq!(
            (c.wr_id, c.status, c.opcode, c.byte_len),
            (1000 + round as u64, WcStatus::Success, WcOpcode::Read, 1),
            "round {round}"
        );
        let mut got = [0u8; 1];
        src.read(span, &mut got).unwrap();
        assert_eq!(
            got[0], data[last as usize],
            "round {round}: the Read's octet"
        );
    }
    let mut placed = vec![0u8; span];
    target.read(0, &mut placed).unwrap();
    assert_eq!(placed, data, "every Write's octets, where they were sent");
    let reads = b.qp.stats().rx_syscalls - reads_before;
    let rounds = (ROUNDS - 1) as u64;
    // One arrival a round, one read for it, and now and then a pass of an event
    // that finds the socket empty (51 reads for 39 rounds here); reading until
    // `EAGAIN` made about four a round (153, 155).
    assert!(
        reads >= rounds && reads < 2 * rounds,
        "{reads} reads for {rounds} rounds (each round is one arrival)"
    );
}
