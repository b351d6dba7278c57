//! What a one-stream bandwidth baseline's calls did ([`StreamCalls`]): counted beside
//! each call of the discipline, never changing one.

use super::StreamCalls;

/// A writer's calls that took octets, and those that found the socket full.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Sends {
    pub(super) ok: u64,
    pub(super) full: u64,
}

/// What a reader's calls got: octets, calls that returned octets, calls that found the
/// socket empty.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Reads {
    pub(super) octets: u64,
    pub(super) reads: u64,
    pub(super) empty: u64,
}

/// Both sides' calls of a one-stream baseline: the reader's from what followed its count
/// of octets (`octets`; its reads and empty reads), the writer's own (`sends`).
pub(super) fn stream_calls(octets: u64, more: &[u8], sends: Option<Sends>) -> Option<StreamCalls> {
    let sends = sends?;
    let word = |i: usize| {
        let mut a = [0u8; 8];
        a.copy_from_slice(more.get(8 * i..8 * i + 8)?);
        Some(u64::from_be_bytes(a))
    };
    Some(StreamCalls {
        reads: word(0)?,
        read_octets: octets,
        empty_reads: word(1)?,
        sends: sends.ok,
        full_sends: sends.full,
    })
}
