//! Arriving packets: the demultiplexing by (local, remote) address, SYNs to listeners
//! (with the half-open, accept-queue and table bounds), and resets for segments no
//! connection takes.

use super::{
    ConnId, Entry, LinkChecksum, ListenerId, NoRaw, Rx, Sink, Stack, StackReceiver, Stage,
};
use crate::conn::{Connection, Lent, State};
use crate::reassembly::{HoldSpec, PacketBuf, Reassembly};
use crate::segment::{Flags, ParseError, Segment};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

impl Stack {
    /// Handles one arriving IPv4 packet: it goes to the connection its addresses name,
    /// makes a connection if it is a SYN to a listener, or is answered with a reset.
    /// Pieces of [`super::RxMode::Raw`] connections go to `raw`. A packet that does not
    /// parse is counted and returned as the error; one for an address that is not ours
    /// is counted and dropped. Its TCP checksum is verified unless the connections'
    /// [`crate::Config::checksum_offload`] says the link does.
    pub fn handle_packet<R: StackReceiver>(
        &mut self,
        now: Duration,
        packet: &[u8],
        raw: &mut R,
    ) -> Result<(), ParseError> {
        let check = if self.cfg.tcp.checksum_offload {
            LinkChecksum::Good
        } else {
            LinkChecksum::Unchecked
        };
        self.handle_packet_checked(now, packet, raw, check)
    }

    /// [`Stack::handle_packet`] with what the link found of the packet's checksums: a
    /// packet the link marks bad is dropped and counted as a checksum failure, as a
    /// NIC with receive checksum offload reports it.
    pub fn handle_packet_checked<R: StackReceiver>(
        &mut self,
        now: Duration,
        packet: &[u8],
        raw: &mut R,
        check: LinkChecksum,
    ) -> Result<(), ParseError> {
        self.handle_packet_in(now, packet, raw, check, None)
            .map(drop)
    }

    /// [`Stack::handle_packet_checked`] for a packet in the first `len` octets of a
    /// buffer the stack may keep (zero-copy receive): a large in-window payload of a
    /// [`super::RxMode::Stream`] connection stays in `buf` until the user has read it,
    /// instead of being copied into the connection's [`Reassembly`]; the buffer comes
    /// back from [`Stack::take_spent`] then. Returns `buf` when the stack did not keep
    /// it. A packet that does not parse is counted (and its buffer returned).
    pub fn handle_packet_buf<R: StackReceiver>(
        &mut self,
        now: Duration,
        buf: Vec<u8>,
        len: usize,
        raw: &mut R,
        check: LinkChecksum,
    ) -> Option<Vec<u8>> {
        let Some(packet) = buf.get(..len) else {
            self.stats.packets_in += 1;
            self.stats.dropped_malformed += 1;
            return Some(buf);
        };
        let whole = PacketBuf::of(&buf);
        let kept = self.handle_packet_in(now, packet, raw, check, Some(whole));
        match kept {
            Ok(Some((id, spec))) => self.hold(id, buf, spec),
            _ => Some(buf),
        }
    }

    /// [`Stack::handle_packet_buf`] for a packet whose headers are the first `len`
    /// octets of `head` and whose payload came by reference (`body`, from a sender's
    /// [`Stack::poll_transmit_for_lent`] on an in-process link that checks checksums
    /// for its ends). A large payload is kept by reference until read. Returns `head`
    /// for reuse.
    pub fn handle_packet_split<R: StackReceiver>(
        &mut self,
        now: Duration,
        head: Vec<u8>,
        len: usize,
        body: &Lent,
        raw: &mut R,
        check: LinkChecksum,
    ) -> Vec<u8> {
        self.stats.packets_in += 1;
        let parsed = match (check, head.get(..len)) {
            (LinkChecksum::Bad, _) => Err(ParseError::TcpChecksum),
            (_, Some(h)) => Segment::parse_split(h, body.octets()),
            (_, None) => Err(ParseError::Ipv4),
        };
        let seg = match parsed {
            Ok(s) => s,
            Err(e) => {
                self.count_parse_error(e);
                return head;
            }
        };
        let whole = PacketBuf::lent(&body.chunk, body.range.len());
        if let Some((id, spec)) = self.segment_in(now, &seg, raw, Some(whole))
            && let Some(Entry {
                rx: Rx::Stream(Some(r)),
                ..
            }) = self.entry_mut(id)
            && r.hold_lent(body, spec)
        {
            self.stats.packets_held += 1;
        }
        head
    }

