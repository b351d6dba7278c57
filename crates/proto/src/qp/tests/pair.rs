//! The test harness every QP test runs on: two QPs ([`Side`]s, each with its TPT and
//! memory) joined by a [`Link`] in memory. The link serializes every FPDU one side
//! transmits (with CRC when negotiated) and feeds it to the other side, carries FINs and
//! resets as the QPs' close machines ask, and keeps virtual time for their timers.
//! Faults: how the octets are cut into reads ([`Chunking`]), the connection lost after
//! some octets (mid-FPDU), and a peer that never answers a FIN. No sockets, no threads:
//! every run replays exactly.

use super::super::*;
use crate::tpt::TptEntry;
use softrnic_wire::crc::crc32c_append;
use std::time::Duration;

pub(super) struct Side {
    pub qp: Qp,
    pub tpt: Tpt,
    pub mem: Vec<Vec<u8>>,
    /// The close actions this side's QP asked for, in order.
    pub closes: Vec<CloseAction>,
    /// This side's connection is gone (lost, reset, or disconnected).
    pub gone: bool,
}

pub(super) const PD: PdId = PdId(1);

impl Side {
    pub fn new(id: u32, params: QpParams) -> Side {
        let mut qp = Qp::new(QpConfig {
            id: QpId(id),
            pd: PD,
            sq_depth: 64,
            rq_depth: 64,
        });
        qp.connect(params).unwrap();
        Side {
            qp,
            tpt: Tpt::new(),
            mem: Vec::new(),
            closes: Vec::new(),
            gone: false,
        }
    }

    /// Registers `len` octets filled with [`fill`]'s pattern, which differs for every
    /// side, region and seed and never repeats within a region, so a lost or misplaced
    /// payload (by any offset) shows; returns (stag, base address).
    pub fn reg(&mut self, len: usize, access: Access, seed: u8) -> (STag, u64) {
        let id = self.mem.len() as u32;
        let tag = (u64::from(self.qp.id().0) << 24) | (u64::from(id) << 8) | u64::from(seed);
        self.mem.push(fill(tag, len));
        let base = 0x1_0000_0000 * u64::from(id + 1);
        let stag = self
            .tpt
            .insert(TptEntry {
                pd: PD,
                key: 0x42,
                base,
                len: len as u64,
                access,
                region: RegionId(id),
                valid: true,
            })
            .unwrap();
        (stag, base)
    }

    pub fn region(&self, stag: STag) -> &[u8] {
        &self.mem[self.tpt.get(stag).unwrap().region.0 as usize]
    }

    pub fn completions(&mut self) -> Vec<(CqSide, Completion)> {
        std::iter::from_fn(|| self.qp.poll_completion()).collect()
    }

    /// Serializes the next FPDU, or None.
    pub fn next_fpdu(&mut self) -> Option<Vec<u8>> {
        let mut f = TxFpdu::default();
        // The I/O layer skips its transmit pass when this is false.
        let may = self.qp.may_transmit();
        if !self.qp.poll_transmit(&mut f) {
            self.qp.run_local_ops(&self.tpt);
            if !self.qp.poll_transmit(&mut f) {
                return None;
            }
        }
        assert!(may, "an FPDU from a QP that said it had nothing to send");
        if f.marker_pos.is_some() {
            // Markers: the wire crate's framer, as the I/O layer uses it.
            let mut payload = Vec::new();
            for c in &f.chunks {
                let m = &self.mem[c.region.0 as usize];
                payload.extend_from_slice(&m[c.offset as usize..c.offset as usize + c.len]);
            }
            let mut v = Vec::new();
            f.emit_marked(&payload, &mut v);
            assert!(
                f.chunks.is_empty() || v.len() <= self.qp.params().max_fpdu,
                "a marked FPDU of {} octets beyond the FPDU size",
                v.len()
            );
            self.qp.transmit_done();
            return Some(v);
        }
        let mut v = f.header_bytes().to_vec();
        for c in &f.chunks {
            let m = &self.mem[c.region.0 as usize];
            v.extend_from_slice(&m[c.offset as usize..c.offset as usize + c.len]);
        }
        v.extend(std::iter::repeat_n(0u8, f.pad_len()));
        let crc = crc32c_append(0, &v);
        let (t, n) = f.trailer(crc);
        v.extend_from_slice(&t[f.pad_len()..n]);
        self.qp.transmit_done();
        Some(v)
    }

    /// Feeds `bytes` whole, or (`split`) in pieces of 1, 2, 3, 5, 7, 11, 1, ... octets,
    /// so that every boundary falls inside every field.
    pub fn feed(&mut self, bytes: &[u8], split: bool) {
        let chunking = if split {
            Chunking::Primes
        } else {
            Chunking::Whole
        };
        self.feed_cut(bytes, &mut chunking.cutter());
    }

