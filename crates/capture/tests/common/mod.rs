//! Helpers shared by the integration tests: synthetic packets, capture file
//! writers and the invariants every parse result must satisfy.

#![allow(dead_code)] // each test binary uses a different subset

use std::net::{IpAddr, Ipv4Addr};

use etherparse::{IpHeaders, PacketBuilder, PacketBuilderStep};
use softrnic_capture::{Connection, Direction, Endpoint};

/// Directory with the reference siw captures (beside the repository).
pub const SIW_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/testdata/siw");

pub const CLIENT_IP: [u8; 4] = [10, 0, 0, 1];
pub const SERVER_IP: [u8; 4] = [10, 0, 0, 2];
pub const CLIENT_PORT: u16 = 40000;
pub const SERVER_PORT: u16 = 7174;

pub fn client() -> Endpoint {
    Endpoint {
        addr: IpAddr::V4(Ipv4Addr::from(CLIENT_IP)),
        port: CLIENT_PORT,
    }
}

pub fn server() -> Endpoint {
    Endpoint {
        addr: IpAddr::V4(Ipv4Addr::from(SERVER_IP)),
        port: SERVER_PORT,
    }
}

/// A TCP segment to synthesise. `flags` may contain S, A, F, R.
#[derive(Clone, Debug)]
pub struct Seg {
    pub to_server: bool,
    pub seq: u32,
    pub flags: &'static str,
    pub payload: Vec<u8>,
    pub client_port: u16,
}

/// Segment from the client to the server.
pub fn c2s(seq: u32, flags: &'static str, payload: &[u8]) -> Seg {
    Seg {
        to_server: true,
        seq,
        flags,
        payload: payload.to_vec(),
        client_port: CLIENT_PORT,
    }
}

/// Segment from the server to the client.
pub fn s2c(seq: u32, flags: &'static str, payload: &[u8]) -> Seg {
    Seg {
        to_server: false,
        ..c2s(seq, flags, payload)
    }
}

impl Seg {
    pub fn port(mut self, client_port: u16) -> Self {
        self.client_port = client_port;
        self
    }

    fn ends(&self) -> (([u8; 4], u16), ([u8; 4], u16)) {
        let c = (CLIENT_IP, self.client_port);
        let s = (SERVER_IP, SERVER_PORT);
        if self.to_server { (c, s) } else { (s, c) }
    }

    fn finish_tcp(&self, b: PacketBuilderStep<IpHeaders>) -> Vec<u8> {
        let ((_, sport), (_, dport)) = self.ends();
        let mut t = b.tcp(sport, dport, self.seq, 65535);
        if self.flags.contains('S') {
            t = t.syn();
        }
        if self.flags.contains('A') {
            t = t.ack(1);
        }
        if self.flags.contains('F') {
            t = t.fin();
        }
        if self.flags.contains('R') {
            t = t.rst();
        }
        let mut out = Vec::new();
        t.write(&mut out, &self.payload).expect("build packet");
        out
    }

    /// Ethernet II + IPv4 + TCP frame.
    pub fn ethernet(&self) -> Vec<u8> {
        let ((sip, _), (dip, _)) = self.ends();
        self.finish_tcp(PacketBuilder::ethernet2([2; 6], [4; 6]).ipv4(sip, dip, 64))
    }

    /// IPv4 + TCP with no link header.
    pub fn raw_ip(&self) -> Vec<u8> {
        let ((sip, _), (dip, _)) = self.ends();
        self.finish_tcp(PacketBuilder::ipv4(sip, dip, 64))
    }

    /// Ethernet II + one VLAN tag + IPv4 + TCP.
    pub fn vlan(&self) -> Vec<u8> {
        let ((sip, _), (dip, _)) = self.ends();
        self.finish_tcp(
            PacketBuilder::ethernet2([2; 6], [4; 6])
                .single_vlan(etherparse::VlanId::try_new(42).expect("vlan id"))
                .ipv4(sip, dip, 64),
        )
    }

    /// Ethernet II + IPv6 + TCP, using ::ffff-free documentation addresses.
    pub fn ipv6(&self) -> Vec<u8> {
        let ((sip, _), (dip, _)) = self.ends();
        let v6 = |ip: [u8; 4]| {
            let mut a = [0u8; 16];
            a[0] = 0x20;
            a[1] = 0x01;
            a[2] = 0x0d;
            a[3] = 0xb8;
            a[12..].copy_from_slice(&ip);
            a
        };
        self.finish_tcp(PacketBuilder::ethernet2([2; 6], [4; 6]).ipv6(v6(sip), v6(dip), 64))
    }
}

/// Timestamp the pcap writers give frame `i` (0-based): 1.7e9 s + i s + i µs.
pub fn ts_ns(i: usize) -> u64 {
    (1_700_000_000 + i as u64) * 1_000_000_000 + i as u64 * 1_000
}

