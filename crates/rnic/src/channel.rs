//! Completion events and the completion channel.
//!
//! An armed CQ raises one [`CqEvent`] when a matching completion is added (see
//! [`crate::cq_notify`]). The event goes to the handler the CQ is bound to: a callback
//! run by a dispatcher thread (`handler.rs`), or a [`CompChannel`], which a program
//! waits on itself, as on an `ibv_comp_channel`: its file descriptor is readable
//! exactly while it holds events, so it fits into the program's own epoll/poll loop
//! (or Tokio's `AsyncFd`, see the `tokio` feature).
//!
//! Events are counted per CQ ([`crate::Cq::event_counts`]): raised, delivered (handed
//! to the program), acknowledged. A program acknowledges events it took from a channel
//! in batches ([`crate::Cq::ack_events`]), as with `ibv_ack_cq_events`; events given to
//! a callback are acknowledged when it returns.

use crate::cq::Cq;
use crate::error::Result;
use crate::sys::eventfd::EventFd;
use std::collections::VecDeque;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One completion event: an armed CQ got a matching completion.
#[derive(Clone)]
pub struct CqEvent {
    pub(crate) cq: Cq,
    pub(crate) raised_at: Instant,
}

impl std::fmt::Debug for CqEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CqEvent(cq {})", self.cq.id())
    }
}

impl CqEvent {
    /// The CQ that raised it. Poll it, then re-arm it and poll again.
    pub fn cq(&self) -> &Cq {
        &self.cq
    }

    /// When it was raised: the instant the completion that triggered it was written
    /// into the CQ (so `raised_at().elapsed()` in a handler is its wake-up latency).
    pub fn raised_at(&self) -> Instant {
        self.raised_at
    }
}

struct ChannelInner {
    /// Events not yet taken, oldest first. The eventfd is readable exactly while this
    /// is non-empty: both change under this lock.
    queue: Mutex<VecDeque<CqEvent>>,
    efd: EventFd,
}

/// A completion channel (`ibv_comp_channel`): register it as a handler
/// ([`crate::Handler::channel`]); the events of the CQs bound to that handler queue
/// here, and its file descriptor is readable while any is queued.
#[derive(Clone)]
pub struct CompChannel {
    inner: Arc<ChannelInner>,
}

impl std::fmt::Debug for CompChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CompChannel(fd {})", self.inner.efd.as_fd().as_raw_fd())
    }
}

impl CompChannel {
    /// A new, empty channel.
    pub fn new() -> Result<CompChannel> {
        Ok(CompChannel {
            inner: Arc::new(ChannelInner {
                queue: Mutex::new(VecDeque::new()),
                efd: EventFd::new()?,
            }),
        })
    }

    /// The oldest queued event, without waiting (`ibv_get_cq_event` on a non-blocking
    /// channel). The program acknowledges it later with [`Cq::ack_events`].
    pub fn try_get_event(&self) -> Result<Option<CqEvent>> {
        let mut q = self.inner.queue.lock()?;
        let Some(ev) = q.pop_front() else {
            return Ok(None);
        };
        if q.is_empty() {
            self.inner.efd.clear()?;
        }
        drop(q);
        ev.cq.shared.event_delivered();
        Ok(Some(ev))
    }

    /// Waits up to `timeout` (`None`: for ever) for an event (`ibv_get_cq_event`).
    pub fn get_event(&self, timeout: Option<Duration>) -> Result<Option<CqEvent>> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            if let Some(ev) = self.try_get_event()? {
                return Ok(Some(ev));
            }
            let left = match deadline {
                None => None,
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => return Ok(None),
                },
            };
            self.inner.efd.wait_readable(left)?;
        }
    }

    /// Events queued and not yet taken.
    pub fn pending(&self) -> usize {
        self.inner.queue.lock().map_or(0, |q| q.len())
    }

    /// Whether `self` and `other` are the same channel.
    pub fn same_as(&self, other: &CompChannel) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    pub(crate) fn push(&self, ev: CqEvent) {
        if let Ok(mut q) = self.inner.queue.lock() {
            if q.is_empty() {
                // If this fails the fd stays unreadable, but the event is queued and
                // `get_event` finds it on its next look.
                let _ = self.inner.efd.set();
            }
            q.push_back(ev);
        }
    }

    /// Takes out the queued events `pick` accepts (a CQ moving to another handler).
    pub(crate) fn take_where(&self, pick: impl Fn(&CqEvent) -> bool) -> Vec<CqEvent> {
        let Ok(mut q) = self.inner.queue.lock() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        q.retain(|e| {
            if pick(e) {
                out.push(e.clone());
                false
            } else {
                true
            }
        });
        if q.is_empty() {
            let _ = self.inner.efd.clear();
        }
        out
    }
}

impl AsFd for CompChannel {
    /// Readable while events are queued (level-triggered: it stays readable until the
    /// last event is taken).
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.efd.as_fd()
    }
}

impl AsRawFd for CompChannel {
    fn as_raw_fd(&self) -> RawFd {
        self.inner.efd.as_fd().as_raw_fd()
    }
}
