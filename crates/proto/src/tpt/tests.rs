use super::*;

/// An entry of PD `pd` with `access`: 100 octets at 0x1000, key 0x5a, region 7.
pub(super) fn entry(pd: u32, access: Access) -> TptEntry {
    TptEntry {
        pd: PdId(pd),
        key: 0x5a,
        base: 0x1000,
        len: 100,
        access,
        region: RegionId(7),
        valid: true,
    }
}

const TAGGED: RemoteAccess = RemoteAccess::TaggedPlacement;

/// The entry a thread remembers is used only while nothing changed: every change
/// (invalidate, revalidate, remove, a registration) is seen by the next check on
/// this thread and on another, and two tables never share a remembered entry.
#[test]
fn a_remembered_entry_never_outlives_a_change() {
    let t = Tpt::new();
    let s = t.insert(entry(1, Access::REMOTE_WRITE)).unwrap();
    let ok = |t: &Tpt, s| t.check_remote(s, 0x1000, 8, Access::REMOTE_WRITE, PdId(1), TAGGED);
    assert!(ok(&t, s).is_ok());
    assert!(ok(&t, s).is_ok(), "the remembered entry");
    t.invalidate(s, PdId(1)).unwrap();
    assert!(ok(&t, s).is_err(), "invalidated");
    let s2 = t.revalidate(s, 0x77).unwrap();
    assert!(ok(&t, s).is_err(), "the old key stays invalid");
    assert!(ok(&t, s2).is_ok());
    // Another thread remembers the entry; a change here reaches its next check.
    let tr = &t;
    std::thread::scope(|sc| {
        let (go, ready) = std::sync::mpsc::channel::<()>();
        let (done, changed) = std::sync::mpsc::channel::<()>();
        let h = sc.spawn(move || {
            assert!(ok(tr, s2).is_ok());
            go.send(()).unwrap();
            changed.recv().unwrap();
            ok(tr, s2)
        });
        ready.recv().unwrap();
        assert!(t.remove(s2).is_some());
        done.send(()).unwrap();
        assert!(
            h.join().unwrap().is_err(),
            "removed, seen by the other thread"
        );
    });
    assert!(ok(&t, s2).is_err(), "removed");
    // A second table with an entry under the same STag has its own.
    let u = Tpt::new();
    let a = u.insert(entry(1, Access::REMOTE_READ)).unwrap();
    let b = Tpt::new();
    assert_eq!(b.insert(entry(1, Access::REMOTE_WRITE)).unwrap(), a);
    assert!(ok(&b, a).is_ok());
    assert!(ok(&u, a).is_err(), "the other table's rights");
    assert!(ok(&b, a).is_ok());
}

/// A thread that checks two STags in turn (a ping-pong side: its source region on
/// each post, its landing region on each FPDU) reads the table once for each, then
/// takes both from what it remembers; a change to either is still seen at once.
#[test]
fn two_stags_in_turn_are_both_remembered() {
    let t = Tpt::new();
    let src = t.insert(entry(1, Access::LOCAL_WRITE)).unwrap();
    let land = t.insert(entry(1, Access::REMOTE_WRITE)).unwrap();
    let reads = || TABLE_READS.with(std::cell::Cell::get);
    let ok = |s, a| t.check_remote(s, 0x1000, 8, a, PdId(1), TAGGED).is_ok();
    let before = reads();
    for _ in 0..10 {
        assert!(t.get(src).is_some());
        assert!(ok(land, Access::REMOTE_WRITE));
    }
    assert_eq!(reads() - before, 2, "one table read per STag");
    // The older of the two is invalidated: its next check sees it.
    t.invalidate(src, PdId(1)).unwrap();
    assert!(!t.get(src).is_some_and(|e| e.valid), "invalidated");
    assert!(ok(land, Access::REMOTE_WRITE));
    t.invalidate(land, PdId(1)).unwrap();
    assert!(!ok(land, Access::REMOTE_WRITE), "invalidated");
    // A third STag pushes out the oldest remembered one, which is read again.
    let third = t.insert(entry(1, Access::REMOTE_READ)).unwrap();
    assert!(t.get(src).is_some());
    assert!(t.get(land).is_some());
    assert!(t.get(third).is_some());
    let before = reads();
    assert!(t.get(land).is_some());
    assert!(t.get(third).is_some());
    assert_eq!(reads() - before, 0, "the last two are remembered");
    assert!(t.get(src).is_some());
    assert_eq!(reads() - before, 1, "the oldest was forgotten");
}

