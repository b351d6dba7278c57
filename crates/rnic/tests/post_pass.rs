//! The pass after a post is cut short when the post sent everything it gathered
//! (`QpShared::post_pass`): only the post's completion is delivered. These tests check
//! what that shortcut must still do, and that posts it does not fit (large messages,
//! markers) take the whole pass: the gather buffer goes back to the pool, completions
//! arrive in order, and every octet lands where it was sent, with CRC on and off.

mod common;

use common::*;
use softrnic_proto::cm::{CrcPolicy, MpaConfig};
use softrnic_rnic::*;

fn config(crc: CrcPolicy, markers: bool) -> DeviceConfig {
    DeviceConfig {
        mpa: MpaConfig {
            crc,
            markers,
            ..MpaConfig::default()
        },
        ..DeviceConfig::default()
    }
}

/// A small Write and a small Send posted to a QP that the engine serves (nobody polls
/// it): each post sends its FPDU itself and, since nothing else waits, gives the gather
/// buffer back before it returns, as the whole pass did. The completions are in the CQ.
#[test]
fn a_small_post_that_sent_everything_holds_no_buffer() {
    let (a, b) = pair();
    let src = a.pd.alloc_mr(64, Access::empty()).unwrap();
    src.write(0, &pattern(64, 7)).unwrap();
    let dst =
        b.pd.alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
    let recv = b.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    b.qp.post_recv(RecvWr::new(9, recv.sge(0, 64))).unwrap();
    a.qp.post_send(SendWr::write(1, src.sge(0, 8), dst.addr(), dst.rkey()))
        .unwrap();
    assert_eq!(a.qp.buffer_bytes(), 0, "after the Write's post");
    a.qp.post_send(SendWr::send(2, src.sge(8, 8))).unwrap();
    assert_eq!(a.qp.buffer_bytes(), 0, "after the Send's post");
    let done = take(&a.cq, 2);
    assert_eq!(
        done.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        [(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    let r = one(&b.cq);
    assert_eq!((r.wr_id, r.status, r.byte_len), (9, WcStatus::Success, 8));
    assert_eq!(recv.to_vec()[..8], src.to_vec()[8..16]);
    assert_eq!(dst.to_vec()[..8], src.to_vec()[..8]);
}

/// Small Sends and Writes between large ones, in one direction, without waiting in
/// between: the small ones that find large FPDUs queued take the whole pass, those that
/// find the queue idle the short one. Sender completions come in posting order, receive
/// completions in message order with their lengths, and every octet is placed.
fn small_between_large(cfg: DeviceConfig) {
    const SIZES: [usize; 9] = [8, 256 << 10, 8, 1, 300 << 10, 8, 28, 64 << 10, 8];
    let (crc, markers) = (cfg.mpa.crc != CrcPolicy::Off, cfg.mpa.markers);
    let (a, b) = end().config(cfg).pair();
    let p = a.qp.params();
    assert_eq!((p.crc, p.markers_tx, p.markers_rx), (crc, markers, markers));
    let total: usize = SIZES.iter().sum();
    let data = pattern(total, 3);
    let src = a.pd.alloc_mr(total, Access::empty()).unwrap();
    src.write(0, &data).unwrap();
    let written =
        b.pd.alloc_mr(total, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
    let sent = b.pd.alloc_mr(total, Access::LOCAL_WRITE).unwrap();
    let mut at = 0;
    let mut sends = Vec::new();
    for (i, &len) in SIZES.iter().enumerate() {
        let id = i as u64;
        if i % 2 == 0 {
            b.qp.post_recv(RecvWr::new(id, sent.sge(at, len))).unwrap();
            a.qp.post_send(SendWr::send(id, src.sge(at, len))).unwrap();
            sends.push((id, len as u32));
        } else {
            let w = SendWr::write(
                id,
                src.sge(at, len),
                written.addr() + at as u64,
                written.rkey(),
            );
            a.qp.post_send(w).unwrap();
        }
        at += len;
    }
    let done = take(&a.cq, SIZES.len());
    assert_eq!(
        done.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        (0..SIZES.len() as u64)
            .map(|i| (i, WcStatus::Success))
            .collect::<Vec<_>>(),
        "sender completions in posting order"
    );
    let got = take(b.recv_cq(), sends.len());
    assert_eq!(
        got.iter()
            .map(|c| (c.wr_id, c.byte_len, c.status))
            .collect::<Vec<_>>(),
        sends
            .iter()
            .map(|&(id, len)| (id, len, WcStatus::Success))
            .collect::<Vec<_>>(),
        "receive completions in message order"
    );
    let (written, sent) = (written.to_vec(), sent.to_vec());
    let mut at = 0;
    for (i, &len) in SIZES.iter().enumerate() {
        let got = if i % 2 == 0 { &sent } else { &written };
        assert!(
            got[at..at + len] == data[at..at + len],
            "message {i} of {len}"
        );
        at += len;
    }
    assert_eq!(a.qp.buffer_bytes(), 0, "sender, all sent");
}

#[test]
fn small_between_large_crc_off() {
    small_between_large(config(CrcPolicy::Off, false));
}

#[test]
fn small_between_large_crc_on() {
    small_between_large(config(CrcPolicy::Required, false));
}

#[test]
fn small_between_large_markers() {
    small_between_large(config(CrcPolicy::Required, true));
}
