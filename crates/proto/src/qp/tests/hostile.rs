//! What a peer must not be able to do, and the exact Terminate each attempt earns, seen
//! at both ends: the QP that detects it (cause sent) and the one that receives the
//! Terminate (cause received).

use super::*;

/// What a QP failed with: the Terminate cause and whether the peer sent it.
type Failed = Option<(TerminateCause, bool)>;

/// A Send with Invalidate naming `victim`, from `a` to `b` (which has one receive
/// posted); returns what each side's QP failed with, if it did.
fn send_invalidate(a: &mut Side, b: &mut Side, victim: STag) -> (Failed, Failed) {
    let (src, sbase) = a.reg(8, Access::empty(), 1);
    let (dst, dbase) = b.reg(8, Access::LOCAL_WRITE, 2);
    b.qp.post_recv(
        RecvWr {
            wr_id: 7,
            sgl: [sge(dst, dbase, 8)].into(),
        },
        &b.tpt,
    )
    .unwrap();
    a.qp.post_send(
        SendWr {
            wr_id: 1,
            op: SendOp::Send {
                solicited: false,
                invalidate: Some(victim),
            },
            sgl: [sge(src, sbase, 8)].into(),
            signaled: true,
            fence: false,
        },
        &a.tpt,
    )
    .unwrap();
    pump(a, b, false);
    (a.qp.fatal_cause(), b.qp.fatal_cause())
}

/// A peer may invalidate only an STag registered for it (REMOTE_INVALIDATE with a
/// remote right): naming any other region of the PD (a local buffer, a receive buffer,
/// an exposed region without the flag) is RDMAP remote protection "STag cannot be
/// invalidated" (0/1/0x09), and the region stays valid for its owner.
#[test]
fn remote_invalidate_only_of_stags_that_allow_it() {
    let cannot = TerminateCause::new(Layer::Rdmap, 1, 0x09);
    for (name, access) in [
        ("local only", Access::LOCAL_WRITE),
        ("exposed for writes", Access::REMOTE_WRITE),
        ("flag without a remote right", Access::REMOTE_INVALIDATE),
    ] {
        let (mut a, mut b) = pair(QpParams::default());
        let (victim, vbase) = b.reg(64, access, 3);
        let (ca, cb) = send_invalidate(&mut a, &mut b, victim);
        assert_eq!(cb, Some((cannot, false)), "{name}: cause sent");
        assert_eq!(ca, Some((cannot, true)), "{name}: cause received");
        assert!(b.tpt.get(victim).unwrap().valid, "{name}: still valid");
        assert!(
            b.tpt
                .check_local(victim, vbase, 64, Access::empty(), PD)
                .is_ok(),
            "{name}: its owner still uses it"
        );
    }
    // With the flag and a remote right it works, and the receive says which STag.
    let (mut a, mut b) = pair(QpParams::default());
    let (victim, _) = b.reg(64, Access::REMOTE_READ | Access::REMOTE_INVALIDATE, 3);
    assert_eq!(send_invalidate(&mut a, &mut b, victim), (None, None));
    assert!(!b.tpt.get(victim).unwrap().valid);
    let c = b.completions();
    assert_eq!(c.len(), 1);
    assert_eq!(
        (c[0].1.wr_id, c[0].1.status, c[0].1.invalidated),
        (7, WcStatus::Success, Some(victim))
    );
}

/// One remote access from `a` to `b` that `b` must refuse; (cause b sent, cause a
/// received, a's completions), after checking that b's memory did not change.
fn refused(op: SendOp, a: &mut Side, b: &mut Side, sink: Sge) -> (Outcome, Vec<u8>) {
    let before = b.mem.clone();
    a.qp.post_send(
        SendWr {
            wr_id: 1,
            op,
            sgl: [sink].into(),
            signaled: true,
            fence: false,
        },
        &a.tpt,
    )
    .unwrap();
    pump(a, b, false);
    assert_eq!(b.mem, before, "a refused access changes no memory");
    // b closes the connection once its Terminate is out.
    assert_eq!(
        b.closes.first(),
        Some(&CloseAction::Shutdown),
        "b sent its Terminate"
    );
    let c = a
        .completions()
        .into_iter()
        .map(|(_, c)| (c.wr_id, c.status))
        .collect();
    (
        (b.qp.fatal_cause(), a.qp.fatal_cause(), c),
        a.mem[0].clone(),
    )
}

