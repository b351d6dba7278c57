//! The close machine and the link's faults: close timer in virtual time, connection lost
//! mid-FPDU, and reads cut at random places.

use super::*;

/// A Send of `len` octets from a to b, a Write of `len` octets, and a Read back of
/// `len` octets: (a, b, b's receive buffer, b's Write target, a's Read sink).
fn workload(len: usize, crc: bool) -> (Side, Side, [STag; 4]) {
    let (mut a, mut b) = pair(QpParams {
        crc,
        ..Default::default()
    });
    let (src, sbase) = a.reg(3 * len, Access::empty(), 1);
    let (sink, kbase) = a.reg(len, Access::LOCAL_WRITE, 2);
    let (inbox, ibase) = b.reg(len, Access::LOCAL_WRITE, 3);
    let (target, tbase) = b.reg(2 * len, Access::REMOTE_WRITE | Access::REMOTE_READ, 4);
    b.qp.post_recv(RecvWr::new(10, sge(inbox, ibase, len)), &b.tpt)
        .unwrap();
    a.qp.post_send(SendWr::send(1, sge(src, sbase, len)), &a.tpt)
        .unwrap();
    a.qp.post_send(
        SendWr::write(2, sge(src, sbase + len as u64, len), tbase, target),
        &a.tpt,
    )
    .unwrap();
    a.qp.post_send(
        SendWr::read(3, sge(sink, kbase, len), tbase + len as u64, target),
        &a.tpt,
    )
    .unwrap();
    (a, b, [src, sink, inbox, target])
}

fn statuses(side: &mut Side) -> Vec<(u64, WcStatus)> {
    side.completions()
        .into_iter()
        .map(|(_, c)| (c.wr_id, c.status))
        .collect()
}

#[test]
fn reads_cut_anywhere_place_the_same_octets() {
    let len = 5000;
    for crc in [false, true] {
        for seed in 0..24u64 {
            let (mut a, mut b, [src, sink, inbox, target]) = workload(len, crc);
            let max = [1, 3, 64, 1500][seed as usize % 4];
            Link::new(Chunking::Seeded { seed, max }).run(&mut a, &mut b);
            let what = format!("crc {crc} seed {seed} max {max}");
            assert_eq!(b.region(inbox), &a.region(src)[..len], "{what}");
            assert_eq!(
                b.region(target)[..len],
                a.region(src)[len..2 * len],
                "{what}"
            );
            assert_eq!(a.region(sink), &b.region(target)[len..], "{what}");
            assert_eq!(
                statuses(&mut a),
                [1, 2, 3].map(|i| (i, WcStatus::Success)),
                "{what}"
            );
            assert_eq!(statuses(&mut b), [(10, WcStatus::Success)], "{what}");
        }
    }
}

#[test]
fn connection_lost_mid_fpdu_flushes_both_sides() {
    let len = 5000;
    // Lost inside the Send's second FPDU (FPDUs carry 1448 octets at most).
    let (mut a, mut b, [src, _, inbox, _]) = workload(len, true);
    let mut link = Link::new(Chunking::Primes);
    link.lose_after = Some(2000);
    let untouched = b.region(inbox).to_vec();
    link.run(&mut a, &mut b);
    assert_eq!(link.crossed(), 2000);
    assert_eq!(
        (a.qp.state(), b.qp.state()),
        (QpState::Error, QpState::Error)
    );
    assert!(a.qp.transport_closed() && b.qp.transport_closed());
    // The Send's last FPDUs never went out: it flushes with the Write and the Read
    // behind it. b's receive never completed its message: flushed too.
    assert_eq!(
        statuses(&mut a),
        [1, 2, 3].map(|i| (i, WcStatus::WrFlushError))
    );
    assert_eq!(statuses(&mut b), [(10, WcStatus::WrFlushError)]);
    // Payload is placed as it arrives (cut-through): what crossed is in place, nothing
    // after it. 2000 octets: the first FPDU (1448 on the wire, 1424 of payload) and 552
    // of the second (20 of header, 532 of payload).
    let (placed, crossed) = (b.region(inbox), 1424 + 532);
    assert!(placed[..crossed] == a.region(src)[..crossed]);
    assert!(placed[crossed..] == untouched[crossed..]);
    // Both report the connection over, once; then there is nothing more to do.
    assert_eq!(a.closes, [CloseAction::Disconnect]);
    assert_eq!(b.closes, [CloseAction::Disconnect]);
    assert_eq!(a.qp.poll_close(true, Duration::ZERO), None);
    assert_eq!(a.qp.poll_timeout(), None);
}