    /// Counts a packet that does not parse: a checksum failure or a malformed packet.
    fn count_parse_error(&mut self, e: ParseError) {
        match e {
            ParseError::Ipv4Checksum | ParseError::TcpChecksum => self.stats.dropped_checksum += 1,
            _ => self.stats.dropped_malformed += 1,
        }
    }

    /// Hands `buf` to connection `id`'s byte stream, which kept a piece of it.
    fn hold(&mut self, id: ConnId, buf: Vec<u8>, spec: HoldSpec) -> Option<Vec<u8>> {
        let Some(Entry {
            rx: Rx::Stream(Some(r)),
            ..
        }) = self.entry_mut(id)
        else {
            return Some(buf);
        };
        let back = r.hold(buf, spec);
        if back.is_none() {
            self.stats.packets_held += 1;
        }
        back
    }

    /// Parses and handles a packet; `whole`: the buffer it lies in may be kept, and
    /// the connection that wants to keep a piece of it is returned with the piece.
    fn handle_packet_in<R: StackReceiver>(
        &mut self,
        now: Duration,
        packet: &[u8],
        raw: &mut R,
        check: LinkChecksum,
        whole: Option<PacketBuf>,
    ) -> Result<Option<(ConnId, HoldSpec)>, ParseError> {
        self.stats.packets_in += 1;
        let parsed = match check {
            LinkChecksum::Bad => Err(ParseError::TcpChecksum),
            LinkChecksum::Good => Segment::parse_with(packet, false),
            LinkChecksum::Unchecked => Segment::parse(packet),
        };
        let seg = match parsed {
            Ok(s) => s,
            Err(e) => {
                self.count_parse_error(e);
                return Err(e);
            }
        };
        Ok(self.segment_in(now, &seg, raw, whole))
    }

    /// [`Stack::handle_packet`] for a segment parsed already.
    pub fn handle_segment<R: StackReceiver>(
        &mut self,
        now: Duration,
        seg: &Segment<'_>,
        raw: &mut R,
    ) {
        self.segment_in(now, seg, raw, None);
    }

    /// [`Stack::handle_segment`]; `whole`: the packet's buffer, which the connection
    /// may keep a piece of (it is returned with the piece then).
    fn segment_in<R: StackReceiver>(
        &mut self,
        now: Duration,
        seg: &Segment<'_>,
        raw: &mut R,
        whole: Option<PacketBuf>,
    ) -> Option<(ConnId, HoldSpec)> {
        if !self.addrs.contains(seg.dst.ip()) {
            self.stats.not_local += 1;
            return None;
        }
        let syn_only = seg.flags & (Flags::SYN | Flags::ACK | Flags::RST) == Flags::SYN;
        if let Some(&id) = self.by_tuple.get(&(seg.dst, seg.src)) {
            let listener = self.listener_for(seg.dst);
            match self.entry(id) {
                // A new incarnation from a peer whose old connection we hold in
                // TIME-WAIT and no longer need (RFC 9293 3.6.1 lets a SYN reopen it).
                Some(e)
                    if syn_only
                        && listener.is_some()
                        && e.stage == Stage::Released
                        && e.conn.state() == State::TimeWait =>
                {
                    self.remove(id);
                }
                _ => {
                    return self.deliver(now, id, seg, raw, whole).map(|s| (id, s));
                }
            }
        }
        if syn_only && let Some(l) = self.listener_for(seg.dst) {
            self.on_syn(now, l, seg);
            return None;
        }
        self.reset(seg);
        None
    }

