//! The QP state machine driven as a whole: two QPs wired back to back in memory
//! ([`pair`]'s harness), no sockets, no threads, fully deterministic.

mod pair;

use super::*;
use pair::*;
use softrnic_wire::terminate::{Layer, TerminateCause};

#[test]
fn fill_pattern_shows_any_shift_and_differs_per_side() {
    let v = fill(7, 70_000);
    for shift in [1, 256, 512, 4096, 65536] {
        assert_ne!(&v[shift..shift + 1000], &v[..1000], "shift {shift}");
    }
    let (mut a, mut b) = pair(QpParams::default());
    let (sa, _) = a.reg(64, Access::empty(), 0);
    let (sb, _) = b.reg(64, Access::empty(), 0);
    assert_ne!(a.region(sa), b.region(sb));
}

fn send_wr(wr_id: u64, sgl: impl Into<Sgl>) -> SendWr {
    SendWr {
        wr_id,
        op: SendOp::Send {
            solicited: false,
            invalidate: None,
        },
        sgl: sgl.into(),
        signaled: true,
        fence: false,
    }
}

fn sge(stag: STag, addr: u64, len: usize) -> Sge {
    Sge {
        addr,
        len: len as u32,
        lkey: stag,
    }
}

#[test]
fn send_recv_sizes_and_sg_lists() {
    for crc in [false, true] {
        for one in [false, true] {
            for size in [0usize, 1, 4095, 4096, 65537] {
                if one && size > 4096 {
                    continue;
                }
                let (mut a, mut b) = pair(QpParams {
                    crc,
                    ..Default::default()
                });
                let (src, sbase) = a.reg(size + 10, Access::empty(), 1);
                let (dst, dbase) = b.reg(size + 10, Access::LOCAL_WRITE, 2);
                // Receive buffer split in three SGEs; send gathered from two.
                let cut = size / 3;
                b.qp.post_recv(
                    RecvWr {
                        wr_id: 7,
                        sgl: [
                            sge(dst, dbase, cut),
                            sge(dst, dbase + cut as u64, 1),
                            sge(dst, dbase + cut as u64 + 1, size + 9 - cut),
                        ]
                        .into(),
                    },
                    &b.tpt,
                )
                .unwrap();
                let half = size / 2;
                a.qp.post_send(
                    send_wr(
                        9,
                        [
                            sge(src, sbase, half),
                            sge(src, sbase + half as u64, size - half),
                        ],
                    ),
                    &a.tpt,
                )
                .unwrap();
                pump(&mut a, &mut b, one);
                assert_eq!(
                    &b.region(dst)[..size],
                    &a.region(src)[..size],
                    "size {size} crc {crc}"
                );
                let ca = a.completions();
                let cb = b.completions();
                assert_eq!(ca.len(), 1);
                assert_eq!(
                    (
                        ca[0].1.wr_id,
                        ca[0].1.status,
                        ca[0].1.opcode,
                        ca[0].1.byte_len
                    ),
                    (9, WcStatus::Success, WcOpcode::Send, size as u32)
                );
                assert_eq!(cb.len(), 1);
                assert_eq!(
                    (cb[0].0, cb[0].1.wr_id, cb[0].1.status, cb[0].1.byte_len),
                    (CqSide::Recv, 7, WcStatus::Success, size as u32)
                );
            }
        }
    }
}

