//! Posting a work request allocates nothing: the scatter/gather list and the memory it
//! resolves to are held inline (the queues themselves grow once, during warm-up).
//! A counting allocator wrapped around the system one counts this thread's allocations.

use softrnic_proto::qp::{Qp, QpConfig, QpParams, RxCtx, TxFpdu};
use softrnic_proto::tpt::{Tpt, TptEntry};
use softrnic_proto::{Access, PdId, QpId, RecvWr, RegionId, SendWr, Sge};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

struct Counting;

// SAFETY: every call is forwarded unchanged to the system allocator, which upholds the
// GlobalAlloc contract; counting touches only a const-initialised thread-local Cell.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's layout obligations are passed on as they are.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout (see `alloc`).
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

#[test]
fn posting_and_completing_allocates_nothing() {
    let tpt = Tpt::new();
    let lkey = tpt
        .insert(TptEntry {
            pd: PdId(1),
            key: 1,
            base: 0,
            len: 1 << 20,
            access: Access::all(),
            region: RegionId(0),
            valid: true,
        })
        .unwrap();
    let sge = |at: u64, len: u32| Sge {
        addr: at,
        len,
        lkey,
    };
    let cfg = |id| QpConfig {
        id: QpId(id),
        pd: PdId(1),
        sq_depth: 64,
        rq_depth: 64,
    };
    let (mut tx, mut rx) = (Qp::new(cfg(1)), Qp::new(cfg(2)));
    tx.connect(QpParams::default()).unwrap();
    rx.connect(QpParams::default()).unwrap();
    let memory = vec![0u8; 1 << 20];
    let mut fpdu = TxFpdu::default();
    let mut wire = Vec::with_capacity(2048);
    let mut round = |tx: &mut Qp, rx: &mut Qp, tpt: &Tpt, wr_id: u64| {
        let two = [sge(0, 3000), sge(8192, 100)];
        rx.post_recv(RecvWr::new(wr_id, two), tpt).unwrap();
        tx.post_send(SendWr::send(wr_id, sge(4096, 64)), tpt)
            .unwrap();
        tx.post_send(
            SendWr::write(wr_id + 1, two, 0x10, 0x0201).unsignaled(),
            tpt,
        )
        .unwrap();
        let mut fpdus = 0;
        while tx.poll_transmit(&mut fpdu) {
            if fpdus == 0 {
                // The Send goes to the receiver (CRC off: the field stays zero).
                wire.clear();
                wire.extend_from_slice(fpdu.header_bytes());
                for c in &fpdu.chunks {
                    let at = c.offset as usize;
                    wire.extend_from_slice(&memory[at..at + c.len]);
                }
                wire.resize(fpdu.wire_len(), 0);
            }
            tx.transmit_done();
            fpdus += 1;
        }
        let fed = rx.handle_input(&wire, &mut RxCtx::new(tpt), &mut |_, _| {});
        let sent = std::iter::from_fn(|| tx.poll_completion()).count();
        let received = std::iter::from_fn(|| rx.poll_completion()).count();
        (fpdus, fed, sent, received)
    };
    // Warm-up: the queues reach their working capacity.
    for i in 0..4 {
        round(&mut tx, &mut rx, &tpt, 10 * i);
    }
    let before = allocations();
    for i in 4..1000 {
        // One FPDU for the Send, three for the 3100-octet Write (1448-octet FPDUs); the
        // Send (64 octets: 2 + 18 + 64 + 4 on the wire) is received whole; the
        // unsignaled Write gives no completion.
        assert_eq!(round(&mut tx, &mut rx, &tpt, 10 * i), (4, 88, 1, 1));
    }
    assert_eq!(allocations() - before, 0, "allocations while posting");
}
