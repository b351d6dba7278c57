//! A run of small messages from the head of the send queue, framed and finished in one
//! core call: each Send or Write whose whole payload fits one FPDU is built into the
//! I/O layer's scratch header, handed to it to gather (copy into its transmit buffer),
//! and completed at once, as [`Qp::transmit_done`] would after the general path's
//! [`Qp::poll_transmit`]. The general path handled such a stream one FPDU at a time,
//! with its priority checks (Terminate, RTR, Read Responses) and the in-flight hand-off
//! per FPDU; here they are checked once per run.

use super::super::fpdu::{
    Chunk, SMALL_HEADER_MAX, SingleFpdu, SmallFpdu, TxFpdu, covering_sges, write_small_header,
};
use super::super::{PostError, Qp};
use super::{InFlight, TxState};
use crate::tpt::{KeptKeyMemo, LocalKeyMemo, Tpt};
use crate::verbs::*;
use arrayvec::ArrayVec;
use softrnic_wire::ddp::{DdpRepr, Placement, TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN};
use softrnic_wire::rdmap::{Opcode, QN_SEND};

/// What the I/O layer did with one FPDU of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gathered {
    /// Copied completely into the transmit buffer: the request is finished.
    Taken,
    /// No room for it now: the run ends and the request stays at the head of the
    /// send queue, untouched (the general path takes it).
    NoRoom,
    /// Its memory is gone (a region vanished under a queued request): the run ends,
    /// nothing of this FPDU was kept, and the caller puts the QP in error.
    Lost,
}

impl TxState {
    /// Whether a run may start: nothing with priority over the send queue waits and
    /// nothing is in flight.
    fn run_may_start(&self) -> bool {
        self.in_flight == InFlight::Nothing
            && self.ahead == 0
            && self.terminate.is_none()
            && self.rtr.is_none()
            && !self.hold_for_rtr
            && self.irq.is_empty()
    }

    /// Builds the head request into `out` if it is a Send or Write not yet started that
    /// fits one FPDU (and no fence holds it); returns its MSN for a Send (0 for a
    /// Write), to be taken only once the FPDU is gathered.
    #[inline]
    fn build_small_head(&self, out: &mut TxFpdu) -> Option<u32> {
        let e = self.sq.front()?;
        if e.sent != 0 || (e.fence && !self.orq.is_empty()) {
            return None;
        }
        self.build_small(&e.op, &e.chunks, e.total, out)
    }

    /// Builds the one FPDU of a small request posted to an idle send queue into `out`,
    /// if it may leave at once, as the head of a run would (see [`Qp::post_send_gather`]).
    #[inline]
    fn build_small_direct(
        &self,
        wr: &SendWr,
        chunks: &[Chunk],
        total: u32,
        out: &mut TxFpdu,
    ) -> Option<u32> {
        if !self.sq.is_empty() || !self.run_may_start() || (wr.fence && !self.orq.is_empty()) {
            return None;
        }
        self.build_small(&wr.op, chunks, total, out)
    }

    /// Frames a Send or Write of `total` octets from `chunks` into `out` if it fits one
    /// FPDU (and the room left in the segment being filled, when FPDUs are sized to it:
    /// else the general path splits it there); returns its MSN for a Send (0 for a
    /// Write). Always inlined: it was a call per small message (about 16 instructions of
    /// prologue and epilogue out of 64).
    #[inline(always)]
    fn build_small(
        &self,
        op: &SendOp,
        chunks: &[Chunk],
        total: u32,
        out: &mut TxFpdu,
    ) -> Option<u32> {
        let (h, msn) = self.small_header(op, total)?;
        out.chunks.clear();
        covering_sges(chunks, 0, total as usize, &mut out.chunks);
        out.set_data_header(&h, total as usize);
        out.crc = self.crc;
        out.completes = true;
        out.marker_pos = None;
        Some(msn)
    }

    /// The DDP/RDMAP header of a Send or Write of `total` octets if it fits one FPDU
    /// (see [`TxState::build_small`]), and its MSN for a Send (0 for a Write).
    #[inline(always)]
    fn small_header(&self, op: &SendOp, total: u32) -> Option<(DdpRepr, u32)> {
        match *op {
            SendOp::Send {
                solicited,
                invalidate,
            } if total <= self.seg.cap(self.untagged_max, UNTAGGED_HEADER_LEN) => {
                let opcode = super::send_opcode(solicited, invalidate.is_some());
                let h = DdpRepr {
                    last: true,
                    opcode,
                    placement: Placement::Untagged {
                        rsvd_ulp: invalidate.unwrap_or(0),
                        qn: QN_SEND,
                        msn: self.send_msn,
                        mo: 0,
                    },
                };
                Some((h, self.send_msn))
            }
            SendOp::Write { remote_addr, rkey }
                if total <= self.seg.cap(self.tagged_max, TAGGED_HEADER_LEN) =>
            {
                let h = DdpRepr {
                    last: true,
                    opcode: Opcode::Write,
                    placement: Placement::Tagged {
                        stag: rkey,
                        to: remote_addr,
                    },
                };
                Some((h, 0))
            }
            _ => None,
        }
    }