#[test]
fn remote_checks_give_exact_causes() {
    let t = Tpt::new();
    let s = t.insert(entry(1, Access::REMOTE_WRITE)).unwrap();
    assert_eq!(s & 0xff, 0x5a);
    assert_eq!(
        t.check_remote(s, 0x1000, 100, Access::REMOTE_WRITE, PdId(1), TAGGED),
        Ok(Target {
            region: RegionId(7),
            offset: 0
        })
    );
    let ddp = |c| TerminateCause::new(Layer::Ddp, 1, c);
    let rdmap = |c| TerminateCause::new(Layer::Rdmap, 1, c);
    // Unknown index, wrong key.
    assert_eq!(
        t.check_remote(s + 0x100, 0x1000, 1, Access::REMOTE_WRITE, PdId(1), TAGGED),
        Err(ddp(0))
    );
    assert_eq!(
        t.check_remote(s ^ 1, 0x1000, 1, Access::REMOTE_WRITE, PdId(1), TAGGED),
        Err(ddp(0))
    );
    // Out of bounds: past the end, before the start, overflowing.
    assert_eq!(
        t.check_remote(s, 0x1000, 101, Access::REMOTE_WRITE, PdId(1), TAGGED),
        Err(ddp(1))
    );
    assert_eq!(
        t.check_remote(s, 0xfff, 1, Access::REMOTE_WRITE, PdId(1), TAGGED),
        Err(ddp(1))
    );
    // An access whose last octet would lie beyond 2^64 - 1 is a TO wrap (DDP
    // 1/0x03), even one that ends exactly at the top is only out of bounds.
    assert_eq!(
        t.check_remote(s, u64::MAX, 2, Access::REMOTE_WRITE, PdId(1), TAGGED),
        Err(ddp(3))
    );
    assert_eq!(
        t.check_remote(s, u64::MAX - 9, 11, Access::REMOTE_WRITE, PdId(1), TAGGED),
        Err(ddp(3))
    );
    assert_eq!(
        t.check_remote(s, u64::MAX - 9, 10, Access::REMOTE_WRITE, PdId(1), TAGGED),
        Err(ddp(1))
    );
    // Wrong PD, missing right.
    assert_eq!(
        t.check_remote(s, 0x1000, 1, Access::REMOTE_WRITE, PdId(2), TAGGED),
        Err(ddp(2))
    );
    assert_eq!(
        t.check_remote(s, 0x1000, 1, Access::REMOTE_READ, PdId(1), TAGGED),
        Err(rdmap(2))
    );
    // The same faults on a Read source are RDMAP protection errors.
    let rs = RemoteAccess::ReadSource;
    assert_eq!(
        t.check_remote(s ^ 1, 0x1000, 1, Access::REMOTE_READ, PdId(1), rs),
        Err(rdmap(0))
    );
    assert_eq!(
        t.check_remote(s, 0x1000, 1, Access::REMOTE_READ, PdId(1), rs),
        Err(rdmap(2))
    );
    assert_eq!(
        t.check_remote(s, 0x1000, 101, Access::REMOTE_WRITE, PdId(1), rs),
        Err(rdmap(1))
    );
    assert_eq!(
        t.check_remote(s, 0x1000, 1, Access::REMOTE_WRITE, PdId(3), rs),
        Err(rdmap(3))
    );
    assert_eq!(
        t.check_remote(s, (1 << 63) + 1, 1 << 63, Access::REMOTE_WRITE, PdId(1), rs),
        Err(rdmap(4)),
        "a Read source whose TO wraps: RDMAP 1/0x04"
    );
    // Invalidated. A peer may not (the region was not registered for it); we may.
    assert_eq!(
        t.invalidate_remote(s, PdId(1)),
        Err(InvalidateError::NotRemotelyInvalidatable)
    );
    assert!(t.get(s).unwrap().valid);
    assert_eq!(t.invalidate(s, PdId(2)), Err(InvalidateError::WrongPd));
    assert_eq!(t.invalidate(s, PdId(1)), Ok(()));
    assert_eq!(
        t.invalidate(s, PdId(1)),
        Err(InvalidateError::AlreadyInvalid)
    );
    assert_eq!(
        t.check_remote(s, 0x1000, 1, Access::REMOTE_WRITE, PdId(1), TAGGED),
        Err(ddp(0))
    );
    let s2 = t.revalidate(s, 0x77).unwrap();
    assert!(
        t.check_remote(s2, 0x1000, 1, Access::REMOTE_WRITE, PdId(1), TAGGED)
            .is_ok()
    );
    assert!(
        t.check_remote(s, 0x1000, 1, Access::REMOTE_WRITE, PdId(1), TAGGED)
            .is_err()
    );
}

#[test]
fn local_checks_and_reuse() {
    let t = Tpt::new();
    let s = t.insert(entry(1, Access::LOCAL_WRITE)).unwrap();
    assert!(
        t.check_local(s, 0x1010, 10, Access::LOCAL_WRITE, PdId(1))
            .is_ok()
    );
    assert!(
        t.check_local(s, 0x1010, 10, Access::empty(), PdId(1))
            .is_ok()
    );
    assert_eq!(
        t.check_local(s, 0x1010, 100, Access::LOCAL_WRITE, PdId(1)),
        Err(WcStatus::LocalProtectionError)
    );
    assert_eq!(
        t.check_local(s, 0x1010, 1, Access::REMOTE_READ, PdId(1)),
        Err(WcStatus::LocalProtectionError)
    );
    assert_eq!(
        t.check_local(s, 0x1010, 1, Access::empty(), PdId(9)),
        Err(WcStatus::LocalProtectionError)
    );
    assert!(t.remove(s).is_some());
    assert!(t.get(s).is_none());
    assert!(t.check_local(0, 0, 0, Access::empty(), PdId(1)).is_err());
    let again = t.insert(entry(1, Access::empty())).unwrap();
    assert_eq!(again >> 8, s >> 8, "freed index is reused");
    assert_eq!(t.len(), 1);
}

