//! The counting allocator, installed as this test binary's global allocator: it counts
//! what is allocated, grown, shrunk and freed once started, and passes every block
//! through to the system allocator intact.

use softrnic_rnic::heap_count::{self, CountingAlloc};

#[global_allocator]
static HEAP: CountingAlloc = CountingAlloc;

#[test]
fn counts_net_octets_through_alloc_realloc_and_free() {
    assert!(heap_count::start(), "installed: the probe was counted");
    // Other tests' threads may allocate meanwhile: there are none in this binary, and
    // the harness is idle while a test runs alone.
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
