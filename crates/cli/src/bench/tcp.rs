//! The TCP baseline: the same pattern as each softrnic test over plain kernel TCP
//! sockets, with the same message sizes, amounts and threads.
//!
//! - Bandwidth: one stream. The client writes messages of the size (write_bw, send_bw),
//!   or the server does and the client reads (read_bw); reads use a buffer of the
//!   message size. The sockets are plain (Nagle on, as a streaming application has
//!   them) unless `--tcp-nodelay` sets `TCP_NODELAY`, as softrnic does on its own. The
//!   writer's clock stops when the reader has acknowledged every octet, as softrnic's
//!   stops on a final Read that the server answers only after all the data.
//! - Latency: a ping-pong on non-blocking `TCP_NODELAY` sockets that both sides
//!   busy-poll: the message size both ways (write_lat, send_lat: half the round trip is
//!   reported), or a 16-octet request answered by the message (read_lat: the full round
//!   trip).
//!
//! A 32-octet header from the client starts each connection: magic `SRNT`, test code,
//! flags (bit 0: `TCP_NODELAY`), 2 reserved, size (u64), messages (u64, 0: duration
//! mode), duration in ms (u32), 4 reserved; network byte order.

use super::stats::{BwMeter, LatStats, Progress};
use super::{BenchConfig, LatResult, Measured, Test};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

const MAGIC: &[u8; 4] = b"SRNT";
const HEADER_LEN: usize = 32;
const READ_REQ_LEN: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Header {
    test: Test,
    size: u64,
    msgs: u64,
    duration_ms: u32,
    nodelay: bool,
}

impl Header {
    fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(MAGIC);
        b[4] = self.test.code();
        b[5] = u8::from(self.nodelay);
        b[8..16].copy_from_slice(&self.size.to_be_bytes());
        b[16..24].copy_from_slice(&self.msgs.to_be_bytes());
        b[24..28].copy_from_slice(&self.duration_ms.to_be_bytes());
        b
    }

    fn decode(b: &[u8; HEADER_LEN]) -> io::Result<Header> {
        let bad = |m: &str| io::Error::new(io::ErrorKind::InvalidData, m.to_string());
        if &b[0..4] != MAGIC {
            return Err(bad("not a softrnic TCP baseline client"));
        }
        let test = Test::from_code(b[4]).ok_or_else(|| bad("unknown test"))?;
        let u64_at = |o: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[o..o + 8]);
            u64::from_be_bytes(a)
        };
        let size = u64_at(8);
        if size == 0 || size > super::MAX_SIZE as u64 {
            return Err(bad("bad size"));
        }
        Ok(Header {
            test,
            size,
            msgs: u64_at(16),
            duration_ms: u32::from_be_bytes([b[24], b[25], b[26], b[27]]),
            nodelay: b[5] & 1 != 0,
        })
    }
}

/// Serves baseline connections one after the other: `max` of them, or forever.
pub fn serve(listener: &TcpListener, max: Option<usize>) -> io::Result<()> {
    let mut served = 0;
    while max.is_none_or(|m| served < m) {
        let (s, _) = listener.accept()?;
        served += 1;
        serve_one(s)?;
    }
    Ok(())
}

