//! The translation and protection table: what an STag names, and whether a given
//! access through it is allowed.
//!
//! Every tagged placement (RDMA Write, Read Response), every RDMA Read source and every
//! local SGE goes through here before a single octet moves. A refusal carries the exact
//! Terminate cause for remote accesses (RFC 5040/5041) or the completion status for
//! local ones, so the QP never has to guess.

use crate::verbs::{Access, PdId, RegionId, STag, WcStatus, stag_index, stag_key};
use softrnic_wire::terminate::{
    Layer, TerminateCause, ddp_code, ddp_etype, rdmap_code, rdmap_etype,
};
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// One memory region's entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TptEntry {
    /// The protection domain the region belongs to.
    pub pd: PdId,
    /// Consumer key: the low 8 bits of the valid STag.
    pub key: u8,
    /// Tagged offset of the region's first octet (its virtual address, as siw uses).
    pub base: u64,
    /// Length in octets.
    pub len: u64,
    /// Rights.
    pub access: Access,
    /// The memory, as the I/O layer names it.
    pub region: RegionId,
    /// Cleared by invalidation; a valid STag can be invalidated once.
    pub valid: bool,
}

/// Where an access lands: the region and the offset inside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// The region.
    pub region: RegionId,
    /// Offset of the first octet in the region.
    pub offset: u64,
}

/// What kind of remote access is being checked; it decides which layer reports errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemoteAccess {
    /// Tagged placement by DDP (RDMA Write, Read Response): DDP tagged-buffer errors,
    /// except missing rights, which RDMAP reports.
    TaggedPlacement,
    /// The data source of an RDMA Read Request: RDMAP remote protection errors.
    ReadSource,
}

/// Why an STag cannot be invalidated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InvalidateError {
    /// No such STag, or its key does not match.
    Unknown,
    /// The STag belongs to another protection domain.
    WrongPd,
    /// Already invalidated.
    AlreadyInvalid,
    /// A peer asked (Send with Invalidate), and the region was not registered for
    /// remote invalidation ([`Access::REMOTE_INVALIDATE`] with a remote right).
    NotRemotelyInvalidatable,
}

/// Shards of the table: STag index `i` lives in shard `(i - 1) % SHARDS`, so lookups
/// from different connections rarely meet on one lock, and registration spreads new
/// regions over the shards.
const SHARDS: usize = 16;

/// Highest STag index (24 bits).
const MAX_INDEX: usize = 0x00ff_ffff;

#[derive(Debug, Default)]
struct Shard {
    slots: Vec<Option<TptEntry>>,
    /// Freed slots, with the consumer key their last STag had: a new registration in
    /// the slot never gets that key again, so a stale STag never names the new region.
    free: Vec<(usize, u8)>,
}

/// `key`, unless it is `old`: then the next key. An STag that was handed out before
/// never comes back for another registration of the same index.
fn key_other_than(key: u8, old: u8) -> u8 {
    if key == old { key.wrapping_add(1) } else { key }
}

/// The table, shared by every QP of a device: lookups take a read lock on one shard
/// (never a device-wide lock), registration and invalidation a write lock on one shard.
/// STag index 0 is never handed out, so that STag 0 and the RTR messages' dummy STags
/// never name a region.
///
/// Every change to an entry (removal, invalidation, revalidation, and registration)
/// advances `epoch`; each thread remembers the last two entries it looked up with the
/// epoch it saw ([`LAST`]), and a look-up of one of those STags while the epoch has not
/// moved takes that copy with one atomic load instead of the shard's lock (two atomic
/// read-modify-writes: on the data path, a check per work request and per FPDU). Two,
/// because a thread that both posts and places checks two STags in turn: a ping-pong
/// side sends from its source region and receives into its landing region, and with
/// one remembered entry each check missed.
#[derive(Debug)]
pub struct Tpt {
    shards: [RwLock<Shard>; SHARDS],
    next_shard: AtomicUsize,
    /// This table's number among all tables of the process (a thread's remembered
    /// entry names its table by it, never by address).
    id: u64,
    epoch: AtomicU64,
}

