//! The passive side on the device's own TCP: a listening port of the stack, and the
//! MPA Requests of its connections read side by side, as the kernel listener does:
//! a connection's whole Request must arrive within
//! [`crate::DeviceConfig::mpa_request_timeout`], at most
//! [`crate::DeviceConfig::max_listener_exchanges`] are read at once (a new connection
//! drops the oldest), every exchange counts against the device's
//! [`crate::DeviceConfig::max_mpa_exchanges`], and a connection that does not speak
//! MPA is reset. Exchanges progress while a thread waits in `accept` (on the stack's
//! condition variable); between calls, new connections wait in the stack's accept
//! queue and their octets in their receive windows.
//!
//! A wake costs what changed, not what is in progress: the stack names the
//! connections that became readable or ended ([`Inner::take_news`]), only those (and
//! the ones just taken) are read, and deadlines are found in order.

use super::stack::{Inner, UserStack, to_io};
use super::stream::UserStream;
use crate::cm::ConnRequest;
use crate::device::{Device, ExchangeSlot};
use crate::error::Result;
use crate::frame_io::FrameReader;
use crate::listener::{Counters, ListenerStats, bump};
use crate::trace;
use softrnic_tcp::{ConnId, ListenerId, RxMode, Stack};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io;
use std::net::{SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// Connections waiting for `accept` in the stack, beyond those being read.
const BACKLOG: usize = 128;

/// One connection whose MPA Request is being read.
struct Exchange {
    id: ConnId,
    reader: FrameReader,
    /// Its place in [`Exchanges::by_deadline`].
    key: Deadline,
    peer: SocketAddrV4,
    _slot: ExchangeSlot,
}

/// When an exchange times out, and a serial that keeps equal instants apart. Every
/// exchange gets the same timeout, so this is also the order of age.
type Deadline = (Instant, u64);

#[derive(Default)]
struct Exchanges {
    by_conn: HashMap<ConnId, Exchange>,
    by_deadline: BTreeMap<Deadline, ConnId>,
    serial: u64,
    /// Taken since the last read: their octets may have come before the stack
    /// reported news of them to us.
    fresh: Vec<ConnId>,
    /// Requests complete and well-formed, not yet returned by `accept`.
    done: VecDeque<ConnRequest>,
}

impl Exchanges {
    /// The key of an exchange that times out at `deadline`, after all before it.
    fn key(&mut self, deadline: Instant) -> Deadline {
        self.serial += 1;
        (deadline, self.serial)
    }

    fn insert(&mut self, ex: Exchange) {
        self.by_deadline.insert(ex.key, ex.id);
        self.fresh.push(ex.id);
        self.by_conn.insert(ex.id, ex);
    }

    fn remove(&mut self, id: ConnId) -> Option<Exchange> {
        let ex = self.by_conn.remove(&id)?;
        self.by_deadline.remove(&ex.key);
        Some(ex)
    }

    /// The exchange that times out first (the oldest).
    fn first(&self) -> Option<(Instant, ConnId)> {
        self.by_deadline.first_key_value().map(|(k, id)| (k.0, *id))
    }
}

/// A listening port of a device's own TCP.
pub(crate) struct UserListener {
    stack: Arc<UserStack>,
    id: ListenerId,
    local: SocketAddrV4,
    state: Mutex<Exchanges>,
    counters: Counters,
}

/// A connection's byte stream as `io::Read`, on the locked stack (never blocks).
struct StackRead<'a> {
    stack: &'a mut Stack,
    id: ConnId,
}

impl io::Read for StackRead<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.stack.read(self.id, buf).map_err(to_io)
    }
}

impl UserListener {
    /// Listens on `local` (port 0: a free one).
    pub(crate) fn bind(stack: &Arc<UserStack>, local: SocketAddrV4) -> io::Result<UserListener> {
        let mut g = stack.lock()?;
        let id = g
            .stack
            .listen(local, BACKLOG, RxMode::Stream)
            .map_err(to_io)?;
        let local = g.stack.listener_addr(id).map_err(to_io)?;
        Ok(UserListener {
            stack: stack.clone(),
            id,
            local,
            state: Mutex::new(Exchanges::default()),
            counters: Counters::default(),
        })
    }

    pub(crate) fn local_addr(&self) -> SocketAddr {
        SocketAddr::V4(self.local)
    }

    pub(crate) fn stats(&self) -> ListenerStats {
        self.counters.snapshot()
    }

    /// The next complete Request, waiting until `deadline` at most (`None`: for ever).
    pub(crate) fn accept_until(
        &self,
        dev: &Device,
        deadline: Option<Instant>,
    ) -> Result<Option<ConnRequest>> {
        let mut st = self.state.lock()?;
        loop {
            if let Some(r) = st.done.pop_front() {
                return Ok(Some(r));
            }
            let mut g = self.stack.lock()?;
            let now = Instant::now();
            while let Ok(Some(c)) = g.stack.accept(self.id) {
                bump(&self.counters.connections);
                self.start(dev, &mut st, &mut g, c, now);
            }
            let finished = self.progress(dev, &mut st, &mut g);
            self.expire(dev, &mut st, &mut g, now);
            // Resets of dropped exchanges, window updates of read ones.
            g.flush(crate::engine::now());
            if finished.is_empty() {
                if deadline.is_some_and(|d| now >= d) {
                    return Ok(None);
                }
                let until = [deadline, st.first().map(|(t, _)| t)]
                    .into_iter()
                    .flatten()
                    .min();
                match until {
                    Some(t) => drop(self.stack.wait_until(g, t)?),
                    None => drop(self.stack.cv.wait(g)),
                }
                continue;
            }
            drop(g);
            for ex in finished {
                let stream = UserStream::new(self.stack.clone(), ex.id, self.local, ex.peer);
                match dev.request_arrived(Box::new(stream), ex.reader.frame()) {
                    Ok(req) => {
                        bump(&self.counters.requests);
                        st.done.push_back(req);
                    }
                    Err(e) => {
                        bump(&self.counters.malformed);
                        trace::mpa_dropped(dev.shared.serial, ex.peer.into(), &e.to_string());
                    }
                }
            }
        }
    }

