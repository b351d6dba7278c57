//! The simulated wire: an in-memory link between two ends that carries packets (IPv4
//! octets) with a virtual clock and seeded impairments: loss, reordering, duplication,
//! delay with jitter, corruption (bit flips, for the checksums to catch), a rate limit
//! with a bounded queue, and an MTU. Every run replays exactly from its seed: the only
//! randomness is the wire's own [`Rng`], drawn in the order packets are sent.
//!
//! The wire knows nothing of TCP; a test (or a transport) sends what a connection
//! emits, asks when the next packet arrives, moves its clock there and takes the
//! arrivals. [`Wire::capture`] records what arrives as a pcap file.

mod pcap;
mod rng;

pub use pcap::PcapSink;
pub use rng::Rng;

use std::collections::VecDeque;
use std::io::{self, Write};
use std::time::Duration;

/// One end of the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum End {
    A,
    B,
}

impl End {
    pub fn other(self) -> End {
        match self {
            End::A => End::B,
            End::B => End::A,
        }
    }

    fn index(self) -> usize {
        match self {
            End::A => 0,
            End::B => 1,
        }
    }
}

/// What the wire does to packets, the same both ways.
#[derive(Debug, Clone, PartialEq)]
pub struct Impairments {
    /// One-way propagation delay.
    pub delay: Duration,
    /// A random extra delay in `[0, jitter)` per packet; order is kept.
    pub jitter: Duration,
    /// Probability that a packet is lost.
    pub loss: f64,
    /// Probability that a packet is held back and overtaken by later ones.
    pub reorder: f64,
    /// How long a reordered packet is held back (beyond its normal arrival).
    pub reorder_delay: Duration,
    /// Probability that a packet arrives twice.
    pub duplicate: f64,
    /// Probability that one bit of a packet is flipped.
    pub corrupt: f64,
    /// Octets per second each way; `None` is unlimited.
    pub rate: Option<u64>,
    /// Larger packets are dropped.
    pub mtu: usize,
    /// Packets each way on the wire at most (queued or in flight); more are dropped.
    pub queue_limit: usize,
}

impl Default for Impairments {
    /// A clean link: 1 ms each way, nothing lost, 1500-octet MTU.
    fn default() -> Impairments {
        Impairments {
            delay: Duration::from_millis(1),
            jitter: Duration::ZERO,
            loss: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::from_millis(1),
            duplicate: 0.0,
            corrupt: 0.0,
            rate: None,
            mtu: 1500,
            queue_limit: 10_000,
        }
    }
}

/// What the wire did, both directions together.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WireStats {
    pub sent: u64,
    pub delivered: u64,
    pub lost: u64,
    pub reordered: u64,
    pub duplicated: u64,
    pub corrupted: u64,
    pub too_big: u64,
    pub queue_drops: u64,
}

#[derive(Debug)]
struct InFlight {
    at: Duration,
    /// Ties at the same instant keep the order of sending.
    order: u64,
    to: End,
    packet: Vec<u8>,
}

/// An in-memory link between ends A and B.
#[derive(Debug)]
pub struct Wire {
    imp: Impairments,
    rng: Rng,
    flight: VecDeque<InFlight>,
    order: u64,
    /// Per direction (by sending end): when the sender's link is free again.
    busy_until: [Duration; 2],
    /// Per direction: the latest in-order arrival, which later packets do not pass.
    last_arrival: [Duration; 2],
    /// Per direction: packets on the wire.
    queued: [usize; 2],
    /// The packet last handed out, and spare buffers.
    current: Vec<u8>,
    spare: Vec<Vec<u8>>,
    stats: WireStats,
    pcap: Option<PcapSink>,
}

impl Wire {
    pub fn new(imp: Impairments, seed: u64) -> Wire {
        Wire {
            imp,
            rng: Rng::new(seed),
            flight: VecDeque::new(),
            order: 0,
            busy_until: [Duration::ZERO; 2],
            last_arrival: [Duration::ZERO; 2],
            queued: [0; 2],
            current: Vec::new(),
            spare: Vec::new(),
            stats: WireStats::default(),
            pcap: None,
        }
    }

    pub fn impairments(&self) -> &Impairments {
        &self.imp
    }

    /// Changes the impairments from now on (packets on the wire keep their fate).
    pub fn set_impairments(&mut self, imp: Impairments) {
        self.imp = imp;
    }