    /// [`TxState::small_header`] for the single post, written at once: the MPA
    /// length field and the header of a Send or Write of `total` octets that fits one
    /// FPDU, at the start of `out`; returns their length. Each operation's branch
    /// writes its own header
    /// ([`write_small_header`] inlined into it), so its control octets are constants.
    #[inline(always)]
    fn write_single_header(
        &self,
        op: &SendOp,
        total: u32,
        out: &mut [u8; SMALL_HEADER_MAX],
    ) -> Option<usize> {
        match *op {
            SendOp::Send {
                solicited,
                invalidate,
            } if total <= self.seg.cap(self.untagged_max, UNTAGGED_HEADER_LEN) => {
                let h = DdpRepr {
                    last: true,
                    opcode: super::send_opcode(solicited, invalidate.is_some()),
                    placement: Placement::Untagged {
                        rsvd_ulp: invalidate.unwrap_or(0),
                        qn: QN_SEND,
                        msn: self.send_msn,
                        mo: 0,
                    },
                };
                write_small_header(&h, total, out)
            }
            SendOp::Write { remote_addr, rkey }
                if total <= self.seg.cap(self.tagged_max, TAGGED_HEADER_LEN) =>
            {
                let h = DdpRepr {
                    last: true,
                    opcode: Opcode::Write,
                    placement: Placement::Tagged {
                        stag: rkey,
                        to: remote_addr,
                    },
                };
                write_small_header(&h, total, out)
            }
            _ => None,
        }
    }

    /// The head request's FPDU was gathered: it leaves the queue; returns
    /// (seq, wr_id, opcode, octets, signaled).
    #[inline]
    fn finish_small_head(&mut self, msn: u32) -> Option<(u64, u64, WcOpcode, u32, bool)> {
        let e = self.sq.front()?;
        let done = (e.seq, e.wr_id, super::wc_opcode(&e.op), e.total, e.signaled);
        if matches!(e.op, SendOp::Send { .. }) {
            self.send_msn = msn.wrapping_add(1);
        }
        self.sq.pop_front();
        Some(done)
    }
}

impl Qp {
    /// Frames the small Sends and Writes at the head of the send queue one after the
    /// other into `scratch`, hands each to `gather`, and completes each one it took
    /// (success means handed to the transport, as everywhere). Stops at the first
    /// request that is not such a message, that another transmission must precede, or
    /// that `gather` does not take. Returns the FPDUs taken and whether `gather`
    /// reported [`Gathered::Lost`] (the QP is then still to be put in error by the
    /// caller, as after a failed gather on the general path). Not used with markers
    /// (nothing is taken then): their FPDUs need their stream position.
    pub fn transmit_run(
        &mut self,
        scratch: &mut TxFpdu,
        mut gather: impl FnMut(&TxFpdu) -> Gathered,
    ) -> (usize, bool) {
        let sending = matches!(self.state, QpState::Rts | QpState::Closing);
        if !sending || self.params.markers_tx || !self.tx.run_may_start() {
            return (0, false);
        }
        let mut taken = 0;
        while let Some(msn) = self.tx.build_small_head(scratch) {
            match gather(scratch) {
                Gathered::Taken => self.tx.handed_out(scratch.wire_len()),
                Gathered::NoRoom => return (taken, false),
                Gathered::Lost => return (taken, true),
            }
            taken += 1;
            if let Some((seq, wr_id, op, total, signaled)) = self.tx.finish_small_head(msn) {
                self.out
                    .finish_send_success(seq, signaled, wr_id, op, total);
            }
        }
        (taken, false)
    }

