//! Every Terminate a peer can provoke (RFC 5040 RDMAP, RFC 5041 DDP, RFC 5044 MPA), at
//! both ends: the cause and copied headers the peer reads off the wire, the cause
//! softrnic reports (QpFatal, sent), and no memory changed.

use crate::peer::*;
use softrnic_rnic::*;
use softrnic_wire::rdmap::{Opcode, QN_SEND, ReadRequest};
use softrnic_wire::terminate::Layer;

/// What the target has registered before the peer connects.
struct Regions {
    /// LOCAL_WRITE, REMOTE_WRITE, REMOTE_READ.
    exposed: Mr,
    /// LOCAL_WRITE only.
    private: Mr,
    /// All rights, but in another PD.
    foreign: Mr,
    /// A receive buffer (posted unless the case says otherwise).
    recv: Mr,
}

const LEN: usize = 4096;

struct Case {
    name: &'static str,
    cause: TerminateCause,
    /// The target's MPA settings (IRD).
    ird: u16,
    /// The peer asks for CRC.
    crc: bool,
    /// Post one 64-octet receive before the peer acts.
    post_recv: bool,
    /// What the peer sends: the offending ULPDU (or raw octets, with `raw`).
    act: fn(&Regions) -> Vec<u8>,
    /// `act` gives the whole FPDU, octet for octet.
    raw: bool,
    /// The payload lands in the exposed region before the fault shows (a bad CRC is
    /// found at the FPDU's end, after its payload was placed, within its STag's grant).
    places: bool,
}

fn rdmap(t: u8, c: u8) -> TerminateCause {
    TerminateCause::new(Layer::Rdmap, t, c)
}
fn ddp(t: u8, c: u8) -> TerminateCause {
    TerminateCause::new(Layer::Ddp, t, c)
}
fn llp(c: u8) -> TerminateCause {
    TerminateCause::new(Layer::Llp, 0, c)
}

fn write_to(stag: u32, to: u64, len: usize) -> Vec<u8> {
    tagged(Opcode::Write, stag, to, true, &vec![0xa5; len])
}

fn read_of(stag: u32, to: u64, size: u32) -> Vec<u8> {
    let rr = ReadRequest {
        sink_stag: 0x1234_5600,
        sink_to: 0,
        size,
        source_stag: stag,
        source_to: to,
    };
    untagged(
        Opcode::ReadRequest,
        softrnic_wire::rdmap::QN_READ_REQUEST,
        1,
        0,
        true,
        0,
        &rr.to_bytes(),
    )
}

fn send_of(len: usize) -> Vec<u8> {
    untagged(Opcode::Send, QN_SEND, 1, 0, true, 0, &vec![0x5a; len])
}

fn case(name: &'static str, cause: TerminateCause, act: fn(&Regions) -> Vec<u8>) -> Case {
    Case {
        name,
        cause,
        ird: 16,
        crc: false,
        post_recv: true,
        act,
        raw: false,
        places: false,
    }
}

