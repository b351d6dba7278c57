//! The `qp_input` property: a connected QP fed a hostile FPDU stream through
//! `Qp::handle_input` (the surface a peer reaches) keeps every promise of the verbs.
//!
//! The first [`SETUP_LEN`] octets choose the QP's parameters and how the stream is cut
//! into pieces ([`Setup`]); the TPT holds the regions of [`REGIONS`], whose bounds,
//! rights and protection domains the check keeps a model of; some receives, and maybe a
//! Read, a Send and a Write, are posted; then the rest is fed in pieces. What must hold:
//! - no panic;
//! - every placement lies inside a range the model allows: a valid region with remote
//!   write rights in the QP's PD, a posted receive's SGE, or the posted Read's sink;
//! - every octet gathered for transmission lies inside the region our Sends, Writes and
//!   Read Responses may read (the one with remote read rights in the QP's PD);
//! - once receive processing stopped, nothing more is consumed or placed;
//! - every FPDU transmitted deframes and parses with `softrnic_wire`, and a Terminate
//!   the QP queued carries the cause the QP reports;
//! - each posted `wr_id` completes at most once, and after `to_error()` exactly once.

use softrnic_proto::qp::{Chunk, CqSide, Qp, QpConfig, QpParams, RxCtx, RxNeed, TxFpdu};
use softrnic_proto::tpt::{Tpt, TptEntry};
use softrnic_proto::{Access, Completion, PdId, QpId, RecvWr, RegionId, STag, SendWr, Sge};
use softrnic_wire::crc::crc32c;
use softrnic_wire::mpa::{MAX_FPDU_LEN, parse_fpdu};
use softrnic_wire::{Body, TerminateCause, Ulpdu};
use std::collections::BTreeMap;

/// Octets at the start of the input that make the [`Setup`].
pub const SETUP_LEN: usize = 4;

/// The protection domain of the QP under test.
pub const QP_PD: PdId = PdId(1);

/// Consumer key of every STag the check registers.
pub const KEY: u8 = 0x5a;

/// One region the TPT holds before any input arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegionSpec {
    /// Tagged offset of its first octet.
    pub base: u64,
    /// Octets.
    pub len: u64,
    /// Rights.
    pub access: Access,
    /// Protection domain.
    pub pd: PdId,
    /// Invalidated before the input starts.
    pub revoked: bool,
}

const fn region(base: u64, len: u64, access: Access, pd: u32, revoked: bool) -> RegionSpec {
    RegionSpec {
        base,
        len,
        access,
        pd: PdId(pd),
        revoked,
    }
}

/// Where remote Writes may land, and the one region a peer may invalidate (Send with
/// Invalidate: registered with REMOTE_INVALIDATE).
pub const WRITE_TARGET: usize = 0;
/// Receive buffers and the Read sink: local write only.
pub const LOCAL: usize = 1;
/// Every right, but another protection domain: never placed into or read.
pub const FOREIGN: usize = 2;
/// Remote read only: the source of Read Responses, Sends and Writes.
pub const SOURCE: usize = 3;
/// 16 octets with remote and local write: boundaries are close.
pub const TINY: usize = 4;
/// Remote write, but invalidated before the input starts.
pub const REVOKED: usize = 5;

/// The regions, in TPT insertion order (region `i` has [`stag`]`(i)`).
pub const REGIONS: [RegionSpec; 6] = [
    region(
        0x1000,
        4096,
        Access::REMOTE_WRITE.union(Access::REMOTE_INVALIDATE),
        1,
        false,
    ),
    region(0x10_0000, 8192, Access::LOCAL_WRITE, 1, false),
    region(0x20_0000, 4096, Access::all(), 2, false),
    region(0x30_0000, 4096, Access::REMOTE_READ, 1, false),
    region(
        0x40_0000,
        16,
        Access::REMOTE_WRITE.union(Access::LOCAL_WRITE),
        1,
        false,
    ),
    region(0x50_0000, 4096, Access::REMOTE_WRITE, 1, true),
];

/// The STag of region `i` of [`REGIONS`].
pub const fn stag(i: usize) -> STag {
    ((i as u32 + 1) << 8) | KEY as u32
}

