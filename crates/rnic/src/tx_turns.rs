//! Transmit turns: how many of a device's QPs send large messages at once.
//!
//! With 256 QPs streaming 1 MiB Writes over loopback, every QP sending at once keeps
//! 256 sources, 256 targets and up to 256 receive windows of data in flight, far beyond
//! the caches: each side's kernel copy then reads or writes cold memory, and 256 QPs
//! moved 0.80-0.91x one QP's rate (session 13). A hardware RNIC serves a few QPs at a
//! time from its context cache; here at most [`crate::DeviceConfig::tx_turns`] QPs (2
//! by default; 0 turns this off) hold a *turn* to send FPDUs from registered memory. A
//! QP keeps its turn while its socket is full (the reader drains it meanwhile) and
//! gives it up at the end of a message once it has sent
//! [`crate::DeviceConfig::tx_turn_quantum`] octets and another QP waits, or when it has
//! nothing large left to send. Waiting QPs are served first come, first served: each is
//! handed the turn of the QP that gives one up and is driven by its engine (a timer due
//! now), so none starves.
//!
//! A holder whose socket is full after a whole stall period
//! ([`crate::DeviceConfig::tx_turn_stall`]) of others waiting gives its turn up too,
//! mid-message if need be: its peer reads slowly or not at all (a stopped process, an
//! SRQ limit holding the socket back, a hostile peer reading a little now and then),
//! and the QPs behind it must not wait for that peer longer than one period. It asks
//! for a turn again once its socket has room.
//!
//! Small FPDUs (gathered and copied, `TX_GATHER_MAX`) never wait for a turn, nor does
//! a QP whose socket a polling consumer holds (the consumer drives it on every poll,
//! while a turn handed over is announced to the engine).

use crate::device::Shared;
use softrnic_proto::QpId;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

/// QPs of a device that send large messages at once, by default
/// ([`crate::DeviceConfig::tx_turns`]). Two keep the receiver busy while one holder's
/// socket is briefly full. Measured with 256 QPs streaming 1 MiB Writes
/// (ARCHITECTURE.md, "Session 15"): without turns engine progress was bimodal
/// (0.67-0.99x one QP), with two of 16 MiB 0.97-1.04x.
pub(crate) const DEFAULT_TX_TURNS: usize = 2;

/// Octets a QP sends in its turn before a waiting QP goes, by default: 16 Writes of
/// 1 MiB, so each QP's buffers are warm for most of its turn.
pub(crate) const DEFAULT_TX_TURN_QUANTUM: u64 = 16 << 20;

/// A turn holder's slice while other QPs wait: a socket full at its end gives the turn
/// up, by default ([`crate::DeviceConfig::tx_turn_stall`]). A reader that keeps up takes
/// a quantum in a few milliseconds; this catches a peer that reads slowly or not at all.
pub(crate) const TURN_STALL: Duration = Duration::from_millis(10);

/// A QP neither holds nor waits for a turn.
const IDLE: u8 = 0;
/// A QP waits in the queue.
const QUEUED: u8 = 1;
/// A QP holds a turn (taken, or handed over while it waited).
const HELD: u8 = 2;

/// A device's turns and the QPs waiting for one.
#[derive(Debug)]
pub(crate) struct TxTurns {
    /// Turns in all; 0: every QP sends whenever it likes.
    slots: usize,
    /// Octets a QP sends in a turn before it gives it up to a waiting QP.
    quantum: u64,
    /// How long a holder's socket may stay full while others wait ([`TURN_STALL`]).
    stall: Duration,
    state: Mutex<TurnState>,
    /// How many wait (read without the lock on every message boundary).
    waiting: AtomicUsize,
    /// The device, to ask a waiting QP's engine to drive it.
    dev: OnceLock<Weak<Shared>>,
}