#[test]
fn write_and_read_place_exact_bytes() {
    let (mut a, mut b) = pair(QpParams {
        crc: true,
        ..Default::default()
    });
    let n = 100_000;
    let (src, sbase) = a.reg(n, Access::empty(), 3);
    let (sink, kbase) = a.reg(n, Access::LOCAL_WRITE, 4);
    let (target, tbase) = b.reg(n + 8, Access::REMOTE_WRITE | Access::REMOTE_READ, 5);
    let before = b.region(target).to_vec();
    a.qp.post_send(
        SendWr {
            wr_id: 1,
            op: SendOp::Write {
                remote_addr: tbase + 8,
                rkey: target,
            },
            sgl: [sge(src, sbase, n)].into(),
            signaled: true,
            fence: false,
        },
        &a.tpt,
    )
    .unwrap();
    a.qp.post_send(
        SendWr {
            wr_id: 2,
            op: SendOp::Read {
                remote_addr: tbase + 8,
                rkey: target,
            },
            sgl: [sge(sink, kbase, n)].into(),
            signaled: true,
            fence: true,
        },
        &a.tpt,
    )
    .unwrap();
    pump(&mut a, &mut b, false);
    assert_eq!(
        &b.region(target)[..8],
        &before[..8],
        "octets before the target untouched"
    );
    assert_eq!(&b.region(target)[8..], a.region(src));
    assert_eq!(a.region(sink), a.region(src));
    let c: Vec<_> = a
        .completions()
        .into_iter()
        .map(|(_, c)| (c.wr_id, c.status, c.opcode, c.byte_len))
        .collect();
    assert_eq!(
        c,
        vec![
            (1, WcStatus::Success, WcOpcode::Write, n as u32),
            (2, WcStatus::Success, WcOpcode::Read, n as u32)
        ]
    );
    assert!(
        b.completions().is_empty(),
        "the passive side of one-sided operations sees nothing"
    );
}

#[test]
fn reads_beyond_ord_wait_and_complete_in_order() {
    let (mut a, mut b) = pair(QpParams {
        ord: 2,
        ird: 2,
        ..Default::default()
    });
    let (sink, kbase) = a.reg(8 * 1000, Access::LOCAL_WRITE, 0);
    let (src, sbase) = b.reg(8 * 1000, Access::REMOTE_READ, 9);
    for i in 0..8u64 {
        a.qp.post_send(
            SendWr {
                wr_id: i,
                op: SendOp::Read {
                    remote_addr: sbase + i * 1000,
                    rkey: src,
                },
                sgl: [sge(sink, kbase + i * 1000, 1000)].into(),
                signaled: true,
                fence: false,
            },
            &a.tpt,
        )
        .unwrap();
    }
    // Only ORD Read Requests go out before responses come back.
    let mut sent = 0;
    while a.next_fpdu().is_some() {
        sent += 1;
    }
    assert_eq!(sent, 2);
    // (the two Read Requests were dropped on the floor above; start again cleanly)
    let (mut a, mut b2) = pair(QpParams {
        ord: 2,
        ird: 2,
        ..Default::default()
    });
    let (sink, kbase) = a.reg(8 * 1000, Access::LOCAL_WRITE, 0);
    let (src, sbase) = b2.reg(8 * 1000, Access::REMOTE_READ, 9);
    for i in 0..8u64 {
        a.qp.post_send(
            SendWr {
                wr_id: i,
                op: SendOp::Read {
                    remote_addr: sbase + i * 1000,
                    rkey: src,
                },
                sgl: [sge(sink, kbase + i * 1000, 1000)].into(),
                signaled: true,
                fence: false,
            },
            &a.tpt,
        )
        .unwrap();
    }
    pump(&mut a, &mut b2, false);
    let ids: Vec<_> = a
        .completions()
        .into_iter()
        .map(|(_, c)| (c.wr_id, c.status))
        .collect();
    assert_eq!(
        ids,
        (0..8).map(|i| (i, WcStatus::Success)).collect::<Vec<_>>()
    );
    assert_eq!(a.region(sink), b2.region(src));
    drop(b);
}

/// (cause the target sent, cause the initiator received, initiator's completions).
type Outcome = (
    Option<(TerminateCause, bool)>,
    Option<(TerminateCause, bool)>,
    Vec<(u64, WcStatus)>,
);

