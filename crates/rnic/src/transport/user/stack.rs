//! A device's own TCP stack behind its lock, and the thread that serves its link.
//!
//! Lock order: a QP's lock, then the stack's (a QP's transport takes it inside the QP's
//! progress); the simulated network's hub lock is taken inside the stack's and takes
//! none. The stack thread never takes a QP's lock: it wakes the QP's engine instead
//! (an eventfd in the engine's epoll set, one per connection: [`Waker`]), and
//! notifies the condition variable that blocking users (the CM's MPA exchange,
//! `connect`, listeners) wait on. Packets handed over while the stack is held are
//! taken by the holder before it lets go ([`super::backlog`]).

use super::link::{Incoming, Link, SimLink};
use super::stream::UserStream;
use super::{UserLink, UserTcp, UserTcpStats};
use crate::engine::now;
use crate::error::{Error, Result};
use crate::sys::eventfd::EventFd;
use crate::sys::timerfd::TimerFd;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use softrnic_tcp::{
    ConnId, ListenerId, NoRaw, Readiness, RxMode, Stack, StackConfig, StackError, StackEvent,
};
use std::collections::{HashMap, HashSet};
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long after its planned time the stack thread's epoll wait ends by itself, in
/// case its timer's event never came (the timer, to the microsecond, is what wakes it).
const BACKSTOP: Duration = Duration::from_millis(1);

const WAKE: Token = Token(0);
const LINK: Token = Token(1);
const TIMER: Token = Token(2);

/// How a connection's engine learns that it can go on, shared by the stack and the
/// connection's transport: an eventfd the engine's epoll set holds under the QP's
/// token (edge-triggered like a socket: a write is an event), written when the
/// connection changes in a way the QP waits for, and flags that let a QP that polls
/// find "nothing to read" without taking the stack's lock.
///
/// No wake-up is lost: the stack stores `readable` and then takes `want_read`; a
/// reader stores `want_read` and then loads `readable` (all sequentially consistent),
/// so either the reader sees the octets or the stack sees the reader waiting.
pub(crate) struct Signal {
    pub(crate) fd: EventFd,
    /// In-order octets, or the end of the stream, may be waiting.
    pub(crate) readable: AtomicBool,
    /// The QP's last read found nothing: wake it when something comes.
    pub(crate) want_read: AtomicBool,
    /// The QP's last send found no room: wake it when there is.
    pub(crate) want_write: AtomicBool,
}

impl Signal {
    pub(crate) fn new() -> io::Result<Signal> {
        Ok(Signal {
            fd: EventFd::new()?,
            readable: AtomicBool::new(true),
            want_read: AtomicBool::new(false),
            want_write: AtomicBool::new(false),
        })
    }
}

/// The stack and its link, behind the lock.
pub(crate) struct Inner {
    pub(crate) stack: Stack,
    link: Box<dyn Link>,
    /// A packet being sent (the link's MTU long).
    buf: Vec<u8>,
    /// The signals of the connections in RDMA mode (with a transport).
    pub(crate) signals: HashMap<ConnId, Arc<Signal>>,
    /// The connections whose MPA Request a listener reads, and whose listener.
    watched: HashMap<ConnId, ListenerId>,
    /// Per listener, its watched connections that became readable or ended since it
    /// last looked: a listener's wake reads these, not every exchange.
    news: HashMap<ListenerId, HashSet<ConnId>>,
    /// When the stack thread wakes next by itself (`None`: only when woken): its
    /// timer descriptor is armed for it, by whichever thread plans it
    /// ([`UserStack::plan`]).
    pub(super) planned: Option<Duration>,
    /// Packet buffers read out of (zero-copy receive), on their way back to the link.
    spent: Vec<Vec<u8>>,
    /// When this stack last took a packet off its link (for tracing a timeout).
    pub(super) last_rx: Option<Duration>,
    /// [`UserStack::due`], kept by every pump.
    due: Arc<AtomicU64>,
}

/// Read packet buffers gathered before they go back to the link (one hand-over of
/// several; a SimNet takes its lock for it).
const RECYCLE_BATCH: usize = 8;

