//! The placement part of the receive path: where one FPDU's payload goes, decided from
//! its DDP header alone, wherever in the stream the FPDU was found.
//!
//! - Tagged (RDMA Write, Read Response): through the TPT, by STag and TO.
//! - Untagged (Send): into the receive buffer bound to the message, by MSN. A message
//!   binds a buffer from the [`RecvSource`] when its first segment arrives (buffers are
//!   bound in MSN order) and keeps it until its last segment is delivered.
//! - Read Requests: their source checked through the TPT, their MSN in order.
//!
//! Every refusal is the Terminate cause RFC 5040/5041 name for it.

use super::fpdu::{Chunk, covering};
use super::rq::{Grant, RecvSource, RecvWqe, Rq};
use crate::tpt::{RemoteAccess, Tpt};
use crate::verbs::*;
use softrnic_wire::ddp::{DdpRepr, Placement};
use softrnic_wire::rdmap::{Opcode, ReadRequest};
use softrnic_wire::terminate::{
    Layer, TerminateCause, ddp_code, ddp_etype, rdmap_code, rdmap_etype,
};
use softrnic_wire::{Result as WireResult, WireError};
use std::collections::VecDeque;

/// The cause for a fault in untagged placement.
pub(crate) fn ddp_untagged(code: u8) -> TerminateCause {
    TerminateCause::new(Layer::Ddp, ddp_etype::UNTAGGED_BUFFER, code)
}

/// The cause for an RDMAP operation fault.
pub(crate) fn rdmap_op(code: u8) -> TerminateCause {
    TerminateCause::new(Layer::Rdmap, rdmap_etype::REMOTE_OPERATION, code)
}

/// The RDMAP rules a header alone decides: queue numbers, single-segment messages.
pub(crate) fn check_rdmap_rules(h: DdpRepr) -> WireResult<DdpRepr> {
    if let Placement::Untagged { qn, mo, .. } = h.placement {
        if let Some(expected) = h.opcode.queue_number()
            && qn != expected
        {
            return Err(WireError::InvalidQueueNumber {
                qn,
                opcode: h.opcode.to_bits(),
            });
        }
        if matches!(h.opcode, Opcode::ReadRequest | Opcode::Terminate) && (mo != 0 || !h.last) {
            return Err(WireError::NotSingleSegment { mo, last: h.last });
        }
    }
    Ok(h)
}

/// Destination of a tagged segment of `len` octets at (`stag`, `to`) needing `need`
/// (REMOTE_WRITE for a Write; LOCAL_WRITE for a Read Response into our sink).
pub(crate) fn tagged(
    tpt: &Tpt,
    pd: PdId,
    stag: STag,
    to: u64,
    len: usize,
    need: Access,
) -> Result<Option<Chunk>, TerminateCause> {
    if len == 0 {
        return Ok(None);
    }
    let t = tpt.check_remote(
        stag,
        to,
        len as u64,
        need,
        pd,
        RemoteAccess::TaggedPlacement,
    )?;
    Ok(Some(Chunk {
        region: t.region,
        offset: t.offset,
        len,
    }))
}

/// The source of an inbound RDMA Read, checked through the TPT.
pub(crate) fn read_source(tpt: &Tpt, pd: PdId, rr: &ReadRequest) -> Result<Chunk, TerminateCause> {
    if rr.size == 0 {
        return Ok(Chunk {
            region: RegionId(u32::MAX),
            offset: 0,
            len: 0,
        });
    }
    let t = tpt.check_remote(
        rr.source_stag,
        rr.source_to,
        u64::from(rr.size),
        Access::REMOTE_READ,
        pd,
        RemoteAccess::ReadSource,
    )?;
    Ok(Chunk {
        region: t.region,
        offset: t.offset,
        len: rr.size as usize,
    })
}

