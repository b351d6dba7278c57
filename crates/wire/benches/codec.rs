//! Micro-benchmarks of the wire codec's hot paths, with no network in them: building an
//! FPDU (DDP/RDMAP header + payload, MPA length, pad and CRC32c) and taking it apart
//! again, plus the CRC32c alone. They exist so that a change to the framing code or to
//! the CRC can be measured against the bandwidth the data path needs, separately from
//! sockets and threads.
//!
//! Throughput is payload octets (the application's data), so headers and CRC count as
//! overhead. `cargo bench -p softrnic-wire --bench codec`.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use softrnic_wire::crc::{CrcImpl, crc32c, crc32c_append, crc32c_with};
use softrnic_wire::ddp::{DdpRepr, Placement, TAGGED_HEADER_LEN};
use softrnic_wire::mpa::{self, Deframer, MAX_FPDU_LEN, MAX_ULPDU_LEN};
use softrnic_wire::rdmap::Opcode;
use softrnic_wire::{Body, Ulpdu};
use std::hint::black_box;

/// The largest RDMA Write payload one FPDU carries: a 65535-octet ULPDU less the tagged
/// header. A 64 KiB payload does not fit in one FPDU; this is the "64K" single-FPDU size.
const MAX_TAGGED_PAYLOAD: usize = MAX_ULPDU_LEN - TAGGED_HEADER_LEN;

/// Single-FPDU payload sizes: small, one page, the largest one FPDU holds.
const SIZES: [usize; 3] = [64, 4096, MAX_TAGGED_PAYLOAD];

/// FPDU budget of the stream benchmark: a 1500-octet MTU's TCP MSS with timestamps, as
/// the transmit path sizes FPDUs (RFC 5044).
const MSS: usize = 1448;

/// The message size of the stream benchmark.
const MESSAGE: usize = 64 * 1024;

fn payload(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + 7) as u8).collect()
}

/// The header of an RDMA Write segment at tagged offset `to`.
fn write_header(to: u64, last: bool) -> DdpRepr {
    DdpRepr {
        last,
        opcode: Opcode::Write,
        placement: Placement::Tagged {
            stag: 0x0001_2345,
            to,
        },
    }
}

/// Emits one FPDU carrying `data` as an RDMA Write segment; returns its length.
fn emit_write(data: &[u8], to: u64, last: bool, crc: bool, out: &mut [u8]) -> usize {
    let (hdr, n) = write_header(to, last).to_bytes();
    mpa::emit_fpdu(&[&hdr[..n], data], crc, None, out).expect("FPDU fits")
}

fn crc_label(crc: bool) -> &'static str {
    if crc { "crc" } else { "nocrc" }
}

/// Header + payload + MPA framing into a buffer (the copy the gather path avoids is
/// included: `emit_fpdu` copies the payload).
fn fpdu_emit(c: &mut Criterion) {
    let mut g = c.benchmark_group("fpdu_emit");
    let mut out = vec![0u8; MAX_FPDU_LEN];
    for crc in [false, true] {
        for size in SIZES {
            let data = payload(size);
            g.throughput(Throughput::Bytes(size as u64));
            g.bench_function(BenchmarkId::new(crc_label(crc), size), |b| {
                b.iter(|| emit_write(black_box(&data), 0x1000, true, crc, &mut out))
            });
        }
    }
    g.finish();
}

/// `parse_fpdu` (length, pad, CRC computed and checked) then `Ulpdu::parse` (DDP/RDMAP
/// header validated, body located): what the receive side does per FPDU.
fn fpdu_parse(c: &mut Criterion) {
    let mut g = c.benchmark_group("fpdu_parse");
    let mut scratch = vec![0u8; MAX_FPDU_LEN];
    for crc in [false, true] {
        for size in SIZES {
            let data = payload(size);
            let mut wire = vec![0u8; MAX_FPDU_LEN];
            let n = emit_write(&data, 0x1000, true, crc, &mut wire);
            wire.truncate(n);
            g.throughput(Throughput::Bytes(size as u64));
            g.bench_function(BenchmarkId::new(crc_label(crc), size), |b| {
                b.iter(|| {
                    let d = mpa::parse_fpdu(black_box(&wire), None, crc, &mut scratch)
                        .expect("valid FPDU");
                    d.check_crc().expect("CRC matches");
                    let u = Ulpdu::parse(d.ulpdu).expect("valid ULPDU");
                    match u.body {
                        Body::Payload(p) => p.len(),
                        _ => 0,
                    }
                })
            });
        }
    }
    g.finish();
}

