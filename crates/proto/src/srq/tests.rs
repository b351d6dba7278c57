//! The SRQ on its own (takes, limit event, sizes, limits, intervals) and under real
//! receive paths: sender QPs' FPDUs fed to receiver QPs that take their buffers from
//! one SRQ, the octets placed checked.

use super::limits::Level;
use super::*;
use crate::qp::{Qp, QpConfig, QpParams, RxCtx, RxNeed, TxFpdu};
use crate::tpt::{Tpt, TptEntry};
use crate::verbs::*;
use softrnic_wire::crc::crc32c_append;

const PD: PdId = PdId(1);

fn wqe(id: u64) -> RecvWqe {
    RecvWqe {
        wr_id: id,
        sges: [(RegionId(0), id * 64, 64)].into_iter().collect(),
        total: 64,
    }
}

fn srq(max_wr: usize) -> Srq {
    Srq::new(SrqConfig::new(PD, max_wr, 1)).unwrap()
}

fn taken(g: Grant) -> u64 {
    match g {
        Grant::Buffer(w) => w.wr_id,
        g => panic!("no buffer: {g:?}"),
    }
}

fn events(s: &mut Srq) -> Vec<SrqEvent> {
    std::iter::from_fn(|| s.poll_event()).collect()
}

#[test]
fn buffers_go_out_in_posting_order_to_any_qp() {
    let mut s = srq(8);
    for i in 0..4 {
        s.post(wqe(i)).unwrap();
    }
    assert_eq!(taken(s.take(QpId(7), false)), 0);
    assert_eq!(taken(s.take(QpId(9), false)), 1);
    assert_eq!(taken(s.take(QpId(7), false)), 2);
    assert_eq!(s.member(QpId(7)).unwrap().held, 2);
    s.release(QpId(7));
    assert_eq!(s.member(QpId(7)).unwrap().held, 1);
    assert_eq!(s.posted(), 1);
    assert_eq!(taken(s.take(QpId(9), false)), 3);
    assert_eq!(s.take(QpId(9), false), Grant::Empty);
    assert_eq!(s.counters().empty, 1);
    assert_eq!(s.counters().taken, 4);
}

#[test]
fn limit_event_fires_once_per_arm() {
    let mut s = srq(16);
    for i in 0..16 {
        s.post(wqe(i)).unwrap();
    }
    s.arm(4).unwrap();
    for _ in 0..12 {
        s.take(QpId(1), false);
    }
    assert!(events(&mut s).is_empty(), "4 left: not below 4");
    s.take(QpId(1), false);
    assert_eq!(
        events(&mut s),
        vec![SrqEvent::LimitReached {
            posted: 3,
            limit: 4
        }]
    );
    s.take(QpId(1), false);
    assert!(events(&mut s).is_empty(), "disarmed after firing");
    assert!(!s.armed());
    // Re-armed above what is posted: the next take fires it, once.
    s.arm(3).unwrap();
    s.take(QpId(2), false);
    s.take(QpId(2), false);
    assert_eq!(
        events(&mut s),
        vec![SrqEvent::LimitReached {
            posted: 1,
            limit: 3
        }]
    );
}

#[test]
fn sizes_and_limits_are_checked() {
    assert_eq!(
        Srq::new(SrqConfig::new(PD, 0, 1)).unwrap_err(),
        SrqError::BadSize
    );
    assert_eq!(
        Srq::new(SrqConfig::new(PD, 4, MAX_SGE + 1)).unwrap_err(),
        SrqError::BadSize
    );
    let mut s = srq(8);
    for i in 0..6 {
        s.post(wqe(i)).unwrap();
    }
    assert_eq!(s.resize(5), Err(SrqError::BelowPosted { posted: 6 }));
    s.resize(6).unwrap();
    assert_eq!(s.post(wqe(9)), Err(PostError::QueueFull));
    s.resize(32).unwrap();
    s.post(wqe(9)).unwrap();
    assert_eq!(s.arm(33), Err(SrqError::LimitAboveSize));
    s.arm(20).unwrap();
    assert_eq!(s.resize(19), Err(SrqError::LimitAboveSize));
    // Withdrawing takes back only what `pick` accepts, newest first.
    let back = s.withdraw(2, |w| w.wr_id % 2 == 1);
    assert_eq!(back.iter().map(|w| w.wr_id).collect::<Vec<_>>(), vec![9, 5]);
    assert_eq!(s.posted(), 5);
}

