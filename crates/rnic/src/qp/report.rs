//! A QP's state in one line, for a user reporting a hang: its transmit queues (Reads
//! outstanding, inbound Reads waiting for their responses), how far its receive path
//! got, who drives its connection, and the connection's own line where the transport
//! has one.

use super::QpShared;
use crate::transport::user::report::with_lock;

impl QpShared {
    /// See the module notes. Waits at most a moment for the QP's lock: a lock that
    /// stays held is reported as such.
    pub(crate) fn stall_report(&self) -> String {
        let body = with_lock(&self.inner, |g| {
            let conn = g.conn.as_ref().map_or("no connection".to_string(), |c| {
                format!(
                    "transmit queue {} octets flushed {}, transport {}",
                    c.tx.held(),
                    c.tx.is_flushed(),
                    c.transport.stall_report()
                )
            });
            format!(
                "{:?} {}, send {}, receives posted {}, placed {} octets, stream at {}, owner claimed {} (lease {:?}), {conn}",
                g.core.state(),
                g.core.transmit_report(),
                self.send_cq.stall_report(),
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
}
