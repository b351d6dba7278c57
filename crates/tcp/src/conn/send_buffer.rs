//! The send buffer: octets queued and not yet acknowledged, kept for retransmission,
//! and the record boundaries the layer above asked us to keep (an FPDU each, so that a
//! segment holds whole FPDUs: RFC 5044's MPA-aware TCP). Both are allocated once, at
//! their bound.

use std::collections::VecDeque;

/// Queued octets, by stream offset (octet 0 is the first after the SYN).
#[derive(Debug)]
pub(crate) struct SendBuffer {
    data: VecDeque<u8>,
    /// Stream offset of `data[0]`: everything before is acknowledged.
    start: u64,
    cap: usize,
    /// Ends of queued records (stream offsets), ascending, all above `start`.
    records: VecDeque<u64>,
    max_records: usize,
}

impl SendBuffer {
    pub fn new(cap: usize, max_records: usize) -> SendBuffer {
        SendBuffer {
            data: VecDeque::with_capacity(cap),
            start: 0,
            cap,
            records: VecDeque::with_capacity(max_records),
            max_records,
        }
    }

    /// Stream offset one past the last queued octet.
    pub fn end(&self) -> u64 {
        self.start + self.data.len() as u64
    }

    pub fn free(&self) -> usize {
        self.cap - self.data.len()
    }

    /// Queues as much of `bytes` as fits; returns how much.
    pub fn write(&mut self, bytes: &[u8]) -> usize {
        let n = bytes.len().min(self.free());
        self.data.extend(&bytes[..n]);
        n
    }

    /// Queues `bytes` whole as one record; false (nothing queued) if it does not fit.
    pub fn write_record(&mut self, bytes: &[u8]) -> bool {
        if bytes.len() > self.free() || self.records.len() == self.max_records {
            return false;
        }
        self.data.extend(bytes);
        if !bytes.is_empty() {
            self.records.push_back(self.end());
        }
        true
    }

    /// Everything before stream offset `off` is acknowledged.
    pub fn ack_to(&mut self, off: u64) {
        let n = off.saturating_sub(self.start).min(self.data.len() as u64);
        self.data.drain(..n as usize);
        self.start += n;
        while self.records.front().is_some_and(|&r| r <= self.start) {
            self.records.pop_front();
        }
    }

    /// The octets of `[from, to)` as (at most) two slices.
    pub fn slices(&self, from: u64, to: u64) -> [&[u8]; 2] {
        let a = (from.saturating_sub(self.start) as usize).min(self.data.len());
        let b = (to.saturating_sub(self.start) as usize).clamp(a, self.data.len());
        let (head, tail) = self.data.as_slices();
        let h = head.len();
        if b <= h {
            [&head[a..b], &[]]
        } else if a >= h {
            [&tail[a - h..b - h], &[]]
        } else {
            [&head[a..], &tail[..b - h]]
        }
    }

    /// Where a segment starting at `from` and allowed up to `to` should end to hold
    /// whole records: the last record end in `(from, to]`, or `to` when none ends there.
    pub fn align(&self, from: u64, to: u64) -> u64 {
        let i = self.records.partition_point(|&r| r <= to);
        match i.checked_sub(1).map(|i| self.records[i]) {
            Some(r) if r > from => r,
            _ => to,
        }
    }

    /// Whether a record ends exactly at `off`.
    pub fn is_boundary(&self, off: u64) -> bool {
        self.records.binary_search(&off).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_across_the_wrap_and_acks() {
        let mut b = SendBuffer::new(8, 4);
        assert_eq!(b.write(b"abcdef"), 6);
        b.ack_to(4);
        assert_eq!(b.write(b"ghijkl"), 6);
        assert_eq!(b.free(), 0);
        let [x, y] = b.slices(5, 12);
        assert_eq!([x, y].concat(), b"fghijkl");
        let [x, y] = b.slices(4, 6);
        assert_eq!([x, y].concat(), b"ef");
        assert_eq!(b.end(), 12);
    }

    #[test]
    fn records_align_segments() {
        let mut b = SendBuffer::new(100, 3);
        assert!(b.write_record(&[1; 10]));
        assert!(b.write_record(&[2; 10]));
        assert!(b.write_record(&[3; 30]));
        assert!(!b.write_record(&[4; 1]), "record limit");
        assert_eq!(b.align(0, 25), 20);
        assert_eq!(b.align(0, 15), 10);
        assert_eq!(b.align(20, 35), 35, "a record longer than the room is cut");
        assert_eq!(b.align(0, 50), 50);
        assert!(b.is_boundary(20) && !b.is_boundary(21));
        b.ack_to(20);
        assert!(b.write_record(&[4; 1]), "acknowledged records make room");
        assert!(!b.write_record(&[5; 70]), "does not fit");
        assert_eq!(b.end(), 51);
    }
}
