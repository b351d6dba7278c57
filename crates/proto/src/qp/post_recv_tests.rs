//! A run of receives posted at once against the same requests posted one by one: the
//! same results, completions, queue and state, whatever the run holds and whatever
//! the QP's state when it starts.

use super::super::params::QpConfig;
use super::super::{PostError, Qp, QpState};
use crate::qp::params::QpParams;
use crate::qp::rq::RecvWqe;
use crate::tpt::{Tpt, TptEntry};
use crate::verbs::{Access, PdId, QpId, RecvWr, RegionId, STag, Sge, Sgl};

const PD: PdId = PdId(1);
const DEPTH: usize = 6;

/// Where a twin starts.
#[derive(Debug, Clone, Copy)]
enum Start {
    Idle,
    Rts,
    Errored,
    OnSrq,
}

/// A QP and its table: a local-writable region (0), a second one (1), one without
/// LOCAL_WRITE (2), one of another PD (3).
fn twin(start: Start) -> (Qp, Tpt, [STag; 4]) {
    let cfg = QpConfig {
        id: QpId(7),
        pd: PD,
        sq_depth: 4,
        rq_depth: DEPTH,
    };
    let mut qp = match start {
        Start::OnSrq => Qp::new_on_srq(cfg),
        _ => Qp::new(cfg),
    };
    if matches!(start, Start::Rts | Start::Errored) {
        qp.connect(QpParams::default()).unwrap();
    }
    if matches!(start, Start::Errored) {
        qp.to_error();
    }
    let tpt = Tpt::new();
    let reg = |id: u32, access: Access| {
        tpt.insert(TptEntry {
            pd: if id == 3 { PdId(2) } else { PD },
            key: 0x11,
            base: 0x1000 * u64::from(id + 1),
            len: 256,
            access,
            region: RegionId(id),
            valid: true,
        })
        .unwrap()
    };
    let stags = [
        reg(0, Access::LOCAL_WRITE),
        reg(1, Access::LOCAL_WRITE),
        reg(2, Access::empty()),
        reg(3, Access::LOCAL_WRITE),
    ];
    (qp, tpt, stags)
}

/// The request of kind `k` (number `n` in the sequence); kind 7 first deregisters
/// region 0 (from the middle of a run, as a program's iterator may).
fn request(k: u64, n: u64, tpt: &Tpt, s: [STag; 4]) -> RecvWr {
    let sge = |stag: STag, base: u64, off: u64, len: u32| Sge {
        addr: base + off,
        len,
        lkey: stag,
    };
    let sgl: Sgl = match k {
        // The repost of the same buffer (the memoised way).
        0 => sge(s[0], 0x1000, 0, 64).into(),
        1 => sge(s[1], 0x2000, 64, 64).into(),
        2 => [sge(s[0], 0x1000, 0, 8), sge(s[1], 0x2000, 8, 8)].into(),
        3 => Sgl::new(),
        // Not registered.
        4 => sge(0xdead_0011, 0x1000, 0, 8).into(),
        // No LOCAL_WRITE.
        5 => sge(s[2], 0x3000, 0, 8).into(),
        // Beyond the region.
        6 => sge(s[0], 0x1000, 200, 64).into(),
        // Another PD's region.
        8 => sge(s[3], 0x4000, 0, 8).into(),
        // 7: region 0 deregistered, then its key.
        _ => {
            tpt.remove(s[0]);
            sge(s[0], 0x1000, 0, 64).into()
        }
    };
    RecvWr::new(100 + n, sgl)
}

/// What a post left: its result, the QP's state, the completions, the queue.
type Outcome = (Result<(), PostError>, QpState, Vec<String>, Vec<RecvWqe>);

