//! The softrnic side of the benchmarks: the client's measuring loops and the server's
//! part, on the public verbs API.
//!
//! - write_bw / read_bw: the client keeps `tx-depth` RDMA Writes (Reads) of the size
//!   outstanding per QP into (from) the server's buffer, signaling one in `cq-mod`; the
//!   server's program does nothing (its engine threads serve the peer), unless
//!   `--server-poll` has its thread busy-poll the CQ.
//! - send_bw: the server keeps its receive queue full (a repost per completion) and
//!   returns credits: every third of its receive depth it RDMA-Writes the count of
//!   receives reposted into a small buffer the client exposes, and the client never has
//!   more Sends beyond that count than the receive depth. On iWARP a Send that finds no
//!   receive is fatal, and TCP lets a sender run arbitrarily far ahead of the receiving
//!   program, so a benchmark without credits would fail at random.
//! - write_bw and send_bw end with a 1-octet RDMA Read: its response comes only after
//!   the server has placed everything before it, so the clock stops when the data is
//!   there, not at the last local completion (a Write or Send completes once its FPDUs
//!   are in the send path: copied into the connection's transmit buffer, or written to
//!   the socket, long before they arrive). Their peak bandwidth comes from delivery
//!   probes, the same 1-octet Read every [`BwMeter::WINDOW`] ([`Prober`]).
//! - write_lat: ping-pong of RDMA Writes: each side polls the last octet of its own
//!   buffer (`Mr::read`) until the peer's Write has changed it to the iteration's tag,
//!   polling its CQ in between (in hybrid progress mode that is what drives the socket).
//! - send_lat: ping-pong of Sends. read_lat: one Read at a time, full round trip.
//!
//! [`BwMeter::WINDOW`]: super::stats::BwMeter::WINDOW

use super::cqs::CqSet;
use super::meta::{FLAG_EVENTS, FLAG_LAST, FLAG_SHARED_BUFFERS, Meta};
use super::stats::{CpuClock, Progress};
use super::{BenchConfig, Measured, Mode, Test};
use softrnic_rnic::{
    Access, AsyncEvent, Completion, Device, Mr, Qp, QpId, QpInit, RecvWr, SendOp, SendWr, Sge,
    WcStatus,
};
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

mod bw;
mod counters;
mod lat;
mod probe;

use bw::bw_client;
pub(super) use counters::{engines_line, stats_line};
use lat::lat_client;
pub(super) use probe::{Prober, ReadTarget, closing_read};

/// A client loop that sees nothing happen for this long gives up.
const STALL: Duration = Duration::from_secs(10);
/// With `-e`, the longest sleep on completion events before a loop looks around.
pub(super) const WAIT: Duration = Duration::from_millis(100);
/// Credit buffer: the count of reposted receives, and the count XOR [`CREDIT_CHECK`], so
/// a torn read is recognised.
pub(super) const CREDIT_LEN: usize = 16;
pub(super) const CREDIT_CHECK: u64 = 0xa5a5_5a5a_c3c3_3c3c;
/// Credit Writes the server may have outstanding per QP (one source slot each).
pub(super) const CREDIT_SLOTS: usize = 32;

/// Receives the send_bw server reposts between two credit Writes: a third of its
/// receive depth, as perftest's server does ([`super::perftest::credit_period`]). Each
/// credit is a Write of its own and a `sendto`, which on loopback also runs the
/// client's receive of it: at an eighth of the depth those were a third of the
/// server's thread, and the server bounds the rate. When a credit is written, up to
/// two thirds of the depth may still be on the way to the server: it has work for
/// far longer than the credit takes to reach the client.
pub(super) fn credit_every(rx_depth: usize) -> u64 {
    (rx_depth as u64 / 3).max(1)
}
/// wr_id of the closing Read.
pub(super) const BARRIER_ID: u64 = u64::MAX;
/// wr_id of the delivery probes.
pub(super) const PROBE_ID: u64 = u64::MAX - 1;

