//! Reads of a socket that a busy-polling consumer may own ([`crate::handoff`]).
//!
//! The receive path reads until the stream would block, as the engine's edge-triggered
//! epoll requires. For a message that fits one read, that costs a second, empty
//! `read(2)` after the one that brought it, on the message's critical path, before its
//! completion is delivered. A read that returns less than it was offered has emptied
//! the kernel's receive queue; while a polling consumer owns the socket (it reads again
//! on its next poll, and no epoll edge is awaited), the read after such a short one
//! answers `WouldBlock` without a system call. While the engine owns the socket, every
//! read goes to the kernel, but over a kernel socket the engine's receive loop asks
//! ([`PolledTransport::pass_drained`]) and ends the pass after a short read instead of
//! reading again for `EAGAIN`, unless the pass's event carried an end or an error
//! ([`PolledTransport::event_ends`]; session 31).
//!
//! Over the kernel TCP transport it makes the plain reads (`recv(2)`, the spin's every
//! read) and the plain sends (a single post's `send(2)`) on the socket itself, without
//! a second call through the [`Transport`] trait.

use super::socket::SocketTransport;
use super::{ClaimedRead, Transport};
use crate::cpu_share::{IdleYield, Spinner};
use crate::region::RegionSlice;
use crate::sys::socket::IoVecs;
use std::cell::RefCell;
use std::io;
use std::net::Shutdown;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A transport whose empty reads a polling consumer skips (see the module notes).
pub(crate) struct PolledTransport {
    inner: Inner,
    /// A polling consumer owns the socket (changed under the QP's lock, as the reads
    /// are made).
    claimed: Arc<AtomicBool>,
    /// The last read was short: the kernel's queue was empty after it.
    drained: bool,
    /// The engine's last event for the socket carried an end of stream or an error:
    /// its passes read past a short read until the socket says so.
    event_ended: bool,
}

/// What the polled transport reads from and sends to: the kernel socket itself (its
/// reads and plain sends then made without a dynamic call), or any other transport.
enum Inner {
    Socket(SocketTransport),
    Other(Box<dyn Transport>),
}

impl Inner {
    fn get(&self) -> &dyn Transport {
        match self {
            Inner::Socket(s) => s,
            Inner::Other(t) => &**t,
        }
    }

    fn get_mut(&mut self) -> &mut dyn Transport {
        match self {
            Inner::Socket(s) => s,
            Inner::Other(t) => &mut **t,
        }
    }
}

impl PolledTransport {
    pub(crate) fn new(inner: Box<dyn Transport>, claimed: Arc<AtomicBool>) -> PolledTransport {
        PolledTransport::over(Inner::Other(inner), claimed)
    }

    /// Over a kernel socket: its reads and plain sends are made on it directly.
    pub(crate) fn over_socket(sock: SocketTransport, claimed: Arc<AtomicBool>) -> PolledTransport {
        PolledTransport::over(Inner::Socket(sock), claimed)
    }

    fn over(inner: Inner, claimed: Arc<AtomicBool>) -> PolledTransport {
        PolledTransport {
            inner,
            claimed,
            drained: false,
            event_ended: false,
        }
    }

    /// [`Transport::read`], for a caller that holds this type (inlined there).
    #[inline]
    pub(crate) fn read_inline(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.skip() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let r = match &mut self.inner {
            Inner::Socket(s) => s.read_inline(buf),
            Inner::Other(t) => t.read(buf),
        };
        self.note(&r, buf.len());
        r
    }

