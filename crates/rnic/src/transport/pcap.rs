//! A transport wrapper that records what crosses it into a pcap file, as Ethernet/IPv4
//! (or IPv6)/TCP frames with the connection's real addresses and ports, so that
//! `softrnic decode`, Wireshark and tshark read a device's traffic without a capture
//! privilege or a network tap.
//!
//! The TCP headers are synthetic but consistent: a SYN, SYN-ACK, ACK handshake (with
//! window scaling, so no window looks full) opens each connection, the MPA exchange
//! (recorded by the connection manager) and then every read and write follow as
//! segments of at most [`MAX_SEGMENT`] octets, each read or write acknowledged by the
//! other side, and FIN or RST close it. The sequence numbers count exactly the octets
//! that crossed the transport, in both directions.
//!
//! Every connection of a device writes into one file ([`PcapSink`]); a mutex keeps each
//! read or write's frames together. A write error stops the recording (the file then
//! ends early) but never the connection.

use super::Transport;
use crate::region::RegionSlice;
use crate::sys::socket::IoVecs;
use etherparse::{PacketBuilder, TcpOptionElement};
use pcap_file::DataLink;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::net::{IpAddr, Shutdown, SocketAddr};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// Most payload octets in one recorded segment: what fits in one IPv4 packet
/// (65535 octets) after 20 octets of IP header and 20 of TCP header.
pub(crate) const MAX_SEGMENT: usize = 65495;

/// The largest frame: Ethernet, IPv6 and TCP headers (with options) and a full segment.
const SNAPLEN: u32 = 14 + 40 + 60 + MAX_SEGMENT as u32;

/// TCP window scale announced in the handshake: 65535 << 7 is an 8 MiB window, more
/// than one read or write ever holds, and every read or write is acknowledged at once.
const WINDOW_SCALE: u8 = 7;

/// One pcap file that a device's connections record into.
pub(crate) struct PcapSink {
    state: Mutex<SinkState>,
}

struct SinkState {
    /// `None` after a write error: recording stopped.
    file: Option<BufWriter<File>>,
    header: PcapHeader,
    /// Length of the file header that a fresh writer puts before its records.
    header_len: usize,
    /// Records are encoded here (by pcap-file) before they go to the file.
    scratch: Vec<u8>,
    /// The last timestamp written: the file's timestamps never go back, even if the
    /// system clock does.
    last: Duration,
}

impl std::fmt::Debug for PcapSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PcapSink")
    }
}

impl PcapSink {
    /// Creates (or truncates) the file and writes its header.
    pub(crate) fn create(path: &Path) -> io::Result<PcapSink> {
        let header = PcapHeader {
            snaplen: SNAPLEN,
            datalink: DataLink::ETHERNET,
            ..PcapHeader::default()
        };
        let mut file = BufWriter::with_capacity(1 << 20, File::create(path)?);
        PcapWriter::with_header(&mut file, header).map_err(io::Error::other)?;
        file.flush()?;
        let header_len = PcapWriter::with_header(Vec::new(), header)
            .map_err(io::Error::other)?
            .into_writer()
            .len();
        Ok(PcapSink {
            state: Mutex::new(SinkState {
                file: Some(file),
                header,
                header_len,
                scratch: Vec::new(),
                last: Duration::ZERO,
            }),
        })
    }

    /// Appends frames (one Ethernet frame each, `frames` concatenated, `lens` their
    /// lengths) with one timestamp.
    fn write(&self, frames: &[u8], lens: &[usize]) {
        let Ok(mut s) = self.state.lock() else {
            return;
        };
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        s.last = s.last.max(now);
        if s.write(frames, lens).is_err() {
            s.file = None;
        }
    }

    /// Pushes buffered records to the file.
    fn flush(&self) {
        if let Ok(mut s) = self.state.lock()
            && let Some(f) = s.file.as_mut()
            && f.flush().is_err()
        {
            s.file = None;
        }
    }
}

impl SinkState {
    fn write(&mut self, frames: &[u8], lens: &[usize]) -> io::Result<()> {
        if self.file.is_none() {
            return Ok(());
        }
        let buf = std::mem::take(&mut self.scratch);
        let mut w = PcapWriter::with_header(buf, self.header).map_err(io::Error::other)?;
        let mut at = 0;
        for &len in lens {
            let frame = &frames[at..at + len];
            at += len;
            w.write_packet(&PcapPacket::new(self.last, len as u32, frame))
                .map_err(io::Error::other)?;
        }
        let mut buf = w.into_writer();
        let r = match self.file.as_mut() {
            Some(f) => f.write_all(&buf[self.header_len..]),
            None => Ok(()),
        };
        buf.clear();
        self.scratch = buf;
        r
    }
}