impl Default for Tpt {
    fn default() -> Self {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        Tpt {
            shards: Default::default(),
            next_shard: AtomicUsize::new(0),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            epoch: AtomicU64::new(0),
        }
    }
}

/// A table and its epoch ([`Tpt::generation`]): lets a caller keep a check's result
/// for as long as the table has not changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TptGeneration {
    table: u64,
    epoch: u64,
}

/// A thread's look-up: (table id, epoch then, STag, entry or none).
type Remembered = (u64, u64, STag, Option<TptEntry>);

/// Look-ups a thread remembers, the last one first.
const REMEMBERED: usize = 2;

thread_local! {
    /// Read in place through a `RefCell` borrow: a `Cell` had to copy both entries out
    /// (about 150 octets) on every look-up, a quarter of a posted SGE's check.
    static LAST: RefCell<[Option<Remembered>; REMEMBERED]> =
        const { RefCell::new([None; REMEMBERED]) };
}

#[cfg(test)]
thread_local! {
    /// Look-ups that read the table on this thread (tests count them).
    static TABLE_READS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// (shard, slot) of an STag's index, if it can name a region.
fn locate(stag: STag) -> Option<(usize, usize)> {
    let i = (stag_index(stag) as usize).checked_sub(1)?;
    Some((i % SHARDS, i / SHARDS))
}

/// The STag of (shard, slot) with consumer key `key`.
fn stag_of(shard: usize, slot: usize, key: u8) -> STag {
    (((slot * SHARDS + shard + 1) as u32) << 8) | u32::from(key)
}

impl Tpt {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    // The entries are plain values and no method panics while holding a lock, so a
    // poisoned lock (a panic elsewhere in the thread) leaves nothing half-updated.
    fn read(&self, shard: usize) -> RwLockReadGuard<'_, Shard> {
        self.shards[shard]
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A shard to change. The epoch advances as the lock is taken (and is read again
    /// by every look-up after the change), so no thread keeps using an entry from
    /// before it.
    fn write(&self, shard: usize) -> EpochGuard<'_> {
        let guard = self.shards[shard]
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        EpochGuard {
            guard,
            epoch: &self.epoch,
        }
    }

    /// Adds a region; returns its STag, or None when the 24-bit index space is used up.
    /// The STag has a fresh index and the given consumer key, unless the index is
    /// reused and its last STag had that key: then the key is the next one (choose the
    /// key at random, RFC 5042 section 5.1, and no STag is ever guessed from another).
    pub fn insert(&self, mut entry: TptEntry) -> Option<STag> {
        entry.valid = true;
        let first = self.next_shard.fetch_add(1, Ordering::Relaxed);
        let turn = |k: usize| (first + k) % SHARDS;
        // A freed index first (any shard), so the table stays dense; else a new slot,
        // in this registration's turn of shard.
        for k in 0..SHARDS {
            let shard = turn(k);
            let mut s = self.write(shard);
            if let Some((slot, old)) = s.free.pop() {
                entry.key = key_other_than(entry.key, old);
                s.slots[slot] = Some(entry);
                return Some(stag_of(shard, slot, entry.key));
            }
        }
        for k in 0..SHARDS {
            let shard = turn(k);
            let mut s = self.write(shard);
            if s.slots.len() * SHARDS + shard + 1 > MAX_INDEX {
                continue;
            }
            s.slots.push(Some(entry));
            let slot = s.slots.len() - 1;
            return Some(stag_of(shard, slot, entry.key));
        }
        None
    }

    /// Removes a region (deregistration); returns its entry.
    pub fn remove(&self, stag: STag) -> Option<TptEntry> {
        let (shard, slot) = locate(stag)?;
        let mut s = self.write(shard);
        let e = s.slots.get_mut(slot)?.take()?;
        s.free.push((slot, e.key));
        Some(e)
    }

    /// The entry whose index the STag names, if the key matches too.
    ///
    /// Inlined into the per-message checks: the common case is this thread's last
    /// look-up again; reading the table is out of line.
    #[inline]
    pub fn get(&self, stag: STag) -> Option<TptEntry> {
        self.get_with(stag, |e| Some(*e))
    }

    /// [`Tpt::get`] answered through `f`, which reads the entry where it lies: a hit
    /// in this thread's remembered look-ups is not copied out first. (Returned by
    /// value, the ~40-octet entry went through the stack in overlapping 16-octet
    /// pieces, and the checks' narrower loads of it stalled the CPU: a load the
    /// stores before it could not serve.)
    #[inline]
    fn get_with<R>(&self, stag: STag, f: impl Fn(&TptEntry) -> Option<R>) -> Option<R> {
        let epoch = self.epoch.load(Ordering::Acquire);
        let hit = LAST.try_with(|l| {
            let last = l.try_borrow().ok()?;
            last.iter()
                .flatten()
                .find(|&&(id, seen, s, _)| id == self.id && seen == epoch && s == stag)
                .map(|r| r.3.as_ref().and_then(&f))
        });
        match hit {
            Ok(Some(r)) => r,
            _ => self.get_from_table(stag, epoch).as_ref().and_then(f),
        }
    }

    /// [`Tpt::get`] when this thread's last look-up does not answer: reads the table
    /// (the look-up is remembered with `epoch`, read before it).
    #[inline(never)]
    fn get_from_table(&self, stag: STag, epoch: u64) -> Option<TptEntry> {
        let (shard, slot) = locate(stag)?;
        let e = self
            .read(shard)
            .slots
            .get(slot)?
            .filter(|e| e.key == stag_key(stag));
        // Remembered with the epoch read before the look-up: a change made meanwhile
        // makes the next look-up read the table again. It becomes the first; the
        // oldest is forgotten.
        let _ = LAST.try_with(|l| {
            if let Ok(mut last) = l.try_borrow_mut() {
                last.rotate_right(1);
                last[0] = Some((self.id, epoch, stag, e));
            }
        });
        #[cfg(test)]
        TABLE_READS.with(|n| n.set(n.get() + 1));
        e
    }

    /// This table's state as of now: equal to a later one only if no entry changed in
    /// between (an entry's removal, invalidation, revalidation, registration). A check
    /// made after taking it and before a later equal one would give the same answer.
    pub fn generation(&self) -> TptGeneration {
        TptGeneration {
            table: self.id,
            epoch: self.epoch.load(Ordering::Acquire),
        }
    }

    /// Number of regions registered.
    pub fn len(&self) -> usize {
        (0..SHARDS)
            .map(|i| self.read(i).slots.iter().filter(|s| s.is_some()).count())
            .sum()
    }

    /// Whether no region is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Checks a remote access of `len` octets at tagged offset `to` through `stag`, from
    /// a stream in `pd`, needing `need`. Zero-length accesses still need a valid STag.
    /// The checks run in this order, and the first that fails names the cause: STag
    /// (index, key, valid), PD, rights, TO wrap, bounds. Inlined, as `check_local` is:
    /// it runs once per placed FPDU, on the receive side of every one-sided message.
    #[inline]
    pub fn check_remote(
        &self,
        stag: STag,
        to: u64,
        len: u64,
        need: Access,
        pd: PdId,
        kind: RemoteAccess,
    ) -> Result<Target, TerminateCause> {
        remote_target(self.get(stag).as_ref(), to, len, need, pd, kind)
    }

    /// Checks a local SGE: `len` octets at `addr` through `lkey`, in `pd`, needing `need`.
    /// Inlined into the post path (a check per posted SGE): the call's register saves
    /// and restores were about a fifth of it.
    #[inline]
    pub fn check_local(
        &self,
        lkey: STag,
        addr: u64,
        len: u64,
        need: Access,
        pd: PdId,
    ) -> Result<Target, WcStatus> {
        self.get_with(lkey, |e| local_target(e, addr, len, need, pd))
            .ok_or(WcStatus::LocalProtectionError)
    }

    /// Invalidates an STag of our own (a local invalidate work request): any region of
    /// the PD.
    pub fn invalidate(&self, stag: STag, pd: PdId) -> Result<(), InvalidateError> {
        self.invalidate_as(stag, pd, false)
    }

    /// Invalidates an STag a peer named in a Send with Invalidate: only a region
    /// registered for it ([`Access::REMOTE_INVALIDATE`], with REMOTE_READ or
    /// REMOTE_WRITE), so a peer can invalidate what it was given and nothing else of
    /// the PD (a local buffer, a receive buffer, another peer's region).
    pub fn invalidate_remote(&self, stag: STag, pd: PdId) -> Result<(), InvalidateError> {
        self.invalidate_as(stag, pd, true)
    }

    fn invalidate_as(&self, stag: STag, pd: PdId, remote: bool) -> Result<(), InvalidateError> {
        let (shard, slot) = locate(stag).ok_or(InvalidateError::Unknown)?;
        let mut s = self.write(shard);
        let e = s
            .slots
            .get_mut(slot)
            .and_then(|s| s.as_mut())
            .filter(|e| e.key == stag_key(stag))
            .ok_or(InvalidateError::Unknown)?;
        if e.pd != pd {
            return Err(InvalidateError::WrongPd);
        }
        if remote && !remotely_invalidatable(e.access) {
            return Err(InvalidateError::NotRemotelyInvalidatable);
        }
        if !e.valid {
            return Err(InvalidateError::AlreadyInvalid);
        }
        e.valid = false;
        Ok(())
    }

    /// Makes an invalidated STag valid again under a new consumer key (fast re-register);
    /// returns the new STag. The key is `new_key`, or the next one if `new_key` is the
    /// old key: the invalidated STag stays invalid.
    pub fn revalidate(&self, stag: STag, new_key: u8) -> Option<STag> {
        let (shard, slot) = locate(stag)?;
        let mut s = self.write(shard);
        let e = s.slots.get_mut(slot)?.as_mut()?;
        if e.key != stag_key(stag) || e.valid {
            return None;
        }
        let new_key = key_other_than(new_key, e.key);
        e.key = new_key;
        e.valid = true;
        Some((stag & !0xff) | u32::from(new_key))
    }
}

/// A shard's write lock that advances the table's epoch when it is released, after
/// the change: a look-up that still sees the old epoch ran before the change ended.
struct EpochGuard<'a> {
    guard: RwLockWriteGuard<'a, Shard>,
    epoch: &'a AtomicU64,
}

