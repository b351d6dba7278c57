//! The vocabulary shared by the core and the verbs API: access rights, identifiers,
//! work requests, completions and their status codes (mirroring libibverbs).

use bitflags::bitflags;

bitflags! {
    /// Access rights of a memory region.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct Access: u32 {
        /// The local RNIC may write (needed for receive buffers and Read sinks).
        const LOCAL_WRITE = 1 << 0;
        /// A remote peer may RDMA Write.
        const REMOTE_WRITE = 1 << 1;
        /// A remote peer may RDMA Read.
        const REMOTE_READ = 1 << 2;
        /// A remote peer may invalidate the STag with a Send with Invalidate. Only
        /// together with a remote right (the STag is exposed to the peer anyway), as
        /// the verbs rules have it: without this flag a peer cannot knock a region out
        /// by naming it (a Terminate "STag cannot be invalidated" answers it).
        const REMOTE_INVALIDATE = 1 << 3;
    }
}

/// A steering tag: index in the upper 24 bits, consumer key in the low 8.
pub type STag = u32;

/// The index part of an STag.
pub fn stag_index(stag: STag) -> u32 {
    stag >> 8
}

/// The consumer-key part of an STag.
pub fn stag_key(stag: STag) -> u8 {
    (stag & 0xff) as u8
}

/// Identifies a region of memory the I/O layer owns; the core never dereferences it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RegionId(pub u32);

/// A protection domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PdId(pub u32);

/// A queue pair number, unique per device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QpId(pub u32);

/// One scatter/gather element: `len` octets at tagged offset `addr` of the region
/// named by local key `lkey`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sge {
    /// Address (tagged offset, in the region's address space).
    pub addr: u64,
    /// Length in octets.
    pub len: u32,
    /// Local key: the region's STag.
    pub lkey: STag,
}

/// What a send-queue work request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SendOp {
    /// Send into the peer's next receive buffer.
    Send {
        /// Raise a solicited event at the receiver.
        solicited: bool,
        /// Invalidate this STag at the receiver (Send with Invalidate).
        invalidate: Option<STag>,
    },
    /// RDMA Write into the peer's region.
    Write {
        /// Remote address (tagged offset).
        remote_addr: u64,
        /// Remote STag.
        rkey: STag,
    },
    /// RDMA Read from the peer's region into the local SGE (one SGE, as siw allows).
    Read {
        /// Remote address (tagged offset).
        remote_addr: u64,
        /// Remote STag.
        rkey: STag,
    },
    /// Invalidate a local STag.
    LocalInvalidate {
        /// The STag.
        stag: STag,
    },
}

/// Maximum scatter/gather elements per work request.
pub const MAX_SGE: usize = 6;

/// A send-queue work request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendWr {
    /// The consumer's identifier, returned in the completion.
    pub wr_id: u64,
    /// The operation.
    pub op: SendOp,
    /// Local buffers (gathered for Send/Write, the sink for Read).
    pub sgl: Vec<Sge>,
    /// Produce a completion even on success.
    pub signaled: bool,
    /// Read fence: wait for earlier RDMA Reads to complete before starting.
    pub fence: bool,
}

/// A receive-queue work request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvWr {
    /// The consumer's identifier, returned in the completion.
    pub wr_id: u64,
    /// Buffers the incoming Send is scattered into.
    pub sgl: Vec<Sge>,
}

/// Completion status, mirroring libibverbs' `ibv_wc_status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcStatus {
    /// Success.
    Success,
    /// Local length error: the message did not fit the receive buffer.
    LocalLengthError,
    /// Local QP operation error.
    LocalQpOperationError,
    /// Local protection error: an SGE's lkey, bounds or rights are wrong.
    LocalProtectionError,
    /// Flushed: the QP went to error before the request executed.
    WrFlushError,
    /// Remote access error: the peer refused an STag, bounds or rights.
    RemoteAccessError,
    /// Remote operation error: the peer could not execute the request.
    RemoteOperationError,
    /// Remote invalid request error.
    RemoteInvalidRequestError,
    /// Local access error (e.g. an invalidate of an STag that cannot be invalidated).
    LocalAccessError,
    /// A fatal error in the RNIC.
    FatalError,
    /// Any other error.
    GeneralError,
}

/// Completion opcode, mirroring libibverbs' `ibv_wc_opcode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcOpcode {
    /// A Send completed (sender side).
    Send,
    /// An RDMA Write completed.
    Write,
    /// An RDMA Read completed.
    Read,
    /// A local invalidate completed.
    LocalInvalidate,
    /// A Send was received.
    Recv,
}

/// A work completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// The work request's identifier.
    pub wr_id: u64,
    /// Status.
    pub status: WcStatus,
    /// What completed.
    pub opcode: WcOpcode,
    /// Octets transferred (received length for Recv).
    pub byte_len: u32,
    /// The QP it belongs to.
    pub qp: QpId,
    /// Recv only: the Send asked for a solicited event.
    pub solicited: bool,
    /// Recv only: the STag the Send with Invalidate invalidated.
    pub invalidated: Option<STag>,
}

/// QP states (RFC 5040's RNIC model, as verbs name them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpState {
    /// Created, not connected.
    Idle,
    /// Connected, ready to send.
    Rts,
    /// Graceful close in progress: outstanding work finishes, then FIN.
    Closing,
    /// A Terminate was sent or received; waiting to go to error.
    Terminate,
    /// Error: all work flushes.
    Error,
}
