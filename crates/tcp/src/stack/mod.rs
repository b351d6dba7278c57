//! Many connections on one or more local IPv4 addresses, sans-IO: the layer between a
//! packet link and the users of [`Connection`]s.
//!
//! A [`Stack`] takes every arriving IPv4 packet ([`Stack::handle_packet`]) and hands it
//! to the connection its addresses name; a SYN to a listening port makes a new
//! connection (bounded: half-open connections per listener, established ones waiting
//! for [`Stack::accept`], connections in all); a segment nobody takes is answered with
//! a reset (bounded too). Packets to send come out of [`Stack::poll_transmit`] (all
//! connections) or [`Stack::poll_transmit_for`] (one, for a user that sends and wants
//! its data out at once); time is a parameter ([`Stack::poll_timeout`],
//! [`Stack::handle_timeout`]). No threads, no clock, no I/O.
//!
//! Each connection's received octets are a byte stream by default ([`RxMode::Stream`],
//! a [`Reassembly`] read with [`Stack::read`]); [`RxMode::Raw`] hands every arriving
//! piece, in order or not, to the caller's [`StackReceiver`] instead (for the RNIC's
//! out-of-order placement). What happens to a connection is reported as coalesced
//! [`Readiness`] flags ([`Stack::poll_event`]): at most one entry per connection waits,
//! so the event queue is bounded by the connection table.
//!
//! A connection id stays valid until the user gives it back with [`Stack::close`] or
//! [`Stack::abort`]; the stack then finishes the close on its own (FIN handshake,
//! TIME-WAIT) and frees the slot once the connection is closed.

mod input;
mod output;
#[cfg(test)]
mod tests;

use crate::config::Config;
use crate::conn::{Connection, State, Stats};
use crate::reassembly::{HoldSpec, PacketBuf, Reassembly};
use crate::receiver::{Arrival, Receiver};
use crate::segment::Segment;
use bitflags::bitflags;
use std::collections::{HashMap, VecDeque};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

/// Limits and settings of a stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackConfig {
    /// Every connection's TCP settings.
    pub tcp: Config,
    /// Connections at once, in every state (half-open and TIME-WAIT included).
    pub max_connections: usize,
    /// Half-open (SYN-RECEIVED) connections per listener; a SYN beyond it makes room by
    /// dropping the oldest, so a SYN flood holds at most this many and a real client's
    /// handshake, which completes within a round trip, still gets through.
    pub max_half_open: usize,
    /// Resets waiting to be sent at most; more are not sent (and counted), so a flood
    /// of stray segments cannot grow memory or make us flood back.
    pub max_pending_resets: usize,
    /// The ports active opens take their local port from.
    pub ephemeral_ports: (u16, u16),
    /// The secret of initial sequence numbers (RFC 6528) and of the first ephemeral
    /// port tried: random, kept for the stack's life.
    pub secret: u64,
}

impl Default for StackConfig {
    fn default() -> StackConfig {
        StackConfig {
            tcp: Config::default(),
            max_connections: 1024,
            max_half_open: 64,
            max_pending_resets: 64,
            ephemeral_ports: (49152, 65535),
            secret: 0x5eed_0f50_f741_c0de,
        }
    }
}

/// A connection of a stack: its slot and the slot's generation, so an id given back is
/// never mistaken for the connection that takes the slot next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId {
    index: u32,
    generation: u32,
}

impl std::fmt::Display for ConnId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.index, self.generation)
    }
}

/// A listening endpoint of a stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ListenerId(u32);

bitflags! {
    /// What changed on a connection since its last event; several changes coalesce.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
    pub struct Readiness: u8 {
        /// The handshake completed.
        const ESTABLISHED = 0x01;
        /// Octets (or the end of the stream, or an error) can be read.
        const READABLE = 0x02;
        /// The send buffer has room again (or sending failed for good).
        const WRITABLE = 0x04;
        /// The peer's FIN arrived: reads end once the stream is read.
        const PEER_CLOSED = 0x08;
        /// The peer reset the connection.
        const RESET = 0x10;
        /// The connection was given up: nothing came back in time.
        const TIMED_OUT = 0x20;
        /// Both directions are closed.
        const CLOSED = 0x40;
    }
}

