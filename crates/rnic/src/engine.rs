//! Engine threads: each waits on an epoll set (mio) holding its QPs' sockets and drives
//! a QP when its socket becomes readable or writable. After activity it spins (polling
//! with a zero timeout) for a configurable time before blocking, so a steady stream
//! costs no wake-up per message, while an idle device costs no CPU. While it spins, a
//! QP streaming large FPDUs is driven again directly, without asking epoll first, as a
//! polling consumer drives its claimed QP ([`HOT_DRIVES`]).
//!
//! Engine `i` serves completion vector `i`: a QP is registered with the engine of its
//! receive CQ's vector. An engine given a CPU pins itself to it before serving anything;
//! one given none follows the threads that connect its QPs (`placement.rs`).
//!
//! An engine also keeps its QPs' timers (the close timer, and the lease of a socket a
//! polling consumer has claimed, see [`crate::handoff`]): it wakes for the earliest and
//! drives the QP, which sees the time and acts. The socket of a claimed QP is out of
//! the epoll set ([`Engine::pause`]) until it is handed back ([`Engine::resume`]).
//!
//! Each engine has its own token -> QP map, filled when a QP's socket is registered and
//! emptied when it is deregistered; the event loop looks a batch of events up under one
//! lock of that map, which only registrations on the same engine ever contend for, and
//! takes no device-wide lock.

use crate::cpu_share::{IdleYield, Spinner};
use crate::device::Shared;
use crate::error::{Error, Result};
use crate::placement::{EnginePlacement, Follow};
use crate::qp::QpShared;
use crate::sys::affinity;
use mio::{Events, Interest, Poll, Token, Waker};
use softrnic_proto::QpId;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const WAKER: Token = Token(usize::MAX);

/// While an engine spins, the QP whose last drive moved something in a stream of large
/// FPDUs (`Staging::streams_large`) is driven again directly, this many times between
/// two polls of the epoll set, for as long as it moves something within the spin time.
/// Its own events are then skipped (the drives take what they announced) unless they
/// carry the stream's end or an error; other QPs' events wait at most this many
/// drives. (A stream of small messages is read ahead, many to a read, and its passes do
/// not end once an FPDU: there the engine reads each arrival once,
/// `engine_short_read.rs`.)
///
/// Why: an engine that went back to epoll after every pass (a pass ends at a short
/// read, so about once an FPDU in a stream of large ones) moved 1 MiB Writes to its
/// passive side about 5% slower than a polling server (22 alternated near rounds,
/// slower in 17). Driving the active QP again, 32 times between polls and skipping its
/// own events, was faster than that engine in 15 of 16 rounds (median ratio 1.059; the
/// polling server 1.069); 16 drives without the skip gained 1.4-1.8%, 256 gained
/// 2.7-4.9% (docs/ARCHITECTURE.md, "Session 33").
const HOT_DRIVES: u32 = 32;

/// The QPs an engine serves, by the token their socket is registered with (the QP id).
/// Weak: a QP dropped without deregistering is never kept alive, only skipped.
type QpMap = Mutex<HashMap<Token, Weak<QpShared>>>;

/// Deadlines at which to drive a QP, earliest first, and the earliest as an atomic, so
/// the event loop (which spins) reads one word per turn and locks only when one is due.
#[derive(Default)]
struct Timers {
    heap: Mutex<BinaryHeap<Reverse<(Duration, QpId)>>>,
    /// Nanoseconds on the [`now`] clock; `u64::MAX` when there is none.
    earliest: AtomicU64,
}

impl Timers {
    /// Adds a deadline; true if it is the earliest now.
    fn arm(&self, at: Duration, qp: QpId) -> bool {
        let Ok(mut t) = self.heap.lock() else {
            return false;
        };
        let first = t.peek().is_none_or(|Reverse((f, _))| at < *f);
        t.push(Reverse((at, qp)));
        self.publish(&t);
        first
    }

    fn publish(&self, t: &BinaryHeap<Reverse<(Duration, QpId)>>) {
        let ns = t.peek().map_or(u64::MAX, |Reverse((at, _))| {
            u64::try_from(at.as_nanos()).unwrap_or(u64::MAX - 1)
        });
        self.earliest.store(ns, Ordering::Release);
    }

