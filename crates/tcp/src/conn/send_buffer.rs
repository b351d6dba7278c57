//! The send buffer: octets queued and not yet acknowledged, kept for retransmission,
//! and the record boundaries the layer above asked us to keep (an FPDU each, so that a
//! segment holds whole FPDUs: RFC 5044's MPA-aware TCP).
//!
//! Octets are kept in chunks: buffers of a fixed size that fill in turn and are reused
//! once acknowledged (so the steady state allocates nothing), and, on a link that can
//! carry a packet's payload by reference ([`crate::Config::checksum_offload`]: an
//! in-process network), a chunk of its own for each large record, which a packet may
//! share ([`SendBuffer::lend`]) instead of copying it: the receiver may still hold it
//! after we no longer do.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;

/// A payload a packet carries by reference: `range` of a chunk of the sender's send
/// buffer, shared (never written again) until everyone holding it lets it go.
#[derive(Debug, Clone)]
pub struct Lent {
    pub chunk: Arc<Vec<u8>>,
    pub range: Range<usize>,
}

impl Lent {
    /// The payload's octets.
    pub fn octets(&self) -> &[u8] {
        &self.chunk[self.range.clone()]
    }
}

#[derive(Debug)]
enum Store {
    /// Fills up to the chunk size, then the next chunk takes over.
    Own(Vec<u8>),
    /// One record, shared with the packets that carry it.
    Shared(Arc<Vec<u8>>),
}

#[derive(Debug)]
struct Chunk {
    /// Stream offset of the chunk's first octet.
    start: u64,
    store: Store,
}

impl Chunk {
    fn octets(&self) -> &[u8] {
        match &self.store {
            Store::Own(v) => v,
            Store::Shared(a) => a,
        }
    }

    fn end(&self) -> u64 {
        self.start + self.octets().len() as u64
    }

    fn shared(&self) -> bool {
        matches!(self.store, Store::Shared(_))
    }
}

/// Hands a record's parts, in order, to the function it is given.
pub type Feed<'a> = dyn FnMut(&mut dyn FnMut(&[u8])) + 'a;

/// Queued octets, by stream offset (octet 0 is the first after the SYN).
#[derive(Debug)]
pub(crate) struct SendBuffer {
    chunks: VecDeque<Chunk>,
    /// Acknowledged chunks' buffers, for reuse.
    spare: Vec<Vec<u8>>,
    /// Acknowledged shared chunks, which a receiver may still hold: reused once it
    /// no longer does (fresh memory for every large record would cost page faults);
    /// as many as the buffer's size at most.
    lent_out: VecDeque<Arc<Vec<u8>>>,
    /// The size of a chunk that fills in turn: at least a segment, so that a segment
    /// spans two at most.
    chunk_size: usize,
    /// Records at least this long get a chunk of their own that packets may share.
    share_min: Option<usize>,
    /// Stream offset of the first octet kept: everything before is acknowledged.
    start: u64,
    /// Stream offset one past the last queued octet.
    end: u64,
    cap: usize,
    /// Ends of queued records (stream offsets), ascending, all above `start`.
    records: VecDeque<u64>,
    max_records: usize,
    /// The payload of one segment (the send MSS): records that fit one together are
    /// kept in one chunk (see [`SendBuffer::write_record_with`]).
    segment: usize,
    /// Octets below this offset have been sent (at least once): never moved.
    sent_to: u64,
}

/// The chunk size when the buffer and the segment allow it.
const CHUNK: usize = 64 * 1024;

/// Acknowledged shared chunks kept for reuse at most.
const MAX_LENT_OUT: usize = 64;

impl SendBuffer {
    /// A buffer of `cap` octets for segments of `mss` payload at most; `share_min`:
    /// records this long or longer may be lent to packets.
    pub fn new(cap: usize, max_records: usize, mss: usize, share_min: Option<usize>) -> Self {
        let chunk_size = CHUNK.max(mss).min(cap.max(mss)).max(1);
        let chunks = cap.div_ceil(chunk_size) + 2 + share_min.map_or(0, |m| cap / m.max(1) + 1);
        SendBuffer {
            chunks: VecDeque::with_capacity(chunks),
            spare: Vec::new(),
            lent_out: VecDeque::with_capacity(MAX_LENT_OUT),
            chunk_size,
            share_min,
            start: 0,
            end: 0,
            cap,
            records: VecDeque::with_capacity(max_records),
            max_records,
            segment: mss.max(1),
            sent_to: 0,
        }
    }

