//! `softrnic cq-bench`: completion events per second and wake-up latency with many CQs
//! spread over completion handlers bound to CPUs.
//!
//! One process, two devices. The receiving device has one engine per handler CPU
//! (`engine_cpus`), so a CQ's QP is driven on its handler's CPU: the completion is
//! produced and handled on one processor. `--cqs M` CQs, each with one QP receiving a
//! stream, are bound round-robin to `--handlers N` callback handlers on the CPUs of
//! `--cpus` (default: those the process may use). Each callback runs the verbs loop
//! (drain the CQ, repost the receives, re-arm, drain again). One sender thread per
//! handler keeps `--window W` messages in flight on each CQ of that handler, counted
//! against the receives the callback reposted (both sides are in this process), so with
//! W = 1 every completion is its own event. The senders are pinned to `--sender-cpus`
//! (default: their handler's CPU, so each CPU serves its group of CQs end to end, and
//! one handler leaves the other CPUs idle); the sending device's engines are pinned
//! there too. On a machine with few CPUs, where the senders run decides much of the
//! figure: sending costs about as much CPU per message as receiving. Wake-up latency is the time from the CQE written into the CQ (which raised
//! the event: `CqEvent::raised_at`) to the callback running.
//!
//! `--probe-priority P` adds one more handler on the first handler's CPU, with priority
//! P (the bulk handlers have `--priority`), whose one CQ gets one message every
//! `--probe-interval-us`: its latency, reported apart, shows how a low-latency class
//! fares beside bulk events on the same CPU (`--cqs 0` gives its idle figure).

use serde::Serialize;
use softrnic_rnic::{
    Access, Cq, CqEvent, Device, DeviceConfig, Handler, Mr, ProgressMode, Qp, QpInit, RecvWr,
    SendWr, WcStatus, affinity,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `softrnic cq-bench` arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct CqBenchArgs {
    /// Callback handlers, handler i on CPU i of --cpus (round-robin).
    #[arg(long, default_value_t = 1)]
    pub handlers: usize,
    /// CQs, each with one receiving QP, bound round-robin to the handlers.
    #[arg(long, default_value_t = 16)]
    pub cqs: usize,
    /// The handlers' CPUs [default: the CPUs this process may use].
    #[arg(long, value_delimiter = ',')]
    pub cpus: Vec<usize>,
    /// The CPU of each handler group's sender thread (round-robin) [default: its
    /// handler's CPU, so each CPU serves its CQs end to end].
    #[arg(long, value_delimiter = ',')]
    pub sender_cpus: Vec<usize>,
    /// Messages in flight per CQ (1: every completion raises its own event).
    #[arg(long, default_value_t = 1)]
    pub window: usize,
    /// Seconds the sender runs, per run.
    #[arg(short = 'D', long, default_value_t = 2.0)]
    pub duration: f64,
    /// Priority of the bulk handlers.
    #[arg(long, default_value_t = 0)]
    pub priority: u8,
    /// Add a probe handler with this priority on the first handler's CPU.
    #[arg(long)]
    pub probe_priority: Option<u8>,
    /// Interval between the probe's messages.
    #[arg(long, default_value_t = 500)]
    pub probe_interval_us: u64,
    /// Runs, one result line each.
    #[arg(long, default_value_t = 1)]
    pub runs: usize,
    /// One JSON object per run.
    #[arg(long)]
    pub json: bool,
}

/// Latency figures of a set of events.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Latency {
    /// Events measured.
    pub events: u64,
    /// Median wake-up latency, microseconds.
    pub wakeup_p50_usec: f64,
    /// 99th percentile, microseconds.
    pub wakeup_p99_usec: f64,
}

/// One handler's figures.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct HandlerReport {
    /// Handler id.
    pub id: usize,
    /// Its CPU.
    pub cpu: usize,
    /// Its priority.
    pub priority: u8,
    /// Completions it polled.
    pub completions: u64,
    /// Its events and their latency.
    #[serde(flatten)]
    pub latency: Latency,
}

