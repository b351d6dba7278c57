//! What the core hands the I/O layer to send (an FPDU: header octets, memory chunks to
//! gather, trailer) and what a receive failure keeps for the Terminate. The framing
//! itself (length field, pad, CRC) is `softrnic_wire::mpa`'s, on both paths.

use crate::verbs::*;
use arrayvec::ArrayVec;
use softrnic_wire::ddp::{DdpRepr, Placement, TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN};
use softrnic_wire::mpa;
use softrnic_wire::rdmap::READ_REQUEST_LEN;

/// A data FPDU's header octets: the MPA length field and a tagged (Write, Read
/// Response) or untagged (Send) DDP/RDMAP header.
const TAGGED_DATA_HEADER: usize = mpa::ULPDU_LEN_LEN + TAGGED_HEADER_LEN;
const UNTAGGED_DATA_HEADER: usize = mpa::ULPDU_LEN_LEN + UNTAGGED_HEADER_LEN;

/// A piece of registered memory to gather into an FPDU, or to place payload into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    /// The region.
    pub region: RegionId,
    /// Offset in the region.
    pub offset: u64,
    /// Octets.
    pub len: usize,
}

/// Appends to `out` the chunks covering `len` octets from `skip` on into the memory that
/// `pieces` name in order (a work request's SGEs, a Read source, a receive buffer): at
/// most as many chunks as there are pieces.
pub(crate) fn covering(
    pieces: impl IntoIterator<Item = Chunk>,
    mut skip: usize,
    mut len: usize,
    out: &mut impl Extend<Chunk>,
) {
    for c in pieces {
        if len == 0 {
            break;
        }
        if skip >= c.len {
            skip -= c.len;
            continue;
        }
        let take = (c.len - skip).min(len);
        out.extend(Some(Chunk {
            region: c.region,
            offset: c.offset + skip as u64,
            len: take,
        }));
        skip = 0;
        len -= take;
    }
}

/// [`covering`] for a work request's SGEs, with the one-SGE case (most small
/// messages) done without the general walk.
#[inline(always)]
pub(crate) fn covering_sges(
    sges: &[Chunk],
    skip: usize,
    len: usize,
    out: &mut ArrayVec<Chunk, MAX_SGE>,
) {
    if let [c] = sges
        && len > 0
        && skip + len <= c.len
    {
        // `out` holds at most MAX_SGE chunks and gets at most one here.
        let _ = out.try_push(Chunk {
            region: c.region,
            offset: c.offset + skip as u64,
            len,
        });
        return;
    }
    covering_general(sges, skip, len, out);
}

/// The general walk of [`covering_sges`], out of line.
#[inline(never)]
fn covering_general(sges: &[Chunk], skip: usize, len: usize, out: &mut ArrayVec<Chunk, MAX_SGE>) {
    covering(sges.iter().copied(), skip, len, out);
}

/// Longest header the transmit path builds: MPA length field, untagged DDP header, and
/// the largest control body (a Terminate copying a DDP header and a Read Request header).
pub const MAX_TX_HEADER: usize =
    mpa::ULPDU_LEN_LEN + UNTAGGED_HEADER_LEN + softrnic_wire::terminate::MAX_LEN;

/// One FPDU to send: header octets, then payload gathered from memory, then the trailer
/// (pad and CRC) that [`TxFpdu::trailer`] builds once the CRC is known.
#[derive(Debug, Clone)]
pub struct TxFpdu {
    /// MPA length, DDP/RDMAP header, and any control body.
    pub header: [u8; MAX_TX_HEADER],
    /// Octets of `header` in use.
    pub header_len: usize,
    /// Payload, in order: a work request's SGEs or a Read source (at most [`MAX_SGE`]),
    /// held inline so that building an FPDU allocates nothing.
    pub chunks: ArrayVec<Chunk, MAX_SGE>,
    /// ULPDU length (header after the MPA length, plus payload).
    pub ulpdu_len: usize,
    /// Whether the CRC must be computed (else the field is zero).
    pub crc: bool,
    /// Whether writing this FPDU completely finishes something (a message's last
    /// FPDU, a Read Request, a Terminate): then the I/O layer calls `Qp::transmit_done`
    /// once it is written, and `Qp::poll_transmit` gives nothing until then. An FPDU
    /// that does not may be followed by the next one at once (e.g. all of a large
    /// Write's FPDUs in one `sendmsg`), as long as they are written in order.
    pub completes: bool,
    /// With RFC 5044 markers on: the position of the FPDU's first octet in the marked
    /// stream (octets since the first FPDU). Such an FPDU is framed by
    /// [`TxFpdu::emit_marked`], not gathered.
    pub marker_pos: Option<u64>,
    /// A data FPDU's DDP/RDMAP header framed by [`TxFpdu::set_data_header`], which
    /// [`TxFpdu::append_header`] writes; `None` when the header is in `header`.
    data_header: Option<DdpRepr>,
}