/// What [`Stack::poll_event`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StackEvent {
    /// Something changed on a connection the user holds.
    Conn { id: ConnId, what: Readiness },
    /// A listener has an established connection for [`Stack::accept`].
    Incoming(ListenerId),
}

/// What the link found of an arriving packet's checksums
/// ([`Stack::handle_packet_checked`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkChecksum {
    /// Nothing: the stack verifies them.
    Unchecked,
    /// The link verified them (or the packet never left a trusted in-process wire).
    Good,
    /// The link found the packet damaged: it is dropped and counted.
    Bad,
}

/// How a connection's received octets reach the user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RxMode {
    /// In order, through a [`Reassembly`] of the connection's receive window:
    /// [`Stack::read`].
    #[default]
    Stream,
    /// Every piece as it arrives, in order or not, to the [`StackReceiver`] given to
    /// [`Stack::handle_packet`]; the user gives octets back with [`Stack::release`].
    Raw,
}

/// Takes the pieces of [`RxMode::Raw`] connections (see [`Receiver`]).
pub trait StackReceiver {
    /// A new piece of connection `id`'s stream; true keeps it.
    fn arrive(&mut self, id: ConnId, piece: Arrival<'_>) -> bool;

    /// Every octet of `id`'s stream before offset `end` has arrived.
    fn in_order(&mut self, id: ConnId, end: u64) {
        let _ = (id, end);
    }
}

/// Refuses every raw piece: for stacks whose connections are all [`RxMode::Stream`].
#[derive(Debug, Default, Clone, Copy)]
pub struct NoRaw;

impl StackReceiver for NoRaw {
    fn arrive(&mut self, _: ConnId, _: Arrival<'_>) -> bool {
        false
    }
}

/// Why a stack call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StackError {
    #[error("nothing now: wait for the connection's readiness event")]
    WouldBlock,
    #[error("no such connection (or it was given back)")]
    InvalidId,
    #[error("no such listener")]
    InvalidListener,
    #[error("{0} is not an address of this stack")]
    AddrNotAvailable(Ipv4Addr),
    #[error("{0} is in use")]
    AddrInUse(SocketAddrV4),
    #[error("no ephemeral port is free towards this peer")]
    NoFreePorts,
    #[error("the connection table is full (max_connections)")]
    TooManyConnections,
    #[error("the connection is closed for sending")]
    Closed,
    #[error("the peer reset the connection")]
    Reset,
    #[error("the connection timed out")]
    TimedOut,
}

/// What the stack did, beyond each connection's own [`Stats`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StackStats {
    pub packets_in: u64,
    pub packets_out: u64,
    /// Packets to an address that is not ours.
    pub not_local: u64,
    pub dropped_checksum: u64,
    pub dropped_malformed: u64,
    /// Resets sent for segments no connection took.
    pub resets_out: u64,
    /// Resets not sent because `max_pending_resets` were waiting.
    pub resets_suppressed: u64,
    /// SYNs dropped: the listener's accept queue was full.
    pub syn_backlog_full: u64,
    /// SYNs dropped: the connection table was full.
    pub syn_table_full: u64,
    /// Half-open connections dropped to make room for a newer SYN.
    pub half_open_evicted: u64,
    /// Active opens.
    pub connected: u64,
    /// Connections handed to `accept`.
    pub accepted: u64,
    /// Connection slots freed.
    pub reaped: u64,
    /// Packets whose buffer a connection kept to be read from (zero-copy receive,
    /// [`Stack::handle_packet_buf`], or a lent payload kept by reference).
    pub packets_held: u64,
    /// Packets sent with their payload lent, not copied
    /// ([`Stack::poll_transmit_lent`]).
    pub packets_lent: u64,
}

