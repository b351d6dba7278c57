//! Data-path buffers lent to a QP only while it has octets in hand: the receive staging
//! buffer (`receive.rs`) and the transmit gather buffer (`transmit.rs`) are taken when
//! the QP reads ahead or gathers, and handed back when it has drained them, so an idle
//! connection holds neither (they were 32 KiB and up to 64 KiB per QP for its whole
//! life).
//!
//! A QP is driven by whichever thread holds its lock: its engine thread on readiness,
//! the thread that posts to it, a thread polling its CQ in hybrid progress, the thread
//! that wakes it from an SRQ. So the free lists belong to the driving thread (a
//! thread-local, no lock, no atomic): an engine thread's lists are the per-engine pool,
//! and keep up to [`ENGINE_KEEP`] buffers of each kind; any other thread's keep up to
//! [`OTHER_KEEP`]. A buffer given back to a full list is freed. Beside its lists a
//! thread keeps the last buffer of each kind given back (the spare), which the next
//! take gets with one move: a consumer that busy-polls a QP takes and gives a staging
//! buffer on every poll (callgrind: about 115 instructions a round through the lists,
//! behind their `RefCell`; the spare's round is a few). A buffer may be taken on
//! one thread and given back on another (a QP whose socket was full keeps its gathered
//! octets until the engine sends them); the caps bound what each thread keeps.

use std::cell::{Cell, RefCell};

/// Free buffers an engine thread keeps in its lists, of each kind (and one spare each
/// beside them). A QP holds a buffer only while
/// it drives the socket or while octets wait in it (a full socket, an SRQ holding the
/// stream back), so one thread needs few; the rest absorb bursts of QPs that stopped
/// with octets queued and then drain together, without a `malloc`/`free` each.
pub(crate) const ENGINE_KEEP: usize = 32;

/// Free buffers any other thread (posting, polling) keeps in its lists, of each kind
/// (and one spare each).
pub(crate) const OTHER_KEEP: usize = 8;

/// A free list of equal buffers, capped.
#[derive(Debug)]
pub(crate) struct FreeList {
    free: Vec<Vec<u8>>,
    keep: usize,
    /// Octets each buffer holds when new (staging: length; gather: capacity).
    size: usize,
    /// Staging buffers are handed out full length (read into), gather buffers empty
    /// (appended to).
    full_len: bool,
}

impl FreeList {
    const fn new(size: usize, full_len: bool) -> FreeList {
        FreeList {
            free: Vec::new(),
            keep: OTHER_KEEP,
            size,
            full_len,
        }
    }

    /// A buffer from the list, or a new one.
    pub(crate) fn take(&mut self) -> Vec<u8> {
        match self.free.pop() {
            Some(b) => b,
            None if self.full_len => vec![0; self.size],
            None => Vec::with_capacity(self.size),
        }
    }

    /// Keeps `b` for the next taker, or frees it if the list is full (or `b` is not
    /// one of this list's buffers).
    pub(crate) fn give(&mut self, mut b: Vec<u8>) {
        if self.free.len() >= self.keep || b.capacity() < self.size {
            return;
        }
        if self.full_len {
            // Staging buffers are read into whole; their length never changes.
            if b.len() != self.size {
                return;
            }
        } else {
            b.clear();
        }
        self.free.push(b);
    }

    /// Buffers kept now.
    #[cfg(test)]
    pub(crate) fn kept(&self) -> usize {
        self.free.len()
    }
}

struct Pools {
    staging: FreeList,
    gather: FreeList,
}

thread_local! {
    /// The spares (see the module notes): a staging buffer, full length, and an empty
    /// gather buffer; each an unallocated `Vec` while there is none.
    static SPARE_STAGING: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
    static SPARE_GATHER: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
    static POOLS: RefCell<Pools> = const {
        RefCell::new(Pools {
            staging: FreeList::new(crate::receive::RX_STAGING_LEN, true),
            gather: FreeList::new(crate::transmit::TX_BUF_LEN, false),
        })
    };
}

/// Makes this thread's pool an engine's: it keeps [`ENGINE_KEEP`] buffers of each kind.
pub(crate) fn serve_as_engine() {
    let _ = POOLS.try_with(|p| {
        let mut p = p.borrow_mut();
        p.staging.keep = ENGINE_KEEP;
        p.gather.keep = ENGINE_KEEP;
    });
}

fn with<R>(f: impl FnOnce(&mut Pools) -> R, fallback: impl FnOnce() -> R) -> R {
    // `try_with`: a QP dropped while this thread's locals are being destroyed gets
    // plain allocation instead of a panic. The borrow cannot be held already: nothing
    // in here calls back into the pool.
    POOLS
        .try_with(|p| p.try_borrow_mut().ok().map(|mut p| f(&mut p)))
        .ok()
        .flatten()
        .unwrap_or_else(fallback)
}

