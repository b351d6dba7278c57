//! What a user reports of a hang on the own TCP: the stack's state (who was due to do
//! what, and when), every connection's TCP state and readiness flags, and the packets
//! the simulated network still holds. Taken with `try_lock` only: a stack whose lock
//! stays held is itself the finding, and the report must not hang with it.

use super::stack::{UserStack, nanos};
use crate::engine::now;
use std::fmt::Write;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How long a report waits for a lock before saying it is held.
const PATIENCE: Duration = Duration::from_millis(200);

/// `t` relative to `now`, in microseconds (negative: past).
fn rel_us(t: Duration, now: Duration) -> f64 {
    t.as_secs_f64() * 1e6 - now.as_secs_f64() * 1e6
}

/// `t` relative to `now` in whole microseconds, or `none`.
pub(super) fn opt_us(t: Option<Duration>, now: Duration) -> String {
    t.map_or("none".to_string(), |t| format!("{:.0}us", rel_us(t, now)))
}

/// Calls `f` with the lock of `m` if it can be had within [`PATIENCE`].
pub(crate) fn with_lock<T, R>(m: &std::sync::Mutex<T>, f: impl FnOnce(&T) -> R) -> Option<R> {
    let until = std::time::Instant::now() + PATIENCE;
    loop {
        if let Ok(g) = m.try_lock() {
            return Some(f(&g));
        }
        if std::time::Instant::now() >= until {
            return None;
        }
        std::thread::yield_now();
    }
}

impl UserStack {
    /// The stack in a few lines: its thread's turns and the pumps polling threads did,
    /// the backlog flags, the planned wake and the next timer, when a packet last came
    /// in; then each connection ([`softrnic_tcp::Stack::stall_reports`]) with its
    /// readiness flags (`r` readable, `R` a read waits for a wake, `W` a send does).
    pub(crate) fn stall_report(&self) -> String {
        let t = now();
        let due = self.due.load(Ordering::SeqCst);
        let mut s = format!(
            "stack {}: turns {}, polled pumps {}, backlog {}, taker {}, due {}",
            self.addr,
            self.turns.load(Ordering::Relaxed),
            self.polled_pumps.load(Ordering::Relaxed),
            self.backlog.load(Ordering::SeqCst),
            self.taker.load(Ordering::SeqCst),
            if due == u64::MAX {
                "never".to_string()
            } else {
                format!("{:.0}us", (due as f64 - nanos(t) as f64) / 1e3)
            },
        );
        let body = with_lock(&self.inner, |g| {
            let mut b = String::new();
            let _ = write!(
                b,
                ", planned {}, next timer {}, last packet in {}",
                opt_us(g.planned, t),
                opt_us(g.next_wake(), t),
                opt_us(g.last_rx, t),
            );
            let ids: Vec<_> = g.signals.iter().collect();
            for line in g.stack.stall_reports(t) {
                let _ = write!(b, "\n  {line}");
            }
            for (id, sig) in ids {
                let _ = write!(
                    b,
                    "\n  conn {id:?} flags {}{}{}",
                    if sig.readable.load(Ordering::SeqCst) {
                        "r"
                    } else {
                        "-"
                    },
                    if sig.want_read.load(Ordering::SeqCst) {
                        "R"
                    } else {
                        "-"
                    },
                    if sig.want_write.load(Ordering::SeqCst) {
                        "W"
                    } else {
                        "-"
                    },
                );
            }
            b
        });
        s.push_str(
            body.as_deref()
                .unwrap_or(", its lock is held (not released in 200 ms)"),
        );
        s
    }
}
