//! The device: an RNIC instance inside the process. It owns the TPT, the region table,
//! the engine threads that serve the sockets, and the asynchronous event queue.

use crate::cq::{Cq, CqShared};
use crate::engine::{Engine, EngineInfo};
use crate::error::{Error, Result};
use crate::limits::{Budget, Reservation};
use crate::mr::Pd;
use crate::qp::{Qp, QpInit, QpShared};
use crate::region::Region;
use crate::region_table::RegionTable;
use crate::srq::{Srq, SrqInit};
use softrnic_proto::tpt::Tpt;
use softrnic_proto::{PdId, QpId, RegionId};
use softrnic_wire::TerminateCause;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex};
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
    /// ([`Device::set_handler`]); 0: one per CPU the process may run on, and at least
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
    /// beyond it, creation fails with [`Error::Limit`] and allocates nothing).
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
    /// 4 MiB (Linux's own tuning, kept up to 16 connections by default) down to 64
    /// KiB. 0 leaves every socket to Linux's tuning.
    pub socket_send_budget: u64,
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
            socket_send_budget: 64 << 20,
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
    /// [`Device::create_cq_on`], [`Device::set_handler`]).
    pub num_comp_vectors: usize,
    /// The highest handler priority (see [`crate::Handler::priority`]); events of
    /// higher priorities are dispatched first on a shared CPU.
    pub max_handler_priority: u8,
    /// Shared receive queues.
    pub max_srq: u32,
    /// Receives per shared receive queue.
    pub max_srq_wr: usize,
}

/// What a device's objects hold at one moment ([`Device::usage`]).
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
    /// [`DeviceConfig::socket_send_budget`], in octets; 0 while Linux tunes them.
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

/// Numbers devices in the process, for the `dev` field of tracing events.
static NEXT_DEVICE: AtomicU32 = AtomicU32::new(1);

pub(crate) struct Shared {
    pub(crate) cfg: DeviceConfig,
    /// This device's number in the process (tracing events name it).
    pub(crate) serial: u32,
    /// The TPT: sharded, so lookups on the data path take no device-wide lock.
    pub(crate) tpt: Tpt,
    pub(crate) regions: RegionTable,
    pub(crate) qps: Mutex<HashMap<u32, Arc<QpShared>>>,
    next_qp: AtomicU32,
    next_pd: AtomicU32,
    next_cq: AtomicU32,
    next_srq: AtomicU32,
    events: Mutex<VecDeque<AsyncEvent>>,
    events_cv: Condvar,
    pub(crate) engines: Vec<Engine>,
    /// Completion handlers by id, and their dispatcher threads.
    pub(crate) handlers: crate::handler::Handlers,
    /// Every CQ created, to find those bound to a handler.
    pub(crate) cqs: Mutex<Vec<std::sync::Weak<CqShared>>>,
    /// Where connections are recorded ([`DeviceConfig::pcap`]).
    pub(crate) pcap: Option<Arc<crate::transport::pcap::PcapSink>>,
    /// MPA exchanges in progress ([`DeviceConfig::max_mpa_exchanges`]).
    pub(crate) exchanges: Arc<Budget>,
    /// Entries of all CQs ([`DeviceConfig::max_cq_entries`]).
    pub(crate) cq_entries: Arc<Budget>,
    /// Octets of all memory regions ([`DeviceConfig::max_registered`]).
    pub(crate) registered: Arc<Budget>,
    /// Kernel socket send buffers ([`DeviceConfig::socket_send_budget`]).
    pub(crate) socket_buffers: Arc<crate::socket_buffers::SocketBuffers>,
    /// The device's own TCP ([`DeviceConfig::user_tcp`]), with its thread.
    pub(crate) user: Option<crate::transport::user::stack::UserStackHandle>,
}

/// One MPA exchange in progress, counted against
/// [`DeviceConfig::max_mpa_exchanges`] until dropped.
pub(crate) type ExchangeSlot = Reservation;

impl Shared {
    /// The region registered under `id`, if it still is (one shard's read lock).
    pub(crate) fn region(&self, id: RegionId) -> Option<Arc<Region>> {
        self.regions.get(id)
    }

    pub(crate) fn reserve_region_id(&self) -> Result<RegionId> {
        self.regions.reserve()
    }

    pub(crate) fn release_region_id(&self, id: RegionId) {
        self.regions.release(id);
    }

    pub(crate) fn install_region(&self, r: Arc<Region>) {
        self.regions.install(r);
    }

    pub(crate) fn remove_region(&self, id: RegionId) {
        self.regions.remove(id);
    }

