//! Closing the connection under a QP, as state and actions: the QP decides when to send
//! FIN, when to close both directions, when to reset and when the connection is over;
//! the I/O layer carries the actions out on its transport ([`CloseAction`]).
//!
//! The cases: a graceful close (ours or the peer's FIN first: queued sends go out, then
//! FIN, and the connection is over once both FINs have crossed); the close after our
//! Terminate is out; a QP in error (closed once nothing is left to send, so the peer
//! learns at once instead of waiting on a silent connection); a lost stream. A close that
//! cannot finish (the peer never sends its FIN, or never takes the queued octets) ends
//! when the close timer expires: the connection is reset. Time is a parameter (a
//! [`Duration`] since any fixed origin the I/O layer chooses), so tests drive the timer
//! without waiting.

use crate::verbs::QpState;
use std::time::Duration;

/// What the I/O layer must do to the transport next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseAction {
    /// Send FIN (shut down the write side) after what is queued.
    Fin,
    /// Shut down both directions: our Terminate is out, the connection ends here.
    Shutdown,
    /// The connection is over: shut it down both ways and stop serving it; report that
    /// the QP is disconnected.
    Disconnect,
    /// The close timer expired: reset the connection (RST), stop serving it, and report
    /// that the QP is disconnected.
    Reset,
}

/// What the close machine knows of the rest of the QP when it decides.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Facts {
    pub state: QpState,
    /// Our Terminate has been handed to the transport.
    pub terminate_sent: bool,
    /// Graceful close and nothing left in the send queue.
    pub ready_to_fin: bool,
    /// The transport has written everything it was handed.
    pub flushed: bool,
    pub now: Duration,
}

/// What the QP must do before asking again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Nothing now.
    Wait,
    /// The peer closed while we were running: start our graceful close.
    BeginClose,
    /// The connection is (being) closed: the QP goes to Error and flushes.
    ToError,
    /// Carry this out; the QP also goes to Error if `to_error`.
    Act { action: CloseAction, to_error: bool },
}

/// How far closing has gone.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Closer {
    fin_sent: bool,
    /// The peer's FIN came in.
    eof: bool,
    /// The transport is closed (or failed): no more reads or writes.
    closed: bool,
    /// The I/O layer has been told the connection is over.
    disconnected: bool,
    /// When closing began (the first decision after it did), for the close timer.
    since: Option<Duration>,
    /// The close timer expired.
    expired: bool,
}

impl Closer {
    pub(crate) fn peer_fin(&mut self) {
        self.eof = true;
    }

    pub(crate) fn peer_finished(&self) -> bool {
        self.eof
    }

    /// The stream failed: nothing more can be read or written.
    pub(crate) fn lost(&mut self) {
        self.closed = true;
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed
    }

    /// The I/O layer dropped the connection itself (an abortive close): returns whether
    /// the QP was still connected, that is, whether to report the disconnection.
    pub(crate) fn abandon(&mut self) -> bool {
        self.closed = true;
        !std::mem::replace(&mut self.disconnected, true)
    }

    /// When the close timer expires, if it runs.
    pub(crate) fn deadline(&self, timeout: Duration) -> Option<Duration> {
        match (self.since, self.disconnected) {
            (Some(t), false) => Some(t.saturating_add(timeout)),
            _ => None,
        }
    }

    pub(crate) fn handle_timeout(&mut self, now: Duration, timeout: Duration) {
        if self.deadline(timeout).is_some_and(|d| now >= d) {
            self.expired = true;
        }
    }

    /// Whether [`Closer::next`] can return anything but [`Next::Wait`] (and whether it
    /// reads `now`): only once the QP is closing in some way.
    pub(crate) fn may_act(&self, in_rts: bool, terminate_sent: bool) -> bool {
        !self.disconnected && (!in_rts || self.eof || self.closed || terminate_sent)
    }

    /// The next step the QP's state allows.
    pub(crate) fn next(&mut self, f: Facts) -> Next {
        if self.disconnected {
            return Next::Wait;
        }
        let closing = f.state != QpState::Rts || self.eof || self.closed;
        if closing && self.since.is_none() {
            self.since = Some(f.now);
        }
        if self.expired {
            self.closed = true;
            self.disconnected = true;
            return Next::Act {
                action: CloseAction::Reset,
                to_error: true,
            };
        }
        if f.terminate_sent && !self.closed && f.flushed {
            self.closed = true;
            return Next::Act {
                action: CloseAction::Shutdown,
                to_error: true,
            };
        }
        if self.eof && f.state == QpState::Rts {
            return Next::BeginClose;
        }
        if f.ready_to_fin && !self.fin_sent && f.flushed {
            self.fin_sent = true;
            return Next::Act {
                action: CloseAction::Fin,
                to_error: false,
            };
        }
        let done = self.closed || (self.eof && (self.fin_sent || f.state != QpState::Closing));
        if done && f.state != QpState::Error {
            return Next::ToError;
        }
        if self.closed || (self.eof && self.fin_sent) || (f.state == QpState::Error && f.flushed) {
            self.closed = true;
            self.disconnected = true;
            return Next::Act {
                action: CloseAction::Disconnect,
                to_error: false,
            };
        }
        Next::Wait
    }
}
