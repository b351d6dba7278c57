//! Fuzz-style robustness: random and mutated inputs must never panic.
//!
//! Deterministic (fixed seeds) so failures reproduce. Every `Ok` result is
//! also checked against the output invariants.

mod common;

use std::path::Path;

use common::*;
use softrnic_capture::parse_capture;

/// xorshift64*: tiny, deterministic, good enough to shake out parsers.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Parses, checks invariants, and returns whether the parse succeeded and
/// found at least one connection (to show the fuzzing gets deep enough).
fn run(data: &[u8]) -> bool {
    match parse_capture(data) {
        Ok(conns) => {
            check_invariants(&conns);
            !conns.is_empty()
        }
        Err(e) => {
            assert!(!e.to_string().is_empty());
            false
        }
    }
}

const SUPPORTED_LINKS: [u32; 8] = [0, 1, 101, 108, 113, 228, 229, 276];

#[test]
fn random_buffers_never_panic() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut deep = 0;
    for i in 0..2000 {
        let len = rng.below(4096);
        let mut data = rng.bytes(len);
        // Give most buffers a valid file header so the record and packet
        // parsers are reached, not just the magic check.
        match i % 4 {
            0 => {}
            1 | 2 => {
                let link = SUPPORTED_LINKS[rng.below(SUPPORTED_LINKS.len())];
                let mut file = pcap_with(i % 8 < 4, i % 3 == 0, link, &[]);
                file.append(&mut data);
                data = file;
            }
            _ => {
                let mut file = pcapng(
                    &[NgIface {
                        link: SUPPORTED_LINKS[rng.below(8)] as u16,
                        tsresol: Some(rng.next() as u8),
                    }],
                    &[],
                );
                file.append(&mut data);
                data = file;
            }
        }
        deep += usize::from(run(&data));
    }
    eprintln!("random buffers with connections: {deep}/2000");
}

#[test]
fn random_tcp_streams_never_panic() {
    // Well-formed frames with hostile TCP contents: random flags, sequence
    // numbers scattered over the whole space and near wrap, truncation.
    let mut rng = Rng(42);
    let mut deep = 0;
    for _ in 0..300 {
        let base = rng.next() as u32;
        let n = 1 + rng.below(40);
        let frames: Vec<Vec<u8>> = (0..n)
            .map(|_| {
                let flags = ["", "S", "SA", "A", "FA", "R", "RA", "SF", "SFRA"][rng.below(9)];
                let seq = match rng.below(4) {
                    0 => rng.next() as u32,
                    1 => u32::MAX - rng.below(64) as u32,
                    _ => base.wrapping_add(rng.below(3000) as u32),
                };
                let len = rng.below(300);
                let payload = rng.bytes(len);
                let mut seg = if rng.below(2) == 0 {
                    c2s(seq, flags, &payload)
                } else {
                    s2c(seq, flags, &payload)
                };
                seg = seg.port(40000 + rng.below(3) as u16);
                let mut f = seg.ethernet();
                if rng.below(5) == 0 {
                    let keep = rng.below(f.len() + 1);
                    f.truncate(keep);
                }
                f
            })
            .collect();
        deep += usize::from(run(&pcap(1, &frames)));
    }
    assert!(deep > 250, "only {deep}/300 streams produced connections");
}

fn mutate(rng: &mut Rng, original: &[u8]) -> Vec<u8> {
    let mut data = original.to_vec();
    // Mostly light damage, which keeps the file parseable far enough to
    // reach the packet decoder and reassembly, sometimes heavy damage.
    let rounds = if rng.below(2) == 0 { 3 } else { 16 };
    for _ in 0..1 + rng.below(rounds) {
        if data.is_empty() {
            break;
        }
        let at = rng.below(data.len());
        match rng.below(6) {
            0 => data[at] ^= 1 << rng.below(8),
            1 => data[at] = rng.next() as u8,
            2 => {
                let v: u32 = [0, u32::MAX, 0x7fff_ffff, 0x8000_0000, 0xffff][rng.below(5)];
                for (i, b) in v.to_le_bytes().into_iter().enumerate() {
                    if let Some(slot) = data.get_mut(at + i) {
                        *slot = b;
                    }
                }
            }
            3 => data.truncate(at),
            4 => {
                let end = (at + rng.below(64)).min(data.len());
                let chunk = data[at..end].to_vec();
                let to = rng.below(data.len());
                data.splice(to..to, chunk);
            }
            _ => {
                let end = (at + rng.below(64)).min(data.len());
                data.drain(at..end);
            }
        }
    }
    data
}

#[test]
fn mutated_real_captures_never_panic() {
    let mut rng = Rng(7);
    let rping = std::fs::read(Path::new(SIW_DIR).join("siw-rping.pcap")).expect("read rping");
    let mut deep = 0;
    for _ in 0..1500 {
        deep += usize::from(run(&mutate(&mut rng, &rping)));
    }
    let big = std::fs::read(Path::new(SIW_DIR).join("siw-ib_write_bw.pcap")).expect("read");
    for _ in 0..200 {
        deep += usize::from(run(&mutate(&mut rng, &big)));
    }
    eprintln!("mutated captures with connections: {deep}/1700");
    assert!(
        deep > 400,
        "mutations rarely got past the file header: {deep}/1700"
    );
}

#[test]
fn mutated_pcapng_never_panics() {
    let mut rng = Rng(99);
    let packets: Vec<NgPacket> = [
        c2s(1, "S", b""),
        s2c(9, "SA", b""),
        c2s(2, "A", b"MPA ID Req Frame"),
        s2c(10, "A", b"MPA ID Rep Frame"),
        c2s(18, "FA", b""),
    ]
    .iter()
    .enumerate()
    .map(|(i, s)| NgPacket {
        iface: (i % 2) as u32,
        ticks: i as u64,
        data: if i % 2 == 0 { s.ethernet() } else { s.raw_ip() },
    })
    .collect();
    let ng = pcapng(
        &[
            NgIface {
                link: 1,
                tsresol: Some(6),
            },
            NgIface {
                link: 101,
                tsresol: Some(0x89),
            },
        ],
        &packets,
    );
    assert!(run(&ng), "unmutated pcapng parses");
    let mut deep = 0;
    for _ in 0..1500 {
        deep += usize::from(run(&mutate(&mut rng, &ng)));
    }
    eprintln!("mutated pcapng with connections: {deep}/1500");
    assert!(
        deep > 200,
        "mutations rarely got past the file header: {deep}/1500"
    );
}