/// A TPT holding every region of [`REGIONS`], valid, region `i` under [`stag`]`(i)`.
pub fn regions_tpt() -> Tpt {
    let tpt = Tpt::new();
    for (i, r) in REGIONS.iter().enumerate() {
        let entry = TptEntry {
            pd: r.pd,
            key: KEY,
            base: r.base,
            len: r.len,
            access: r.access,
            region: RegionId(i as u32),
            valid: true,
        };
        assert_eq!(tpt.insert(entry), Some(stag(i)));
    }
    tpt
}

/// The receives posted (at most [`RECEIVES`]): `wr_id` [`RECV_WR_ID`] + k, two SGEs in
/// [`LOCAL`] at (offset, len) pairs of [`recv_sges`], 1024 octets in all.
pub const RECEIVES: usize = 3;
/// `wr_id` of the first receive.
pub const RECV_WR_ID: u64 = 100;

/// (offset in [`LOCAL`], len) of receive `k`'s two SGEs.
pub fn recv_sges(k: usize) -> [(u64, u32); 2] {
    let at = k as u64 * 2048;
    [(at, 64), (at + 1024, 960)]
}

/// `wr_id` of the posted Read.
pub const READ_WR_ID: u64 = 1;
/// Sink of the posted Read: offset in [`LOCAL`] and length.
pub const READ_SINK: (u64, u32) = (6144, 2048);
/// Remote address and key of the posted Read: the peer's [`SOURCE`], when the peer has
/// the same layout (as the seeds' peers do).
pub const READ_REMOTE: (u64, STag) = (REGIONS[SOURCE].base, stag(SOURCE));
/// The posted Send (100 octets of [`SOURCE`]) and Write (50 octets to the peer).
pub const SEND_WR_ID: u64 = 2;
/// See [`SEND_WR_ID`].
pub const WRITE_WR_ID: u64 = 3;

/// The initial contents of region `i` on one side (0: the QP under test, 1: the seeds'
/// peers), so that misplaced or wrongly gathered octets show.
pub fn pattern(side: u8, i: usize) -> Vec<u8> {
    let salt = u64::from(side) * 0x55 + i as u64 * 31;
    (0..REGIONS[i].len)
        .map(|o| (o.wrapping_mul(7) ^ (o >> 8) ^ salt) as u8)
        .collect()
}

/// Largest FPDU choices, indexed by two bits of the setup.
const MAX_FPDU: [usize; 4] = [1448, 64, 512, 9000];

/// What the first [`SETUP_LEN`] octets choose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setup {
    /// CRC32c on.
    pub crc: bool,
    /// RFC 6581: the QP waits for the peer's RTR before it transmits.
    pub await_rtr: bool,
    /// Post an RDMA Read whose sink is [`READ_SINK`], so Read Responses have a home.
    pub post_read: bool,
    /// Post a Send and a Write as well, so the send queue is busy while input arrives.
    pub post_send_write: bool,
    /// Inbound Reads accepted (0..=15).
    pub ird: u16,
    /// Outbound Reads outstanding (0..=15).
    pub ord: u16,
    /// Receives posted (0..=[`RECEIVES`]).
    pub receives: usize,
    /// Index into the largest-FPDU choices (1448, 64, 512, 9000).
    pub max_fpdu_choice: u8,
    /// RFC 5044 markers both ways: the input is a marked stream, and what the QP
    /// sends is marked.
    pub markers: bool,
    /// 0 feeds the stream in one piece; n > 0 cuts it into pieces of 1 to 2^min(n, 12)
    /// octets, the sizes drawn from `chunk_seed`.
    pub chunking: u8,
    /// Seed of the piece sizes.
    pub chunk_seed: u8,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            crc: false,
            await_rtr: false,
            post_read: false,
            post_send_write: false,
            ird: 4,
            ord: 4,
            receives: RECEIVES,
            max_fpdu_choice: 0,
            markers: false,
            chunking: 0,
            chunk_seed: 0,
        }
    }
}

impl Setup {
    /// Reads the setup octets (every value of them is a setup).
    pub fn from_bytes(b: [u8; SETUP_LEN]) -> Self {
        Setup {
            crc: b[0] & 1 != 0,
            await_rtr: b[0] & 2 != 0,
            post_read: b[0] & 4 != 0,
            post_send_write: b[0] & 8 != 0,
            chunking: b[0] >> 4,
            ird: u16::from(b[1] & 0x0f),
            ord: u16::from(b[1] >> 4),
            receives: usize::from(b[2] & 3).min(RECEIVES),
            max_fpdu_choice: (b[2] >> 2) & 3,
            markers: b[2] & 0x10 != 0,
            chunk_seed: b[3],
        }
    }

