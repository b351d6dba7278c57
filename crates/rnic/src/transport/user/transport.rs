//! A connection of the device's own TCP in RDMA mode, under a QP.
//!
//! - **Sending** queues octets in the connection's TCP send buffer and sends the
//!   segments at once, from the calling thread (the QP's posting thread or engine): no
//!   other thread is woken on the send path. Each FPDU is queued as one TCP record, so
//!   segments end on FPDU boundaries and hold whole FPDUs, as many as fit: RFC 5044's
//!   MPA-aware TCP. The QP sizes each FPDU to the room left in the segment being
//!   filled ([`Transport::packed_segment`]; the CM's MULPDU is [`ConnStream::mss`]), so
//!   a large message's small last FPDU and the next message's first share a full
//!   segment. The QP's transmit path hands over FPDUs in a gather list (several whole
//!   ones) or a buffer of gathered small ones; [`Framer`] finds their boundaries from
//!   the MPA length at the start of each.
//! - **Receiving** copies in-order octets out of the connection's reassembly, into the
//!   QP's staging buffer or straight into registered memory. On a SimNet a large
//!   segment's payload is read straight out of the packet buffer it arrived in (the
//!   stack keeps the buffer until then: zero-copy receive), and the buffer goes back
//!   to the network once read.
//! - **Readiness**: the engine registers the transport under the QP's token; that
//!   registers an eventfd of the transport's own, which the stack thread writes when
//!   the connection becomes readable or writable after the QP found it would block, or
//!   closes. Like a socket in an edge-triggered epoll set, it never says `WouldBlock`
//!   while octets (or room) are there.
//!
//! [`ConnStream::mss`]: crate::transport::stream::ConnStream::mss

use super::stack::{Signal, UserStack, to_io};
use crate::region::RegionSlice;
use crate::sys::socket::IoVecs;
use crate::transport::Transport;
use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};
use softrnic_tcp::{ConnId, Stack, StackError};
use std::io;
use std::net::Shutdown;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Where the FPDU boundaries are in what the QP hands over: each FPDU starts with its
/// ULPDU length (MPA), after the marker that sits there when markers are on. Octets are taken whole FPDU by whole FPDU as TCP
/// records; a buffer that ends inside an FPDU has that part queued as plain octets,
/// and the rest of the FPDU follows at the next call.
#[derive(Debug, Default)]
pub(crate) struct Framer {
    /// Octets of the current FPDU still to come (0 at a boundary).
    carry: usize,
    /// Boundaries were lost (a length split between calls): everything is queued as
    /// plain octets from then on. Alignment is an optimisation, never needed for
    /// correctness.
    lost: bool,
    /// With markers: the stream position (octets since the first FPDU) of the next
    /// octet, which says where markers are.
    marked: Option<u64>,
}

impl Framer {
    fn new(marked: bool) -> Framer {
        Framer {
            marked: marked.then_some(0),
            ..Framer::default()
        }
    }

    /// Octets of a marker before the next FPDU's length field.
    fn lead(&self) -> usize {
        match self.marked {
            Some(pos) if softrnic_wire::markers::is_marker_pos(pos) => {
                softrnic_wire::markers::MARKER_LEN
            }
            _ => 0,
        }
    }

    /// `n` more octets were queued.
    fn count(&mut self, n: usize) {
        if let Some(pos) = &mut self.marked {
            *pos += n as u64;
        }
    }

