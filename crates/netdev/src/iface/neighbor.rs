//! The neighbour table: IPv4 address -> MAC, learned by ARP. Bounded in every way: a
//! fixed number of entries that expire, a fixed number of addresses being resolved,
//! a fixed number of packets held for each, and a fixed number of requests before a
//! resolution gives up. Time is a parameter (a `Duration` since the caller's origin).

use crate::device::MacAddr;
use std::collections::VecDeque;
use std::net::Ipv4Addr;
use std::time::Duration;

/// The bounds of a [`Neighbors`] table (see `InterfaceConfig` for their meaning).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub capacity: usize,
    pub ttl: Duration,
    pub retry_interval: Duration,
    pub max_requests: u32,
    pub pending_capacity: usize,
    pub pending_per_neighbor: usize,
}

#[derive(Debug)]
struct Entry {
    ip: Ipv4Addr,
    mac: MacAddr,
    expires: Duration,
    /// A unicast request went out to keep this entry alive.
    refreshing: bool,
}

#[derive(Debug)]
struct Pending {
    ip: Ipv4Addr,
    requests_sent: u32,
    /// When to send the next request, or give up once all were sent.
    next: Duration,
    packets: VecDeque<Vec<u8>>,
}

/// What [`Neighbors::lookup`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Lookup {
    Known(MacAddr),
    /// Known, but near its expiry: use it, and send a unicast request to refresh it.
    Refresh(MacAddr),
    Unknown,
}

/// What a timer asks the interface to do.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Due {
    /// Send another broadcast request for this address.
    Request(Ipv4Addr),
    /// Nobody answered: the packets held for it were dropped.
    GaveUp { dropped: usize },
}

/// A packet could not be held: its neighbour's queue, or the table of neighbours
/// being resolved, is full.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Full;

#[derive(Debug)]
pub(crate) struct Neighbors {
    limits: Limits,
    entries: Vec<Entry>,
    pending: Vec<Pending>,
}

impl Neighbors {
    pub fn new(limits: Limits) -> Neighbors {
        Neighbors {
            limits,
            entries: Vec::with_capacity(limits.capacity),
            pending: Vec::with_capacity(limits.pending_capacity),
        }
    }

    /// The MAC for `ip` if known and not expired (no side effects).
    pub fn get(&self, ip: Ipv4Addr, now: Duration) -> Option<MacAddr> {
        self.entries
            .iter()
            .find(|e| e.ip == ip && now < e.expires)
            .map(|e| e.mac)
    }

    /// The MAC to send to `ip`; an expired entry is removed.
    pub fn lookup(&mut self, ip: Ipv4Addr, now: Duration) -> Lookup {
        let Some(i) = self.entries.iter().position(|e| e.ip == ip) else {
            return Lookup::Unknown;
        };
        let e = &mut self.entries[i];
        if now >= e.expires {
            self.entries.swap_remove(i);
            return Lookup::Unknown;
        }
        // In the last quarter of its life an entry in use is refreshed once.
        if !e.refreshing && e.expires - now <= self.limits.ttl / 4 {
            e.refreshing = true;
            return Lookup::Refresh(e.mac);
        }
        Lookup::Known(e.mac)
    }

    /// True when `ip` has an entry or is being resolved (RFC 826: such a sender's
    /// mapping is updated even by ARP packets not meant for us).
    pub fn knows(&self, ip: Ipv4Addr) -> bool {
        self.entries.iter().any(|e| e.ip == ip) || self.pending.iter().any(|p| p.ip == ip)
    }

    /// Records `ip -> mac`. An existing entry is updated; a new one is made when
    /// `create` or when `ip` was being resolved (evicting the entry nearest its expiry
    /// if the table is full). Returns the packets that were waiting for `ip`.
    pub fn learn(
        &mut self,
        ip: Ipv4Addr,
        mac: MacAddr,
        now: Duration,
        create: bool,
    ) -> Option<VecDeque<Vec<u8>>> {
        let waiting = self
            .pending
            .iter()
            .position(|p| p.ip == ip)
            .map(|i| self.pending.swap_remove(i).packets);
        let expires = now + self.limits.ttl;
        if let Some(e) = self.entries.iter_mut().find(|e| e.ip == ip) {
            e.mac = mac;
            e.expires = expires;
            e.refreshing = false;
        } else if (create || waiting.is_some()) && self.limits.capacity > 0 {
            if self.entries.len() >= self.limits.capacity {
                let oldest = (0..self.entries.len())
                    .min_by_key(|&i| self.entries[i].expires)
                    .expect("a full table has entries");
                self.entries.swap_remove(oldest);
            }
            self.entries.push(Entry {
                ip,
                mac,
                expires,
                refreshing: false,
            });
        }
        waiting
    }

