//! The consumer's quiet mark (`QpInner::quiet_claimed`): twin pairs driven alike over
//! seeded mixes of everything that must clear it (Sends, Writes, Reads in both
//! directions, the receiver's own posts between its polls, a second QP joining its CQ
//! and leaving, an arm that releases the claim, then a close or a peer's Terminate),
//! one twin whose drives go straight to the read while the mark holds, the other with
//! the mark never set (every drive general): the same completions in the same order
//! on both ends, the same octets. A second consumer thread polling the same CQ while
//! the mark is in use gets each completion exactly once, its share in order.

use crate::handoff::CLAIM_AFTER;
use crate::twin_support::{self, Log, SEND, SLOT, SLOTS, octets, post_recv_slot, splitmix};
use crate::{
    Access, Completion, Cq, Device, DeviceConfig, Mr, Pd, Qp, QpInit, QpState, RecvWr, SendOp,
    SendWr, WcOpcode, WcStatus,
};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Spins without the awaited completions after which a test fails (a count, no clock;
/// far more than any step here takes, far fewer than a close left to the engine's close
/// timer).
const SPINS: u64 = 2_000_000;
/// Large Writes posted in a row while the peer does not read: more than the socket
/// takes, so the posts leave octets queued that only a general drive sends.
const BULK: usize = 256 << 10;
const BULK_WRITES: u64 = 48;
/// Spins the bulk may take: this thread polls both ends and the kernel's loopback moves
/// the octets at once, so it takes under 100; a drive that skips the queued octets
/// leaves them until something else on the QP takes its lock, hundreds of thousands of
/// spins later.
const BULK_SPINS: u64 = 100_000;

struct End {
    dev: Device,
    pd: Pd,
    cq: Cq,
    qp: Qp,
    /// Receive slots, then a target for Writes and a source for Reads.
    mr: Mr,
}

impl End {
    fn new(marked: bool) -> End {
        let dev = Device::open(DeviceConfig::default()).unwrap();
        let pd = dev.alloc_pd();
        let cq = dev.create_cq(256).unwrap();
        let qp = dev
            .create_qp(&pd, QpInit::with_cqs(&cq, &cq, 64, 64))
            .unwrap();
        unmark_if(&qp, marked);
        let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
        let mr = pd.alloc_mr(2 * SLOTS * SLOT + BULK, access).unwrap();
        End {
            dev,
            pd,
            cq,
            qp,
            mr,
        }
    }

    fn poll(&self, log: &mut Log) {
        let mut out = [Completion::default(); 2];
        let n = self.cq.poll(&mut out);
        log.extend(
            out[..n]
                .iter()
                .map(|c| (c.wr_id, c.opcode, c.status, c.byte_len)),
        );
    }

    /// Drives that went straight to the read so far (read under the QP's lock taken
    /// directly, which leaves the mark as it is).
    fn marked_drives(&self) -> u64 {
        self.qp.shared.inner.lock().unwrap().test_marked_drives
    }
}

/// The general twin: its QP's drives never set the mark.
fn unmark_if(qp: &Qp, marked: bool) {
    qp.shared.lock().unwrap().test_no_quiet_mark = !marked;
}

fn connect(a: &End, b: &End) {
    twin_support::connect(&a.dev, &a.qp, &b.dev, &b.qp);
}

/// Polls both ends until each has logged `na` and `nb` completions.
fn spin(a: &End, b: &End, na: usize, nb: usize, la: &mut Log, lb: &mut Log) {
    spin_at_most(SPINS, a, b, na, nb, la, lb);
}

/// [`spin`], failing after `bound` spins.
fn spin_at_most(bound: u64, a: &End, b: &End, na: usize, nb: usize, la: &mut Log, lb: &mut Log) {
    let mut spins = 0u64;
    while la.len() < na || lb.len() < nb {
        a.poll(la);
        b.poll(lb);
        spins += 1;
        assert!(spins < bound, "{} of {na}, {} of {nb}", la.len(), lb.len());
    }
}

/// The receiver posts [`BULK_WRITES`] Writes of [`BULK`] octets while the initiator
/// does not poll (its socket is the claimed consumer's: nobody reads it), after its own
/// polls have gone straight to the read (when the twin sets the mark): the posts must
/// clear the mark, or the receiver's drives never send what they queued.
fn bulk(a: &End, b: &End, seed: u64, marked: bool, la: &mut Log, lb: &mut Log) {
    let at = 2 * SLOTS * SLOT;
    let fill: Vec<u8> = (0..BULK).map(|i| (i * 7 + seed as usize) as u8).collect();
    b.mr.write(at, &fill).unwrap();
    let seen = b.marked_drives();
    let mut spins = 0u64;
    while marked && b.marked_drives() == seen {
        b.poll(lb);
        spins += 1;
        assert!(spins < SPINS, "no drive went straight to the read");
    }
    let (na, nb) = (la.len(), lb.len());
    for w in 0..BULK_WRITES {
        let op = SendOp::Write {
            remote_addr: a.mr.addr() + at as u64,
            rkey: a.mr.rkey(),
        };
        b.qp.post_send(SendWr::new(5000 + w, op, b.mr.sge(at, BULK)))
            .unwrap();
    }
    spin_at_most(BULK_SPINS, a, b, na, nb + BULK_WRITES as usize, la, lb);
}

/// How a twin's run ends.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Ending {
    /// The initiator disconnects: both ends' receives are flushed.
    Close,
    /// The receiver writes with a bad key: the initiator answers with a Terminate,
    /// which the receiver's claimed drive reads.
    Terminate,
}