    fn next(&self) -> Option<Duration> {
        match self.earliest.load(Ordering::Acquire) {
            u64::MAX => None,
            ns => Some(Duration::from_nanos(ns)),
        }
    }

    /// Moves the QPs whose deadline has come into `due`.
    fn take_due(&self, due: &mut Vec<QpId>) {
        // No clock read while no timer runs (the spin loop calls this every turn).
        let Some(at) = self.next() else {
            return;
        };
        let now = now();
        if at > now {
            return;
        }
        let Ok(mut t) = self.heap.lock() else {
            return;
        };
        while let Some(Reverse((at, qp))) = t.peek().copied() {
            if at > now {
                break;
            }
            t.pop();
            due.push(qp);
        }
        self.publish(&t);
    }
}

thread_local! {
    /// Set on engine threads, so counters can tell an engine's sends from a program's.
    static ON_ENGINE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the calling thread is an engine's.
pub(crate) fn on_engine_thread() -> bool {
    ON_ENGINE.with(std::cell::Cell::get)
}

/// The time QPs see: the time since the first call in the process. Their timers are
/// durations on this clock.
pub(crate) fn now() -> Duration {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed()
}

/// What an engine thread looks like from outside (`Device::engines`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineInfo {
    /// Its index, which is the completion vector it serves.
    pub vector: usize,
    /// The CPU it is pinned to, if any.
    pub cpu: Option<usize>,
    /// The CPUs its thread may run on now, ascending: its pinned CPU, or those of the
    /// threads that connected its QPs ([`crate::EnginePlacement::FollowConsumers`]), or
    /// the device opener's.
    pub cpus: Vec<usize>,
    /// The kernel's thread id (`/proc/self/task/<tid>`).
    pub tid: i32,
    /// Socket readiness events on which it drove a QP. (An event fetched for a socket
    /// that a polling consumer claimed, or that moved to another engine, before the
    /// engine took the QP's lock is skipped, and not counted.)
    pub events: u64,
    /// QP timers it has run (lease checks, which hand a polled socket back to the
    /// engine and serve what waits on it; close timers), for QPs it still serves.
    pub timer_drives: u64,
    /// QPs whose sockets it serves now.
    pub qps: usize,
    /// Times it gave its CPU up while spinning idle, because a program polled a CQ on
    /// that CPU (`cpu_share.rs`).
    pub idle_yields: u64,
}

pub(crate) struct Engine {
    registry: mio::Registry,
    waker: Arc<Waker>,
    stop: Arc<AtomicBool>,
    dev: Arc<OnceLock<Weak<Shared>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    qps: Arc<QpMap>,
    timers: Arc<Timers>,
    cpu: Option<usize>,
    tid: i32,
    served: Arc<Served>,
    /// The CPUs of its consumers, when it follows them (no `cpu`, and
    /// [`EnginePlacement::FollowConsumers`]).
    follow: Option<Mutex<Follow>>,
}

/// What an engine has done, counted for [`EngineInfo`].
#[derive(Default)]
struct Served {
    events: AtomicU64,
    timer_drives: AtomicU64,
    idle_yields: AtomicU64,
}

