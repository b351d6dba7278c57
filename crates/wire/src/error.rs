//! One error type for every malformed input, each mapped to its Terminate cause.

use crate::terminate::{
    Layer, TerminateCause, ddp_code, ddp_etype, llp_code, llp_etype, rdmap_code, rdmap_etype,
};

/// Result alias for wire operations.
pub type Result<T> = core::result::Result<T, WireError>;

/// Everything that can be wrong with octets on the wire (or with a buffer handed to emit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The buffer ends before the structure does. On a stream this means "wait for more".
    #[error("truncated: need {needed} octets, have {have}")]
    Truncated {
        /// Octets the structure needs.
        needed: usize,
        /// Octets available.
        have: usize,
    },
    /// An emit target is too small.
    #[error("output buffer too small: need {needed} octets, have {have}")]
    BufferTooSmall {
        /// Octets the emit needs.
        needed: usize,
        /// Octets available.
        have: usize,
    },
    /// The 16-octet key is neither "MPA ID Req Frame" nor "MPA ID Rep Frame".
    #[error("not an MPA request or reply frame (bad key)")]
    BadMpaKey,
    /// The MPA frame is of the other kind than expected here.
    #[error("unexpected MPA frame kind")]
    UnexpectedMpaKind,
    /// An MPA Request has the Reject bit set.
    #[error("MPA request with the reject bit set")]
    RejectInRequest,
    /// The MPA revision is neither 1 nor 2.
    #[error("unsupported MPA revision {0}")]
    BadMpaRevision(u8),
    /// Private data longer than the 512 octets RFC 5044 allows.
    #[error("MPA private data length {0} exceeds 512")]
    PrivateDataTooLong(u16),
    /// A revision 2 frame asks for enhanced setup but carries no IRD/ORD word.
    #[error("MPA v2 enhanced frame without the 4-octet IRD/ORD private data")]
    MissingRfc6581Params,
    /// The FPDU's CRC32c does not match its contents.
    #[error("MPA CRC mismatch: received {received:#010x}, computed {computed:#010x}")]
    CrcMismatch {
        /// The CRC in the FPDU.
        received: u32,
        /// The CRC computed over the FPDU.
        computed: u32,
    },
    /// A marker's reserved field is not zero or its FPDU pointer is wrong.
    #[error(
        "MPA marker invalid (reserved {reserved:#06x}, FPDUPTR {fpduptr}, expected {expected})"
    )]
    BadMarker {
        /// The marker's reserved half.
        reserved: u16,
        /// The marker's FPDU pointer.
        fpduptr: u16,
        /// The pointer the framing implies.
        expected: u16,
    },
    /// The ULPDU length cannot hold a DDP header, or exceeds what the receiver accepts.
    #[error("bad ULPDU length {0}")]
    BadUlpduLength(u16),
    /// The DDP version is not 1.
    #[error("invalid DDP version {version} (tagged: {tagged})")]
    BadDdpVersion {
        /// The version received.
        version: u8,
        /// Whether the segment was tagged (selects the Terminate code).
        tagged: bool,
    },
    /// The RDMAP version is not 1.
    #[error("invalid RDMAP version {0}")]
    BadRdmapVersion(u8),
    /// An opcode RFC 5040 and RFC 7306 do not define.
    #[error("unknown RDMAP opcode {0:#x}")]
    UnknownOpcode(u8),
    /// A tagged opcode in an untagged segment, or the other way round.
    #[error("opcode {opcode:#x} in a {} segment", if *tagged { "tagged" } else { "untagged" })]
    OpcodeTagMismatch {
        /// The opcode.
        opcode: u8,
        /// Whether the segment was tagged.
        tagged: bool,
    },
    /// The untagged queue number does not fit the opcode (Send: 0, Read Request: 1,
    /// Terminate: 2).
    #[error("invalid queue number {qn} for opcode {opcode:#x}")]
    InvalidQueueNumber {
        /// The queue number received.
        qn: u32,
        /// The opcode.
        opcode: u8,
    },
    /// A single-segment message (Read Request, Terminate) with a non-zero MO or no L bit.
    #[error("message must be one DDP segment with MO 0 (MO {mo}, last {last})")]
    NotSingleSegment {
        /// The message offset received.
        mo: u32,
        /// The Last flag received.
        last: bool,
    },
    /// A Read Request body that is not exactly 28 octets.
    #[error("RDMA Read Request body of {0} octets (must be 28)")]
    BadReadRequestLength(usize),
    /// A malformed Terminate body.
    #[error("malformed Terminate: {0}")]
    BadTerminate(&'static str),
}

impl WireError {
    /// Whether the error only means "more octets are needed" (not a protocol violation).
    pub fn is_truncated(&self) -> bool {
        matches!(self, WireError::Truncated { .. })
    }

    /// The Terminate layer/type/code an RNIC sends when it receives this input.
    pub fn terminate_cause(&self) -> TerminateCause {
        use WireError::*;
        let llp = |code| TerminateCause::new(Layer::Llp, llp_etype::MPA, code);
        let op = |code| TerminateCause::new(Layer::Rdmap, rdmap_etype::REMOTE_OPERATION, code);
        let untagged = |code| TerminateCause::new(Layer::Ddp, ddp_etype::UNTAGGED_BUFFER, code);
        let ddp_version = |tagged: bool| {
            if tagged {
                TerminateCause::new(
                    Layer::Ddp,
                    ddp_etype::TAGGED_BUFFER,
                    ddp_code::tagged::INVALID_VERSION,
                )
            } else {
                untagged(ddp_code::untagged::INVALID_VERSION)
            }
        };
        match *self {
            // A stream that ends inside a frame has lost its framing.
            Truncated { .. } => llp(llp_code::FPDU_START),
            BufferTooSmall { .. } => TerminateCause::new(
                Layer::Rdmap,
                rdmap_etype::LOCAL_CATASTROPHIC,
                rdmap_code::UNSPECIFIED,
            ),
            BadMpaKey
            | UnexpectedMpaKind
            | RejectInRequest
            | BadMpaRevision(_)
            | PrivateDataTooLong(_)
            | MissingRfc6581Params => llp(llp_code::INVALID_REQ_REP),
            CrcMismatch { .. } => llp(llp_code::CRC_MISMATCH),
            BadMarker { .. } | BadUlpduLength(_) => llp(llp_code::FPDU_START),
            BadDdpVersion { tagged, .. } => ddp_version(tagged),
            BadRdmapVersion(_) => op(rdmap_code::INVALID_VERSION),
            UnknownOpcode(_) | OpcodeTagMismatch { .. } => op(rdmap_code::UNEXPECTED_OPCODE),
            InvalidQueueNumber { .. } => untagged(ddp_code::untagged::INVALID_QN),
            NotSingleSegment { .. } => untagged(ddp_code::untagged::INVALID_MO),
            BadReadRequestLength(_) | BadTerminate(_) => op(rdmap_code::UNSPECIFIED),
        }
    }
}
