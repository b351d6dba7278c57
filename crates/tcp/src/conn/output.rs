//! What to send next: a pending reset, our SYN (or SYN-ACK), a tail loss probe, lost
//! then new data (with FIN at the end), a window or keep-alive probe, or a bare ACK
//! (with a D-SACK block first when a duplicate arrived). Every segment is
//! written straight into the caller's buffer.

use super::tx::{Blocked, Pick, Tlp};
use super::{Connection, Lent, Limit, Probe, State};
use crate::segment::{Flags, IPV4_HEADER_LEN, MAX_SACK_BLOCKS, Options, Segment, TCP_HEADER_LEN};
use std::net::SocketAddrV4;
use std::time::Duration;

impl Connection {
    /// [`Connection::poll_transmit`] for a link that carries a payload by reference (an
    /// in-process one, with [`crate::Config::checksum_offload`]): a segment of a large
    /// record comes out as its headers in `out` (the length returned) and its payload
    /// as a [`Lent`] share of the send buffer, not copied.
    pub fn poll_transmit_lent(
        &mut self,
        now: Duration,
        out: &mut [u8],
    ) -> Option<(usize, Option<Lent>)> {
        self.lending = self.cfg.checksum_offload;
        self.lent = None;
        let n = self.poll_transmit(now, out);
        self.lending = false;
        n.map(|n| (n, self.lent.take()))
    }

    /// Writes the next packet to send into `out` and returns its length, or `None`
    /// when nothing is due. Call it until it returns `None` after every input and
    /// timeout. `out` should hold a whole packet (the MTU, `mss + 40` octets); a smaller
    /// one gets smaller segments.
    pub fn poll_transmit(&mut self, now: Duration, out: &mut [u8]) -> Option<usize> {
        self.clock = self.clock.max(now);
        if let Some(rst) = &self.rst_pending {
            let n = rst
                .emit_parts([&[], &[]], out, !self.cfg.checksum_offload)
                .ok()?;
            self.rst_pending = None;
            self.stats.segments_out += 1;
            self.stats.resets_out += 1;
            return Some(n);
        }
        let remote = self.remote?;
        match self.state {
            State::Closed | State::Listen => None,
            State::SynSent | State::SynReceived if self.syn_pending => {
                self.send_syn(now, remote, out)
            }
            State::SynSent => None,
            State::SynReceived | State::TimeWait => self.send_ack(remote, out),
            _ => self.send_synchronized(now, remote, out),
        }
    }

    /// Counts the time new data waited for a window or for room in the send buffer
    /// (`Stats::cwnd_limited_us`, `rwnd_limited_us`, `sndbuf_limited_us`), from one
    /// transmit attempt (or refused send) to the next that finds another reason (or
    /// none).
    fn note_limit(&mut self, now: Duration, blocked: Option<Blocked>) {
        let limit = match blocked {
            None => None,
            Some(Blocked::Cwnd) => Some(Limit::Cwnd),
            Some(Blocked::Window) => Some(Limit::Rwnd),
            Some(Blocked::Idle) => (self.send_refused
                || self.tx.buf.free() < usize::from(self.cfg.mss))
            .then_some(Limit::SendBuffer),
        };
        self.set_limit(now, limit);
    }

    fn send_syn(&mut self, now: Duration, remote: SocketAddrV4, out: &mut [u8]) -> Option<usize> {
        let synack = self.state == State::SynReceived;
        let options = Options {
            mss: Some(self.cfg.mss),
            window_scale: (self.cfg.window_scale && (!synack || self.tx.scaling))
                .then(|| self.cfg.wscale()),
            sack_permitted: self.cfg.sack && (!synack || self.tx.sack_ok),
            ..Options::default()
        };
        let mut flags = Flags::SYN;
        if synack {
            flags |= Flags::ACK;
        }
        let mut seg = self.bare(remote, self.tx.iss, flags);
        seg.window = self.cfg.recv_buffer.min(u32::from(u16::MAX)) as u16;
        seg.options = options;
        let n = self.emit(&seg, out)?;
        self.syn_pending = false;
        self.tx.nxt = self.tx.nxt.max(1);
        if self.retries == 0 && self.tx.timed.is_none() {
            self.tx.timed = Some((1, now));
        }
        if self.retries > 0 {
            self.stats.retransmitted_segments += 1;
        }
        self.arm_rto(now);
        self.rx.acked();
        self.stats.segments_out += 1;
        Some(n)
    }

