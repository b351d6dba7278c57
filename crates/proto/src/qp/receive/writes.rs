//! The receive path's shortest way for a whole small RDMA Write FPDU at the front of a
//! read-ahead: framing, header, RDMAP rules, CRC and trailer, and the STag's rights
//! and bounds are checked first, without changing anything; then the payload is placed
//! and the FPDU is taken in one step. A Write completes nothing at its receiver, so
//! nothing else happens. The general path ([`Receiver::take_whole`]) set up the
//! stream's step machine, copied the header into the stream's buffer and took the
//! trailer as a separate step for every such FPDU: about half of a ping-pong's
//! receive work. Anything else, a fault included, is left to the general path, which
//! then takes the same octets and reports the fault exactly as before.

use super::simple::header_len_first;
use super::{Receiver, RxDeps};
use crate::qp::fpdu::Chunk;
use crate::qp::place::check_rdmap_rules;
use crate::tpt::RemoteAccess;
use crate::verbs::Access;
use softrnic_wire::ddp::{Placement, TAGGED_HEADER_LEN};
use softrnic_wire::mpa;
use softrnic_wire::rdmap::Opcode;

/// Where the payload of a tagged FPDU begins: length field and DDP header.
const PAYLOAD_AT: usize = mpa::ULPDU_LEN_LEN + TAGGED_HEADER_LEN;

/// Whether `data` begins with a tagged FPDU, tested inline before
/// [`Receiver::take_simple_write`].
#[inline(always)]
pub(super) fn tagged_first(data: &[u8]) -> bool {
    header_len_first(data, TAGGED_HEADER_LEN)
}

impl Receiver {
    /// Takes the RDMA Write FPDU at the front of `data` whole, if it is the simple
    /// case (see the module documentation), and returns its octets on the wire;
    /// `None` when it is not, and then nothing changed (a payload `place` refused may
    /// have been written: the general path writes the same octets again and fails the
    /// same way).
    #[inline(always)]
    pub(super) fn take_simple_write(
        &mut self,
        data: &[u8],
        d: &mut RxDeps<'_>,
        place: &mut dyn FnMut(Chunk, &[u8]) -> bool,
    ) -> Option<usize> {
        let f = self.whole_front(data, TAGGED_HEADER_LEN)?;
        if f.header.opcode != Opcode::Write {
            return None;
        }
        let h = check_rdmap_rules(f.header).ok()?;
        let Placement::Tagged { stag, to } = h.placement else {
            return None;
        };
        if !self.whole_front_intact(data, &f) {
            return None;
        }
        let len = f.ulpdu_len - TAGGED_HEADER_LEN;
        if len > 0 {
            let t = d
                .tpt
                .check_remote_memo(
                    &mut self.write_key,
                    stag,
                    to,
                    len as u64,
                    Access::REMOTE_WRITE,
                    d.pd,
                    RemoteAccess::TaggedPlacement,
                )
                .ok()?;
            let chunk = Chunk {
                region: t.region,
                offset: t.offset,
                len,
            };
            if !place(chunk, &data[PAYLOAD_AT..PAYLOAD_AT + len]) {
                return None;
            }
        }
        self.stream.took_whole(f.wire_len, len);
        Some(f.wire_len)
    }
}
