//! `Qp::transmit_run`, the run of small Sends and Writes framed in one core call, at
//! its edges: a request the I/O layer has no room for stays at the head of the send
//! queue untouched (the general path then frames it with the same MSN), memory gone
//! under a request takes nothing and completes nothing, requests the run does not
//! handle (larger than one FPDU, Reads) stop it in order, and with markers it takes
//! nothing at all.

use softrnic_proto::qp::{Gathered, Qp, QpConfig, QpParams, TxFpdu};
use softrnic_proto::tpt::{Tpt, TptEntry};
use softrnic_proto::{
    Access, Completion, PdId, QpId, QpState, RegionId, STag, SendWr, Sge, WcOpcode, WcStatus,
};
use softrnic_wire::ddp::{DdpRepr, Placement};
use softrnic_wire::rdmap::Opcode;

fn setup(params: QpParams) -> (Qp, Tpt, STag) {
    let tpt = Tpt::new();
    let lkey = tpt
        .insert(TptEntry {
            pd: PdId(1),
            key: 1,
            base: 0,
            len: 1 << 20,
            access: Access::all(),
            region: RegionId(0),
            valid: true,
        })
        .unwrap();
    let mut qp = Qp::new(QpConfig {
        id: QpId(1),
        pd: PdId(1),
        sq_depth: 64,
        rq_depth: 4,
    });
    qp.connect(params).unwrap();
    (qp, tpt, lkey)
}

fn sge(lkey: STag, len: u32) -> Sge {
    Sge { addr: 0, len, lkey }
}

/// The DDP/RDMAP header of a framed FPDU (after the MPA length field).
/// The header as the I/O layer writes it into its transmit buffer.
fn header(f: &TxFpdu) -> DdpRepr {
    let mut octets = Vec::new();
    f.append_header(&mut octets);
    DdpRepr::parse_bytes(&octets[2..]).unwrap()
}

fn msn(f: &TxFpdu) -> u32 {
    match header(f).placement {
        Placement::Untagged { msn, .. } => msn,
        p => panic!("not a Send: {p:?}"),
    }
}

fn completions(qp: &mut Qp) -> Vec<(u64, WcStatus, WcOpcode, u32)> {
    std::iter::from_fn(|| qp.poll_completion())
        .map(|(_, c): (_, Completion)| (c.wr_id, c.status, c.opcode, c.byte_len))
        .collect()
}

#[test]
fn a_request_without_room_stays_at_the_head_with_its_msn() {
    let (mut qp, tpt, lkey) = setup(QpParams::default());
    for i in 0..4 {
        qp.post_send(SendWr::send(i, [sge(lkey, 64)]), &tpt)
            .unwrap();
    }
    let mut scratch = TxFpdu::default();
    let mut seen = Vec::new();
    let (taken, lost) = qp.transmit_run(&mut scratch, |f| {
        if seen.len() == 2 {
            return Gathered::NoRoom;
        }
        seen.push((msn(f), f.payload_len(), f.completes));
        Gathered::Taken
    });
    assert_eq!((taken, lost), (2, false));
    assert_eq!(seen, [(1, 64, true), (2, 64, true)]);
    assert_eq!(qp.send_queue_len(), 2);
    let ok = |i| (i, WcStatus::Success, WcOpcode::Send, 64);
    assert_eq!(completions(&mut qp), [ok(0), ok(1)]);
    // The general path takes the request the run left, with the next MSN.
    let mut f = TxFpdu::default();
    assert!(qp.poll_transmit(&mut f));
    assert_eq!((msn(&f), header(&f).last, f.completes), (3, true, true));
    qp.transmit_done();
    assert_eq!(completions(&mut qp), [ok(2)]);
    // And a run again after it.
    let (taken, _) = qp.transmit_run(&mut scratch, |f| {
        assert_eq!(msn(f), 4);
        Gathered::Taken
    });
    assert_eq!(taken, 1);
    assert_eq!(completions(&mut qp), [ok(3)]);
}

#[test]
fn memory_gone_takes_nothing_and_the_caller_fails_the_qp() {
    let (mut qp, tpt, lkey) = setup(QpParams::default());
    qp.post_send(SendWr::send(0, [sge(lkey, 64)]), &tpt)
        .unwrap();
    qp.post_send(SendWr::write(1, [sge(lkey, 8)], 0x100, 0x0201), &tpt)
        .unwrap();
    let mut scratch = TxFpdu::default();
    let (taken, lost) = qp.transmit_run(&mut scratch, |_| Gathered::Lost);
    assert_eq!((taken, lost), (0, true));
    assert!(completions(&mut qp).is_empty(), "nothing completed");
    assert_eq!(qp.send_queue_len(), 2);
    qp.to_error();
    let flushed: Vec<_> = completions(&mut qp).iter().map(|c| (c.0, c.1)).collect();
    assert_eq!(
        flushed,
        [(0, WcStatus::WrFlushError), (1, WcStatus::WrFlushError)]
    );
    assert_eq!(qp.state(), QpState::Error);
}

