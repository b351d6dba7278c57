//! A busy-polling consumer's poll that reads a message hands what the message completes
//! to the CQ in that same poll, while that poll skips the delivery step when the
//! message completes nothing (a Write placed) or nothing was read. Observed without
//! time: the QP's counters are read under its lock, so once they show the octets
//! taken, the pass that took them has ended, and its completion must be in the CQ.

mod common;

use common::*;
use softrnic_rnic::handoff::CLAIM_AFTER;
use softrnic_rnic::*;

/// Octets the receive path has taken from the socket so far.
fn taken(qp: &Qp) -> u64 {
    let s = qp.stats();
    s.rx_copied_bytes + s.rx_direct_bytes
}

/// Polls `cq` until it returns a completion. Once `qp`'s counters pass `before`, the
/// completion must already be there: the poll that read the message delivered it.
fn next_after_read(cq: &Cq, qp: &Qp, before: u64) -> Completion {
    loop {
        if let Some(c) = cq.poll_one() {
            return c;
        }
        if taken(qp) > before {
            return cq
                .poll_one()
                .expect("the poll that read the message delivered its completion");
        }
    }
}

#[test]
fn a_poll_that_reads_a_send_or_a_read_response_delivers_it_and_a_write_stays_quiet() {
    let (a, b) = pair();
    let size = 64;
    // `a`'s source is also what `b` reads.
    let src =
        a.pd.alloc_mr(size, Access::LOCAL_WRITE | Access::REMOTE_READ)
            .unwrap();
    let landing =
        b.pd.alloc_mr(size, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
    let sink = b.pd.alloc_mr(size, Access::LOCAL_WRITE).unwrap();
    // Past the claim: `b`'s consumer holds its socket, and only its polls read it.
    for _ in 0..2 * CLAIM_AFTER {
        assert!(b.cq.poll_one().is_none());
        assert!(a.cq.poll_one().is_none());
    }
    for round in 0..32u64 {
        let data = pattern(size, round);
        src.write(0, &data).unwrap();
        // A Write completes nothing at `b`: its poll places it and returns at once.
        let before = taken(&b.qp);
        a.qp.post_send(SendWr::write(
            1,
            src.sge(0, size),
            landing.addr(),
            landing.rkey(),
        ))
        .unwrap();
        let w = take(&a.cq, 1);
        assert_eq!(w[0].status, WcStatus::Success);
        while taken(&b.qp) == before {
            assert!(
                b.cq.poll_one().is_none(),
                "a Write completes nothing at its target"
            );
        }
        assert!(landing.to_vec() == data, "round {round}: Write placed");
        // A Send: its receive completion comes with the poll that read it.
        b.qp.post_recv(RecvWr::new(2, sink.sge(0, size))).unwrap();
        let before = taken(&b.qp);
        a.qp.post_send(SendWr::send(3, src.sge(0, size))).unwrap();
        let c = next_after_read(&b.cq, &b.qp, before);
        assert_eq!(
            (c.wr_id, c.opcode, c.status, c.byte_len),
            (2, WcOpcode::Recv, WcStatus::Success, size as u32)
        );
        assert!(sink.to_vec() == data, "round {round}: Send placed");
        assert_eq!(take(&a.cq, 1)[0].status, WcStatus::Success);
        // A Read: `b` is the requester; the poll that reads the Response completes it.
        sink.fill(0, size, 0).unwrap();
        let before = taken(&b.qp);
        b.qp.post_send(SendWr::read(4, sink.sge(0, size), src.addr(), src.rkey()))
            .unwrap();
        let c = next_after_read(&b.cq, &b.qp, before);
        assert_eq!(
            (c.wr_id, c.opcode, c.status),
            (4, WcOpcode::Read, WcStatus::Success)
        );
        assert!(sink.to_vec() == data, "round {round}: Read placed");
    }
}

/// QPs dropped from a CQ leave it (the CQ holds its QPs until their `Qp` goes): a CQ
/// that once had more QPs than its consumer reads itself (`CONSUMER_READS_MAX_QPS`, 8)
/// and has one left is again read by its consumer, who claims the socket, not by the
/// engine. Every Write is checked in place. (Were the dropped QPs still listed, the
/// engine would read every one of the 100 Writes; with the claim it reads none, and a
/// lease lost to a stalled test thread costs a few: half is far from both.)
#[test]
fn dropped_qps_leave_their_cq_and_its_consumer_reads_again() {
    let (a, b) = pair();
    let extra: Vec<Qp> = (0..8)
        .map(|_| a.dev.create_qp(&a.pd, QpInit::new(&a.cq, 16, 16)).unwrap())
        .collect();
    drop(extra);
    let size = 64;
    let landing =
        a.pd.alloc_mr(size, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
    let src = b.pd.alloc_mr(size, Access::LOCAL_WRITE).unwrap();
    for _ in 0..2 * CLAIM_AFTER {
        assert!(a.cq.poll_one().is_none());
    }
    let events = |d: &Device| d.engines().iter().map(|e| e.events).sum::<u64>();
    let before = events(&a.dev);
    let writes = 100u64;
    for i in 0..writes {
        let data = pattern(size, i);
        src.write(0, &data).unwrap();
        b.qp.post_send(SendWr::write(
            i,
            src.sge(0, size),
            landing.addr(),
            landing.rkey(),
        ))
        .unwrap();
        while landing.to_vec() != data {
            assert!(
                a.cq.poll_one().is_none(),
                "a Write completes nothing at its target"
            );
        }
        assert_eq!(take(&b.cq, 1)[0].status, WcStatus::Success);
    }
    let read_by_engine = events(&a.dev) - before;
    assert!(
        read_by_engine < writes / 2,
        "the engine read {read_by_engine} of {writes} Writes: the dropped QPs are still on the CQ"
    );
}