/// One side of a recorded connection.
#[derive(Debug, Clone, Copy)]
struct End {
    addr: SocketAddr,
    mac: [u8; 6],
    /// Sequence number of its next octet.
    next: u32,
    fin: bool,
}

/// TCP flags of a recorded segment.
#[derive(Clone, Copy, Default)]
struct Flags {
    syn: bool,
    ack: bool,
    psh: bool,
    fin: bool,
    rst: bool,
}

/// The recording of one connection: its two ends' sequence numbers, and the frames
/// of the read or write being recorded.
pub(crate) struct ConnRecorder {
    sink: Arc<PcapSink>,
    local: End,
    peer: End,
    reset: bool,
    frames: Vec<u8>,
    lens: Vec<usize>,
}

impl std::fmt::Debug for ConnRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ConnRecorder({} -> {})", self.local.addr, self.peer.addr)
    }
}

impl ConnRecorder {
    /// Starts recording a connection from `local` to `peer` with its handshake; the
    /// `active` side sent the SYN.
    pub(crate) fn start(
        sink: &Arc<PcapSink>,
        local: SocketAddr,
        peer: SocketAddr,
        active: bool,
    ) -> ConnRecorder {
        // Fixed initial sequence numbers and addresses, one pair per role, so that
        // recordings are reproducible.
        let end = |addr, active: bool| End {
            addr,
            mac: [0x02, 0, 0, 0, 0, if active { 1 } else { 2 }],
            next: if active { 0x1000_0000 } else { 0x2000_0000 },
            fin: false,
        };
        let mut r = ConnRecorder {
            sink: sink.clone(),
            local: end(local, active),
            peer: end(peer, !active),
            reset: false,
            frames: Vec::new(),
            lens: Vec::new(),
        };
        let options = [
            TcpOptionElement::MaximumSegmentSize(MAX_SEGMENT as u16),
            TcpOptionElement::WindowScale(WINDOW_SCALE),
        ];
        let syn = Flags {
            syn: true,
            ..Flags::default()
        };
        r.segment(active, syn, &options, &[]);
        r.bump(active, 1);
        let syn_ack = Flags { ack: true, ..syn };
        r.segment(!active, syn_ack, &options, &[]);
        r.bump(!active, 1);
        r.ack(active);
        r.emit();
        r
    }

    /// Records octets this side sent.
    pub(crate) fn sent(&mut self, data: &[u8]) {
        self.data(true, data);
    }

    /// Records octets this side received.
    pub(crate) fn received(&mut self, data: &[u8]) {
        self.data(false, data);
    }

    /// Records this side's FIN (once).
    pub(crate) fn fin_sent(&mut self) {
        self.fin(true);
    }

    /// Records the peer's FIN (once).
    pub(crate) fn fin_received(&mut self) {
        self.fin(false);
    }

    /// Records a RST from this side (`local`) or the peer; nothing is recorded after.
    pub(crate) fn reset(&mut self, local: bool) {
        if self.reset {
            return;
        }
        let rst = Flags {
            rst: true,
            ack: true,
            ..Flags::default()
        };
        self.segment(local, rst, &[], &[]);
        self.emit();
        self.reset = true;
    }

    fn data(&mut self, local: bool, data: &[u8]) {
        if self.reset || data.is_empty() {
            return;
        }
        let flags = Flags {
            ack: true,
            psh: true,
            ..Flags::default()
        };
        for piece in data.chunks(MAX_SEGMENT) {
            self.segment(local, flags, &[], piece);
            self.bump(local, piece.len());
        }
        self.ack(!local);
        self.emit();
    }

    fn fin(&mut self, local: bool) {
        if self.reset || self.end(local).fin {
            return;
        }
        let fin = Flags {
            fin: true,
            ack: true,
            ..Flags::default()
        };
        self.segment(local, fin, &[], &[]);
        self.bump(local, 1);
        let e = if local {
            &mut self.local
        } else {
            &mut self.peer
        };
        e.fin = true;
        self.ack(!local);
        self.emit();
    }

    fn end(&self, local: bool) -> &End {
        if local { &self.local } else { &self.peer }
    }

    fn bump(&mut self, local: bool, n: usize) {
        let e = if local {
            &mut self.local
        } else {
            &mut self.peer
        };
        e.next = e.next.wrapping_add(n as u32);
    }

    /// A pure ACK from one side of everything the other sent.
    fn ack(&mut self, local: bool) {
        let ack = Flags {
            ack: true,
            ..Flags::default()
        };
        self.segment(local, ack, &[], &[]);
    }