    /// Feeds `bytes` whole as the I/O layer does for a QP with its own receive
    /// queue: the simple Writes and Sends at the front by [`Qp::rx_take_simple`] first,
    /// whatever it leaves as [`Pair::feed`] takes it.
    pub fn feed_simple_first(&mut self, bytes: &[u8]) {
        let mem = &mut self.mem;
        let run = self.qp.rx_take_simple(bytes, &self.tpt, &mut |c, data| {
            let r = &mut mem[c.region.0 as usize];
            r[c.offset as usize..c.offset as usize + data.len()].copy_from_slice(data);
            true
        });
        assert!(run.complete, "the simple paths take whole FPDUs only");
        self.take(&bytes[run.taken..]);
    }

    /// [`Side::feed_simple_first`], with every receive completion the simple paths
    /// offer taken by a hand-off ([`Qp::rx_take_simple_to`], as the I/O layer's poll
    /// takes one into its caller's `out`): returns those, in the order offered.
    pub fn feed_handed(&mut self, bytes: &[u8]) -> Vec<Completion> {
        struct TakeAll(Vec<Completion>);
        impl RecvHandoff for TakeAll {
            fn take(&mut self, c: &Completion) -> bool {
                self.0.push(*c);
                true
            }
        }
        let mut handed = TakeAll(Vec::new());
        let mem = &mut self.mem;
        let run = self.qp.rx_take_simple_to(
            bytes,
            &self.tpt,
            &mut |c, data| {
                let r = &mut mem[c.region.0 as usize];
                r[c.offset as usize..c.offset as usize + data.len()].copy_from_slice(data);
                true
            },
            &mut handed,
        );
        assert!(run.complete, "the simple paths take whole FPDUs only");
        self.take(&bytes[run.taken..]);
        handed.0
    }

    fn feed_cut(&mut self, bytes: &[u8], cut: &mut Cutter) {
        let mut rest = bytes;
        while !rest.is_empty() {
            let (part, tail) = rest.split_at(cut.next(rest.len()));
            rest = tail;
            self.take(part);
        }
    }

    /// Takes one read's octets as the I/O layer does: runs of whole FPDUs of data
    /// messages by the fast path ([`Qp::rx_take_run`]) while it applies, the rest step by step
    /// ([`Qp::handle_input`]). Reads of whole FPDUs thus test the fast path, reads cut
    /// inside FPDUs the steps, and both must end alike.
    fn take(&mut self, mut part: &[u8]) {
        let mem = &mut self.mem;
        let mut place = |c: Chunk, data: &[u8]| {
            let r = &mut mem[c.region.0 as usize];
            r[c.offset as usize..c.offset as usize + data.len()].copy_from_slice(data);
        };
        while !part.is_empty() {
            let ctx = &mut RxCtx::new(&self.tpt);
            match self.qp.rx_take_run(part, usize::MAX, ctx, &mut |c, data| {
                place(c, data);
                true
            }) {
                Some(run) => part = &part[run.taken..],
                _ => {
                    self.qp.handle_input(part, ctx, &mut place);
                    break;
                }
            }
        }
    }
}

/// How the link cuts the octets it delivers into reads.
#[derive(Debug, Clone, Copy)]
pub(super) enum Chunking {
    /// One read per FPDU.
    Whole,
    /// Reads of 1, 2, 3, 5, 7, 11, 1, ... octets: every boundary falls in every field.
    Primes,
    /// Reads of 1 to `max` octets, drawn from the seed.
    Seeded { seed: u64, max: usize },
}

impl Chunking {
    fn cutter(self) -> Cutter {
        Cutter { how: self, at: 0 }
    }
}

struct Cutter {
    how: Chunking,
    at: u64,
}

impl Cutter {
    /// The length of the next read, out of `left` octets.
    fn next(&mut self, left: usize) -> usize {
        const PRIMES: [usize; 6] = [1, 2, 3, 5, 7, 11];
        self.at += 1;
        let n = match self.how {
            Chunking::Whole => left,
            Chunking::Primes => PRIMES[(self.at as usize - 1) % PRIMES.len()],
            Chunking::Seeded { seed, max } => {
                1 + (splitmix(seed ^ self.at.wrapping_mul(0x2545_f491)) as usize) % max.max(1)
            }
        };
        n.min(left)
    }
}

/// SplitMix64's finaliser: a well-mixed 64-bit value from any input.
pub(super) fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The connection between two sides, with its faults and its clock.
pub(super) struct Link {
    pub chunking: Chunking,
    /// The connection is lost once this many octets (both directions together) have
    /// crossed: the octet that would cross it is not delivered, and both sides' streams
    /// fail.
    pub lose_after: Option<u64>,
    /// Side b never reacts to a FIN (a peer that does not close).
    pub b_ignores_fin: bool,
    /// Virtual time, from zero.
    pub now: Duration,
    crossed: u64,
    /// A FIN (or a close) from a / from b has reached the other side.
    fin_from: [bool; 2],
    /// Every octet a and b sent, when `record` is set.
    pub record: bool,
    pub recorded: [Vec<u8>; 2],
}

