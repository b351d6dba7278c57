//! Counting the heap, for measuring memory per connection: a global allocator that
//! wraps the system's and, once [`start`] is called, keeps the net octets allocated.
//! A program (a benchmark binary, a test) installs it with
//!
//! ```ignore
//! #[global_allocator]
//! static HEAP: softrnic_rnic::heap_count::CountingAlloc = softrnic_rnic::heap_count::CountingAlloc;
//! ```
//!
//! Until [`start`], an allocation costs one relaxed load more than the system's; after
//! it, two atomic additions (shared by all threads: a benchmark of memory, not speed).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

/// The system allocator, counting once [`start`] is called.
pub struct CountingAlloc;

static ON: AtomicBool = AtomicBool::new(false);
/// Octets allocated minus octets freed since [`start`] (memory allocated before and
/// freed after counts negative).
static NET: AtomicI64 = AtomicI64::new(0);
/// Allocations since [`start`].
static ALLOCS: AtomicU64 = AtomicU64::new(0);

fn counted(grow: i64) {
    if ON.load(Ordering::Relaxed) {
        NET.fetch_add(grow, Ordering::Relaxed);
        if grow > 0 {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
    }
}

// SAFETY: every call is passed to `System` unchanged (same layout, same pointer), which
// upholds the GlobalAlloc contract; the counting touches only atomics and never
// allocates.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc` is passed on as it is.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            counted(layout.size() as i64);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            counted(layout.size() as i64);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` (through this wrapper) with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        counted(-(layout.size() as i64));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as for `dealloc`, and `new_size` is the caller's, checked by it.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            counted(new_size as i64 - layout.size() as i64);
        }
        p
    }
}

/// Starts counting; true if [`CountingAlloc`] is the global allocator (otherwise
/// [`net`] stays at zero).
pub fn start() -> bool {
    ON.store(true, Ordering::Relaxed);
    let before = NET.load(Ordering::Relaxed);
    let probe = std::hint::black_box(Box::new([0u8; 64]));
    let counting = NET.load(Ordering::Relaxed) != before;
    drop(probe);
    counting
}

/// Net octets on the heap since [`start`]: allocated minus freed, as the program asked
/// for them (the allocator's own overhead per block, 8-16 octets with glibc, and
/// memory it keeps free are not included).
pub fn net() -> i64 {
    NET.load(Ordering::Relaxed)
}

/// Allocations since [`start`].
pub fn allocations() -> u64 {
    ALLOCS.load(Ordering::Relaxed)
}