    /// [`Qp::post_send_ref`], and a small Send or Write posted to an idle send queue
    /// (nothing queued, in flight or with priority waiting; no markers) is framed into
    /// `scratch` at once and handed to `gather`, without a queue entry: if taken, it
    /// completes at once, as the head of a [`Qp::transmit_run`] would. Returns
    /// [`Gathered::Taken`] then; otherwise the request was posted the ordinary way
    /// (queued, or completed in error as `post_send_ref` does): [`Gathered::NoRoom`],
    /// or [`Gathered::Lost`] if `gather` found its memory gone (the caller then puts
    /// the QP in error, which flushes it, as after a failed gather of a run).
    pub fn post_send_gather(
        &mut self,
        wr: &SendWr,
        tpt: &Tpt,
        scratch: &mut TxFpdu,
        gather: impl FnOnce(&TxFpdu) -> Gathered,
    ) -> Result<Gathered, PostError> {
        let mut chunks = ArrayVec::<Chunk, MAX_SGE>::new();
        let Some(total) = self.check_send(wr, tpt, &mut chunks)? else {
            return Ok(Gathered::NoRoom);
        };
        let direct = !self.params.markers_tx
            && self
                .tx
                .build_small_direct(wr, &chunks, total, scratch)
                .is_some();
        let gathered = if direct {
            gather(scratch)
        } else {
            Gathered::NoRoom
        };
        let seq = self.out.next_send_seq();
        if gathered != Gathered::Taken {
            self.queue_send(seq, wr, &chunks, total, tpt);
            return Ok(gathered);
        }
        self.tx.handed_out(scratch.wire_len());
        let op = super::wc_opcode(&wr.op);
        if matches!(wr.op, SendOp::Send { .. }) {
            self.tx.send_msn = self.tx.send_msn.wrapping_add(1);
        }
        self.out
            .finish_send_success(seq, wr.signaled, wr.wr_id, op, total);
        Ok(Gathered::Taken)
    }

    /// The direct post of the commonest small request, without a scratch FPDU: a Send
    /// or Write with one SGE, posted to an idle send queue of a QP in RTS (nothing
    /// queued, in flight or with priority waiting; no markers), whose payload fits one
    /// FPDU. Its one SGE is checked against the TPT, its header built, and `write`
    /// writes header, payload and trailer straight into the transmit buffer; if it took
    /// them the request completes at once, as [`Qp::post_send_gather`] completes it.
    /// If `write` did not ([`Gathered::NoRoom`], or [`Gathered::Lost`]: the caller then
    /// puts the QP in error), the request is queued as `post_send_ref` queues it.
    ///
    /// None, with nothing changed, for any other request or state, and for an SGE the
    /// TPT refuses: the caller posts it by [`Qp::post_send_gather`], which checks it
    /// (and fails it) as every post does, so an error is the same value and completion.
    /// The conditions here imply every check `check_send` makes before the TPT (state,
    /// SGE count, Read rules, queue room, length).
    #[inline(always)]
    pub fn post_send_small(
        &mut self,
        wr: &SendWr,
        tpt: &Tpt,
        write: impl FnOnce(&SmallFpdu) -> Gathered,
    ) -> Option<Gathered> {
        let run = self.small_run()?;
        self.post_small_in_run(run, &mut LocalKeyMemo::default(), wr, tpt, write)
    }

    /// [`Qp::post_send_small`] for a request posted alone (`post_send`, a batch of
    /// one), its local key checked through `memo`, which the caller keeps across posts
    /// (a ping-pong names one buffer's lkey post after post: the memo answers while no
    /// entry of the table changed). Same conditions and checks as `post_send_small`,
    /// but in two steps with the caller's work between them: this one checks the
    /// request, writes its MPA length field and header at the start of `head` and
    /// returns the rest of its FPDU's description with a [`SingleSmall`]; the caller
    /// frames and sends it, then [`SingleSmall::finish`] numbers and completes the
    /// request (or queues it), as `post_send_small` does after its `write`. A closure
    /// for that work was not inlined into the post: its call, and the FPDU's
    /// description spilled to the stack for it, were about 40 instructions before the
    /// `send`. The header is written here, in the operation's own branch, where its
    /// control octets are constants: built as a `DdpRepr` and written by the caller,
    /// it was assembled bit by bit after the branches met, and its fields spilled.
    ///
    /// None, with nothing changed but `head`'s octets, where `post_send_small` returns
    /// None.
    #[inline(always)]
    pub fn begin_single_small<'q, 'w>(
        &'q mut self,
        wr: &'w SendWr,
        tpt: &Tpt,
        memo: &mut KeptKeyMemo,
        head: &mut [u8; SMALL_HEADER_MAX],
    ) -> Option<SingleSmall<'q, 'w>> {
        let run = self.small_run()?;
        let fpdu = self.check_single_small(run, memo, wr, tpt, head)?;
        Some(SingleSmall { qp: self, wr, fpdu })
    }

