//! What leaves the stack and when: packets to send (resets first, then the
//! connections in turn), timers, the readiness each change makes, and the freeing of
//! connections that are closed and given back.

use super::{ConnId, DISCARD_ALL, Entry, Queued, Readiness, Rx, Stack, Stage};
use crate::conn::{Event, Lent, State};
use crate::reassembly::Reassembly;
use std::time::Duration;

/// What the user sees of a connection, before a change, to tell what the change did.
#[derive(Debug, Clone, Copy)]
pub(super) struct Snapshot {
    readable: usize,
    capacity: usize,
    bytes_in: u64,
}

impl Snapshot {
    pub(super) fn of(e: &Entry) -> Snapshot {
        Snapshot {
            readable: match &e.rx {
                Rx::Stream(Some(r)) => r.readable(),
                _ => 0,
            },
            capacity: e.conn.send_capacity(),
            bytes_in: e.conn.stats().bytes_in,
        }
    }
}

impl Stack {
    /// Writes the next packet to send into `out` (at least the link MTU long) and
    /// returns its length; `None` when nothing is due. Call it until `None` after every
    /// input, timeout and user call.
    pub fn poll_transmit(&mut self, now: Duration, out: &mut [u8]) -> Option<usize> {
        self.poll_transmit_with(now, out, false).map(|(n, _)| n)
    }

    /// [`Stack::poll_transmit`] for a link that carries payloads by reference: see
    /// [`Stack::poll_transmit_for_lent`].
    pub fn poll_transmit_lent(
        &mut self,
        now: Duration,
        out: &mut [u8],
    ) -> Option<(usize, Option<Lent>)> {
        self.poll_transmit_with(now, out, true)
    }

    fn poll_transmit_with(
        &mut self,
        now: Duration,
        out: &mut [u8],
        lend: bool,
    ) -> Option<(usize, Option<Lent>)> {
        while let Some(rst) = self.resets.pop_front() {
            // A buffer too small for a bare header drops the reset.
            if let Ok(n) = rst.emit(out) {
                self.stats.resets_out += 1;
                self.stats.packets_out += 1;
                return Some((n, None));
            }
        }
        let n = self.slots.len();
        for k in 0..n {
            let i = (self.cursor + k) % n;
            let Some(e) = &mut self.slots[i] else {
                continue;
            };
            let sent = if lend {
                e.conn.poll_transmit_lent(now, out)
            } else {
                e.conn.poll_transmit(now, out).map(|n| (n, None))
            };
            if let Some(r) = sent {
                // The same connection goes on at the next call, so a burst leaves
                // together.
                self.cursor = i;
                self.stats.packets_out += 1;
                self.stats.packets_lent += u64::from(r.1.is_some());
                return Some(r);
            }
        }
        // Everything is out, resets of aborted connections included.
        self.reap();
        None
    }

    /// [`Stack::poll_transmit`] for connection `id` alone: for a user that queued data
    /// and sends it at once, from its own thread.
    pub fn poll_transmit_for(
        &mut self,
        id: ConnId,
        now: Duration,
        out: &mut [u8],
    ) -> Option<usize> {
        let e = self.entry_mut(id)?;
        let n = e.conn.poll_transmit(now, out)?;
        self.stats.packets_out += 1;
        Some(n)
    }

    /// [`Stack::poll_transmit_for`] for a link that carries payloads by reference
    /// ([`crate::Connection::poll_transmit_lent`]): `out` gets the headers, and the
    /// payload of a large record comes as a [`Lent`].
    pub fn poll_transmit_for_lent(
        &mut self,
        id: ConnId,
        now: Duration,
        out: &mut [u8],
    ) -> Option<(usize, Option<Lent>)> {
        let e = self.entry_mut(id)?;
        let r = e.conn.poll_transmit_lent(now, out)?;
        self.stats.packets_out += 1;
        self.stats.packets_lent += u64::from(r.1.is_some());
        Some(r)
    }

