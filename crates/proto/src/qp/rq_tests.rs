//! Tests of the receive queue ([`super::Rq`]).

use super::*;
use crate::tpt::TptEntry;
use crate::verbs::Sge;

/// A repost of the same buffers is checked again once the table changed: after
/// the region's deregistration, its invalidation, or in another PD, it is refused
/// (the kept result of the earlier check is not used).
#[test]
fn a_repost_after_the_region_changed_is_checked_again() {
    let tpt = Tpt::new();
    let entry = TptEntry {
        pd: PdId(1),
        key: 1,
        base: 0x1000,
        len: 100,
        access: Access::LOCAL_WRITE,
        region: RegionId(3),
        valid: true,
    };
    let sge = |lkey| Sge {
        addr: 0x1010,
        len: 16,
        lkey,
    };
    let mut rq = Rq::new(16);
    let gone = tpt.insert(entry).unwrap();
    for id in 0..3 {
        rq.push_resolved(&RecvWr::new(id, sge(gone)), &tpt, PdId(1))
            .unwrap();
    }
    tpt.remove(gone).unwrap();
    assert_eq!(
        rq.push_resolved(&RecvWr::new(3, sge(gone)), &tpt, PdId(1)),
        Err(WcStatus::LocalProtectionError)
    );
    let invalid = tpt.insert(entry).unwrap();
    rq.push_resolved(&RecvWr::new(4, sge(invalid)), &tpt, PdId(1))
        .unwrap();
    assert_eq!(
        rq.push_resolved(&RecvWr::new(5, sge(invalid)), &tpt, PdId(2)),
        Err(WcStatus::LocalProtectionError)
    );
    rq.push_resolved(&RecvWr::new(6, sge(invalid)), &tpt, PdId(1))
        .unwrap();
    tpt.invalidate(invalid, PdId(1)).unwrap();
    assert_eq!(
        rq.push_resolved(&RecvWr::new(7, sge(invalid)), &tpt, PdId(1)),
        Err(WcStatus::LocalProtectionError)
    );
    let ids: Vec<u64> = rq.drain().map(|w| w.wr_id).collect();
    assert_eq!(ids, [0, 1, 2, 4, 6]);
    let again = tpt.insert(entry).unwrap();
    rq.push_resolved(&RecvWr::new(8, sge(again)), &tpt, PdId(1))
        .unwrap();
    let Grant::Buffer(w) = rq.take(QpId(1), false) else {
        panic!("the receive is there");
    };
    assert_eq!(w.wr_id, 8);
    assert_eq!(w.total, 16);
    assert_eq!(w.sges.as_slice(), &[(RegionId(3), 0x10, 16)]);
}

/// A ring of different buffers keeps no list (each post would replace it unused);
/// one list posted twice in a row is kept and serves the reposts after it, and every
/// post, kept or not, resolves to its own buffer.
#[test]
fn only_a_list_posted_twice_in_a_row_is_kept() {
    let tpt = Tpt::new();
    let key = tpt
        .insert(TptEntry {
            pd: PdId(1),
            key: 1,
            base: 0x1000,
            len: 0x1000,
            access: Access::LOCAL_WRITE,
            region: RegionId(3),
            valid: true,
        })
        .unwrap();
    let slot = |i: u64| Sge {
        addr: 0x1000 + 64 * i,
        len: 64,
        lkey: key,
    };
    let mut rq = Rq::new(64);
    for i in 0..32 {
        rq.push_resolved(&RecvWr::new(i, slot(i % 16)), &tpt, PdId(1))
            .unwrap();
        assert!(rq.last.is_none(), "post {i} of a ring kept its list");
    }
    for i in 32..35 {
        rq.push_resolved(&RecvWr::new(i, slot(5)), &tpt, PdId(1))
            .unwrap();
    }
    let kept = rq.last.as_ref().expect("the list posted twice is kept");
    assert_eq!(&kept.sgl[..], &[slot(5)]);
    assert_eq!(kept.sges.as_slice(), &[(RegionId(3), 5 * 64, 64)]);
    let placed: Vec<(u64, u64)> = rq.drain().map(|w| (w.wr_id, w.sges[0].1)).collect();
    let expected: Vec<(u64, u64)> = (0..35)
        .map(|i| (i, 64 * if i < 32 { i % 16 } else { 5 }))
        .collect();
    assert_eq!(placed, expected);
}

/// A receive resolved in place lands whole; one whose second SGE fails the TPT
/// check leaves no entry behind (no half-built receive for the next Send).
#[test]
fn a_receive_that_fails_its_check_leaves_no_entry() {
    let tpt = Tpt::new();
    let mut entry = TptEntry {
        pd: PdId(1),
        key: 1,
        base: 0x1000,
        len: 100,
        access: Access::LOCAL_WRITE,
        region: RegionId(3),
        valid: true,
    };
    let rw = tpt.insert(entry).unwrap();
    entry.access = Access::empty();
    let ro = tpt.insert(entry).unwrap();
    let sge = |lkey, addr, len| Sge { addr, len, lkey };
    let mut rq = Rq::new(4);
    rq.push_resolved(
        &RecvWr::new(7, [sge(rw, 0x1000, 40), sge(rw, 0x1028, 60)]),
        &tpt,
        PdId(1),
    )
    .unwrap();
    assert_eq!(
        rq.push_resolved(
            &RecvWr::new(8, [sge(rw, 0x1000, 8), sge(ro, 0x1000, 8)]),
            &tpt,
            PdId(1),
        ),
        Err(WcStatus::LocalProtectionError)
    );
    assert_eq!(rq.len(), 1);
    let Grant::Buffer(w) = rq.take(QpId(1), false) else {
        panic!("the first receive is there");
    };
    assert_eq!(w.wr_id, 7);
    assert_eq!(w.total, 100);
    assert_eq!(
        w.sges.as_slice(),
        &[(RegionId(3), 0, 40), (RegionId(3), 0x28, 60)]
    );
    assert_eq!(rq.take(QpId(1), false), Grant::Empty);
}