/// Runs one remote access that the target must refuse; returns the causes seen at the
/// target (sent) and at the initiator (received) and the initiator's completions.
fn violation(
    op: impl Fn(STag, u64) -> SendOp,
    access: Access,
    tamper: impl Fn(&mut Side, STag),
) -> Outcome {
    let (mut a, mut b) = pair(QpParams::default());
    let (local, lbase) = a.reg(64, Access::LOCAL_WRITE, 1);
    let (remote, rbase) = b.reg(64, access, 2);
    tamper(&mut b, remote);
    let before = b.mem.clone();
    a.qp.post_send(
        SendWr {
            wr_id: 1,
            op: op(remote, rbase),
            sgl: [sge(local, lbase, 32)].into(),
            signaled: true,
            fence: false,
        },
        &a.tpt,
    )
    .unwrap();
    a.qp.post_send(send_wr(2, [sge(local, lbase, 4)]), &a.tpt)
        .unwrap();
    pump(&mut a, &mut b, false);
    assert_eq!(b.mem, before, "a refused access changes no memory");
    // b closes the connection once its Terminate is out; a learns of it.
    assert_eq!(b.closes, [CloseAction::Shutdown, CloseAction::Disconnect]);
    assert_eq!(a.closes, [CloseAction::Disconnect]);
    assert_eq!(
        (a.qp.state(), b.qp.state()),
        (QpState::Error, QpState::Error)
    );
    let c = a
        .completions()
        .into_iter()
        .map(|(_, c)| (c.wr_id, c.status))
        .collect();
    (b.qp.fatal_cause(), a.qp.fatal_cause(), c)
}

#[test]
fn tpt_violations_terminate_with_exact_codes_at_both_ends() {
    let write = |stag, base| SendOp::Write {
        remote_addr: base,
        rkey: stag,
    };
    let read = |stag, base| SendOp::Read {
        remote_addr: base,
        rkey: stag,
    };
    let ddp = |c| TerminateCause::new(Layer::Ddp, 1, c);
    let rdmap = |c| TerminateCause::new(Layer::Rdmap, 1, c);
    let none = |_: &mut Side, _| {};
    let bad_key = |s: &mut Side, stag: STag| {
        // The consumer key changes: the STag the initiator holds is stale.
        s.tpt.invalidate(stag, PD).unwrap();
        s.tpt.revalidate(stag, 0x99).unwrap();
    };
    let invalidated = |s: &mut Side, stag| s.tpt.invalidate(stag, PD).unwrap();
    for (name, is_read, access, tamper, cause) in [
        (
            "write stale key",
            false,
            Access::REMOTE_WRITE,
            &bad_key as &dyn Fn(&mut Side, STag),
            ddp(0),
        ),
        (
            "write invalidated",
            false,
            Access::REMOTE_WRITE,
            &invalidated,
            ddp(0),
        ),
        (
            "write no right",
            false,
            Access::REMOTE_READ,
            &none,
            rdmap(2),
        ),
        (
            "read stale key",
            true,
            Access::REMOTE_READ,
            &bad_key,
            rdmap(0),
        ),
        ("read no right", true, Access::REMOTE_WRITE, &none, rdmap(2)),
    ] {
        let op = if is_read {
            &read as &dyn Fn(STag, u64) -> SendOp
        } else {
            &write
        };
        let (sent, got, c) = violation(op, access, tamper);
        assert_eq!(sent, Some((cause, false)), "{name}: target's Terminate");
        assert_eq!(got, Some((cause, true)), "{name}: initiator received");
        // A Write and the Send behind it were handed to TCP before the Terminate came
        // back: they succeeded locally. A Read is outstanding: it fails, and the Send
        // posted after it completes after it, in posting order.
        let first = if is_read {
            WcStatus::RemoteAccessError
        } else {
            WcStatus::Success
        };
        assert_eq!(c, vec![(1, first), (2, WcStatus::Success)], "{name}");
    }
    // Out of bounds and wrong PD.
    let (sent, _, _) = violation(
        |s, b| SendOp::Write {
            remote_addr: b + 40,
            rkey: s,
        },
        Access::REMOTE_WRITE,
        none,
    );
    assert_eq!(sent.unwrap().0, ddp(1));
    let (sent, _, _) = violation(
        |s, b| SendOp::Read {
            remote_addr: b + 40,
            rkey: s,
        },
        Access::REMOTE_READ,
        none,
    );
    assert_eq!(sent.unwrap().0, rdmap(1));
    let wrong_pd = |s: &mut Side, stag: STag| {
        let mut e = s.tpt.get(stag).unwrap();
        s.tpt.remove(stag);
        e.pd = PdId(99);
        // A reused index never gets its last key back at once (a stale STag must not
        // name the new region), so go through another key to get the same STag.
        let k = e.key;
        e.key = k.wrapping_sub(1);
        s.tpt.remove(s.tpt.insert(e).unwrap());
        e.key = k;
        assert_eq!(s.tpt.insert(e), Some(stag));
    };
    let (sent, _, _) = violation(write, Access::REMOTE_WRITE, wrong_pd);
    assert_eq!(sent.unwrap().0, ddp(2));
}