    /// When [`Stack::handle_timeout`] must be called next, if ever.
    pub fn poll_timeout(&self) -> Option<Duration> {
        self.slots
            .iter()
            .flatten()
            .filter_map(|e| e.conn.poll_timeout())
            .min()
    }

    /// The next timer of connection `id` alone.
    pub fn timeout_of(&self, id: ConnId) -> Option<Duration> {
        self.entry(id)?.conn.poll_timeout()
    }

    /// Time has reached `now`: the connections whose timers expired act (then call
    /// [`Stack::poll_transmit`]).
    pub fn handle_timeout(&mut self, now: Duration) {
        for i in 0..self.slots.len() {
            let Some(e) = &mut self.slots[i] else {
                continue;
            };
            if e.conn.poll_timeout().is_none_or(|t| t > now) {
                continue;
            }
            let (id, before) = (e.id, Snapshot::of(e));
            e.conn.handle_timeout(now);
            self.observe(id, before);
        }
    }

    /// Turns what a change did to connection `id` into readiness, and moves it along
    /// its stages (a completed passive handshake joins its listener's accept queue; a
    /// connection that ends before it was accepted is freed).
    pub(super) fn observe(&mut self, id: ConnId, before: Snapshot) {
        let Some(e) = self.entry_mut(id) else {
            return;
        };
        let mut what = Readiness::empty();
        while let Some(ev) = e.conn.poll_event() {
            what |= match ev {
                Event::Established => Readiness::ESTABLISHED | Readiness::WRITABLE,
                Event::PeerClosed => {
                    e.peer_closed = true;
                    Readiness::PEER_CLOSED | Readiness::READABLE
                }
                Event::Closed => Readiness::CLOSED,
                Event::Reset => {
                    e.failed.get_or_insert(super::StackError::Reset);
                    Readiness::RESET | Readiness::READABLE | Readiness::WRITABLE
                }
                Event::TimedOut => {
                    e.failed.get_or_insert(super::StackError::TimedOut);
                    Readiness::TIMED_OUT | Readiness::READABLE | Readiness::WRITABLE
                }
            };
        }
        if e.fin_when_open && what.contains(Readiness::ESTABLISHED) {
            e.fin_when_open = false;
            e.conn.close();
        }
        if matches!(e.rx, Rx::Discard) {
            e.conn.release(DISCARD_ALL);
        }
        let after = Snapshot::of(e);
        let raw = matches!(e.rx, Rx::Raw);
        if after.readable > before.readable || (raw && after.bytes_in > before.bytes_in) {
            what |= Readiness::READABLE;
        }
        if after.capacity > before.capacity {
            what |= Readiness::WRITABLE;
        }
        e.pending |= what;
        let state = e.conn.state();
        // A passive open that was reset returns to LISTEN: it is over, as a closed one.
        let over = matches!(state, State::Closed | State::Listen);
        match e.stage {
            Stage::HalfOpen(_) | Stage::Ready(_) if over => self.remove(id),
            Stage::HalfOpen(l) if what.contains(Readiness::ESTABLISHED) => {
                e.stage = Stage::Ready(l);
                if matches!(e.rx, Rx::Stream(None)) {
                    e.rx = Rx::Stream(Some(Reassembly::for_connection(&e.conn)));
                }
                if let Some(lis) = self.listeners.get_mut(&l) {
                    lis.half_open.retain(|c| *c != id);
                    lis.ready.push_back(id);
                    if !lis.queued {
                        lis.queued = true;
                        self.events.push_back(Queued::Listener(l));
                    }
                }
            }
            Stage::User => self.enqueue(id),
            Stage::HalfOpen(_) | Stage::Ready(_) | Stage::Released => {}
        }
    }

    /// Frees the connections that are over and nobody holds.
    fn reap(&mut self) {
        for i in 0..self.slots.len() {
            let done = self.slots[i].as_ref().filter(|e| {
                e.stage == Stage::Released
                    && matches!(e.conn.state(), State::Closed | State::Listen)
            });
            if let Some(id) = done.map(|e| e.id) {
                self.remove(id);
            }
        }
    }
}
