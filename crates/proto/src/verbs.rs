//! The vocabulary shared by the core and the verbs API: access rights, identifiers,
//! work requests, completions and their status codes (mirroring libibverbs).
//!
//! A post is one line, and allocates nothing: a work request holds its scatter/gather
//! list inline ([`Sgl`]).
//!
//! ```
//! use softrnic_proto::{RecvWr, SendWr, Sge};
//! let (buf, sink) = (Sge { addr: 0x1000, len: 64, lkey: 0x100 }, Sge { addr: 0x2000, len: 8, lkey: 0x100 });
//! let send = SendWr::send(1, buf).solicited();
//! let write = SendWr::write(2, [buf, sink], 0x9000, 0x0201).unsignaled();
//! let read = SendWr::read(3, sink, 0x9000, 0x0201).fence();
//! let recv = RecvWr::new(4, buf);
//! assert!(send.signaled && !write.signaled && read.fence);
//! assert_eq!((write.sgl.len(), recv.sgl[0]), (2, buf));
//! ```

use arrayvec::ArrayVec;
use bitflags::bitflags;
use std::ops::Deref;

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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
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

/// A scatter/gather list of at most [`MAX_SGE`] elements, held inline so that posting a
/// work request allocates nothing. Built from one [`Sge`], an array of up to
/// [`MAX_SGE`] (a longer array does not compile), or a slice (checked).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Sgl(ArrayVec<Sge, MAX_SGE>);

/// A scatter/gather list longer than [`MAX_SGE`]: the count asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("too many scatter/gather elements ({0}, max {MAX_SGE})")]
pub struct TooManySge(pub usize);

impl Sgl {
    /// An empty list (a zero-length message).
    pub const fn new() -> Self {
        Sgl(ArrayVec::new_const())
    }

    /// Appends an element, unless the list is full.
    pub fn push(&mut self, sge: Sge) -> Result<(), TooManySge> {
        self.0.try_push(sge).map_err(|_| TooManySge(MAX_SGE + 1))
    }

    /// Octets the list covers.
    pub fn total_len(&self) -> u64 {
        self.0.iter().map(|s| u64::from(s.len)).sum()
    }
}

impl Deref for Sgl {
    type Target = [Sge];
    fn deref(&self) -> &[Sge] {
        &self.0
    }
}

impl<'a> IntoIterator for &'a Sgl {
    type Item = &'a Sge;
    type IntoIter = std::slice::Iter<'a, Sge>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl From<Sge> for Sgl {
    fn from(sge: Sge) -> Self {
        Sgl::from([sge])
    }
}

impl<const N: usize> From<[Sge; N]> for Sgl {
    fn from(sges: [Sge; N]) -> Self {
        const { assert!(N <= MAX_SGE, "more SGEs than MAX_SGE") };
        Sgl(sges.into_iter().collect())
    }
}

impl TryFrom<&[Sge]> for Sgl {
    type Error = TooManySge;
    fn try_from(sges: &[Sge]) -> Result<Self, TooManySge> {
        ArrayVec::try_from(sges)
            .map(Sgl)
            .map_err(|_| TooManySge(sges.len()))
    }
}

/// A send-queue work request. Build one with [`SendWr::send`], [`SendWr::write`],
/// [`SendWr::read`] or [`SendWr::local_invalidate`]; every request is signaled (it
/// produces a completion even on success, as on a libibverbs QP created with
/// `sq_sig_all`, so a consumer never waits for a completion that will not come) and
/// unfenced, until [`SendWr::unsignaled`] or [`SendWr::fence`] says otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendWr {
    /// The consumer's identifier, returned in the completion.
    pub wr_id: u64,
    /// The operation.
    pub op: SendOp,
    /// Local buffers (gathered for Send/Write, the sink for Read).
    pub sgl: Sgl,
    /// Produce a completion even on success.
    pub signaled: bool,
    /// Read fence: wait for earlier RDMA Reads to complete before starting.
    pub fence: bool,
}

impl SendWr {
    /// A signaled, unfenced request.
    pub fn new(wr_id: u64, op: SendOp, sgl: impl Into<Sgl>) -> Self {
        SendWr {
            wr_id,
            op,
            sgl: sgl.into(),
            signaled: true,
            fence: false,
        }
    }

    /// A Send of the octets `sgl` gathers (`[]` for a zero-length Send).
    pub fn send(wr_id: u64, sgl: impl Into<Sgl>) -> Self {
        let op = SendOp::Send {
            solicited: false,
            invalidate: None,
        };
        SendWr::new(wr_id, op, sgl)
    }

    /// An RDMA Write of the octets `sgl` gathers to `remote_addr` in the peer's `rkey`.
    pub fn write(wr_id: u64, sgl: impl Into<Sgl>, remote_addr: u64, rkey: STag) -> Self {
        SendWr::new(wr_id, SendOp::Write { remote_addr, rkey }, sgl)
    }

    /// An RDMA Read of `sink.len` octets at `remote_addr` in the peer's `rkey` into
    /// `sink` (one sink, as siw allows).
    pub fn read(wr_id: u64, sink: Sge, remote_addr: u64, rkey: STag) -> Self {
        SendWr::new(wr_id, SendOp::Read { remote_addr, rkey }, sink)
    }