impl Link {
    pub fn new(chunking: Chunking) -> Link {
        Link {
            chunking,
            lose_after: None,
            b_ignores_fin: false,
            now: Duration::ZERO,
            crossed: 0,
            fin_from: [false; 2],
            record: false,
            recorded: [Vec::new(), Vec::new()],
        }
    }

    /// Octets that have crossed the link.
    pub fn crossed(&self) -> u64 {
        self.crossed
    }

    /// Moves FPDUs both ways and carries out the close machines' actions until nothing
    /// moves.
    pub fn run(&mut self, a: &mut Side, b: &mut Side) {
        let mut cut = self.chunking.cutter();
        loop {
            let mut moved = false;
            for dir in [0, 1] {
                let (from, to) = if dir == 0 {
                    (&mut *a, &mut *b)
                } else {
                    (&mut *b, &mut *a)
                };
                while !from.gone
                    && let Some(f) = from.next_fpdu()
                {
                    moved = true;
                    if self.record {
                        self.recorded[dir].extend_from_slice(&f);
                    }
                    if !self.deliver(&f, to, &mut cut) {
                        from.qp.transport_lost();
                        from.gone = true;
                        to.qp.transport_lost();
                        to.gone = true;
                    }
                }
            }
            moved |= self.close_steps(a, b);
            if !moved {
                break;
            }
        }
    }

    /// Lets `d` pass: timers that expire fire, and the link runs.
    pub fn advance(&mut self, d: Duration, a: &mut Side, b: &mut Side) {
        self.now += d;
        a.qp.handle_timeout(self.now);
        b.qp.handle_timeout(self.now);
        self.run(a, b);
    }

    /// Delivers `f` to `to` unless the connection is lost on the way; false if it is.
    fn deliver(&mut self, f: &[u8], to: &mut Side, cut: &mut Cutter) -> bool {
        if to.gone {
            return false;
        }
        let room = self
            .lose_after
            .map_or(u64::MAX, |n| n - self.crossed.min(n));
        let n = (f.len() as u64).min(room) as usize;
        to.feed_cut(&f[..n], cut);
        self.crossed += n as u64;
        n == f.len()
    }

    fn close_steps(&mut self, a: &mut Side, b: &mut Side) -> bool {
        let mut moved = false;
        for dir in [0, 1] {
            let (from, to) = if dir == 0 {
                (&mut *a, &mut *b)
            } else {
                (&mut *b, &mut *a)
            };
            // Everything handed to the link has been delivered: the side is flushed. A
            // side whose connection is gone still closes (and reports it), but nothing
            // reaches the peer any more.
            // The I/O layer skips `poll_close` (and its clock read) while the QP is not
            // closing: that shortcut must never hide an action or start the timer.
            let closing = from.qp.is_closing();
            while let Some(action) = from.qp.poll_close(true, self.now) {
                assert!(closing, "poll_close acted ({action:?}) on a QP not closing");
                moved = true;
                from.closes.push(action);
                if from.gone {
                    continue;
                }
                match action {
                    CloseAction::Fin | CloseAction::Shutdown | CloseAction::Disconnect => {
                        let deaf = dir == 0 && self.b_ignores_fin;
                        if !std::mem::replace(&mut self.fin_from[dir], true) && !deaf && !to.gone {
                            to.qp.peer_fin();
                        }
                    }
                    CloseAction::Reset => {
                        if !to.gone {
                            to.qp.transport_lost();
                            to.gone = true;
                        }
                    }
                }
                if matches!(action, CloseAction::Disconnect | CloseAction::Reset) {
                    from.gone = true;
                    break;
                }
            }
            assert!(
                closing || from.qp.poll_timeout().is_none(),
                "a QP not closing started the close timer"
            );
        }
        moved
    }
}

/// Moves FPDUs both ways (fed whole, or in 1, 2, 3, 5, 7, 11-octet reads) and closes as
/// the QPs ask, until neither side has anything to do.
pub(super) fn pump(a: &mut Side, b: &mut Side, one_at_a_time: bool) {
    let chunking = if one_at_a_time {
        Chunking::Primes
    } else {
        Chunking::Whole
    };
    Link::new(chunking).run(a, b);
}

/// `len` octets of a pattern that depends on `tag` and does not repeat with any period:
/// each octet is a mix of the tag and the octet's index.
pub(super) fn fill(tag: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| splitmix(tag << 32 ^ i) as u8)
        .collect()
}

pub(super) fn pair(params: QpParams) -> (Side, Side) {
    (Side::new(1, params), Side::new(2, params))
}
