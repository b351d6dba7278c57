//! Closing a QP's connection: the core's close machine decides (graceful close, the
//! close after a Terminate, the peer's FIN, a lost stream, the close timer), and this
//! module carries its actions out on the transport.

use crate::device::{AsyncEvent, Shared};
use crate::qp::Conn;
use softrnic_proto::QpId;
use softrnic_proto::qp::{CloseAction, Qp as Core};
use std::io;
use std::net::Shutdown;
use std::time::Duration;

/// Takes the close steps the QP's state now allows. Returns true once, when the
/// connection is over for good (the caller then posts [`AsyncEvent::Disconnected`]).
///
/// A reset (the close timer expired) closes the transport at once, so the RST goes out
/// now: with only a zero linger time set, the socket stayed open until the QP was
/// destroyed, and a peer whose own close waited for us never learned it had ended.
pub(crate) fn close_if_done(
    core: &mut Core,
    conn: &mut Option<Conn>,
    now: Duration,
    engine: usize,
    dev: &Shared,
) -> bool {
    let Some(c) = conn.as_mut() else {
        return false;
    };
    let flushed = c.tx.is_flushed();
    while let Some(action) = core.poll_close(flushed, now) {
        match action {
            CloseAction::Fin => {
                let _ = c.transport.shutdown(Shutdown::Write);
            }
            CloseAction::Shutdown => {
                let _ = c.transport.shutdown(Shutdown::Both);
            }
            CloseAction::Disconnect => {
                // Whatever ended the QP, the peer learns now instead of waiting on a
                // silent connection.
                let _ = c.transport.shutdown(Shutdown::Both);
                if let Some(e) = dev.engines.get(engine) {
                    e.deregister(&mut *c.transport, core.id());
                }
                return true;
            }
            CloseAction::Reset => {
                // Dropping the transport after `abort` sends RST; the engine forgets
                // it first.
                c.transport.abort();
                if let Some(e) = dev.engines.get(engine) {
                    e.deregister(&mut *c.transport, core.id());
                }
                drop(conn.take());
                return true;
            }
        }
    }
    false
}

/// The stream failed under the QP (reset, broken pipe, ended mid-FPDU): the program
/// learns ([`AsyncEvent::ConnectionLost`]), and the core goes to error.
pub(crate) fn connection_lost(qp: QpId, core: &mut Core, dev: &Shared, error: io::ErrorKind) {
    dev.post_event(AsyncEvent::ConnectionLost { qp, error });
    core.transport_lost();
}

/// Closes a connection's transport for good: the engine forgets it, and if the
/// connection was still open, it is reset (zero linger time: close sends RST). Returns
/// whether the QP was connected until now (then the caller reports the disconnection).
pub(crate) fn drop_conn(mut c: Conn, core: &mut Core, engine: usize, dev: &Shared) -> bool {
    if !core.transport_closed() {
        c.transport.abort();
    }
    if let Some(e) = dev.engines.get(engine) {
        e.deregister(&mut *c.transport, core.id());
    }
    drop(c);
    core.abandon_transport()
}
