//! Without markers, the large FPDUs of several Writes and Sends posted together are
//! prepared (with CRC on, their CRCs computed back to back) and leave in one
//! `sendmsg`, up to `TX_AHEAD_BYTES`, with CRC on and off alike; each message still
//! completes on its own, in order, and every octet lands where it was aimed.
//!
//! Nothing here depends on timing (as in `read_responses.rs`): the batch is posted in
//! one call, which queues every request before it transmits, and its 200,000 octets
//! fit the socket's send buffer at once, so the calls are counted exactly.

mod common;

use common::*;
use softrnic_rnic::*;

/// Messages per batch and their length: one FPDU each (below the loopback FPDU of
/// 65,000 octets), too large to be gathered into the transmit buffer.
const MESSAGES: usize = 4;
const LEN: usize = 50_000;

#[test]
fn writes_and_sends_posted_together_leave_in_one_sendmsg_and_complete_in_order() {
    const { assert!(LEN > TX_GATHER_MAX) };
    for crc in [CrcPolicy::Required, CrcPolicy::Off] {
        let mut cfg = DeviceConfig::default();
        cfg.mpa.crc = crc;
        let (a, b) = end().config(cfg).queues(16, 16).pair();
        let data = pattern(MESSAGES * LEN, 21);
        let src = a.pd.alloc_mr(MESSAGES * LEN, Access::empty()).unwrap();
        src.write(0, &data).unwrap();
        let target = b.pd.alloc_mr(MESSAGES * LEN, Access::REMOTE_WRITE).unwrap();
        let inbox = b.pd.alloc_mr(MESSAGES * LEN, Access::LOCAL_WRITE).unwrap();
        for round in 0..3u64 {
            target.fill(0, MESSAGES * LEN, 0).unwrap();
            inbox.fill(0, MESSAGES * LEN, 0).unwrap();
            // Write, Send, Write, Send: message i from src's piece i into the same
            // piece of the target (Write) or of the inbox (Send).
            let wrs: Vec<_> = (0..MESSAGES)
                .map(|i| {
                    let id = round * 100 + i as u64;
                    let piece = src.sge(i * LEN, LEN);
                    if i % 2 == 0 {
                        SendWr::write(id, [piece], target.addr() + (i * LEN) as u64, target.rkey())
                    } else {
                        b.qp.post_recv(RecvWr::new(id, [inbox.sge(i * LEN, LEN)]))
                            .unwrap();
                        SendWr::send(id, [piece])
                    }
                })
                .collect();
            let before = a.qp.stats();
            a.qp.post_send_batch(wrs.iter()).unwrap();
            let got: Vec<_> = take(&a.cq, MESSAGES)
                .iter()
                .map(|c| (c.wr_id, c.status, c.opcode, c.byte_len as usize))
                .collect();
            let want: Vec<_> = (0..MESSAGES)
                .map(|i| {
                    let op = if i % 2 == 0 {
                        WcOpcode::Write
                    } else {
                        WcOpcode::Send
                    };
                    (round * 100 + i as u64, WcStatus::Success, op, LEN)
                })
                .collect();
            assert_eq!(got, want, "{crc:?} round {round}: the sender's completions");
            let received: Vec<_> = take(b.recv_cq(), MESSAGES / 2)
                .iter()
                .map(|c| (c.wr_id, c.status, c.byte_len as usize))
                .collect();
            let want: Vec<_> = (1..MESSAGES)
                .step_by(2)
                .map(|i| (round * 100 + i as u64, WcStatus::Success, LEN))
                .collect();
            assert_eq!(
                received, want,
                "{crc:?} round {round}: the receiver's Sends"
            );
            // The Writes' completions mean sent, not placed: the Sends behind them
            // were placed after them on the same stream, so the Writes are in too.
            let (t, m) = (target.to_vec(), inbox.to_vec());
            for i in 0..MESSAGES {
                let (landed, other) = if i % 2 == 0 { (&t, &m) } else { (&m, &t) };
                let piece = i * LEN..(i + 1) * LEN;
                assert!(
                    landed[piece.clone()] == data[piece.clone()],
                    "{crc:?} round {round}: message {i} placed wrong"
                );
                assert!(
                    other[piece].iter().all(|&o| o == 0),
                    "{crc:?} round {round}: message {i} placed twice"
                );
            }
            let after = a.qp.stats();
            assert_eq!(
                (
                    after.tx_fpdus - before.tx_fpdus,
                    after.tx_syscalls - before.tx_syscalls
                ),
                (MESSAGES as u64, 1),
                "{crc:?} round {round}: FPDUs and send calls for {MESSAGES} messages"
            );
        }
    }
}
