//! perftest's `-R` (RDMA CM) exchange: the messages the two sides Send each other on the
//! control connection, and the order in which they come, learned from captures of Linux
//! perftest 6.06 between two siw peers (see `docs/PERFTEST.md`). Pure encoders and
//! decoders, no I/O, so the exact octets are unit-tested against those captures.
//!
//! Every message is one untagged Send of a fixed size; the client Sends first and the
//! server answers with a message of the same kind ("exchange"). Numbers are big-endian
//! unless said otherwise: the one exception is the send_bw credit word, which perftest
//! RDMA-Writes in host order (little-endian on x86).

use super::Test;

/// The version string softrnic announces: perftest 6.06 is what the captures and the rig
/// run, and perftest refuses peers older than 5.70.
pub const VERSION: &str = "6.06";
/// The oldest peer version whose exchange matches the schedule here (perftest's own
/// compatibility floor).
pub const MIN_PEER_VERSION: f64 = 5.70;
/// Length of the version message: a NUL-padded string.
pub const VERSION_LEN: usize = 16;
/// Length of each half of the system-data exchange (cycle buffer, then cache line).
pub const SYS_LEN: usize = 4;
/// Length of the MTU message: the `ibv_mtu` code as decimal ASCII, NUL-padded.
pub const MTU_LEN: usize = 2;
/// Length of a QP description (perftest's `struct pingpong_dest` on x86-64).
pub const DEST_LEN: usize = 56;
/// Length of each field of a bandwidth report.
pub const REPORT_FIELD_LEN: usize = 8;
/// Length of the send_bw credit word.
pub const CREDIT_LEN: usize = 4;
/// The `ibv_mtu` code softrnic announces: 3 (1024 octets), as siw does, so a perftest peer
/// keeps its own value.
pub const MTU_1024: u8 = 3;

/// The version message: the string, NUL-padded to [`VERSION_LEN`].
pub fn encode_version(v: &str) -> [u8; VERSION_LEN] {
    let mut b = [0u8; VERSION_LEN];
    let n = v.len().min(VERSION_LEN - 1);
    b[..n].copy_from_slice(&v.as_bytes()[..n]);
    b
}

/// The version a peer announced, as perftest reads it (`atof`: the leading decimal
/// number); `None` if the message does not start with one.
pub fn parse_version(b: &[u8]) -> Option<f64> {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    let s = std::str::from_utf8(&b[..end]).ok()?;
    let lead: String = s
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    lead.parse().ok()
}

/// One half of the system-data exchange (cycle buffer or cache line size), big-endian.
pub fn encode_u32(v: u32) -> [u8; SYS_LEN] {
    v.to_be_bytes()
}

/// Decodes a big-endian 32-bit message of exactly [`SYS_LEN`] octets.
pub fn decode_u32(b: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(b.try_into().ok()?))
}

/// The MTU message: the `ibv_mtu` code in decimal, NUL-padded to [`MTU_LEN`].
pub fn encode_mtu(code: u8) -> [u8; MTU_LEN] {
    let mut b = [0u8; MTU_LEN];
    let s = code.to_string();
    let n = s.len().min(MTU_LEN);
    b[..n].copy_from_slice(&s.as_bytes()[..n]);
    b
}

/// The `ibv_mtu` code in an MTU message (leading decimal digits).
pub fn decode_mtu(b: &[u8]) -> Option<u8> {
    let digits: String = b
        .iter()
        .take_while(|c| c.is_ascii_digit())
        .map(|&c| char::from(c))
        .collect();
    digits.parse().ok()
}