/// One run's result (one JSON line).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CqBenchReport {
    /// Bulk handlers.
    pub handlers: usize,
    /// Bulk CQs.
    pub cqs: usize,
    /// Messages in flight per CQ.
    pub window: usize,
    /// The CPU of each handler.
    pub cpus: Vec<usize>,
    /// The CPU of each handler group's sender thread.
    pub sender_cpus: Vec<usize>,
    /// From the first send to the last event handled, seconds.
    pub duration_sec: f64,
    /// Events the bulk handlers handled.
    pub events: u64,
    /// Completions they polled.
    pub completions: u64,
    /// Events per second.
    pub events_per_sec: f64,
    /// Median wake-up latency of the bulk events, microseconds.
    pub wakeup_p50_usec: f64,
    /// 99th percentile, microseconds.
    pub wakeup_p99_usec: f64,
    /// Per bulk handler.
    pub per_handler: Vec<HandlerReport>,
    /// The probe, if asked for.
    pub probe: Option<HandlerReport>,
    /// The 1-minute load average when the run ended (the figures are noisy under load).
    pub loadavg_1m: Option<f64>,
}

/// What a handler's callback records.
#[derive(Default)]
struct Stats {
    completions: u64,
    /// Wake-up latencies, nanoseconds.
    lat_ns: Vec<u64>,
}

/// One CQ with its receiving QP and the peer QP that sends to it.
struct Link {
    cq: Cq,
    qp: Arc<Qp>,
    pqp: Qp,
    pcq: Cq,
    src: Mr,
    bufs: Arc<Mr>,
    /// Receives consumed and reposted by the callback.
    consumed: Arc<AtomicU64>,
}

fn percentile(sorted: &[u64], p: usize) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = (sorted.len() * p / 100).min(sorted.len() - 1);
    sorted[i] as f64 / 1000.0
}

fn latency(mut v: Vec<u64>) -> Latency {
    v.sort_unstable();
    Latency {
        events: v.len() as u64,
        wakeup_p50_usec: percentile(&v, 50),
        wakeup_p99_usec: percentile(&v, 99),
    }
}

fn loadavg() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/loadavg").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

fn e2s<E: std::fmt::Display>(what: &'static str) -> impl Fn(E) -> String {
    move |e| format!("{what}: {e}")
}

/// Connects a receiving QP on `dev` (CQ on `vector`) to a sending QP on `peer` (CQ on
/// `pvector`), with `2 * window` receives posted.
fn link(
    dev: &Device,
    peer: &Device,
    (vector, pvector): (usize, usize),
    window: usize,
) -> Result<Link, String> {
    let (pd, ppd) = (dev.alloc_pd(), peer.alloc_pd());
    let recvs = 2 * window;
    let cq = dev
        .create_cq_on(recvs + 4, vector)
        .map_err(e2s("create CQ"))?;
    let pcq = peer
        .create_cq_on(window + 8, pvector)
        .map_err(e2s("create CQ"))?;
    let init = |cq, sq, rq| QpInit {
        send_cq: cq,
        recv_cq: cq,
        sq_depth: sq,
        rq_depth: rq,
    };
    let qp = dev
        .create_qp(&pd, init(&cq, 4, recvs))
        .map_err(e2s("create QP"))?;
    let pqp = peer
        .create_qp(&ppd, init(&pcq, window + 4, 4))
        .map_err(e2s("create QP"))?;
    let listener = dev.listen("127.0.0.1:0").map_err(e2s("listen"))?;
    let addr = listener.local_addr().map_err(e2s("listen"))?;
    std::thread::scope(|s| {
        let h = s.spawn(|| -> Result<(), String> {
            let req = listener.accept().map_err(e2s("accept"))?;
            req.accept(&qp, b"").map(|_| ()).map_err(e2s("accept"))
        });
        let c = peer
            .connect(addr, &pqp, b"")
            .map(|_| ())
            .map_err(e2s("connect"));
        h.join()
            .map_err(|_| "accept thread panicked".to_string())??;
        c
    })?;
    let bufs = pd
        .alloc_mr(8 * recvs, Access::LOCAL_WRITE)
        .map_err(e2s("register"))?;
    for i in 0..recvs {
        qp.post_recv(RecvWr::new(i as u64, bufs.sge(8 * i, 8)))
            .map_err(e2s("post_recv"))?;
    }
    let src = ppd.alloc_mr(8, Access::empty()).map_err(e2s("register"))?;
    cq.req_notify(false);
    Ok(Link {
        cq,
        qp: Arc::new(qp),
        pqp,
        pcq,
        src,
        bufs: Arc::new(bufs),
        consumed: Arc::default(),
    })
}

