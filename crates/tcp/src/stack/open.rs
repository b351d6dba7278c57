//! Opening connections: active opens from an ephemeral port, listeners (their ports,
//! backlogs and accept queues) and the hand-over of established connections.

use super::{ConnId, Listener, ListenerId, Rx, RxMode, Stack, StackError, Stage};
use crate::conn::Connection;
use crate::reassembly::Reassembly;
use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

impl Stack {
    /// Opens a connection to `remote` from `local` (the stack's first address when
    /// `None`) and an ephemeral port; the SYN goes out at the next transmit.
    pub fn connect(
        &mut self,
        now: Duration,
        local: Option<Ipv4Addr>,
        remote: SocketAddrV4,
        mode: RxMode,
    ) -> Result<ConnId, StackError> {
        let ip = match local {
            Some(ip) if self.addrs.contains(&ip) => ip,
            Some(ip) => return Err(StackError::AddrNotAvailable(ip)),
            None => *self
                .addrs
                .first()
                .ok_or(StackError::AddrNotAvailable(Ipv4Addr::UNSPECIFIED))?,
        };
        if self.live >= self.cfg.max_connections {
            return Err(StackError::TooManyConnections);
        }
        let local = self.ephemeral(ip, remote)?;
        let iss = crate::initial_sequence(self.cfg.secret, local, remote, now);
        let conn = Connection::connect(self.cfg.tcp.clone(), local, remote, iss);
        let rx = match mode {
            RxMode::Stream => Rx::Stream(Some(Reassembly::for_connection(&conn))),
            RxMode::Raw => Rx::Raw,
        };
        self.stats.connected += 1;
        Ok(self.insert(conn, (local, remote), rx, Stage::User))
    }

    /// A free local port on `ip` towards `remote`, from the ephemeral range.
    fn ephemeral(
        &mut self,
        ip: Ipv4Addr,
        remote: SocketAddrV4,
    ) -> Result<SocketAddrV4, StackError> {
        let (lo, hi) = self.cfg.ephemeral_ports;
        let span = u32::from(hi - lo) + 1;
        for _ in 0..span {
            let port = self.next_port;
            self.next_port = if port >= hi { lo } else { port + 1 };
            let local = SocketAddrV4::new(ip, port);
            let listening = self.by_local.contains_key(&local)
                || self
                    .by_local
                    .contains_key(&SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port));
            if !listening && !self.by_tuple.contains_key(&(local, remote)) {
                return Ok(local);
            }
        }
        Err(StackError::NoFreePorts)
    }

    /// Listens on `local` (an unspecified address listens on all of the stack's; port
    /// 0 takes a free port from the ephemeral range). A SYN that finds `backlog`
    /// established connections waiting for [`Stack::accept`] is dropped (the client
    /// sends it again); handshakes under way when the queue fills still join it, so
    /// at most `backlog` plus [`StackConfig::max_half_open`](super::StackConfig::max_half_open) wait.
    pub fn listen(
        &mut self,
        local: SocketAddrV4,
        backlog: usize,
        mode: RxMode,
    ) -> Result<ListenerId, StackError> {
        let ip = *local.ip();
        if !ip.is_unspecified() && !self.addrs.contains(&ip) {
            return Err(StackError::AddrNotAvailable(ip));
        }
        let local = match local.port() {
            0 => self
                .free_listening_port(ip)
                .ok_or(StackError::NoFreePorts)?,
            _ if self.port_taken(local) => return Err(StackError::AddrInUse(local)),
            _ => local,
        };
        let id = ListenerId(self.next_listener);
        self.next_listener = self.next_listener.wrapping_add(1).max(1);
        self.listeners.insert(
            id,
            Listener {
                local,
                backlog: backlog.max(1),
                mode,
                half_open: VecDeque::new(),
                ready: VecDeque::new(),
                queued: false,
            },
        );
        self.by_local.insert(local, id);
        Ok(id)
    }

    /// Whether a listener on `local` would conflict with one there is, or with a
    /// connection using its port.
    fn port_taken(&self, local: SocketAddrV4) -> bool {
        let port = local.port();
        let any = SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port);
        self.by_local.contains_key(&local)
            || self.by_local.contains_key(&any)
            || (local.ip().is_unspecified() && self.by_local.keys().any(|l| l.port() == port))
            || self.by_tuple.keys().any(|(l, _)| {
                l.port() == port && (l.ip() == local.ip() || local.ip().is_unspecified())
            })
    }

    /// A port of the ephemeral range nothing on `ip` uses.
    fn free_listening_port(&mut self, ip: Ipv4Addr) -> Option<SocketAddrV4> {
        let (lo, hi) = self.cfg.ephemeral_ports;
        for _ in 0..=u32::from(hi - lo) {
            let port = self.next_port;
            self.next_port = if port >= hi { lo } else { port + 1 };
            let local = SocketAddrV4::new(ip, port);
            if !self.port_taken(local) {
                return Some(local);
            }
        }
        None
    }

    /// The address a listener listens on (its port chosen, if it was 0).
    pub fn listener_addr(&self, id: ListenerId) -> Result<SocketAddrV4, StackError> {
        self.listeners
            .get(&id)
            .map(|l| l.local)
            .ok_or(StackError::InvalidListener)
    }

    /// Stops listening: connections not yet accepted are reset.
    pub fn unlisten(&mut self, id: ListenerId) -> Result<(), StackError> {
        let l = self
            .listeners
            .remove(&id)
            .ok_or(StackError::InvalidListener)?;
        self.by_local.remove(&l.local);
        for c in l.half_open.into_iter().chain(l.ready) {
            if let Some(e) = self.entry_mut(c) {
                e.conn.abort();
                e.stage = Stage::Released;
            }
        }
        Ok(())
    }

    /// The next established connection of `listener`, if one waits.
    pub fn accept(&mut self, listener: ListenerId) -> Result<Option<ConnId>, StackError> {
        let l = self
            .listeners
            .get_mut(&listener)
            .ok_or(StackError::InvalidListener)?;
        let Some(id) = l.ready.pop_front() else {
            return Ok(None);
        };
        self.stats.accepted += 1;
        if let Some(e) = self.entry_mut(id) {
            e.stage = Stage::User;
        }
        // What happened while it waited is reported now.
        self.enqueue(id);
        Ok(Some(id))
    }

    /// Established connections waiting for `accept`.
    pub fn pending_accepts(&self, listener: ListenerId) -> usize {
        self.listeners.get(&listener).map_or(0, |l| l.ready.len())
    }

    /// Half-open connections of `listener`.
    pub fn half_open(&self, listener: ListenerId) -> usize {
        self.listeners
            .get(&listener)
            .map_or(0, |l| l.half_open.len())
    }
}
