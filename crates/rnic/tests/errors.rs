//! Protection faults between two devices over loopback TCP: every TPT violation of an
//! RDMA Write or an RDMA Read Request ends the connection with the exact Terminate cause
//! of RFC 5040/5041, seen at both ends (the target detects it, the initiator receives
//! it), with the exact completion status at the initiator, no octet outside what the
//! STag allowed touched, and every work request completing exactly once afterwards.

mod common;

use common::*;
use softrnic_rnic::*;
use softrnic_wire::terminate::Layer;

/// The byte memory is filled with before each fault; it must still be there after.
const FILL: u8 = 0x5a;
/// Length of the exposed region (and of each guard area around it).
const LEN: usize = 4096;
/// Octets each faulting operation moves.
const OP_LEN: usize = 8;

fn ddp_tagged(code: u8) -> TerminateCause {
    TerminateCause::new(Layer::Ddp, 1, code)
}

fn rdmap_protection(code: u8) -> TerminateCause {
    TerminateCause::new(Layer::Rdmap, 1, code)
}

/// A region registered in the middle of memory the test owns, with a guard area of
/// `LEN` octets on each side, so a test can prove that nothing outside the region was
/// touched. `mr` is declared first so it is dropped (deregistered) before `mem` is freed.
struct Guarded {
    mr: Option<Mr>,
    mem: Vec<u8>,
}

impl Guarded {
    fn new(pd: &Pd, access: Access) -> Guarded {
        let mut mem = vec![FILL; 3 * LEN];
        // SAFETY: `mem` is a live allocation of 3 * LEN octets, so `LEN..2 * LEN` is in
        // bounds. Its heap buffer never moves (the Vec is never resized) and outlives the
        // region: `mr` is dropped first, in `untouched` or by field order, and after the
        // QP has gone to error no transfer through the region is in flight. The test
        // reads `mem` only after the region is deregistered.
        let mr = unsafe { pd.register_raw(mem.as_mut_ptr().add(LEN), LEN, access) }.unwrap();
        Guarded { mr: Some(mr), mem }
    }

    fn mr(&self) -> &Mr {
        self.mr.as_ref().unwrap()
    }