pub(super) fn e2s(what: &str) -> impl Fn(softrnic_rnic::Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// Tracks the disconnection of a set of QPs from the device's asynchronous events.
pub(super) struct Watch {
    ids: Vec<QpId>,
    gone: Vec<bool>,
    pub(super) problems: Vec<String>,
}

impl Watch {
    pub(super) fn new(ids: Vec<QpId>) -> Watch {
        let gone = vec![false; ids.len()];
        Watch {
            ids,
            gone,
            problems: Vec::new(),
        }
    }

    fn note(&mut self, e: AsyncEvent) {
        let qp = match &e {
            AsyncEvent::Disconnected { qp } => *qp,
            AsyncEvent::ConnectionLost { qp, error } => {
                self.problems
                    .push(format!("QP {}: connection lost ({error:?})", qp.0));
                *qp
            }
            AsyncEvent::QpFatal { qp, cause, remote } => {
                self.problems.push(format!(
                    "QP {}: Terminate {} ({cause:?})",
                    qp.0,
                    if *remote { "received" } else { "sent" }
                ));
                *qp
            }
            _ => return,
        };
        if let Some(i) = self.ids.iter().position(|&x| x == qp) {
            self.gone[i] = true;
        }
    }

    fn all_gone(&self) -> bool {
        self.gone.iter().all(|&g| g)
    }

    /// Takes the queued events; true once every QP is gone.
    pub(super) fn check(&mut self, dev: &Device) -> bool {
        while let Some(e) = dev.poll_event() {
            self.note(e);
        }
        self.all_gone()
    }

    /// Blocks until every QP is gone, or `timeout` (None: forever) passes.
    pub(super) fn wait(&mut self, dev: &Device, timeout: Option<Duration>) -> bool {
        let deadline = timeout.map(|t| Instant::now() + t);
        while !self.check(dev) {
            let left = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(l) if !l.is_zero() => l,
                    _ => return false,
                },
                None => Duration::from_secs(1),
            };
            if let Some(e) = dev.wait_event(left.min(Duration::from_secs(1))) {
                self.note(e);
            }
        }
        true
    }
}

/// An error naming the work request unless the completion is a success.
/// The verb a bandwidth test repeats against the peer's buffer.
pub(super) fn bw_op(test: Test, remote_addr: u64, rkey: u32) -> SendOp {
    match test {
        Test::WriteBw => SendOp::Write { remote_addr, rkey },
        Test::ReadBw => SendOp::Read { remote_addr, rkey },
        _ => SendOp::Send {
            solicited: false,
            invalidate: None,
        },
    }
}

/// Posts `room` copies of `op` on `sge` in one batch, numbered from `first`;
/// `signaled(number)` says which of them complete.
///
/// `batch` keeps its requests from one window to the next, as perftest keeps its
/// work-request list: while they are for the same operation and buffer, only their
/// numbers and signal flags are written (building each ~120-octet request afresh was
/// about 70 instructions a message of the client's loop under callgrind).
pub(super) fn post_window(
    qp: &Qp,
    batch: &mut Vec<SendWr>,
    op: SendOp,
    sge: Sge,
    first: u64,
    room: u64,
    signals: Signals,
) -> Result<(), softrnic_rnic::Error> {
    let room = usize::try_from(room).unwrap_or(usize::MAX);
    if batch
        .first()
        .is_some_and(|w| w.op != op || w.sgl[..] != [sge])
    {
        batch.clear();
    }
    if batch.len() < room {
        batch.resize(room, SendWr::new(0, op, sge));
    }
    let window = &mut batch[..room];
    for ((wr, signaled), idx) in window.iter_mut().zip(signals.from(first)).zip(first..) {
        wr.wr_id = idx;
        wr.signaled = signaled;
    }
    qp.post_send_batch(window.iter())
}

/// Which requests of a bandwidth loop are signaled: one in `cq_mod` (index `i` when
/// `(i + 1) % cq_mod == 0`) and the last of a counted run. A countdown per request,
/// not a division: the modulo was a 64-bit `div` per message in the client's loop
/// (about 14 instructions a message under callgrind, a slow one on this CPU).
#[derive(Clone, Copy, Debug)]
pub(super) struct Signals {
    /// One request in this many is signaled (at least 1).
    pub cq_mod: u64,
    /// The run's request count, if it has one: its last request is signaled too.
    pub last: Option<u64>,
}

