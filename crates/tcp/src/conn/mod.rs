//! One TCP connection (RFC 9293) as a state machine: packets in through
//! [`Connection::handle_packet`], packets out of [`Connection::poll_transmit`], timers
//! through [`Connection::poll_timeout`] / [`Connection::handle_timeout`]. Time is a
//! [`Duration`] since any fixed origin the caller chooses, as in `softrnic-proto`.
//!
//! Received payload goes to a [`Receiver`] piece by piece with its stream offset, in
//! order or not ([`crate::receiver`] says why). Payload to send is queued as a byte
//! stream ([`Connection::send`]) or as records that segments keep whole
//! ([`Connection::send_record`]: an FPDU each, for MPA-aware TCP).
//!
//! Everything a connection holds is bounded by its [`Config`] and allocated when it is
//! made; handling a segment and sending one allocate nothing.

mod cc;
mod input;
mod output;
mod rack;
mod report;
mod rtt;
mod rx;
mod send_buffer;
mod sent;
mod timers;
mod timing;
mod tlp;
mod tx;

use crate::config::Config;
use crate::segment::{Flags, Options, Segment};
use crate::seq::SeqNum;
use arrayvec::ArrayVec;
use rx::Rx;
use std::net::SocketAddrV4;
use std::time::Duration;
use tx::Tx;

pub use send_buffer::{Feed, Lent};
use timing::HoleWait;
pub use timing::{BUCKETS, Histogram, Timing};

/// The connection states of RFC 9293 section 3.3.2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    Closed,
    Listen,
    SynSent,
    SynReceived,
    Established,
    FinWait1,
    FinWait2,
    CloseWait,
    Closing,
    LastAck,
    TimeWait,
}

impl State {
    /// Both sides' sequence numbers are known (SYN-RECEIVED and after).
    pub fn is_synchronized(self) -> bool {
        !matches!(self, State::Closed | State::Listen | State::SynSent)
    }
}

/// What happened to the connection, for the layer above ([`Connection::poll_event`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Event {
    /// The three-way handshake completed.
    Established,
    /// The peer's FIN arrived in order: no more data will come.
    PeerClosed,
    /// Both directions are closed and acknowledged (TIME-WAIT or CLOSED follows).
    Closed,
    /// The peer reset the connection (or refused it).
    Reset,
    /// Retransmissions, SYNs or keep-alive probes went unanswered: the connection was
    /// given up (and reset).
    TimedOut,
}

/// Why data was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    #[error("the connection does not send (not open, or closed for sending)")]
    Closed,
    #[error("the send buffer (or its record count) is full")]
    Full,
}

/// Counters of what the connection did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    pub segments_in: u64,
    pub segments_out: u64,
    /// Payload octets kept by the receiver.
    pub bytes_in: u64,
    /// Payload octets sent for the first time.
    pub bytes_out: u64,
    pub retransmitted_segments: u64,
    pub retransmitted_bytes: u64,
    /// Recoveries entered because a loss was found (by RACK, or by the third
    /// duplicate ACK without SACK): fast retransmits.
    pub fast_retransmits: u64,
    /// Retransmission timer expiries (SYN or data).
    pub timeouts: u64,
    /// The part of `timeouts` that resent a SYN or SYN-ACK: in the handshake only the
    /// timer repairs a loss (no data yet for loss probes or SACK), so these are not
    /// steady-state timeouts.
    pub handshake_timeouts: u64,
    /// Tail loss probes sent (RFC 8985 7).
    pub loss_probes: u64,
    /// Loss probes that proved a loss (the window was reduced for it).
    pub probe_recoveries: u64,
    /// Duplicates the peer reported (D-SACK, RFC 2883): retransmissions that were not
    /// needed (or packets the network duplicated).
    pub spurious_retransmits: u64,
    /// Segments the peer received after one we sent later, none of them sent again
    /// (reordering, as RACK sees it).
    pub reordered_segments: u64,
    /// Window reductions undone because every retransmission since proved spurious
    /// (or the timeout did).
    pub undone_reductions: u64,
    /// Retransmission timeouts after which the peer acknowledged a segment sent
    /// before and never again: the timer fired too early.
    pub spurious_timeouts: u64,
    /// Duplicates we reported (D-SACK blocks sent).
    pub dsacks_out: u64,
    /// Bare ACKs sent after the first to answer one batch of segments, for the
    /// out-of-order ranges it grew that the first could not report.
    pub sack_followup_acks: u64,
    pub dup_acks_in: u64,
    /// Segments whose payload arrived out of order.
    pub out_of_order_in: u64,
    /// Payload octets refused by the receiver or by the out-of-order bound.
    pub bytes_refused: u64,
    pub dropped_checksum: u64,
    pub dropped_malformed: u64,
    /// Segments outside the window, or with an unacceptable ACK.
    pub dropped_unacceptable: u64,
    pub challenge_acks: u64,
    pub window_probes: u64,
    pub keepalive_probes: u64,
    pub resets_out: u64,
    /// Microseconds new data waited for the congestion window (or for records of
    /// segments in flight) while the send buffer held some (RFC 4898's
    /// SndLimTimeCwnd): where a sender's time goes under loss.
    pub cwnd_limited_us: u64,
    /// Microseconds new data waited for the peer's window (SndLimTimeRwnd).
    pub rwnd_limited_us: u64,
    /// Of `rwnd_limited_us`, the time during which the peer held octets above a hole
    /// (SACKed): the window counts from the hole, so it was the hole, not the peer's
    /// reader, that held new data back.
    pub rwnd_hole_limited_us: u64,
    /// Microseconds everything queued was sent and the send buffer had no room for
    /// more (unacknowledged octets fill it: a hole the peer has not reported filled).
    pub sndbuf_limited_us: u64,
    /// How long holes and their repairs took.
    pub timing: Timing,
}

