//! A run of posted requests remembers the last local key it checked: a batch of small
//! Sends or Writes from one buffer names one lkey over and over, and each check went
//! through the thread's remembered entries ([`Tpt::get_with`]: a call, a thread-local
//! borrow and a search, about 60 instructions a message). The memo answers with one
//! atomic load and a compare while the table has not changed; bounds, rights and PD
//! are still checked per request, so every answer is the one [`Tpt::check_local`]
//! gives.

use super::{Target, Tpt, TptEntry, local_target};
use crate::verbs::{Access, PdId, STag, WcStatus};
use std::sync::atomic::Ordering;

/// The last local key a run checked: (STag, the table's epoch read before the
/// look-up, its entry). Kept for one run only (one call into the post path, on one
/// table).
#[derive(Debug, Default, Clone, Copy)]
pub struct LocalKeyMemo {
    last: Option<(STag, u64, TptEntry)>,
}

impl Tpt {
    /// [`Tpt::check_local`], answered from `memo` when it holds `lkey` and no entry
    /// of the table changed since it was filled (the epoch, read before each look-up,
    /// is the same); otherwise looked up as `check_local` looks it up and remembered.
    #[inline(always)]
    pub fn check_local_memo(
        &self,
        memo: &mut LocalKeyMemo,
        lkey: STag,
        addr: u64,
        len: u64,
        need: Access,
        pd: PdId,
    ) -> Result<Target, WcStatus> {
        let epoch = self.epoch.load(Ordering::Acquire);
        let e = match &memo.last {
            Some((stag, seen, e)) if *stag == lkey && *seen == epoch => e,
            _ => self.memo_miss(memo, lkey, epoch)?,
        };
        local_target(e, addr, len, need, pd).ok_or(WcStatus::LocalProtectionError)
    }

    /// The look-up behind a memo that does not answer: remembered with `epoch`, read
    /// before it, so a change made meanwhile makes the next check look again.
    #[inline(never)]
    fn memo_miss<'m>(
        &self,
        memo: &'m mut LocalKeyMemo,
        lkey: STag,
        epoch: u64,
    ) -> Result<&'m TptEntry, WcStatus> {
        let e = self.get_with(lkey, |e| Some(*e));
        memo.last = e.map(|e| (lkey, epoch, e));
        memo.last
            .as_ref()
            .map(|(_, _, e)| e)
            .ok_or(WcStatus::LocalProtectionError)
    }
}

/// A [`LocalKeyMemo`] kept across calls (a QP's single posts, which name the same
/// buffer's lkey post after post), with the table it was filled from: an answer is
/// only taken from the table that gave it, while that table's epoch is the same.
///
/// It also keeps the last whole answer ([`Tpt::check_local_kept`]): a ping-pong posts
/// the same SGE every time, and the entry's checks (valid, PD, rights, bounds) give
/// the same target for the same request while no entry of the table changed.
#[derive(Debug, Default, Clone, Copy)]
pub struct KeptKeyMemo {
    table: u64,
    memo: LocalKeyMemo,
    answer: Option<KeptAnswer>,
}

/// A request's local check and its answer, with the table's epoch read before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct KeptAnswer {
    lkey: STag,
    addr: u64,
    len: u64,
    need: Access,
    pd: PdId,
    epoch: u64,
    target: Target,
}

impl KeptKeyMemo {
    /// The memo for a check against `tpt`: emptied first if it was filled from another
    /// table.
    #[inline(always)]
    pub fn for_table(&mut self, tpt: &Tpt) -> &mut LocalKeyMemo {
        if self.table != tpt.id {
            self.table = tpt.id;
            self.memo = LocalKeyMemo::default();
            self.answer = None;
        }
        &mut self.memo
    }
}