    fn send_synchronized(
        &mut self,
        now: Duration,
        remote: SocketAddrV4,
        out: &mut [u8],
    ) -> Option<usize> {
        if self.rx.dup_ack_due {
            // A bare ACK first: it is what tells the peer of a loss (a duplicate ACK,
            // with SACK blocks), where a data segment's ACK would not.
            return self.send_ack(remote, out);
        }
        let room = out.len().saturating_sub(IPV4_HEADER_LEN + TCP_HEADER_LEN) as u64;
        if self.tlp_due {
            self.tlp_due = false;
            if let Some(p) = self.tx.pick_probe(room) {
                return self.send_probe(now, remote, p, out);
            }
        }
        let picked = self.tx.pick(room, self.force_send);
        match &picked {
            // A retransmission says nothing of what holds new data back.
            Ok(p) if p.rtx => {}
            _ => self.note_limit(now, picked.as_ref().err().copied()),
        }
        match picked {
            Ok(p) => return self.send_data(now, remote, p, out),
            Err(Blocked::Window) if self.tx.flight() == 0 && self.timers.persist.is_none() => {
                let backoff = 1u32 << self.persist_backoff.min(16);
                let wait = self.tx.rtt.rto().saturating_mul(backoff);
                self.timers.persist = Some(now + wait.min(self.cfg.rto_max));
            }
            Err(_) => {}
        }
        if let Some(probe) = self.probe_pending {
            // An out-of-window ACK (sequence number one below SND.UNA): the peer answers
            // with its current window, whether it is a window or a keep-alive probe.
            let seg = self.header(
                remote,
                self.tx.seq(self.tx.una) - 1,
                Flags::ACK,
                0,
                out.len(),
            );
            let n = self.emit(&seg, out)?;
            self.probe_pending = None;
            self.rx.acked();
            self.stats.segments_out += 1;
            match probe {
                Probe::Window => self.stats.window_probes += 1,
                Probe::Keepalive => self.stats.keepalive_probes += 1,
            }
            return Some(n);
        }
        self.send_ack(remote, out)
    }

    fn send_data(
        &mut self,
        now: Duration,
        remote: SocketAddrV4,
        p: Pick,
        out: &mut [u8],
    ) -> Option<usize> {
        let data_end = self.tx.data_end();
        let pay_end = p.end.min(data_end);
        let pay_start = p.start.min(pay_end);
        let len = pay_end - pay_start;
        let mut flags = Flags::ACK;
        if self.tx.fin.is_some_and(|f| p.end > f) {
            flags |= Flags::FIN;
        }
        if len > 0 && pay_end == data_end {
            flags |= Flags::PSH;
        }
        let seg = self.header(remote, self.tx.seq(p.start), flags, len as usize, out.len());
        let lent = self
            .lending
            .then(|| self.tx.buf.lend(pay_start - 1, pay_end - 1))
            .flatten();
        let n = match &lent {
            // The payload travels by reference: only the headers are written.
            Some(_) => seg.emit_headers(len as usize, out).ok()?,
            None => {
                let parts = self.tx.buf.slices(pay_start - 1, pay_end - 1);
                seg.emit_parts(parts, out, !self.cfg.checksum_offload)
                    .ok()?
            }
        };
        self.lent = lent;
        if p.rtx && p.start == self.tx.una {
            // The oldest segment went again: give it a whole timeout to be
            // acknowledged (as Linux does), lest the timer fire during recovery.
            self.timers.rto = None;
        }
        self.tx.sent(p, now, &mut self.stats.timing);
        self.force_send = false;
        self.rx.acked();
        self.arm_rto(now);
        // (The probe timer stops while segments taken as lost may still go now, and
        // runs once the window holds the rest back.)
        self.arm_probe(now);
        self.stats.segments_out += 1;
        if p.rtx {
            self.stats.retransmitted_segments += 1;
            self.stats.retransmitted_bytes += len;
        } else {
            self.stats.bytes_out += len;
        }
        Some(n)
    }

