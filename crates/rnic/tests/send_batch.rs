//! Batches of send-queue work requests (`post_send_batch`): a small Send or Write posted
//! to an idle send queue is copied at its post, the small Sends and Writes at the head
//! of a busy queue are framed and completed as a run in one core call, and
//! each SGE is checked against the TPT through the thread's remembered look-ups. These
//! tests drive both through the verbs API: a batch mixing every kind of request
//! arrives byte for byte and completes in posting order, a region deregistered under a
//! queued small Send fails the QP instead of sending wrong octets, and an lkey
//! deregistered, re-registered or invalidated between two posts of one batch is refused
//! with the exact status although the same lkey was just accepted.

mod common;
use common::*;
use softrnic_rnic::*;

/// One request of the mixed batch, as the receiver must see it.
#[derive(Clone, Copy)]
enum Item {
    /// A Send of `len` octets, from two SGEs when `split`.
    Send { len: usize, split: bool, se: bool },
    /// An RDMA Write of `len` octets at `at` in the peer's region.
    Write { len: usize, at: usize },
    /// An RDMA Read of `len` octets at `at` in the peer's region.
    Read { len: usize, at: usize },
}

/// Small messages around large ones (one FPDU above the gather limit, one of several
/// FPDUs), a Read, a fenced Send, unsignaled requests: the run stops at each request
/// it does not take and the general path goes on from there, in order.
const BATCH: [(Item, bool); 14] = [
    (
        Item::Send {
            len: 64,
            split: false,
            se: false,
        },
        true,
    ),
    (
        Item::Send {
            len: 0,
            split: false,
            se: false,
        },
        false,
    ),
    (Item::Write { len: 64, at: 0 }, false),
    (
        Item::Send {
            len: 200,
            split: true,
            se: true,
        },
        true,
    ),
    (
        Item::Send {
            len: 20_000,
            split: false,
            se: false,
        },
        true,
    ),
    (
        Item::Send {
            len: 1,
            split: false,
            se: false,
        },
        false,
    ),
    (Item::Write { len: 4095, at: 100 }, true),
    (Item::Read { len: 100, at: 5000 }, true),
    (
        Item::Send {
            len: 64,
            split: true,
            se: false,
        },
        true,
    ),
    (
        Item::Send {
            len: 150_000,
            split: true,
            se: false,
        },
        true,
    ),
    (Item::Write { len: 300, at: 9000 }, false),
    (
        Item::Send {
            len: 4095,
            split: false,
            se: false,
        },
        false,
    ),
    (
        Item::Send {
            len: 16_000,
            split: false,
            se: false,
        },
        true,
    ),
    (
        Item::Send {
            len: 7,
            split: false,
            se: true,
        },
        true,
    ),
];

