//! The listener under connections that never finish their MPA Request: idle ones,
//! slowloris ones (an octet now and then), ones that are not MPA, floods beyond the
//! caps. A prompt client is served at once throughout, and every dropped connection
//! is counted for what it did.

use crate::peer::*;
use softrnic_rnic::*;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// An MPA Request with 500 octets of private data: 520 octets a slowloris can trickle.
fn long_request() -> Vec<u8> {
    let cfg = MpaConfig {
        private_data: vec![7; 500],
        ..MpaConfig::default()
    };
    softrnic_proto::cm::Initiator::new(cfg).unwrap().request()
}

/// A softrnic client connects to `addr`, Writes `pattern` into the buffer the server
/// advertises and then Sends, so the server knows the Write is in place.
///
/// Returns the client: the caller keeps it until the server has seen the Send. A
/// completion says the octets were handed to TCP, not that they arrived, and dropping a
/// connected QP is an abortive close (RST), which discards what TCP has not sent yet.
#[must_use = "dropping the client resets its connection"]
fn legit_client(addr: SocketAddr, pattern: &[u8]) -> Target {
    let c = Target::new(DeviceConfig::default());
    let conn = c.dev.connect(addr, &c.qp, b"legit").unwrap();
    let adv = conn.peer_private_data();
    let rkey = u32::from_be_bytes(adv[..4].try_into().unwrap());
    let raddr = u64::from_be_bytes(adv[4..12].try_into().unwrap());
    let src = c.pd.alloc_mr(pattern.len(), Access::empty()).unwrap();
    src.write(0, pattern).unwrap();
    let wrs = [
        SendWr {
            wr_id: 1,
            op: SendOp::Write {
                remote_addr: raddr,
                rkey,
            },
            sgl: [src.sge(0, pattern.len())].into(),
            signaled: true,
            fence: false,
        },
        SendWr {
            wr_id: 2,
            op: SendOp::Send {
                solicited: false,
                invalidate: None,
            },
            sgl: [src.sge(0, 4)].into(),
            signaled: true,
            fence: false,
        },
    ];
    c.qp.post_send_batch(wrs).unwrap();
    let wc = c.cq.wait_for(2, WAIT);
    assert_eq!(
        wc.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    c
}

/// The server side of [`legit_client`] on `t`'s QP: accepts the next request of `l`,
/// advertises a buffer, and checks that the client's Write placed `pattern` there.
fn serve_legit(t: &Target, l: &Listener, pattern: &[u8]) {
    let buf =
        t.pd.alloc_mr(pattern.len(), Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
    let note = t.pd.alloc_mr(4, Access::LOCAL_WRITE).unwrap();
    t.qp.post_recv(RecvWr {
        wr_id: 9,
        sgl: [note.sge(0, 4)].into(),
    })
    .unwrap();
    let req = l.accept().unwrap();
    assert_eq!(req.private_data(), b"legit");
    let mut adv = buf.rkey().to_be_bytes().to_vec();
    adv.extend(buf.addr().to_be_bytes());
    req.accept(&t.qp, &adv).unwrap();
    let wc = t.cq.wait_for(1, WAIT);
    assert_eq!((wc[0].wr_id, wc[0].status), (9, WcStatus::Success));
    assert!(
        buf.to_vec() == pattern,
        "the client's Write placed its octets"
    );
}

/// Waits (up to [`WAIT`]) until `l` has taken `n` connections off its socket.
fn wait_taken(l: &Listener, n: u64) {
    let deadline = std::time::Instant::now() + WAIT;
    while l.stats().connections < n {
        assert!(
            std::time::Instant::now() < deadline,
            "the listener took only {:?} connections",
            l.stats()
        );
        std::thread::yield_now();
    }
}

/// Waits until `stream`'s peer has reset or closed it; returns how it ended.
fn ended(stream: &mut TcpStream) -> ErrorKind {
    stream.set_read_timeout(Some(WAIT)).unwrap();
    let mut b = [0u8; 64];
    match stream.read(&mut b) {
        Ok(0) => ErrorKind::UnexpectedEof,
        Ok(n) => panic!("{n} octets from a listener that never answered"),
        Err(e) => e.kind(),
    }
}

/// While 100 idle connections and 100 slowloris connections (each trickling a long
/// MPA Request an octet at a time) are open, a legitimate client connects, writes and
/// verifies its data, and none of the 200 was dropped to make room for it.
#[test]
fn a_prompt_client_is_served_among_200_stalled_connections() {
    let cfg = DeviceConfig {
        // Long enough that no stalled connection times out during the test.
        mpa_request_timeout: Duration::from_secs(120),
        ..DeviceConfig::default()
    };
    let t = Target::new(cfg);
    let l = t.dev.listen("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let pattern = pattern(256 * 1024, 3);
    let stop = AtomicBool::new(false);
    let request = long_request();
    std::thread::scope(|s| {
        let server = s.spawn(|| serve_legit(&t, &l, &pattern));
        // In batches the listener has taken, so the kernel's backlog (128) never
        // overflows and the order of arrival is the order of connecting.
        let open = |n: u64, before: u64| -> Vec<TcpStream> {
            let mut v = Vec::new();
            for batch in 1..=n / 50 {
                v.extend((0..50).map(|_| TcpStream::connect(addr).unwrap()));
                wait_taken(&l, before + 50 * batch);
            }
            v
        };
        let idle = open(100, 0);
        let mut slow = open(100, 100);
        for c in &mut slow {
            c.set_nodelay(true).unwrap();
            c.write_all(&request[..1]).unwrap();
        }
        let trickle = s.spawn(|| {
            // The slowloris peers: one more octet each, round after round, until the
            // legitimate client is done (pacing, not synchronisation).
            let mut at = 1;
            while !stop.load(Ordering::Relaxed) && at < request.len() - 1 {
                for c in &mut slow {
                    c.write_all(&request[at..at + 1]).unwrap();
                }
                at += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            (slow, at)
        });
        let _client = legit_client(addr, &pattern);
        server.join().unwrap();
        stop.store(true, Ordering::Relaxed);
        let (slow, sent) = trickle.join().unwrap();
        assert!(sent < request.len() - 1, "no slowloris Request completed");
        let st = l.stats();
        assert_eq!(st.connections, 201, "{st:?}");
        assert_eq!(st.requests, 1, "{st:?}");
        assert_eq!(
            (
                st.in_progress,
                st.evicted,
                st.timed_out,
                st.refused,
                st.malformed
            ),
            (200, 0, 0, 0, 0),
            "the stalled connections are all still open: {st:?}"
        );
        drop((idle, slow));
    });
}

/// A connection must deliver its whole Request within `mpa_request_timeout`, however
/// it paces its octets: an idle one and a slowloris one are both reset, the slowloris
/// long before its Request could have been complete, while a prompt client is served.
#[test]
fn stalled_requests_are_dropped_at_the_deadline() {
    let cfg = DeviceConfig {
        mpa_request_timeout: Duration::from_millis(300),
        ..DeviceConfig::default()
    };
    let t = Target::new(cfg);
    let l = t.dev.listen("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let request = long_request();
    std::thread::scope(|s| {
        // accept() runs the exchanges; this one serves the legitimate client below.
        let server = s.spawn(|| serve_legit(&t, &l, b"after the stalled ones"));
        let mut idle = TcpStream::connect(addr).unwrap();
        let mut slow = TcpStream::connect(addr).unwrap();
        slow.set_nodelay(true).unwrap();
        // One octet every 10 ms: each read comes well within any per-read timeout.
        let mut sent = 0;
        while sent < request.len() {
            if slow.write_all(&request[sent..sent + 1]).is_err() {
                break;
            }
            sent += 1;
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(sent < request.len(), "the slowloris was never cut off");
        drop(slow);
        assert_eq!(ended(&mut idle), ErrorKind::ConnectionReset);
        let _client = legit_client(addr, b"after the stalled ones");
        server.join().unwrap();
    });
    let st = l.stats();
    assert_eq!(
        (st.connections, st.requests, st.timed_out, st.in_progress),
        (3, 1, 2, 0),
        "{st:?}"
    );
}

/// A full listener drops its oldest exchange for a new connection, so a flood of
/// stalled connections cannot keep a prompt client out; and a device at its
/// device-wide cap refuses a listener that has nothing of its own to give up.
#[test]
fn caps_evict_the_oldest_and_refuse_beyond_the_device_limit() {
    let cfg = DeviceConfig {
        max_listener_exchanges: 4,
        max_mpa_exchanges: 6,
        mpa_request_timeout: Duration::from_secs(120),
        ..DeviceConfig::default()
    };
    let t = Target::new(cfg);
    let l = t.dev.listen("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::scope(|s| {
        let server = s.spawn(|| serve_legit(&t, &l, b"evicting"));
        let mut stalled: Vec<TcpStream> =
            (0..4).map(|_| TcpStream::connect(addr).unwrap()).collect();
        // Each stalled connection has sent something, so it is not merely queued.
        for c in &mut stalled {
            c.write_all(b"MPA ID Req").unwrap();
        }
        let _client = legit_client(addr, b"evicting");
        server.join().unwrap();
        // The oldest stalled connection made room for the client.
        assert_eq!(ended(&mut stalled[0]), ErrorKind::ConnectionReset);
    });
    let st = l.stats();
    assert_eq!(
        (st.connections, st.requests, st.evicted, st.in_progress),
        (5, 1, 1, 3),
        "{st:?}"
    );
    // The device counts the 3 still in progress: a second listener may run 3 more;
    // the 4th finds the device full and nothing of its own to evict.
    let l2 = t.dev.listen("127.0.0.1:0").unwrap();
    let addr2 = l2.local_addr().unwrap();
    let mut more: Vec<TcpStream> = (0..4).map(|_| TcpStream::connect(addr2).unwrap()).collect();
    for c in &mut more {
        c.write_all(b"MPA").unwrap();
    }
    // A zero timeout: take what waits on the socket, start its exchanges, return.
    assert!(l2.accept_timeout(Duration::ZERO).unwrap().is_none());
    let st2 = l2.stats();
    assert_eq!(
        (st2.connections, st2.in_progress, st2.refused, st2.evicted),
        (4, 3, 0, 1),
        "{st2:?}"
    );
    // The device is full (3 + 3), and a third listener has nothing to give up.
    let l3 = t.dev.listen("127.0.0.1:0").unwrap();
    let mut refused = TcpStream::connect(l3.local_addr().unwrap()).unwrap();
    assert!(l3.accept_timeout(Duration::ZERO).unwrap().is_none());
    assert_eq!(ended(&mut refused), ErrorKind::ConnectionReset);
    let st3 = l3.stats();
    assert_eq!((st3.connections, st3.refused, st3.in_progress), (1, 1, 0));
    // A connect from a device that has no exchange left fails at once.
    let full = Target::new(DeviceConfig {
        max_mpa_exchanges: 0,
        ..DeviceConfig::default()
    });
    let e = full.dev.connect(addr, &full.qp, b"").unwrap_err();
    assert!(matches!(e, Error::Limit(_)), "{e:?}");
    assert_eq!(e.fault(), Fault::Resources);
}

/// A connection that does not speak MPA never reaches `accept`: it is dropped, and the
/// next good Request is returned.
#[test]
fn what_is_not_mpa_is_dropped_not_returned() {
    let t = Target::new(DeviceConfig::default());
    let l = t.dev.listen("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::scope(|s| {
        let server = s.spawn(|| serve_legit(&t, &l, b"after the junk"));
        let mut http = TcpStream::connect(addr).unwrap();
        http.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!(ended(&mut http), ErrorKind::ConnectionReset);
        // A frame that announces more private data than MPA allows.
        let mut big = long_request();
        big[18..20].copy_from_slice(&600u16.to_be_bytes());
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(&big[..20]).unwrap();
        assert_eq!(ended(&mut c), ErrorKind::ConnectionReset);
        // A peer that closes half-way.
        let mut half = TcpStream::connect(addr).unwrap();
        half.write_all(&long_request()[..30]).unwrap();
        half.shutdown(std::net::Shutdown::Write).unwrap();
        let _ = ended(&mut half);
        let _client = legit_client(addr, b"after the junk");
        server.join().unwrap();
    });
    let st = l.stats();
    assert_eq!(
        (st.connections, st.requests, st.malformed, st.closed),
        (4, 1, 2, 1),
        "{st:?}"
    );
}

/// The initiator's deadline covers the whole exchange too: a responder that sends its
/// Reply an octet every 20 ms (each read quick, the Reply never whole in time) makes
/// connect fail with Timeout.
#[test]
fn a_slow_reply_times_out_the_whole_connect() {
    let c = Target::new(DeviceConfig {
        connect_timeout: Duration::from_millis(300),
        ..DeviceConfig::default()
    });
    let raw = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = raw.local_addr().unwrap();
    std::thread::scope(|s| {
        let responder = s.spawn(|| {
            let (mut conn, _) = raw.accept().unwrap();
            let mut req = [0u8; 24];
            conn.read_exact(&mut req).unwrap();
            let reply = softrnic_proto::cm::Responder::new()
                .accept(
                    &softrnic_proto::cm::ConnectRequest {
                        revision: 2,
                        crc: false,
                        markers: false,
                        rfc6581: Some(softrnic_wire::Rfc6581::default()),
                        private_data: vec![],
                    },
                    &MpaConfig {
                        private_data: vec![1; 400],
                        ..MpaConfig::default()
                    },
                )
                .unwrap()
                .0;
            let mut sent = 0;
            for b in &reply {
                if conn.write_all(&[*b]).is_err() {
                    break;
                }
                sent += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            sent
        });
        let e = c.dev.connect(addr, &c.qp, b"").unwrap_err();
        assert!(matches!(e, Error::Timeout), "{e:?}");
        drop(c);
        let sent = responder.join().unwrap();
        assert!(sent < 424, "the Reply was cut off ({sent} octets sent)");
    });
}

/// Deterministic test data.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