fn outcome(mut qp: Qp, r: Result<(), PostError>) -> Outcome {
    let state = qp.state();
    let done = std::iter::from_fn(|| qp.poll_completion())
        .map(|c| format!("{c:?}"))
        .collect();
    let queue = qp.rq.drain().collect();
    (r, state, done, queue)
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[test]
fn a_run_posts_exactly_as_single_posts_do() {
    let mut faults = 0;
    let mut full = 0;
    for start in [Start::Idle, Start::Rts, Start::Errored, Start::OnSrq] {
        for seed in 0..400u64 {
            let len = splitmix(seed) % 12;
            // Mostly reposts of one buffer, as a program's; now and then anything else.
            let kinds: Vec<u64> = (0..len)
                .map(|i| {
                    let r = splitmix(seed * 31 + i + 1);
                    if r.is_multiple_of(3) { r % 8 } else { 0 }
                })
                .collect();

            let (mut one, tpt1, s1) = twin(start);
            let mut r1 = Ok(());
            for (n, &k) in kinds.iter().enumerate() {
                let wr = request(k, n as u64, &tpt1, s1);
                r1 = one.post_recv_ref(&wr, &tpt1);
                if r1.is_err() {
                    break;
                }
            }
            let (mut run, tpt2, s2) = twin(start);
            let r2 = run.post_recv_run(
                kinds
                    .iter()
                    .enumerate()
                    .map(|(n, &k)| request(k, n as u64, &tpt2, s2)),
                &tpt2,
            );
            let (a, b) = (outcome(one, r1), outcome(run, r2));
            faults += usize::from(a.1 == QpState::Error && !matches!(start, Start::Errored));
            full += usize::from(a.0 == Err(PostError::QueueFull));
            assert_eq!(a, b, "{start:?} seed {seed}: {kinds:?}");
        }
    }
    // The runs met what they are compared on.
    assert!(faults > 50 && full > 50, "faults {faults}, full {full}");
}

#[test]
fn a_run_of_borrowed_reposts_fills_the_queue_and_stops_there() {
    let (mut qp, tpt, s) = twin(Start::Rts);
    let wr = request(0, 0, &tpt, s);
    assert_eq!(
        qp.post_recv_run(std::iter::repeat_n(&wr, DEPTH + 2), &tpt),
        Err(PostError::QueueFull)
    );
    let queue: Vec<RecvWqe> = qp.rq.drain().collect();
    assert_eq!(queue.len(), DEPTH);
    let expect = RecvWqe::resolve(&wr, &tpt, PD).unwrap();
    assert!(queue.iter().all(|w| *w == expect));
    assert_eq!(qp.poll_completion(), None);
}

/// The single repost's way (`post_recv_working`, the general post where it declines)
/// against the general post alone, request by request over seeded mixes (reposts of
/// one buffer, other buffers, bad and deregistered keys, out of bounds, another PD,
/// no LOCAL_WRITE, a full queue) from every starting state: the same result values,
/// completions, queue contents and state.
#[test]
fn the_single_repost_posts_exactly_as_the_general_post() {
    let mut taken = 0;
    let mut declined = 0;
    let mut faults = 0;
    let mut refused = 0;
    for start in [Start::Idle, Start::Rts, Start::Errored, Start::OnSrq] {
        for seed in 0..400u64 {
            let len = splitmix(seed ^ 0x5eed) % 12;
            let kinds: Vec<u64> = (0..len)
                .map(|i| {
                    let r = splitmix(seed * 37 + i + 1);
                    if r.is_multiple_of(3) { r % 9 } else { 0 }
                })
                .collect();
            let (mut general, tpt1, s1) = twin(start);
            let (mut single, tpt2, s2) = twin(start);
            for (n, &k) in kinds.iter().enumerate() {
                let r1 = general.post_recv_ref(&request(k, n as u64, &tpt1, s1), &tpt1);
                let wr = request(k, n as u64, &tpt2, s2);
                let r2 = match single.post_recv_working(&wr, &tpt2) {
                    Some(r) => {
                        taken += 1;
                        r
                    }
                    None => {
                        declined += 1;
                        single.post_recv_ref(&wr, &tpt2)
                    }
                };
                assert_eq!(r1, r2, "{start:?} seed {seed} request {n}: {kinds:?}");
                assert_eq!(general.state(), single.state());
                faults += usize::from(r2.is_ok() && single.state() == QpState::Error);
                refused += usize::from(r2.is_err());
            }
            let (a, b) = (outcome(general, Ok(())), outcome(single, Ok(())));
            assert_eq!(a, b, "{start:?} seed {seed}: {kinds:?}");
        }
    }
    // Both ways and every kind of answer were met.
    assert!(
        taken > 1000 && declined > 1000 && faults > 50 && refused > 50,
        "taken {taken}, declined {declined}, faults {faults}, refused {refused}"
    );
}