#[test]
fn a_mixed_batch_arrives_whole_and_completes_in_posting_order() {
    for crc in [CrcPolicy::Off, CrcPolicy::Required] {
        let mut cfg = DeviceConfig::default();
        cfg.mpa.crc = crc;
        let (a, b) = end().config(cfg).queues(64, 64).pair();
        let src = a.pd.alloc_mr(400_000, Access::LOCAL_WRITE).unwrap();
        let data = pattern(400_000, 3);
        src.write(0, &data).unwrap();
        let region =
            b.pd.alloc_mr(
                16_384,
                Access::REMOTE_WRITE | Access::REMOTE_READ | Access::LOCAL_WRITE,
            )
            .unwrap();
        let peer_data = pattern(16_384, 4);
        region.write(0, &peer_data).unwrap();
        let dst = b.pd.alloc_mr(400_000, Access::LOCAL_WRITE).unwrap();
        // Each request reads its own range of `src`; each Send lands in its own range
        // of `dst`.
        let mut at = 0;
        let mut recv_at = 0;
        let mut wrs = Vec::new();
        let mut recvs = Vec::new();
        let mut writes = Vec::new();
        for (i, &(item, signaled)) in BATCH.iter().enumerate() {
            let id = i as u64;
            let wr = match item {
                Item::Send { len, split, se } => {
                    let h = if split { len / 3 } else { len };
                    let wr = SendWr::send(id, [src.sge(at, h), src.sge(at + h, len - h)]);
                    b.qp.post_recv(RecvWr::new(100 + id, [dst.sge(recv_at, len)]))
                        .unwrap();
                    recvs.push((100 + id, recv_at, at, len, se));
                    recv_at += len;
                    if se { wr.solicited() } else { wr }
                }
                Item::Write { len, at: to } => {
                    writes.push((to, at, len));
                    SendWr::write(
                        id,
                        [src.sge(at, len)],
                        region.addr() + to as u64,
                        region.rkey(),
                    )
                }
                Item::Read { len, at: from } => {
                    writes.push((from, usize::MAX, len));
                    SendWr::read(
                        id,
                        src.sge(at, len),
                        region.addr() + from as u64,
                        region.rkey(),
                    )
                }
            };
            let len = match item {
                Item::Send { len, .. } | Item::Write { len, .. } | Item::Read { len, .. } => len,
            };
            wrs.push((wr, signaled, len));
            at += len;
        }
        // The Send after the Read is fenced: it waits for the Read's response.
        a.qp.post_send_batch(wrs.iter().map(|(wr, signaled, _)| {
            let wr = if wr.wr_id == 8 {
                wr.clone().fence()
            } else {
                wr.clone()
            };
            if *signaled { wr } else { wr.unsignaled() }
        }))
        .unwrap();

        let want: Vec<_> = BATCH
            .iter()
            .enumerate()
            .filter(|(_, (_, s))| *s)
            .map(|(i, (item, _))| {
                let op = match item {
                    Item::Send { .. } => WcOpcode::Send,
                    Item::Write { .. } => WcOpcode::Write,
                    Item::Read { .. } => WcOpcode::Read,
                };
                (i as u64, WcStatus::Success, op, wrs[i].2 as u32)
            })
            .collect();
        let got: Vec<_> = take(&a.cq, want.len())
            .iter()
            .map(|c| (c.wr_id, c.status, c.opcode, c.byte_len))
            .collect();
        assert_eq!(got, want, "sender's completions, crc {crc:?}");

        let r = take(b.recv_cq(), recvs.len());
        for (c, &(wr_id, dst_at, src_at, len, se)) in r.iter().zip(&recvs) {
            assert_eq!(
                (c.wr_id, c.status, c.byte_len, c.solicited),
                (wr_id, WcStatus::Success, len as u32, se),
                "receive completion"
            );
            let mut got = vec![0u8; len];
            dst.read(dst_at, &mut got).unwrap();
            assert!(
                got == data[src_at..src_at + len],
                "Send {wr_id} ({len} octets)"
            );
        }
        // Writes landed where they were aimed; the Read brought the peer's octets
        // (written before any Write of the batch touched that range).
        let landed = region.to_vec();
        let mut expect = peer_data.clone();
        let mut read_back = None;
        for &(to, from, len) in &writes {
            if from == usize::MAX {
                read_back = Some((to, len));
            } else {
                expect[to..to + len].copy_from_slice(&data[from..from + len]);
            }
        }
        assert!(landed == expect, "the peer's region after the Writes");
        let (from, len) = read_back.unwrap();
        let read_at: usize = wrs[..7].iter().map(|w| w.2).sum();
        let mut got = vec![0u8; len];
        src.read(read_at, &mut got).unwrap();
        assert!(got == peer_data[from..from + len], "the Read's sink");
        assert_eq!(a.qp.state(), QpState::Rts);
        assert!(drained(&a.cq).is_empty() && drained(b.recv_cq()).is_empty());
    }
}