struct Outcome {
    a: Log,
    b: Log,
    a_mem: Vec<u8>,
    b_mem: Vec<u8>,
    /// Drives that went straight to the read, at the initiator and the receiver.
    marked: (u64, u64),
}

fn twin(seed: u64, marked: bool, ending: Ending) -> Outcome {
    const ROUNDS: u64 = 240;
    let (a, b) = (End::new(marked), End::new(marked));
    connect(&a, &b);
    let (mut la, mut lb) = (Log::new(), Log::new());
    let mut next = [0u64; 2];
    let post_recv = |e: &End, side: usize, next: &mut [u64; 2]| {
        post_recv_slot(&e.qp, &e.mr, &mut next[side]);
    };
    for _ in 0..SLOTS {
        post_recv(&a, 0, &mut next);
        post_recv(&b, 1, &mut next);
    }
    // Both consumers poll until they hold their sockets (and set the mark).
    for _ in 0..2 * CLAIM_AFTER {
        a.poll(&mut la);
        b.poll(&mut lb);
    }
    let mut extra = None;
    let far = (SLOTS * SLOT) as u64;
    for round in 0..ROUNDS {
        if round == ROUNDS / 2 {
            let q = b
                .dev
                .create_qp(&b.pd, QpInit::with_cqs(&b.cq, &b.cq, 4, 4))
                .unwrap();
            unmark_if(&q, marked);
            extra = Some(q);
        }
        if round == 3 * ROUNDS / 4 {
            extra = None;
        }
        if round == ROUNDS / 3 {
            bulk(&a, &b, seed, marked, &mut la, &mut lb);
        }
        let r = splitmix(seed ^ round);
        let len = 1 + (r >> 8) as usize % 40;
        let at = (r >> 16) % (far - 64);
        // Writes land where nothing else writes (a sender's Write completes before the
        // target places it): above the sources and the Read sinks.
        let written = far + 1024 + at % (far - 1024 - 64);
        let data: Vec<u8> = (0..len).map(|i| (r >> (i % 8)) as u8 ^ i as u8).collect();
        a.mr.write(far as usize + 64, &data).unwrap();
        b.mr.write(far as usize + 900, &data).unwrap();
        let a_src = a.mr.sge(far as usize + 64, len);
        let b_src = b.mr.sge(far as usize + 900, len);
        let (na, nb) = (la.len(), lb.len());
        match r % 7 {
            0 => {
                a.qp.post_send(SendWr::new(round, SEND, a_src)).unwrap();
                spin(&a, &b, na + 1, nb + 1, &mut la, &mut lb);
                post_recv(&b, 1, &mut next);
            }
            1 => {
                let op = SendOp::Write {
                    remote_addr: b.mr.addr() + written,
                    rkey: b.mr.rkey(),
                };
                a.qp.post_send(SendWr::new(round, op, a_src)).unwrap();
                spin(&a, &b, na + 1, nb, &mut la, &mut lb);
            }
            2 => {
                let op = SendOp::Read {
                    remote_addr: b.mr.addr() + far + at,
                    rkey: b.mr.rkey(),
                };
                let sink = a.mr.sge(far as usize + 128 + (at as usize % 512), len);
                a.qp.post_send(SendWr::new(round, op, sink)).unwrap();
                spin(&a, &b, na + 1, nb, &mut la, &mut lb);
            }
            3 => {
                // A Read the other way: the receiver asks, the initiator answers.
                let op = SendOp::Read {
                    remote_addr: a.mr.addr() + far + at,
                    rkey: a.mr.rkey(),
                };
                let sink = b.mr.sge(far as usize + 128 + (at as usize % 512), len);
                b.qp.post_send(SendWr::new(2000 + round, op, sink)).unwrap();
                spin(&a, &b, na, nb + 1, &mut la, &mut lb);
            }
            4 => {
                // The receiver posts between its polls, then the initiator's Send.
                b.qp.post_send(SendWr::new(1000 + round, SEND, b_src))
                    .unwrap();
                a.qp.post_send(SendWr::new(round, SEND, a_src)).unwrap();
                spin(&a, &b, na + 2, nb + 2, &mut la, &mut lb);
                post_recv(&a, 0, &mut next);
                post_recv(&b, 1, &mut next);
            }
            5 => {
                // The receiver arms its CQ (the claim goes back to the engine), and
                // the next completion raises the event: its polls claim again later.
                b.cq.req_notify(false);
                a.qp.post_send(SendWr::new(round, SEND, a_src)).unwrap();
                spin(&a, &b, na + 1, nb + 1, &mut la, &mut lb);
                post_recv(&b, 1, &mut next);
            }
            _ => {
                // A Write the other way.
                let op = SendOp::Write {
                    remote_addr: a.mr.addr() + written,
                    rkey: a.mr.rkey(),
                };
                b.qp.post_send(SendWr::new(3000 + round, op, b_src))
                    .unwrap();
                spin(&a, &b, na, nb + 1, &mut la, &mut lb);
            }
        }
    }
    assert_eq!(b.qp.state(), QpState::Rts);
    // The ending's post or close comes while both ends' marks hold (when the twin
    // sets them): it must clear them, or the drives skip the close.
    let seen = (a.marked_drives(), b.marked_drives());
    let mut spins = 0u64;
    while marked && (a.marked_drives() == seen.0 || b.marked_drives() == seen.1) {
        a.poll(&mut la);
        b.poll(&mut lb);
        spins += 1;
        assert!(spins < SPINS, "no drive went straight to the read");
    }
    let (na, nb) = (la.len() + SLOTS, lb.len() + SLOTS);
    let nb = match ending {
        Ending::Close => {
            a.qp.disconnect().unwrap();
            nb
        }
        Ending::Terminate => {
            let op = SendOp::Write {
                remote_addr: a.mr.addr(),
                rkey: a.mr.rkey() ^ 0x5a5a_0000,
            };
            b.qp.post_send(SendWr::new(9999, op, b.mr.sge(0, 8)))
                .unwrap();
            nb + 1
        }
    };
    spin(&a, &b, na, nb, &mut la, &mut lb);
    drop(extra);
    Outcome {
        a: la,
        b: lb,
        a_mem: octets(&a.mr),
        b_mem: octets(&b.mr),
        marked: (a.marked_drives(), b.marked_drives()),
    }
}