#[derive(Debug, Default)]
struct TurnState {
    held: usize,
    /// The QPs holding a turn, with their engines (to have each look at its socket
    /// when a QP starts waiting: see [`Turn::watch_stall`]).
    holders: Vec<(QpId, usize)>,
    queue: VecDeque<Waiter>,
}

#[derive(Debug)]
struct Waiter {
    qp: QpId,
    engine: usize,
    flag: Arc<AtomicU8>,
}

impl TxTurns {
    pub(crate) fn new(slots: usize, quantum: u64, stall: Duration) -> Arc<TxTurns> {
        Arc::new(TxTurns {
            slots,
            quantum,
            stall,
            state: Mutex::new(TurnState::default()),
            waiting: AtomicUsize::new(0),
            dev: OnceLock::new(),
        })
    }

    pub(crate) fn attach(&self, dev: Weak<Shared>) {
        let _ = self.dev.set(dev);
    }

    /// Turns held now and QPs waiting (for tests and reports).
    #[cfg(test)]
    pub(crate) fn counts(&self) -> (usize, usize) {
        self.state
            .lock()
            .map(|s| (s.held, s.queue.len()))
            .unwrap_or_default()
    }

    /// Gives the turn `from` held to the first waiting QP (and has its engine drive
    /// it), or back to the pool.
    fn pass_on(&self, s: &mut TurnState, from: Option<QpId>) {
        if let Some(i) = s.holders.iter().position(|(q, _)| Some(*q) == from) {
            s.holders.swap_remove(i);
        }
        match s.queue.pop_front() {
            Some(w) => {
                self.waiting.store(s.queue.len(), Ordering::Relaxed);
                w.flag.store(HELD, Ordering::Release);
                s.holders.push((w.qp, w.engine));
                self.drive_now(w.qp, w.engine);
            }
            None => s.held -= 1,
        }
    }

    /// Has `engine` drive `qp` as soon as it can.
    fn drive_now(&self, qp: QpId, engine: usize) {
        if let Some(d) = self.dev.get().and_then(Weak::upgrade)
            && let Some(e) = d.engines.get(engine)
        {
            e.arm_timer(crate::engine::now(), qp);
        }
    }
}

/// One QP's place among its device's turns. Dropped with the QP's connection, it gives
/// back a turn it holds and leaves the queue.
#[derive(Debug, Default)]
pub(crate) struct Turn {
    /// Its device's turns, from the first large FPDU on.
    turns: Option<Arc<TxTurns>>,
    /// IDLE, QUEUED or HELD; set to HELD by whoever hands it a turn.
    flag: Arc<AtomicU8>,
    /// Octets sent in the turn held now.
    sent: u64,
    /// While it holds a turn others wait for with its socket full: when its slice
    /// ends (a full socket then gives the turn up).
    stall: Option<Duration>,
    /// The QP and its engine, once it asked for a turn.
    me: Option<QpId>,
}

impl Turn {
    /// Whether the QP may send large FPDUs now: it holds a turn, or one is free and
    /// nobody waits, or turns are off. Otherwise it joins the queue (once) and its
    /// engine drives it when a turn is handed to it.
    pub(crate) fn may_send(&mut self, qp: QpId, engine: usize, dev: &Shared) -> bool {
        if self.turns.is_none() {
            self.turns = Some(dev.tx_turns.clone());
        }
        self.take(qp, engine)
    }

