//! The verbs API and everything that touches the OS.

pub mod cq_ring;
pub mod region;