/// Where a connection is in its life as the stack sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Made by a SYN to a listener, the handshake not complete.
    HalfOpen(ListenerId),
    /// Established, waiting for `accept`.
    Ready(ListenerId),
    /// The user holds it.
    User,
    /// The user gave it back: the stack finishes the close and frees it.
    Released,
}

/// A connection's receive side.
#[derive(Debug)]
enum Rx {
    /// The byte stream (allocated at the first payload).
    Stream(Option<Reassembly>),
    Raw,
    /// Given back: whatever arrives is taken and dropped, so the peer's close goes on.
    Discard,
}

#[derive(Debug)]
struct Entry {
    id: ConnId,
    /// (local, remote): the key of `by_tuple`.
    key: (SocketAddrV4, SocketAddrV4),
    conn: Connection,
    rx: Rx,
    stage: Stage,
    /// Flags not yet reported, and whether the entry is in the event queue.
    pending: Readiness,
    queued: bool,
    /// The peer's FIN arrived in order.
    peer_closed: bool,
    /// The user shut down our direction before the handshake completed: FIN once it
    /// has.
    fin_when_open: bool,
    /// Why the connection failed, once it did.
    failed: Option<StackError>,
}

#[derive(Debug)]
struct Listener {
    local: SocketAddrV4,
    backlog: usize,
    mode: RxMode,
    half_open: VecDeque<ConnId>,
    ready: VecDeque<ConnId>,
    /// An `Incoming` event waits in the queue.
    queued: bool,
}

/// Something in the event queue.
#[derive(Debug, Clone, Copy)]
enum Queued {
    Conn(ConnId),
    Listener(ListenerId),
}

/// Many TCP connections on the stack's addresses; see the module documentation.
#[derive(Debug)]
pub struct Stack {
    cfg: StackConfig,
    addrs: Vec<Ipv4Addr>,
    slots: Vec<Option<Entry>>,
    generations: Vec<u32>,
    free: Vec<u32>,
    live: usize,
    by_tuple: HashMap<(SocketAddrV4, SocketAddrV4), ConnId>,
    listeners: HashMap<ListenerId, Listener>,
    by_local: HashMap<SocketAddrV4, ListenerId>,
    next_listener: u32,
    next_port: u16,
    resets: VecDeque<Segment<'static>>,
    events: VecDeque<Queued>,
    /// Where the round of `poll_transmit` goes on.
    cursor: usize,
    stats: StackStats,
    /// The TCP counters of connections already freed.
    retired: Stats,
}

impl Stack {
    /// A stack owning `addrs`.
    pub fn new(cfg: StackConfig, addrs: &[Ipv4Addr]) -> Stack {
        let (lo, hi) = cfg.ephemeral_ports;
        let (lo, hi) = (lo.max(1).min(hi.max(1)), hi.max(lo).max(1));
        let span = u64::from(hi - lo) + 1;
        let next_port = lo + ((cfg.secret.rotate_left(29) % span) as u16);
        let cfg = StackConfig {
            ephemeral_ports: (lo, hi),
            max_connections: cfg.max_connections.max(1),
            max_half_open: cfg.max_half_open.max(1),
            ..cfg
        };
        Stack {
            cfg,
            addrs: addrs.to_vec(),
            slots: Vec::new(),
            generations: Vec::new(),
            free: Vec::new(),
            live: 0,
            by_tuple: HashMap::new(),
            listeners: HashMap::new(),
            by_local: HashMap::new(),
            next_listener: 1,
            next_port,
            resets: VecDeque::new(),
            events: VecDeque::new(),
            cursor: 0,
            stats: StackStats::default(),
            retired: Stats::default(),
        }
    }

    pub fn config(&self) -> &StackConfig {
        &self.cfg
    }

    /// The addresses the stack owns.
    pub fn addresses(&self) -> &[Ipv4Addr] {
        &self.addrs
    }

