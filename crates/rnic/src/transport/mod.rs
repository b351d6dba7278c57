//! The transport seam: the byte stream under a QP. The QP's receive, transmit and close
//! paths talk to a [`Transport`], never to a socket, so what carries the stream can be
//! swapped or wrapped: kernel TCP ([`socket`]) today, a user-space TCP later, and
//! wrappers that inject faults or record what crosses them.
//!
//! A transport is registered with an engine's mio registry, which is edge-triggered: a
//! readiness event comes only when something new arrives. So a transport must never
//! answer `WouldBlock` while it still has data to give (or room to take): the QP stops
//! at `WouldBlock` and waits for an event that would never come.

/// Implements `mio::event::Source` for a transport by handing registration to one of
/// its fields (the socket, or the transport it wraps): readiness is that field's.
macro_rules! source_via {
    ($ty:ty, $field:ident) => {
        impl mio::event::Source for $ty {
            fn register(
                &mut self,
                registry: &mio::Registry,
                token: mio::Token,
                interests: mio::Interest,
            ) -> std::io::Result<()> {
                self.$field.register(registry, token, interests)
            }

            fn reregister(
                &mut self,
                registry: &mio::Registry,
                token: mio::Token,
                interests: mio::Interest,
            ) -> std::io::Result<()> {
                self.$field.reregister(registry, token, interests)
            }

            fn deregister(&mut self, registry: &mio::Registry) -> std::io::Result<()> {
                self.$field.deregister(registry)
            }
        }
    };
}

pub(crate) mod fault;
pub(crate) mod pcap;
pub(crate) mod polled;
pub(crate) mod socket;
pub(crate) mod stream;
pub(crate) mod user;

use crate::region::RegionSlice;
use crate::sys::socket::IoVecs;
use polled::PolledTransport;
use std::io;
use std::net::Shutdown;
use std::ops::{Deref, DerefMut};

/// A connection's byte stream, non-blocking, as the QP drives it.
///
/// Reads and sends follow `read(2)`/`send(2)`: they move some octets, `Ok(0)` from a
/// read is the end of the stream, `WouldBlock` means "nothing now, an event follows",
/// `Interrupted` means "try again", any other error means the stream failed. The
/// [`mio::event::Source`] part registers the stream with an engine's registry.
pub(crate) trait Transport: mio::event::Source + Send {
    /// Reads into `buf`.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize>;

