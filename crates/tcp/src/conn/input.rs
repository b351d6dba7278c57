//! Segment arrival (RFC 9293 section 3.10.7), state by state: the handshake, the
//! acceptability test, resets and SYNs checked as RFC 5961 asks (exact sequence number,
//! else a rate-limited challenge ACK), acknowledgment processing, payload and FIN.

use super::{Connection, Event, State};
use crate::receiver::Receiver;
use crate::segment::{Flags, ParseError, Segment};
use std::time::Duration;

/// The MSS assumed when the peer's SYN names none (RFC 9293 3.7.1).
const DEFAULT_MSS: u16 = 536;
/// The smallest MSS we accept from a peer, so that a hostile one cannot make us send
/// one-octet segments.
const MIN_PEER_MSS: u16 = 64;

impl Connection {
    /// Handles one received IPv4 packet. A packet that does not parse (bad checksum,
    /// malformed) is counted and returned as the error; a segment for another
    /// connection is ignored (see [`Connection::matches`]). The TCP checksum is not
    /// verified with [`crate::Config::checksum_offload`].
    pub fn handle_packet<R: Receiver>(
        &mut self,
        now: Duration,
        packet: &[u8],
        sink: &mut R,
    ) -> Result<(), ParseError> {
        match Segment::parse_with(packet, !self.cfg.checksum_offload) {
            Ok(seg) => {
                self.handle_segment(now, &seg, sink);
                Ok(())
            }
            Err(e) => {
                match e {
                    ParseError::Ipv4Checksum | ParseError::TcpChecksum => {
                        self.stats.dropped_checksum += 1
                    }
                    _ => self.stats.dropped_malformed += 1,
                }
                Err(e)
            }
        }
    }

    /// Handles one received segment; returns false if it is not for this connection.
    pub fn handle_segment<R: Receiver>(
        &mut self,
        now: Duration,
        seg: &Segment<'_>,
        sink: &mut R,
    ) -> bool {
        if !self.matches(seg) {
            return false;
        }
        self.clock = self.clock.max(now);
        self.stats.segments_in += 1;
        match self.state {
            State::Closed => self.rst_pending = super::reset_for(seg),
            State::Listen => self.on_listen(seg),
            State::SynSent => self.on_syn_sent(now, seg),
            _ => self.on_synchronized(now, seg, sink),
        }
        true
    }

    fn on_listen(&mut self, seg: &Segment<'_>) {
        let f = seg.flags;
        if f.contains(Flags::RST) {
            return;
        }
        if f.contains(Flags::ACK) {
            self.rst_pending = super::reset_for(seg);
            return;
        }
        if !f.contains(Flags::SYN) {
            return;
        }
        self.remote = Some(seg.src);
        self.take_syn(seg);
        self.state = State::SynReceived;
        self.syn_pending = true;
    }

    /// The peer's SYN: its sequence numbers and what it offers (MSS, window scale, SACK).
    fn take_syn(&mut self, seg: &Segment<'_>) {
        self.rx.synchronize(seg.seq);
        let peer_mss = seg.options.mss.unwrap_or(DEFAULT_MSS).max(MIN_PEER_MSS);
        self.tx.mss = u64::from(peer_mss.min(self.cfg.mss));
        self.rx.mss = self.tx.mss;
        self.tx.buf.set_segment(self.tx.mss as usize);
        self.tx.cwnd = u64::from(self.cfg.initial_cwnd) * self.tx.mss;
        match seg.options.window_scale {
            Some(shift) if self.cfg.window_scale => {
                self.tx.scaling = true;
                self.tx.wscale = shift.min(14);
                self.rx.wscale = self.cfg.wscale();
            }
            _ => {
                self.tx.scaling = false;
                self.tx.wscale = 0;
                self.rx.wscale = 0;
            }
        }
        self.tx.sack_ok = self.cfg.sack && seg.options.sack_permitted;
        // The window in a SYN is never scaled (RFC 7323 2.2).
        self.tx.wnd = u64::from(seg.window);
        self.tx.max_wnd = self.tx.wnd;
        self.tx.wl1 = 0;
        self.tx.wl2 = 0;
    }

    fn on_syn_sent(&mut self, now: Duration, seg: &Segment<'_>) {
        let f = seg.flags;
        let ack = f.contains(Flags::ACK).then(|| self.tx.pos(seg.ack));
        if let Some(a) = ack
            && (a <= 0 || a > self.tx.nxt as i64)
        {
            if !f.contains(Flags::RST) {
                self.rst_pending = super::reset_for(seg);
            }
            return;
        }
        if f.contains(Flags::RST) {
            if ack.is_some() {
                self.event(Event::Reset);
                self.enter_closed();
            }
            return;
        }
        if !f.contains(Flags::SYN) {
            return;
        }
        self.take_syn(seg);
        match ack {
            Some(a) => {
                self.tx.advance(a as u64, now, &mut self.stats.timing);
                self.syn_acked();
                self.state = if self.tx.fin.is_some() {
                    State::FinWait1
                } else {
                    State::Established
                };
                self.event(Event::Established);
                self.rx.ack_now = true;
            }
            None => {
                // Simultaneous open: answer with SYN-ACK from the same ISS.
                self.tx.nxt = 0;
                self.state = State::SynReceived;
                self.syn_pending = true;
            }
        }
    }