/// What holds a sender back, for [`Stats`]' `*_limited_us`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Limit {
    Cwnd,
    Rwnd,
    SendBuffer,
}

/// Which probe is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Probe {
    Window,
    Keepalive,
}

#[derive(Debug, Default)]
struct Timers {
    rto: Option<Duration>,
    /// RACK's reordering timer: segments still inside the reordering window.
    reo: Option<Duration>,
    /// The tail loss probe's timer.
    pto: Option<Duration>,
    persist: Option<Duration>,
    keepalive: Option<Duration>,
    time_wait: Option<Duration>,
}

/// A TCP connection.
#[derive(Debug)]
pub struct Connection {
    cfg: Config,
    state: State,
    local: SocketAddrV4,
    remote: Option<SocketAddrV4>,
    /// Opened by `listen` (a reset SYN-RECEIVED returns to LISTEN).
    passive: bool,
    tx: Tx,
    rx: Rx,
    /// Our SYN (or SYN-ACK) must go out.
    syn_pending: bool,
    /// A reset to send (a reply, an abort, a timeout).
    rst_pending: Option<Segment<'static>>,
    timers: Timers,
    /// Consecutive retransmission timeouts without progress.
    retries: u32,
    /// A window or keep-alive probe must go out.
    probe_pending: Option<Probe>,
    /// The persist timer fired with a small window open: send what fits.
    force_send: bool,
    /// A tail loss probe must go out.
    tlp_due: bool,
    persist_backoff: u32,
    keepalive_sent: u32,
    /// Challenge ACKs in the current one-second slot: (slot start, count).
    challenges: (Duration, u32),
    events: ArrayVec<Event, 8>,
    stats: Stats,
    /// The caller of [`Connection::poll_transmit_lent`] takes payloads by reference.
    lending: bool,
    /// The payload of the segment just written, when it travels by reference.
    lent: Option<Lent>,
    /// What holds new data back since when (`None`: nothing, or nothing to send).
    limited: Option<(Limit, Duration)>,
    /// While `limited` by the peer's window: the peer holds SACKed octets above a hole,
    /// and what the segment at the hole waits for (a change of this starts a new
    /// interval).
    limited_by_hole: Option<HoleWait>,
    /// The user's last send found no room (and none succeeded since).
    send_refused: bool,
    /// The latest time the connection was given (its calls that take no time).
    clock: Duration,
}

impl Connection {
    /// An active open: the SYN goes out at the first [`Connection::poll_transmit`].
    /// `iss` is the initial sequence number (see [`crate::initial_sequence`]).
    pub fn connect(
        config: Config,
        local: SocketAddrV4,
        remote: SocketAddrV4,
        iss: SeqNum,
    ) -> Connection {
        let mut c = Connection::new(config, local, iss, State::SynSent);
        c.remote = Some(remote);
        c.syn_pending = true;
        c
    }

