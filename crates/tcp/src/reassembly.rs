//! The simple receiver: a bounded ring that keeps every piece where its offset says,
//! in order or not, and hands out the in-order prefix as a byte stream. Its capacity
//! should be the connection's `recv_buffer`, so that everything inside the window fits.

use crate::conn::Connection;
use crate::receiver::{Arrival, Receiver};

/// In-order reassembly of a connection's byte stream.
#[derive(Debug)]
pub struct Reassembly {
    buf: Box<[u8]>,
    /// Stream offset of the next octet to read.
    read: u64,
    /// Every octet before this offset has arrived.
    ready: u64,
}

impl Reassembly {
    /// A ring of `capacity` octets (allocated now, once).
    pub fn new(capacity: usize) -> Reassembly {
        Reassembly {
            buf: vec![0; capacity.max(1)].into_boxed_slice(),
            read: 0,
            ready: 0,
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

    /// Copies in-order octets into `out`; returns how many. Give them back to the
    /// connection with [`Connection::release`] (or use [`Reassembly::read_from`]).
    pub fn read(&mut self, out: &mut [u8]) -> usize {
        let n = out.len().min(self.readable());
        let cap = self.buf.len();
        let at = (self.read % cap as u64) as usize;
        let first = n.min(cap - at);
        out[..first].copy_from_slice(&self.buf[at..at + first]);
        out[first..n].copy_from_slice(&self.buf[..n - first]);
        self.read += n as u64;
        n
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
        let cap = self.buf.len();
        let end = piece.offset + piece.data.len() as u64;
        if piece.offset < self.read || end > self.read + cap as u64 {
            return false;
        }
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
}