/// One QP's description (perftest's `pingpong_dest`): what the peer needs to reach the
/// QP's buffer. In `-R` mode only `rkey` and `vaddr` matter; the rest is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Dest {
    /// IB LID (0 on iWARP).
    pub lid: u32,
    /// Outstanding RDMA Reads (the ORD perftest asks for in read tests, else 1).
    pub out_reads: u32,
    /// QP number.
    pub qpn: u32,
    /// Packet sequence number (random; meaningless on iWARP).
    pub psn: u32,
    /// STag of the buffer the peer may access.
    pub rkey: u32,
    /// Its address (tagged offset).
    pub vaddr: u64,
    /// GID (siw: the MAC address, zero-padded).
    pub gid: [u8; 16],
    /// SRQ number (XRC/DC only).
    pub srqn: u32,
    /// GID index.
    pub gid_index: u32,
}

impl Dest {
    /// Wire form: the C struct with every field big-endian; octets 20..24 are alignment
    /// padding (perftest leaves stack garbage there; softrnic sends zeros).
    pub fn encode(&self) -> [u8; DEST_LEN] {
        let mut b = [0u8; DEST_LEN];
        b[0..4].copy_from_slice(&self.lid.to_be_bytes());
        b[4..8].copy_from_slice(&self.out_reads.to_be_bytes());
        b[8..12].copy_from_slice(&self.qpn.to_be_bytes());
        b[12..16].copy_from_slice(&self.psn.to_be_bytes());
        b[16..20].copy_from_slice(&self.rkey.to_be_bytes());
        b[24..32].copy_from_slice(&self.vaddr.to_be_bytes());
        b[32..48].copy_from_slice(&self.gid);
        b[48..52].copy_from_slice(&self.srqn.to_be_bytes());
        b[52..56].copy_from_slice(&self.gid_index.to_be_bytes());
        b
    }

    /// From wire form (exactly [`DEST_LEN`] octets; the padding is ignored).
    pub fn decode(b: &[u8]) -> Option<Dest> {
        if b.len() != DEST_LEN {
            return None;
        }
        let u = |o: usize| u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[32..48]);
        let mut va = [0u8; 8];
        va.copy_from_slice(&b[24..32]);
        Some(Dest {
            lid: u(0),
            out_reads: u(4),
            qpn: u(8),
            psn: u(12),
            rkey: u(16),
            vaddr: u64::from_be_bytes(va),
            gid,
            srqn: u(48),
            gid_index: u(52),
        })
    }
}

/// softrnic's marks: four octets in the alignment padding (octets 20..24) of the
/// opening barrier softrnic sends, one mark per role. perftest fills that padding with
/// whatever its buffer held and never reads it, so a perftest peer ignores the mark; a
/// softrnic peer that finds the other role's mark knows both sides are softrnic and may
/// use what perftest's exchange does not: Reads on the write and send tests' QPs, for the
/// closing Read and the delivery probes. One mark per role, because perftest's server
/// echoes the padding: it builds its answer in the buffer the client's message arrived
/// in (a rig run showed a softrnic client's mark coming back from perftest 6.06 on siw).
pub const SOFTRNIC_MARK_CLIENT: [u8; 4] = *b"sRnC";
/// The server's mark (see [`SOFTRNIC_MARK_CLIENT`]).
pub const SOFTRNIC_MARK_SERVER: [u8; 4] = *b"sRnS";

fn mark(server: bool) -> [u8; 4] {
    if server {
        SOFTRNIC_MARK_SERVER
    } else {
        SOFTRNIC_MARK_CLIENT
    }
}

/// The opening barrier softrnic sends as a server (`server`) or client: a zero QP
/// description with the role's mark in its padding.
pub fn marked_barrier(server: bool) -> [u8; DEST_LEN] {
    let mut b = Dest::default().encode();
    b[20..24].copy_from_slice(&mark(server));
    b
}

/// Whether a QP description carries the mark of a softrnic server (`server`) or client.
pub fn is_marked(b: &[u8], server: bool) -> bool {
    b.len() == DEST_LEN && b[20..24] == mark(server)
}

