//! `softrnic conn-scale`: what a connection costs. For each N of `-n`, one process opens
//! two devices, connects N QP pairs over loopback (several connecting threads at once),
//! and reports the time that took, the process's memory before and after (VmRSS and
//! VmHWM from `/proc/self/status`), and softrnic's heap per QP pair once the pairs are
//! idle; then every pair completes a Write and a Send (64 octets each, client to
//! server), checked octet for octet, and the memory is read again once every QP has
//! given its buffers back.
//!
//! Heap is counted by `softrnic_rnic::heap_count::CountingAlloc`, the `softrnic`
//! binary's global allocator: the net octets allocated between the two readings, so
//! the devices, CQs and memory regions made before the first reading are left out, and
//! what the QPs, their sockets' user-space state, the engines' maps and the buffer
//! pools hold is in. The kernel's socket buffers are not process memory (not in VmRSS
//! either); `/proc/net/sockstat`'s TCP memory is reported beside, for information.
//!
//! Each connection takes a descriptor on each side, so the run raises RLIMIT_NOFILE
//! (soft to hard, and beyond where the process may) and lowers N, saying so, when the
//! limit still does not allow it.

use crate::bench::ProgressArg;
use serde::Serialize;
use softrnic_rnic::{
    Access, AsyncEvent, Completion, Cq, Device, DeviceConfig, Mr, Pd, ProgressMode, Qp, QpId,
    QpInit, RecvWr, SendWr, WcStatus, heap_count, nofile,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Octets each pair moves in each of its two messages.
pub const MSG: usize = 64;

/// Descriptors kept free besides those open when the QPs are created and two per pair
/// (a `/proc` file read meanwhile, ...).
const SPARE_FDS: u64 = 8;

/// `softrnic conn-scale` arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct ConnScaleArgs {
    /// QP pairs to connect, a comma-separated list, one run each.
    #[arg(short = 'n', long = "pairs", value_delimiter = ',', default_values_t = [1usize, 1000, 10000])]
    pub pairs: Vec<usize>,
    /// Threads connecting at once (each runs one MPA exchange at a time).
    #[arg(long, default_value_t = 8)]
    pub connectors: usize,
    /// Progress model of the devices [default: engine: with thousands of QPs on one
    /// CQ, a hybrid-mode poll of an empty CQ drives every one of them].
    #[arg(long, value_enum, default_value_t = ProgressArg::Engine)]
    pub progress_mode: ProgressArg,
    /// Engine threads per device.
    #[arg(long, default_value_t = 1)]
    pub engine_threads: usize,
    /// One JSON object per run.
    #[arg(long)]
    pub json: bool,
}

/// How one run is made (the arguments, resolved).
#[derive(Debug, Clone, Copy)]
pub struct ScaleOpts {
    /// Threads connecting at once.
    pub connectors: usize,
    /// Progress model.
    pub progress: ProgressMode,
    /// Engine threads per device.
    pub engine_threads: usize,
}

/// Memory of the process at one point.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct MemSample {
    /// Resident set, KiB (`VmRSS`).
    pub rss_kib: u64,
    /// Peak resident set so far, KiB (`VmHWM`).
    pub hwm_kib: u64,
    /// Net heap octets since counting started (0 when the heap is not counted).
    pub heap: i64,
    /// The kernel's TCP memory, all sockets of the machine, KiB (`/proc/net/sockstat`).
    pub kernel_tcp_kib: u64,
}

impl MemSample {
    /// Reads it now.
    pub fn now() -> MemSample {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let field = |name: &str| -> u64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
                .unwrap_or(0)
        };
        let sockstat = std::fs::read_to_string("/proc/net/sockstat").unwrap_or_default();
        let pages: u64 = sockstat
            .lines()
            .find(|l| l.starts_with("TCP:"))
            .and_then(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                let i = w.iter().position(|x| *x == "mem")?;
                w.get(i + 1)?.parse().ok()
            })
            .unwrap_or(0);
        MemSample {
            rss_kib: field("VmRSS:"),
            hwm_kib: field("VmHWM:"),
            heap: heap_count::net(),
            kernel_tcp_kib: pages * 4,
        }
    }
}