#[test]
fn a_peer_that_never_answers_fin_is_reset_when_the_close_timer_expires() {
    let (mut a, mut b) = pair(QpParams::default());
    let (d, dbase) = a.reg(64, Access::LOCAL_WRITE, 0);
    a.qp.post_recv(RecvWr::new(7, sge(d, dbase, 64)), &a.tpt)
        .unwrap();
    let mut link = Link::new(Chunking::Whole);
    link.b_ignores_fin = true;
    link.advance(Duration::from_secs(3), &mut a, &mut b);
    a.qp.close();
    link.run(&mut a, &mut b);
    assert_eq!(a.closes, [CloseAction::Fin]);
    assert_eq!(a.qp.state(), QpState::Closing);
    // The timer started when the close did.
    let deadline = Duration::from_secs(3) + DEFAULT_CLOSE_TIMEOUT;
    assert_eq!(a.qp.poll_timeout(), Some(deadline));
    link.advance(
        DEFAULT_CLOSE_TIMEOUT - Duration::from_nanos(1),
        &mut a,
        &mut b,
    );
    assert_eq!(a.closes, [CloseAction::Fin], "not yet");
    assert_eq!(a.qp.state(), QpState::Closing);
    link.advance(Duration::from_nanos(1), &mut a, &mut b);
    assert_eq!(a.closes, [CloseAction::Fin, CloseAction::Reset]);
    assert_eq!(
        (a.qp.state(), b.qp.state()),
        (QpState::Error, QpState::Error)
    );
    assert_eq!(statuses(&mut a), [(7, WcStatus::WrFlushError)]);
    assert_eq!(
        a.qp.poll_timeout(),
        None,
        "a closed connection has no timer"
    );
}

#[test]
fn a_close_the_peer_answers_stops_the_timer() {
    let (mut a, mut b) = pair(QpParams {
        close_timeout: Duration::from_millis(5),
        ..Default::default()
    });
    let mut link = Link::new(Chunking::Whole);
    a.qp.close();
    link.run(&mut a, &mut b);
    for side in [&a, &b] {
        assert_eq!(side.closes, [CloseAction::Fin, CloseAction::Disconnect]);
        assert_eq!(side.qp.poll_timeout(), None);
    }
    link.advance(Duration::from_secs(1), &mut a, &mut b);
    assert_eq!(a.closes, [CloseAction::Fin, CloseAction::Disconnect]);
}

#[test]
fn a_close_that_cannot_drain_is_reset_too() {
    // The transport never takes the queued octets (the peer's window stays shut).
    let (mut a, _) = pair(QpParams::default());
    let (s, base) = a.reg(64, Access::empty(), 0);
    a.qp.post_send(SendWr::send(1, sge(s, base, 64)), &a.tpt)
        .unwrap();
    let mut f = TxFpdu::default();
    assert!(a.qp.poll_transmit(&mut f));
    a.qp.close();
    let t0 = Duration::from_secs(1);
    assert_eq!(a.qp.poll_close(false, t0), None);
    a.qp.handle_timeout(t0 + DEFAULT_CLOSE_TIMEOUT);
    assert_eq!(a.qp.poll_close(false, t0), Some(CloseAction::Reset));
    assert_eq!(a.qp.state(), QpState::Error);
    assert_eq!(a.qp.poll_close(false, t0), None);
}
