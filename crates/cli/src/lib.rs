//! Library side of the `softrnic` command, so that tests drive the same code the
//! subcommands run.
// CPU pinning is softrnic_rnic's (`affinity`): this crate has no `unsafe`.
#![forbid(unsafe_code)]

pub mod bench;
pub mod conn_scale;
pub mod cq_bench;
pub mod decode;
pub mod fuzz_checks;
pub mod logging;
pub mod rping;
pub mod srq_sim;
pub mod transport;