    /// [`PolledTransport::read_inline`] as a [`ClaimedRead`]: a skipped read and, over
    /// the kernel socket, an empty one give [`ClaimedRead::Empty`] without an
    /// `io::Error`.
    #[inline]
    pub(crate) fn read_claimed(&mut self, buf: &mut [u8]) -> ClaimedRead {
        if self.skip() {
            return ClaimedRead::Empty;
        }
        let len = buf.len();
        let r = match &mut self.inner {
            Inner::Socket(s) => s.read_claimed(buf),
            Inner::Other(t) => ClaimedRead::from_result(t.read(buf)),
        };
        // Set in each arm, and `0 < n < len` in one compare (`n - 1` wraps for 0): a
        // message's read tests this between its `recvfrom` and the receive path.
        if let ClaimedRead::Got(n) = r {
            self.drained = n.wrapping_sub(1) < len.wrapping_sub(1);
            ClaimedRead::Got(n)
        } else {
            self.drained = false;
            r
        }
    }

    /// [`Transport::send`], for a caller that holds this type (inlined there): over
    /// the kernel socket, the socket's own send (its seat in the send buffer budget
    /// applied, then `send(2)`) without a call through the trait.
    #[inline(always)]
    pub(crate) fn send_inline(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.inner {
            Inner::Socket(s) => s.send_inline(buf),
            Inner::Other(t) => t.send(buf),
        }
    }

    /// [`Transport::drained`] for a claimed consumer's quick pass (`receive::quick`):
    /// the polling consumer's skip alone. That pass runs only while the consumer holds
    /// the socket, where [`PolledTransport::pass_drained`] gives the same answer; this
    /// one stays the two loads of the latency path's check after a message (inlined
    /// there: the engine's test beside it made the check a call, 20 instructions a
    /// round trip instead of main's few, `write_lat` server, session 31).
    #[inline]
    pub(crate) fn drained_inline(&mut self) -> bool {
        self.skip()
    }

    /// [`Transport::drained`] for the general receive loop. Besides the polling
    /// consumer's skip, an engine's pass over a kernel socket stops after a short read
    /// too: epoll(7) says a short read of a stream socket has exhausted it, and the
    /// kernel raises the edge-triggered set's next event for any octets, end or error
    /// that arrive after it (`sk_data_ready`, `sk_state_change`, `sk_error_report`), so
    /// the empty `read(2)` that used to end every pass tells the engine nothing. It was
    /// about half of a 64-octet Write server's system calls (docs/ARCHITECTURE.md,
    /// "Session 30: the 64-octet rate's system calls"). Not when the pass's event
    /// carried an end or an error ([`PolledTransport::event_ends`]). Only the receive
    /// loop asks this, right before its next read, and a pass starts with the flag
    /// cleared ([`PolledTransport::begin_pass`]), so an engine never skips the first
    /// read an event asked for. One exception to "short means empty": `recv(2)` stops
    /// at a peer's urgent (out-of-band) mark once it has copied something, with octets
    /// behind it; the pass then ends and those octets wait for the peer's next segment.
    /// Only a peer that sends urgent data (no iWARP peer does) stalls, and only its own
    /// stream; an end or error behind it still rides its event or raises one.
    #[inline]
    pub(crate) fn pass_drained(&mut self) -> bool {
        let short = std::mem::take(&mut self.drained);
        // The consumer's answer first, as in `skip`. The order changes no answer (both
        // tests are pure; session 30's differing read counts were the test's, see
        // tests/engine_short_read.rs).
        short
            && (self.claimed.load(Ordering::Relaxed)
                || (matches!(self.inner, Inner::Socket(_)) && !self.event_ended))
    }

    /// The engine's event for the socket carried an end of stream or an error (`ends`),
    /// or not. A reset or FIN that arrived before the event was handed out rides on it:
    /// a short read takes the octets before it, and no later event comes for it, so
    /// such a pass reads until the end or the error is read. One that arrives later
    /// raises an event of its own.
    #[inline]
    pub(crate) fn event_ends(&mut self, ends: bool) {
        self.event_ended = ends;
    }

    /// A receive pass begins: a short read of an earlier pass says nothing about the
    /// socket now, unless a polling consumer owns it (it reads again on its next poll
    /// anyway, and its claimed read's flag is the general path's to use, see
    /// `receive::quick`).
    #[inline]
    pub(crate) fn begin_pass(&mut self) {
        if !self.claimed.load(Ordering::Relaxed) {
            self.drained = false;
        }
    }

