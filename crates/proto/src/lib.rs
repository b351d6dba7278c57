//! The RNIC core, free of I/O: everything an iWARP RNIC decides, as state machines that
//! are fed octets and asked what to do.
//!
//! - [`cm`]: MPA connection setup (request/reply, RFC 6581 IRD/ORD and RTR, CRC).
//! - [`tpt`]: the translation and protection table (STag -> region, bounds, rights, PD).
//! - [`qp`]: a reliable-connected queue pair: send queue, receive queue, the transmit
//!   path (FPDUs out of work requests), the receive path (placement decisions out of
//!   FPDU headers), RDMA Read ORD/IRD queues, Terminate and flush.
//! - [`srq`]: a shared receive queue with per-QP soft/hard limits and statistical
//!   provisioning.
//!
//! Memory is never touched here: the core names memory as ([`RegionId`], offset, len)
//! and the I/O layer (`softrnic-rnic`) resolves that to bytes. So the same core serves
//! the kernel-socket engine and, later, the product's own TCP engine.
#![forbid(unsafe_code)]

pub mod cm;
pub mod qp;
pub mod srq;
pub mod tpt;
pub mod verbs;

pub use verbs::*;
