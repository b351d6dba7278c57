//! What a device is opened with: the progress model, engine placement, limits and the
//! connection settings ([`DeviceConfig`]), and their defaults.

use std::time::Duration;

/// How work progresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressMode {
    /// Engine threads serve all sockets; `Cq::poll` only reads the CQ.
    Engine,
    /// Engine threads serve all sockets, and a `Cq::poll` that finds the CQ empty also
    /// drives the sockets of the QPs attached to it, so a busy-polling consumer does not
    /// pay a cross-CPU wake-up (~30 us here) per completion. The default.
    Hybrid,
}

/// Device configuration.
#[derive(Debug, Clone)]
pub struct DeviceConfig {
    /// Engine threads serving sockets, when `engine_cpus` is empty; engine `i` serves
    /// completion vector `i` (the QPs whose receive CQ is on it).
    pub engine_threads: usize,
    /// The CPUs of the engine threads: empty leaves them unpinned (they inherit the
    /// affinity of the thread that opens the device, and `engine_placement` says
    /// where they go within it); otherwise one engine per entry, pinned to that CPU
    /// (an entry may repeat), and `engine_threads` is not used.
    pub engine_cpus: Vec<usize>,
    /// Where engines that `engine_cpus` does not pin run: by default on the CPUs of
    /// the threads that connect or accept their QPs, once those are pinned.
    pub engine_placement: crate::EnginePlacement,
    /// Completion vectors, which are the ids of completion handlers
    /// ([`crate::Device::set_handler`]); 0: one per CPU the process may run on, and at least
    /// one per engine. Vector `v` is served by the engine pinned to the CPU of handler
    /// `v`, if there is one, else by engine `v % engines`.
    pub comp_vectors: usize,
    /// How long an idle engine thread spins before it blocks in epoll.
    pub engine_spin: Duration,
    /// Progress model.
    pub progress: ProgressMode,
    /// Largest FPDU sent; `None` sizes FPDUs to the socket's TCP MSS (RFC 5044), or to
    /// the largest FPDU when the peer is on a loopback address.
    pub max_fpdu: Option<usize>,
    /// MPA settings for connections (CRC policy, revision, IRD/ORD...).
    pub mpa: softrnic_proto::cm::MpaConfig,
    /// Initiator: the whole of a connect (TCP connection, our MPA Request, the peer's
    /// Reply) must be done within this, however the peer paces its octets (RFC 5044's
    /// MPA timer; Linux siw's initiator waits 10 s).
    pub connect_timeout: Duration,
    /// Initiator: after the peer's MPA Reply, the first FPDU (and so `connect`'s
    /// return) waits `first_fpdu_hold.rtts` times the MPA round trip (our Request out
    /// to the Reply in), at most `first_fpdu_hold.max`. A responder that moves its
    /// socket into RDMA mode only after sending its Reply (Linux siw, see
    /// docs/INTEROP.md) otherwise misses an FPDU that lands in between, for good. The
    /// round trip includes the peer's time to decide, so the hold follows the peer's
    /// pace: tens of microseconds against a fast peer, more against a slow one.
    pub first_fpdu_hold: FirstFpduHold,
    /// Responder: a connection's whole MPA Request must have arrived within this of
    /// the TCP connection being taken, or the connection is dropped (RST). A silent or
    /// slow peer holds nothing longer than this (Linux siw's responder waits 5 s).
    pub mpa_request_timeout: Duration,
    /// MPA exchanges in progress at once on the device, both sides counted (requests
    /// being read by listeners, connects waiting for a Reply). Beyond it a connect
    /// fails with [`crate::Error::Limit`] and a listener drops its oldest exchange to
    /// take the new connection (or the new one, if it has none).
    pub max_mpa_exchanges: usize,
    /// MPA Requests one listener reads at once; beyond it, the oldest exchange in
    /// progress is dropped to make room, so a flood of silent connections cannot keep
    /// a prompt client out.
    pub max_listener_exchanges: usize,
    /// TCP keepalive idle time, so a silently dead peer is noticed in bounded time.
    pub keepalive: Duration,
    /// How long a QP's close may take (the peer's FIN, or the queued octets draining)
    /// before its connection is reset.
    pub close_timeout: Duration,
    /// Queue pairs at once (reported by `query` and enforced, as every limit here:
    /// beyond it, creation fails with [`crate::Error::Limit`] and allocates nothing).
    pub max_qp: u32,
    /// Entries of one CQ.
    pub max_cqe: usize,
    /// Entries of all CQs together (each entry is a completion slot allocated when
    /// the CQ is created).
    pub max_cq_entries: u64,
    /// Octets of one memory region.
    pub max_mr_size: u64,
    /// Octets of all memory regions together (allocated or registered).
    pub max_registered: u64,
    /// For testing: faults injected into every connection of the device.
    pub fault: Option<crate::FaultPlan>,
    /// Record every connection of the device (MPA exchange and FPDUs, with synthetic
    /// TCP/IP headers) into this pcap file, created when the device opens. Complete
    /// once the device and its QPs are dropped.
    pub pcap: Option<std::path::PathBuf>,
    /// Kernel socket send buffer, in octets, for all the device's kernel TCP
    /// connections together (see `socket_buffers.rs`): each gets an equal share, from
    /// 4 MiB (Linux's own tuning, kept up to 64 connections by default) down to 64
    /// KiB. 0 leaves every socket to Linux's tuning. By default 256 MiB: 1 MiB each
    /// at 256 connections, a same-host receive window.
    pub socket_send_budget: u64,
    /// Kernel TCP connections whose peer is on this host: by default not BBR (its
    /// pacing held loopback senders below what both ends can move) and a fixed
    /// receive buffer (Linux's tuning left some loopback windows small); see
    /// `same_host.rs`.
    pub same_host_tcp: crate::SameHostTcp,
    /// QPs that send large messages (FPDUs sent from registered memory) at once; the
    /// others wait their turn, first come first served (see `tx_turns.rs`). Fewer QPs at
    /// a time keep the data in flight, and each one's buffers, in the caches. 0: every
    /// QP sends whenever it has something. Default 2.
    pub tx_turns: usize,
    /// Octets a QP sends in its turn before it gives the turn to a waiting QP, at the
    /// end of a message. Default 16 MiB.
    pub tx_turn_quantum: u64,
    /// A turn holder's slice while other QPs wait: if its socket is full when the slice
    /// ends it gives the turn up, mid-message if need be (its peer reads slowly or not
    /// at all). Default 10 ms.
    pub tx_turn_stall: std::time::Duration,
    /// Run connections over softrnic's own TCP on this link instead of kernel TCP
    /// (`None`, the default): `connect` and `listen` then use the device's address
    /// there. See [`crate::UserTcp`].
    pub user_tcp: Option<crate::UserTcp>,
}