    /// Queues as much of `buf` as fits; `WouldBlock` when nothing does.
    fn queue(&mut self, st: &mut Stack, id: ConnId, buf: &[u8]) -> Result<usize, StackError> {
        let mut taken = 0;
        while taken < buf.len() {
            let rest = &buf[taken..];
            let r = if self.lost {
                st.send(id, rest)
            } else if self.carry > 0 {
                st.send(id, &rest[..self.carry.min(rest.len())])
                    .inspect(|&n| {
                        self.carry -= n;
                    })
            } else if rest.len() < self.lead() + softrnic_wire::mpa::ULPDU_LEN_LEN {
                self.lost = true;
                st.send(id, rest)
            } else {
                let at = self.lead();
                let plain = softrnic_wire::mpa::fpdu_len(usize::from(u16::from_be_bytes([
                    rest[at],
                    rest[at + 1],
                ])));
                let len = self
                    .marked
                    .map_or(plain, |pos| softrnic_wire::markers::marked_len(pos, plain));
                if rest.len() >= len {
                    st.send_record(id, &rest[..len]).map(|()| len)
                } else {
                    // Part of an FPDU: the rest comes with the next call.
                    st.send(id, rest).inspect(|&n| self.carry = len - n)
                }
            };
            match r {
                Ok(0) => break,
                Ok(n) => {
                    taken += n;
                    self.count(n);
                }
                Err(StackError::WouldBlock) if taken > 0 => break,
                Err(e) => return Err(e),
            }
        }
        Ok(taken)
    }

    /// Queues a gather list: whole FPDUs one record each, as many as fit (see
    /// `queue_records`); else (with markers, or not whole FPDUs) all of it or nothing
    /// (`WouldBlock`) as one record. A list that could never fit the send buffer goes
    /// as plain octets, as much as fits.
    fn queue_gather(
        &mut self,
        st: &mut Stack,
        id: ConnId,
        iov: IoVecs<'_>,
    ) -> Result<usize, StackError> {
        let total = iov.len();
        let room = st.send_capacity(id);
        let whole = self.carry == 0 && !self.lost;
        let buffer = st.connection(id)?.config().send_buffer;
        if whole
            && self.marked.is_none()
            && let Some(r) = self.queue_records(st, id, &iov, room, buffer)
        {
            return r;
        }
        if whole && total > room && total <= buffer {
            // Room comes as the peer acknowledges.
            return Err(StackError::WouldBlock);
        }
        let take = total.min(room);
        if take == 0 {
            return Err(StackError::WouldBlock);
        }
        if whole && take == total {
            // The whole FPDU as one record, in one call: a large one may get a chunk
            // of its own that packets carry by reference.
            match st.send_record_with(id, take, &mut |put| iov.for_each_piece(take, |p| put(p))) {
                Ok(()) => {
                    self.count(take);
                    return Ok(take);
                }
                // No record left (the room is there): as plain octets below.
                Err(StackError::WouldBlock) => {}
                Err(e) => return Err(e),
            }
        }
        let mut left = take;
        let mut result = Ok(());
        iov.for_each_piece(take, |piece| {
            if result.is_err() {
                return;
            }
            left -= piece.len();
            // The last piece of a whole FPDU closes its record.
            result = if whole && take == total && left == 0 {
                st.send_record(id, piece)
                    .or_else(|_| st.send(id, piece).map(drop))
            } else {
                st.send(id, piece).map(drop)
            };
        });
        result?;
        self.count(take);
        if !whole || take < total {
            self.lost = true;
        }
        Ok(take)
    }
}

