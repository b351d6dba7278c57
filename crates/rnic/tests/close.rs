//! Closing a connection, from either side: graceful close (queued sends finish and are
//! received, then FIN both ways, then everything left flushes) and abortive close (RST:
//! the peer learns at once, and all outstanding work on both sides flushes). Every work
//! request completes exactly once.

mod common;

use common::*;
use softrnic_rnic::*;
use std::io::Read;
use std::time::Duration;

/// Asserts no further Disconnected or QpFatal event about `qp` is queued on `dev`
/// (events about other QPs are put back in order).
fn no_more_close_events(dev: &Device, qp: &Qp) {
    let mut keep = Vec::new();
    while let Some(e) = dev.poll_event() {
        match e {
            AsyncEvent::Disconnected { qp: q } | AsyncEvent::QpFatal { qp: q, .. }
                if q == qp.id() =>
            {
                panic!("second close event for {qp:?}: {e:?}")
            }
            e => keep.push(e),
        }
    }
    drop(keep);
}

fn graceful(from_active: bool, progress: ProgressMode) {
    const N: usize = 8;
    const SZ: usize = 64 << 10;
    const EXTRA: usize = 4;
    let (a, b) = end().progress(progress).pair();
    let (s, r) = if from_active { (&a, &b) } else { (&b, &a) };
    let data = pattern(N * SZ, 11);
    let src = s.pd.alloc_mr(N * SZ, Access::empty()).unwrap();
    src.write(0, &data).unwrap();
    let dst =
        r.pd.alloc_mr((N + EXTRA) * SZ, Access::LOCAL_WRITE)
            .unwrap();
    for i in 0..N + EXTRA {
        r.qp.post_recv(RecvWr::new(100 + i as u64, dst.sge(i * SZ, SZ)))
            .unwrap();
    }
    // The closing side has receives outstanding too; they flush at the end.
    let sbuf = s.pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    for i in 0..3u64 {
        s.qp.post_recv(RecvWr::new(200 + i, sbuf.sge(0, 64)))
            .unwrap();
    }
    s.qp.post_send_batch((0..N).map(|i| SendWr::send(i as u64, src.sge(i * SZ, SZ))))
        .unwrap();
    // Close at once, with the sends still queued: they must finish first.
    s.qp.disconnect().unwrap();

    disconnected(&s.dev, &s.qp);
    disconnected(&r.dev, &r.qp);
    assert_eq!(s.qp.state(), QpState::Error);
    assert_eq!(r.qp.state(), QpState::Error);
    assert_eq!(s.qp.fatal_cause(), None, "a graceful close is no error");
    assert_eq!(r.qp.fatal_cause(), None);

    let gs = drained(&s.cq);
    let gr = drained(&r.cq);
    let mut want_s: Vec<(u64, WcStatus, WcOpcode)> = (0..N as u64)
        .map(|i| (i, WcStatus::Success, WcOpcode::Send))
        .collect();
    want_s.extend((200..203).map(|i| (i, WcStatus::WrFlushError, WcOpcode::Recv)));
    assert_eq!(
        gs.iter()
            .map(|c| (c.wr_id, c.status, c.opcode))
            .collect::<Vec<_>>(),
        want_s
    );
    let mut want_r: Vec<(u64, WcStatus, u32)> = (0..N as u64)
        .map(|i| (100 + i, WcStatus::Success, SZ as u32))
        .collect();
    want_r.extend((N..N + EXTRA).map(|i| (100 + i as u64, WcStatus::WrFlushError, 0)));
    assert_eq!(
        gr.iter()
            .map(|c| (c.wr_id, c.status, c.byte_len))
            .collect::<Vec<_>>(),
        want_r
    );
    assert!(dst.to_vec()[..N * SZ] == data[..], "received data differs");
    assert_eq!(s.cq.poll_one(), None);
    assert_eq!(r.cq.poll_one(), None);
    no_more_close_events(&s.dev, &s.qp);
    no_more_close_events(&r.dev, &r.qp);
    // Work posted to the closed QPs flushes at once.
    r.qp.post_recv(RecvWr::new(999, dst.sge(0, 8))).unwrap();
    let c = take(&r.cq, 1)[0];
    assert_eq!((c.wr_id, c.status), (999, WcStatus::WrFlushError));
}

#[test]
fn graceful_close_from_active_side() {
    graceful(true, ProgressMode::Hybrid);
}

#[test]
fn graceful_close_from_active_side_engine_progress() {
    graceful(true, ProgressMode::Engine);
}

#[test]
fn graceful_close_from_passive_side() {
    graceful(false, ProgressMode::Hybrid);
}

#[test]
fn graceful_close_from_passive_side_engine_progress() {
    graceful(false, ProgressMode::Engine);
}