    pub fn stats(&self) -> &StackStats {
        &self.stats
    }

    /// The TCP counters of every connection the stack has had, added up.
    pub fn tcp_totals(&self) -> Stats {
        let mut t = self.retired.clone();
        for e in self.slots.iter().flatten() {
            add_stats(&mut t, e.conn.stats());
        }
        t
    }

    /// Every connection's send-side recovery state
    /// ([`crate::Connection::recovery_snapshot`]), for tracing a timeout.
    #[doc(hidden)]
    pub fn recovery_snapshots(&self, now: Duration) -> Vec<String> {
        self.slots
            .iter()
            .flatten()
            .map(|e| e.conn.recovery_snapshot(now))
            .collect()
    }

    /// Connections in the table (every state).
    pub fn connections(&self) -> usize {
        self.live
    }

    /// Opens a connection to `remote` from `local` (the stack's first address when
    /// `None`) and an ephemeral port; the SYN goes out at the next transmit.
    pub fn connect(
        &mut self,
        now: Duration,
        local: Option<Ipv4Addr>,
        remote: SocketAddrV4,
        mode: RxMode,
    ) -> Result<ConnId, StackError> {
        let ip = match local {
            Some(ip) if self.addrs.contains(&ip) => ip,
            Some(ip) => return Err(StackError::AddrNotAvailable(ip)),
            None => *self
                .addrs
                .first()
                .ok_or(StackError::AddrNotAvailable(Ipv4Addr::UNSPECIFIED))?,
        };
        if self.live >= self.cfg.max_connections {
            return Err(StackError::TooManyConnections);
        }
        let local = self.ephemeral(ip, remote)?;
        let iss = crate::initial_sequence(self.cfg.secret, local, remote, now);
        let conn = Connection::connect(self.cfg.tcp.clone(), local, remote, iss);
        let rx = match mode {
            RxMode::Stream => Rx::Stream(Some(Reassembly::for_connection(&conn))),
            RxMode::Raw => Rx::Raw,
        };
        self.stats.connected += 1;
        Ok(self.insert(conn, (local, remote), rx, Stage::User))
    }

