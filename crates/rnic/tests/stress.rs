//! Stress: 256 connected QP pairs between two devices over loopback TCP, sharing a few CQs
//! per device, driven by a seeded random mix of Send/Recv (plain, with Solicited Event,
//! with Invalidate of a one-off MR), RDMA Write and RDMA Read, sizes from 0 octets to
//! 1 MiB, with multi-element scatter/gather lists laid out in shuffled order.
//!
//! Checked: every payload byte for byte at its destination (with guard octets around each
//! destination range, which nobody else uses while the operation is outstanding); every
//! work request completes exactly once, with `WcStatus::Success`, the expected opcode,
//! length, QP and CQ; send-queue completions per QP in posting order, receive completions
//! per QP in posting order; nothing left outstanding and no extra completion at the end;
//! no asynchronous event other than `Established`.
//!
//! RDMA Writes complete when handed to TCP, so a Write's target is checked once a later
//! Send (its Recv completion at the peer) or Read (its completion) on the same QP proves
//! the Write was placed; Writes not followed by either get a zero-length Read at the end.
//!
//! Variety: QP queue depths from 1 to 64 (a few hot QPs with small queues get much of the
//! traffic, in bursts, so queues fill and the test reaps before posting more); CRC on
//! even pairs; device B cuts what it sends into 1460-octet FPDUs, device A uses the MSS;
//! about a tenth of the buffers are MRs registered for one operation and deregistered
//! after it; zero-length messages with no SGE or one empty SGE; occasional fences.
//!
//! The seed can be changed with `SOFTRNIC_STRESS_SEED`, the number of operations with
//! `SOFTRNIC_STRESS_OPS`. Two tests guard a fixed CQ overflow bug (completions
//! beyond a CQ's depth come out of posting order).

mod common;

use common::{connect_qps, end};
use softrnic_rnic::*;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Connected QP pairs.
const PAIRS: usize = 256;
/// CQs per device (QP pair `i` sends on CQ `i % CQS`, receives on `(i / CQS) % CQS`).
const CQS: usize = 4;
/// Operations in the random mix (`SOFTRNIC_STRESS_OPS` overrides).
const OPS: usize = 3000;
/// Work requests outstanding at most (both devices together).
const WINDOW: usize = 192;
/// Per-device memory from which operations take their buffers.
const ARENA: usize = 32 << 20;
/// Guard octets on each side of every destination range.
const GUARD: usize = 8;
const SENTINEL: u8 = 0xa5;
/// How long to wait without any completion before declaring a hang.
const T: Duration = Duration::from_secs(60);
const MIB: usize = 1 << 20;
const CONNECTORS: usize = 4;

fn all_access() -> Access {
    Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ
}

/// xorshift64: a small seeded generator, no dependency.
struct Rng(u64);

impl Rng {
    /// Seeds through splitmix64, so nearby seeds give unrelated sequences.
    fn new(seed: u64) -> Rng {
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        Rng(z.max(1))
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    /// Uniform in `0..n`.
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

/// Deterministic payload for an operation.
fn pattern(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut v = Vec::with_capacity(n + 8);
    while v.len() < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(n);
    v
}

/// A message size: many tiny ones, page-sized ones, and a few up to 1 MiB.
fn pick_size(rng: &mut Rng) -> usize {
    match rng.below(100) {
        0..8 => 0,
        8..16 => 1,
        16..44 => rng.range(2, 256),
        44..58 => rng.range(257, 4095),
        58..70 => 4096,
        70..88 => rng.range(4097, 65535),
        88..95 => 65536,
        95..98 => rng.range(65537, MIB - 1),
        _ => MIB,
    }
}

/// Splits `n` octets into at most `k` non-empty pieces, laid out in shuffled order inside
/// `n` octets. Returns (offset, length) per piece in message order: an SG list.
fn scatter(rng: &mut Rng, n: usize, k: usize) -> Vec<(usize, usize)> {
    if n == 0 {
        // A zero-length message: no SGE at all, or one empty SGE.
        return if rng.chance(50) {
            Vec::new()
        } else {
            vec![(0, 0)]
        };
    }
    let k = k.clamp(1, n);
    let mut cuts: Vec<usize> = (1..k).map(|_| rng.range(1, n - 1)).collect();
    cuts.push(0);
    cuts.push(n);
    cuts.sort_unstable();
    cuts.dedup();
    let lens: Vec<usize> = cuts.windows(2).map(|w| w[1] - w[0]).collect();
    let mut order: Vec<usize> = (0..lens.len()).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i + 1));
    }
    let mut offs = vec![0; lens.len()];
    let mut at = 0;
    for &j in &order {
        offs[j] = at;
        at += lens[j];
    }
    offs.into_iter().zip(lens).collect()
}

