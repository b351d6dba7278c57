//! One round of a client: its shape checked against the device, its QPs accepted, the
//! test served, the disconnects awaited.

use super::idle::Idle;
use super::traffic::{echo_server, passive, send_bw_server};
use super::{MAX_ROUND_QPS, RoundError, SEp, ServerOpts, accept_one};
use crate::bench::cqs::CqSet;
use crate::bench::meta::{FLAG_SHARED_BUFFERS, Meta};
use crate::bench::rdma::{CREDIT_LEN, CREDIT_SLOTS, Watch, e2s, engines_line, recv_wr, stats_line};
use crate::bench::{MAX_SIZE, Test};
use softrnic_rnic::{Access, ConnRequest, Device, Listener, Qp, QpInit};
use std::net::IpAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// What a round takes, from the client's metadata, checked against the device's
/// limits and what its objects already hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Shape {
    qps: usize,
    size: usize,
    rx_depth: usize,
    cq_depth: usize,
    sq_depth: usize,
    rq_depth: usize,
}

fn shape(dev: &Device, m: &Meta) -> Result<Shape, String> {
    let (attr, used) = (dev.query(), dev.usage());
    let q = usize::from(m.num_qps);
    if q == 0 || m.num_qps > MAX_ROUND_QPS || used.qps + q > attr.max_qp as usize {
        return Err(format!("{q} QPs (at most {MAX_ROUND_QPS})"));
    }
    if m.size == 0 || m.size > MAX_SIZE as u64 {
        return Err(format!("message size {} (1 to {MAX_SIZE})", m.size));
    }
    if m.depth as usize > attr.max_qp_wr {
        return Err(format!(
            "receive depth {} (at most {})",
            m.depth, attr.max_qp_wr
        ));
    }
    let size = m.size as usize;
    let rx_depth = (m.depth as usize).max(2);
    let (cq_depth, sq_depth, rq_depth, src) = match m.test {
        Test::SendBw => (
            q * (rx_depth + CREDIT_SLOTS) + 64,
            CREDIT_SLOTS + 2,
            rx_depth,
            CREDIT_LEN * CREDIT_SLOTS,
        ),
        Test::WriteLat | Test::SendLat => (64, 16, 16, size),
        _ => (64, 1, 1, 0),
    };
    if cq_depth > attr.max_cqe || used.cq_entries + cq_depth as u64 > attr.max_cq_entries {
        return Err(format!("a CQ of {cq_depth} entries"));
    }
    let memory = (q as u64) * (size + src) as u64;
    if used.registered + memory > attr.max_registered {
        return Err(format!("{memory} octets of buffers"));
    }
    Ok(Shape {
        qps: q,
        size,
        rx_depth,
        cq_depth,
        sq_depth,
        rq_depth,
    })
}

/// Whether the Request `m` from `peer` is QP `i` of the round `first` opened from
/// `ip`.
fn belongs(m: &Meta, peer: IpAddr, first: &Meta, ip: IpAddr, i: usize) -> bool {
    peer == ip
        && m.test == first.test
        && m.size == first.size
        && m.num_qps == first.num_qps
        && usize::from(m.qp_index) == i
}

