//! Peers that are odd rather than wrong, and the rules for answering them: reserved
//! bits, Terminates that are malformed, IRD/ORD 0, offsets that wrap.

use crate::peer::*;
use softrnic_rnic::*;
use softrnic_wire::rdmap::{Opcode, QN_SEND};
use softrnic_wire::terminate::Layer;

/// A Terminate is the last message of a stream (RFC 5040): softrnic never answers one,
/// however malformed, and reports what its control word says.
#[test]
fn a_malformed_terminate_is_not_answered() {
    let ctrl = [0x02, 0x06, 0x00, 0x00]; // RDMAP, remote operation, unexpected opcode
    let said = TerminateCause::new(Layer::Rdmap, 2, 0x06);
    let cases: [(&str, Vec<u8>, TerminateCause); 5] = [
        ("well formed", terminate(&ctrl), said),
        (
            "trailing octets",
            terminate(&[&ctrl[..], &[9; 7]].concat()),
            said,
        ),
        (
            "D flag, no header copied",
            terminate(&[0x02, 0x06, 0x40, 0x00]),
            said,
        ),
        (
            "two octets",
            terminate(&[0x02, 0x06]),
            softrnic_wire::terminate::UNREADABLE,
        ),
        (
            "on queue 0",
            untagged(Opcode::Terminate, QN_SEND, 1, 0, true, 0, &ctrl),
            said,
        ),
    ];
    for (name, ulpdu, cause) in cases {
        let t = Target::new(DeviceConfig::default());
        let mut peer = t.accept_peer(MpaConfig::default());
        peer.send_ulpdu(&ulpdu);
        assert_eq!(peer.next(), Reply::Closed, "{name}: no Terminate back");
        assert_eq!(t.received_terminate(), cause, "{name}");
        assert_eq!(t.qp.state(), QpState::Error, "{name}");
    }
}

/// Reserved control bits are zero on transmit and not checked on receive (RFC 5041,
/// RFC 5040): a Send and a Write with all of them set are placed and completed.
#[test]
fn reserved_bits_set_by_a_peer_are_ignored() {
    let t = Target::new(DeviceConfig::default());
    let dst =
        t.pd.alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
    let buf = t.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    t.qp.post_recv(RecvWr {
        wr_id: 5,
        sgl: [buf.sge(0, 64)].into(),
    })
    .unwrap();
    let mut peer = t.accept_peer(MpaConfig::default());
    let set_reserved = |mut u: Vec<u8>| {
        u[0] |= 0x3c;
        u[1] |= 0x30;
        u
    };
    peer.send_ulpdu(&set_reserved(tagged(
        Opcode::Write,
        dst.rkey(),
        dst.addr() + 8,
        true,
        b"written",
    )));
    peer.send_ulpdu(&set_reserved(untagged(
        Opcode::Send,
        QN_SEND,
        1,
        0,
        true,
        0,
        b"sent",
    )));
    let wc = t.cq.wait_for(1, WAIT);
    assert_eq!(
        wc.iter()
            .map(|c| (c.wr_id, c.status, c.byte_len))
            .collect::<Vec<_>>(),
        vec![(5, WcStatus::Success, 4)]
    );
    let mut got = [0u8; 7];
    dst.read(8, &mut got).unwrap();
    assert_eq!(&got, b"written");
    buf.read(0, &mut got[..4]).unwrap();
    assert_eq!(&got[..4], b"sent");
    assert_eq!(t.qp.fatal_cause(), None);
    assert_eq!(t.qp.state(), QpState::Rts);
}

/// A peer that advertises IRD 0 gets no Read Request: posting one fails at once
/// (ORD 0), and the connection goes on.
#[test]
fn ord_zero_refuses_reads_locally() {
    let t = Target::new(DeviceConfig::default());
    let peer_cfg = MpaConfig {
        ird: 0,
        ord: 0,
        ..MpaConfig::default()
    };
    let mut peer = t.accept_peer(peer_cfg);
    assert_eq!(t.qp.params().ord, 0);
    let sink = t.pd.alloc_mr(8, Access::LOCAL_WRITE).unwrap();
    let read = SendWr {
        wr_id: 1,
        op: SendOp::Read {
            remote_addr: 0x1000,
            rkey: 0x100,
        },
        sgl: [sink.sge(0, 8)].into(),
        signaled: true,
        fence: false,
    };
    let e = t.qp.post_send(read).unwrap_err();
    assert!(
        matches!(e, Error::Post(softrnic_proto::qp::PostError::NoReadCredits)),
        "{e:?}"
    );
    assert_eq!(e.fault(), Fault::Caller);
    // Nothing went on the wire; a Send still does.
    t.qp.post_send(SendWr {
        wr_id: 2,
        op: SendOp::Send {
            solicited: false,
            invalidate: None,
        },
        sgl: [sink.sge(0, 8)].into(),
        signaled: true,
        fence: false,
    })
    .unwrap();
    match peer.next() {
        Reply::Fpdu(u) => assert_eq!(u[1] & 0x0f, Opcode::Send.to_bits(), "{u:?}"),
        r => panic!("{r:?}"),
    }
    let wc = t.cq.wait_for(1, WAIT);
    assert_eq!((wc[0].wr_id, wc[0].status), (2, WcStatus::Success));
}

/// Two softrnic ends over sockets: an initiator whose Write or Read wraps the peer's
/// TO range receives the exact Terminate the target sent.
#[test]
fn to_wrap_between_two_softrnic_ends() {
    for (is_read, cause) in [
        (false, TerminateCause::new(Layer::Ddp, 1, 0x03)),
        (true, TerminateCause::new(Layer::Rdmap, 1, 0x04)),
    ] {
        let (a, b) = (
            Target::new(DeviceConfig::default()),
            Target::new(DeviceConfig::default()),
        );
        let listener = b.dev.listen("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::scope(|s| {
            let h = s.spawn(|| listener.accept().unwrap().accept(&b.qp, b"").unwrap());
            a.dev.connect(addr, &a.qp, b"").unwrap();
            h.join().unwrap();
        });
        let exposed =
            b.pd.alloc_mr(64, Access::REMOTE_READ | Access::REMOTE_WRITE)
                .unwrap();
        let local = a.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
        let (remote_addr, rkey) = (u64::MAX - 7, exposed.rkey());
        let op = if is_read {
            SendOp::Read { remote_addr, rkey }
        } else {
            SendOp::Write { remote_addr, rkey }
        };
        a.qp.post_send(SendWr {
            wr_id: 1,
            op,
            sgl: [local.sge(0, 16)].into(),
            signaled: true,
            fence: false,
        })
        .unwrap();
        assert_eq!(b.sent_terminate(), cause);
        assert_eq!(a.received_terminate(), cause);
        let wc = a.cq.wait_for(1, WAIT);
        let status = if is_read {
            WcStatus::RemoteAccessError
        } else {
            WcStatus::Success
        };
        assert_eq!((wc[0].wr_id, wc[0].status), (1, status));
    }
}
