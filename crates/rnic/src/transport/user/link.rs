//! What the stack thread needs of a link: send an IPv4 packet, take those that have
//! arrived, say when it next needs attention, and (for a link with a descriptor) what
//! to wait on. [`SimLink`] is a device's port on the in-process [`SimNet`].

use super::simnet::{Arrived, Packet, SimNet};
use softrnic_tcp::{Lent, LinkChecksum};
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Duration;

/// A packet link under a device's own TCP. Times are on the engines' clock
/// (`engine::now`).
pub(crate) trait Link: Send {
    /// The largest IPv4 packet the link carries.
    fn mtu(&self) -> usize;

    /// Sends one IPv4 packet (the link may drop it, as any network may).
    fn send(&mut self, now: Duration, packet: &[u8]);

    /// Sends the packet `fill` writes into a buffer (of the MTU) and returns its
    /// length; false when `fill` had none. A link whose packets travel in buffers of
    /// their own has `fill` write straight into one; others use `scratch`.
    fn send_with(
        &mut self,
        now: Duration,
        scratch: &mut [u8],
        fill: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> bool {
        match fill(scratch) {
            Some(n) => {
                self.send(now, &scratch[..n]);
                true
            }
            None => false,
        }
    }

    /// Hands the packets that have arrived by `now` to `f`, with what the link knows of
    /// their checksums, a bounded batch; true when more may be waiting (call again
    /// after other due work).
    fn receive(&mut self, now: Duration, f: &mut Receive<'_>) -> bool;

    /// Whether packets may carry their payload by reference ([`Link::send_lent`]).
    fn lends(&self) -> bool {
        false
    }

    /// [`Link::send_with`] for a `fill` that may write only the headers and lend the
    /// payload ([`softrnic_tcp::Stack::poll_transmit_for_lent`]); a link that does not
    /// carry payloads by reference copies it behind the headers.
    fn send_lent(&mut self, now: Duration, scratch: &mut [u8], fill: &mut FillLent<'_>) -> bool {
        self.send_with(now, scratch, &mut |out| {
            let (n, lent) = fill(out)?;
            let Some(l) = lent else {
                return Some(n);
            };
            let body = l.octets();
            out.get_mut(n..n + body.len())?.copy_from_slice(body);
            Some(n + body.len())
        })
    }

    /// Takes back packet buffers that [`Link::receive`] handed over and the stack kept
    /// until they were read, for reuse.
    fn recycle(&mut self, bufs: &mut Vec<Vec<u8>>) {
        bufs.clear();
    }

    /// When the link needs [`Link::receive`] or [`Link::handle_timeout`] again by
    /// itself (a delayed packet falls due, a neighbour resolution times out).
    fn poll_timeout(&self) -> Option<Duration>;

    /// Time has reached `now`.
    fn handle_timeout(&mut self, now: Duration) {
        let _ = now;
    }

    /// A descriptor that is readable when packets wait, for the stack thread's poll;
    /// `None` for a link that wakes the stack thread itself.
    fn fd(&self) -> Option<RawFd> {
        None
    }

    /// The device is closing: leave the link (others stop reaching this address).
    fn detach(&mut self);

    /// What is waiting on the link, in one line, for tracing a stall.
    fn backlog(&self, now: Duration) -> String {
        let _ = now;
        String::new()
    }
}

/// A packet as a link hands it to the stack.
pub(crate) enum Incoming<'a> {
    /// Octets the link keeps.
    Slice(&'a [u8]),
    /// A buffer whose first `len` octets are the packet, which the stack may keep
    /// (zero-copy receive) and give back later with [`Link::recycle`].
    Buffer(Vec<u8>, usize),
    /// A buffer whose first `len` octets are the headers, and the payload, carried by
    /// reference (a share of the sender's send buffer); the buffer comes back at once.
    Split(Vec<u8>, usize, Lent),
}

/// What takes arriving packets: returns a [`Incoming::Buffer`]'s buffer unless it keeps
/// it.
pub(crate) type Receive<'a> = dyn FnMut(Incoming<'_>, LinkChecksum) -> Option<Vec<u8>> + 'a;

/// Writes a packet's headers (and its payload, unless lent) into the buffer it is
/// given: its length written and the lent payload, or `None` when nothing is due.
pub(crate) type FillLent<'a> = dyn FnMut(&mut [u8]) -> Option<(usize, Option<Lent>)> + 'a;

/// A device's address on a [`SimNet`].
pub(crate) struct SimLink {
    net: SimNet,
    addr: Ipv4Addr,
    /// When the next packet held back by the network (delay, reordering) falls due.
    next: Option<Duration>,
    batch: Vec<Arrived>,
    /// Buffers to give back to the network.
    done: Vec<Vec<u8>>,
    /// The network's packet buffers this sender holds, to write packets into.
    spare: Vec<Vec<u8>>,
    attached: bool,
}

/// Buffers a sender takes from the network at once (one lock for several packets).
const TAKE: usize = 16;

impl SimLink {
    /// Takes `addr` on `net`; `wake` runs (in the sender's thread) whenever a packet
    /// for it is queued.
    pub(crate) fn attach(
        net: &SimNet,
        addr: Ipv4Addr,
        wake: Arc<dyn Fn() + Send + Sync>,
    ) -> io::Result<SimLink> {
        net.attach(addr, wake)?;
        Ok(SimLink {
            net: net.clone(),
            addr,
            next: None,
            batch: Vec::new(),
            done: Vec::new(),
            spare: Vec::new(),
            attached: true,
        })
    }
}

impl Link for SimLink {
    fn mtu(&self) -> usize {
        self.net.mtu()
    }

