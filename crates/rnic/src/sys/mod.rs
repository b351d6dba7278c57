//! Every system call softrnic makes that the standard library does not wrap.

pub mod affinity;