/// A log split by queue: the send queue's completions, then the receive queue's, each
/// in its order (a QP orders each queue's completions, not the two queues' together).
fn by_queue(l: &Log) -> (Log, Log) {
    l.iter().partition(|c| c.1 != WcOpcode::Recv)
}

fn compare(ending: Ending) {
    for seed in [3u64, 11, 42] {
        let quick = twin(seed, true, ending);
        let general = twin(seed, false, ending);
        assert_eq!(
            by_queue(&quick.b),
            by_queue(&general.b),
            "seed {seed}: the receiver's completions"
        );
        assert_eq!(
            by_queue(&quick.a),
            by_queue(&general.a),
            "seed {seed}: the initiator's"
        );
        assert!(
            quick.a_mem == general.a_mem,
            "seed {seed}: octets at the initiator"
        );
        assert!(
            quick.b_mem == general.b_mem,
            "seed {seed}: octets at the receiver"
        );
        assert_eq!(general.marked, (0, 0), "seed {seed}");
        assert!(
            quick.marked.0 > 0 && quick.marked.1 > 0,
            "seed {seed}: drives straight to the read {:?}",
            quick.marked
        );
        let errors = |l: &Log| l.iter().filter(|c| c.2 != WcStatus::Success).count();
        assert!(
            errors(&quick.b) >= SLOTS,
            "seed {seed}: the receiver's flushes"
        );
        assert!(
            errors(&quick.a) >= SLOTS,
            "seed {seed}: the initiator's flushes"
        );
    }
}

