//! TCP connection tracking and per-direction stream reassembly.
//!
//! Segments are recorded as they arrive and only placed in the stream in
//! [`StreamBuilder::finish`], once the whole capture has been seen: the
//! stream's origin (ISN+1) is then known even if the SYN was captured after
//! other segments, and "first-seen bytes win" is simply arrival order.

use std::collections::{BTreeMap, HashMap};

use crate::decode::TcpSegment;
use crate::{Connection, Direction, Endpoint, SegmentInfo};

/// A segment as captured, before it is placed in the stream.
#[derive(Debug, Clone, Copy)]
struct RawSegment {
    /// Sequence number of the first payload byte (after a SYN's own number).
    seq: u32,
    /// Where the captured payload sits in [`StreamBuilder::arena`].
    data_start: usize,
    data_len: usize,
    /// Payload bytes announced by IP but cut off by the capture.
    missing: u32,
    fin: bool,
    frame: u64,
    timestamp_ns: u64,
}

/// Collects one direction's segments.
#[derive(Debug, Default)]
pub(crate) struct StreamBuilder {
    /// Sequence number of the first SYN seen.
    isn: Option<u32>,
    /// Sequence number of the first packet seen, the origin if no SYN was.
    first_seq: Option<u32>,
    syn: bool,
    fin: bool,
    rst: bool,
    /// Whether any segment carried payload.
    has_payload: bool,
    /// All captured payload, back to back, so segments need no allocation.
    arena: Vec<u8>,
    segments: Vec<RawSegment>,
}

impl StreamBuilder {
    pub(crate) fn push(&mut self, seg: &TcpSegment<'_>, frame: u64, timestamp_ns: u64) {
        self.syn |= seg.syn;
        self.fin |= seg.fin;
        self.rst |= seg.rst;
        if seg.syn && self.isn.is_none() {
            self.isn = Some(seg.seq);
        }
        if self.first_seq.is_none() {
            self.first_seq = Some(seg.seq);
        }
        // A RST's sequence number may be unrelated to the stream (it can echo
        // the peer's ACK), and any data on it is a diagnostic, not stream data.
        if seg.rst {
            return;
        }
        self.has_payload |= !seg.payload.is_empty();
        // Zero-length segments are kept too: their sequence number (the
        // sender's next byte) reveals data that was sent but not captured.
        let data_start = self.arena.len();
        self.arena.extend_from_slice(seg.payload);
        self.segments.push(RawSegment {
            seq: seg.seq.wrapping_add(u32::from(seg.syn)),
            data_start,
            data_len: seg.payload.len(),
            missing: seg.missing,
            fin: seg.fin,
            frame,
            timestamp_ns,
        });
    }

