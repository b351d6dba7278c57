//! Errors say who is at fault: each case here provokes one for real (a reject, a
//! refusal, a stream that is not MPA, a silent peer, a closed port, bad calls, limits)
//! and checks both the variant and its [`Fault`].

use softrnic_rnic::*;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

struct Side {
    dev: Device,
    pd: Pd,
    cq: Cq,
    qp: Qp,
}

fn side(cfg: DeviceConfig) -> Side {
    let dev = Device::open(cfg).unwrap();
    let pd = dev.alloc_pd();
    let cq = dev.create_cq(16).unwrap();
    let qp = dev.create_qp(&pd, init(&cq, 2)).unwrap();
    Side { dev, pd, cq, qp }
}

fn init(cq: &Cq, depth: usize) -> QpInit<'_> {
    QpInit {
        send_cq: cq,
        recv_cq: cq,
        sq_depth: depth,
        rq_depth: depth,
    }
}

/// Connects `a` to `b`, where `b` answers the request with `answer`; returns what each
/// side got.
fn handshake<T: Send>(
    a: &Side,
    b: &Side,
    answer: impl FnOnce(ConnRequest) -> Result<T> + Send,
) -> (Result<Connection>, Result<T>) {
    let l = b.dev.listen("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::scope(|s| {
        let h = s.spawn(|| answer(l.accept().unwrap()));
        let got = a.dev.connect(addr, &a.qp, b"");
        (got, h.join().unwrap())
    })
}

#[test]
fn the_peer_is_at_fault() {
    // A reject.
    let (a, b) = (side(DeviceConfig::default()), side(DeviceConfig::default()));
    let (got, _) = handshake(&a, &b, |r| r.reject(b"no"));
    let e = got.unwrap_err();
    assert!(
        matches!(&e, Error::Rejected { private_data } if private_data == b"no"),
        "{e:?}"
    );
    assert_eq!(e.fault(), Fault::Peer);

    // Our policy refuses the peer's request: an MPA refusal with its reason.
    let mut strict = DeviceConfig::default();
    strict.mpa.crc = CrcPolicy::Strict;
    let (a, b) = (side(DeviceConfig::default()), side(strict));
    let (got, refused) = handshake(&a, &b, |r| r.accept(&b.qp, b""));
    let e = refused.unwrap_err();
    assert!(
        matches!(
            &e,
            Error::Mpa(CmError::Refused {
                reason: RefusalReason::CrcPolicy,
                ..
            })
        ),
        "{e:?}"
    );
    assert_eq!(e.fault(), Fault::Peer);
    // The initiator got the reject reply.
    let e = got.unwrap_err();
    assert!(matches!(e, Error::Rejected { .. }), "{e:?}");
    assert_eq!(e.fault(), Fault::Peer);

    // A stream that goes on with something else than MPA.
    let b = side(DeviceConfig::default());
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    c.write_all(b"GET / HTTP/1.0\r\n").unwrap();
    let e = b.dev.convert_passive(l.accept().unwrap().0).unwrap_err();
    assert!(
        matches!(&e, Error::StreamNotMpa { octets } if b"GET / HTTP/1.0\r\n".starts_with(octets)),
        "{e:?}"
    );
    assert_eq!(e.fault(), Fault::Peer);

    // A peer that accepts the TCP connection and never answers the MPA Request.
    let a = side(DeviceConfig {
        connect_timeout: Duration::from_millis(100),
        ..DeviceConfig::default()
    });
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let e = std::thread::scope(|s| {
        let h = s.spawn(|| {
            let (mut silent, _) = l.accept().unwrap();
            let mut sink = Vec::new();
            // Reads the request and waits for the initiator to give up and close.
            let _ = silent.read_to_end(&mut sink);
        });
        let e = a
            .dev
            .connect(l.local_addr().unwrap(), &a.qp, b"")
            .unwrap_err();
        drop(a);
        h.join().unwrap();
        e
    });
    assert!(matches!(e, Error::Timeout), "{e:?}");
    assert_eq!(e.fault(), Fault::Peer);
}

/// The error of `r`, which must be the caller's fault.
fn caller<T: std::fmt::Debug>(r: Result<T>) -> Error {
    let e = r.unwrap_err();
    assert_eq!(e.fault(), Fault::Caller, "{e:?}");
    e
}

#[test]
fn the_caller_is_at_fault() {
    let a = side(DeviceConfig::default());
    let other = side(DeviceConfig::default());
    let e = caller(a.dev.create_cq(0).map(|_| ()));
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    let vectors = a.dev.query().num_comp_vectors;
    let e = caller(a.dev.create_cq_on(4, vectors).map(|_| ()));
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    let e = caller(a.dev.create_qp(&a.pd, init(&other.cq, 2)).map(|_| ()));
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    // A post on a QP that is not connected.
    let mr = a.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let e = caller(a.qp.post_send(SendWr::send(1, mr.sge(0, 8))));
    assert!(matches!(e, Error::Post(_)), "{e:?}");
    // A bad MPA configuration of our own.
    let bad = MpaConfig {
        private_data: vec![0; 70000],
        ..MpaConfig::default()
    };
    let e = caller(a.dev.connect_with("127.0.0.1:9", &a.qp, bad));
    assert!(matches!(e, Error::Mpa(CmError::BadConfig(_))), "{e:?}");
    // Connected: too many SGEs, and a second connect.
    let b = side(DeviceConfig::default());
    let (got, acc) = handshake(&a, &b, |r| r.accept(&b.qp, b""));
    got.unwrap();
    acc.unwrap();
    // Too many SGEs: the scatter/gather list cannot even be built.
    let seven = [mr.sge(0, 8); 7];
    assert_eq!(Sgl::try_from(&seven[..]), Err(TooManySge(7)));
    let e = caller(a.dev.connect("127.0.0.1:9", &a.qp, b""));
    assert!(matches!(e, Error::BadState(_)), "{e:?}");
    let e = caller(mr.write(60, &[0; 8]));
    assert!(matches!(e, Error::Region(_)), "{e:?}");
    assert_eq!(b.cq.poll_one(), None);
}

#[test]
fn resources_or_the_os_are_at_fault() {
    let a = side(DeviceConfig {
        max_qp: 1,
        ..DeviceConfig::default()
    });
    let e = a.dev.create_qp(&a.pd, init(&a.cq, 2)).unwrap_err();
    assert!(matches!(e, Error::Limit(_)), "{e:?}");
    assert_eq!(e.fault(), Fault::Resources);
    // Beyond max_mr_size: refused before any allocation is tried.
    let e = a.pd.alloc_mr(usize::MAX, Access::LOCAL_WRITE).unwrap_err();
    assert!(matches!(e, Error::Limit("max_mr_size")), "{e:?}");
    assert_eq!(e.fault(), Fault::Resources);

    // Nobody listens on a port that was just closed.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let e = a.dev.connect(port, &a.qp, b"").unwrap_err();
    assert!(
        matches!(&e, Error::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused),
        "{e:?}"
    );
    assert_eq!(e.fault(), Fault::Os);
}
