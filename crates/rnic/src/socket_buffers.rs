//! Kernel send buffers shared by a device's connections.
//!
//! Linux grows each TCP socket's send buffer on its own, up to 4 MiB (`tcp_wmem`). One
//! busy connection profits from that; hundreds do not: 256 QPs streaming 64 KiB Writes
//! over loopback queued about 1.4 GB of socket buffers (`ss -tm`), far beyond every
//! cache, and the kernel's copies into and out of them took twice the CPU per GB of a
//! single QP. An RNIC has a fixed amount of buffering for all its connections, and so
//! does a device here: [`crate::DeviceConfig::socket_send_budget`] is shared equally by
//! the device's kernel TCP connections. A socket's share changes only when the number
//! of connections doubles or halves, and each socket picks up a new share on its next
//! send (one atomic load), so connecting N QPs costs O(N) setsockopt calls in all.

use crate::same_host::{SAME_HOST_RECEIVE, SameHostTcp};
use crate::sys;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The default budget ([`crate::DeviceConfig::socket_send_budget`]): a same-host
/// receive window ([`SAME_HOST_RECEIVE`]) for each of 256 connections. With 64 MiB
/// (256 KiB each at 256 QPs) a 1 MiB Write took three `sendmsg` calls instead of two
/// and the receiving engine, woken for smaller pieces, made 3.5x the readiness
/// events and 1.4x the reads per MiB, and spent 1.15x one QP's CPU per GB; with 1 MiB
/// each, within 10% of one QP's (docs/ARCHITECTURE.md, "Many QPs", session 14).
pub(crate) const DEFAULT_SEND_BUDGET: u64 = 256 * SAME_HOST_RECEIVE;

/// Up to this share, Linux's own send-buffer tuning is left alone (its default
/// maximum, `tcp_wmem[2]`).
pub(crate) const AUTOTUNE_ABOVE: u64 = 4 << 20;
/// No socket gets less: a share must hold several full-size FPDUs and keep a
/// connection's pipe full at loopback speed.
pub(crate) const MIN_SHARE: u64 = 64 << 10;

/// A device's budget of kernel socket send buffer, and the connections sharing it.
#[derive(Debug)]
pub(crate) struct SocketBuffers {
    /// Octets for all connections together; 0: every socket tunes itself.
    total: u64,
    connections: AtomicU64,
    /// Each connection's share now; 0: leave Linux's tuning alone.
    share: AtomicU64,
    /// What connections to this host get (`same_host.rs`): congestion control and
    /// receive buffer.
    pub(crate) same_host: SameHostTcp,
}

/// The share of each of `n` connections in `total` octets: `total` divided by `n`
/// rounded up to a power of two, at least [`MIN_SHARE`], or 0 (Linux's own tuning)
/// when that is above [`AUTOTUNE_ABOVE`] or there is no budget.
pub(crate) fn share_of(total: u64, n: u64) -> u64 {
    if total == 0 {
        return 0;
    }
    let s = total / n.max(1).next_power_of_two();
    if s >= AUTOTUNE_ABOVE {
        0
    } else {
        s.max(MIN_SHARE)
    }
}

impl SocketBuffers {
    pub(crate) fn new(total: u64, same_host: SameHostTcp) -> Arc<SocketBuffers> {
        Arc::new(SocketBuffers {
            total,
            connections: AtomicU64::new(0),
            share: AtomicU64::new(0),
            same_host,
        })
    }

    /// Each connection's share now (0: Linux tunes each socket itself).
    pub(crate) fn share(&self) -> u64 {
        self.share.load(Ordering::Relaxed)
    }

    fn recompute(&self, n: u64) {
        self.share.store(share_of(self.total, n), Ordering::Relaxed);
    }

    /// One more connection shares the budget, until the returned seat is dropped.
    pub(crate) fn join(self: &Arc<Self>) -> Seat {
        let n = self.connections.fetch_add(1, Ordering::Relaxed) + 1;
        self.recompute(n);
        Seat {
            budget: self.clone(),
            applied: 0,
        }
    }
}

/// One socket's place in a [`SocketBuffers`] budget.
#[derive(Debug)]
pub(crate) struct Seat {
    budget: Arc<SocketBuffers>,
    /// The share last set on the socket (0: none set yet).
    applied: u64,
}

impl Seat {
    /// Sets the socket's send buffer to the current share if that changed since the
    /// last call. A socket that was given a share keeps a fixed size afterwards (Linux
    /// cannot give tuning back), so a share of 0 then means the tuning maximum.
    #[inline]
    pub(crate) fn apply(&mut self, fd: RawFd) {
        let share = self.budget.share();
        if share != self.applied {
            self.apply_slow(fd, share);
        }
    }

    #[cold]
    fn apply_slow(&mut self, fd: RawFd, share: u64) {
        let size = if share == 0 { AUTOTUNE_ABOVE } else { share };
        sys::socket::set_send_buffer(fd, size);
        self.applied = share;
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        let n = self.budget.connections.fetch_sub(1, Ordering::Relaxed) - 1;
        self.budget.recompute(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_halve_when_connections_double_and_stop_at_the_floor() {
        let total = 64 << 20;
        assert_eq!(share_of(total, 1), 0);
        assert_eq!(share_of(total, 16), 0, "4 MiB each: Linux's own maximum");
        assert_eq!(share_of(total, 17), 2 << 20);
        assert_eq!(share_of(total, 32), 2 << 20);
        assert_eq!(share_of(total, 256), 256 << 10);
        assert_eq!(share_of(total, 1000), 64 << 10);
        assert_eq!(share_of(total, 10_000), MIN_SHARE);
        assert_eq!(share_of(0, 10_000), 0, "no budget: Linux tunes");
    }

    #[test]
    fn by_default_256_connections_each_get_a_same_host_receive_window_to_send_into() {
        let total = crate::DeviceConfig::default().socket_send_budget;
        assert_eq!(share_of(total, 256), SAME_HOST_RECEIVE);
        assert_eq!(share_of(total, 64), 0, "Linux tunes up to 64 connections");
        assert_eq!(share_of(total, 1000), 256 << 10);
    }

    #[test]
    fn seats_follow_the_count_and_give_it_back() {
        let b = SocketBuffers::new(64 << 20, SameHostTcp::System);
        let seats: Vec<Seat> = (0..256).map(|_| b.join()).collect();
        assert_eq!(b.share(), 256 << 10);
        drop(seats);
        assert_eq!(b.share(), 0);
        assert_eq!(b.connections.load(Ordering::Relaxed), 0);
    }
}