impl Default for TxFpdu {
    fn default() -> Self {
        TxFpdu {
            header: [0; MAX_TX_HEADER],
            header_len: 0,
            chunks: ArrayVec::new(),
            ulpdu_len: 0,
            crc: false,
            completes: false,
            marker_pos: None,
            data_header: None,
        }
    }
}

impl TxFpdu {
    /// Payload octets.
    pub fn payload_len(&self) -> usize {
        self.chunks.iter().map(|c| c.len).sum()
    }

    /// Pad octets after the payload (zero; the CRC covers them).
    #[inline]
    pub fn pad_len(&self) -> usize {
        mpa::pad_len(self.ulpdu_len)
    }

    /// The pad and CRC octets; `crc` is the CRC32c over header, payload and pad (ignored
    /// when CRC is off).
    pub fn trailer(&self, crc: u32) -> ([u8; 7], usize) {
        mpa::fpdu_trailer(self.ulpdu_len, if self.crc { crc } else { 0 })
    }

    /// Total octets on the wire (markers included). Inlined: the gather of every small
    /// FPDU asks for it (a call from rnic, 9 instructions a message).
    #[inline]
    pub fn wire_len(&self) -> usize {
        let plain = mpa::fpdu_len(self.ulpdu_len);
        match self.marker_pos {
            None => plain,
            Some(at) => marked_len(at, plain),
        }
    }

    /// Appends the whole FPDU with its markers to `out` by the wire crate's framer:
    /// length field, the header's DDP/RDMAP octets, `payload` (the octets its chunks
    /// name, in order), pad, markers where the stream position puts them, and the CRC
    /// over all of them. Without markers it frames the FPDU all the same.
    pub fn emit_marked(&self, payload: &[u8], out: &mut Vec<u8>) {
        let ulp = &self.header_bytes()[mpa::ULPDU_LEN_LEN..];
        // The ULPDU fits its field (the transmit path sizes it), so this cannot fail.
        let n = mpa::append_fpdu(&[ulp, payload], self.crc, self.marker_pos, out);
        debug_assert_eq!(n.ok(), Some(self.wire_len()), "FPDU framed to its length");
    }

    /// The octets of the header in use; empty for a data header framed by
    /// [`TxFpdu::set_data_header`] (use [`TxFpdu::append_header`]).
    pub fn header_bytes(&self) -> &[u8] {
        &self.header[..self.header_len]
    }

    /// Appends the header's octets to `out`. A data header framed by
    /// [`TxFpdu::set_data_header`] is written from its parsed form, with stores only:
    /// written into `header` field by field and then copied, it was read back in
    /// 16-octet pieces, a load the CPU cannot serve from the stores that had just
    /// made it (it waits for them to reach the cache: 28% of a small post's samples
    /// in session 14, about a fifth in session 13).
    #[inline(always)]
    pub fn append_header(&self, out: &mut Vec<u8>) {
        let Some(h) = &self.data_header else {
            out.extend_from_slice(self.header_bytes());
            return;
        };
        let prefix = mpa::fpdu_prefix(self.ulpdu_len).unwrap_or([0xff; 2]);
        if h.tagged() {
            append_data_header::<TAGGED_DATA_HEADER>(out, prefix, h);
        } else {
            append_data_header::<UNTAGGED_DATA_HEADER>(out, prefix, h);
        }
    }

    /// Frames a data FPDU's header (MPA length field and `h`, no control body) for
    /// [`TxFpdu::append_header`] to write straight into the transmit buffer: the
    /// octets are not written into `header` ([`TxFpdu::header_bytes`] is empty), so a
    /// small message's header is written once, where it is sent from.
    #[inline]
    pub(crate) fn set_data_header(&mut self, h: &DdpRepr, payload_len: usize) {
        self.header_len = 0;
        self.ulpdu_len = h.header_len() + payload_len;
        self.data_header = Some(*h);
    }

    /// Frames the header: MPA length field, DDP/RDMAP header `h`, control `body`, for a
    /// ULPDU that `payload_len` octets of gathered payload complete. Bodies and payloads
    /// come from the transmit path, which sizes them to the negotiated FPDU, so the ULPDU
    /// always fits the length field.
    #[inline]
    pub(crate) fn set_header(&mut self, h: &DdpRepr, body: &[u8], payload_len: usize) {
        let ulpdu_len = h.header_len() + body.len() + payload_len;
        let prefix = mpa::fpdu_prefix(ulpdu_len).unwrap_or([0xff; 2]);
        debug_assert!(
            ulpdu_len <= mpa::MAX_ULPDU_LEN,
            "ULPDU sized beyond the MPA field"
        );
        let at = prefix.len();
        self.header[..at].copy_from_slice(&prefix);
        // The header array has room for the longest DDP header and control body.
        let n = h.emit(&mut self.header[at..]).unwrap_or(0);
        if !body.is_empty() {
            self.header[at + n..at + n + body.len()].copy_from_slice(body);
        }
        self.header_len = at + n + body.len();
        self.ulpdu_len = ulpdu_len;
        self.data_header = None;
    }
}

