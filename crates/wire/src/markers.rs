//! MPA markers (RFC 5044 section 5): a 4-octet marker every 512 octets of a direction's
//! FPDU stream, so that a receiver that lost its place can find the next FPDU header.
//!
//! Positions here count octets of the *marked* stream of one direction, from the first
//! octet after the MPA request/reply frame (position 0, where the first marker sits).
//! Every FPDU starts at a multiple of 4, so a marker never splits the 2-octet ULPDU
//! length or the 4-octet CRC.
//!
//! A marker belongs to the FPDU whose octets surround it; a marker that falls exactly on
//! an FPDU boundary belongs to the FPDU that starts there and is covered by its CRC. Its
//! FPDU pointer (FPDUPTR) counts the octets from that FPDU's ULPDU Length field back to
//! the marker; a marker placed just in front of the ULPDU Length field has FPDUPTR 0.
//! Linux siw refuses markers, so this follows the RFC's text and is tested against
//! itself, not against a peer.

use crate::{Result, WireError, be16};

/// Length of one marker.
pub const MARKER_LEN: usize = 4;
/// Octets from one marker to the next.
pub const MARKER_SPACING: u64 = 512;

/// Whether a marker sits at this marked-stream position.
pub fn is_marker_pos(pos: u64) -> bool {
    pos.is_multiple_of(MARKER_SPACING)
}

/// Octets an unmarked run of `len` octets occupies once markers are inserted, when its
/// first octet lands at marked position `start` (a marker due at `start` is included).
pub fn marked_len(start: u64, len: usize) -> usize {
    let mut pos = start;
    let mut left = len as u64;
    while left > 0 {
        if is_marker_pos(pos) {
            pos += MARKER_LEN as u64;
        }
        let room = MARKER_SPACING - pos % MARKER_SPACING;
        let take = left.min(room);
        pos += take;
        left -= take;
    }
    (pos - start) as usize
}

/// The longest unmarked FPDU that stays within `max` octets once its markers are
/// inserted, wherever in the stream it starts: room for one marker per 512 octets and
/// one more (RFC 5044 sizes the MULPDU the same way, from the EMSS).
pub fn unmarked_budget(max: usize) -> usize {
    max.saturating_sub(MARKER_LEN * (max.div_ceil(MARKER_SPACING as usize) + 1))
}

/// The FPDUPTR a marker at `marker_pos` carries inside the FPDU starting at `fpdu_start`.
pub fn fpdu_pointer(fpdu_start: u64, marker_pos: u64) -> u16 {
    // A leading marker sits before the ULPDU Length field, which is then 4 octets later.
    let header = if is_marker_pos(fpdu_start) {
        fpdu_start + MARKER_LEN as u64
    } else {
        fpdu_start
    };
    marker_pos.saturating_sub(header) as u16
}

/// The 4 octets of a marker.
pub fn marker_bytes(fpduptr: u16) -> [u8; MARKER_LEN] {
    let p = fpduptr.to_be_bytes();
    [0, 0, p[0], p[1]]
}

/// Removes markers from the marked octets of one FPDU that starts at marked position
/// `fpdu_start`, copying the other octets into `out` (which must hold exactly the
/// unmarked FPDU), and checks each marker: reserved half zero, FPDUPTR as framed.
pub fn strip(marked: &[u8], fpdu_start: u64, out: &mut [u8]) -> Result<()> {
    let mut pos = fpdu_start;
    let mut src = 0usize;
    let mut dst = 0usize;
    while dst < out.len() {
        if is_marker_pos(pos) {
            let m = marked
                .get(src..src + MARKER_LEN)
                .ok_or(WireError::Truncated {
                    needed: src + MARKER_LEN,
                    have: marked.len(),
                })?;
            let reserved = be16(m, 0);
            let fpduptr = be16(m, 2);
            let expected = fpdu_pointer(fpdu_start, pos);
            if reserved != 0 || fpduptr != expected {
                return Err(WireError::BadMarker {
                    reserved,
                    fpduptr,
                    expected,
                });
            }
            src += MARKER_LEN;
            pos += MARKER_LEN as u64;
        }
        let room = (MARKER_SPACING - pos % MARKER_SPACING) as usize;
        let take = (out.len() - dst).min(room);
        let chunk = marked.get(src..src + take).ok_or(WireError::Truncated {
            needed: src + take,
            have: marked.len(),
        })?;
        out[dst..dst + take].copy_from_slice(chunk);
        src += take;
        dst += take;
        pos += take as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marked_len_counts_leading_and_inner_markers() {
        assert_eq!(marked_len(0, 8), 12); // leading marker only
        assert_eq!(marked_len(4, 508), 508); // ends right before the next marker
        assert_eq!(marked_len(4, 512), 516); // crosses one marker
        assert_eq!(marked_len(0, 1024), 1024 + 12); // markers at 0, 512, 1024
        assert_eq!(marked_len(100, 0), 0);
    }

    #[test]
    fn budget_keeps_marked_fpdus_within_max() {
        for max in (64..=4200).chain([65535, 65543]) {
            let budget = unmarked_budget(max);
            // FPDUs are multiples of 4 long and start at multiples of 4.
            let longest = budget / 4 * 4;
            for start in (0..1024u64).step_by(4) {
                let marked = marked_len(start, longest);
                assert!(marked <= max, "max {max}, start {start}: {marked}");
            }
        }
        assert_eq!(unmarked_budget(1448), 1448 - 16);
    }

    #[test]
    fn pointers() {
        assert_eq!(fpdu_pointer(0, 0), 0);
        assert_eq!(fpdu_pointer(0, 512), 508);
        assert_eq!(fpdu_pointer(500, 512), 12);
    }

    #[test]
    fn strip_rejects_bad_marker() {
        let mut marked = vec![0u8; 12];
        marked[3] = 1; // FPDUPTR 1 where 0 is expected
        let mut out = [0u8; 8];
        assert!(matches!(
            strip(&marked, 0, &mut out),
            Err(WireError::BadMarker { fpduptr: 1, .. })
        ));
    }
}
