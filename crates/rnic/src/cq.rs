//! Completion queues: a lock-free ring ([`crate::cq_ring`]) the QPs push into, a
//! consumer that polls it, and notification for consumers that block: the CQ is armed
//! for the next completion or for solicited ones only ([`crate::cq_notify`]), and the
//! one event an arm raises goes to the CQ's handler ([`crate::Handler`]: a callback on
//! a CPU, or a [`crate::CompChannel`]) or, for a CQ without one, to
//! [`Cq::wait_notify`]. `Device::modify_cq` moves a CQ between handlers.

use crate::channel::CqEvent;
use crate::cq_direct::Direct;
use crate::cq_notify::{Arm, Armed};
use crate::cq_qps::QpList;
use crate::cq_ring::{CqRing, Full};
use crate::device::{AsyncEvent, ProgressMode, Shared};
use crate::error::{Error, Result};
use crate::handoff::PollCount;
use crate::limits::Reservation;
use crate::qp::QpShared;
use softrnic_proto::{Completion, WcStatus};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

/// A CQ's event counts ([`Cq::event_counts`]), as libibverbs keeps them: events raised
/// by arms, handed to the program, and acknowledged by it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventCounts {
    /// Events raised (at most one per arm).
    pub raised: u64,
    /// Events handed to the program: taken from a channel, given to a callback, or
    /// returned by [`Cq::wait_notify`].
    pub delivered: u64,
    /// Events acknowledged: with [`Cq::ack_events`] for channel events, when the
    /// callback returned for handler events, at once for [`Cq::wait_notify`].
    pub acked: u64,
}

pub(crate) struct CqShared {
    pub(crate) id: u32,
    /// The completion vector: its handler's CPU (or the vector number) decides which
    /// engine drives the QPs receiving into this CQ. Changes only under `route`.
    vector: AtomicUsize,
    /// The handler id events go to (`None`: detached, events go to the CQ's own
    /// waiters). Held while an event is routed, so a move never splits one.
    route: Mutex<Option<usize>>,
    ring: CqRing,
    depth: usize,
    /// Completions that found the ring full: kept (never dropped), delivered after the
    /// ring's, and reported once as [`AsyncEvent::CqOverflow`].
    overflow: Mutex<VecDeque<Completion>>,
    overflowed: AtomicBool,
    arm: Arm,
    /// Events for the CQ's own waiters (detached, or bound to an id with no handler
    /// registered), as the instants they were raised.
    local: Mutex<VecDeque<Instant>>,
    local_cv: Condvar,
    raised: AtomicU64,
    delivered: AtomicU64,
    acked: AtomicU64,
    dev: Weak<Shared>,
    /// The QPs sending or receiving into this CQ, replaced whole when one is added or
    /// removed, so a poll takes the list with one try-lock whose release is a store
    /// (`cq_qps.rs`) and no copy. Held strongly, so a
    /// busy-polling consumer's drive touches no reference count: a QP leaves the list
    /// when its `Qp` is dropped ([`CqShared::remove_qp`]), which breaks the cycle (a QP
    /// holds its CQs).
    qps: QpList<Arc<QpShared>>,
    /// Hybrid progress: an empty poll drives the QPs' sockets.
    hybrid: bool,
    /// The consumer's polls, for the hand-off of sockets ([`crate::handoff`]).
    polls: PollCount,
    /// Armed at least once: its consumer sleeps on events, and its engine was told
    /// (`placement.rs`).
    event_driven: AtomicBool,
    /// This CQ's share of [`crate::DeviceConfig::max_cq_entries`].
    _entries: Reservation,
}

