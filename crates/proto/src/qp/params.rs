//! The parameters a QP is created and connected with.

use crate::verbs::*;
use std::time::Duration;

/// The default for [`QpParams::close_timeout`]: long enough for any live peer to answer
/// a FIN, short enough that a silent one does not hold the QP for long.
pub const DEFAULT_CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

/// Negotiated connection parameters the QP runs with (from the MPA exchange).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpParams {
    /// CRC32c on in both directions.
    pub crc: bool,
    /// Inbound Read Requests accepted concurrently.
    pub ird: u16,
    /// Outbound Reads outstanding at most; more wait in the send queue.
    pub ord: u16,
    /// Largest FPDU to send (the TCP MSS by default), markers included.
    pub max_fpdu: usize,
    /// RFC 5044 markers in what we send (the peer set M in its frame).
    pub markers_tx: bool,
    /// RFC 5044 markers in what we receive (we set M in ours).
    pub markers_rx: bool,
    /// RFC 6581 peer-to-peer: this side sends the RTR message first.
    pub send_rtr: Option<RtrKind>,
    /// RFC 6581 peer-to-peer: this side must receive the RTR before it transmits.
    pub await_rtr: bool,
    /// How long a close may take (the peer's FIN, or the queued octets draining)
    /// before the connection is reset.
    pub close_timeout: Duration,
}

impl Default for QpParams {
    fn default() -> Self {
        QpParams {
            crc: false,
            ird: 16,
            ord: 16,
            max_fpdu: 1448,
            markers_tx: false,
            markers_rx: false,
            send_rtr: None,
            await_rtr: false,
            close_timeout: DEFAULT_CLOSE_TIMEOUT,
        }
    }
}

/// The zero-length message that serves as RFC 6581 ready-to-receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RtrKind {
    /// Zero-length Send.
    Send,
    /// Zero-length RDMA Write.
    Write,
    /// Zero-length RDMA Read.
    Read,
}

/// Static attributes of a QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpConfig {
    /// Its number.
    pub id: QpId,
    /// Its protection domain.
    pub pd: PdId,
    /// Send queue depth.
    pub sq_depth: usize,
    /// Receive queue depth.
    pub rq_depth: usize,
}