/// A small Send queued behind another request (a Write above the gather limit, which
/// the batch posts first: a small Send to an idle send queue is copied at its post
/// instead) whose region is deregistered before it is framed fails the QP: nothing of
/// it is sent, the Sends flush once each, the peer places no Send.
#[test]
fn a_region_deregistered_under_a_queued_small_send_fails_the_qp() {
    let (a, b) = end().queues(16, 16).pair();
    let mut gone = Some(a.pd.alloc_mr(64, Access::empty()).unwrap());
    let kept = a.pd.alloc_mr(20_000, Access::empty()).unwrap();
    let dst = b.pd.alloc_mr(128, Access::LOCAL_WRITE).unwrap();
    let peer = b.pd.alloc_mr(20_000, Access::REMOTE_WRITE).unwrap();
    dst.fill(0, 128, 0xee).unwrap();
    b.qp.post_recv_batch([
        RecvWr::new(10, [dst.sge(0, 64)]),
        RecvWr::new(11, [dst.sge(64, 64)]),
    ])
    .unwrap();
    // Above TX_GATHER_MAX: sent from registered memory, so it waits in the send queue.
    let write = SendWr::write(5, [kept.sge(0, 20_000)], peer.addr(), peer.rkey());
    let first = SendWr::send(0, [gone.as_ref().unwrap().sge(0, 64)]);
    let second = SendWr::send(1, [kept.sge(0, 64)]);
    // The batch's iterator runs as the requests are posted, before any is framed.
    a.qp.post_send_batch([write, first, second].into_iter().inspect(|wr| {
        if wr.wr_id == 1 {
            gone = None;
        }
    }))
    .unwrap();
    disconnected(&a.dev, &a.qp);
    let got = drained(&a.cq);
    exactly_once(&got, [5, 0, 1]);
    assert_eq!(status_of(&got, 5), WcStatus::Success);
    assert_eq!(status_of(&got, 0), WcStatus::WrFlushError);
    assert_eq!(status_of(&got, 1), WcStatus::WrFlushError);
    assert_eq!(a.qp.state(), QpState::Error);
    disconnected(&b.dev, &b.qp);
    let r = drained(&b.cq);
    exactly_once(&r, [10, 11]);
    assert!(
        r.iter().all(|c| c.status == WcStatus::WrFlushError),
        "{r:?}"
    );
    assert_eq!(dst.to_vec(), vec![0xee; 128], "nothing was placed");
}

/// The same failure behind a Read: the Read Request is gathered into the transmit
/// buffer but not yet sent when the Send's region is found gone. The close must still
/// reach the peer at once, whether the engine owns `a`'s socket or a consumer claimed
/// it by polling and then stopped: the close timers are an hour here, so only the
/// close itself can end either side. It once waited for the gathered octets, which
/// nothing sent until the close timer, whose reset then never left the socket; the
/// peer saw no FIN or RST at all in 3 runs of 4.
#[test]
fn a_local_error_behind_a_gathered_read_disconnects_the_peer() {
    let cfg = DeviceConfig {
        close_timeout: std::time::Duration::from_secs(3600),
        ..DeviceConfig::default()
    };
    for claimed in [false, true] {
        let (a, b) = end().config(cfg.clone()).queues(16, 16).pair();
        if claimed {
            for _ in 0..2 * softrnic_rnic::handoff::CLAIM_AFTER {
                assert!(a.cq.poll_one().is_none(), "no traffic expected yet");
            }
        }
        let mut gone = Some(a.pd.alloc_mr(64, Access::empty()).unwrap());
        let sink = a.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
        let dst = b.pd.alloc_mr(128, Access::LOCAL_WRITE).unwrap();
        let peer = b.pd.alloc_mr(64, Access::REMOTE_READ).unwrap();
        dst.fill(0, 128, 0xee).unwrap();
        b.qp.post_recv_batch([
            RecvWr::new(10, [dst.sge(0, 64)]),
            RecvWr::new(11, [dst.sge(64, 64)]),
        ])
        .unwrap();
        let read = SendWr::read(5, sink.sge(0, 8), peer.addr(), peer.rkey());
        let first = SendWr::send(0, [gone.as_ref().unwrap().sge(0, 64)]);
        let second = SendWr::send(1, [sink.sge(0, 64)]);
        a.qp.post_send_batch([read, first, second].into_iter().inspect(|wr| {
            if wr.wr_id == 1 {
                gone = None;
            }
        }))
        .unwrap();
        disconnected(&a.dev, &a.qp);
        let got = drained(&a.cq);
        exactly_once(&got, [5, 0, 1]);
        assert!(
            got.iter().all(|c| c.status == WcStatus::WrFlushError),
            "claimed {claimed}: {got:?}"
        );
        assert_eq!(a.qp.state(), QpState::Error);
        // The peer learns from the connection's end (a local error sends no
        // Terminate): its receives flush, nothing was placed, no fatal event.
        disconnected(&b.dev, &b.qp);
        let r = drained(b.recv_cq());
        exactly_once(&r, [10, 11]);
        assert!(
            r.iter().all(|c| c.status == WcStatus::WrFlushError),
            "claimed {claimed}: {r:?}"
        );
        assert_eq!(b.qp.state(), QpState::Error);
        assert_eq!(dst.to_vec(), vec![0xee; 128], "nothing was placed");
    }
}