    /// Places all segments and builds the reassembled direction.
    pub(crate) fn finish(self) -> Direction {
        let base = match self.isn {
            Some(isn) => isn.wrapping_add(1),
            None => self.first_seq.unwrap_or(0),
        };

        // Sequence numbers are unwrapped relative to the furthest offset seen
        // so far: a segment lies within 2^31 of it, before or after.
        let mut furthest: u64 = 0;
        // Where the FIN sits: the stream has no bytes beyond it, even though
        // later segments carry sequence numbers one past it.
        let mut fin_at: Option<u64> = None;
        let mut covered = Coverage::default();
        let mut pieces: Vec<Piece> = Vec::new();
        for seg in &self.segments {
            let rel = seg.seq.wrapping_sub(base);
            // Truncating `furthest` to 32 bits is the point: it gives the
            // position within the current sequence-space lap.
            let delta = rel.wrapping_sub(furthest as u32) as i32;
            let start = i128::from(furthest) + i128::from(delta);
            let data_len = i128::try_from(seg.data_len).unwrap_or(i128::MAX);
            let extent = start
                .saturating_add(data_len)
                .saturating_add(i128::from(seg.missing));
            if extent < 0 {
                continue; // entirely before the stream origin
            }
            furthest = furthest.max(clamp_u64(extent));
            if seg.fin {
                let at = clamp_u64(extent);
                fin_at = Some(fin_at.map_or(at, |f| f.min(at)));
            }

            // Bytes before the origin (possible when no SYN was captured and
            // an earlier segment arrives late) cannot be placed.
            let skip = clamp_usize((-start).max(0));
            let start = clamp_u64(start.max(0));
            let Some(len) = seg.data_len.checked_sub(skip) else {
                continue;
            };
            let end = start.saturating_add(u64::try_from(len).unwrap_or(u64::MAX));
            for (a, b) in covered.insert(start, end) {
                let Some(rel_start) = a.checked_sub(start).and_then(|n| usize::try_from(n).ok())
                else {
                    continue;
                };
                pieces.push(Piece {
                    offset: a,
                    len: b.saturating_sub(a),
                    arena_start: seg
                        .data_start
                        .saturating_add(skip)
                        .saturating_add(rel_start),
                    frame: seg.frame,
                    timestamp_ns: seg.timestamp_ns,
                });
            }
        }
        pieces.sort_unstable_by_key(|p| p.offset);

        let mut dir = Direction {
            syn: self.syn,
            fin: self.fin,
            rst: self.rst,
            ..Direction::default()
        };
        let mut cursor: u64 = 0;
        for p in &pieces {
            if p.offset > cursor {
                dir.gaps.push((cursor, p.offset - cursor));
            }
            if dir.gaps.is_empty() {
                let bytes = usize::try_from(p.len)
                    .ok()
                    .and_then(|len| p.arena_start.checked_add(len))
                    .and_then(|end| self.arena.get(p.arena_start..end));
                let (Some(bytes), Ok(len)) = (bytes, u32::try_from(p.len)) else {
                    // Cannot happen (pieces come from the arena); treat it
                    // as missing data rather than panic.
                    dir.gaps.push((p.offset, p.len));
                    cursor = cursor.max(p.offset.saturating_add(p.len));
                    continue;
                };
                dir.bytes.extend_from_slice(bytes);
                dir.segments.push(SegmentInfo {
                    frame: p.frame,
                    offset: p.offset,
                    len,
                    timestamp_ns: p.timestamp_ns,
                });
            }
            cursor = cursor.max(p.offset.saturating_add(p.len));
        }
        let end = fin_at.map_or(furthest, |f| f.min(furthest));
        if end > cursor {
            dir.gaps.push((cursor, end - cursor));
        }
        dir
    }
}

fn clamp_u64(v: i128) -> u64 {
    u64::try_from(v.max(0)).unwrap_or(u64::MAX)
}

fn clamp_usize(v: i128) -> usize {
    usize::try_from(v.max(0)).unwrap_or(usize::MAX)
}

/// New bytes contributed by one segment.
#[derive(Debug, Clone, Copy)]
struct Piece {
    offset: u64,
    len: u64,
    arena_start: usize,
    frame: u64,
    timestamp_ns: u64,
}

/// The set of stream ranges already received, as disjoint merged intervals.
#[derive(Debug, Default)]
struct Coverage {
    /// start -> end (exclusive).
    ranges: BTreeMap<u64, u64>,
}

impl Coverage {
    /// Marks `[start, end)` as received and returns the parts of it that
    /// were not received before, in order.
    fn insert(&mut self, start: u64, end: u64) -> Vec<(u64, u64)> {
        if start >= end {
            return Vec::new();
        }
        // Only the range starting at or before `start` can reach into it
        // from the left, since ranges are disjoint.
        let first = self
            .ranges
            .range(..=start)
            .next_back()
            .map_or(start, |(&a, _)| a);

        let mut new = Vec::new();
        let mut cursor = start;
        let mut touching = Vec::new();
        for (&a, &b) in self.ranges.range(first..) {
            if a > end {
                break;
            }
            if b >= start {
                touching.push(a);
            }
            if a >= end || b <= cursor {
                continue;
            }
            if a > cursor {
                new.push((cursor, a));
            }
            cursor = b;
        }
        if cursor < end {
            new.push((cursor, end));
        }

        let (mut lo, mut hi) = (start, end);
        for a in touching {
            if let Some(b) = self.ranges.remove(&a) {
                lo = lo.min(a);
                hi = hi.max(b);
            }
        }
        self.ranges.insert(lo, hi);
        new
    }
}

/// A connection being collected.
#[derive(Debug)]
struct ConnBuilder {
    client: Endpoint,
    server: Endpoint,
    first_frame: u64,
    /// The client side is known from a SYN, not guessed.
    client_certain: bool,
    to_server: StreamBuilder,
    to_client: StreamBuilder,
}

impl ConnBuilder {
    fn new(seg: &TcpSegment<'_>, frame: u64) -> Self {
        // A SYN+ACK seen first still tells us who the server is.
        let (client, server) = if seg.syn && seg.ack {
            (seg.dst, seg.src)
        } else {
            (seg.src, seg.dst)
        };
        Self {
            client,
            server,
            first_frame: frame,
            client_certain: seg.syn,
            to_server: StreamBuilder::default(),
            to_client: StreamBuilder::default(),
        }
    }