/// A bandwidth result as the client reports it to the server after write_bw and read_bw
/// (the server prints it: it cannot measure one-sided traffic itself). Bandwidths are in
/// the client's unit (MB/s of 2^20 octets, or Gb/s with `--report_gbits`), the message
/// rate in millions per second.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BwReport {
    /// Message size.
    pub size: u64,
    /// Iterations.
    pub iters: u64,
    /// Peak bandwidth.
    pub bw_peak: f64,
    /// Average bandwidth.
    pub bw_avg: f64,
    /// Message rate, Mpps.
    pub msg_rate: f64,
}

impl BwReport {
    /// The five messages, in the order perftest exchanges them: size, iterations, peak,
    /// average, message rate; each 8 octets, big-endian (IEEE 754 for the floats).
    pub fn encode(&self) -> [[u8; REPORT_FIELD_LEN]; 5] {
        [
            self.size.to_be_bytes(),
            self.iters.to_be_bytes(),
            self.bw_peak.to_bits().to_be_bytes(),
            self.bw_avg.to_bits().to_be_bytes(),
            self.msg_rate.to_bits().to_be_bytes(),
        ]
    }

    /// From the five messages (each exactly [`REPORT_FIELD_LEN`] octets).
    pub fn decode(fields: &[Vec<u8>]) -> Option<BwReport> {
        if fields.len() != 5 {
            return None;
        }
        let mut v = [0u64; 5];
        for (x, f) in v.iter_mut().zip(fields) {
            *x = u64::from_be_bytes(f.as_slice().try_into().ok()?);
        }
        Some(BwReport {
            size: v[0],
            iters: v[1],
            bw_peak: f64::from_bits(v[2]),
            bw_avg: f64::from_bits(v[3]),
            msg_rate: f64::from_bits(v[4]),
        })
    }
}

/// The send_bw credit word: the count of Sends the server has received (and reposted a
/// receive for), RDMA-Written into the client's exposed buffer in host order.
pub fn encode_credit(received: u32) -> [u8; CREDIT_LEN] {
    received.to_le_bytes()
}

/// Reads a credit word.
pub fn decode_credit(b: [u8; CREDIT_LEN]) -> u32 {
    u32::from_le_bytes(b)
}

/// How many Sends beyond the last credit a send_bw client may have in flight: perftest
/// stops when `sent + 1 - credit >= rx_depth`, with the receive depth limited to the
/// iterations; at least one, so a tiny depth still makes progress.
pub fn send_window(rx_depth: u32, iters: u64) -> u64 {
    (u64::from(rx_depth).min(iters)).saturating_sub(1).max(1)
}

/// How often a send_bw server writes a credit: every third of its receive depth, as
/// perftest does (at least every Send).
pub fn credit_period(rx_depth: u32, iters: u64) -> u64 {
    (u64::from(rx_depth).min(iters) / 3).max(1)
}

/// A step of the exchange around the measured run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// One QP description per test QP, in connection order.
    Descriptions,
    /// A QP-description exchange used as a barrier (perftest's hand-shake): QP 0's.
    Sync,
    /// The client's [`BwReport`] (and the server's meaningless one back).
    BwReports,
}

/// When each side sends what, per test, after the common opening (version, system data,
/// MTU, a barrier, the test connections, a barrier).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    /// What precedes the measured run.
    pub before: &'static [Step],
    /// What follows it.
    pub after: &'static [Step],
    /// Whether the server (rather than the client) sends the first message of a
    /// ping-pong test: perftest's write_lat server writes first.
    pub server_starts: bool,
}

/// The schedule of each test, as perftest 6.06 runs it. Learned from the captures (one
/// QP) and from rig runs with two QPs, which show that the descriptions come in whole
/// rounds: write_bw with `-q 2` sends QP 0, 1, 0, 1, then QP 0 as a barrier; send_bw QP
/// 0, 1, barrier, 0, 1, barrier. The latency tests run one QP, where a round and a
/// barrier look the same; they are taken to be send_bw's.
pub fn schedule(test: Test) -> Schedule {
    use Step::{BwReports, Descriptions, Sync};
    const ONE_SIDED: &[Step] = &[Descriptions, Descriptions, Sync];
    const TWO_SIDED: &[Step] = &[Descriptions, Sync, Descriptions, Sync];
    match test {
        Test::WriteBw | Test::ReadBw => Schedule {
            before: ONE_SIDED,
            after: &[Sync, BwReports, Sync],
            server_starts: false,
        },
        Test::SendBw | Test::SendLat | Test::ReadLat => Schedule {
            before: TWO_SIDED,
            after: &[Sync],
            server_starts: false,
        },
        Test::WriteLat => Schedule {
            before: TWO_SIDED,
            after: &[],
            server_starts: true,
        },
    }
}