/// A small Send posted to an idle send queue is copied into the transmit buffer at its
/// post and completes then, as an inline send: its region deregistered while the rest
/// of the batch is posted changes nothing, and the peer gets the octets it held.
#[test]
fn a_small_send_to_an_idle_queue_is_copied_at_its_post() {
    let (a, b) = end().queues(16, 16).pair();
    let mut gone = Some(a.pd.alloc_mr(64, Access::empty()).unwrap());
    gone.as_ref().unwrap().write(0, &pattern(64, 7)).unwrap();
    let kept = a.pd.alloc_mr(64, Access::empty()).unwrap();
    kept.write(0, &pattern(64, 8)).unwrap();
    let dst = b.pd.alloc_mr(128, Access::LOCAL_WRITE).unwrap();
    b.qp.post_recv_batch([
        RecvWr::new(10, [dst.sge(0, 64)]),
        RecvWr::new(11, [dst.sge(64, 64)]),
    ])
    .unwrap();
    let first = SendWr::send(0, [gone.as_ref().unwrap().sge(0, 64)]);
    let second = SendWr::send(1, [kept.sge(0, 64)]);
    a.qp.post_send_batch([first, second].into_iter().inspect(|wr| {
        if wr.wr_id == 1 {
            gone = None;
        }
    }))
    .unwrap();
    let got = take(&a.cq, 2);
    assert_eq!(got.iter().map(|c| c.wr_id).collect::<Vec<_>>(), [0, 1]);
    assert!(got.iter().all(|c| c.status == WcStatus::Success), "{got:?}");
    let r = take(&b.cq, 2);
    assert_eq!(r.iter().map(|c| c.wr_id).collect::<Vec<_>>(), [10, 11]);
    assert!(r.iter().all(|c| c.status == WcStatus::Success), "{r:?}");
    let mut want = pattern(64, 7);
    want.extend(pattern(64, 8));
    assert_eq!(dst.to_vec(), want);
    assert_eq!(a.qp.state(), QpState::Rts);
}

/// A small Send copied at its post while a Read posted before it is outstanding
/// completes after the Read: completions keep posting order.
#[test]
fn a_send_copied_at_its_post_completes_after_an_earlier_read() {
    let (a, b) = end().queues(16, 16).pair();
    let src = a.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let sink = a.pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let peer = b.pd.alloc_mr(4096, Access::REMOTE_READ).unwrap();
    peer.write(0, &pattern(4096, 9)).unwrap();
    let dst = b.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    b.qp.post_recv(RecvWr::new(10, [dst.sge(0, 64)])).unwrap();
    a.qp.post_send(SendWr::read(0, sink.sge(0, 4096), peer.addr(), peer.rkey()))
        .unwrap();
    a.qp.post_send(SendWr::send(1, [src.sge(0, 64)])).unwrap();
    let got = take(&a.cq, 2);
    assert_eq!(got.iter().map(|c| c.wr_id).collect::<Vec<_>>(), [0, 1]);
    assert!(got.iter().all(|c| c.status == WcStatus::Success), "{got:?}");
    assert_eq!(sink.to_vec(), pattern(4096, 9));
    assert_eq!(one(&b.cq).wr_id, 10);
}

/// An lkey this thread has just checked (its look-up is remembered) and that is then
/// deregistered, or deregistered and its slot registered again, between two posts of
/// one batch: the next post through it completes with LocalProtectionError and the
/// QP fails; the request before it, copied at its post to the idle send queue, has
/// completed.
#[test]
fn an_lkey_deregistered_between_two_posts_of_a_batch_is_refused() {
    for reregister in [false, true] {
        let (a, b) = end().queues(16, 16).pair();
        let mut stale = Some(a.pd.alloc_mr(64, Access::empty()).unwrap());
        let sge = stale.as_ref().unwrap().sge(0, 64);
        let other = a.pd.alloc_mr(64, Access::empty()).unwrap();
        let mut again = None;
        let dst = b.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
        b.qp.post_recv(RecvWr::new(10, [dst.sge(0, 64)])).unwrap();
        // Remembered by this thread: the same lkey passes the check once.
        a.qp.post_send(SendWr::send(0, [sge])).unwrap();
        assert_eq!(one(&a.cq).status, WcStatus::Success);
        let wrs = [SendWr::send(1, [other.sge(0, 64)]), SendWr::send(2, [sge])];
        a.qp.post_send_batch(wrs.into_iter().inspect(|wr| {
            if wr.wr_id == 2 {
                stale = None;
                if reregister {
                    // The freed TPT slot is taken again, under another key.
                    again = Some(a.pd.alloc_mr(64, Access::empty()).unwrap());
                }
            }
        }))
        .unwrap();
        let got = take(&a.cq, 2);
        exactly_once(&got, [1, 2]);
        assert_eq!(
            status_of(&got, 2),
            WcStatus::LocalProtectionError,
            "reregister {reregister}"
        );
        // The request before it was copied at its post (an idle send queue), so it
        // had completed before the refused one was posted.
        assert_eq!(status_of(&got, 1), WcStatus::Success);
        assert_eq!(a.qp.state(), QpState::Error);
        if let Some(m) = &again {
            assert_eq!(m.lkey() >> 8, sge.lkey >> 8, "the slot was reused");
            assert_ne!(m.lkey(), sge.lkey);
        }
    }
}

