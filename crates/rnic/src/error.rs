//! The error type of the verbs API: every misuse is an error value, never UB.
//!
//! Each [`Error`] names who is at fault ([`Error::fault`]): the peer, the caller, the
//! resources at hand, the operating system, or softrnic itself. That is what decides
//! what a program does next (try another peer, fix the call, free something, look at
//! the OS error), so callers match on variants or on the fault, never on messages.
//!
//! Lock poisoning (a thread panicked while holding one of softrnic's locks, which is a
//! bug) is handled one way: a verb that can fail returns [`Error::Internal`] (through
//! the `From<PoisonError>` conversion, so `lock()?` says it all), and the paths that
//! cannot report (engine threads, drops, event posting) leave the object alone.

use crate::region::RegionError;
use softrnic_proto::cm::CmError;
use softrnic_proto::qp::PostError;

/// Result alias for the verbs API.
pub type Result<T> = std::result::Result<T, Error>;

/// Who is at fault for an [`Error`], and so what can be done about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fault {
    /// The peer: it broke the protocol, refused or rejected the connection, sent
    /// something that is not MPA, or stayed silent. Try again, or another peer.
    Peer,
    /// The caller: an argument out of range, an object of another device, a verb in
    /// the wrong state, a work request the QP cannot take. The program must change.
    Caller,
    /// Resources: a device limit, a full queue, memory that cannot be allocated. Free
    /// something, wait for completions, or ask for less.
    Resources,
    /// The operating system refused a call (sockets, threads, epoll); the
    /// [`std::io::Error`] says what.
    Os,
    /// softrnic itself: a thread panicked (a bug).
    Internal,
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Fault::Peer => "peer",
            Fault::Caller => "caller",
            Fault::Resources => "resources",
            Fault::Os => "operating system",
            Fault::Internal => "internal",
        })
    }
}

/// What can go wrong in a verb, grouped by [`Fault`].
#[derive(Debug, thiserror::Error)]
pub enum Error {
    // The peer's fault.
    /// The MPA connection setup failed: the peer sent a malformed or unexpected frame,
    /// or asked for something our policy refuses (the reject reply has been sent). A
    /// bad local MPA configuration ([`CmError::BadConfig`]) is the caller's fault.
    #[error("MPA connection setup: {0}")]
    Mpa(#[from] CmError),
    /// The peer rejected the connection.
    #[error("connection rejected by the peer ({} octets of private data)", .private_data.len())]
    Rejected {
        /// The private data of the reject.
        private_data: Vec<u8>,
    },
    /// A stream being converted to RDMA mode carried something else than an MPA frame:
    /// every octet read from it is returned here, so nothing is lost.
    #[error("the stream does not continue with an MPA frame ({} octets returned)", .octets.len())]
    StreamNotMpa {
        /// The octets read from the stream.
        octets: Vec<u8>,
    },
    /// The peer did not answer in time (the device's connect timeout).
    #[error("timed out waiting for the peer")]
    Timeout,

    // The caller's fault.
    /// An argument is out of range or names an object of another device/PD.
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
    /// The object is not in a state this verb needs (a QP that is not Idle to connect,
    /// a QP whose device is closed).
    #[error("wrong state for this verb: {0}")]
    BadState(&'static str),
    /// A work request was refused at post time (nothing was queued): malformed, or the
    /// QP does not take work now; a full queue is a matter of resources.
    #[error("post refused: {0}")]
    Post(#[from] PostError),

    // Resources.
    /// A device limit was reached.
    #[error("resource limit reached: {0}")]
    Limit(&'static str),
    /// Registered memory: a range outside the region (the caller's fault), or a
    /// region too large or that cannot be allocated.
    #[error("memory region: {0}")]
    Region(#[from] RegionError),

    // The operating system's.
    /// An operating-system call failed.
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),

    // softrnic's own.
    /// A bug in softrnic: a thread panicked while holding a lock this verb needs (or
    /// a closure passed to softrnic panicked), and the object it guards can no longer
    /// be used.
    #[error("internal error: {0}")]
    Internal(&'static str),
}

impl Error {
    /// Who is at fault.
    pub fn fault(&self) -> Fault {
        match self {
            Error::Mpa(CmError::BadConfig(_) | CmError::Finished) => Fault::Caller,
            Error::Mpa(_) | Error::Rejected { .. } | Error::StreamNotMpa { .. } => Fault::Peer,
            Error::Timeout => Fault::Peer,
            Error::InvalidArgument(_) | Error::BadState(_) => Fault::Caller,
            Error::Post(PostError::QueueFull) => Fault::Resources,
            Error::Post(_) => Fault::Caller,
            Error::Limit(_) => Fault::Resources,
            Error::Region(RegionError::OutOfBounds { .. }) => Fault::Caller,
            Error::Region(RegionError::TooLarge(_) | RegionError::AllocFailed(_)) => {
                Fault::Resources
            }
            Error::Io(_) => Fault::Os,
            Error::Internal(_) => Fault::Internal,
        }
    }
}

impl<T> From<std::sync::PoisonError<T>> for Error {
    fn from(_: std::sync::PoisonError<T>) -> Error {
        Error::Internal("a lock was poisoned by a thread that panicked holding it")
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
        assert!(matches!(e, Error::Internal(_)), "{e:?}");
        assert_eq!(e.fault(), Fault::Internal);
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
            Error::Internal(_)
        ));
    }
}
