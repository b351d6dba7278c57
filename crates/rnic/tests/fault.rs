//! Faults injected under the QPs (`DeviceConfig::fault`), through the public verbs API
//! over loopback: a connection cut inside an FPDU (FIN) or inside a Read Response
//! (RST), and transfers through 1-octet reads and writes. Every posted work request
//! completes exactly once, with the status the fault calls for, and what is placed is
//! what was sent.

mod common;

use common::*;
use softrnic_rnic::*;
use std::io::ErrorKind;
use std::num::NonZeroUsize;
use std::time::Duration;

const MIB: usize = 1 << 20;

/// A connected pair (active `a`, passive `b`) whose devices have their own configs.
fn pair_of(a_cfg: DeviceConfig, b_cfg: DeviceConfig) -> (End, End) {
    let a = end().config(a_cfg).cq(4096).queues(64, 64).build();
    let b = end().config(b_cfg).cq(4096).queues(64, 64).build();
    connect(&a, &b);
    (a, b)
}

fn with_fault(fault: FaultPlan) -> DeviceConfig {
    DeviceConfig {
        fault: Some(fault),
        ..DeviceConfig::default()
    }
}

/// Every event queued on `dev` once `qp`'s Disconnected event has arrived, in order.
fn events_until_disconnected(dev: &Device, qp: &Qp) -> Vec<AsyncEvent> {
    disconnected(dev, qp);
    let mut v: Vec<AsyncEvent> = std::iter::from_fn(|| dev.poll_event()).collect();
    v.insert(0, AsyncEvent::Disconnected { qp: qp.id() });
    // `disconnected` took Disconnected out of the queue: put it back after the rest.
    v.rotate_left(1);
    v
}

/// The events of a connection lost with `error`: established, lost, disconnected.
fn lost_with(qp: &Qp, error: ErrorKind) -> Vec<AsyncEvent> {
    vec![
        AsyncEvent::Established { qp: qp.id() },
        AsyncEvent::ConnectionLost { qp: qp.id(), error },
        AsyncEvent::Disconnected { qp: qp.id() },
    ]
}

/// (wr_id, status) of each completion, in CQ order.
fn statuses(got: &[Completion]) -> Vec<(u64, WcStatus)> {
    got.iter().map(|c| (c.wr_id, c.status)).collect()
}

/// Payload octets `qp` placed into registered memory.
fn placed(qp: &Qp) -> usize {
    let s = qp.stats();
    (s.rx_copied_bytes + s.rx_direct_bytes) as usize
}