    /// The octets that read back as this setup (fields in their ranges).
    pub fn to_bytes(&self) -> [u8; SETUP_LEN] {
        [
            u8::from(self.crc)
                | u8::from(self.await_rtr) << 1
                | u8::from(self.post_read) << 2
                | u8::from(self.post_send_write) << 3
                | (self.chunking & 0x0f) << 4,
            (self.ird.min(15) as u8) | (self.ord.min(15) as u8) << 4,
            (self.receives.min(RECEIVES) as u8)
                | (self.max_fpdu_choice & 3) << 2
                | u8::from(self.markers) << 4,
            self.chunk_seed,
        ]
    }

    /// The QP parameters this setup asks for.
    pub fn params(&self) -> QpParams {
        QpParams {
            crc: self.crc,
            ird: self.ird,
            ord: self.ord,
            max_fpdu: MAX_FPDU[usize::from(self.max_fpdu_choice & 3)],
            send_rtr: None,
            await_rtr: self.await_rtr,
            markers_tx: self.markers,
            markers_rx: self.markers,
            ..QpParams::default()
        }
    }

    /// The piece sizes of a stream of `len` octets.
    fn pieces(&self, len: usize) -> Vec<usize> {
        if self.chunking == 0 {
            return vec![len];
        }
        let cap = 1usize << self.chunking.min(12);
        let mut x = u32::from(self.chunk_seed) | 0x100;
        let (mut v, mut left) = (Vec::new(), len);
        while left > 0 {
            // xorshift32: any seed gives a long, deterministic sequence.
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let n = (1 + x as usize % cap).min(left);
            v.push(n);
            left -= n;
        }
        v
    }
}

/// What a run did, for tests that want a seed to show it reaches what it is named for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Stream octets consumed.
    pub consumed: usize,
    /// Payload octets placed.
    pub placed: u64,
    /// Every completion, in order (those the final `to_error()` flushed included).
    pub completions: Vec<(CqSide, Completion)>,
    /// The QP's failure before `to_error()`: cause, and whether the peer sent it.
    pub fatal: Option<(TerminateCause, bool)>,
    /// FPDUs transmitted.
    pub fpdus_sent: usize,
    /// Terminates transmitted.
    pub terminates_sent: usize,
    /// Everything transmitted, FPDU after FPDU.
    pub sent: Vec<u8>,
    /// The regions' contents at the end.
    pub memory: Vec<Vec<u8>>,
}

/// The `qp_input` fuzz target's check.
pub fn qp_input(data: &[u8]) {
    let _ = qp_input_outcome(data);
}

/// [`qp_input`]'s check, returning what the run did (`None` when the input is shorter
/// than the setup).
pub fn qp_input_outcome(data: &[u8]) -> Option<Outcome> {
    let (head, stream) = data.split_first_chunk::<SETUP_LEN>()?;
    let setup = Setup::from_bytes(*head);
    let mut run = Run::new(&setup);
    run.post(&setup);
    run.transmit();
    let mut at = 0;
    for n in setup.pieces(stream.len()) {
        run.feed(&stream[at..at + n]);
        at += n;
        run.transmit();
    }
    run.outcome.fatal = run.qp.fatal_cause();
    if let Some((cause, false)) = run.outcome.fatal {
        assert_eq!(
            run.terminate_causes,
            [cause],
            "the queued Terminate went out"
        );
        assert!(run.qp.terminate_sent(), "Terminate sent, but not reported");
    } else {
        assert!(
            run.terminate_causes.is_empty(),
            "Terminate without a local fault"
        );
    }
    run.qp.to_error();
    run.completions();
    let posted: BTreeMap<u64, usize> = run.posted.keys().map(|&w| (w, 1)).collect();
    assert_eq!(
        run.completed, posted,
        "after to_error every WR completes once"
    );
    run.outcome.memory = run.mem;
    Some(run.outcome)
}

/// A range placements may land in: (region, first offset, end offset).
type Range = (RegionId, u64, u64);

