//! A scripted iWARP peer for the tests: it speaks MPA, DDP and RDMAP with plain socket
//! calls and hand-built octets, so it can send anything, malformed or hostile, and read
//! exactly what softrnic sends back (a Terminate, an FPDU, a close).
//!
//! The softrnic side of a test is a [`Target`]: a device, a PD, a CQ and a QP that a
//! listener connects to the peer.
#![allow(dead_code)]

use softrnic_proto::cm::{Initiator, InitiatorProgress, Negotiated};
use softrnic_rnic::*;
use softrnic_wire::ddp::{DdpRepr, Placement};
use softrnic_wire::mpa;
use softrnic_wire::rdmap::{Opcode, QN_READ_REQUEST, QN_SEND, QN_TERMINATE, ReadRequest};
use softrnic_wire::terminate::TerminateRepr;
use softrnic_wire::{Body, Ulpdu};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// How long any single wait may take before the test fails (nothing sleeps: each wait
/// ends as soon as what it waits for arrives).
pub const WAIT: Duration = Duration::from_secs(60);

/// The softrnic end: a device with one QP on one CQ.
pub struct Target {
    pub dev: Device,
    pub pd: Pd,
    pub cq: Cq,
    pub qp: Qp,
}

impl Target {
    pub fn new(cfg: DeviceConfig) -> Target {
        let dev = Device::open(cfg).unwrap();
        let pd = dev.alloc_pd();
        let cq = dev.create_cq(256).unwrap();
        let qp = dev
            .create_qp(
                &pd,
                QpInit {
                    send_cq: &cq,
                    recv_cq: &cq,
                    sq_depth: 64,
                    rq_depth: 64,
                },
            )
            .unwrap();
        Target { dev, pd, cq, qp }
    }

    /// Listens, lets a scripted peer connect with `cfg` and accepts it on the QP.
    pub fn accept_peer(&self, cfg: MpaConfig) -> Peer {
        let listener = self.dev.listen("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::scope(|s| {
            let h = s.spawn(|| listener.accept().unwrap().accept(&self.qp, b"").unwrap());
            let peer = Peer::connect(addr, cfg);
            h.join().unwrap();
            peer
        })
    }

    /// The Terminate this end reported having sent (its QpFatal event and cause).
    pub fn sent_terminate(&self) -> TerminateCause {
        self.fatal(false)
    }

    /// The Terminate this end reported having received.
    pub fn received_terminate(&self) -> TerminateCause {
        self.fatal(true)
    }

    fn fatal(&self, remote: bool) -> TerminateCause {
        let id = self.qp.id();
        let e = self
            .dev
            .wait_event_matching(
                WAIT,
                |e| matches!(e, AsyncEvent::QpFatal { qp, .. } if *qp == id),
            )
            .expect("a QpFatal event");
        let AsyncEvent::QpFatal {
            cause, remote: r, ..
        } = e
        else {
            unreachable!()
        };
        assert_eq!(r, remote, "who sent the Terminate ({cause})");
        assert_eq!(self.qp.fatal_cause(), Some((cause, remote)));
        cause
    }
}

/// The peer's end of a connection in RDMA mode.
pub struct Peer {
    pub s: TcpStream,
    pub negotiated: Negotiated,
    /// The MSN of the next Send and of the next Read Request.
    pub send_msn: u32,
    pub read_msn: u32,
}

/// What softrnic sent back to the peer.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply {
    /// A Terminate: its cause and the offending headers it copied (DDP header, and
    /// Read Request header).
    Terminate {
        cause: TerminateCause,
        ddp_header: Option<Vec<u8>>,
        read_request: Option<Vec<u8>>,
    },
    /// Another FPDU, as its ULPDU.
    Fpdu(Vec<u8>),
    /// The connection ended (FIN or RST) before anything else came.
    Closed,
}