    /// Holds `packet` until `ip` is resolved. `Ok(true)` when this starts a new
    /// resolution (the caller sends the first request now).
    pub fn enqueue(&mut self, ip: Ipv4Addr, packet: &[u8], now: Duration) -> Result<bool, Full> {
        if let Some(p) = self.pending.iter_mut().find(|p| p.ip == ip) {
            if p.packets.len() >= self.limits.pending_per_neighbor {
                return Err(Full);
            }
            p.packets.push_back(packet.to_vec());
            return Ok(false);
        }
        if self.pending.len() >= self.limits.pending_capacity
            || self.limits.pending_per_neighbor == 0
        {
            return Err(Full);
        }
        self.pending.push(Pending {
            ip,
            requests_sent: 1,
            next: now + self.limits.retry_interval,
            packets: VecDeque::from([packet.to_vec()]),
        });
        Ok(true)
    }

    /// When [`Neighbors::due`] has something to do next, if ever.
    pub fn poll_timeout(&self) -> Option<Duration> {
        self.pending.iter().map(|p| p.next).min()
    }

    /// One thing that is due at `now` (call until `None`).
    pub fn due(&mut self, now: Duration) -> Option<Due> {
        let i = self.pending.iter().position(|p| p.next <= now)?;
        let p = &mut self.pending[i];
        if p.requests_sent >= self.limits.max_requests {
            let gone = self.pending.swap_remove(i);
            return Some(Due::GaveUp {
                dropped: gone.packets.len(),
            });
        }
        p.requests_sent += 1;
        p.next = now + self.limits.retry_interval;
        Some(Due::Request(p.ip))
    }

    /// Entries (expired ones included until they are looked up or evicted).
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn table() -> Neighbors {
        Neighbors::new(Limits {
            capacity: 2,
            ttl: 60 * S,
            retry_interval: S,
            max_requests: 3,
            pending_capacity: 2,
            pending_per_neighbor: 2,
        })
    }

    fn ip(n: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, 0, 0, n)
    }

    fn mac(n: u8) -> MacAddr {
        MacAddr([2, 0, 0, 0, 0, n])
    }

    #[test]
    fn entries_expire_and_are_refreshed_once_near_the_end() {
        let mut t = table();
        assert_eq!(t.learn(ip(1), mac(1), S, true), None);
        assert_eq!(t.lookup(ip(1), S), Lookup::Known(mac(1)));
        assert_eq!(t.lookup(ip(1), 46 * S), Lookup::Refresh(mac(1)));
        assert_eq!(t.lookup(ip(1), 47 * S), Lookup::Known(mac(1)));
        assert_eq!(t.get(ip(1), 60 * S), Some(mac(1)));
        assert_eq!(t.get(ip(1), 61 * S), None);
        assert_eq!(t.lookup(ip(1), 61 * S), Lookup::Unknown);
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn a_full_table_evicts_the_entry_nearest_its_expiry() {
        let mut t = table();
        t.learn(ip(1), mac(1), S, true);
        t.learn(ip(2), mac(2), 2 * S, true);
        t.learn(ip(3), mac(3), 3 * S, true);
        assert_eq!(t.len(), 2);
        assert_eq!(t.get(ip(1), 3 * S), None);
        assert_eq!(t.get(ip(3), 3 * S), Some(mac(3)));
        // Without `create`, a stranger is not added, but a known one is updated.
        t.learn(ip(4), mac(4), 4 * S, false);
        assert_eq!(t.get(ip(4), 4 * S), None);
        t.learn(ip(2), mac(9), 4 * S, false);
        assert_eq!(t.get(ip(2), 4 * S), Some(mac(9)));
    }

    #[test]
    fn resolution_is_bounded_retried_and_gives_up() {
        let mut t = table();
        assert_eq!(t.enqueue(ip(1), b"a", S), Ok(true));
        assert_eq!(t.enqueue(ip(1), b"b", S), Ok(false));
        assert_eq!(t.enqueue(ip(1), b"c", S), Err(Full));
        assert_eq!(t.enqueue(ip(2), b"d", S), Ok(true));
        assert_eq!(t.enqueue(ip(3), b"e", S), Err(Full));
        assert!(t.knows(ip(1)));
        assert_eq!(t.poll_timeout(), Some(2 * S));
        assert_eq!(t.due(S + S / 2), None);
        let mut seen = Vec::new();
        while let Some(d) = t.due(2 * S) {
            seen.push(d);
        }
        assert_eq!(seen, [Due::Request(ip(1)), Due::Request(ip(2))]);
        assert_eq!(t.due(3 * S), Some(Due::Request(ip(1))));
        assert_eq!(t.due(3 * S), Some(Due::Request(ip(2))));
        // The third request was the last: one more interval, then give up.
        assert_eq!(t.poll_timeout(), Some(4 * S));
        let waiting = t.learn(ip(2), mac(2), 3 * S + S / 2, false).unwrap();
        assert_eq!(waiting, [b"d".to_vec()]);
        assert_eq!(t.get(ip(2), 4 * S), Some(mac(2)));
        assert_eq!(t.due(4 * S), Some(Due::GaveUp { dropped: 2 }));
        assert_eq!(t.due(4 * S), None);
        assert_eq!(t.poll_timeout(), None);
        assert!(!t.knows(ip(1)));
    }
}
