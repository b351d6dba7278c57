//! `CqShared::push_run`: a run of completions enters the CQ as the same completions
//! pushed one by one would (order, overflow), with one look at the arm: one event per
//! arm, raised when any completion of the run matches it.

use super::*;
use crate::{Device, DeviceConfig};
use softrnic_proto::{QpId, WcOpcode};

fn comp(wr_id: u64, solicited: bool, status: WcStatus) -> Completion {
    Completion {
        wr_id,
        status,
        opcode: WcOpcode::Recv,
        byte_len: 64,
        qp: QpId(7),
        solicited,
        invalidated: None,
    }
}

fn plain(wr_id: u64) -> Completion {
    comp(wr_id, false, WcStatus::Success)
}

fn drain(cq: &Cq) -> Vec<u64> {
    std::iter::from_fn(|| cq.poll_one())
        .map(|c| c.wr_id)
        .collect()
}

#[test]
fn a_run_raises_one_event_per_arm_and_keeps_its_order() {
    let dev = Device::open(DeviceConfig::default()).unwrap();
    let cq = dev.create_cq(16).unwrap();
    cq.shared.push_run(&[plain(1), plain(2)], false);
    assert_eq!(cq.event_counts().raised, 0, "not armed");
    cq.req_notify(false);
    cq.shared.push_run(&[plain(3), plain(4), plain(5)], false);
    assert_eq!(cq.event_counts().raised, 1);
    assert_eq!(cq.armed(), Armed::No, "the run took the arm");
    cq.shared.push_run(&[plain(6)], false);
    assert_eq!(cq.event_counts().raised, 1);
    assert_eq!(drain(&cq), vec![1, 2, 3, 4, 5, 6]);
}

#[test]
fn a_solicited_arm_is_taken_by_a_run_holding_a_solicited_or_failed_completion() {
    let dev = Device::open(DeviceConfig::default()).unwrap();
    let cq = dev.create_cq(16).unwrap();
    cq.req_notify(true);
    cq.shared.push_run(&[plain(1), plain(2), plain(3)], false);
    assert_eq!(cq.event_counts().raised, 0);
    assert_eq!(cq.armed(), Armed::Solicited);
    cq.shared.push_run(
        &[plain(4), comp(5, true, WcStatus::Success), plain(6)],
        false,
    );
    assert_eq!(cq.event_counts().raised, 1);
    cq.req_notify(true);
    cq.shared.push_run(
        &[plain(7), comp(8, false, WcStatus::LocalLengthError)],
        false,
    );
    assert_eq!(cq.event_counts().raised, 2);
    assert_eq!(drain(&cq), (1..=8).collect::<Vec<_>>());
}

/// A run with no room for all of it in the ring goes one by one: what fits goes into
/// the ring, the rest into the overflow list, in order, and the overflow is reported.
#[test]
fn a_run_that_does_not_fit_overflows_in_order() {
    let dev = Device::open(DeviceConfig::default()).unwrap();
    let cq = dev.create_cq(4).unwrap();
    cq.shared.push_run(&[plain(1), plain(2), plain(3)], false);
    cq.shared.push_run(&[plain(4), plain(5), plain(6)], false);
    let events: Vec<AsyncEvent> = std::iter::from_fn(|| dev.poll_event()).collect();
    assert_eq!(events, vec![AsyncEvent::CqOverflow { cq: cq.id() }]);
    cq.shared.push_run(&[plain(7)], false);
    assert_eq!(drain(&cq), (1..=7).collect::<Vec<_>>());
}

/// `CqRing::push_run` claims a run of positions at once, after what was pushed before
/// it and across the end of the slot array; a run with no room for all of it (the
/// last slot it needs still unconsumed) pushes nothing.
#[test]
fn the_ring_takes_a_run_whole_or_not_at_all() {
    use crate::cq_ring::CqRing;
    let ring = CqRing::new(4).unwrap();
    let mut rx = ring.consumer().unwrap();
    assert_eq!(ring.push_run(&[]), None);
    assert_eq!(ring.push_run(&[plain(0); 5]), None, "longer than the ring");
    ring.push(plain(1)).unwrap();
    assert_eq!(ring.push_run(&[plain(2), plain(3)]), Some(1));
    assert_eq!(ring.push_run(&[plain(4), plain(5)]), None, "one slot left");
    assert_eq!(ring.len(), 3);
    assert_eq!(rx.pop().map(|c| c.wr_id), Some(1));
    assert_eq!(rx.pop().map(|c| c.wr_id), Some(2));
    // Positions 3, 4, 5: slots 3, 0, 1.
    assert_eq!(ring.push_run(&[plain(4), plain(5), plain(6)]), Some(3));
    assert!(ring.push(plain(7)).is_err(), "full");
    let mut out = [plain(0); 8];
    let n = rx.pop_into(&mut out);
    assert_eq!(
        out[..n].iter().map(|c| c.wr_id).collect::<Vec<_>>(),
        vec![3, 4, 5, 6]
    );
}