    /// The listener that takes SYNs to `local`.
    fn listener_for(&self, local: SocketAddrV4) -> Option<ListenerId> {
        self.by_local
            .get(&local)
            .or_else(|| {
                self.by_local
                    .get(&SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, local.port()))
            })
            .copied()
    }

    /// Hands `seg` to connection `id` and reports what it changed; returns the piece
    /// of `whole` (the packet's buffer) the connection keeps there, if any.
    pub(super) fn deliver<R: StackReceiver>(
        &mut self,
        now: Duration,
        id: ConnId,
        seg: &Segment<'_>,
        raw: &mut R,
        whole: Option<PacketBuf>,
    ) -> Option<HoldSpec> {
        let e = self.entry_mut(id)?;
        // The byte stream of a passive open is allocated when its first payload
        // comes, which needs the handshake's ACK: a SYN flood allocates none.
        if matches!(e.rx, Rx::Stream(None))
            && !seg.payload.is_empty()
            && seg.flags.contains(Flags::ACK)
        {
            e.rx = Rx::Stream(Some(Reassembly::for_connection(&e.conn)));
        }
        let before = super::output::Snapshot::of(e);
        let Entry { conn, rx, .. } = e;
        let mut sink = Sink {
            id,
            rx,
            raw,
            whole,
            hold: None,
        };
        conn.handle_segment(now, seg, &mut sink);
        let hold = sink.hold;
        self.observe(id, before);
        hold
    }

    /// A SYN for listener `l`: a new half-open connection, within the bounds.
    fn on_syn(&mut self, now: Duration, l: ListenerId, seg: &Segment<'_>) {
        let Some(lis) = self.listeners.get(&l) else {
            return;
        };
        if lis.ready.len() >= lis.backlog {
            // The client sends its SYN again; by then `accept` may have made room.
            self.stats.syn_backlog_full += 1;
            return;
        }
        let mode = lis.mode;
        if lis.half_open.len() >= self.cfg.max_half_open {
            self.evict_half_open(l);
        }
        if self.live >= self.cfg.max_connections && !self.evict_half_open(l) {
            self.stats.syn_table_full += 1;
            return;
        }
        let (local, remote) = (seg.dst, seg.src);
        let iss = crate::initial_sequence(self.cfg.secret, local, remote, now);
        let conn = Connection::listen(self.cfg.tcp.clone(), local, iss);
        let rx = match mode {
            super::RxMode::Stream => Rx::Stream(None),
            super::RxMode::Raw => Rx::Raw,
        };
        let id = self.insert(conn, (local, remote), rx, Stage::HalfOpen(l));
        if let Some(lis) = self.listeners.get_mut(&l) {
            lis.half_open.push_back(id);
        }
        self.deliver(now, id, seg, &mut NoRaw, None);
    }

    /// Drops listener `l`'s oldest half-open connection (no reset: a real client's
    /// next segment gets one); false if it has none.
    fn evict_half_open(&mut self, l: ListenerId) -> bool {
        let Some(old) = self
            .listeners
            .get_mut(&l)
            .and_then(|x| x.half_open.pop_front())
        else {
            return false;
        };
        self.stats.half_open_evicted += 1;
        self.remove(old);
        true
    }

    /// Answers a segment nobody takes with a reset (RFC 9293 3.10.7.1), unless it is
    /// one or too many resets wait already.
    fn reset(&mut self, seg: &Segment<'_>) {
        let Some(rst) = crate::reset_for(seg) else {
            return;
        };
        if self.resets.len() >= self.cfg.max_pending_resets {
            self.stats.resets_suppressed += 1;
            return;
        }
        self.resets.push_back(rst);
    }
}
