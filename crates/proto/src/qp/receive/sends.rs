//! The receive path's shortest way for the commonest small message: a whole Send
//! (untagged, one segment, no invalidation) at the front of a read-ahead, with the
//! QP's own receive queue. Everything is checked first (framing, header, MSN, CRC,
//! buffer, length) without changing anything; then the payload is placed, and the
//! receive completes in the same step: no step machine, no destination list, no
//! binding list. Anything else, a fault included, is left to the general path
//! ([`Receiver::take_whole`]), which then takes the same octets and reports the fault
//! exactly as before; so the outcome never depends on which path took an FPDU.

use super::simple::header_len_first;
use super::{Receiver, RxDeps};
use crate::qp::deliver::{QpEvent, RecvHandoff};
use crate::qp::fpdu::Chunk;
use crate::qp::place::check_rdmap_rules;
use crate::verbs::{WcOpcode, WcStatus};
use softrnic_wire::ddp::{Placement, UNTAGGED_HEADER_LEN};
use softrnic_wire::mpa;
use softrnic_wire::rdmap::Opcode;

/// Where the payload of an untagged FPDU begins: length field and DDP header.
const PAYLOAD_AT: usize = mpa::ULPDU_LEN_LEN + UNTAGGED_HEADER_LEN;

/// Whether `data` begins with an untagged FPDU (the DDP control octet says so): the
/// one test made inline before [`Receiver::take_simple_send`], so that a run of Writes
/// pays no call for it. (That function does not repeat it: a tagged header parses as
/// tagged placement there and is refused.)
#[inline(always)]
pub(super) fn untagged_first(data: &[u8]) -> bool {
    header_len_first(data, UNTAGGED_HEADER_LEN)
}

impl Receiver {
    /// Takes the Send FPDU at the front of `data` whole, if it is the simple case (see
    /// the module documentation), and returns its octets on the wire; `None` when it is
    /// not, and then nothing changed (a payload chunk `place` refused may have been
    /// written: the general path writes the same octets again and fails the same way).
    #[inline(always)]
    pub(super) fn take_simple_send(
        &mut self,
        data: &[u8],
        d: &mut RxDeps<'_>,
        place: &mut dyn FnMut(Chunk, &[u8]) -> bool,
        to: &mut impl RecvHandoff,
    ) -> Option<usize> {
        let f = self.whole_front(data, UNTAGGED_HEADER_LEN)?;
        if !matches!(f.header.opcode, Opcode::Send | Opcode::SendSe) || !f.header.last {
            return None;
        }
        let h = check_rdmap_rules(f.header).ok()?;
        let Placement::Untagged { msn, mo: 0, .. } = h.placement else {
            return None;
        };
        if msn != self.untagged.recv_msn() {
            return None;
        }
        if !self.whole_front_intact(data, &f) {
            return None;
        }
        let len = f.ulpdu_len - UNTAGGED_HEADER_LEN;
        // The oldest message's buffer: the front of the QP's own queue (bound to it
        // already if a segment of it came ahead of the stream, or the next free one).
        let rq = d.buffers.in_place()?;
        let wqe = rq.front()?;
        if len as u64 > wqe.total {
            return None;
        }
        // The payload over the buffer's SGEs, in order (as `covering` from offset 0).
        let mut at = PAYLOAD_AT;
        let mut left = len;
        for &(region, offset, sge_len) in &wqe.sges {
            let k = (sge_len as usize).min(left);
            if k > 0
                && !place(
                    Chunk {
                        region,
                        offset,
                        len: k,
                    },
                    &data[at..at + k],
                )
            {
                return None;
            }
            at += k;
            left -= k;
        }
        // Placed and intact: the FPDU is taken, and its message completes.
        self.stream.took_whole(f.wire_len, len);
        let wr_id = self.untagged.deliver_front_of(rq)?;
        d.buffers.release(d.qp);
        let mut c = d
            .out
            .completion(wr_id, WcStatus::Success, WcOpcode::Recv, len as u32);
        c.solicited = h.opcode.solicited();
        d.out.recv_to(c, to);
        if c.solicited {
            d.out.event(QpEvent::Solicited);
        }
        Some(f.wire_len)
    }
}