    fn send(&mut self, now: Duration, packet: &[u8]) {
        self.send_with(now, &mut [], &mut |buf| {
            let n = packet.len().min(buf.len());
            buf[..n].copy_from_slice(&packet[..n]);
            Some(packet.len())
        });
    }

    /// `fill` writes straight into one of the network's packet buffers, which then
    /// travels to the receiver: the octets are not copied on the wire.
    fn send_with(
        &mut self,
        now: Duration,
        _scratch: &mut [u8],
        fill: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> bool {
        if self.spare.is_empty() {
            self.net.take_buffers(TAKE, &mut self.spare);
        }
        let Some(mut buf) = self.spare.pop() else {
            return false;
        };
        match fill(&mut buf) {
            Some(n) => {
                self.net.send_owned(buf, n, now);
                true
            }
            None => {
                self.spare.push(buf);
                false
            }
        }
    }

    /// Hands each packet's buffer over: the stack may keep it until the payload is
    /// read (then it comes back through [`Link::recycle`]).
    fn receive(&mut self, now: Duration, f: &mut Receive<'_>) -> bool {
        self.next = self.net.receive(self.addr, now, &mut self.batch);
        for a in self.batch.drain(..) {
            // The wire knows what it damaged (checksum offload on a trusted link).
            let check = if a.damaged {
                LinkChecksum::Bad
            } else {
                LinkChecksum::Good
            };
            let Packet { buf, len, body } = a.packet;
            let incoming = match body {
                Some(b) => Incoming::Split(buf, len, b),
                None => Incoming::Buffer(buf, len),
            };
            if let Some(back) = f(incoming, check) {
                self.done.push(back);
            }
        }
        self.net.recycle(&mut self.done);
        false
    }

    fn recycle(&mut self, bufs: &mut Vec<Vec<u8>>) {
        self.net.recycle(bufs);
    }

    fn lends(&self) -> bool {
        true
    }

    /// The payload travels by reference beside the headers written into one of the
    /// network's buffers: the send buffer's octets are not copied.
    fn send_lent(&mut self, now: Duration, _scratch: &mut [u8], fill: &mut FillLent<'_>) -> bool {
        if self.spare.is_empty() {
            self.net.take_buffers(TAKE, &mut self.spare);
        }
        let Some(mut buf) = self.spare.pop() else {
            return false;
        };
        match fill(&mut buf) {
            Some((n, body)) => {
                self.net.send_packet(buf, n, body, now);
                true
            }
            None => {
                self.spare.push(buf);
                false
            }
        }
    }

    fn poll_timeout(&self) -> Option<Duration> {
        self.next
    }

    fn backlog(&self, now: Duration) -> String {
        let mut s = String::new();
        for (addr, n, oldest) in self.net.backlog(now) {
            s.push_str(&format!("{addr}: {n} waiting, oldest {oldest:?}; "));
        }
        s
    }

    fn detach(&mut self) {
        if std::mem::take(&mut self.attached) {
            self.net.detach(self.addr);
        }
    }
}

impl Drop for SimLink {
    fn drop(&mut self) {
        self.detach();
    }
}
