//! The receive side of RFC 5044 markers, for a stream whose peer inserts them.
//!
//! A marker sits at every 512th octet of the stream (counted from the first FPDU), so
//! the stream knows where each one is from its position alone: [`RxStream::need`] never
//! asks for octets across a marker position, asks for the marker itself as internal
//! octets, and checks it once complete (reserved half zero, FPDU pointer back to the
//! ULPDU Length field of the FPDU it sits in, or 0 when it sits just before one). The
//! CRC covers the markers inside an FPDU, in stream order (RFC 5044; Wireshark computes
//! it the same way), so with markers the CRC is kept here, over every octet as it is
//! taken, instead of by the per-FPDU [`FpduCheck`](softrnic_wire::mpa::FpduCheck).
//!
//! None of this runs without markers: the stream tests for them once per call.

use super::super::fpdu::Chunk;
use super::{Phase, RxNeed, RxStream, Step};
use softrnic_wire::crc::crc32c_append;
use softrnic_wire::markers::{self, MARKER_LEN, MARKER_SPACING};
use softrnic_wire::mpa::CRC_LEN;
use softrnic_wire::{Result as WireResult, WireError};

/// Marker state of a receive stream.
#[derive(Debug, Clone, Copy)]
pub(super) struct RxMarks {
    /// The marker being read.
    octets: [u8; MARKER_LEN],
    /// Stream position of the current FPDU's first octet (its leading marker, if any).
    fpdu_start: u64,
    crc_on: bool,
    /// CRC32c over the current FPDU's octets so far, markers included.
    crc: u32,
}

impl RxMarks {
    pub(super) fn new(crc_on: bool) -> Self {
        RxMarks {
            octets: [0; MARKER_LEN],
            fpdu_start: 0,
            crc_on,
            crc: 0,
        }
    }

    /// Payload octets placed elsewhere: `append` extends the CRC over them.
    pub(super) fn update_with(&mut self, append: impl FnOnce(u32) -> u32) {
        if self.crc_on {
            self.crc = append(self.crc);
        }
    }

    /// The next FPDU starts at stream position `at`.
    pub(super) fn next_fpdu(&mut self, at: u64) {
        self.fpdu_start = at;
        self.crc = 0;
    }
}

impl RxStream {
    fn marker_offset(&self) -> usize {
        (self.position % MARKER_SPACING) as usize
    }

    /// Whether the next octet belongs to a marker.
    pub(super) fn in_marker(&self) -> bool {
        self.marker_offset() < MARKER_LEN
    }

    /// At an FPDU boundary: whether some or all of the marker that leads the next FPDU
    /// has arrived (that FPDU has begun). A sender never ends its stream with a marker.
    #[cold]
    #[inline(never)]
    pub(super) fn in_leading_marker(&self) -> bool {
        (1..=MARKER_LEN).contains(&self.marker_offset())
    }

    /// [`RxStream::need`] with markers: the marker when one is due, otherwise the
    /// unmarked need cut at the next marker position. Out of line (as every entry
    /// here), so that the unmarked path stays as it was.
    #[cold]
    #[inline(never)]
    pub(super) fn need_marked(&self) -> RxNeed {
        let need = self.need_unmarked();
        if matches!(need, RxNeed::Stopped | RxNeed::Wait) {
            return need;
        }
        let off = self.marker_offset();
        if off < MARKER_LEN {
            return RxNeed::Internal(MARKER_LEN - off);
        }
        let room = MARKER_SPACING as usize - off;
        match need {
            RxNeed::Internal(n) => RxNeed::Internal(n.min(room)),
            RxNeed::Place(c) => RxNeed::Place(Chunk {
                len: c.len.min(room),
                ..c
            }),
            other => other,
        }
    }

    /// Where the octets of a due marker go.
    #[cold]
    #[inline(never)]
    pub(super) fn marker_buffer(&mut self) -> &mut [u8] {
        let off = self.marker_offset();
        match &mut self.marks {
            Some(m) => &mut m.octets[off..],
            None => &mut [],
        }
    }

    /// [`RxStream::filled`] with markers.
    #[cold]
    #[inline(never)]
    pub(super) fn filled_marked(&mut self, n: usize) -> WireResult<Step> {
        if self.marked_filled(n)? {
            return Ok(Step::More);
        }
        self.take_filled(n)
    }

    /// [`RxStream::placed_with`] with markers: the CRC goes on over the payload here.
    #[cold]
    #[inline(never)]
    pub(super) fn placed_marked(&mut self, n: usize, crc_append: impl FnOnce(u32) -> u32) {
        if self.dest.is_empty() {
            return;
        }
        if let Some(m) = &mut self.marks {
            m.update_with(crc_append);
        }
        self.advance_placed(n);
    }

    /// `n` octets were written into [`RxStream::buffer`]. A marker's octets are taken
    /// here (true), and the marker is checked once complete. Otherwise (false) the
    /// octets are the FPDU's own, for the ordinary step to take: the CRC is extended
    /// over them (the CRC field aside) and checked when the trailer is complete.
    fn marked_filled(&mut self, n: usize) -> WireResult<bool> {
        let off = self.marker_offset();
        let Some(m) = self.marks.as_mut() else {
            return Ok(false);
        };
        if off < MARKER_LEN {
            let n = n.min(MARKER_LEN - off);
            self.position += n as u64;
            if off + n < MARKER_LEN {
                return Ok(true);
            }
            let at = self.position - MARKER_LEN as u64;
            let reserved = u16::from_be_bytes([m.octets[0], m.octets[1]]);
            let fpduptr = u16::from_be_bytes([m.octets[2], m.octets[3]]);
            let expected = markers::fpdu_pointer(m.fpdu_start, at);
            if reserved != 0 || fpduptr != expected {
                return Err(WireError::BadMarker {
                    reserved,
                    fpduptr,
                    expected,
                });
            }
            if m.crc_on {
                m.crc = crc32c_append(m.crc, &m.octets);
            }
            return Ok(true);
        }
        if !m.crc_on {
            return Ok(false);
        }
        let end = self.have + n.min(self.want - self.have);
        let trailer = self.phase == Phase::Trailer;
        let covered = if trailer {
            self.want - CRC_LEN
        } else {
            self.want
        };
        m.crc = crc32c_append(m.crc, &self.buf[self.have.min(covered)..end.min(covered)]);
        if trailer && end == self.want {
            let f = &self.buf[covered..end];
            let received = u32::from_le_bytes([f[0], f[1], f[2], f[3]]);
            if received != m.crc {
                return Err(WireError::CrcMismatch {
                    received,
                    computed: m.crc,
                });
            }
        }
        Ok(false)
    }
}