struct Run {
    qp: Qp,
    tpt: Tpt,
    mem: Vec<Vec<u8>>,
    crc: bool,
    /// Whole regions remote Writes may reach, while their STag stays valid.
    writable: Vec<(usize, Range)>,
    /// Posted receives' SGEs and the Read sink.
    posted_ranges: Vec<Range>,
    /// Every posted `wr_id` and the CQ its completion goes to.
    posted: BTreeMap<u64, CqSide>,
    completed: BTreeMap<u64, usize>,
    stopped: bool,
    terminate_causes: Vec<TerminateCause>,
    outcome: Outcome,
}

impl Run {
    fn new(setup: &Setup) -> Run {
        let tpt = regions_tpt();
        for (i, r) in REGIONS.iter().enumerate().filter(|(_, r)| r.revoked) {
            assert_eq!(tpt.invalidate(stag(i), r.pd), Ok(()));
        }
        let writable = REGIONS
            .iter()
            .enumerate()
            .filter(|(_, r)| r.access.contains(Access::REMOTE_WRITE) && r.pd == QP_PD)
            .filter(|(_, r)| !r.revoked)
            .map(|(i, r)| (i, (RegionId(i as u32), 0, r.len)))
            .collect();
        let qp = Qp::new(QpConfig {
            id: QpId(1),
            pd: QP_PD,
            sq_depth: 8,
            rq_depth: RECEIVES,
        });
        Run {
            qp,
            tpt,
            mem: (0..REGIONS.len()).map(|i| pattern(0, i)).collect(),
            crc: setup.crc,
            writable,
            posted_ranges: Vec::new(),
            posted: BTreeMap::new(),
            completed: BTreeMap::new(),
            stopped: false,
            terminate_causes: Vec::new(),
            outcome: Outcome::default(),
        }
    }

    fn local_sge(&mut self, (offset, len): (u64, u32)) -> Sge {
        self.posted_ranges
            .push((RegionId(LOCAL as u32), offset, offset + u64::from(len)));
        Sge {
            addr: REGIONS[LOCAL].base + offset,
            len,
            lkey: stag(LOCAL),
        }
    }

    /// Posts the receives (before connecting, as verbs allow), connects, then posts the
    /// send-queue requests the setup asks for.
    fn post(&mut self, setup: &Setup) {
        for k in 0..setup.receives {
            let [a, b] = recv_sges(k).map(|s| self.local_sge(s));
            let wr = RecvWr::new(RECV_WR_ID + k as u64, [a, b]);
            assert_eq!(self.qp.post_recv(wr, &self.tpt), Ok(()));
            self.posted.insert(RECV_WR_ID + k as u64, CqSide::Recv);
        }
        assert_eq!(self.qp.connect(setup.params()), Ok(()));
        let source = |offset: u64, len: u32| Sge {
            addr: REGIONS[SOURCE].base + offset,
            len,
            lkey: stag(SOURCE),
        };
        let mut wrs = Vec::new();
        if setup.post_read {
            let sink = self.local_sge(READ_SINK);
            let (addr, rkey) = READ_REMOTE;
            wrs.push(SendWr::read(READ_WR_ID, sink, addr, rkey));
        }
        if setup.post_send_write {
            wrs.push(SendWr::send(SEND_WR_ID, source(0, 100)));
            wrs.push(SendWr::write(WRITE_WR_ID, source(100, 50), 0x9000, 0x1234));
        }
        for wr in wrs {
            let id = wr.wr_id;
            assert_eq!(self.qp.post_send(wr, &self.tpt), Ok(()));
            self.posted.insert(id, CqSide::Send);
        }
    }

    /// Feeds one piece and checks what it did.
    fn feed(&mut self, piece: &[u8]) {
        let was_stopped = self.qp.rx_need() == RxNeed::Stopped;
        assert!(!self.stopped || was_stopped, "receive processing restarted");
        let (mem, writable, posted) = (&mut self.mem, &self.writable, &self.posted_ranges);
        let mut placed = 0u64;
        let consumed = self
            .qp
            .handle_input(piece, &mut RxCtx::new(&self.tpt), &mut |c, bytes| {
                check_placement(c, bytes, writable, posted);
                let at = c.offset as usize;
                mem[c.region.0 as usize][at..at + bytes.len()].copy_from_slice(bytes);
                placed += bytes.len() as u64;
            });
        assert!(consumed <= piece.len());
        if was_stopped {
            assert_eq!(
                (consumed, placed),
                (0, 0),
                "input taken after receive stopped"
            );
        }
        if consumed < piece.len() {
            assert_eq!(self.qp.rx_need(), RxNeed::Stopped, "input left unconsumed");
        }
        self.stopped = self.qp.rx_need() == RxNeed::Stopped;
        self.outcome.consumed += consumed;
        self.outcome.placed += placed;
        // A Send with Invalidate may have revoked a region: no Write reaches it now.
        let tpt = &self.tpt;
        self.writable
            .retain(|&(i, _)| tpt.get(stag(i)).is_some_and(|e| e.valid));
        self.completions();
    }

