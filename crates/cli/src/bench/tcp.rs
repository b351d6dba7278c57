//! The TCP baselines: the same pattern as each softrnic test over plain kernel TCP
//! sockets, with the same message sizes, amounts and threads, in up to three
//! disciplines ([`TcpKind`]), each labelled as what it is, so that softrnic is compared
//! with the strongest of them and not only with the easiest.
//!
//! - Bandwidth: one stream. The client writes messages of the size (write_bw, send_bw),
//!   or the server does and the client reads (read_bw).
//!   - *blocking*: one blocking send per message, reads into a buffer of the message
//!     size, each on where the last one ended (a message lands at its own offsets, as
//!     softrnic places one);
//!   - *busy-poll*: the same calls on non-blocking sockets that both sides spin on (as
//!     softrnic's polling consumer drives its sockets);
//!   - *batching*: blocking calls through a 64 KiB buffered writer ([`BATCH_WRITE`]) and
//!     reads into a buffer of at least 256 KiB ([`BATCH_READ`]), as a streaming program
//!     would do (each read on where the last one ended, as in the other two);
//!
//!   The sockets are plain (Nagle on, as a streaming application has them) unless
//!   `--tcp-nodelay` sets `TCP_NODELAY`, as softrnic does on its own. The writer's clock
//!   stops when the reader has acknowledged every octet, as softrnic's stops on a final
//!   Read that the server answers only after all the data.
//! - Latency: a ping-pong on `TCP_NODELAY` sockets: the message size both ways
//!   (write_lat, send_lat: half the round trip is reported), or a 16-octet request
//!   answered by the message (read_lat: the full round trip); *busy-poll* (non-blocking
//!   sockets both sides spin on) and *blocking* (each side sleeps in its read).
//!
//! - Bandwidth with `-q N` (write_bw, send_bw): N streams, each with its own buffers, in
//!   one epoll set per side ([`super::tcp_streams`]), beside softrnic's N QPs.
//!
//! A 32-octet header from the client starts each connection: magic `SRNT`, test code,
//! flags (bit 0: `TCP_NODELAY`; bit 1: the one-stream write_bw/send_bw reader answers
//! its count of octets with its reads and empty reads too, [`StreamCalls`]), discipline ([`TcpKind::code`]; 0, from older clients:
//! blocking for bandwidth, busy-poll for latency), 1 reserved, size (u64), messages (u64,
//! 0: duration mode), duration in ms (u32), streams (u32; 0 from older clients: one);
//! network byte order. The other streams of a run connect right after the first and
//! send nothing before their data.
//!
//! Every baseline's sockets are set as softrnic's own in the same run (congestion
//! control, receive buffer, `--same-host-tcp`), and all of them read and write through
//! softrnic's direct system calls, not glibc's wrappers ([`super::tcp_sockets`]).

use super::stats::{BwMeter, CpuClock, Progress, StreamCalls};
use super::tcp_sockets::{self, Direct, Settings};
use super::{BenchConfig, LatResult, Measured, Mode, Test, tcp_streams};
use calls::{Reads, Sends, stream_calls};
use softrnic_rnic::SameHostTcp;
use softrnic_rnic::socket;
use std::io::{self, BufWriter, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

const MAGIC: &[u8; 4] = b"SRNT";
const HEADER_LEN: usize = 32;
const READ_REQ_LEN: usize = 16;
/// The batching baseline's sender buffer.
pub const BATCH_WRITE: usize = 64 << 10;
/// The batching baseline's smallest read.
pub const BATCH_READ: usize = 256 << 10;

/// How a TCP baseline moves its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TcpKind {
    /// Blocking sockets, one send per message, reads into a buffer of the message size
    /// (each on where the last one ended).
    Blocking,
    /// Non-blocking sockets that both sides spin on, one call per message.
    BusyPoll,
    /// Blocking sockets, a 64 KiB buffered writer and reads into a buffer of at least
    /// 256 KiB (bandwidth tests only).
    Batching,
}

impl TcpKind {
    /// The code in the baseline's header.
    pub fn code(self) -> u8 {
        match self {
            TcpKind::Blocking => 1,
            TcpKind::BusyPoll => 2,
            TcpKind::Batching => 3,
        }
    }

