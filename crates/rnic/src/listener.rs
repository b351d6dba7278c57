//! The passive side of the connection manager: a [`Listener`] reads the MPA Requests of
//! all its incoming connections at once, without blocking on any of them, and
//! [`Listener::accept`] returns whichever Request is complete first. A peer that sends
//! nothing, or one octet now and then, delays no other client.
//!
//! Every input has a bound and a deadline: a connection's whole Request must arrive
//! within [`DeviceConfig::mpa_request_timeout`] of its TCP connection being taken (RFC
//! 5044's MPA timer, for the whole exchange, not for each read); a listener reads at
//! most [`DeviceConfig::max_listener_exchanges`] Requests at once, and when a new
//! connection finds it full, the oldest exchange in progress is dropped for it (the
//! device-wide [`DeviceConfig::max_mpa_exchanges`] counts these too). A connection
//! that turns out not to speak MPA, or sends a Request softrnic cannot parse, is
//! dropped at once. Dropped connections are reset (RST), so they hold nothing, and
//! none of this reaches the application: `accept` only returns well-formed Requests.
//! [`Listener::stats`] counts what happened to each connection.
//!
//! Exchanges progress while a thread waits in `accept` (on this listener's own epoll
//! instance); between calls, new connections wait in the kernel's backlog and their
//! octets in the socket buffers, and deadlines run from when `accept` takes them.
//!
//! [`DeviceConfig::mpa_request_timeout`]: crate::DeviceConfig::mpa_request_timeout
//! [`DeviceConfig::max_listener_exchanges`]: crate::DeviceConfig::max_listener_exchanges
//! [`DeviceConfig::max_mpa_exchanges`]: crate::DeviceConfig::max_mpa_exchanges

use crate::cm::ConnRequest;
use crate::device::{Device, ExchangeSlot};
use crate::error::{Error, Result};
use crate::frame_io::FrameReader;
use crate::sys;
use crate::trace;
use crate::transport::socket::KernelStream;
use crate::transport::user::listener::UserListener;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use std::collections::{HashMap, VecDeque};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The listening socket's token; exchanges count up from 0.
const LISTENING: Token = Token(usize::MAX);

/// What a listener did with the connections it took, since it was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListenerStats {
    /// TCP connections taken off the listening socket.
    pub connections: u64,
    /// Complete, well-formed MPA Requests handed to `accept`.
    pub requests: u64,
    /// Dropped: the whole Request did not arrive in time.
    pub timed_out: u64,
    /// Dropped: the oldest exchange in progress, to make room for a new connection.
    pub evicted: u64,
    /// Dropped at once: the device had no room for another exchange, and this listener
    /// none of its own to give up.
    pub refused: u64,
    /// Dropped: not MPA, a malformed Request, or an I/O error.
    pub malformed: u64,
    /// The peer closed before its Request was complete.
    pub closed: u64,
    /// Exchanges in progress now.
    pub in_progress: u64,
    /// Reads of exchanges in progress, each because its connection had news (octets,
    /// or its end) or had just been taken: a wake costs the exchanges that changed,
    /// not all of them.
    pub examined: u64,
}

/// What happened to a listener's connections, counted as it happens (both backends).
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) connections: AtomicU64,
    pub(crate) requests: AtomicU64,
    pub(crate) timed_out: AtomicU64,
    pub(crate) evicted: AtomicU64,
    pub(crate) refused: AtomicU64,
    pub(crate) malformed: AtomicU64,
    pub(crate) closed: AtomicU64,
    pub(crate) in_progress: AtomicU64,
    pub(crate) examined: AtomicU64,
}

impl Counters {
    pub(crate) fn snapshot(&self) -> ListenerStats {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ListenerStats {
            connections: get(&self.connections),
            requests: get(&self.requests),
            timed_out: get(&self.timed_out),
            evicted: get(&self.evicted),
            refused: get(&self.refused),
            malformed: get(&self.malformed),
            closed: get(&self.closed),
            in_progress: get(&self.in_progress),
            examined: get(&self.examined),
        }
    }
}