/// The lengths of the messages one side sends on the control connection, in order, for
/// a run with `qps` test QPs (both sides send the same sequence): the opening (version,
/// cycle buffer, cache line, MTU, a barrier), a barrier after the test connections, then
/// the test's schedule.
pub fn message_lengths(test: Test, qps: usize) -> Vec<usize> {
    let s = schedule(test);
    let mut v = vec![VERSION_LEN, SYS_LEN, SYS_LEN, MTU_LEN, DEST_LEN, DEST_LEN];
    for st in s.before.iter().chain(s.after) {
        match st {
            Step::Descriptions => v.extend(std::iter::repeat_n(DEST_LEN, qps)),
            Step::Sync => v.push(DEST_LEN),
            Step::BwReports => v.extend([REPORT_FIELD_LEN; 5]),
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// siw-ib_write_bw.pcap, frames 8-15: the opening, identical in both directions.
    #[test]
    fn opening_messages_match_capture() {
        assert_eq!(
            encode_version(VERSION).to_vec(),
            hex("362e3036 00000000 00000000 00000000")
        );
        assert_eq!(
            parse_version(&hex("362e3036 00000000 00000000 00000000")),
            Some(6.06)
        );
        assert_eq!(parse_version(b"5.70\0garbage"), Some(5.70));
        assert_eq!(parse_version(b"\0\0"), None);
        assert_eq!(encode_u32(4096).to_vec(), hex("00001000"));
        assert_eq!(encode_u32(64).to_vec(), hex("00000040"));
        assert_eq!(decode_u32(&hex("00001000")), Some(4096));
        assert_eq!(decode_u32(&hex("001000")), None);
        assert_eq!(encode_mtu(MTU_1024).to_vec(), hex("3300"));
        assert_eq!(decode_mtu(&hex("3300")), Some(3));
        assert_eq!(decode_mtu(&hex("3500")), Some(5));
    }

    /// siw-ib_write_bw.pcap frame 29 (the server's QP) and frame 90 (the same with
    /// garbage in the padding).
    #[test]
    fn dest_matches_capture() {
        let wire = hex(
            "00000000 00000001 00000004 001c5159 6e79cf00 00000000 0000564a 47a06000
             52540012 34560000 00000000 00000000 00000000 00000000",
        );
        let d = Dest::decode(&wire).unwrap();
        assert_eq!(
            d,
            Dest {
                lid: 0,
                out_reads: 1,
                qpn: 4,
                psn: 0x1c_5159,
                rkey: 0x6e79_cf00,
                vaddr: 0x564a_47a0_6000,
                gid: [
                    0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
                ],
                srqn: 0,
                gid_index: 0,
            }
        );
        assert_eq!(d.encode().to_vec(), wire);
        let garbage = hex(
            "00000000 00000001 00000004 001c5159 6e79cf00 88550000 0000564a 47a06000
             52540012 34560000 00000000 00000000 00000000 00000000",
        );
        assert_eq!(Dest::decode(&garbage), Some(d));
        // read_bw: 128 outstanding Reads.
        let r = hex(
            "00000000 00000080 00000003 009cabaf 4d333800 00000000 000055e7 7b313000
             52540012 34560000 00000000 00000000 00000000 00000000",
        );
        let d = Dest::decode(&r).unwrap();
        assert_eq!(
            (d.out_reads, d.rkey, d.vaddr),
            (128, 0x4d33_3800, 0x55e7_7b31_3000)
        );
        assert_eq!(Dest::decode(&r[..55]), None);
        assert_eq!(Dest::default().encode(), [0u8; DEST_LEN]);
        // softrnic's mark lives in the padding only: the fields still decode as zeros.
        for server in [false, true] {
            let m = marked_barrier(server);
            assert!(is_marked(&m, server));
            // An echo of one's own mark is not the peer's.
            assert!(!is_marked(&m, !server));
            assert_eq!(Dest::decode(&m), Some(Dest::default()));
            assert!(!is_marked(&garbage, server));
            assert!(!is_marked(&Dest::default().encode(), server));
        }
    }

    /// siw-ib_write_bw.pcap frames 79-87: the client's report (4096 B, 5 iterations,
    /// 14.42 peak, 6.85 average MB/s, 0.001754 Mpps, as the server printed it).
    #[test]
    fn bw_report_matches_capture() {
        let fields: Vec<Vec<u8>> = [
            "00000000 00001000",
            "00000000 00000005",
            "402cd4e0 787a7cba",
            "401b6616 47d786e2",
            "3f5cbacd a6bcef8b",
        ]
        .iter()
        .map(|s| hex(s))
        .collect();
        let r = BwReport::decode(&fields).unwrap();
        assert_eq!((r.size, r.iters), (4096, 5));
        assert_eq!(format!("{:.2}", r.bw_peak), "14.42");
        assert_eq!(format!("{:.2}", r.bw_avg), "6.85");
        assert_eq!(format!("{:.6}", r.msg_rate), "0.001754");
        let again: Vec<Vec<u8>> = r.encode().iter().map(|f| f.to_vec()).collect();
        assert_eq!(again, fields);
        assert_eq!(BwReport::decode(&fields[..4]), None);
        let mut short = fields.clone();
        short[2].pop();
        assert_eq!(BwReport::decode(&short), None);
    }

    /// siw-ib_send_bw.pcap frames 75 and 76: the server credits 2, then 4 received Sends.
    #[test]
    fn credit_matches_capture() {
        assert_eq!(encode_credit(2).to_vec(), hex("02000000"));
        assert_eq!(encode_credit(4).to_vec(), hex("04000000"));
        assert_eq!(decode_credit([4, 0, 0, 0]), 4);
        assert_eq!(decode_credit([0, 1, 0, 0]), 256);
    }

    #[test]
    fn windows_and_periods() {
        assert_eq!(send_window(512, 5), 4);
        assert_eq!(send_window(512, 100_000), 511);
        assert_eq!(send_window(1, 1), 1);
        assert_eq!(credit_period(512, 100_000), 170);
        assert_eq!(credit_period(6, 100), 2);
        assert_eq!(credit_period(2, 100), 1);
    }

    /// The number of control messages each capture shows (16-octet version, 2 system
    /// data, MTU, 2 zero barriers, 1 QP description, the barriers, the tail); the
    /// capture-replay test in `tests/perftest_rdma_cm.rs` checks every length.
    #[test]
    fn schedules_count_the_captured_messages() {
        let count = |t: Test| message_lengths(t, 1).len();
        assert_eq!(count(Test::WriteBw), 16);
        assert_eq!(count(Test::ReadBw), 16);
        assert_eq!(count(Test::SendBw), 11);
        assert_eq!(count(Test::WriteLat), 10);
        assert_eq!(count(Test::SendLat), 11);
        assert_eq!(count(Test::ReadLat), 11);
        // Two QPs, as the rig runs showed: two rounds of descriptions.
        assert_eq!(
            message_lengths(Test::WriteBw, 2),
            [
                16, 4, 4, 2, 56, 56, 56, 56, 56, 56, 56, 56, 8, 8, 8, 8, 8, 56
            ]
        );
        assert_eq!(message_lengths(Test::SendBw, 2).len(), 6 + 6 + 1);
        assert!(schedule(Test::WriteLat).server_starts);
        assert!(!schedule(Test::SendLat).server_starts);
    }
}
