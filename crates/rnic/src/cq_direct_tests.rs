//! The poll of a CQ whose only QP is claimed, with its completions handed straight to
//! the caller (`cq_direct`), against the general poll through the ring: twin pairs
//! driven alike over seeded mixes of Sends, Writes, Reads, the receiver's own Sends
//! posted between its polls, a second QP joining its CQ and leaving, and a close that
//! flushes the receives, end alike (the same completions in the same order, the same
//! octets placed). A second consumer thread polling the same CQ gets each completion
//! exactly once.

use crate::handoff::CLAIM_AFTER;
use crate::twin_support::{self, Log, SEND, SLOT, SLOTS, octets, post_recv_slot, splitmix};
use crate::{
    Access, Completion, Cq, Device, DeviceConfig, Mr, Pd, Qp, QpInit, QpState, RecvWr, SendOp,
    SendWr, WcOpcode, WcStatus,
};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Spins without a completion after which a test fails (no clock: a count).
const SPINS: u64 = 200_000_000;

struct End {
    dev: Device,
    pd: Pd,
    cq: Cq,
    recv_cq: Option<Cq>,
    qp: Qp,
    /// Receive slots, then a target for Writes and a source for Reads.
    mr: Mr,
}

impl End {
    fn new(split: bool) -> End {
        let dev = Device::open(DeviceConfig::default()).unwrap();
        let pd = dev.alloc_pd();
        let cq = dev.create_cq(256).unwrap();
        let recv_cq = split.then(|| dev.create_cq(256).unwrap());
        let qp = dev
            .create_qp(
                &pd,
                QpInit::with_cqs(&cq, recv_cq.as_ref().unwrap_or(&cq), 64, 64),
            )
            .unwrap();
        let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
        let mr = pd.alloc_mr(2 * SLOTS * SLOT, access).unwrap();
        End {
            dev,
            pd,
            cq,
            recv_cq,
            qp,
            mr,
        }
    }

    /// Polls each of the end's CQs once into `out` (its first `k`), logging what came.
    fn poll(&self, k: usize, log: &mut Vec<(u64, WcOpcode, WcStatus, u32)>) -> usize {
        let mut out = [Completion::default(); 3];
        let mut got = 0;
        for cq in std::iter::once(&self.cq).chain(self.recv_cq.as_ref()) {
            let n = cq.poll(&mut out[..k]);
            for c in &out[..n] {
                log.push((c.wr_id, c.opcode, c.status, c.byte_len));
            }
            got += n;
        }
        got
    }

    fn pushes(&self) -> usize {
        std::iter::once(&self.cq)
            .chain(self.recv_cq.as_ref())
            .map(|cq| cq.shared.ring_pushes())
            .sum()
    }
}

fn connect(a: &End, b: &End) {
    twin_support::connect(&a.dev, &a.qp, &b.dev, &b.qp);
}

/// What one twin did: both ends' completions in order, the octets of both regions,
/// and the pushes into the receiver's CQs' rings.
struct Outcome {
    a: Log,
    b: Log,
    a_mem: Vec<u8>,
    b_mem: Vec<u8>,
    b_pushes: usize,
}

/// Polls both ends (the receiver `k` at a time) until each has logged `na` and `nb`
/// completions.
fn spin(a: &End, b: &End, k: usize, na: usize, nb: usize, la: &mut Log, lb: &mut Log) {
    let mut spins = 0u64;
    while la.len() < na || lb.len() < nb {
        a.poll(1, la);
        b.poll(k, lb);
        spins += 1;
        assert!(spins < SPINS, "{} of {na}, {} of {nb}", la.len(), lb.len());
    }
}

