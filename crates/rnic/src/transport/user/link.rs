//! What the stack thread needs of a link: send an IPv4 packet, take those that have
//! arrived, say when it next needs attention, and (for a link with a descriptor) what
//! to wait on. [`SimLink`] is a device's port on the in-process [`SimNet`].

use super::simnet::{Arrived, SimNet};
use softrnic_tcp::LinkChecksum;
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
    fn receive(&mut self, now: Duration, f: &mut dyn FnMut(&[u8], LinkChecksum)) -> bool;

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

/// A device's address on a [`SimNet`].
pub(crate) struct SimLink {
    net: SimNet,
    addr: Ipv4Addr,
    /// When the next packet held back by the network (delay, reordering) falls due.
    next: Option<Duration>,
    batch: Vec<Arrived>,
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

    fn receive(&mut self, now: Duration, f: &mut dyn FnMut(&[u8], LinkChecksum)) -> bool {
        self.next = self.net.receive(self.addr, now, &mut self.batch);
        for a in &self.batch {
            // The wire knows what it damaged (checksum offload on a trusted link).
            let check = if a.damaged {
                LinkChecksum::Bad
            } else {
                LinkChecksum::Good
            };
            f(a.packet.octets(), check);
        }
        self.net.recycle(&mut self.batch);
        false
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
