//! A transport wrapper that injects faults, for testing: the connection ends (FIN or
//! RST) after a given number of octets, reads and writes move at most a few octets per
//! call, and every read and write can be delayed.
//!
//! Octets are counted as they cross the QP's transport, that is from the first FPDU on
//! (the MPA exchange before it is not counted).

use super::Transport;
use crate::region::RegionSlice;
use crate::sys::socket::IoVecs;
use mio::{Interest, Registry, Token};
use std::io;
use std::net::Shutdown;
use std::num::NonZeroUsize;
use std::time::Duration;

/// Faults to inject into every connection of a device (see
/// [`DeviceConfig::fault`](crate::DeviceConfig::fault)). For testing: the default plan
/// injects nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FaultPlan {
    /// End the connection once this many octets have been received: the local side
    /// then reads end of stream (or a reset), and the peer gets FIN (or RST).
    pub end_after_received: Option<u64>,
    /// End the connection once this many octets have been sent: the peer gets FIN (or
    /// RST) right after them, and the local side's next send fails.
    pub end_after_sent: Option<u64>,
    /// How the connection ends.
    pub end_with: FaultEnd,
    /// Reads return at most this many octets.
    pub max_read: Option<NonZeroUsize>,
    /// Sends take at most this many octets.
    pub max_write: Option<NonZeroUsize>,
    /// Sleep this long before every read and every send.
    pub delay: Duration,
}

/// How a [`FaultPlan`] ends a connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FaultEnd {
    /// A graceful close: FIN both ways. Locally, reads then find end of stream, and
    /// sends fail with `BrokenPipe`.
    #[default]
    Fin,
    /// An abortive close: RST. Locally, reads and sends then fail with
    /// `ConnectionReset`.
    Reset,
}

/// A transport that applies a [`FaultPlan`] to the one it wraps.
pub(crate) struct FaultTransport {
    /// `None` once a reset closed it.
    inner: Option<Box<dyn Transport>>,
    plan: FaultPlan,
    received: u64,
    sent: u64,
    ended: Option<FaultEnd>,
}

impl FaultTransport {
    pub(crate) fn new(inner: Box<dyn Transport>, plan: FaultPlan) -> FaultTransport {
        FaultTransport {
            inner: Some(inner),
            plan,
            received: 0,
            sent: 0,
            ended: None,
        }
    }

    /// Ends the connection as the plan says.
    fn end(&mut self) {
        let how = self.plan.end_with;
        self.ended = Some(how);
        match how {
            FaultEnd::Fin => {
                if let Some(t) = self.inner.as_mut() {
                    let _ = t.shutdown(Shutdown::Both);
                }
            }
            FaultEnd::Reset => {
                // Dropping an aborted transport resets the connection now; closing it
                // also takes it out of any registry.
                if let Some(mut t) = self.inner.take() {
                    t.abort();
                }
            }
        }
    }

    /// What a read returns once the connection ended.
    fn read_after_end(how: FaultEnd) -> io::Result<usize> {
        match how {
            FaultEnd::Fin => Ok(0),
            FaultEnd::Reset => Err(io::ErrorKind::ConnectionReset.into()),
        }
    }

    /// What a send returns once the connection ended.
    fn send_after_end(how: FaultEnd) -> io::Result<usize> {
        match how {
            FaultEnd::Fin => Err(io::ErrorKind::BrokenPipe.into()),
            FaultEnd::Reset => Err(io::ErrorKind::ConnectionReset.into()),
        }
    }

    /// How many of `want` octets the next read may take; `None` if the connection
    /// ended (now or before).
    fn read_cap(&mut self, want: usize) -> Option<usize> {
        if self.ended.is_none() && self.plan.end_after_received == Some(self.received) {
            self.end();
        }
        if self.ended.is_some() {
            return None;
        }
        self.delay();
        Some(cap(
            want,
            self.plan.max_read,
            self.plan.end_after_received,
            self.received,
        ))
    }

    /// How many of `want` octets the next send may take; `None` if the connection
    /// ended.
    fn send_cap(&mut self, want: usize) -> Option<usize> {
        if self.ended.is_none() && self.plan.end_after_sent == Some(self.sent) {
            self.end();
        }
        if self.ended.is_some() {
            return None;
        }
        self.delay();
        Some(cap(
            want,
            self.plan.max_write,
            self.plan.end_after_sent,
            self.sent,
        ))
    }

