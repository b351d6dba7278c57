//! Managed provisioning: an SRQ that replenishes itself from a registered buffer pool it
//! owns, up to the target depth statistical provisioning computes, and gives memory
//! back when demand falls.
//!
//! The pool is made of chunks, one memory region of `per_chunk` buffers each, so that
//! growing registers a few regions rather than one per buffer, and shrinking can
//! deregister whole regions. A buffer is free, posted in the SRQ, or with the program
//! (its message completed; [`crate::Srq::take_message`] copies it out and recycles it).
//!
//! Resizing never loses a message: growing only posts; shrinking withdraws receives
//! that no message has taken (a take and a withdrawal are atomic under the SRQ's lock),
//! from the newest chunks, and frees a chunk only when none of its buffers is posted or
//! with the program. A message that bound a buffer keeps it until it completes.
//!
//! Lock order: pool, then the SRQ's queue; the receive path takes only the queue.

use crate::error::{Error, Result};
use crate::mr::{Mr, Pd};
use crate::srq::SrqShared;
use softrnic_proto::qp::RecvWqe;
use softrnic_proto::{Access, Completion, RecvWr};

/// The managed SRQ's limit event is armed at `target / LOW_WATER` posted receives.
pub const LOW_WATER: usize = 16;

/// When it fires, `target / EMERGENCY` receives are posted at once.
pub const EMERGENCY: usize = 8;

/// How a managed SRQ's pool is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ManagedInit {
    /// Octets per receive buffer (the largest message it takes).
    pub buf_size: usize,
    /// Buffers per registered region.
    pub per_chunk: usize,
    /// Buffers posted at creation, until the first interval's statistics.
    pub initial: usize,
    /// Buffers posted at least, whatever the statistics say.
    pub min_posted: usize,
    /// Buffers in the pool at most (posted, free or with the program).
    pub max_buffers: usize,
}

struct Chunk {
    mr: Mr,
    /// Slots neither posted nor taken by a message nor with the program.
    free: Vec<u32>,
    /// Slots posted, taken by a message, or with the program.
    out: usize,
}

pub(crate) struct Pool {
    init: ManagedInit,
    pd: Pd,
    chunks: Vec<Option<Chunk>>,
    /// The depth to keep posted.
    target: usize,
    /// Registered buffer memory, now and at most.
    pub(crate) bytes: usize,
    pub(crate) peak_bytes: usize,
}

fn wr_id(chunk: usize, slot: u32) -> u64 {
    (chunk as u64) << 32 | u64::from(slot)
}

fn split(wr_id: u64) -> (usize, u32) {
    ((wr_id >> 32) as usize, wr_id as u32)
}

type Tpt = softrnic_proto::tpt::Tpt;

impl Pool {
    pub(crate) fn new(init: ManagedInit, pd: Pd) -> Result<Pool> {
        if init.buf_size == 0
            || init.buf_size > u32::MAX as usize
            || init.per_chunk == 0
            || init.per_chunk > u32::MAX as usize
            || init.max_buffers < init.min_posted.max(1)
        {
            return Err(Error::InvalidArgument(
                "managed SRQ: buf_size, per_chunk >= 1, max_buffers >= min_posted",
            ));
        }
        Ok(Pool {
            target: init.initial.clamp(init.min_posted, init.max_buffers),
            init,
            pd,
            chunks: Vec::new(),
            bytes: 0,
            peak_bytes: 0,
        })
    }

    fn buffers(&self) -> usize {
        self.chunks.iter().flatten().count() * self.init.per_chunk
    }

    /// A free slot, from the oldest chunk that has one, registering a new chunk if
    /// none has and the pool may grow.
    fn free_slot(&mut self) -> Result<Option<(usize, u32)>> {
        for (i, c) in self.chunks.iter_mut().enumerate() {
            if let Some(c) = c
                && let Some(s) = c.free.pop()
            {
                c.out += 1;
                return Ok(Some((i, s)));
            }
        }
        if self.buffers() + self.init.per_chunk > self.init.max_buffers {
            return Ok(None);
        }
        let len = self.init.per_chunk * self.init.buf_size;
        let mr = self.pd.alloc_mr(len, Access::LOCAL_WRITE)?;
        self.bytes += len;
        self.peak_bytes = self.peak_bytes.max(self.bytes);
        let mut free: Vec<u32> = (0..self.init.per_chunk as u32).rev().collect();
        let s = free.pop();
        let chunk = Chunk { mr, free, out: 1 };
        let i = match self.chunks.iter().position(Option::is_none) {
            Some(i) => {
                self.chunks[i] = Some(chunk);
                i
            }
            None => {
                self.chunks.push(Some(chunk));
                self.chunks.len() - 1
            }
        };
        Ok(s.map(|s| (i, s)))
    }

    fn wqe(&self, tpt: &Tpt, chunk: usize, slot: u32) -> Result<RecvWqe> {
        let c = self.chunks[chunk]
            .as_ref()
            .ok_or(Error::Internal("managed SRQ chunk gone"))?;
        let b = self.init.buf_size;
        let wr = RecvWr::new(wr_id(chunk, slot), c.mr.sge(slot as usize * b, b));
        RecvWqe::resolve(&wr, tpt, self.pd.id())
            .map_err(|_| Error::Internal("managed SRQ buffer refused by the TPT"))
    }