    /// [`Turn::may_send`] once the device's turns are known.
    fn take(&mut self, qp: QpId, engine: usize) -> bool {
        let Some(turns) = &self.turns else {
            return true;
        };
        if turns.slots == 0 {
            return true;
        }
        match self.flag.load(Ordering::Acquire) {
            HELD => return true,
            QUEUED => return false,
            _ => {}
        }
        let Ok(mut s) = turns.state.lock() else {
            return true;
        };
        self.me = Some(qp);
        if s.held < turns.slots && s.queue.is_empty() {
            s.held += 1;
            s.holders.push((qp, engine));
            self.flag.store(HELD, Ordering::Relaxed);
            self.sent = 0;
            return true;
        }
        let first = s.queue.is_empty();
        self.flag.store(QUEUED, Ordering::Relaxed);
        s.queue.push_back(Waiter {
            qp,
            engine,
            flag: self.flag.clone(),
        });
        // Counted before the holders are driven below: a holder's engine may drive it
        // at once, and a look that still read no waiter would start no slice and arm
        // no timer, leaving a holder whose peer reads nothing with the turn for good
        // (seen once in CI: `a_turn_holder_whose_peer_does_not_read_gives_way` timed
        // out). The engine's timer lock orders this store before that look.
        turns.waiting.store(s.queue.len(), Ordering::Relaxed);
        if first {
            // The first to wait: each holder looks at its socket, and its slice starts
            // if the socket is full ([`Turn::watch_stall`]); a holder that is sending
            // keeps being driven by its socket's room anyway.
            for &(q, e) in &s.holders {
                turns.drive_now(q, e);
            }
        }
        false
    }

    /// Whether the QP waits for a turn (its passes that only transmit skip it: its
    /// engine drives it when the turn comes).
    pub(crate) fn is_waiting(&self) -> bool {
        self.flag.load(Ordering::Relaxed) == QUEUED
    }

    /// Counts `n` octets sent in the turn.
    pub(crate) fn sent(&mut self, n: usize) {
        self.sent += n as u64;
    }

    /// Its socket is full: while it holds a turn others wait for, its slice runs. The
    /// first time, the slice ends one stall period
    /// ([`crate::DeviceConfig::tx_turn_stall`]) on; a full socket seen at or after that
    /// gives the turn up (it asks again once its socket has room), whatever it sent
    /// meanwhile: a peer that reads a little in every period must not keep the turn
    /// from the QPs behind it. Returns when to drive the QP for the look, if one is to
    /// be scheduled now.
    pub(crate) fn watch_stall(&mut self, now: impl FnOnce() -> Duration) -> Option<Duration> {
        let turns = self.turns.as_ref()?;
        if turns.waiting.load(Ordering::Relaxed) == 0 || self.flag.load(Ordering::Relaxed) != HELD {
            self.stall = None;
            return None;
        }
        let now = now();
        match self.stall {
            Some(at) if now < at => None,
            Some(_) => {
                self.release();
                None
            }
            None => {
                let at = now + turns.stall;
                self.stall = Some(at);
                Some(at)
            }
        }
    }

    /// The socket is full: [`Turn::watch_stall`], with `engine` asked to drive `qp`
    /// for the next look.
    pub(crate) fn watch(&mut self, qp: QpId, engine: usize, dev: &Shared) {
        if let Some(at) = self.watch_stall(crate::engine::now)
            && let Some(e) = dev.engines.get(engine)
        {
            e.arm_timer(at, qp);
        }
    }

    /// At the end of a message: whether the QP has had its quantum and another waits,
    /// so it should give the turn up (and queue again for the rest).
    pub(crate) fn should_yield(&self) -> bool {
        self.turns.as_ref().is_some_and(|t| {
            self.sent >= t.quantum
                && t.waiting.load(Ordering::Relaxed) > 0
                && self.flag.load(Ordering::Relaxed) == HELD
        })
    }