impl Tpt {
    /// [`Tpt::check_local`] through a memo kept across posts: the last successful
    /// answer is given again for the same request (key, address, length, rights, PD)
    /// to this table while its epoch is the same (no entry changed since the answer's
    /// look-up); otherwise checked as [`Tpt::check_local_memo`] checks it. Refusals
    /// are not remembered.
    #[inline(always)]
    pub fn check_local_kept(
        &self,
        kept: &mut KeptKeyMemo,
        lkey: STag,
        addr: u64,
        len: u64,
        need: Access,
        pd: PdId,
    ) -> Result<Target, WcStatus> {
        let epoch = self.epoch.load(Ordering::Acquire);
        if let Some(a) = &kept.answer
            && kept.table == self.id
            && a.epoch == epoch
            && a.lkey == lkey
            && a.addr == addr
            && a.len == len
            && a.need == need
            && a.pd == pd
        {
            return Ok(a.target);
        }
        self.kept_miss(kept, lkey, addr, len, need, pd, epoch)
    }

    /// The check behind a kept answer that does not hold: made through the key memo,
    /// and remembered with `epoch` (read before it) if it succeeds.
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn kept_miss(
        &self,
        kept: &mut KeptKeyMemo,
        lkey: STag,
        addr: u64,
        len: u64,
        need: Access,
        pd: PdId,
        epoch: u64,
    ) -> Result<Target, WcStatus> {
        let r = self.check_local_memo(kept.for_table(self), lkey, addr, len, need, pd);
        kept.answer = r.ok().map(|target| KeptAnswer {
            lkey,
            addr,
            len,
            need,
            pd,
            epoch,
            target,
        });
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tpt::tests::entry;

    /// The memo gives `check_local`'s answer for every request of a run: bounds,
    /// rights and PD per request, another key, and a change to the table in the
    /// middle of the run (seen by the next check).
    #[test]
    fn a_memo_answers_as_check_local_and_forgets_on_a_change() {
        let t = Tpt::new();
        let s = t.insert(entry(1, Access::LOCAL_WRITE)).unwrap();
        let other = t.insert(entry(1, Access::empty())).unwrap();
        let mut memo = LocalKeyMemo::default();
        let cases = [
            (s, 0x1000, 8, Access::empty(), 1),
            (s, 0x1000 + 92, 8, Access::empty(), 1),
            (s, 0x1000 + 93, 8, Access::empty(), 1),
            (s, 0xfff, 8, Access::empty(), 1),
            (s, 0x1000, 8, Access::LOCAL_WRITE, 1),
            (s, 0x1000, 8, Access::empty(), 2),
            (other, 0x1010, 4, Access::LOCAL_WRITE, 1),
            (other, 0x1010, 4, Access::empty(), 1),
            (s, 0x1004, 0, Access::empty(), 1),
            (0x9999_9900, 0x1000, 8, Access::empty(), 1),
            (s, 0x1000, u64::MAX, Access::empty(), 1),
        ];
        for (lkey, addr, len, need, pd) in cases {
            assert_eq!(
                t.check_local_memo(&mut memo, lkey, addr, len, need, PdId(pd)),
                t.check_local(lkey, addr, len, need, PdId(pd)),
                "{lkey:?} {addr:#x} {len} {need:?} pd {pd}"
            );
        }
        let ok = |t: &Tpt, memo: &mut LocalKeyMemo| {
            t.check_local_memo(memo, s, 0x1000, 8, Access::empty(), PdId(1))
        };
        assert!(ok(&t, &mut memo).is_ok());
        assert!(ok(&t, &mut memo).is_ok(), "from the memo");
        t.invalidate(s, PdId(1)).unwrap();
        assert_eq!(
            ok(&t, &mut memo),
            Err(WcStatus::LocalProtectionError),
            "invalidated in the middle of the run"
        );
        let s2 = t.revalidate(s, 0x77).unwrap();
        assert!(ok(&t, &mut memo).is_err(), "the old key stays invalid");
        assert!(
            t.check_local_memo(&mut memo, s2, 0x1000, 8, Access::empty(), PdId(1))
                .is_ok()
        );
        assert!(t.remove(s2).is_some());
        assert!(
            t.check_local_memo(&mut memo, s2, 0x1000, 8, Access::empty(), PdId(1))
                .is_err(),
            "removed in the middle of the run"
        );
    }

    /// A memo kept across posts answers only for the table it was filled from: the
    /// same STag in another table (another device) is looked up there.
    #[test]
    fn a_kept_memo_is_not_taken_for_another_table() {
        let a = Tpt::new();
        let b = Tpt::new();
        let s = a.insert(entry(1, Access::empty())).unwrap();
        let mut e = entry(1, Access::empty());
        e.base = 0x8000;
        assert_eq!(b.insert(e).unwrap(), s, "both tables' first STag");
        let mut kept = KeptKeyMemo::default();
        let mut check = |t: &Tpt| {
            let memo = kept.for_table(t);
            t.check_local_memo(memo, s, 0x1000, 8, Access::empty(), PdId(1))
        };
        assert!(check(&a).is_ok());
        assert_eq!(
            check(&b),
            Err(WcStatus::LocalProtectionError),
            "0x1000 is outside b's entry"
        );
        assert!(check(&a).is_ok());
    }

    /// A kept answer is the one `check_local` gives, request after request: the same
    /// request again (from the answer), each field of it changed in turn, a refusal
    /// (not remembered), and every change to the table (invalidate, a registration,
    /// remove) seen by the next check; another table is never answered from it.
    #[test]
    fn a_kept_answer_is_check_locals_and_never_outlives_a_change() {
        let t = Tpt::new();
        let s = t.insert(entry(1, Access::LOCAL_WRITE)).unwrap();
        let other = t.insert(entry(1, Access::empty())).unwrap();
        let mut kept = KeptKeyMemo::default();
        let same = (s, 0x1000 + 8, 8, Access::empty(), 1);
        let cases = [
            same,
            same,
            (other, 0x1000 + 8, 8, Access::empty(), 1),
            same,
            (s, 0x1000 + 9, 8, Access::empty(), 1),
            (s, 0x1000 + 8, 93, Access::empty(), 1),
            same,
            (s, 0x1000 + 8, 8, Access::REMOTE_READ, 1),
            same,
            (s, 0x1000 + 8, 8, Access::empty(), 2),
            same,
            (0x9999_9900, 0x1000, 8, Access::empty(), 1),
            same,
        ];
        for (lkey, addr, len, need, pd) in cases {
            assert_eq!(
                t.check_local_kept(&mut kept, lkey, addr, len, need, PdId(pd)),
                t.check_local(lkey, addr, len, need, PdId(pd)),
                "{lkey:?} {addr:#x} {len} {need:?} pd {pd}"
            );
        }
        let ok = |t: &Tpt, kept: &mut KeptKeyMemo, s| {
            t.check_local_kept(kept, s, 0x1000 + 8, 8, Access::empty(), PdId(1))
        };
        assert!(ok(&t, &mut kept, s).is_ok(), "from the kept answer");
        t.invalidate(s, PdId(1)).unwrap();
        assert_eq!(
            ok(&t, &mut kept, s),
            Err(WcStatus::LocalProtectionError),
            "invalidated after the answer"
        );
        let s2 = t.revalidate(s, 0x77).unwrap();
        assert!(ok(&t, &mut kept, s).is_err(), "the old key stays invalid");
        assert!(ok(&t, &mut kept, s2).is_ok());
        assert!(t.remove(s2).is_some());
        assert_eq!(
            ok(&t, &mut kept, s2),
            Err(WcStatus::LocalProtectionError),
            "removed after the answer"
        );
        let b = Tpt::new();
        let mut e = entry(1, Access::empty());
        e.base = 0x8000;
        let sb = b.insert(e).unwrap();
        let ta = Tpt::new();
        assert_eq!(
            ta.insert(entry(1, Access::empty())).unwrap(),
            sb,
            "same STag"
        );
        assert!(ok(&ta, &mut kept, sb).is_ok());
        assert_eq!(
            ok(&b, &mut kept, sb),
            Err(WcStatus::LocalProtectionError),
            "0x1008 is outside b's entry: not answered from a's"
        );
    }
}
