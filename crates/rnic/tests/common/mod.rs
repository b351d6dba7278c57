//! Shared set-up for the loopback tests: two devices (or one) and connected QP pairs.
#![allow(dead_code)]

use softrnic_rnic::*;
use std::time::Duration;

pub const T: Duration = Duration::from_secs(20);

pub struct End {
    pub dev: Device,
    pub pd: Pd,
    pub cq: Cq,
    pub qp: Qp,
}

/// A device with one unconnected QP whose send and receive queues share a CQ.
pub fn end_on(cfg: DeviceConfig, cq_depth: usize, sq: usize, rq: usize) -> End {
    let dev = Device::open(cfg).unwrap();
    let pd = dev.alloc_pd();
    let cq = dev.create_cq(cq_depth).unwrap();
    let qp = dev
        .create_qp(
            &pd,
            QpInit {
                send_cq: &cq,
                recv_cq: &cq,
                sq_depth: sq,
                rq_depth: rq,
            },
        )
        .unwrap();
    End { dev, pd, cq, qp }
}

/// A hand-driven MPA initiator on a plain TCP stream, connected to `e`'s QP: the MPA
/// exchange done with `softrnic_proto`'s initiator, then the stream is the caller's, to
/// write raw FPDUs (or broken ones) into.
pub fn raw_initiator(e: &End) -> std::net::TcpStream {
    use softrnic_proto::cm::{Initiator, InitiatorProgress};
    use std::io::{Read, Write};
    let listener = e.dev.listen("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::scope(|s| {
        let h = s.spawn(|| listener.accept().unwrap().accept(&e.qp, b"").unwrap());
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(T)).unwrap();
        let mut init = Initiator::new(MpaConfig::default()).unwrap();
        c.write_all(&init.request()).unwrap();
        let mut got = Vec::new();
        loop {
            let mut buf = [0u8; 1024];
            let n = c.read(&mut buf).unwrap();
            assert!(n > 0, "the responder closed during MPA setup");
            got.extend_from_slice(&buf[..n]);
            match init.handle_input(&got).unwrap() {
                InitiatorProgress::NeedMore => continue,
                InitiatorProgress::Established { consumed, .. } => {
                    assert_eq!(consumed, got.len(), "no FPDU before our first");
                    break;
                }
                p => panic!("{p:?}"),
            }
        }
        h.join().unwrap();
        c
    })
}

/// A connected pair: (active, passive), each on its own device.
pub fn pair_with(cfg: DeviceConfig, sq: usize, rq: usize) -> (End, End) {
    let mk = |cfg: DeviceConfig| end_on(cfg, 4096, sq, rq);
    let a = mk(cfg.clone());
    let b = mk(cfg);
    let listener = b.dev.listen("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::scope(|s| {
        let h = s.spawn(|| {
            let req = listener.accept().unwrap();
            req.accept(&b.qp, b"passive").unwrap();
        });
        let c = a.dev.connect(addr, &a.qp, b"active").unwrap();
        assert_eq!(c.peer_private_data(), b"passive");
        h.join().unwrap();
    });
    (a, b)
}

pub fn pair() -> (End, End) {
    pair_with(DeviceConfig::default(), 256, 256)
}

/// Deterministic test data.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
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

pub fn one(cq: &Cq) -> Completion {
    let v = cq.wait_for(1, T);
    assert_eq!(v.len(), 1, "no completion within {T:?}");
    v[0]
}

pub fn send(wr_id: u64, sgl: Vec<Sge>) -> SendWr {
    SendWr {
        wr_id,
        op: SendOp::Send {
            solicited: false,
            invalidate: None,
        },
        sgl,
        signaled: true,
        fence: false,
    }
}

pub mod srq;