impl CqShared {
    pub(crate) fn new(
        id: u32,
        depth: usize,
        vector: usize,
        handler: Option<usize>,
        dev: Arc<Shared>,
        entries: Reservation,
    ) -> Result<CqShared> {
        let ring = CqRing::new(depth).map_err(|_| crate::Error::InvalidArgument("CQ depth"))?;
        Ok(CqShared {
            id,
            vector: AtomicUsize::new(vector),
            route: Mutex::new(handler),
            ring,
            depth,
            overflow: Mutex::new(VecDeque::new()),
            overflowed: AtomicBool::new(false),
            arm: Arm::new(),
            local: Mutex::new(VecDeque::new()),
            local_cv: Condvar::new(),
            raised: AtomicU64::new(0),
            delivered: AtomicU64::new(0),
            acked: AtomicU64::new(0),
            hybrid: dev.cfg.progress == ProgressMode::Hybrid,
            dev: Arc::downgrade(&dev),
            qps: QpList::new(),
            polls: PollCount::new(),
            event_driven: AtomicBool::new(false),
            _entries: entries,
        })
    }

    pub(crate) fn belongs_to(&self, dev: &Arc<Shared>) -> bool {
        std::ptr::eq(self.dev.as_ptr(), Arc::as_ptr(dev))
    }

    pub(crate) fn vector(&self) -> usize {
        self.vector.load(Ordering::Acquire)
    }

    pub(crate) fn handler(&self) -> Option<usize> {
        self.route.lock().ok().and_then(|r| *r)
    }

    /// Adds a completion; `solicited` marks a received Send with the SE flag. An
    /// armed CQ raises its event after the completion is in the ring (see
    /// [`crate::cq_notify`] for why that order loses no wake-up).
    pub(crate) fn push(self: &Arc<Self>, c: Completion, solicited: bool) {
        // A completion in error is solicited too (the libibverbs rule).
        let solicited = solicited || c.status != WcStatus::Success;
        // The ring position taken, if the completion went into the ring. The overflow
        // handling is out of line: the common push is one flag load and the ring's.
        let pos = if self.overflowed.load(Ordering::Acquire) {
            self.push_overflowed(c)
        } else {
            match self.ring.push_pos(c) {
                Ok(p) => Some(p),
                Err(Full(c)) => {
                    self.overflow_full(c);
                    None
                }
            }
        };
        let later = || pos.is_some_and(|p| self.ring.claimed_after(p));
        if self.arm.completion_added(solicited, later) {
            self.raised.fetch_add(1, Ordering::Relaxed);
            let at = Instant::now();
            if let Ok(route) = self.route.lock() {
                self.deliver_locked(*route, [at]);
            }
        }
    }

    /// Adds a run of completions of one QP, in order, as [`CqShared::push`] would one
    /// by one (a completion is solicited when it says so or is in error), with one
    /// claim of ring positions and one look at the arm for the whole run: an armed CQ
    /// raises one event after the run is in the ring, which is what the pushes one by
    /// one would raise (one event per arm), only after the last of them instead of
    /// after the first that matched. While the overflow list is in use, or the ring
    /// has no room for the whole run, they go one by one.
    ///
    /// `claimed`: the QP pushing holds a polling consumer's claim (under its lock), so
    /// no consumer of this CQ can be armed and sleeping (`QpShared::claim` refuses an
    /// armed CQ, and an arm releases the claims after it): the arm is not looked at,
    /// one atomic read-modify-write less on the way to a busy-polling consumer.
    /// The CQ in a few words, for a hang report: completions held (published or being
    /// written) and whether the overflow list is in use.
    pub(crate) fn stall_report(&self) -> String {
        format!(
            "CQ holds {}{}",
            self.ring.len(),
            if self.overflowed.load(Ordering::Acquire) {
                " and an overflow list"
            } else {
                ""
            }
        )
    }

    pub(crate) fn push_run(self: &Arc<Self>, run: &[Completion], claimed: bool) {
        let first = if self.overflowed.load(Ordering::Acquire) {
            None
        } else {
            self.ring.push_run(run)
        };
        crate::chaos::point();
        if claimed && first.is_some() {
            return;
        }
        self.push_run_rest(run, first);
    }

