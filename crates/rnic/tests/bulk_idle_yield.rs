//! A busy-polling consumer that owns a socket carrying large FPDUs (the receive path in
//! exact mode) and finds it empty gives up the CPU before it reads it again
//! (`Transport::yield_before_reread`, counted in `QpStats::rx_idle_yields`), but only to
//! an engine that runs on its CPU (`cpu_share.rs`): with none there it never yields, and
//! a stream of small messages (read-ahead) never does, so a latency ping-pong's spin is
//! as before. Nothing here depends on timing: each consumer poll that drives the QP
//! makes one read, and after the message nothing more arrives on its connection.

mod common;

use common::*;
use softrnic_rnic::handoff::CLAIM_AFTER;
use softrnic_rnic::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// Polls `cq` while it is empty, often enough to claim its QPs.
fn claim_by_polling(cq: &Cq) {
    for _ in 0..2 * CLAIM_AFTER {
        assert!(cq.poll_one().is_none(), "no traffic expected yet");
    }
}

/// Busy-polls `cq` until a receive completes; returns it.
fn spin_recv(cq: &Cq) -> Completion {
    let mut spins = 0u64;
    loop {
        if let Some(c) = cq.poll_one()
            && c.opcode == WcOpcode::Recv
        {
            return c;
        }
        spins += 1;
        assert!(spins < 500_000_000, "no receive completion");
    }
}

/// Empty polls after the message with no engine on the consumer's CPU: enough for a
/// consumer to claim the socket again had the engine taken it back meanwhile (a
/// descheduled test thread), and to have yielded many times over under the old rule.
const IDLE_POLLS: usize = 100 * CLAIM_AFTER as usize;

/// A device whose engines run on `cpu` only.
fn engines_on(cpu: usize) -> DeviceConfig {
    DeviceConfig {
        engine_cpus: vec![cpu],
        ..DeviceConfig::default()
    }
}

/// Keeps an engine busy on `cpu` until `stop`: a peer, from the calling thread, writes
/// 64 KiB after 64 KiB into a QP whose device has its engine there (engine progress:
/// the engine reads every Write).
fn keep_an_engine_busy_on(cpu: usize, peer_cpu: usize, stop: &AtomicBool) {
    let target = end()
        .config(DeviceConfig {
            progress: ProgressMode::Engine,
            ..engines_on(cpu)
        })
        .build();
    let _pin = affinity::pin_current(peer_cpu).unwrap();
    let peer = end().config(engines_on(peer_cpu)).build();
    connect(&peer, &target);
    const LEN: usize = 64 << 10;
    let src = peer.pd.alloc_mr(LEN, Access::empty()).unwrap();
    let dst = target
        .pd
        .alloc_mr(LEN, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let mut id = 0;
    while !stop.load(Ordering::Relaxed) {
        let wr = SendWr::write(id, src.sge(0, LEN), dst.addr(), dst.rkey());
        peer.qp.post_send(wr).unwrap();
        let c = one(&peer.cq);
        assert_eq!((c.wr_id, c.status), (id, WcStatus::Success));
        id += 1;
    }
    assert!(target.dev.engines()[0].events > 0, "the busy engine read");
}

/// Sends one message of `size` octets to a receiver whose consumer busy-polls on
/// `cpu` (the connection's engines on `other`), with an engine kept busy on `cpu` if
/// `engine_beside`; checks the octets placed, then polls the empty CQ until it has
/// yielded `enough` times (within [`WAIT`]) or, with `enough` 0, [`IDLE_POLLS`] times;
/// returns the receiver's idle yields. The consumer is a fresh thread (a thread's look
/// at its CPU is its own).
fn idle_yields_after_one_send(
    size: usize,
    enough: u64,
    cpus: (usize, usize),
    engine_beside: bool,
) -> u64 {
    std::thread::scope(|s| {
        s.spawn(|| consume_one_send(size, enough, cpus, engine_beside))
            .join()
            .unwrap()
    })
}

fn consume_one_send(
    size: usize,
    enough: u64,
    (cpu, other): (usize, usize),
    engine_beside: bool,
) -> u64 {
    let _pin = affinity::pin_current(cpu).unwrap();
    let (a, b) = end().config(engines_on(other)).pair();
    let src = a.pd.alloc_mr(size, Access::LOCAL_WRITE).unwrap();
    let dst = b.pd.alloc_mr(size, Access::LOCAL_WRITE).unwrap();
    b.qp.post_recv(RecvWr::new(7, dst.sge(0, size))).unwrap();
    claim_by_polling(&b.cq);
    let data = pattern(size, size as u64);
    src.write(0, &data).unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        if engine_beside {
            s.spawn(|| keep_an_engine_busy_on(cpu, other, &stop));
        }
        a.qp.post_send(SendWr::send(1, src.sge(0, size))).unwrap();
        let c = spin_recv(&b.cq);
        assert_eq!(
            (c.wr_id, c.status, c.byte_len as usize),
            (7, WcStatus::Success, size)
        );
        let start = Instant::now();
        let mut polls = 0;
        loop {
            assert!(b.cq.poll_one().is_none(), "nothing more was sent");
            polls += 1;
            let yields = b.qp.stats().rx_idle_yields;
            if enough == 0 && polls == IDLE_POLLS || enough > 0 && yields >= enough {
                break;
            }
            assert!(start.elapsed() < WAIT, "{yields} yields in {WAIT:?}");
        }
        stop.store(true, Ordering::Relaxed);
    });
    let mut got = vec![0; size];
    dst.read(0, &mut got).unwrap();
    assert!(got == data, "the octets placed are the octets sent");
    b.qp.stats().rx_idle_yields
}

#[test]
fn a_polling_consumer_yields_between_empty_reads_of_a_bulk_stream_to_an_engine_beside_only() {
    let cpus = affinity::allowed_cpus();
    if cpus.len() < 2 {
        eprintln!("SKIPPED: needs two CPUs to keep engines off the consumer's; has {cpus:?}");
        return;
    }
    let cpus = (cpus[0], cpus[1]);
    // 64 KiB: two FPDUs, the first 65,000 octets long: exact mode. With an engine busy
    // on the consumer's CPU, the consumer's polls yield to it.
    let beside = idle_yields_after_one_send(64 << 10, CLAIM_AFTER, cpus, true);
    assert!(beside >= CLAIM_AFTER, "{beside} yields");
    // No engine on its CPU: no yield, however long it polls.
    assert_eq!(idle_yields_after_one_send(64 << 10, 0, cpus, false), 0);
    // 8 octets: read-ahead mode, the spin of a latency ping-pong: no yield, even with
    // an engine beside.
    assert_eq!(idle_yields_after_one_send(8, 0, cpus, true), 0);
}
