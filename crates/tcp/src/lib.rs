//! softrnic's own TCP, sans-IO.
//!
//! A hardware RNIC sees every TCP segment and places the DDP segments in it as they
//! arrive, in order or not; kernel sockets hide segments, so softrnic carries its own
//! TCP. This crate is that TCP as a pure state machine: packets (IPv4 + TCP octets) go
//! in through [`Connection::handle_packet`], packets to send come out of
//! [`Connection::poll_transmit`], and time is a parameter ([`Connection::poll_timeout`],
//! [`Connection::handle_timeout`]), so every behaviour replays exactly in tests.
//!
//! Received payload is offered to a [`Receiver`] with its stream offset, in order or
//! not ([`receiver`] explains why); [`Reassembly`] is the bounded in-order byte stream
//! for users that want one.
//!
//! No I/O, no threads, no `unsafe`; a malformed or hostile packet is an error value and
//! a counter, never a panic.

pub mod config;
mod conn;
pub mod fuzz_input;
mod range_set;
pub mod reassembly;
pub mod receiver;
pub mod segment;
pub mod seq;
pub mod sim;
pub mod stack;

pub use config::{Config, Keepalive};
pub use conn::{
    BUCKETS, Connection, Event, Feed, Histogram, Lent, SendError, State, Stats, Timing,
    initial_sequence, reset_for,
};
pub use reassembly::{Piece, Reassembly};
pub use receiver::{Arrival, Receiver, Refuse};
pub use segment::{EmitError, Flags, Options, ParseError, SackBlock, Segment};
pub use seq::SeqNum;
pub use stack::{
    ConnId, LinkChecksum, ListenerId, NoRaw, Readiness, RxMode, Stack, StackConfig, StackError,
    StackEvent, StackReceiver, StackStats,
};