/// Why an untagged segment cannot be placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum UntaggedFault {
    /// A protocol fault: Terminate with this cause.
    Terminate(TerminateCause),
    /// The message is longer than its buffer: the buffer completes with a length error,
    /// then the connection terminates (DDP "too long").
    TooLong(RecvWqe),
    /// The receive source applies back-pressure: nothing was bound; ask again when
    /// woken.
    Wait,
}

/// Messages ahead of the oldest undelivered Send that a segment found ahead of the
/// stream may bind a receive buffer for.
pub(crate) const AHEAD_WINDOW: u32 = 64;

/// Where a segment was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arrival {
    /// Next in the in-order stream.
    InStream,
    /// Ahead of the stream, after a hole.
    Ahead,
}

/// The placement fields of a Send segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SendSegment {
    pub msn: u32,
    pub mo: u32,
    pub len: usize,
}

/// The untagged queues' message sequence: Sends (queue 0) and Read Requests (queue 1).
#[derive(Debug)]
pub(crate) struct Untagged {
    /// MSN of the oldest Send message not yet delivered.
    recv_msn: u32,
    /// Buffers taken from a shared queue for Send messages, oldest first: index `i` is
    /// MSN `recv_msn + i`. (The QP's own queue keeps its bound buffers in place.)
    bound: VecDeque<RecvWqe>,
    /// MSN of the next Read Request expected.
    rreq_msn: u32,
}

impl Default for Untagged {
    fn default() -> Self {
        Untagged {
            recv_msn: 1,
            bound: VecDeque::new(),
            rreq_msn: 1,
        }
    }
}

impl Untagged {
    /// MSN of the oldest Send message not yet delivered.
    pub(crate) fn recv_msn(&self) -> u32 {
        self.recv_msn
    }

    /// Destination chunks of a Send segment, binding a buffer from `source` if its
    /// message has none yet. In the stream, only the oldest undelivered message may
    /// arrive, and a fault consumes its buffer; ahead of the stream, messages up to
    /// [`AHEAD_WINDOW`] further may bind, and a fault changes nothing (the segment waits
    /// for the stream, which reports it).
    pub(crate) fn send_dest(
        &mut self,
        qp: QpId,
        seg: SendSegment,
        arrival: Arrival,
        source: &mut dyn RecvSource,
        out: &mut Vec<Chunk>,
    ) -> Result<(), UntaggedFault> {
        let window = match arrival {
            Arrival::InStream => 1,
            Arrival::Ahead => AHEAD_WINDOW,
        };
        let ahead = seg.msn.wrapping_sub(self.recv_msn);
        if ahead >= window {
            return Err(UntaggedFault::Terminate(ddp_untagged(
                ddp_code::untagged::MSN_RANGE,
            )));
        }
        let ahead = ahead as usize;
        if let Some(rq) = source.in_place() {
            // The QP's own queue: the buffer is bound where it was posted.
            let Some(wqe) = rq.bind_through(ahead) else {
                // On iWARP an empty receive queue is fatal.
                return Err(UntaggedFault::Terminate(ddp_untagged(
                    ddp_code::untagged::NO_BUFFER,
                )));
            };
            if !cover_send(wqe.total, wqe.sges.iter(), seg, out) {
                return Err(match arrival {
                    // The buffer goes with the failed message (in the stream, the
                    // oldest bound one).
                    Arrival::InStream => match rq.remove_oldest_bound() {
                        Some(wqe) => UntaggedFault::TooLong(wqe),
                        None => {
                            UntaggedFault::Terminate(ddp_untagged(ddp_code::untagged::TOO_LONG))
                        }
                    },
                    Arrival::Ahead => {
                        UntaggedFault::Terminate(ddp_untagged(ddp_code::untagged::TOO_LONG))
                    }
                });
            }
            return Ok(());
        }
        while self.bound.len() <= ahead {
            match source.take(qp, arrival == Arrival::Ahead) {
                Grant::Buffer(wqe) => self.bound.push_back(wqe),
                // On iWARP an empty receive queue is fatal.
                Grant::Empty => {
                    return Err(UntaggedFault::Terminate(ddp_untagged(
                        ddp_code::untagged::NO_BUFFER,
                    )));
                }
                Grant::Wait => return Err(UntaggedFault::Wait),
                Grant::Refused(cause) => return Err(UntaggedFault::Terminate(cause)),
            }
        }
        let wqe = &self.bound[ahead];
        if !cover_send(wqe.total, wqe.sges.iter(), seg, out) {
            let wqe = match arrival {
                // The buffer goes with the failed message.
                Arrival::InStream => self.bound.remove(ahead),
                Arrival::Ahead => None,
            };
            return Err(match wqe {
                Some(wqe) => UntaggedFault::TooLong(wqe),
                None => UntaggedFault::Terminate(ddp_untagged(ddp_code::untagged::TOO_LONG)),
            });
        }
        Ok(())
    }