    fn syn_acked(&mut self) {
        if self.retries > 0 {
            self.tx.rtt.after_syn_timeout();
        }
        self.syn_pending = false;
        self.retries = 0;
        self.timers.rto = None;
    }

    fn on_synchronized<R: Receiver>(&mut self, now: Duration, seg: &Segment<'_>, sink: &mut R) {
        let f = seg.flags;
        self.touch(now);
        if self.state == State::SynReceived
            && f.contains(Flags::SYN)
            && !f.contains(Flags::ACK)
            && seg.seq == self.rx.irs
        {
            // The peer did not get our SYN-ACK.
            self.syn_pending = true;
            return;
        }
        let start = self.rx.pos(seg.seq);
        let nxt = self.rx.nxt as i64;
        let wnd = self.rx.window() as i64;
        if f.contains(Flags::RST) {
            if start == nxt {
                self.on_reset();
            } else if start > nxt && start < nxt + wnd.max(1) {
                self.challenge_ack(now);
            }
            return;
        }
        let len = i64::from(seg.seq_len());
        let acceptable = match (len, wnd) {
            (0, 0) => start == nxt,
            (0, _) => start >= nxt && start < nxt + wnd,
            (_, 0) => false,
            _ => {
                (start >= nxt && start < nxt + wnd)
                    || (start + len > nxt && start + len <= nxt + wnd)
            }
        };
        if !acceptable {
            self.stats.dropped_unacceptable += 1;
            let end = start + seg.payload.len() as i64;
            if !seg.payload.is_empty() && end <= nxt && end > 1 {
                // Data that arrived before: reported as a duplicate (D-SACK).
                self.rx.dsack = Some((start.max(1) as u64, end as u64));
            }
            if self.state == State::TimeWait && f.contains(Flags::FIN) {
                // The peer did not get our ACK of its FIN: ACK again, wait again.
                self.timers.time_wait = Some(now + 2 * self.cfg.msl);
            }
            self.rx.ack_now = true;
            return;
        }
        if f.contains(Flags::SYN) {
            self.challenge_ack(now);
            return;
        }
        if !f.contains(Flags::ACK) {
            return;
        }
        let ack = self.tx.pos(seg.ack);
        if self.state == State::SynReceived {
            if ack < 1 || ack > self.tx.nxt as i64 {
                self.rst_pending = super::reset_for(seg);
                return;
            }
            self.syn_acked();
            self.state = if self.tx.fin.is_some() {
                State::FinWait1
            } else {
                State::Established
            };
            self.event(Event::Established);
        }
        if ack > self.tx.nxt as i64 {
            // Acknowledges what we never sent.
            self.stats.dropped_unacceptable += 1;
            self.rx.ack_now = true;
            return;
        }
        // Too old (RFC 5961 5.2), or before our ISS altogether (possible while
        // SND.UNA is within a window of it; found by fuzzing).
        if ack < (self.tx.una as i64 - self.tx.max_wnd as i64).max(0) {
            self.stats.dropped_unacceptable += 1;
            self.rx.ack_now = true;
            return;
        }
        self.on_ack(now, seg, ack as u64, start);
        if self.tx.all_acked() {
            match self.state {
                State::FinWait1 => self.state = State::FinWait2,
                State::Closing => self.enter_time_wait(now),
                State::LastAck => {
                    self.event(Event::Closed);
                    self.enter_closed();
                    return;
                }
                _ => {}
            }
        }
        if matches!(
            self.state,
            State::Established | State::FinWait1 | State::FinWait2
        ) {
            self.on_payload(now, seg, start, sink);
        } else if !seg.payload.is_empty() || f.contains(Flags::FIN) {
            self.rx.ack_now = true;
        }
    }

