//! Completion handlers: what receives the events of the CQs bound to a completion
//! vector (handler id), on which CPU, with what priority.
//!
//! A handler is a callback or a [`CompChannel`]. Callbacks are run by dispatcher
//! threads, one per CPU that has callback handlers (and one for unpinned ones), pinned
//! to that CPU before they run anything, so a callback always runs on the CPU its
//! handler asked for. Handlers that share a CPU share its dispatcher, which takes the
//! queued event of the highest priority first (oldest first within a priority): a
//! low-latency class is served ahead of a bulk class. A dispatcher runs one callback at
//! a time and never interrupts one: priority decides which event is next, not whether
//! a running callback is preempted.
//!
//! The handler's CPU also decides where its CQs' QPs are driven: the device picks the
//! engine pinned to that CPU (see `Shared::engine_for`), so a completion is produced and
//! handled on one processor.
//!
//! Events are moved, never copied: a CQ's event sits in exactly one place (a
//! dispatcher's queue, a channel, the CQ's own waiters) until it is taken, and moving a
//! CQ to another handler ([`crate::Device::modify_cq`]) moves its queued events along
//! under the CQ's routing lock.

use crate::channel::{CompChannel, CqEvent};
use crate::error::{Error, Result};
use crate::sys::affinity;
use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// A callback handler's function: called with each event, on the handler's CPU.
pub type Callback = Box<dyn FnMut(&CqEvent) + Send + 'static>;

/// What a handler is.
pub enum HandlerKind {
    /// A function run by the dispatcher thread of the handler's CPU. It should poll
    /// the event's CQ, re-arm it and poll again. It must not capture the [`crate::Device`]
    /// (the device keeps its handlers, so that would keep the device alive for ever):
    /// capture CQs and QPs, which do not keep the device.
    Callback(Callback),
    /// A completion channel the program waits on.
    Channel(CompChannel),
}

/// A completion handler to register with [`crate::Device::set_handler`].
pub struct Handler {
    /// The CPU its callbacks run on, and whose engine drives its CQs' QPs (when the
    /// device has an engine pinned there). `None`: anywhere.
    pub cpu: Option<usize>,
    /// Among handlers on one CPU, events of a higher priority are dispatched first.
    /// Channels are waited on by the program, so for them it is only reported.
    pub priority: u8,
    /// Callback or channel.
    pub kind: HandlerKind,
}

impl std::fmt::Debug for Handler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.kind {
            HandlerKind::Callback(_) => "callback",
            HandlerKind::Channel(_) => "channel",
        };
        write!(
            f,
            "Handler({kind}, cpu {:?}, priority {})",
            self.cpu, self.priority
        )
    }
}

impl Handler {
    /// A callback handler, unpinned, priority 0.
    pub fn callback(f: impl FnMut(&CqEvent) + Send + 'static) -> Handler {
        Handler {
            cpu: None,
            priority: 0,
            kind: HandlerKind::Callback(Box::new(f)),
        }
    }

    /// A channel handler, unpinned, priority 0.
    pub fn channel(ch: &CompChannel) -> Handler {
        Handler {
            cpu: None,
            priority: 0,
            kind: HandlerKind::Channel(ch.clone()),
        }
    }

    /// On `cpu`.
    pub fn on_cpu(mut self, cpu: usize) -> Handler {
        self.cpu = Some(cpu);
        self
    }

    /// With `priority`.
    pub fn with_priority(mut self, priority: u8) -> Handler {
        self.priority = priority;
        self
    }
}

/// A registered handler, as [`crate::Device::handlers`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandlerInfo {
    /// Its id (the completion vector).
    pub id: usize,
    /// Its CPU.
    pub cpu: Option<usize>,
    /// Its priority.
    pub priority: u8,
    /// A channel (else a callback).
    pub channel: bool,
    /// The kernel thread id of the dispatcher running its callbacks.
    pub dispatcher_tid: Option<i32>,
    /// Events handed to it: callbacks run, or events queued into its channel.
    pub events: u64,
    /// Callbacks that panicked (the dispatcher goes on with the next event).
    pub panics: u64,
    /// Live CQs bound to it.
    pub cqs: usize,
}

enum Target {
    Callback {
        disp: Arc<DispCore>,
        tid: i32,
        f: Mutex<Callback>,
    },
    Channel(CompChannel),
}

pub(crate) struct HandlerInner {
    pub(crate) id: usize,
    pub(crate) cpu: Option<usize>,
    pub(crate) priority: u8,
    target: Target,
    events: AtomicU64,
    panics: AtomicU64,
}

impl HandlerInner {
    /// Hands `ev` to the handler: queued at its dispatcher or in its channel.
    pub(crate) fn push(self: &Arc<Self>, ev: CqEvent) {
        match &self.target {
            Target::Callback { disp, .. } => disp.push(self.clone(), ev),
            Target::Channel(ch) => {
                self.events.fetch_add(1, Ordering::Relaxed);
                ch.push(ev);
            }
        }
    }

