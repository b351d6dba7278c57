//! A peer's Terminate and the FIN right behind it, arriving while a consumer busy-polls
//! its CQ and holds the QP's socket (the hand-off, `softrnic_rnic::handoff`): all that
//! came before the FIN is read and parsed first. The Terminate's cause is reported
//! exactly, before the flushed completions (a program that sees a failed completion
//! finds the event already queued), what the peer wrote before it is placed, and the
//! connection ends as closed by the peer, not as lost.
//!
//! The consumer's reads skip the `read(2)` after a short one while it holds the socket
//! (`transport/polled.rs`), and its empty polls return early (`QpShared::progress_pass`):
//! neither may leave octets unread once the peer has closed. (A test thread descheduled
//! for a lease loses the claim and the engine reads instead: the outcome is the same.)

use crate::peer::*;
use softrnic_rnic::handoff::CLAIM_AFTER;
use softrnic_rnic::*;
use softrnic_wire::rdmap::Opcode;
use softrnic_wire::terminate::Layer;
use std::io::Write;
use std::net::Shutdown;
use std::time::{Duration, Instant};

/// DDP, tagged buffer, invalid STag: what siw sends for a Write with a bad STag.
const CTRL: [u8; 4] = [0x11, 0x00, 0x00, 0x00];

/// Polls `cq` (driving its QP, as a busy-polling consumer does) until it yields a
/// completion.
fn spin_one(cq: &Cq) -> Completion {
    let give_up = Instant::now() + WAIT;
    loop {
        if let Some(c) = cq.poll_one() {
            return c;
        }
        assert!(
            Instant::now() < give_up,
            "no completion: octets left unread"
        );
    }
}

/// How the peer's octets arrive.
#[derive(Debug, Clone, Copy)]
enum Arrival {
    /// A Write, placed while the consumer polls (its read was short, so the next one
    /// in that pass is skipped), then the Terminate and the FIN.
    WriteThenTerminate,
    /// The Write, the Terminate and the FIN at once, before the consumer's next poll.
    AllAtOnce,
}

fn run(arrival: Arrival) {
    let t = Target::new(DeviceConfig::default());
    let dst =
        t.pd.alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
    let buf = t.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    for wr_id in [1, 2] {
        t.qp.post_recv(RecvWr {
            wr_id,
            sgl: [buf.sge(0, 64)].into(),
        })
        .unwrap();
    }
    let mut peer = t.accept_peer(MpaConfig::default());
    // The consumer claims the QP's socket from the engine.
    for _ in 0..2 * CLAIM_AFTER {
        assert!(t.cq.poll_one().is_none(), "{arrival:?}: no traffic yet");
    }
    let payload: Vec<u8> = (0..40u8).map(|i| i.wrapping_mul(7) ^ 0x5a).collect();
    let crc = peer.negotiated.crc;
    let write = fpdu(
        &tagged(Opcode::Write, dst.rkey(), dst.addr(), true, &payload),
        crc,
    );
    let term = fpdu(&terminate(&CTRL), crc);
    let placed = || dst.to_vec()[..payload.len()] == payload[..];
    match arrival {
        Arrival::WriteThenTerminate => {
            peer.s.write_all(&write).unwrap();
            let give_up = Instant::now() + WAIT;
            while !placed() {
                assert!(t.cq.poll_one().is_none(), "a Write completes nothing");
                assert!(Instant::now() < give_up, "the Write was never placed");
            }
            peer.s.write_all(&term).unwrap();
        }
        Arrival::AllAtOnce => peer.s.write_all(&[write, term].concat()).unwrap(),
    }
    peer.s.shutdown(Shutdown::Write).unwrap();

    let first = spin_one(&t.cq);
    let id = t.qp.id();
    let fatal = t.dev.wait_event_matching(Duration::ZERO, |e| {
        matches!(
            e,
            AsyncEvent::QpFatal { .. } | AsyncEvent::ConnectionLost { .. }
        )
    });
    assert_eq!(
        fatal,
        Some(AsyncEvent::QpFatal {
            qp: id,
            cause: TerminateCause::new(Layer::Ddp, 1, 0x00),
            remote: true,
        }),
        "{arrival:?}: the Terminate is reported before the first flushed completion"
    );
    let second = spin_one(&t.cq);
    let seen = [first, second].map(|c| (c.wr_id, c.opcode, c.status));
    let flushed = (WcOpcode::Recv, WcStatus::WrFlushError);
    assert_eq!(
        seen,
        [(1, flushed.0, flushed.1), (2, flushed.0, flushed.1)],
        "{arrival:?}"
    );
    assert!(placed(), "{arrival:?}: the Write before the Terminate");
    // Closed by the peer: our FIN answers, no Terminate back, nothing lost.
    assert_eq!(peer.next(), Reply::Closed, "{arrival:?}");
    let end = t.dev.wait_event_matching(WAIT, |e| {
        matches!(
            e,
            AsyncEvent::Disconnected { .. } | AsyncEvent::ConnectionLost { .. }
        )
    });
    assert_eq!(
        end,
        Some(AsyncEvent::Disconnected { qp: id }),
        "{arrival:?}"
    );
    assert_eq!(t.qp.state(), QpState::Error, "{arrival:?}");
    assert_eq!(
        t.qp.fatal_cause(),
        Some((TerminateCause::new(Layer::Ddp, 1, 0x00), true))
    );
}

#[test]
fn a_terminate_and_fin_after_a_placed_write_reach_a_polling_consumer() {
    run(Arrival::WriteThenTerminate);
}

#[test]
fn a_write_terminate_and_fin_at_once_reach_a_polling_consumer() {
    run(Arrival::AllAtOnce);
}
