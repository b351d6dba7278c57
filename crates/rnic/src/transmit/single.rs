//! A request posted alone (`Qp::post_send`, a batch of one) that is a small one-SGE
//! Send or Write, to a QP whose transmit buffer is flushed: written into the buffer and
//! handed to the socket at once, before its completion is written. A ping-pong's
//! reply used to go through the run of posts and then `send_gathered`, whose checks
//! and bookkeeping repeat what the post has just established; here the FPDU's octets
//! go to `send(2)` from the post itself, and what the post does after it (the
//! completion) is off the message's way.

use super::{TxQueue, write_small};
use crate::close::connection_lost;
use crate::device::Shared;
use crate::qp::{Conn, QpStats};
use softrnic_proto::qp::{Gathered, Qp as Core};
use softrnic_proto::{QpId, SendWr};
use std::io;

/// Posts `wr` and sends its FPDU, if it is a request the direct post takes
/// ([`Core::post_single_small`]) and the connection has nothing waiting to be sent
/// (no gathered octets unsent, no large FPDU, the socket not known to be full, the
/// transport open). Returns None, with nothing done, otherwise: the caller posts it
/// the general way, so a misuse fails with the same error value and completion.
///
/// The octets the socket does not take stay in the transmit buffer, in order, for the
/// progress pass that follows (a full socket marks the queue blocked, as
/// `send_gathered` does); a failed send ends the connection as it does there, after
/// the request completed (it was copied: handed to the RNIC).
#[inline(always)]
pub(crate) fn post_single(
    qp: QpId,
    core: &mut Core,
    conn: &mut Conn,
    stats: &mut QpStats,
    dev: &Shared,
    wr: &SendWr,
) -> Option<()> {
    let tx = &mut conn.tx;
    if !tx.pending.is_empty() || tx.sent != tx.buf.len() || tx.blocked || core.transport_closed() {
        return None;
    }
    let TxQueue {
        buf,
        sent,
        region,
        memo,
        blocked,
        ..
    } = tx;
    let transport = &mut conn.transport;
    let mut failed = None;
    let gathered = core.post_single_small(wr, &dev.tpt, memo, |f| {
        let g = write_small(f, buf, sent, dev, region);
        if g == Gathered::Taken {
            stats.tx_syscalls += 1;
            let r = transport.send(buf.get(*sent..).unwrap_or_default());
            stats.sent(&r);
            match r {
                Ok(n) => *sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => *blocked = true,
                // The pass that follows tries again.
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => failed = Some(e.kind()),
            }
        }
        g
    })?;
    match gathered {
        Gathered::Taken => stats.tx_fpdus += 1,
        Gathered::NoRoom => {}
        // As in `post_gathered`: a region vanished between the TPT check and the copy.
        Gathered::Lost => core.to_error(),
    }
    if let Some(kind) = failed {
        connection_lost(qp, core, dev, kind);
    }
    Some(())
}

#[cfg(test)]
#[path = "../transmit_single_tests.rs"]
mod tests;
