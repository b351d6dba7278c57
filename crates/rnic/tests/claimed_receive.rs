//! A busy-polling consumer that holds its QP's socket receives small messages in one
//! pass (`receive/quick.rs`) and everything else through the general receive path:
//! bursts of small RDMA Writes and Sends, with a large Send now and then among them,
//! with CRC and without, arrive intact, in order, each completed once with its length,
//! whether the consumer's read brings a burst whole or in pieces.

mod common;

use common::*;
use softrnic_proto::cm::{CrcPolicy, MpaConfig};
use softrnic_rnic::handoff::CLAIM_AFTER;
use softrnic_rnic::*;

const LARGE: usize = 40 * 1024;
const SLOT: usize = LARGE;
const SLOTS: usize = 8;

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Busy-polls `cq` until `n` completions came; returns them in order.
fn spin(cq: &Cq, n: usize) -> Vec<Completion> {
    let mut got = Vec::new();
    let mut spins = 0u64;
    while got.len() < n {
        match cq.poll_one() {
            Some(c) => got.push(c),
            None => {
                spins += 1;
                assert!(spins < 2_000_000_000, "{} of {n} completions", got.len());
            }
        }
    }
    got
}

fn run(crc: CrcPolicy) {
    let cfg = DeviceConfig {
        mpa: MpaConfig {
            crc,
            ..Default::default()
        },
        ..Default::default()
    };
    let (a, b) = end().config(cfg).pair();
    let src = a.pd.alloc_mr(LARGE + 5 * 64, Access::LOCAL_WRITE).unwrap();
    let target =
        b.pd.alloc_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
    let recv = b.pd.alloc_mr(SLOTS * SLOT, Access::LOCAL_WRITE).unwrap();
    let mut slot = 0;
    let post_recv = |slot: &mut usize| {
        let s = *slot % SLOTS;
        b.qp.post_recv(RecvWr::new(s as u64, recv.sge(s * SLOT, SLOT)))
            .unwrap();
        *slot += 1;
    };
    for _ in 0..SLOTS {
        post_recv(&mut slot);
    }
    // Both consumers poll until they hold their sockets.
    for _ in 0..2 * CLAIM_AFTER {
        assert!(a.cq.poll_one().is_none());
        assert!(b.cq.poll_one().is_none());
    }
    let mut expect_target = vec![0u8; 4096];
    let mut next_slot = 0usize;
    for burst in 0..400u64 {
        let r = splitmix(burst);
        let msgs = 1 + (r % 5) as usize;
        let mut sends = Vec::new();
        for m in 0..msgs {
            let r = splitmix(r ^ (m as u64 + 1));
            // The last message of a burst is a Send: its completion says the burst
            // is in.
            let write = m + 1 < msgs && !r.is_multiple_of(3);
            let len = if !write
                && r.is_multiple_of(29)
                && !sends
                    .iter()
                    .any(|(_, d): &(usize, Vec<u8>)| d.len() == LARGE)
            {
                LARGE
            } else {
                (r >> 8) as usize % 41
            };
            let data = pattern(len, r);
            // A burst's requests are all posted before any completes: each has its
            // own source (a large one the start, at most one a burst).
            let from = if len == LARGE { 0 } else { LARGE + m * 64 };
            src.write(from, &data).unwrap();
            let op = if write {
                let at = (r >> 16) as usize % (4096 - 64);
                expect_target[at..at + len].copy_from_slice(&data);
                SendOp::Write {
                    remote_addr: target.addr() + at as u64,
                    rkey: target.rkey(),
                }
            } else {
                sends.push((next_slot % SLOTS, data.clone()));
                next_slot += 1;
                SendOp::Send {
                    solicited: false,
                    invalidate: None,
                }
            };
            a.qp.post_send(SendWr::new(m as u64, op, src.sge(from, len)))
                .unwrap();
        }
        for (m, c) in spin(&a.cq, msgs).iter().enumerate() {
            assert_eq!((c.wr_id, c.status), (m as u64, WcStatus::Success));
        }
        let got = spin(b.recv_cq(), sends.len());
        for (c, (s, data)) in got.iter().zip(&sends) {
            assert_eq!(
                (c.status, c.opcode, c.wr_id, c.byte_len as usize),
                (WcStatus::Success, WcOpcode::Recv, *s as u64, data.len()),
                "burst {burst}"
            );
            let mut placed = vec![0; data.len()];
            recv.read(s * SLOT, &mut placed).unwrap();
            assert_eq!(&placed, data, "burst {burst}, slot {s}");
            post_recv(&mut slot);
        }
        // The Writes before the burst's last Send are placed before it completes.
        let mut placed = vec![0; 4096];
        target.read(0, &mut placed).unwrap();
        assert_eq!(placed, expect_target, "burst {burst}");
    }
    assert_eq!(b.qp.state(), QpState::Rts);
    assert!(drained(&b.cq).is_empty());
}

#[test]
fn a_claimed_consumer_receives_small_and_large_messages_intact_and_in_order() {
    run(CrcPolicy::Off);
}

#[test]
fn a_claimed_consumer_receives_them_with_crc_too() {
    run(CrcPolicy::Required);
}