/// One twin: the seeded mix over a fresh pair. `joined`: the receiver's CQ lists a
/// second QP for the whole run (the general poll), or else for the rounds in
/// `[ROUNDS/2, 3*ROUNDS/4)` only.
fn twin(seed: u64, split: bool, joined: bool) -> Outcome {
    const ROUNDS: u64 = 240;
    let (a, b) = (End::new(split), End::new(split));
    let second = |e: &End| {
        e.dev
            .create_qp(&e.pd, QpInit::with_cqs(&e.cq, e.recv_cq(), 4, 4))
            .unwrap()
    };
    let mut extra = joined.then(|| second(&b));
    connect(&a, &b);
    let (mut la, mut lb) = (Log::new(), Log::new());
    let mut recv_next = [0u64; 2];
    let post_recv = |e: &End, side: usize, next: &mut [u64; 2]| {
        post_recv_slot(&e.qp, &e.mr, &mut next[side]);
    };
    for _ in 0..SLOTS {
        post_recv(&a, 0, &mut recv_next);
        post_recv(&b, 1, &mut recv_next);
    }
    // Both consumers poll until they hold their sockets.
    for _ in 0..2 * CLAIM_AFTER {
        a.poll(1, &mut la);
        b.poll(1, &mut lb);
    }
    let far = (SLOTS * SLOT) as u64;
    for round in 0..ROUNDS {
        if !joined && round == ROUNDS / 2 {
            extra = Some(second(&b));
        }
        if !joined && round == 3 * ROUNDS / 4 {
            extra = None;
        }
        let r = splitmix(seed ^ round);
        let len = 1 + (r >> 8) as usize % 40;
        let at = (r >> 16) % (far - 64);
        let k = 1 + (r >> 32) as usize % 3;
        let data: Vec<u8> = (0..len).map(|i| (r >> (i % 8)) as u8 ^ i as u8).collect();
        a.mr.write(far as usize + 64, &data).unwrap();
        let src = a.mr.sge(far as usize + 64, len);
        let (na, nb) = (la.len(), lb.len());
        match r % 4 {
            0 => {
                a.qp.post_send(SendWr::new(round, SEND, src)).unwrap();
                spin(&a, &b, k, na + 1, nb + 1, &mut la, &mut lb);
                post_recv(&b, 1, &mut recv_next);
            }
            1 => {
                let op = SendOp::Write {
                    remote_addr: b.mr.addr() + far + at,
                    rkey: b.mr.rkey(),
                };
                a.qp.post_send(SendWr::new(round, op, src)).unwrap();
                spin(&a, &b, k, na + 1, nb, &mut la, &mut lb);
            }
            2 => {
                let op = SendOp::Read {
                    remote_addr: b.mr.addr() + far + at,
                    rkey: b.mr.rkey(),
                };
                let sink = a.mr.sge(far as usize + 128 + (at as usize % 512), len);
                a.qp.post_send(SendWr::new(round, op, sink)).unwrap();
                spin(&a, &b, k, na + 1, nb, &mut la, &mut lb);
            }
            _ => {
                // The receiver posts between its polls, then the initiator's Send.
                b.mr.write(far as usize + 900, &data).unwrap();
                let from = b.mr.sge(far as usize + 900, len);
                b.qp.post_send(SendWr::new(1000 + round, SEND, from))
                    .unwrap();
                a.qp.post_send(SendWr::new(round, SEND, src)).unwrap();
                spin(&a, &b, k, na + 2, nb + 2, &mut la, &mut lb);
                post_recv(&a, 0, &mut recv_next);
                post_recv(&b, 1, &mut recv_next);
            }
        }
    }
    assert_eq!(b.qp.state(), QpState::Rts);
    // The close: the receiver's receives are flushed.
    a.qp.disconnect().unwrap();
    let (na, nb) = (la.len() + SLOTS, lb.len() + SLOTS);
    let mut spins = 0u64;
    while la.len() < na || lb.len() < nb {
        a.poll(1, &mut la);
        b.poll(1, &mut lb);
        spins += 1;
        assert!(
            spins < SPINS,
            "flushes: {} of {na}, {} of {nb}",
            la.len(),
            lb.len()
        );
    }
    drop(extra);
    Outcome {
        a: la,
        b: lb,
        a_mem: octets(&a.mr),
        b_mem: octets(&b.mr),
        b_pushes: b.pushes(),
    }
}

impl End {
    fn recv_cq(&self) -> &Cq {
        self.recv_cq.as_ref().unwrap_or(&self.cq)
    }
}

fn compare(split: bool) {
    for seed in [1u64, 7, 42] {
        let direct = twin(seed, split, false);
        let general = twin(seed, split, true);
        assert_eq!(
            direct.b, general.b,
            "seed {seed}: the receiver's completions"
        );
        assert_eq!(direct.a, general.a, "seed {seed}: the initiator's");
        assert!(direct.a_mem == general.a_mem, "seed {seed}: octets read");
        assert!(direct.b_mem == general.b_mem, "seed {seed}: octets placed");
        // The general poll pushes every completion into the ring; the direct one
        // hands the received Sends over without it.
        assert_eq!(general.b_pushes, general.b.len(), "seed {seed}");
        assert!(
            direct.b_pushes < general.b_pushes,
            "seed {seed}: {} pushes of {}",
            direct.b_pushes,
            direct.b.len()
        );
        assert!(
            direct.b.iter().any(|c| c.2 == WcStatus::WrFlushError),
            "seed {seed}: the close flushed"
        );
    }
}

#[test]
fn a_lone_claimed_qps_completions_come_straight_and_as_through_the_ring() {
    compare(false);
}

#[test]
fn with_separate_send_and_receive_cqs_too() {
    compare(true);
}