    /// A passive open: waits in LISTEN for a SYN to `local` from anyone, and serves
    /// that one peer. (A listener that serves many makes one per SYN.)
    pub fn listen(config: Config, local: SocketAddrV4, iss: SeqNum) -> Connection {
        let mut c = Connection::new(config, local, iss, State::Listen);
        c.passive = true;
        c
    }

    fn new(config: Config, local: SocketAddrV4, iss: SeqNum, state: State) -> Connection {
        let cfg = config.sane();
        let tx = Tx::new(&cfg, iss);
        let rx = Rx::new(
            cfg.recv_buffer,
            cfg.max_ooo_ranges,
            cfg.delayed_ack,
            u64::from(cfg.mss),
        );
        Connection {
            cfg,
            state,
            local,
            remote: None,
            passive: false,
            tx,
            rx,
            syn_pending: false,
            rst_pending: None,
            timers: Timers::default(),
            retries: 0,
            probe_pending: None,
            force_send: false,
            tlp_due: false,
            persist_backoff: 0,
            keepalive_sent: 0,
            challenges: (Duration::ZERO, 0),
            events: ArrayVec::new(),
            stats: Stats::default(),
            lending: false,
            lent: None,
            limited: None,
            limited_by_hole: None,
            send_refused: false,
            clock: Duration::ZERO,
        }
    }

    pub fn state(&self) -> State {
        self.state
    }

    pub fn local(&self) -> SocketAddrV4 {
        self.local
    }