#[test]
fn send_without_receive_is_fatal_and_everything_completes_once() {
    let (mut a, mut b) = pair(QpParams::default());
    let (s, base) = a.reg(16, Access::empty(), 0);
    let (d, dbase) = b.reg(16, Access::LOCAL_WRITE, 0);
    a.qp.post_send(send_wr(1, [sge(s, base, 16)]), &a.tpt)
        .unwrap();
    a.qp.post_send(send_wr(2, [sge(s, base, 16)]), &a.tpt)
        .unwrap();
    pump(&mut a, &mut b, false);
    let cause = TerminateCause::new(Layer::Ddp, 2, 0x02);
    assert_eq!(b.qp.fatal_cause(), Some((cause, false)));
    assert_eq!(a.qp.fatal_cause(), Some((cause, true)));
    // Posting after the error flushes at once.
    b.qp.post_recv(
        RecvWr {
            wr_id: 5,
            sgl: [sge(d, dbase, 16)].into(),
        },
        &b.tpt,
    )
    .unwrap();
    a.qp.post_send(send_wr(3, [sge(s, base, 1)]), &a.tpt)
        .unwrap();
    let ca: Vec<_> = a
        .completions()
        .into_iter()
        .map(|(_, c)| (c.wr_id, c.status))
        .collect();
    assert_eq!(
        ca,
        vec![
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (3, WcStatus::WrFlushError)
        ]
    );
    let cb: Vec<_> = b
        .completions()
        .into_iter()
        .map(|(_, c)| (c.wr_id, c.status))
        .collect();
    assert_eq!(cb, vec![(5, WcStatus::WrFlushError)]);
}

#[test]
fn crc_corruption_is_an_mpa_terminate() {
    let (mut a, mut b) = pair(QpParams {
        crc: true,
        ..Default::default()
    });
    let (s, base) = a.reg(100, Access::empty(), 0);
    let (d, dbase) = b.reg(100, Access::LOCAL_WRITE, 0);
    b.qp.post_recv(
        RecvWr {
            wr_id: 5,
            sgl: [sge(d, dbase, 100)].into(),
        },
        &b.tpt,
    )
    .unwrap();
    a.qp.post_send(send_wr(1, [sge(s, base, 100)]), &a.tpt)
        .unwrap();
    let mut f = a.next_fpdu().unwrap();
    f[50] ^= 0x10;
    b.feed(&f, false);
    assert_eq!(
        b.qp.fatal_cause(),
        Some((TerminateCause::new(Layer::Llp, 0, 0x02), false))
    );
    let cb: Vec<_> = b
        .completions()
        .into_iter()
        .map(|(_, c)| (c.wr_id, c.status))
        .collect();
    assert_eq!(cb, vec![(5, WcStatus::WrFlushError)]);
}

