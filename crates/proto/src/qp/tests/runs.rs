//! Runs of small FPDUs: many whole FPDUs in one read, taken by the receive fast path
//! (`Qp::rx_take_fpdu`, trailer checked where it lies), and the transmit path's
//! per-QP header template. A run stops exactly at the first bad FPDU: everything
//! before it is placed and completed, nothing after it.

use super::*;

/// `n` Sends of `len` octets each, from `a` to `b`, serialized into one buffer; `b` has
/// a receive buffer (wr_id 100 + i) for each. Returns the octets, the receive
/// buffers' STags and the send buffers' STags.
fn sends(a: &mut Side, b: &mut Side, n: usize, len: usize) -> (Vec<u8>, Vec<STag>, Vec<STag>) {
    sends_into(a, b, &vec![Some(len); n], len)
}

/// [`sends`] with the receive buffers given: a Send of `len` octets for each entry of
/// `recvs`, and for each `Some(l)` a receive buffer of `l` octets posted at `b`
/// (wr_id 100 + i; `None`: no receive posted for that Send).
fn sends_into(
    a: &mut Side,
    b: &mut Side,
    recvs: &[Option<usize>],
    len: usize,
) -> (Vec<u8>, Vec<STag>, Vec<STag>) {
    let mut wire = Vec::new();
    let (mut dsts, mut srcs) = (Vec::new(), Vec::new());
    for (i, recv) in recvs.iter().enumerate() {
        let (src, sbase) = a.reg(len, Access::empty(), i as u8);
        let (dst, dbase) = b.reg(len, Access::LOCAL_WRITE, 100 + i as u8);
        if let Some(l) = *recv {
            b.qp.post_recv(
                RecvWr {
                    wr_id: 100 + i as u64,
                    sgl: [sge(dst, dbase, l)].into(),
                },
                &b.tpt,
            )
            .unwrap();
        }
        a.qp.post_send(send_wr(i as u64, [sge(src, sbase, len)]), &a.tpt)
            .unwrap();
        wire.extend(a.next_fpdu().unwrap());
        dsts.push(dst);
        srcs.push(src);
    }
    (wire, dsts, srcs)
}

fn statuses(s: &mut Side) -> Vec<(u64, WcStatus)> {
    s.completions()
        .into_iter()
        .map(|(_, c)| (c.wr_id, c.status))
        .collect()
}

/// (wr_id, status, byte_len) of the receive completions.
fn received(s: &mut Side) -> Vec<(u64, WcStatus, u32)> {
    s.completions()
        .into_iter()
        .filter(|(side, _)| *side == CqSide::Recv)
        .map(|(_, c)| (c.wr_id, c.status, c.byte_len))
        .collect()
}

/// Four Sends in one read and two receives posted: the first two are placed and
/// complete, the third finds the receive queue empty and ends the stream (DDP untagged
/// buffer, no buffer: 2/0x02), the fourth is never placed. Fed whole (the run) and cut
/// (the steps) alike.
#[test]
fn a_run_of_sends_stops_exactly_where_the_receive_queue_runs_out() {
    for split in [false, true] {
        let (mut a, mut b) = pair(QpParams::default());
        let (wire, dsts, srcs) = sends_into(&mut a, &mut b, &[Some(24), Some(24), None, None], 24);
        let untouched = b.region(dsts[2]).to_vec();
        b.feed(&wire, split);
        assert_eq!(
            b.qp.fatal_cause(),
            Some((TerminateCause::new(Layer::Ddp, 2, 0x02), false)),
            "split {split}"
        );
        assert_eq!(
            received(&mut b),
            vec![(100, WcStatus::Success, 24), (101, WcStatus::Success, 24)]
        );
        assert_eq!(b.region(dsts[0]), a.region(srcs[0]));
        assert_eq!(b.region(dsts[1]), a.region(srcs[1]));
        assert_eq!(b.region(dsts[2]), &untouched[..]);
    }
}

