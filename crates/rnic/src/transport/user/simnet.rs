//! An in-process network for softrnic's own TCP: IPv4 packets between the stacks of
//! devices in one process, with seeded impairments (loss, reordering, duplication,
//! corruption, delay). Every run with the same seed and the same traffic makes the same
//! decisions, so a failure under impairment can be replayed.

use softrnic_tcp::Lent;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the simulated wire does to packets. Probabilities are per packet, in 0..=1.
#[derive(Debug, Clone, PartialEq)]
pub struct Impairments {
    /// Drops a packet.
    pub loss: f64,
    /// Holds a packet back by `reorder_delay`, so that later ones overtake it.
    pub reorder: f64,
    /// How long a reordered packet is held back.
    pub reorder_delay: Duration,
    /// Delivers a packet twice.
    pub duplicate: f64,
    /// Flips one bit of a packet (the checksums must catch it).
    pub corrupt: f64,
    /// One-way delay of every packet.
    pub delay: Duration,
    /// The largest IPv4 packet the network carries (larger ones are dropped): by
    /// default 65535, the largest there is, as loopback's 64 KiB.
    pub mtu: usize,
    /// Seed of the decisions.
    pub seed: u64,
}

impl Default for Impairments {
    fn default() -> Impairments {
        Impairments {
            loss: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::from_micros(200),
            duplicate: 0.0,
            corrupt: 0.0,
            delay: Duration::ZERO,
            mtu: 65535,
            seed: 1,
        }
    }
}

/// What the wire did, for reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WireStats {
    pub packets: u64,
    pub lost: u64,
    pub reordered: u64,
    pub duplicated: u64,
    pub corrupted: u64,
    /// Packets for an address no stack owns.
    pub unroutable: u64,
    /// Packets larger than the MTU.
    pub too_big: u64,
    /// Packets dropped because the receiver had too many (or too many octets) waiting.
    pub queue_drops: u64,
}

/// A simulated network that devices in this process attach their own TCP to
/// ([`crate::UserTcp`]). Cloning gives another handle to the same network.
#[derive(Clone)]
pub struct SimNet {
    hub: Arc<Mutex<Hub>>,
    /// No packet held back by the network (reordering, delay) falls due before this
    /// time (nanoseconds on the engines' clock; `u64::MAX`: none is held): a lower
    /// bound, read without the lock by threads that poll ([`SimNet::deliver_due`]).
    held_due: Arc<AtomicU64>,
}

impl Default for SimNet {
    fn default() -> SimNet {
        SimNet::new(Impairments::default())
    }
}

impl std::fmt::Debug for SimNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimNet")
            .field("stats", &self.stats())
            .finish()
    }
}

/// A packet on its way: (delivery time, order of sending) first, so that packets due
/// at the same time keep their order; then whether the wire damaged it, and its octets.
type InFlight = Reverse<(Duration, u64, bool, Packet)>;

/// A packet buffer of the network: `len` octets of `buf` are the packet (or its
/// headers, when `body` carries the payload by reference: a share of the sender's send
/// buffer, not copied). Buffers keep their full length (the MTU) from use to use, so
/// that reusing one for a larger packet costs no zeroing.
pub(crate) struct Packet {
    pub(crate) buf: Vec<u8>,
    pub(crate) len: usize,
    pub(crate) body: Option<Lent>,
}

// Packets are ordered by (time, order of sending) first, which are unique: these
// only make the heap's tuple comparable.
impl PartialEq for Packet {
    fn eq(&self, other: &Packet) -> bool {
        self.len == other.len
    }
}

impl Eq for Packet {}