impl Framer {
    /// Queues a gather list of several whole FPDUs (a large message's, or with the
    /// transmit path's look-ahead several messages') one record per FPDU, all of them
    /// once they fit (as many as fit of a list larger than the send buffer): queued as
    /// one record they would be cut at segment size, every FPDU after the first out of
    /// line with the segments (RFC 5044). The TCP puts records that fit one segment together into
    /// it (the QP sized them so). `None` for a single FPDU, or a list that is not whole
    /// FPDUs end to end: the caller's rules then apply.
    fn queue_records(
        &mut self,
        st: &mut Stack,
        id: ConnId,
        iov: &IoVecs<'_>,
        mut room: usize,
        buffer: usize,
    ) -> Option<Result<usize, StackError>> {
        let total = iov.len();
        let first = fpdu_len_at(iov, 0)?;
        if first >= total {
            return None;
        }
        let mut end = first;
        while end < total {
            end += fpdu_len_at(iov, end)?;
        }
        if end != total {
            return None;
        }
        if total > room && total <= buffer {
            // All or nothing, as one record would be: the list waits for room for all
            // of it (a 1 MiB message's FPDUs queued one by one as ACKs come made the
            // sender trickle, more calls and smaller batches of segments).
            return Some(Err(StackError::WouldBlock));
        }
        let mut taken = 0;
        while taken < total {
            let len = fpdu_len_at(iov, taken)?;
            if len > room {
                break;
            }
            let start = taken;
            match st.send_record_with(id, len, &mut |put| for_each_in(iov, start, len, put)) {
                Ok(()) => {
                    self.count(len);
                    taken += len;
                    room -= len;
                }
                Err(StackError::WouldBlock) => break,
                Err(e) => return Some(Err(e)),
            }
        }
        match taken {
            // Room comes as the peer acknowledges.
            0 if first <= buffer => Some(Err(StackError::WouldBlock)),
            0 => None,
            _ => Some(Ok(taken)),
        }
    }
}

/// Calls `f` with the octets `[start, start + len)` of `iov`, piece by piece.
fn for_each_in(iov: &IoVecs<'_>, start: usize, len: usize, f: &mut dyn FnMut(&[u8])) {
    let (mut skip, mut left) = (start, len);
    iov.for_each_piece(start + len, |p| {
        if skip >= p.len() {
            skip -= p.len();
            return;
        }
        let p = &p[skip..];
        skip = 0;
        let take = p.len().min(left);
        if take > 0 {
            f(&p[..take]);
            left -= take;
        }
    });
}

/// The wire length of the FPDU that starts `start` octets into `iov`, from its MPA
/// length; `None` if the list ends before the length field does.
fn fpdu_len_at(iov: &IoVecs<'_>, start: usize) -> Option<usize> {
    let mut field = [0u8; softrnic_wire::mpa::ULPDU_LEN_LEN];
    let mut got = 0;
    for_each_in(iov, start, field.len(), &mut |p| {
        field[got..got + p.len()].copy_from_slice(p);
        got += p.len();
    });
    (got == field.len())
        .then(|| softrnic_wire::mpa::fpdu_len(usize::from(u16::from_be_bytes(field))))
}

/// A connection of the device's own TCP under a QP.
pub(crate) struct UserTransport {
    stack: Arc<UserStack>,
    id: ConnId,
    framer: Framer,
    /// Readiness for the QP's engine (its eventfd is registered there).
    signal: Arc<Signal>,
    /// Dropping sends RST instead of FIN.
    abort: bool,
    /// In-order octets taken out of the stack whole, being read out of its lock
    /// ([`UserTransport::read_to`]).
    piece: Option<softrnic_tcp::Piece>,
    /// The segment payload FPDUs are sized to (None with markers: see
    /// [`Transport::packed_segment`]).
    segment: Option<usize>,
    /// Every octet queued had left in a segment at the last send.
    all_sent: bool,
    /// Tests: called just before octets are copied out (to see what is held then).
    #[cfg(test)]
    pub(super) on_copy: fn(&UserStack),
}

impl UserTransport {
    /// Takes connection `id` into RDMA mode; `marked`: the FPDUs sent carry markers.
    pub(crate) fn new(
        stack: Arc<UserStack>,
        id: ConnId,
        marked: bool,
    ) -> io::Result<UserTransport> {
        let signal = Arc::new(Signal::new()?);
        let segment = {
            let mut g = stack.lock()?;
            g.signals.insert(id, signal.clone());
            g.stack.connection(id).map_err(to_io)?.max_payload()
        };
        Ok(UserTransport {
            stack,
            id,
            framer: Framer::new(marked),
            signal,
            abort: false,
            piece: None,
            segment: (!marked).then_some(segment),
            all_sent: false,
            #[cfg(test)]
            on_copy: |_| {},
        })
    }