    /// Invalidates the local `stag`, in order with the rest of the send queue.
    pub fn local_invalidate(wr_id: u64, stag: STag) -> Self {
        SendWr::new(wr_id, SendOp::LocalInvalidate { stag }, [])
    }

    /// No completion on success (a failure still completes).
    pub fn unsignaled(mut self) -> Self {
        self.signaled = false;
        self
    }

    /// Waits for every earlier RDMA Read to complete before starting.
    pub fn fence(mut self) -> Self {
        self.fence = true;
        self
    }

    /// A Send raises a solicited event at the receiver; other operations carry no such
    /// flag and are left as they are.
    pub fn solicited(mut self) -> Self {
        if let SendOp::Send { solicited, .. } = &mut self.op {
            *solicited = true;
        }
        self
    }

    /// A Send becomes a Send with Invalidate of the peer's `stag`; other operations
    /// are left as they are.
    pub fn invalidate(mut self, stag: STag) -> Self {
        if let SendOp::Send { invalidate, .. } = &mut self.op {
            *invalidate = Some(stag);
        }
        self
    }
}

/// A receive-queue work request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvWr {
    /// The consumer's identifier, returned in the completion.
    pub wr_id: u64,
    /// Buffers the incoming Send is scattered into.
    pub sgl: Sgl,
}

impl RecvWr {
    /// A receive into the buffers of `sgl`.
    pub fn new(wr_id: u64, sgl: impl Into<Sgl>) -> Self {
        RecvWr {
            wr_id,
            sgl: sgl.into(),
        }
    }
}

/// Completion status, mirroring libibverbs' `ibv_wc_status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum WcStatus {
    /// Success.
    #[default]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum WcOpcode {
    /// A Send completed (sender side).
    #[default]
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

/// A work completion. The default is all zeroes, as a zeroed `ibv_wc` reads (status
/// Success, opcode Send): room to poll into, e.g. `[Completion::default(); 32]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
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

#[cfg(test)]
mod tests {
    use super::*;

    fn sge(i: u32) -> Sge {
        Sge {
            addr: u64::from(i) * 0x100,
            len: i,
            lkey: 0x100 + i,
        }
    }

    #[test]
    fn sgl_holds_up_to_max_sge_and_refuses_more() {
        let six: [Sge; MAX_SGE] = std::array::from_fn(|i| sge(i as u32));
        let mut l = Sgl::from(six);
        assert_eq!(&l[..], &six[..]);
        assert_eq!(l.total_len(), 15);
        assert_eq!(l.push(sge(9)), Err(TooManySge(MAX_SGE + 1)));
        assert_eq!(l.len(), MAX_SGE);
        let seven: Vec<Sge> = (0..7).map(sge).collect();
        assert_eq!(Sgl::try_from(&seven[..]), Err(TooManySge(7)));
        assert_eq!(Sgl::try_from(&seven[..2]).as_deref(), Ok(&seven[..2]));
        let mut one = Sgl::new();
        assert_eq!((one.len(), one.total_len()), (0, 0));
        one.push(sge(3)).unwrap();
        assert_eq!(one, Sgl::from(sge(3)));
        assert_eq!(Sgl::from([]), Sgl::default());
    }

    #[test]
    fn constructors_build_the_operation_and_flags_asked_for() {
        let w = SendWr::write(5, [sge(1), sge(2)], 0x9000, 0x0301);
        assert_eq!(
            w,
            SendWr {
                wr_id: 5,
                op: SendOp::Write {
                    remote_addr: 0x9000,
                    rkey: 0x0301
                },
                sgl: [sge(1), sge(2)].into(),
                signaled: true,
                fence: false,
            }
        );
        let r = SendWr::read(6, sge(4), 0x10, 0x0401).unsignaled().fence();
        assert_eq!(
            (r.op, &r.sgl[..], r.signaled, r.fence),
            (
                SendOp::Read {
                    remote_addr: 0x10,
                    rkey: 0x0401
                },
                &[sge(4)][..],
                false,
                true
            )
        );
        let s = SendWr::send(7, []).solicited().invalidate(0x0501);
        assert_eq!(
            s.op,
            SendOp::Send {
                solicited: true,
                invalidate: Some(0x0501)
            }
        );
        assert!(s.sgl.is_empty());
        // Send-only flags leave other operations alone.
        assert_eq!(w.clone().solicited().invalidate(1), w);
        let li = SendWr::local_invalidate(8, 0x0601);
        assert_eq!(li.op, SendOp::LocalInvalidate { stag: 0x0601 });
        assert_eq!(RecvWr::new(9, sge(1)).sgl[..], [sge(1)]);
    }

    #[test]
    fn default_completion_reads_as_a_zeroed_ibv_wc() {
        let c = Completion::default();
        assert_eq!(
            (c.wr_id, c.status, c.opcode, c.byte_len, c.qp),
            (0, WcStatus::Success, WcOpcode::Send, 0, QpId(0))
        );
        assert!(!c.solicited && c.invalidated.is_none());
    }
}