impl PartialOrd for Packet {
    fn partial_cmp(&self, other: &Packet) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Packet {
    fn cmp(&self, other: &Packet) -> std::cmp::Ordering {
        self.len.cmp(&other.len)
    }
}

/// A packet taken off the wire: its octets, and whether the wire damaged it. The wire
/// checksums for its ends (checksum offload, as loopback and veth do: a property of
/// this in-process link, real links keep TCP's checksums), so it says so itself.
pub(crate) struct Arrived {
    pub(crate) packet: Packet,
    pub(crate) damaged: bool,
}

/// See [`SimNet::deliver_inline`].
type Deliver = Arc<dyn Fn() -> bool + Send + Sync>;

#[derive(Default)]
struct Hub {
    imp: Impairments,
    rng: u64,
    sent: u64,
    stats: WireStats,
    ports: HashMap<Ipv4Addr, Port>,
    /// Packet buffers given back by receivers, reused by senders (no allocation, no
    /// page faults per packet).
    spare: Vec<Vec<u8>>,
    /// Packets are queued, not delivered ([`SimNet::pause`]).
    paused: bool,
    /// Copies of the packets sent, when capturing ([`SimNet::capture`]).
    captured: Option<Vec<Vec<u8>>>,
}

/// Packet buffers kept for reuse at most.
const MAX_SPARE: usize = 256;

struct Port {
    queue: BinaryHeap<InFlight>,
    /// Octets of the packets in `queue`.
    queued_bytes: usize,
    /// Wakes the stack that owns the address.
    wake: Arc<dyn Fn() + Send + Sync>,
    /// Hands the packets due now to the stack in the sender's thread, as kernel
    /// loopback does; false when the stack is busy (then it is woken instead).
    deliver: Option<Deliver>,
}

/// Packets a stack may have in flight towards it, and their octets; beyond, the wire
/// drops (as a full switch queue would), so a stack that stops reading cannot grow
/// memory without bound.
const MAX_QUEUED: usize = 16 * 1024;
const MAX_QUEUED_BYTES: usize = 64 << 20;

impl SimNet {
    /// A network with these impairments.
    pub fn new(imp: Impairments) -> SimNet {
        let rng = imp.seed ^ 0x9e37_79b9_7f4a_7c15;
        SimNet {
            hub: Arc::new(Mutex::new(Hub {
                imp,
                rng: rng.max(1),
                ..Hub::default()
            })),
            held_due: Arc::new(AtomicU64::new(u64::MAX)),
        }
    }

    /// Changes what the wire does from now on (tests: a clean handshake, then loss).
    #[cfg(test)]
    pub(crate) fn set_impairments(&self, imp: Impairments) {
        if let Ok(mut h) = self.hub.lock() {
            h.imp = imp;
        }
    }

    /// The largest IPv4 packet the network carries.
    pub fn mtu(&self) -> usize {
        self.hub.lock().map(|h| h.imp.mtu).unwrap_or(1500)
    }

    /// What the wire has done so far.
    pub fn stats(&self) -> WireStats {
        self.hub.lock().map(|h| h.stats).unwrap_or_default()
    }