/// One round: accept the client's QPs, serve, wait for the disconnects. Returns whether
/// it was the last round. `next` holds the first Request of another client's round that
/// arrived while this one was being set up; it opens the next round.
pub(super) fn serve_round(
    dev: &Device,
    listener: &Listener,
    opts: ServerOpts,
    next: &mut Option<(ConnRequest, Meta)>,
) -> Result<bool, RoundError> {
    let (first, meta) = match next.take() {
        Some(x) => x,
        None => match accept_one(listener, None)? {
            Some(x) => x,
            None => return Ok(false),
        },
    };
    let peer = first.peer_addr();
    if meta.qp_index != 0 {
        let _ = first.reject(b"no round in progress");
        return Err(format!("{peer}: QP {} of no round in progress", meta.qp_index).into());
    }
    let sh = match shape(dev, &meta) {
        Ok(s) => s,
        Err(why) => {
            let _ = first.reject(format!("bad benchmark parameters: {why}").as_bytes());
            return Err(format!("{peer}: bad benchmark parameters: {why}").into());
        }
    };
    let test = meta.test;
    let (q, size, rx_depth) = (sh.qps, sh.size, sh.rx_depth);
    let (sq_depth, rq_depth) = (sh.sq_depth, sh.rq_depth);
    let pd = dev.alloc_pd();
    // The tests -e allows (a client's flag on another is ignored: it polls).
    let events = meta.events() && !matches!(test, Test::WriteLat | Test::SendBw);
    let cq = CqSet::with_events(dev, q, sh.cq_depth, events)?;
    let setup_deadline = Instant::now() + opts.setup;
    let mut eps: Vec<SEp> = Vec::with_capacity(q);
    let mut pending = Some((first, meta));
    for i in 0..q {
        let (req, m) = loop {
            if let Some(x) = pending.take() {
                break x;
            }
            let left = setup_deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                // Dropping the QPs accepted so far resets their connections.
                return Err(format!(
                    "{peer}: opened {i} of the {q} QPs of its round in {:?}; round dropped",
                    opts.setup
                )
                .into());
            }
            let Some((req, m)) = accept_one(listener, Some(left))? else {
                continue;
            };
            if belongs(&m, req.peer_addr().ip(), &meta, peer.ip(), i) {
                break (req, m);
            }
            // Another client's first QP opens the next round; anything else is refused.
            if m.qp_index == 0 && next.is_none() {
                *next = Some((req, m));
            } else {
                let _ = req.reject(b"server busy with another round");
            }
        };
        let qp = dev
            .create_qp(&pd, QpInit::new(cq.for_qp(i), sq_depth, rq_depth))
            .map_err(e2s("create QP"))?;
        let buf = match eps.first() {
            Some(first) if m.flags & FLAG_SHARED_BUFFERS != 0 => Rc::clone(&first.buf),
            _ => {
                let b = pd
                    .alloc_mr(
                        size,
                        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
                    )
                    .map_err(e2s("register buffer"))?;
                b.fill(0, size, 0x3c).map_err(e2s("fill"))?;
                Rc::new(b)
            }
        };
        if test == Test::WriteLat {
            buf.write(size - 1, &[0]).map_err(e2s("fill"))?;
        }
        let src = match test {
            Test::WriteLat | Test::SendLat => Some(size),
            Test::SendBw => Some(CREDIT_LEN * CREDIT_SLOTS),
            _ => None,
        }
        .map(|len| pd.alloc_mr(len, Access::LOCAL_WRITE))
        .transpose()
        .map_err(e2s("register buffer"))?;
        if matches!(test, Test::SendBw | Test::SendLat) {
            for _ in 0..rq_depth {
                qp.post_recv(recv_wr(&buf, size))
                    .map_err(e2s("post_recv"))?;
            }
        }
        let reply = Meta {
            addr: buf.addr(),
            rkey: buf.rkey(),
            len: buf.len() as u64,
            ..m
        };
        req.accept_echoing_markers(&qp, &reply.encode())
            .map_err(e2s("accept"))?;
        let id = qp.id();
        eps.push(SEp {
            qp,
            id,
            buf,
            src,
            peer: m,
            received: 0,
            repost: 0,
            reported: 0,
            credit_outstanding: 0,
            next_slot: 0,
        });
    }
    let mut watch = Watch::new(eps.iter().map(|e| e.id).collect());
    // What the server saw arrive, counted here (echo tests: the messages it answered).
    let mut answered = 0u64;
    let qps: Vec<&Qp> = eps.iter().map(|e| &e.qp).collect();
    let mut idle = Idle::new(opts.idle, &qps);
    drop(qps);
    let r = match test {
        Test::WriteBw | Test::ReadBw | Test::ReadLat => {
            passive(dev, &cq, &eps, &mut watch, &mut idle, opts.poll)
        }
        Test::SendBw => send_bw_server(dev, &cq, &mut eps, &mut watch, &mut idle, rx_depth, size),
        Test::WriteLat | Test::SendLat => echo_server(
            dev,
            &cq,
            &mut eps[0],
            &mut watch,
            &mut idle,
            test,
            size,
            &mut answered,
        ),
    };
    // The client disconnects when it is done; the QPs are gone once our side closed too.
    watch.wait(dev, Some(Duration::from_secs(5)));
    if opts.verbose {
        // Messages counted on this side, not taken from the client's parameters.
        let msgs = match test {
            // The server has no count of the Reads it served: counters only.
            Test::ReadBw | Test::ReadLat => 0,
            Test::WriteBw => {
                let placed: u64 = eps
                    .iter()
                    .map(|e| {
                        let st = e.qp.stats();
                        st.rx_direct_bytes + st.rx_copied_bytes
                    })
                    .sum();
                placed / size as u64
            }
            Test::SendBw => eps.iter().map(|e| e.received).sum(),
            Test::WriteLat | Test::SendLat => answered,
        };
        eprintln!(
            "[{} {} B server] {}, {}",
            test.name(),
            size,
            stats_line(eps.iter().map(|e| e.qp.stats()), msgs),
            engines_line(dev)
        );
    }
    for p in &watch.problems {
        eprintln!("softrnic server: {p}");
    }
    drop(eps);
    r.map(|()| meta.is_last())
        .map_err(|e| RoundError::Client(format!("{peer}: {e}")))
}