fn cases() -> Vec<Case> {
    vec![
        // MPA (RFC 5044).
        Case {
            crc: true,
            raw: true,
            places: true,
            ..case("CRC mismatch", llp(0x02), |r| {
                let mut f = fpdu(&write_to(r.exposed.rkey(), r.exposed.addr(), 8), true);
                let n = f.len();
                f[n - 1] ^= 0xff;
                f
            })
        },
        Case {
            raw: true,
            ..case("ULPDU shorter than a DDP header", llp(0x03), |_| {
                vec![0, 4, 0xc1, 0x40, 0, 0, 0, 0, 0, 0]
            })
        },
        // DDP tagged buffer errors (RFC 5041).
        case("Write, unknown STag", ddp(1, 0x00), |_| {
            write_to(0x00ab_cd01, 0, 8)
        }),
        case("Write, wrong consumer key", ddp(1, 0x00), |r| {
            write_to(r.exposed.rkey() ^ 0x01, r.exposed.addr(), 8)
        }),
        case("Write beyond the region", ddp(1, 0x01), |r| {
            write_to(r.exposed.rkey(), r.exposed.addr() + LEN as u64 - 4, 8)
        }),
        case("Write before the region", ddp(1, 0x01), |r| {
            write_to(r.exposed.rkey(), r.exposed.addr() - 4, 8)
        }),
        case("Write, STag of another PD", ddp(1, 0x02), |r| {
            write_to(r.foreign.rkey(), r.foreign.addr(), 8)
        }),
        case("Write, TO wraps", ddp(1, 0x03), |r| {
            write_to(r.exposed.rkey(), u64::MAX - 3, 8)
        }),
        case("Write, DDP version 2", ddp(1, 0x04), |r| {
            let mut u = write_to(r.exposed.rkey(), r.exposed.addr(), 8);
            u[0] = (u[0] & !0x03) | 0x02;
            u
        }),
        // DDP untagged buffer errors.
        case("Send on queue 1", ddp(2, 0x01), |_| {
            untagged(Opcode::Send, 1, 1, 0, true, 0, b"x")
        }),
        Case {
            post_recv: false,
            ..case("Send, no receive posted", ddp(2, 0x02), |_| send_of(8))
        },
        Case {
            ird: 0,
            ..case("Read Request, IRD 0", ddp(2, 0x02), |r| {
                read_of(r.exposed.rkey(), r.exposed.addr(), 8)
            })
        },
        case("Send, MSN out of range", ddp(2, 0x03), |_| {
            untagged(Opcode::Send, QN_SEND, 7, 0, true, 0, b"x")
        }),
        case("Read Request at MO 4", ddp(2, 0x04), |r| {
            let mut u = read_of(r.exposed.rkey(), r.exposed.addr(), 8);
            u[14..18].copy_from_slice(&4u32.to_be_bytes());
            u
        }),
        case("Send longer than the receive", ddp(2, 0x05), |_| {
            send_of(65)
        }),
        case("Send, DDP version 0", ddp(2, 0x06), |_| {
            let mut u = send_of(8);
            u[0] &= !0x03;
            u
        }),
        // RDMAP remote protection errors (RFC 5040).
        case("Read, unknown STag", rdmap(1, 0x00), |_| {
            read_of(0x00ab_cd01, 0, 8)
        }),
        case("Read beyond the region", rdmap(1, 0x01), |r| {
            read_of(r.exposed.rkey(), r.exposed.addr() + 1, LEN as u32)
        }),
        case("Write without REMOTE_WRITE", rdmap(1, 0x02), |r| {
            write_to(r.private.rkey(), r.private.addr(), 8)
        }),
        case("Read without REMOTE_READ", rdmap(1, 0x02), |r| {
            read_of(r.private.rkey(), r.private.addr(), 8)
        }),
        case("Read, STag of another PD", rdmap(1, 0x03), |r| {
            read_of(r.foreign.rkey(), r.foreign.addr(), 8)
        }),
        case("Read, source TO wraps", rdmap(1, 0x04), |r| {
            read_of(r.exposed.rkey(), u64::MAX - 3, 8)
        }),
        case(
            "Send with Invalidate of a local region",
            rdmap(1, 0x09),
            |r| {
                untagged(
                    Opcode::SendInvalidate,
                    QN_SEND,
                    1,
                    0,
                    true,
                    r.private.rkey(),
                    b"x",
                )
            },
        ),
        case(
            "Send with Invalidate of an exposed region",
            rdmap(1, 0x09),
            |r| {
                untagged(
                    Opcode::SendSeInvalidate,
                    QN_SEND,
                    1,
                    0,
                    true,
                    r.exposed.rkey(),
                    b"x",
                )
            },
        ),
        // RDMAP remote operation errors.
        case("RDMAP version 2", rdmap(2, 0x05), |_| {
            let mut u = send_of(8);
            u[1] = (u[1] & 0x3f) | 0x80;
            u
        }),
        case("opcode 0xd", rdmap(2, 0x06), |_| {
            let mut u = send_of(8);
            u[1] = (u[1] & 0xf0) | 0x0d;
            u
        }),
        case(
            "Atomic Request (RFC 7306, unsupported)",
            rdmap(2, 0x06),
            |_| untagged(Opcode::AtomicRequest, 1, 1, 0, true, 0, &[0u8; 52]),
        ),
        case(
            "Write opcode in an untagged segment",
            rdmap(2, 0x06),
            |_| untagged(Opcode::Write, 0, 1, 0, true, 0, b"x"),
        ),
        case("Read Request body of 20 octets", rdmap(2, 0xff), |r| {
            let mut u = read_of(r.exposed.rkey(), r.exposed.addr(), 8);
            u.truncate(18 + 20);
            u
        }),
        case(
            "Read Response with no Read outstanding",
            ddp(1, 0x00),
            |r| {
                tagged(
                    Opcode::ReadResponse,
                    r.exposed.rkey(),
                    r.exposed.addr(),
                    true,
                    b"xxxx",
                )
            },
        ),
    ]
}

