//! A small Send or Write posted to an idle send queue leaves from the post itself,
//! before the post's progress pass (`transmit::send_gathered`); what that send meets
//! is reported as the pass's send reported it.

mod common;

use common::*;
use softrnic_rnic::handoff::CLAIM_AFTER;
use softrnic_rnic::*;

/// The peer resets the connection while a polling consumer holds the socket (the
/// engine reads nothing): the next post's own `sendto` is the first to meet the reset,
/// and the program learns of a reset, not of the broken pipe a second send would see.
#[test]
fn a_post_that_meets_a_reset_reports_the_reset() {
    let e = end().build();
    let peer = raw_initiator(&e);
    for _ in 0..2 * CLAIM_AFTER {
        assert!(e.cq.poll_one().is_none(), "no traffic expected yet");
    }
    let src = e.pd.alloc_mr(64, Access::empty()).unwrap();
    let write = |wr_id| {
        SendWr::new(
            wr_id,
            SendOp::Write {
                remote_addr: 0,
                rkey: 0x100,
            },
            src.sge(0, 8),
        )
    };
    // Octets the peer never reads: its close then resets the connection.
    e.qp.post_send(write(1)).unwrap();
    drop(peer);
    // Posted without a poll in between: nobody has read the socket since the reset.
    let _ = e.qp.post_send(write(2));
    let lost = event(&e.dev, "connection lost", |ev| {
        matches!(ev, AsyncEvent::ConnectionLost { .. })
    });
    assert_eq!(
        lost,
        AsyncEvent::ConnectionLost {
            qp: e.qp.id(),
            error: std::io::ErrorKind::ConnectionReset,
        }
    );
    let mut got = Vec::new();
    let mut spins = 0u64;
    while got.len() < 2 {
        got.extend(e.cq.poll_one());
        spins += 1;
        assert!(spins < 500_000_000, "completions missing: {got:?}");
    }
    exactly_once(&got, 1..3);
    assert_eq!(e.qp.state(), QpState::Error);
}
