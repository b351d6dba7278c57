//! Completion queues: a lock-free ring ([`crate::cq_ring`]) the QPs push into, a
//! consumer that polls it, and notification (arm for the next completion or for
//! solicited ones only) for consumers that block.

use crate::cq_ring::{CqRing, Full};
use crate::device::{AsyncEvent, ProgressMode, Shared};
use crate::error::Result;
use crate::limits::Reservation;
use crate::qp::QpShared;
use softrnic_proto::Completion;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

const DISARMED: u8 = 0;
const ARMED_NEXT: u8 = 1;
const ARMED_SOLICITED: u8 = 2;

pub(crate) struct CqShared {
    pub(crate) id: u32,
    /// The completion vector: the engine that drives the QPs receiving into this CQ.
    pub(crate) vector: usize,
    ring: CqRing,
    depth: usize,
    /// Completions that found the ring full: kept (never dropped), delivered after the
    /// ring's, and reported once as [`AsyncEvent::CqOverflow`].
    overflow: Mutex<VecDeque<Completion>>,
    overflowed: AtomicBool,
    armed: AtomicU8,
    notified: Mutex<u64>,
    notify_cv: Condvar,
    dev: Weak<Shared>,
    pub(crate) qps: Mutex<Vec<Weak<QpShared>>>,
    /// This CQ's share of [`crate::DeviceConfig::max_cq_entries`].
    _entries: Reservation,
}

impl CqShared {
    pub(crate) fn new(
        id: u32,
        depth: usize,
        vector: usize,
        dev: Arc<Shared>,
        entries: Reservation,
    ) -> Result<CqShared> {
        let ring = CqRing::new(depth).map_err(|_| crate::Error::InvalidArgument("CQ depth"))?;
        Ok(CqShared {
            id,
            vector,
            ring,
            depth,
            overflow: Mutex::new(VecDeque::new()),
            overflowed: AtomicBool::new(false),
            armed: AtomicU8::new(DISARMED),
            notified: Mutex::new(0),
            notify_cv: Condvar::new(),
            dev: Arc::downgrade(&dev),
            qps: Mutex::new(Vec::new()),
            _entries: entries,
        })
    }

    pub(crate) fn belongs_to(&self, dev: &Arc<Shared>) -> bool {
        std::ptr::eq(self.dev.as_ptr(), Arc::as_ptr(dev))
    }

    /// Adds a completion; `solicited` marks a received Send with the SE flag.
    pub(crate) fn push(&self, c: Completion, solicited: bool) {
        let mut over = false;
        let mut pending = Some(c);
        if self.overflowed.load(Ordering::Acquire)
            && let Ok(mut o) = self.overflow.lock()
            // Re-checked under the lock: the consumer clears the flag while holding it,
            // so a completion is never left in a list nobody will read.
            && self.overflowed.load(Ordering::Acquire)
            && let Some(c) = pending.take()
        {
            o.push_back(c);
        }
        if let Some(c) = pending
            && let Err(Full(c)) = self.ring.push(c)
            && let Ok(mut o) = self.overflow.lock()
        {
            // Once overflowed, everything goes to the overflow list so order is kept;
            // the flag is set while holding the lock.
            o.push_back(c);
            over = !self.overflowed.swap(true, Ordering::AcqRel);
        }
        if over && let Some(d) = self.dev.upgrade() {
            d.post_event(AsyncEvent::CqOverflow { cq: self.id });
        }
        let armed = self.armed.load(Ordering::Acquire);
        if armed == ARMED_NEXT || (armed == ARMED_SOLICITED && solicited) {
            self.armed.store(DISARMED, Ordering::Release);
            if let Ok(mut n) = self.notified.lock() {
                *n += 1;
                self.notify_cv.notify_all();
            }
        }
    }

    fn pop_into(&self, out: &mut [Completion]) -> usize {
        let mut n = match self.ring.consumer() {
            Some(mut c) => c.pop_into(out),
            None => return 0,
        };
        if n < out.len()
            && self.overflowed.load(Ordering::Acquire)
            && let Ok(mut o) = self.overflow.lock()
        {
            while n < out.len() {
                // The ring may have taken new completions before the flag was set:
                // those come first.
                if let Some(mut c) = self.ring.consumer()
                    && let Some(x) = c.pop()
                {
                    out[n] = x;
                    n += 1;
                    continue;
                }
                match o.pop_front() {
                    Some(x) => {
                        out[n] = x;
                        n += 1;
                    }
                    None => {
                        self.overflowed.store(false, Ordering::Release);
                        break;
                    }
                }
            }
        }
        n
    }