    /// Reads into region memory, for payload placed without a copy.
    fn read_into(&mut self, dst: &RegionSlice<'_>) -> io::Result<usize>;
    /// Reads into region memory and, once it is full, on into `tail` (a payload and the
    /// trailer and header after it, in one call where the stream allows). By default
    /// [`Transport::read_into`] alone: `tail` untouched.
    fn read_into_then(&mut self, dst: &RegionSlice<'_>, tail: &mut [u8]) -> io::Result<usize> {
        let _ = tail;
        self.read_into(dst)
    }

    /// Whether the next read would answer `WouldBlock` without asking the stream, which
    /// the caller may then skip (and take the answer as given). By default never.
    fn drained(&mut self) -> bool {
        false
    }

    /// The caller is about to read again, in a stream of large FPDUs, a stream whose
    /// last read found nothing: a busy-polling consumer that owns it gives up the CPU
    /// first (see `PolledTransport`). Returns whether it did; by default it does not.
    fn yield_before_reread(&mut self) -> bool {
        false
    }

    /// Sends from `buf`.
    fn send(&mut self, buf: &[u8]) -> io::Result<usize>;

    /// Sends from a gather list (an FPDU's header, region memory and trailer), in order.
    fn send_gather(&mut self, iov: IoVecs<'_>) -> io::Result<usize>;

    /// Shuts down one or both directions: `Write` sends FIN after what is queued.
    fn shutdown(&mut self, how: Shutdown) -> io::Result<()>;

    /// Makes dropping the transport an abortive close: the peer gets RST, not FIN.
    fn abort(&mut self);

    /// The payload of a segment, if the stream packs whole FPDUs into full segments
    /// (the own TCP, without markers): the QP then sizes each FPDU to the room left in
    /// the segment being filled. `None` (a kernel socket): FPDUs keep the MSS sizing.
    fn packed_segment(&self) -> Option<usize> {
        None
    }

    /// Whether every octet sent so far has left in a segment, as of the last send (a
    /// hint for [`Transport::packed_segment`]'s sizing: the next FPDU starts a segment).
    fn all_sent(&self) -> bool {
        false
    }

    /// The connection's state in a few words, for a hang report (by default none: a
    /// kernel socket's is the kernel's to tell, `ss -ti`).
    fn stall_report(&self) -> String {
        String::new()
    }
}

/// A read's outcome as the claimed consumer's read gives it: the empty stream (a
/// busy-polling consumer's nearly every read) apart, with no `io::Error` to build,
/// decode and drop.
#[derive(Debug)]
pub(crate) enum ClaimedRead {
    /// Octets read; 0 is the end of the stream.
    Got(usize),
    /// The stream would block: nothing to read now.
    Empty,
    /// Any other failure (an interrupted read included), for the general path.
    Failed(io::Error),
}

impl ClaimedRead {
    /// The outcome of a read that reports as `read(2)` does.
    pub(crate) fn from_result(r: io::Result<usize>) -> ClaimedRead {
        match r {
            Ok(n) => ClaimedRead::Got(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => ClaimedRead::Empty,
            Err(e) => ClaimedRead::Failed(e),
        }
    }
}

/// A QP's transport as its connection holds it: the polled transport by itself (a
/// connection neither recorded nor under a fault plan), whose reads a claimed
/// consumer's pass makes without a dynamic call ([`ConnTransport::read_polled`]), or
/// any stack of wrappers. Everything else reaches it as a `dyn Transport`.
pub(crate) enum ConnTransport {
    Polled(PolledTransport),
    Wrapped(Box<dyn Transport>),
}

impl ConnTransport {
    /// [`Transport::read`], called directly when the transport is the polled one: an
    /// empty poll of a claimed QP makes one (docs/ARCHITECTURE.md, "Session 25").
    #[inline]
    pub(crate) fn read_polled(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            ConnTransport::Polled(p) => p.read_inline(buf),
            ConnTransport::Wrapped(t) => t.read(buf),
        }
    }

    /// A claimed consumer's read (`receive::receive_claimed`), its outcome as a
    /// [`ClaimedRead`]: over the kernel socket an empty one builds no `io::Error`.
    #[inline]
    pub(crate) fn read_claimed(&mut self, buf: &mut [u8]) -> ClaimedRead {
        match self {
            ConnTransport::Polled(p) => p.read_claimed(buf),
            ConnTransport::Wrapped(t) => ClaimedRead::from_result(t.read(buf)),
        }
    }

    /// [`Transport::send`], called directly when the transport is the polled one: a
    /// single post's send (docs/ARCHITECTURE.md, "Session 26").
    #[inline(always)]
    pub(crate) fn send_polled(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            ConnTransport::Polled(p) => p.send_inline(buf),
            ConnTransport::Wrapped(t) => t.send(buf),
        }
    }

    /// The engine's event for this socket carried an end or an error, or not
    /// (`PolledTransport::event_ends`).
    #[inline]
    pub(crate) fn event_ends(&mut self, ends: bool) {
        if let ConnTransport::Polled(p) = self {
            p.event_ends(ends);
        }
    }

    /// A receive pass begins (`PolledTransport::begin_pass`).
    #[inline]
    pub(crate) fn begin_pass(&mut self) {
        if let ConnTransport::Polled(p) = self {
            p.begin_pass();
        }
    }

    /// [`Transport::drained`] for a claimed consumer's quick pass, called directly
    /// when the transport is the polled one (`PolledTransport::drained_inline`).
    #[inline]
    pub(crate) fn drained_polled(&mut self) -> bool {
        match self {
            ConnTransport::Polled(p) => p.drained_inline(),
            ConnTransport::Wrapped(t) => t.drained(),
        }
    }

    /// [`Transport::drained`] for the general receive loop, called directly when the
    /// transport is the polled one (`PolledTransport::pass_drained`).
    #[inline]
    pub(crate) fn pass_drained(&mut self) -> bool {
        match self {
            ConnTransport::Polled(p) => p.pass_drained(),
            ConnTransport::Wrapped(t) => t.drained(),
        }
    }
}

impl Deref for ConnTransport {
    type Target = dyn Transport;

    fn deref(&self) -> &(dyn Transport + 'static) {
        match self {
            ConnTransport::Polled(p) => p,
            ConnTransport::Wrapped(t) => &**t,
        }
    }
}

impl DerefMut for ConnTransport {
    fn deref_mut(&mut self) -> &mut (dyn Transport + 'static) {
        match self {
            ConnTransport::Polled(p) => p,
            ConnTransport::Wrapped(t) => &mut **t,
        }
    }
}

impl From<Box<dyn Transport>> for ConnTransport {
    fn from(t: Box<dyn Transport>) -> ConnTransport {
        ConnTransport::Wrapped(t)
    }
}