    /// The acknowledgment and window of an acceptable segment (`ack` is within
    /// `[una - max window, nxt]`): SACK and D-SACK blocks, new data acknowledged, loss
    /// detection (RACK with SACK, duplicate ACKs without), the loss probe's fate.
    fn on_ack(&mut self, now: Duration, seg: &Segment<'_>, ack: u64, start: i64) {
        let window = u64::from(seg.window) << self.tx.wscale;
        let advanced = ack > self.tx.una;
        // The cumulative acknowledgment first, then the SACK blocks: segments it
        // covers were delivered in order, not reordered below what the blocks report.
        let acked = if advanced {
            self.tx.advance(ack, now, &mut self.stats.timing)
        } else {
            0
        };
        let sack = self
            .tx
            .take_sack(&seg.options.sack, ack as i64, now, &mut self.stats.timing);
        // Before the window grows: an acknowledgment that covers everything a timeout
        // sent again would end its recovery there, and the proof that the timeout was
        // spurious (originals delivered) would go unseen.
        if self.tx.timeout_was_spurious() {
            self.stats.spurious_timeouts += 1;
            self.stats.undone_reductions += 1;
        }
        if advanced {
            self.tx.grow(acked);
            self.retries = 0;
            self.timers.rto = (self.tx.flight() > 0).then(|| now + self.tx.rtt.timeout());
        } else if ack == self.tx.una
            && self.tx.flight() > 0
            && seg.payload.is_empty()
            && !seg.flags.intersects(Flags::SYN | Flags::FIN)
            && (window == self.tx.wnd || sack.new)
        {
            self.stats.dup_acks_in += 1;
            if !self.tx.sack_ok && self.tx.on_dupack() {
                self.stats.fast_retransmits += 1;
            }
        }
        if let Some((l, r)) = sack.dsack {
            self.stats.spurious_retransmits += 1;
            if self.tx.on_dsack(l, r) {
                self.stats.undone_reductions += 1;
            }
        }
        self.probe_answered(ack, sack.dsack);
        self.stats.reordered_segments = self.tx.rack.reordered;
        if self.tx.sack_ok && (advanced || sack.new) {
            self.detect_loss(now);
        }
        let (wl1, wl2) = (self.tx.wl1 as i64, self.tx.wl2);
        if start > wl1 || (start == wl1 && ack >= wl2) {
            self.tx.wnd = window;
            self.tx.wl1 = start.max(0) as u64;
            self.tx.wl2 = ack;
            self.tx.max_wnd = self.tx.max_wnd.max(window);
        }
        if self.tx.wnd > 0 {
            self.timers.persist = None;
            self.persist_backoff = 0;
        }
        if advanced || sack.new {
            self.arm_probe(now);
        }
    }

    fn on_payload<R: Receiver>(
        &mut self,
        now: Duration,
        seg: &Segment<'_>,
        start: i64,
        sink: &mut R,
    ) {
        let mut payload = seg.payload;
        let mut start = start;
        if start < 1 {
            // Hostile: the segment reaches back over the peer's SYN.
            let skip = (1 - start).min(payload.len() as i64) as usize;
            payload = &payload[skip..];
            start = 1;
        }
        let out = self.rx.on_data(
            start as u64,
            payload,
            seg.flags.contains(Flags::FIN),
            sink,
            now,
        );
        self.stats.bytes_in += out.kept;
        self.stats.bytes_refused += out.dropped;
        if out.out_of_order {
            self.stats.out_of_order_in += 1;
        }
        if let Some((lasted, held)) = out.hole_filled {
            let t = &mut self.stats.timing;
            t.hole_at_nxt.record(lasted);
            t.ooo_bytes_at_fill_sum += held;
            t.ooo_bytes_at_fill_max = t.ooo_bytes_at_fill_max.max(held);
        }
        if let Some(d) = out.starved {
            self.stats.timing.reader_starved.record(d);
        }
        if out.fin {
            self.on_peer_fin(now);
        }
    }

    fn on_peer_fin(&mut self, now: Duration) {
        self.event(Event::PeerClosed);
        match self.state {
            State::Established => self.state = State::CloseWait,
            State::FinWait1 => self.state = State::Closing,
            State::FinWait2 => self.enter_time_wait(now),
            _ => {}
        }
    }

    /// An acceptable reset (its sequence number is exactly RCV.NXT).
    fn on_reset(&mut self) {
        if self.state == State::SynReceived && self.passive {
            // RFC 9293: a passive open returns to LISTEN.
            let stats = std::mem::take(&mut self.stats);
            *self = Connection::listen(self.cfg.clone(), self.local, self.tx.iss);
            self.stats = stats;
            return;
        }
        if !matches!(self.state, State::TimeWait | State::Closed) {
            self.event(Event::Reset);
        }
        self.enter_closed();
    }

    /// Answers a suspicious RST or SYN with an ACK (RFC 5961), at most
    /// `challenge_ack_limit` a second.
    fn challenge_ack(&mut self, now: Duration) {
        let (slot, count) = self.challenges;
        let count = if now.saturating_sub(slot) >= Duration::from_secs(1) {
            self.challenges.0 = now;
            0
        } else {
            count
        };
        if count < self.cfg.challenge_ack_limit {
            self.challenges.1 = count + 1;
            self.stats.challenge_acks += 1;
            self.rx.ack_now = true;
        } else {
            self.challenges.1 = count;
        }
    }

    /// Something arrived: the connection is not idle.
    fn touch(&mut self, now: Duration) {
        if let Some(ka) = self.cfg.keepalive
            && self.state != State::TimeWait
        {
            self.timers.keepalive = Some(now + ka.idle);
            self.keepalive_sent = 0;
        }
    }
}
