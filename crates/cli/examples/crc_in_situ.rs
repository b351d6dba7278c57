//! Experiment (session 16, issue 12): what a CRC32c costs where softrnic computes it.
//!
//! A plain TCP stream over loopback, sender pinned to CPU 0, busy-polling receiver on
//! CPU 1 (sockets set as softrnic's, `same_host`), messages of `SIZE` octets from one
//! buffer (as `write_bw`). With a CRC the sender checksums each message in FPDU pieces
//! (a 16-octet header, then 64,980 payload octets) before it sends it, as
//! `transmit.rs` does, and the receiver checksums each piece right after the read that
//! placed it, as `receive.rs` does. Prints the CRCs' and the sends' time per MiB, so
//! the CRC in place can be set against the same calls without a socket.
//!
//! `cargo run --release -p softrnic-cli --example crc_in_situ -- MODE SIZE SECS`
//! (run it under `chrt -f 1` on a busy machine). MODE:
//! - `none`, `fast` (`crc-fast` as softrnic calls it), `fold` (`crc-fast`'s folding
//!   path alone), `sse42` (the `crc32c` crate): the stream, CRC before each send;
//! - `fast-after`: the stream, the CRC right after each send instead;
//! - `ring`, `ring-ahead`: four source buffers in turn, each checksummed just before
//!   its send, or all four checksummed before the four sends;
//! - `alone-fast|fold|sse42`: the CRC alone, again and again over the same buffer;
//! - `evict-fast`, `evict-hot`, `evict-read`: no socket; before each CRC the buffer is
//!   copied into fresh destinations (8 MiB in turn), or into one hot destination, or
//!   as many other octets are read (nothing written).

use softrnic_rnic::same_host::{self, SameHostTcp};
use softrnic_rnic::{affinity, socket};
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

const PIECE: usize = 64_980;

#[derive(Clone, Copy, PartialEq)]
enum Crc {
    None,
    Fast,
    Sse42,
    /// `crc-fast`'s folding path alone (no crc32 instructions beside it).
    Fold,
}

static FOLD: std::sync::LazyLock<crc_fast::CrcParams> = std::sync::LazyLock::new(|| {
    crc_fast::CrcParams::new(
        "CRC-32/ISCSI",
        32,
        0x1edc_6f41,
        0xffff_ffff,
        true,
        0xffff_ffff,
        0xe306_9283,
    )
});

fn append(kind: Crc, crc: u32, data: &[u8]) -> u32 {
    match kind {
        Crc::None => crc,
        Crc::Fast => softrnic_wire::crc::crc32c_append(crc, data),
        Crc::Sse42 => crc32c::crc32c_append(crc, data),
        Crc::Fold => {
            // Timing only: the receiver's running value is not a CRC32c in this mode.
            let mut d = crc_fast::Digest::new_with_params(*FOLD);
            d.update(data);
            crc ^ d.finalize() as u32
        }
    }
}