    /// The rest of [`CqShared::push_run`] once the ring took the run (`first`, its
    /// position) for a consumer that may be armed, or did not take it. Out of line:
    /// inline, its registers and frame were paid by every push of a claimed QP's
    /// completion.
    #[inline(never)]
    fn push_run_rest(self: &Arc<Self>, run: &[Completion], first: Option<usize>) {
        let solicited = |c: &Completion| c.solicited || c.status != WcStatus::Success;
        let Some(first) = first else {
            for c in run {
                self.push(*c, solicited(c));
            }
            return;
        };
        let last = first.wrapping_add(run.len() - 1);
        let later = || self.ring.claimed_after(last);
        if self.arm.completion_added(run.iter().any(solicited), later) {
            self.raised.fetch_add(1, Ordering::Relaxed);
            let at = Instant::now();
            if let Ok(route) = self.route.lock() {
                self.deliver_locked(*route, [at]);
            }
        }
    }

    /// A push while the overflow list is in use: the list keeps the order, unless the
    /// consumer emptied it meanwhile (it clears the flag while holding the lock, so a
    /// completion is never left in a list nobody will read); then the ring takes it.
    #[cold]
    fn push_overflowed(self: &Arc<Self>, c: Completion) -> Option<usize> {
        if let Ok(mut o) = self.overflow.lock()
            && self.overflowed.load(Ordering::Acquire)
        {
            o.push_back(c);
            return None;
        }
        match self.ring.push_pos(c) {
            Ok(p) => Some(p),
            Err(Full(c)) => {
                self.overflow_full(c);
                None
            }
        }
    }

    /// The ring is full: the completion goes to the overflow list, and everything after
    /// it too so order is kept (the flag is set while holding the lock); the first
    /// overflow raises the CQ's async event.
    #[cold]
    fn overflow_full(self: &Arc<Self>, c: Completion) {
        let mut over = false;
        if let Ok(mut o) = self.overflow.lock() {
            o.push_back(c);
            over = !self.overflowed.swap(true, Ordering::AcqRel);
        }
        if over && let Some(d) = self.dev.upgrade() {
            d.post_event(AsyncEvent::CqOverflow { cq: self.id });
        }
    }

    /// Hands events (by the instant each was raised) to the handler `route` names, or
    /// to the CQ's own waiters if it names none. The caller holds the routing lock.
    fn deliver_locked(
        self: &Arc<Self>,
        route: Option<usize>,
        events: impl IntoIterator<Item = Instant>,
    ) {
        let mut events = events.into_iter().peekable();
        if events.peek().is_none() {
            return;
        }
        if let Some(id) = route
            && let Some(dev) = self.dev.upgrade()
        {
            let cq = Cq {
                shared: self.clone(),
            };
            let left = dev.handlers.push_to(id, &mut events, &cq);
            if !left {
                return;
            }
        }
        if let Ok(mut l) = self.local.lock() {
            l.extend(events);
            self.local_cv.notify_all();
        }
    }

    /// Binds the CQ to handler `to` (`None`: detaches it), moving every event of it
    /// still queued (at its old handler, or with its own waiters) to where it now
    /// belongs, under the routing lock: an event raised meanwhile waits for the lock
    /// and goes to the new place. With `to == self.handler()` this re-routes queued
    /// events (a handler was registered or replaced).
    pub(crate) fn rebind(self: &Arc<Self>, dev: &Shared, to: Option<usize>) -> Result<()> {
        let mut route = self.route.lock()?;
        let from = *route;
        let mut moved: Vec<Instant> = Vec::new();
        if let Some(h) = from.and_then(|id| dev.handlers.get(id)) {
            let me = Arc::as_ptr(self);
            moved.extend(
                h.take_where(|e| std::ptr::eq(Arc::as_ptr(&e.cq.shared), me))
                    .iter()
                    .map(CqEvent::raised_at),
            );
        }
        moved.extend(self.local.lock()?.drain(..));
        moved.sort_unstable();
        if let Some(v) = to {
            self.vector.store(v, Ordering::Release);
        }
        *route = to;
        self.deliver_locked(to, moved);
        Ok(())
    }

    /// Delivers events taken from a handler that is gone, by the CQ's binding now.
    pub(crate) fn redeliver(self: &Arc<Self>, events: Vec<Instant>) {
        if let Ok(route) = self.route.lock() {
            self.deliver_locked(*route, events);
        }
    }

