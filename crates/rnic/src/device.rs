//! The device: an RNIC instance inside the process. It owns the TPT, the region table,
//! the engine threads that serve the sockets, and the asynchronous event queue.
//!
//! What it is opened with is in `config`; what it reports (attributes, usage, events)
//! in `report`.

mod config;
mod report;

pub use config::{DeviceConfig, FirstFpduHold, ProgressMode};
pub use report::{AsyncEvent, DeviceAttr, DeviceUsage};

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
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

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
    /// QPs sending large messages at once ([`DeviceConfig::tx_turns`]).
    pub(crate) tx_turns: Arc<crate::tx_turns::TxTurns>,
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
            socket_buffers: crate::socket_buffers::SocketBuffers::new(
                cfg.socket_send_budget,
                cfg.same_host_tcp,
            ),
            tx_turns: crate::tx_turns::TxTurns::new(
                cfg.tx_turns,
                cfg.tx_turn_quantum,
                cfg.tx_turn_stall,
            ),
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
        shared.tx_turns.attach(Arc::downgrade(&shared));
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

    /// What a user reports of a hang: each QP's queues (Reads outstanding, inbound
    /// Reads queued), how far its receive path got and who drives it; with the own TCP,
    /// the stack's timers and every connection's TCP state and readiness flags. A few
    /// lines; locks held for long are reported, not waited for.
    pub fn stall_report(&self) -> String {
        let qps: Vec<_> = self
            .shared
            .qps
            .lock()
            .map(|q| q.values().cloned().collect())
            .unwrap_or_default();
        let mut lines: Vec<String> = qps.iter().map(|q| q.stall_report()).collect();
        lines.sort();
        if let Some(u) = &self.shared.user {
            lines.push(u.stack.stall_report());
        }
        lines.join("\n")
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
