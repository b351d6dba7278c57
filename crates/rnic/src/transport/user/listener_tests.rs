//! The user listener's cost per wake: with many silent clients in the middle of their
//! exchange, a real client still connects and its Send arrives intact, and the
//! listener reads only the exchange that had news, not every one in progress; the
//! oldest exchange gives way to a new one, one that is closed, or not MPA, ends at its
//! news, and silent ones time out.

use super::super::stack::{UserStack, UserStackHandle};
use super::super::stream::UserStream;
use crate::transport::stream::ConnStream;
use crate::*;
use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

const A: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const SILENT: u64 = 200;
const WAIT: Duration = Duration::from_secs(60);

fn device(net: &SimNet, addr: Ipv4Addr) -> Device {
    device_with(net, addr, DeviceConfig::default().max_listener_exchanges)
}

/// A device whose listeners read at most `max` Requests at once, none timing out
/// while the test runs, however slow the machine.
fn device_with(net: &SimNet, addr: Ipv4Addr, max: usize) -> Device {
    Device::open(DeviceConfig {
        user_tcp: Some(UserTcp::sim(net, addr)),
        mpa_request_timeout: Duration::from_secs(3600),
        max_listener_exchanges: max,
        ..DeviceConfig::default()
    })
    .unwrap()
}

/// A bare stack of our own on `net`, for clients that never speak MPA on their own.
fn bare_stack(net: &SimNet) -> UserStackHandle {
    UserStack::start(
        &UserTcp::sim(net, Ipv4Addr::new(10, 0, 0, 3)),
        Duration::from_secs(3600),
        99,
    )
    .unwrap()
}

fn port_of(listener: &Listener) -> SocketAddrV4 {
    match listener.local_addr().unwrap() {
        std::net::SocketAddr::V4(a) => a,
        a => panic!("{a} is not IPv4"),
    }
}

/// Lets `listener` work (no Request is expected) until its counters say `done`.
fn until(listener: &Listener, done: impl Fn(&ListenerStats) -> bool) -> ListenerStats {
    let give_up = Instant::now() + WAIT;
    loop {
        let st = listener.stats();
        if done(&st) {
            return st;
        }
        assert!(Instant::now() < give_up, "{st:?}");
        let got = listener.accept_timeout(Duration::from_millis(10)).unwrap();
        assert!(got.is_none(), "a Request from a silent client");
    }
}

/// What the client end of an exchange sees now: octets, nothing yet, or its end.
fn peek(s: &mut UserStream) -> std::io::Result<usize> {
    s.read_by(&mut [0; 16], Instant::now())
}

#[test]
fn a_wake_reads_the_exchange_with_news_not_every_silent_one() {
    let net = SimNet::new(SimImpairments::default());
    let server = device(&net, B);
    let listener = server.listen((B, 0)).unwrap();
    let addr = port_of(&listener);
    // Silent clients: connections of a bare stack of our own that never send a byte.
    let silent = bare_stack(&net);
    let mut streams = Vec::new();
    for _ in 0..SILENT {
        let deadline = Instant::now() + WAIT;
        streams.push(silent.stack.connect(addr, deadline).unwrap());
        // Takes what is established off the stack's accept queue (never a Request).
        assert!(listener.accept_timeout(Duration::ZERO).unwrap().is_none());
    }
    let before = until(&listener, |st| st.in_progress == SILENT);

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

#[test]
fn the_oldest_gives_way_and_a_closed_or_foreign_exchange_ends_at_its_news() {
    let net = SimNet::new(SimImpairments::default());
    let server = device_with(&net, B, 3);
    let listener = server.listen((B, 0)).unwrap();
    let addr = port_of(&listener);
    let bare = bare_stack(&net);
    let connect = || bare.stack.connect(addr, Instant::now() + WAIT).unwrap();
    let mut s: Vec<UserStream> = Vec::new();
    for n in 1..=3 {
        s.push(connect());
        until(&listener, |st| st.in_progress == n);
    }
    // A fourth: the first, the oldest, is reset to make room.
    s.push(connect());
    let st = until(&listener, |st| st.evicted == 1 && st.connections == 4);
    assert_eq!(st.in_progress, 3, "{st:?}");
    let reset = s[0].read_by(&mut [0; 16], Instant::now() + WAIT);
    assert_eq!(reset.unwrap_err().kind(), ErrorKind::ConnectionReset);
    for c in &mut s[1..] {
        assert_eq!(peek(c).unwrap_err().kind(), ErrorKind::WouldBlock);
    }
    // The second closes: its exchange, and only it, is read, and ends.
    let before = listener.stats();
    drop(s.remove(1));
    let st = until(&listener, |st| st.closed == 1);
    assert_eq!((st.in_progress, st.examined), (2, before.examined + 1));
    // The third speaks HTTP: it is reset at its first octets.
    s[1].write_all_by(b"GET / HTTP/1.1\r\n\r\n", Instant::now() + WAIT)
        .unwrap();
    let st = until(&listener, |st| st.malformed == 1);
    assert_eq!((st.in_progress, st.examined), (1, before.examined + 2));
    let reset = s[1].read_by(&mut [0; 16], Instant::now() + WAIT);
    assert_eq!(reset.unwrap_err().kind(), ErrorKind::ConnectionReset);
    assert_eq!(peek(&mut s[2]).unwrap_err().kind(), ErrorKind::WouldBlock);
    assert_eq!((st.timed_out, st.requests), (0, 0));
}

#[test]
fn silent_exchanges_time_out_and_are_reset() {
    let net = SimNet::new(SimImpairments::default());
    let server = Device::open(DeviceConfig {
        user_tcp: Some(UserTcp::sim(&net, B)),
        mpa_request_timeout: Duration::from_millis(100),
        ..DeviceConfig::default()
    })
    .unwrap();
    let listener = server.listen((B, 0)).unwrap();
    let addr = port_of(&listener);
    let bare = bare_stack(&net);
    let mut s: Vec<UserStream> = (0..3)
        .map(|_| bare.stack.connect(addr, Instant::now() + WAIT).unwrap())
        .collect();
    let st = until(&listener, |st| st.timed_out == 3);
    assert_eq!((st.in_progress, st.connections), (0, 3), "{st:?}");
    for c in &mut s {
        let reset = c.read_by(&mut [0; 16], Instant::now() + WAIT);
        assert_eq!(reset.unwrap_err().kind(), ErrorKind::ConnectionReset);
    }
}
