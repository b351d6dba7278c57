//! Library side of the `softrnic` command, so that tests drive the same code the
//! subcommands run.
#![forbid(unsafe_code)]

pub mod decode;
pub mod fuzz_checks;