    /// A free local port on `ip` towards `remote`, from the ephemeral range.
    fn ephemeral(
        &mut self,
        ip: Ipv4Addr,
        remote: SocketAddrV4,
    ) -> Result<SocketAddrV4, StackError> {
        let (lo, hi) = self.cfg.ephemeral_ports;
        let span = u32::from(hi - lo) + 1;
        for _ in 0..span {
            let port = self.next_port;
            self.next_port = if port >= hi { lo } else { port + 1 };
            let local = SocketAddrV4::new(ip, port);
            let listening = self.by_local.contains_key(&local)
                || self
                    .by_local
                    .contains_key(&SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port));
            if !listening && !self.by_tuple.contains_key(&(local, remote)) {
                return Ok(local);
            }
        }
        Err(StackError::NoFreePorts)
    }

    /// Listens on `local` (an unspecified address listens on all of the stack's; port
    /// 0 takes a free port from the ephemeral range). A SYN that finds `backlog`
    /// established connections waiting for [`Stack::accept`] is dropped (the client
    /// sends it again); handshakes under way when the queue fills still join it, so
    /// at most `backlog` plus [`StackConfig::max_half_open`] wait.
    pub fn listen(
        &mut self,
        local: SocketAddrV4,
        backlog: usize,
        mode: RxMode,
    ) -> Result<ListenerId, StackError> {
        let ip = *local.ip();
        if !ip.is_unspecified() && !self.addrs.contains(&ip) {
            return Err(StackError::AddrNotAvailable(ip));
        }
        let local = match local.port() {
            0 => self
                .free_listening_port(ip)
                .ok_or(StackError::NoFreePorts)?,
            _ if self.port_taken(local) => return Err(StackError::AddrInUse(local)),
            _ => local,
        };
        let id = ListenerId(self.next_listener);
        self.next_listener = self.next_listener.wrapping_add(1).max(1);
        self.listeners.insert(
            id,
            Listener {
                local,
                backlog: backlog.max(1),
                mode,
                half_open: VecDeque::new(),
                ready: VecDeque::new(),
                queued: false,
            },
        );
        self.by_local.insert(local, id);
        Ok(id)
    }

    /// Whether a listener on `local` would conflict with one there is, or with a
    /// connection using its port.
    fn port_taken(&self, local: SocketAddrV4) -> bool {
        let port = local.port();
        let any = SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port);
        self.by_local.contains_key(&local)
            || self.by_local.contains_key(&any)
            || (local.ip().is_unspecified() && self.by_local.keys().any(|l| l.port() == port))
            || self.by_tuple.keys().any(|(l, _)| {
                l.port() == port && (l.ip() == local.ip() || local.ip().is_unspecified())
            })
    }

    /// A port of the ephemeral range nothing on `ip` uses.
    fn free_listening_port(&mut self, ip: Ipv4Addr) -> Option<SocketAddrV4> {
        let (lo, hi) = self.cfg.ephemeral_ports;
        for _ in 0..=u32::from(hi - lo) {
            let port = self.next_port;
            self.next_port = if port >= hi { lo } else { port + 1 };
            let local = SocketAddrV4::new(ip, port);
            if !self.port_taken(local) {
                return Some(local);
            }
        }
        None
    }

    /// The address a listener listens on (its port chosen, if it was 0).
    pub fn listener_addr(&self, id: ListenerId) -> Result<SocketAddrV4, StackError> {
        self.listeners
            .get(&id)
            .map(|l| l.local)
            .ok_or(StackError::InvalidListener)
    }

    /// Stops listening: connections not yet accepted are reset.
    pub fn unlisten(&mut self, id: ListenerId) -> Result<(), StackError> {
        let l = self
            .listeners
            .remove(&id)
            .ok_or(StackError::InvalidListener)?;
        self.by_local.remove(&l.local);
        for c in l.half_open.into_iter().chain(l.ready) {
            if let Some(e) = self.entry_mut(c) {
                e.conn.abort();
                e.stage = Stage::Released;
            }
        }
        Ok(())
    }

    /// The next established connection of `listener`, if one waits.
    pub fn accept(&mut self, listener: ListenerId) -> Result<Option<ConnId>, StackError> {
        let l = self
            .listeners
            .get_mut(&listener)
            .ok_or(StackError::InvalidListener)?;
        let Some(id) = l.ready.pop_front() else {
            return Ok(None);
        };
        self.stats.accepted += 1;
        if let Some(e) = self.entry_mut(id) {
            e.stage = Stage::User;
        }
        // What happened while it waited is reported now.
        self.enqueue(id);
        Ok(Some(id))
    }

    /// Established connections waiting for `accept`.
    pub fn pending_accepts(&self, listener: ListenerId) -> usize {
        self.listeners.get(&listener).map_or(0, |l| l.ready.len())
    }

    /// Half-open connections of `listener`.
    pub fn half_open(&self, listener: ListenerId) -> usize {
        self.listeners
            .get(&listener)
            .map_or(0, |l| l.half_open.len())
    }

    /// The connection `id` the user holds.
    fn user(&mut self, id: ConnId) -> Result<&mut Entry, StackError> {
        match self.entry_mut(id) {
            Some(e) if e.stage == Stage::User => Ok(e),
            _ => Err(StackError::InvalidId),
        }
    }

    /// The connection itself (state, counters, addresses, MSS...).
    pub fn connection(&self, id: ConnId) -> Result<&Connection, StackError> {
        match self.entry(id) {
            Some(e) if e.stage == Stage::User => Ok(&e.conn),
            _ => Err(StackError::InvalidId),
        }
    }

    pub fn state(&self, id: ConnId) -> Result<State, StackError> {
        self.connection(id).map(Connection::state)
    }

    /// Reads in-order octets of a [`RxMode::Stream`] connection into `buf` and reopens
    /// the window by as much. `Ok(0)` is the end of the stream (or an empty `buf`);
    /// `WouldBlock` means nothing now; `Reset`/`TimedOut` say how it failed.
    pub fn read(&mut self, id: ConnId, buf: &mut [u8]) -> Result<usize, StackError> {
        let e = self.user(id)?;
        if let Rx::Stream(Some(r)) = &mut e.rx {
            let n = r.read_from(&mut e.conn, buf);
            if n > 0 || buf.is_empty() {
                return Ok(n);
            }
        }
        if let Some(f) = e.failed {
            return Err(f);
        }
        if e.peer_closed || e.conn.state() == State::Closed {
            return Ok(0);
        }
        Err(StackError::WouldBlock)
    }

    /// Moves the packet buffers connection `id` has been read out of (those kept by
    /// [`Stack::handle_packet_buf`]) into `out`, for reuse.
    pub fn take_spent(&mut self, id: ConnId, out: &mut Vec<Vec<u8>>) {
        if let Some(Entry {
            rx: Rx::Stream(Some(r)),
            ..
        }) = self.entry_mut(id)
        {
            r.take_spent(out);
        }
    }

    /// In-order octets waiting to be read.
    pub fn readable(&self, id: ConnId) -> usize {
        match self.entry(id).map(|e| &e.rx) {
            Some(Rx::Stream(Some(r))) => r.readable(),
            _ => 0,
        }
    }

    /// Gives `n` in-order octets of a [`RxMode::Raw`] connection back (the window
    /// reopens).
    pub fn release(&mut self, id: ConnId, n: usize) -> Result<(), StackError> {
        self.user(id)?.conn.release(n);
        Ok(())
    }

    /// Queues as much of `data` as fits; `WouldBlock` when nothing does.
    pub fn send(&mut self, id: ConnId, data: &[u8]) -> Result<usize, StackError> {
        let e = self.user(id)?;
        match e.conn.send(data) {
            Ok(n) => Ok(n),
            Err(crate::SendError::Full) => Err(StackError::WouldBlock),
            Err(crate::SendError::Closed) => Err(e.failed.unwrap_or(StackError::Closed)),
        }
    }

    /// Queues `record` whole (segments keep it whole when it fits one), or nothing
    /// (`WouldBlock`).
    pub fn send_record(&mut self, id: ConnId, record: &[u8]) -> Result<(), StackError> {
        let e = self.user(id)?;
        match e.conn.send_record(record) {
            Ok(()) => Ok(()),
            Err(crate::SendError::Full) => Err(StackError::WouldBlock),
            Err(crate::SendError::Closed) => Err(e.failed.unwrap_or(StackError::Closed)),
        }
    }

    /// [`Stack::send_record`] for a record of `len` octets given in parts (an FPDU's
    /// gather list): see [`Connection::send_record_with`].
    pub fn send_record_with(
        &mut self,
        id: ConnId,
        len: usize,
        feed: &mut crate::Feed<'_>,
    ) -> Result<(), StackError> {
        let e = self.user(id)?;
        match e.conn.send_record_with(len, feed) {
            Ok(()) => Ok(()),
            Err(crate::SendError::Full) => Err(StackError::WouldBlock),
            Err(crate::SendError::Closed) => Err(e.failed.unwrap_or(StackError::Closed)),
        }
    }

    /// Octets `send` takes now.
    pub fn send_capacity(&self, id: ConnId) -> usize {
        self.connection(id).map_or(0, Connection::send_capacity)
    }

    /// Closes our direction after what is queued (FIN); reading goes on. Before the
    /// handshake completes, the FIN waits for it (a TCP closed in SYN-SENT would
    /// just be deleted).
    pub fn shutdown(&mut self, id: ConnId) -> Result<(), StackError> {
        let e = self.user(id)?;
        if e.conn.state() == State::SynSent {
            e.fin_when_open = true;
        } else {
            e.conn.close();
        }
        Ok(())
    }

    /// Gives the connection back, gracefully: FIN after what is queued; what arrives
    /// afterwards is dropped. The id is invalid from now on.
    pub fn close(&mut self, id: ConnId) -> Result<(), StackError> {
        let e = self.user(id)?;
        e.conn.close();
        Self::release_entry(e);
        Ok(())
    }

    /// Gives the connection back abortively: RST, queued data dropped.
    pub fn abort(&mut self, id: ConnId) -> Result<(), StackError> {
        let e = self.user(id)?;
        e.conn.abort();
        Self::release_entry(e);
        Ok(())
    }

    fn release_entry(e: &mut Entry) {
        e.stage = Stage::Released;
        e.pending = Readiness::empty();
        e.rx = Rx::Discard;
        // What was never read goes back to the window at once.
        e.conn.release(DISCARD_ALL);
    }

    /// The next thing that happened, oldest first (flags coalesce per connection).
    pub fn poll_event(&mut self) -> Option<StackEvent> {
        while let Some(q) = self.events.pop_front() {
            match q {
                Queued::Conn(id) => {
                    let Some(e) = self.entry_mut(id) else {
                        continue;
                    };
                    e.queued = false;
                    let what = std::mem::take(&mut e.pending);
                    if e.stage == Stage::User && !what.is_empty() {
                        return Some(StackEvent::Conn { id, what });
                    }
                }
                Queued::Listener(l) => {
                    let Some(lis) = self.listeners.get_mut(&l) else {
                        continue;
                    };
                    lis.queued = false;
                    if !lis.ready.is_empty() {
                        return Some(StackEvent::Incoming(l));
                    }
                }
            }
        }
        None
    }

    fn enqueue(&mut self, id: ConnId) {
        if let Some(e) = self.entry_mut(id)
            && !e.queued
            && !e.pending.is_empty()
            && e.stage == Stage::User
        {
            e.queued = true;
            self.events.push_back(Queued::Conn(id));
        }
    }

    fn entry(&self, id: ConnId) -> Option<&Entry> {
        self.slots
            .get(id.index as usize)?
            .as_ref()
            .filter(|e| e.id == id)
    }

    fn entry_mut(&mut self, id: ConnId) -> Option<&mut Entry> {
        self.slots
            .get_mut(id.index as usize)?
            .as_mut()
            .filter(|e| e.id == id)
    }

    fn insert(
        &mut self,
        conn: Connection,
        key: (SocketAddrV4, SocketAddrV4),
        rx: Rx,
        stage: Stage,
    ) -> ConnId {
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(None);
                self.generations.push(0);
                (self.slots.len() - 1) as u32
            }
        };
        let i = index as usize;
        self.generations[i] = self.generations[i].wrapping_add(1);
        let id = ConnId {
            index,
            generation: self.generations[i],
        };
        self.by_tuple.insert(key, id);
        self.slots[i] = Some(Entry {
            id,
            key,
            conn,
            rx,
            stage,
            pending: Readiness::empty(),
            queued: false,
            peer_closed: false,
            fin_when_open: false,
            failed: None,
        });
        self.live += 1;
        id
    }

    /// Frees a slot.
    fn remove(&mut self, id: ConnId) {
        let Some(slot) = self.slots.get_mut(id.index as usize) else {
            return;
        };
        let Some(e) = slot.take_if(|e| e.id == id) else {
            return;
        };
        if self.by_tuple.get(&e.key) == Some(&id) {
            self.by_tuple.remove(&e.key);
        }
        match e.stage {
            Stage::HalfOpen(l) | Stage::Ready(l) => {
                if let Some(lis) = self.listeners.get_mut(&l) {
                    lis.half_open.retain(|c| *c != id);
                    lis.ready.retain(|c| *c != id);
                }
            }
            Stage::User | Stage::Released => {}
        }
        add_stats(&mut self.retired, e.conn.stats());
        self.free.push(id.index);
        self.live -= 1;
        self.stats.reaped += 1;
    }
}