#[test]
fn malformed_frames_terminate_with_the_wire_cause() {
    for (bytes, cause) in [
        // ULPDU length shorter than a DDP header.
        (
            vec![0u8, 4, 0x41, 0x43, 0, 0, 0, 0, 0, 0, 0, 0],
            TerminateCause::new(Layer::Llp, 0, 0x03),
        ),
        // DDP version 2 in an untagged header.
        (
            {
                let mut v = vec![0u8, 18, 0x42, 0x43];
                v.extend([0u8; 20]);
                v
            },
            TerminateCause::new(Layer::Ddp, 2, 0x06),
        ),
        // Opcode 0xd.
        (
            {
                let mut v = vec![0u8, 18, 0x41, 0x4d];
                v.extend([0u8; 20]);
                v
            },
            TerminateCause::new(Layer::Rdmap, 2, 0x06),
        ),
    ] {
        let (_, mut b) = pair(QpParams::default());
        b.feed(&bytes, false);
        assert_eq!(b.qp.fatal_cause(), Some((cause, false)));
        assert_eq!(b.qp.rx_need(), RxNeed::Stopped);
    }
}

#[test]
fn send_with_invalidate_and_solicited_event() {
    let (mut a, mut b) = pair(QpParams::default());
    let (s, base) = a.reg(8, Access::empty(), 0);
    let (d, dbase) = b.reg(8, Access::LOCAL_WRITE, 0);
    let (exposed, _) = b.reg(8, Access::REMOTE_WRITE | Access::REMOTE_INVALIDATE, 0);
    b.qp.post_recv(
        RecvWr {
            wr_id: 5,
            sgl: [sge(d, dbase, 8)].into(),
        },
        &b.tpt,
    )
    .unwrap();
    a.qp.post_send(
        SendWr {
            wr_id: 1,
            op: SendOp::Send {
                solicited: true,
                invalidate: Some(exposed),
            },
            sgl: [sge(s, base, 8)].into(),
            signaled: true,
            fence: false,
        },
        &a.tpt,
    )
    .unwrap();
    assert!(b.tpt.get(exposed).unwrap().valid);
    pump(&mut a, &mut b, false);
    assert_eq!(b.region(d), a.region(s), "the Send's payload placed");
    let cb = b.completions();
    assert_eq!(cb.len(), 1);
    assert_eq!(
        (cb[0].0, cb[0].1.wr_id, cb[0].1.status, cb[0].1.byte_len),
        (CqSide::Recv, 5, WcStatus::Success, 8)
    );
    assert_eq!(cb[0].1.invalidated, Some(exposed));
    assert!(cb[0].1.solicited);
    assert_eq!(b.qp.poll_event(), Some(QpEvent::Solicited));
    assert_eq!(b.qp.poll_event(), None, "one event per solicited Send");
    assert!(!b.tpt.get(exposed).unwrap().valid);
    let ca: Vec<_> = a
        .completions()
        .into_iter()
        .map(|(_, c)| (c.wr_id, c.status, c.opcode))
        .collect();
    assert_eq!(ca, vec![(1, WcStatus::Success, WcOpcode::Send)]);
}

#[test]
fn rtr_holds_the_responder_until_it_arrives() {
    let (mut a, mut b) = (
        Side::new(
            1,
            QpParams {
                send_rtr: Some(RtrKind::Write),
                ..Default::default()
            },
        ),
        Side::new(
            2,
            QpParams {
                await_rtr: true,
                ..Default::default()
            },
        ),
    );
    let (s, base) = b.reg(8, Access::empty(), 0);
    let (d, dbase) = a.reg(8, Access::LOCAL_WRITE, 0);
    a.qp.post_recv(
        RecvWr {
            wr_id: 1,
            sgl: [sge(d, dbase, 8)].into(),
        },
        &a.tpt,
    )
    .unwrap();
    b.qp.post_send(send_wr(2, [sge(s, base, 8)]), &b.tpt)
        .unwrap();
    assert!(
        b.next_fpdu().is_none(),
        "the responder must not send before the RTR"
    );
    let rtr = a.next_fpdu().unwrap();
    assert_eq!(rtr.len(), 2 + 14 + 4, "a zero-length RDMA Write");
    b.feed(&rtr, false);
    assert_ne!(a.region(d), b.region(s), "nothing placed yet");
    pump(&mut a, &mut b, false);
    assert_eq!(a.region(d), b.region(s));
    let ca: Vec<_> = a
        .completions()
        .into_iter()
        .map(|(side, c)| (side, c.wr_id, c.status, c.byte_len))
        .collect();
    assert_eq!(ca, vec![(CqSide::Recv, 1, WcStatus::Success, 8)]);
    let cb: Vec<_> = b
        .completions()
        .into_iter()
        .map(|(side, c)| (side, c.wr_id, c.status, c.byte_len))
        .collect();
    assert_eq!(cb, vec![(CqSide::Send, 2, WcStatus::Success, 8)]);
}