    /// [`Qp::post_send_small`] for each request of `wrs` in turn, as long as each one
    /// is taken: the QP's state and its send queue are checked once for the run (a
    /// request taken changes neither), and the requests' local keys through a memo of
    /// the last one ([`LocalKeyMemo`]: one look-up per distinct lkey while the table
    /// does not change). Every check of a request's own fields (SGE count, operation,
    /// fence, length, its SGE's bounds, rights and PD) stays per request.
    ///
    /// The run ends at the first request the direct post does not take: one it cannot
    /// take (another operation, a refused SGE: nothing of it done) is returned in
    /// [`SmallRunEnd::rest`] for the caller to post the general way, so a bad request
    /// fails with the same value and the ones before it are posted; one `write` had no
    /// room for, or found the memory of, was queued as `post_send_small` queues it, and
    /// `rest` is the request after it.
    pub fn post_small_run<W: std::borrow::Borrow<SendWr>>(
        &mut self,
        tpt: &Tpt,
        wrs: &mut impl Iterator<Item = W>,
        mut write: impl FnMut(&SmallFpdu) -> Gathered,
    ) -> SmallRunEnd<W> {
        let mut end = SmallRunEnd {
            taken: 0,
            lost: false,
            rest: None,
        };
        let Some(run) = self.small_run() else {
            end.rest = wrs.next();
            return end;
        };
        let mut memo = LocalKeyMemo::default();
        while let Some(wr) = wrs.next() {
            match self.post_small_in_run(run, &mut memo, wr.borrow(), tpt, &mut write) {
                Some(Gathered::Taken) => end.taken += 1,
                Some(g) => {
                    end.lost = g == Gathered::Lost;
                    end.rest = wrs.next();
                    return end;
                }
                None => {
                    end.rest = Some(wr);
                    return end;
                }
            }
        }
        end
    }

    /// The conditions of a direct post that hold for a whole run of them (see
    /// [`Qp::post_small_run`]); None if a direct post may not start now.
    #[inline(always)]
    fn small_run(&self) -> Option<SmallRun> {
        if self.state != QpState::Rts
            || self.params.markers_tx
            || self.tx.sq_len() >= self.cfg.sq_depth
            || !self.tx.sq.is_empty()
            || !self.tx.run_may_start()
        {
            return None;
        }
        Some(SmallRun {
            fence_waits: !self.tx.orq.is_empty(),
        })
    }

    /// One request of a run ([`Qp::post_send_small`] once `run` was checked). Only
    /// valid while every earlier request of the run was taken: then the state, the
    /// empty send queue and the Read queue are as `run` found them.
    #[inline(always)]
    fn post_small_in_run(
        &mut self,
        run: SmallRun,
        memo: &mut LocalKeyMemo,
        wr: &SendWr,
        tpt: &Tpt,
        write: impl FnOnce(&SmallFpdu) -> Gathered,
    ) -> Option<Gathered> {
        // Written out, not through the single post's `check_single_small` and
        // `finish_single_small`: through them, `write_bw -s 64`'s batch post cost about
        // 10 instructions more a message (session 25). The same checks and steps.
        let [sge] = &wr.sgl[..] else {
            return None;
        };
        if !matches!(wr.op, SendOp::Send { .. } | SendOp::Write { .. })
            || (wr.fence && run.fence_waits)
        {
            return None;
        }
        let total = sge.len;
        let (header, msn) = self.tx.small_header(&wr.op, total)?;
        let t = tpt
            .check_local_memo(
                memo,
                sge.lkey,
                sge.addr,
                u64::from(total),
                Access::empty(),
                self.cfg.pd,
            )
            .ok()?;
        let f = SmallFpdu {
            header,
            payload: Chunk {
                region: t.region,
                offset: t.offset,
                len: total as usize,
            },
            crc: self.tx.crc,
        };
        let gathered = write(&f);
        let seq = self.out.next_send_seq();
        if gathered != Gathered::Taken {
            self.queue_send(seq, wr, &[f.payload], total, tpt);
            return Some(gathered);
        }
        self.tx.handed_out(f.wire_len());
        if matches!(wr.op, SendOp::Send { .. }) {
            self.tx.send_msn = msn.wrapping_add(1);
        }
        let op = super::wc_opcode(&wr.op);
        self.out
            .finish_send_success(seq, wr.signaled, wr.wr_id, op, total);
        Some(Gathered::Taken)
    }

