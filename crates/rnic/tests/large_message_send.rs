//! A 1 MiB message leaves its sender in one `sendmsg`: on loopback it is 17 FPDUs of
//! 65000 octets, and the transmit path's batch once stopped at 16, so the short last
//! FPDU (8,916 octets) was copied into the transmit buffer and sent by a call of its
//! own: two calls per 1 MiB Write, Send or Read Response instead of one.
//!
//! Nothing here depends on timing: each message is posted alone on an idle
//! connection, and a fresh loopback socket's send buffer takes 1 MiB at once (Linux
//! sizes it from the 64 KiB loopback MSS), so the sender's one call takes it all; the
//! receiver's completion (or the Read's) says every octet arrived, and the octets are
//! checked where they landed.

mod common;

use common::*;
use softrnic_rnic::*;

const LEN: usize = 1 << 20;

/// FPDUs of a 1 MiB message with the loopback FPDU of 65000 octets (payload 64,984 for
/// a tagged FPDU, 64,980 for an untagged one): 17 either way.
const FPDUS: u64 = 17;

#[test]
fn a_1_mib_write_leaves_in_one_sendmsg() {
    let (a, b) = pair();
    let data = pattern(LEN, 21);
    let src = a.pd.alloc_mr(LEN, Access::LOCAL_WRITE).unwrap();
    src.write(0, &data).unwrap();
    let dst =
        b.pd.alloc_mr(LEN, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
    let flag = b.pd.alloc_mr(1, Access::REMOTE_READ).unwrap();
    let probe = a.pd.alloc_mr(1, Access::LOCAL_WRITE).unwrap();
    for round in 0..3u64 {
        dst.fill(0, LEN, 0).unwrap();
        let before = a.qp.stats();
        a.qp.post_send(SendWr::write(
            round,
            src.sge(0, LEN),
            dst.addr(),
            dst.rkey(),
        ))
        .unwrap();
        let c = one(&a.cq);
        assert_eq!((c.status, c.wr_id), (WcStatus::Success, round));
        let after = a.qp.stats();
        assert_eq!(
            (
                after.tx_fpdus - before.tx_fpdus,
                after.tx_syscalls - before.tx_syscalls
            ),
            (FPDUS, 1),
            "round {round}: the writer's FPDUs and send calls for one 1 MiB Write"
        );
        // A Read behind the Write returns once the Write is placed.
        a.qp.post_send(SendWr::read(
            100 + round,
            probe.sge(0, 1),
            flag.addr(),
            flag.rkey(),
        ))
        .unwrap();
        let c = one(&a.cq);
        assert_eq!((c.status, c.wr_id), (WcStatus::Success, 100 + round));
        assert!(dst.to_vec() == data, "round {round}: the Write's octets");
    }
}

#[test]
fn a_1_mib_send_leaves_in_one_sendmsg() {
    let (a, b) = pair();
    let data = pattern(LEN, 22);
    let src = a.pd.alloc_mr(LEN, Access::LOCAL_WRITE).unwrap();
    src.write(0, &data).unwrap();
    let dst = b.pd.alloc_mr(LEN, Access::LOCAL_WRITE).unwrap();
    for round in 0..3u64 {
        dst.fill(0, LEN, 0).unwrap();
        b.qp.post_recv(RecvWr::new(round, dst.sge(0, LEN))).unwrap();
        let before = a.qp.stats();
        a.qp.post_send(SendWr::send(round, src.sge(0, LEN)))
            .unwrap();
        let c = one(&a.cq);
        assert_eq!((c.status, c.wr_id), (WcStatus::Success, round));
        let after = a.qp.stats();
        assert_eq!(
            (
                after.tx_fpdus - before.tx_fpdus,
                after.tx_syscalls - before.tx_syscalls
            ),
            (FPDUS, 1),
            "round {round}: the sender's FPDUs and send calls for one 1 MiB Send"
        );
        let r = one(b.recv_cq());
        assert_eq!(
            (r.status, r.opcode, r.wr_id, r.byte_len as usize),
            (WcStatus::Success, WcOpcode::Recv, round, LEN)
        );
        assert!(dst.to_vec() == data, "round {round}: the Send's octets");
    }
}

#[test]
fn a_1_mib_read_response_leaves_in_one_sendmsg() {
    let (a, b) = pair();
    let data = pattern(LEN, 23);
    let src = b.pd.alloc_mr(LEN, Access::REMOTE_READ).unwrap();
    src.write(0, &data).unwrap();
    let sink = a.pd.alloc_mr(LEN, Access::LOCAL_WRITE).unwrap();
    for round in 0..3u64 {
        sink.fill(0, LEN, 0).unwrap();
        let before = b.qp.stats();
        a.qp.post_send(SendWr::read(
            round,
            sink.sge(0, LEN),
            src.addr(),
            src.rkey(),
        ))
        .unwrap();
        let c = one(&a.cq);
        assert_eq!(
            (c.status, c.opcode, c.wr_id, c.byte_len as usize),
            (WcStatus::Success, WcOpcode::Read, round, LEN)
        );
        let after = b.qp.stats();
        assert_eq!(
            (
                after.tx_fpdus - before.tx_fpdus,
                after.tx_syscalls - before.tx_syscalls
            ),
            (FPDUS, 1),
            "round {round}: the responder's FPDUs and send calls for one 1 MiB Read"
        );
        assert!(sink.to_vec() == data, "round {round}: the Read's octets");
    }
}
