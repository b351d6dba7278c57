//! A QP's receive side remembers the last remote key a placement checked: a stream of
//! small Writes names one STag over and over (a ping-pong lands every message in one
//! region), and each check went through the thread's remembered entries
//! ([`Tpt::get_with`]: the thread-local's state, a borrow, a search of two, the entry
//! copied out; about 45 instructions an FPDU). The memo answers with one atomic load
//! and three compares while the table has not changed; validity, PD, rights, wrap and
//! bounds are still checked per FPDU, so every answer, Terminate cause included, is the
//! one [`Tpt::check_remote`] gives. Any change to the table (a deregistration, an
//! invalidation by a Send with Invalidate or a local request, a registration) advances
//! its epoch, and the next FPDU looks the STag up again.

use super::{RemoteAccess, Target, Tpt, TptEntry, remote_target};
use crate::verbs::{Access, PdId, STag};
use softrnic_wire::terminate::TerminateCause;
use std::sync::atomic::Ordering;

/// The last remote key checked: (the table's number, its epoch read before the
/// look-up, the STag, its entry). Kept across FPDUs; names its table, so it never
/// answers for another.
#[derive(Debug, Default, Clone, Copy)]
pub struct RemoteKeyMemo {
    last: Option<(u64, u64, STag, TptEntry)>,
}

impl Tpt {
    /// [`Tpt::check_remote`], answered from `memo` when it holds `stag` of this table
    /// and no entry changed since it was filled (the epoch, read before each look-up,
    /// is the same); otherwise looked up as `check_remote` looks it up and remembered.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub fn check_remote_memo(
        &self,
        memo: &mut RemoteKeyMemo,
        stag: STag,
        to: u64,
        len: u64,
        need: Access,
        pd: PdId,
        kind: RemoteAccess,
    ) -> Result<Target, TerminateCause> {
        let epoch = self.epoch.load(Ordering::Acquire);
        match &memo.last {
            Some((table, seen, s, e)) if *s == stag && *seen == epoch && *table == self.id => {
                remote_target(Some(e), to, len, need, pd, kind)
            }
            _ => self.remote_memo_miss(memo, stag, epoch, to, len, need, pd, kind),
        }
    }

    /// The look-up behind a memo that does not answer: remembered with `epoch`, read
    /// before it, so a change made meanwhile makes the next check look again. An STag
    /// the table does not know is not remembered.
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn remote_memo_miss(
        &self,
        memo: &mut RemoteKeyMemo,
        stag: STag,
        epoch: u64,
        to: u64,
        len: u64,
        need: Access,
        pd: PdId,
        kind: RemoteAccess,
    ) -> Result<Target, TerminateCause> {
        let e = self.get(stag);
        if let Some(e) = e {
            memo.last = Some((self.id, epoch, stag, e));
        }
        remote_target(e.as_ref(), to, len, need, pd, kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tpt::tests::entry;

    /// Every answer is `check_remote`'s, cause included: bounds, wrap, rights and PD
    /// per FPDU, another key, an unknown one, another table, and changes to the table
    /// between FPDUs (an invalidation, a revalidation under a new key, a removal).
    #[test]
    fn a_remote_memo_answers_as_check_remote_and_forgets_on_a_change() {
        let t = Tpt::new();
        let other_table = Tpt::new();
        let s = t.insert(entry(1, Access::REMOTE_WRITE)).unwrap();
        let read_only = t.insert(entry(1, Access::REMOTE_READ)).unwrap();
        let there = other_table.insert(entry(2, Access::REMOTE_WRITE)).unwrap();
        // Two changes each: the tables' epochs are equal too.
        other_table.insert(entry(2, Access::REMOTE_READ)).unwrap();
        let w = Access::REMOTE_WRITE;
        let place = RemoteAccess::TaggedPlacement;
        let mut memo = RemoteKeyMemo::default();
        let cases = [
            (s, 0x1000, 8, w, 1, place),
            (s, 0x1000 + 92, 8, w, 1, place),
            (s, 0x1000 + 93, 8, w, 1, place),
            (s, 0xfff, 8, w, 1, place),
            (s, u64::MAX - 3, 8, w, 1, place),
            (
                s,
                0x1000,
                8,
                Access::REMOTE_READ,
                1,
                RemoteAccess::ReadSource,
            ),
            (s, 0x1000, 8, w, 2, place),
            (read_only, 0x1010, 4, w, 1, place),
            (
                read_only,
                0x1010,
                4,
                Access::REMOTE_READ,
                1,
                RemoteAccess::ReadSource,
            ),
            (s, 0x1004, 0, w, 1, place),
            (0x9999_9900, 0x1000, 8, w, 1, place),
            (s, 0x1000, u64::MAX, w, 1, place),
            (s ^ 1, 0x1000, 8, w, 1, place),
        ];
        for (stag, to, len, need, pd, kind) in cases {
            assert_eq!(
                t.check_remote_memo(&mut memo, stag, to, len, need, PdId(pd), kind),
                t.check_remote(stag, to, len, need, PdId(pd), kind),
                "{stag:#x} {to:#x} {len} {need:?} pd {pd}"
            );
        }
        // The memo holds `s` of `t`; the other table's first STag is the same number,
        // in another PD, at the same epoch: its own table answers.
        assert_eq!(there, s);
        assert_eq!(t.generation().epoch, other_table.generation().epoch);
        assert!(
            t.check_remote_memo(&mut memo, s, 0x1000, 8, w, PdId(1), place)
                .is_ok()
        );
        assert_eq!(
            other_table.check_remote_memo(&mut memo, s, 0x1000, 8, w, PdId(1), place),
            other_table.check_remote(s, 0x1000, 8, w, PdId(1), place),
            "another table"
        );
        let ok = |t: &Tpt, memo: &mut RemoteKeyMemo, stag| {
            t.check_remote_memo(memo, stag, 0x1000, 8, w, PdId(1), place)
        };
        assert!(ok(&t, &mut memo, s).is_ok());
        assert!(ok(&t, &mut memo, s).is_ok(), "from the memo");
        t.invalidate(s, PdId(1)).unwrap();
        assert_eq!(
            ok(&t, &mut memo, s),
            t.check_remote(s, 0x1000, 8, w, PdId(1), place),
            "invalidated between two FPDUs"
        );
        assert!(ok(&t, &mut memo, s).is_err());
        let s2 = t.revalidate(s, 0x77).unwrap();
        assert!(ok(&t, &mut memo, s).is_err(), "the old key stays invalid");
        assert!(ok(&t, &mut memo, s2).is_ok());
        assert!(ok(&t, &mut memo, s2).is_ok(), "from the memo");
        assert!(t.remove(s2).is_some());
        assert_eq!(
            ok(&t, &mut memo, s2),
            t.check_remote(s2, 0x1000, 8, w, PdId(1), place),
            "removed between two FPDUs"
        );
        assert!(ok(&t, &mut memo, s2).is_err());
    }
}