    /// The tail loss probe `p` goes out; the retransmission timer restarts behind it.
    fn send_probe(
        &mut self,
        now: Duration,
        remote: SocketAddrV4,
        p: Pick,
        out: &mut [u8],
    ) -> Option<usize> {
        let n = self.send_data(now, remote, p, out)?;
        if p.rtx {
            self.tx.probe_resent(p.start, p.end);
        }
        self.stats.loss_probes += 1;
        let before = self.tx.tlp;
        self.tx.tlp = Some(Tlp {
            end: self.tx.nxt,
            // A probe sent again after one that resent a range keeps that range: a
            // duplicate of it still says the original arrived.
            resent: p
                .rtx
                .then_some((p.start, p.end))
                .or(before.and_then(|t| t.resent)),
            in_recovery: before.map_or(self.tx.recovering(), |t| t.in_recovery),
            sent: before.map_or(1, |t| t.sent + 1),
        });
        self.timers.pto = None;
        self.timers.rto = Some(now + self.tx.rtt.timeout());
        let sent = self.tx.tlp.map_or(1, |t| t.sent);
        self.arm_next_probe(now, sent);
        Some(n)
    }

    fn send_ack(&mut self, remote: SocketAddrV4, out: &mut [u8]) -> Option<usize> {
        if !self.rx.ack_now {
            return None;
        }
        let followup = self.rx.sack_followup();
        let seg = self.header(remote, self.tx.seq(self.tx.nxt), Flags::ACK, 0, out.len());
        let n = self.emit(&seg, out)?;
        self.rx.acked();
        self.stats.segments_out += 1;
        if followup {
            self.stats.sack_followup_acks += 1;
        }
        Some(n)
    }

    /// A segment header carrying our ACK, window and as many SACK blocks as fit beside
    /// `payload` octets (within the MSS, RFC 6691, and within `room`).
    fn header(
        &mut self,
        remote: SocketAddrV4,
        seq: crate::SeqNum,
        flags: Flags,
        payload: usize,
        room: usize,
    ) -> Segment<'static> {
        self.rx.open_window(self.tx.mss);
        let mut seg = self.bare(remote, seq, flags);
        seg.window = self.rx.announce_window();
        if self.tx.sack_ok && (!self.rx.ooo.is_empty() || self.rx.dsack.is_some()) {
            let mss_left = (self.tx.mss as usize).saturating_sub(payload);
            let room_left = room.saturating_sub(IPV4_HEADER_LEN + TCP_HEADER_LEN + payload);
            let n = (mss_left.min(room_left).saturating_sub(4) / 8).min(MAX_SACK_BLOCKS);
            seg.options.sack = self.rx.sack_blocks(n);
            if n > 0 && self.rx.dsack.is_some() {
                self.stats.dsacks_out += 1;
            }
        }
        seg
    }

    /// Writes a segment without payload, with its TCP checksum unless the link
    /// computes it.
    fn emit(&self, seg: &Segment<'_>, out: &mut [u8]) -> Option<usize> {
        seg.emit_parts([&[], &[]], out, !self.cfg.checksum_offload)
            .ok()
    }

    /// Starts the retransmission timer unless it runs (RFC 6298 5.1).
    fn arm_rto(&mut self, now: Duration) {
        if self.timers.rto.is_none() {
            self.timers.rto = Some(now + self.tx.rtt.timeout());
        }
    }
}
