//! The connection's timers: retransmission (SYN and data, backed off), the loss probe
//! and RACK's reordering timer (`tlp.rs`), delayed ACK, persist (zero-window probes,
//! backed off), keep-alive and TIME-WAIT. Each is a
//! deadline; the caller asks for the earliest and reports when time has reached it.

use super::{Connection, Event, Probe, State};
use crate::segment::Flags;
use std::time::Duration;

impl Connection {
    /// When [`Connection::handle_timeout`] must be called next, if ever.
    pub fn poll_timeout(&self) -> Option<Duration> {
        let t = &self.timers;
        [
            t.rto,
            t.reo,
            t.pto,
            t.persist,
            t.keepalive,
            t.time_wait,
            self.rx.delack_at,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Time has reached `now`: the timers that expired act (then call
    /// [`Connection::poll_transmit`]).
    pub fn handle_timeout(&mut self, now: Duration) {
        self.clock = self.clock.max(now);
        let due = |t: Option<Duration>| t.is_some_and(|t| t <= now);
        if due(self.rx.delack_at) {
            self.rx.delack_at = None;
            self.rx.ack_now = true;
        }
        if due(self.timers.time_wait) {
            self.enter_closed();
            return;
        }
        if due(self.timers.pto) {
            self.timers.pto = None;
            self.on_probe_timeout(now);
        }
        if due(self.timers.reo) {
            self.timers.reo = None;
            self.detect_loss(now);
        }
        if due(self.timers.rto) && self.rack_decides(now) {
            // RACK is deciding (or has decided) about segments the peer's SACKs
            // cover: the timer waits (see `rack_decides`).
        } else if due(self.timers.rto) {
            self.timers.rto = None;
            self.timers.pto = None;
            self.timers.reo = None;
            self.tlp_due = false;
            self.on_rto(now);
        }
        if due(self.timers.persist) {
            self.timers.persist = None;
            self.on_persist();
        }
        if due(self.timers.keepalive) {
            self.timers.keepalive = None;
            self.on_keepalive(now);
        }
    }

    /// Whether the retransmission timer, expired at `now`, gives way to RACK (RFC
    /// 8985), whose fast recovery repairs a loss without collapsing the window:
    ///
    /// - while RACK's reordering timer runs (segments sent before one the peer SACKed
    ///   are still inside their reordering window; when it expires RACK takes them as
    ///   lost), the timer waits for it, as Linux's does (its reordering timer takes
    ///   the retransmission timer's place);
    /// - when segments RACK took as lost are waiting and the windows let them go now
    ///   (the SACKs that showed the loss arrived in the same turn as the expiry), the
    ///   timer restarts behind their retransmission.
    ///
    /// On a network whose round trips jump (a stalled thread delays a burst of SACKs
    /// past the timer), the timer used to fire first and turn a loss RACK had already
    /// seen into a timeout.
    fn rack_decides(&mut self, now: Duration) -> bool {
        if let Some(reo) = self.timers.reo {
            self.timers.rto = Some(reo);
            return true;
        }
        if self.tx.retransmission_ready() {
            self.timers.rto = Some(now + self.tx.rtt.timeout());
            return true;
        }
        false
    }

    fn on_rto(&mut self, now: Duration) {
        match self.state {
            State::SynSent | State::SynReceived => {
                self.stats.timeouts += 1;
                self.stats.handshake_timeouts += 1;
                self.retries += 1;
                if self.retries > self.cfg.syn_retries {
                    self.give_up();
                    return;
                }
                self.syn_pending = true;
                self.tx.timed = None;
                self.tx.rtt.back_off();
            }
            State::Closed | State::Listen | State::TimeWait => {}
            _ if self.tx.flight() > 0 => {
                self.stats.timeouts += 1;
                self.retries += 1;
                if self.retries > self.cfg.max_retransmissions {
                    self.give_up();
                    return;
                }
                self.tx.on_rto(self.retries, now);
                // The timer runs while anything is in flight, sent again or not.
                self.timers.rto = Some(now + self.tx.rtt.timeout());
            }
            _ => {}
        }
    }

    fn on_persist(&mut self) {
        if !self.state.is_synchronized() || self.tx.flight() > 0 {
            return;
        }
        self.persist_backoff = self.persist_backoff.saturating_add(1);
        if self.tx.wnd == 0 {
            self.probe_pending = Some(Probe::Window);
        } else {
            self.force_send = true;
        }
    }

    fn on_keepalive(&mut self, now: Duration) {
        let Some(ka) = self.cfg.keepalive else {
            return;
        };
        if !self.state.is_synchronized() || self.state == State::TimeWait {
            return;
        }
        if self.tx.flight() > 0 {
            // The retransmission timer watches a busy connection.
            self.timers.keepalive = Some(now + ka.idle);
            return;
        }
        if self.keepalive_sent >= ka.probes {
            self.give_up();
            return;
        }
        self.keepalive_sent += 1;
        self.probe_pending = Some(Probe::Keepalive);
        self.timers.keepalive = Some(now + ka.interval);
    }

    /// Nothing came back: reset the connection and report the timeout.
    fn give_up(&mut self) {
        if self.state.is_synchronized()
            && let Some(remote) = self.remote
        {
            self.rst_pending = Some(self.bare(remote, self.tx.seq(self.tx.nxt), Flags::RST));
        }
        self.event(Event::TimedOut);
        self.enter_closed();
    }
}