impl Engine {
    /// Starts engine `index`; with a `cpu`, the thread pins itself there first, and a
    /// CPU it cannot have fails the start. Without one it runs where the opener may, and
    /// with `FollowConsumers` moves to its consumers' CPUs as they connect QPs.
    pub(crate) fn start(
        index: usize,
        spin: Duration,
        cpu: Option<usize>,
        placement: EnginePlacement,
    ) -> Result<Engine> {
        let poll = Poll::new()?;
        let registry = poll.registry().try_clone()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let stop = Arc::new(AtomicBool::new(false));
        let dev: Arc<OnceLock<Weak<Shared>>> = Arc::new(OnceLock::new());
        let served = Arc::new(Served::default());
        let qps: Arc<QpMap> = Arc::default();
        let timers: Arc<Timers> = Arc::default();
        let (s, d, n, q) = (stop.clone(), dev.clone(), served.clone(), qps.clone());
        let t = timers.clone();
        let (started_tx, started) = std::sync::mpsc::sync_channel(1);
        let thread = std::thread::Builder::new()
            .name(format!("softrnic-engine-{index}"))
            .spawn(move || {
                let pinned = cpu.map_or(Ok(()), affinity::pin_thread);
                let ok = pinned.is_ok();
                let _ = started_tx
                    .send(pinned.map(|()| (affinity::thread_id(), affinity::allowed_cpus())));
                if ok {
                    // This thread's buffer pool is the engine's: it keeps more.
                    crate::buf_pool::serve_as_engine();
                    ON_ENGINE.with(|e| e.set(true));
                    run(index, poll, s, d, q, t, n, spin);
                }
            })?;
        let (tid, allowed) = match started.recv() {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => {
                let _ = thread.join();
                return Err(match e.kind() {
                    std::io::ErrorKind::InvalidInput => {
                        Error::InvalidArgument("engine CPU does not exist or is not allowed")
                    }
                    _ => Error::Io(e),
                });
            }
            Err(_) => return Err(Error::Internal("engine thread ended before it started")),
        };
        Ok(Engine {
            registry,
            waker,
            stop,
            dev,
            thread: Mutex::new(Some(thread)),
            qps,
            timers,
            cpu,
            tid,
            served,
            follow: (cpu.is_none() && placement == EnginePlacement::FollowConsumers)
                .then(|| Mutex::new(Follow::new(allowed))),
        })
    }

    pub(crate) fn attach(&self, dev: Weak<Shared>) {
        let _ = self.dev.set(dev);
    }

    /// The CPU it is pinned to.
    pub(crate) fn cpu(&self) -> Option<usize> {
        self.cpu
    }

    pub(crate) fn info(&self, vector: usize) -> EngineInfo {
        EngineInfo {
            vector,
            cpu: self.cpu,
            cpus: affinity::thread_cpus(self.tid),
            tid: self.tid,
            events: self.served.events.load(Ordering::Relaxed),
            timer_drives: self.served.timer_drives.load(Ordering::Relaxed),
            qps: self.qps.lock().map_or(0, |m| m.len()),
            idle_yields: self.served.idle_yields.load(Ordering::Relaxed),
        }
    }

    /// Serves `qp` from now on: its socket joins this engine's epoll set. The calling
    /// thread (which connects, accepts, or moves the QP's CQ) is a consumer of the
    /// engine, which follows it if it follows its consumers.
    pub(crate) fn register(
        &self,
        sock: &mut (impl mio::event::Source + ?Sized),
        qp: &Arc<QpShared>,
    ) -> Result<()> {
        self.follow_caller();
        self.add_socket(sock, qp)
    }

    /// Moves the engine to the CPUs of its consumers, the calling thread now among
    /// them: one system call to learn the caller's affinity, and one more only when
    /// the engine's set changes (the first QP of a pinned consumer).
    fn follow_caller(&self) {
        let Some(follow) = &self.follow else {
            return;
        };
        if follow.lock().map_or(true, |f| f.is_free()) {
            // Freed for good: no system call per connection.
            return;
        }
        let here = affinity::allowed_cpus();
        let Ok(mut f) = follow.lock() else {
            return;
        };
        if let Some(cpus) = f.consumer(&here) {
            // A set the kernel refuses (the CPUs went away) leaves the engine where it
            // was: placement is a matter of speed, never of correctness.
            let _ = affinity::set_thread_cpus(self.tid, &cpus);
        }
    }

    /// A consumer of the engine sleeps on completion events: an engine that follows
    /// its consumers is left to the scheduler from now on (`placement.rs`).
    pub(crate) fn consumer_sleeps(&self) {
        let Some(follow) = &self.follow else {
            return;
        };
        let Ok(mut f) = follow.lock() else {
            return;
        };
        if let Some(cpus) = f.sleeper() {
            let _ = affinity::set_thread_cpus(self.tid, &cpus);
        }
    }

    fn add_socket(
        &self,
        sock: &mut (impl mio::event::Source + ?Sized),
        qp: &Arc<QpShared>,
    ) -> Result<()> {
        let token = token_of(qp.id);
        // In the map before the socket can report anything.
        self.qps.lock()?.insert(token, Arc::downgrade(qp));
        if let Err(e) = self
            .registry
            .register(sock, token, Interest::READABLE | Interest::WRITABLE)
        {
            self.forget(token);
            return Err(e.into());
        }
        Ok(())
    }

