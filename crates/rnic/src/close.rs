//! Closing a QP's connection: graceful close (FIN once everything queued is out), the
//! close after a Terminate, the peer's FIN, a lost stream, and the abortive close (RST).
//! The flags beside the core's `QpState` (`fin_sent`, `eof`, `closed`, `disconnected`)
//! are this module's.

use crate::device::{AsyncEvent, Shared};
use crate::qp::Conn;
use softrnic_proto::qp::Qp as Core;
use softrnic_proto::{QpId, QpState};
use std::io;
use std::net::Shutdown;

/// Takes the steps of closing that the QP's state now allows: after a Terminate went
/// out, after the peer's FIN, after a graceful close drained the send queue. Returns
/// true once, when the connection is closed for good (the caller then posts
/// [`AsyncEvent::Disconnected`]).
pub(crate) fn close_if_done(
    core: &mut Core,
    c: &mut Conn,
    disconnected: &mut bool,
    engine: usize,
    dev: &Shared,
) -> bool {
    let flushed = c.tx.is_flushed();
    if core.terminate_sent() && !c.closed && flushed {
        // Terminate is out: close the connection and finish going to error.
        let _ = c.transport.shutdown(Shutdown::Both);
        c.closed = true;
        core.transport_closed();
    }
    if c.eof && core.state() == QpState::Rts {
        // The peer closed first: finish what is queued, then close our side too.
        core.close();
    }
    if core.ready_to_fin() && !c.fin_sent && flushed {
        let _ = c.transport.shutdown(Shutdown::Write);
        c.fin_sent = true;
    }
    let done = c.closed || (c.eof && (c.fin_sent || core.state() != QpState::Closing));
    if done && core.state() != QpState::Error {
        core.transport_closed();
    }
    if (c.closed || (c.eof && c.fin_sent) || (core.state() == QpState::Error && flushed))
        && !*disconnected
    {
        *disconnected = true;
        // Whatever ended the QP (a local error, a Terminate received, a region gone,
        // a lost stream), the connection closes now, so the peer learns and flushes
        // too instead of waiting on a silent connection. (After a graceful close,
        // a reset or our own Terminate this changes nothing.)
        let _ = c.transport.shutdown(Shutdown::Both);
        if let Some(e) = dev.engines.get(engine) {
            e.deregister(&mut *c.transport, core.id());
        }
        c.closed = true;
        return true;
    }
    false
}

/// The stream failed under the QP (reset, broken pipe, ended mid-FPDU): it is closed,
/// the program learns ([`AsyncEvent::ConnectionLost`]), and the core goes to error.
pub(crate) fn connection_lost(
    qp: QpId,
    conn: &mut Conn,
    core: &mut Core,
    dev: &Shared,
    error: io::ErrorKind,
) {
    conn.closed = true;
    dev.post_event(AsyncEvent::ConnectionLost { qp, error });
    core.transport_closed();
}

/// Closes a connection's transport for good: the engine forgets it, and if the connection
/// was still open, it is reset (zero linger time: close sends RST).
pub(crate) fn drop_conn(mut c: Conn, qp: QpId, engine: usize, dev: &Shared) {
    if !c.closed {
        c.transport.abort();
    }
    if let Some(e) = dev.engines.get(engine) {
        e.deregister(&mut *c.transport, qp);
    }
    drop(c);
}
