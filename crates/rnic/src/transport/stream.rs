//! The connection before RDMA mode. The connection manager runs its MPA exchange on a
//! [`ConnStream`] (blocking calls, each bounded by a deadline), then turns the stream
//! into the QP's [`Transport`]. Kernel TCP ([`super::socket::KernelStream`]) is one
//! implementation; a user-space TCP is another, so the CM does not care what carries
//! the octets.

use super::Transport;
use super::polled::PolledTransport;
use crate::socket_buffers::SocketBuffers;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

/// A connected stream in streaming mode, as the connection manager drives it.
pub(crate) trait ConnStream: Send + std::fmt::Debug {
    /// The peer's address.
    fn peer_addr(&self) -> io::Result<SocketAddr>;

    /// This end's address.
    fn local_addr(&self) -> io::Result<SocketAddr>;

    /// Reads some octets, waiting at most until `deadline`: then it fails with
    /// `WouldBlock` or `TimedOut`. `Ok(0)` is the end of the stream.
    fn read_by(&mut self, buf: &mut [u8], deadline: Instant) -> io::Result<usize>;

    /// Writes all of `buf`, or fails once `deadline` has passed.
    fn write_all_by(&mut self, buf: &[u8], deadline: Instant) -> io::Result<()>;

    /// The largest segment payload the connection sends, where known: FPDUs are sized
    /// to it (RFC 5044).
    fn mss(&self) -> Option<usize>;

    /// The FPDUs this end sends will carry MPA markers: a transport that finds FPDU
    /// boundaries in what it is handed (to align them with segments) must count them.
    /// Markers themselves need nothing of the stream: they sit at fixed positions from
    /// the first FPDU octet, which the QP counts on both paths.
    fn frames_marked(&mut self) {}

    /// Ends both directions gracefully (after a Reject).
    fn shutdown(&mut self) -> io::Result<()>;

    /// Ends the connection abortively (RST): for a stream that turned out not to carry
    /// an MPA exchange we can answer, so nothing of it lingers.
    fn reset(self: Box<Self>);

    /// The stream in RDMA mode: non-blocking, for the QP's engine, with TCP keepalive
    /// probing after `keepalive` of silence.
    /// Kernel sockets take a seat in the device's send buffer budget, `buffers`.
    fn into_transport(
        self: Box<Self>,
        keepalive: Duration,
        buffers: &Arc<SocketBuffers>,
    ) -> io::Result<Box<dyn Transport>>;

    /// [`ConnStream::into_transport`] under a [`PolledTransport`] whose consumer claims
    /// it through `claimed`. A kernel socket is held by it as such (its reads and sends
    /// then made without a dynamic call); by default the transport is boxed.
    fn into_polled(
        self: Box<Self>,
        keepalive: Duration,
        buffers: &Arc<SocketBuffers>,
        claimed: Arc<AtomicBool>,
    ) -> io::Result<PolledTransport> {
        Ok(PolledTransport::new(
            self.into_transport(keepalive, buffers)?,
            claimed,
        ))
    }
}

/// A [`ConnStream`] seen as `io::Read` whose every read ends by one deadline, for the
/// frame readers.
pub(crate) struct ReadBy<'a> {
    pub(crate) stream: &'a mut dyn ConnStream,
    pub(crate) deadline: Instant,
}

impl io::Read for ReadBy<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.stream.read_by(buf, self.deadline)
    }
}