/// What a callback needs of each CQ, by CQ id: the receiving QP, its consumed-receive
/// count, its receive buffers.
type ByCq = HashMap<u32, (Arc<Qp>, Arc<AtomicU64>, Arc<Mr>)>;

/// The handler callback: the verbs loop, reposting each receive, recording the wake-up
/// latency; the CQ's link is found by CQ id.
fn callback(links: Arc<ByCq>, stats: Arc<Mutex<Stats>>) -> impl FnMut(&CqEvent) + Send + 'static {
    move |ev: &CqEvent| {
        let lat = ev.raised_at().elapsed();
        let cq = ev.cq();
        let Some((qp, consumed, bufs)) = links.get(&cq.id()) else {
            return;
        };
        let mut n = 0u64;
        let drain = |n: &mut u64| {
            while let Some(c) = cq.poll_one() {
                if c.status == WcStatus::Success {
                    let i = c.wr_id as usize;
                    let _ = qp.post_recv(RecvWr::new(c.wr_id, bufs.sge(8 * i, 8)));
                }
                *n += 1;
            }
        };
        drain(&mut n);
        cq.req_notify(false);
        drain(&mut n);
        if let Ok(mut s) = stats.lock() {
            s.completions += n;
            s.lat_ns.push(lat.as_nanos() as u64);
        }
        consumed.fetch_add(n, Ordering::Release);
    }
}

