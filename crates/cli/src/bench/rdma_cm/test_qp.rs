//! The test QPs of a `-R` run and the buffers each side exposes.

use super::*;

/// One test QP and its buffers.
pub(super) struct TestQp {
    /// The QP.
    pub(super) qp: Qp,
    /// Its id, to match completions and events.
    pub(super) id: QpId,
    /// Source of Writes and Sends, sink of Reads (the message size).
    pub(super) local: Mr,
    /// What the peer may access: the Write target or Read source, the landing buffer of
    /// write_lat, the credit word of send_bw.
    pub(super) exposed: Mr,
    /// Receive buffer of the send tests.
    pub(super) recv: Option<Mr>,
    /// The peer's description.
    pub(super) remote: Dest,
    /// Requests posted (send_bw server: Sends received).
    pub(super) posted: u64,
    /// Requests completed.
    pub(super) completed: u64,
    /// send_bw: the last credit read (client) or written (server).
    pub(super) credit: u64,
}

impl TestQp {
    /// This QP's description for the peer: its exposed buffer, and what perftest prints.
    pub(super) fn dest(&self, test: Test, psn: u32) -> Dest {
        Dest {
            lid: 0,
            out_reads: if read_test(test) {
                u32::from(OUT_READS)
            } else {
                1
            },
            qpn: self.id.0,
            psn,
            rkey: self.exposed.rkey(),
            vaddr: self.exposed.addr(),
            ..Dest::default()
        }
    }

    /// Posts one signaled `op` on the first `size` octets of the local buffer (the
    /// latency tests' one request at a time).
    pub(super) fn post_one(&self, wr_id: u64, op: SendOp, size: usize) -> Result<(), String> {
        self.qp
            .post_send(SendWr::new(wr_id, op, self.local.sge(0, size)))
            .map_err(|e| format!("post_send: {e} ({})", self.diag()))
    }

    /// The QP's state and counters, for error messages.
    pub(super) fn diag(&self) -> String {
        format!(
            "QP {} state {:?}, posted {}, completed {}, credit {}",
            self.id.0,
            self.qp.state(),
            self.posted,
            self.completed,
            self.credit
        )
    }

    /// Reads the server's latest credit (send_bw client): the word must read the same
    /// twice (a Write may be landing) and lie between the last credit and what was sent.
    pub(super) fn refresh_credit(&mut self) {
        let mut a = [0u8; pt::CREDIT_LEN];
        let mut b = [0u8; pt::CREDIT_LEN];
        if self.exposed.read(0, &mut a).is_err() || self.exposed.read(0, &mut b).is_err() {
            return;
        }
        if a != b {
            return;
        }
        // The word is 32 bits: extend it with the high part of what we have sent.
        let mut v = (self.posted & !0xffff_ffff) | u64::from(pt::decode_credit(a));
        if v > self.posted {
            v = v.wrapping_sub(1 << 32);
        }
        if v > self.credit && v <= self.posted {
            self.credit = v;
        }
    }
}

/// Length of the buffer a side exposes, per test and role.
pub(super) fn exposed_len(test: Test, side: Side, size: usize, cycle: usize) -> usize {
    match (test, side) {
        // perftest walks the remote address through a cycle buffer for small sizes.
        (Test::WriteBw | Test::ReadBw | Test::ReadLat, Side::Server) => size.max(cycle) + 64,
        (Test::WriteLat, _) => size,
        (Test::SendBw, _) => pt::CREDIT_LEN * CREDIT_SLOTS,
        _ => 64,
    }
}

/// Creates one test QP with its buffers (receives posted for the send tests).
pub(super) fn test_qp(
    dev: &Device,
    pd: &Pd,
    cq: &Cq,
    cfg: &BenchConfig,
    side: Side,
    size: usize,
    cycle: usize,
) -> Result<TestQp, String> {
    let test = cfg.test;
    let iters = cfg.iters;
    let recvs = match (test, side) {
        (Test::SendBw, Side::Server) | (Test::SendLat, _) => {
            (u64::from(cfg.rx_depth).min(iters).max(1) as usize).min(16384)
        }
        _ => 0,
    };
    let sq_depth = match (test, side) {
        (Test::WriteBw | Test::ReadBw | Test::SendBw, Side::Client) => cfg.tx_depth as usize + 2,
        (Test::SendBw, Side::Server) => CREDIT_SLOTS + 2,
        _ => 16,
    };
    let qp = dev
        .create_qp(pd, QpInit::new(cq, sq_depth, recvs.max(1)))
        .map_err(e2s("create QP"))?;
    let local = pd
        .alloc_mr(size, Access::LOCAL_WRITE)
        .map_err(e2s("register buffer"))?;
    let exposed = pd
        .alloc_mr(
            exposed_len(test, side, size, cycle),
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        )
        .map_err(e2s("register buffer"))?;
    if test != Test::WriteLat && test != Test::SendBw {
        let n = exposed.len();
        exposed.fill(0, n, 0x3c).map_err(e2s("fill"))?;
    }
    if test != Test::WriteLat {
        local.fill(0, size, 0x5a).map_err(e2s("fill"))?;
    }
    let recv = if recvs > 0 {
        let m = pd
            .alloc_mr(size, Access::LOCAL_WRITE)
            .map_err(e2s("register buffer"))?;
        for _ in 0..recvs {
            qp.post_recv(RecvWr::new(0, m.sge(0, size)))
                .map_err(e2s("post_recv"))?;
        }
        Some(m)
    } else {
        None
    };
    let id = qp.id();
    Ok(TestQp {
        qp,
        id,
        local,
        exposed,
        recv,
        remote: Dest::default(),
        posted: 0,
        completed: 0,
        credit: 0,
    })
}

/// A pseudo-random 24-bit PSN, as perftest prints one (meaningless on iWARP).
pub(super) fn psn() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    (t ^ std::process::id().rotate_left(12)).wrapping_mul(0x9e37_79b9) >> 8
}