/// Classic pcap with explicit byte order and timestamp resolution.
pub fn pcap_with(big_endian: bool, nano: bool, link: u32, frames: &[Vec<u8>]) -> Vec<u8> {
    let u32b = |v: u32| {
        if big_endian {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    };
    let u16b = |v: u16| {
        if big_endian {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    };
    let mut out = Vec::new();
    out.extend_from_slice(&u32b(if nano { 0xa1b2_3c4d } else { 0xa1b2_c3d4 }));
    out.extend_from_slice(&u16b(2));
    out.extend_from_slice(&u16b(4));
    out.extend_from_slice(&u32b(0));
    out.extend_from_slice(&u32b(0));
    out.extend_from_slice(&u32b(262_144));
    out.extend_from_slice(&u32b(link));
    for (i, f) in frames.iter().enumerate() {
        let frac = if nano { i as u32 * 1_000 } else { i as u32 };
        out.extend_from_slice(&u32b(1_700_000_000 + i as u32));
        out.extend_from_slice(&u32b(frac));
        out.extend_from_slice(&u32b(f.len() as u32));
        out.extend_from_slice(&u32b(f.len() as u32));
        out.extend_from_slice(f);
    }
    out
}

/// Little-endian microsecond pcap, the most common flavour.
pub fn pcap(link: u32, frames: &[Vec<u8>]) -> Vec<u8> {
    pcap_with(false, false, link, frames)
}

/// Ethernet pcap of the given segments.
pub fn eth_pcap(segs: &[Seg]) -> Vec<u8> {
    let frames: Vec<Vec<u8>> = segs.iter().map(Seg::ethernet).collect();
    pcap(1, &frames)
}

fn ng_block(out: &mut Vec<u8>, block_type: u32, body: &[u8]) {
    let mut body = body.to_vec();
    body.resize(body.len().div_ceil(4) * 4, 0);
    let len = body.len() as u32 + 12;
    out.extend_from_slice(&block_type.to_le_bytes());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&body);
    out.extend_from_slice(&len.to_le_bytes());
}

/// A pcapng interface: link type and optional `if_tsresol` byte.
pub struct NgIface {
    pub link: u16,
    pub tsresol: Option<u8>,
}

/// A pcapng packet: interface, raw timestamp ticks and data.
pub struct NgPacket {
    pub iface: u32,
    pub ticks: u64,
    pub data: Vec<u8>,
}

/// Little-endian pcapng with one section, the given interfaces and
/// enhanced packet blocks.
pub fn pcapng(ifaces: &[NgIface], packets: &[NgPacket]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut shb = Vec::new();
    shb.extend_from_slice(&0x1a2b_3c4d_u32.to_le_bytes());
    shb.extend_from_slice(&1u16.to_le_bytes());
    shb.extend_from_slice(&0u16.to_le_bytes());
    shb.extend_from_slice(&(-1i64).to_le_bytes());
    ng_block(&mut out, 0x0a0d_0d0a, &shb);
    for iface in ifaces {
        let mut idb = Vec::new();
        idb.extend_from_slice(&iface.link.to_le_bytes());
        idb.extend_from_slice(&0u16.to_le_bytes());
        idb.extend_from_slice(&262_144u32.to_le_bytes());
        if let Some(r) = iface.tsresol {
            idb.extend_from_slice(&9u16.to_le_bytes());
            idb.extend_from_slice(&1u16.to_le_bytes());
            idb.extend_from_slice(&[r, 0, 0, 0]);
            idb.extend_from_slice(&[0, 0, 0, 0]); // opt_endofopt
        }
        ng_block(&mut out, 1, &idb);
    }
    for p in packets {
        let mut epb = Vec::new();
        epb.extend_from_slice(&p.iface.to_le_bytes());
        epb.extend_from_slice(&((p.ticks >> 32) as u32).to_le_bytes());
        epb.extend_from_slice(&(p.ticks as u32).to_le_bytes());
        epb.extend_from_slice(&(p.data.len() as u32).to_le_bytes());
        epb.extend_from_slice(&(p.data.len() as u32).to_le_bytes());
        epb.extend_from_slice(&p.data);
        ng_block(&mut out, 6, &epb);
    }
    out
}

/// Checks the invariants every successfully parsed connection must satisfy.
pub fn check_invariants(conns: &[Connection]) {
    for (i, c) in conns.iter().enumerate() {
        assert_eq!(c.index, i, "indices are positions");
        if i > 0 {
            assert!(
                c.first_frame >= conns[i - 1].first_frame,
                "ordered by first packet"
            );
        }
        check_direction(&c.to_server);
        check_direction(&c.to_client);
    }
}

fn check_direction(d: &Direction) {
    let mut expect = 0u64;
    for s in &d.segments {
        assert_eq!(s.offset, expect, "segments tile the bytes in order");
        assert!(s.len > 0, "segments carry payload");
        expect += u64::from(s.len);
    }
    assert_eq!(
        expect,
        d.bytes.len() as u64,
        "segments cover exactly the bytes"
    );
    if let Some(&(first, _)) = d.gaps.first() {
        assert_eq!(first, d.bytes.len() as u64, "bytes stop at the first gap");
    }
    let mut prev_end = 0u64;
    for &(off, len) in &d.gaps {
        assert!(len > 0, "gaps are non-empty");
        assert!(off >= prev_end, "gaps are ordered and disjoint");
        prev_end = off + len;
    }
}
