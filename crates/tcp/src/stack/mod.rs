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
mod open;
mod output;
mod sink;
mod table;
#[cfg(test)]
mod tests;
mod user_io;

use sink::Sink;
use table::add_stats;

use crate::config::Config;
use crate::conn::{Connection, Stats};
use crate::reassembly::Reassembly;
use crate::receiver::Arrival;
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

/// Takes the pieces of [`RxMode::Raw`] connections (see [`Receiver`](crate::receiver::Receiver)).
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

    /// Every connection's state in one line ([`crate::Connection::stall_report`]),
    /// after its addresses: what a user reports of a hang.
    pub fn stall_reports(&self, now: Duration) -> Vec<String> {
        self.slots
            .iter()
            .flatten()
            .map(|e| {
                let remote = e.conn.remote().map_or("-".to_string(), |r| r.to_string());
                format!(
                    "{} -> {remote}: {}",
                    e.conn.local(),
                    e.conn.stall_report(now)
                )
            })
            .collect()
    }

    /// Connections in the table (every state).
    pub fn connections(&self) -> usize {
        self.live
    }
}

/// Releases everything received in order (the connection bounds it by what it has).
const DISCARD_ALL: usize = 1 << 40;