    fn from_code(c: u8, test: Test) -> Option<TcpKind> {
        match c {
            0 if test.is_bw() => Some(TcpKind::Blocking),
            0 => Some(TcpKind::BusyPoll),
            1 => Some(TcpKind::Blocking),
            2 => Some(TcpKind::BusyPoll),
            3 if test.is_bw() => Some(TcpKind::Batching),
            _ => None,
        }
    }

    /// The name in JSON (`baseline`, and the keys of `baselines`).
    pub fn name(self) -> &'static str {
        match self {
            TcpKind::Blocking => "blocking",
            TcpKind::BusyPoll => "busy_poll",
            TcpKind::Batching => "batching",
        }
    }

    /// The short label in tables.
    pub fn label(self) -> &'static str {
        match self {
            TcpKind::Blocking => "blocking",
            TcpKind::BusyPoll => "busy-poll",
            TcpKind::Batching => "batching",
        }
    }

    /// What it is, for the header of a run.
    pub fn describe(self, test: Test) -> String {
        let bw = test.is_bw();
        match self {
            TcpKind::Blocking if bw => {
                "one blocking send per message, reads into a message-size buffer, each on where \
                 the last ended"
                    .into()
            }
            TcpKind::Blocking => "ping-pong on blocking sockets (each side sleeps in read)".into(),
            TcpKind::BusyPoll if bw => "non-blocking sockets both sides spin on, one call per \
                                        message, reads into a message-size buffer, each on \
                                        where the last ended"
                .into(),
            TcpKind::BusyPoll => "ping-pong on non-blocking sockets both sides spin on".into(),
            TcpKind::Batching => format!(
                "blocking, a {} KiB buffered writer, reads into a buffer of at least {} KiB",
                BATCH_WRITE >> 10,
                BATCH_READ >> 10
            ),
        }
    }

    /// What it is with `n` streams (see [`super::tcp_streams`]).
    pub fn describe_streams(self, n: u16) -> String {
        let each = "each sending from and reading into its own buffers";
        match self {
            TcpKind::Blocking => format!("{n} streams, {each}, one epoll set per side that sleeps"),
            TcpKind::BusyPoll => format!("{n} streams, {each}, one epoll set per side spun on"),
            TcpKind::Batching => format!(
                "{n} streams, {each}, one epoll set per side that sleeps, reads into a buffer of at least {} KiB",
                BATCH_READ >> 10
            ),
        }
    }

    /// The baselines run with `test`: all of them; with `events` (softrnic sleeps on
    /// completion events), only those that do not spin either.
    pub fn for_test(test: Test, events: bool) -> Vec<TcpKind> {
        let mut v = vec![TcpKind::Blocking];
        if !events {
            v.push(TcpKind::BusyPoll);
        }
        if test.is_bw() {
            v.push(TcpKind::Batching);
        }
        v
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Header {
    test: Test,
    kind: TcpKind,
    size: u64,
    msgs: u64,
    duration_ms: u32,
    nodelay: bool,
    /// The reader answers with its call counts too.
    counts: bool,
    /// Streams in the run (1: one).
    streams: u32,
}

impl Header {
    fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(MAGIC);
        b[4] = self.test.code();
        b[5] = u8::from(self.nodelay) | (u8::from(self.counts) << 1);
        b[6] = self.kind.code();
        b[8..16].copy_from_slice(&self.size.to_be_bytes());
        b[16..24].copy_from_slice(&self.msgs.to_be_bytes());
        b[24..28].copy_from_slice(&self.duration_ms.to_be_bytes());
        b[28..32].copy_from_slice(&self.streams.to_be_bytes());
        b
    }

    fn decode(b: &[u8; HEADER_LEN]) -> io::Result<Header> {
        let bad = |m: &str| io::Error::new(io::ErrorKind::InvalidData, m.to_string());
        if &b[0..4] != MAGIC {
            return Err(bad("not a softrnic TCP baseline client"));
        }
        let test = Test::from_code(b[4]).ok_or_else(|| bad("unknown test"))?;
        let kind = TcpKind::from_code(b[6], test).ok_or_else(|| bad("unknown discipline"))?;
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
            kind,
            size,
            msgs: u64_at(16),
            duration_ms: u32::from_be_bytes([b[24], b[25], b[26], b[27]]),
            nodelay: b[5] & 1 != 0,
            counts: b[5] & 2 != 0,
            streams: u32::from_be_bytes([b[28], b[29], b[30], b[31]]).max(1),
        })
    }
}