/// One run's result (one JSON line).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ScaleReport {
    /// Always "conn-scale".
    pub test: &'static str,
    /// Always "result".
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// QP pairs connected.
    pub pairs: usize,
    /// Pairs asked for (more than `pairs` when RLIMIT_NOFILE lowered it).
    pub pairs_asked: usize,
    /// Why `pairs` is below `pairs_asked`.
    pub note: Option<String>,
    /// Threads connecting at once.
    pub connectors: usize,
    /// "engine" or "hybrid".
    pub progress: &'static str,
    /// From the first connect to the last pair established, seconds.
    pub connect_sec: f64,
    /// Pairs established per second.
    pub connects_per_sec: f64,
    /// Before the QPs were created (devices, CQs, regions already there).
    pub before: MemSample,
    /// All pairs connected, before any traffic.
    pub connected: MemSample,
    /// After every pair's Write and Send, every QP idle (no buffer held).
    pub idle: MemSample,
    /// Whether the heap was counted (the `softrnic` binary's allocator).
    pub heap_counted: bool,
    /// softrnic heap per pair, connected, octets.
    pub heap_per_pair_connected: f64,
    /// softrnic heap per pair, idle after traffic, octets.
    pub heap_per_pair_idle: f64,
    /// Half of that: per QP.
    pub heap_per_qp_idle: f64,
    /// Resident set growth per pair, idle after traffic, octets (includes the
    /// allocator's overhead and what it keeps free).
    pub rss_per_pair_idle: f64,
    /// Data-path buffer octets the QPs held when `idle` was read (0 when every QP gave
    /// its buffers back).
    pub buffer_bytes_held: usize,
    /// Pairs whose Write and Send arrived exact.
    pub verified: usize,
}

/// Raises RLIMIT_NOFILE for `pairs` more pairs than the descriptors open now; returns
/// how many pairs fit, and a note if that is fewer.
pub fn fit_pairs(pairs: usize) -> (usize, Option<String>) {
    let open = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count()) as u64;
    let want = open + 2 * pairs as u64 + SPARE_FDS;
    let lim = match nofile::raise(want) {
        Ok(l) => l,
        Err(e) => return (pairs, Some(format!("RLIMIT_NOFILE unreadable: {e}"))),
    };
    if lim.soft >= want {
        return (pairs, None);
    }
    let fit = (lim.soft.saturating_sub(open + SPARE_FDS) / 2) as usize;
    let note = format!(
        "RLIMIT_NOFILE: {pairs} pairs need {want} descriptors ({open} open), the limit is \
         {} (hard {}, which this process may not raise): running {fit} pairs",
        lim.soft, lim.hard
    );
    (fit, Some(note))
}

/// One side: a device, a PD, a CQ for all its QPs, and its QPs.
struct Side {
    dev: Device,
    pd: Pd,
    cq: Cq,
}

impl Side {
    fn open(o: &ScaleOpts, cq_depth: usize) -> Result<Side, String> {
        let dev = Device::open(DeviceConfig {
            progress: o.progress,
            engine_threads: o.engine_threads,
            ..DeviceConfig::default()
        })
        .map_err(|e| format!("device: {e}"))?;
        let pd = dev.alloc_pd();
        let cq = dev.create_cq(cq_depth).map_err(|e| format!("CQ: {e}"))?;
        Ok(Side { dev, pd, cq })
    }

    fn qps(&self, n: usize, sq: usize) -> Result<Vec<Qp>, String> {
        (0..n)
            .map(|_| {
                self.dev
                    .create_qp(&self.pd, QpInit::new(&self.cq, sq, 1))
                    .map_err(|e| format!("create QP: {e}"))
            })
            .collect()
    }

    /// Takes every queued event; returns how many were `Established`.
    fn established(&self) -> usize {
        std::iter::from_fn(|| self.dev.poll_event())
            .filter(|e| matches!(e, AsyncEvent::Established { .. }))
            .count()
    }
}

/// What pair `i` writes (`write == true`) or sends.
fn payload(i: usize, write: bool) -> [u8; MSG] {
    let mut x = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(write) | 1;
    std::array::from_fn(|_| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x as u8
    })
}

