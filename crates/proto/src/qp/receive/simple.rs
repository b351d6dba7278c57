//! What the two one-step paths ([`sends`](super::sends), [`writes`](super::writes))
//! check alike before they take an FPDU whole: the stream at a plain boundary with
//! nothing waiting or deferred, the whole FPDU in the read-ahead, its header parsed;
//! and, once the kind suits them, its CRC and trailer. Anything they refuse is left to
//! the general path, which reports a fault exactly.

use super::Receiver;
use softrnic_wire::ddp::{self, DdpRepr};
use softrnic_wire::mpa::{self, FpduCheck};

/// Whether `data` begins with an FPDU whose DDP header is `header_len` octets (the
/// control octet says tagged or untagged): the one test made inline before a one-step
/// path is called, so that a run of the other kind pays no call for it.
#[inline(always)]
pub(super) fn header_len_first(data: &[u8], header_len: usize) -> bool {
    data.get(mpa::ULPDU_LEN_LEN)
        .is_some_and(|&c| ddp::header_len_of(c) == header_len)
}

/// The whole FPDU at the front of a read-ahead, as [`Receiver::whole_front`] found it.
pub(super) struct WholeFront {
    /// The MPA ULPDU length (DDP header and payload).
    pub ulpdu_len: usize,
    /// Its octets on the wire: length field, ULPDU, padding and CRC.
    pub wire_len: usize,
    /// The DDP/RDMAP header, parsed and not yet checked against the RDMAP rules.
    pub header: DdpRepr,
}

impl Receiver {
    /// The FPDU at the front of `data`, with a DDP header of `header_len` octets, if
    /// the stream may take it in one step: nothing waits, nothing is deferred, the
    /// stream is at a plain boundary, and the whole FPDU is in `data`.
    #[inline(always)]
    pub(super) fn whole_front(&self, data: &[u8], header_len: usize) -> Option<WholeFront> {
        let payload_at = mpa::ULPDU_LEN_LEN + header_len;
        if self.waiting.is_some()
            || self.await_rtr
            || self.deferred.len() > 0
            || !self.stream.at_plain_boundary()
            || data.len() < payload_at
        {
            return None;
        }
        let ulpdu_len = usize::from(u16::from_be_bytes([data[0], data[1]]));
        let wire_len = mpa::fpdu_len(ulpdu_len);
        if ulpdu_len < header_len || data.len() < wire_len {
            return None;
        }
        let header = DdpRepr::parse_bytes(&data[mpa::ULPDU_LEN_LEN..payload_at]).ok()?;
        Some(WholeFront {
            ulpdu_len,
            wire_len,
            header,
        })
    }

    /// Whether the FPDU `f` at the front of `data` is intact: its CRC (when the
    /// connection uses one) and its trailer. Checked only once its kind suits the
    /// caller, so that an FPDU left to the general path is not checked twice.
    #[inline(always)]
    pub(super) fn whole_front_intact(&self, data: &[u8], f: &WholeFront) -> bool {
        let ulpdu_end = mpa::ULPDU_LEN_LEN + f.ulpdu_len;
        let mut check = FpduCheck::begin([data[0], data[1]], self.stream.crc_on());
        check.update(&data[mpa::ULPDU_LEN_LEN..ulpdu_end]);
        check.finish(&data[ulpdu_end..f.wire_len]).is_ok()
    }
}
