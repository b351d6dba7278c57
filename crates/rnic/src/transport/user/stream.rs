//! A connection of the device's own TCP in streaming mode, for the CM's MPA exchange:
//! blocking reads and writes, each bounded by the caller's deadline, waiting on the
//! stack's condition variable (the stack thread notifies it when the connection
//! changes). It then turns into the QP's [`UserTransport`].

use super::stack::{UserStack, to_io};
use super::transport::UserTransport;
use crate::socket_buffers::SocketBuffers;
use crate::transport::Transport;
use crate::transport::stream::ConnStream;
use softrnic_tcp::{ConnId, StackError};
use std::io;
use std::net::{SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// An established connection of a device's own TCP, before RDMA mode.
pub(crate) struct UserStream {
    stack: Arc<UserStack>,
    /// `None` once handed on (to a transport) or given back (reset).
    id: Option<ConnId>,
    local: SocketAddrV4,
    peer: SocketAddrV4,
    /// The QP's FPDUs carry markers (see [`ConnStream::frames_marked`]).
    marked: bool,
}

impl std::fmt::Debug for UserStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserStream")
            .field("id", &self.id)
            .field("local", &self.local)
            .field("peer", &self.peer)
            .finish()
    }
}

impl UserStream {
    pub(crate) fn new(
        stack: Arc<UserStack>,
        id: ConnId,
        local: SocketAddrV4,
        peer: SocketAddrV4,
    ) -> UserStream {
        UserStream {
            stack,
            id: Some(id),
            local,
            peer,
            marked: false,
        }
    }

    fn id(&self) -> io::Result<ConnId> {
        self.id.ok_or_else(|| io::ErrorKind::NotConnected.into())
    }
}

impl ConnStream for UserStream {
    fn peer_addr(&self) -> io::Result<SocketAddr> {
        Ok(SocketAddr::V4(self.peer))
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(SocketAddr::V4(self.local))
    }

    fn read_by(&mut self, buf: &mut [u8], deadline: Instant) -> io::Result<usize> {
        let id = self.id()?;
        let mut g = self.stack.lock()?;
        loop {
            match g.stack.read(id, buf) {
                Ok(n) => {
                    self.stack.after(&mut g, id);
                    return Ok(n);
                }
                Err(StackError::WouldBlock) => match self.stack.wait_until(g, deadline)? {
                    Some(again) => g = again,
                    None => return Err(io::ErrorKind::WouldBlock.into()),
                },
                Err(e) => return Err(to_io(e)),
            }
        }
    }

    fn write_all_by(&mut self, mut buf: &[u8], deadline: Instant) -> io::Result<()> {
        let id = self.id()?;
        let mut g = self.stack.lock()?;
        while !buf.is_empty() {
            match g.stack.send(id, buf) {
                Ok(n) => {
                    buf = &buf[n..];
                    self.stack.after(&mut g, id);
                }
                Err(StackError::WouldBlock) => match self.stack.wait_until(g, deadline)? {
                    Some(again) => g = again,
                    None => return Err(io::ErrorKind::TimedOut.into()),
                },
                Err(e) => return Err(to_io(e)),
            }
        }
        Ok(())
    }

    fn mss(&self) -> Option<usize> {
        let g = self.stack.lock().ok()?;
        Some(g.stack.connection(self.id?).ok()?.max_payload())
    }

    fn shutdown(&mut self) -> io::Result<()> {
        let id = self.id()?;
        let mut g = self.stack.lock()?;
        g.stack.shutdown(id).map_err(to_io)?;
        self.stack.after(&mut g, id);
        Ok(())
    }

    fn reset(mut self: Box<Self>) {
        if let (Some(id), Ok(mut g)) = (self.id.take(), self.stack.lock()) {
            let _ = g.stack.abort(id);
            self.stack.after(&mut g, id);
        }
    }

    fn frames_marked(&mut self) {
        self.marked = true;
    }

    fn into_transport(
        mut self: Box<Self>,
        _keepalive: Duration,
        _buffers: &Arc<SocketBuffers>,
    ) -> io::Result<Box<dyn Transport>> {
        // Keep-alive was set for every connection when the stack started.
        let id = self.id()?;
        let t = UserTransport::new(self.stack.clone(), id, self.marked)?;
        self.id = None;
        Ok(Box::new(t))
    }
}

impl Drop for UserStream {
    /// A stream dropped in streaming mode closes gracefully, as a socket would.
    fn drop(&mut self) {
        if let (Some(id), Ok(mut g)) = (self.id.take(), self.stack.lock()) {
            let _ = g.stack.close(id);
            self.stack.after(&mut g, id);
        }
    }
}
