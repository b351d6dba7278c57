//! MPA FPDU framing of the full-operation phase (RFC 5044): length prefix, padding,
//! CRC32c and markers, on the sending side and the receiving side.

use crate::crc::crc32c;
use crate::markers::{self, MARKER_LEN, is_marker_pos, marker_bytes};
use crate::{Result, WireError, be16, need, room};

/// Length of the ULPDU Length field.
pub const ULPDU_LEN_LEN: usize = 2;
/// Length of the CRC field.
pub const CRC_LEN: usize = 4;
/// Largest ULPDU the 16-bit length field can announce.
pub const MAX_ULPDU_LEN: usize = u16::MAX as usize;
/// Largest FPDU without markers.
pub const MAX_FPDU_LEN: usize = ULPDU_LEN_LEN + MAX_ULPDU_LEN + 3 + CRC_LEN;

/// Pad octets after a ULPDU so that length field + ULPDU is a multiple of 4: the
/// negated length's two low bits (one `neg` and one `and`; the two remainders were
/// about twice that on every small FPDU sent, once for its length, once for its pad).
#[inline]
pub fn pad_len(ulpdu_len: usize) -> usize {
    (ulpdu_len + ULPDU_LEN_LEN).wrapping_neg() & 3
}

/// FPDU length (without markers) for a ULPDU of `ulpdu_len` octets.
#[inline]
pub fn fpdu_len(ulpdu_len: usize) -> usize {
    ULPDU_LEN_LEN + ulpdu_len + pad_len(ulpdu_len) + CRC_LEN
}

/// The ULPDU length that fills an FPDU of at most `fpdu_budget` octets (for sizing
/// FPDUs to the TCP MSS); `None` if not even an empty ULPDU fits.
pub fn max_ulpdu_for(fpdu_budget: usize) -> Option<usize> {
    let body = fpdu_budget.checked_sub(ULPDU_LEN_LEN + CRC_LEN)?;
    // Length field + ULPDU must be a multiple of 4, and then no pad is needed.
    let aligned = (body + ULPDU_LEN_LEN) / 4 * 4;
    aligned
        .checked_sub(ULPDU_LEN_LEN)
        .map(|u| u.min(MAX_ULPDU_LEN))
}

/// Where the framer writes: a slice it fills, or a vector it extends.
trait FrameOut {
    fn put(&mut self, data: &[u8]);
    /// The FPDU's octets written so far.
    fn written(&self) -> &[u8];
}

/// Fills a slice sized for the FPDU beforehand (`markers::marked_len`).
struct SliceOut<'o> {
    out: &'o mut [u8],
    at: usize,
}

impl FrameOut for SliceOut<'_> {
    fn put(&mut self, data: &[u8]) {
        self.out[self.at..self.at + data.len()].copy_from_slice(data);
        self.at += data.len();
    }
    fn written(&self) -> &[u8] {
        &self.out[..self.at]
    }
}

/// Extends a vector (nothing zero-filled first).
struct VecOut<'o> {
    out: &'o mut Vec<u8>,
    start: usize,
}

impl FrameOut for VecOut<'_> {
    fn put(&mut self, data: &[u8]) {
        self.out.extend_from_slice(data);
    }
    fn written(&self) -> &[u8] {
        &self.out[self.start..]
    }
}

/// Writes octets, inserting markers when enabled.
struct MarkedWriter<O: FrameOut> {
    out: O,
    /// Marked-stream position of the FPDU start and of the next octet, if markers are on.
    marks: Option<(u64, u64)>,
}

impl<O: FrameOut> MarkedWriter<O> {
    fn marker_if_due(&mut self) {
        if let Some((start, pos)) = self.marks
            && is_marker_pos(pos)
        {
            self.out
                .put(&marker_bytes(markers::fpdu_pointer(start, pos)));
            self.marks = Some((start, pos + MARKER_LEN as u64));
        }
    }

    fn put(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            self.marker_if_due();
            let take = match self.marks {
                Some((_, pos)) => data
                    .len()
                    .min((markers::MARKER_SPACING - pos % markers::MARKER_SPACING) as usize),
                None => data.len(),
            };
            self.out.put(&data[..take]);
            if let Some((start, pos)) = self.marks {
                self.marks = Some((start, pos + take as u64));
            }
            data = &data[take..];
        }
    }
}

/// Frames one FPDU into `out` (see [`emit_fpdu_padded`]); returns its length. The
/// caller has checked the ULPDU length.
fn frame<O: FrameOut>(
    parts: &[&[u8]],
    pad: [u8; 3],
    crc: bool,
    marker_pos: Option<u64>,
    out: O,
) -> usize {
    let ulpdu_len: usize = parts.iter().map(|p| p.len()).sum();
    let mut w = MarkedWriter {
        out,
        marks: marker_pos.map(|s| (s, s)),
    };
    w.put(&(ulpdu_len as u16).to_be_bytes());
    for p in parts {
        w.put(p);
    }
    w.put(&pad[..pad_len(ulpdu_len)]);
    w.marker_if_due();
    let c = if crc { crc32c(w.out.written()) } else { 0 };
    w.put(&c.to_le_bytes());
    w.out.written().len()
}