#[test]
fn hard_limit_per_interval_refuses_with_ddp_no_buffer() {
    let mut s = srq(64);
    for i in 0..64 {
        s.post(wqe(i)).unwrap();
    }
    s.attach(QpId(1));
    s.set_limits(
        QpId(1),
        QpLimits {
            per_interval: Level::new(u32::MAX, 3),
            ..QpLimits::default()
        },
    );
    for _ in 0..3 {
        taken(s.take(QpId(1), false));
    }
    let cause = TerminateCause::new(Layer::Ddp, 2, 2);
    assert_eq!(s.take(QpId(1), false), Grant::Refused(cause));
    let ev = events(&mut s);
    let [SrqEvent::HardLimit(a)] = ev.as_slice() else {
        panic!("{ev:?}")
    };
    assert_eq!(
        (a.qp, a.limit, a.count, a.verdict),
        (QpId(1), LimitKind::PerInterval, 4, Verdict::Drop)
    );
    // Others are untouched, and a new interval lets the QP take again.
    taken(s.take(QpId(2), false));
    s.end_interval();
    taken(s.take(QpId(1), false));
    assert_eq!(s.counters().refused, 1);
}

#[test]
fn soft_limit_absorbs_while_the_pool_has_room_and_holds_back_when_short() {
    let mut s = srq(64);
    for i in 0..20 {
        s.post(wqe(i)).unwrap();
    }
    s.set_reserve(10);
    s.attach(QpId(1));
    s.set_limits(
        QpId(1),
        QpLimits {
            per_interval: Level::new(2, 100),
            ..QpLimits::default()
        },
    );
    taken(s.take(QpId(1), false));
    taken(s.take(QpId(1), false));
    assert!(events(&mut s).is_empty());
    // Third: over soft; 17 left after it >= reserve: absorbed, one event.
    taken(s.take(QpId(1), false));
    let ev = events(&mut s);
    let [SrqEvent::SoftLimit(a)] = ev.as_slice() else {
        panic!("{ev:?}")
    };
    assert_eq!(
        (a.count, a.verdict, a.sustained),
        (3, Verdict::Absorb, false)
    );
    // A first burst may use half the reserve: down to 5 left, then it waits.
    while s.posted() > 5 {
        taken(s.take(QpId(1), false));
    }
    assert!(events(&mut s).is_empty(), "one event per episode");
    assert_eq!(s.take(QpId(1), false), Grant::Wait);
    let ev = events(&mut s);
    let [SrqEvent::SoftLimit(a)] = ev.as_slice() else {
        panic!("{ev:?}")
    };
    assert_eq!(
        (a.verdict, a.available, a.reserve),
        (Verdict::BackPressure, 5, 10)
    );
    assert!(s.is_waiting(QpId(1)));
    assert_eq!(s.take(QpId(1), false), Grant::Wait);
    assert!(events(&mut s).is_empty(), "one event per episode");
    // Another QP within its limits still gets buffers.
    taken(s.take(QpId(2), false));
    assert!(s.wake().is_empty(), "still short");
    // The interval ends: the hog is under its limit again and is woken.
    s.end_interval();
    assert!(matches!(events(&mut s)[..], [SrqEvent::BelowTarget { .. }]));
    assert_eq!(s.wake(), vec![QpId(1)]);
    taken(s.take(QpId(1), false));
    // It was over its soft limit for the whole last interval: now a sustained hog,
    // held to the full reserve (2 posted < 10) at its next crossing.
    taken(s.take(QpId(1), false));
    assert_eq!(s.take(QpId(1), false), Grant::Wait);
    let ev = events(&mut s);
    let [SrqEvent::SoftLimit(a)] = ev.as_slice() else {
        panic!("{ev:?}")
    };
    assert!(a.sustained && a.verdict == Verdict::BackPressure, "{a:?}");
    // Posting refills the pool past the reserve: the hog is woken and absorbed.
    for i in 100..110 {
        s.post(wqe(i)).unwrap();
    }
    assert_eq!(s.wake(), vec![QpId(1)]);
    taken(s.take(QpId(1), false));
    // Ahead of a hole, a crossing only declines, silently.
    s.set_limits(
        QpId(1),
        QpLimits {
            per_interval: Level::new(0, 0),
            ..QpLimits::default()
        },
    );
    events(&mut s);
    assert_eq!(s.take(QpId(1), true), Grant::Wait);
    assert!(events(&mut s).is_empty() && !s.is_waiting(QpId(1)));
}

