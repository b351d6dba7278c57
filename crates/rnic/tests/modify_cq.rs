//! Moving CQs between handlers under load: four CQs receive a steady stream while a
//! mover thread keeps moving each of them at random between a callback handler on the
//! first CPU, one on the last CPU, a completion channel and no handler (detached: the
//! events go to `Cq::wait_notify`). Moving between the two callback handlers also moves
//! the CQ's QP between the engines pinned to those CPUs.
//!
//! Every consumer runs the verbs loop: poll until empty, re-arm, poll again. An event
//! lost in a move leaves its CQ disarmed with nobody to re-arm it, so the stream stalls
//! and the test fails on the wait; an event delivered twice makes the events handled
//! exceed the events raised. At the end: every completion was polled exactly once, every
//! payload landed in its slot, and per CQ the events handled equal those raised,
//! delivered and acknowledged.

mod common;

use common::*;
use softrnic_rnic::*;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const CQS: usize = 4;
const MSGS: usize = 1500;
const BATCH: usize = 25;
/// Handler ids: 0 and 1 callbacks on two CPUs, 2 a channel; `None` detached.
const TARGETS: [Option<usize>; 4] = [Some(0), Some(1), Some(2), None];

/// One CQ's consumer state, shared by whichever handler has its event.
struct Consumer {
    cq: Cq,
    /// Receive wr_ids seen (each message is received into its own slot, wr_id = slot).
    seen: Mutex<Vec<bool>>,
    polled: AtomicUsize,
    /// Events handled, wherever they came from.
    handled: AtomicU64,
}

impl Consumer {
    /// Handles one event of this CQ.
    fn on_event(&self) {
        self.handled.fetch_add(1, Ordering::Relaxed);
        self.drain();
        self.cq.req_notify(false);
        self.drain();
    }

    fn drain(&self) {
        while let Some(c) = self.cq.poll_one() {
            assert_eq!(c.status, WcStatus::Success, "{c:?}");
            let mut seen = self.seen.lock().unwrap();
            assert!(!seen[c.wr_id as usize], "completion {} twice", c.wr_id);
            seen[c.wr_id as usize] = true;
            self.polled.fetch_add(1, Ordering::Release);
        }
    }
}

fn wait_until(what: &str, cond: impl FnMut() -> bool) {
    wait_until_or(what, cond, String::new);
}

/// Waits for `cond`, failing after `T` with `state()` in the message.
fn wait_until_or(what: &str, mut cond: impl FnMut() -> bool, state: impl Fn() -> String) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {}",
            state()
        );
        std::thread::yield_now();
    }
}