/// Releases everything received in order (the connection bounds it by what it has).
const DISCARD_ALL: usize = 1 << 40;

/// A connection's receive side as the [`Receiver`] its segments are handed to.
struct Sink<'a, R: StackReceiver> {
    id: ConnId,
    rx: &'a mut Rx,
    raw: &'a mut R,
    /// The packet's buffer, if the stream may keep a piece of it (zero-copy).
    whole: Option<PacketBuf>,
    /// The piece it keeps there: the buffer must be handed over.
    hold: Option<HoldSpec>,
}

impl<R: StackReceiver> Receiver for Sink<'_, R> {
    fn arrive(&mut self, piece: Arrival<'_>) -> bool {
        match self.rx {
            Rx::Stream(Some(r)) => {
                // One piece per packet stays in its buffer; the others are copied.
                if let Some(whole) = self.whole.filter(|_| self.hold.is_none())
                    && let Some(spec) = r.hold_later(&piece, whole)
                {
                    self.hold = Some(spec);
                    return true;
                }
                r.arrive(piece)
            }
            Rx::Stream(None) => false,
            Rx::Raw => self.raw.arrive(self.id, piece),
            Rx::Discard => true,
        }
    }

    fn in_order(&mut self, end: u64) {
        match self.rx {
            Rx::Stream(Some(r)) => r.in_order(end),
            Rx::Stream(None) => {}
            Rx::Raw => self.raw.in_order(self.id, end),
            Rx::Discard => {}
        }
    }
}

