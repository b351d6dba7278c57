//! `Region` frees what it allocated exactly once and never frees borrowed memory.
//!
//! A counting global allocator watches page-aligned allocations (alignment
//! `REGION_ALIGN`), which nothing but `Region::alloc` makes in this test binary, so the
//! test harness's own allocations do not disturb the counts. Everything runs in one
//! `#[test]` so no other test allocates regions concurrently.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

use softrnic_proto::verbs::RegionId;
use softrnic_rnic::region::{REGION_ALIGN, Region, RegionError};

struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);
static FREES: AtomicUsize = AtomicUsize::new(0);
static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);

fn watched(layout: Layout) -> bool {
    layout.align() == REGION_ALIGN
}

// SAFETY: every method forwards to `System` with the same arguments, so `System`'s
// guarantees carry over; the counters have no effect on the memory handed out.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged; the caller upholds `GlobalAlloc::alloc`'s contract.
        let p = unsafe { System.alloc(layout) };
        if watched(layout) && !p.is_null() {
            ALLOCS.fetch_add(1, SeqCst);
            LIVE_BYTES.fetch_add(layout.size(), SeqCst);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged; the caller upholds the contract.
        let p = unsafe { System.alloc_zeroed(layout) };
        if watched(layout) && !p.is_null() {
            ALLOCS.fetch_add(1, SeqCst);
            LIVE_BYTES.fetch_add(layout.size(), SeqCst);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if watched(layout) {
            FREES.fetch_add(1, SeqCst);
            LIVE_BYTES.fetch_sub(layout.size(), SeqCst);
        }
        // SAFETY: forwarded unchanged; `ptr` came from this allocator with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn counts() -> (usize, usize, usize) {
    (
        ALLOCS.load(SeqCst),
        FREES.load(SeqCst),
        LIVE_BYTES.load(SeqCst),
    )
}

#[test]
fn owned_memory_is_freed_exactly_once_and_borrowed_never() {
    assert_eq!(counts(), (0, 0, 0));

    // Owned: one allocation, one free, on drop.
    let r = Region::alloc(RegionId(1), 3 * REGION_ALIGN + 5).unwrap();
    assert_eq!(counts(), (1, 0, 3 * REGION_ALIGN + 5));
    r.fill(0, r.len(), 0x5a).unwrap();
    drop(r);
    assert_eq!(counts(), (1, 1, 0));

    // Length 0 owns nothing: no allocation, no free.
    drop(Region::alloc(RegionId(2), 0).unwrap());
    assert_eq!(counts(), (1, 1, 0));

    // Failed allocations leave nothing behind.
    assert_eq!(
        Region::alloc(RegionId(3), usize::MAX).unwrap_err(),
        RegionError::TooLarge(usize::MAX)
    );
    assert!(matches!(
        Region::alloc(RegionId(3), 1 << 62),
        Err(RegionError::AllocFailed(_))
    ));
    assert_eq!(counts(), (1, 1, 0));

    // Dropped on another thread: still exactly one free.
    let r = Region::alloc(RegionId(4), 100).unwrap();
    std::thread::spawn(move || drop(r)).join().unwrap();
    assert_eq!(counts(), (2, 2, 0));

    // Borrowed: the region over a page-aligned buffer we allocated ourselves is not
    // freed by the region; we free it afterwards (the only free).
    let layout = Layout::from_size_align(2 * REGION_ALIGN, REGION_ALIGN).unwrap();
    // SAFETY: non-zero size.
    let buf = unsafe { std::alloc::alloc_zeroed(layout) };
    assert!(!buf.is_null());
    assert_eq!(counts(), (3, 2, 2 * REGION_ALIGN));
    {
        // SAFETY: `buf` is valid for `2 * REGION_ALIGN` bytes of reads and writes with
        // write provenance, stays allocated until after the region drops, and is not
        // accessed except through the region until then.
        let r = unsafe { Region::from_raw(RegionId(5), buf, 2 * REGION_ALIGN) };
        r.write(REGION_ALIGN, b"borrowed").unwrap();
        assert!(!r.is_owned());
    }
    assert_eq!(
        counts(),
        (3, 2, 2 * REGION_ALIGN),
        "region freed borrowed memory"
    );
    // SAFETY: the region is gone; `buf` is ours again and valid for these 8 bytes.
    let back = unsafe { std::slice::from_raw_parts(buf.add(REGION_ALIGN), 8) };
    assert_eq!(back, b"borrowed");
    // SAFETY: `buf` came from `alloc_zeroed(layout)` and is freed once, here.
    unsafe { std::alloc::dealloc(buf, layout) };
    assert_eq!(counts(), (3, 3, 0));
}