    /// Builds one frame from `local`'s side (or the peer's) into `frames`.
    fn segment(&mut self, local: bool, f: Flags, options: &[TcpOptionElement], payload: &[u8]) {
        let (src, dst) = if local {
            (self.local, self.peer)
        } else {
            (self.peer, self.local)
        };
        let b = PacketBuilder::ethernet2(src.mac, dst.mac);
        let b = match (src.addr.ip(), dst.addr.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => b.ipv4(s.octets(), d.octets(), 64),
            (s, d) => b.ipv6(v6(s), v6(d), 64),
        };
        // Windows in a SYN are never scaled; later ones are, by WINDOW_SCALE.
        let mut b = b.tcp(src.addr.port(), dst.addr.port(), src.next, u16::MAX);
        if f.syn {
            b = b.syn();
        }
        if f.ack {
            b = b.ack(dst.next);
        }
        if f.psh {
            b = b.psh();
        }
        if f.fin {
            b = b.fin();
        }
        if f.rst {
            b = b.rst();
        }
        if !options.is_empty() {
            match b.options(options) {
                Ok(with) => b = with,
                Err(_) => return,
            }
        }
        let at = self.frames.len();
        if b.write(&mut self.frames, payload).is_ok() {
            self.lens.push(self.frames.len() - at);
        } else {
            self.frames.truncate(at);
        }
    }

    /// Writes the frames built so far to the file.
    fn emit(&mut self) {
        self.sink.write(&self.frames, &self.lens);
        self.frames.clear();
        self.lens.clear();
    }
}

impl Drop for ConnRecorder {
    fn drop(&mut self) {
        // A connection's end is a good moment to make its frames readable.
        self.sink.flush();
    }
}

fn v6(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    }
}

/// A transport that records what crosses the one it wraps.
pub(crate) struct PcapTransport {
    inner: Box<dyn Transport>,
    rec: ConnRecorder,
    /// The octets of a gather list, made contiguous for recording.
    gathered: Vec<u8>,
}

impl PcapTransport {
    /// Wraps `inner`; `rec` has recorded the connection up to now (its handshake and
    /// MPA exchange).
    pub(crate) fn new(inner: Box<dyn Transport>, rec: ConnRecorder) -> PcapTransport {
        PcapTransport {
            inner,
            rec,
            gathered: Vec::new(),
        }
    }

    /// Records what a read returned: octets, the end of the stream, or a reset.
    fn record_read(&mut self, r: &io::Result<usize>, asked: usize) {
        match r {
            Ok(0) if asked > 0 => self.rec.fin_received(),
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => self.rec.reset(false),
            _ => {}
        }
    }

    /// Records a send that failed because the peer reset the connection.
    fn record_send_error(&mut self, r: &io::Result<usize>) {
        if let Err(e) = r
            && e.kind() == io::ErrorKind::ConnectionReset
        {
            self.rec.reset(false);
        }
    }
}

impl Transport for PcapTransport {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let r = self.inner.read(buf);
        if let Ok(n) = r {
            self.rec.received(&buf[..n]);
        }
        self.record_read(&r, buf.len());
        r
    }

    fn read_into(&mut self, dst: &RegionSlice<'_>) -> io::Result<usize> {
        let r = self.inner.read_into(dst);
        if let Ok(n) = r
            && n > 0
        {
            // SAFETY: the first `n` octets were just written by the read, into a range
            // the TPT granted to the payload being placed: nothing else writes them
            // while this shared view lives (only for the recording), as for the
            // receive path's CRC over the same octets.
            self.rec.received(unsafe { dst.prefix(n).as_slice() });
        }
        self.record_read(&r, dst.len());
        r
    }

    fn send(&mut self, buf: &[u8]) -> io::Result<usize> {
        let r = self.inner.send(buf);
        if let Ok(n) = r {
            self.rec.sent(&buf[..n]);
        }
        self.record_send_error(&r);
        r
    }

    fn send_gather(&mut self, iov: IoVecs<'_>) -> io::Result<usize> {
        let r = self.inner.send_gather(iov);
        if let Ok(n) = r {
            self.gathered.clear();
            iov.for_each_piece(n, |p| self.gathered.extend_from_slice(p));
            self.rec.sent(&self.gathered);
        }
        self.record_send_error(&r);
        r
    }

    fn shutdown(&mut self, how: Shutdown) -> io::Result<()> {
        let r = self.inner.shutdown(how);
        if r.is_ok() && how != Shutdown::Read {
            self.rec.fin_sent();
        }
        r
    }

    fn abort(&mut self) {
        self.inner.abort();
        self.rec.reset(true);
    }

    fn packed_segment(&self) -> Option<usize> {
        self.inner.packed_segment()
    }

    fn all_sent(&self) -> bool {
        self.inner.all_sent()
    }
}

source_via!(PcapTransport, inner);