    pub(crate) fn event_delivered(&self) {
        self.delivered.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn event_acked_by_handler(&self) {
        self.acked.fetch_add(1, Ordering::Release);
    }

    /// Adds a QP that sends or receives into this CQ.
    pub(crate) fn add_qp(&self, qp: &Arc<QpShared>) {
        let old = self.qps.replace(|l| {
            let mut v: Vec<Arc<QpShared>> = l.to_vec();
            v.push(qp.clone());
            v
        });
        drop(old);
    }

    /// Forgets a QP whose `Qp` is being dropped.
    pub(crate) fn remove_qp(&self, qp: &Arc<QpShared>) {
        let old = self
            .qps
            .replace(|l| l.iter().filter(|q| !Arc::ptr_eq(q, qp)).cloned().collect());
        // The list's references go after the lock: the last one may end a QP (and its
        // hold on this CQ).
        drop(old);
    }

    fn qp_list(&self) -> Arc<Vec<Arc<QpShared>>> {
        self.qps.get()
    }

    /// The QPs receiving into this CQ.
    pub(crate) fn receiving_qps(&self) -> Vec<Arc<QpShared>> {
        let me: *const CqShared = self;
        self.qp_list()
            .iter()
            .filter(|qp| std::ptr::eq(Arc::as_ptr(qp.recv_cq()), me))
            .cloned()
            .collect()
    }

    /// The consumer's polls so far (hybrid progress).
    pub(crate) fn polls(&self) -> &PollCount {
        &self.polls
    }

    /// Inlined into the poll: an empty CQ (a busy-polling consumer's every spin) is
    /// answered without a call (its prologue and epilogue were about half of the 32
    /// instructions of an empty poll's look).
    #[inline]
    fn pop_into(&self, out: &mut [Completion]) -> usize {
        // An empty CQ is answered with two loads, without claiming the consumer role
        // (a compare-exchange, on every empty poll of a busy-polling consumer). A
        // completion whose push has claimed its slot counts as there; a producer
        // claims the slot before it publishes it, so a completion the ring would
        // hand out is never missed here.
        if self.holds_nothing() {
            return 0;
        }
        self.pop_some_into(out)
    }

    /// Pushes into the ring so far (`crate::cq_direct`'s tests).
    #[cfg(test)]
    pub(crate) fn ring_pushes(&self) -> usize {
        self.ring.pushed()
    }

    /// Neither the ring (a slot claimed by a producer still writing counts) nor the
    /// overflow list holds a completion.
    #[inline]
    pub(crate) fn holds_nothing(&self) -> bool {
        self.ring.is_empty() && !self.overflowed.load(Ordering::Acquire)
    }

    /// [`CqShared::pop_into`] once the CQ may hold completions. The overflow list's
    /// part is a call of its own: inline, its registers and frame were paid by every
    /// pop (a ping-pong pops one completion a poll).
    #[inline(never)]
    fn pop_some_into(&self, out: &mut [Completion]) -> usize {
        crate::chaos::point();
        let n = match self.ring.consumer() {
            Some(mut c) => c.pop_into(out),
            None => return 0,
        };
        if n < out.len() && self.overflowed.load(Ordering::Acquire) {
            return self.pop_overflowed(out, n);
        }
        n
    }

    /// The rest of a pop while the overflow list is in use: `out[..n]` holds what the
    /// ring gave; fills the rest, the ring's newer completions first, then the list's.
    #[cold]
    #[inline(never)]
    fn pop_overflowed(&self, out: &mut [Completion], mut n: usize) -> usize {
        if let Ok(mut o) = self.overflow.lock() {
            while n < out.len() {
                // The ring may have taken new completions before the flag was set:
                // those come first.
                if let Some(mut c) = self.ring.consumer()
                    && let Some(x) = c.pop()
                {
                    out[n] = x;
                    n += 1;
                    continue;
                }
                match o.pop_front() {
                    Some(x) => {
                        out[n] = x;
                        n += 1;
                    }
                    None => {
                        self.overflowed.store(false, Ordering::Release);
                        break;
                    }
                }
            }
        }
        n
    }

    /// Lets the consumer's thread drive the sockets of the QPs on this CQ (a consumer
    /// that keeps doing so takes them over).
    /// A polling consumer's drive of the CQ's QPs: whether anything moved, and whether
    /// what it waits for is another thread's to do: the engines read the sockets (many
    /// QPs, see [`CONSUMER_READS_MAX_QPS`]), or a QP's lock was held elsewhere.
    ///
    /// This runs on every empty poll, so it touches few shared counters: the few QPs
    /// are driven under the list's lock (no copy of the list, no reference count), and
    /// a QP whose socket the consumer holds has its device at hand
    /// (`QpShared::consumer_progress`). The lock is only tried: another thread driving
    /// this CQ now leaves this poll nothing to do. (Nothing a drive does takes this
    /// lock: a QP's drive tries the QP's lock and never waits, and the list's other
    /// users take it without holding a QP's.)
    ///
    /// A CQ with one QP hands the QP's pass the caller's `out` (`crate::cq_direct`): a
    /// completion it releases for this CQ may go there without the ring; the third
    /// value says how many did.
    pub(crate) fn drive(&self, out: &mut [Completion]) -> (bool, bool, usize) {
        let ready = self.polls.drive();
        let few = self.qps.try_with(|list| {
            if let [qp] = &list[..] {
                let mut to = Direct::new(self, out);
                return Ok(match qp.consumer_progress(ready, false, Some(&mut to)) {
                    Some(moved) => (moved, false, to.taken()),
                    None => (false, true, 0),
                });
            }
            if list.len() > CONSUMER_READS_MAX_QPS {
                // Many QPs: the list is taken out and the lock given back first.
                return Err(Arc::clone(list));
            }
            let (mut any, mut held) = (false, false);
            for qp in list.iter() {
                match qp.consumer_progress(ready, false, None) {
                    Some(moved) => any |= moved,
                    None => held = true,
                }
            }
            Ok((any, held, 0))
        });
        match few {
            None => (false, false, 0),
            Some(Ok(drive)) => drive,
            Some(Err(list)) => {
                let mut any = false;
                for qp in list.iter() {
                    any |= qp.consumer_progress(ready, true, None) == Some(true);
                }
                (any, true, 0)
            }
        }
    }

    /// The consumer goes to sleep on this CQ's events: the engines take back the
    /// sockets it held.
    /// On the first arm: the engine serving this CQ's vector has an event-driven
    /// consumer, and is left to the scheduler from now on (`placement.rs`). Later arms
    /// cost one atomic swap.
    fn note_event_driven(&self) {
        if self.event_driven.swap(true, Ordering::Relaxed) {
            return;
        }
        let Some(dev) = self.dev.upgrade() else {
            return;
        };
        let engine = dev.engine_for(self.vector.load(Ordering::Relaxed));
        if let Some(e) = dev.engines.get(engine) {
            e.consumer_sleeps();
        }
    }

    /// No consumer is armed on this CQ (a claim may be taken, see `QpShared::claim`).
    pub(crate) fn disarmed(&self) -> bool {
        self.arm.armed() == Armed::No
    }

    fn consumer_sleeps(&self) {
        if !self.hybrid {
            return;
        }
        self.polls.reset_drives();
        let Some(dev) = self.dev.upgrade() else {
            return;
        };
        for qp in self.qp_list().iter() {
            qp.consumer_sleeps(&dev);
        }
    }
}

/// Hybrid progress: a CQ with more QPs than this has the engines read its QPs'
/// sockets, and its polling consumer only sends what they have queued. Reading each
/// socket on every poll costs a `read(2)` per QP and poll, most of them empty, while
/// an engine's one `epoll_wait` finds the ready ones; with few QPs (a latency-bound
/// ping-pong) the consumer reads and claims the sockets itself (`crate::handoff`).
pub(crate) const CONSUMER_READS_MAX_QPS: usize = 8;

/// A completion queue.
#[derive(Clone)]
pub struct Cq {
    pub(crate) shared: Arc<CqShared>,
}

impl std::fmt::Debug for Cq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Cq({}, depth {})", self.shared.id, self.shared.depth)
    }
}