/// The sender's CRC of one message, FPDU by FPDU; returns a value so it is not elided.
fn crc_message(kind: Crc, buf: &[u8], header: &[u8; 16]) -> u32 {
    let mut acc = 0;
    for p in buf.chunks(PIECE) {
        acc ^= match kind {
            Crc::Fast => softrnic_wire::crc::crc32c_append(softrnic_wire::crc::crc32c(header), p),
            Crc::Fold => {
                let mut d = crc_fast::Digest::new_with_params(*FOLD);
                d.update(header);
                d.update(p);
                d.finalize() as u32
            }
            _ => crc32c::crc32c_append(crc32c::crc32c(header), p),
        };
    }
    acc
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args[1].as_str();
    let size: usize = args[2].parse().unwrap();
    let secs: u64 = args[3].parse().unwrap();
    let kind = match mode {
        "none" => Crc::None,
        "fast" | "fast-after" | "ring" | "ring-ahead" | "alone-fast" | "evict-fast"
        | "evict-hot" | "evict-read" => Crc::Fast,
        "sse42" | "alone-sse42" => Crc::Sse42,
        "fold" | "alone-fold" => Crc::Fold,
        _ => panic!("mode"),
    };
    let buf = vec![0x5au8; size];
    let header = [7u8; 16];
    let dur = Duration::from_secs(secs);
    if mode.starts_with("evict") {
        // The kernel's copy without a socket: the buffer copied into a rotating 8 MiB
        // of destinations (as socket buffers), then its CRC; CRC time alone counted.
        affinity::pin_thread(0).unwrap();
        let mut dst = vec![0u8; 8 << 20];
        let (mut n, mut acc, mut at, mut crc_t) = (0u64, 0u32, 0usize, Duration::ZERO);
        let t = Instant::now();
        while t.elapsed() < dur {
            if mode == "evict-hot" || at + size > dst.len() {
                at = 0;
            }
            if mode == "evict-read" {
                // Reads another 8 MiB's worth in turn: evicts without dirty lines.
                acc ^= dst[at..at + size]
                    .iter()
                    .step_by(64)
                    .fold(0u8, |a, b| a ^ b) as u32;
            } else {
                dst[at..at + size].copy_from_slice(&buf);
            }
            at += size;
            let c = Instant::now();
            acc ^= crc_message(kind, &buf, &header);
            crc_t += c.elapsed();
            n += 1;
        }
        let mib = (n as f64 * size as f64) / (1 << 20) as f64;
        println!(
            "{mode} size {size}: crc {:.2} us/MiB, all {:.2} ({acc:x})",
            crc_t.as_secs_f64() * 1e6 / mib,
            t.elapsed().as_secs_f64() * 1e6 / mib
        );
        return;
    }
    if mode.starts_with("alone") {
        affinity::pin_thread(0).unwrap();
        let (mut n, mut acc) = (0u64, 0u32);
        let t = Instant::now();
        while t.elapsed() < dur {
            acc ^= crc_message(kind, &buf, &header);
            n += 1;
        }
        let e = t.elapsed();
        let mib = (n as f64 * size as f64) / (1 << 20) as f64;
        println!(
            "{mode} size {size}: crc {:.2} us/MiB ({acc:x})",
            e.as_secs_f64() * 1e6 / mib
        );
        return;
    }
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    same_host::listening(SameHostTcp::Tuned, &l);
    let addr = l.local_addr().unwrap();
    let rx = std::thread::spawn(move || {
        affinity::pin_thread(1).unwrap();
        let (s, _) = l.accept().unwrap();
        let (local, peer) = (s.local_addr().unwrap(), s.peer_addr().unwrap());
        same_host::apply(SameHostTcp::Tuned, s.as_raw_fd(), local, peer);
        s.set_nonblocking(true).unwrap();
        let mut region = vec![0u8; size];
        let (mut off, mut total, mut crc, mut crc_t) = (0usize, 0u64, 0u32, Duration::ZERO);
        loop {
            let end = (off / PIECE + 1) * PIECE;
            let end = end.min(size);
            match socket::recv(s.as_raw_fd(), &mut region[off..end]) {
                Ok(0) => break,
                Ok(n) => {
                    if kind != Crc::None {
                        let t = Instant::now();
                        crc = append(kind, crc, &region[off..off + n]);
                        crc_t += t.elapsed();
                    }
                    off = (off + n) % size;
                    total += n as u64;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
        }
        (total, crc_t, crc)
    });
    affinity::pin_thread(0).unwrap();
    let s = same_host::connect(addr, Duration::from_secs(5), SameHostTcp::Tuned).unwrap();
    let (local, peer) = (s.local_addr().unwrap(), s.peer_addr().unwrap());
    same_host::apply(SameHostTcp::Tuned, s.as_raw_fd(), local, peer);
    let (mut crc_t, mut send_t, mut acc, mut n) = (Duration::ZERO, Duration::ZERO, 0u32, 0u64);
    let cpu0 = softrnic_rnic::usage::thread().unwrap();
    let t0 = Instant::now();
    // Four source buffers in turn: `ring` checksums and sends each message in turn,
    // `ring-ahead` checksums all four before it sends them (one call each).
    let ring: Vec<Vec<u8>> = (0..4).map(|i| vec![0x5a ^ i as u8; size]).collect();
    while mode.starts_with("ring") && t0.elapsed() < dur {
        if mode == "ring-ahead" {
            let t = Instant::now();
            for b in &ring {
                acc ^= crc_message(kind, b, &header);
            }
            crc_t += t.elapsed();
        }
        for b in &ring {
            if mode == "ring" {
                let t = Instant::now();
                acc ^= crc_message(kind, b, &header);
                crc_t += t.elapsed();
            }
            let t = Instant::now();
            let mut sent = 0;
            while sent < size {
                sent += socket::send(s.as_raw_fd(), &b[sent..]).unwrap();
            }
            send_t += t.elapsed();
            n += 1;
        }
    }
    while !mode.starts_with("ring") && t0.elapsed() < dur {
        if mode != "fast-after" && kind != Crc::None {
            let t = Instant::now();
            acc ^= crc_message(kind, &buf, &header);
            crc_t += t.elapsed();
        }
        let t = Instant::now();
        let mut sent = 0;
        while sent < size {
            sent += socket::send(s.as_raw_fd(), &buf[sent..]).unwrap();
        }
        send_t += t.elapsed();
        if mode == "fast-after" {
            let t = Instant::now();
            acc ^= crc_message(kind, &buf, &header);
            crc_t += t.elapsed();
        }
        n += 1;
    }
    let e = t0.elapsed();
    let cpu = softrnic_rnic::usage::thread().unwrap().since(&cpu0);
    drop(s);
    let (total, rx_crc, rcrc) = rx.join().unwrap();
    let mib = (n as f64 * size as f64) / (1 << 20) as f64;
    let per = |d: Duration| d.as_secs_f64() * 1e6 / mib;
    println!(
        "{mode} size {size}: {:.0} MB/s, sender crc {:.2} us/MiB, send {:.2} us/MiB, cpu {:.2} us/MiB; \
         receiver crc {:.2} us/MiB (rx {total}, {acc:x}{rcrc:x}); load {}",
        n as f64 * size as f64 / e.as_secs_f64() / 1e6,
        per(crc_t),
        per(send_t),
        per(cpu.total()),
        per(rx_crc),
        std::fs::read_to_string("/proc/loadavg").unwrap().trim()
    );
}