    /// Attaches a stack owning `addr`; `wake` is called when a packet for it is queued.
    pub(crate) fn attach(
        &self,
        addr: Ipv4Addr,
        wake: Arc<dyn Fn() + Send + Sync>,
    ) -> std::io::Result<()> {
        let mut h = self.lock()?;
        if h.ports.contains_key(&addr) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                "another device owns this address on the simulated network",
            ));
        }
        h.ports.insert(
            addr,
            Port {
                queue: BinaryHeap::new(),
                queued_bytes: 0,
                wake,
                deliver: None,
            },
        );
        Ok(())
    }

    /// Lets senders hand packets due at once to the stack at `addr` in their own
    /// thread (`deliver`), instead of waking the stack's thread.
    pub(crate) fn deliver_inline(&self, addr: Ipv4Addr, deliver: Deliver) {
        if let Ok(mut h) = self.hub.lock()
            && let Some(p) = h.ports.get_mut(&addr)
        {
            p.deliver = Some(deliver);
        }
    }

    pub(crate) fn detach(&self, addr: Ipv4Addr) {
        if let Ok(mut h) = self.hub.lock() {
            h.ports.remove(&addr);
        }
    }

    fn lock(&self) -> std::io::Result<std::sync::MutexGuard<'_, Hub>> {
        self.hub
            .lock()
            .map_err(|_| std::io::Error::other("simulated network poisoned"))
    }

    /// Takes up to `n` packet buffers of the network's MTU for a sender to write
    /// packets into ([`SimNet::send_owned`]): spare ones first, so that no packet
    /// allocates or touches fresh pages once the network has warmed up.
    pub(crate) fn take_buffers(&self, n: usize, out: &mut Vec<Vec<u8>>) {
        let Ok(mut h) = self.hub.lock() else {
            return;
        };
        let mtu = h.imp.mtu;
        for _ in 0..n {
            let mut b = h.spare.pop().unwrap_or_default();
            if b.len() != mtu {
                b.resize(mtu, 0);
            }
            out.push(b);
        }
    }

    /// Puts the packet in the first `len` octets of `buf` (one of
    /// [`SimNet::take_buffers`]) on the wire at `now` (on the engines' clock): the
    /// buffer itself travels, the octets are not copied.
    pub(crate) fn send_owned(&self, buf: Vec<u8>, len: usize, now: Duration) {
        self.send_packet(buf, len, None, now);
    }

    /// [`SimNet::send_owned`] for a packet whose first `len` octets of `buf` are the
    /// headers and whose payload is `body`, carried by reference.
    pub(crate) fn send_packet(&self, buf: Vec<u8>, len: usize, body: Option<Lent>, now: Duration) {
        let Ok(mut guard) = self.hub.lock() else {
            return;
        };
        let h = &mut *guard;
        h.stats.packets += 1;
        let Some(dst) = buf
            .get(16..20)
            .filter(|_| len >= 20)
            .map(|d| Ipv4Addr::new(d[0], d[1], d[2], d[3]))
        else {
            h.give_back(buf);
            return;
        };
        if !h.ports.contains_key(&dst) {
            h.stats.unroutable += 1;
            h.give_back(buf);
            return;
        }
        let body_len = body.as_ref().map_or(0, |b| b.range.len());
        if len + body_len > h.imp.mtu || len > buf.len() {
            h.stats.too_big += 1;
            h.give_back(buf);
            return;
        }
        if let Some(c) = &mut h.captured {
            let mut copy = buf[..len].to_vec();
            copy.extend_from_slice(body.as_ref().map_or(&[][..], |b| b.octets()));
            c.push(copy);
        }
        if h.chance(h.imp.loss) {
            h.stats.lost += 1;
            h.give_back(buf);
            return;
        }
        let mut copies = vec![buf];
        if h.chance(h.imp.duplicate) {
            h.stats.duplicated += 1;
            let mut twin = h.spare.pop().unwrap_or_default();
            twin.clear();
            twin.extend_from_slice(&copies[0]);
            copies.push(twin);
        }
        for mut p in copies {
            let damaged = h.chance(h.imp.corrupt) && len > 0;
            if damaged {
                // A shared payload is never written: the bit flips in the headers (the
                // packet is marked damaged all the same).
                let bit = h.next() as usize % (len * 8);
                p[bit / 8] ^= 1 << (bit % 8);
                h.stats.corrupted += 1;
            }
            let mut at = now + h.imp.delay;
            if h.chance(h.imp.reorder) {
                at += h.imp.reorder_delay;
                h.stats.reordered += 1;
            }
            if at > now {
                self.held_due.fetch_min(nanos(at), Ordering::SeqCst);
            }
            h.sent += 1;
            let order = h.sent;
            match h.ports.get_mut(&dst) {
                Some(port)
                    if port.queue.len() < MAX_QUEUED
                        && port.queued_bytes + len + body_len <= MAX_QUEUED_BYTES =>
                {
                    port.queued_bytes += len + body_len;
                    let body = body.clone();
                    port.queue
                        .push(Reverse((at, order, damaged, Packet { buf: p, len, body })));
                }
                _ => {
                    h.stats.queue_drops += 1;
                    h.give_back(p);
                }
            }
        }
        let Some(port) = h.ports.get(&dst) else {
            return;
        };
        let (wake, deliver) = (port.wake.clone(), port.deliver.clone());
        drop(guard);
        // The receiving stack takes it in this thread if it is free (or its holder
        // does): at once if it is due now; a packet held back for later sets the
        // stack's timer from here. Only a busy stack whose holder will not look
        // again wakes the stack's own thread.
        match deliver {
            Some(d) if d() => {}
            _ => wake(),
        }
    }

    /// Gives packet buffers back for reuse (those [`SimNet::receive`] handed out).
    pub(crate) fn recycle(&self, bufs: &mut Vec<Vec<u8>>) {
        if bufs.is_empty() {
            return;
        }
        if let Ok(mut h) = self.hub.lock() {
            let room = MAX_SPARE.saturating_sub(h.spare.len());
            h.spare.extend(bufs.drain(..).take(room));
        }
        bufs.clear();
    }

    /// Whether the network holds a packet back (one may fall due).
    pub(crate) fn holds(&self) -> bool {
        self.held_due.load(Ordering::SeqCst) != u64::MAX
    }

    /// Hands the packets the network held back and that are due at `now` to their
    /// stacks in the calling thread (a thread that polls anyway: a QP's consumer or
    /// engine), as a sender's thread hands over packets due at once, instead of
    /// leaving them to the stack threads' timers: on 2 CPUs with both ends polling, a
    /// stack thread's wake-up takes a CPU from a poller and comes tens of microseconds
    /// late, while the sender may wait for the window that packet reopens. A stack
    /// that another thread holds gets them in its backlog; the stack threads' timers
    /// stay the fallback. Returns the stacks served. Costs one atomic load while
    /// nothing held is due.
    pub(crate) fn deliver_due(&self, now: Duration) -> usize {
        let due = self.held_due.load(Ordering::SeqCst);
        if due == u64::MAX || due > nanos(now) {
            return 0;
        }
        let mut ready: Vec<Deliver> = Vec::new();
        {
            let Ok(h) = self.hub.lock() else {
                return 0;
            };
            // The bound is made exact here, under the lock that every push takes: a
            // packet held later lowers it again with its `fetch_min`.
            let mut next = u64::MAX;
            for port in h.ports.values() {
                match port.queue.peek() {
                    Some(Reverse((at, ..))) if *at <= now => {
                        ready.extend(port.deliver.clone());
                        // What stays held after the due ones are taken.
                        let later = port.queue.iter().map(|Reverse((at, ..))| *at);
                        if let Some(at) = later.filter(|at| *at > now).min() {
                            next = next.min(nanos(at));
                        }
                    }
                    Some(Reverse((at, ..))) => next = next.min(nanos(*at)),
                    None => {}
                }
            }
            self.held_due.store(next, Ordering::SeqCst);
        }
        ready.iter().filter(|d| d()).count()
    }

    /// Per address, the packets waiting for its stack and how long the oldest due one
    /// has waited at `now` (for tracing a stall: a stack that has not taken its
    /// packets).
    pub(crate) fn backlog(&self, now: Duration) -> Vec<(Ipv4Addr, usize, Option<Duration>)> {
        let Ok(h) = self.hub.lock() else {
            return Vec::new();
        };
        h.ports
            .iter()
            .map(|(a, p)| {
                let oldest = p.queue.iter().map(|Reverse((at, ..))| *at).min();
                (*a, p.queue.len(), oldest.map(|t| now.saturating_sub(t)))
            })
            .collect()
    }

    /// Takes the packets for `addr` that are due at `now` into `out`; returns when the
    /// next one is due.
    pub(crate) fn receive(
        &self,
        addr: Ipv4Addr,
        now: Duration,
        out: &mut Vec<Arrived>,
    ) -> Option<Duration> {
        let mut h = self.hub.lock().ok()?;
        if h.paused {
            return None;
        }
        let port = h.ports.get_mut(&addr)?;
        while let Some(Reverse((at, ..))) = port.queue.peek() {
            if *at > now {
                return Some(*at);
            }
            if let Some(Reverse((_, _, damaged, packet))) = port.queue.pop() {
                port.queued_bytes -= packet.len + packet.body.as_ref().map_or(0, |b| b.range.len());
                out.push(Arrived { packet, damaged });
            }
        }
        None
    }
}

