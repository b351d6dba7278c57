//! The one set-up module of the rnic tests: ends (a device, a PD, CQs and a QP) built by
//! [`end`], connected pairs, a hand-driven MPA initiator, and helpers that wait for
//! completions and events with a timeout (nothing sleeps: every wait ends as soon as
//! what it waits for arrives) and check what completed.
#![allow(dead_code)]

use softrnic_rnic::*;
use std::collections::BTreeMap;
use std::time::Duration;

/// How long any single wait may take before the test fails.
pub const WAIT: Duration = Duration::from_secs(60);

/// One side of a test: a device with one QP.
pub struct End {
    pub dev: Device,
    pub pd: Pd,
    /// The send CQ, and the receive CQ too unless the end has its own ([`End::recv_cq`]).
    pub cq: Cq,
    recv: Option<Cq>,
    pub qp: Qp,
}

impl End {
    /// The CQ receive completions go to.
    pub fn recv_cq(&self) -> &Cq {
        self.recv.as_ref().unwrap_or(&self.cq)
    }
}

/// What an [`End`] is built with; start from [`end`].
#[derive(Clone)]
pub struct EndBuilder {
    cfg: DeviceConfig,
    cq_depth: usize,
    recv_cq_depth: Option<usize>,
    sq: usize,
    rq: usize,
}

/// A builder with what most tests want: a default device, one CQ of 4096 for both
/// queues, send and receive queues of 256.
pub fn end() -> EndBuilder {
    EndBuilder {
        cfg: DeviceConfig::default(),
        cq_depth: 4096,
        recv_cq_depth: None,
        sq: 256,
        rq: 256,
    }
}

impl EndBuilder {
    /// The device's configuration.
    pub fn config(mut self, cfg: DeviceConfig) -> Self {
        self.cfg = cfg;
        self
    }

    /// A default device that progresses as `progress` says.
    pub fn progress(self, progress: ProgressMode) -> Self {
        self.config(DeviceConfig {
            progress,
            ..DeviceConfig::default()
        })
    }

    /// Depth of the CQ (both queues', unless [`EndBuilder::recv_cq`] is given).
    pub fn cq(mut self, depth: usize) -> Self {
        self.cq_depth = depth;
        self
    }

    /// A CQ of its own, this deep, for receive completions.
    pub fn recv_cq(mut self, depth: usize) -> Self {
        self.recv_cq_depth = Some(depth);
        self
    }

    /// Send and receive queue depths.
    pub fn queues(mut self, sq: usize, rq: usize) -> Self {
        self.sq = sq;
        self.rq = rq;
        self
    }

    /// An unconnected end.
    pub fn build(&self) -> End {
        let dev = Device::open(self.cfg.clone()).unwrap();
        let pd = dev.alloc_pd();
        let cq = dev.create_cq(self.cq_depth).unwrap();
        let recv = self.recv_cq_depth.map(|d| dev.create_cq(d).unwrap());
        let init = QpInit::with_cqs(&cq, recv.as_ref().unwrap_or(&cq), self.sq, self.rq);
        let qp = dev.create_qp(&pd, init).unwrap();
        End {
            dev,
            pd,
            cq,
            recv,
            qp,
        }
    }

    /// Two ends built alike, connected: (active, passive).
    pub fn pair(&self) -> (End, End) {
        let (a, b) = (self.build(), self.build());
        connect(&a, &b);
        (a, b)
    }
}

/// A connected pair of default ends: (active, passive).
pub fn pair() -> (End, End) {
    end().pair()
}

/// Connects `a` (active) to `b` (passive) over loopback TCP.
pub fn connect(a: &End, b: &End) {
    connect_qps((&a.dev, &a.qp), (&b.dev, &b.qp));
}

/// Connects the active QP `qa` on its device to the passive QP `qb` on its device (the
/// same device or another), checking the private data each side receives.
pub fn connect_qps(a: (&Device, &Qp), b: (&Device, &Qp)) {
    connect_qps_at(a, b, "127.0.0.1:0");
}