#[test]
fn drives_straight_to_the_read_end_as_the_general_ones_through_a_close() {
    compare(Ending::Close);
}

#[test]
fn drives_straight_to_the_read_end_as_the_general_ones_through_a_terminate() {
    compare(Ending::Terminate);
}

/// Two threads poll the receiver's one CQ while Sends and Writes arrive, the mark in
/// use: each receive completes exactly once, each thread's share in order.
#[test]
fn a_second_consumer_with_the_mark_gets_no_completion_twice() {
    let (a, b) = (End::new(true), End::new(true));
    connect(&a, &b);
    for s in 0..SLOTS as u64 {
        let at = (s as usize % SLOTS) * SLOT;
        b.qp.post_recv(RecvWr::new(s, b.mr.sge(at, SLOT))).unwrap();
    }
    let mut warm = Log::new();
    for _ in 0..2 * CLAIM_AFTER {
        b.poll(&mut warm);
    }
    let before = b.marked_drives();
    let got = AtomicUsize::new(0);
    let take = || {
        let mut mine = Vec::new();
        let mut out = [Completion::default(); 2];
        let mut spins = 0u64;
        while got.load(Ordering::Acquire) < SLOTS {
            let n = b.cq.poll(&mut out);
            got.fetch_add(n, Ordering::AcqRel);
            mine.extend(out[..n].iter().map(|c| c.wr_id));
            spins += 1;
            assert!(spins < SPINS, "{} of {SLOTS}", got.load(Ordering::Acquire));
        }
        mine
    };
    let far = (SLOTS * SLOT) as u64;
    let (one, two) = std::thread::scope(|s| {
        let one = s.spawn(take);
        let two = s.spawn(take);
        for w in 0..SLOTS as u64 {
            // Each message lands while the mark holds: the pollers have gone straight
            // to the read at least once since the last one.
            let seen = b.marked_drives();
            let mut spins = 0u64;
            while b.marked_drives() == seen {
                // The count is read under the QP's lock: leave the pollers the lock and
                // the CPU between looks.
                std::thread::yield_now();
                spins += 1;
                assert!(spins < SPINS, "no drive went straight to the read");
            }
            let op = SendOp::Write {
                remote_addr: b.mr.addr() + far + w,
                rkey: b.mr.rkey(),
            };
            a.qp.post_send(SendWr::new(100 + w, op, a.mr.sge(0, 8)))
                .unwrap();
            a.qp.post_send(SendWr::new(w, SEND, a.mr.sge(0, 8)))
                .unwrap();
        }
        let mut la = Log::new();
        let mut spins = 0u64;
        while la.len() < 2 * SLOTS {
            a.poll(&mut la);
            spins += 1;
            assert!(spins < SPINS);
        }
        (one.join().unwrap(), two.join().unwrap())
    });
    assert!(one.is_sorted() && two.is_sorted(), "{one:?} {two:?}");
    let mut all: Vec<u64> = one.iter().chain(&two).copied().collect();
    all.sort();
    assert_eq!(all, (0..SLOTS as u64).collect::<Vec<_>>());
    assert!(warm.is_empty());
    assert!(b.marked_drives() >= before + SLOTS as u64);
}