pub(crate) fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// One connection whose MPA Request is being read.
struct Exchange {
    stream: TcpStream,
    reader: FrameReader,
    deadline: Instant,
    peer: SocketAddr,
    _slot: ExchangeSlot,
}

/// The exchanges in progress, and what waits for `accept`.
struct State {
    poll: Poll,
    events: Events,
    exchanges: HashMap<usize, Exchange>,
    /// Tokens in the order their connections were taken, oldest first, which is also
    /// deadline order; tokens of exchanges that have ended are skipped when met.
    order: VecDeque<usize>,
    next: usize,
    /// Requests complete and well-formed, not yet returned by `accept`.
    done: VecDeque<ConnRequest>,
    tokens: Vec<usize>,
}

/// A listening endpoint: on kernel TCP, or on the device's own TCP
/// ([`crate::DeviceConfig::user_tcp`]).
pub struct Listener {
    dev: Device,
    backend: Backend,
}

enum Backend {
    Kernel(KernelListener),
    User(UserListener),
}

/// A listening kernel TCP socket and the MPA exchanges of its connections.
struct KernelListener {
    dev: Device,
    inner: TcpListener,
    state: Mutex<State>,
    counters: Counters,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("addr", &self.local_addr().ok())
            .field("stats", &self.stats())
            .finish()
    }
}

impl Device {
    /// Listens for connections (on the device's own TCP when it has one: then `addr`
    /// is an IPv4 address of the device, or 0.0.0.0, and port 0 takes a free port).
    pub fn listen(&self, addr: impl ToSocketAddrs) -> Result<Listener> {
        if let Some(user) = &self.shared.user {
            let addr = addr
                .to_socket_addrs()?
                .find_map(|a| match a {
                    SocketAddr::V4(v4) => Some(v4),
                    SocketAddr::V6(_) => None,
                })
                .ok_or(Error::InvalidArgument(
                    "the device's own TCP listens on IPv4 only",
                ))?;
            return Ok(Listener {
                dev: self.clone(),
                backend: Backend::User(UserListener::bind(&user.stack, addr)?),
            });
        }
        let inner = TcpListener::bind(addr)?;
        crate::same_host::listening(self.shared.cfg.same_host_tcp, &inner);
        inner.set_nonblocking(true)?;
        let poll = Poll::new()?;
        poll.registry().register(
            &mut SourceFd(&inner.as_raw_fd()),
            LISTENING,
            Interest::READABLE,
        )?;
        let kernel = KernelListener {
            dev: self.clone(),
            inner,
            state: Mutex::new(State {
                poll,
                events: Events::with_capacity(256),
                exchanges: HashMap::new(),
                order: VecDeque::new(),
                next: 0,
                done: VecDeque::new(),
                tokens: Vec::new(),
            }),
            counters: Counters::default(),
        };
        Ok(Listener {
            dev: self.clone(),
            backend: Backend::Kernel(kernel),
        })
    }
}

impl Listener {
    /// The bound address.
    pub fn local_addr(&self) -> Result<SocketAddr> {
        match &self.backend {
            Backend::Kernel(k) => Ok(k.inner.local_addr()?),
            Backend::User(u) => Ok(u.local_addr()),
        }
    }

    /// Waits for the next complete MPA Request, from whichever connection completes
    /// one first.
    pub fn accept(&self) -> Result<ConnRequest> {
        loop {
            if let Some(r) = self.accept_until(None)? {
                return Ok(r);
            }
        }
    }

    /// As [`Listener::accept`], giving up after `timeout` (`Ok(None)`); exchanges in
    /// progress go on at the next call.
    pub fn accept_timeout(&self, timeout: Duration) -> Result<Option<ConnRequest>> {
        self.accept_until(Some(Instant::now() + timeout))
    }