/// A staging buffer, [`crate::receive::RX_STAGING_LEN`] octets long.
pub(crate) fn take_staging() -> Vec<u8> {
    let spare = SPARE_STAGING.try_with(Cell::take).unwrap_or_default();
    if spare.capacity() > 0 {
        return spare;
    }
    with(
        |p| p.staging.take(),
        || vec![0; crate::receive::RX_STAGING_LEN],
    )
}

/// Hands a staging buffer back: it becomes the spare, and the spare before it goes to
/// the list.
pub(crate) fn give_staging(b: Vec<u8>) {
    if b.len() != crate::receive::RX_STAGING_LEN {
        // Not one of the pool's: freed, as the list would.
        return;
    }
    if let Ok(older) = SPARE_STAGING.try_with(|s| s.replace(b))
        && older.capacity() > 0
    {
        with(|p| p.staging.give(older), || ());
    }
}

/// An empty gather buffer with room for [`crate::transmit::TX_BUF_LEN`] octets.
pub(crate) fn take_gather() -> Vec<u8> {
    let spare = SPARE_GATHER.try_with(Cell::take).unwrap_or_default();
    if spare.capacity() > 0 {
        return spare;
    }
    with(
        |p| p.gather.take(),
        || Vec::with_capacity(crate::transmit::TX_BUF_LEN),
    )
}

/// Hands a gather buffer back (emptied): it becomes the spare, and the spare before it
/// goes to the list.
pub(crate) fn give_gather(mut b: Vec<u8>) {
    if b.capacity() < crate::transmit::TX_BUF_LEN {
        return;
    }
    b.clear();
    if let Ok(older) = SPARE_GATHER.try_with(|s| s.replace(b))
        && older.capacity() > 0
    {
        with(|p| p.gather.give(older), || ());
    }
}

/// Buffers this thread keeps now, spares included: (staging, gather).
#[cfg(test)]
pub(crate) fn kept() -> (usize, usize) {
    let spare = |c: &'static std::thread::LocalKey<Cell<Vec<u8>>>| {
        c.with(|s| {
            let b = s.take();
            let held = usize::from(b.capacity() > 0);
            s.set(b);
            held
        })
    };
    let lists = with(|p| (p.staging.kept(), p.gather.kept()), || (0, 0));
    (
        lists.0 + spare(&SPARE_STAGING),
        lists.1 + spare(&SPARE_GATHER),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_keeps_at_most_its_cap_and_reuses_what_it_keeps() {
        let mut l = FreeList::new(1024, true);
        l.keep = 2;
        let bufs: Vec<Vec<u8>> = (0..3).map(|_| l.take()).collect();
        assert!(bufs.iter().all(|b| b.len() == 1024));
        let ptrs: Vec<*const u8> = bufs.iter().map(|b| b.as_ptr()).collect();
        for b in bufs {
            l.give(b);
        }
        assert_eq!(l.kept(), 2, "the third buffer was freed");
        let again = l.take();
        assert_eq!(again.as_ptr(), ptrs[1], "last given, first taken");
        assert_eq!(l.kept(), 1);
    }

    #[test]
    fn gather_buffers_come_back_empty_and_foreign_ones_are_freed() {
        let mut l = FreeList::new(4096, false);
        let mut b = l.take();
        assert!(b.is_empty() && b.capacity() >= 4096);
        b.extend_from_slice(&[7; 100]);
        l.give(b);
        assert!(l.take().is_empty(), "cleared on return");
        l.give(Vec::with_capacity(16));
        assert_eq!(l.kept(), 0, "a buffer smaller than the list's is not kept");
        let mut s = FreeList::new(64, true);
        s.give(vec![0; 10]);
        assert_eq!(
            s.kept(),
            0,
            "a staging buffer of another length is not kept"
        );
    }

    #[test]
    fn a_thread_pool_hands_out_and_takes_back() {
        std::thread::spawn(|| {
            assert_eq!(kept(), (0, 0));
            let s = take_staging();
            assert_eq!(s.len(), crate::receive::RX_STAGING_LEN);
            let g = take_gather();
            assert!(g.is_empty() && g.capacity() >= crate::transmit::TX_BUF_LEN);
            give_staging(s);
            give_gather(g);
            assert_eq!(kept(), (1, 1));
            // The spare is reused first: the same buffer comes back.
            let s = take_staging();
            let at = s.as_ptr();
            give_staging(s);
            let again = take_staging();
            assert_eq!(again.as_ptr(), at, "the spare");
            drop(again);
            let many: Vec<Vec<u8>> = (0..OTHER_KEEP + 3).map(|_| take_staging()).collect();
            many.into_iter().for_each(give_staging);
            assert_eq!(kept().0, OTHER_KEEP + 1, "the list's cap and the spare");
            // A buffer of another length is not kept, and leaves the spare alone.
            give_staging(vec![0; 10]);
            assert_eq!(kept().0, OTHER_KEEP + 1);
            serve_as_engine();
            let many: Vec<Vec<u8>> = (0..ENGINE_KEEP + 3).map(|_| take_staging()).collect();
            many.into_iter().for_each(give_staging);
            assert_eq!(kept().0, ENGINE_KEEP + 1);
        })
        .join()
        .unwrap();
    }
}