    /// Starts reading the Request of connection `c`, within the bounds.
    fn start(&self, dev: &Device, st: &mut Exchanges, g: &mut Inner, c: ConnId, now: Instant) {
        let Ok(peer) = g.stack.connection(c).map(|x| x.remote()) else {
            return;
        };
        let Some(peer) = peer else {
            let _ = g.stack.abort(c);
            return;
        };
        let max = dev.shared.cfg.max_listener_exchanges;
        let mut slot = None;
        if st.by_conn.len() < max {
            slot = dev.shared.exchange_slot();
        }
        if slot.is_none() && self.evict_oldest(dev, st, g) {
            slot = dev.shared.exchange_slot();
        }
        let Some(slot) = slot else {
            bump(&self.counters.refused);
            trace::mpa_dropped(
                dev.shared.serial,
                peer.into(),
                "refused: too many exchanges",
            );
            let _ = g.stack.abort(c);
            return;
        };
        g.watch(c, self.id);
        let ex = Exchange {
            id: c,
            reader: FrameReader::default(),
            key: st.key(now + dev.shared.cfg.mpa_request_timeout),
            peer,
            _slot: slot,
        };
        st.insert(ex);
        self.counters.in_progress.fetch_add(1, Ordering::Relaxed);
    }

    /// Reads what the exchanges with news (and those just taken) have; returns those
    /// whose Request is whole.
    fn progress(&self, dev: &Device, st: &mut Exchanges, g: &mut Inner) -> Vec<Exchange> {
        let mut ids = std::mem::take(&mut st.fresh);
        ids.extend(g.take_news(self.id));
        ids.sort_unstable();
        ids.dedup();
        let mut finished = Vec::new();
        for id in ids {
            let Some(ex) = st.by_conn.get_mut(&id) else {
                continue;
            };
            bump(&self.counters.examined);
            let r = ex.reader.read_from(&mut StackRead {
                stack: &mut g.stack,
                id,
            });
            match r {
                Ok(false) => {}
                Ok(true) => {
                    if let Some(ex) = self.take(st, g, id) {
                        finished.push(ex);
                    }
                }
                Err(e) => {
                    if let Some(ex) = self.take(st, g, id) {
                        bump(if ex.reader.eof() {
                            &self.counters.closed
                        } else {
                            &self.counters.malformed
                        });
                        trace::mpa_dropped(dev.shared.serial, ex.peer.into(), &e.to_string());
                        let _ = g.stack.abort(ex.id);
                    }
                }
            }
        }
        finished
    }

    /// Ends exchange `id`: it is no longer in progress, nor watched.
    fn take(&self, st: &mut Exchanges, g: &mut Inner, id: ConnId) -> Option<Exchange> {
        let ex = st.remove(id)?;
        g.unwatch(id);
        self.counters.in_progress.fetch_sub(1, Ordering::Relaxed);
        Some(ex)
    }

    /// Drops the exchanges whose deadline has passed.
    fn expire(&self, dev: &Device, st: &mut Exchanges, g: &mut Inner, now: Instant) {
        while let Some((t, id)) = st.first()
            && t <= now
        {
            if let Some(ex) = self.take(st, g, id) {
                bump(&self.counters.timed_out);
                let why = format!(
                    "timed out with {} octets of the MPA Request",
                    ex.reader.len()
                );
                trace::mpa_dropped(dev.shared.serial, ex.peer.into(), &why);
                let _ = g.stack.abort(ex.id);
            }
        }
    }

    /// Drops the oldest exchange in progress; false if there is none.
    fn evict_oldest(&self, dev: &Device, st: &mut Exchanges, g: &mut Inner) -> bool {
        let Some(ex) = st.first().and_then(|(_, id)| self.take(st, g, id)) else {
            return false;
        };
        bump(&self.counters.evicted);
        trace::mpa_dropped(
            dev.shared.serial,
            ex.peer.into(),
            "evicted for a newer connection",
        );
        let _ = g.stack.abort(ex.id);
        true
    }
}

impl Drop for UserListener {
    /// Stops listening: connections not yet accepted, and those whose Request was
    /// being read, are reset.
    fn drop(&mut self) {
        let list = self
            .state
            .get_mut()
            .map(|s| std::mem::take(&mut s.by_conn))
            .unwrap_or_default();
        if let Ok(mut g) = self.stack.lock() {
            let _ = g.stack.unlisten(self.id);
            g.forget(self.id);
            for id in list.into_keys() {
                let _ = g.stack.abort(id);
            }
            self.stack.after_all(&mut g);
        }
    }
}

#[cfg(test)]
#[path = "listener_tests.rs"]
mod tests;
