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

/// A connected pair: (active, passive), each on its own device.
pub fn pair_with(cfg: DeviceConfig, sq: usize, rq: usize) -> (End, End) {
    let mk = |cfg: DeviceConfig| {
        let dev = Device::open(cfg).unwrap();
        let pd = dev.alloc_pd();
        let cq = dev.create_cq(4096).unwrap();
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
    };
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