fn serve_one(mut s: TcpStream) -> io::Result<()> {
    let mut hb = [0u8; HEADER_LEN];
    s.read_exact(&mut hb)?;
    let h = Header::decode(&hb)?;
    s.set_nodelay(h.nodelay)?;
    let size = h.size as usize;
    match h.test {
        Test::WriteBw | Test::SendBw => {
            let mut buf = vec![0u8; size];
            let mut total: u64 = 0;
            loop {
                match s.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => total += n as u64,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            s.write_all(&total.to_be_bytes())?;
        }
        Test::ReadBw => {
            let buf = vec![0x5au8; size];
            let deadline = (h.msgs == 0)
                .then(|| Instant::now() + Duration::from_millis(u64::from(h.duration_ms)));
            let mut sent = 0u64;
            loop {
                if let Some(d) = deadline {
                    if Instant::now() >= d {
                        break;
                    }
                } else if sent >= h.msgs {
                    break;
                }
                s.write_all(&buf)?;
                sent += 1;
            }
            s.shutdown(std::net::Shutdown::Write)?;
            let mut rest = Vec::new();
            let _ = s.read_to_end(&mut rest);
        }
        Test::WriteLat | Test::SendLat | Test::ReadLat => {
            s.set_nonblocking(true)?;
            let req = if h.test == Test::ReadLat {
                READ_REQ_LEN
            } else {
                size
            };
            let mut inbuf = vec![0u8; req];
            let outbuf = vec![0x5au8; size];
            while read_exact_spin(&mut s, &mut inbuf)? {
                write_all_spin(&mut s, &outbuf)?;
            }
        }
    }
    Ok(())
}

/// Writes everything, spinning while the socket would block.
fn write_all_spin(s: &mut TcpStream, mut b: &[u8]) -> io::Result<()> {
    while !b.is_empty() {
        match s.write(b) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => b = &b[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Fills `buf`, spinning while the socket would block; false on a clean end of stream
/// before the first octet.
fn read_exact_spin(s: &mut TcpStream, buf: &mut [u8]) -> io::Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Runs one size of the baseline as the client.
pub fn client_round(cfg: &BenchConfig, addr: SocketAddr, size: usize) -> io::Result<Measured> {
    let mut s = TcpStream::connect(addr)?;
    let test = cfg.test;
    // Latency: every message goes out at once. Bandwidth: a plain socket (Nagle on)
    // unless asked, as an application streaming over TCP would have it.
    let nodelay = !test.is_bw() || cfg.tcp_nodelay;
    s.set_nodelay(nodelay)?;
    let bw_msgs = cfg.iters * u64::from(cfg.qps);
    let h = Header {
        test,
        size: size as u64,
        msgs: if cfg.duration.is_some() {
            0
        } else if test.is_bw() {
            bw_msgs
        } else {
            cfg.iters + cfg.warmup
        },
        duration_ms: cfg.duration.map_or(0, |d| d.as_millis() as u32),
        nodelay,
    };
    s.write_all(&h.encode())?;
    let label = format!("{} {} B tcp", test.name(), size);
    let mut progress = Progress::new(label, size, test.is_bw(), cfg.show_progress);
    let r = match test {
        Test::WriteBw | Test::SendBw => {
            let buf = vec![0x5au8; size];
            let start = Instant::now();
            let deadline = cfg.duration.map(|d| start + d);
            let mut meter = BwMeter::start(start);
            let mut ops = 0u64;
            loop {
                s.write_all(&buf)?;
                ops += 1;
                let now = Instant::now();
                meter.record(now, ops);
                progress.tick(now, ops);
                match deadline {
                    Some(d) if now >= d => break,
                    None if ops >= bw_msgs => break,
                    _ => {}
                }
            }
            s.shutdown(std::net::Shutdown::Write)?;
            let mut ack = [0u8; 8];
            s.read_exact(&mut ack)?;
            let end = Instant::now();
            let got = u64::from_be_bytes(ack);
            if got != ops * size as u64 {
                return Err(io::Error::other(format!(
                    "reader got {got} octets, {} sent",
                    ops * size as u64
                )));
            }
            Measured::Bw(meter.finish(end, ops, size))
        }
        Test::ReadBw => {
            let mut buf = vec![0u8; size];
            let start = Instant::now();
            let mut meter = BwMeter::start(start);
            let mut bytes = 0u64;
            loop {
                match s.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        bytes += n as u64;
                        let now = Instant::now();
                        let ops = bytes / size as u64;
                        meter.record(now, ops);
                        progress.tick(now, ops);
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            let end = Instant::now();
            Measured::Bw(meter.finish(end, bytes / size as u64, size))
        }
        Test::WriteLat | Test::SendLat | Test::ReadLat => {
            s.set_nonblocking(true)?;
            let (req, resp) = if test == Test::ReadLat {
                (READ_REQ_LEN, size)
            } else {
                (size, size)
            };
            let out = vec![0xa5u8; req];
            let mut inbuf = vec![0u8; resp];
            let half = test != Test::ReadLat;
            let mut samples = Vec::with_capacity(cfg.iters as usize);
            let mut i = 0u64;
            let mut deadline = None;
            loop {
                if i == cfg.warmup {
                    deadline = cfg.duration.map(|d| Instant::now() + d);
                }
                let t0 = Instant::now();
                write_all_spin(&mut s, &out)?;
                if !read_exact_spin(&mut s, &mut inbuf)? {
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
                let t1 = Instant::now();
                if i >= cfg.warmup {
                    let us = t1.duration_since(t0).as_secs_f64() * 1e6;
                    samples.push(if half { us / 2.0 } else { us });
                    progress.tick(t1, samples.len() as u64);
                }
                i += 1;
                match deadline {
                    Some(d) if t1 >= d => break,
                    None if i >= cfg.warmup + cfg.iters => break,
                    _ => {}
                }
            }
            let stats =
                LatStats::from_samples(&samples).ok_or_else(|| io::Error::other("no samples"))?;
            Measured::Lat(LatResult {
                bytes: size,
                iterations: samples.len() as u64,
                stats,
            })
        }
    };
    progress.finish();
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip() {
        let h = Header {
            test: Test::ReadLat,
            size: 4096,
            msgs: 1100,
            duration_ms: 0,
            nodelay: true,
        };
        assert_eq!(Header::decode(&h.encode()).unwrap(), h);
        let mut b = h.encode();
        b[0] = 0;
        assert!(Header::decode(&b).is_err());
    }
}
