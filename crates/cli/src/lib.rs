//! Library side of the `softrnic` command, so that tests drive the same code the
//! subcommands run.
// `bench::affinity` holds the one `unsafe` of this crate (CPU pinning via libc).
#![deny(unsafe_code)]

pub mod bench;
pub mod decode;
pub mod fuzz_checks;
pub mod rping;