    /// The oldest Send message's last segment was delivered: the work request id of
    /// its buffer, unbound (from the QP's own queue, or from the list of buffers taken
    /// from a shared one).
    pub(crate) fn deliver_send(&mut self, source: &mut dyn RecvSource) -> Option<u64> {
        self.recv_msn = self.recv_msn.wrapping_add(1);
        match source.in_place() {
            Some(rq) => rq.complete_oldest_bound(),
            None => self.bound.pop_front().map(|w| w.wr_id),
        }
    }

    /// [`Untagged::deliver_send`] for a message whose buffer is the front of the QP's
    /// own queue `rq`, bound to it or not yet (taken and completed in one step).
    /// Inlined into the one-step Send: a call here cost a third of its 27 instructions.
    #[inline(always)]
    pub(crate) fn deliver_front_of(&mut self, rq: &mut Rq) -> Option<u64> {
        self.recv_msn = self.recv_msn.wrapping_add(1);
        rq.complete_front()
    }

    /// An RFC 6581 RTR zero-length Send: consumes its MSN and no buffer.
    pub(crate) fn skip_rtr_send(&mut self) {
        self.recv_msn = self.recv_msn.wrapping_add(1);
    }

    /// A Read Request's MSN must be the next one.
    pub(crate) fn read_request(&mut self, msn: u32) -> Result<(), TerminateCause> {
        if msn != self.rreq_msn {
            return Err(ddp_untagged(ddp_code::untagged::MSN_RANGE));
        }
        self.rreq_msn = self.rreq_msn.wrapping_add(1);
        Ok(())
    }

    /// Removes the bound buffers, oldest first (for flushing).
    pub(crate) fn unbind_all(&mut self) -> impl Iterator<Item = RecvWqe> + '_ {
        self.bound.drain(..)
    }
}

/// Destination chunks of a Send segment in the buffer bound to its message (`total`
/// octets over `sges`); false (nothing added) when the segment ends beyond the buffer.
fn cover_send<'a>(
    total: u64,
    sges: impl Iterator<Item = &'a (RegionId, u64, u32)>,
    seg: SendSegment,
    out: &mut Vec<Chunk>,
) -> bool {
    if u64::from(seg.mo) + seg.len as u64 > total {
        return false;
    }
    let sges = sges.map(|&(region, offset, len)| Chunk {
        region,
        offset,
        len: len as usize,
    });
    covering(sges, seg.mo as usize, seg.len, out);
    true
}

/// The cause when a Send with Invalidate names an STag that cannot be invalidated.
pub(crate) fn cannot_invalidate() -> TerminateCause {
    TerminateCause::new(
        Layer::Rdmap,
        rdmap_etype::REMOTE_PROTECTION,
        rdmap_code::CANNOT_INVALIDATE,
    )
}

/// The cause when a Read Response matches no outstanding Read.
pub(crate) fn unexpected_read_response() -> TerminateCause {
    TerminateCause::new(
        Layer::Ddp,
        ddp_etype::TAGGED_BUFFER,
        ddp_code::tagged::INVALID_STAG,
    )
}