impl Inner {
    /// Sends everything the stack has to send.
    pub(crate) fn flush(&mut self, now: Duration) {
        let Inner {
            stack, link, buf, ..
        } = self;
        if link.lends() {
            while link.send_lent(now, buf, &mut |out| stack.poll_transmit_lent(now, out)) {}
        } else {
            while link.send_with(now, buf, &mut |out| stack.poll_transmit(now, out)) {}
        }
    }

    /// Sends what connection `id` has to send; on a link that carries payloads by
    /// reference, a large record's segments go without copying its octets.
    fn flush_conn(&mut self, id: ConnId, now: Duration) {
        let Inner {
            stack, link, buf, ..
        } = self;
        if link.lends() {
            while link.send_lent(now, buf, &mut |out| {
                stack.poll_transmit_for_lent(id, now, out)
            }) {}
        } else {
            while link.send_with(now, buf, &mut |out| stack.poll_transmit_for(id, now, out)) {}
        }
    }

    /// After a read of connection `id`: the packet buffers it was read out of go back
    /// to the link, a batch at a time.
    pub(crate) fn reclaim(&mut self, id: ConnId) {
        self.stack.take_spent(id, &mut self.spent);
        if self.spent.len() >= RECYCLE_BATCH {
            self.link.recycle(&mut self.spent);
        }
    }

    /// One turn of the stack thread: packets in, timers, packets out, readiness.
    /// Returns whether blocking waiters must be notified.
    pub(super) fn pump(&mut self, now: Duration) -> bool {
        let Inner {
            stack,
            link,
            last_rx,
            ..
        } = self;
        loop {
            // A packet that does not parse is counted by the stack.
            let more = link.receive(now, &mut |p, check| {
                *last_rx = Some(now);
                match p {
                    Incoming::Slice(p) => {
                        let _ = stack.handle_packet_checked(now, p, &mut NoRaw, check);
                        None
                    }
                    Incoming::Buffer(buf, len) => {
                        stack.handle_packet_buf(now, buf, len, &mut NoRaw, check)
                    }
                    Incoming::Split(head, len, body) => {
                        Some(stack.handle_packet_split(now, head, len, &body, &mut NoRaw, check))
                    }
                }
            });
            if !more {
                break;
            }
        }
        if link.poll_timeout().is_some_and(|t| t <= now) {
            link.handle_timeout(now);
        }
        if stack.poll_timeout().is_some_and(|t| t <= now) {
            let traced = tracing::enabled!(tracing::Level::DEBUG);
            let before =
                traced.then(|| (stack.tcp_totals().timeouts, stack.recovery_snapshots(now)));
            stack.handle_timeout(now);
            if let Some((timeouts, conns)) = before.filter(|b| stack.tcp_totals().timeouts > b.0) {
                // What the sender knew when its timer fired, and what the link held
                // (a peer whose stack has not taken its packets is a stalled thread,
                // not a loss): `RUST_LOG=softrnic_rnic::transport::user=debug`.
                tracing::debug!(
                    thread = std::thread::current().name().unwrap_or("?"),
                    since_last_rx = ?last_rx.map(|t| now.saturating_sub(t)),
                    backlog = %link.backlog(now),
                    timeouts_before = timeouts,
                    conns_before = ?conns,
                    "retransmission timeout"
                );
            }
        }
        self.flush(now);
        self.publish_due();
        self.dispatch()
    }

    /// Tells pollers when this stack next has work ([`UserStack::serve_due`]).
    fn publish_due(&self) {
        self.due
            .store(self.next_wake().map_or(u64::MAX, nanos), Ordering::SeqCst);
    }

    /// Wakes the engines of the connections whose change their QP waits for; true if
    /// a connection without a QP (or a listener) changed.
    fn dispatch(&mut self) -> bool {
        let mut notify = false;
        while let Some(ev) = self.stack.poll_event() {
            match ev {
                StackEvent::Incoming(_) => notify = true,
                StackEvent::Conn { id, what } => match self.signals.get(&id) {
                    Some(sig) => {
                        let end = what.intersects(
                            Readiness::PEER_CLOSED
                                | Readiness::RESET
                                | Readiness::TIMED_OUT
                                | Readiness::CLOSED,
                        );
                        if end || what.contains(Readiness::READABLE) {
                            sig.readable.store(true, Ordering::SeqCst);
                        }
                        crate::chaos::point();
                        let read = what.contains(Readiness::READABLE)
                            && sig.want_read.swap(false, Ordering::SeqCst);
                        let write = what.contains(Readiness::WRITABLE)
                            && sig.want_write.swap(false, Ordering::SeqCst);
                        if end || read || write {
                            let _ = sig.fd.set();
                        }
                    }
                    None => {
                        if let Some(&l) = self.watched.get(&id)
                            && what.intersects(
                                Readiness::READABLE
                                    | Readiness::PEER_CLOSED
                                    | Readiness::RESET
                                    | Readiness::TIMED_OUT
                                    | Readiness::CLOSED,
                            )
                        {
                            self.news.entry(l).or_default().insert(id);
                        }
                        notify = true;
                    }
                },
            }
        }
        notify
    }

