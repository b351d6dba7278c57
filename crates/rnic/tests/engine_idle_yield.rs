//! An engine spinning idle gives its CPU up only to a program polling a CQ on that CPU
//! (`cpu_share.rs`): with nobody polling there it never yields (a yield would hand its
//! CPU to whatever else runs there, a compiler say), and with a consumer polling there
//! it does. One test, so that no other test's polls land on the engine's CPU meanwhile.

mod common;

use common::*;
use softrnic_rnic::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const WRITES: usize = 1000;
const LEN: usize = 16 << 10;

/// An engine-progress device whose one engine is pinned to `cpu` and, idle, spins for
/// 20 ms before it blocks: long enough to spin through the gaps between the Writes.
fn pinned(cpu: usize) -> DeviceConfig {
    DeviceConfig {
        engine_threads: 1,
        engine_cpus: vec![cpu],
        engine_spin: Duration::from_millis(20),
        progress: ProgressMode::Engine,
        ..DeviceConfig::default()
    }
}

/// Busy-polls `cq` (no sleep) for one completion, which must be `wr_id`'s success.
fn poll_one_success(cq: &Cq, wr_id: u64) {
    let start = Instant::now();
    let mut out = [Completion::default()];
    while cq.poll(&mut out) == 0 {
        assert!(
            start.elapsed() < WAIT,
            "no completion of {wr_id} within {WAIT:?}"
        );
    }
    assert_eq!((out[0].wr_id, out[0].status), (wr_id, WcStatus::Success));
}

/// Writes [`WRITES`] messages from a client pinned to `client_cpu` into a server whose
/// engine is pinned to `server_cpu`, one at a time, while (with `poll_beside`) a thread
/// busy-polls the server's CQ on `server_cpu`; checks every octet landed and returns the
/// server engine's idle yields.
fn idle_yields(server_cpu: usize, client_cpu: usize, poll_beside: bool) -> u64 {
    let _pin = affinity::pin_current(client_cpu).unwrap();
    let client = end().config(pinned(client_cpu)).build();
    let server = end().config(pinned(server_cpu)).build();
    connect(&client, &server);
    let data = pattern(LEN * WRITES, 11);
    let src = client.pd.alloc_mr(data.len(), Access::empty()).unwrap();
    src.write(0, &data).unwrap();
    let dst = server
        .pd
        .alloc_mr(
            data.len(),
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        )
        .unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        if poll_beside {
            s.spawn(|| {
                let _pin = affinity::pin_current(server_cpu).unwrap();
                let mut out = [Completion::default()];
                while !stop.load(Ordering::Relaxed) {
                    // A Write's target gets no completion: every poll is empty.
                    assert_eq!(server.cq.poll(&mut out), 0);
                }
            });
        }
        for i in 0..WRITES {
            let wr = SendWr::write(
                i as u64,
                src.sge(i * LEN, LEN),
                dst.addr() + (i * LEN) as u64,
                dst.rkey(),
            );
            client.qp.post_send(wr).unwrap();
            poll_one_success(&client.cq, i as u64);
        }
        // A Read behind the Writes completes once they are all placed (in order).
        let probe = client.pd.alloc_mr(1, Access::LOCAL_WRITE).unwrap();
        let last = dst.addr() + (data.len() - 1) as u64;
        let read = SendWr::read(WRITES as u64, probe.sge(0, 1), last, dst.rkey());
        client.qp.post_send(read).unwrap();
        poll_one_success(&client.cq, WRITES as u64);
        stop.store(true, Ordering::Relaxed);
    });
    assert!(dst.to_vec() == data, "every octet written landed");
    let engines = server.dev.engines();
    assert_eq!(engines[0].cpu, Some(server_cpu));
    assert!(engines[0].events > 0, "the server's engine read the Writes");
    engines[0].idle_yields
}

#[test]
fn an_idle_engine_yields_only_to_a_consumer_polling_on_its_cpu() {
    let cpus = affinity::allowed_cpus();
    if cpus.len() < 2 {
        eprintln!("SKIPPED: needs two CPUs to keep the engine's apart; has {cpus:?}");
        return;
    }
    let (server_cpu, client_cpu) = (cpus[0], cpus[1]);
    // Nobody polls on the server engine's CPU: it never gives the CPU away.
    assert_eq!(idle_yields(server_cpu, client_cpu, false), 0);
    // A consumer busy-polls the server's CQ on that CPU: the engine lets it run.
    assert!(idle_yields(server_cpu, client_cpu, true) > 0);
}
