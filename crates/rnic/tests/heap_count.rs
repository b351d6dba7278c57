//! The counting allocator, installed as this test binary's global allocator: it counts
//! what is allocated, grown, shrunk and freed once started, and passes every block
//! through to the system allocator intact.
//!
//! The count is process-wide, so this binary has no test harness (`harness = false` in
//! Cargo.toml): libtest's own thread may allocate while a test runs, which made the
//! exact counts below fail now and then on a busy machine. `main` runs alone.

use softrnic_rnic::heap_count::{self, CountingAlloc};

#[global_allocator]
static HEAP: CountingAlloc = CountingAlloc;

fn main() {
    counts_net_octets_through_alloc_realloc_and_free();
    println!("heap_count: counts_net_octets_through_alloc_realloc_and_free ... ok");
}

fn counts_net_octets_through_alloc_realloc_and_free() {
    assert!(heap_count::start(), "installed: the probe was counted");
    // No other thread runs in this process.
    let base = heap_count::net();
    let allocs = heap_count::allocations();
    let mut v: Vec<u8> = Vec::with_capacity(1 << 20);
    assert_eq!(heap_count::net() - base, 1 << 20);
    v.extend((0..1 << 20).map(|i| i as u8));
    v.reserve_exact(3 << 20);
    assert_eq!(heap_count::net() - base, 4 << 20, "grown by realloc");
    v.shrink_to_fit();
    assert_eq!(heap_count::net() - base, 1 << 20, "shrunk by realloc");
    assert!(
        v.iter().enumerate().all(|(i, &b)| b == i as u8),
        "contents kept"
    );
    let z = vec![0u64; 1000];
    assert_eq!(heap_count::net() - base, (1 << 20) + 8000, "zeroed");
    assert!(z.iter().all(|&x| x == 0));
    drop(z);
    drop(v);
    assert_eq!(heap_count::net(), base, "all freed");
    assert!(heap_count::allocations() >= allocs + 2);
}