    /// Connection `id`'s news goes to listener `l` from now on.
    pub(crate) fn watch(&mut self, id: ConnId, l: ListenerId) {
        self.watched.insert(id, l);
    }

    /// Connection `id` is no longer a listener's.
    pub(crate) fn unwatch(&mut self, id: ConnId) {
        if let Some(l) = self.watched.remove(&id)
            && let Some(n) = self.news.get_mut(&l)
        {
            n.remove(&id);
        }
    }

    /// The connections of listener `l` that had news since it last asked.
    pub(crate) fn take_news(&mut self, l: ListenerId) -> Vec<ConnId> {
        self.news
            .get_mut(&l)
            .map(|n| n.drain().collect())
            .unwrap_or_default()
    }

    /// Listener `l` is gone: it watches nothing any more.
    pub(crate) fn forget(&mut self, l: ListenerId) {
        self.watched.retain(|_, w| *w != l);
        self.news.remove(&l);
    }

    /// When the stack thread must run next by itself.
    pub(super) fn next_wake(&self) -> Option<Duration> {
        [self.stack.poll_timeout(), self.link.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
    }
}

/// A device's own TCP: shared by the stack thread, the connections' streams and
/// transports, and the device's listeners.
pub(crate) struct UserStack {
    pub(super) inner: Mutex<Inner>,
    /// Blocking users wait here for their connection (or listener) to change.
    pub(crate) cv: Condvar,
    /// Wakes the stack thread.
    pub(crate) wake: Arc<EventFd>,
    /// Packets were handed to this stack while another thread held it: whoever holds
    /// it takes them before letting go ([`UserStack::after`]), as Linux's
    /// `release_sock` runs a socket's backlog, instead of leaving them to the stack
    /// thread's wake-up.
    pub(super) backlog: AtomicBool,
    /// The holder will look at `backlog` once more before it lets go
    /// ([`super::backlog::Taking`]): a hand-over meanwhile needs no wake-up.
    pub(super) taker: AtomicBool,
    stop: AtomicBool,
    pub(super) addr: Ipv4Addr,
    /// A frame link's counters.
    link_stats: Option<super::netlink::SharedStats>,
    /// The simulated network this stack is on, whose held-back packets a polling
    /// thread delivers when they fall due ([`UserStack::serve_due`]).
    pub(super) sim: Option<super::SimNet>,
    /// When a timer of this stack, or a packet its link holds, falls due
    /// (nanoseconds on the engines' clock, `u64::MAX`: never), as of its last pump, or
    /// earlier: a poller that finds it passed pumps the stack itself.
    pub(super) due: Arc<AtomicU64>,
    /// Turns of the stack thread (each a wake-up, for a timer or a hand-over).
    pub(super) turns: AtomicU64,
    /// Pumps by polling threads for work that fell due ([`UserStack::serve_due`]).
    pub(super) polled_pumps: AtomicU64,
    /// Packets handed to this stack inline that found it held by another thread
    /// (left in the backlog).
    pub(super) busy_handovers: AtomicU64,
    /// The stack thread's timer: it wakes when this expires, to the microsecond (a
    /// loss probe due after two round trips of microseconds, or a packet the simulated
    /// network holds back 200 us, must not wait for epoll's whole milliseconds).
    /// Armed under the stack's lock only.
    pub(super) timer: TimerFd,
    /// Tests hold this to keep the stack thread from taking a turn.
    #[cfg(test)]
    pub(super) gate: Mutex<()>,
    /// Tests: run once at the start of the next [`UserStack::plan`] (to hand a packet
    /// over while a holder arms the stack thread's timer).
    #[cfg(test)]
    pub(super) on_plan: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

/// The device's handle: stops the stack thread when the device closes.
pub(crate) struct UserStackHandle {
    pub(crate) stack: Arc<UserStack>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl UserStackHandle {
    /// Stops the stack thread and leaves the link (a frame link closes its device).
    /// Idempotent; a connection still open afterwards sends into nothing.
    pub(crate) fn shutdown(&self) {
        if !self.stack.stop.load(Ordering::Acquire) {
            // Who did the timed work: the stack thread, woken for it, or the threads
            // that poll (`RUST_LOG=softrnic_rnic::transport::user=debug`).
            tracing::debug!(
                addr = %self.stack.addr,
                stack_thread_turns = self.stack.turns.load(Ordering::Relaxed),
                polled_pumps = self.stack.polled_pumps.load(Ordering::Relaxed),
                "own TCP stack stops"
            );
        }
        self.stack.stop.store(true, Ordering::Release);
        let _ = self.stack.wake.set();
        let thread = self.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(t) = thread
            && t.thread().id() != std::thread::current().id()
        {
            let _ = t.join();
        }
        if let Ok(mut g) = self.stack.inner.lock() {
            g.link.detach();
        }
    }
}

impl Drop for UserStackHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl UserStack {
    /// Starts a device's stack on its link, with its thread. `keepalive` is the
    /// device's idle time before probes, used unless `cfg.tcp` has its own.
    pub(crate) fn start(
        cfg: &UserTcp,
        keepalive: Duration,
        serial: u32,
    ) -> Result<UserStackHandle> {
        let wake = Arc::new(EventFd::new()?);
        let woken = wake.clone();
        let waker: Arc<dyn Fn() + Send + Sync> = Arc::new(move || {
            let _ = woken.set();
        });
        let (sim, link, link_stats): (_, Box<dyn Link>, _) = match &cfg.link {
            UserLink::Sim(net) => (
                Some(net.clone()),
                Box::new(SimLink::attach(net, cfg.addr, waker)?),
                None,
            ),
            _ => {
                let (link, stats) = super::netlink::open(cfg)?;
                (None, link, Some(stats))
            }
        };
        let mtu = link.mtu();
        if mtu < 68 {
            return Err(Error::InvalidArgument("the link's MTU is below IPv4's 68"));
        }
        let mut tcp = cfg.tcp.clone();
        // Only the in-process network checksums for its ends; a frame link's peer
        // (Linux) wants real checksums.
        tcp.checksum_offload &= sim.is_some();
        tcp.mss = tcp.mss.min(u16::try_from(mtu - 40).unwrap_or(u16::MAX));
        if tcp.keepalive.is_none() {
            tcp.keepalive = Some(softrnic_tcp::Keepalive {
                idle: keepalive,
                interval: Duration::from_secs(1),
                probes: 5,
            });
        }
        // An FPDU of a whole segment must fit the send buffer with room to spare.
        tcp.send_buffer = tcp.send_buffer.max(4 * usize::from(tcp.mss));
        let mut secret = [0u8; 8];
        crate::sys::random::fill(&mut secret)?;
        let stack = Stack::new(
            StackConfig {
                tcp,
                max_connections: cfg.max_connections,
                max_half_open: cfg.max_half_open,
                secret: u64::from_ne_bytes(secret),
                ..StackConfig::default()
            },
            &[cfg.addr],
        );
        let due = Arc::new(AtomicU64::new(u64::MAX));
        let timer = TimerFd::new()?;
        let me = Arc::new(UserStack {
            inner: Mutex::new(Inner {
                stack,
                link,
                buf: vec![0; mtu],
                signals: HashMap::new(),
                watched: HashMap::new(),
                news: HashMap::new(),
                planned: None,
                spent: Vec::new(),
                last_rx: None,
                due: due.clone(),
            }),
            cv: Condvar::new(),
            wake,
            backlog: AtomicBool::new(false),
            taker: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            addr: cfg.addr,
            link_stats,
            sim: sim.clone(),
            due,
            turns: AtomicU64::new(0),
            polled_pumps: AtomicU64::new(0),
            busy_handovers: AtomicU64::new(0),
            timer,
            #[cfg(test)]
            gate: Mutex::new(()),
            #[cfg(test)]
            on_plan: Mutex::new(None),
        });
        if let Some(net) = sim {
            let weak = Arc::downgrade(&me);
            net.deliver_inline(
                cfg.addr,
                Arc::new(move || weak.upgrade().is_some_and(|s| s.try_pump())),
            );
        }
        let poll = Poll::new()?;
        let fd = me.wake.as_fd().as_raw_fd();
        poll.registry()
            .register(&mut SourceFd(&fd), WAKE, Interest::READABLE)?;
        if let Some(fd) = me.lock()?.link.fd() {
            poll.registry()
                .register(&mut SourceFd(&fd), LINK, Interest::READABLE)?;
        }
        let tfd = me.timer.as_fd().as_raw_fd();
        poll.registry()
            .register(&mut SourceFd(&tfd), TIMER, Interest::READABLE)?;
        let run = me.clone();
        let thread = std::thread::Builder::new()
            .name(format!("softrnic-tcp-{serial}"))
            .spawn(move || run.run(poll))?;
        Ok(UserStackHandle {
            stack: me,
            thread: Mutex::new(Some(thread)),
        })
    }