fn empty_completion() -> Completion {
    Completion {
        wr_id: 0,
        status: softrnic_proto::WcStatus::GeneralError,
        opcode: softrnic_proto::WcOpcode::Recv,
        byte_len: 0,
        qp: softrnic_proto::QpId(0),
        solicited: false,
        invalidated: None,
    }
}

impl Cq {
    /// Its identifier.
    pub fn id(&self) -> u32 {
        self.shared.id
    }

    /// The depth asked for at creation.
    pub fn depth(&self) -> usize {
        self.shared.depth
    }

    /// Its completion vector: the handler it is bound to, or was last bound to (see
    /// [`crate::Device::create_cq_on`], [`crate::Device::modify_cq`]).
    pub fn vector(&self) -> usize {
        self.shared.vector()
    }

    /// The handler its events go to; `None` when detached (events go to
    /// [`Cq::wait_notify`]). Bound to an id with no handler registered, events also go
    /// to `wait_notify`, until a handler is registered there.
    pub fn handler(&self) -> Option<usize> {
        self.shared.handler()
    }

    /// Moves up to `out.len()` completions into `out`, oldest first; returns how many.
    /// In hybrid progress mode, an empty CQ first drives its QPs' sockets once, and a
    /// consumer that keeps polling takes them over from the engine threads until it
    /// stops ([`crate::handoff`]).
    pub fn poll(&self, out: &mut [Completion]) -> usize {
        crate::cpu_share::mark_consumer();
        let s = &self.shared;
        if !s.hybrid {
            let n = s.pop_into(out);
            if n == 0 && !out.is_empty() {
                // Engine progress: only an engine thread can add a completion now, and
                // it may be waiting for this CPU (a busy-polling program thread and
                // an engine on one CPU otherwise take turns only at the scheduler's
                // time slice, a millisecond or more: see ARCHITECTURE.md, "Many QPs").
                std::thread::yield_now();
            }
            return n;
        }
        s.polls.poll();
        let n = s.pop_into(out);
        if n > 0 || out.is_empty() {
            return n;
        }
        crate::chaos::point();
        match s.drive(out) {
            (_, _, taken) if taken > 0 => taken,
            (true, _, _) => {
                crate::chaos::point();
                s.pop_into(out)
            }
            (false, others, _) => {
                // Another thread holds what this poll waits for: the engine that will
                // read the next message (as in engine progress, above), a thread
                // holding a QP's lock, or a producer that claimed ring slots and has
                // not published them yet (or a second consumer holding the ring), so a
                // ring that is not empty gave nothing. That thread may be waiting for
                // this CPU: a consumer spinning on without yielding kept an engine
                // descheduled in the middle of its push for 10 s under valgrind
                // (docs/TCP.md, session 20), and a real-time consumer would keep it
                // off for good.
                if others || !s.ring.is_empty() {
                    s.polls.yielded();
                    std::thread::yield_now();
                }
                0
            }
        }
    }

