//! Completion handlers bound to CPUs: every event reaches the handler its CQ is bound
//! to, exactly once, and the callback runs on the CPU the handler asked for (checked
//! from inside the callback); the QPs of a handler's CQs are driven by the engine on
//! that CPU; on a shared CPU the higher priority is dispatched first; misuse is an
//! error value.

mod common;

use common::*;
use softrnic_rnic::*;
use std::collections::HashMap;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A receiving device and a peer device that sends to it.
struct Rig {
    dev: Device,
    pd: Pd,
    peer: Device,
    ppd: Pd,
    pcq: Cq,
}

/// A connected QP pair: `qp` on the rig's device receives into `cq`, `pqp` sends.
struct Link {
    cq: Cq,
    qp: Qp,
    pqp: Qp,
    src: Mr,
    _bufs: Mr,
}

fn rig(cfg: DeviceConfig) -> Rig {
    let dev = Device::open(cfg).unwrap();
    let peer = Device::open(DeviceConfig::default()).unwrap();
    let (pd, ppd) = (dev.alloc_pd(), peer.alloc_pd());
    let pcq = peer.create_cq(4096).unwrap();
    Rig {
        dev,
        pd,
        peer,
        ppd,
        pcq,
    }
}

impl Rig {
    /// A QP pair whose receiving CQ is on `vector`, with `recvs` receives posted.
    fn link(&self, vector: usize, recvs: usize) -> Link {
        let cq = self.dev.create_cq_on(recvs + 8, vector).unwrap();
        let qp = self
            .dev
            .create_qp(&self.pd, QpInit::new(&cq, 64, recvs))
            .unwrap();
        let pqp = self
            .peer
            .create_qp(&self.ppd, QpInit::new(&self.pcq, 64, 4))
            .unwrap();
        connect_qps((&self.peer, &pqp), (&self.dev, &qp));
        let bufs = self.pd.alloc_mr(8 * recvs, Access::LOCAL_WRITE).unwrap();
        for i in 0..recvs {
            qp.post_recv(RecvWr::new(i as u64, bufs.sge(8 * i, 8)))
                .unwrap();
        }
        let src = self.ppd.alloc_mr(8, Access::empty()).unwrap();
        Link {
            cq,
            qp,
            pqp,
            src,
            _bufs: bufs,
        }
    }

    /// Sends `n` messages on `l` and reaps their send completions at the peer.
    fn send(&self, l: &Link, n: usize) {
        let wr = |i: usize| SendWr::send(i as u64, l.src.sge(0, 8));
        let mut sent = 0;
        while sent < n {
            let k = (n - sent).min(32);
            l.pqp.post_send_batch((sent..sent + k).map(wr)).unwrap();
            sent += k;
            let got = self.pcq.wait_for(k, WAIT);
            assert_eq!(got.len(), k);
            assert!(got.iter().all(|c| c.status == WcStatus::Success), "{got:?}");
        }
    }
}

/// Waits until `cond` holds (checked after each wake-up of this thread), or fails.
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::yield_now();
    }
}

/// What a callback saw of one event.
#[derive(Debug, Clone)]
struct Seen {
    handler: usize,
    cq: u32,
    cpu: Option<usize>,
    allowed: Vec<usize>,
    completions: usize,
}

/// A callback for handler `id`: records where it runs, drains the CQ, re-arms it and
/// drains it again (the verbs consumer loop), and counts completions per CQ.
fn recorder(
    id: usize,
    seen: Arc<Mutex<Vec<Seen>>>,
    total: Arc<Mutex<HashMap<u32, usize>>>,
) -> impl FnMut(&CqEvent) + Send + 'static {
    move |ev: &CqEvent| {
        let cq = ev.cq();
        let mut n = 0;
        let drain = || {
            let mut k = 0;
            while let Some(c) = cq.poll_one() {
                assert_eq!(c.status, WcStatus::Success);
                k += 1;
            }
            k
        };
        n += drain();
        cq.req_notify(false);
        n += drain();
        *total.lock().unwrap().entry(cq.id()).or_default() += n;
        seen.lock().unwrap().push(Seen {
            handler: id,
            cq: cq.id(),
            cpu: affinity::current_cpu(),
            allowed: affinity::allowed_cpus(),
            completions: n,
        });
    }
}

