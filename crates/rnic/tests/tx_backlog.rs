//! A QP whose socket is full waits for the socket to report room: neither a post nor a
//! polling consumer tries it again before then (each try was an empty `sendmsg`), and
//! every request still goes out, in order and exact, once the peer reads.

mod common;

use common::*;
use softrnic_rnic::*;
use softrnic_wire::ddp::TAGGED_HEADER_LEN;
use std::io::Read;
use std::net::TcpStream;

/// Octets per Write: one FPDU, sent from registered memory (above the gather limit).
const LEN: usize = 32 << 10;
/// Source slots: Write `n` comes from slot `n % SLOTS`, which holds `pattern(LEN, slot)`.
const SLOTS: usize = 16;

fn source(pd: &Pd) -> Mr {
    let src = pd.alloc_mr(SLOTS * LEN, Access::LOCAL_WRITE).unwrap();
    for k in 0..SLOTS {
        src.write(k * LEN, &pattern(LEN, k as u64)).unwrap();
    }
    src
}

fn write(qp: &Qp, src: &Mr, n: usize) {
    let slot = n % SLOTS;
    qp.post_send(SendWr::write(
        n as u64,
        src.sge(slot * LEN, LEN),
        0x1000,
        src.rkey(),
    ))
    .unwrap();
}

/// The raw peer reads `count` Write FPDUs (MPA length, tagged DDP header, payload, pad,
/// CRC) and checks each payload, in order.
fn read_writes(peer: &mut TcpStream, count: usize) {
    for n in 0..count {
        let mut len = [0u8; 2];
        peer.read_exact(&mut len).unwrap();
        let ulpdu = u16::from_be_bytes(len) as usize;
        assert_eq!(ulpdu, TAGGED_HEADER_LEN + LEN, "FPDU {n}");
        let mut rest = vec![0u8; ulpdu + (4 - (2 + ulpdu) % 4) % 4 + 4];
        peer.read_exact(&mut rest).unwrap();
        assert!(
            rest[TAGGED_HEADER_LEN..ulpdu] == pattern(LEN, (n % SLOTS) as u64),
            "Write {n} exact"
        );
    }
}

/// Send calls made by program threads (posting or polling), not by an engine.
fn polling_thread_syscalls(qps: &[Qp]) -> u64 {
    qps.iter()
        .map(|q| {
            let s = q.stats();
            s.tx_syscalls - s.tx_engine_syscalls
        })
        .sum()
}

/// Engine progress: posts to a QP whose socket is full make no send call (before: one
/// `WouldBlock` each); the engine sends when the peer makes room.
#[test]
fn posts_to_a_full_socket_wait_for_room() {
    const MORE: usize = 512;
    let e = end()
        .progress(ProgressMode::Engine)
        .cq(8192)
        .queues(4096, 1)
        .build();
    let src = source(&e.pd);
    let mut peer = raw_initiator(&e);
    // The posting thread sends inline and the completions of what the socket took are
    // in the CQ when the post returns: post until several are left over.
    let mut posted = 0;
    let mut completed = 0;
    while posted - completed < 8 {
        assert!(posted < 3000, "{posted} Writes never filled the socket");
        write(&e.qp, &src, posted);
        posted += 1;
        completed += drained(&e.cq).len();
    }
    let before = e.qp.stats().tx_syscalls;
    for _ in 0..MORE {
        write(&e.qp, &src, posted);
        posted += 1;
    }
    let calls = e.qp.stats().tx_syscalls - before;
    // Only the socket's room (the peer's kernel ACKing what fits its window) lets the
    // engine send now, a few times: far fewer calls than posts.
    assert!(
        calls < MORE as u64 / 2,
        "{calls} send calls for {MORE} posts to a full socket"
    );
    read_writes(&mut peer, posted);
    let mut got = drained(&e.cq);
    got.extend(take(&e.cq, posted - completed - got.len()));
    assert!(got.iter().all(|c| c.status == WcStatus::Success));
    exactly_once(&got, (completed as u64)..(posted as u64));
}