/// Writes one FPDU whose ULPDU is the concatenation of `parts`: length, ULPDU, zero
/// padding, CRC32c (or zero when `crc` is off). With `marker_pos` set, the FPDU starts
/// at that marked-stream position and markers are inserted (and covered by the CRC).
/// Returns the octets written.
pub fn emit_fpdu(
    parts: &[&[u8]],
    crc: bool,
    marker_pos: Option<u64>,
    out: &mut [u8],
) -> Result<usize> {
    emit_fpdu_padded(parts, [0; 3], crc, marker_pos, out)
}

/// As [`emit_fpdu`], with the given pad octets (receivers ignore them, and Linux siw does
/// not zero them, so re-emitting a captured FPDU exactly needs them).
pub fn emit_fpdu_padded(
    parts: &[&[u8]],
    pad: [u8; 3],
    crc: bool,
    marker_pos: Option<u64>,
    out: &mut [u8],
) -> Result<usize> {
    let ulpdu_len: usize = parts.iter().map(|p| p.len()).sum();
    if ulpdu_len > MAX_ULPDU_LEN {
        return Err(WireError::BadUlpduLength(u16::MAX));
    }
    let plain = fpdu_len(ulpdu_len);
    let total = marker_pos.map_or(plain, |start| markers::marked_len(start, plain));
    room(out, total)?;
    Ok(frame(parts, pad, crc, marker_pos, SliceOut { out, at: 0 }))
}

/// As [`emit_fpdu`], appending the FPDU to `out` (for a sender that frames into a
/// growing buffer: nothing is zero-filled first). Returns the octets appended.
pub fn append_fpdu(
    parts: &[&[u8]],
    crc: bool,
    marker_pos: Option<u64>,
    out: &mut Vec<u8>,
) -> Result<usize> {
    let ulpdu_len: usize = parts.iter().map(|p| p.len()).sum();
    if ulpdu_len > MAX_ULPDU_LEN {
        return Err(WireError::BadUlpduLength(u16::MAX));
    }
    let plain = fpdu_len(ulpdu_len);
    out.reserve(marker_pos.map_or(plain, |start| markers::marked_len(start, plain)));
    let start = out.len();
    Ok(frame(parts, [0; 3], crc, marker_pos, VecOut { out, start }))
}

/// The ULPDU Length field that opens an FPDU sent by gather (no markers); fails for a
/// ULPDU longer than the field can announce.
#[inline]
pub fn fpdu_prefix(ulpdu_len: usize) -> Result<[u8; ULPDU_LEN_LEN]> {
    u16::try_from(ulpdu_len)
        .map(u16::to_be_bytes)
        .map_err(|_| WireError::BadUlpduLength(u16::MAX))
}

/// The octets that follow a ULPDU sent by gather (no markers): pad and CRC field.
/// Returns the buffer and how many of its octets to send.
#[inline]
pub fn fpdu_trailer(ulpdu_len: usize, crc: u32) -> ([u8; 7], usize) {
    let pad = pad_len(ulpdu_len);
    let mut t = [0u8; 7];
    t[pad..pad + CRC_LEN].copy_from_slice(&crc.to_le_bytes());
    (t, pad + CRC_LEN)
}

/// Octets after a ULPDU of `ulpdu_len` octets: pad and CRC field (no markers).
pub fn trailer_len(ulpdu_len: usize) -> usize {
    pad_len(ulpdu_len) + CRC_LEN
}

/// Receive side of FPDU framing for a receiver that takes an FPDU in pieces and places
/// its payload itself (no markers): it learns the ULPDU length from the prefix, keeps
/// the running CRC32c over every octet handed to it, and checks the trailer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FpduCheck {
    crc_on: bool,
    crc: u32,
    ulpdu_len: usize,
}

impl FpduCheck {
    /// A check for the FPDU whose ULPDU Length field is `prefix`; `crc_on` when CRC was
    /// negotiated (otherwise the CRC field is not checked).
    #[inline]
    pub fn begin(prefix: [u8; ULPDU_LEN_LEN], crc_on: bool) -> Self {
        FpduCheck {
            crc_on,
            crc: if crc_on { crc32c(&prefix) } else { 0 },
            ulpdu_len: usize::from(u16::from_be_bytes(prefix)),
        }
    }

    /// The ULPDU length the prefix announced.
    pub fn ulpdu_len(&self) -> usize {
        self.ulpdu_len
    }

    /// Octets of the trailer (pad and CRC field) that follow the ULPDU.
    pub fn trailer_len(&self) -> usize {
        trailer_len(self.ulpdu_len)
    }

    /// ULPDU octets as they arrive (header, body, or payload held in memory).
    #[inline]
    pub fn update(&mut self, octets: &[u8]) {
        if self.crc_on {
            self.crc = crate::crc::crc32c_append(self.crc, octets);
        }
    }