    /// Deregisters the region, then checks that neither it nor its guards changed.
    fn untouched(mut self) {
        self.mr = None;
        if let Some(i) = self.mem.iter().position(|&x| x != FILL) {
            panic!(
                "octet {} (region offset {}) was changed to {:#x}",
                i,
                i as isize - LEN as isize,
                self.mem[i]
            );
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Write,
    Read,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// An STag whose index names no region.
    UnknownStag,
    /// The region's STag with another consumer key (low byte).
    WrongKey,
    /// The access runs past the region's end.
    BeyondEnd,
    /// The access starts before the region's start.
    BeforeStart,
    /// The region lacks the remote right the operation needs.
    MissingRight,
    /// The region belongs to another PD on the target device than the target QP's.
    WrongPd,
    /// The STag was invalidated by a Send with Invalidate.
    InvalidatedBySend,
    /// The STag was invalidated by a local invalidate on the target.
    InvalidatedLocally,
}

/// Checks the Terminate at both ends: `target` detected it and sent it, `initiator`
/// received it; then both connections close and both QPs are in Error.
fn terminated_both_ends(initiator: &End, target: &End, cause: TerminateCause) {
    assert_eq!(
        fatal_event(&target.dev, &target.qp),
        AsyncEvent::QpFatal {
            qp: target.qp.id(),
            cause,
            remote: false
        },
        "target's event"
    );
    assert_eq!(
        fatal_event(&initiator.dev, &initiator.qp),
        AsyncEvent::QpFatal {
            qp: initiator.qp.id(),
            cause,
            remote: true
        },
        "initiator's event"
    );
    assert_eq!(target.qp.fatal_cause(), Some((cause, false)));
    assert_eq!(initiator.qp.fatal_cause(), Some((cause, true)));
    disconnected(&target.dev, &target.qp);
    disconnected(&initiator.dev, &initiator.qp);
    assert_eq!(target.qp.state(), QpState::Error);
    assert_eq!(initiator.qp.state(), QpState::Error);
}

/// Runs one faulting `op` from the active end `a` against the passive end `b`.
fn violation(op: Op, fault: Fault, cause: TerminateCause, progress: ProgressMode) {
    let (a, b) = end().progress(progress).pair();
    let all = Access::LOCAL_WRITE
        | Access::REMOTE_WRITE
        | Access::REMOTE_READ
        | Access::REMOTE_INVALIDATE;
    let access = match (fault, op) {
        (Fault::MissingRight, Op::Write) => all - Access::REMOTE_WRITE,
        (Fault::MissingRight, Op::Read) => all - Access::REMOTE_READ,
        _ => all,
    };
    let other_pd = b.dev.alloc_pd();
    let exposed = Guarded::new(
        if fault == Fault::WrongPd {
            &other_pd
        } else {
            &b.pd
        },
        access,
    );
    let mr = exposed.mr();
    let addr = match fault {
        Fault::BeyondEnd => mr.addr() + (LEN - OP_LEN / 2) as u64,
        Fault::BeforeStart => mr.addr() - (OP_LEN / 2) as u64,
        _ => mr.addr() + 16,
    };
    let rkey = match fault {
        Fault::UnknownStag => (0x00ab_cdef << 8) | 0x42,
        Fault::WrongKey => (mr.rkey() & !0xff) | u32::from((mr.rkey() as u8).wrapping_add(1)),
        _ => mr.rkey(),
    };
    if fault == Fault::WrongKey {
        assert_eq!(rkey >> 8, mr.rkey() >> 8, "same index");
        assert_ne!(rkey, mr.rkey(), "another consumer key");
    }
    match fault {
        Fault::InvalidatedBySend => {
            let note = b.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
            b.qp.post_recv(RecvWr::new(50, note.sge(0, 64))).unwrap();
            let src = a.pd.alloc_mr(64, Access::empty()).unwrap();
            a.qp.post_send(SendWr::send(40, src.sge(0, 4)).invalidate(mr.rkey()))
                .unwrap();
            let s = one(&a.cq);
            assert_eq!((s.wr_id, s.status), (40, WcStatus::Success));
            let r = one(&b.cq);
            assert_eq!(
                (r.wr_id, r.status, r.invalidated),
                (50, WcStatus::Success, Some(mr.rkey()))
            );
            assert!(!mr.is_valid());
        }
        Fault::InvalidatedLocally => {
            b.qp.post_send(SendWr::local_invalidate(60, mr.rkey()))
                .unwrap();
            let c = one(&b.cq);
            assert_eq!(
                (c.wr_id, c.status, c.opcode),
                (60, WcStatus::Success, WcOpcode::LocalInvalidate)
            );
            assert!(!mr.is_valid());
        }
        _ => {}
    }

    match op {
        Op::Write => {
            let src = a.pd.alloc_mr(LEN, Access::empty()).unwrap();
            src.write(0, &pattern(LEN, 1)).unwrap();
            a.qp.post_send(SendWr::write(1, src.sge(0, OP_LEN), addr, rkey))
                .unwrap();
            // A Write completes when it is handed to TCP, before the peer looks at it.
            let c = one(&a.cq);
            assert_eq!(
                (c.wr_id, c.status, c.opcode, c.byte_len),
                (1, WcStatus::Success, WcOpcode::Write, OP_LEN as u32)
            );
            terminated_both_ends(&a, &b, cause);
        }
        Op::Read => {
            let sink = a.pd.alloc_mr(LEN, Access::LOCAL_WRITE).unwrap();
            sink.fill(0, LEN, FILL).unwrap();
            a.qp.post_send(SendWr::read(1, sink.sge(0, OP_LEN), addr, rkey))
                .unwrap();
            let c = one(&a.cq);
            assert_eq!(
                (c.wr_id, c.status, c.opcode),
                (1, WcStatus::RemoteAccessError, WcOpcode::Read)
            );
            terminated_both_ends(&a, &b, cause);
            assert!(
                sink.to_vec().iter().all(|&x| x == FILL),
                "a failed Read places nothing in its sink"
            );
        }
    }
    // Nothing else completes on either side: the Disconnected events came after every
    // completion the QPs will ever produce.
    assert_eq!(a.cq.poll_one(), None);
    assert_eq!(b.cq.poll_one(), None);
    exposed.untouched();
}

macro_rules! violations {
    ($($name:ident: $op:ident, $fault:ident => $cause:expr;)*) => {$(
        mod $name {
            use super::*;

            #[test]
            fn hybrid_progress() {
                violation(Op::$op, Fault::$fault, $cause, ProgressMode::Hybrid);
            }

            #[test]
            fn engine_progress() {
                violation(Op::$op, Fault::$fault, $cause, ProgressMode::Engine);
            }
        }
    )*};
}

violations! {
    write_unknown_stag: Write, UnknownStag => ddp_tagged(0x00);
    write_wrong_key: Write, WrongKey => ddp_tagged(0x00);
    write_beyond_end: Write, BeyondEnd => ddp_tagged(0x01);
    write_before_start: Write, BeforeStart => ddp_tagged(0x01);
    write_without_remote_write: Write, MissingRight => rdmap_protection(0x02);
    write_wrong_pd: Write, WrongPd => ddp_tagged(0x02);
    write_invalidated_by_send: Write, InvalidatedBySend => ddp_tagged(0x00);
    write_invalidated_locally: Write, InvalidatedLocally => ddp_tagged(0x00);
    read_unknown_stag: Read, UnknownStag => rdmap_protection(0x00);
    read_wrong_key: Read, WrongKey => rdmap_protection(0x00);
    read_beyond_end: Read, BeyondEnd => rdmap_protection(0x01);
    read_before_start: Read, BeforeStart => rdmap_protection(0x01);
    read_without_remote_read: Read, MissingRight => rdmap_protection(0x02);
    read_wrong_pd: Read, WrongPd => rdmap_protection(0x03);
    read_invalidated_by_send: Read, InvalidatedBySend => rdmap_protection(0x00);
    read_invalidated_locally: Read, InvalidatedLocally => rdmap_protection(0x00);
}

/// After a fatal error, everything flushes: receives posted before it on both sides,
/// and sends and receives posted after it. Every work request completes exactly once.
#[test]
fn flush_after_fatal_error_completes_every_request_once() {
    flush_after_fatal_error(ProgressMode::Hybrid);
}

#[test]
fn flush_after_fatal_error_completes_every_request_once_engine_progress() {
    flush_after_fatal_error(ProgressMode::Engine);
}

fn flush_after_fatal_error(progress: ProgressMode) {
    let (a, b) = end().progress(progress).pair();
    let abuf = a.pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let bbuf = b.pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    for i in 0..4u64 {
        a.qp.post_recv(RecvWr::new(200 + i, abuf.sge(64 * i as usize, 64)))
            .unwrap();
        b.qp.post_recv(RecvWr::new(100 + i, bbuf.sge(64 * i as usize, 64)))
            .unwrap();
    }
    let target =
        b.pd.alloc_mr(
            4096,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        )
        .unwrap();
    let src = a.pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let data = pattern(64, 3);
    src.write(0, &data).unwrap();
    // A good Write, then a Read from an STag that does not exist.
    a.qp.post_send_batch([
        SendWr::write(1, src.sge(0, 64), target.addr(), target.rkey()),
        SendWr::read(
            2,
            src.sge(1024, 64),
            target.addr(),
            (0x00ab_cdef << 8) | 0x42,
        ),
    ])
    .unwrap();
    let cause = rdmap_protection(0x00);
    terminated_both_ends(&a, &b, cause);
    // The stream was processed in order up to the fault: the Write is in place.
    let mut placed = [0u8; 64];
    target.read(0, &mut placed).unwrap();
    assert_eq!(&placed[..], &data[..]);

    // Posted after the error: flushed at once.
    a.qp.post_send(SendWr::send(3, src.sge(0, 8))).unwrap();
    a.qp.post_send(SendWr::write(
        4,
        src.sge(0, 8),
        target.addr(),
        target.rkey(),
    ))
    .unwrap();
    a.qp.post_send(SendWr::read(5, src.sge(0, 8), target.addr(), target.rkey()))
        .unwrap();
    a.qp.post_recv(RecvWr::new(210, abuf.sge(0, 64))).unwrap();
    b.qp.post_send(SendWr::send(300, bbuf.sge(0, 8))).unwrap();
    b.qp.post_send(SendWr::write(301, bbuf.sge(0, 8), src.addr(), src.rkey()))
        .unwrap();

    let ga = take(&a.cq, 10);
    let gb = take(&b.cq, 6);
    exactly_once(&ga, [1, 2, 3, 4, 5, 200, 201, 202, 203, 210]);
    exactly_once(&gb, [100, 101, 102, 103, 300, 301]);
    // The send queue completes in posting order.
    let sends: Vec<(u64, WcStatus, WcOpcode)> = ga
        .iter()
        .filter(|c| c.wr_id < 100)
        .map(|c| (c.wr_id, c.status, c.opcode))
        .collect();
    assert_eq!(
        sends,
        vec![
            (1, WcStatus::Success, WcOpcode::Write),
            (2, WcStatus::RemoteAccessError, WcOpcode::Read),
            (3, WcStatus::WrFlushError, WcOpcode::Send),
            (4, WcStatus::WrFlushError, WcOpcode::Write),
            (5, WcStatus::WrFlushError, WcOpcode::Read),
        ]
    );
    for c in ga.iter().filter(|c| c.wr_id >= 200) {
        assert_eq!(
            (c.status, c.opcode),
            (WcStatus::WrFlushError, WcOpcode::Recv)
        );
    }
    for c in &gb {
        assert_eq!(c.status, WcStatus::WrFlushError, "{c:?}");
    }
    assert_eq!(status_of(&gb, 300), WcStatus::WrFlushError);
    // And nothing more, ever: the Disconnected events have been seen.
    assert_eq!(a.cq.poll_one(), None);
    assert_eq!(b.cq.poll_one(), None);
}

/// On iWARP a Send that finds no receive buffer is fatal: the receiver terminates with
/// DDP "untagged buffer: no buffer available" and both QPs end in Error.
#[test]
fn send_without_posted_receive_terminates() {
    let (a, b) = pair();
    let abuf = a.pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    a.qp.post_recv(RecvWr::new(200, abuf.sge(0, 64))).unwrap();
    let src = a.pd.alloc_mr(64, Access::empty()).unwrap();
    a.qp.post_send(SendWr::send(1, src.sge(0, 64))).unwrap();
    let s = one(&a.cq);
    assert_eq!(
        (s.wr_id, s.status, s.opcode),
        (1, WcStatus::Success, WcOpcode::Send)
    );
    terminated_both_ends(&a, &b, TerminateCause::new(Layer::Ddp, 2, 0x02));
    let r = one(&a.cq);
    assert_eq!((r.wr_id, r.status), (200, WcStatus::WrFlushError));
    // A receive posted now, too late, flushes.
    let bbuf = b.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    b.qp.post_recv(RecvWr::new(100, bbuf.sge(0, 64))).unwrap();
    let r = one(&b.cq);
    assert_eq!((r.wr_id, r.status), (100, WcStatus::WrFlushError));
    assert_eq!(a.cq.poll_one(), None);
    assert_eq!(b.cq.poll_one(), None);
}