    /// The peer, once known.
    pub fn remote(&self) -> Option<SocketAddrV4> {
        self.remote
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Whether `seg` belongs to this connection (addressed to us, from our peer).
    pub fn matches(&self, seg: &Segment<'_>) -> bool {
        seg.dst == self.local && self.remote.is_none_or(|r| r == seg.src)
    }

    /// The largest payload one segment carries (the send MSS): size records to it so
    /// that each goes out in one segment.
    pub fn max_payload(&self) -> usize {
        self.tx.mss as usize
    }

    /// Octets [`Connection::send`] would take now.
    pub fn send_capacity(&self) -> usize {
        if self.can_send() {
            self.tx.buf.free()
        } else {
            0
        }
    }

    /// Octets queued and not yet acknowledged (sent or not).
    pub fn unacknowledged(&self) -> u64 {
        self.tx.data_end() - self.tx.una.min(self.tx.data_end())
    }

    /// Octets queued and not yet sent once: 0 when the next octets queued will start
    /// a segment of their own.
    pub fn unsent(&self) -> u64 {
        self.tx.data_end().saturating_sub(self.tx.nxt.max(1))
    }

    /// The smoothed round-trip time, once measured.
    pub fn srtt(&self) -> Option<Duration> {
        self.tx.rtt.srtt()
    }

    /// The congestion window, in octets.
    pub fn congestion_window(&self) -> u64 {
        self.tx.cwnd
    }

    fn can_send(&self) -> bool {
        matches!(
            self.state,
            State::SynSent | State::SynReceived | State::Established | State::CloseWait
        ) && self.tx.fin.is_none()
    }

    /// Queues as much of `data` as fits as a byte stream; returns how much.
    pub fn send(&mut self, data: &[u8]) -> Result<usize, SendError> {
        if !self.can_send() {
            return Err(SendError::Closed);
        }
        match self.tx.buf.write(data) {
            0 if !data.is_empty() => Err(self.refused()),
            n => {
                self.send_refused = false;
                Ok(n)
            }
        }
    }

    /// A send found no room: unless a window holds the data back (the buffer is then
    /// full because of it), the time until the next transmit attempt counts as held
    /// back by the send buffer (from the last time the connection was given).
    fn refused(&mut self) -> SendError {
        self.send_refused = true;
        if self.limited.is_none() {
            self.set_limit(self.clock, Some(Limit::SendBuffer));
        }
        SendError::Full
    }

    /// What holds new data back from `now` on; the time under the previous reason is
    /// added to its counter.
    fn set_limit(&mut self, now: Duration, limit: Option<Limit>) {
        let hole = (limit == Some(Limit::Rwnd) && self.tx.scoreboard.bytes() > 0)
            .then(|| self.tx.hole_wait())
            .flatten();
        if self.limited.map(|(l, _)| l) == limit && hole == self.limited_by_hole {
            return;
        }
        if let Some((l, since)) = self.limited {
            let us = now.saturating_sub(since).as_micros() as u64;
            match l {
                Limit::Cwnd => self.stats.cwnd_limited_us += us,
                Limit::Rwnd => {
                    self.stats.rwnd_limited_us += us;
                    if let Some(w) = self.limited_by_hole {
                        self.stats.rwnd_hole_limited_us += us;
                        self.stats.timing.hole_limited(w, us);
                    }
                }
                Limit::SendBuffer => self.stats.sndbuf_limited_us += us,
            }
        }
        if hole.is_some() && self.limited_by_hole.is_none() {
            let t = &mut self.stats.timing;
            let sacked = self.tx.scoreboard.bytes();
            t.hole_limited_waits += 1;
            t.hole_limited_sacked_sum += sacked;
            t.hole_limited_sacked_max = t.hole_limited_sacked_max.max(sacked);
        }
        self.limited = limit.map(|l| (l, now));
        self.limited_by_hole = hole;
    }

    /// Queues `record` whole, or nothing: segments hold whole records when they fit
    /// ([`Connection::max_payload`]), several small ones together, and a record larger
    /// than a segment is cut at segment size.
    pub fn send_record(&mut self, record: &[u8]) -> Result<(), SendError> {
        if !self.can_send() {
            return Err(SendError::Closed);
        }
        if self.tx.buf.write_record(record) {
            self.send_refused = false;
            Ok(())
        } else {
            Err(self.refused())
        }
    }

    /// [`Connection::send_record`] for a record of `len` octets given in parts (an
    /// FPDU's gather list): `feed` hands them, in order, to the function it is given.
    pub fn send_record_with(&mut self, len: usize, feed: &mut Feed<'_>) -> Result<(), SendError> {
        if !self.can_send() {
            return Err(SendError::Closed);
        }
        if self.tx.buf.write_record_with(len, feed) {
            self.send_refused = false;
            Ok(())
        } else {
            Err(self.refused())
        }
    }

    /// The layer above is done with `n` more in-order octets: the window reopens.
    pub fn release(&mut self, n: usize) {
        let in_order = self.rx.nxt.saturating_sub(1);
        self.rx.released = (self.rx.released + n as u64).min(in_order);
        self.rx.note_starved(self.clock);
        if self.state.is_synchronized() && self.rx.window_update_due(self.tx.mss) {
            self.rx.ack_now = true;
        }
    }

    /// Closes our direction gracefully: queued data goes out, then FIN. Receiving goes
    /// on until the peer's FIN. Before the handshake completes, the FIN waits for it
    /// (a connection with nothing queued in SYN-SENT is simply dropped).
    pub fn close(&mut self) {
        match self.state {
            State::SynSent if self.tx.buf.end() > 0 => self.queue_fin(),
            State::Closed | State::Listen | State::SynSent => self.enter_closed(),
            State::SynReceived | State::Established => {
                self.queue_fin();
                if self.state == State::Established {
                    self.state = State::FinWait1;
                }
            }
            State::CloseWait => {
                self.queue_fin();
                self.state = State::LastAck;
            }
            _ => {}
        }
    }

    fn queue_fin(&mut self) {
        if self.tx.fin.is_none() {
            self.tx.fin = Some(self.tx.data_end());
        }
    }

    /// Resets the connection (RST) and drops everything queued.
    pub fn abort(&mut self) {
        if self.state.is_synchronized()
            && self.state != State::TimeWait
            && let Some(remote) = self.remote
        {
            self.rst_pending = Some(self.bare(remote, self.tx.seq(self.tx.nxt), Flags::RST));
        }
        self.enter_closed();
    }

    /// The next thing that happened, oldest first.
    pub fn poll_event(&mut self) -> Option<Event> {
        (!self.events.is_empty()).then(|| self.events.remove(0))
    }

    fn event(&mut self, e: Event) {
        let _ = self.events.try_push(e);
    }

    fn enter_closed(&mut self) {
        self.state = State::Closed;
        self.timers = Timers::default();
        self.rx.delack_at = None;
        self.rx.ack_now = false;
        self.syn_pending = false;
        self.probe_pending = None;
        self.tlp_due = false;
    }

    fn enter_time_wait(&mut self, now: Duration) {
        self.state = State::TimeWait;
        self.timers = Timers {
            time_wait: Some(now + 2 * self.cfg.msl),
            ..Timers::default()
        };
        self.event(Event::Closed);
    }

    /// A segment from us to `to` with no payload and no options.
    fn bare(&self, to: SocketAddrV4, seq: SeqNum, flags: Flags) -> Segment<'static> {
        Segment {
            src: self.local,
            dst: to,
            seq,
            ack: if flags.contains(Flags::ACK) {
                self.rx.nxt_seq()
            } else {
                SeqNum(0)
            },
            flags,
            window: 0,
            options: Options::default(),
            payload: &[],
        }
    }
}