impl Peer {
    /// Connects to `addr` and does the MPA exchange as the initiator with `cfg`.
    pub fn connect(addr: SocketAddr, cfg: MpaConfig) -> Peer {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(WAIT)).unwrap();
        s.set_nodelay(true).unwrap();
        let mut init = Initiator::new(cfg).unwrap();
        s.write_all(&init.request()).unwrap();
        let mut got = Vec::new();
        let negotiated = loop {
            let mut buf = [0u8; 1024];
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "the responder closed during MPA setup");
            got.extend_from_slice(&buf[..n]);
            match init.handle_input(&got).unwrap() {
                InitiatorProgress::NeedMore => continue,
                InitiatorProgress::Established {
                    negotiated,
                    consumed,
                } => {
                    assert_eq!(consumed, got.len(), "no FPDU before our first");
                    break negotiated;
                }
                p => panic!("{p:?}"),
            }
        };
        Peer {
            s,
            negotiated,
            send_msn: 1,
            read_msn: 1,
        }
    }

    /// Frames `ulpdu` as an FPDU (with CRC if negotiated) and sends it.
    pub fn send_ulpdu(&mut self, ulpdu: &[u8]) {
        let f = fpdu(ulpdu, self.negotiated.crc);
        self.s.write_all(&f).unwrap();
    }

    /// A Send of `payload` as one segment (the next MSN).
    pub fn send(&mut self, opcode: Opcode, invalidate: u32, payload: &[u8]) {
        let msn = self.send_msn;
        self.send_msn += 1;
        self.send_ulpdu(&untagged(
            opcode, QN_SEND, msn, 0, true, invalidate, payload,
        ));
    }

    /// An RDMA Write of `payload` at (`stag`, `to`) as one segment.
    pub fn write(&mut self, stag: u32, to: u64, payload: &[u8]) {
        self.send_ulpdu(&tagged(Opcode::Write, stag, to, true, payload));
    }

    /// An RDMA Read Request (the next MSN on queue 1).
    pub fn read_request(&mut self, rr: ReadRequest) {
        let msn = self.read_msn;
        self.read_msn += 1;
        let body = rr.to_bytes();
        self.send_ulpdu(&untagged(
            Opcode::ReadRequest,
            QN_READ_REQUEST,
            msn,
            0,
            true,
            0,
            &body,
        ));
    }

    /// Reads the next FPDU softrnic sends, or how the connection ended.
    pub fn next(&mut self) -> Reply {
        let mut len = [0u8; 2];
        if let Err(e) = self.s.read_exact(&mut len) {
            assert!(
                matches!(
                    e.kind(),
                    ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset
                ),
                "{e:?}"
            );
            return Reply::Closed;
        }
        let ulpdu_len = usize::from(u16::from_be_bytes(len));
        let mut rest = vec![0u8; mpa::fpdu_len(ulpdu_len) - 2];
        self.s.read_exact(&mut rest).unwrap();
        let mut whole = len.to_vec();
        whole.extend_from_slice(&rest);
        if self.negotiated.crc {
            let f = mpa::parse_fpdu(&whole, None, true, &mut []).unwrap();
            f.check_crc().expect("softrnic's CRC is right");
        }
        let ulpdu = rest[..ulpdu_len].to_vec();
        let u = Ulpdu::parse(&ulpdu).expect("softrnic sends well-formed ULPDUs");
        match u.body {
            Body::Terminate(t) => {
                assert_eq!(u.header.opcode, Opcode::Terminate);
                let strict = TerminateRepr::parse(&ulpdu[18..]).unwrap();
                assert_eq!(
                    strict.layout,
                    softrnic_wire::terminate::TerminateLayout::Rfc5040
                );
                Reply::Terminate {
                    cause: t.cause,
                    ddp_header: t.ddp.map(|d| d.header.to_vec()),
                    read_request: t.rdmap.map(<[u8]>::to_vec),
                }
            }
            _ => Reply::Fpdu(ulpdu),
        }
    }

    /// The Terminate softrnic sends next (after which it closes the connection).
    pub fn terminate(&mut self) -> (TerminateCause, Option<Vec<u8>>, Option<Vec<u8>>) {
        match self.next() {
            Reply::Terminate {
                cause,
                ddp_header,
                read_request,
            } => {
                assert_eq!(self.next(), Reply::Closed, "the connection closes after it");
                (cause, ddp_header, read_request)
            }
            r => panic!("expected a Terminate, got {r:?}"),
        }
    }
}

/// An FPDU around `ulpdu`, with a CRC if `crc`.
pub fn fpdu(ulpdu: &[u8], crc: bool) -> Vec<u8> {
    let mut out = vec![0u8; mpa::fpdu_len(ulpdu.len())];
    let n = mpa::emit_fpdu(&[ulpdu], crc, None, &mut out).unwrap();
    out.truncate(n);
    out
}

/// A tagged ULPDU.
pub fn tagged(opcode: Opcode, stag: u32, to: u64, last: bool, payload: &[u8]) -> Vec<u8> {
    let h = DdpRepr {
        last,
        opcode,
        placement: Placement::Tagged { stag, to },
    };
    with_header(h, payload)
}

/// An untagged ULPDU.
pub fn untagged(
    opcode: Opcode,
    qn: u32,
    msn: u32,
    mo: u32,
    last: bool,
    rsvd_ulp: u32,
    body: &[u8],
) -> Vec<u8> {
    let h = DdpRepr {
        last,
        opcode,
        placement: Placement::Untagged {
            rsvd_ulp,
            qn,
            msn,
            mo,
        },
    };
    with_header(h, body)
}

/// A Terminate ULPDU carrying `body` (the control word and what follows it).
pub fn terminate(body: &[u8]) -> Vec<u8> {
    untagged(Opcode::Terminate, QN_TERMINATE, 1, 0, true, 0, body)
}

fn with_header(h: DdpRepr, body: &[u8]) -> Vec<u8> {
    let (b, n) = h.to_bytes();
    let mut v = b[..n].to_vec();
    v.extend_from_slice(body);
    v
}
