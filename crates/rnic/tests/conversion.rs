//! Converting an existing TCP connection into RDMA mode after the application has used
//! it for its own octets: the conversion works whichever side did the TCP connect, RDMA
//! traffic then runs with data verified, and octets the passive side never read before
//! converting come back to it whole in `Error::StreamNotMpa`, nothing lost or mixed.

mod common;

use common::*;
use softrnic_proto::cm::Initiator;
use softrnic_rnic::*;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};

/// A connected pair of plain TCP streams: (connecting side, accepting side).
fn stream_pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (s, _) = l.accept().unwrap();
    (c, s)
}

fn mpa_config(private_data: &[u8]) -> MpaConfig {
    MpaConfig {
        private_data: private_data.to_vec(),
        ..MpaConfig::default()
    }
}

fn read_n(s: &mut TcpStream, n: usize) -> Vec<u8> {
    s.set_read_timeout(Some(WAIT)).unwrap();
    let mut v = vec![0u8; n];
    s.read_exact(&mut v).unwrap();
    v
}

fn convert_after_application_bytes(tcp_connector_is_active: bool) {
    let (mut c, mut s) = stream_pair();
    // The application's own protocol, both ways, each side reading all of it.
    c.write_all(b"hello").unwrap();
    assert_eq!(read_n(&mut s, 5), b"hello");
    s.write_all(b"world").unwrap();
    assert_eq!(read_n(&mut c, 5), b"world");

    let (active_stream, passive_stream) = if tcp_connector_is_active {
        (c, s)
    } else {
        (s, c)
    };
    let ends = end().cq(256).queues(32, 32);
    let (a, b) = (ends.build(), ends.build());
    std::thread::scope(|sc| {
        let h = sc.spawn(|| {
            let req = b.dev.convert_passive(passive_stream).unwrap();
            assert_eq!(req.private_data(), b"from active");
            let conn = req.accept(&b.qp, b"from passive").unwrap();
            assert_eq!(conn.peer_private_data(), b"from active");
        });
        let conn = a
            .dev
            .convert_active(active_stream, &a.qp, mpa_config(b"from active"))
            .unwrap();
        assert_eq!(conn.peer_private_data(), b"from passive");
        h.join().unwrap();
    });
    assert_eq!(a.qp.state(), QpState::Rts);
    assert_eq!(b.qp.state(), QpState::Rts);

    // A Send each way and an RDMA Write, data verified.
    let data = pattern(10_000, 5);
    let back = pattern(3_000, 6);
    let asrc = a.pd.alloc_mr(20_000, Access::LOCAL_WRITE).unwrap();
    asrc.write(0, &data).unwrap();
    let bbuf =
        b.pd.alloc_mr(20_000, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
    bbuf.fill(0, 20_000, 0xee).unwrap();
    b.qp.post_recv(RecvWr::new(100, bbuf.sge(0, 10_000)))
        .unwrap();
    a.qp.post_recv(RecvWr::new(200, asrc.sge(10_000, 10_000)))
        .unwrap();
    a.qp.post_send_batch([
        SendWr::send(1, asrc.sge(0, 10_000)),
        SendWr::write(2, asrc.sge(0, 10_000), bbuf.addr() + 10_000, bbuf.rkey()),
    ])
    .unwrap();
    let r = one(&b.cq);
    assert_eq!(
        (r.wr_id, r.status, r.byte_len),
        (100, WcStatus::Success, 10_000)
    );
    let bsrc = b.pd.alloc_mr(3_000, Access::empty()).unwrap();
    bsrc.write(0, &back).unwrap();
    // The Write preceded this Send on the wire: once its answer arrives, both the Send
    // and the Write are in place.
    b.qp.post_send(SendWr::send(3, bsrc.sge(0, 3_000))).unwrap();
    let got = take(&a.cq, 3);
    assert_eq!(
        got.iter()
            .map(|c| (c.wr_id, c.status, c.byte_len))
            .collect::<Vec<_>>(),
        vec![
            (1, WcStatus::Success, 10_000),
            (2, WcStatus::Success, 10_000),
            (200, WcStatus::Success, 3_000)
        ]
    );
    assert_eq!(one(&b.cq).status, WcStatus::Success);
    let t = bbuf.to_vec();
    assert!(t[..10_000] == data[..], "Send data");
    assert!(t[10_000..] == data[..], "Write data");
    let mut v = vec![0u8; 3_000];
    asrc.read(10_000, &mut v).unwrap();
    assert_eq!(v, back);
    // No application octet leaked into the RDMA stream: every payload octet placed is
    // RDMA payload (3000 octets to a, 10000 + 10000 to b).
    assert_eq!(a.qp.fatal_cause(), None);
    assert_eq!(b.qp.fatal_cause(), None);
    let placed = |q: &Qp| q.stats().rx_copied_bytes + q.stats().rx_direct_bytes;
    assert_eq!(placed(&a.qp), 3_000);
    assert_eq!(placed(&b.qp), 20_000);
}

#[test]
fn convert_after_application_bytes_tcp_connector_active() {
    convert_after_application_bytes(true);
}

#[test]
fn convert_after_application_bytes_tcp_acceptor_active() {
    convert_after_application_bytes(false);
}

/// The active side wrote 5 application octets the passive side never read, then
/// converted: the passive side gets every octet it read back, starting with exactly
/// those 5, followed by the start of the MPA Request (nothing lost, nothing mixed), and
/// the active side's conversion fails with its QP still Idle.
#[test]
fn unread_application_bytes_come_back_in_stream_not_mpa() {
    let (mut c, s) = stream_pair();
    c.write_all(b"extra").unwrap();
    let ends = end().cq(256).queues(32, 32);
    let (a, b) = (ends.build(), ends.build());
    let cfg = mpa_config(b"from active");
    let request = Initiator::new(cfg.clone()).unwrap().request();
    std::thread::scope(|sc| {
        let h = sc.spawn(|| a.dev.convert_active(c, &a.qp, cfg.clone()));
        match b.dev.convert_passive(s) {
            Err(Error::StreamNotMpa { octets }) => {
                assert!(octets.len() >= 5, "{octets:?}");
                assert_eq!(&octets[..5], b"extra");
                assert_eq!(
                    &octets[5..],
                    &request[..octets.len() - 5],
                    "after the application octets, only the MPA Request's"
                );
            }
            Err(e) => panic!("expected StreamNotMpa, got {e:?}"),
            Ok(r) => panic!("expected StreamNotMpa, got a request {:?}", r.request()),
        }
        // The passive side dropped the stream: the active side fails at once.
        let r = h.join().unwrap();
        assert!(r.is_err(), "active conversion must fail: {r:?}");
    });
    assert_eq!(a.qp.state(), QpState::Idle);
    assert_eq!(b.qp.state(), QpState::Idle);
}