    pub(crate) fn lock(&self) -> io::Result<MutexGuard<'_, Inner>> {
        self.inner
            .lock()
            .map_err(|_| io::Error::other("the TCP stack's lock is poisoned"))
    }

    /// The stack thread: serve the link and the timers until the device closes.
    fn run(&self, mut poll: Poll) {
        let mut events = Events::with_capacity(8);
        loop {
            if self.stop.load(Ordering::Acquire) {
                break;
            }
            let planned = {
                #[cfg(test)]
                let _gate = self.gate.lock();
                self.turns.fetch_add(1, Ordering::Relaxed);
                let Ok(mut g) = self.lock_taking() else {
                    break;
                };
                // This pump takes everything handed over so far.
                self.backlog.store(false, Ordering::SeqCst);
                if g.pump(now()) {
                    self.cv.notify_all();
                }
                // Its timer, armed under the lock as every thread that plans arms it,
                // while this thread still promises to take hand-overs: one that came
                // during the arming (a system call) found no promise and woke this
                // thread again, a turn for nothing.
                let next = g.next_wake();
                g.planned = None;
                self.plan(&mut g, next);
                // And what its own packets' answers bring back (which re-plans if it
                // takes any), as the last thing under the lock.
                self.release(&mut g);
                g.planned
            };
            // The timer wakes it; epoll's own timeout, a millisecond later, only if
            // the timer's event were lost.
            let backstop = planned.map(|t| t.saturating_sub(now()) + BACKSTOP);
            if let Err(e) = poll.poll(&mut events, backstop)
                && e.kind() != io::ErrorKind::Interrupted
            {
                break;
            }
            if events.iter().any(|e| e.token() == TIMER) {
                self.timer.clear();
            }
        }
    }