    /// ULPDU octets the caller holds elsewhere (e.g. read straight into placed memory):
    /// `append` extends a running CRC32c over them; it is called only when CRC is on.
    pub fn update_with(&mut self, append: impl FnOnce(u32) -> u32) {
        if self.crc_on {
            self.crc = append(self.crc);
        }
    }

    /// Checks the trailer (pad and CRC field, [`FpduCheck::trailer_len`] octets).
    #[inline]
    pub fn finish(&self, trailer: &[u8]) -> Result<()> {
        need(trailer, self.trailer_len())?;
        if !self.crc_on {
            return Ok(());
        }
        let pad = pad_len(self.ulpdu_len);
        let computed = crate::crc::crc32c_append(self.crc, &trailer[..pad]);
        let received = crc_field(&trailer[pad..]);
        if computed != received {
            return Err(WireError::CrcMismatch { received, computed });
        }
        Ok(())
    }
}

/// Reads a CRC field (least-significant octet first); callers check the length.
fn crc_field(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// One FPDU taken off a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deframed<'a> {
    /// Octets of the stream this FPDU occupied (markers included).
    pub consumed: usize,
    /// The ULPDU.
    pub ulpdu: &'a [u8],
    /// The pad octets.
    pub pad: &'a [u8],
    /// The CRC field as received.
    pub crc_received: u32,
    /// The CRC computed over the FPDU, when asked for.
    pub crc_computed: Option<u32>,
}

impl Deframed<'_> {
    /// Fails with [`WireError::CrcMismatch`] if a computed CRC differs from the field.
    pub fn check_crc(&self) -> Result<()> {
        match self.crc_computed {
            Some(c) if c != self.crc_received => Err(WireError::CrcMismatch {
                received: self.crc_received,
                computed: c,
            }),
            _ => Ok(()),
        }
    }
}

/// Takes the FPDU at the start of `input`. With `marker_pos` set (the marked-stream
/// position of `input[0]`), markers are checked and removed into `scratch` (which needs
/// [`MAX_FPDU_LEN`] octets; without markers it is not touched). With `compute_crc`, the
/// CRC is computed (check it with [`Deframed::check_crc`]). A short `input` gives
/// [`WireError::Truncated`]: wait for more octets.
pub fn parse_fpdu<'a>(
    input: &'a [u8],
    marker_pos: Option<u64>,
    compute_crc: bool,
    scratch: &'a mut [u8],
) -> Result<Deframed<'a>> {
    let lead = match marker_pos {
        Some(p) if is_marker_pos(p) => MARKER_LEN,
        _ => 0,
    };
    need(input, lead + ULPDU_LEN_LEN)?;
    let ulpdu_len = usize::from(be16(input, lead));
    let plain = fpdu_len(ulpdu_len);
    let (fpdu, consumed): (&[u8], usize) = match marker_pos {
        None => {
            need(input, plain)?;
            (&input[..plain], plain)
        }
        Some(start) => {
            let marked = markers::marked_len(start, plain);
            need(input, marked)?;
            let dst = scratch.get_mut(..plain).ok_or(WireError::BufferTooSmall {
                needed: plain,
                have: 0,
            })?;
            markers::strip(&input[..marked], start, dst)?;
            (&*dst, marked)
        }
    };
    let crc_at = plain - CRC_LEN;
    let crc_received = crc_field(&fpdu[crc_at..]);
    // The CRC covers everything before the CRC field as it was on the wire.
    let crc_computed = compute_crc.then(|| crc32c(&input[..consumed - CRC_LEN]));
    let ulpdu_end = ULPDU_LEN_LEN + ulpdu_len;
    Ok(Deframed {
        consumed,
        ulpdu: &fpdu[ULPDU_LEN_LEN..ulpdu_end],
        pad: &fpdu[ulpdu_end..crc_at],
        crc_received,
        crc_computed,
    })
}

/// Takes FPDUs off one direction's stream in order, tracking the marker position and
/// enforcing the negotiated CRC.
#[derive(Debug, Clone)]
pub struct Deframer {
    markers: bool,
    crc: bool,
    pos: u64,
}

impl Deframer {
    /// A deframer for a stream whose first FPDU starts now.
    pub fn new(markers: bool, crc: bool) -> Self {
        Deframer {
            markers,
            crc,
            pos: 0,
        }
    }

    /// Octets of the FPDU stream consumed so far.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Takes the next FPDU from `input`, which must start where the previous one ended.
    /// On error nothing is consumed.
    pub fn next<'a>(&mut self, input: &'a [u8], scratch: &'a mut [u8]) -> Result<Deframed<'a>> {
        let marker_pos = self.markers.then_some(self.pos);
        let d = parse_fpdu(input, marker_pos, self.crc, scratch)?;
        d.check_crc()?;
        self.pos += d.consumed as u64;
        Ok(d)
    }
}