#[test]
fn interval_statistics_and_target_on_known_demand() {
    let mut cfg = SrqConfig::new(PD, 1024, 1);
    cfg.provision = ProvisionConfig {
        z: 2.0,
        alpha: 0.5,
        window: 8,
        estimator: stats::Estimator::Empirical,
        min_depth: 1,
        auto_soft_z: Some(1.0),
        soft_floor: 1,
    };
    let mut s = Srq::new(cfg).unwrap();
    for i in 0..1024 {
        s.post(wqe(i)).unwrap();
    }
    // QP 1 takes 2, 4, 6 per interval; QP 2 takes 1, 1, 4.
    for (a, b) in [(2, 1), (4, 1), (6, 4)] {
        for _ in 0..a {
            taken(s.take(QpId(1), false));
            s.release(QpId(1));
        }
        for _ in 0..b {
            taken(s.take(QpId(2), false));
            s.release(QpId(2));
        }
        s.end_interval();
    }
    let d1 = &s.member(QpId(1)).unwrap().demand;
    let d2 = &s.member(QpId(2)).unwrap().demand;
    assert_eq!((d1.mean(), d1.variance()), (4.0, 4.0));
    assert_eq!((d2.mean(), d2.variance()), (2.0, 3.0));
    // 4 + 2 + 2 * sqrt(4 + 3) = 11.29 -> 12.
    assert_eq!(s.target(), 12);
    // Soft limits: 4 + 1 * 2 = 6 and 2 + sqrt(3) = 3.73 -> 4.
    assert_eq!(s.member(QpId(1)).unwrap().limits.per_interval.soft, 6);
    assert_eq!(s.member(QpId(2)).unwrap().limits.per_interval.soft, 4);
    // The dynamic view: QP 1 is 2 -> 3 (v 1) -> 4.5 (v 0.5 * (1 + 0.5 * 9) = 2.75).
    assert_eq!((d1.ewma_mean(), d1.ewma_variance()), (4.5, 2.75));
    // Posted far above target: no advice. Withdraw to 10: the next interval advises.
    let n = s.posted() - 10;
    s.withdraw(n, |_| true);
    events(&mut s);
    s.end_interval();
    assert!(events(&mut s).contains(&SrqEvent::BelowTarget {
        target: s.target(),
        posted: 10
    }));
}

// ---- Under real receive paths. ----

/// A device's worth of receive state: the TPT and memory of the receivers.
struct Host {
    tpt: Tpt,
    mem: Vec<Vec<u8>>,
}

impl Host {
    fn reg(&mut self, len: usize) -> STag {
        let id = self.mem.len() as u32;
        self.mem.push(vec![0; len]);
        self.tpt
            .insert(TptEntry {
                pd: PD,
                key: 1,
                base: (u64::from(id) + 1) << 32,
                len: len as u64,
                access: Access::LOCAL_WRITE | Access::REMOTE_WRITE,
                region: RegionId(id),
                valid: true,
            })
            .unwrap()
    }

    fn sge(&self, stag: STag, off: u64, len: u32) -> Sge {
        Sge {
            addr: self.tpt.get(stag).unwrap().base + off,
            len,
            lkey: stag,
        }
    }

    /// Feeds `bytes` to `qp` with buffers from `srq`; returns the octets taken.
    fn feed(&mut self, qp: &mut Qp, srq: &mut Srq, bytes: &[u8]) -> usize {
        let mem = &mut self.mem;
        qp.handle_input(bytes, &mut RxCtx::with_srq(&self.tpt, srq), &mut |c, d| {
            let r = &mut mem[c.region.0 as usize];
            r[c.offset as usize..c.offset as usize + d.len()].copy_from_slice(d);
        })
    }
}

fn connected(id: u32, on_srq: bool) -> Qp {
    let cfg = QpConfig {
        id: QpId(id),
        pd: PD,
        sq_depth: 64,
        rq_depth: 64,
    };
    let mut qp = if on_srq {
        Qp::new_on_srq(cfg)
    } else {
        Qp::new(cfg)
    };
    qp.connect(QpParams::default()).unwrap();
    qp
}

/// The octets a sender QP puts on the wire for `msgs`, each sent from `host`'s region
/// `stag` at the given (offset, len).
fn wire(tx: &mut Qp, host: &Host, stag: STag, msgs: &[(u64, u32)]) -> Vec<u8> {
    for (i, &(off, len)) in msgs.iter().enumerate() {
        let wr = SendWr::send(i as u64, host.sge(stag, off, len)).unsignaled();
        tx.post_send(wr, &host.tpt).unwrap();
    }
    let mut out = Vec::new();
    let mut f = TxFpdu::default();
    while tx.poll_transmit(&mut f) {
        let mut v = f.header_bytes().to_vec();
        for c in &f.chunks {
            let m = &host.mem[c.region.0 as usize];
            v.extend_from_slice(&m[c.offset as usize..c.offset as usize + c.len]);
        }
        v.extend(std::iter::repeat_n(0u8, f.pad_len()));
        let (t, n) = f.trailer(crc32c_append(0, &v));
        v.extend_from_slice(&t[f.pad_len()..n]);
        tx.transmit_done();
        out.extend(v);
    }
    out
}