/// Panics at the first differing octet (never dumps megabytes).
fn check_bytes(what: &str, got: &[u8], want: &[u8]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
        panic!(
            "{what}: octet {i} of {} is {:#04x}, expected {:#04x}",
            want.len(),
            got[i],
            want[i]
        );
    }
}

/// First-fit allocator over an arena, so concurrent operations never share octets.
struct Arena {
    len: usize,
    next: usize,
    used: BTreeMap<usize, usize>,
}

impl Arena {
    fn alloc(&mut self, n: usize) -> Option<usize> {
        let n = n.max(1);
        let mut p = self.next;
        let mut wrapped = false;
        loop {
            if p + n > self.len {
                if wrapped {
                    return None;
                }
                wrapped = true;
                p = 0;
            }
            // Ranges are disjoint and sorted: only the last one starting before p + n can
            // overlap [p, p + n).
            match self.used.range(..p + n).next_back() {
                Some((_, &end)) if end > p => p = end,
                _ => break,
            }
        }
        self.used.insert(p, p + n);
        self.next = p + n;
        Some(p)
    }

    fn free(&mut self, off: usize) {
        assert!(self.used.remove(&off).is_some(), "arena range freed twice");
    }

    /// Whether `alloc(n)` would succeed now.
    fn alloc_fits(&self, n: usize) -> bool {
        let mut probe = Arena {
            len: self.len,
            next: self.next,
            used: self.used.clone(),
        };
        probe.alloc(n).is_some()
    }
}

/// Where a buffer lives: a range of its device's arena, or an MR of its own.
enum Mem {
    Arena(usize),
    Own(Mr),
}

struct Buf {
    side: usize,
    mem: Mem,
}

struct Side {
    dev: Device,
    pd: Pd,
    cqs: Vec<Cq>,
    qps: Vec<Qp>,
    arena_mr: Mr,
    arena: Arena,
}

/// One end of a QP pair, as the test tracks it.
#[derive(Default)]
struct Ep {
    sq_depth: usize,
    rq_depth: usize,
    sq_out: usize,
    rq_out: usize,
    send_order: VecDeque<u64>,
    recv_order: VecDeque<u64>,
    /// Send-queue posting sequence.
    seq: u64,
    /// Writes whose placement is not proven yet.
    writes: Vec<WriteCheck>,
}

struct WriteCheck {
    seq: u64,
    dst: Buf,
    seed: u64,
    n: usize,
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Send { solicited: bool, invalidate: bool },
    Write,
    Read,
}

enum Job {
    Send {
        src: Buf,
    },
    Write {
        src: Buf,
    },
    Read {
        sink: Buf,
        src: Buf,
        seed: u64,
        n: usize,
        seq: u64,
    },
    Recv {
        buf: Buf,
        len: usize,
        sges: Vec<(usize, usize)>,
        seed: u64,
        n: usize,
        solicited: bool,
        victim: Option<Mr>,
        sender_seq: u64,
    },
}

struct Pending {
    side: usize,
    pair: usize,
    cq: usize,
    opcode: WcOpcode,
    byte_len: u32,
    job: Job,
}

#[derive(Default)]
struct Counts {
    ops: usize,
    barrier_reads: usize,
    bytes: u64,
    sends: usize,
    writes: usize,
    reads: usize,
    multi_sge: usize,
    own_mrs: usize,
    invalidates: usize,
    writes_verified: usize,
    queue_full_waits: usize,
}

struct World {
    sides: [Side; 2],
    eps: Vec<[Ep; 2]>,
    pending: HashMap<u64, Pending>,
    next_wr: u64,
    max_sge: usize,
    n: Counts,
}

fn send_cq(pair: usize) -> usize {
    pair % CQS
}

fn recv_cq(pair: usize) -> usize {
    (pair / CQS) % CQS
}

impl World {
    fn wr_id(&mut self) -> u64 {
        self.next_wr += 1;
        self.next_wr
    }