    fn delay(&self) {
        if !self.plan.delay.is_zero() {
            std::thread::sleep(self.plan.delay);
        }
    }

    /// Counts octets read; ends the connection when the plan says so.
    fn count_read(&mut self, r: io::Result<usize>) -> io::Result<usize> {
        if let Ok(n) = r {
            self.received += n as u64;
            if n > 0 && self.plan.end_after_received == Some(self.received) {
                self.end();
            }
        }
        r
    }

    /// Counts octets sent; ends the connection when the plan says so.
    fn count_sent(&mut self, r: io::Result<usize>) -> io::Result<usize> {
        if let Ok(n) = r {
            self.sent += n as u64;
            if n > 0 && self.plan.end_after_sent == Some(self.sent) {
                self.end();
            }
        }
        r
    }

    fn inner(&mut self) -> io::Result<&mut Box<dyn Transport>> {
        self.inner
            .as_mut()
            .ok_or_else(|| io::ErrorKind::ConnectionReset.into())
    }
}

/// `want` limited by a per-call maximum and by what is left before the end.
fn cap(want: usize, max: Option<NonZeroUsize>, end: Option<u64>, done: u64) -> usize {
    let mut n = want;
    if let Some(m) = max {
        n = n.min(m.get());
    }
    if let Some(end) = end {
        n = n.min(usize::try_from(end.saturating_sub(done)).unwrap_or(usize::MAX));
    }
    n
}

impl Transport for FaultTransport {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Some(n) = self.read_cap(buf.len()) else {
            return Self::read_after_end(self.ended.unwrap_or_default());
        };
        let r = self.inner()?.read(&mut buf[..n]);
        self.count_read(r)
    }

    fn read_into(&mut self, dst: &RegionSlice<'_>) -> io::Result<usize> {
        let Some(n) = self.read_cap(dst.len()) else {
            return Self::read_after_end(self.ended.unwrap_or_default());
        };
        let r = self.inner()?.read_into(&dst.prefix(n));
        self.count_read(r)
    }

    fn send(&mut self, buf: &[u8]) -> io::Result<usize> {
        let Some(n) = self.send_cap(buf.len()) else {
            return Self::send_after_end(self.ended.unwrap_or_default());
        };
        let r = self.inner()?.send(&buf[..n]);
        self.count_sent(r)
    }

    fn send_gather(&mut self, iov: IoVecs<'_>) -> io::Result<usize> {
        let Some(n) = self.send_cap(iov.len()) else {
            return Self::send_after_end(self.ended.unwrap_or_default());
        };
        let mut storage = Vec::new();
        let r = self.inner()?.send_gather(iov.prefix(n, &mut storage));
        self.count_sent(r)
    }

    fn shutdown(&mut self, how: Shutdown) -> io::Result<()> {
        match self.inner.as_mut() {
            Some(t) => t.shutdown(how),
            None => Ok(()),
        }
    }

    fn abort(&mut self) {
        if let Some(t) = self.inner.as_mut() {
            t.abort();
        }
    }
}

impl mio::event::Source for FaultTransport {
    fn register(
        &mut self,
        registry: &Registry,
        token: Token,
        interests: Interest,
    ) -> io::Result<()> {
        self.inner()?.register(registry, token, interests)
    }

    fn reregister(
        &mut self,
        registry: &Registry,
        token: Token,
        interests: Interest,
    ) -> io::Result<()> {
        self.inner()?.reregister(registry, token, interests)
    }

    fn deregister(&mut self, registry: &Registry) -> io::Result<()> {
        match self.inner.as_mut() {
            Some(t) => t.deregister(registry),
            // A reset closed it, which took it out of the registry.
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_takes_the_smallest_limit() {
        let one = NonZeroUsize::new(1);
        assert_eq!(cap(100, None, None, 0), 100);
        assert_eq!(cap(100, one, None, 0), 1);
        assert_eq!(cap(100, None, Some(30), 10), 20);
        assert_eq!(cap(100, NonZeroUsize::new(5), Some(30), 28), 2);
        assert_eq!(cap(100, None, Some(30), 30), 0);
        assert_eq!(cap(0, one, Some(30), 0), 0);
    }
}