/// Serves baseline connections one after the other: `max` of them, or forever; each
/// accepted socket set by `policy`, as softrnic's server sets its own (the listener
/// too: [`tcp_sockets::listening`], before the first client connects).
pub fn serve(listener: &TcpListener, max: Option<usize>, policy: SameHostTcp) -> io::Result<()> {
    let mut served = 0;
    while max.is_none_or(|m| served < m) {
        let (s, _) = listener.accept()?;
        served += 1;
        serve_one(s, listener, policy)?;
    }
    Ok(())
}

fn serve_one(mut s: TcpStream, listener: &TcpListener, policy: SameHostTcp) -> io::Result<()> {
    tcp_sockets::take_over(&s, policy)?;
    let mut hb = [0u8; HEADER_LEN];
    s.read_exact(&mut hb)?;
    let h = Header::decode(&hb)?;
    s.set_nodelay(h.nodelay)?;
    let size = h.size as usize;
    let spin = h.kind == TcpKind::BusyPoll;
    match h.test {
        Test::WriteBw | Test::SendBw if h.streams > 1 => {
            let len = read_len(h.kind, size);
            let (mut s, total) = tcp_streams::receive(s, listener, h.streams, h.kind, len, policy)?;
            s.write_all(&total.to_be_bytes())?;
        }
        Test::WriteBw | Test::SendBw => {
            let mut buf = vec![0u8; read_len(h.kind, size)];
            s.set_nonblocking(spin)?;
            let r = read_to_end_counting(&s, &mut buf, |_| {})?;
            s.set_nonblocking(false)?;
            let mut ack = r.octets.to_be_bytes().to_vec();
            if h.counts {
                ack.extend(r.reads.to_be_bytes());
                ack.extend(r.empty.to_be_bytes());
            }
            s.write_all(&ack)?;
        }
        Test::ReadBw => {
            let buf = vec![0x5au8; size];
            let deadline = (h.msgs == 0)
                .then(|| Instant::now() + Duration::from_millis(u64::from(h.duration_ms)));
            let mut w = Writer::new(&s, h.kind)?;
            let mut sent = 0u64;
            loop {
                if let Some(d) = deadline {
                    if Instant::now() >= d {
                        break;
                    }
                } else if sent >= h.msgs {
                    break;
                }
                w.write_msg(&buf)?;
                sent += 1;
            }
            w.finish()?;
            s.shutdown(std::net::Shutdown::Write)?;
            let mut rest = Vec::new();
            let _ = s.read_to_end(&mut rest);
        }
        Test::WriteLat | Test::SendLat | Test::ReadLat => {
            s.set_nonblocking(spin)?;
            let req = if h.test == Test::ReadLat {
                READ_REQ_LEN
            } else {
                size
            };
            let mut inbuf = vec![0u8; req];
            let outbuf = vec![0x5au8; size];
            while read_exact_spin(&s, &mut inbuf)? {
                write_all_spin(&s, &outbuf)?;
            }
        }
    }
    Ok(())
}

/// The reader's buffer: the message size, or at least [`BATCH_READ`] when batching.
fn read_len(kind: TcpKind, size: usize) -> usize {
    match kind {
        TcpKind::Batching => size.max(BATCH_READ),
        _ => size,
    }
}