    /// Learns `qp` without its socket (a polling consumer holds that), so its timers
    /// find it.
    pub(crate) fn adopt(&self, qp: &Arc<QpShared>) {
        if let Ok(mut m) = self.qps.lock() {
            m.insert(token_of(qp.id), Arc::downgrade(qp));
        }
    }

    /// Stops serving `qp`'s socket. Events fetched later find no entry and are dropped;
    /// a batch already looked up finds, under the QP's lock, that the QP is not this
    /// engine's any more, and skips it.
    pub(crate) fn deregister(&self, sock: &mut (impl mio::event::Source + ?Sized), qp: QpId) {
        let _ = self.registry.deregister(sock);
        self.forget(token_of(qp));
    }

    /// Takes `qp`'s socket out of the epoll set, keeping the QP (and its timers): a
    /// polling consumer drives it now ([`crate::handoff`]).
    pub(crate) fn pause(&self, sock: &mut (impl mio::event::Source + ?Sized)) -> Result<()> {
        self.registry.deregister(sock)?;
        Ok(())
    }

    /// Puts a paused socket back into the epoll set; epoll reports it at once if it is
    /// ready, so nothing that arrived while it was out waits for a later event. (Not a
    /// new consumer: whoever hands the socket back, the engine stays where it is.)
    pub(crate) fn resume(
        &self,
        sock: &mut (impl mio::event::Source + ?Sized),
        qp: &Arc<QpShared>,
    ) -> Result<()> {
        self.add_socket(sock, qp)
    }

    /// Drives `qp` once time reaches `at` (on the [`now`] clock). A QP gone by then is
    /// skipped; a QP driven early finds nothing due and asks again.
    pub(crate) fn arm_timer(&self, at: Duration, qp: QpId) {
        if self.timers.arm(at, qp) {
            // The engine may be asleep with no deadline, or a later one.
            let _ = self.waker.wake();
        }
    }

    fn forget(&self, token: Token) {
        if let Ok(mut m) = self.qps.lock() {
            m.remove(&token);
        }
    }

    fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        let _ = self.waker.wake();
        if let Ok(mut t) = self.thread.lock()
            && let Some(h) = t.take()
            && h.thread().id() != std::thread::current().id()
        {
            let _ = h.join();
        }
    }
}

impl Drop for Engine {
    /// Stops the thread (and waits for it, unless this is the thread itself), so an
    /// engine never outlives its device, nor a device whose opening failed half-way.
    fn drop(&mut self) {
        self.stop();
    }
}

fn token_of(qp: QpId) -> Token {
    Token(qp.0 as usize)
}