    /// Serves the link in the calling thread, if nobody holds the stack (a sender on
    /// the simulated network hands its packets over so, as kernel loopback does);
    /// else leaves them in the backlog ([`super::backlog`]), and returns false if the
    /// holder will not take them (the stack thread must be woken).
    ///
    /// A thread serving the link so takes, before it lets go, what other threads
    /// handed over meanwhile (as a QP's read or send does): two threads hand packets
    /// to one stack at once whenever one delivers what the network held back
    /// ([`UserStack::serve_due`]) while a sender's packets arrive, and a holder that
    /// took none of them made each such sender write the stack thread's eventfd and
    /// the stack thread wake for it (a lossy 2 s run at 64 KiB: about 37,000 writes
    /// from the sending thread, its bottleneck, against 4,000 in a clean one).
    fn try_pump(&self) -> bool {
        let Ok(mut g) = self.inner.try_lock() else {
            self.busy_handovers.fetch_add(1, Ordering::Relaxed);
            self.backlog.store(true, Ordering::SeqCst);
            // Handled if the holder looks again before it lets go.
            return self.taker.load(Ordering::SeqCst);
        };
        self.taker.store(true, Ordering::SeqCst);
        self.backlog.store(false, Ordering::SeqCst);
        if g.pump(now()) {
            self.cv.notify_all();
        }
        // The stack thread sleeps until its planned time: a timer due earlier now
        // moves it.
        let next = g.next_wake();
        self.plan(&mut g, next);
        self.release(&mut g);
        true
    }