    /// What happened to the connections this listener took.
    pub fn stats(&self) -> ListenerStats {
        match &self.backend {
            Backend::Kernel(k) => k.stats(),
            Backend::User(u) => u.stats(),
        }
    }

    fn accept_until(&self, deadline: Option<Instant>) -> Result<Option<ConnRequest>> {
        match &self.backend {
            Backend::Kernel(k) => k.accept_until(deadline),
            Backend::User(u) => u.accept_until(&self.dev, deadline),
        }
    }
}

impl KernelListener {
    fn stats(&self) -> ListenerStats {
        self.counters.snapshot()
    }

    fn accept_until(&self, deadline: Option<Instant>) -> Result<Option<ConnRequest>> {
        let mut st = self.state.lock()?;
        let st = &mut *st;
        loop {
            self.take_connections(st);
            let now = Instant::now();
            self.expire(st, now);
            if let Some(r) = st.done.pop_front() {
                return Ok(Some(r));
            }
            if deadline.is_some_and(|d| now >= d) {
                return Ok(None);
            }
            let next_expiry = st.oldest().map(|e| e.deadline);
            let wait = [deadline, next_expiry]
                .into_iter()
                .flatten()
                .min()
                .map(|d| d.saturating_duration_since(now));
            if let Err(e) = st.poll.poll(&mut st.events, wait)
                && e.kind() != std::io::ErrorKind::Interrupted
            {
                return Err(e.into());
            }
            st.tokens.clear();
            st.tokens.extend(st.events.iter().map(|e| e.token().0));
            for i in 0..st.tokens.len() {
                let t = st.tokens[i];
                if t != LISTENING.0 {
                    self.progress(st, t);
                }
            }
        }
    }

