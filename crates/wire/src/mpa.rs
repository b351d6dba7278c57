//! MPA (RFC 5044): the connection setup frames, with the RFC 6581 enhanced setup, and
//! the FPDU framing of the full-operation phase.
//!
//! ```text
//! request/reply: key(16) | M C R res(5) | rev | PD_Length(2) | private data
//! FPDU:          ULPDU_Length(2) | ULPDU | pad to 4 | CRC32c(4)   (+ markers if negotiated)
//! ```
//! The CRC field is always present; when CRC was not negotiated it is sent as zero and
//! not checked. The CRC32c value travels least-significant octet first (as iSCSI's
//! digest does; Linux siw and Wireshark agree), unlike every other MPA/DDP/RDMAP field.

/// FPDU framing and deframing.
mod fpdu;
/// The Request/Reply frames and the RFC 6581 word.
mod setup;

pub use fpdu::*;
pub use setup::*;