/// A drive that sets the mark while the receive path is not between small FPDUs (a
/// large Write's payload half read, read straight into memory) must still ask the
/// receive's own checks before its read; only a drive whose mark was set before it
/// skips them (`receive::receive_applying`). Large Writes, each followed by a Send,
/// arrive at a claimed receiver whose drives go straight to the read between them:
/// every octet lands where it was written, every Send completes with its length.
#[test]
fn a_large_write_between_marked_drives_lands_whole() {
    let (a, b) = (End::new(true), End::new(true));
    connect(&a, &b);
    let mut next = 0;
    let (mut la, mut lb) = (Log::new(), Log::new());
    for _ in 0..2 * CLAIM_AFTER {
        b.poll(&mut lb);
    }
    let at = 2 * SLOTS * SLOT;
    for round in 0..6u64 {
        let fill: Vec<u8> = (0..BULK).map(|i| (i * 13 + round as usize) as u8).collect();
        a.mr.write(at, &fill).unwrap();
        a.mr.write(0, &round.to_le_bytes()).unwrap();
        post_recv_slot(&b.qp, &b.mr, &mut next);
        // The first Write comes while the mark holds; after it the receive path
        // stays in exact mode (no marked drive) until small FPDUs bring it back, and
        // each drive sets the mark before its read finds that.
        let seen = b.marked_drives();
        let mut spins = 0u64;
        while round == 0 && b.marked_drives() == seen {
            b.poll(&mut lb);
            spins += 1;
            assert!(spins < SPINS, "no drive went straight to the read");
        }
        let op = SendOp::Write {
            remote_addr: b.mr.addr() + at as u64,
            rkey: b.mr.rkey(),
        };
        a.qp.post_send(SendWr::new(10 * round, op, a.mr.sge(at, BULK)))
            .unwrap();
        a.qp.post_send(SendWr::new(10 * round + 1, SEND, a.mr.sge(0, 8)))
            .unwrap();
        let (na, nb) = (la.len() + 2, lb.len() + 1);
        spin(&a, &b, na, nb, &mut la, &mut lb);
        assert_eq!(
            lb.last(),
            Some(&(round, WcOpcode::Recv, WcStatus::Success, 8)),
            "round {round}"
        );
        let mut got = vec![0u8; BULK];
        b.mr.read(at, &mut got).unwrap();
        assert!(got == fill, "round {round}: the Write's octets differ");
        let mut send = [0u8; 8];
        b.mr.read((round as usize % SLOTS) * SLOT, &mut send)
            .unwrap();
        assert_eq!(send, round.to_le_bytes(), "round {round}");
    }
    assert_eq!(
        la.iter().map(|e| (e.0, e.2)).collect::<Vec<_>>(),
        (0..6u64)
            .flat_map(|r| [(10 * r, WcStatus::Success), (10 * r + 1, WcStatus::Success)])
            .collect::<Vec<_>>()
    );
}
