//! Awaiting completion events from Tokio (the `tokio` feature): a [`CompChannel`]'s
//! descriptor registered with the runtime's reactor through `AsyncFd`. The channel
//! keeps its descriptor readable exactly while events are queued, so a task that finds
//! the queue empty clears Tokio's readiness and sleeps until the next event is queued;
//! Tokio's readiness ticks make sure an event queued between the look and the clear
//! still wakes it.

use crate::channel::{CompChannel, CqEvent};
use crate::error::Result;
use tokio::io::unix::AsyncFd;

/// A completion channel to await from Tokio.
pub struct AsyncCompChannel {
    fd: AsyncFd<CompChannel>,
}

impl std::fmt::Debug for AsyncCompChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AsyncCompChannel({:?})", self.fd.get_ref())
    }
}

impl AsyncCompChannel {
    /// Registers `ch` with the current Tokio runtime's reactor (call it from within a
    /// runtime with I/O enabled; outside one it is an error, not a panic).
    pub fn new(ch: CompChannel) -> Result<AsyncCompChannel> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(crate::Error::BadState("no Tokio runtime on this thread"));
        }
        // SAFETY: the descriptor is the channel's eventfd, an `OwnedFd` inside the
        // channel's shared state, which the `CompChannel` moved into the `AsyncFd`
        // keeps alive: it stays open, and is the same descriptor, until the `AsyncFd`
        // (and so its clone of the channel) is dropped. `as_raw_fd` always returns it.
        let fd = unsafe { AsyncFd::register_with_interest(ch, tokio::io::Interest::READABLE) }
            .map_err(std::io::Error::from)?;
        Ok(AsyncCompChannel { fd })
    }

    /// The channel.
    pub fn channel(&self) -> &CompChannel {
        self.fd.get_ref()
    }

    /// The next event (as [`CompChannel::get_event`], without blocking the thread).
    /// Acknowledge it with [`crate::Cq::ack_events`], as any channel event.
    pub async fn get_event(&self) -> Result<CqEvent> {
        loop {
            let mut ready = self.fd.readable().await?;
            if let Some(ev) = self.fd.get_ref().try_get_event()? {
                return Ok(ev);
            }
            ready.clear_ready();
        }
    }
}
