//! The simple receiver: a bounded ring that keeps every piece where its offset says,
//! in order or not, and hands out the in-order prefix as a byte stream. Its capacity
//! should be the connection's `recv_buffer`, so that everything inside the window fits.
//!
//! A large piece may instead stay in the packet buffer it arrived in (zero-copy
//! receive, [`crate::Stack::handle_packet_buf`]): the reader then copies it straight
//! from there, and the buffer is given back for reuse once read
//! ([`Reassembly::take_spent`]). That saves one copy of every large segment; the ring
//! keeps the small ones, whose buffers would pin far more memory than they carry. A
//! payload that came by reference ([`Lent`], a share of the sender's send buffer on an
//! in-process link) is kept the same way, and let go once read.

use crate::conn::{Connection, Lent};
use crate::receiver::{Arrival, Receiver};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Pieces held in packet buffers at most (each is at least half its buffer and all lie
/// inside the window, so this only guards against a window of tiny packets).
const MAX_HELD: usize = 4096;

/// Read packet buffers kept for [`Reassembly::take_spent`] at most; more are freed.
const MAX_SPENT: usize = 64;

/// A buffer a piece is kept in.
#[derive(Debug)]
enum HeldBuf {
    /// The packet's own buffer, given back once read.
    Packet(Vec<u8>),
    /// The sender's send buffer chunk the packet carried by reference ([`Lent`]).
    Shared(Arc<Vec<u8>>),
}

impl HeldBuf {
    fn octets(&self) -> &[u8] {
        match self {
            HeldBuf::Packet(v) => v,
            HeldBuf::Shared(a) => a,
        }
    }
}

/// In-order octets taken out of a [`Reassembly`] whole ([`Reassembly::take_piece`]),
/// to be copied out by a reader that does not hold the reassembly meanwhile.
#[derive(Debug)]
pub struct Piece {
    buf: HeldBuf,
    at: usize,
    len: usize,
    /// Octets copied out so far.
    copied: usize,
}

impl Piece {
    /// Copies the next octets into `out`; returns how many.
    pub fn copy_to(&mut self, out: &mut [u8]) -> usize {
        let n = out.len().min(self.len - self.copied);
        let from = self.at + self.copied;
        out[..n].copy_from_slice(&self.buf.octets()[from..from + n]);
        self.copied += n;
        n
    }

    /// Every octet has been copied out.
    pub fn is_done(&self) -> bool {
        self.copied == self.len
    }

    /// Its length in octets.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no octets (never, for a piece taken out).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A piece kept in the packet buffer it arrived in.
#[derive(Debug)]
struct Held {
    buf: HeldBuf,
    /// Where the piece's first octet is in `buf`.
    at: usize,
    len: usize,
}

/// Where a piece of the packet being handled lies in that packet's buffer, kept until
/// the stack hands the buffer over ([`Reassembly::hold`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoldSpec {
    /// Stream offset of the piece.
    offset: u64,
    /// Its position in the packet buffer.
    at: usize,
    len: usize,
    /// The address of the buffer's first octet, to check that the right one comes.
    base: usize,
}

/// The buffer of the packet being handled, as [`Reassembly::hold_later`] sees it.
#[derive(Debug, Clone, Copy)]
pub struct PacketBuf {
    /// Address of the buffer's first octet.
    pub base: usize,
    /// The buffer's length.
    pub size: usize,
    /// What keeping a piece of it costs, in octets: a piece at least half of it is
    /// worth keeping.
    pub weight: usize,
}

impl PacketBuf {
    /// The packet buffer `buf`: keeping a piece pins all of it.
    pub fn of(buf: &[u8]) -> PacketBuf {
        PacketBuf {
            base: buf.as_ptr() as usize,
            size: buf.len(),
            weight: buf.len(),
        }
    }

    /// A sender's chunk `chunk`, of which a packet carried `payload` octets by
    /// reference ([`Lent`]): a piece that is most of the payload is worth keeping.
    /// The chunk lives in the sender's send buffer until acknowledged anyway; what
    /// the pieces kept here pin beyond that spans the window and two chunks at most.
    pub fn lent(chunk: &[u8], payload: usize) -> PacketBuf {
        PacketBuf {
            weight: payload,
            ..PacketBuf::of(chunk)
        }
    }
}

/// In-order reassembly of a connection's byte stream.
#[derive(Debug)]
pub struct Reassembly {
    buf: Box<[u8]>,
    /// Stream offset of the next octet to read.
    read: u64,
    /// Every octet before this offset has arrived.
    ready: u64,
    /// Pieces kept in their packet buffers, by stream offset; they never overlap each
    /// other or what the ring holds.
    held: BTreeMap<u64, Held>,
    /// Packet buffers read to the end, for reuse.
    spent: Vec<Vec<u8>>,
}

impl Reassembly {
    /// A ring of `capacity` octets (allocated now, once).
    pub fn new(capacity: usize) -> Reassembly {
        Reassembly {
            buf: vec![0; capacity.max(1)].into_boxed_slice(),
            read: 0,
            ready: 0,
            held: BTreeMap::new(),
            spent: Vec::new(),
        }
    }

    /// A ring sized for `conn`'s receive window.
    pub fn for_connection(conn: &Connection) -> Reassembly {
        Reassembly::new(conn.config().recv_buffer as usize)
    }

    /// In-order octets waiting to be read.
    pub fn readable(&self) -> usize {
        (self.ready - self.read) as usize
    }

    /// Stream offset of the next octet [`Reassembly::read`] returns.
    pub fn offset(&self) -> u64 {
        self.read
    }

    /// Pieces kept in packet buffers now.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Whether `piece` fits the window.
    fn fits(&self, piece: &Arrival<'_>) -> bool {
        let end = piece.offset + piece.data.len() as u64;
        piece.offset >= self.read && end <= self.read + self.buf.len() as u64
    }

    /// Whether `piece`, which lies in `packet`, is worth keeping there rather than
    /// copying: it fits the window and fills at least half the buffer. If so, returns
    /// where it is; the caller keeps it ([`Receiver::arrive`] answers true without
    /// copying) and must hand the buffer over with [`Reassembly::hold`] before anyone
    /// reads. `None`: copy it with [`Receiver::arrive`].
    pub fn hold_later(&self, piece: &Arrival<'_>, packet: PacketBuf) -> Option<HoldSpec> {
        let len = piece.data.len();
        let at = (piece.data.as_ptr() as usize).checked_sub(packet.base)?;
        let inside = at.checked_add(len).is_some_and(|end| end <= packet.size);
        (inside
            && len > 0
            && 2 * len >= packet.weight
            && self.held.len() < MAX_HELD
            && self.fits(piece))
        .then_some(HoldSpec {
            offset: piece.offset,
            at,
            len,
            base: packet.base,
        })
    }

    /// Keeps the piece `spec` names in `buf`, the packet buffer it was found in;
    /// gives `buf` back if it is not that buffer (nothing is kept then).
    pub fn hold(&mut self, buf: Vec<u8>, spec: HoldSpec) -> Option<Vec<u8>> {
        if buf.as_ptr() as usize != spec.base || spec.at + spec.len > buf.len() {
            return Some(buf);
        }
        self.keep(HeldBuf::Packet(buf), spec);
        None
    }

    /// [`Reassembly::hold`] for a payload that came by reference: keeps its share of
    /// the sender's chunk (`PacketBuf::of` the whole chunk found the piece); false if
    /// `chunk` is not where the piece was found.
    pub fn hold_lent(&mut self, lent: &Lent, spec: HoldSpec) -> bool {
        let chunk = &lent.chunk;
        if chunk.as_ptr() as usize != spec.base || spec.at + spec.len > chunk.len() {
            return false;
        }
        self.keep(HeldBuf::Shared(chunk.clone()), spec);
        true
    }

    fn keep(&mut self, buf: HeldBuf, spec: HoldSpec) {
        let held = Held {
            buf,
            at: spec.at,
            len: spec.len,
        };
        self.held.insert(spec.offset, held);
    }

    /// Moves the packet buffers read to the end into `out`, for reuse.
    pub fn take_spent(&mut self, out: &mut Vec<Vec<u8>>) {
        out.append(&mut self.spent);
    }

    /// Takes out the next in-order octets when they are a whole piece kept in its
    /// packet buffer (or the sender's chunk): the reader copies them from the
    /// [`Piece`] without holding what guards this reassembly (the stack's lock), and
    /// gives it back with [`Reassembly::give_back`]. The octets count as read; the
    /// window reopens only when the caller releases them to the connection, after its
    /// copy. `None` when the next octets are in the ring, or not all here yet.
    pub fn take_piece(&mut self) -> Option<Piece> {
        let (&start, h) = self.held.first_key_value()?;
        if start != self.read || start + h.len as u64 > self.ready {
            return None;
        }
        let h = self.held.remove(&start)?;
        self.read += h.len as u64;
        Some(Piece {
            buf: h.buf,
            at: h.at,
            len: h.len,
            copied: 0,
        })
    }

    /// A piece read to the end: its packet buffer goes back for reuse.
    pub fn give_back(&mut self, piece: Piece) {
        if let HeldBuf::Packet(buf) = piece.buf
            && self.spent.len() < MAX_SPENT
        {
            self.spent.push(buf);
        }
    }

    /// Copies in-order octets into `out`; returns how many. Give them back to the
    /// connection with [`Connection::release`] (or use [`Reassembly::read_from`]).
    pub fn read(&mut self, out: &mut [u8]) -> usize {
        let want = out.len().min(self.readable());
        let mut done = 0;
        while done < want {
            let pos = self.read;
            let left = want - done;
            let next_held = self.held.first_key_value().map(|(&k, h)| (k, h.len));
            let n = match next_held {
                Some((start, len)) if start <= pos => {
                    // Inside a held piece (partly read, perhaps).
                    let skip = (pos - start) as usize;
                    let n = left.min(len - skip);
                    if let Some(h) = self.held.get(&start) {
                        let from = h.at + skip;
                        out[done..done + n].copy_from_slice(&h.buf.octets()[from..from + n]);
                    }
                    if skip + n == len
                        && let Some(Held {
                            buf: HeldBuf::Packet(buf),
                            ..
                        }) = self.held.remove(&start)
                        && self.spent.len() < MAX_SPENT
                    {
                        self.spent.push(buf);
                    }
                    n
                }
                next => {
                    // The ring, up to the next held piece.
                    let upto = next.map_or(u64::MAX, |(start, _)| start);
                    let n = left.min(usize::try_from(upto - pos).unwrap_or(usize::MAX));
                    self.copy_ring(pos, &mut out[done..done + n]);
                    n
                }
            };
            self.read += n as u64;
            done += n;
        }
        want
    }

    /// Copies the ring's octets from stream offset `pos` into `out`.
    fn copy_ring(&self, pos: u64, out: &mut [u8]) {
        let n = out.len();
        let cap = self.buf.len();
        let at = (pos % cap as u64) as usize;
        let first = n.min(cap - at);
        out[..first].copy_from_slice(&self.buf[at..at + first]);
        out[first..].copy_from_slice(&self.buf[..n - first]);
    }

    /// Reads into `out` and releases what was read to `conn`, reopening its window.
    pub fn read_from(&mut self, conn: &mut Connection, out: &mut [u8]) -> usize {
        let n = self.read(out);
        conn.release(n);
        n
    }
}

impl Receiver for Reassembly {
    fn arrive(&mut self, piece: Arrival<'_>) -> bool {
        if !self.fits(&piece) {
            return false;
        }
        let cap = self.buf.len();
        let at = (piece.offset % cap as u64) as usize;
        let n = piece.data.len();
        let first = n.min(cap - at);
        self.buf[at..at + first].copy_from_slice(&piece.data[..first]);
        self.buf[..n - first].copy_from_slice(&piece.data[first..]);
        true
    }

    fn in_order(&mut self, end: u64) {
        self.ready = self.ready.max(end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seq::SeqNum;

    fn piece(offset: u64, data: &[u8]) -> Arrival<'_> {
        Arrival {
            offset,
            seq: SeqNum(offset as u32),
            data,
            in_order: false,
        }
    }

    #[test]
    fn out_of_order_pieces_wrap_and_read_in_order() {
        let mut r = Reassembly::new(8);
        assert!(r.arrive(piece(0, b"abc")));
        r.in_order(3);
        let mut out = [0u8; 8];
        assert_eq!(r.read(&mut out[..2]), 2);
        assert_eq!(&out[..2], b"ab");
        assert!(r.arrive(piece(6, b"ghij")), "wraps around the ring");
        assert!(!r.arrive(piece(7, b"hijk")), "beyond the capacity");
        assert_eq!(r.readable(), 1);
        assert!(r.arrive(piece(3, b"def")));
        r.in_order(10);
        assert_eq!(r.read(&mut out), 8);
        assert_eq!(&out, b"cdefghij");
        assert!(!r.arrive(piece(9, b"x")), "already read");
    }

    /// A packet buffer of `size` octets whose payload `data` starts at `at`.
    fn packet(size: usize, at: usize, data: &[u8]) -> Vec<u8> {
        let mut b = vec![0xee; size];
        b[at..at + data.len()].copy_from_slice(data);
        b
    }

    /// Offers `data` (stream offset `offset`) as the payload of a packet buffer; true
    /// if the reassembly kept it in that buffer.
    fn offer(r: &mut Reassembly, offset: u64, size: usize, data: &[u8]) -> bool {
        let buf = packet(size, 3, data);
        let p = Arrival {
            offset,
            seq: SeqNum(offset as u32),
            data: &buf[3..3 + data.len()],
            in_order: false,
        };
        match r.hold_later(&p, PacketBuf::of(&buf)) {
            Some(spec) => {
                assert!(r.hold(buf, spec).is_none());
                true
            }
            None => {
                assert!(r.arrive(p));
                false
            }
        }
    }

    #[test]
    fn a_whole_in_order_held_piece_is_taken_out_and_its_buffer_comes_back() {
        let mut r = Reassembly::new(64);
        assert!(offer(&mut r, 0, 14, b"abcdefghij"));
        assert!(offer(&mut r, 13, 12, b"nopqrstuv"));
        assert!(!offer(&mut r, 10, 40, b"klm"), "in the ring");
        assert!(r.take_piece().is_none(), "not in order yet");
        r.in_order(22);
        let mut p = r.take_piece().expect("the first piece, whole and in order");
        assert_eq!((p.len(), r.readable(), r.held()), (10, 12, 1));
        assert!(r.take_piece().is_none(), "the ring's octets come next");
        let mut out = [0u8; 6];
        assert_eq!(p.copy_to(&mut out), 6);
        assert!(!p.is_done());
        assert_eq!(p.copy_to(&mut out), 4);
        assert!(p.is_done());
        assert_eq!(&out[..4], b"ghij");
        r.give_back(p);
        let mut spent = Vec::new();
        r.take_spent(&mut spent);
        assert_eq!(spent.len(), 1, "its packet buffer comes back for reuse");
        let mut out = [0u8; 2];
        assert_eq!(r.read(&mut out), 2, "the ring, after the piece");
        assert_eq!(&out, b"kl");
        assert!(
            r.take_piece().is_none(),
            "one ring octet is still before the piece"
        );
        assert_eq!(r.read(&mut out[..1]), 1);
        let p = r.take_piece().expect("the second piece");
        assert_eq!(p.len(), 9);
        assert_eq!(r.readable(), 0);
    }

    #[test]
    fn large_pieces_stay_in_their_packets_and_read_in_order_with_the_ring() {
        let mut r = Reassembly::new(64);
        // Out of order: a held piece after a hole, then ring octets, then the hole
        // filled by another held piece.
        assert!(
            offer(&mut r, 10, 12, b"klmnopqrs"),
            "9 of 12: kept in its packet"
        );
        assert!(
            !offer(&mut r, 19, 40, b"tuv"),
            "3 of 40: copied to the ring"
        );
        assert!(offer(&mut r, 0, 14, b"abcdefghij"));
        r.in_order(22);
        assert_eq!(r.held(), 2);
        let mut out = [0u8; 4];
        assert_eq!(r.read(&mut out), 4, "part of a held piece");
        assert_eq!(&out, b"abcd");
        let mut spent = Vec::new();
        r.take_spent(&mut spent);
        assert!(spent.is_empty(), "not read to the end yet");
        let mut out = [0u8; 32];
        assert_eq!(r.read(&mut out), 18);
        assert_eq!(&out[..18], b"efghijklmnopqrstuv");
        r.take_spent(&mut spent);
        assert_eq!(spent.len(), 2, "both packets come back for reuse");
        assert_eq!(r.held(), 0);
        // Past the ring's end: the held piece and the ring's wrapped octets.
        assert!(!offer(&mut r, 22, 100, &[7; 40]));
        assert!(offer(&mut r, 62, 30, &[9; 20]));
        r.in_order(82);
        let mut out = [0u8; 60];
        assert_eq!(r.read(&mut out), 60);
        assert_eq!(&out[..40], &[7; 40]);
        assert_eq!(&out[40..], &[9; 20]);
    }

    #[test]
    fn a_piece_is_held_only_inside_the_window_and_its_own_buffer() {
        let mut r = Reassembly::new(16);
        let buf = packet(20, 0, &[1; 20]);
        let beyond = Arrival {
            offset: 0,
            seq: SeqNum(0),
            data: &buf,
            in_order: true,
        };
        assert_eq!(
            r.hold_later(&beyond, PacketBuf::of(&buf)),
            None,
            "20 > window"
        );
        let fits = Arrival {
            data: &buf[..12],
            ..beyond
        };
        let other = vec![0u8; 20];
        assert_eq!(
            r.hold_later(&fits, PacketBuf::of(&other)),
            None,
            "not in it"
        );
        let spec = r.hold_later(&fits, PacketBuf::of(&buf)).unwrap();
        assert!(
            r.hold(other, spec).is_some(),
            "another buffer is given back"
        );
        assert!(r.hold(buf, spec).is_none());
    }
}