    /// Takes every connection waiting on the listening socket and starts its exchange.
    fn take_connections(&self, st: &mut State) {
        loop {
            let s = match self.inner.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::Interrupted | std::io::ErrorKind::ConnectionAborted
                    ) =>
                {
                    continue;
                }
                // Out of descriptors or memory: the connections wait in the backlog,
                // and the next call tries again (each exchange's end frees one).
                Err(_) => return,
            };
            bump(&self.counters.connections);
            self.start(st, s);
        }
    }

    fn start(&self, st: &mut State, s: TcpStream) {
        let Ok(peer) = s.peer_addr() else {
            drop_reset(s);
            return;
        };
        let max = self.dev.shared.cfg.max_listener_exchanges;
        let mut slot = None;
        if st.exchanges.len() < max {
            slot = self.dev.shared.exchange_slot();
        }
        if slot.is_none() && self.evict_oldest(st) {
            slot = self.dev.shared.exchange_slot();
        }
        let Some(slot) = slot else {
            bump(&self.counters.refused);
            trace::mpa_dropped(self.dev.shared.serial, peer, "refused: too many exchanges");
            drop_reset(s);
            return;
        };
        if s.set_nonblocking(true).is_err() || s.set_nodelay(true).is_err() {
            bump(&self.counters.malformed);
            drop_reset(s);
            return;
        }
        let token = st.next;
        st.next = st.next.wrapping_add(1) % LISTENING.0;
        let fd = s.as_raw_fd();
        if st
            .poll
            .registry()
            .register(&mut SourceFd(&fd), Token(token), Interest::READABLE)
            .is_err()
        {
            bump(&self.counters.malformed);
            drop_reset(s);
            return;
        }
        let deadline = Instant::now() + self.dev.shared.cfg.mpa_request_timeout;
        st.exchanges.insert(
            token,
            Exchange {
                stream: s,
                reader: FrameReader::default(),
                deadline,
                peer,
                _slot: slot,
            },
        );
        st.order.push_back(token);
        self.counters.in_progress.fetch_add(1, Ordering::Relaxed);
        // The Request may be in already (registration reports readiness from now on).
        self.progress(st, token);
    }

    /// Reads what the exchange `token` has for us; a complete Request goes to `done`.
    fn progress(&self, st: &mut State, token: usize) {
        let Some(ex) = st.exchanges.get_mut(&token) else {
            return;
        };
        bump(&self.counters.examined);
        let r = ex.reader.read_from(&mut ex.stream);
        let serial = self.dev.shared.serial;
        match r {
            Ok(false) => {}
            Ok(true) => {
                let Some(ex) = self.end(st, token) else {
                    return;
                };
                let peer = ex.peer;
                match self.finish(ex) {
                    Ok(req) => {
                        bump(&self.counters.requests);
                        st.done.push_back(req);
                    }
                    Err(e) => {
                        bump(&self.counters.malformed);
                        trace::mpa_dropped(serial, peer, &e.to_string());
                    }
                }
            }
            Err(e) => {
                if let Some(ex) = self.end(st, token) {
                    bump(if ex.reader.eof() {
                        &self.counters.closed
                    } else {
                        &self.counters.malformed
                    });
                    trace::mpa_dropped(serial, ex.peer, &e.to_string());
                    drop_reset(ex.stream);
                }
            }
        }
    }

    /// The Request is whole: check it and hand the connection over, blocking again.
    fn finish(&self, ex: Exchange) -> Result<ConnRequest> {
        let Exchange { stream, reader, .. } = ex;
        // Blocking again, for the thread that accepts or rejects.
        if let Err(e) = stream.set_nonblocking(false) {
            drop_reset(stream);
            return Err(e.into());
        }
        self.dev
            .request_arrived(Box::new(KernelStream::new(stream)?), reader.frame())
    }

    /// Removes the exchange `token` from the poll and the table.
    fn end(&self, st: &mut State, token: usize) -> Option<Exchange> {
        let ex = st.exchanges.remove(&token)?;
        let _ = st
            .poll
            .registry()
            .deregister(&mut SourceFd(&ex.stream.as_raw_fd()));
        self.counters.in_progress.fetch_sub(1, Ordering::Relaxed);
        // Keep the order queue from filling with ended exchanges.
        if st.order.len() > 2 * st.exchanges.len() + 64 {
            let live = &st.exchanges;
            st.order.retain(|t| live.contains_key(t));
        }
        Some(ex)
    }

    /// Drops the exchanges whose deadline has passed.
    fn expire(&self, st: &mut State, now: Instant) {
        while let Some(&t) = st.order.front() {
            match st.exchanges.get(&t) {
                None => {
                    st.order.pop_front();
                }
                Some(ex) if ex.deadline <= now => {
                    st.order.pop_front();
                    if let Some(ex) = self.end(st, t) {
                        bump(&self.counters.timed_out);
                        let why = format!(
                            "timed out with {} octets of the MPA Request",
                            ex.reader.len()
                        );
                        trace::mpa_dropped(self.dev.shared.serial, ex.peer, &why);
                        drop_reset(ex.stream);
                    }
                }
                Some(_) => return,
            }
        }
    }

    /// Drops the oldest exchange in progress; false if there is none.
    fn evict_oldest(&self, st: &mut State) -> bool {
        while let Some(t) = st.order.pop_front() {
            if let Some(ex) = self.end(st, t) {
                bump(&self.counters.evicted);
                trace::mpa_dropped(
                    self.dev.shared.serial,
                    ex.peer,
                    "evicted for a newer connection",
                );
                drop_reset(ex.stream);
                return true;
            }
        }
        false
    }
}

impl State {
    /// The oldest exchange still in progress.
    fn oldest(&self) -> Option<&Exchange> {
        self.order.iter().find_map(|t| self.exchanges.get(t))
    }
}

/// Closes a connection with RST: nothing of it lingers in the kernel.
fn drop_reset(s: TcpStream) {
    sys::socket::set_linger_zero(s.as_raw_fd());
}
