//! The server's part of each test's traffic: the passive side of one-sided tests,
//! send_bw's receives and credits, the latency tests' echo.

use super::SEp;
use super::idle::Idle;
use crate::bench::Test;
use crate::bench::cqs::CqSet;
use crate::bench::rdma::{
    CREDIT_CHECK, CREDIT_LEN, CREDIT_SLOTS, WAIT, Watch, credit_every, e2s, next_tag, recv_wr,
};
use softrnic_rnic::{Completion, Device, QpId, SendOp, SendWr, WcOpcode, WcStatus};
use std::collections::HashMap;
use std::time::Duration;

/// The passive side of one-sided tests: the engine threads serve the peer; with
/// `server_poll`, this thread busy-polls the CQ as well (which drives the sockets).
pub(super) fn passive(
    dev: &Device,
    cq: &CqSet,
    eps: &[SEp],
    watch: &mut Watch,
    idle: &mut Idle,
    server_poll: bool,
) -> Result<(), String> {
    let mut wcs = vec![Completion::default(); 16];
    let mut spins = 0u32;
    loop {
        if server_poll {
            cq.poll(&mut wcs);
            spins = spins.wrapping_add(1);
            if !spins.is_multiple_of(1024) {
                continue;
            }
            if watch.check(dev) {
                return Ok(());
            }
        } else if watch.wait(dev, Some(Duration::from_secs(1))) {
            return Ok(());
        }
        idle.check(eps.iter().map(|e| &e.qp))?;
    }
}

pub(super) fn send_bw_server(
    dev: &Device,
    cq: &CqSet,
    eps: &mut [SEp],
    watch: &mut Watch,
    idle: &mut Idle,
    rx_depth: usize,
    size: usize,
) -> Result<(), String> {
    let every = credit_every(rx_depth);
    let mut wcs = vec![Completion::default(); 64];
    // A completion per message: each finds its QP in one look-up.
    let index: HashMap<QpId, usize> = eps.iter().enumerate().map(|(i, e)| (e.id, i)).collect();
    let mut empty = 0u32;
    let mut error = None;
    // Completions come in runs of one QP: the last one found is tried first.
    let mut last = 0;
    loop {
        let n = cq.poll(&mut wcs);
        for c in &wcs[..n] {
            if eps.get(last).is_none_or(|e| e.id != c.qp) {
                let Some(&i) = index.get(&c.qp) else {
                    continue;
                };
                last = i;
            }
            let Some(ep) = eps.get_mut(last) else {
                continue;
            };
            match (c.opcode, c.status) {
                (WcOpcode::Recv, WcStatus::Success) => {
                    ep.received += 1;
                    ep.repost += 1;
                }
                (WcOpcode::Write, _) => ep.credit_outstanding -= 1,
                (_, WcStatus::WrFlushError) => {}
                (op, st) => {
                    error.get_or_insert(format!("server: {op:?} completed with {st:?}"));
                }
            }
        }
        for ep in eps.iter_mut() {
            if ep.repost > 0 {
                // The batch's receives go back in one post (one lock of the QP).
                let wr = recv_wr(&ep.buf, size);
                // Fails only once the QP is closing; the client is done then.
                let n = usize::try_from(ep.repost).unwrap_or(usize::MAX);
                let _ = ep.qp.post_recv_batch(std::iter::repeat_n(&wr, n));
                ep.repost = 0;
            }
            if ep.received - ep.reported >= every && ep.credit_outstanding < CREDIT_SLOTS {
                let Some(src) = &ep.src else { continue };
                let off = ep.next_slot * CREDIT_LEN;
                let v = ep.received;
                let mut word = [0u8; CREDIT_LEN];
                word[..8].copy_from_slice(&v.to_be_bytes());
                word[8..].copy_from_slice(&(v ^ CREDIT_CHECK).to_be_bytes());
                src.write(off, &word).map_err(e2s("credit"))?;
                let credit = src.sge(off, CREDIT_LEN);
                let posted = ep
                    .qp
                    .post_send(SendWr::write(v, credit, ep.peer.addr, ep.peer.rkey));
                if posted.is_ok() {
                    ep.credit_outstanding += 1;
                    ep.next_slot = (ep.next_slot + 1) % CREDIT_SLOTS;
                    ep.reported = v;
                }
            }
        }
        if n == 0 {
            empty = empty.wrapping_add(1);
            if empty.is_multiple_of(256) {
                if watch.check(dev) {
                    break;
                }
                idle.check(eps.iter().map(|e| &e.qp))?;
            }
        }
    }
    error.map_or(Ok(()), Err)
}

/// write_lat and send_lat: answer each message in kind.
#[allow(clippy::too_many_arguments)]
pub(super) fn echo_server(
    dev: &Device,
    cq: &CqSet,
    ep: &mut SEp,
    watch: &mut Watch,
    idle: &mut Idle,
    test: Test,
    size: usize,
    answered: &mut u64,
) -> Result<(), String> {
    let mut wcs = vec![Completion::default(); 16];
    let last_octet = size - 1;
    let mut expect = 1u8;
    let mut spins = 0u32;
    let mut error = None;
    let Some(src) = &ep.src else {
        return Err("no source buffer".into());
    };
    let write = SendOp::Write {
        remote_addr: ep.peer.addr,
        rkey: ep.peer.rkey,
    };
    let send = SendOp::Send {
        solicited: false,
        invalidate: None,
    };
    loop {
        let n = cq.next(&mut wcs, WAIT);
        let mut reply = false;
        for c in &wcs[..n] {
            match (c.opcode, c.status) {
                (WcOpcode::Recv, WcStatus::Success) => {
                    reply = true;
                    let _ = ep.qp.post_recv(recv_wr(&ep.buf, size));
                }
                (_, WcStatus::Success | WcStatus::WrFlushError) => {}
                (op, st) => {
                    error.get_or_insert(format!("server: {op:?} completed with {st:?}"));
                }
            }
        }
        if test == Test::WriteLat {
            let mut b = [0u8];
            if ep.buf.read(last_octet, &mut b).is_ok() && b[0] == expect {
                src.write(last_octet, &[expect]).map_err(e2s("write tag"))?;
                expect = next_tag(expect);
                reply = true;
            }
        }
        if reply {
            *answered += 1;
            let op = if test == Test::WriteLat { write } else { send };
            let _ = ep.qp.post_send(SendWr::new(0, op, src.sge(0, size)));
            continue;
        }
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(1024) || cq.sleeps() {
            if watch.check(dev) {
                break;
            }
            idle.check(std::iter::once(&ep.qp))?;
        }
    }
    error.map_or(Ok(()), Err)
}