    /// Reads into `out`: first what is left of a piece taken out of the stack, without
    /// its lock; then, under the lock, gives a finished piece back (the window reopens)
    /// and takes the next piece, or reads the stack's ring. A read that finds nothing
    /// asks to be woken when something comes.
    ///
    /// Why pieces: a large segment's payload stays in its packet buffer (zero-copy
    /// receive), and copying it into region memory under the stack's lock made the
    /// whole receiving TCP wait whenever the copying thread was descheduled mid-copy:
    /// the sender's packets went to the backlog unanswered (no ACK, no SACK, no repair
    /// of a hole) until that thread ran again. Out of the lock, a descheduled reader
    /// holds back only its own reading, as a reader of a kernel socket does.
    fn read_to(&mut self, out: &mut [u8]) -> io::Result<usize> {
        // A poller first does what fell due (a held-back packet, a timer): it may be
        // what this read waits for.
        self.stack.serve_due();
        let mut done = 0;
        if let Some(p) = &mut self.piece {
            #[cfg(test)]
            (self.on_copy)(&self.stack);
            done = p.copy_to(out);
            if !p.is_done() {
                // `out` is full.
                return Ok(done);
            }
        }
        let sig = &self.signal;
        if self.piece.is_none() && !sig.readable.load(Ordering::SeqCst) {
            // Nothing was there at the last look: ask to be woken, then look once more
            // (the stack may have made it readable in between), all without the lock.
            sig.want_read.store(true, Ordering::SeqCst);
            crate::chaos::point();
            if !sig.readable.load(Ordering::SeqCst) {
                return Err(io::ErrorKind::WouldBlock.into());
            }
        }
        let mut g = self.stack.lock_taking()?;
        let mut reopened = false;
        if let Some(p) = self.piece.take_if(|p| p.is_done()) {
            g.stack.piece_read(self.id, p).map_err(to_io)?;
            reopened = true;
        }
        let mut result = Ok(0);
        if done < out.len() && self.piece.is_none() {
            match g.stack.take_piece(self.id).map_err(to_io)? {
                Some(p) => self.piece = Some(p),
                None => {
                    #[cfg(test)]
                    (self.on_copy)(&self.stack);
                    result = g.stack.read(self.id, &mut out[done..]);
                }
            }
        }
        let r = match result {
            Ok(n) => {
                done += n;
                reopened |= n > 0;
                Ok(done)
            }
            Err(StackError::WouldBlock) if self.piece.is_none() => {
                // Under the lock, as the stack sets it: no arrival is missed.
                sig.readable.store(false, Ordering::SeqCst);
                sig.want_read.store(true, Ordering::SeqCst);
                if done > 0 {
                    Ok(done)
                } else {
                    Err(io::ErrorKind::WouldBlock.into())
                }
            }
            Err(StackError::WouldBlock) => Ok(done),
            // The failure stays with the connection: the next read reports it.
            Err(_) if done > 0 => Ok(done),
            Err(e) => Err(to_io(e)),
        };
        if reopened {
            g.reclaim(self.id);
            // The window reopened.
            self.stack.after(&mut g, self.id);
        }
        drop(g);
        // A piece just taken: its octets, out of the lock.
        match (&mut self.piece, &r) {
            (Some(p), Ok(n)) if !p.is_done() && *n < out.len() => {
                #[cfg(test)]
                (self.on_copy)(&self.stack);
                Ok(n + p.copy_to(&mut out[*n..]))
            }
            _ => r,
        }
    }

