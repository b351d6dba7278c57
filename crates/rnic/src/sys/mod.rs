//! Every raw system call of the crate, behind safe functions: the rest of rnic calls
//! these and holds no `libc` call of its own, so each `unsafe` contract is checked in
//! one place.

pub mod affinity;
pub(crate) mod eventfd;
pub mod nofile;
pub(crate) mod random;
pub mod socket;
pub(crate) mod timerfd;
pub mod usage;