#[test]
fn every_event_reaches_its_handler_once_on_the_handlers_cpu() {
    const CQS: usize = 6;
    const MSGS: usize = 200;
    let cpus = affinity::process_cpus();
    let (c0, c1) = (cpus[0], *cpus.last().unwrap());
    let r = rig(DeviceConfig {
        engine_cpus: vec![c0, c1],
        progress: ProgressMode::Engine,
        ..DeviceConfig::default()
    });
    let seen = Arc::new(Mutex::new(Vec::new()));
    let total = Arc::new(Mutex::new(HashMap::new()));
    // Swapped on purpose: handler 0 on the second CPU, handler 1 on the first, so the
    // engine that drives a CQ's QPs is chosen by the handler's CPU, not by its id.
    let want_cpu = [c1, c0];
    for (id, &cpu) in want_cpu.iter().enumerate() {
        let f = recorder(id, seen.clone(), total.clone());
        r.dev
            .set_handler(id, Handler::callback(f).on_cpu(cpu).with_priority(3))
            .unwrap();
    }
    // Four CQs on handler 0, two on handler 1.
    let on_handler = |i: usize| usize::from(i >= 4);
    let links: Vec<Link> = (0..CQS).map(|i| r.link(on_handler(i), MSGS)).collect();
    let cqs_of = |h: usize| (0..CQS).filter(|&i| on_handler(i) == h).count();
    for l in &links {
        assert_eq!(l.cq.handler(), Some(l.cq.vector()));
        l.cq.req_notify(false);
    }
    let info = r.dev.handlers();
    assert_eq!(info.len(), 2);
    for h in &info {
        assert_eq!(
            (h.cpu, h.priority, h.channel, h.cqs),
            (Some(want_cpu[h.id]), 3, false, cqs_of(h.id))
        );
    }
    // The engine pinned to a handler's CPU serves the QPs of its CQs: engine 1 (on
    // the second CPU) those of handler 0. (On a one-CPU machine both engines are on
    // it, and the vectors spread over them in order.)
    let engines = r.dev.engines();
    let want = if c0 == c1 {
        [cqs_of(0), cqs_of(1)]
    } else {
        [cqs_of(1), cqs_of(0)]
    };
    assert_eq!([engines[0].qps, engines[1].qps], want, "{engines:?}");

    std::thread::scope(|s| {
        for l in &links {
            let r = &r;
            s.spawn(move || r.send(l, MSGS));
        }
    });
    wait_until("every completion handled", || {
        total.lock().unwrap().values().sum::<usize>() == CQS * MSGS
    });
    // Whatever the last arms raised is raised once the QP locks are free, and handled
    // once its callback returned (acknowledged then).
    for l in &links {
        let _ = l.qp.state();
    }
    wait_until("every raised event handled", || {
        links.iter().all(|l| {
            let c = l.cq.event_counts();
            c.acked == c.raised
        })
    });

    let seen = seen.lock().unwrap().clone();
    let total = total.lock().unwrap().clone();
    let mut per_cq: HashMap<u32, u64> = HashMap::new();
    for s in &seen {
        let cq = links.iter().find(|l| l.cq.id() == s.cq).unwrap();
        assert_eq!(
            s.handler,
            cq.cq.handler().unwrap(),
            "event of CQ {} at the wrong handler",
            s.cq
        );
        assert_eq!(s.cpu, Some(want_cpu[s.handler]), "{s:?}");
        assert_eq!(s.allowed, vec![want_cpu[s.handler]], "pinned: {s:?}");
        *per_cq.entry(s.cq).or_default() += 1;
    }
    for l in &links {
        let c = l.cq.event_counts();
        let n = per_cq.get(&l.cq.id()).copied().unwrap_or(0);
        assert!(n >= 1, "CQ {} had no event", l.cq.id());
        assert_eq!(
            (c.raised, c.delivered, c.acked),
            (n, n, n),
            "CQ {}",
            l.cq.id()
        );
        assert_eq!(total[&l.cq.id()], MSGS);
    }
    assert_eq!(
        seen.iter().map(|s| s.completions).sum::<usize>(),
        CQS * MSGS
    );
    let events: u64 = r.dev.handlers().iter().map(|h| h.events).sum();
    assert_eq!(events, seen.len() as u64);
    eprintln!("{} events for {} completions", seen.len(), CQS * MSGS);
}

#[test]
fn on_a_shared_cpu_the_higher_priority_is_dispatched_first() {
    let cpu = affinity::process_cpus()[0];
    let r = rig(DeviceConfig {
        engine_cpus: vec![cpu],
        progress: ProgressMode::Engine,
        comp_vectors: 3,
        ..DeviceConfig::default()
    });
    let order: Arc<Mutex<Vec<(usize, u32)>>> = Arc::default();
    // Handler 0 (the gate) blocks its dispatcher until released, so the others' events
    // queue up behind it.
    let (started_tx, started) = mpsc::channel();
    let (release, release_rx) = mpsc::channel::<()>();
    let release_rx = Mutex::new(release_rx);
    r.dev
        .set_handler(
            0,
            Handler::callback(move |_| {
                started_tx.send(()).unwrap();
                release_rx.lock().unwrap().recv().unwrap();
            })
            .on_cpu(cpu)
            .with_priority(200),
        )
        .unwrap();
    for (id, prio) in [(1, 1), (2, 9)] {
        let order = order.clone();
        let f = move |ev: &CqEvent| order.lock().unwrap().push((id, ev.cq().id()));
        r.dev
            .set_handler(id, Handler::callback(f).on_cpu(cpu).with_priority(prio))
            .unwrap();
    }
    let gate = r.link(0, 4);
    // Three bulk CQs (priority 1), then two low-latency ones (priority 9).
    let bulk: Vec<Link> = (0..3).map(|_| r.link(1, 4)).collect();
    let fast: Vec<Link> = (0..2).map(|_| r.link(2, 4)).collect();
    gate.cq.req_notify(false);
    r.send(&gate, 1);
    started.recv_timeout(WAIT).unwrap();
    for l in bulk.iter().chain(&fast) {
        l.cq.req_notify(false);
        r.send(l, 1);
        wait_until("the event raised", || l.cq.event_counts().raised == 1);
        // Raised under the QP lock: once it is free, the event is queued.
        let _ = l.qp.state();
    }
    release.send(()).unwrap();
    wait_until("all five dispatched", || order.lock().unwrap().len() == 5);
    let ids = |ls: &[Link]| ls.iter().map(|l| l.cq.id()).collect::<Vec<_>>();
    let got = order.lock().unwrap().clone();
    let want: Vec<(usize, u32)> = ids(&fast)
        .into_iter()
        .map(|c| (2, c))
        .chain(ids(&bulk).into_iter().map(|c| (1, c)))
        .collect();
    assert_eq!(
        got, want,
        "priority 9 first, then 1; arrival order within each"
    );
    assert_eq!(r.dev.query().max_handler_priority, u8::MAX);
}