/// The reset to answer `seg` with when no connection takes it (RFC 9293 3.10.7.1), or
/// `None` for a reset (never answered).
pub fn reset_for(seg: &Segment<'_>) -> Option<Segment<'static>> {
    if seg.flags.contains(Flags::RST) {
        return None;
    }
    let (seq, ack, flags) = if seg.flags.contains(Flags::ACK) {
        (seg.ack, SeqNum(0), Flags::RST)
    } else {
        (SeqNum(0), seg.seq + seg.seq_len(), Flags::RST | Flags::ACK)
    };
    Some(Segment {
        src: seg.dst,
        dst: seg.src,
        seq,
        ack,
        flags,
        window: 0,
        options: Options::default(),
        payload: &[],
    })
}

/// An initial sequence number in the manner of RFC 6528: a clock (4 microsecond
/// ticks) plus a keyed hash of the connection's addresses, so that a new incarnation's
/// numbers are hard to guess and lie ahead of an old one's. `secret` should be random
/// and kept for the process's lifetime.
pub fn initial_sequence(
    secret: u64,
    local: SocketAddrV4,
    remote: SocketAddrV4,
    now: Duration,
) -> SeqNum {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (secret, local, remote).hash(&mut h);
    let ticks = (now.as_micros() / 4) as u32;
    SeqNum(ticks.wrapping_add(h.finish() as u32))
}

impl Connection {
    /// The send side's recovery state in one line, for tracing a stall (the
    /// `lossy_bulk` example prints it at every retransmission timeout): positions
    /// relative to `una`, the windows, the recovery flags, the timers and every
    /// segment in flight (`s` SACKed, `L` taken as lost, `r` sent again, then when it
    /// was last sent).
    #[doc(hidden)]
    pub fn recovery_snapshot(&self, now: Duration) -> String {
        use std::fmt::Write;
        let t = &self.tx;
        let rel = |p: u64| p.saturating_sub(t.una);
        let ago =
            |at: Option<Duration>| at.map(|a| a.as_secs_f64() * 1e6 - now.as_secs_f64() * 1e6);
        let mut s = format!(
            "una {} flight {} cwnd {} ssthresh {} pipe {} lost {} wnd {} rec {} rto_rec {} \
             recover +{} rtx_now {} srtt {:?} rto {:?} tlp {:?} timers(us from now) rto {:?} \
             reo {:?} pto {:?} sacked {}\n  segs:",
            t.una,
            t.flight(),
            t.cwnd,
            t.ssthresh,
            t.pipe(),
            t.sent.lost_bytes(),
            t.wnd,
            t.in_recovery,
            t.rto_recovery,
            rel(t.recover),
            t.rtx_now,
            t.rtt.srtt(),
            t.rtt.timeout(),
            t.tlp,
            ago(self.timers.rto),
            ago(self.timers.reo),
            ago(self.timers.pto),
            t.scoreboard.bytes(),
        );
        for i in 0..t.sent.len() {
            let g = t.sent.get(i);
            let _ = write!(
                s,
                " [{}+{} {}{}{} {:.0}]",
                rel(g.start),
                g.end - g.start,
                if g.sacked { "s" } else { "" },
                if g.lost { "L" } else { "" },
                if g.rtx { "r" } else { "" },
                g.xmit.as_secs_f64() * 1e6 - now.as_secs_f64() * 1e6,
            );
        }
        s
    }
}