    /// Takes back the queued (not yet taken) events that `pick` accepts.
    pub(crate) fn take_where(self: &Arc<Self>, pick: impl Fn(&CqEvent) -> bool) -> Vec<CqEvent> {
        match &self.target {
            Target::Callback { disp, .. } => disp.take_where(self, pick),
            Target::Channel(ch) => {
                let out = ch.take_where(pick);
                self.events.fetch_sub(out.len() as u64, Ordering::Relaxed);
                out
            }
        }
    }

    pub(crate) fn info(&self, cqs: usize) -> HandlerInfo {
        let (channel, tid) = match &self.target {
            Target::Callback { tid, .. } => (false, Some(*tid)),
            Target::Channel(_) => (true, None),
        };
        HandlerInfo {
            id: self.id,
            cpu: self.cpu,
            priority: self.priority,
            channel,
            dispatcher_tid: tid,
            events: self.events.load(Ordering::Acquire),
            panics: self.panics.load(Ordering::Relaxed),
            cqs,
        }
    }

    /// Runs the callback for `ev` (on the dispatcher thread).
    fn run(&self, ev: &CqEvent) {
        let Target::Callback { f, .. } = &self.target else {
            return;
        };
        ev.cq.shared.event_delivered();
        if let Ok(mut f) = f.lock() {
            // A panicking callback is the program's bug; the dispatcher serves the
            // other handlers on its CPU regardless.
            if std::panic::catch_unwind(AssertUnwindSafe(|| f(ev))).is_err() {
                self.panics.fetch_add(1, Ordering::Relaxed);
            }
        }
        // Acknowledged before it is counted here, so whoever sees the count sees the
        // acknowledgement too.
        ev.cq.shared.event_acked_by_handler();
        self.events.fetch_add(1, Ordering::Release);
    }
}

