//! A claimed QP's completions do not look at their CQ's arm (`CqShared::push_run`):
//! that is sound only if no consumer is armed on the CQ while the QP is claimed. Two
//! rules make it so: a claim is refused while the CQ is armed, checked again after the
//! claim is stored (`QpShared::claim`), and an arm releases the claims after it
//! (`Cq::req_notify`), with a fence on each side between the store and the load.
//!
//! Checked here under every interleaving of a consumer that arms and polls once more
//! (as every sleeping verbs program does) and another thread's drive that claims the
//! QP and then pushes a completion under the QP's lock: the consumer's poll finds the
//! completion or the arm raises the event. The ring and the arm are the real `CqRing`
//! and `Arm`; the QP lock and its claim are modelled. The last test leaves out the
//! check after the claim and expects loom to find the lost wake-up.
//!
//! Run with:
//! `RUSTFLAGS="--cfg loom" cargo test -p softrnic-rnic --test loom_claim_arm --release`
#![cfg(loom)]

use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering, fence};
use loom::sync::{Arc, Mutex};
use loom::thread;

use softrnic_proto::verbs::{Completion, QpId, WcOpcode, WcStatus};
use softrnic_rnic::cq_notify::{Arm, Armed};
use softrnic_rnic::cq_ring::CqRing;

fn comp() -> Completion {
    Completion {
        wr_id: 7,
        status: WcStatus::Success,
        opcode: WcOpcode::Recv,
        byte_len: 0,
        qp: QpId(1),
        solicited: false,
        invalidated: None,
    }
}

struct Model {
    ring: CqRing,
    arm: Arm,
    /// The QP's lock, holding whether a consumer has claimed it.
    qp: Mutex<bool>,
    /// The lock-free mirror of the claim (`QpShared::claimed`).
    claimed: AtomicBool,
    events: AtomicUsize,
    /// Whether the claim checks the arm again after it is stored.
    recheck: bool,
}

impl Model {
    fn new(recheck: bool) -> Model {
        Model {
            ring: CqRing::new(4).unwrap(),
            arm: Arm::new(),
            qp: Mutex::new(false),
            claimed: AtomicBool::new(false),
            events: AtomicUsize::new(0),
            recheck,
        }
    }

    /// `QpShared::claim` under the QP's lock.
    fn claim(&self) {
        let mut g = self.qp.lock().unwrap();
        if self.arm.armed() != Armed::No {
            return;
        }
        *g = true;
        self.claimed.store(true, Ordering::Release);
        if self.recheck {
            fence(Ordering::SeqCst);
            if self.arm.armed() != Armed::No {
                *g = false;
                self.claimed.store(false, Ordering::Release);
            }
        }
    }

    /// A pass that delivers a completion under the QP's lock (`QpShared::deliver`).
    fn push(&self) {
        let g = self.qp.lock().unwrap();
        let pos = self.ring.push_pos(comp()).unwrap();
        if !*g
            && self
                .arm
                .completion_added(false, || self.ring.claimed_after(pos))
        {
            self.events.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// `QpShared::consumer_sleeps`: a claimed QP goes back to the engine.
    fn release_claim(&self) {
        if !self.claimed.load(Ordering::Acquire) {
            return;
        }
        let mut g = self.qp.lock().unwrap();
        if *g {
            *g = false;
            self.claimed.store(false, Ordering::Release);
        }
    }

    /// `Cq::req_notify`, then the poll after arming; whether that poll found it.
    fn arm_and_poll(&self) -> bool {
        self.release_claim();
        self.arm.arm(false);
        fence(Ordering::SeqCst);
        self.release_claim();
        if self.ring.is_empty() {
            return false;
        }
        let mut rx = self.ring.consumer().unwrap();
        rx.pop().is_some()
    }
}

fn run(recheck: bool) {
    loom::model(move || {
        let m = Arc::new(Model::new(recheck));
        let drive = {
            let m = m.clone();
            thread::spawn(move || {
                m.claim();
                m.push();
            })
        };
        let found = m.arm_and_poll();
        drive.join().unwrap();
        let events = m.events.load(Ordering::Relaxed);
        assert!(events <= 1);
        assert!(found || events == 1, "lost wake-up");
    });
}

#[test]
fn an_arm_and_a_claim_never_lose_a_wake_up() {
    run(true);
}

/// Without the second look at the arm, a claim that read the arm just before the
/// consumer armed (and whose store the consumer's release did not see) hides the arm
/// from the claimed QP's completion.
#[test]
#[should_panic(expected = "lost wake-up")]
fn a_claim_that_does_not_look_again_loses_wake_ups() {
    run(false);
}