    /// One completion, if any.
    pub fn poll_one(&self) -> Option<Completion> {
        let mut one = [empty_completion()];
        (self.poll(&mut one) == 1).then_some(one[0])
    }

    /// Arms the CQ (`ibv_req_notify_cq`): the next completion added, or with
    /// `solicited_only` the next solicited one (a receive of a Send with the Solicited
    /// Event bit, or a completion in error), raises one event. One-shot: arm again
    /// after each event. Poll once more after arming: a completion added before the
    /// arm is found by that poll, one added after raises the event, and none falls
    /// between the two.
    ///
    /// In hybrid progress mode, arming hands the sockets a polling consumer had taken
    /// over back to the engine threads, which serve them while the consumer sleeps.
    pub fn req_notify(&self, solicited_only: bool) {
        self.shared.note_event_driven();
        self.shared.consumer_sleeps();
        self.shared.arm.arm(solicited_only);
        // A claim taken after the release above (another thread's drive) but before
        // the arm would hide this arm from the claimed QP's completions (their pushes
        // do not look at it, see `push_run`): its claim is released now. The fence
        // pairs with the claimer's (`QpShared::claim`): either it sees this arm and
        // gives the claim up, or this sees its claim.
        std::sync::atomic::fence(Ordering::SeqCst);
        self.shared.consumer_sleeps();
    }

