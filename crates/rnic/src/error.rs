//! The error type of the verbs API: every misuse is an error value, never UB.

use crate::region::RegionError;
use softrnic_proto::cm::CmError;
use softrnic_proto::qp::PostError;

/// Result alias for the verbs API.
pub type Result<T> = std::result::Result<T, Error>;

/// What can go wrong in a verb.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An operating-system call failed.
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    /// The MPA connection setup failed (malformed frame, policy, RTR...).
    #[error("MPA connection setup: {0}")]
    Mpa(#[from] CmError),
    /// The peer rejected the connection.
    #[error("connection rejected by the peer ({} octets of private data)", .private_data.len())]
    Rejected {
        /// The private data of the reject.
        private_data: Vec<u8>,
    },
    /// A work request was refused at post time.
    #[error("post refused: {0}")]
    Post(#[from] PostError),
    /// Registered memory: out of bounds, too large, allocation failure.
    #[error("memory region: {0}")]
    Region(#[from] RegionError),
    /// An argument is out of range or names an object of another device/PD.
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
    /// A device limit was reached.
    #[error("resource limit reached: {0}")]
    Limit(&'static str),
    /// The operation needs a connected QP (or one not yet connected).
    #[error("QP in the wrong state: {0}")]
    BadState(&'static str),
    /// A stream being converted to RDMA mode carried something else than an MPA frame:
    /// every octet read from it is returned here, so nothing is lost.
    #[error("the stream does not continue with an MPA frame ({} octets returned)", .octets.len())]
    StreamNotMpa {
        /// The octets read from the stream.
        octets: Vec<u8>,
    },
    /// Timed out.
    #[error("timed out")]
    Timeout,
}
