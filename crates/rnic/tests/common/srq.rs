//! Set-up for the SRQ tests: a server device whose QPs all take their receive buffers
//! from one SRQ and complete into one shared CQ, and a client device with one QP per
//! server QP, connected over loopback.

use super::{WAIT as T, pattern};
use softrnic_rnic::*;

/// Octets per receive buffer slot.
pub const SLOT: usize = 4096;

pub struct SrqServer {
    pub dev: Device,
    pub pd: Pd,
    pub cq: Cq,
    pub srq: Srq,
    pub qps: Vec<Qp>,
    /// Receive buffers: slot `i` is octets `[i * SLOT, (i + 1) * SLOT)`.
    pub bufs: Mr,
}

pub struct Clients {
    pub dev: Device,
    pub pd: Pd,
    pub cq: Cq,
    pub qps: Vec<Qp>,
    /// Send source: a message is written here before it is sent (4 slots per QP).
    pub src: Mr,
}

impl SrqServer {
    /// Posts slot `i` (wr_id `i`).
    pub fn post_slot(&self, i: u64) {
        self.srq
            .post_recv(RecvWr::new(i, self.bufs.sge(i as usize * SLOT, SLOT)))
            .unwrap();
    }

    /// Which server QP (index) a completion belongs to.
    pub fn index_of(&self, qp: QpId) -> usize {
        self.qps
            .iter()
            .position(|q| q.id() == qp)
            .expect("one of ours")
    }

    /// The octets a receive completion's slot holds.
    pub fn received(&self, c: &Completion) -> Vec<u8> {
        let mut v = vec![0u8; c.byte_len as usize];
        self.bufs.read(c.wr_id as usize * SLOT, &mut v).unwrap();
        v
    }
}

/// The contents of message `n` of connection `i`.
pub fn message(i: usize, n: usize, len: usize) -> Vec<u8> {
    pattern(len, (i as u64) << 32 | n as u64 | 1 << 63)
}

impl Clients {
    /// Sends message `n` of connection `i`, `len` octets, from source slot
    /// `4 i + n mod 4` (so up to 4 messages per connection may be in flight before
    /// [`Clients::sent`] is waited for).
    pub fn send(&self, i: usize, n: usize, len: usize) {
        let off = (4 * i + n % 4) * SLOT;
        self.src.write(off, &message(i, n, len)).unwrap();
        self.qps[i]
            .post_send(SendWr::send(
                (i as u64) << 32 | n as u64,
                self.src.sge(off, len),
            ))
            .unwrap();
    }

    /// Waits for `n` send completions, all successful.
    pub fn sent(&self, n: usize) {
        let v = self.cq.wait_for(n, T);
        assert_eq!(v.len(), n, "send completions");
        for c in v {
            assert_eq!(c.status, WcStatus::Success, "{c:?}");
        }
    }
}

/// `n` connections: server QPs on an SRQ made from `init` (no receive posted yet),
/// client QPs each with its own send queue on one CQ. `slots` receive slots of
/// [`SLOT`] octets are registered on the server.
pub fn srq_pairs(cfg: DeviceConfig, n: usize, init: SrqInit, slots: usize) -> (SrqServer, Clients) {
    let sdev = Device::open(cfg.clone()).unwrap();
    let spd = sdev.alloc_pd();
    let scq = sdev.create_cq(4 * slots.max(n)).unwrap();
    let srq = sdev.create_srq(&spd, init).unwrap();
    let qinit = |cq| QpInit {
        send_cq: cq,
        recv_cq: cq,
        sq_depth: 64,
        rq_depth: 0,
    };
    let sqps: Vec<Qp> = (0..n)
        .map(|_| sdev.create_qp_on_srq(&spd, qinit(&scq), &srq).unwrap())
        .collect();
    let bufs = spd.alloc_mr(slots * SLOT, Access::LOCAL_WRITE).unwrap();
    let cdev = Device::open(cfg).unwrap();
    let cpd = cdev.alloc_pd();
    let ccq = cdev.create_cq(64 * n).unwrap();
    let cqps: Vec<Qp> = (0..n)
        .map(|_| {
            let i = QpInit {
                rq_depth: 1,
                ..qinit(&ccq)
            };
            cdev.create_qp(&cpd, i).unwrap()
        })
        .collect();
    let src = cpd.alloc_mr(4 * n * SLOT, Access::empty()).unwrap();
    let listener = sdev.listen("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            for _ in 0..n {
                let req = listener.accept().unwrap();
                let mut b = [0u8; 4];
                b.copy_from_slice(&req.private_data()[..4]);
                req.accept(&sqps[u32::from_le_bytes(b) as usize], b"")
                    .unwrap();
            }
        });
        for (i, qp) in cqps.iter().enumerate() {
            cdev.connect(addr, qp, &(i as u32).to_le_bytes()).unwrap();
        }
    });
    (
        SrqServer {
            dev: sdev,
            pd: spd,
            cq: scq,
            srq,
            qps: sqps,
            bufs,
        },
        Clients {
            dev: cdev,
            pd: cpd,
            cq: ccq,
            qps: cqps,
            src,
        },
    )
}

/// Every event of `dev` queued now.
pub fn events(dev: &Device) -> Vec<AsyncEvent> {
    std::iter::from_fn(|| dev.poll_event()).collect()
}