/// Connects `pairs_asked` QP pairs, or as many as RLIMIT_NOFILE allows (then `note`
/// says so), and measures (see the module doc).
pub fn run_pairs(pairs_asked: usize, o: &ScaleOpts) -> Result<ScaleReport, String> {
    let heap_counted = heap_count::start();
    let server = Side::open(o, pairs_asked + 16)?;
    let client = Side::open(o, 2 * pairs_asked + 16)?;
    let recv = mr(&server.pd, pairs_asked, Access::LOCAL_WRITE)?;
    let target = mr(
        &server.pd,
        pairs_asked,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE,
    )?;
    let src = mr(&client.pd, 2 * pairs_asked, Access::empty())?;
    for i in 0..pairs_asked {
        src.write(2 * i * MSG, &payload(i, false))
            .and_then(|()| src.write((2 * i + 1) * MSG, &payload(i, true)))
            .map_err(|e| e.to_string())?;
    }
    let listener = server
        .dev
        .listen("127.0.0.1:0")
        .map_err(|e| format!("listen: {e}"))?;
    // Every descriptor the run needs besides the QPs' sockets is open now.
    let (pairs, note) = fit_pairs(pairs_asked);
    if pairs == 0 {
        return Err(note.unwrap_or_else(|| "no pairs".into()));
    }
    let before = MemSample::now();

    let sqps = server.qps(pairs, 1)?;
    let cqps = client.qps(pairs, 2)?;
    for (i, q) in sqps.iter().enumerate() {
        q.post_recv(RecvWr::new(i as u64, recv.sge(i * MSG, MSG)))
            .map_err(|e| format!("post_recv: {e}"))?;
    }
    let start = Instant::now();
    connect_all(&listener, &sqps, &client.dev, &cqps, o.connectors)?;
    let connect = start.elapsed();
    let (se, ce) = (server.established(), client.established());
    if (se, ce) != (pairs, pairs) {
        return Err(format!(
            "{se} server and {ce} client QPs established, of {pairs}"
        ));
    }
    let connected = MemSample::now();

    // Traffic: each pair a Write, then a Send (which arrives after it).
    for (i, q) in cqps.iter().enumerate() {
        let w = SendWr::write(
            2 * i as u64,
            src.sge((2 * i + 1) * MSG, MSG),
            target.addr() + (i * MSG) as u64,
            target.rkey(),
        );
        let s = SendWr::send(2 * i as u64 + 1, src.sge(2 * i * MSG, MSG));
        q.post_send_batch([w, s])
            .map_err(|e| format!("post_send: {e}"))?;
    }
    let wait = Duration::from_secs(30) + Duration::from_millis(pairs as u64);
    let index: HashMap<QpId, usize> = sqps.iter().enumerate().map(|(i, q)| (q.id(), i)).collect();
    let got = collect(&server.cq, pairs, wait)?;
    let mut seen = vec![false; pairs];
    for c in &got {
        let i = *index.get(&c.qp).ok_or("a completion of no server QP")?;
        if seen[i] || c.wr_id != i as u64 || c.byte_len as usize != MSG {
            return Err(format!("unexpected receive completion {c:?}"));
        }
        seen[i] = true;
        let (mut s, mut w) = ([0u8; MSG], [0u8; MSG]);
        recv.read(i * MSG, &mut s).map_err(|e| e.to_string())?;
        target.read(i * MSG, &mut w).map_err(|e| e.to_string())?;
        if s != payload(i, false) || w != payload(i, true) {
            return Err(format!("pair {i}: the Send or the Write arrived wrong"));
        }
    }
    collect(&client.cq, 2 * pairs, wait)?;
    let verified = seen.iter().filter(|&&s| s).count();

    // Idle: the last drives have ended and every QP gave its buffers back.
    let held = |qps: &[Qp]| qps.iter().map(Qp::buffer_bytes).sum::<usize>();
    let deadline = Instant::now() + wait;
    let mut buffer_bytes_held = held(&sqps) + held(&cqps);
    while buffer_bytes_held > 0 && Instant::now() < deadline {
        std::thread::yield_now();
        buffer_bytes_held = held(&sqps) + held(&cqps);
    }
    let idle = MemSample::now();
    drop((sqps, cqps));
    let per = |a: i64, b: i64| (a - b) as f64 / pairs as f64;
    let heap_per_pair_idle = per(idle.heap, before.heap);
    Ok(ScaleReport {
        test: "conn-scale",
        kind: "result",
        pairs,
        pairs_asked,
        note,
        connectors: o.connectors,
        progress: match o.progress {
            ProgressMode::Engine => "engine",
            ProgressMode::Hybrid => "hybrid",
        },
        connect_sec: connect.as_secs_f64(),
        connects_per_sec: pairs as f64 / connect.as_secs_f64().max(1e-9),
        before,
        connected,
        idle,
        heap_counted,
        heap_per_pair_connected: per(connected.heap, before.heap),
        heap_per_pair_idle,
        heap_per_qp_idle: heap_per_pair_idle / 2.0,
        rss_per_pair_idle: per(idle.rss_kib as i64 * 1024, before.rss_kib as i64 * 1024),
        buffer_bytes_held,
        verified,
    })
}

fn mr(pd: &Pd, slots: usize, access: Access) -> Result<Mr, String> {
    pd.alloc_mr(slots * MSG, access)
        .map_err(|e| format!("register: {e}"))
}