impl Signals {
    /// Whether each request from index `first` on is signaled, in order.
    fn from(self, first: u64) -> impl Iterator<Item = bool> {
        let cq_mod = self.cq_mod.max(1);
        // Requests before the next one-in-`cq_mod` signal.
        let mut until = cq_mod - 1 - first % cq_mod;
        let mut idx = first;
        std::iter::from_fn(move || {
            let signaled = until == 0 || Some(idx + 1) == self.last;
            until = if until == 0 { cq_mod - 1 } else { until - 1 };
            idx += 1;
            Some(signaled)
        })
    }
}

pub(super) fn check_wc(c: &Completion, side: &str) -> Result<(), String> {
    if c.status == WcStatus::Success {
        Ok(())
    } else {
        Err(format!(
            "{side}: {:?} work request {} on QP {} completed with {:?}",
            c.opcode, c.wr_id, c.qp.0, c.status
        ))
    }
}

pub(super) fn recv_wr(buf: &Mr, size: usize) -> RecvWr {
    RecvWr::new(0, buf.sge(0, size))
}

/// One of the client's connections.
struct Ep {
    qp: Qp,
    id: QpId,
    /// Source (Write, Send) or sink (Read, and the closing Read) of the size: its own,
    /// or with `--shared-buffers` the one all QPs share.
    local: Rc<Mr>,
    /// What the client exposes: the landing buffer of write_lat, the credit word of send_bw.
    exposed: Option<Mr>,
    /// send_lat's receive buffer.
    recv: Option<Mr>,
    /// The server's buffer.
    remote: Meta,
    posted: u64,
    completed: u64,
    credit: u64,
}

impl Ep {
    /// Reads the server's latest credit (send_bw).
    fn refresh_credit(&mut self) {
        let Some(m) = &self.exposed else { return };
        let mut b = [0u8; CREDIT_LEN];
        if m.read(0, &mut b).is_err() {
            return;
        }
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[..8]);
        let v = u64::from_be_bytes(a);
        a.copy_from_slice(&b[8..]);
        if v ^ CREDIT_CHECK == u64::from_be_bytes(a) && v > self.credit {
            self.credit = v;
        }
    }

    fn diag(&self) -> String {
        format!(
            "QP {} state {:?}, posted {}, completed {}, credit {}, {:?}",
            self.id.0,
            self.qp.state(),
            self.posted,
            self.completed,
            self.credit,
            self.qp.stats()
        )
    }
}