/// [`connect_qps`] with the passive side listening at `at` (an address of its own TCP,
/// say).
pub fn connect_qps_at(
    (da, qa): (&Device, &Qp),
    (db, qb): (&Device, &Qp),
    at: impl std::net::ToSocketAddrs,
) {
    let listener = db.listen(at).unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::scope(|s| {
        let h = s.spawn(|| {
            let req = listener.accept().unwrap();
            assert_eq!(req.private_data(), b"active");
            req.accept(qb, b"passive").unwrap();
        });
        let c = da.connect(addr, qa, b"active").unwrap();
        assert_eq!(c.peer_private_data(), b"passive");
        h.join().unwrap();
    });
}

/// A hand-driven MPA initiator on a plain TCP stream, connected to `e`'s QP: the MPA
/// exchange done with `softrnic_proto`'s initiator, then the stream is the caller's, to
/// write raw FPDUs (or broken ones) into.
pub fn raw_initiator(e: &End) -> std::net::TcpStream {
    raw_initiator_with(e, MpaConfig::default())
}

/// [`raw_initiator`] with the initiator's MPA settings `cfg`.
pub fn raw_initiator_with(e: &End, cfg: MpaConfig) -> std::net::TcpStream {
    raw_initiator_to(&e.dev, &e.qp, cfg)
}

/// [`raw_initiator_with`], connected to any QP `qp` of `dev`.
pub fn raw_initiator_to(dev: &Device, qp: &Qp, cfg: MpaConfig) -> std::net::TcpStream {
    use softrnic_proto::cm::{Initiator, InitiatorProgress};
    use std::io::{Read, Write};
    let listener = dev.listen("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::scope(|s| {
        let h = s.spawn(|| listener.accept().unwrap().accept(qp, b"").unwrap());
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(WAIT)).unwrap();
        let mut init = Initiator::new(cfg).unwrap();
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

/// The next completion of `cq` (panics if none arrives within [`WAIT`]).
pub fn one(cq: &Cq) -> Completion {
    take(cq, 1)[0]
}

/// Collects exactly `n` completions (panics if fewer arrive within [`WAIT`]).
pub fn take(cq: &Cq, n: usize) -> Vec<Completion> {
    let v = cq.wait_for(n, WAIT);
    assert_eq!(
        v.len(),
        n,
        "expected {n} completions within {WAIT:?}, got {v:?}"
    );
    v
}

/// Everything in the CQ now, without waiting. Once a QP's Disconnected event has been
/// seen, every completion it produced (flushes included) is already in its CQ.
pub fn drained(cq: &Cq) -> Vec<Completion> {
    std::iter::from_fn(|| cq.poll_one()).collect()
}

/// Asserts every work request in `wrs` completed exactly once in `got`, and that
/// nothing else completed.
pub fn exactly_once(got: &[Completion], wrs: impl IntoIterator<Item = u64>) {
    let mut count: BTreeMap<u64, usize> = BTreeMap::new();
    for c in got {
        *count.entry(c.wr_id).or_default() += 1;
    }
    let want: BTreeMap<u64, usize> = wrs.into_iter().map(|w| (w, 1)).collect();
    assert_eq!(count, want, "completions per wr_id");
}

/// Status of the completion of `wr_id` in `got`.
pub fn status_of(got: &[Completion], wr_id: u64) -> WcStatus {
    got.iter()
        .find(|c| c.wr_id == wr_id)
        .unwrap_or_else(|| panic!("no completion for wr_id {wr_id}"))
        .status
}

/// Waits for the first event that `pick` accepts; panics after [`WAIT`].
pub fn event(dev: &Device, what: &str, mut pick: impl FnMut(&AsyncEvent) -> bool) -> AsyncEvent {
    dev.wait_event_matching(WAIT, |e| pick(e))
        .unwrap_or_else(|| panic!("no {what} event within {WAIT:?}"))
}

/// The QpFatal event of `qp`.
pub fn fatal_event(dev: &Device, qp: &Qp) -> AsyncEvent {
    let id = qp.id();
    event(
        dev,
        "QpFatal",
        |e| matches!(e, AsyncEvent::QpFatal { qp, .. } if *qp == id),
    )
}

/// Waits for the Disconnected event of `qp`.
pub fn disconnected(dev: &Device, qp: &Qp) {
    let id = qp.id();
    let e = event(
        dev,
        "Disconnected",
        |e| matches!(e, AsyncEvent::Disconnected { qp } if *qp == id),
    );
    assert_eq!(e, AsyncEvent::Disconnected { qp: id });
}

pub mod srq;
