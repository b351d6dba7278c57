//! Messages polled ahead (`Qp::poll_transmit_ahead`): an I/O layer with CRC on prepares
//! the FPDUs of several Writes and Sends before it writes them. Each message still
//! completes only at its own `transmit_done`, in order; a Read waits behind them.

use super::*;
use crate::qp::fpdu::TxFpdu;
use softrnic_wire::crc::crc32c_append;

/// An FPDU as the I/O layer writes it: header, payload, pad and CRC.
fn wire(s: &Side, f: &TxFpdu) -> Vec<u8> {
    let mut v = f.header_bytes().to_vec();
    for c in &f.chunks {
        let m = &s.mem[c.region.0 as usize];
        v.extend_from_slice(&m[c.offset as usize..c.offset as usize + c.len]);
    }
    v.extend(std::iter::repeat_n(0u8, f.pad_len()));
    let (t, n) = f.trailer(crc32c_append(0, &v));
    v.extend_from_slice(&t[f.pad_len()..n]);
    v
}

/// Polls `a` ahead until it has nothing more: the octets, and how many FPDUs complete
/// a message.
fn poll_all_ahead(a: &mut Side) -> (Vec<u8>, usize) {
    let (mut octets, mut completing) = (Vec::new(), 0);
    let mut f = TxFpdu::default();
    while a.qp.poll_transmit_ahead(&mut f) {
        octets.extend(wire(a, &f));
        completing += usize::from(f.completes);
    }
    (octets, completing)
}

fn write_wr(wr_id: u64, src: (STag, u64), dst: (STag, u64), len: usize) -> SendWr {
    SendWr {
        wr_id,
        op: SendOp::Write {
            remote_addr: dst.1,
            rkey: dst.0,
        },
        sgl: [sge(src.0, src.1, len)].into(),
        signaled: true,
        fence: false,
    }
}

fn crc_pair() -> (Side, Side) {
    pair(QpParams {
        crc: true,
        ..Default::default()
    })
}

/// (wr_id, status) of `s`'s completions so far.
fn done(s: &mut Side) -> Vec<(u64, WcStatus)> {
    s.completions()
        .into_iter()
        .map(|(_, c)| (c.wr_id, c.status))
        .collect()
}

#[test]
fn writes_and_sends_polled_ahead_complete_in_order_each_at_its_own_transmit_done() {
    let (mut a, mut b) = crc_pair();
    let n = 5_000;
    let w1 = (
        a.reg(n, Access::empty(), 1),
        b.reg(n, Access::REMOTE_WRITE, 2),
    );
    let s2 = a.reg(n, Access::empty(), 3);
    let w3 = (
        a.reg(n, Access::empty(), 4),
        b.reg(n, Access::REMOTE_WRITE, 5),
    );
    let recv = b.reg(n, Access::LOCAL_WRITE, 6);
    b.qp.post_recv(
        RecvWr {
            wr_id: 20,
            sgl: [sge(recv.0, recv.1, n)].into(),
        },
        &b.tpt,
    )
    .unwrap();
    a.qp.post_send(write_wr(1, w1.0, w1.1, n), &a.tpt).unwrap();
    a.qp.post_send(send_wr(2, [sge(s2.0, s2.1, n)]), &a.tpt)
        .unwrap();
    a.qp.post_send(write_wr(3, w3.0, w3.1, n), &a.tpt).unwrap();

    // All three messages come out before any is written (4 FPDUs each at 1,448 octets).
    let (octets, completing) = poll_all_ahead(&mut a);
    assert_eq!(completing, 3, "each message's last FPDU, none held back");
    assert!(
        done(&mut a).is_empty(),
        "nothing completes before it is written"
    );
    assert!(!a.qp.may_transmit(), "nothing else to poll while they wait");

    // Written one by one: each completes at its own transmit_done, in order.
    a.qp.transmit_done();
    assert_eq!(done(&mut a), [(1, WcStatus::Success)]);
    a.qp.transmit_done();
    a.qp.transmit_done();
    assert_eq!(
        done(&mut a),
        [(2, WcStatus::Success), (3, WcStatus::Success)]
    );
    a.qp.transmit_done();
    assert!(
        done(&mut a).is_empty(),
        "a spare transmit_done completes nothing"
    );

    // The peer gets exactly the octets sent, CRCs correct.
    b.feed(&octets, true);
    assert!(b.region(w1.1.0) == a.region(w1.0.0));
    assert!(b.region(w3.1.0) == a.region(w3.0.0));
    assert!(b.region(recv.0) == a.region(s2.0));
    assert_eq!(done(&mut b), [(20, WcStatus::Success)]);
}

#[test]
fn a_read_waits_behind_writes_polled_ahead_and_goes_once_they_are_written() {
    let (mut a, mut b) = crc_pair();
    let n = 3_000;
    let w1 = (
        a.reg(n, Access::empty(), 1),
        b.reg(n, Access::REMOTE_WRITE, 2),
    );
    let sink = a.reg(n, Access::LOCAL_WRITE, 3);
    let source = b.reg(n, Access::REMOTE_READ, 4);
    a.qp.post_send(write_wr(1, w1.0, w1.1, n), &a.tpt).unwrap();
    a.qp.post_send(
        SendWr {
            wr_id: 2,
            op: SendOp::Read {
                remote_addr: source.1,
                rkey: source.0,
            },
            sgl: [sge(sink.0, sink.1, n)].into(),
            signaled: true,
            fence: false,
        },
        &a.tpt,
    )
    .unwrap();
    let (mut octets, completing) = poll_all_ahead(&mut a);
    assert_eq!(
        completing, 1,
        "the Write; the Read Request is not polled behind it"
    );
    a.qp.transmit_done();
    assert_eq!(done(&mut a), [(1, WcStatus::Success)]);
    let (request, _) = poll_all_ahead(&mut a);
    assert!(
        !request.is_empty(),
        "the Read Request once the Write is out"
    );
    octets.extend(request);
    a.qp.transmit_done();
    b.feed(&octets, false);
    while let Some(f) = b.next_fpdu() {
        a.feed(&f, false);
    }
    assert!(b.region(w1.1.0) == a.region(w1.0.0));
    assert!(a.region(sink.0) == b.region(source.0));
    assert_eq!(done(&mut a), [(2, WcStatus::Success)]);
}

#[test]
fn messages_polled_ahead_are_flushed_once_when_the_qp_fails() {
    let (mut a, _b) = crc_pair();
    let n = 3_000;
    let mut remote = Side::new(9, QpParams::default());
    for i in 0..3u64 {
        let src = a.reg(n, Access::empty(), i as u8);
        let dst = remote.reg(n, Access::REMOTE_WRITE, i as u8);
        a.qp.post_send(write_wr(i, src, dst, n), &a.tpt).unwrap();
    }
    let (_, completing) = poll_all_ahead(&mut a);
    assert_eq!(completing, 3);
    a.qp.transmit_done();
    a.qp.to_error();
    // The two not yet written are flushed; their late transmit_done completes nothing.
    a.qp.transmit_done();
    a.qp.transmit_done();
    let got = done(&mut a);
    assert_eq!(
        got,
        [
            (0, WcStatus::Success),
            (1, WcStatus::WrFlushError),
            (2, WcStatus::WrFlushError)
        ]
    );
}
