//! What the user does with a connection it holds: read, send, shut down, close or
//! abort it, and the readiness events that tell it when to.

use super::{
    ConnId, DISCARD_ALL, Entry, Queued, Readiness, Rx, Stack, StackError, StackEvent, Stage,
};
use crate::conn::{Connection, State};

impl Stack {
    /// The connection `id` the user holds.
    fn user(&mut self, id: ConnId) -> Result<&mut Entry, StackError> {
        match self.entry_mut(id) {
            Some(e) if e.stage == Stage::User => Ok(e),
            _ => Err(StackError::InvalidId),
        }
    }

    /// The connection itself (state, counters, addresses, MSS...).
    pub fn connection(&self, id: ConnId) -> Result<&Connection, StackError> {
        match self.entry(id) {
            Some(e) if e.stage == Stage::User => Ok(&e.conn),
            _ => Err(StackError::InvalidId),
        }
    }

    pub fn state(&self, id: ConnId) -> Result<State, StackError> {
        self.connection(id).map(Connection::state)
    }

    /// Reads in-order octets of a [`RxMode::Stream`](super::RxMode::Stream) connection into `buf` and reopens
    /// the window by as much. `Ok(0)` is the end of the stream (or an empty `buf`);
    /// `WouldBlock` means nothing now; `Reset`/`TimedOut` say how it failed.
    pub fn read(&mut self, id: ConnId, buf: &mut [u8]) -> Result<usize, StackError> {
        let e = self.user(id)?;
        if let Rx::Stream(Some(r)) = &mut e.rx {
            let n = r.read_from(&mut e.conn, buf);
            if n > 0 || buf.is_empty() {
                return Ok(n);
            }
        }
        if let Some(f) = e.failed {
            return Err(f);
        }
        if e.peer_closed || e.conn.state() == State::Closed {
            return Ok(0);
        }
        Err(StackError::WouldBlock)
    }

    /// Takes the next in-order octets of a [`RxMode::Stream`](super::RxMode::Stream)
    /// connection out whole when they are a piece kept in its packet buffer
    /// ([`crate::Reassembly::take_piece`]): the caller copies them without this
    /// stack's lock held, so packets handed to the stack meanwhile are taken and
    /// answered at once, and then hands the piece back with [`Stack::piece_read`],
    /// which reopens the window. `None`: read with [`Stack::read`].
    pub fn take_piece(&mut self, id: ConnId) -> Result<Option<crate::Piece>, StackError> {
        match &mut self.user(id)?.rx {
            Rx::Stream(Some(r)) => Ok(r.take_piece()),
            _ => Ok(None),
        }
    }

    /// A piece of connection `id` ([`Stack::take_piece`]) was copied out: its octets
    /// are released to the connection (the window reopens by as much) and its buffer
    /// goes back for reuse ([`Stack::take_spent`]).
    pub fn piece_read(&mut self, id: ConnId, piece: crate::Piece) -> Result<(), StackError> {
        let e = self.user(id)?;
        e.conn.release(piece.len());
        if let Rx::Stream(Some(r)) = &mut e.rx {
            r.give_back(piece);
        }
        Ok(())
    }

    /// Moves the packet buffers connection `id` has been read out of (those kept by
    /// [`Stack::handle_packet_buf`]) into `out`, for reuse.
    pub fn take_spent(&mut self, id: ConnId, out: &mut Vec<Vec<u8>>) {
        if let Some(Entry {
            rx: Rx::Stream(Some(r)),
            ..
        }) = self.entry_mut(id)
        {
            r.take_spent(out);
        }
    }

    /// In-order octets waiting to be read.
    pub fn readable(&self, id: ConnId) -> usize {
        match self.entry(id).map(|e| &e.rx) {
            Some(Rx::Stream(Some(r))) => r.readable(),
            _ => 0,
        }
    }

    /// Gives `n` in-order octets of a [`RxMode::Raw`](super::RxMode::Raw) connection back (the window
    /// reopens).
    pub fn release(&mut self, id: ConnId, n: usize) -> Result<(), StackError> {
        self.user(id)?.conn.release(n);
        Ok(())
    }

