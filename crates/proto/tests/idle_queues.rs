//! Queues a burst grew give their memory back once they are empty again
//! (`Qp::shrink_idle_queues`): a QP that once had 128 Writes outstanding does not keep
//! 30 KiB of send queue for its life, while a ping-pong's short queues never shrink
//! (and so never reallocate). A counting allocator measures this thread's net heap.

use softrnic_proto::qp::{Qp, QpConfig, QpParams, TxFpdu};
use softrnic_proto::tpt::{Tpt, TptEntry};
use softrnic_proto::{Access, PdId, QpId, RegionId, SendWr, Sge};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

thread_local! {
    static NET: Cell<i64> = const { Cell::new(0) };
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

struct Counting;

// SAFETY: every call is forwarded unchanged to the system allocator, which upholds the
// GlobalAlloc contract; counting touches only const-initialised thread-local Cells.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = NET.try_with(|c| c.set(c.get() + layout.size() as i64));
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's layout obligations are passed on as they are.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let _ = NET.try_with(|c| c.set(c.get() - layout.size() as i64));
        // SAFETY: `ptr` came from `System.alloc` with this layout (see `alloc`).
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

fn net() -> i64 {
    NET.with(Cell::get)
}

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

/// Posts `n` Writes, sends them all and takes their completions.
fn burst(qp: &mut Qp, tpt: &Tpt, lkey: u32, n: u64, fpdu: &mut TxFpdu) {
    let sge = Sge {
        addr: 0,
        len: 64,
        lkey,
    };
    for i in 0..n {
        qp.post_send(SendWr::write(i, [sge], 0x10, 0x0201), tpt)
            .unwrap();
    }
    while qp.poll_transmit(fpdu) {
        qp.transmit_done();
    }
    assert_eq!(
        std::iter::from_fn(|| qp.poll_completion()).count(),
        n as usize
    );
    assert_eq!(qp.send_queue_len(), 0);
}

#[test]
fn a_burst_grows_the_queues_and_idle_gives_it_back() {
    let tpt = Tpt::new();
    let lkey = tpt
        .insert(TptEntry {
            pd: PdId(1),
            key: 1,
            base: 0,
            len: 4096,
            access: Access::all(),
            region: RegionId(0),
            valid: true,
        })
        .unwrap();
    let mut qp = Qp::new(QpConfig {
        id: QpId(1),
        pd: PdId(1),
        sq_depth: 256,
        rq_depth: 4,
    });
    qp.connect(QpParams::default()).unwrap();
    let mut fpdu = TxFpdu::default();
    // A ping-pong's queues: warmed up, then no allocation and nothing given back.
    burst(&mut qp, &tpt, lkey, 1, &mut fpdu);
    qp.shrink_idle_queues();
    let (base, allocs) = (net(), allocations());
    for _ in 0..100 {
        burst(&mut qp, &tpt, lkey, 1, &mut fpdu);
        qp.shrink_idle_queues();
    }
    assert_eq!(
        (net(), allocations()),
        (base, allocs),
        "one at a time: no churn"
    );
    // A burst of 128 outstanding grows the queues by tens of KiB...
    let before = net();
    for i in 0..128 {
        let sge = Sge {
            addr: 0,
            len: 64,
            lkey,
        };
        qp.post_send(SendWr::write(i, [sge], 0x10, 0x0201), &tpt)
            .unwrap();
    }
    let grown = net() - before;
    assert!(grown > 16 * 1024, "128 queued requests took {grown} octets");
    while qp.poll_transmit(&mut fpdu) {
        qp.transmit_done();
    }
    assert_eq!(std::iter::from_fn(|| qp.poll_completion()).count(), 128);
    // ...which stays while nobody says the QP is idle, and goes once it is.
    assert!(net() - before >= grown);
    qp.shrink_idle_queues();
    assert!(
        net() - before < 1024,
        "idle after the burst, the QP still holds {} octets more",
        net() - before
    );
    // A QP that streams bursts takes the room back in one allocation on the next one,
    // instead of regrowing the send queue by doubling.
    let allocs = allocations();
    for i in 0..128 {
        let sge = Sge {
            addr: 0,
            len: 64,
            lkey,
        };
        qp.post_send(SendWr::write(i, [sge], 0x10, 0x0201), &tpt)
            .unwrap();
    }
    assert_eq!(allocations() - allocs, 1, "the next burst's send queue");
    // Its completions likewise: the queue they wait in takes its room back at once.
    let allocs = allocations();
    while qp.poll_transmit(&mut fpdu) {
        qp.transmit_done();
    }
    assert_eq!(allocations() - allocs, 1, "the next burst's completions");
    assert_eq!(std::iter::from_fn(|| qp.poll_completion()).count(), 128);
}