fn moves_under_load(progress: ProgressMode, seed: u64) {
    let cpus = affinity::process_cpus();
    let (c0, c1) = (cpus[0], *cpus.last().unwrap());
    let dev = Device::open(DeviceConfig {
        engine_cpus: vec![c0, c1],
        progress,
        comp_vectors: 3,
        ..DeviceConfig::default()
    })
    .unwrap();
    let peer = Device::open(DeviceConfig::default()).unwrap();
    let (pd, ppd) = (dev.alloc_pd(), peer.alloc_pd());

    // The consumers, by CQ id, for the handlers to find.
    let consumers: Arc<Mutex<Vec<Arc<Consumer>>>> = Arc::default();
    let find = {
        let consumers = consumers.clone();
        move |cq: &Cq| -> Arc<Consumer> {
            let all = consumers.lock().unwrap();
            all.iter().find(|c| c.cq.same_as(cq)).unwrap().clone()
        }
    };
    for (id, cpu) in [(0, c0), (1, c1)] {
        let find = find.clone();
        let f = move |ev: &CqEvent| {
            assert_eq!(affinity::current_cpu(), Some(cpu));
            find(ev.cq()).on_event();
        };
        dev.set_handler(id, Handler::callback(f).on_cpu(cpu))
            .unwrap();
    }
    let ch = CompChannel::new().unwrap();
    dev.set_handler(2, Handler::channel(&ch)).unwrap();

    struct Link {
        qp: Qp,
        pqp: Qp,
        pcq: Cq,
        bufs: Mr,
        src: Mr,
    }
    let mut links = Vec::new();
    for i in 0..CQS {
        let cq = dev.create_cq_on(MSGS + 8, i % 2).unwrap();
        let qp = dev.create_qp(&pd, QpInit::new(&cq, 8, MSGS)).unwrap();
        let pcq = peer.create_cq(256).unwrap();
        let pqp = peer.create_qp(&ppd, QpInit::new(&pcq, 64, 4)).unwrap();
        connect_qps((&peer, &pqp), (&dev, &qp));
        let bufs = pd.alloc_mr(8 * MSGS, Access::LOCAL_WRITE).unwrap();
        for k in 0..MSGS {
            qp.post_recv(RecvWr::new(k as u64, bufs.sge(8 * k, 8)))
                .unwrap();
        }
        // Message k carries k and this CQ's number.
        let src = ppd.alloc_mr(8 * MSGS, Access::empty()).unwrap();
        for k in 0..MSGS {
            let v = (k as u64) << 8 | i as u64;
            src.write(8 * k, &v.to_le_bytes()).unwrap();
        }
        consumers.lock().unwrap().push(Arc::new(Consumer {
            cq: cq.clone(),
            seen: Mutex::new(vec![false; MSGS]),
            polled: AtomicUsize::new(0),
            handled: AtomicU64::new(0),
        }));
        cq.req_notify(false);
        links.push(Link {
            qp,
            pqp,
            pcq,
            bufs,
            src,
        });
    }
    let cons: Vec<Arc<Consumer>> = consumers.lock().unwrap().clone();

    let stop = AtomicBool::new(false);
    let moves = AtomicUsize::new(0);
    let moved_per_target = [0, 1, 2, 3].map(|_| AtomicUsize::new(0));
    /// Stops the consumers and the mover when the test's thread leaves the scope's
    /// body, even by a failed assertion (else the scope would wait for them for ever).
    struct StopOnDrop<'a>(&'a AtomicBool);
    impl Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Release);
        }
    }
    std::thread::scope(|s| {
        let _stop = StopOnDrop(&stop);
        // The channel's consumer.
        s.spawn(|| {
            let mut unacked: Vec<(Cq, u64)> = Vec::new();
            while !stop.load(Ordering::Acquire) {
                let Some(ev) = ch.get_event(Some(Duration::from_millis(5))).unwrap() else {
                    continue;
                };
                find(ev.cq()).on_event();
                match unacked.iter_mut().find(|(c, _)| c.same_as(ev.cq())) {
                    Some((_, n)) => *n += 1,
                    None => unacked.push((ev.cq().clone(), 1)),
                }
                // Acknowledged in batches of 4 per CQ.
                for (c, n) in unacked.iter_mut().filter(|(_, n)| *n == 4) {
                    c.ack_events(*n).unwrap();
                    *n = 0;
                }
            }
            for (c, n) in unacked {
                c.ack_events(n).unwrap();
            }
        });
        // Detached CQs' consumers.
        for c in &cons {
            let stop = &stop;
            s.spawn(move || {
                while !stop.load(Ordering::Acquire) {
                    if c.cq.wait_notify(Duration::from_millis(5)) {
                        c.on_event();
                    }
                }
            });
        }
        // The mover.
        s.spawn(|| {
            let mut rng = seed | 1;
            while !stop.load(Ordering::Acquire) {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let c = &cons[(rng % CQS as u64) as usize];
                let t = ((rng >> 8) % TARGETS.len() as u64) as usize;
                dev.modify_cq(&c.cq, TARGETS[t]).unwrap();
                assert_eq!(c.cq.handler(), TARGETS[t]);
                moved_per_target[t].fetch_add(1, Ordering::Relaxed);
                moves.fetch_add(1, Ordering::Release);
                std::thread::yield_now();
            }
        });
        // The senders: a batch only after a move since the previous one, so moves
        // interleave with the stream.
        for (i, l) in links.iter().enumerate() {
            let moves = &moves;
            s.spawn(move || {
                let mut sent = 0;
                let mut done = 0;
                let mut last_moves = 0;
                while done < MSGS {
                    let m = moves.load(Ordering::Acquire);
                    if sent < MSGS && sent - done < 48 && m > last_moves {
                        last_moves = m;
                        let k = BATCH.min(MSGS - sent);
                        let wrs = (sent..sent + k)
                            .map(|j| SendWr::send((j * CQS + i) as u64, l.src.sge(8 * j, 8)));
                        l.pqp.post_send_batch(wrs).unwrap();
                        sent += k;
                    }
                    while let Some(c) = l.pcq.poll_one() {
                        assert_eq!(c.status, WcStatus::Success);
                        done += 1;
                    }
                    std::thread::yield_now();
                }
            });
        }
        wait_until("every completion polled", || {
            cons.iter()
                .all(|c| c.polled.load(Ordering::Acquire) == MSGS)
        });
        for l in &links {
            let _ = l.qp.state();
        }
        // (The channel's consumer acknowledges its last events when it stops.)
        let state = || {
            let per: Vec<String> = cons
                .iter()
                .map(|c| {
                    format!(
                        "CQ {} on {:?} armed {:?}: handled {}, {:?}",
                        c.cq.id(),
                        c.cq.handler(),
                        c.cq.armed(),
                        c.handled.load(Ordering::Relaxed),
                        c.cq.event_counts()
                    )
                })
                .collect();
            format!("{per:#?}, channel holds {}", ch.pending())
        };
        wait_until_or(
            "every raised event handled",
            || {
                cons.iter()
                    .all(|c| c.handled.load(Ordering::Relaxed) == c.cq.event_counts().raised)
            },
            state,
        );
    });
    // Exact accounting per CQ. The scope joined the channel's consumer, so its
    // acknowledgements are in; a callback's event is acknowledged by its dispatcher
    // just after the callback returns, so wait for the last of those.
    wait_until("every handled event acknowledged", || {
        cons.iter()
            .all(|c| c.cq.event_counts().acked == c.handled.load(Ordering::Relaxed))
    });
    for (i, c) in cons.iter().enumerate() {
        let e = c.cq.event_counts();
        let handled = c.handled.load(Ordering::Relaxed);
        assert_eq!(
            (e.raised, e.delivered, e.acked),
            (handled, handled, handled),
            "CQ {i}"
        );
        assert!(c.seen.lock().unwrap().iter().all(|&x| x));
        let mut v = [0u8; 8];
        for k in 0..MSGS {
            links[i].bufs.read(8 * k, &mut v).unwrap();
            assert_eq!(
                u64::from_le_bytes(v),
                (k as u64) << 8 | i as u64,
                "CQ {i} slot {k}"
            );
        }
    }
    let per: Vec<usize> = moved_per_target
        .iter()
        .map(|m| m.load(Ordering::Relaxed))
        .collect();
    let handled: u64 = cons.iter().map(|c| c.handled.load(Ordering::Relaxed)).sum();
    eprintln!(
        "{progress:?}: {} moves (to 0/1/2/none: {per:?}), {handled} events, {} completions",
        moves.load(Ordering::Relaxed),
        CQS * MSGS
    );
    assert!(
        per.iter().all(|&n| n > 0),
        "every kind of move happened: {per:?}"
    );
}

#[test]
fn moving_cqs_under_load_loses_and_duplicates_no_event() {
    moves_under_load(ProgressMode::Engine, 0x1234_5678);
    moves_under_load(ProgressMode::Hybrid, 0x8765_4321);
}