#[test]
fn a_panicking_callback_is_counted_and_its_dispatcher_goes_on() {
    let r = rig(DeviceConfig::default());
    let (tx, rx) = mpsc::channel();
    let mut first = true;
    r.dev
        .set_handler(
            0,
            Handler::callback(move |ev: &CqEvent| {
                if std::mem::take(&mut first) {
                    panic!("the program's bug");
                }
                tx.send(ev.cq().id()).unwrap();
            }),
        )
        .unwrap();
    let l = r.link(0, 4);
    l.cq.req_notify(false);
    r.send(&l, 1);
    wait_until("the first callback", || r.dev.handlers()[0].panics == 1);
    l.cq.req_notify(false);
    r.send(&l, 1);
    assert_eq!(rx.recv_timeout(WAIT).unwrap(), l.cq.id());
    // Counted once the callback has returned.
    wait_until("the second callback's return", || {
        r.dev.handlers()[0].events == 2
    });
    let h = &r.dev.handlers()[0];
    assert_eq!((h.events, h.panics), (2, 1));
    assert_eq!(l.cq.event_counts().acked, 2);
}

#[test]
fn handler_misuse_is_an_error_value() {
    let dev = Device::open(DeviceConfig {
        comp_vectors: 2,
        ..DeviceConfig::default()
    })
    .unwrap();
    assert_eq!(dev.query().num_comp_vectors, 2);
    let ch = CompChannel::new().unwrap();
    let e = dev.set_handler(2, Handler::channel(&ch)).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    let absent = (0..1024)
        .rev()
        .find(|c| !affinity::process_cpus().contains(c))
        .unwrap();
    for h in [
        Handler::channel(&ch).on_cpu(absent),
        Handler::callback(|_| {}).on_cpu(absent),
        Handler::callback(|_| {}).on_cpu(1 << 20),
    ] {
        let e = dev.set_handler(0, h).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    }
    assert!(
        dev.handlers().is_empty(),
        "nothing registered by a failed call"
    );
    assert!(matches!(
        dev.create_cq_on(8, 2),
        Err(Error::InvalidArgument(_))
    ));
    let cq = dev.create_cq_on(8, 1).unwrap();
    assert!(matches!(
        dev.modify_cq(&cq, Some(2)),
        Err(Error::InvalidArgument(_))
    ));
    let other = Device::open(DeviceConfig::default()).unwrap();
    let foreign = other.create_cq(8).unwrap();
    assert!(matches!(
        dev.modify_cq(&foreign, None),
        Err(Error::InvalidArgument(_))
    ));
    dev.remove_handler(1).unwrap(); // none there: nothing happens
    assert!(dev.remove_handler(2).is_err());
}

#[test]
fn a_removed_handlers_cqs_wake_wait_notify_queued_events_included() {
    let r = rig(DeviceConfig::default());
    let ch = CompChannel::new().unwrap();
    r.dev.set_handler(0, Handler::channel(&ch)).unwrap();
    let l = r.link(0, 8);
    // Receives one message and waits until what its push raised is raised (that
    // happens under the QP lock).
    let received = || {
        let mut c = None;
        wait_until("the receive", || {
            c = l.cq.poll_one();
            c.is_some()
        });
        let _ = l.qp.state();
    };
    l.cq.req_notify(false);
    r.send(&l, 1);
    received();
    assert_eq!(ch.pending(), 1);
    r.dev.remove_handler(0).unwrap();
    assert_eq!(ch.pending(), 0, "the queued event left with the handler");
    assert!(l.cq.wait_notify(Duration::ZERO), "and is the CQ's own now");
    assert_eq!(l.cq.handler(), Some(0), "the CQ stays bound to the id");
    // Registered again: events go there, and one left waiting goes along.
    l.cq.req_notify(false);
    r.send(&l, 1);
    received();
    r.dev.set_handler(0, Handler::channel(&ch)).unwrap();
    assert!(!l.cq.wait_notify(Duration::ZERO));
    assert!(ch.try_get_event().unwrap().is_some());
    let c = l.cq.event_counts();
    assert_eq!((c.raised, c.delivered), (2, 2));
}