/// A tagged Write whose TO wraps past 2^64 is DDP tagged "TO wrap" (1/0x03, RFC 5041),
/// and a Read Request whose source TO wraps is RDMAP remote protection "TO wrap"
/// (1/0x04, RFC 5040), not a base-or-bounds violation. A Write that ends exactly at
/// the top of the address space does not wrap: it is out of bounds (1/0x01).
#[test]
fn tagged_offset_wrap_has_its_own_code() {
    let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    for (name, to, is_read, cause) in [
        (
            "Write wraps",
            u64::MAX - 15,
            false,
            TerminateCause::new(Layer::Ddp, 1, 0x03),
        ),
        (
            "Read source wraps",
            u64::MAX - 15,
            true,
            TerminateCause::new(Layer::Rdmap, 1, 0x04),
        ),
        (
            "Write ends at 2^64",
            u64::MAX - 31,
            false,
            TerminateCause::new(Layer::Ddp, 1, 0x01),
        ),
    ] {
        let (mut a, mut b) = pair(QpParams::default());
        let (local, lbase) = a.reg(64, Access::LOCAL_WRITE, 1);
        let (remote, _) = b.reg(64, all, 2);
        let op = if is_read {
            SendOp::Read {
                remote_addr: to,
                rkey: remote,
            }
        } else {
            SendOp::Write {
                remote_addr: to,
                rkey: remote,
            }
        };
        let before = a.mem[0].clone();
        let ((sent, received, completions), after) =
            refused(op, &mut a, &mut b, sge(local, lbase, 32));
        assert_eq!(sent, Some((cause, false)), "{name}: cause sent");
        assert_eq!(received, Some((cause, true)), "{name}: cause received");
        let first = if is_read {
            WcStatus::RemoteAccessError
        } else {
            // A Write completed once handed to the transport.
            WcStatus::Success
        };
        assert_eq!(completions, vec![(1, first)], "{name}");
        assert_eq!(after, before, "{name}: the Read sink is untouched");
    }
}

/// One FPDU (no CRC, no markers) around `ulpdu`.
fn fpdu(ulpdu: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; softrnic_wire::mpa::fpdu_len(ulpdu.len())];
    let n = softrnic_wire::mpa::emit_fpdu(&[ulpdu], false, None, &mut out).unwrap();
    out.truncate(n);
    out
}

/// Reserved control bits are set to zero by a sender and not checked by a receiver
/// (RFC 5041 DDP control, RFC 5040 RDMAP control): a Send and a Write with every
/// reserved bit set are placed and completed as if the bits were clear.
#[test]
fn reserved_control_bits_set_by_the_peer_are_ignored() {
    let (mut a, mut b) = pair(QpParams::default());
    let (src, sbase) = a.reg(16, Access::empty(), 1);
    let (dst, dbase) = b.reg(16, Access::LOCAL_WRITE, 2);
    let (wdst, wbase) = b.reg(16, Access::REMOTE_WRITE, 3);
    b.qp.post_recv(
        RecvWr {
            wr_id: 9,
            sgl: [sge(dst, dbase, 16)].into(),
        },
        &b.tpt,
    )
    .unwrap();
    for op in [
        SendOp::Send {
            solicited: false,
            invalidate: None,
        },
        SendOp::Write {
            remote_addr: wbase,
            rkey: wdst,
        },
    ] {
        a.qp.post_send(
            SendWr {
                wr_id: 1,
                op,
                sgl: [sge(src, sbase, 16)].into(),
                signaled: false,
                fence: false,
            },
            &a.tpt,
        )
        .unwrap();
        let f = a.next_fpdu().unwrap();
        let ulpdu_len = usize::from(u16::from_be_bytes([f[0], f[1]]));
        let mut ulpdu = f[2..2 + ulpdu_len].to_vec();
        ulpdu[0] |= 0x3c;
        ulpdu[1] |= 0x30;
        b.feed(&fpdu(&ulpdu), false);
        assert_eq!(b.qp.fatal_cause(), None, "{op:?}");
    }
    assert_eq!(b.region(dst), a.region(src), "the Send placed");
    assert_eq!(b.region(wdst), a.region(src), "the Write placed");
    let c = b.completions();
    assert_eq!(c.len(), 1);
    assert_eq!((c[0].1.wr_id, c[0].1.status), (9, WcStatus::Success));
    assert_eq!(b.qp.state(), QpState::Rts);
}

/// An untagged header for a Terminate (queue 2, MSN 1, MO 0, L) unless changed.
fn terminate_ulpdu(qn: u32, mo: u32, last: bool, body: &[u8]) -> Vec<u8> {
    use softrnic_wire::ddp::{DdpRepr, Placement};
    use softrnic_wire::rdmap::Opcode;
    let h = DdpRepr {
        last,
        opcode: Opcode::Terminate,
        placement: Placement::Untagged {
            rsvd_ulp: 0,
            qn,
            msn: 1,
            mo,
        },
    };
    let mut v = vec![0u8; 18];
    h.emit(&mut v).unwrap();
    v.extend_from_slice(body);
    v
}