    /// What the CQ is armed for now.
    pub fn armed(&self) -> Armed {
        self.shared.arm.armed()
    }

    /// Waits up to `timeout` for an event of this CQ that no handler takes (the CQ is
    /// detached, or no handler is registered under its id) and consumes it; true if
    /// one came (possibly raised before the call: none is missed).
    pub fn wait_notify(&self, timeout: Duration) -> bool {
        let Ok(l) = self.shared.local.lock() else {
            return false;
        };
        let Ok((mut l, _)) = self
            .shared
            .local_cv
            .wait_timeout_while(l, timeout, |l| l.is_empty())
        else {
            return false;
        };
        if l.pop_front().is_none() {
            return false;
        }
        drop(l);
        self.shared.event_delivered();
        self.shared.event_acked_by_handler();
        true
    }

    /// Its events: raised, delivered, acknowledged.
    pub fn event_counts(&self) -> EventCounts {
        let s = &self.shared;
        EventCounts {
            raised: s.raised.load(Ordering::Relaxed),
            delivered: s.delivered.load(Ordering::Relaxed),
            acked: s.acked.load(Ordering::Acquire),
        }
    }

    /// Acknowledges `n` events taken from a completion channel (`ibv_ack_cq_events`),
    /// best in batches: one call for many events. Acknowledging more than were
    /// delivered and not yet acknowledged is an error, and acknowledges nothing.
    pub fn ack_events(&self, n: u64) -> Result<()> {
        let s = &self.shared;
        let mut cur = s.acked.load(Ordering::Relaxed);
        loop {
            let delivered = s.delivered.load(Ordering::Relaxed);
            if cur.checked_add(n).is_none_or(|x| x > delivered) {
                return Err(Error::InvalidArgument(
                    "acknowledging more CQ events than were delivered",
                ));
            }
            match s
                .acked
                .compare_exchange_weak(cur, cur + n, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return Ok(()),
                Err(now) => cur = now,
            }
        }
    }

    /// Whether `self` and `other` are the same CQ.
    pub fn same_as(&self, other: &Cq) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// Collects `n` completions, waiting up to `timeout` in all (busy-polling in hybrid
    /// mode or when a handler takes the CQ's events, otherwise blocking on
    /// notifications). Returns what arrived.
    pub fn wait_for(&self, n: usize, timeout: Duration) -> Vec<Completion> {
        let deadline = Instant::now() + timeout;
        let mut got = Vec::with_capacity(n);
        let mut buf = vec![empty_completion(); n.clamp(1, 64)];
        let dev = self.shared.dev.upgrade();
        let hybrid = dev
            .as_ref()
            .is_some_and(|d| d.cfg.progress == ProgressMode::Hybrid);
        // Arming a CQ whose events a handler takes would hand that handler events it
        // did not ask for.
        let handled = dev
            .as_ref()
            .zip(self.handler())
            .is_some_and(|(d, id)| d.handlers.get(id).is_some());
        while got.len() < n {
            let want = (n - got.len()).min(buf.len());
            let k = self.poll(&mut buf[..want]);
            got.extend_from_slice(&buf[..k]);
            if k > 0 {
                continue;
            }
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            if hybrid || handled {
                std::thread::yield_now();
            } else {
                self.req_notify(false);
                // A completion may have arrived before arming: look once more.
                let k = self.poll(&mut buf[..want]);
                got.extend_from_slice(&buf[..k]);
                if k == 0 {
                    self.wait_notify(deadline - now);
                }
            }
        }
        got
    }
}

#[cfg(test)]
#[path = "cq_run_tests.rs"]
mod run_tests;

#[cfg(test)]
#[path = "cq_poll_tests.rs"]
mod poll_tests;
