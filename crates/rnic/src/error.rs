//! The error type of the verbs API: every misuse is an error value, never UB.
//!
//! Lock poisoning (a thread panicked while holding one of softrnic's locks, which is a
//! bug) is handled one way: a verb that can fail returns [`Error::Poisoned`] (through
//! the `From<PoisonError>` conversion, so `lock()?` says it all), and the paths that
//! cannot report (engine threads, drops, event posting) leave the object alone.

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
    /// A thread panicked while holding a lock this verb needs (a bug in softrnic, or
    /// a panic in a closure passed to it): the object it guards can no longer be used.
    #[error("internal error: a lock was poisoned by a thread that panicked holding it")]
    Poisoned,
}

impl<T> From<std::sync::PoisonError<T>> for Error {
    fn from(_: std::sync::PoisonError<T>) -> Error {
        Error::Poisoned
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_lock_is_one_error() {
        let m = std::sync::Mutex::new(0u8);
        let _ = std::thread::scope(|s| {
            s.spawn(|| {
                let _g = m.lock().unwrap();
                panic!("poison it");
            })
            .join()
        });
        let e: Error = m.lock().unwrap_err().into();
        assert!(matches!(e, Error::Poisoned), "{e:?}");
        let rw = std::sync::RwLock::new(());
        let _ = std::thread::scope(|s| {
            s.spawn(|| {
                let _g = rw.write().unwrap();
                panic!("poison it");
            })
            .join()
        });
        assert!(matches!(
            Error::from(rw.read().unwrap_err()),
            Error::Poisoned
        ));
    }
}