fn abortive(from_active: bool, progress: ProgressMode) {
    const N: u64 = 32;
    const SZ: usize = 1 << 20;
    let (a, b) = end().progress(progress).pair();
    let (x, y) = if from_active { (&a, &b) } else { (&b, &a) };
    let ybuf = y.pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let xbuf = x.pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    for i in 0..4u64 {
        y.qp.post_recv(RecvWr::new(100 + i, ybuf.sge(0, 64)))
            .unwrap();
        x.qp.post_recv(RecvWr::new(200 + i, xbuf.sge(0, 64)))
            .unwrap();
    }
    let target =
        y.pd.alloc_mr(SZ, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
    let src = x.pd.alloc_mr(SZ, Access::empty()).unwrap();
    x.qp.post_send_batch(
        (0..N).map(|i| SendWr::write(i, src.sge(0, SZ), target.addr(), target.rkey())),
    )
    .unwrap();
    x.qp.abort().unwrap();

    // The aborting side: closed, everything outstanding flushed.
    disconnected(&x.dev, &x.qp);
    assert_eq!(x.qp.state(), QpState::Error);
    let gx = drained(&x.cq);
    exactly_once(&gx, (0..N).chain(200..204));
    let writes: Vec<WcStatus> = gx
        .iter()
        .filter(|c| c.wr_id < N)
        .map(|c| c.status)
        .collect();
    let ok = writes
        .iter()
        .take_while(|&&s| s == WcStatus::Success)
        .count();
    assert!(
        writes[ok..].iter().all(|&s| s == WcStatus::WrFlushError),
        "Writes complete in order: successes, then flushes: {writes:?}"
    );
    assert!(
        gx.iter()
            .filter(|c| c.wr_id >= 200)
            .all(|c| c.status == WcStatus::WrFlushError)
    );

    // The peer: the connection was reset under it.
    let yid = y.qp.id();
    let lost = event(
        &y.dev,
        "ConnectionLost",
        |e| matches!(e, AsyncEvent::ConnectionLost { qp, .. } if *qp == yid),
    );
    assert_eq!(
        lost,
        AsyncEvent::ConnectionLost {
            qp: yid,
            error: std::io::ErrorKind::ConnectionReset
        }
    );
    disconnected(&y.dev, &y.qp);
    assert_eq!(y.qp.state(), QpState::Error);
    let gy = drained(&y.cq);
    exactly_once(&gy, 100..104);
    assert!(gy.iter().all(|c| c.status == WcStatus::WrFlushError));
    assert_eq!(x.cq.poll_one(), None);
    assert_eq!(y.cq.poll_one(), None);
    no_more_close_events(&x.dev, &x.qp);
    no_more_close_events(&y.dev, &y.qp);
}

#[test]
fn abortive_close_from_active_side() {
    abortive(true, ProgressMode::Hybrid);
}

#[test]
fn abortive_close_from_active_side_engine_progress() {
    abortive(true, ProgressMode::Engine);
}

#[test]
fn abortive_close_from_passive_side() {
    abortive(false, ProgressMode::Hybrid);
}

#[test]
fn abortive_close_from_passive_side_engine_progress() {
    abortive(false, ProgressMode::Engine);
}

/// What makes the QP fail locally.
#[derive(Debug, Clone, Copy)]
enum LocalFault {
    /// Invalidating an STag of another PD (send queue).
    InvalidateForeignStag,
    /// A receive whose SGE names an STag of another PD.
    RecvForeignLkey,
}

/// A local error moves the QP to Error; the connection must then close, so the peer
/// learns too and flushes its own work instead of waiting forever.
fn local_error(fault: LocalFault, progress: ProgressMode) {
    let (a, b) = end().progress(progress).pair();
    let bbuf = b.pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    for i in 0..3u64 {
        b.qp.post_recv(RecvWr::new(100 + i, bbuf.sge(0, 64)))
            .unwrap();
    }
    let foreign = a
        .dev
        .alloc_pd()
        .alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_READ)
        .unwrap();
    let (status, opcode) = match fault {
        LocalFault::InvalidateForeignStag => {
            a.qp.post_send(SendWr::local_invalidate(1, foreign.rkey()))
                .unwrap();
            (WcStatus::LocalAccessError, WcOpcode::LocalInvalidate)
        }
        LocalFault::RecvForeignLkey => {
            a.qp.post_recv(RecvWr::new(1, foreign.sge(0, 64))).unwrap();
            (WcStatus::LocalProtectionError, WcOpcode::Recv)
        }
    };
    let c = take(&a.cq, 1)[0];
    assert_eq!((c.wr_id, c.status, c.opcode), (1, status, opcode));
    assert_eq!(a.qp.state(), QpState::Error);
    disconnected(&a.dev, &a.qp);
    disconnected(&b.dev, &b.qp);
    assert_eq!(b.qp.state(), QpState::Error);
    let gb = drained(&b.cq);
    exactly_once(&gb, 100..103);
    assert!(gb.iter().all(|c| c.status == WcStatus::WrFlushError));
    assert_eq!(a.cq.poll_one(), None);
    assert_eq!(b.cq.poll_one(), None);
}

#[test]
fn local_send_queue_error_closes_the_connection() {
    local_error(LocalFault::InvalidateForeignStag, ProgressMode::Hybrid);
}