/// A 64 KiB RDMA Write message cut into MSS-sized FPDUs: emitting the whole stream, and
/// taking it apart with a `Deframer` (CRC enforced when negotiated) and `Ulpdu::parse`.
fn fpdu_stream(c: &mut Criterion) {
    let mut g = c.benchmark_group("fpdu_stream_64KiB_mss1448");
    g.throughput(Throughput::Bytes(MESSAGE as u64));
    let seg = mpa::max_ulpdu_for(MSS).expect("MSS holds an FPDU") - TAGGED_HEADER_LEN;
    let data = payload(MESSAGE);
    let fpdus = MESSAGE.div_ceil(seg);
    let mut wire = vec![0u8; fpdus * MSS];
    let mut scratch = vec![0u8; MAX_FPDU_LEN];
    for crc in [false, true] {
        let emit_all = |out: &mut [u8]| {
            let mut at = 0;
            for (i, chunk) in data.chunks(seg).enumerate() {
                let last = (i + 1) * seg >= MESSAGE;
                at += emit_write(chunk, (i * seg) as u64, last, crc, &mut out[at..]);
            }
            at
        };
        g.bench_function(BenchmarkId::new("emit", crc_label(crc)), |b| {
            b.iter(|| emit_all(&mut wire))
        });
        let len = emit_all(&mut wire);
        let stream = &wire[..len];
        g.bench_function(BenchmarkId::new("deframe", crc_label(crc)), |b| {
            b.iter(|| {
                let mut d = Deframer::new(false, crc);
                let mut input = black_box(stream);
                let mut placed = 0;
                while !input.is_empty() {
                    let f = d.next(input, &mut scratch).expect("valid FPDU");
                    if let Body::Payload(p) = Ulpdu::parse(f.ulpdu).expect("valid ULPDU").body {
                        placed += p.len();
                    }
                    input = &input[f.consumed..];
                }
                assert_eq!(placed, MESSAGE);
                placed
            })
        });
    }
    g.finish();
}

/// The loopback FPDU's payload (`rnic`'s 65000-octet loopback FPDU less its tagged
/// header and CRC): the piece the receive path checksums right after each read.
const LOOPBACK_PAYLOAD: usize = 64_980;

/// CRC32c alone: 64 B (a small Send), 556 B (the short FPDU of a 64 KiB message over
/// loopback), 1448 B (an MSS-sized FPDU), the loopback FPDU's payload, 64 KiB, 1 MiB;
/// beside it a `memcpy` of the same octets and ways to copy and checksum them (the
/// receive staging and transmit gather paths): the CRC over the copy after the whole
/// copy, over the source instead, or after each 4 KiB of the copy while it is in L1.
fn crc(c: &mut Criterion) {
    let mut g = c.benchmark_group("crc32c");
    for size in [
        64usize,
        256,
        512,
        556,
        1448,
        LOOPBACK_PAYLOAD,
        64 * 1024,
        1024 * 1024,
    ] {
        let data = payload(size);
        let mut dst = vec![0u8; size];
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_function(BenchmarkId::new("memcpy", size), |b| {
            b.iter(|| dst.copy_from_slice(black_box(&data)))
        });
        g.bench_function(BenchmarkId::new("copy-then-crc", size), |b| {
            b.iter(|| {
                dst.copy_from_slice(black_box(&data));
                crc32c_append(0x1234_5678, black_box(&dst))
            })
        });
        // The CRC over the source instead: no load of octets the copy just stored.
        g.bench_function(BenchmarkId::new("copy-crc-of-source", size), |b| {
            b.iter(|| {
                let data = black_box(&data);
                dst.copy_from_slice(data);
                crc32c_append(0x1234_5678, data)
            })
        });
        g.bench_function(BenchmarkId::new("copy-crc-per-4k", size), |b| {
            b.iter(|| {
                let mut crc = 0x1234_5678;
                for (d, s) in dst.chunks_mut(4096).zip(black_box(&data).chunks(4096)) {
                    d.copy_from_slice(s);
                    crc = crc32c_append(crc, d);
                }
                crc
            })
        });
        g.bench_function(BenchmarkId::from_parameter(size), |b| {
            b.iter(|| crc32c(black_box(&data)))
        });
        // Continued from a header's CRC, as the data path computes it.
        g.bench_function(BenchmarkId::new("append", size), |b| {
            b.iter(|| crc32c_append(black_box(0x1234_5678), black_box(&data)))
        });
        // Each implementation, whichever this CPU is given (`crc::implementation`).
        for imp in [CrcImpl::CrcFast, CrcImpl::Crc32Instruction] {
            let id = match imp {
                CrcImpl::CrcFast => "crc-fast",
                CrcImpl::Crc32Instruction => "crc32-instruction",
            };
            g.bench_function(BenchmarkId::new(id, size), |b| {
                b.iter(|| crc32c_with(imp, black_box(&data)))
            });
        }
    }
    g.finish();
}

criterion_group!(benches, fpdu_emit, fpdu_parse, fpdu_stream, crc);
criterion_main!(benches);