/// Runs one case: the exact cause at both ends, the offending headers copied octet for
/// octet, the connection closed, the registered memory unchanged.
fn run(c: &Case) {
    let mut cfg = DeviceConfig::default();
    cfg.mpa.ird = c.ird;
    let t = Target::new(cfg);
    let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let other = t.dev.alloc_pd();
    let r = Regions {
        exposed: t.pd.alloc_mr(LEN, all).unwrap(),
        private: t.pd.alloc_mr(LEN, Access::LOCAL_WRITE).unwrap(),
        foreign: other.alloc_mr(LEN, all).unwrap(),
        recv: t.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap(),
    };
    for (i, m) in [&r.exposed, &r.private, &r.foreign, &r.recv]
        .iter()
        .enumerate()
    {
        m.fill(0, m.len(), 0x30 + i as u8).unwrap();
    }
    let snapshot = |r: &Regions| {
        let exposed = if c.places {
            None
        } else {
            Some(r.exposed.to_vec())
        };
        (exposed, r.private.to_vec(), r.foreign.to_vec())
    };
    let before = snapshot(&r);
    if c.post_recv {
        t.qp.post_recv(RecvWr {
            wr_id: 77,
            sgl: [r.recv.sge(0, 64)].into(),
        })
        .unwrap();
    }
    let mut mpa = MpaConfig::default();
    if c.crc {
        mpa.crc = CrcPolicy::Required;
    }
    let mut peer = t.accept_peer(mpa);
    let offending = (c.act)(&r);
    if c.raw {
        use std::io::Write;
        peer.s.write_all(&offending).unwrap();
    } else {
        peer.send_ulpdu(&offending);
    }
    let (cause, ddp_header, read_request) = peer.terminate();
    let name = c.name;
    assert_eq!(cause, c.cause, "{name}: the cause on the wire ({cause})");
    assert_eq!(
        t.sent_terminate(),
        c.cause,
        "{name}: the cause softrnic reports"
    );
    if cause.layer != Layer::Llp {
        // The offending segment's DDP header (RFC 5040 section 4.8), and for a Read
        // Request its RDMAP header too.
        let hlen = if offending[0] & 0x80 != 0 { 14 } else { 18 };
        assert_eq!(
            ddp_header.as_deref(),
            Some(&offending[..hlen]),
            "{name}: copied DDP header"
        );
        // A fault found in a Read Request's body (its source, RDMAP's checks) copies
        // the body too; one found in its DDP header is reported before the body is
        // read.
        let is_read = offending[1] & 0x0f == Opcode::ReadRequest.to_bits();
        if is_read && offending.len() == 18 + 28 && cause.layer == Layer::Rdmap {
            assert_eq!(
                read_request.as_deref(),
                Some(&offending[18..]),
                "{name}: copied Read Request"
            );
        }
    }
    assert!(snapshot(&r) == before, "{name}: registered memory changed");
    assert!(r.exposed.is_valid() && r.private.is_valid(), "{name}");
    // The receive completes once: flushed, or (too long) with a length error.
    if c.post_recv {
        let wc = t.cq.wait_for(1, WAIT);
        let expected = if c.cause == ddp(2, 0x05) {
            WcStatus::LocalLengthError
        } else {
            WcStatus::WrFlushError
        };
        assert_eq!(
            wc.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
            vec![(77, expected)],
            "{name}"
        );
    }
    assert_eq!(t.qp.state(), QpState::Error, "{name}");
}

#[test]
fn every_terminate_a_peer_can_provoke() {
    for c in cases() {
        run(&c);
    }
}

/// A hostile connection ends alone: another QP of the same device, in the same PD and
/// on the same CQ, goes on placing and completing while the first is terminated.
#[test]
fn other_connections_are_untouched() {
    let t = Target::new(DeviceConfig::default());
    let qp2 = t
        .dev
        .create_qp(
            &t.pd,
            QpInit {
                send_cq: &t.cq,
                recv_cq: &t.cq,
                sq_depth: 16,
                rq_depth: 16,
            },
        )
        .unwrap();
    let exposed =
        t.pd.alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
    let note = t.pd.alloc_mr(8, Access::LOCAL_WRITE).unwrap();
    let mut hostile = t.accept_peer(MpaConfig::default());
    let mut good = {
        let listener = t.dev.listen("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::scope(|s| {
            let h = s.spawn(|| listener.accept().unwrap().accept(&qp2, b"").unwrap());
            let p = Peer::connect(addr, MpaConfig::default());
            h.join().unwrap();
            p
        })
    };
    qp2.post_recv(RecvWr {
        wr_id: 2,
        sgl: [note.sge(0, 8)].into(),
    })
    .unwrap();
    hostile.write(0x00ab_cd01, 0, b"bad");
    assert_eq!(hostile.terminate().0, ddp(1, 0x00));
    good.write(exposed.rkey(), exposed.addr(), b"good data");
    good.send(Opcode::Send, 0, b"done");
    let wc = t.cq.wait_for(1, WAIT);
    assert_eq!(
        (wc[0].wr_id, wc[0].status, wc[0].qp),
        (2, WcStatus::Success, qp2.id())
    );
    let mut got = [0u8; 9];
    exposed.read(0, &mut got).unwrap();
    assert_eq!(&got, b"good data");
    assert_eq!(qp2.state(), QpState::Rts);
    assert_eq!(t.qp.state(), QpState::Error);
}