/// The one FPDU of a small Send or Write posted to an idle send queue, as the I/O layer
/// writes it straight into its transmit buffer: its DDP/RDMAP header, the one piece of
/// memory its payload is, and whether a CRC follows. No [`TxFpdu`] scratch and no list
/// of chunks: the direct post filled and read back both for every 64-octet message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SmallFpdu {
    /// The DDP/RDMAP header (tagged for a Write, untagged for a Send).
    pub header: DdpRepr,
    /// The payload: the request's one SGE, checked.
    pub payload: Chunk,
    /// Whether the CRC must be computed (else the field is zero).
    pub crc: bool,
}

impl SmallFpdu {
    /// ULPDU length: DDP/RDMAP header and payload.
    #[inline(always)]
    pub fn ulpdu_len(&self) -> usize {
        self.header.header_len() + self.payload.len
    }

    /// Octets on the wire (no markers: the direct post is not used with them).
    #[inline(always)]
    pub fn wire_len(&self) -> usize {
        mpa::fpdu_len(self.ulpdu_len())
    }

    /// Appends the MPA length field and the header to `out`, written in place by the
    /// wire codec, as [`TxFpdu::append_header`] writes a data header.
    #[inline(always)]
    pub fn append_header(&self, out: &mut Vec<u8>) {
        let prefix = mpa::fpdu_prefix(self.ulpdu_len()).unwrap_or([0xff; 2]);
        if self.header.tagged() {
            append_data_header::<TAGGED_DATA_HEADER>(out, prefix, &self.header);
        } else {
            append_data_header::<UNTAGGED_DATA_HEADER>(out, prefix, &self.header);
        }
    }
}

/// Octets of a [`SmallFpdu`]'s MPA length field and header at most (a Send's).
pub const SMALL_HEADER_MAX: usize = UNTAGGED_DATA_HEADER;

/// The single post's FPDU once its length field and header are written (see
/// `Qp::begin_single_small`): where they end, the one piece of memory its payload is,
/// and whether a CRC follows. Its header is not described again: the I/O layer frames
/// the payload after the octets already written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SingleFpdu {
    /// Octets of the MPA length field and the DDP/RDMAP header (16 for a Write, 20
    /// for a Send): the payload starts there.
    pub header_len: usize,
    /// The payload: the request's one SGE, checked.
    pub payload: Chunk,
    /// Whether the CRC must be computed (else the field is zero).
    pub crc: bool,
}

impl SingleFpdu {
    /// ULPDU length: DDP/RDMAP header and payload.
    #[inline(always)]
    pub fn ulpdu_len(&self) -> usize {
        self.header_len - mpa::ULPDU_LEN_LEN + self.payload.len
    }

    /// Octets on the wire (no markers: the direct post is not used with them).
    #[inline(always)]
    pub fn wire_len(&self) -> usize {
        mpa::fpdu_len(self.ulpdu_len())
    }
}

/// Writes the MPA length field and the header `h` of an FPDU carrying `payload`
/// octets at the start of `out`, as [`SmallFpdu::append_header`] appends them, and
/// returns their length; None if the ULPDU would not fit the length field (the
/// transmit path never sizes one so). The fields are stored as words into the fixed
/// array, without the wire codec's length checks; octets of `out` past a Write's
/// header are zeroed (the payload follows there). Always inlined where `h` is built,
/// so that its control octets and its kind fold to constants.
#[inline(always)]
pub(crate) fn write_small_header(
    h: &DdpRepr,
    payload: u32,
    out: &mut [u8; SMALL_HEADER_MAX],
) -> Option<usize> {
    let ulpdu = u16::try_from(h.header_len() + payload as usize).ok()?;
    let [p0, p1] = ulpdu.to_be_bytes();
    let [c0, c1] = h.control_octets();
    let mut w = [0u8; SMALL_HEADER_MAX];
    let (start, fields) = w.split_at_mut(4);
    start.copy_from_slice(&[p0, p1, c0, c1]);
    let len = match h.placement {
        Placement::Tagged { stag, to } => {
            fields[..4].copy_from_slice(&stag.to_be_bytes());
            fields[4..12].copy_from_slice(&to.to_be_bytes());
            TAGGED_DATA_HEADER
        }
        Placement::Untagged {
            rsvd_ulp,
            qn,
            msn,
            mo,
        } => {
            fields[..4].copy_from_slice(&rsvd_ulp.to_be_bytes());
            fields[4..8].copy_from_slice(&qn.to_be_bytes());
            fields[8..12].copy_from_slice(&msn.to_be_bytes());
            fields[12..16].copy_from_slice(&mo.to_be_bytes());
            UNTAGGED_DATA_HEADER
        }
    };
    *out = w;
    Some(len)
}