#[test]
fn peer_fin_inside_an_fpdu_fails_the_receiver_and_flushes_everything() {
    // The sender's stream ends 100000 octets in: inside the second 65000-octet FPDU of
    // the Write (loopback FPDU size).
    const CUT: u64 = 100_000;
    let (a, b) = pair_of(
        with_fault(FaultPlan {
            end_after_sent: Some(CUT),
            end_with: FaultEnd::Fin,
            ..FaultPlan::default()
        }),
        DeviceConfig::default(),
    );
    let data = pattern(MIB, 1);
    let src = a.pd.alloc_mr(MIB, Access::empty()).unwrap();
    src.write(0, &data).unwrap();
    let target =
        b.pd.alloc_mr(MIB, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
    let rbuf = b.pd.alloc_mr(4 * 4096, Access::LOCAL_WRITE).unwrap();
    for i in 0..4 {
        b.qp.post_recv(RecvWr::new(100 + i as u64, rbuf.sge(i * 4096, 4096)))
            .unwrap();
    }
    let abuf = a.pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    for i in 0..2 {
        a.qp.post_recv(RecvWr::new(200 + i, abuf.sge(0, 64)))
            .unwrap();
    }
    a.qp.post_send_batch([
        SendWr::write(1, src.sge(0, MIB), target.addr(), target.rkey()),
        SendWr::send(2, src.sge(0, 4096)),
    ])
    .unwrap();

    // The receiver: the stream ended inside an FPDU, so it was lost.
    assert_eq!(
        events_until_disconnected(&b.dev, &b.qp),
        lost_with(&b.qp, ErrorKind::UnexpectedEof)
    );
    assert_eq!(b.qp.state(), QpState::Error);
    let gb = drained(&b.cq);
    exactly_once(&gb, 100..104);
    assert!(
        gb.iter().all(|c| c.status == WcStatus::WrFlushError),
        "{gb:?}"
    );
    // What was placed before the cut is what was sent.
    let n = placed(&b.qp);
    assert!(n > 0 && n < CUT as usize, "placed {n} octets");
    assert!(target.to_vec()[..n] == data[..n], "placed data differs");

    // The sender: its stream is closed under it; nothing it posted succeeded.
    assert_eq!(
        events_until_disconnected(&a.dev, &a.qp),
        lost_with(&a.qp, ErrorKind::BrokenPipe)
    );
    assert_eq!(a.qp.state(), QpState::Error);
    let ga = drained(&a.cq);
    exactly_once(&ga, [1, 2, 200, 201]);
    assert!(
        ga.iter().all(|c| c.status == WcStatus::WrFlushError),
        "{ga:?}"
    );
    assert_eq!(
        statuses(&ga)[..2],
        [(1, WcStatus::WrFlushError), (2, WcStatus::WrFlushError)]
    );
    assert_eq!(a.cq.poll_one(), None);
    assert_eq!(b.cq.poll_one(), None);
}

#[test]
fn reset_inside_a_read_response_fails_the_read_once() {
    // The responder resets its connection 300000 octets into its Read Responses.
    const CUT: u64 = 300_000;
    let (a, b) = pair_of(
        DeviceConfig::default(),
        with_fault(FaultPlan {
            end_after_sent: Some(CUT),
            end_with: FaultEnd::Reset,
            ..FaultPlan::default()
        }),
    );
    let data = pattern(MIB, 2);
    let src =
        b.pd.alloc_mr(MIB, Access::LOCAL_WRITE | Access::REMOTE_READ)
            .unwrap();
    src.write(0, &data).unwrap();
    let sink = a.pd.alloc_mr(2 * MIB, Access::LOCAL_WRITE).unwrap();
    let bbuf = b.pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    for i in 0..2 {
        b.qp.post_recv(RecvWr::new(100 + i, bbuf.sge(0, 64)))
            .unwrap();
    }
    let abuf = a.pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    for i in 0..2 {
        a.qp.post_recv(RecvWr::new(200 + i, abuf.sge(0, 64)))
            .unwrap();
    }
    // Two Reads: the reset cuts the first one's response; the second never starts.
    a.qp.post_send_batch([
        SendWr::read(1, sink.sge(0, MIB), src.addr(), src.rkey()),
        SendWr::read(2, sink.sge(MIB, MIB), src.addr(), src.rkey()),
    ])
    .unwrap();

    assert_eq!(
        events_until_disconnected(&a.dev, &a.qp),
        lost_with(&a.qp, ErrorKind::ConnectionReset)
    );
    assert_eq!(a.qp.state(), QpState::Error);
    let ga = drained(&a.cq);
    exactly_once(&ga, [1, 2, 200, 201]);
    assert_eq!(
        statuses(&ga),
        [
            (1, WcStatus::WrFlushError),
            (2, WcStatus::WrFlushError),
            (200, WcStatus::WrFlushError),
            (201, WcStatus::WrFlushError),
        ]
    );
    let n = placed(&a.qp);
    assert!(n > 0 && n < CUT as usize, "placed {n} octets");
    assert!(sink.to_vec()[..n] == data[..n], "placed data differs");

    // The responder reset the connection itself: its next send failed.
    assert_eq!(
        events_until_disconnected(&b.dev, &b.qp),
        lost_with(&b.qp, ErrorKind::ConnectionReset)
    );
    assert_eq!(b.qp.state(), QpState::Error);
    let gb = drained(&b.cq);
    exactly_once(&gb, 100..102);
    assert!(
        gb.iter().all(|c| c.status == WcStatus::WrFlushError),
        "{gb:?}"
    );
    assert_eq!(a.cq.poll_one(), None);
    assert_eq!(b.cq.poll_one(), None);
}

/// A plan of reads and sends of at most `read`/`write` octets per call.
fn short_io(read: usize, write: usize) -> DeviceConfig {
    with_fault(FaultPlan {
        max_read: NonZeroUsize::new(read),
        max_write: NonZeroUsize::new(write),
        ..FaultPlan::default()
    })
}

/// A 1 MiB Write, a 1 MiB Send and a 1 MiB Read between devices whose every read and
/// send moves `octets` octets at most (after a `delay` each): all complete once, with
/// success, and the data arrives octet for octet.
fn transfers_through(octets: usize, size: usize, delay: Duration) {
    let cfg = || {
        let mut c = short_io(octets, octets);
        if let Some(f) = c.fault.as_mut() {
            f.delay = delay;
        }
        c
    };
    let (a, b) = pair_of(cfg(), cfg());
    let (w, s, r) = (pattern(size, 3), pattern(size, 4), pattern(size, 5));
    let src = a.pd.alloc_mr(2 * size, Access::empty()).unwrap();
    src.write(0, &w).unwrap();
    src.write(size, &s).unwrap();
    let target =
        b.pd.alloc_mr(size, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
    let inbox = b.pd.alloc_mr(size, Access::LOCAL_WRITE).unwrap();
    let exposed = b.pd.alloc_mr(size, Access::REMOTE_READ).unwrap();
    exposed.write(0, &r).unwrap();
    let sink = a.pd.alloc_mr(size, Access::LOCAL_WRITE).unwrap();
    b.qp.post_recv(RecvWr::new(100, inbox.sge(0, size)))
        .unwrap();

    a.qp.post_send_batch([
        SendWr::write(1, src.sge(0, size), target.addr(), target.rkey()),
        SendWr::send(2, src.sge(size, size)),
        SendWr::read(3, sink.sge(0, size), exposed.addr(), exposed.rkey()),
    ])
    .unwrap();
    let wait = Duration::from_secs(300);
    let ga = a.cq.wait_for(3, wait);
    let gb = b.cq.wait_for(1, wait);
    assert_eq!(
        ga.iter()
            .map(|c| (c.wr_id, c.status, c.opcode))
            .collect::<Vec<_>>(),
        [
            (1, WcStatus::Success, WcOpcode::Write),
            (2, WcStatus::Success, WcOpcode::Send),
            (3, WcStatus::Success, WcOpcode::Read),
        ]
    );
    assert_eq!(
        gb.iter()
            .map(|c| (c.wr_id, c.status, c.opcode, c.byte_len))
            .collect::<Vec<_>>(),
        [(100, WcStatus::Success, WcOpcode::Recv, size as u32)]
    );
    assert!(target.to_vec() == w, "Write data differs");
    assert!(inbox.to_vec() == s, "Send data differs");
    assert!(sink.to_vec() == r, "Read data differs");
    // Every read and send really was short: at least one call per `octets` of payload.
    let per = |n: usize| (n / octets) as u64;
    assert!(
        b.qp.stats().rx_syscalls >= per(2 * size),
        "{:?}",
        b.qp.stats()
    );
    assert!(a.qp.stats().rx_syscalls >= per(size), "{:?}", a.qp.stats());
    assert!(
        a.qp.stats().tx_syscalls >= per(2 * size),
        "{:?}",
        a.qp.stats()
    );
    assert!(b.qp.stats().tx_syscalls >= per(size), "{:?}", b.qp.stats());
    assert_eq!(a.cq.poll_one(), None);
    assert_eq!(b.cq.poll_one(), None);
    assert_eq!(a.qp.state(), QpState::Rts);
    assert_eq!(b.qp.state(), QpState::Rts);
}

#[test]
fn one_octet_reads_and_writes_carry_whole_1mib_transfers() {
    transfers_through(1, MIB, Duration::ZERO);
}

#[test]
fn delayed_short_reads_and_writes_carry_transfers() {
    transfers_through(4000, 64 << 10, Duration::from_micros(200));
}