impl Default for DeviceConfig {
    fn default() -> Self {
        DeviceConfig {
            engine_threads: 1,
            engine_cpus: Vec::new(),
            engine_placement: crate::EnginePlacement::default(),
            comp_vectors: 0,
            engine_spin: Duration::from_micros(50),
            progress: ProgressMode::Hybrid,
            max_fpdu: None,
            mpa: softrnic_proto::cm::MpaConfig::default(),
            connect_timeout: Duration::from_secs(10),
            mpa_request_timeout: Duration::from_secs(5),
            first_fpdu_hold: FirstFpduHold::default(),
            max_mpa_exchanges: 1024,
            max_listener_exchanges: 256,
            keepalive: Duration::from_secs(5),
            close_timeout: softrnic_proto::qp::DEFAULT_CLOSE_TIMEOUT,
            max_qp: 65536,
            max_cqe: 1 << 20,
            max_cq_entries: 1 << 22,
            max_mr_size: 1 << 40,
            max_registered: 1 << 40,
            fault: None,
            pcap: None,
            socket_send_budget: crate::socket_buffers::DEFAULT_SEND_BUDGET,
            same_host_tcp: crate::SameHostTcp::default(),
            tx_turns: crate::tx_turns::DEFAULT_TX_TURNS,
            tx_turn_quantum: crate::tx_turns::DEFAULT_TX_TURN_QUANTUM,
            tx_turn_stall: crate::tx_turns::TURN_STALL,
            user_tcp: None,
        }
    }
}

/// How long an initiator holds its first FPDU after the MPA Reply
/// ([`DeviceConfig::first_fpdu_hold`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FirstFpduHold {
    /// Multiples of the MPA round trip (0: no hold).
    pub rtts: u32,
    /// The hold's upper bound.
    pub max: Duration,
}

impl Default for FirstFpduHold {
    fn default() -> Self {
        FirstFpduHold {
            rtts: 1,
            max: Duration::from_millis(250),
        }
    }
}

impl FirstFpduHold {
    /// The hold after an MPA exchange that took `rtt`.
    pub fn after(&self, rtt: Duration) -> Duration {
        rtt.saturating_mul(self.rtts).min(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_fpdu_hold_follows_the_round_trip_up_to_its_bound() {
        let ms = Duration::from_millis;
        let h = FirstFpduHold {
            rtts: 2,
            max: ms(100),
        };
        assert_eq!(h.after(ms(0)), ms(0));
        assert_eq!(h.after(ms(30)), ms(60));
        assert_eq!(h.after(ms(50)), ms(100));
        assert_eq!(h.after(Duration::MAX), ms(100));
        let off = FirstFpduHold { rtts: 0, ..h };
        assert_eq!(off.after(ms(30)), ms(0));
        assert_eq!(FirstFpduHold::default().after(ms(20)), ms(20));
    }
}