/// An lkey invalidated by a local invalidate posted in the same batch (it runs at
/// once: nothing is ahead of it in the send queue): the Send through it after the
/// invalidate is refused with LocalProtectionError, though this thread checked the
/// same lkey successfully just before.
#[test]
fn an_lkey_invalidated_inside_a_batch_is_refused_after_the_invalidate() {
    let (a, b) = end().queues(16, 16).pair();
    let src = a.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let dst = b.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    b.qp.post_recv(RecvWr::new(10, [dst.sge(0, 64)])).unwrap();
    a.qp.post_send(SendWr::send(0, [src.sge(0, 64)])).unwrap();
    assert_eq!(one(&a.cq).status, WcStatus::Success);
    a.qp.post_send_batch([
        SendWr::local_invalidate(1, src.lkey()),
        SendWr::send(2, [src.sge(0, 64)]),
    ])
    .unwrap();
    let got = take(&a.cq, 2);
    let got: Vec<_> = got.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(
        got,
        [(1, WcStatus::Success), (2, WcStatus::LocalProtectionError)]
    );
    assert!(!src.is_valid());
    assert_eq!(a.qp.state(), QpState::Error);
}

/// One batch of small Sends that fills the 64 KiB transmit buffer several times over:
/// the run stops where the buffer has no room, the general path takes that request
/// (sent from registered memory), and the next run goes on after it, so every Send
/// arrives whole, in order, into its own buffer.
#[test]
fn small_sends_beyond_the_transmit_buffer_arrive_in_order() {
    const N: usize = 700;
    const LEN: usize = 200;
    for crc in [CrcPolicy::Off, CrcPolicy::Required] {
        let mut cfg = DeviceConfig::default();
        cfg.mpa.crc = crc;
        let (a, b) = end().config(cfg).queues(N + 8, N + 8).pair();
        let data = pattern(N * LEN, 7);
        let src = a.pd.alloc_mr(N * LEN, Access::empty()).unwrap();
        src.write(0, &data).unwrap();
        let dst = b.pd.alloc_mr(N * LEN, Access::LOCAL_WRITE).unwrap();
        b.qp.post_recv_batch((0..N).map(|i| RecvWr::new(1000 + i as u64, [dst.sge(i * LEN, LEN)])))
            .unwrap();
        a.qp.post_send_batch((0..N).map(|i| {
            let wr = SendWr::send(i as u64, [src.sge(i * LEN, LEN)]);
            if i % 50 == 49 { wr } else { wr.unsignaled() }
        }))
        .unwrap();
        let sent: Vec<_> = take(&a.cq, N / 50)
            .iter()
            .map(|c| (c.wr_id, c.status))
            .collect();
        let want: Vec<_> = (0..N / 50)
            .map(|k| (50 * k as u64 + 49, WcStatus::Success))
            .collect();
        assert_eq!(sent, want, "crc {crc:?}");
        let got = take(b.recv_cq(), N);
        for (i, c) in got.iter().enumerate() {
            assert_eq!(
                (c.wr_id, c.status, c.byte_len),
                (1000 + i as u64, WcStatus::Success, LEN as u32)
            );
        }
        assert!(
            dst.to_vec() == data,
            "every Send in its own buffer, crc {crc:?}"
        );
    }
}