    fn stream_from(&self, src: Endpoint) -> &StreamBuilder {
        if src == self.client {
            &self.to_server
        } else {
            &self.to_client
        }
    }

    /// Whether an opening SYN (no ACK) starts a new connection on this
    /// connection's 4-tuple: after a FIN or RST (port reuse), when it uses a
    /// different ISN than the sender's earlier SYN (the close was not
    /// captured), or when data already flowed without a SYN from its sender.
    fn is_replaced_by(&self, seg: &TcpSegment<'_>) -> bool {
        let closed =
            self.to_server.fin || self.to_server.rst || self.to_client.fin || self.to_client.rst;
        let sender = self.stream_from(seg.src);
        let new_isn = match sender.isn {
            Some(isn) => isn != seg.seq,
            None => self.to_server.has_payload || self.to_client.has_payload,
        };
        closed || new_isn
    }

    fn push(&mut self, seg: &TcpSegment<'_>, frame: u64, timestamp_ns: u64) {
        if seg.syn && !seg.ack && !self.client_certain {
            self.client_certain = true;
            if seg.src != self.client {
                std::mem::swap(&mut self.client, &mut self.server);
                std::mem::swap(&mut self.to_server, &mut self.to_client);
            }
        }
        let stream = if seg.src == self.client {
            &mut self.to_server
        } else {
            &mut self.to_client
        };
        stream.push(seg, frame, timestamp_ns);
    }
}

/// Assigns segments to connections, in order of first appearance.
#[derive(Debug, Default)]
pub(crate) struct Tracker {
    conns: Vec<ConnBuilder>,
    /// The latest connection on each 4-tuple (endpoints in sorted order).
    current: HashMap<(Endpoint, Endpoint), usize>,
}

impl Tracker {
    pub(crate) fn push(&mut self, seg: &TcpSegment<'_>, frame: u64, timestamp_ns: u64) {
        let key = if seg.src <= seg.dst {
            (seg.src, seg.dst)
        } else {
            (seg.dst, seg.src)
        };
        let opening = seg.syn && !seg.ack;
        let existing = self
            .current
            .get(&key)
            .copied()
            .filter(|&i| !opening || self.conns.get(i).is_some_and(|c| !c.is_replaced_by(seg)));
        let idx = match existing {
            Some(i) => i,
            None => {
                let i = self.conns.len();
                self.conns.push(ConnBuilder::new(seg, frame));
                self.current.insert(key, i);
                i
            }
        };
        if let Some(conn) = self.conns.get_mut(idx) {
            conn.push(seg, frame, timestamp_ns);
        }
    }

