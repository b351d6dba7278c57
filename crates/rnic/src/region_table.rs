//! The device's registered regions by [`RegionId`], as the data path finds them when it
//! places or gathers payload.
//!
//! Sharded like the TPT, so a look-up per FPDU takes one shard's read lock and no
//! device-wide lock. A RegionId carries a generation above its slot index: a slot is
//! reused after a deregistration, but under a new id, so a placement that was checked
//! against a region now gone finds nothing (the QP goes to error) instead of writing
//! into whichever region took the slot next.
//!
//! Every removal bumps the table's epoch, so a QP may keep the last region it looked
//! up across calls ([`LastRegion`]) and use it again after one atomic load, without a
//! shard lock or a reference count per FPDU.

use crate::error::{Error, Result};
use crate::region::Region;
use softrnic_proto::RegionId;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

const SHARDS: usize = 16;
/// Bits of a RegionId that number its slot; the rest is the slot's generation.
const INDEX_BITS: u32 = 24;
const INDEX_MASK: u32 = (1 << INDEX_BITS) - 1;

/// A slot holds the region that has it now; the region knows its own id.
type Shard = RwLock<Vec<Option<Arc<Region>>>>;

#[derive(Default)]
pub(crate) struct RegionTable {
    shards: [Shard; SHARDS],
    /// Ids of freed slots (with the generation they last had), and the next new slot.
    free: Mutex<(Vec<u32>, u32)>,
    /// Removals so far: a region looked up at an epoch that is still current is still
    /// registered (see [`LastRegion`]).
    epoch: AtomicU64,
}

fn place(id: RegionId) -> (usize, usize) {
    let index = (id.0 & INDEX_MASK) as usize;
    (index % SHARDS, index / SHARDS)
}

impl RegionTable {
    /// The region registered under `id`, if it still is.
    pub(crate) fn get(&self, id: RegionId) -> Option<Arc<Region>> {
        let (shard, slot) = place(id);
        let s = self.shards[shard].read().ok()?;
        s.get(slot)?.as_ref().filter(|r| r.id() == id).cloned()
    }

    /// A fresh id: a freed slot under its next generation, or a new slot.
    pub(crate) fn reserve(&self) -> Result<RegionId> {
        let mut f = self.free.lock()?;
        if let Some(old) = f.0.pop() {
            let generation = (old >> INDEX_BITS).wrapping_add(1);
            return Ok(RegionId((generation << INDEX_BITS) | (old & INDEX_MASK)));
        }
        let index = f.1;
        if index > INDEX_MASK {
            return Err(Error::Limit("regions"));
        }
        f.1 += 1;
        Ok(RegionId(index))
    }

    /// Gives back an id that was reserved but never installed (or whose region is gone).
    pub(crate) fn release(&self, id: RegionId) {
        if let Ok(mut f) = self.free.lock() {
            f.0.push(id.0);
        }
    }

    /// Puts the region at the slot of its id.
    pub(crate) fn install(&self, r: Arc<Region>) {
        let (shard, slot) = place(r.id());
        if let Ok(mut s) = self.shards[shard].write() {
            if s.len() <= slot {
                s.resize(slot + 1, None);
            }
            s[slot] = Some(r);
        }
    }

    /// Removes the region (placements looking it up find nothing from now on, and a
    /// [`LastRegion`] that holds it looks again) and frees its slot.
    pub(crate) fn remove(&self, id: RegionId) {
        let (shard, slot) = place(id);
        if let Ok(mut s) = self.shards[shard].write()
            && let Some(entry) = s.get_mut(slot)
            && entry.as_ref().is_some_and(|r| r.id() == id)
        {
            *entry = None;
            // Under the shard's lock: once the removal returns, no cache sees the
            // epoch it had before.
            self.epoch.fetch_add(1, Ordering::AcqRel);
        }
        self.release(id);
    }

    /// Removals so far.
    fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }
}