    fn mr_off<'a>(&'a self, b: &'a Buf) -> (&'a Mr, usize) {
        match &b.mem {
            Mem::Arena(off) => (&self.sides[b.side].arena_mr, *off),
            Mem::Own(mr) => (mr, 0),
        }
    }

    fn sge(&self, b: &Buf, off: usize, len: usize) -> Sge {
        let (mr, base) = self.mr_off(b);
        mr.sge(base + off, len)
    }

    fn remote(&self, b: &Buf, off: usize) -> (u64, STag) {
        let (mr, base) = self.mr_off(b);
        (mr.addr() + (base + off) as u64, mr.rkey())
    }

    fn write_buf(&self, b: &Buf, off: usize, data: &[u8]) {
        let (mr, base) = self.mr_off(b);
        mr.write(base + off, data).unwrap();
    }

    fn fill_buf(&self, b: &Buf, len: usize) {
        let (mr, base) = self.mr_off(b);
        mr.fill(base, len, SENTINEL).unwrap();
    }

    fn read_buf(&self, b: &Buf, off: usize, len: usize) -> Vec<u8> {
        let (mr, base) = self.mr_off(b);
        let mut v = vec![0; len];
        mr.read(base + off, &mut v).unwrap();
        v
    }

    /// A buffer of `len` octets on `side`: sometimes an MR of its own (registered now,
    /// deregistered when the operation is done), usually a range of the arena (waiting
    /// for completions to free room if needed).
    fn alloc(&mut self, rng: &mut Rng, side: usize, len: usize) -> Buf {
        if rng.chance(10) {
            self.n.own_mrs += 1;
            let mr = self.sides[side]
                .pd
                .alloc_mr(len.max(1), all_access())
                .unwrap();
            return Buf {
                side,
                mem: Mem::Own(mr),
            };
        }
        let mut got = self.sides[side].arena.alloc(len);
        if got.is_none() {
            self.wait("arena room", |w| {
                w.sides[side].arena.used.is_empty() || w.sides[side].arena.alloc_fits(len)
            });
            got = self.sides[side].arena.alloc(len);
        }
        let off = got.unwrap_or_else(|| panic!("arena too small for {len} octets"));
        Buf {
            side,
            mem: Mem::Arena(off),
        }
    }

    fn free(&mut self, b: Buf) {
        if let Mem::Arena(off) = b.mem {
            self.sides[b.side].arena.free(off);
        }
    }

    /// A gather list for `payload` over the first `payload.len()` octets of `b`, its
    /// pieces placed in shuffled order, the payload written piece by piece. Returns the
    /// list and whether it has several elements.
    fn gather(&self, rng: &mut Rng, b: &Buf, payload: &[u8]) -> (Sgl, bool) {
        let k = if rng.chance(30) {
            rng.range(2, self.max_sge)
        } else {
            1
        };
        let pieces = scatter(rng, payload.len(), k);
        let mut at = 0;
        let mut sgl = Sgl::new();
        for &(off, len) in &pieces {
            self.write_buf(b, off, &payload[at..at + len]);
            at += len;
            sgl.push(self.sge(b, off, len))
                .expect("at most max_sge pieces");
        }
        (sgl, pieces.len() > 1)
    }

    /// Polls every CQ of both devices once; returns how many completions were handled.
    fn pump(&mut self) -> usize {
        let mut buf = [Completion::default(); 32];
        let mut total = 0;
        for s in 0..2 {
            for c in 0..CQS {
                let n = self.sides[s].cqs[c].poll(&mut buf);
                for wc in &buf[..n] {
                    self.complete(s, c, *wc);
                }
                total += n;
            }
        }
        total
    }

    /// Polls until `done`; panics if no completion arrives for `T`.
    fn wait(&mut self, what: &str, done: impl Fn(&World) -> bool) {
        let mut last = Instant::now();
        while !done(self) {
            if self.pump() > 0 {
                last = Instant::now();
            } else if last.elapsed() > T {
                let mut ids: Vec<_> = self.pending.keys().copied().collect();
                ids.sort_unstable();
                let sample: Vec<String> = ids
                    .iter()
                    .take(12)
                    .map(|id| {
                        let p = &self.pending[id];
                        format!(
                            "wr {id}: {:?} {} octets, pair {} side {} (QP {:?})",
                            p.opcode,
                            p.byte_len,
                            p.pair,
                            p.side,
                            self.sides[p.side].qps[p.pair].state()
                        )
                    })
                    .collect();
                let events: Vec<String> = self
                    .sides
                    .iter()
                    .flat_map(|s| std::iter::from_fn(|| s.dev.poll_event()))
                    .filter(|e| !matches!(e, AsyncEvent::Established { .. }))
                    .map(|e| format!("{e:?}"))
                    .collect();
                panic!(
                    "waiting for {what}: no completion for {T:?}; {} work requests \
                     outstanding, e.g. {sample:#?}; async events: {events:?}",
                    self.pending.len()
                );
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Posts one operation from `side` of QP pair `pair`, of `n` payload octets.
    fn post(&mut self, rng: &mut Rng, side: usize, pair: usize, op: Op, n: usize) {
        let peer = 1 - side;
        let is_send = matches!(op, Op::Send { .. });
        let room = move |w: &World| {
            let (e, p) = (&w.eps[pair][side], &w.eps[pair][peer]);
            w.pending.len() + 2 <= WINDOW
                && e.sq_out < e.sq_depth
                && (!is_send || p.rq_out < p.rq_depth)
        };
        if !room(self) {
            self.n.queue_full_waits += 1;
            self.wait("queue room", room);
        }
        let seq = {
            let e = &mut self.eps[pair][side];
            e.seq += 1;
            e.seq
        };
        let wr_id = self.wr_id();
        let seed = wr_id;
        let payload = pattern(seed, n);
        // A fence now and then (wait for earlier Reads): exercises the ordering path.
        let fence = rng.chance(10);
        self.n.bytes += n as u64;
        let (job, opcode, sgl, wr_op) = match op {
            Op::Send {
                solicited,
                invalidate,
            } => {
                self.n.sends += 1;
                // The receive first (iWARP: a Send finding no receive is fatal), into a
                // buffer at least as long as the message, scattered over shuffled SGEs.
                let len = n + if rng.chance(50) { 0 } else { rng.range(1, 64) };
                let rbuf = self.alloc(rng, peer, len + 2 * GUARD);
                self.fill_buf(&rbuf, len + 2 * GUARD);
                let k = if rng.chance(30) {
                    rng.range(2, self.max_sge)
                } else {
                    1
                };
                let sges = scatter(rng, len, k);
                let mut rsgl = Sgl::new();
                for &(o, l) in &sges {
                    rsgl.push(self.sge(&rbuf, GUARD + o, l))
                        .expect("at most max_sge pieces");
                }
                if rsgl.len() > 1 {
                    self.n.multi_sge += 1;
                }
                let victim = invalidate.then(|| {
                    self.n.invalidates += 1;
                    self.sides[peer]
                        .pd
                        .alloc_mr(
                            64,
                            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_INVALIDATE,
                        )
                        .unwrap()
                });
                let inv = victim.as_ref().map(Mr::rkey);
                let rwr = self.wr_id();
                self.sides[peer].qps[pair]
                    .post_recv(RecvWr::new(rwr, rsgl))
                    .unwrap_or_else(|e| panic!("post_recv on pair {pair} side {peer}: {e}"));
                let p = &mut self.eps[pair][peer];
                p.rq_out += 1;
                p.recv_order.push_back(rwr);
                self.pending.insert(
                    rwr,
                    Pending {
                        side: peer,
                        pair,
                        cq: recv_cq(pair),
                        opcode: WcOpcode::Recv,
                        byte_len: n as u32,
                        job: Job::Recv {
                            buf: rbuf,
                            len,
                            sges,
                            seed,
                            n,
                            solicited,
                            victim,
                            sender_seq: seq,
                        },
                    },
                );
                let src = self.alloc(rng, side, n);
                let (sgl, multi) = self.gather(rng, &src, &payload);
                self.n.multi_sge += usize::from(multi);
                (
                    Job::Send { src },
                    WcOpcode::Send,
                    sgl,
                    SendOp::Send {
                        solicited,
                        invalidate: inv,
                    },
                )
            }
            Op::Write => {
                self.n.writes += 1;
                let src = self.alloc(rng, side, n);
                let (sgl, multi) = self.gather(rng, &src, &payload);
                self.n.multi_sge += usize::from(multi);
                let dst = self.alloc(rng, peer, n + 2 * GUARD);
                self.fill_buf(&dst, n + 2 * GUARD);
                let (remote_addr, rkey) = self.remote(&dst, GUARD);
                self.eps[pair][side]
                    .writes
                    .push(WriteCheck { seq, dst, seed, n });
                (
                    Job::Write { src },
                    WcOpcode::Write,
                    sgl,
                    SendOp::Write { remote_addr, rkey },
                )
            }
            Op::Read => {
                self.n.reads += 1;
                let src = self.alloc(rng, peer, n);
                self.write_buf(&src, 0, &payload);
                let sink = self.alloc(rng, side, n + 2 * GUARD);
                self.fill_buf(&sink, n + 2 * GUARD);
                let (remote_addr, rkey) = self.remote(&src, 0);
                let sgl = Sgl::from(self.sge(&sink, GUARD, n));
                (
                    Job::Read {
                        sink,
                        src,
                        seed,
                        n,
                        seq,
                    },
                    WcOpcode::Read,
                    sgl,
                    SendOp::Read { remote_addr, rkey },
                )
            }
        };
        let e = &mut self.eps[pair][side];
        e.sq_out += 1;
        e.send_order.push_back(wr_id);
        self.pending.insert(
            wr_id,
            Pending {
                side,
                pair,
                cq: send_cq(pair),
                opcode,
                byte_len: n as u32,
                job,
            },
        );
        self.sides[side].qps[pair]
            .post_send(SendWr {
                fence,
                ..SendWr::new(wr_id, wr_op, sgl)
            })
            .unwrap_or_else(|e| panic!("post_send {op:?} on pair {pair} side {side}: {e}"));
    }

    /// Checks the Writes from `side` of `pair` posted before `before`: a later Send or
    /// Read on the same QP has arrived, so they are placed.
    fn verify_writes(&mut self, side: usize, pair: usize, before: u64) {
        let all = std::mem::take(&mut self.eps[pair][side].writes);
        let (done, keep): (Vec<_>, Vec<_>) = all.into_iter().partition(|w| w.seq < before);
        self.eps[pair][side].writes = keep;
        for w in done {
            let got = self.read_buf(&w.dst, 0, w.n + 2 * GUARD);
            let what = format!("RDMA Write (seq {}) on pair {pair} from side {side}", w.seq);
            check_guards(&what, &got);
            check_bytes(&what, &got[GUARD..GUARD + w.n], &pattern(w.seed, w.n));
            self.free(w.dst);
            self.n.writes_verified += 1;
        }
    }

    fn complete(&mut self, s: usize, c: usize, wc: Completion) {
        let p = self.pending.remove(&wc.wr_id).unwrap_or_else(|| {
            panic!(
                "completion for wr_id {} which is not outstanding (completed twice, or \
                 never posted): {wc:?}",
                wc.wr_id
            )
        });
        let (side, pair) = (p.side, p.pair);
        let qp = self.sides[side].qps[pair].id();
        assert_eq!(
            wc.status,
            WcStatus::Success,
            "wr_id {} ({:?}, {} octets, pair {pair}, side {side}) failed: {wc:?}; QP fatal cause {:?}",
            wc.wr_id,
            p.opcode,
            p.byte_len,
            self.sides[side].qps[pair].fatal_cause()
        );
        assert_eq!(
            (s, c, wc.qp, wc.opcode, wc.byte_len),
            (side, p.cq, qp, p.opcode, p.byte_len),
            "wr_id {}: completion on (side, CQ, QP, opcode, length) differs from the work request",
            wc.wr_id
        );
        let ep = &mut self.eps[pair][side];
        if let Job::Recv { .. } = p.job {
            assert_eq!(
                ep.recv_order.pop_front(),
                Some(wc.wr_id),
                "receive completions on pair {pair} side {side} out of posting order"
            );
            ep.rq_out -= 1;
        } else {
            assert_eq!(
                ep.send_order.pop_front(),
                Some(wc.wr_id),
                "send-queue completions on pair {pair} side {side} out of posting order"
            );
            ep.sq_out -= 1;
            assert!(
                !wc.solicited && wc.invalidated.is_none(),
                "send-side completion with receive flags: {wc:?}"
            );
        }
        match p.job {
            Job::Send { src } | Job::Write { src } => self.free(src),
            Job::Read {
                sink,
                src,
                seed,
                n,
                seq,
            } => {
                let got = self.read_buf(&sink, 0, n + 2 * GUARD);
                let what = format!("RDMA Read wr_id {} on pair {pair} side {side}", wc.wr_id);
                check_guards(&what, &got);
                check_bytes(&what, &got[GUARD..GUARD + n], &pattern(seed, n));
                self.free(sink);
                self.free(src);
                self.verify_writes(side, pair, seq);
            }
            Job::Recv {
                buf,
                len,
                sges,
                seed,
                n,
                solicited,
                victim,
                sender_seq,
            } => {
                let what = format!("Recv wr_id {} on pair {pair} side {side}", wc.wr_id);
                assert_eq!(wc.solicited, solicited, "{what}: solicited flag");
                assert_eq!(
                    wc.invalidated,
                    victim.as_ref().map(Mr::rkey),
                    "{what}: invalidated STag"
                );
                if let Some(v) = &victim {
                    assert!(
                        !v.is_valid(),
                        "{what}: STag still valid after Send with Invalidate"
                    );
                }
                drop(victim);
                let raw = self.read_buf(&buf, 0, len + 2 * GUARD);
                check_guards(&what, &raw);
                let mut msg = Vec::with_capacity(len);
                for &(o, l) in &sges {
                    msg.extend_from_slice(&raw[GUARD + o..GUARD + o + l]);
                }
                let mut want = pattern(seed, n);
                want.resize(len, SENTINEL);
                check_bytes(&what, &msg, &want);
                self.free(buf);
                self.verify_writes(1 - side, pair, sender_seq);
            }
        }
    }
}

fn check_guards(what: &str, raw: &[u8]) {
    let tail = &raw[raw.len() - GUARD..];
    assert!(
        raw[..GUARD].iter().chain(tail).all(|&b| b == SENTINEL),
        "{what}: octets outside the destination range were written"
    );
}

fn make_side(cfg: DeviceConfig, cq_depth: usize) -> (Side, Vec<Ep>) {
    let dev = Device::open(cfg).unwrap();
    let pd = dev.alloc_pd();
    let cqs: Vec<Cq> = (0..CQS).map(|_| dev.create_cq(cq_depth).unwrap()).collect();
    let mut eps = Vec::with_capacity(PAIRS);
    let qps = (0..PAIRS)
        .map(|i| {
            // Small queues on some QPs (the hot ones included) to hit full queues often.
            let sq_depth = [1, 4, 16, 64][(i / 2) % 4];
            let rq_depth = [2, 8, 32, 64][(i / 3) % 4];
            eps.push(Ep {
                sq_depth,
                rq_depth,
                ..Ep::default()
            });
            dev.create_qp(
                &pd,
                QpInit::with_cqs(&cqs[send_cq(i)], &cqs[recv_cq(i)], sq_depth, rq_depth),
            )
            .unwrap()
        })
        .collect();
    let arena_mr = pd.alloc_mr(ARENA, all_access()).unwrap();
    let side = Side {
        dev,
        pd,
        cqs,
        qps,
        arena_mr,
        arena: Arena {
            len: ARENA,
            next: 0,
            used: BTreeMap::new(),
        },
    };
    (side, eps)
}

/// Connects QP `i` of `a` to QP `i` of `b` for every `i`: one listener on `b` accepting
/// in a thread, several threads connecting. Even pairs ask for CRC.
fn connect_all(a: &Side, b: &Side) {
    let listener = b.dev.listen("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let failed = AtomicBool::new(false);
    std::thread::scope(|s| {
        let failed = &failed;
        let acceptor = s.spawn(move || -> std::result::Result<(), String> {
            for _ in 0..PAIRS {
                let req = listener.accept().map_err(|e| format!("accept: {e}"))?;
                let idx = <[u8; 4]>::try_from(req.private_data())
                    .map(u32::from_le_bytes)
                    .map_err(|_| format!("bad private data {:?}", req.private_data()))?
                    as usize;
                let qp = b
                    .qps
                    .get(idx)
                    .ok_or_else(|| format!("no QP {idx} to accept with"))?;
                req.accept(qp, &(idx as u32).to_le_bytes())
                    .map_err(|e| format!("accept pair {idx}: {e}"))?;
            }
            Ok(())
        });
        let connectors: Vec<_> = (0..CONNECTORS)
            .map(|t| {
                s.spawn(move || -> std::result::Result<(), String> {
                    for i in (t..PAIRS).step_by(CONNECTORS) {
                        if failed.load(Ordering::Relaxed) {
                            return Err("another connector failed".into());
                        }
                        let mut cfg = MpaConfig::default();
                        if i % 2 == 0 {
                            cfg.crc = CrcPolicy::Required;
                        }
                        cfg.private_data = (i as u32).to_le_bytes().to_vec();
                        let r = a.dev.connect_with(addr, &a.qps[i], cfg);
                        let c = r.map_err(|e| {
                            failed.store(true, Ordering::Relaxed);
                            format!("connect pair {i}: {e}")
                        })?;
                        if c.peer_private_data() != (i as u32).to_le_bytes()
                            || c.negotiated.crc != (i % 2 == 0)
                        {
                            failed.store(true, Ordering::Relaxed);
                            return Err(format!("pair {i}: unexpected negotiation {c:?}"));
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        let errors: Vec<String> = connectors
            .into_iter()
            .filter_map(|h| match h.join() {
                Ok(r) => r.err(),
                Err(_) => Some("connector panicked".into()),
            })
            .collect();
        if !errors.is_empty() {
            // The acceptor may be blocked in accept: a non-MPA connection makes it fail.
            if let Ok(mut junk) = std::net::TcpStream::connect(addr) {
                let _ = junk.write_all(&[0u8; 64]);
            }
        }
        let accepted = acceptor
            .join()
            .unwrap_or_else(|_| Err("acceptor panicked".into()));
        assert!(
            errors.is_empty() && accepted.is_ok(),
            "connection setup failed: connectors {errors:?}, acceptor {accepted:?}"
        );
    });
}

#[test]
fn random_mix_over_256_qps() {
    // At most WINDOW work requests are outstanding, so no CQ can overflow.
    stress(2 * WINDOW, ProgressMode::Hybrid);
}

/// The same mix with CQs of depth 1, engine threads alone producing completions: completions beyond a CQ's depth must still all
/// arrive, each once, in posting order per QP (`CqOverflow` events are expected).
#[test]
fn random_mix_with_overflowing_cqs() {
    stress(1, ProgressMode::Engine);
}

/// Minimal reproducer of the overflow bug: one QP on a CQ of depth 1, zero-length RDMA
/// Reads (completed by the engine thread) while this thread polls.
#[test]
fn cq_overflow_keeps_posting_order() {
    let e = end()
        .progress(ProgressMode::Engine)
        .cq(1)
        .queues(64, 1)
        .build();
    let other = e.dev.create_cq(64).unwrap();
    let peer = e.dev.create_qp(&e.pd, QpInit::new(&other, 64, 1)).unwrap();
    connect_qps((&e.dev, &e.qp), (&e.dev, &peer));
    let (qp, cq) = (&e.qp, &e.cq);
    let mr =
        e.pd.alloc_mr(64, Access::LOCAL_WRITE | Access::REMOTE_READ)
            .unwrap();
    const N: u64 = 200_000;
    let (mut posted, mut next) = (0, 0);
    let mut last = Instant::now();
    while next < N {
        while posted - next < 32 && posted < N {
            qp.post_send(SendWr::read(posted, mr.sge(0, 0), mr.addr(), mr.rkey()))
                .unwrap();
            posted += 1;
        }
        while let Some(c) = cq.poll_one() {
            assert_eq!(c.status, WcStatus::Success);
            assert_eq!(c.wr_id, next, "completion out of posting order");
            next += 1;
            last = Instant::now();
        }
        assert!(
            last.elapsed() < T,
            "completion {next} did not arrive within {T:?}"
        );
    }
}

fn stress(cq_depth: usize, progress: ProgressMode) {
    let seed = std::env::var("SOFTRNIC_STRESS_SEED")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(0x5eed_2024_0bad_cafe);
    let ops = std::env::var("SOFTRNIC_STRESS_OPS")
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .unwrap_or(OPS);
    let mut rng = Rng::new(seed);
    let cfg = DeviceConfig {
        engine_threads: 2,
        progress,
        ..DeviceConfig::default()
    };
    // Device B cuts what it sends into small FPDUs; A uses the MSS (large on loopback).
    let cfg_b = DeviceConfig {
        max_fpdu: Some(1460),
        ..cfg.clone()
    };
    let started = Instant::now();
    let (a, eps_a) = make_side(cfg, cq_depth);
    let (b, eps_b) = make_side(cfg_b, cq_depth);
    connect_all(&a, &b);
    let connect_time = started.elapsed();
    let max_sge = a.dev.query().max_sge;
    assert!(max_sge >= 2);
    let mut w = World {
        sides: [a, b],
        eps: eps_a.into_iter().zip(eps_b).map(|(x, y)| [x, y]).collect(),
        pending: HashMap::new(),
        next_wr: 0,
        max_sge,
        n: Counts::default(),
    };
    for (s, side) in w.sides.iter().enumerate() {
        for (i, qp) in side.qps.iter().enumerate() {
            assert_eq!(qp.state(), QpState::Rts, "pair {i} side {s}");
            assert_eq!(qp.params().crc, i % 2 == 0, "pair {i} side {s} CRC");
        }
    }

    let run = Instant::now();
    let mut posted = 0;
    while posted < ops {
        // Skewed: a few hot QPs (with small queues) get much of the traffic.
        let pair = if rng.chance(40) {
            rng.below(8)
        } else {
            rng.below(PAIRS)
        };
        let side = rng.below(2);
        // Sometimes a burst on one QP without reaping in between, so its queues fill.
        let burst = if rng.chance(25) { rng.range(2, 12) } else { 1 };
        for _ in 0..burst.min(ops - posted) {
            let op = match rng.below(100) {
                0..35 => Op::Send {
                    solicited: false,
                    invalidate: false,
                },
                35..45 => Op::Send {
                    solicited: true,
                    invalidate: false,
                },
                45..55 => Op::Send {
                    solicited: rng.chance(50),
                    invalidate: true,
                },
                55..80 => Op::Write,
                _ => Op::Read,
            };
            let n = pick_size(&mut rng);
            w.post(&mut rng, side, pair, op, n);
            w.n.ops += 1;
            posted += 1;
        }
        // Reap what is there without waiting, as an application would.
        w.pump();
    }
    w.wait("every operation to complete", |w| w.pending.is_empty());

    // Writes not yet followed by a Send or Read on their QP: a zero-length Read each.
    for pair in 0..PAIRS {
        for side in 0..2 {
            if !w.eps[pair][side].writes.is_empty() {
                w.post(&mut rng, side, pair, Op::Read, 0);
                w.n.barrier_reads += 1;
            }
        }
    }
    w.wait("the barrier Reads", |w| w.pending.is_empty());
    let run_time = run.elapsed();

    // Everything completed exactly once and nothing more is coming.
    for (i, pair) in w.eps.iter().enumerate() {
        for (s, e) in pair.iter().enumerate() {
            assert!(
                e.sq_out == 0
                    && e.rq_out == 0
                    && e.send_order.is_empty()
                    && e.recv_order.is_empty()
                    && e.writes.is_empty(),
                "pair {i} side {s} has work left"
            );
        }
    }
    for s in &w.sides {
        assert!(s.arena.used.is_empty(), "arena ranges leaked");
    }
    assert_eq!(
        w.n.writes_verified, w.n.writes,
        "every RDMA Write target checked"
    );
    assert_eq!(w.pump(), 0, "extra completions after everything completed");
    for (s, side) in w.sides.iter().enumerate() {
        for (i, qp) in side.qps.iter().enumerate() {
            assert_eq!(qp.state(), QpState::Rts, "pair {i} side {s} after the run");
        }
        let mut established = 0;
        while let Some(e) = side.dev.poll_event() {
            match e {
                AsyncEvent::Established { .. } => established += 1,
                AsyncEvent::CqOverflow { .. } if cq_depth < 2 * WINDOW => {}
                other => panic!("unexpected async event on side {s}: {other:?}"),
            }
        }
        assert_eq!(established, PAIRS, "Established events on side {s}");
    }

    let c = &w.n;
    println!(
        "stress: {} ops (+{} barrier reads) over {PAIRS} QP pairs: {} sends ({} with invalidate), \
         {} writes, {} reads, {} multi-SGE lists, {} one-off MRs, {} queue-full waits; \
         {:.1} MiB payload in {:.2} s ({:.1} MiB/s), connect {:.2} s, seed {seed:#x}",
        c.ops,
        c.barrier_reads,
        c.sends,
        c.invalidates,
        c.writes,
        c.reads,
        c.multi_sge,
        c.own_mrs,
        c.queue_full_waits,
        c.bytes as f64 / MIB as f64,
        run_time.as_secs_f64(),
        c.bytes as f64 / MIB as f64 / run_time.as_secs_f64(),
        connect_time.as_secs_f64(),
    );
}