impl std::ops::Deref for EpochGuard<'_> {
    type Target = Shard;
    fn deref(&self) -> &Shard {
        &self.guard
    }
}

impl std::ops::DerefMut for EpochGuard<'_> {
    fn deref_mut(&mut self) -> &mut Shard {
        &mut self.guard
    }
}

impl Drop for EpochGuard<'_> {
    fn drop(&mut self) {
        self.epoch.fetch_add(1, Ordering::Release);
    }
}

/// Whether rights allow a peer to invalidate the STag (see [`Tpt::invalidate_remote`]).
pub fn remotely_invalidatable(access: Access) -> bool {
    access.contains(Access::REMOTE_INVALIDATE)
        && access.intersects(Access::REMOTE_READ | Access::REMOTE_WRITE)
}

/// What a remote access check found wrong, in the order [`Tpt::check_remote`] checks.
#[derive(Clone, Copy)]
enum RemoteFault {
    InvalidStag,
    NotAssociated,
    Rights,
    Wrap,
    Bounds,
}

impl RemoteAccess {
    /// The Terminate cause of `fault` for this kind of access: tagged placement faults
    /// are DDP's (tagged buffer), Read source faults RDMAP's (remote protection); wrong
    /// rights are RDMAP's for both. Built only on the error path.
    fn cause(self, fault: RemoteFault) -> TerminateCause {
        if let RemoteFault::Rights = fault {
            return TerminateCause::new(
                Layer::Rdmap,
                rdmap_etype::REMOTE_PROTECTION,
                rdmap_code::ACCESS_RIGHTS,
            );
        }
        match self {
            RemoteAccess::TaggedPlacement => {
                let code = match fault {
                    RemoteFault::InvalidStag => ddp_code::tagged::INVALID_STAG,
                    RemoteFault::Bounds => ddp_code::tagged::BASE_BOUNDS,
                    RemoteFault::NotAssociated => ddp_code::tagged::STAG_NOT_ASSOCIATED,
                    // (Rights was answered above.)
                    RemoteFault::Wrap | RemoteFault::Rights => ddp_code::tagged::TO_WRAP,
                };
                TerminateCause::new(Layer::Ddp, ddp_etype::TAGGED_BUFFER, code)
            }
            RemoteAccess::ReadSource => {
                let code = match fault {
                    RemoteFault::InvalidStag => rdmap_code::INVALID_STAG,
                    RemoteFault::Bounds => rdmap_code::BASE_BOUNDS,
                    RemoteFault::NotAssociated => rdmap_code::STAG_NOT_ASSOCIATED,
                    RemoteFault::Wrap | RemoteFault::Rights => rdmap_code::TO_WRAP,
                };
                TerminateCause::new(Layer::Rdmap, rdmap_etype::REMOTE_PROTECTION, code)
            }
        }
    }
}