thread_local! {
    /// Set when this thread woke a sleeping dispatcher (see [`take_woke_dispatcher`]).
    static WOKE_DISPATCHER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the calling thread woke a sleeping dispatcher since the last call. An engine
/// asks after each batch and, if so, yields its CPU once instead of going on at once:
/// the dispatcher it woke is usually pinned to the same CPU (a handler's CQs are driven
/// by the engine on the handler's CPU), and would otherwise wait for the engine's batch
/// and spin to end.
pub(crate) fn take_woke_dispatcher() -> bool {
    WOKE_DISPATCHER.with(|w| w.replace(false))
}

/// A queued event: its handler (for the priority and the callback) and the event.
type Queued = (Arc<HandlerInner>, CqEvent);

#[derive(Default)]
struct DispState {
    /// Keyed by (higher priority first, then arrival order).
    queue: BTreeMap<(Reverse<u8>, u64), Queued>,
    seq: u64,
    sleeping: bool,
    stop: bool,
}

struct DispCore {
    state: Mutex<DispState>,
    cv: Condvar,
}

impl DispCore {
    fn push(&self, h: Arc<HandlerInner>, ev: CqEvent) {
        let Ok(mut st) = self.state.lock() else {
            return;
        };
        st.seq += 1;
        let key = (Reverse(h.priority), st.seq);
        st.queue.insert(key, (h, ev));
        if st.sleeping {
            st.sleeping = false;
            self.cv.notify_one();
            WOKE_DISPATCHER.with(|w| w.set(true));
        }
    }

    fn take_where(&self, h: &Arc<HandlerInner>, pick: impl Fn(&CqEvent) -> bool) -> Vec<CqEvent> {
        let Ok(mut st) = self.state.lock() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        st.queue.retain(|_, (qh, ev)| {
            if Arc::ptr_eq(qh, h) && pick(ev) {
                out.push(ev.clone());
                false
            } else {
                true
            }
        });
        out
    }

    fn run(&self) {
        loop {
            let (h, ev) = {
                let Ok(mut st) = self.state.lock() else {
                    return;
                };
                loop {
                    if st.stop {
                        return;
                    }
                    if let Some((_, q)) = st.queue.pop_first() {
                        break q;
                    }
                    st.sleeping = true;
                    st = match self.cv.wait(st) {
                        Ok(s) => s,
                        Err(_) => return,
                    };
                    st.sleeping = false;
                }
            };
            h.run(&ev);
        }
    }
}

/// A dispatcher thread, stopped and joined when dropped (unless dropped on itself).
struct Dispatcher {
    cpu: Option<usize>,
    core: Arc<DispCore>,
    tid: i32,
    thread: Option<JoinHandle<()>>,
}

impl Dispatcher {
    fn start(cpu: Option<usize>) -> Result<Dispatcher> {
        let core = Arc::new(DispCore {
            state: Mutex::new(DispState::default()),
            cv: Condvar::new(),
        });
        let c = core.clone();
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let name = match cpu {
            Some(cpu) => format!("softrnic-cq-cpu{cpu}"),
            None => "softrnic-cq".to_string(),
        };
        let thread = std::thread::Builder::new().name(name).spawn(move || {
            let pinned = cpu.map_or(Ok(()), affinity::pin_thread);
            let ok = pinned.is_ok();
            let _ = tx.send(pinned.map(|()| affinity::thread_id()));
            if ok {
                c.run();
            }
        })?;
        match rx.recv() {
            Ok(Ok(tid)) => Ok(Dispatcher {
                cpu,
                core,
                tid,
                thread: Some(thread),
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(match e.kind() {
                    std::io::ErrorKind::InvalidInput => {
                        Error::InvalidArgument("handler CPU does not exist or is not allowed")
                    }
                    _ => Error::Io(e),
                })
            }
            Err(_) => Err(Error::Internal("dispatcher thread ended before it started")),
        }
    }
}

impl Drop for Dispatcher {
    fn drop(&mut self) {
        if let Ok(mut st) = self.core.state.lock() {
            st.stop = true;
            // Queued events hold their CQs; the device is going away.
            st.queue.clear();
        }
        self.core.cv.notify_all();
        if let Some(t) = self.thread.take()
            && t.thread().id() != std::thread::current().id()
        {
            let _ = t.join();
        }
    }
}

/// The device's handlers, by id (completion vector), and its dispatcher threads.
pub(crate) struct Handlers {
    slots: std::sync::RwLock<Vec<Option<Arc<HandlerInner>>>>,
    dispatchers: Mutex<Vec<Dispatcher>>,
}

impl Handlers {
    pub(crate) fn new(vectors: usize) -> Handlers {
        Handlers {
            slots: std::sync::RwLock::new(vec![None; vectors]),
            dispatchers: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn count(&self) -> usize {
        self.slots.read().map_or(0, |s| s.len())
    }

    /// The handler registered as `id`.
    pub(crate) fn get(&self, id: usize) -> Option<Arc<HandlerInner>> {
        self.slots.read().ok()?.get(id)?.clone()
    }

    /// Hands `events` of `cq` to handler `id`, holding the table's read lock so the
    /// handler cannot be removed half-way (its removal takes its queued events back
    /// afterwards). Returns true, with nothing taken from `events`, if no handler is
    /// registered as `id`.
    pub(crate) fn push_to(
        &self,
        id: usize,
        events: &mut impl Iterator<Item = std::time::Instant>,
        cq: &crate::Cq,
    ) -> bool {
        let Ok(slots) = self.slots.read() else {
            return true;
        };
        let Some(Some(h)) = slots.get(id) else {
            return true;
        };
        for raised_at in events {
            h.push(CqEvent {
                cq: cq.clone(),
                raised_at,
            });
        }
        false
    }

    /// Every registered handler.
    pub(crate) fn all(&self) -> Vec<Arc<HandlerInner>> {
        self.slots
            .read()
            .map(|s| s.iter().flatten().cloned().collect())
            .unwrap_or_default()
    }

    /// Builds the handler for `h` (starting its CPU's dispatcher if it needs one) and
    /// installs it as `id`; returns the handler it replaced.
    pub(crate) fn install(&self, id: usize, h: Handler) -> Result<Option<Arc<HandlerInner>>> {
        if id >= self.count() {
            return Err(Error::InvalidArgument(
                "handler id out of range (see num_comp_vectors)",
            ));
        }
        if let Some(cpu) = h.cpu
            && !affinity::process_cpus().contains(&cpu)
        {
            return Err(Error::InvalidArgument(
                "handler CPU does not exist or is not allowed",
            ));
        }
        let target = match h.kind {
            HandlerKind::Channel(ch) => Target::Channel(ch),
            HandlerKind::Callback(f) => {
                let (disp, tid) = self.dispatcher(h.cpu)?;
                Target::Callback {
                    disp,
                    tid,
                    f: Mutex::new(f),
                }
            }
        };
        let inner = Arc::new(HandlerInner {
            id,
            cpu: h.cpu,
            priority: h.priority,
            target,
            events: AtomicU64::new(0),
            panics: AtomicU64::new(0),
        });
        let mut slots = self.slots.write()?;
        Ok(slots[id].replace(inner))
    }

    /// Unregisters `id`; returns the handler it was.
    pub(crate) fn remove(&self, id: usize) -> Result<Option<Arc<HandlerInner>>> {
        let mut slots = self.slots.write()?;
        let slot = slots
            .get_mut(id)
            .ok_or(Error::InvalidArgument("handler id out of range"))?;
        Ok(slot.take())
    }

    /// The dispatcher of `cpu`, started on first use.
    fn dispatcher(&self, cpu: Option<usize>) -> Result<(Arc<DispCore>, i32)> {
        let mut d = self.dispatchers.lock()?;
        if let Some(x) = d.iter().find(|x| x.cpu == cpu) {
            return Ok((x.core.clone(), x.tid));
        }
        let x = Dispatcher::start(cpu)?;
        let r = (x.core.clone(), x.tid);
        d.push(x);
        Ok(r)
    }
}