/// Hybrid progress, one CQ for more QPs than a consumer reads itself: its polls leave
/// full sockets to the engine (before: a `sendmsg` per QP and empty poll), and every QP
/// finishes once its peer reads, none held back by the others.
#[test]
fn polls_leave_full_sockets_to_the_engine() {
    const QPS: usize = 12;
    const EACH: usize = 256;
    const POLLS: usize = 1000;
    let dev = Device::open(DeviceConfig::default()).unwrap();
    let pd = dev.alloc_pd();
    let cq = dev.create_cq(QPS * EACH + 64).unwrap();
    let src = source(&pd);
    let qps: Vec<Qp> = (0..QPS)
        .map(|_| dev.create_qp(&pd, QpInit::new(&cq, EACH + 8, 1)).unwrap())
        .collect();
    let mut peers: Vec<TcpStream> = qps
        .iter()
        .map(|q| raw_initiator_to(&dev, q, MpaConfig::default()))
        .collect();
    // 8 MiB per QP: more than a socket and its peer's window take.
    for q in &qps {
        for n in 0..EACH {
            write(q, &src, n);
        }
    }
    let mut got = Vec::new();
    let mut wcs = vec![Completion::default(); 256];
    let before = polling_thread_syscalls(&qps);
    for _ in 0..POLLS {
        let n = cq.poll(&mut wcs);
        got.extend_from_slice(&wcs[..n]);
    }
    // Only this thread's calls: the engine may still send while the sockets fill, as
    // often as the scheduler lets it, and that is its job.
    let calls = polling_thread_syscalls(&qps) - before;
    assert!(
        got.len() < QPS * EACH,
        "every Write completed before the peers read: the sockets were never full"
    );
    // Trying each full socket at every poll makes about QPS calls a poll.
    assert!(
        calls < POLLS as u64 / 2,
        "{calls} send calls by the polling thread in {POLLS} polls of {QPS} full sockets"
    );
    for p in &mut peers {
        read_writes(p, EACH);
    }
    got.extend(take(&cq, QPS * EACH - got.len()));
    assert!(got.iter().all(|c| c.status == WcStatus::Success));
    for q in &qps {
        let mine: Vec<Completion> = got.iter().filter(|c| c.qp == q.id()).copied().collect();
        exactly_once(&mine, 0..EACH as u64);
    }
}

/// The QP's counters say who transmitted: the posting thread sends what the socket
/// takes at each post, the engine what the peer's reads make room for; between them
/// every octet of every FPDU, counted once.
#[test]
fn the_counters_tell_the_engines_sends_from_the_posting_threads() {
    const WRITES: usize = 1024;
    let e = end()
        .progress(ProgressMode::Engine)
        .cq(8192)
        .queues(4096, 1)
        .build();
    let src = source(&e.pd);
    let mut peer = raw_initiator(&e);
    // 32 MiB: far more than the socket and the peer's window take before it reads.
    for n in 0..WRITES {
        write(&e.qp, &src, n);
    }
    read_writes(&mut peer, WRITES);
    let got = take(&e.cq, WRITES);
    assert!(got.iter().all(|c| c.status == WcStatus::Success));
    exactly_once(&got, 0..WRITES as u64);
    let s = e.qp.stats();
    // MPA length, DDP header, payload (a multiple of 4: no pad), CRC.
    let fpdu = (2 + TAGGED_HEADER_LEN + LEN + 4) as u64;
    assert_eq!(s.tx_bytes, WRITES as u64 * fpdu, "{s:?}");
    assert!(s.tx_engine_bytes > 0, "the engine sent nothing: {s:?}");
    assert!(
        s.tx_engine_bytes < s.tx_bytes,
        "the posts sent nothing: {s:?}"
    );
    assert!(s.tx_engine_syscalls > 0 && s.tx_engine_syscalls < s.tx_syscalls);
}