    /// A consumer key for a new STag: random (RFC 5042 section 5.1: a peer that has
    /// seen some STags must not be able to guess others), from the kernel.
    pub(crate) fn next_key(&self) -> Result<u8> {
        let mut k = [0u8; 1];
        crate::sys::random::fill(&mut k)?;
        Ok(k[0])
    }

    /// A slot for one more MPA exchange, unless the device has
    /// [`DeviceConfig::max_mpa_exchanges`] in progress.
    pub(crate) fn exchange_slot(&self) -> Option<ExchangeSlot> {
        self.exchanges.reserve(1).ok()
    }

    /// The engine that drives the QPs receiving into CQs of `vector`: one pinned to
    /// the CPU of the vector's handler if there is one (several there: spread by
    /// vector), else engine `vector % engines`.
    pub(crate) fn engine_for(&self, vector: usize) -> usize {
        let n = self.engines.len().max(1);
        if let Some(cpu) = self.handlers.get(vector).and_then(|h| h.cpu) {
            let on: Vec<usize> = (0..self.engines.len())
                .filter(|&i| self.engines[i].cpu() == Some(cpu))
                .collect();
            if !on.is_empty() {
                return on[vector % on.len()];
            }
        }
        vector % n
    }

    /// The CQs still alive.
    pub(crate) fn live_cqs(&self) -> Vec<Arc<CqShared>> {
        self.cqs
            .lock()
            .map(|c| c.iter().filter_map(std::sync::Weak::upgrade).collect())
            .unwrap_or_default()
    }

    pub(crate) fn post_event(&self, e: AsyncEvent) {
        crate::trace::async_event(self.serial, &e);
        if let Ok(mut q) = self.events.lock() {
            q.push_back(e);
            self.events_cv.notify_all();
        }
    }
}

/// An open RNIC. Cheap to clone; the engine threads stop when the last clone, and every
/// object created from it, is dropped. The device's own TCP (its link: a socket, a
/// port, a TAP) closes when the last clone is dropped, in that thread: an engine that
/// happens to hold the device for a moment must not keep the port bound after the
/// program has let go, or a device opened next on the same port fails.
#[derive(Clone)]
pub struct Device {
    /// Declared first: dropped before `shared`, so its `Drop` still finds the device.
    _close_link: Arc<CloseLinkOnLastHandle>,
    pub(crate) shared: Arc<Shared>,
}

/// Shared by a device's handles; stops the own TCP's thread and closes its link when the
/// last handle goes.
struct CloseLinkOnLastHandle(std::sync::Weak<Shared>);

impl Drop for CloseLinkOnLastHandle {
    fn drop(&mut self) {
        if let Some(user) = self.0.upgrade().as_ref().and_then(|s| s.user.as_ref()) {
            user.shutdown();
        }
    }
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Device({} engine thread(s))", self.shared.engines.len())
    }
}

impl Device {
    /// Opens a device with its engine threads. A CPU in `engine_cpus` that does not
    /// exist or that this process may not use is an [`Error::InvalidArgument`].
    pub fn open(cfg: DeviceConfig) -> Result<Device> {
        if cfg.engine_cpus.is_empty() && cfg.engine_threads == 0 {
            return Err(Error::InvalidArgument("engine_threads must be at least 1"));
        }
        cfg.mpa.validate().map_err(Error::Mpa)?;
        let cpus: Vec<Option<usize>> = if cfg.engine_cpus.is_empty() {
            vec![None; cfg.engine_threads]
        } else {
            cfg.engine_cpus.iter().copied().map(Some).collect()
        };
        let engines = cpus
            .into_iter()
            .enumerate()
            .map(|(i, cpu)| Engine::start(i, cfg.engine_spin, cpu, cfg.engine_placement))
            .collect::<Result<Vec<_>>>()?;
        let vectors = match cfg.comp_vectors {
            0 => crate::sys::affinity::process_cpus()
                .len()
                .max(engines.len()),
            n => n,
        };
        let max_exchanges = cfg.max_mpa_exchanges as u64;
        let (max_cq_entries, max_registered) = (cfg.max_cq_entries, cfg.max_registered);
        let pcap = match &cfg.pcap {
            Some(path) => Some(Arc::new(crate::transport::pcap::PcapSink::create(path)?)),
            None => None,
        };
        let serial = NEXT_DEVICE.fetch_add(1, Ordering::Relaxed);
        let user = match &cfg.user_tcp {
            Some(u) => Some(crate::transport::user::stack::UserStack::start(
                u,
                cfg.keepalive,
                serial,
            )?),
            None => None,
        };
        let shared = Arc::new(Shared {
            user,
            pcap,
            socket_buffers: crate::socket_buffers::SocketBuffers::new(cfg.socket_send_budget),
            cfg,
            serial,
            tpt: Tpt::new(),
            regions: RegionTable::default(),
            qps: Mutex::new(HashMap::new()),
            next_qp: AtomicU32::new(1),
            next_pd: AtomicU32::new(1),
            next_cq: AtomicU32::new(1),
            next_srq: AtomicU32::new(1),
            events: Mutex::new(VecDeque::new()),
            events_cv: Condvar::new(),
            engines,
            handlers: crate::handler::Handlers::new(vectors),
            cqs: Mutex::new(Vec::new()),
            exchanges: Budget::new(max_exchanges, "max_mpa_exchanges"),
            cq_entries: Budget::new(max_cq_entries, "max_cq_entries"),
            registered: Budget::new(max_registered, "max_registered"),
        });
        for (i, e) in shared.engines.iter().enumerate() {
            e.attach(Arc::downgrade(&shared));
            crate::trace::engine_started(shared.serial, &e.info(i));
        }
        Ok(Device {
            _close_link: Arc::new(CloseLinkOnLastHandle(Arc::downgrade(&shared))),
            shared,
        })
    }