    /// The single post's checks, those of [`Qp::post_small_in_run`] before its
    /// `write`, the local key through the kept memo, with the request's length field
    /// and header written into `head`: the rest of the request's FPDU; None, with
    /// nothing changed, for a request the direct post does not take.
    #[inline(always)]
    fn check_single_small(
        &self,
        run: SmallRun,
        memo: &mut KeptKeyMemo,
        wr: &SendWr,
        tpt: &Tpt,
        head: &mut [u8; SMALL_HEADER_MAX],
    ) -> Option<SingleFpdu> {
        let [sge] = &wr.sgl[..] else {
            return None;
        };
        if !matches!(wr.op, SendOp::Send { .. } | SendOp::Write { .. })
            || (wr.fence && run.fence_waits)
        {
            return None;
        }
        let total = sge.len;
        let header_len = self.tx.write_single_header(&wr.op, total, head)?;
        let t = tpt
            .check_local_kept(
                memo,
                sge.lkey,
                sge.addr,
                u64::from(total),
                Access::empty(),
                self.cfg.pd,
            )
            .ok()?;
        let f = SingleFpdu {
            header_len,
            payload: Chunk {
                region: t.region,
                offset: t.offset,
                len: total as usize,
            },
            crc: self.tx.crc,
        };
        Some(f)
    }

    /// The single post's end, that of [`Qp::post_small_in_run`] after its `write`:
    /// the caller did `gathered` with the FPDU `f`; the request is numbered and
    /// completes if it was taken, and is queued otherwise. A Send's MSN is the one
    /// its header carries: nothing changed the QP since (the guard held it).
    #[inline(always)]
    fn finish_single_small(
        &mut self,
        wr: &SendWr,
        f: &SingleFpdu,
        gathered: Gathered,
        tpt: &Tpt,
    ) -> Gathered {
        // Numbered after the write: a single post's `write` sends, and this is not
        // needed before.
        let seq = self.out.next_send_seq();
        let total = f.payload.len as u32;
        if gathered != Gathered::Taken {
            self.queue_send(seq, wr, &[f.payload], total, tpt);
            return gathered;
        }
        self.tx.handed_out(f.wire_len());
        if matches!(wr.op, SendOp::Send { .. }) {
            self.tx.send_msn = self.tx.send_msn.wrapping_add(1);
        }
        let op = super::wc_opcode(&wr.op);
        self.out
            .finish_send_success(seq, wr.signaled, wr.wr_id, op, total);
        Gathered::Taken
    }
}

/// A single small request checked by [`Qp::begin_single_small`], its FPDU not yet
/// sent; [`SingleSmall::finish`] completes or queues it. Holds the QP: nothing can
/// change it between the check and the finish. Its FPDU's description is kept here
/// once, for the caller's framing and for the finish: a second copy, for each, was
/// spilled to the stack before the `send`.
#[derive(Debug)]
pub struct SingleSmall<'q, 'w> {
    qp: &'q mut Qp,
    wr: &'w SendWr,
    fpdu: SingleFpdu,
}

impl SingleSmall<'_, '_> {
    /// The request's FPDU: where its header (already written) ends, its payload, its
    /// CRC flag.
    #[inline(always)]
    pub fn fpdu(&self) -> &SingleFpdu {
        &self.fpdu
    }

    /// What the caller did with the request's FPDU: [`Gathered::Taken`] completes
    /// the request (as `post_send_small` after its `write` took it); otherwise the
    /// request is queued (and after [`Gathered::Lost`] the caller puts the QP in
    /// error). Returns `gathered`.
    #[inline(always)]
    pub fn finish(self, gathered: Gathered, tpt: &Tpt) -> Gathered {
        let SingleSmall { qp, wr, fpdu } = self;
        qp.finish_single_small(wr, &fpdu, gathered, tpt)
    }
}

/// What holds for a whole run of direct posts, checked at its start.
#[derive(Debug, Clone, Copy)]
struct SmallRun {
    /// An RDMA Read is outstanding: a fenced request must wait (the general path).
    fence_waits: bool,
}

/// How a run of direct posts ([`Qp::post_small_run`]) ended.
#[derive(Debug)]
pub struct SmallRunEnd<W> {
    /// Requests written into the transmit buffer and completed.
    pub taken: u64,
    /// `write` found a request's memory gone (that request was queued): the caller
    /// puts the QP in error before it posts `rest`, as after a failed gather.
    pub lost: bool,
    /// The next request to post the general way (None: none left).
    pub rest: Option<W>,
}