#[allow(clippy::too_many_arguments)]
fn run(
    index: usize,
    mut poll: Poll,
    stop: Arc<AtomicBool>,
    dev: Arc<OnceLock<Weak<Shared>>>,
    qps: Arc<QpMap>,
    timers: Arc<Timers>,
    served: Arc<Served>,
    spin: Duration,
) {
    let mut events = Events::with_capacity(256);
    // Each with whether its event carried an end of stream or an error (see
    // `PolledTransport::event_ends` and `pass_drained`).
    let mut ready: Vec<(Arc<QpShared>, bool)> = Vec::with_capacity(256);
    let mut timed: Vec<Arc<QpShared>> = Vec::new();
    let mut due: Vec<QpId> = Vec::new();
    let mut last_busy = Instant::now();
    let mut idle = IdleYield::to(Spinner::Consumer);
    // The QP driven again without an event (see `HOT_DRIVES`), when it last moved
    // something, and its drives since the last poll of the epoll set.
    let mut hot: Option<(Weak<QpShared>, Instant)> = None;
    let mut hot_drives = 0;
    loop {
        // One clock read a turn: a hot drive (below) takes its times from it too.
        let turn = Instant::now();
        let spinning = (turn.duration_since(last_busy) < spin).then_some(Duration::ZERO);
        if spinning.is_none() {
            hot = None;
        }
        if hot_drives < HOT_DRIVES
            && let Some((qp, moved_at)) = hot.as_mut()
        {
            hot_drives += 1;
            if stop.load(Ordering::Acquire) {
                break;
            }
            crate::cpu_share::mark(Spinner::Engine);
            let drive = match (dev.get().and_then(Weak::upgrade), qp.upgrade()) {
                (Some(d), Some(qp)) => Some(qp.on_ready(&d, index, false, || {})),
                _ => None,
            };
            match drive {
                Some(true) => {
                    *moved_at = turn;
                    last_busy = turn;
                }
                Some(false) if turn.duration_since(*moved_at) < spin => {
                    if idle.other_waits() {
                        // As when spinning on epoll finds nothing (below).
                        served.idle_yields.fetch_add(1, Ordering::Relaxed);
                        std::thread::yield_now();
                    }
                }
                // Quiet for the spin time, or gone (its device or the QP dropped).
                _ => hot = None,
            }
            continue;
        }
        hot_drives = 0;
        let timeout = match timers.next() {
            Some(at) => Some(
                at.saturating_sub(now())
                    .min(spinning.unwrap_or(Duration::MAX)),
            ),
            None => spinning,
        };
        if let Err(e) = poll.poll(&mut events, timeout)
            && e.kind() != std::io::ErrorKind::Interrupted
        {
            break;
        }
        crate::chaos::point();
        if stop.load(Ordering::Acquire) {
            break;
        }
        // A consumer spinning on this CPU lets this engine run when it sees the mark.
        crate::cpu_share::mark(Spinner::Engine);
        timers.take_due(&mut due);
        if events.is_empty() && due.is_empty() {
            if spinning.is_some() && idle.other_waits() {
                // Spinning found nothing, and a program polls a CQ on this CPU: let it
                // run now instead of at the end of a scheduler time slice. Nobody
                // else's work gets a yield (see `cpu_share`).
                served.idle_yields.fetch_add(1, Ordering::Relaxed);
                std::thread::yield_now();
            }
            continue;
        }
        // Hold the device only while working, so dropping it is never blocked by an
        // engine thread sleeping in epoll.
        let Some(d) = dev.get().and_then(Weak::upgrade) else {
            due.clear();
            continue;
        };
        // One look-up of this engine's map for the whole batch (epoll reports a socket
        // at most once per batch).
        if let Ok(m) = qps.lock() {
            ready.extend(
                events
                    .iter()
                    .filter(|e| e.token() != WAKER)
                    .filter_map(|e| {
                        let ends = e.is_read_closed() || e.is_error();
                        Some((m.get(&e.token())?.upgrade()?, ends))
                    }),
            );
            // A QP whose timer is due and whose socket also reported is driven twice;
            // the second drive finds nothing to do.
            timed.extend(
                due.drain(..)
                    .filter_map(|qp| m.get(&token_of(qp))?.upgrade()),
            );
        }
        due.clear();
        if ready.is_empty() && timed.is_empty() {
            continue;
        }
        // Spin after socket work only: a timer (a lease check) is no sign of traffic.
        let busy = !ready.is_empty();
        // Counted under the QP's lock before the work, so whoever sees its results
        // sees the count too; an event or timer for a socket this engine no longer
        // serves (claimed, or moved to another engine, since it was fetched) is
        // skipped and not counted.
        let count = |n: &AtomicU64| n.fetch_add(1, Ordering::Relaxed);
        let mut moved = None;
        for (qp, ends) in ready.drain(..) {
            // The QP driven again is driven next anyway: its event (the octets that
            // came during those drives) needs no pass of its own, unless it carried
            // the stream's end or an error.
            if !ends
                && hot
                    .as_ref()
                    .is_some_and(|(h, _)| h.as_ptr() == Arc::as_ptr(&qp))
            {
                continue;
            }
            if qp.on_ready(&d, index, ends, || {
                count(&served.events);
            }) {
                moved = Some(qp);
            }
        }
        for qp in timed.drain(..) {
            qp.on_timer(&d, index, || {
                count(&served.timer_drives);
            });
        }
        if busy {
            last_busy = Instant::now();
        }
        if let Some(qp) = moved {
            // The last QP of the batch that moved large FPDUs is the one driven again.
            hot = Some((Arc::downgrade(&qp), last_busy));
        }
        drop(d);
        if crate::handler::take_woke_dispatcher() {
            std::thread::yield_now();
        }
    }
}

#[cfg(all(test, not(loom)))]
#[path = "engine_tests.rs"]
mod tests;