    pub fn stats(&self) -> &WireStats {
        &self.stats
    }

    /// Makes `packets` packet buffers ready (of the MTU each), so that a run with no
    /// more than that many packets on the wire at once allocates nothing.
    pub fn reserve(&mut self, packets: usize) {
        let mtu = self.imp.mtu;
        while self.spare.len() < packets {
            self.spare.push(Vec::with_capacity(mtu));
        }
    }

    /// Records every packet that arrives (with its arrival time) to `out` as pcap.
    pub fn capture(&mut self, out: Box<dyn Write + Send>) -> io::Result<()> {
        self.pcap = Some(PcapSink::new(out)?);
        Ok(())
    }

    /// Ends the capture, flushing it.
    pub fn finish_capture(&mut self) -> io::Result<()> {
        self.pcap.take().map_or(Ok(()), PcapSink::finish)
    }

    /// Puts `packet` on the wire from `from` at `now`; the impairments decide its fate.
    pub fn send(&mut self, from: End, now: Duration, packet: &[u8]) {
        self.stats.sent += 1;
        let dir = from.index();
        if packet.len() > self.imp.mtu {
            self.stats.too_big += 1;
            return;
        }
        if self.queued[dir] >= self.imp.queue_limit {
            self.stats.queue_drops += 1;
            return;
        }
        if self.rng.chance(self.imp.loss) {
            self.stats.lost += 1;
            return;
        }
        let start = now.max(self.busy_until[dir]);
        let serialize = self.imp.rate.map_or(Duration::ZERO, |r| {
            Duration::from_nanos((packet.len() as u64 * 1_000_000_000) / r.max(1))
        });
        self.busy_until[dir] = start + serialize;
        let mut at = start + serialize + self.imp.delay + self.jitter();
        at = at.max(self.last_arrival[dir]);
        if self.rng.chance(self.imp.reorder) {
            self.stats.reordered += 1;
            at += self.imp.reorder_delay;
        } else {
            self.last_arrival[dir] = at;
        }
        self.push(at, from.other(), packet);
        if self.rng.chance(self.imp.duplicate) {
            self.stats.duplicated += 1;
            let again = at + self.jitter();
            self.push(again, from.other(), packet);
        }
    }

    fn jitter(&mut self) -> Duration {
        let j = self.imp.jitter.as_nanos() as u64;
        Duration::from_nanos(self.rng.below(j))
    }

    fn push(&mut self, at: Duration, to: End, packet: &[u8]) {
        // Every buffer holds an MTU, so a recycled one never grows.
        let mtu = self.imp.mtu.max(packet.len());
        let mut buf = self.spare.pop().unwrap_or_else(|| Vec::with_capacity(mtu));
        buf.clear();
        buf.extend_from_slice(packet);
        if self.rng.chance(self.imp.corrupt) && !buf.is_empty() {
            self.stats.corrupted += 1;
            let bit = self.rng.below(buf.len() as u64 * 8) as usize;
            buf[bit / 8] ^= 1 << (bit % 8);
        }
        self.order += 1;
        let key = (at, self.order);
        let i = self.flight.partition_point(|f| (f.at, f.order) <= key);
        self.flight.insert(
            i,
            InFlight {
                at,
                order: self.order,
                to,
                packet: buf,
            },
        );
        self.queued[to.other().index()] += 1;
    }

    /// When the next packet arrives, if any is on the wire.
    pub fn next_arrival(&self) -> Option<Duration> {
        self.flight.front().map(|f| f.at)
    }

    /// Packets on the wire, both ways.
    pub fn in_flight(&self) -> usize {
        self.flight.len()
    }

    /// The next packet that has arrived by `now`: the end it arrived at and its octets
    /// (valid until the next call).
    pub fn poll_arrival(&mut self, now: Duration) -> Option<(End, &[u8])> {
        if self.flight.front().is_none_or(|f| f.at > now) {
            return None;
        }
        let f = self.flight.pop_front()?;
        self.queued[f.to.other().index()] -= 1;
        self.stats.delivered += 1;
        if let Some(p) = &mut self.pcap {
            p.write(f.at, &f.packet);
        }
        let old = std::mem::replace(&mut self.current, f.packet);
        self.spare.push(old);
        Some((f.to, &self.current))
    }
}

#[cfg(test)]
mod tests;
