//! The user listener's cost per wake: with many silent clients in the middle of their
//! exchange, a real client still connects and its Send arrives intact, and the
//! listener reads only the exchange that had news, not every one in progress.

use super::super::stack::UserStack;
use crate::*;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

const A: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const SILENT: u64 = 200;
const WAIT: Duration = Duration::from_secs(60);

fn device(net: &SimNet, addr: Ipv4Addr) -> Device {
    Device::open(DeviceConfig {
        user_tcp: Some(UserTcp::sim(net, addr)),
        // No exchange may time out while the test runs, however slow the machine.
        mpa_request_timeout: Duration::from_secs(3600),
        ..DeviceConfig::default()
    })
    .unwrap()
}

#[test]
fn a_wake_reads_the_exchange_with_news_not_every_silent_one() {
    let net = SimNet::new(SimImpairments::default());
    let server = device(&net, B);
    let listener = server.listen((B, 0)).unwrap();
    let std::net::SocketAddr::V4(addr) = listener.local_addr().unwrap() else {
        panic!("not IPv4");
    };
    // Silent clients: connections of a bare stack of our own that never send a byte.
    let silent = UserStack::start(
        &UserTcp::sim(&net, Ipv4Addr::new(10, 0, 0, 3)),
        Duration::from_secs(3600),
        99,
    )
    .unwrap();
    let mut streams = Vec::new();
    for _ in 0..SILENT {
        let deadline = Instant::now() + WAIT;
        streams.push(silent.stack.connect(addr, deadline).unwrap());
        // Takes what is established off the stack's accept queue (never a Request).
        assert!(listener.accept_timeout(Duration::ZERO).unwrap().is_none());
    }
    let until = Instant::now() + WAIT;
    while listener.stats().in_progress < SILENT {
        assert!(Instant::now() < until, "{:?}", listener.stats());
        assert!(
            listener
                .accept_timeout(Duration::from_millis(10))
                .unwrap()
                .is_none()
        );
    }
    let before = listener.stats();

    // A real client, on a device of its own.
    let client = device(&net, A);
    let (pa, pb) = (client.alloc_pd(), server.alloc_pd());
    let (ca, cb) = (client.create_cq(16).unwrap(), server.create_cq(16).unwrap());
    let qa = client
        .create_qp(&pa, QpInit::with_cqs(&ca, &ca, 4, 4))
        .unwrap();
    let qb = server
        .create_qp(&pb, QpInit::with_cqs(&cb, &cb, 4, 4))
        .unwrap();
    std::thread::scope(|s| {
        let h = s.spawn(|| client.connect(SocketAddrV4::new(B, addr.port()), &qa, b"real"));
        let req = listener.accept().unwrap();
        assert_eq!(req.private_data(), b"real");
        assert_eq!(req.peer_addr().ip(), A);
        req.accept(&qb, b"").unwrap();
        h.join().unwrap().unwrap();
    });
    let data: Vec<u8> = (0..4000u32).map(|i| (i * 7 + 3) as u8).collect();
    let src = pa.alloc_mr(data.len(), Access::empty()).unwrap();
    src.write(0, &data).unwrap();
    let dst = pb.alloc_mr(data.len(), Access::LOCAL_WRITE).unwrap();
    qb.post_recv(RecvWr::new(1, dst.sge(0, data.len())))
        .unwrap();
    qa.post_send(SendWr::send(2, src.sge(0, data.len())))
        .unwrap();
    let s = ca.wait_for(1, WAIT);
    assert_eq!(
        s.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        [(2, WcStatus::Success)]
    );
    let r = cb.wait_for(1, WAIT);
    assert_eq!(
        r.iter()
            .map(|c| (c.wr_id, c.status, c.byte_len))
            .collect::<Vec<_>>(),
        [(1, WcStatus::Success, data.len() as u32)]
    );
    assert!(dst.to_vec() == data, "the Send's octets");

    let after = listener.stats();
    assert_eq!(after.in_progress, SILENT, "{after:?}");
    assert_eq!(after.requests, before.requests + 1, "{after:?}");
    assert_eq!(
        after.timed_out + after.evicted + after.refused,
        0,
        "{after:?}"
    );
    // The real exchange is read when taken and once per segment of its Request (one
    // or two); a scan of every exchange on each wake would read 200 per wake.
    let examined = after.examined - before.examined;
    assert!((1..=3).contains(&examined), "{examined} reads: {after:?}");
    drop(streams);
}