/// Two threads poll the receiver's one CQ while Sends arrive: each receive completes
/// exactly once, and each thread sees its share in order.
#[test]
fn a_second_consumer_gets_no_completion_twice() {
    const SENDS: u64 = 48;
    let (a, b) = (End::new(false), End::new(false));
    connect(&a, &b);
    for s in 0..SENDS {
        let at = (s as usize % SLOTS) * SLOT;
        b.qp.post_recv(RecvWr::new(s, b.mr.sge(at, SLOT))).unwrap();
        if s + 1 == SLOTS as u64 {
            break;
        }
    }
    let mut warm = Log::new();
    for _ in 0..2 * CLAIM_AFTER {
        b.poll(1, &mut warm);
    }
    let got = AtomicUsize::new(0);
    let take = || {
        let mut mine = Vec::new();
        let mut out = [Completion::default(); 2];
        let mut spins = 0u64;
        while got.load(Ordering::Acquire) < SLOTS {
            let n = b.cq.poll(&mut out);
            got.fetch_add(n, Ordering::AcqRel);
            mine.extend(out[..n].iter().map(|c| (c.wr_id, c.opcode)));
            spins += 1;
            assert!(spins < SPINS, "{} of {SLOTS}", got.load(Ordering::Acquire));
        }
        mine
    };
    let (one, two) = std::thread::scope(|s| {
        let one = s.spawn(take);
        let two = s.spawn(take);
        for w in 0..SLOTS as u64 {
            a.qp.post_send(SendWr::new(w, SEND, a.mr.sge(0, 8)))
                .unwrap();
        }
        let mut la = Log::new();
        let mut spins = 0u64;
        while la.len() < SLOTS {
            a.poll(1, &mut la);
            spins += 1;
            assert!(spins < SPINS);
        }
        (one.join().unwrap(), two.join().unwrap())
    });
    let recvs = |l: &[(u64, WcOpcode)]| -> Vec<u64> {
        l.iter()
            .filter(|c| c.1 == WcOpcode::Recv)
            .map(|c| c.0)
            .collect()
    };
    let (r1, r2) = (recvs(&one), recvs(&two));
    assert!(r1.is_sorted() && r2.is_sorted(), "{r1:?} {r2:?}");
    let mut all: Vec<u64> = r1.iter().chain(&r2).copied().collect();
    all.sort();
    assert_eq!(all, (0..SLOTS as u64).collect::<Vec<_>>());
    assert!(warm.is_empty());
}

/// A Send read by a drive while the CQ's ring holds older completions (the receiver's
/// own send completion, another QP's receive) goes in behind them, not into the
/// caller's `out`: the poll returns all three in the order they were released. The
/// drive is called as `Cq::poll` calls it after its pop found the ring empty, with the
/// ring filled in between, as a completion pushed by another thread right after the
/// pop would fill it.
#[test]
fn a_received_send_never_overtakes_completions_already_in_the_ring() {
    let (a, b) = (End::new(false), End::new(false));
    // A second pair, whose receiving QP shares the receiver's CQ.
    let a2 = a
        .dev
        .create_qp(&a.pd, QpInit::with_cqs(&a.cq, &a.cq, 4, 4))
        .unwrap();
    let b2 = b
        .dev
        .create_qp(&b.pd, QpInit::with_cqs(&b.cq, &b.cq, 4, 4))
        .unwrap();
    connect(&a, &b);
    twin_support::connect(&a.dev, &a2, &b.dev, &b2);
    let (mut la, mut next) = (Log::new(), [0u64; 2]);
    post_recv_slot(&a.qp, &a.mr, &mut next[0]);
    post_recv_slot(&b.qp, &b.mr, &mut next[1]);
    b2.post_recv(RecvWr::new(500, b.mr.sge(SLOTS * SLOT, SLOT)))
        .unwrap();
    let mut out = [Completion::default(); 3];
    // The receiver's consumer claims both sockets (its drives alone: nothing popped).
    for _ in 0..2 * CLAIM_AFTER {
        assert_eq!(b.cq.shared.drive(&mut out), (false, false, 0));
    }
    // The receiver's own Send: its completion goes into the ring at the post.
    b.qp.post_send(SendWr::new(900, SEND, b.mr.sge(0, 8)))
        .unwrap();
    assert_eq!(b.cq.shared.ring_pushes(), 1);
    // The second QP receives a Send, read by the receiver's drive (two QPs listed: no
    // hand-over), pushed behind it.
    let sent = |la: &mut Log, wr: u64| {
        let mut spins = 0u64;
        while !la.iter().any(|c| c.0 == wr) {
            a.poll(1, la);
            spins += 1;
            assert!(spins < SPINS, "{wr} not sent");
        }
    };
    a2.post_send(SendWr::new(600, SEND, a.mr.sge(0, 8)))
        .unwrap();
    sent(&mut la, 600);
    let mut spins = 0u64;
    while b.cq.shared.ring_pushes() < 2 {
        assert_eq!(b.cq.shared.drive(&mut out).2, 0);
        spins += 1;
        assert!(spins < SPINS, "the second QP's Send not read");
    }
    // It leaves: the receiver's QP is the CQ's only one, and its drives may hand over.
    drop(b2);
    a.qp.post_send(SendWr::new(700, SEND, a.mr.sge(0, 8)))
        .unwrap();
    sent(&mut la, 700);
    let mut spins = 0u64;
    while b.cq.shared.ring_pushes() < 3 {
        let (_, _, taken) = b.cq.shared.drive(&mut out);
        assert_eq!(taken, 0, "handed over ahead of the ring: {:?}", out[0]);
        spins += 1;
        assert!(spins < SPINS, "the receiver's Send not read");
    }
    assert_eq!(b.cq.poll(&mut out), 3);
    let got: Vec<_> = out.iter().map(|c| (c.wr_id, c.opcode)).collect();
    assert_eq!(
        got,
        [
            (900, WcOpcode::Send),
            (500, WcOpcode::Recv),
            (0, WcOpcode::Recv)
        ]
    );
}