/// Three Sends in one read, the second longer than its receive buffer: the first
/// completes, the second's buffer completes with a local length error (and nothing of it
/// is placed) and the stream ends (DDP untagged buffer, too long: 2/0x05), the third's
/// buffer is flushed.
#[test]
fn a_run_of_sends_stops_exactly_at_a_message_longer_than_its_buffer() {
    for split in [false, true] {
        let (mut a, mut b) = pair(QpParams::default());
        let (wire, dsts, srcs) = sends_into(&mut a, &mut b, &[Some(24), Some(8), Some(24)], 24);
        let untouched = b.region(dsts[1]).to_vec();
        b.feed(&wire, split);
        assert_eq!(
            b.qp.fatal_cause(),
            Some((TerminateCause::new(Layer::Ddp, 2, 0x05), false)),
            "split {split}"
        );
        assert_eq!(
            received(&mut b),
            vec![
                (100, WcStatus::Success, 24),
                (101, WcStatus::LocalLengthError, 0),
                (102, WcStatus::WrFlushError, 0),
            ]
        );
        assert_eq!(b.region(dsts[0]), a.region(srcs[0]));
        assert_eq!(b.region(dsts[1]), &untouched[..]);
    }
}

/// A message in progress holds its receive buffer at the front of the queue: the buffer
/// no longer counts as posted (nor against the queue's depth), and when the QP fails it
/// is flushed first, before the buffers posted after it, each exactly once.
#[test]
fn a_buffer_bound_to_a_message_in_progress_leaves_room_and_flushes_first() {
    let (mut a, mut b) = pair(QpParams::default());
    let (wire, _, _) = sends(&mut a, &mut b, 1, 24);
    // Half of the FPDU: its header binds the first receive.
    b.feed(&wire[..wire.len() / 2], true);
    let (dst, dbase) = b.reg(24, Access::LOCAL_WRITE, 7);
    let post = |b: &mut Side, wr_id| {
        b.qp.post_recv(
            RecvWr {
                wr_id,
                sgl: [sge(dst, dbase, 24)].into(),
            },
            &b.tpt,
        )
    };
    // The pair's receive queues hold 64.
    for i in 0..64 {
        assert_eq!(b.qp.recv_queue_len(), i as usize);
        post(&mut b, 200 + i).unwrap();
    }
    assert_eq!(post(&mut b, 300), Err(PostError::QueueFull));
    b.qp.to_error();
    let mut expect = vec![(100, WcStatus::WrFlushError, 0)];
    expect.extend((0..64).map(|i| (200 + i, WcStatus::WrFlushError, 0)));
    assert_eq!(received(&mut b), expect);
    assert_eq!(b.qp.recv_queue_len(), 0);
}

/// Four CRC-protected Sends in one read, the third's payload corrupted: the first two
/// are placed and complete, the third ends the stream with MPA's CRC error (LLP layer,
/// code 2) and the fourth is never placed.
#[test]
fn a_run_of_fpdus_stops_exactly_at_a_bad_crc() {
    let (mut a, mut b) = pair(QpParams {
        crc: true,
        ..Default::default()
    });
    let (mut wire, dsts, srcs) = sends(&mut a, &mut b, 4, 24);
    let fpdu_len = wire.len() / 4;
    // A payload octet of the third FPDU (after its 2-octet length and 18-octet header).
    wire[2 * fpdu_len + 2 + 18 + 5] ^= 0x01;
    let untouched = b.region(dsts[3]).to_vec();
    b.feed(&wire, false);
    assert_eq!(
        b.qp.fatal_cause(),
        Some((TerminateCause::new(Layer::Llp, 0, 0x02), false))
    );
    assert_eq!(b.region(dsts[0]), a.region(srcs[0]));
    assert_eq!(b.region(dsts[1]), a.region(srcs[1]));
    assert_eq!(
        b.region(dsts[3]),
        &untouched[..],
        "nothing after the bad FPDU"
    );
    assert_eq!(
        statuses(&mut b),
        vec![
            (100, WcStatus::Success),
            (101, WcStatus::Success),
            (102, WcStatus::WrFlushError),
            (103, WcStatus::WrFlushError),
        ]
    );
    // The Terminate copies the offending FPDU's length and DDP header.
    let t = b.next_fpdu().expect("a Terminate");
    let bad = &wire[2 * fpdu_len..3 * fpdu_len];
    let body = &t[2 + 18..];
    assert_eq!(&body[4..6], &bad[..2], "segment length copied");
    assert_eq!(&body[6..24], &bad[2..20], "DDP header copied");
}