#[test]
fn counts_and_revalidation_rules() {
    let t = Tpt::new();
    assert!(t.is_empty());
    assert_eq!(t.len(), 0);
    let a = t.insert(entry(1, Access::REMOTE_READ)).unwrap();
    let b = t.insert(entry(1, Access::REMOTE_READ)).unwrap();
    assert_eq!((t.len(), t.is_empty()), (2, false));
    assert_ne!(a >> 8, b >> 8, "distinct indices");
    // A valid STag is not revalidated; a stale key is refused; an invalidated STag
    // comes back under the new key only.
    assert_eq!(t.revalidate(a, 0x77), None, "still valid");
    t.invalidate(a, PdId(1)).unwrap();
    assert_eq!(t.revalidate(a ^ 0x01, 0x77), None, "stale key");
    let a2 = t.revalidate(a, 0x77).expect("invalidated STag revalidates");
    assert_eq!(a2, (a & !0xff) | 0x77);
    assert!(t.get(a2).is_some_and(|e| e.valid));
    assert!(t.get(a).is_none(), "the old key no longer names the region");
    t.remove(b);
    assert_eq!(t.len(), 1);
}

#[test]
fn remote_invalidation_needs_the_flag_and_a_remote_right() {
    let t = Tpt::new();
    let reg = |access| t.insert(entry(1, access)).unwrap();
    let local = reg(Access::LOCAL_WRITE);
    let flag_only = reg(Access::LOCAL_WRITE | Access::REMOTE_INVALIDATE);
    let remote_only = reg(Access::REMOTE_WRITE);
    for s in [local, flag_only, remote_only] {
        assert_eq!(
            t.invalidate_remote(s, PdId(1)),
            Err(InvalidateError::NotRemotelyInvalidatable),
            "{s:#x}"
        );
        assert!(t.get(s).unwrap().valid, "{s:#x} untouched");
    }
    for access in [Access::REMOTE_WRITE, Access::REMOTE_READ] {
        let s = reg(access | Access::REMOTE_INVALIDATE);
        assert_eq!(
            t.invalidate_remote(s, PdId(2)),
            Err(InvalidateError::WrongPd)
        );
        assert_eq!(t.invalidate_remote(s, PdId(1)), Ok(()));
        assert_eq!(
            t.invalidate_remote(s, PdId(1)),
            Err(InvalidateError::AlreadyInvalid)
        );
    }
    // Our own invalidate takes any region of the PD.
    assert_eq!(t.invalidate(local, PdId(1)), Ok(()));
}

#[test]
fn a_reused_index_or_a_revalidated_stag_never_repeats_a_key() {
    let t = Tpt::new();
    let a = t.insert(entry(1, Access::REMOTE_WRITE)).unwrap();
    t.remove(a);
    // The same key asked for again at the same index: the next key is used.
    let b = t.insert(entry(1, Access::REMOTE_WRITE)).unwrap();
    assert_eq!(b >> 8, a >> 8, "the index is reused");
    assert_eq!(stag_key(b), 0x5b);
    assert!(t.get(a).is_none(), "the old STag names nothing");
    // A different key is kept as asked.
    t.remove(b);
    let mut e = entry(1, Access::REMOTE_WRITE);
    e.key = 0x10;
    assert_eq!(stag_key(t.insert(e).unwrap()), 0x10);
    // Revalidation with the old key: the next one.
    let c = t.insert(entry(1, Access::REMOTE_WRITE)).unwrap();
    t.invalidate(c, PdId(1)).unwrap();
    let c2 = t.revalidate(c, stag_key(c)).unwrap();
    assert_ne!(c2, c);
    assert!(t.get(c).is_none());
}

#[test]
fn shards_hand_out_distinct_indices_and_find_each_entry() {
    let t = Tpt::new();
    let stags: Vec<STag> = (0..100u32)
        .map(|i| {
            let mut e = entry(1, Access::REMOTE_WRITE);
            e.region = RegionId(i);
            t.insert(e).unwrap()
        })
        .collect();
    let mut indices: Vec<u32> = stags.iter().map(|s| s >> 8).collect();
    indices.sort_unstable();
    indices.dedup();
    assert_eq!(indices.len(), 100, "distinct indices");
    assert!(indices[0] >= 1, "index 0 is never handed out");
    assert_eq!(t.len(), 100);
    for (i, s) in stags.iter().enumerate() {
        assert_eq!(t.get(*s).map(|e| e.region), Some(RegionId(i as u32)));
    }
    assert!(t.get(0).is_none());
}