    /// Queues as much of `data` as fits; `WouldBlock` when nothing does.
    pub fn send(&mut self, id: ConnId, data: &[u8]) -> Result<usize, StackError> {
        let e = self.user(id)?;
        match e.conn.send(data) {
            Ok(n) => Ok(n),
            Err(crate::SendError::Full) => Err(StackError::WouldBlock),
            Err(crate::SendError::Closed) => Err(e.failed.unwrap_or(StackError::Closed)),
        }
    }

    /// Queues `record` whole (segments keep it whole when it fits one), or nothing
    /// (`WouldBlock`).
    pub fn send_record(&mut self, id: ConnId, record: &[u8]) -> Result<(), StackError> {
        let e = self.user(id)?;
        match e.conn.send_record(record) {
            Ok(()) => Ok(()),
            Err(crate::SendError::Full) => Err(StackError::WouldBlock),
            Err(crate::SendError::Closed) => Err(e.failed.unwrap_or(StackError::Closed)),
        }
    }

    /// [`Stack::send_record`] for a record of `len` octets given in parts (an FPDU's
    /// gather list): see [`Connection::send_record_with`].
    pub fn send_record_with(
        &mut self,
        id: ConnId,
        len: usize,
        feed: &mut crate::Feed<'_>,
    ) -> Result<(), StackError> {
        let e = self.user(id)?;
        match e.conn.send_record_with(len, feed) {
            Ok(()) => Ok(()),
            Err(crate::SendError::Full) => Err(StackError::WouldBlock),
            Err(crate::SendError::Closed) => Err(e.failed.unwrap_or(StackError::Closed)),
        }
    }

    /// Octets `send` takes now.
    pub fn send_capacity(&self, id: ConnId) -> usize {
        self.connection(id).map_or(0, Connection::send_capacity)
    }

    /// Closes our direction after what is queued (FIN); reading goes on. Before the
    /// handshake completes, the FIN waits for it (a TCP closed in SYN-SENT would
    /// just be deleted).
    pub fn shutdown(&mut self, id: ConnId) -> Result<(), StackError> {
        let e = self.user(id)?;
        if e.conn.state() == State::SynSent {
            e.fin_when_open = true;
        } else {
            e.conn.close();
        }
        Ok(())
    }

    /// Gives the connection back, gracefully: FIN after what is queued; what arrives
    /// afterwards is dropped. The id is invalid from now on.
    pub fn close(&mut self, id: ConnId) -> Result<(), StackError> {
        let e = self.user(id)?;
        e.conn.close();
        Self::release_entry(e);
        Ok(())
    }

    /// Gives the connection back abortively: RST, queued data dropped.
    pub fn abort(&mut self, id: ConnId) -> Result<(), StackError> {
        let e = self.user(id)?;
        e.conn.abort();
        Self::release_entry(e);
        Ok(())
    }

    fn release_entry(e: &mut Entry) {
        e.stage = Stage::Released;
        e.pending = Readiness::empty();
        e.rx = Rx::Discard;
        // What was never read goes back to the window at once.
        e.conn.release(DISCARD_ALL);
    }

    /// The next thing that happened, oldest first (flags coalesce per connection).
    pub fn poll_event(&mut self) -> Option<StackEvent> {
        while let Some(q) = self.events.pop_front() {
            match q {
                Queued::Conn(id) => {
                    let Some(e) = self.entry_mut(id) else {
                        continue;
                    };
                    e.queued = false;
                    let what = std::mem::take(&mut e.pending);
                    if e.stage == Stage::User && !what.is_empty() {
                        return Some(StackEvent::Conn { id, what });
                    }
                }
                Queued::Listener(l) => {
                    let Some(lis) = self.listeners.get_mut(&l) else {
                        continue;
                    };
                    lis.queued = false;
                    if !lis.ready.is_empty() {
                        return Some(StackEvent::Incoming(l));
                    }
                }
            }
        }
        None
    }
}