/// [`softrnic_wire::markers::marked_len`], out of the unmarked transmit path.
#[cold]
#[inline(never)]
fn marked_len(at: u64, plain: usize) -> usize {
    softrnic_wire::markers::marked_len(at, plain)
}

/// Headers of the offending segment, copied into the Terminate we send.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CopiedHeaders {
    /// The offending segment's length (MPA ULPDU length), if it was read.
    pub segment_len: Option<u16>,
    /// The offending DDP header (with RDMAP control) and its length (0: none).
    pub ddp_header: ([u8; UNTAGGED_HEADER_LEN], usize),
    /// The offending Read Request header.
    pub read_request: Option<[u8; READ_REQUEST_LEN]>,
}

impl CopiedHeaders {
    /// The headers of an FPDU whose octets are gone (a fault found when it is
    /// delivered, after the stream moved on): its DDP header written again from `h`
    /// (reserved bits, which a receiver ignores, come back as zero) and its segment
    /// length.
    pub(crate) fn of(h: &DdpRepr, payload_len: usize) -> CopiedHeaders {
        let (bytes, n) = h.to_bytes();
        CopiedHeaders {
            segment_len: u16::try_from(n + payload_len).ok(),
            ddp_header: (bytes, n),
            read_request: None,
        }
    }
}

/// Appends an MPA length field and the DDP/RDMAP header `h`, `N` octets in all, written
/// in place by the wire codec: a fixed length, so no `memset` call, and `emit`'s
/// length checks fold away.
#[inline(always)]
fn append_data_header<const N: usize>(out: &mut Vec<u8>, prefix: [u8; 2], h: &DdpRepr) {
    let at = out.len();
    out.extend_from_slice(&[0u8; N]);
    if let Some(d) = out
        .get_mut(at..)
        .and_then(|d| <&mut [u8; N]>::try_from(d).ok())
    {
        let (length, header) = d.split_at_mut(mpa::ULPDU_LEN_LEN);
        length.copy_from_slice(&prefix);
        // `header` is exactly `h`'s length (N is chosen by `h.tagged()`): cannot fail.
        let _ = h.emit(header);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use softrnic_wire::rdmap::{Opcode, QN_SEND};

    /// The single post's header, written as words into a fixed array, is the one the
    /// wire codec appends, for a Write and for each kind of Send, at field values
    /// whose every octet differs, up to the longest ULPDU the length field holds; one
    /// octet more is refused, not wrapped.
    #[test]
    fn a_written_header_is_the_appended_one() {
        let placements = [
            (
                Opcode::Write,
                Placement::Tagged {
                    stag: 0x0102_0304,
                    to: 0x1112_1314_1516_1718,
                },
            ),
            (
                Opcode::Send,
                Placement::Untagged {
                    rsvd_ulp: 0,
                    qn: QN_SEND,
                    msn: 0x2122_2324,
                    mo: 0,
                },
            ),
            (
                Opcode::SendSeInvalidate,
                Placement::Untagged {
                    rsvd_ulp: 0x3132_3334,
                    qn: QN_SEND,
                    msn: 0x4142_4344,
                    mo: 0x5152_5354,
                },
            ),
        ];
        for (opcode, placement) in placements {
            let h = DdpRepr {
                last: true,
                opcode,
                placement,
            };
            let longest = mpa::MAX_ULPDU_LEN - h.header_len();
            let mut written = [0xeeu8; SMALL_HEADER_MAX];
            assert_eq!(
                write_small_header(&h, longest as u32 + 1, &mut written),
                None,
                "{opcode:?}"
            );
            for len in [0, 8, 1000, longest] {
                let f = SmallFpdu {
                    header: DdpRepr {
                        last: true,
                        opcode,
                        placement,
                    },
                    payload: Chunk {
                        region: RegionId(3),
                        offset: 0,
                        len,
                    },
                    crc: true,
                };
                let mut appended = Vec::new();
                f.append_header(&mut appended);
                let mut written = [0xeeu8; SMALL_HEADER_MAX];
                let n = write_small_header(&f.header, len as u32, &mut written)
                    .expect("fits the length field");
                assert_eq!(n, appended.len(), "{opcode:?} {len}");
                assert_eq!(&written[..n], &appended[..], "{opcode:?} {len}");
            }
        }
    }
}