/// Connects client QP `i` to server QP `i` for every `i`: `connectors` threads connect,
/// naming `i` in their private data; one thread accepts.
fn connect_all(
    listener: &softrnic_rnic::Listener,
    sqps: &[Qp],
    cdev: &Device,
    cqps: &[Qp],
    connectors: usize,
) -> Result<(), String> {
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        let acceptor = s.spawn(|| -> Result<(), String> {
            let mut taken = vec![false; sqps.len()];
            for _ in 0..sqps.len() {
                let req = listener
                    .accept_timeout(Duration::from_secs(30))
                    .map_err(|e| format!("accept: {e}"))?
                    .ok_or("no connection for 30 s")?;
                let i = <[u8; 4]>::try_from(req.private_data())
                    .map(|b| u32::from_le_bytes(b) as usize)
                    .ok()
                    .filter(|&i| i < sqps.len() && !taken[i])
                    .ok_or("a request naming no free pair")?;
                taken[i] = true;
                req.accept(&sqps[i], b"")
                    .map_err(|e| format!("accept pair {i}: {e}"))?;
            }
            Ok(())
        });
        let workers: Vec<_> = (0..connectors.clamp(1, cqps.len()))
            .map(|_| {
                s.spawn(|| -> Result<(), String> {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(q) = cqps.get(i) else {
                            return Ok(());
                        };
                        cdev.connect(addr, q, &(i as u32).to_le_bytes())
                            .map_err(|e| format!("connect pair {i}: {e}"))?;
                    }
                })
            })
            .collect();
        let mut result = Ok(());
        for w in workers {
            let r = w
                .join()
                .map_err(|_| "a connecting thread panicked".to_string());
            if result.is_ok() {
                result = r.and_then(|r| r);
            }
        }
        // On an error the acceptor waits for connections that will not come, and gives
        // up after its timeout.
        result?;
        acceptor
            .join()
            .map_err(|_| "the accepting thread panicked".to_string())?
    })
}

/// Takes exactly `n` completions, all successful, within `wait`.
fn collect(cq: &Cq, n: usize, wait: Duration) -> Result<Vec<Completion>, String> {
    let got = cq.wait_for(n, wait);
    if got.len() != n {
        return Err(format!("{} of {n} completions within {wait:?}", got.len()));
    }
    if let Some(c) = got.iter().find(|c| c.status != WcStatus::Success) {
        return Err(format!("completion in error: {c:?}"));
    }
    Ok(got)
}

fn kib(octets: f64) -> String {
    format!("{:.2}", octets / 1024.0)
}

/// Runs `softrnic conn-scale`.
pub fn main(a: &ConnScaleArgs) -> Result<(), String> {
    let o = ScaleOpts {
        connectors: a.connectors.max(1),
        progress: match a.progress_mode {
            ProgressArg::Engine => ProgressMode::Engine,
            ProgressArg::Hybrid => ProgressMode::Hybrid,
        },
        engine_threads: a.engine_threads,
    };
    if !a.json {
        println!(
            "conn-scale: N QP pairs over loopback in one process ({} progress, {} engine thread(s) per device, {} connecting threads); each pair then completes a 64-octet Write and Send, verified",
            match o.progress {
                ProgressMode::Engine => "engine",
                ProgressMode::Hybrid => "hybrid",
            },
            o.engine_threads,
            o.connectors
        );
        println!(
            "heap: net octets allocated from before the QPs were created (devices, CQs, regions made already) to the reading; kernel socket memory excluded (sockstat TCP shown apart)"
        );
        println!(
            "{:>7} {:>10} {:>9} {:>11} {:>11} {:>11} {:>9} {:>13} {:>13} {:>11} {:>11} {:>9}",
            "pairs",
            "connect[s]",
            "conn/s",
            "RSS0[MiB]",
            "RSSidle",
            "HWM[MiB]",
            "kTCP[MiB]",
            "heap/pair[KiB]",
            "idle/pair",
            "idle/QP",
            "RSS/pair",
            "verified"
        );
    }
    for &asked in &a.pairs {
        let r = run_pairs(asked, &o)?;
        if let Some(n) = &r.note {
            eprintln!("softrnic conn-scale: {n}");
        }
        if a.json {
            println!("{}", serde_json::to_string(&r).map_err(|e| e.to_string())?);
            continue;
        }
        let mib = |k: u64| format!("{:.1}", k as f64 / 1024.0);
        let heap = |v: f64| if r.heap_counted { kib(v) } else { "-".into() };
        println!(
            "{:>7} {:>10.3} {:>9.0} {:>11} {:>11} {:>11} {:>9} {:>13} {:>13} {:>11} {:>11} {:>9}",
            r.pairs,
            r.connect_sec,
            r.connects_per_sec,
            mib(r.before.rss_kib),
            mib(r.idle.rss_kib),
            mib(r.idle.hwm_kib),
            mib(r
                .idle
                .kernel_tcp_kib
                .saturating_sub(r.before.kernel_tcp_kib)),
            heap(r.heap_per_pair_connected),
            heap(r.heap_per_pair_idle),
            heap(r.heap_per_qp_idle),
            kib(r.rss_per_pair_idle),
            r.verified
        );
        if r.buffer_bytes_held > 0 {
            println!(
                "        ({} buffer octets still held by QPs at the idle reading)",
                r.buffer_bytes_held
            );
        }
    }
    Ok(())
}
