//! The server side of the softrnic benchmarks (the client's metadata in MPA private
//! data, not `-R`): it serves one client round after another, and trusts no client.
//!
//! - Every parameter a client sends is checked before anything is allocated: the QPs
//!   of the round ([`MAX_ROUND_QPS`], and the device's `max_qp`), the message size
//!   (`MAX_SIZE`), the receive depth (the device's `max_qp_wr`), the CQ the round needs
//!   (`max_cqe`, and what is left of `max_cq_entries`) and the memory it registers
//!   (what is left of `max_registered`; [`SERVER_MEMORY`] for the standalone server).
//!   A round that does not fit is rejected with the reason in the reject's private
//!   data, and the server goes on.
//! - A client has [`ServerOpts::setup`] after its first QP to open the rest of its round;
//!   a Request that belongs to no round in progress (another client's first QP) waits
//!   for the next round, anything else is rejected, and a round left incomplete is
//!   dropped (its QPs reset).
//! - A round whose QPs move nothing for [`ServerOpts::idle`] is dropped: a client
//!   that connects and then stays silent holds the server no longer than that.
//!
//! Whatever a client does ends its own round only; only a failure of the listener
//! itself ends the server.

use super::meta::Meta;
use softrnic_rnic::{ConnRequest, Device, Listener, Mr, Qp, QpId};
use std::rc::Rc;
use std::time::Duration;

mod idle;
mod round;
mod traffic;

use round::serve_round;

/// QPs one round may have.
pub const MAX_ROUND_QPS: u16 = 256;
/// Octets the standalone server lets all its rounds register together (its device's
/// `max_registered`).
pub const SERVER_MEMORY: u64 = 2 << 30;
/// How long a client has, by default, after its round's first QP to open the others
/// (less than an initiator's MPA timer, so a round queued behind is served in time).
pub const ROUND_SETUP: Duration = Duration::from_secs(5);

/// One of the server's connections.
struct SEp {
    qp: Qp,
    id: QpId,
    /// The exposed buffer: Write target, Read source, receive buffer (shared by the
    /// round's QPs if the client asked for `--shared-buffers`).
    buf: Rc<Mr>,
    /// Source of the echo (write_lat, send_lat) or of the credit Writes (send_bw).
    src: Option<Mr>,
    /// The client's metadata (its exposed buffer).
    peer: Meta,
    received: u64,
    /// send_bw: receives completed in this poll batch, to post again.
    repost: u64,
    reported: u64,
    credit_outstanding: usize,
    next_slot: usize,
}

/// The server's own options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerOpts {
    /// Busy-poll the CQ in the one-sided tests.
    pub poll: bool,
    /// Print QP counters per round.
    pub verbose: bool,
    /// A round whose QPs move no octet for this long is dropped.
    pub idle: Duration,
    /// A client has this long after its round's first QP to open the others.
    pub setup: Duration,
}

impl Default for ServerOpts {
    fn default() -> Self {
        ServerOpts {
            poll: false,
            verbose: false,
            idle: Duration::from_secs(30),
            setup: ROUND_SETUP,
        }
    }
}

/// Why a round ended early.
#[derive(Debug)]
enum RoundError {
    /// The client's doing (or not enough room for what it asked): its round is over,
    /// the server goes on.
    Client(String),
    /// The listener failed: the server cannot go on.
    Server(String),
}

impl From<String> for RoundError {
    fn from(s: String) -> Self {
        RoundError::Client(s)
    }
}

/// Serves rounds until the client's last one.
pub fn serve(dev: &Device, listener: &Listener, opts: ServerOpts) -> Result<(), String> {
    let mut next = None;
    loop {
        match serve_round(dev, listener, opts, &mut next) {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(RoundError::Client(e)) => eprintln!("softrnic server: {e}"),
            Err(RoundError::Server(e)) => return Err(e),
        }
    }
}

/// The next Request with benchmark metadata, waiting at most `timeout` (`None`:
/// forever). Anything else is rejected and reported; `Ok(None)` then, or on timeout.
fn accept_one(
    listener: &Listener,
    timeout: Option<Duration>,
) -> Result<Option<(ConnRequest, Meta)>, RoundError> {
    let r = match timeout {
        None => listener.accept().map(Some),
        Some(t) => listener.accept_timeout(t),
    };
    let Some(req) = r.map_err(|e| RoundError::Server(format!("accept: {e}")))? else {
        return Ok(None);
    };
    match Meta::decode(req.private_data()) {
        Ok(m) => Ok(Some((req, m))),
        Err(e) => {
            let peer = req.peer_addr();
            let _ = req.reject(b"not a softrnic benchmark");
            eprintln!("softrnic server: {peer}: {e}");
            Ok(None)
        }
    }
}
