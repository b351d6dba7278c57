//! FPDU sizing to the segment being filled, for a transport that packs whole FPDUs
//! into full segments (the own TCP).
//!
//! RFC 5044 asks that an FPDU never cross a segment and lets the sender choose each
//! FPDU's size (up to the MULPDU); a segment may carry several whole FPDUs. Sized to
//! the MSS alone, a large message ends in a small FPDU, and the next message's first
//! FPDU (again of the MSS) cannot join it: its segment leaves nearly empty. Sized to
//! the room left instead, the next message's first FPDU fills that segment, so every
//! segment is full while data is queued and every FPDU starts a segment or follows a
//! whole one.

use super::super::Qp;
use softrnic_wire::mpa;

/// Payload octets an FPDU is made for at least: with less room left, the segment is
/// closed and the FPDU starts the next one (a segment a few octets short of full).
const MIN_PAYLOAD: usize = 64;

/// The segment being filled, as FPDUs are handed out in order.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct SegmentFill {
    /// A segment's payload (the MSS); 0: FPDUs are not sized to it.
    size: u32,
    /// Octets of the open segment taken by the FPDUs handed out (0: a new segment).
    fill: u32,
}

impl SegmentFill {
    /// Sizing to segments of `size` octets (`None`: off).
    pub(crate) fn new(size: Option<u32>) -> SegmentFill {
        SegmentFill {
            size: size.unwrap_or(0),
            fill: 0,
        }
    }

    /// The payload an FPDU whose DDP/RDMAP header is `header` octets may carry, at
    /// most `max`: what fills the open segment, or `max` for a new one.
    pub(crate) fn cap(&self, max: u32, header: usize) -> u32 {
        if self.fill == 0 {
            return max;
        }
        let room = (self.size - self.fill) as usize;
        match mpa::max_ulpdu_for(room) {
            Some(u) if u >= header + MIN_PAYLOAD => ((u - header) as u32).min(max),
            _ => max,
        }
    }

    /// An FPDU of `wire` octets was handed out: it fills the open segment, or (too
    /// large for the room) starts the next one.
    pub(crate) fn add(&mut self, wire: usize) {
        if self.size == 0 {
            return;
        }
        let wire = u32::try_from(wire).unwrap_or(u32::MAX);
        self.fill = if wire <= self.size - self.fill {
            self.fill + wire
        } else {
            wire.min(self.size)
        };
        if self.fill == self.size {
            self.fill = 0;
        }
    }

    /// Whether FPDUs are sized to segments at all.
    pub(crate) fn on(&self) -> bool {
        self.size != 0
    }

    /// Everything handed out has left in segments: the next FPDU starts a new one.
    pub(crate) fn restart(&mut self) {
        self.fill = 0;
    }
}

impl Qp {
    /// The transport packs whole FPDUs into full segments of `size` octets (the own
    /// TCP): each FPDU is sized to the room left in the segment being filled, so that
    /// a message's last FPDU and the next message's first share a segment. `None` (a
    /// kernel socket) keeps the MSS sizing; so do markers, whatever is asked. Call it
    /// after connecting.
    pub fn pack_segments(&mut self, size: Option<usize>) {
        let size = size
            .filter(|_| !self.params.markers_tx)
            .and_then(|s| u32::try_from(s).ok());
        self.tx.pack_segments(size);
    }

    /// Everything handed to the transport has left in segments (none is being
    /// filled): the next FPDU starts a new one. A hint; a missed one costs only a
    /// segment that is not full.
    pub fn segments_sent(&mut self) {
        self.tx.segments_sent();
    }

    /// Whether FPDUs are sized to segments ([`Qp::pack_segments`]): an I/O layer asks
    /// its transport for [`Qp::segments_sent`]'s hint only then.
    #[inline]
    pub fn packs_segments(&self) -> bool {
        self.tx.packs_segments()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use softrnic_wire::ddp::TAGGED_HEADER_LEN;

    const MSS: u32 = 65_495;

    #[test]
    fn a_message_tail_and_the_next_head_fill_one_segment() {
        let max = (mpa::max_ulpdu_for(MSS as usize).unwrap() - TAGGED_HEADER_LEN) as u32;
        let mut s = SegmentFill::new(Some(MSS));
        assert_eq!(s.cap(max, TAGGED_HEADER_LEN), max, "a new segment: the MSS");
        let head = mpa::fpdu_len(max as usize + TAGGED_HEADER_LEN);
        s.add(head);
        // 65,492 of 65,495 taken: no room for an FPDU, the tail starts a segment.
        assert_eq!(s.cap(max, TAGGED_HEADER_LEN), max);
        let tail = mpa::fpdu_len(64 + TAGGED_HEADER_LEN);
        s.add(tail);
        let next = s.cap(max, TAGGED_HEADER_LEN);
        let next_wire = mpa::fpdu_len(next as usize + TAGGED_HEADER_LEN);
        assert_eq!(
            tail + next_wire,
            MSS as usize - 3,
            "whole, 4-aligned, no pad"
        );
        s.add(next_wire);
        assert_eq!(s.cap(max, TAGGED_HEADER_LEN), max);
    }

    #[test]
    fn off_and_small_rooms_keep_the_mss() {
        let mut off = SegmentFill::new(None);
        off.add(100);
        assert_eq!(off.cap(1000, 14), 1000);
        let mut s = SegmentFill::new(Some(400));
        s.add(120);
        assert_eq!(s.cap(1000, 14), 280 - 6 - 14, "the room left");
        s.add(300);
        assert_eq!(
            s.cap(1000, 14),
            100 - 6 - 14,
            "300 did not fit: a new segment"
        );
        s.add(20);
        assert_eq!(
            s.cap(1000, 14),
            1000,
            "80 left: less than the minimum payload"
        );
        s.restart();
        assert_eq!(s.cap(1000, 14), 1000);
    }
}
