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
pub(crate) fn close_if_done(
    core: &mut Core,
    c: &mut Conn,
    now: Duration,
    engine: usize,
    dev: &Shared,
) -> bool {
    let flushed = c.tx.is_flushed();
    while let Some(action) = core.poll_close(flushed, now) {
        match action {
            CloseAction::Fin => {
                let _ = c.transport.shutdown(Shutdown::Write);
            }
            CloseAction::Shutdown => {
                let _ = c.transport.shutdown(Shutdown::Both);
            }
            CloseAction::Disconnect | CloseAction::Reset => {
                if action == CloseAction::Reset {
                    // Dropping the transport now sends RST.
                    c.transport.abort();
                } else {
                    // Whatever ended the QP, the peer learns now instead of waiting
                    // on a silent connection.
                    let _ = c.transport.shutdown(Shutdown::Both);
                }
                if let Some(e) = dev.engines.get(engine) {
                    e.deregister(&mut *c.transport, core.id());
                }
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