/// A Terminate is never answered with a Terminate (RFC 5040), however malformed it is:
/// the QP reports the cause it carries (or, without a control word, "unspecified"),
/// goes to Error and sends nothing.
#[test]
fn a_received_terminate_is_never_answered() {
    // Control word: DDP (1), tagged (1), base or bounds (0x01), no headers copied.
    let ctrl = [0x11, 0x01, 0x00, 0x00];
    let said = TerminateCause::new(Layer::Ddp, 1, 0x01);
    let with = |extra: &[u8]| [&ctrl[..], extra].concat();
    let long = with(&[0u8; 200]);
    let cases: [(&str, Vec<u8>, TerminateCause); 8] = [
        ("well formed", terminate_ulpdu(2, 0, true, &ctrl), said),
        (
            "trailing octets",
            terminate_ulpdu(2, 0, true, &with(&[1, 2, 3])),
            said,
        ),
        (
            "D flag without a header",
            terminate_ulpdu(2, 0, true, &[0x11, 0x01, 0x40, 0x00]),
            said,
        ),
        (
            "no control word",
            terminate_ulpdu(2, 0, true, &[0x11]),
            softrnic_wire::terminate::UNREADABLE,
        ),
        ("queue 3", terminate_ulpdu(3, 0, true, &ctrl), said),
        ("MO 4", terminate_ulpdu(2, 4, true, &ctrl), said),
        ("not last", terminate_ulpdu(2, 0, false, &ctrl), said),
        (
            "longer than any Terminate",
            terminate_ulpdu(2, 0, true, &long),
            softrnic_wire::terminate::UNREADABLE,
        ),
    ];
    for (name, ulpdu, cause) in cases {
        let (_, mut b) = pair(QpParams::default());
        let (d, dbase) = b.reg(8, Access::LOCAL_WRITE, 1);
        b.qp.post_recv(
            RecvWr {
                wr_id: 3,
                sgl: [sge(d, dbase, 8)].into(),
            },
            &b.tpt,
        )
        .unwrap();
        b.feed(&fpdu(&ulpdu), false);
        assert_eq!(b.qp.fatal_cause(), Some((cause, true)), "{name}");
        assert_eq!(b.qp.state(), QpState::Error, "{name}");
        assert!(b.next_fpdu().is_none(), "{name}: nothing sent back");
        let c: Vec<_> = b
            .completions()
            .into_iter()
            .map(|(_, c)| (c.wr_id, c.status))
            .collect();
        assert_eq!(c, vec![(3, WcStatus::WrFlushError)], "{name}");
    }
}

/// ORD 0 (the peer's IRD is 0): a Read is refused when posted, and the QP goes on. IRD
/// 0: a peer that sends a Read Request anyway gets DDP untagged "no buffer available"
/// (2/0x02), as any Read beyond the IRD does.
#[test]
fn ird_and_ord_zero_allow_no_read() {
    let zero = QpParams {
        ird: 0,
        ord: 0,
        ..QpParams::default()
    };
    let (mut a, mut b) = (Side::new(1, zero), Side::new(2, zero));
    let (local, lbase) = a.reg(64, Access::LOCAL_WRITE, 1);
    let (remote, rbase) = b.reg(64, Access::REMOTE_READ | Access::REMOTE_WRITE, 2);
    let read = SendWr {
        wr_id: 1,
        op: SendOp::Read {
            remote_addr: rbase,
            rkey: remote,
        },
        sgl: [sge(local, lbase, 8)].into(),
        signaled: true,
        fence: false,
    };
    assert_eq!(
        a.qp.post_send(read.clone(), &a.tpt),
        Err(PostError::NoReadCredits)
    );
    assert_eq!(a.qp.state(), QpState::Rts);
    assert_eq!(a.qp.send_queue_len(), 0, "nothing was queued");
    // The connection still works.
    a.qp.post_send(
        SendWr {
            wr_id: 2,
            op: SendOp::Write {
                remote_addr: rbase,
                rkey: remote,
            },
            ..read.clone()
        },
        &a.tpt,
    )
    .unwrap();
    pump(&mut a, &mut b, false);
    assert_eq!(&b.region(remote)[..8], &a.region(local)[..8]);
    // A peer that ignores our IRD of 0.
    let mut rogue = Side::new(3, QpParams::default());
    let (rl, rlbase) = rogue.reg(64, Access::LOCAL_WRITE, 1);
    rogue
        .qp
        .post_send(
            SendWr {
                sgl: [sge(rl, rlbase, 8)].into(),
                ..read
            },
            &rogue.tpt,
        )
        .unwrap();
    let before = b.mem.clone();
    pump(&mut rogue, &mut b, false);
    assert_eq!(b.mem, before);
    let no_buffer = TerminateCause::new(Layer::Ddp, 2, 0x02);
    assert_eq!(b.qp.fatal_cause(), Some((no_buffer, false)));
    assert_eq!(rogue.qp.fatal_cause(), Some((no_buffer, true)));
    let c: Vec<_> = rogue
        .completions()
        .into_iter()
        .map(|(_, c)| (c.wr_id, c.status))
        .collect();
    assert_eq!(c, vec![(1, WcStatus::RemoteInvalidRequestError)]);
}
