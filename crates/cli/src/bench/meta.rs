//! The benchmark's metadata exchange, carried in the MPA private data of connect (client
//! to server) and accept (server to client), so no out-of-band socket is needed.
//!
//! Format (56 octets, network byte order):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `SRNB` |
//! | 4 | 1 | version (1) |
//! | 5 | 1 | test (0 write_bw, 1 read_bw, 2 send_bw, 3 write_lat, 4 read_lat, 5 send_lat) |
//! | 6 | 1 | flags (bit 0: last round, the server exits after it) |
//! | 7 | 1 | reserved (0) |
//! | 8 | 2 | index of this QP among the round's QPs |
//! | 10 | 2 | number of QPs in the round |
//! | 12 | 8 | message size |
//! | 20 | 8 | iterations per QP (0: duration mode) |
//! | 28 | 4 | duration in milliseconds (0: iterations mode) |
//! | 32 | 4 | depth: the client's receive depth for the server's RQ (send tests) |
//! | 36 | 8 | address (tagged offset) of the buffer this side exposes (0: none) |
//! | 44 | 4 | its STag (rkey) |
//! | 48 | 8 | its length |

use super::Test;

/// Encoded length.
pub const META_LEN: usize = 56;
const MAGIC: &[u8; 4] = b"SRNB";
const VERSION: u8 = 1;

/// Flag: the last round; the server exits when it ends.
pub const FLAG_LAST: u8 = 1;
/// Flag: the client sleeps on completion events (`-e`), and so does the server.
pub const FLAG_EVENTS: u8 = 2;
/// Flag: all QPs of the round share one buffer on each side (`--shared-buffers`).
pub const FLAG_SHARED_BUFFERS: u8 = 4;

/// One side's description of a benchmark round and the buffer it exposes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    /// The test.
    pub test: Test,
    /// Flags ([`FLAG_LAST`]).
    pub flags: u8,
    /// This QP's index in the round.
    pub qp_index: u16,
    /// QPs in the round.
    pub num_qps: u16,
    /// Message size.
    pub size: u64,
    /// Iterations per QP (0: duration mode).
    pub iters: u64,
    /// Duration in milliseconds (0: iterations mode).
    pub duration_ms: u32,
    /// Receive depth.
    pub depth: u32,
    /// Exposed buffer address.
    pub addr: u64,
    /// Exposed buffer STag.
    pub rkey: u32,
    /// Exposed buffer length.
    pub len: u64,
}

/// Why private data is not benchmark metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetaError {
    /// Shorter than [`META_LEN`].
    Short(usize),
    /// Not `SRNB`.
    BadMagic,
    /// A version we do not speak.
    Version(u8),
    /// An unknown test code.
    Test(u8),
}

impl std::fmt::Display for MetaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MetaError::Short(n) => write!(f, "benchmark metadata too short ({n} octets)"),
            MetaError::BadMagic => write!(f, "peer is not a softrnic benchmark (bad magic)"),
            MetaError::Version(v) => write!(f, "benchmark metadata version {v} unsupported"),
            MetaError::Test(t) => write!(f, "unknown benchmark test code {t}"),
        }
    }
}

impl std::error::Error for MetaError {}

impl Meta {
    /// Whether this is the last round.
    pub fn is_last(&self) -> bool {
        self.flags & FLAG_LAST != 0
    }

    /// Whether both sides sleep on completion events.
    pub fn events(&self) -> bool {
        self.flags & FLAG_EVENTS != 0
    }

    /// The wire form.
    pub fn encode(&self) -> [u8; META_LEN] {
        let mut b = [0u8; META_LEN];
        b[0..4].copy_from_slice(MAGIC);
        b[4] = VERSION;
        b[5] = self.test.code();
        b[6] = self.flags;
        b[8..10].copy_from_slice(&self.qp_index.to_be_bytes());
        b[10..12].copy_from_slice(&self.num_qps.to_be_bytes());
        b[12..20].copy_from_slice(&self.size.to_be_bytes());
        b[20..28].copy_from_slice(&self.iters.to_be_bytes());
        b[28..32].copy_from_slice(&self.duration_ms.to_be_bytes());
        b[32..36].copy_from_slice(&self.depth.to_be_bytes());
        b[36..44].copy_from_slice(&self.addr.to_be_bytes());
        b[44..48].copy_from_slice(&self.rkey.to_be_bytes());
        b[48..56].copy_from_slice(&self.len.to_be_bytes());
        b
    }

    /// Parses the wire form (trailing octets are ignored, for later versions' fields).
    pub fn decode(b: &[u8]) -> Result<Meta, MetaError> {
        if b.len() < META_LEN {
            return Err(MetaError::Short(b.len()));
        }
        if &b[0..4] != MAGIC {
            return Err(MetaError::BadMagic);
        }
        if b[4] != VERSION {
            return Err(MetaError::Version(b[4]));
        }
        let test = Test::from_code(b[5]).ok_or(MetaError::Test(b[5]))?;
        let u16_at = |o: usize| u16::from_be_bytes([b[o], b[o + 1]]);
        let u32_at = |o: usize| u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64_at = |o: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[o..o + 8]);
            u64::from_be_bytes(a)
        };
        Ok(Meta {
            test,
            flags: b[6],
            qp_index: u16_at(8),
            num_qps: u16_at(10),
            size: u64_at(12),
            iters: u64_at(20),
            duration_ms: u32_at(28),
            depth: u32_at(32),
            addr: u64_at(36),
            rkey: u32_at(44),
            len: u64_at(48),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(test: Test) -> Meta {
        Meta {
            test,
            flags: FLAG_LAST,
            qp_index: 3,
            num_qps: 4,
            size: 1 << 20,
            iters: 5000,
            duration_ms: 0,
            depth: 512,
            addr: 0x7f00_dead_beef_0000,
            rkey: 0x0000_1a2b,
            len: 8 << 20,
        }
    }

    #[test]
    fn round_trip_every_test() {
        for t in Test::ALL {
            let m = sample(t);
            let b = m.encode();
            assert_eq!(b.len(), META_LEN);
            assert_eq!(&b[0..4], b"SRNB");
            assert_eq!(Meta::decode(&b), Ok(m));
            // Trailing octets are tolerated.
            let mut longer = b.to_vec();
            longer.extend_from_slice(&[9; 10]);
            assert_eq!(Meta::decode(&longer), Ok(m));
        }
        assert!(sample(Test::WriteBw).is_last());
    }

    #[test]
    fn known_layout() {
        let b = sample(Test::SendBw).encode();
        assert_eq!(b[4], 1);
        assert_eq!(b[5], 2);
        assert_eq!(&b[8..12], &[0, 3, 0, 4]);
        assert_eq!(&b[12..20], &(1u64 << 20).to_be_bytes());
        assert_eq!(&b[44..48], &[0, 0, 0x1a, 0x2b]);
    }

    #[test]
    fn rejects_foreign_data() {
        let b = sample(Test::WriteLat).encode();
        assert_eq!(Meta::decode(&b[..55]), Err(MetaError::Short(55)));
        assert_eq!(Meta::decode(b"hello"), Err(MetaError::Short(5)));
        let mut bad = b;
        bad[0] = b'X';
        assert_eq!(Meta::decode(&bad), Err(MetaError::BadMagic));
        let mut bad = b;
        bad[4] = 2;
        assert_eq!(Meta::decode(&bad), Err(MetaError::Version(2)));
        let mut bad = b;
        bad[5] = 6;
        assert_eq!(Meta::decode(&bad), Err(MetaError::Test(6)));
    }
}