    /// This device's number in the process (the `dev` field of its tracing events:
    /// QP numbers repeat across devices).
    pub fn serial(&self) -> u32 {
        self.shared.serial
    }

    /// What the device's own TCP has done, if it has one ([`DeviceConfig::user_tcp`]):
    /// packets, retransmissions, timeouts...
    pub fn user_tcp_stats(&self) -> Option<crate::UserTcpStats> {
        self.shared.user.as_ref().map(|u| u.stack.stats())
    }

    /// Device attributes.
    pub fn query(&self) -> DeviceAttr {
        let c = &self.shared.cfg;
        DeviceAttr {
            max_qp: c.max_qp,
            max_qp_wr: 16384,
            max_cq: 65536,
            max_cqe: c.max_cqe,
            max_mr: 0x00ff_ffff,
            max_mr_size: c.max_mr_size,
            max_registered: c.max_registered,
            max_cq_entries: c.max_cq_entries,
            max_mpa_exchanges: c.max_mpa_exchanges,
            max_sge: softrnic_proto::MAX_SGE,
            max_inline: 0,
            max_ird: softrnic_proto::cm::MpaConfig::MAX_DEPTH,
            max_ord: softrnic_proto::cm::MpaConfig::MAX_DEPTH,
            num_comp_vectors: self.shared.handlers.count(),
            max_handler_priority: u8::MAX,
            max_srq: 65536,
            max_srq_wr: crate::srq::MAX_SRQ_WR,
        }
    }

    /// Allocates a protection domain.
    pub fn alloc_pd(&self) -> Pd {
        Pd {
            dev: self.shared.clone(),
            id: PdId(self.shared.next_pd.fetch_add(1, Ordering::Relaxed)),
        }
    }

    /// Creates a completion queue with room for `depth` completions, on completion
    /// vector 0 and bound to no handler (as `ibv_create_cq` without a channel): its
    /// events go to [`Cq::wait_notify`].
    pub fn create_cq(&self, depth: usize) -> Result<Cq> {
        self.new_cq(depth, 0, None)
    }

    /// Creates a completion queue on completion `vector` (below
    /// [`DeviceAttr::num_comp_vectors`]), bound to the handler of that id: its events
    /// go to that handler once one is registered ([`Device::set_handler`]), and the QPs
    /// whose receive CQ it is are driven by the engine of the handler's CPU (or by
    /// engine `vector % engines` while the handler has no CPU).
    pub fn create_cq_on(&self, depth: usize, vector: usize) -> Result<Cq> {
        if vector >= self.shared.handlers.count() {
            return Err(Error::InvalidArgument(
                "completion vector out of range (see num_comp_vectors)",
            ));
        }
        self.new_cq(depth, vector, Some(vector))
    }

    fn new_cq(&self, depth: usize, vector: usize, handler: Option<usize>) -> Result<Cq> {
        if depth == 0 {
            return Err(Error::InvalidArgument("CQ depth out of range"));
        }
        if depth > self.shared.cfg.max_cqe {
            return Err(Error::Limit("max_cqe"));
        }
        let entries = self.shared.cq_entries.reserve(depth as u64)?;
        let id = self.shared.next_cq.fetch_add(1, Ordering::Relaxed);
        let cq = Arc::new(CqShared::new(
            id,
            depth,
            vector,
            handler,
            self.shared.clone(),
            entries,
        )?);
        let mut all = self.shared.cqs.lock()?;
        all.retain(|w| w.strong_count() > 0);
        all.push(Arc::downgrade(&cq));
        Ok(Cq { shared: cq })
    }