    /// Hands out every FPDU the QP has to send, checks it, and runs local operations.
    fn transmit(&mut self) {
        let mut f = TxFpdu::default();
        loop {
            if !self.qp.poll_transmit(&mut f) {
                if self.qp.run_local_ops(&self.tpt) {
                    continue;
                }
                break;
            }
            let wire = self.serialize(&f);
            self.check_sent(&wire, f.marker_pos);
            self.outcome.sent.extend_from_slice(&wire);
            self.qp.transmit_done();
            self.outcome.fpdus_sent += 1;
        }
        self.completions();
    }

    /// The FPDU's octets: header, payload gathered from [`SOURCE`] only, pad and CRC.
    fn serialize(&self, f: &TxFpdu) -> Vec<u8> {
        let mut v = f.header_bytes().to_vec();
        for c in &f.chunks {
            let r = c.region.0 as usize;
            assert_eq!(r, SOURCE, "gathered from a region no send may read: {c:?}");
            let end = c.offset.checked_add(c.len as u64);
            assert!(end.is_some_and(|e| e <= REGIONS[r].len), "gather {c:?}");
            v.extend_from_slice(&self.mem[r][c.offset as usize..c.offset as usize + c.len]);
        }
        assert_eq!(
            v.len(),
            2 + f.ulpdu_len,
            "header and payload make the ULPDU"
        );
        if f.marker_pos.is_some() {
            let mut marked = Vec::new();
            f.emit_marked(&v[f.header_len..], &mut marked);
            assert_eq!(marked.len(), f.wire_len());
            return marked;
        }
        v.resize(v.len() + f.pad_len(), 0);
        let (trailer, n) = f.trailer(crc32c(&v));
        v.extend_from_slice(&trailer[f.pad_len()..n]);
        assert_eq!(v.len(), f.wire_len());
        v
    }

    /// A transmitted FPDU deframes (CRC included) and parses; a Terminate's cause is the
    /// one the QP reports.
    fn check_sent(&mut self, wire: &[u8], marker_pos: Option<u64>) {
        let mut scratch = vec![
            0u8;
            if marker_pos.is_some() {
                MAX_FPDU_LEN
            } else {
                0
            }
        ];
        let fpdu = parse_fpdu(wire, marker_pos, self.crc, &mut scratch)
            .and_then(|f| f.check_crc().map(|()| f))
            .expect("a sent FPDU deframes, markers and CRC checked");
        assert_eq!(fpdu.consumed, wire.len());
        let u = Ulpdu::parse(fpdu.ulpdu).expect("a sent ULPDU parses");
        if let Body::Terminate(t) = u.body {
            assert_eq!(self.qp.fatal_cause(), Some((t.cause, false)));
            self.terminate_causes.push(t.cause);
            self.outcome.terminates_sent += 1;
        }
    }

    /// Drains completions: each for a posted `wr_id`, on its CQ, at most once.
    fn completions(&mut self) {
        while let Some((side, c)) = self.qp.poll_completion() {
            let want = self.posted.get(&c.wr_id);
            assert_eq!(want, Some(&side), "completion for an unposted WR: {c:?}");
            let n = self.completed.entry(c.wr_id).or_default();
            *n += 1;
            assert_eq!(*n, 1, "wr_id {} completed twice", c.wr_id);
            self.outcome.completions.push((side, c));
        }
    }
}

/// A placement lies inside one allowed range, and its octets are as long as it says.
fn check_placement(c: Chunk, bytes: &[u8], writable: &[(usize, Range)], posted: &[Range]) {
    assert_eq!(c.len, bytes.len(), "placement length");
    let end = c.offset.checked_add(c.len as u64);
    let inside = |&(region, start, stop): &Range| {
        region == c.region && c.offset >= start && end.is_some_and(|e| e <= stop)
    };
    assert!(
        writable.iter().map(|(_, r)| r).any(inside) || posted.iter().any(inside),
        "placement outside every granted range: {c:?}"
    );
}
