//! A QP's state in one line, for a user reporting a hang: its transmit queues (Reads
//! outstanding, inbound Reads waiting for their responses), how far its receive path
//! got, who drives its connection, and the connection's own line where the transport
//! has one.

use super::{QpInner, QpShared};
use std::time::Duration;

/// How long a report waits for the QP's lock, as the transport's report does.
const PATIENCE: Duration = Duration::from_millis(200);

impl QpShared {
    /// See the module notes. Waits at most a moment for the QP's lock: a lock that
    /// stays held is reported as such.
    pub(crate) fn stall_report(&self) -> String {
        let body = self.with_lock_patiently(|g| {
            let conn = g.conn.as_ref().map_or("no connection".to_string(), |c| {
                format!(
                    "transmit queue {} octets flushed {}, transport {}",
                    c.tx.held(),
                    c.tx.is_flushed(),
                    c.transport.stall_report()
                )
            });
            format!(
                "{:?} {}, receives posted {}, placed {} octets, stream at {}, owner claimed {} (lease {:?}), {conn}",
                g.core.state(),
                g.core.transmit_report(),
                g.core.recv_queue_len(),
                g.core.rx_placed_bytes(),
                g.core.rx_position(),
                g.owner.is_claimed(),
                g.owner.lease_at(),
            )
        });
        format!(
            "QP {}: {}",
            self.id.0,
            body.as_deref()
                .unwrap_or("its lock is held (not released in 200 ms)")
        )
    }

    /// `f` on the QP's state, if its lock comes free within [`PATIENCE`] (tried, never
    /// waited for: a hang may hold it for good).
    fn with_lock_patiently<R>(&self, f: impl FnOnce(&QpInner) -> R) -> Option<R> {
        let until = std::time::Instant::now() + PATIENCE;
        loop {
            if let Some(Ok(g)) = self.inner.try_lock() {
                return Some(f(&g));
            }
            if std::time::Instant::now() >= until {
                return None;
            }
            std::thread::yield_now();
        }
    }
}