    /// Queues with `queue` on the locked stack and sends; a send that finds no room
    /// asks to be woken when there is.
    fn send_with(
        &mut self,
        queue: impl FnOnce(&mut Framer, &mut Stack, ConnId) -> Result<usize, StackError>,
    ) -> io::Result<usize> {
        let mut g = self.stack.lock_taking()?;
        match queue(&mut self.framer, &mut g.stack, self.id) {
            Ok(n) => {
                self.stack.after(&mut g, self.id);
                self.all_sent = g.stack.connection(self.id).is_ok_and(|c| c.unsent() == 0);
                Ok(n)
            }
            Err(StackError::WouldBlock) => {
                self.signal.want_write.store(true, Ordering::SeqCst);
                drop(g);
                // What reopens the window may be a held-back packet or a timer.
                self.stack.serve_due();
                Err(io::ErrorKind::WouldBlock.into())
            }
            Err(e) => Err(to_io(e)),
        }
    }
}

impl Transport for UserTransport {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_to(buf)
    }

    fn read_into(&mut self, dst: &RegionSlice<'_>) -> io::Result<usize> {
        // SAFETY: `dst` is a bounds-checked view of live region memory (its borrow
        // keeps the region alive). The receive path reads into a range the TPT granted
        // to the payload being placed, which only this placement writes while it runs,
        // as `RegionSlice::as_mut_slice` asks; the slice lives only for this read's
        // copies out of the stack.
        let out = unsafe { dst.as_mut_slice() };
        self.read_to(out)
    }

    fn send(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.send_with(|f, st, id| f.queue(st, id, buf))
    }

    fn send_gather(&mut self, iov: IoVecs<'_>) -> io::Result<usize> {
        self.send_with(|f, st, id| f.queue_gather(st, id, iov))
    }

    fn shutdown(&mut self, how: Shutdown) -> io::Result<()> {
        if how == Shutdown::Read {
            return Ok(());
        }
        let mut g = self.stack.lock()?;
        match g.stack.shutdown(self.id) {
            Ok(()) => {
                self.stack.after(&mut g, self.id);
                Ok(())
            }
            Err(e) => Err(to_io(e)),
        }
    }

    fn abort(&mut self) {
        self.abort = true;
    }

    fn packed_segment(&self) -> Option<usize> {
        self.segment
    }

    fn all_sent(&self) -> bool {
        self.all_sent
    }

    /// Its connection (the stack's report has its TCP state under the same id).
    fn stall_report(&self) -> String {
        format!("own TCP conn {:?}", self.id)
    }
}

impl Drop for UserTransport {
    /// Gives the connection back: FIN after what is queued, or RST after `abort`.
    fn drop(&mut self) {
        if let Ok(mut g) = self.stack.lock() {
            g.signals.remove(&self.id);
            let _ = if self.abort {
                g.stack.abort(self.id)
            } else {
                g.stack.close(self.id)
            };
            self.stack.after(&mut g, self.id);
        }
    }
}

impl mio::event::Source for UserTransport {
    /// Registers the connection's eventfd; it reports at once if it was written
    /// before (octets that came with the MPA exchange), as epoll reports a ready
    /// socket at registration.
    fn register(
        &mut self,
        registry: &Registry,
        token: Token,
        _interests: Interest,
    ) -> io::Result<()> {
        let raw = self.signal.fd.as_fd().as_raw_fd();
        registry.register(&mut SourceFd(&raw), token, Interest::READABLE)?;
        // Whatever the QP's last look found, it looks again now.
        self.signal.fd.set()
    }

    fn reregister(
        &mut self,
        registry: &Registry,
        token: Token,
        _interests: Interest,
    ) -> io::Result<()> {
        let raw = self.signal.fd.as_fd().as_raw_fd();
        registry.reregister(&mut SourceFd(&raw), token, Interest::READABLE)?;
        self.signal.fd.set()
    }

    fn deregister(&mut self, registry: &Registry) -> io::Result<()> {
        let raw = self.signal.fd.as_fd().as_raw_fd();
        registry.deregister(&mut SourceFd(&raw))
    }
}