/// Three Writes and a peer's Terminate in one read, then a fourth Write: the Writes
/// before the Terminate are placed, the Terminate's cause is reported, and the Write
/// after it is not placed.
#[test]
fn a_run_of_fpdus_stops_exactly_at_a_terminate() {
    let (mut a, mut b) = pair(QpParams::default());
    let (src, sbase) = a.reg(64, Access::empty(), 1);
    let (dst, dbase) = b.reg(4 * 64, Access::REMOTE_WRITE, 2);
    let mut wire = Vec::new();
    let write_at = |a: &mut Side, i: u64| {
        a.qp.post_send(
            SendWr {
                wr_id: i,
                op: SendOp::Write {
                    remote_addr: dbase + 64 * i,
                    rkey: dst,
                },
                sgl: [sge(src, sbase, 64)].into(),
                signaled: true,
                fence: false,
            },
            &a.tpt,
        )
        .unwrap();
        a.next_fpdu().unwrap()
    };
    for i in 0..3 {
        wire.extend(write_at(&mut a, i));
    }
    wire.extend(terminate_fpdu());
    let before = b.region(dst)[3 * 64..].to_vec();
    wire.extend(write_at(&mut a, 3));
    b.feed(&wire, false);
    assert_eq!(
        b.qp.fatal_cause(),
        Some((TerminateCause::new(Layer::Ddp, 1, 0x01), true))
    );
    for i in 0..3 {
        assert_eq!(
            &b.region(dst)[i * 64..(i + 1) * 64],
            a.region(src),
            "Write {i}"
        );
    }
    assert_eq!(
        &b.region(dst)[3 * 64..],
        &before[..],
        "not after the Terminate"
    );
}

/// A well-formed Terminate FPDU (no CRC): DDP, tagged buffer, base or bounds (1/1/0x01),
/// no headers copied.
fn terminate_fpdu() -> Vec<u8> {
    use softrnic_wire::ddp::{DdpRepr, Placement};
    use softrnic_wire::rdmap::Opcode;
    let h = DdpRepr {
        last: true,
        opcode: Opcode::Terminate,
        placement: Placement::Untagged {
            rsvd_ulp: 0,
            qn: 2,
            msn: 1,
            mo: 0,
        },
    };
    let mut ulpdu = vec![0u8; h.header_len()];
    h.emit(&mut ulpdu).unwrap();
    ulpdu.extend_from_slice(&[0x11, 0x01, 0x00, 0x00]);
    let mut out = vec![0u8; softrnic_wire::mpa::fpdu_len(ulpdu.len())];
    let n = softrnic_wire::mpa::emit_fpdu(&[&ulpdu], false, None, &mut out).unwrap();
    out.truncate(n);
    out
}

/// Three Sends in one read, the second with the Solicited Event flag: each completes
/// with its own solicited flag, and exactly one solicited event is raised.
#[test]
fn a_run_of_sends_raises_a_solicited_event_for_the_solicited_one_only() {
    let (mut a, mut b) = pair(QpParams::default());
    let (src, sbase) = a.reg(16, Access::empty(), 1);
    let (dst, dbase) = b.reg(3 * 16, Access::LOCAL_WRITE, 2);
    let mut wire = Vec::new();
    for i in 0..3u64 {
        let at = dbase + 16 * i;
        b.qp.post_recv(RecvWr::new(100 + i, [sge(dst, at, 16)]), &b.tpt)
            .unwrap();
        let mut wr = send_wr(i, [sge(src, sbase, 16)]);
        if i == 1 {
            wr = wr.solicited();
        }
        a.qp.post_send(wr, &a.tpt).unwrap();
        wire.extend(a.next_fpdu().unwrap());
    }
    b.feed(&wire, false);
    let got: Vec<(u64, bool)> = b
        .completions()
        .into_iter()
        .map(|(_, c)| (c.wr_id, c.solicited))
        .collect();
    assert_eq!(got, vec![(100, false), (101, true), (102, false)]);
    let events: Vec<QpEvent> = std::iter::from_fn(|| b.qp.poll_event()).collect();
    assert_eq!(events, vec![QpEvent::Solicited]);
}