    /// Gives up a held turn, or leaves the queue.
    pub(crate) fn release(&mut self) {
        let Some(turns) = &self.turns else {
            return;
        };
        if self.flag.load(Ordering::Acquire) == IDLE {
            return;
        }
        let Ok(mut s) = turns.state.lock() else {
            return;
        };
        // Under the lock nobody hands over a turn, so the flag is final here.
        match self.flag.load(Ordering::Acquire) {
            HELD => turns.pass_on(&mut s, self.me),
            QUEUED => {
                s.queue.retain(|w| !Arc::ptr_eq(&w.flag, &self.flag));
                turns.waiting.store(s.queue.len(), Ordering::Relaxed);
            }
            _ => {}
        }
        self.flag.store(IDLE, Ordering::Relaxed);
        self.sent = 0;
        self.stall = None;
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(t: &Turn) -> bool {
        t.flag.load(Ordering::Relaxed) == HELD
    }

    fn turn_of(turns: &Arc<TxTurns>) -> Turn {
        let mut t = Turn::default();
        t.turns = Some(turns.clone());
        t
    }

    fn with_turns(slots: usize, quantum: u64) -> (Arc<TxTurns>, Vec<Turn>) {
        let turns = TxTurns::new(slots, quantum, TURN_STALL);
        let qps = (0..4).map(|_| turn_of(&turns)).collect();
        (turns, qps)
    }

    fn ask(t: &mut Turn, qp: u32) -> bool {
        t.take(QpId(qp), 0)
    }

    #[test]
    fn a_turn_given_up_goes_to_the_first_waiting_qp() {
        let (turns, mut q) = with_turns(2, 1 << 20);
        assert!(ask(&mut q[0], 0));
        assert!(ask(&mut q[1], 1));
        assert!(!ask(&mut q[2], 2));
        assert!(!ask(&mut q[3], 3));
        assert_eq!(turns.counts(), (2, 2));
        q[1].release();
        assert!(held(&q[2]), "the first in the queue is handed the turn");
        assert!(!held(&q[3]));
        assert_eq!(turns.counts(), (2, 1));
        // A waiting QP that goes away leaves the queue; a holder that goes away passes
        // its turn on.
        drop(q.pop());
        assert_eq!(turns.counts(), (2, 0));
        q[0].release();
        q[2].release();
        assert_eq!(turns.counts(), (0, 0));
    }

    #[test]
    fn a_qp_yields_only_after_its_quantum_and_only_to_a_waiting_qp() {
        let (_turns, mut q) = with_turns(1, 1000);
        assert!(ask(&mut q[0], 0));
        q[0].sent(5000);
        assert!(!q[0].should_yield(), "nobody waits");
        assert!(!ask(&mut q[1], 1));
        assert!(q[0].should_yield());
        q[0].release();
        assert!(held(&q[1]));
        assert!(!q[1].should_yield(), "a new turn starts with nothing sent");
    }

    #[test]
    fn a_holder_whose_socket_is_full_when_its_slice_ends_gives_way_only_if_others_wait() {
        let (turns, mut q) = with_turns(1, 1 << 30);
        let t0 = Duration::from_secs(1);
        assert!(ask(&mut q[0], 0));
        assert_eq!(q[0].watch_stall(|| t0), None, "nobody waits");
        assert!(!ask(&mut q[1], 1));
        let at = q[0].watch_stall(|| t0).expect("a look is scheduled");
        assert_eq!(at, t0 + TURN_STALL);
        assert_eq!(q[0].watch_stall(|| at - Duration::from_nanos(1)), None);
        assert!(held(&q[0]), "not yet due");
        // Its peer read a little in the period (octets went), but the socket is full
        // again when the slice ends: a slow reader does not keep the turn either.
        q[0].sent(100);
        assert_eq!(q[0].watch_stall(|| at), None);
        assert!(!held(&q[0]) && held(&q[1]));
        assert_eq!(turns.counts(), (1, 0));
        // The new holder's slice starts when its own socket first fills.
        assert!(!ask(&mut q[0], 0));
        assert_eq!(q[1].watch_stall(|| at), Some(at + TURN_STALL));
    }

    #[test]
    fn without_slots_every_qp_may_send() {
        let (turns, _) = with_turns(0, 1000);
        let mut q: Vec<Turn> = (0..300).map(|_| turn_of(&turns)).collect();
        for (i, t) in q.iter_mut().enumerate() {
            assert!(ask(t, i as u32));
            assert!(!t.is_waiting());
        }
        assert_eq!(turns.counts(), (0, 0), "nothing is counted or queued");
    }
}