/// The last region a QP's receive or transmit path looked up, kept across calls with
/// the table's epoch at the look-up: while no region has been removed since, it is
/// still registered, and a ping-pong's FPDUs (all from one region, all into one) find
/// it with one atomic load instead of a shard lock and a reference count each (four
/// atomic read-modify-writes, on both ends of every trip).
///
/// It holds a reference: a region deregistered since stays allocated until the QP's
/// next look-up (which finds the epoch moved and drops it) or the QP's end. It is
/// never used after its removal returned (the TPT, checked per FPDU, refuses its STag
/// from then on, and the epoch sends the next look-up to the table).
#[derive(Default)]
pub(crate) struct LastRegion(Option<(Arc<Region>, u64)>);

impl LastRegion {
    /// The region registered under `id`, if it still is (or was, at a look-up since
    /// which no region was removed).
    #[inline]
    pub(crate) fn get(&mut self, dev: &crate::device::Shared, id: RegionId) -> Option<&Region> {
        self.get_in(&dev.regions, id)
    }

    /// [`LastRegion::get`], always inlined, for the single post: there the look-up
    /// was a call (about 10 instructions). The batch path keeps `get`: with it always
    /// inlined there, `write_bw -s 64` cost more per message (session 25).
    #[inline(always)]
    pub(crate) fn get_inlined(
        &mut self,
        dev: &crate::device::Shared,
        id: RegionId,
    ) -> Option<&Region> {
        self.look_up(&dev.regions, id)
    }

    #[inline]
    fn get_in(&mut self, table: &RegionTable, id: RegionId) -> Option<&Region> {
        self.look_up(table, id)
    }

    #[inline(always)]
    fn look_up(&mut self, table: &RegionTable, id: RegionId) -> Option<&Region> {
        // The epoch before the look-up: a removal between the two makes the next call
        // look again.
        let epoch = table.epoch();
        if self
            .0
            .as_ref()
            .is_none_or(|(r, seen)| r.id() != id || *seen != epoch)
        {
            self.0 = table.get(id).map(|r| (r, epoch));
        }
        self.0.as_ref().map(|(r, _)| &**r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(id: RegionId) -> Arc<Region> {
        Arc::new(Region::alloc(id, 64).unwrap())
    }

    #[test]
    fn a_reused_slot_has_a_new_id_and_the_old_id_finds_nothing() {
        let t = RegionTable::default();
        let a = t.reserve().unwrap();
        t.install(region(a));
        assert!(t.get(a).is_some());
        t.remove(a);
        assert!(t.get(a).is_none());
        let b = t.reserve().unwrap();
        assert_eq!(b.0 & INDEX_MASK, a.0 & INDEX_MASK, "the slot is reused");
        assert_ne!(b, a);
        let rb = region(b);
        t.install(rb.clone());
        assert!(
            t.get(a).is_none(),
            "the old id never reaches the new region"
        );
        assert!(Arc::ptr_eq(&t.get(b).unwrap(), &rb));
        // Removing under the stale id leaves the new region alone.
        t.remove(a);
        assert!(t.get(b).is_some());
    }

    #[test]
    fn slots_spread_over_shards_and_grow() {
        let t = RegionTable::default();
        let ids: Vec<_> = (0..100).map(|_| t.reserve().unwrap()).collect();
        for &id in &ids {
            t.install(region(id));
        }
        assert!(ids.iter().all(|&id| t.get(id).is_some()));
        assert_eq!(ids[99], RegionId(99));
    }

    #[test]
    fn a_kept_region_is_looked_up_again_after_any_removal() {
        let t = RegionTable::default();
        let (a, b) = (t.reserve().unwrap(), t.reserve().unwrap());
        let ra = region(a);
        t.install(ra.clone());
        t.install(region(b));
        let mut last = LastRegion::default();
        assert!(std::ptr::eq(last.get_in(&t, a).unwrap(), &*ra));
        // Another region's removal: `a` is found again, in the table.
        t.remove(b);
        assert!(std::ptr::eq(last.get_in(&t, a).unwrap(), &*ra));
        // Its own removal: the kept reference is not used, and is let go.
        t.remove(a);
        assert!(last.get_in(&t, a).is_none());
        assert_eq!(Arc::strong_count(&ra), 1, "the cache let the region go");
        // The slot's next region, under a new id, is never reached by the old one.
        let c = t.reserve().unwrap();
        t.install(region(c));
        assert!(last.get_in(&t, a).is_none());
        assert!(last.get_in(&t, c).is_some());
    }
}