/// Adds `s` to `t`, every counter (the destructuring names each field, so that a
/// counter added to [`Stats`] cannot be left out of the totals).
fn add_stats(t: &mut Stats, s: &Stats) {
    let Stats {
        segments_in,
        segments_out,
        bytes_in,
        bytes_out,
        retransmitted_segments,
        retransmitted_bytes,
        fast_retransmits,
        timeouts,
        loss_probes,
        probe_recoveries,
        spurious_retransmits,
        reordered_segments,
        undone_reductions,
        spurious_timeouts,
        dsacks_out,
        dup_acks_in,
        out_of_order_in,
        bytes_refused,
        dropped_checksum,
        dropped_malformed,
        dropped_unacceptable,
        challenge_acks,
        window_probes,
        keepalive_probes,
        resets_out,
        cwnd_limited_us,
        rwnd_limited_us,
        sndbuf_limited_us,
    } = s;
    t.segments_in += segments_in;
    t.segments_out += segments_out;
    t.bytes_in += bytes_in;
    t.bytes_out += bytes_out;
    t.retransmitted_segments += retransmitted_segments;
    t.retransmitted_bytes += retransmitted_bytes;
    t.fast_retransmits += fast_retransmits;
    t.timeouts += timeouts;
    t.loss_probes += loss_probes;
    t.probe_recoveries += probe_recoveries;
    t.spurious_retransmits += spurious_retransmits;
    t.reordered_segments += reordered_segments;
    t.undone_reductions += undone_reductions;
    t.spurious_timeouts += spurious_timeouts;
    t.dsacks_out += dsacks_out;
    t.dup_acks_in += dup_acks_in;
    t.out_of_order_in += out_of_order_in;
    t.bytes_refused += bytes_refused;
    t.dropped_checksum += dropped_checksum;
    t.dropped_malformed += dropped_malformed;
    t.dropped_unacceptable += dropped_unacceptable;
    t.challenge_acks += challenge_acks;
    t.window_probes += window_probes;
    t.keepalive_probes += keepalive_probes;
    t.resets_out += resets_out;
    t.cwnd_limited_us += cwnd_limited_us;
    t.rwnd_limited_us += rwnd_limited_us;
    t.sndbuf_limited_us += sndbuf_limited_us;
}