/// Runs one size as the client: connects `-q` QPs (the metadata goes in the private data),
/// measures, disconnects.
pub fn client_round(
    cfg: &BenchConfig,
    dev: &Device,
    addr: SocketAddr,
    size: usize,
    last: bool,
) -> Result<Measured, String> {
    let test = cfg.test;
    let q = usize::from(cfg.qps);
    let pd = dev.alloc_pd();
    let bw = test.is_bw();
    let cq_depth = if bw {
        q * (cfg.tx_depth as usize + 2) + 16
    } else {
        64
    };
    let cq = CqSet::with_events(dev, q, cq_depth, cfg.events)?;
    let sq_depth = if bw { cfg.tx_depth as usize + 2 } else { 16 };
    let rq_depth = if test == Test::SendLat { 16 } else { 1 };
    let mut eps: Vec<Ep> = Vec::with_capacity(q);
    for i in 0..q {
        let qp = dev
            .create_qp(&pd, QpInit::new(cq.for_qp(i), sq_depth, rq_depth))
            .map_err(e2s("create QP"))?;
        let local = match eps.first() {
            Some(first) if cfg.shared_buffers => Rc::clone(&first.local),
            _ => {
                let m = pd
                    .alloc_mr(size, Access::LOCAL_WRITE)
                    .map_err(e2s("register buffer"))?;
                m.fill(0, size, 0x5a).map_err(e2s("fill"))?;
                Rc::new(m)
            }
        };
        let exposed = match test {
            Test::WriteLat => Some(size),
            Test::SendBw => Some(CREDIT_LEN),
            _ => None,
        }
        .map(|len| pd.alloc_mr(len, Access::LOCAL_WRITE | Access::REMOTE_WRITE))
        .transpose()
        .map_err(e2s("register buffer"))?;
        let recv = if test == Test::SendLat {
            let m = pd
                .alloc_mr(size, Access::LOCAL_WRITE)
                .map_err(e2s("register buffer"))?;
            for _ in 0..rq_depth {
                qp.post_recv(recv_wr(&m, size)).map_err(e2s("post_recv"))?;
            }
            Some(m)
        } else {
            None
        };
        let meta = Meta {
            test,
            flags: if last { FLAG_LAST } else { 0 }
                | if cfg.events { FLAG_EVENTS } else { 0 }
                | if cfg.shared_buffers {
                    FLAG_SHARED_BUFFERS
                } else {
                    0
                },
            qp_index: i as u16,
            num_qps: cfg.qps,
            size: size as u64,
            iters: if cfg.duration.is_some() {
                0
            } else if bw {
                cfg.iters
            } else {
                cfg.iters + cfg.warmup
            },
            duration_ms: cfg.duration.map_or(0, |d| d.as_millis() as u32),
            depth: cfg.rx_depth,
            addr: exposed.as_ref().map_or(0, Mr::addr),
            rkey: exposed.as_ref().map_or(0, Mr::rkey),
            len: exposed.as_ref().map_or(0, |m| m.len() as u64),
        };
        let conn = dev
            .connect(addr, &qp, &meta.encode())
            .map_err(e2s("connect"))?;
        let remote = Meta::decode(conn.peer_private_data()).map_err(|e| e.to_string())?;
        if remote.len < size as u64 {
            return Err(format!(
                "server exposes {} octets, the size is {size}",
                remote.len
            ));
        }
        let id = qp.id();
        eps.push(Ep {
            qp,
            id,
            local,
            exposed,
            recv,
            remote,
            posted: 0,
            completed: 0,
            credit: 0,
        });
    }
    let label = format!("{} {} B softrnic", test.name(), size);
    let mut progress = Progress::new(label, size, bw, cfg.show_progress);
    let cpu = CpuClock::start(cfg.mode == Mode::Loopback);
    let result = match test {
        Test::WriteBw | Test::ReadBw | Test::SendBw => {
            bw_client(cfg, size, &cq, &mut eps, &mut progress).map(Measured::Bw)
        }
        _ => lat_client(cfg, size, &cq, &mut eps[0], &mut progress).map(Measured::Lat),
    }
    .map(|m| m.with_cpu(&cpu, if bw { 0 } else { cfg.warmup }));
    progress.finish();
    if cfg.verbose {
        let msgs = match &result {
            Ok(m) => m.iterations() + if bw { 0 } else { cfg.warmup },
            Err(_) => 0,
        };
        eprintln!(
            "[{} {} B client] {}, {}",
            test.name(),
            size,
            stats_line(eps.iter().map(|e| e.qp.stats()), msgs),
            engines_line(dev)
        );
    }
    // Graceful close, then wait for both directions to finish before the buffers go.
    let mut watch = Watch::new(eps.iter().map(|e| e.id).collect());
    for ep in &eps {
        let _ = ep.qp.disconnect();
    }
    watch.wait(dev, Some(Duration::from_secs(5)));
    drop(eps);
    result
}

pub(super) fn next_tag(t: u8) -> u8 {
    if t == 255 { 1 } else { t + 1 }
}

#[cfg(test)]
mod tests {
    use super::{Signals, credit_every};

    #[test]
    fn signals_are_one_in_cq_mod_and_the_last() {
        for cq_mod in [1u64, 3, 16] {
            for last in [None, Some(40u64), Some(37)] {
                for first in [0u64, 1, 15, 16, 17, 30] {
                    let got: Vec<bool> = Signals { cq_mod, last }.from(first).take(25).collect();
                    let want: Vec<bool> = (first..first + 25)
                        .map(|i| (i + 1) % cq_mod == 0 || Some(i + 1) == last)
                        .collect();
                    assert_eq!(got, want, "cq_mod {cq_mod} last {last:?} first {first}");
                }
            }
        }
    }

    /// perftest's period: a third of the receive depth, at least every receive.
    #[test]
    fn the_send_bw_server_credits_every_third_of_its_receive_depth() {
        assert_eq!(credit_every(512), 170);
        assert_eq!(credit_every(16), 5);
        assert_eq!(credit_every(2), 1);
    }
}
