//! softrnic's own TCP, sans-IO.
//!
//! A hardware RNIC sees every TCP segment and places the DDP segments in it as they
//! arrive, in order or not; kernel sockets hide segments, so softrnic carries its own
//! TCP. This crate is that TCP as a pure state machine: packets (IPv4 + TCP octets) go
//! in through `handle_*`, packets to send come out of `poll_transmit`, and time is a
//! parameter, so every behaviour replays exactly in tests.
//!
//! No I/O, no threads, no `unsafe`; a malformed or hostile packet is an error value and
//! a counter, never a panic.

pub mod segment;
pub mod seq;

pub use segment::{EmitError, Flags, Options, ParseError, SackBlock, Segment};
pub use seq::SeqNum;