    /// Posts free buffers (registering chunks as needed) until `want` are posted.
    fn fill(&mut self, srq: &SrqShared, tpt: &Tpt, want: usize) -> Result<()> {
        let posted = srq.lock()?.srq.posted();
        let mut wqes = Vec::new();
        while posted + wqes.len() < want {
            let Some((ci, s)) = self.free_slot()? else {
                break;
            };
            wqes.push(self.wqe(tpt, ci, s)?);
        }
        if wqes.is_empty() {
            return Ok(());
        }
        let mut g = srq.lock()?;
        let need = (g.srq.posted() + wqes.len()).max(self.buffers());
        if need > g.srq.config().max_wr {
            g.srq
                .resize(need)
                .map_err(|_| Error::Limit("managed SRQ size"))?;
        }
        for w in wqes {
            // Cannot fail: sized above.
            let _ = g.srq.post(w);
        }
        Ok(())
    }

    /// Gives back whole chunks, newest first, while the pool keeps at least `keep`
    /// buffers: a chunk goes only if every buffer of it that is out is still queued in
    /// the SRQ (none taken by a message, none with the program); its receives are
    /// withdrawn and its region deregistered under the SRQ's lock, so no message can
    /// take one of them meanwhile. The caller posts again from the chunks that stay.
    fn shrink(&mut self, srq: &SrqShared, keep: usize) -> Result<()> {
        let mut g = srq.lock()?;
        let mut queued = vec![0usize; self.chunks.len()];
        for w in g.srq.queued() {
            if let Some(q) = queued.get_mut(split(w.wr_id).0) {
                *q += 1;
            }
        }
        let mut cap = self.buffers();
        let mut victims = Vec::new();
        for (i, c) in self.chunks.iter().enumerate().rev() {
            let Some(c) = c else { continue };
            if cap < keep + self.init.per_chunk {
                break;
            }
            if c.out != queued[i] {
                // Some of it is taken or with the program: keep it, look further.
                continue;
            }
            cap -= self.init.per_chunk;
            victims.push(i);
        }
        if victims.is_empty() {
            return Ok(());
        }
        let n: usize = victims.iter().map(|&i| queued[i]).sum();
        let back = g.srq.withdraw(n, |w| victims.contains(&split(w.wr_id).0));
        debug_assert_eq!(back.len(), n);
        for i in victims {
            self.chunks[i] = None;
            self.bytes -= self.init.per_chunk * self.init.buf_size;
        }
        while matches!(self.chunks.last(), Some(None)) {
            self.chunks.pop();
        }
        let size = self.buffers().max(g.srq.posted()).max(1);
        let _ = g.srq.resize(size);
        Ok(())
    }

    /// A new target depth: post up to it, or give back whole chunks beyond it (with an
    /// eighth to spare, so a target that wobbles does not register and deregister).
    /// The limit event is armed at a sixteenth of the target ([`LOW_WATER`]): a burst
    /// beyond what the statistics foresaw is met at once ([`Pool::low_water`]), not at
    /// the interval's end.
    pub(crate) fn retarget(&mut self, srq: &SrqShared, tpt: &Tpt, target: usize) -> Result<()> {
        self.target = target.clamp(self.init.min_posted, self.init.max_buffers);
        self.shrink(srq, self.target + self.target / 8 + 1)?;
        self.fill(srq, tpt, self.target)?;
        self.arm(srq)
    }

    fn arm(&self, srq: &SrqShared) -> Result<()> {
        let mut g = srq.lock()?;
        let limit = (self.target / LOW_WATER).clamp(1, g.srq.config().max_wr);
        let _ = g.srq.arm(limit);
        Ok(())
    }

    /// The limit event fired: fewer than a sixteenth of the target are posted, in the
    /// middle of an interval. Posts an eighth of the target more at once
    /// ([`EMERGENCY`]; registering memory if need be) and re-arms; the next interval's
    /// statistics take it from there.
    pub(crate) fn low_water(&mut self, srq: &SrqShared, tpt: &Tpt) -> Result<()> {
        let posted = srq.lock()?.srq.posted();
        self.fill(srq, tpt, posted + (self.target / EMERGENCY).max(1))?;
        self.arm(srq)
    }

    /// Copies a completed receive's octets out (none for a flushed one) and recycles
    /// its buffer: posted again while fewer than the target are posted, free
    /// otherwise.
    pub(crate) fn take_message(
        &mut self,
        srq: &SrqShared,
        tpt: &Tpt,
        wc: &Completion,
    ) -> Result<Vec<u8>> {
        let (ci, s) = split(wc.wr_id);
        let b = self.init.buf_size;
        let c = self
            .chunks
            .get_mut(ci)
            .and_then(Option::as_mut)
            .filter(|c| (s as usize) < c.mr.len() / b && c.out > 0 && !c.free.contains(&s))
            .ok_or(Error::InvalidArgument(
                "not a buffer of this managed SRQ held by the program",
            ))?;
        if !srq.lock()?.taken.remove(&wc.wr_id) {
            return Err(Error::InvalidArgument(
                "not a buffer of this managed SRQ held by the program",
            ));
        }
        let n = match wc.status {
            softrnic_proto::WcStatus::Success => (wc.byte_len as usize).min(b),
            _ => 0,
        };
        let mut out = vec![0u8; n];
        c.mr.read(s as usize * b, &mut out)?;
        c.out -= 1;
        c.free.push(s);
        let target = self.target;
        self.fill(srq, tpt, target)?;
        Ok(out)
    }

    /// The current target (clamped to the pool's bounds).
    pub(crate) fn target(&self) -> usize {
        self.target
    }
}