    pub(crate) fn finish(self) -> Vec<Connection> {
        self.conns
            .into_iter()
            .enumerate()
            .map(|(index, c)| Connection {
                index,
                client: c.client,
                server: c.server,
                to_server: c.to_server.finish(),
                to_client: c.to_client.finish(),
                first_frame: c.first_frame,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    fn ep(port: u16) -> Endpoint {
        Endpoint {
            addr: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            port,
        }
    }

    fn seg(seq: u32, payload: &[u8]) -> TcpSegment<'_> {
        TcpSegment {
            src: ep(1),
            dst: ep(2),
            seq,
            syn: false,
            ack: true,
            fin: false,
            rst: false,
            payload,
            missing: 0,
        }
    }

    fn syn(seq: u32) -> TcpSegment<'static> {
        TcpSegment {
            syn: true,
            ack: false,
            ..seg(seq, b"")
        }
    }

    fn stream(segs: &[TcpSegment<'_>]) -> Direction {
        let mut s = StreamBuilder::default();
        for (i, seg) in segs.iter().enumerate() {
            s.push(seg, i as u64 + 1, 0);
        }
        s.finish()
    }

    #[test]
    fn coverage_reports_only_new_parts() {
        let mut c = Coverage::default();
        assert_eq!(c.insert(10, 20), vec![(10, 20)]);
        assert_eq!(c.insert(30, 40), vec![(30, 40)]);
        assert_eq!(c.insert(5, 45), vec![(5, 10), (20, 30), (40, 45)]);
        assert_eq!(c.insert(5, 45), vec![]);
        assert_eq!(c.ranges.len(), 1);
        assert_eq!(c.insert(45, 50), vec![(45, 50)]);
        assert_eq!(c.ranges.len(), 1, "adjacent ranges merge");
        assert_eq!(c.insert(7, 7), vec![]);
    }

    #[test]
    fn in_order_with_syn() {
        let d = stream(&[syn(99), seg(100, b"abc"), seg(103, b"def")]);
        assert_eq!(d.bytes, b"abcdef");
        assert!(d.gaps.is_empty());
        assert!(d.syn);
        assert_eq!(d.segments.len(), 2);
        assert_eq!((d.segments[1].offset, d.segments[1].len), (3, 3));
        assert_eq!(d.segments[1].frame, 3);
    }

    #[test]
    fn without_syn_starts_at_first_seq() {
        let d = stream(&[seg(5000, b"xy"), seg(5002, b"z")]);
        assert_eq!(d.bytes, b"xyz");
        assert!(!d.syn);
    }

    #[test]
    fn late_earlier_segment_without_syn_is_clipped() {
        let d = stream(&[seg(5000, b"cd"), seg(4998, b"abc")]);
        assert_eq!(d.bytes, b"cd");
        assert!(d.gaps.is_empty());
    }

    #[test]
    fn syn_seen_after_data_still_sets_origin() {
        let d = stream(&[seg(11, b"bc"), syn(9), seg(10, b"a")]);
        assert_eq!(d.bytes, b"abc");
    }

    #[test]
    fn wrap_around_mid_stream() {
        let isn = u32::MAX - 3;
        let d = stream(&[
            syn(isn),
            seg(isn.wrapping_add(1), b"012"),
            seg(isn.wrapping_add(4), b"345"), // crosses 2^32
            seg(isn.wrapping_add(7), b"678"),
        ]);
        assert_eq!(d.bytes, b"012345678");
        assert!(d.gaps.is_empty());
    }

    #[test]
    fn many_laps_keep_growing_offsets() {
        // 3 laps of the sequence space in 2^30-byte strides, using the
        // zero-length "sender's next byte" marks to move forward.
        let mut segs = vec![syn(0)];
        let mut seq: u32 = 1;
        for _ in 0..12 {
            seq = seq.wrapping_add(1 << 30);
            segs.push(seg(seq, b""));
        }
        let d = stream(&segs);
        assert_eq!(d.gaps, vec![(0, 12 << 30)]);
    }

    #[test]
    fn ack_after_fin_is_not_a_gap() {
        let fin = TcpSegment {
            fin: true,
            ..seg(1, b"")
        };
        let d = stream(&[syn(0), fin, seg(2, b"")]);
        assert!(d.fin);
        assert!(d.gaps.is_empty(), "{:?}", d.gaps);
    }

    #[test]
    fn rst_does_not_extend_stream() {
        let rst = TcpSegment {
            rst: true,
            ..seg(1_000_000, b"reason")
        };
        let d = stream(&[syn(0), seg(1, b"a"), rst]);
        assert_eq!(d.bytes, b"a");
        assert!(d.gaps.is_empty());
        assert!(d.rst);
    }

    #[test]
    fn truncated_segment_leaves_gap() {
        let cut = TcpSegment {
            missing: 5,
            ..seg(1, b"abc")
        };
        let d = stream(&[syn(0), cut]);
        assert_eq!(d.bytes, b"abc");
        assert_eq!(d.gaps, vec![(3, 5)]);
    }

    #[test]
    fn retransmission_fills_truncated_part() {
        let cut = TcpSegment {
            missing: 5,
            ..seg(1, b"abc")
        };
        let d = stream(&[syn(0), cut, seg(1, b"abcdefgh")]);
        assert_eq!(d.bytes, b"abcdefgh");
        assert!(d.gaps.is_empty());
        assert_eq!(d.segments.len(), 2);
        assert_eq!((d.segments[1].offset, d.segments[1].len), (3, 5));
    }

    #[test]
    fn tracker_swaps_client_when_syn_arrives_late() {
        let mut t = Tracker::default();
        let reply = TcpSegment {
            src: ep(2),
            dst: ep(1),
            ..seg(500, b"")
        };
        t.push(&reply, 1, 0);
        t.push(&syn(7), 2, 0);
        let conns = t.finish();
        assert_eq!(conns.len(), 1);
        assert_eq!(conns[0].client, ep(1));
        assert!(conns[0].to_server.syn);
    }

    #[test]
    fn tracker_new_isn_means_new_connection() {
        let mut t = Tracker::default();
        t.push(&syn(7), 1, 0);
        t.push(&syn(7), 2, 0); // retransmitted SYN
        t.push(&syn(900), 3, 0); // close not captured, new attempt
        let conns = t.finish();
        assert_eq!(conns.len(), 2);
        assert_eq!(conns[1].first_frame, 3);
    }
}