    /// Whether to answer this read with `WouldBlock` at once.
    fn skip(&mut self) -> bool {
        std::mem::take(&mut self.drained) && self.claimed.load(Ordering::Relaxed)
    }

    fn note(&mut self, r: &io::Result<usize>, offered: usize) {
        self.drained = matches!(r, Ok(n) if *n > 0 && *n < offered);
    }
}

impl Transport for PolledTransport {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_inline(buf)
    }

    fn read_into(&mut self, dst: &RegionSlice<'_>) -> io::Result<usize> {
        if self.skip() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let r = self.inner.get_mut().read_into(dst);
        self.note(&r, dst.len());
        r
    }

    fn read_into_then(&mut self, dst: &RegionSlice<'_>, tail: &mut [u8]) -> io::Result<usize> {
        if self.skip() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let offered = dst.len() + tail.len();
        let r = self.inner.get_mut().read_into_then(dst, tail);
        self.note(&r, offered);
        r
    }

    /// The `WouldBlock` of a skipped read, known without making one (nor an
    /// `io::Error`): the receive path stops right after the message.
    fn drained(&mut self) -> bool {
        self.pass_drained()
    }

    /// Only while a polling consumer owns the socket (the engine reads on readiness
    /// events, never on an empty socket), and only when an engine ran on the
    /// consumer's CPU since its last look (`cpu_share`). Measured on loopback with
    /// every thread at `chrt -f 1` (send_bw at 64 KiB, the receiver a polling
    /// consumer): the yield let the receiver's engine, on the same CPU, run, and moved
    /// 7,079-7,278 MB/s against 6,194-6,872 without it (docs/ARCHITECTURE.md, "Send at
    /// 64 KiB"); a yield to anyone else gives the consumer's CPU away ("The idle
    /// yield").
    fn yield_before_reread(&mut self) -> bool {
        if !self.claimed.load(Ordering::Relaxed) || !engine_waits() {
            return false;
        }
        std::thread::yield_now();
        true
    }

    fn send(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.send_inline(buf)
    }

    fn send_gather(&mut self, iov: IoVecs<'_>) -> io::Result<usize> {
        self.inner.get_mut().send_gather(iov)
    }

    fn shutdown(&mut self, how: Shutdown) -> io::Result<()> {
        self.inner.get_mut().shutdown(how)
    }

    fn abort(&mut self) {
        self.inner.get_mut().abort();
    }

    fn packed_segment(&self) -> Option<usize> {
        self.inner.get().packed_segment()
    }

    fn all_sent(&self) -> bool {
        self.inner.get().all_sent()
    }

    fn stall_report(&self) -> String {
        format!(
            "{} (next read skipped: {})",
            self.inner.get().stall_report(),
            self.drained
        )
    }
}

impl mio::event::Source for Inner {
    fn register(
        &mut self,
        registry: &mio::Registry,
        token: mio::Token,
        interests: mio::Interest,
    ) -> io::Result<()> {
        self.get_mut().register(registry, token, interests)
    }

    fn reregister(
        &mut self,
        registry: &mio::Registry,
        token: mio::Token,
        interests: mio::Interest,
    ) -> io::Result<()> {
        self.get_mut().reregister(registry, token, interests)
    }

    fn deregister(&mut self, registry: &mio::Registry) -> io::Result<()> {
        self.get_mut().deregister(registry)
    }
}

source_via!(PolledTransport, inner);

/// Whether an engine ran on the calling consumer's CPU since the consumer last asked:
/// only then is a yield for it (`cpu_share`).
fn engine_waits() -> bool {
    thread_local! {
        static LOOK: RefCell<IdleYield> = const { RefCell::new(IdleYield::to(Spinner::Engine)) };
    }
    LOOK.with(|l| l.borrow_mut().other_waits())
}

#[cfg(test)]
#[path = "polled_tests.rs"]
mod tests;