    /// Lets the consumer's thread drive the sockets of the QPs on this CQ.
    fn drive(&self) -> bool {
        let Some(dev) = self.dev.upgrade() else {
            return false;
        };
        if dev.cfg.progress != ProgressMode::Hybrid {
            return false;
        }
        let qps: Vec<Arc<QpShared>> = match self.qps.lock() {
            Ok(q) => q.iter().filter_map(Weak::upgrade).collect(),
            Err(_) => return false,
        };
        let mut any = false;
        for qp in qps {
            any |= qp.try_progress(&dev);
        }
        any
    }
}

/// A completion queue.
#[derive(Clone)]
pub struct Cq {
    pub(crate) shared: Arc<CqShared>,
}

impl std::fmt::Debug for Cq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Cq({}, depth {})", self.shared.id, self.shared.depth)
    }
}

fn empty_completion() -> Completion {
    Completion {
        wr_id: 0,
        status: softrnic_proto::WcStatus::GeneralError,
        opcode: softrnic_proto::WcOpcode::Recv,
        byte_len: 0,
        qp: softrnic_proto::QpId(0),
        solicited: false,
        invalidated: None,
    }
}

impl Cq {
    /// Its identifier.
    pub fn id(&self) -> u32 {
        self.shared.id
    }

    /// The depth asked for at creation.
    pub fn depth(&self) -> usize {
        self.shared.depth
    }

    /// Its completion vector (see [`crate::Device::create_cq_on`]).
    pub fn vector(&self) -> usize {
        self.shared.vector
    }

    /// Moves up to `out.len()` completions into `out`, oldest first; returns how many.
    /// In hybrid progress mode, an empty CQ first drives its QPs' sockets once.
    pub fn poll(&self, out: &mut [Completion]) -> usize {
        let n = self.shared.pop_into(out);
        if n > 0 || out.is_empty() {
            return n;
        }
        if self.shared.drive() {
            return self.shared.pop_into(out);
        }
        0
    }

    /// One completion, if any.
    pub fn poll_one(&self) -> Option<Completion> {
        let mut one = [empty_completion()];
        (self.poll(&mut one) == 1).then_some(one[0])
    }

    /// Arms the CQ: the next completion (or the next solicited one) notifies waiters.
    pub fn req_notify(&self, solicited_only: bool) {
        let v = if solicited_only {
            ARMED_SOLICITED
        } else {
            ARMED_NEXT
        };
        self.shared.armed.store(v, Ordering::Release);
    }

    /// Waits up to `timeout` for a notification after [`Cq::req_notify`]; true if one came.
    pub fn wait_notify(&self, timeout: Duration) -> bool {
        let Ok(g) = self.shared.notified.lock() else {
            return false;
        };
        let start = *g;
        match self
            .shared
            .notify_cv
            .wait_timeout_while(g, timeout, |n| *n == start)
        {
            Ok((_, r)) => !r.timed_out(),
            Err(_) => false,
        }
    }

    /// Collects `n` completions, waiting up to `timeout` in all (busy-polling in hybrid
    /// mode, otherwise blocking on notifications). Returns what arrived.
    pub fn wait_for(&self, n: usize, timeout: Duration) -> Vec<Completion> {
        let deadline = Instant::now() + timeout;
        let mut got = Vec::with_capacity(n);
        let mut buf = vec![empty_completion(); n.clamp(1, 64)];
        let hybrid = self
            .shared
            .dev
            .upgrade()
            .is_some_and(|d| d.cfg.progress == ProgressMode::Hybrid);
        while got.len() < n {
            let want = (n - got.len()).min(buf.len());
            let k = self.poll(&mut buf[..want]);
            got.extend_from_slice(&buf[..k]);
            if k > 0 {
                continue;
            }
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            if hybrid {
                std::thread::yield_now();
            } else {
                self.req_notify(false);
                // A completion may have arrived before arming: look once more.
                let k = self.poll(&mut buf[..want]);
                got.extend_from_slice(&buf[..k]);
                if k == 0 {
                    self.wait_notify((deadline - now).min(Duration::from_millis(10)));
                }
            }
        }
        got
    }
}