#[test]
fn graceful_close_waits_for_queued_sends() {
    let (mut a, mut b) = pair(QpParams::default());
    let (s, base) = a.reg(5000, Access::empty(), 0);
    let (d, dbase) = b.reg(5000, Access::LOCAL_WRITE, 0);
    b.qp.post_recv(
        RecvWr {
            wr_id: 5,
            sgl: [sge(d, dbase, 5000)].into(),
        },
        &b.tpt,
    )
    .unwrap();
    a.qp.post_send(send_wr(1, [sge(s, base, 5000)]), &a.tpt)
        .unwrap();
    a.qp.close();
    assert_eq!(
        a.qp.poll_close(true, Duration::ZERO),
        None,
        "no FIN while a send is queued"
    );
    pump(&mut a, &mut b, false);
    // a's FIN makes b close too; once both FINs have crossed, both are disconnected.
    for side in [&a, &b] {
        assert_eq!(side.closes, [CloseAction::Fin, CloseAction::Disconnect]);
    }
    assert_eq!(
        b.region(d),
        a.region(s),
        "all 5000 octets arrived before the FIN"
    );
    let ca: Vec<_> = a
        .completions()
        .into_iter()
        .map(|(_, c)| (c.wr_id, c.status, c.byte_len))
        .collect();
    assert_eq!(ca, vec![(1, WcStatus::Success, 5000)]);
    let cb: Vec<_> = b
        .completions()
        .into_iter()
        .map(|(_, c)| (c.wr_id, c.status, c.byte_len))
        .collect();
    assert_eq!(cb, vec![(5, WcStatus::Success, 5000)]);
    assert_eq!(
        (a.qp.state(), b.qp.state()),
        (QpState::Error, QpState::Error)
    );
}

#[test]
fn send_completions_come_in_posting_order_across_reads() {
    let (mut a, mut b) = pair(QpParams::default());
    let (src, sbase) = a.reg(64, Access::LOCAL_WRITE, 0);
    let (t, tbase) = b.reg(64, Access::REMOTE_WRITE | Access::REMOTE_READ, 1);
    let (d, dbase) = b.reg(64, Access::LOCAL_WRITE, 0);
    b.qp.post_recv(
        RecvWr {
            wr_id: 50,
            sgl: [sge(d, dbase, 64)].into(),
        },
        &b.tpt,
    )
    .unwrap();
    for round in 0..3u64 {
        for (i, size) in [0usize, 1, 7].into_iter().enumerate() {
            let id = round * 10 + i as u64 * 3;
            a.qp.post_send(
                SendWr {
                    wr_id: id,
                    op: SendOp::Write {
                        remote_addr: tbase,
                        rkey: t,
                    },
                    sgl: [sge(src, sbase, size)].into(),
                    signaled: true,
                    fence: false,
                },
                &a.tpt,
            )
            .unwrap();
            a.qp.post_send(
                SendWr {
                    wr_id: id + 1,
                    op: SendOp::Read {
                        remote_addr: tbase,
                        rkey: t,
                    },
                    sgl: [sge(src, sbase + 8, size)].into(),
                    signaled: i != 1,
                    fence: false,
                },
                &a.tpt,
            )
            .unwrap();
            a.qp.post_send(
                SendWr {
                    wr_id: id + 2,
                    op: SendOp::Write {
                        remote_addr: tbase,
                        rkey: t,
                    },
                    sgl: [sge(src, sbase, size)].into(),
                    signaled: true,
                    fence: false,
                },
                &a.tpt,
            )
            .unwrap();
        }
    }
    pump(&mut a, &mut b, false);
    let done: Vec<_> = a.completions();
    assert!(
        done.iter().all(|(_, c)| c.status == WcStatus::Success),
        "{done:?}"
    );
    // The last Write put the first 7 source octets at the target, and every Read
    // brought the target's first octets back to offset 8 of the source.
    assert_eq!(&b.region(t)[..7], &a.region(src)[..7]);
    assert_eq!(&a.region(src)[8..15], &a.region(src)[..7]);
    assert!(b.completions().is_empty());
    let ids: Vec<u64> = done.into_iter().map(|(_, c)| c.wr_id).collect();
    let mut expected = Vec::new();
    for round in 0..3u64 {
        for i in 0..3u64 {
            let id = round * 10 + i * 3;
            expected.extend(
                [id, id + 1, id + 2]
                    .into_iter()
                    .filter(|x| i != 1 || *x != id + 1),
            );
        }
    }
    assert_eq!(ids, expected, "posting order, unsignaled Reads skipped");
}