/// One run.
pub fn run_once(a: &CqBenchArgs) -> Result<CqBenchReport, String> {
    if a.handlers == 0 || a.window == 0 {
        return Err("--handlers and --window must be at least 1".into());
    }
    let cpus = if a.cpus.is_empty() {
        affinity::process_cpus()
    } else {
        a.cpus.clone()
    };
    if cpus.is_empty() {
        return Err("no CPU to run the handlers on".into());
    }
    let handler_cpu: Vec<usize> = (0..a.handlers).map(|i| cpus[i % cpus.len()]).collect();
    let sender_cpu: Vec<usize> = if a.sender_cpus.is_empty() {
        handler_cpu.clone()
    } else {
        (0..a.handlers)
            .map(|i| a.sender_cpus[i % a.sender_cpus.len()])
            .collect()
    };
    // One engine per distinct handler CPU (vector v is served by the engine on handler
    // v's CPU); on the sending device one engine per sender, engine v on sender v's CPU
    // serving its vector v.
    let mut engine_cpus: Vec<usize> = Vec::new();
    for &c in &handler_cpu {
        if !engine_cpus.contains(&c) {
            engine_cpus.push(c);
        }
    }
    let probe_id = a.handlers;
    let dev = Device::open(DeviceConfig {
        engine_cpus,
        progress: ProgressMode::Engine,
        comp_vectors: a.handlers + 1,
        ..DeviceConfig::default()
    })
    .map_err(e2s("device"))?;
    let peer = Device::open(DeviceConfig {
        engine_cpus: sender_cpu.clone(),
        ..DeviceConfig::default()
    })
    .map_err(e2s("device"))?;

    let mut links = Vec::with_capacity(a.cqs);
    for j in 0..a.cqs {
        let h = j % a.handlers;
        links.push(link(&dev, &peer, (h, h), a.window)?);
    }
    let probe = match a.probe_priority {
        Some(_) => Some(link(&dev, &peer, (probe_id, 0), 1)?),
        None => None,
    };
    let by_cq: Arc<ByCq> = Arc::new(
        links
            .iter()
            .chain(&probe)
            .map(|l| {
                (
                    l.cq.id(),
                    (l.qp.clone(), l.consumed.clone(), l.bufs.clone()),
                )
            })
            .collect(),
    );
    let stats: Vec<Arc<Mutex<Stats>>> = (0..=a.handlers).map(|_| Arc::default()).collect();
    for (h, &cpu) in handler_cpu.iter().enumerate() {
        let f = callback(by_cq.clone(), stats[h].clone());
        dev.set_handler(
            h,
            Handler::callback(f).on_cpu(cpu).with_priority(a.priority),
        )
        .map_err(e2s("set handler"))?;
    }
    if let Some(p) = a.probe_priority {
        let f = callback(by_cq.clone(), stats[probe_id].clone());
        dev.set_handler(
            probe_id,
            Handler::callback(f).on_cpu(handler_cpu[0]).with_priority(p),
        )
        .map_err(e2s("set handler"))?;
    }

    let stop = AtomicBool::new(false);
    let duration = Duration::from_secs_f64(a.duration.max(0.0));
    let start = Instant::now();
    let sent_total = std::thread::scope(|s| -> Result<u64, String> {
        if let Some(p) = &probe {
            let stop = &stop;
            let every = Duration::from_micros(a.probe_interval_us);
            let cpu = sender_cpu[0];
            s.spawn(move || -> Result<(), String> {
                // The probe's sender sits with the first group's sender (its peer CQ
                // is on that sender's engine).
                affinity::pin_thread(cpu).map_err(e2s("pin the probe"))?;
                let mut sent = 0u64;
                // At least one probe, however late this thread first runs on a busy
                // machine: a probe class with no event would report nothing.
                loop {
                    send(p, 1)?;
                    sent += 1;
                    while p.consumed.load(Ordering::Acquire) < sent {
                        std::hint::spin_loop();
                    }
                    if stop.load(Ordering::Acquire) {
                        break;
                    }
                    // Pacing, not synchronisation: the probe is a low-rate class.
                    std::thread::sleep(every);
                }
                Ok(())
            });
        }
        let senders: Vec<_> = (0..a.handlers)
            .map(|h| {
                let (links, cpu, window) = (&links, sender_cpu[h], a.window as u64);
                s.spawn(move || -> Result<u64, String> {
                    affinity::pin_thread(cpu).map_err(e2s("pin the sender"))?;
                    let mine: Vec<&Link> = links.iter().skip(h).step_by(a.handlers).collect();
                    let mut sent = vec![0u64; mine.len()];
                    // The first round fills every window even when this thread first
                    // runs after the duration is over (a loaded machine): each CQ
                    // then has at least one event to report.
                    loop {
                        let mut idle = true;
                        for (j, l) in mine.iter().enumerate() {
                            let free = window - (sent[j] - l.consumed.load(Ordering::Acquire));
                            if free > 0 {
                                send(l, free as usize)?;
                                sent[j] += free;
                                idle = false;
                            }
                        }
                        if start.elapsed() >= duration {
                            break;
                        }
                        if idle {
                            std::thread::yield_now();
                        }
                    }
                    // Quiesce: every message sent has been handled.
                    let deadline = Instant::now() + Duration::from_secs(10);
                    for (j, l) in mine.iter().enumerate() {
                        while l.consumed.load(Ordering::Acquire) < sent[j] {
                            if Instant::now() > deadline {
                                return Err(format!("handler {h}: events stopped coming"));
                            }
                            std::thread::yield_now();
                        }
                    }
                    Ok(sent.iter().sum())
                })
            })
            .collect();
        let mut total = 0;
        let mut err = None;
        for t in senders {
            match t.join() {
                Ok(Ok(n)) => total += n,
                Ok(Err(e)) => err = Some(e),
                Err(_) => err = Some("a sender thread panicked".into()),
            }
        }
        stop.store(true, Ordering::Release);
        err.map_or(Ok(total), Err)
    })?;
    let elapsed = start.elapsed().as_secs_f64();
    for h in 0..=a.handlers {
        let _ = dev.remove_handler(h);
    }
    let take = |h: usize| -> (u64, Vec<u64>) {
        let mut s = stats[h]
            .lock()
            .map(|mut s| std::mem::take(&mut *s))
            .unwrap_or_default();
        (s.completions, std::mem::take(&mut s.lat_ns))
    };
    let mut all = Vec::new();
    let mut per_handler = Vec::new();
    let mut completions = 0;
    for (h, &cpu) in handler_cpu.iter().enumerate() {
        let (c, lat) = take(h);
        completions += c;
        all.extend_from_slice(&lat);
        per_handler.push(HandlerReport {
            id: h,
            cpu,
            priority: a.priority,
            completions: c,
            latency: latency(lat),
        });
    }
    let probe = a.probe_priority.map(|p| {
        let (c, lat) = take(probe_id);
        HandlerReport {
            id: probe_id,
            cpu: handler_cpu[0],
            priority: p,
            completions: c,
            latency: latency(lat),
        }
    });
    if completions != sent_total {
        return Err(format!(
            "{sent_total} messages sent, {completions} completions handled"
        ));
    }
    let all = latency(all);
    Ok(CqBenchReport {
        handlers: a.handlers,
        cqs: a.cqs,
        window: a.window,
        cpus: handler_cpu,
        sender_cpus: sender_cpu,
        duration_sec: elapsed,
        events: all.events,
        completions,
        events_per_sec: all.events as f64 / elapsed,
        wakeup_p50_usec: all.wakeup_p50_usec,
        wakeup_p99_usec: all.wakeup_p99_usec,
        per_handler,
        probe,
        loadavg_1m: loadavg(),
    })
}

