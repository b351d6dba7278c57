//! A connection's state in one line, for a user reporting a hang: where each direction
//! stands, what holds the sender back, and which timers would wake it.

use super::Connection;
use std::fmt::Write;
use std::time::Duration;

impl Connection {
    /// Both directions in one line, positions as stream offsets (0 is the SYN):
    /// `snd una/nxt/end` (acknowledged, sent, queued), the peer's window, cwnd, octets in
    /// flight and SACKed; `rcv nxt`, what the user has not read yet, the window we
    /// offer (and last announced), octets held out of order; then every armed timer, in
    /// microseconds from `now` (negative: overdue), and the pending flags.
    pub fn stall_report(&self, now: Duration) -> String {
        let t = &self.tx;
        let r = &self.rx;
        let mut s = format!(
            "{:?} snd una {} nxt {} end {} wnd {} cwnd {} flight {} sacked {} rec {} \
             | rcv nxt {} unread {} wnd {} announced {} ooo {} in {} ranges",
            self.state,
            t.una,
            t.nxt,
            t.data_end(),
            t.wnd,
            t.cwnd,
            t.flight(),
            t.scoreboard.bytes(),
            t.in_recovery || t.rto_recovery,
            r.nxt,
            r.nxt.saturating_sub(r.released + 1),
            r.window(),
            r.announced_window(),
            r.ooo.bytes(),
            r.ooo.len(),
        );
        let timers = [
            ("rto", self.timers.rto),
            ("reo", self.timers.reo),
            ("pto", self.timers.pto),
            ("persist", self.timers.persist),
            ("keepalive", self.timers.keepalive),
        ];
        s.push_str(" | timers");
        let mut none = true;
        for (name, at) in timers {
            if let Some(at) = at {
                let us = at.as_secs_f64() * 1e6 - now.as_secs_f64() * 1e6;
                let _ = write!(s, " {name} {us:.0}us");
                none = false;
            }
        }
        if none {
            s.push_str(" none");
        }
        if r.ack_now || self.tlp_due || self.probe_pending.is_some() || t.rtx_now {
            let _ = write!(
                s,
                " | due: ack {} tlp {} probe {:?} rtx {}",
                r.ack_now, self.tlp_due, self.probe_pending, t.rtx_now
            );
        }
        s
    }
}