#[test]
fn larger_messages_and_reads_stop_the_run_in_order() {
    let params = QpParams::default();
    let (mut qp, tpt, lkey) = setup(params);
    qp.post_send(SendWr::write(0, [sge(lkey, 100)], 0x100, 0x0201), &tpt)
        .unwrap();
    // Beyond one FPDU of the default 1448-octet size.
    qp.post_send(SendWr::send(1, [sge(lkey, 3000)]), &tpt)
        .unwrap();
    qp.post_send(SendWr::send(2, [sge(lkey, 10)]), &tpt)
        .unwrap();
    qp.post_send(SendWr::read(3, sge(lkey, 8), 0x100, 0x0201), &tpt)
        .unwrap();
    qp.post_send(SendWr::send(4, [sge(lkey, 10)]), &tpt)
        .unwrap();
    let mut scratch = TxFpdu::default();
    let mut ops = Vec::new();
    let mut run = |qp: &mut Qp, ops: &mut Vec<Opcode>| {
        qp.transmit_run(&mut scratch, |f| {
            ops.push(header(f).opcode);
            Gathered::Taken
        })
        .0
    };
    assert_eq!(
        run(&mut qp, &mut ops),
        1,
        "the Write; the large Send stops it"
    );
    // The general path sends the large Send (three FPDUs), then the run goes on.
    let mut f = TxFpdu::default();
    let mut fpdus = 0;
    while qp.poll_transmit(&mut f) {
        fpdus += 1;
        if f.completes {
            qp.transmit_done();
            break;
        }
    }
    assert_eq!(fpdus, 3);
    assert_eq!(
        run(&mut qp, &mut ops),
        1,
        "the small Send; the Read stops it"
    );
    assert!(qp.poll_transmit(&mut f));
    assert_eq!(header(&f).opcode, Opcode::ReadRequest);
    qp.transmit_done();
    assert_eq!(run(&mut qp, &mut ops), 1);
    assert_eq!(ops, [Opcode::Write, Opcode::Send, Opcode::Send]);
    let done: Vec<_> = completions(&mut qp).iter().map(|c| c.0).collect();
    // The Read completes when its response arrives; the Send after it waits for it.
    assert_eq!(done, [0, 1, 2]);
}

#[test]
fn with_markers_the_run_takes_nothing() {
    let params = QpParams {
        markers_tx: true,
        ..QpParams::default()
    };
    let (mut qp, tpt, lkey) = setup(params);
    qp.post_send(SendWr::send(0, [sge(lkey, 64)]), &tpt)
        .unwrap();
    let mut scratch = TxFpdu::default();
    let (taken, _) = qp.transmit_run(&mut scratch, |_| Gathered::Taken);
    assert_eq!(taken, 0);
    let mut f = TxFpdu::default();
    assert!(qp.poll_transmit(&mut f));
    assert!(f.marker_pos.is_some());
}

/// A small post to an idle queue completes at once with every field of its completion
/// (written in place in the outbox's entry), and an unsignaled one with none.
#[test]
fn a_small_post_completes_with_every_field_of_its_completion() {
    let (mut qp, tpt, lkey) = setup(QpParams::default());
    let mut scratch = TxFpdu::default();
    let mut wire = Vec::new();
    let write = SendWr::write(7, [sge(lkey, 24)], 0x1000, 0x0201);
    let got = qp.post_send_gather(&write, &tpt, &mut scratch, |f| {
        f.append_header(&mut wire);
        Gathered::Taken
    });
    assert_eq!(got, Ok(Gathered::Taken));
    let mut quiet = SendWr::send(8, [sge(lkey, 5)]);
    quiet.signaled = false;
    let got = qp.post_send_gather(&quiet, &tpt, &mut scratch, |_| Gathered::Taken);
    assert_eq!(got, Ok(Gathered::Taken));
    let send = SendWr::send(9, [sge(lkey, 3)]);
    let got = qp.post_send_gather(&send, &tpt, &mut scratch, |f| {
        f.append_header(&mut wire);
        Gathered::Taken
    });
    assert_eq!(got, Ok(Gathered::Taken));
    let all: Vec<Completion> = std::iter::from_fn(|| qp.poll_completion())
        .map(|(_, c)| c)
        .collect();
    let done = |wr_id, opcode, byte_len| Completion {
        wr_id,
        status: WcStatus::Success,
        opcode,
        byte_len,
        qp: QpId(1),
        solicited: false,
        invalidated: None,
    };
    assert_eq!(
        all,
        [done(7, WcOpcode::Write, 24), done(9, WcOpcode::Send, 3)]
    );
    // The headers written straight into the buffer: a tagged Write of 24 octets
    // (ULPDU 14 + 24), then an untagged Send with the second MSN (ULPDU 18 + 3).
    assert_eq!(
        wire,
        [
            &[0, 38, 0xc1, 0x40, 0, 0, 0x02, 0x01][..],
            &0x1000u64.to_be_bytes(),
            &[
                0, 21, 0x41, 0x43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0
            ],
        ]
        .concat()
    );
}