/// [`Tpt::check_remote`]'s checks of the entry `e` the STag named (`None`: no such
/// STag, or its key does not match), in its order: valid, PD, rights, TO wrap, bounds.
#[inline(always)]
fn remote_target(
    e: Option<&TptEntry>,
    to: u64,
    len: u64,
    need: Access,
    pd: PdId,
    kind: RemoteAccess,
) -> Result<Target, TerminateCause> {
    let e = e
        .filter(|e| e.valid)
        .ok_or_else(|| kind.cause(RemoteFault::InvalidStag))?;
    if e.pd != pd {
        return Err(kind.cause(RemoteFault::NotAssociated));
    }
    if !e.access.contains(need) {
        return Err(kind.cause(RemoteFault::Rights));
    }
    // An access whose last octet lies beyond 2^64 - 1 is out of bounds too, but
    // RFC 5041 (DDP) and RFC 5040 (RDMAP) give it its own code, "TO wrap".
    if len > 0 && to.checked_add(len - 1).is_none() {
        return Err(kind.cause(RemoteFault::Wrap));
    }
    let offset = in_bounds(e, to, len).ok_or_else(|| kind.cause(RemoteFault::Bounds))?;
    Ok(Target {
        region: e.region,
        offset,
    })
}

/// What a local access of `len` octets at `addr` in `pd`, needing `need`, reaches
/// through entry `e`: None if `e` is invalid, of another PD, without those rights, or
/// does not hold the range. The entry's side of [`Tpt::check_local`], shared with the
/// memo of a run of posts ([`Tpt::check_local_memo`]).
#[inline(always)]
fn local_target(e: &TptEntry, addr: u64, len: u64, need: Access, pd: PdId) -> Option<Target> {
    if !(e.valid && e.pd == pd && e.access.contains(need)) {
        return None;
    }
    let offset = in_bounds(e, addr, len)?;
    Some(Target {
        region: e.region,
        offset,
    })
}

/// Offset of `[to, to + len)` inside the entry, if it lies within it.
fn in_bounds(e: &TptEntry, to: u64, len: u64) -> Option<u64> {
    let offset = to.checked_sub(e.base)?;
    let end = offset.checked_add(len)?;
    (end <= e.len).then_some(offset)
}

mod memo;
mod remote_memo;
pub use memo::{KeptKeyMemo, LocalKeyMemo};
pub use remote_memo::RemoteKeyMemo;

#[cfg(test)]
mod tests;