/// The sending side of a bandwidth baseline: a message per call, blocking or spinning
/// (its calls counted), or through a buffered writer.
enum Writer<'a> {
    Direct(&'a TcpStream, Sends),
    Buffered(BufWriter<Direct<'a>>),
}

impl<'a> Writer<'a> {
    fn new(s: &'a TcpStream, kind: TcpKind) -> io::Result<Writer<'a>> {
        s.set_nonblocking(kind == TcpKind::BusyPoll)?;
        Ok(match kind {
            TcpKind::Batching => Writer::Buffered(BufWriter::with_capacity(BATCH_WRITE, Direct(s))),
            _ => Writer::Direct(s, Sends::default()),
        })
    }

    fn write_msg(&mut self, m: &[u8]) -> io::Result<()> {
        match self {
            Writer::Direct(s, n) => {
                let (ok, full) = write_all_spin(s, m)?;
                n.ok += ok;
                n.full += full;
                Ok(())
            }
            Writer::Buffered(w) => w.write_all(m),
        }
    }

    /// The calls counted so far (not for the buffered writer).
    fn sends(&self) -> Option<Sends> {
        match self {
            Writer::Direct(_, n) => Some(*n),
            Writer::Buffered(_) => None,
        }
    }

    /// Flushes what is buffered and leaves the socket blocking.
    fn finish(self) -> io::Result<()> {
        let s = match self {
            Writer::Direct(s, _) => s,
            Writer::Buffered(w) => w.into_inner().map_err(|e| e.into_error())?.0,
        };
        s.set_nonblocking(false)
    }
}

/// Reads until the end of the stream (spinning if the socket is non-blocking), calling
/// `tick` with the total so far after each read; returns the total and the calls.
///
/// Each read goes on where the last one ended in `buf`, from its start again once it is
/// full ([`next_read_at`]): with a buffer of the message size every message lands at
/// its own offsets, as softrnic places a message in its receive buffer.
fn read_to_end_counting(
    s: &TcpStream,
    buf: &mut [u8],
    mut tick: impl FnMut(u64),
) -> io::Result<Reads> {
    let mut r = Reads::default();
    let mut at = 0;
    loop {
        match Direct(s).read(&mut buf[at..]) {
            Ok(0) => return Ok(r),
            Ok(n) => {
                at = next_read_at(at, n, buf.len());
                r.octets += n as u64;
                r.reads += 1;
                tick(r.octets);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                r.empty += 1;
                std::hint::spin_loop()
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Where a stream reader's next read goes in its buffer of `len` octets after a read of
/// `n` octets at `at`: on from there, from the start once the buffer is full. A reader
/// that put every read at the start instead (the baseline before session 32) moved a
/// 1 MiB busy-polling stream about 0.8x as fast on this VM (docs/ARCHITECTURE.md,
/// "Session 32: the TCP baseline's reader").
pub(crate) fn next_read_at(at: usize, n: usize, len: usize) -> usize {
    if at + n >= len { 0 } else { at + n }
}

/// Writes everything, spinning while a non-blocking socket would block; returns the
/// calls that took octets and those that found the socket full.
fn write_all_spin(s: &TcpStream, mut b: &[u8]) -> io::Result<(u64, u64)> {
    let (mut ok, mut full) = (0, 0);
    while !b.is_empty() {
        match Direct(s).write(b) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                b = &b[n..];
                ok += 1;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                full += 1;
                std::hint::spin_loop()
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok((ok, full))
}

/// Fills `buf`, spinning while a non-blocking socket would block; false on a clean end
/// of stream before the first octet.
///
/// An empty read is told by its bare `errno`, without an `io::Error`, as softrnic's
/// polling consumer tells its own (session 28): the baseline's empty poll is no longer
/// than it needs to be.
fn read_exact_spin(s: &TcpStream, buf: &mut [u8]) -> io::Result<bool> {
    let fd = s.as_raw_fd();
    let mut got = 0;
    while got < buf.len() {
        match socket::recv_errno(fd, &mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(libc::EAGAIN) => std::hint::spin_loop(),
            Err(libc::EINTR) => {}
            Err(e) => return Err(io::Error::from_raw_os_error(e)),
        }
    }
    Ok(true)
}

/// The streams a bandwidth baseline runs with `cfg`: one per QP for write_bw and
/// send_bw; one otherwise (read_bw's server writes a single stream).
pub fn streams(cfg: &BenchConfig) -> u16 {
    match cfg.test {
        Test::WriteBw | Test::SendBw => cfg.qps.max(1),
        _ => 1,
    }
}

/// Runs one size of the baseline `kind` as the client; also returns how its first
/// socket was set.
pub fn client_round(
    cfg: &BenchConfig,
    addr: SocketAddr,
    size: usize,
    kind: TcpKind,
) -> io::Result<(Measured, Settings)> {
    let (s, tuned) = tcp_sockets::connect(addr, cfg.same_host_tcp)?;
    let settings = Settings::of(&s, tuned);
    let test = cfg.test;
    // Latency: every message goes out at once. Bandwidth: a plain socket (Nagle on)
    // unless asked, as an application streaming over TCP would have it.
    let nodelay = !test.is_bw() || cfg.tcp_nodelay;
    s.set_nodelay(nodelay)?;
    let n = streams(cfg);
    let bw_msgs = cfg.iters * u64::from(cfg.qps);
    let h = Header {
        test,
        kind,
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
        counts: matches!(test, Test::WriteBw | Test::SendBw) && n == 1,
        streams: u32::from(n),
    };
    (&s).write_all(&h.encode())?;
    let mut others = Vec::with_capacity(usize::from(n) - 1);
    for _ in 1..n {
        let (o, _) = tcp_sockets::connect(addr, cfg.same_host_tcp)?;
        o.set_nodelay(nodelay)?;
        others.push(o);
    }
    let label = format!("{} {} B tcp {}", test.name(), size, kind.label());
    let mut progress = Progress::new(label, size, test.is_bw(), cfg.show_progress);
    let cpu = CpuClock::start(cfg.mode == Mode::Loopback);
    let r = match test {
        Test::WriteBw | Test::SendBw if n > 1 => {
            let mut all = vec![s.try_clone()?];
            all.append(&mut others);
            let start = Instant::now();
            let deadline = cfg.duration.map(|d| start + d);
            let mut meter = BwMeter::start(start);
            let mut tick = |now: Instant, ops: u64| {
                meter.record(now, ops);
                progress.tick(now, ops);
            };
            let ops = tcp_streams::send(all, kind, size, deadline, cfg.iters, &mut tick)?;
            // Its clone was in the epoll set, non-blocking: the acknowledgement waits.
            s.set_nonblocking(false)?;
            let mut ack = [0u8; 8];
            (&s).read_exact(&mut ack)?;
            let end = Instant::now();
            check_ack(ack, ops, size)?;
            Measured::Bw(meter.finish(end, ops, size))
        }
        Test::WriteBw | Test::SendBw => {
            let buf = vec![0x5au8; size];
            let mut w = Writer::new(&s, kind)?;
            let start = Instant::now();
            let deadline = cfg.duration.map(|d| start + d);
            let mut meter = BwMeter::start(start);
            let mut ops = 0u64;
            loop {
                w.write_msg(&buf)?;
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
            let sends = w.sends();
            w.finish()?;
            s.shutdown(std::net::Shutdown::Write)?;
            let mut ack = [0u8; 8];
            (&s).read_exact(&mut ack)?;
            let end = Instant::now();
            check_ack(ack, ops, size)?;
            // The reader's counts follow (none from a server that does not count).
            let mut more = Vec::new();
            (&s).read_to_end(&mut more)?;
            let mut b = meter.finish(end, ops, size);
            b.calls = stream_calls(u64::from_be_bytes(ack), &more, sends);
            Measured::Bw(b)
        }
        Test::ReadBw => {
            let mut buf = vec![0u8; read_len(kind, size)];
            s.set_nonblocking(kind == TcpKind::BusyPoll)?;
            let start = Instant::now();
            let mut meter = BwMeter::start(start);
            let bytes = read_to_end_counting(&s, &mut buf, |total| {
                let now = Instant::now();
                let ops = total / size as u64;
                meter.record(now, ops);
                progress.tick(now, ops);
            })?
            .octets;
            let end = Instant::now();
            Measured::Bw(meter.finish(end, bytes / size as u64, size))
        }
        Test::WriteLat | Test::SendLat | Test::ReadLat => {
            s.set_nonblocking(kind == TcpKind::BusyPoll)?;
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
                write_all_spin(&s, &out)?;
                if !read_exact_spin(&s, &mut inbuf)? {
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
            Measured::Lat(
                LatResult::of_samples(size, samples, cfg.keep_samples)
                    .ok_or_else(|| io::Error::other("no samples"))?,
            )
        }
    };
    progress.finish();
    let r = r.with_cpu(&cpu, if test.is_bw() { 0 } else { cfg.warmup });
    Ok((r, settings))
}

/// The reader's count of octets must be what was sent.
fn check_ack(ack: [u8; 8], ops: u64, size: usize) -> io::Result<()> {
    let got = u64::from_be_bytes(ack);
    if got != ops * size as u64 {
        return Err(io::Error::other(format!(
            "reader got {got} octets, {} sent",
            ops * size as u64
        )));
    }
    Ok(())
}

mod calls;
#[cfg(test)]
mod tests;