#[test]
fn qps_on_one_srq_place_into_its_buffers_and_the_hog_waits_then_resumes() {
    let mut tx_host = Host {
        tpt: Tpt::new(),
        mem: Vec::new(),
    };
    let src = tx_host.reg(4096);
    tx_host.mem[0] = (0..4096u32).map(|i| (i * 7 + i / 251) as u8).collect();
    let mut rx = Host {
        tpt: Tpt::new(),
        mem: Vec::new(),
    };
    let bufs = rx.reg(16 * 256);
    let mut cfg = SrqConfig::new(PD, 16, 2);
    cfg.reserve = 16;
    cfg.qp_limits.per_interval = Level::new(2, 10);
    let mut s = Srq::new(cfg).unwrap();
    for i in 0..12u64 {
        let sgl = [rx.sge(bufs, i * 256, 100), rx.sge(bufs, i * 256 + 100, 156)];
        let wr = RecvWr::new(100 + i, sgl);
        s.post(RecvWqe::resolve(&wr, &rx.tpt, PD).unwrap()).unwrap();
    }
    let (mut hog_tx, mut other_tx) = (connected(1, false), connected(2, false));
    let (mut hog, mut other) = (connected(11, true), connected(12, true));
    assert_eq!(
        hog.post_recv(RecvWr::new(0, []), &rx.tpt),
        Err(PostError::SharedRq)
    );
    let hog_msgs: Vec<(u64, u32)> = (0..5).map(|i| (i * 300, 200 + i as u32)).collect();
    let hog_wire = wire(&mut hog_tx, &tx_host, src, &hog_msgs);
    let other_wire = wire(&mut other_tx, &tx_host, src, &[(3000, 256), (7, 1)]);
    // The hog: 2 within its soft limit; a first burst may leave half the reserve (8):
    // the third (9 left) and fourth (8 left) are absorbed, the fifth would leave 7
    // and waits.
    let used = rx.feed(&mut hog, &mut s, &hog_wire);
    assert!(used < hog_wire.len());
    assert_eq!(hog.rx_need(), RxNeed::Wait);
    assert!(s.is_waiting(QpId(11)));
    let mut done: Vec<Completion> = std::iter::from_fn(|| hog.poll_completion())
        .map(|(_, c)| c)
        .collect();
    assert_eq!(done.len(), 4);
    // Feeding more while waiting takes nothing.
    assert_eq!(rx.feed(&mut hog, &mut s, &hog_wire[used..]), 0);
    // The other QP is within its limits and is served.
    assert_eq!(rx.feed(&mut other, &mut s, &other_wire), other_wire.len());
    let theirs: Vec<Completion> = std::iter::from_fn(|| other.poll_completion())
        .map(|(_, c)| c)
        .collect();
    assert_eq!(
        theirs
            .iter()
            .map(|c| (c.wr_id, c.byte_len))
            .collect::<Vec<_>>(),
        vec![(104, 256), (105, 1)]
    );
    assert!(
        s.wake().is_empty(),
        "the hog is still over its limit, the pool short"
    );
    // A new interval wakes the hog; it retries and continues where it stopped.
    s.end_interval();
    assert_eq!(s.wake(), vec![QpId(11)]);
    hog.rx_retry(&mut RxCtx::with_srq(&rx.tpt, &mut s));
    assert_ne!(hog.rx_need(), RxNeed::Wait);
    assert_eq!(
        rx.feed(&mut hog, &mut s, &hog_wire[used..]),
        hog_wire.len() - used
    );
    done.extend(std::iter::from_fn(|| hog.poll_completion()).map(|(_, c)| c));
    assert_eq!(
        done.iter().map(|c| c.wr_id).collect::<Vec<_>>(),
        vec![100, 101, 102, 103, 106]
    );
    // Every message landed whole in its buffer's two SGEs.
    for (c, (off, len)) in done.iter().zip(hog_msgs) {
        assert_eq!(c.status, WcStatus::Success);
        assert_eq!(c.byte_len, len);
        let at = ((c.wr_id - 100) * 256) as usize;
        let src = &tx_host.mem[0][off as usize..off as usize + len as usize];
        assert_eq!(&rx.mem[0][at..at + len as usize], src, "wr {}", c.wr_id);
    }
    assert_eq!(s.member(QpId(11)).unwrap().held, 0, "all released");
}