/// Posts `n` Sends on `l`'s peer QP and reaps their send completions.
fn send(l: &Link, n: usize) -> Result<(), String> {
    let wr = |i: usize| SendWr::send(i as u64, l.src.sge(0, 8));
    l.pqp
        .post_send_batch((0..n).map(wr))
        .map_err(e2s("post_send"))?;
    let mut left = n;
    let deadline = Instant::now() + Duration::from_secs(10);
    while left > 0 {
        match l.pcq.poll_one() {
            Some(c) if c.status == WcStatus::Success => left -= 1,
            Some(c) => return Err(format!("send completed with {:?}", c.status)),
            None if Instant::now() > deadline => return Err("sends do not complete".into()),
            None => std::thread::yield_now(),
        }
    }
    Ok(())
}

/// `softrnic cq-bench`: `runs` runs, one line each.
pub fn main(a: &CqBenchArgs) -> Result<(), String> {
    for _ in 0..a.runs.max(1) {
        let r = run_once(a)?;
        if a.json {
            println!("{}", serde_json::to_string(&r).map_err(|e| e.to_string())?);
        } else {
            let probe = r.probe.as_ref().map_or(String::new(), |p| {
                format!(
                    ", probe (priority {}) p50 {:.1} us p99 {:.1} us over {} events",
                    p.priority,
                    p.latency.wakeup_p50_usec,
                    p.latency.wakeup_p99_usec,
                    p.latency.events
                )
            });
            println!(
                "{} handler(s) on CPUs {:?} (senders {:?}), {} CQs, window {}: {} events in {:.2} s = {:.0} events/s, wake-up p50 {:.1} us p99 {:.1} us{probe} (load {:?})",
                r.handlers,
                r.cpus,
                r.sender_cpus,
                r.cqs,
                r.window,
                r.events,
                r.duration_sec,
                r.events_per_sec,
                r.wakeup_p50_usec,
                r.wakeup_p99_usec,
                r.loadavg_1m
            );
        }
    }
    Ok(())
}