impl SimNet {
    /// Holds every packet on the wire, undelivered, until [`SimNet::resume`] (tests:
    /// let a sender queue everything before a segment leaves the first window).
    pub fn pause(&self) {
        if let Ok(mut h) = self.hub.lock() {
            h.paused = true;
        }
    }

    /// Delivers again, the packets held first.
    pub fn resume(&self) {
        let wakes: Vec<_> = match self.hub.lock() {
            Ok(mut h) => {
                h.paused = false;
                h.ports.values().map(|p| p.wake.clone()).collect()
            }
            Err(_) => return,
        };
        for w in wakes {
            w();
        }
    }

    /// Starts (or stops) keeping a copy of every IPv4 packet sent, as sent (before
    /// loss or damage), for [`SimNet::captured`]: tests read the segments with it.
    pub fn capture(&self, on: bool) {
        if let Ok(mut h) = self.hub.lock() {
            h.captured = on.then(Vec::new);
        }
    }

    /// The packets captured so far, in the order sent (taken: the next call returns
    /// only later ones).
    pub fn captured(&self) -> Vec<Vec<u8>> {
        self.hub
            .lock()
            .ok()
            .and_then(|mut h| h.captured.as_mut().map(std::mem::take))
            .unwrap_or_default()
    }
}

/// `t` in nanoseconds, saturating.
fn nanos(t: Duration) -> u64 {
    u64::try_from(t.as_nanos()).unwrap_or(u64::MAX - 1)
}

impl Hub {
    /// Keeps a packet buffer for reuse, if there is room.
    fn give_back(&mut self, buf: Vec<u8>) {
        if self.spare.len() < MAX_SPARE {
            self.spare.push(buf);
        }
    }

    /// xorshift64*: small, seeded, and good enough to pick packets.
    fn next(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && ((self.next() >> 11) as f64 / (1u64 << 53) as f64) < p
    }
}

impl SimNet {
    /// Per address, the packets the network holds for it (held back, or waiting for
    /// its stack), their octets and when the first falls due; then the counters.
    pub fn stall_report(&self) -> String {
        let t = crate::engine::now();
        let held = super::report::with_lock(&self.hub, |h| {
            let mut b = String::new();
            let mut ports: Vec<_> = h.ports.iter().collect();
            ports.sort_by_key(|(a, _)| **a);
            for (addr, p) in ports {
                let first = super::report::opt_us(p.queue.peek().map(|e| e.0.0), t);
                let _ = std::fmt::Write::write_fmt(
                    &mut b,
                    format_args!(
                        "\n  to {addr}: {} packets ({} octets) held, first due {first}, inline delivery {}",
                        p.queue.len(),
                        p.queued_bytes,
                        p.deliver.is_some(),
                    ),
                );
            }
            b.push_str(&format!("\n  {:?}", h.stats));
            b
        });
        format!(
            "network: held-back bound {}{}",
            if self.holds() { "set" } else { "none" },
            held.as_deref()
                .unwrap_or(": its lock is held (not released in 200 ms)")
        )
    }
}
