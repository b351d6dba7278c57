//! The iWARP wire formats, free of I/O and of allocation on the parse path.
//!
//! Three layers sit on a TCP byte stream:
//! - [`mpa`] (RFC 5044, with the RFC 6581 enhanced connection setup): the connection
//!   request/reply frames, then FPDU framing (length, padding, CRC32c) and [`markers`].
//! - [`ddp`] (RFC 5041): tagged (STag, TO) and untagged (QN, MSN, MO) placement headers.
//! - [`rdmap`] (RFC 5040): opcodes, the Read Request body and the [`terminate`] message.
//!
//! Each format has a zero-copy view over `&[u8]` (`new_checked` validates, accessors read)
//! and a plain `Repr` value that parses from and emits into buffers. [`ulpdu`] ties DDP and
//! RDMAP together for one FPDU payload.
//!
//! **No-panic rule**: no function in this crate panics on any input. Malformed input
//! returns a [`WireError`], and every error maps to the Terminate layer/type/code that an
//! RNIC sends for it ([`WireError::terminate_cause`]). Emit functions that are handed a
//! buffer too small return [`WireError::BufferTooSmall`] instead of panicking.
#![forbid(unsafe_code)]

pub mod crc;
pub mod ddp;
pub mod error;
pub mod markers;
pub mod mpa;
pub mod rdmap;
pub mod terminate;
pub mod ulpdu;

pub use ddp::{DdpHeader, DdpRepr, Placement};
pub use error::{Result, WireError};
pub use mpa::{MpaFrame, MpaFrameKind, MpaFrameRepr, Rfc6581};
pub use rdmap::{Opcode, ReadRequest};
pub use terminate::{Layer, TerminateCause, TerminateLayout, TerminateRepr};
pub use ulpdu::{Body, Ulpdu};

/// Reads a big-endian u16 at `at`; callers check the length first.
pub(crate) fn be16(buf: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([buf[at], buf[at + 1]])
}

/// Reads a big-endian u32 at `at`; callers check the length first.
pub(crate) fn be32(buf: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]])
}

/// Reads a big-endian u64 at `at`; callers check the length first.
pub(crate) fn be64(buf: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&buf[at..at + 8]);
    u64::from_be_bytes(b)
}

/// Fails with [`WireError::Truncated`] unless `buf` holds `needed` octets.
pub(crate) fn need(buf: &[u8], needed: usize) -> Result<()> {
    if buf.len() < needed {
        Err(WireError::Truncated {
            needed,
            have: buf.len(),
        })
    } else {
        Ok(())
    }
}

/// Fails with [`WireError::BufferTooSmall`] unless `out` has room for `needed` octets.
pub(crate) fn room(out: &[u8], needed: usize) -> Result<()> {
    if out.len() < needed {
        Err(WireError::BufferTooSmall {
            needed,
            have: out.len(),
        })
    } else {
        Ok(())
    }
}