    /// The engine threads, in completion-vector order: where they run and how much
    /// they have done.
    pub fn engines(&self) -> Vec<EngineInfo> {
        let e = &self.shared.engines;
        e.iter().enumerate().map(|(i, e)| e.info(i)).collect()
    }

    /// Creates a shared receive queue in `pd` (`ibv_create_srq`).
    pub fn create_srq(&self, pd: &Pd, init: SrqInit) -> Result<Srq> {
        let id = self.shared.next_srq.fetch_add(1, Ordering::Relaxed);
        Srq::create(&self.shared, id, pd, init)
    }

    /// Creates a QP in `pd` (state Idle; connect it with the connection manager).
    pub fn create_qp(&self, pd: &Pd, init: QpInit<'_>) -> Result<Qp> {
        self.create_qp_with(pd, init, None)
    }

    /// Creates a QP in `pd` whose receive buffers come from `srq`: it has no receive
    /// queue of its own (`init.rq_depth` is not used, as libibverbs ignores
    /// `max_recv_wr` with an SRQ) and [`Qp::post_recv`] on it is refused.
    pub fn create_qp_on_srq(&self, pd: &Pd, init: QpInit<'_>, srq: &Srq) -> Result<Qp> {
        self.create_qp_with(pd, init, Some(srq))
    }

    fn create_qp_with(&self, pd: &Pd, init: QpInit<'_>, srq: Option<&Srq>) -> Result<Qp> {
        if !Arc::ptr_eq(&pd.dev, &self.shared) {
            return Err(Error::InvalidArgument("PD of another device"));
        }
        if let Some(s) = srq
            && !s.shared.belongs_to(&self.shared)
        {
            return Err(Error::InvalidArgument("SRQ of another device"));
        }
        let mut qps = self.shared.qps.lock()?;
        if qps.len() >= self.shared.cfg.max_qp as usize {
            return Err(Error::Limit("max_qp"));
        }
        let id = QpId(self.shared.next_qp.fetch_add(1, Ordering::Relaxed));
        let (scq, rcq) = (init.send_cq.shared.clone(), init.recv_cq.shared.clone());
        let srq = srq.map(|s| s.shared.clone());
        let qp = Arc::new(QpShared::new(id, pd.id, &self.shared, init, srq.clone())?);
        if let Some(s) = &srq {
            s.attach(&qp)?;
        }
        qps.insert(id.0, qp.clone());
        // The CQs learn their QPs, so a polling consumer can drive them (hybrid mode).
        for cq in [&scq, &rcq] {
            cq.add_qp(&qp);
            if Arc::ptr_eq(&scq, &rcq) {
                break;
            }
        }
        Ok(Qp { shared: qp })
    }

    /// What the device's objects hold now, against the limits [`Device::query`]
    /// reports.
    pub fn usage(&self) -> DeviceUsage {
        let s = &self.shared;
        DeviceUsage {
            qps: s.qps.lock().map(|q| q.len()).unwrap_or(0),
            cq_entries: s.cq_entries.used(),
            registered: s.registered.used(),
            mpa_exchanges: s.exchanges.used() as usize,
            socket_send_share: s.socket_buffers.share(),
        }
    }

    /// Next asynchronous event, if any.
    pub fn poll_event(&self) -> Option<AsyncEvent> {
        self.shared.events.lock().ok()?.pop_front()
    }

    /// Waits up to `timeout` for an asynchronous event.
    pub fn wait_event(&self, timeout: Duration) -> Option<AsyncEvent> {
        let q = self.shared.events.lock().ok()?;
        let (mut q, _) = self
            .shared
            .events_cv
            .wait_timeout_while(q, timeout, |q| q.is_empty())
            .ok()?;
        q.pop_front()
    }

    /// Waits up to `timeout` for the first event that `pick` accepts; events it passes
    /// over stay queued.
    pub fn wait_event_matching(
        &self,
        timeout: Duration,
        mut pick: impl FnMut(&AsyncEvent) -> bool,
    ) -> Option<AsyncEvent> {
        let deadline = std::time::Instant::now() + timeout;
        let mut q = self.shared.events.lock().ok()?;
        loop {
            if let Some(i) = q.iter().position(&mut pick) {
                return q.remove(i);
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                return None;
            }
            q = self
                .shared
                .events_cv
                .wait_timeout(q, deadline - now)
                .ok()?
                .0;
        }
    }
}
