//! The Read responder's transmit path: Read Responses queued together leave in one
//! `sendmsg` (up to the batch of FPDUs), not one call each, and every octet lands
//! where the requester asked for it.
//!
//! Nothing here depends on timing: the requester posts its Reads in one batch, whose
//! Read Requests go out in one send and so arrive together (a read of the responder's
//! socket finds all of them or none); the responses, 320,000 octets, fit the socket's
//! send buffer at once, so the responder's one call takes them all.

mod common;

use common::*;
use softrnic_rnic::*;

/// Reads per batch and their length: each response one FPDU (below the loopback FPDU
/// of 65000 octets), too large to be gathered into the transmit buffer.
const READS: usize = 8;
const LEN: usize = 40_000;

#[test]
fn read_responses_queued_together_leave_in_one_sendmsg() {
    const { assert!(LEN > TX_GATHER_MAX) };
    let (a, b) = pair();
    let data = pattern(READS * LEN, 14);
    let src = b.pd.alloc_mr(READS * LEN, Access::REMOTE_READ).unwrap();
    src.write(0, &data).unwrap();
    let sink = a.pd.alloc_mr(READS * LEN, Access::LOCAL_WRITE).unwrap();
    for round in 0..3u64 {
        sink.fill(0, READS * LEN, 0).unwrap();
        let before = b.qp.stats();
        let wrs: Vec<_> = (0..READS)
            .map(|i| {
                SendWr::read(
                    round * 100 + i as u64,
                    sink.sge(i * LEN, LEN),
                    src.addr() + ((READS - 1 - i) * LEN) as u64,
                    src.rkey(),
                )
            })
            .collect();
        a.qp.post_send_batch(wrs.iter()).unwrap();
        let got = take(&a.cq, READS);
        for (i, c) in got.iter().enumerate() {
            assert_eq!(
                (c.status, c.opcode, c.wr_id, c.byte_len as usize),
                (
                    WcStatus::Success,
                    WcOpcode::Read,
                    round * 100 + i as u64,
                    LEN
                ),
                "round {round}"
            );
        }
        // Read i took the source's piece READS - 1 - i.
        let placed = sink.to_vec();
        for i in 0..READS {
            let from = (READS - 1 - i) * LEN;
            assert!(
                placed[i * LEN..(i + 1) * LEN] == data[from..from + LEN],
                "round {round}: Read {i} placed the wrong octets"
            );
        }
        let after = b.qp.stats();
        assert_eq!(
            (
                after.tx_fpdus - before.tx_fpdus,
                after.tx_syscalls - before.tx_syscalls
            ),
            (READS as u64, 1),
            "round {round}: the responder's FPDUs and send calls for {READS} responses"
        );
    }
}
