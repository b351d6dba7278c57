//! The device's registered regions by [`RegionId`], as the data path finds them when it
//! places or gathers payload.
//!
//! Sharded like the TPT, so a look-up per FPDU takes one shard's read lock and no
//! device-wide lock. A RegionId carries a generation above its slot index: a slot is
//! reused after a deregistration, but under a new id, so a placement that was checked
//! against a region now gone finds nothing (the QP goes to error) instead of writing
//! into whichever region took the slot next.

use crate::error::{Error, Result};
use crate::region::Region;
use softrnic_proto::RegionId;
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

    /// Removes the region (placements looking it up find nothing from now on) and
    /// frees its slot.
    pub(crate) fn remove(&self, id: RegionId) {
        let (shard, slot) = place(id);
        if let Ok(mut s) = self.shards[shard].write()
            && let Some(entry) = s.get_mut(slot)
            && entry.as_ref().is_some_and(|r| r.id() == id)
        {
            *entry = None;
        }
        self.release(id);
    }
}

/// The last region a data-path pass looked up, kept for the length of one call (a
/// transmit pass, the feeding of one read-ahead), so that a run of FPDUs from or into
/// one region takes one look-up (a shard lock and a reference count) instead of one
/// each. It lives only as long as the call, so it never keeps a deregistered region's
/// memory for longer (the TPT, checked per FPDU, refuses its STag from then on).
#[derive(Default)]
pub(crate) struct LastRegion(Option<Arc<Region>>);

impl LastRegion {
    /// The region registered under `id`, if it still is (or was, at this call's first
    /// look-up of it).
    #[inline]
    pub(crate) fn get(&mut self, dev: &crate::device::Shared, id: RegionId) -> Option<&Region> {
        if self.0.as_ref().is_none_or(|r| r.id() != id) {
            self.0 = dev.region(id);
        }
        self.0.as_deref()
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
}
