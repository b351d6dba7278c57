//! `Cq::poll` in hybrid progress: an empty poll gives the CPU away when another thread
//! holds what it waits for, and only then.

use super::*;
use crate::{Device, DeviceConfig, ProgressMode, QpInit};
use softrnic_proto::{QpId, WcOpcode};

fn hybrid() -> Device {
    Device::open(DeviceConfig {
        progress: ProgressMode::Hybrid,
        ..DeviceConfig::default()
    })
    .unwrap()
}

fn plain(wr_id: u64) -> Completion {
    Completion {
        wr_id,
        status: WcStatus::Success,
        opcode: WcOpcode::Recv,
        byte_len: 64,
        qp: QpId(7),
        solicited: false,
        invalidated: None,
    }
}

/// A ring that holds a completion the poll cannot take (here another consumer holds
/// the ring; a producer descheduled between claiming its slots and publishing them
/// leaves the same state: session 20's stall under valgrind) makes the poll yield; an
/// empty ring does not, and the completion comes out once the other thread lets go.
#[test]
fn a_poll_that_cannot_take_a_claimed_completion_yields_the_cpu() {
    let dev = hybrid();
    let cq = dev.create_cq(16).unwrap();
    let mut out = [empty_completion()];

    assert_eq!(cq.poll(&mut out), 0);
    assert_eq!(
        cq.shared.polls().yields(),
        0,
        "an empty CQ is no reason to yield"
    );

    cq.shared.push(plain(1), false);
    let other = cq.shared.ring.consumer().expect("the ring's consumer role");
    assert_eq!(cq.poll(&mut out), 0, "the role is held elsewhere");
    assert_eq!(cq.shared.polls().yields(), 1);
    drop(other);

    assert_eq!(cq.poll_one().map(|c| c.wr_id), Some(1));
    assert_eq!(cq.poll(&mut out), 0);
    assert_eq!(cq.shared.polls().yields(), 1);
}

/// A poll whose drive finds a QP's lock held by another thread (an engine in its pass)
/// yields; once the lock is free the same poll drives the QP and does not.
#[test]
fn a_poll_that_finds_a_qps_lock_held_yields_the_cpu() {
    let dev = hybrid();
    let cq = dev.create_cq(16).unwrap();
    let pd = dev.alloc_pd();
    let qp = dev.create_qp(&pd, QpInit::new(&cq, 16, 16)).unwrap();
    let mut out = [empty_completion()];
    assert_eq!(cq.poll(&mut out), 0);
    assert_eq!(cq.shared.polls().yields(), 0, "nobody holds the QP");

    let held = qp.shared.lock().unwrap();
    assert_eq!(cq.poll(&mut out), 0);
    assert_eq!(
        cq.shared.polls().yields(),
        1,
        "the QP's lock is held elsewhere"
    );
    drop(held);

    assert_eq!(cq.poll(&mut out), 0);
    assert_eq!(cq.shared.polls().yields(), 1);
}