/// Receives of one SGE (in the ring), of none and of several (in the lists beside
/// it) keep their own SGEs whichever way they leave the queue: completed at the
/// front, taken out of the middle, removed as too long, or drained; and the lists
/// stay in step for the entries posted after a drain.
#[test]
fn every_receive_keeps_its_own_sges_however_it_leaves() {
    let tpt = Tpt::new();
    let key = tpt
        .insert(TptEntry {
            pd: PdId(1),
            key: 1,
            base: 0x1000,
            len: 0x1000,
            access: Access::LOCAL_WRITE,
            region: RegionId(3),
            valid: true,
        })
        .unwrap();
    let sge = |at: u64, len| Sge {
        addr: 0x1000 + at,
        len,
        lkey: key,
    };
    let spans = |wr: &RecvWr| -> Vec<(RegionId, u64, u32)> {
        wr.sgl
            .iter()
            .map(|s| (RegionId(3), s.addr - 0x1000, s.len))
            .collect()
    };
    let wrs = [
        RecvWr::new(1, sge(0, 10)),
        RecvWr::new(2, [sge(16, 20), sge(64, 30)]),
        RecvWr::new(3, Sgl::new()),
        RecvWr::new(4, [sge(128, 1), sge(256, 2), sge(512, 3)]),
        RecvWr::new(5, sge(1024, 40)),
        RecvWr::new(6, [sge(2048, 5), sge(2100, 6)]),
    ];
    let mut rq = Rq::new(16);
    for wr in &wrs[..5] {
        rq.push_resolved(wr, &tpt, PdId(1)).unwrap();
    }
    let seen = |v: RecvView<'_>| (v.total, v.sges.iter().copied().collect::<Vec<_>>());
    assert_eq!(seen(rq.front().unwrap()), (10, spans(&wrs[0])));
    assert_eq!(seen(rq.bind_through(1).unwrap()), (50, spans(&wrs[1])));
    assert_eq!(rq.complete_oldest_bound(), Some(1));
    // The next free one, out of the middle (the bound one stays).
    let Grant::Buffer(w) = rq.take(QpId(1), false) else {
        panic!("the third receive is there");
    };
    assert_eq!((w.wr_id, w.total, w.sges.len()), (3, 0, 0));
    assert_eq!(rq.complete_front(), Some(2));
    assert_eq!(seen(rq.bind_through(0).unwrap()), (6, spans(&wrs[3])));
    let w = rq.remove_oldest_bound().unwrap();
    assert_eq!((w.wr_id, w.sges.to_vec()), (4, spans(&wrs[3])));
    // Their lists went with them (the one taken out of the middle too).
    assert!(rq.lists.is_empty(), "{} lists left behind", rq.lists.len());
    rq.push_resolved(&wrs[5], &tpt, PdId(1)).unwrap();
    assert_eq!(seen(rq.front().unwrap()), (40, spans(&wrs[4])));
    let left: Vec<(u64, Vec<_>)> = rq.drain().map(|w| (w.wr_id, w.sges.to_vec())).collect();
    assert_eq!(left, [(5, spans(&wrs[4])), (6, spans(&wrs[5]))]);
    rq.push_resolved(&wrs[3], &tpt, PdId(1)).unwrap();
    rq.push_resolved(&wrs[1], &tpt, PdId(1)).unwrap();
    assert_eq!(seen(rq.bind_through(1).unwrap()), (50, spans(&wrs[1])));
    assert_eq!(seen(rq.front().unwrap()), (6, spans(&wrs[3])));
}

/// After a list of one SGE is kept, a repost that differs from it in any one field
/// (address, length, key) is resolved afresh: each entry holds its own request's
/// span and total, never the kept one's.
#[test]
fn a_repost_that_differs_from_the_kept_sge_in_one_field_is_resolved_afresh() {
    let tpt = Tpt::new();
    let entry = |region| TptEntry {
        pd: PdId(1),
        key: 1,
        base: 0x1000,
        len: 0x100,
        access: Access::LOCAL_WRITE,
        region: RegionId(region),
        valid: true,
    };
    let a = tpt.insert(entry(3)).unwrap();
    let b = tpt.insert(entry(4)).unwrap();
    let kept = Sge {
        addr: 0x1010,
        len: 16,
        lkey: a,
    };
    let others = [
        Sge {
            addr: 0x1020,
            ..kept
        },
        Sge { len: 24, ..kept },
        Sge { lkey: b, ..kept },
    ];
    let mut rq = Rq::new(16);
    let mut want = Vec::new();
    for (id, other) in others.iter().enumerate() {
        let id = id as u64 * 3;
        for (n, s) in [kept, kept, *other].into_iter().enumerate() {
            rq.push_resolved(&RecvWr::new(id + n as u64, s), &tpt, PdId(1))
                .unwrap();
            let region = if s.lkey == a { 3 } else { 4 };
            want.push((id + n as u64, RegionId(region), s.addr - 0x1000, s.len));
        }
    }
    let got: Vec<_> = rq
        .drain()
        .map(|w| {
            assert_eq!(w.sges.len(), 1);
            assert_eq!(w.total, u64::from(w.sges[0].2));
            (w.wr_id, w.sges[0].0, w.sges[0].1, w.sges[0].2)
        })
        .collect();
    assert_eq!(got, want);
}