    /// The segment payload agreed with the peer (the send MSS).
    pub fn set_segment(&mut self, mss: usize) {
        self.segment = mss.max(1);
    }

    /// Everything below offset `off` has been sent at least once.
    pub fn sent_to(&mut self, off: u64) {
        self.sent_to = self.sent_to.max(off);
    }

    /// Stream offset one past the last queued octet.
    pub fn end(&self) -> u64 {
        self.end
    }

    pub fn free(&self) -> usize {
        self.cap - (self.end - self.start) as usize
    }

    /// Appends `bytes` (which fit) to the chunks that fill in turn.
    fn append(&mut self, bytes: &[u8]) {
        // Most often the last chunk has room for all of it.
        if let Some(Chunk {
            store: Store::Own(v),
            ..
        }) = self.chunks.back_mut()
            && self.chunk_size - v.len() >= bytes.len()
        {
            v.extend_from_slice(bytes);
            self.end += bytes.len() as u64;
            return;
        }
        self.append_across(bytes);
    }

    /// [`SendBuffer::append`] into new chunks as they fill.
    fn append_across(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let room = match self.chunks.back() {
                Some(Chunk {
                    store: Store::Own(v),
                    ..
                }) => self.chunk_size - v.len(),
                _ => 0,
            };
            if room == 0 {
                let mut v = self
                    .spare
                    .pop()
                    .unwrap_or_else(|| Vec::with_capacity(self.chunk_size));
                v.clear();
                self.chunks.push_back(Chunk {
                    start: self.end,
                    store: Store::Own(v),
                });
                continue;
            }
            let n = room.min(bytes.len());
            if let Some(Chunk {
                store: Store::Own(v),
                ..
            }) = self.chunks.back_mut()
            {
                v.extend_from_slice(&bytes[..n]);
            }
            self.end += n as u64;
            bytes = &bytes[n..];
        }
    }

    /// Queues as much of `bytes` as fits; returns how much.
    pub fn write(&mut self, bytes: &[u8]) -> usize {
        let n = bytes.len().min(self.free());
        self.append(&bytes[..n]);
        n
    }

    /// Queues `bytes` whole as one record; false (nothing queued) if it does not fit.
    pub fn write_record(&mut self, bytes: &[u8]) -> bool {
        if self.share_min.is_some_and(|m| bytes.len() >= m) {
            return self.write_record_parts(&[bytes]);
        }
        if bytes.len() > self.free() || self.records.len() == self.max_records {
            return false;
        }
        if !self.extend_shared(bytes.len(), &mut |put| put(bytes)) {
            self.append(bytes);
        }
        if !bytes.is_empty() {
            self.records.push_back(self.end);
        }
        true
    }

    /// Queues the concatenation of `parts` whole as one record (an FPDU given as a
    /// gather list); false (nothing queued) if it does not fit.
    pub fn write_record_parts(&mut self, parts: &[&[u8]]) -> bool {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        self.write_record_with(len, &mut |put| {
            for p in parts {
                put(p);
            }
        })
    }

    /// Queues a record of `len` octets whole, or nothing (false) if it does not fit:
    /// `feed` hands its parts, in order, to the function it is given, `len` octets in
    /// all (a gather list that cannot be collected, say).
    pub fn write_record_with(&mut self, len: usize, feed: &mut Feed<'_>) -> bool {
        // A record shared by packets needs its start to be a boundary too.
        let share = self.share_min.is_some_and(|m| len >= m);
        let bounds = 1 + usize::from(share);
        if len > self.free() || self.records.len() + bounds > self.max_records {
            return false;
        }
        if share {
            if self.records.back() != Some(&self.end) && self.end > self.start {
                self.records.push_back(self.end);
            }
            // Small records just before it that share its segment move into its chunk,
            // so the segment is carried by reference whole.
            let moved = self.open_tail(len);
            let whole = moved + len;
            // Room to grow to a segment (see `extend_shared`).
            let mut v = self.reuse_shared(whole.max(self.segment));
            if moved > 0
                && let Some(Chunk {
                    store: Store::Own(o),
                    ..
                }) = self.chunks.back_mut()
            {
                let at = o.len() - moved;
                v.extend_from_slice(&o[at..]);
                o.truncate(at);
                if o.is_empty()
                    && let Some(Chunk {
                        store: Store::Own(o),
                        ..
                    }) = self.chunks.pop_back()
                    && self.spare.len() <= self.cap / self.chunk_size
                {
                    self.spare.push(o);
                }
            }
            feed(&mut |p| {
                let n = p.len().min(whole - v.len());
                v.extend_from_slice(&p[..n]);
            });
            // A feed that falls short leaves zeros: never more or fewer than `len`.
            v.resize(whole, 0);
            self.chunks.push_back(Chunk {
                start: self.end - moved as u64,
                store: Store::Shared(Arc::new(v)),
            });
            self.end += len as u64;
        } else if !self.extend_shared(len, feed) {
            let target = self.end + len as u64;
            feed(&mut |p| {
                let n = p.len().min((target - self.end) as usize);
                self.append(&p[..n]);
            });
            if self.end < target {
                self.append(&vec![0; (target - self.end) as usize]);
            }
        }
        if len > 0 {
            self.records.push_back(self.end);
        }
        true
    }

    /// Octets at the end of the last chunk, a copied one, that whole unsent records
    /// fill and that a record of `len` octets could join in one segment (0 if none):
    /// they start at a record end or at the first octet not yet sent.
    fn open_tail(&self, len: usize) -> usize {
        let Some(Chunk {
            start,
            store: Store::Own(_),
        }) = self.chunks.back()
        else {
            return 0;
        };
        if self.records.back() != Some(&self.end) {
            return 0;
        }
        let room = self.segment.saturating_sub(len) as u64;
        let mut moved = 0;
        for &r in self.records.iter().rev().skip(1) {
            if r < *start || r < self.sent_to || self.end - r > room {
                return moved;
            }
            moved = (self.end - r) as usize;
        }
        // The first unsent octet starts the next segment: a boundary too.
        if self.sent_to >= *start && self.end - self.sent_to <= room {
            moved = (self.end - self.sent_to) as usize;
        }
        moved
    }

    /// Appends a small record of `len` octets to the last chunk if that is a shared one
    /// no packet holds now and both fit one segment: the segment then carries both by
    /// reference (a shared chunk travels alone). False (nothing done) otherwise.
    fn extend_shared(&mut self, len: usize, feed: &mut Feed<'_>) -> bool {
        let segment = self.segment;
        let Some(Chunk {
            store: Store::Shared(a),
            ..
        }) = self.chunks.back_mut()
        else {
            return false;
        };
        let Some(v) = Arc::get_mut(a).filter(|v| v.len() + len <= segment) else {
            return false;
        };
        let whole = v.len() + len;
        feed(&mut |p| {
            let n = p.len().min(whole - v.len());
            v.extend_from_slice(&p[..n]);
        });
        v.resize(whole, 0);
        self.end += len as u64;
        true
    }

    /// What the shared chunks kept for reuse hold (at most the buffer's size).
    fn lent_out_bytes(&self) -> usize {
        self.lent_out.iter().map(|a| a.capacity()).sum()
    }

    /// An empty buffer for a shared chunk of `len` octets: one that no receiver holds
    /// any more if there is one, else a new one.
    fn reuse_shared(&mut self, len: usize) -> Vec<u8> {
        for _ in 0..self.lent_out.len() {
            let Some(a) = self.lent_out.pop_front() else {
                break;
            };
            match Arc::try_unwrap(a) {
                Ok(mut v) => {
                    v.clear();
                    v.reserve(len);
                    return v;
                }
                Err(a) => self.lent_out.push_back(a),
            }
        }
        Vec::with_capacity(len)
    }

    /// Everything before stream offset `off` is acknowledged.
    pub fn ack_to(&mut self, off: u64) {
        let off = off.clamp(self.start, self.end);
        self.start = off;
        while self.chunks.front().is_some_and(|c| c.end() <= off) {
            let Some(c) = self.chunks.pop_front() else {
                break;
            };
            match c.store {
                Store::Own(v) if self.spare.len() <= self.cap / self.chunk_size => {
                    self.spare.push(v);
                }
                Store::Shared(a)
                    if self.lent_out.len() < MAX_LENT_OUT
                        && self.lent_out_bytes() + a.capacity() <= self.cap =>
                {
                    self.lent_out.push_back(a);
                }
                _ => {}
            }
        }
        while self.records.front().is_some_and(|&r| r <= self.start) {
            self.records.pop_front();
        }
    }

    /// The index of the chunk holding stream offset `off`.
    fn chunk_at(&self, off: u64) -> Option<usize> {
        let i = self.chunks.partition_point(|c| c.end() <= off);
        (i < self.chunks.len() && self.chunks[i].start <= off).then_some(i)
    }

    /// The octets of `[from, to)` as (at most) two slices: a segment spans two
    /// chunks at most ([`SendBuffer::align`] sees to that).
    pub fn slices(&self, from: u64, to: u64) -> [&[u8]; 2] {
        let from = from.max(self.start);
        let to = to.min(self.end);
        let mut out: [&[u8]; 2] = [&[], &[]];
        let Some(i) = self.chunk_at(from).filter(|_| from < to) else {
            return out;
        };
        let mut at = from;
        for (k, c) in self.chunks.range(i..).take(2).enumerate() {
            let a = (at - c.start) as usize;
            let b = (to.min(c.end()) - c.start) as usize;
            out[k] = &c.octets()[a..b];
            at = c.end();
            if at >= to {
                break;
            }
        }
        out
    }

    /// `[from, to)` by reference, if it lies in a shared chunk.
    pub fn lend(&self, from: u64, to: u64) -> Option<Lent> {
        let c = &self.chunks[self.chunk_at(from)?];
        match &c.store {
            Store::Shared(a) if to <= c.end() && from < to => Some(Lent {
                chunk: a.clone(),
                range: (from - c.start) as usize..(to - c.start) as usize,
            }),
            _ => None,
        }
    }

    /// Where a segment starting at `from` and allowed up to `to` should end to hold
    /// whole records: the last record end in `(from, to]`, or `to` when none ends there.
    /// A shared chunk travels alone, and a segment spans two chunks at most.
    pub fn align(&self, from: u64, to: u64) -> u64 {
        let to = match self.chunk_at(from) {
            Some(i) => {
                let c = &self.chunks[i];
                let next = self.chunks.get(i + 1);
                let limit = if c.shared() || next.is_none_or(Chunk::shared) {
                    c.end()
                } else {
                    next.map_or(c.end(), Chunk::end)
                };
                to.min(limit)
            }
            None => to,
        };
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
        let mut b = SendBuffer::new(8, 4, 8, None);
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
        let mut b = SendBuffer::new(100, 3, 100, None);
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

    #[test]
    fn large_records_get_shared_chunks_that_segments_carry_alone() {
        // Segments of 13: no two of these records fit one together.
        let mut b = SendBuffer::new(100, 16, 13, Some(10));
        assert_eq!(b.write(b"abc"), 3);
        assert!(b.write_record(b"0123456789ab"), "12 >= 10: shared");
        assert!(b.write_record_parts(&[b"de", b"f"]), "3: copied");
        assert!(b.write_record_parts(&[b"ABCDE", b"FGHIJK"]), "11: shared");
        assert_eq!(b.end(), 29);
        // The plain octets end where the shared record starts (a boundary now).
        assert!(b.is_boundary(3));
        assert_eq!(b.align(0, 20), 3);
        assert_eq!(b.align(3, 29), 15, "a shared chunk travels alone");
        assert_eq!(b.align(5, 9), 9, "cut inside it at the room");
        assert_eq!(b.align(15, 29), 18, "up to the next shared chunk");
        assert_eq!(b.align(18, 29), 29);
        let l = b.lend(5, 9).unwrap();
        assert_eq!(l.octets(), b"2345");
        assert!(b.lend(15, 18).is_none(), "copied octets are not lent");
        assert!(b.lend(14, 16).is_none(), "across chunks");
        assert_eq!(b.lend(18, 29).unwrap().octets(), b"ABCDEFGHIJK");
        let [x, y] = b.slices(1, 5);
        assert_eq!([x, y].concat(), b"bc01");
        // The lent payload outlives its acknowledgement.
        b.ack_to(20);
        assert_eq!(l.octets(), b"2345");
        assert!(b.lend(5, 9).is_none());
        assert_eq!(b.slices(20, 22)[0], b"CD");
        assert_eq!(b.free(), 100 - 9);
    }

    #[test]
    fn records_that_fit_one_segment_share_a_chunk_lent_whole() {
        // Segments of 20, records of 10 or more shared.
        let mut b = SendBuffer::new(100, 16, 20, Some(10));
        assert!(b.write_record(b"ab"), "small: copied");
        assert!(b.write_record(b"cd"));
        assert!(
            b.write_record(b"0123456789ABCDEF"),
            "16: shared, with both before it"
        );
        assert_eq!(b.align(0, 20), 20, "one segment of three whole records");
        assert_eq!(b.lend(0, 20).unwrap().octets(), b"abcd0123456789ABCDEF");
        assert!(b.is_boundary(2) && b.is_boundary(4) && b.is_boundary(20));
        // A small record after it joins its chunk while no packet holds it and the
        // segment has room; the next does not (the segment is full).
        let mut c = SendBuffer::new(100, 16, 20, Some(10));
        assert!(c.write_record(b"0123456789AB"));
        assert!(c.write_record_parts(&[b"cd", b"e"]));
        assert_eq!(c.align(0, 20), 15);
        assert_eq!(c.lend(0, 15).unwrap().octets(), b"0123456789ABcde");
        assert!(c.write_record(b"fghijk"), "15 + 6 > 20: copied");
        assert_eq!(c.align(0, 20), 15, "a shared chunk still travels alone");
        assert_eq!(c.slices(15, 21)[0], b"fghijk");
        // Held by a packet: never written again.
        let mut d = SendBuffer::new(100, 16, 20, Some(10));
        assert!(d.write_record(b"0123456789AB"));
        let held = d.lend(0, 12).unwrap();
        assert!(d.write_record(b"cd"));
        assert_eq!(held.octets(), b"0123456789AB");
        assert_eq!(d.align(0, 20), 12);
        assert_eq!(d.slices(12, 14)[0], b"cd");
    }

    #[test]
    fn records_already_sent_stay_where_they_are() {
        let mut b = SendBuffer::new(100, 16, 20, Some(10));
        assert!(b.write_record(b"ab"));
        assert!(b.write_record(b"cd"));
        b.sent_to(2);
        assert!(b.write_record(b"0123456789ABCDEF"));
        assert_eq!(b.align(0, 20), 2, "the sent record keeps its chunk");
        assert_eq!(b.align(2, 22), 20);
        assert_eq!(b.lend(2, 20).unwrap().octets(), b"cd0123456789ABCDEF");
        assert_eq!(b.slices(0, 2)[0], b"ab");
    }

    #[test]
    fn chunks_are_reused_once_acknowledged() {
        let mut b = SendBuffer::new(10, 8, 4, None);
        for round in 0..50u8 {
            let data = [round; 7];
            assert_eq!(b.write(&data), 7);
            let [x, y] = b.slices(b.end() - 7, b.end());
            assert_eq!([x, y].concat(), data);
            b.ack_to(b.end());
        }
        assert!(b.chunks.len() <= 1 && b.spare.len() <= 2);
    }

    #[test]
    fn shared_chunks_are_reused_once_no_receiver_holds_them() {
        let mut b = SendBuffer::new(100, 16, 20, Some(10));
        assert!(b.write_record(&[1; 12]));
        let held = b.lend(0, 12).unwrap();
        let first = held.chunk.as_ptr();
        b.ack_to(12);
        assert!(b.write_record(&[2; 12]));
        assert_ne!(b.lend(12, 24).unwrap().chunk.as_ptr(), first, "still held");
        assert_eq!(held.octets(), &[1; 12], "and never written");
        drop(held);
        b.ack_to(24);
        assert!(b.write_record(&[3; 12]));
        let again = b.lend(24, 36).unwrap();
        assert_eq!(again.octets(), &[3; 12]);
        assert_eq!(
            again.chunk.as_ptr(),
            first,
            "a chunk nobody holds is reused"
        );
    }
}
