//! A Read Request is answered when it is taken, not when the receive pass that took it
//! ends: a pass reads until the socket would block, so a response left for the pass's
//! end waits behind every Write read after its request.
//!
//! Nothing here depends on timing. The responder's QP takes its receive buffers from
//! an SRQ whose soft limit holds its stream back at the third Send (back-pressure: its
//! socket is left unread), while the requester's Writes, its Read and more Writes queue
//! up in the kernel. Released, the responder's one pass finds all of it in the socket.
//! Its pcap recording (every read and send, in the order they were made) says how many
//! octets it had read when the Read Response left.

mod common;

use common::srq::SLOT;
use common::*;
use softrnic_capture::read_capture;
use softrnic_rnic::*;
use std::path::PathBuf;

/// Writes before the Read and after it, each one FPDU from registered memory.
const BEFORE: usize = 2;
const AFTER: usize = 10;
const WRITE_LEN: usize = 60_000;
const READ_LEN: usize = 40_000;
/// Small Sends first: the SRQ's soft limit (2 per interval) holds the third.
const SENDS: usize = 3;

fn scratch(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("read_answer");
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// Where `needle` first occurs in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[test]
fn a_read_request_behind_a_held_stream_is_answered_before_the_writes_after_it_are_read() {
    let pcap = scratch("responder.pcap");
    let _ = std::fs::remove_file(&pcap);
    // The responder: one QP on an SRQ with a soft limit of two Sends per interval.
    let sdev = Device::open(DeviceConfig {
        pcap: Some(pcap.clone()),
        ..DeviceConfig::default()
    })
    .unwrap();
    let spd = sdev.alloc_pd();
    let scq = sdev.create_cq(64).unwrap();
    let srq = sdev
        .create_srq(
            &spd,
            SrqInit {
                reserve: 1000,
                qp_limits: QpLimits {
                    per_interval: Level::new(2, u32::MAX),
                    ..QpLimits::default()
                },
                ..SrqInit::new(64, 1)
            },
        )
        .unwrap();
    let init = |cq| QpInit {
        send_cq: cq,
        recv_cq: cq,
        sq_depth: 64,
        rq_depth: 0,
    };
    let sqp = sdev.create_qp_on_srq(&spd, init(&scq), &srq).unwrap();
    let slots = spd.alloc_mr(8 * SLOT, Access::LOCAL_WRITE).unwrap();
    for i in 0..8 {
        srq.post_recv(RecvWr::new(i, slots.sge(i as usize * SLOT, SLOT)))
            .unwrap();
    }
    let target = spd
        .alloc_mr(
            (BEFORE + AFTER) * WRITE_LEN,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        )
        .unwrap();
    let source = spd.alloc_mr(READ_LEN, Access::REMOTE_READ).unwrap();
    let read_data = pattern(READ_LEN, 71);
    source.write(0, &read_data).unwrap();

    // The requester.
    let cdev = Device::open(DeviceConfig::default()).unwrap();
    let cpd = cdev.alloc_pd();
    let ccq = cdev.create_cq(64).unwrap();
    let cqp = cdev
        .create_qp(
            &cpd,
            QpInit {
                rq_depth: 1,
                ..init(&ccq)
            },
        )
        .unwrap();
    let writes = pattern((BEFORE + AFTER) * WRITE_LEN, 72);
    let wsrc = cpd.alloc_mr(writes.len(), Access::empty()).unwrap();
    wsrc.write(0, &writes).unwrap();
    let sends = cpd.alloc_mr(SENDS * 256, Access::empty()).unwrap();
    sends.write(0, &pattern(SENDS * 256, 73)).unwrap();
    let sink = cpd.alloc_mr(READ_LEN, Access::LOCAL_WRITE).unwrap();
    connect_qps((&cdev, &cqp), (&sdev, &sqp));

    // Sends, Writes, the Read, more Writes: one batch.
    let write = |i: usize| {
        SendWr::write(
            100 + i as u64,
            wsrc.sge(i * WRITE_LEN, WRITE_LEN),
            target.addr() + (i * WRITE_LEN) as u64,
            target.rkey(),
        )
    };
    let mut wrs: Vec<SendWr> = (0..SENDS)
        .map(|n| SendWr::send(n as u64, sends.sge(n * 256, 200)))
        .collect();
    wrs.extend((0..BEFORE).map(write));
    wrs.push(SendWr::read(
        50,
        sink.sge(0, READ_LEN),
        source.addr(),
        source.rkey(),
    ));
    wrs.extend((BEFORE..BEFORE + AFTER).map(write));
    cqp.post_send_batch(wrs.iter()).unwrap();

    // The third Send is held: the responder's stream stops there.
    sdev.wait_event_matching(WAIT, |e| matches!(e, AsyncEvent::SrqSoftLimit { .. }))
        .expect("soft-limit event");
    // Every FPDU the requester has is in the kernel: its last Write's went out last.
    let fpdus = (SENDS + BEFORE + 1 + AFTER) as u64;
    let deadline = std::time::Instant::now() + WAIT;
    while cqp.stats().tx_fpdus < fpdus {
        assert!(
            std::time::Instant::now() < deadline,
            "the requester could not send all {fpdus} FPDUs: {:?}",
            cqp.stats()
        );
        std::thread::yield_now();
    }
    let held = sqp.stats();

    // Released: one pass reads everything queued.
    srq.modify(SrqModify {
        reserve: Some(0),
        ..SrqModify::default()
    })
    .unwrap();
    let got = take(&ccq, SENDS + BEFORE + 1 + AFTER);
    for c in &got {
        assert_eq!(c.status, WcStatus::Success, "{c:?}");
    }
    assert!(
        sink.to_vec() == read_data,
        "the Read placed the responder's octets"
    );
    assert_eq!(take(&scq, SENDS).len(), SENDS);
    assert!(
        target.to_vec() == writes,
        "every Write placed, before and after the Read"
    );
    let answered = sqp.stats().rx_read_answers - held.rx_read_answers;

    // The Read Request's last 12 octets name the responder's source (STag, TO).
    let mut request_tail = source.rkey().to_be_bytes().to_vec();
    request_tail.extend_from_slice(&source.addr().to_be_bytes());

    // The recording, read back once the responder's device is closed.
    drop((sqp, srq, scq, slots, target, source, spd));
    drop(sdev);
    let mut conns = read_capture(&pcap).unwrap();
    assert_eq!(conns.len(), 1);
    let c = conns.remove(0);
    // Where the Read Request ends: after those 12 octets, its empty CRC field (no
    // pad: a Read Request's ULPDU is 48 octets).
    let rr_end =
        find(&c.to_server.bytes, &request_tail).expect("the request was recorded") as u64 + 12 + 4;
    // The response: the first outbound segment that carries its payload.
    let at = find(&c.to_client.bytes, &read_data[..64]).expect("the response was recorded") as u64;
    let frame = c
        .to_client
        .segments
        .iter()
        .find(|s| s.offset + u64::from(s.len) > at)
        .expect("a segment holds the response")
        .frame;
    let read_before = c
        .to_server
        .segments
        .iter()
        .filter(|s| s.frame < frame)
        .map(|s| s.offset + u64::from(s.len))
        .max()
        .unwrap_or(0);
    let total = c.to_server.bytes.len() as u64;
    assert!(
        read_before >= rr_end,
        "the response left after {read_before} octets were read, before its request's \
         FPDU (CRC field included) ended at {rr_end}"
    );
    assert!(
        read_before < rr_end + 1024,
        "the response left after {read_before} octets were read; the request ends at \
         {rr_end}, the stream at {total} ({} octets of Writes read after the request first)",
        read_before.saturating_sub(rr_end)
    );
    assert_eq!(
        answered, 1,
        "one transmit from inside the pass, for the Read"
    );
}