    /// After a user's call on connection `id`: its packets go out now, from this
    /// thread, and the stack thread is woken if the connection needs it earlier than
    /// it planned (a retransmission timer just started).
    pub(crate) fn after(&self, g: &mut Inner, id: ConnId) {
        let t = now();
        g.flush_conn(id, t);
        self.take_backlog(g);
        if let Some(due) = g.stack.timeout_of(id) {
            self.due.fetch_min(nanos(due), Ordering::SeqCst);
            self.plan(g, Some(due));
        }
    }

    /// After a call that may have made anything due (a close, an accept): everything
    /// goes out, and the stack thread takes a fresh look.
    pub(crate) fn after_all(&self, g: &mut Inner) {
        g.flush(now());
        self.take_backlog(g);
        let _ = self.wake.set();
    }

    /// Waits on the stack's condition variable until `deadline` at most; `None` when
    /// the deadline has passed.
    pub(crate) fn wait_until<'a>(
        &self,
        g: MutexGuard<'a, Inner>,
        deadline: Instant,
    ) -> io::Result<Option<MutexGuard<'a, Inner>>> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(None);
        }
        let (g, _) = self
            .cv
            .wait_timeout(g, left)
            .map_err(|_| io::Error::other("the TCP stack's lock is poisoned"))?;
        Ok(Some(g))
    }

    /// Opens a connection to `remote` and waits until it is established, by `deadline`.
    pub(crate) fn connect(
        self: &Arc<Self>,
        remote: SocketAddrV4,
        deadline: Instant,
    ) -> io::Result<UserStream> {
        let mut g = self.lock()?;
        let id = g
            .stack
            .connect(now(), Some(self.addr), remote, RxMode::Stream)
            .map_err(to_io)?;
        let local = g.stack.connection(id).map_err(to_io)?.local();
        self.after(&mut g, id);
        loop {
            let state = g.stack.state(id).map_err(to_io)?;
            if state.is_synchronized() && state != softrnic_tcp::State::SynReceived {
                return Ok(UserStream::new(self.clone(), id, local, remote));
            }
            if state == softrnic_tcp::State::Closed {
                let _ = g.stack.close(id);
                return Err(io::ErrorKind::ConnectionRefused.into());
            }
            g = match self.wait_until(g, deadline)? {
                Some(g) => g,
                None => {
                    let mut g = self.lock()?;
                    let _ = g.stack.abort(id);
                    self.after_all(&mut g);
                    return Err(io::ErrorKind::TimedOut.into());
                }
            };
        }
    }

    /// What the stack has done.
    pub(crate) fn stats(&self) -> UserTcpStats {
        self.inner
            .lock()
            .map(|g| UserTcpStats {
                stack: g.stack.stats().clone(),
                tcp: g.stack.tcp_totals(),
                stack_thread_turns: self.turns.load(Ordering::Relaxed),
                polled_pumps: self.polled_pumps.load(Ordering::Relaxed),
                busy_handovers: self.busy_handovers.load(Ordering::Relaxed),
                link: self
                    .link_stats
                    .as_ref()
                    .and_then(|s| s.lock().ok().map(|s| s.clone())),
            })
            .unwrap_or_default()
    }
}

/// A stack error as the `io::Error` a socket would give.
pub(crate) fn to_io(e: StackError) -> io::Error {
    let kind = match e {
        StackError::WouldBlock => io::ErrorKind::WouldBlock,
        StackError::InvalidId | StackError::InvalidListener => io::ErrorKind::NotConnected,
        StackError::AddrNotAvailable(_) | StackError::NoFreePorts => {
            io::ErrorKind::AddrNotAvailable
        }
        StackError::AddrInUse(_) => io::ErrorKind::AddrInUse,
        StackError::TooManyConnections => return io::Error::other(e),
        StackError::Closed => io::ErrorKind::BrokenPipe,
        StackError::Reset => io::ErrorKind::ConnectionReset,
        StackError::TimedOut => io::ErrorKind::TimedOut,
    };
    io::Error::new(kind, e)
}

/// `t` in nanoseconds, saturating.
pub(super) fn nanos(t: Duration) -> u64 {
    u64::try_from(t.as_nanos()).unwrap_or(u64::MAX - 1)
}