/// A run of Sends into receives of three SGEs each (5, 7 and 20 octets in separate
/// places): each message is scattered over its buffer's SGEs in order, and octets
/// beyond the message stay untouched.
#[test]
fn a_run_of_sends_scatters_each_over_its_receive_sges() {
    let (mut a, mut b) = pair(QpParams::default());
    let (src, sbase) = a.reg(3 * 20, Access::empty(), 1);
    let (dst, dbase) = b.reg(3 * 64, Access::LOCAL_WRITE, 2);
    let before = b.region(dst).to_vec();
    let mut wire = Vec::new();
    for i in 0..3u64 {
        let at = dbase + 64 * i;
        let sgl = [sge(dst, at, 5), sge(dst, at + 16, 7), sge(dst, at + 32, 20)];
        b.qp.post_recv(RecvWr::new(100 + i, sgl), &b.tpt).unwrap();
        let wr = send_wr(i, [sge(src, sbase + 20 * i, 20)]);
        a.qp.post_send(wr, &a.tpt).unwrap();
        wire.extend(a.next_fpdu().unwrap());
    }
    b.feed(&wire, false);
    let got: Vec<(u64, WcStatus, u32)> = received(&mut b);
    assert_eq!(
        got,
        (0..3)
            .map(|i| (100 + i, WcStatus::Success, 20))
            .collect::<Vec<_>>()
    );
    let (s, d) = (a.region(src).to_vec(), b.region(dst).to_vec());
    for i in 0..3 {
        let (m, at) = (&s[20 * i..20 * (i + 1)], 64 * i);
        assert_eq!(&d[at..at + 5], &m[..5], "message {i}, first SGE");
        assert_eq!(&d[at + 5..at + 16], &before[at + 5..at + 16], "gap {i}");
        assert_eq!(&d[at + 16..at + 23], &m[5..12], "message {i}, second SGE");
        assert_eq!(&d[at + 23..at + 32], &before[at + 23..at + 32], "gap {i}");
        assert_eq!(&d[at + 32..at + 40], &m[12..], "message {i}, third SGE");
        assert_eq!(&d[at + 40..at + 64], &before[at + 40..at + 64], "tail {i}");
    }
}

/// The second of two Sends arrives first, in a segment ahead of the stream (placed at
/// once, its completion deferred); the first then comes in a read taken as a run:
/// both complete, in MSN order, when the stream reaches the second.
#[test]
fn a_send_taken_ahead_completes_in_order_after_a_run_reaches_it() {
    let (mut a, mut b) = pair(QpParams {
        crc: true,
        ..Default::default()
    });
    let (wire, dsts, srcs) = sends(&mut a, &mut b, 2, 24);
    let (first, second) = wire.split_at(wire.len() / 2);
    let mem = &mut b.mem;
    let outcome = b.qp.handle_segment(
        first.len() as u64,
        second,
        &mut RxCtx::new(&b.tpt),
        &mut |c, data| {
            let r = &mut mem[c.region.0 as usize];
            r[c.offset as usize..c.offset as usize + data.len()].copy_from_slice(data);
        },
    );
    assert_eq!(outcome, SegmentOutcome::Taken);
    assert_eq!(b.region(dsts[1]), a.region(srcs[1]), "placed ahead");
    assert_eq!(received(&mut b), vec![]);
    b.feed(first, false);
    assert_eq!(
        received(&mut b),
        vec![(100, WcStatus::Success, 24), (101, WcStatus::Success, 24)]
    );
    assert_eq!(b.region(dsts[0]), a.region(srcs[0]));
    assert_eq!(b.qp.rx_position(), wire.len() as u64);
}
