//! What a device reports to the program: its attributes ([`DeviceAttr`]), what its
//! objects hold ([`DeviceUsage`]) and its asynchronous events ([`AsyncEvent`]).

use softrnic_proto::QpId;
use softrnic_wire::TerminateCause;

/// Device attributes (`ibv_query_device`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceAttr {
    /// Queue pairs.
    pub max_qp: u32,
    /// Work requests per queue.
    pub max_qp_wr: usize,
    /// Completion queues.
    pub max_cq: u32,
    /// Entries per CQ.
    pub max_cqe: usize,
    /// Memory regions.
    pub max_mr: u32,
    /// Octets per memory region.
    pub max_mr_size: u64,
    /// Octets of all memory regions together.
    pub max_registered: u64,
    /// Entries of all CQs together.
    pub max_cq_entries: u64,
    /// MPA exchanges in progress at once.
    pub max_mpa_exchanges: usize,
    /// Scatter/gather elements per work request.
    pub max_sge: usize,
    /// Inline data per work request (sends copy from registered memory here, so 0).
    pub max_inline: usize,
    /// Inbound RDMA Read depth per QP.
    pub max_ird: u16,
    /// Outbound RDMA Read depth per QP.
    pub max_ord: u16,
    /// Completion vectors, which are the completion handler ids (see
    /// [`crate::Device::create_cq_on`], [`crate::Device::set_handler`]).
    pub num_comp_vectors: usize,
    /// The highest handler priority (see [`crate::Handler::priority`]); events of
    /// higher priorities are dispatched first on a shared CPU.
    pub max_handler_priority: u8,
    /// Shared receive queues.
    pub max_srq: u32,
    /// Receives per shared receive queue.
    pub max_srq_wr: usize,
}

/// What a device's objects hold at one moment ([`crate::Device::usage`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceUsage {
    /// Queue pairs.
    pub qps: usize,
    /// Entries of all CQs.
    pub cq_entries: u64,
    /// Octets of all memory regions.
    pub registered: u64,
    /// MPA exchanges in progress (listeners' and connects').
    pub mpa_exchanges: usize,
    /// Each kernel TCP connection's share of
    /// [`crate::DeviceConfig::socket_send_budget`], in octets; 0 while Linux tunes them.
    pub socket_send_share: u64,
}

/// An event the device reports asynchronously.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AsyncEvent {
    /// A QP's connection is established.
    Established {
        /// The QP.
        qp: QpId,
    },
    /// A QP's connection closed (graceful or abortive, either side).
    Disconnected {
        /// The QP.
        qp: QpId,
    },
    /// A QP went to error with a Terminate, sent or received.
    QpFatal {
        /// The QP.
        qp: QpId,
        /// Layer/type/code.
        cause: TerminateCause,
        /// Whether the peer sent the Terminate.
        remote: bool,
    },
    /// The transport failed under a QP (reset, keepalive timeout, peer died).
    ConnectionLost {
        /// The QP.
        qp: QpId,
        /// What the OS said.
        error: std::io::ErrorKind,
    },
    /// A CQ overflowed: completions beyond its depth are kept, but the consumer is
    /// too slow for the depth it asked for.
    CqOverflow {
        /// The CQ's identifier.
        cq: u32,
    },
    /// Fewer receives than its armed limit are posted in an SRQ (once per arm:
    /// `IBV_EVENT_SRQ_LIMIT_REACHED`).
    SrqLimitReached {
        /// The SRQ.
        srq: u32,
    },
    /// A QP crossed a soft limit on its SRQ: what the manager saw and answered (absorb
    /// the burst, or back-pressure: its socket is not read until the SRQ recovers or
    /// the QP falls back under its limit).
    SrqSoftLimit {
        /// The SRQ.
        srq: u32,
        /// The analysis, with the QP and the verdict.
        analysis: softrnic_proto::srq::limits::Analysis,
    },
    /// A QP crossed a hard limit on its SRQ: its connection terminates (DDP "no
    /// buffer" to the peer); a [`AsyncEvent::QpFatal`] follows.
    SrqHardLimit {
        /// The SRQ.
        srq: u32,
        /// The analysis, with the QP.
        analysis: softrnic_proto::srq::limits::Analysis,
    },
    /// An interval ended with fewer receives posted than statistical provisioning
    /// asks for: post `target - posted` more (advisory mode).
    SrqBelowTarget {
        /// The SRQ.
        srq: u32,
        /// The target depth.
        target: usize,
        /// Receives posted.
        posted: usize,
    },
}