/// What a Terminate carries (RFC 5040 section 4.8): the offending segment's DDP
/// segment length and its DDP header, and for a Read Request its RDMAP header, copied
/// octet for octet from what the peer sent.
#[test]
fn terminate_carries_the_offending_headers() {
    use softrnic_wire::{Body, Ulpdu};
    for is_read in [false, true] {
        let (mut a, mut b) = pair(QpParams::default());
        let (local, lbase) = a.reg(64, Access::LOCAL_WRITE, 1);
        let (remote, rbase) = b.reg(64, Access::empty(), 2);
        let op = if is_read {
            SendOp::Read {
                remote_addr: rbase + 3,
                rkey: remote,
            }
        } else {
            SendOp::Write {
                remote_addr: rbase + 3,
                rkey: remote,
            }
        };
        a.qp.post_send(
            SendWr {
                wr_id: 1,
                op,
                sgl: [sge(local, lbase, 32)].into(),
                signaled: true,
                fence: false,
            },
            &a.tpt,
        )
        .unwrap();
        let offending = a.next_fpdu().unwrap();
        b.feed(&offending, false);
        let term = b.next_fpdu().expect("a Terminate");
        let seg_len = u16::from_be_bytes([offending[0], offending[1]]);
        let ulpdu = &term[2..2 + usize::from(u16::from_be_bytes([term[0], term[1]]))];
        let Body::Terminate(t) = Ulpdu::parse(ulpdu).unwrap().body else {
            panic!("not a Terminate: {term:?}");
        };
        let what = if is_read { "Read" } else { "Write" };
        // No REMOTE_READ/REMOTE_WRITE right: RDMAP remote protection, access violation.
        assert_eq!(
            t.cause,
            TerminateCause::new(Layer::Rdmap, 1, 0x02),
            "{what}"
        );
        let ddp = t.ddp.unwrap_or_else(|| panic!("{what}: DDP header copied"));
        assert!(t.segment_len_valid, "{what}");
        assert_eq!(ddp.segment_len, seg_len, "{what}: segment length");
        let hlen = if is_read { 18 } else { 14 };
        assert_eq!(ddp.header, &offending[2..2 + hlen], "{what}: DDP header");
        if is_read {
            assert_eq!(
                t.rdmap,
                Some(&offending[2 + 18..2 + 18 + 28]),
                "Read Request header"
            );
        } else {
            assert_eq!(t.rdmap, None);
        }
    }
}

mod ahead;
mod closing;
mod hostile;
mod markers;
mod read_crc;
mod runs;
mod runs_vs_steps;
mod segments;