#[test]
fn local_send_queue_error_closes_the_connection_engine_progress() {
    local_error(LocalFault::InvalidateForeignStag, ProgressMode::Engine);
}

#[test]
fn local_receive_error_closes_the_connection() {
    local_error(LocalFault::RecvForeignLkey, ProgressMode::Hybrid);
}

#[test]
fn local_receive_error_closes_the_connection_engine_progress() {
    local_error(LocalFault::RecvForeignLkey, ProgressMode::Engine);
}

/// A raw MPA peer on a plain socket: it does the MPA exchange with `softrnic_proto`'s
/// initiator, writes `tail` (nothing, or part of an FPDU), then closes its sending side.
/// The QP on the device must tell a stream ended between FPDUs (a graceful close) from
/// one cut inside an FPDU (a lost stream).
fn raw_peer_closes(tail: &[u8]) -> (End, Vec<AsyncEvent>) {
    use std::io::{Read, Write};
    let e = end().cq(64).queues(8, 8).build();
    let buf = e.pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    for i in 0..3u64 {
        e.qp.post_recv(RecvWr::new(100 + i, buf.sge(0, 64)))
            .unwrap();
    }
    let mut s = raw_initiator(&e);
    s.write_all(tail).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    disconnected(&e.dev, &e.qp);
    assert_eq!(e.qp.state(), QpState::Error);
    let g = drained(&e.cq);
    exactly_once(&g, 100..103);
    assert!(g.iter().all(|c| c.status == WcStatus::WrFlushError));
    assert_eq!(e.cq.poll_one(), None);
    // The device closed its side too: the raw peer reads end of stream.
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "no octet after the peer's FIN: {rest:?}");
    let events = std::iter::from_fn(|| e.dev.poll_event()).collect();
    (e, events)
}

#[test]
fn peer_fin_between_fpdus_is_a_graceful_close() {
    let (e, events) = raw_peer_closes(&[]);
    assert_eq!(events, vec![AsyncEvent::Established { qp: e.qp.id() }]);
    assert_eq!(e.qp.fatal_cause(), None);
}

#[test]
fn peer_fin_inside_an_fpdu_is_a_lost_stream() {
    // Three octets of an FPDU: its MPA length and half its DDP control field.
    let (e, events) = raw_peer_closes(&[0x00, 0x20, 0x41]);
    let lost = AsyncEvent::ConnectionLost {
        qp: e.qp.id(),
        error: std::io::ErrorKind::UnexpectedEof,
    };
    assert_eq!(
        events,
        vec![AsyncEvent::Established { qp: e.qp.id() }, lost]
    );
}

#[test]
fn a_peer_that_never_closes_is_reset_when_the_close_timer_expires() {
    let cfg = DeviceConfig {
        close_timeout: Duration::from_millis(200),
        ..DeviceConfig::default()
    };
    let e = end().config(cfg).build();
    let buf = e.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    e.qp.post_recv(RecvWr::new(7, buf.sge(0, 64))).unwrap();
    let mut s = raw_initiator(&e);
    e.qp.disconnect().unwrap();
    // The peer gets our FIN and never answers it (nor closes): after the close
    // timeout, the connection is reset and the QP is disconnected.
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "only our FIN: {rest:?}");
    disconnected(&e.dev, &e.qp);
    assert_eq!(e.qp.state(), QpState::Error);
    let g = drained(&e.cq);
    assert_eq!(
        (g.len(), g[0].wr_id, g[0].status),
        (1, 7, WcStatus::WrFlushError)
    );
}

/// A close that cannot finish because the peer takes none of the queued octets: when
/// the close timer expires the reset reaches the peer at once (it once only set a zero
/// linger time on a socket that stayed open until the QP was dropped, so the peer
/// learned nothing: its read here waited for the whole [`WAIT`]).
#[test]
fn the_close_timers_reset_reaches_a_peer_that_reads_nothing() {
    let cfg = DeviceConfig {
        close_timeout: Duration::from_millis(200),
        ..DeviceConfig::default()
    };
    let e = end().config(cfg).build();
    // More than the two sockets' buffers hold while the peer does not read.
    let len = 32 << 20;
    let big = e.pd.alloc_mr(len, Access::empty()).unwrap();
    let mut s = raw_initiator(&e);
    e.qp.post_send(SendWr::send(3, [big.sge(0, len)])).unwrap();
    e.qp.disconnect().unwrap();
    disconnected(&e.dev, &e.qp);
    assert_eq!(e.qp.state(), QpState::Error);
    let g = drained(&e.cq);
    assert_eq!((g.len(), g[0].wr_id), (1, 3), "{g:?}");
    assert_eq!(g[0].status, WcStatus::WrFlushError);
    // The QP is still alive: only the reset can end the peer's stream now.
    let mut chunk = vec![0u8; 1 << 20];
    let end = loop {
        match s.read(&mut chunk) {
            Ok(0) => break Ok(()),
            Ok(_) => continue,
            Err(err) => break Err(err.kind()),
        }
    };
    assert_eq!(end, Err(std::io::ErrorKind::ConnectionReset));
}
