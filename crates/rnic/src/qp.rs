//! Queue pairs: the verbs (`post_send`, `post_recv`, disconnect) and the socket I/O that
//! moves a QP's FPDUs. The protocol decisions are `softrnic_proto::qp::Qp`'s; this module
//! only resolves memory and talks to the kernel.
//!
//! Receive path: the core says what the next octets of the stream are. The I/O layer
//! either reads ahead (up to [`RX_STAGING_LEN`] octets into the QP's staging buffer, then
//! hands them to the core, copying the payload among them into registered memory) or
//! reads exactly (headers and trailers into the staging buffer, payload with `read(2)`
//! straight into the registered memory the core named after its TPT check). Which one,
//! and what each costs, is [`RX_DIRECT_MIN`]'s policy; [`QpStats`] counts the octets of
//! each kind. Transmit path: each FPDU goes out with one `sendmsg(2)` that gathers
//! header, registered memory and trailer (small FPDUs are gathered into a buffer, see
//! [`TX_GATHER_MAX`]).
//!
//! Whoever holds a QP's lock drives it until the socket would block: the engine thread
//! on readiness events, the posting thread for transmission, and, in hybrid progress
//! mode, a thread polling the QP's CQ.

use crate::cq::{Cq, CqShared};
use crate::device::{AsyncEvent, Shared};
use crate::error::{Error, Result};
use crate::region::Region;
use softrnic_proto::qp::{CqSide, QpConfig, QpEvent, QpParams, RxNeed, TxFpdu};
use softrnic_proto::{PdId, QpId, QpState, RecvWr, SendWr};
use softrnic_wire::crc::{crc32c, crc32c_append};
use softrnic_wire::ddp::TAGGED_HEADER_LEN;
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex, Weak};

/// QP creation attributes.
pub struct QpInit<'a> {
    /// CQ for send-queue completions.
    pub send_cq: &'a Cq,
    /// CQ for receive completions.
    pub recv_cq: &'a Cq,
    /// Send queue depth.
    pub sq_depth: usize,
    /// Receive queue depth.
    pub rq_depth: usize,
}

impl<'a> QpInit<'a> {
    /// Send and receive completions both go to `cq`.
    pub fn new(cq: &'a Cq, sq_depth: usize, rq_depth: usize) -> Self {
        QpInit::with_cqs(cq, cq, sq_depth, rq_depth)
    }

    /// Send completions go to `send_cq`, receive completions to `recv_cq`.
    pub fn with_cqs(send_cq: &'a Cq, recv_cq: &'a Cq, sq_depth: usize, rq_depth: usize) -> Self {
        QpInit {
            send_cq,
            recv_cq,
            sq_depth,
            rq_depth,
        }
    }
}

/// Statistics of one QP's I/O.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QpStats {
    /// Payload octets read from the socket straight into registered memory.
    pub rx_direct_bytes: u64,
    /// Payload octets copied in user space: those that came in with a read-ahead (see
    /// [`RX_DIRECT_MIN`]), and those that arrived together with the MPA frame during
    /// connection setup.
    pub rx_copied_bytes: u64,
    /// `read` calls on the socket.
    pub rx_syscalls: u64,
    /// `sendmsg` calls on the socket.
    pub tx_syscalls: u64,
    /// FPDUs sent.
    pub tx_fpdus: u64,
}

/// The receive path's copy policy: an FPDU whose payload is at least this long (32 KiB)
/// is *large*. The receive path has two modes.
///
/// - **Read-ahead** (a new connection, and a stream of small FPDUs): one `read` brings
///   up to [`RX_STAGING_LEN`] octets into the staging buffer, and the core takes
///   headers, trailers and payloads from there; payload is copied (`memcpy`) into
///   registered memory. One system call then serves many small FPDUs.
/// - **Exact** (a stream that carries large FPDUs): headers and trailers are read
///   exactly (a trailer together with the 16 octets that every following FPDU header has
///   at least), and every payload, whatever its length, is read with `read(2)` straight
///   into registered memory. Nothing of the next payload ever lands in the staging
///   buffer, so no payload octet is copied in user space.
///
/// A large payload switches to exact mode as soon as it is recognised: the rest of a
/// large payload whose start came in with a read-ahead is read directly, so at most one
/// staging buffer's worth of it is copied, and only for the first large FPDU after
/// small ones. Exact mode ends after three small FPDUs in a row: the
/// short last FPDU of a large message (e.g. the 556 octets left of a 64 KiB Write after a
/// 64980-octet FPDU) and a control message or small Send between large messages (a Read
/// Request, a rendezvous handshake) do not end it; in exact mode their payloads, small
/// as they are, are read directly too.
///
/// The threshold is one staging buffer: a payload that cannot come in together with its
/// header in one read-ahead needs a second read anyway, and reading it directly then
/// costs at most the exact header read and saves copying 32 KiB or more. Measured here:
/// a `read(2)` costs at least 0.45 us, a `memcpy` from the staging buffer 0.14-0.6 us
/// per 16 KiB and 0.27-1.0 us per 32 KiB (memory in cache or cold), and exact mode
/// spends one extra `read` per tagged FPDU, two per untagged one; end to end (loopback
/// write_bw/send_bw) 16 KiB messages ran at the same bandwidth copied or direct. The
/// numbers are in docs/ARCHITECTURE.md, "Receive copy policy".
pub const RX_DIRECT_MIN: usize = RX_STAGING_LEN;

/// Small FPDUs (payload below [`RX_DIRECT_MIN`], none included) in a row that end exact
/// mode.
const RX_EXACT_SMALL_RUN: u8 = 3;

/// Size of a QP's receive staging buffer (allocated on the first read, kept while the QP
/// lives). It also bounds what a large payload can lose to copying: at most this much of
/// its start comes in with a read-ahead, the rest is read directly.
pub const RX_STAGING_LEN: usize = 32768;

/// Every FPDU header has at least this many octets (MPA length and a tagged DDP header):
/// in exact mode, a trailer is read together with this much of what follows it.
const MIN_FPDU_HEADER: usize = softrnic_wire::mpa::ULPDU_LEN_LEN + TAGGED_HEADER_LEN;

/// Octets read ahead and not yet handed to the protocol core, and the copy policy's
/// state (see [`RX_DIRECT_MIN`]).
#[derive(Default)]
struct Staging {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Exact mode: no read-ahead, every payload read directly.
    exact: bool,
    /// Small FPDUs in a row (up to [`RX_EXACT_SMALL_RUN`]).
    small_run: u8,
    /// The core's placed-octet count when the current FPDU began.
    fpdu_mark: u64,
    /// The core's last need was payload: an internal need now is the trailer.
    after_payload: bool,
}

impl Staging {
    /// Whether to read the next payload piece, `len` octets, straight into memory.
    fn direct(&mut self, core: &softrnic_proto::qp::Qp, len: usize) -> bool {
        let placed = (core.rx_placed_bytes() - self.fpdu_mark) as usize;
        if !self.exact && placed.saturating_add(len) >= RX_DIRECT_MIN {
            // A large payload, perhaps begun in a read-ahead: finish it directly.
            self.exact = true;
            self.small_run = 0;
        }
        self.exact
    }

    /// How many octets to read into the staging buffer for the core's next need.
    fn read_len(&self, need: RxNeed) -> usize {
        match need {
            RxNeed::Internal(n) if self.exact => {
                n + if self.after_payload {
                    MIN_FPDU_HEADER
                } else {
                    0
                }
            }
            _ => RX_STAGING_LEN,
        }
        .clamp(1, RX_STAGING_LEN)
    }

    /// The core consumed internal octets; `core` may have finished an FPDU.
    fn after_internal(&mut self, core: &softrnic_proto::qp::Qp) {
        self.after_payload = false;
        if core.rx_mid_fpdu() {
            return;
        }
        let placed = core.rx_placed_bytes();
        let payload = (placed - self.fpdu_mark) as usize;
        self.fpdu_mark = placed;
        if payload >= RX_DIRECT_MIN {
            self.exact = true;
            self.small_run = 0;
        } else {
            self.small_run = (self.small_run + 1).min(RX_EXACT_SMALL_RUN);
            if self.small_run == RX_EXACT_SMALL_RUN {
                self.exact = false;
            }
        }
    }
}

/// FPDUs at most this long (all framing included) are copied into the connection's
/// transmit buffer and go out together, many per `sendmsg`: small messages then cost a
/// copy of a few hundred octets instead of a system call each. Their work requests
/// complete once copied, as an inline send does on a hardware RNIC: the buffer may be
/// reused at once, and the octets are owned by the RNIC.
pub const TX_GATHER_MAX: usize = 16384;

/// Most octets a connection's transmit buffer holds for gathered FPDUs (it grows to
/// what is used, and is kept while the QP lives).
const TX_BUF_LEN: usize = 64 * 1024;

struct PendingTx {
    fpdu: TxFpdu,
    regions: Vec<Arc<Region>>,
    trailer: [u8; 7],
    trailer_len: usize,
    written: usize,
    total: usize,
}

pub(crate) struct Conn {
    pub(crate) sock: mio::net::TcpStream,
    pending: Option<PendingTx>,
    /// Gathered small FPDUs (see [`TX_GATHER_MAX`]); `tx_sent` octets of it are out.
    tx_buf: Vec<u8>,
    tx_sent: usize,
    scratch: TxFpdu,
    fin_sent: bool,
    eof: bool,
    closed: bool,
}

pub(crate) struct QpInner {
    pub(crate) core: softrnic_proto::qp::Qp,
    pub(crate) conn: Option<Conn>,
    stats: QpStats,
    staging: Staging,
    disconnected: bool,
}

pub(crate) struct QpShared {
    pub(crate) id: QpId,
    pub(crate) pd: PdId,
    dev: Weak<Shared>,
    send_cq: Arc<CqShared>,
    recv_cq: Arc<CqShared>,
    pub(crate) inner: Mutex<QpInner>,
    pub(crate) engine: usize,
}

impl QpShared {
    pub(crate) fn new(id: QpId, pd: PdId, dev: &Arc<Shared>, init: QpInit<'_>) -> Result<QpShared> {
        if init.sq_depth == 0
            || init.rq_depth == 0
            || init.sq_depth > 16384
            || init.rq_depth > 16384
        {
            return Err(Error::InvalidArgument("queue depth must be 1..=16384"));
        }
        for cq in [init.send_cq, init.recv_cq] {
            if !cq.shared.belongs_to(dev) {
                return Err(Error::InvalidArgument("CQ of another device"));
            }
        }
        let core = softrnic_proto::qp::Qp::new(QpConfig {
            id,
            pd,
            sq_depth: init.sq_depth,
            rq_depth: init.rq_depth,
        });
        Ok(QpShared {
            id,
            pd,
            dev: Arc::downgrade(dev),
            send_cq: init.send_cq.shared.clone(),
            recv_cq: init.recv_cq.shared.clone(),
            inner: Mutex::new(QpInner {
                core,
                conn: None,
                stats: QpStats::default(),
                staging: Staging::default(),
                disconnected: false,
            }),
            engine: id.0 as usize % dev.engines.len().max(1),
        })
    }

    pub(crate) fn lock(&self) -> Result<std::sync::MutexGuard<'_, QpInner>> {
        self.inner
            .lock()
            .map_err(|_| Error::BadState("QP lock poisoned"))
    }

    /// Progress if nobody else is; true if anything moved.
    pub(crate) fn try_progress(&self, dev: &Shared) -> bool {
        match self.inner.try_lock() {
            Ok(mut g) => self.progress_locked(&mut g, dev),
            Err(_) => false,
        }
    }

    /// Progress, waiting for the lock.
    pub(crate) fn progress(&self, dev: &Shared) {
        if let Ok(mut g) = self.inner.lock() {
            self.progress_locked(&mut g, dev);
        }
    }

    /// Drives receive and transmit until the socket would block, then delivers
    /// completions and events. Returns whether anything moved.
    ///
    /// [`AsyncEvent::Disconnected`] is posted only after every completion the QP has
    /// produced (the flushes included) is in its CQ, so a consumer that sees it can
    /// poll the CQ once and find everything.
    pub(crate) fn progress_locked(&self, g: &mut QpInner, dev: &Shared) -> bool {
        let mut moved = false;
        let mut disconnected = false;
        if g.conn.is_some() {
            // Transmit first: a request just posted leaves before the receive path's
            // read (often an empty one) is paid; what the receive path queues (Read
            // Responses, Terminates) goes out in the second pass.
            moved |= self.transmit(g, dev);
            if self.receive(g, dev) {
                moved = true;
                self.transmit(g, dev);
            }
            disconnected = self.close_if_done(g, dev);
        }
        self.deliver(g, dev);
        if disconnected {
            dev.post_event(AsyncEvent::Disconnected { qp: self.id });
        }
        moved
    }

    fn receive(&self, g: &mut QpInner, dev: &Shared) -> bool {
        let QpInner {
            core,
            conn,
            stats,
            staging,
            ..
        } = g;
        let Some(conn) = conn.as_mut() else {
            return false;
        };
        if conn.closed {
            return false;
        }
        let fd = conn.sock.as_raw_fd();
        let mut moved = false;
        loop {
            // Octets read ahead go first.
            if staging.start < staging.end {
                let (start, end) = (staging.start, staging.end);
                let buf = std::mem::take(&mut staging.buf);
                let fed = feed(core, stats, staging, dev, &buf[start..end]);
                staging.buf = buf;
                let used = match fed {
                    Ok(used) => used,
                    Err(()) => {
                        // A placement failed: the QP is in error (the connection closes).
                        moved = true;
                        break;
                    }
                };
                staging.start += used;
                moved |= used > 0;
                if used == 0 || core.rx_need() == RxNeed::Stopped {
                    break;
                }
                continue;
            }
            if conn.eof {
                break;
            }
            let r = match core.rx_need() {
                RxNeed::Stopped => break,
                RxNeed::Place(chunk) if staging.direct(core, chunk.len) => {
                    let Some(region) = dev.region(chunk.region) else {
                        // The region was deregistered between the TPT check and the
                        // placement: the QP cannot place this payload, and stalling
                        // here would hang the connection. Go to error (as the transmit
                        // path does when a region vanishes); the connection closes.
                        core.to_error();
                        moved = true;
                        break;
                    };
                    match region.io_slice(chunk.offset as usize, chunk.len) {
                        Ok(slice) => {
                            stats.rx_syscalls += 1;
                            // SAFETY: `slice` is a bounds-checked view of live region
                            // memory (the Arc keeps it alive); `read(2)` writes at most
                            // `slice.len()` octets through the raw pointer and no Rust
                            // reference to that memory exists during the call.
                            let n = unsafe { libc::read(fd, slice.as_ptr().cast(), slice.len()) };
                            if n < 0 {
                                Err(io::Error::last_os_error())
                            } else {
                                let n = n as usize;
                                if n > 0 {
                                    core.rx_placed_with(n, |crc| {
                                        // SAFETY: the first `n` octets were just
                                        // written by `read`; the shared view lives
                                        // only for this CRC computation.
                                        crc32c_append(crc, unsafe { &slice.as_slice()[..n] })
                                    });
                                    stats.rx_direct_bytes += n as u64;
                                    staging.after_payload = true;
                                }
                                Ok(n)
                            }
                        }
                        Err(_) => {
                            // Cannot happen for a chunk the TPT checked (the region's
                            // bounds are the TPT entry's); never stall, never drop.
                            debug_assert!(false, "placement outside its region: {chunk:?}");
                            core.to_error();
                            moved = true;
                            break;
                        }
                    }
                }
                // Read ahead, or (in exact mode) a header or trailer exactly.
                need => {
                    let want = staging.read_len(need);
                    if staging.buf.len() < RX_STAGING_LEN {
                        staging.buf.resize(RX_STAGING_LEN, 0);
                    }
                    stats.rx_syscalls += 1;
                    match (&conn.sock).read(&mut staging.buf[..want]) {
                        Ok(n) => {
                            staging.start = 0;
                            staging.end = n;
                            Ok(n)
                        }
                        Err(e) => Err(e),
                    }
                }
            };
            match r {
                Ok(0) => {
                    conn.eof = true;
                    moved = true;
                    if core.rx_mid_fpdu() {
                        // The stream ended inside an FPDU: it was lost (a peer that
                        // died mid-transfer), not closed between messages.
                        self.connection_lost(conn, core, dev, io::ErrorKind::UnexpectedEof);
                    }
                    break;
                }
                Ok(_) => moved = true,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.connection_lost(conn, core, dev, e.kind());
                    moved = true;
                    break;
                }
            }
        }
        moved
    }

    fn connection_lost(
        &self,
        conn: &mut Conn,
        core: &mut softrnic_proto::qp::Qp,
        dev: &Shared,
        error: io::ErrorKind,
    ) {
        conn.closed = true;
        dev.post_event(AsyncEvent::ConnectionLost { qp: self.id, error });
        core.transport_closed();
    }

    fn transmit(&self, g: &mut QpInner, dev: &Shared) -> bool {
        let QpInner {
            core, conn, stats, ..
        } = g;
        let Some(conn) = conn.as_mut() else {
            return false;
        };
        if conn.closed {
            return false;
        }
        let fd = conn.sock.as_raw_fd();
        let mut moved = false;
        loop {
            // 1. The next FPDU: small ones are gathered, a large one waits its turn.
            if conn.pending.is_none() {
                let mut f = std::mem::take(&mut conn.scratch);
                let mut has = core.poll_transmit(&mut f);
                if !has {
                    if let Ok(mut t) = dev.tpt.lock() {
                        core.run_local_ops(&mut t);
                    }
                    has = core.poll_transmit(&mut f);
                }
                if has {
                    let Some(p) = prepare(f, dev) else {
                        // A region vanished under a queued request: the QP cannot
                        // continue sending correct data.
                        core.to_error();
                        break;
                    };
                    let queued = conn.tx_buf.len() - conn.tx_sent;
                    if p.total <= TX_GATHER_MAX && queued + p.total <= TX_BUF_LEN {
                        if conn.tx_sent == conn.tx_buf.len() {
                            conn.tx_buf.clear();
                            conn.tx_sent = 0;
                        }
                        if !gather(&p, &mut conn.tx_buf) {
                            core.to_error();
                            break;
                        }
                        conn.scratch = p.fpdu;
                        stats.tx_fpdus += 1;
                        core.transmit_done();
                        moved = true;
                        continue;
                    }
                    conn.pending = Some(p);
                } else {
                    conn.scratch = f;
                }
            }
            // 2. Gathered octets go first: they were queued before the pending FPDU.
            if conn.tx_sent < conn.tx_buf.len() {
                stats.tx_syscalls += 1;
                // SAFETY: the pointer and length describe initialised octets of
                // `tx_buf`, which is not touched during the call.
                let r = unsafe {
                    libc::send(
                        fd,
                        conn.tx_buf[conn.tx_sent..].as_ptr().cast(),
                        conn.tx_buf.len() - conn.tx_sent,
                        libc::MSG_NOSIGNAL,
                    )
                };
                if r >= 0 {
                    conn.tx_sent += r as usize;
                    moved = true;
                    continue;
                }
                match io::Error::last_os_error() {
                    e if e.kind() == io::ErrorKind::WouldBlock => break,
                    e if e.kind() == io::ErrorKind::Interrupted => continue,
                    e => {
                        self.connection_lost(conn, core, dev, e.kind());
                        moved = true;
                        break;
                    }
                }
            }
            // 3. A large FPDU, gathered from registered memory by the kernel.
            let Some(p) = conn.pending.as_mut() else {
                break;
            };
            stats.tx_syscalls += 1;
            match send_pending(fd, p) {
                Ok(n) => {
                    p.written += n;
                    moved = true;
                    if p.written == p.total {
                        if let Some(p) = conn.pending.take() {
                            conn.scratch = p.fpdu;
                        }
                        stats.tx_fpdus += 1;
                        core.transmit_done();
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.connection_lost(conn, core, dev, e.kind());
                    moved = true;
                    break;
                }
            }
        }
        moved
    }

    fn close_if_done(&self, g: &mut QpInner, dev: &Shared) -> bool {
        let QpInner {
            core,
            conn,
            disconnected,
            ..
        } = g;
        let Some(c) = conn.as_mut() else {
            return false;
        };
        let flushed = c.pending.is_none() && c.tx_sent == c.tx_buf.len();
        if core.terminate_sent() && !c.closed && flushed {
            // Terminate is out: close the connection and finish going to error.
            let _ = c.sock.shutdown(std::net::Shutdown::Both);
            c.closed = true;
            core.transport_closed();
        }
        if c.eof && core.state() == QpState::Rts {
            // The peer closed first: finish what is queued, then close our side too.
            core.close();
        }
        if core.ready_to_fin() && !c.fin_sent && flushed {
            let _ = c.sock.shutdown(std::net::Shutdown::Write);
            c.fin_sent = true;
        }
        let done = c.closed || (c.eof && (c.fin_sent || core.state() != QpState::Closing));
        if done && core.state() != QpState::Error {
            core.transport_closed();
        }
        if (c.closed || (c.eof && c.fin_sent) || (core.state() == QpState::Error && flushed))
            && !*disconnected
        {
            *disconnected = true;
            // Whatever ended the QP (a local error, a Terminate received, a region gone,
            // a lost stream), the connection closes now, so the peer learns and flushes
            // too instead of waiting on a silent connection. (After a graceful close,
            // a reset or our own Terminate this changes nothing.)
            let _ = c.sock.shutdown(std::net::Shutdown::Both);
            if let Some(e) = dev.engines.get(self.engine) {
                e.deregister(&mut c.sock);
            }
            c.closed = true;
            return true;
        }
        false
    }

    /// Closes a connection's socket for good: the engine forgets it, and if the
    /// connection was still open, it is reset (zero linger time: close sends RST).
    fn drop_conn(&self, mut c: Conn, dev: &Shared) {
        if !c.closed {
            set_linger_zero(&c.sock);
        }
        if let Some(e) = dev.engines.get(self.engine) {
            e.deregister(&mut c.sock);
        }
        drop(c);
    }

    fn deliver(&self, g: &mut QpInner, dev: &Shared) {
        while let Some(e) = g.core.poll_event() {
            if let QpEvent::Fatal { cause, remote } = e {
                dev.post_event(AsyncEvent::QpFatal {
                    qp: self.id,
                    cause,
                    remote,
                });
            }
        }
        while let Some((side, c)) = g.core.poll_completion() {
            match side {
                CqSide::Send => self.send_cq.push(c, false),
                CqSide::Recv => self.recv_cq.push(c, c.solicited),
            }
        }
    }

    /// Connects the QP to an established MPA stream: parameters, leftover octets that
    /// arrived with the MPA frame, and the socket, handed to the engine.
    pub(crate) fn attach(
        &self,
        dev: &Shared,
        sock: std::net::TcpStream,
        params: QpParams,
        leftover: &[u8],
    ) -> Result<()> {
        sock.set_nonblocking(true)?;
        sock.set_nodelay(true)?;
        let mut g = self.lock()?;
        g.core.connect(params)?;
        if !leftover.is_empty() {
            // These octets were read together with the MPA frame.
            let QpInner {
                core,
                stats,
                staging,
                ..
            } = &mut *g;
            // A failed placement leaves the QP in error; the first progress closes it.
            let _ = feed(core, stats, staging, dev, leftover);
        }
        let mut sock = mio::net::TcpStream::from_std(sock);
        let engine = dev
            .engines
            .get(self.engine)
            .ok_or(Error::BadState("no engine"))?;
        engine.register(&mut sock, self.id)?;
        g.conn = Some(Conn {
            sock,
            pending: None,
            tx_buf: Vec::new(),
            tx_sent: 0,
            scratch: TxFpdu::default(),
            fin_sent: false,
            eof: false,
            closed: false,
        });
        dev.post_event(AsyncEvent::Established { qp: self.id });
        self.progress_locked(&mut g, dev);
        Ok(())
    }
}

/// Hands octets read into user space to the protocol core, copying the payload among
/// them into registered memory; returns how many it took (fewer when receiving has
/// stopped). A payload that cannot be placed (its region was deregistered after the
/// TPT check) moves the QP to error: `Err`, and nothing after it is taken.
fn feed(
    core: &mut softrnic_proto::qp::Qp,
    stats: &mut QpStats,
    staging: &mut Staging,
    dev: &Shared,
    data: &[u8],
) -> std::result::Result<usize, ()> {
    let Ok(mut t) = dev.tpt.lock() else {
        return Ok(0);
    };
    let mut at = 0;
    while at < data.len() {
        match core.rx_need() {
            RxNeed::Stopped => break,
            RxNeed::Internal(n) => {
                let k = n.min(data.len() - at);
                core.rx_buffer()[..k].copy_from_slice(&data[at..at + k]);
                at += k;
                core.rx_filled(k, &mut t);
                staging.after_internal(core);
            }
            RxNeed::Place(c) => {
                let k = c.len.min(data.len() - at);
                let bytes = &data[at..at + k];
                match dev
                    .region(c.region)
                    .map(|r| r.write(c.offset as usize, bytes))
                {
                    Some(Ok(())) => {}
                    Some(Err(e)) => {
                        // The TPT entry's bounds are the region's: cannot happen.
                        debug_assert!(false, "placement outside its region: {e:?}");
                        core.to_error();
                        return Err(());
                    }
                    None => {
                        // Deregistered after the TPT check: the payload has nowhere to
                        // go. Dropping it would complete a receive that was never
                        // placed; the QP goes to error instead.
                        core.to_error();
                        return Err(());
                    }
                }
                stats.rx_copied_bytes += k as u64;
                at += k;
                core.rx_placed(bytes);
                staging.after_payload = true;
            }
        }
    }
    Ok(at)
}

fn prepare(fpdu: TxFpdu, dev: &Shared) -> Option<PendingTx> {
    let mut regions = Vec::with_capacity(fpdu.chunks.len());
    for c in &fpdu.chunks {
        let r = dev.region(c.region)?;
        r.check(c.offset as usize, c.len).ok()?;
        regions.push(r);
    }
    let mut crc = 0;
    if fpdu.crc {
        crc = crc32c(fpdu.header_bytes());
        for (c, r) in fpdu.chunks.iter().zip(&regions) {
            let s = r.io_slice(c.offset as usize, c.len).ok()?;
            // SAFETY: a bounds-checked view of live region memory, read only for the
            // CRC; the program may change these octets concurrently only by breaking
            // the rule not to touch a buffer while its send is outstanding, which can
            // at worst produce a wrong CRC (the peer then terminates), never UB here
            // beyond that documented race.
            crc = crc32c_append(crc, unsafe { s.as_slice() });
        }
        crc = crc32c_append(crc, &[0u8; 3][..fpdu.pad_len()]);
    }
    let (trailer, trailer_len) = fpdu.trailer(crc);
    let total = fpdu.wire_len();
    Some(PendingTx {
        fpdu,
        regions,
        trailer,
        trailer_len,
        written: 0,
        total,
    })
}

/// Appends a whole FPDU (header, payload copied from registered memory, pad and CRC)
/// to `out`; false if a region no longer holds the payload's range.
fn gather(p: &PendingTx, out: &mut Vec<u8>) -> bool {
    out.extend_from_slice(p.fpdu.header_bytes());
    for (c, r) in p.fpdu.chunks.iter().zip(&p.regions) {
        let at = out.len();
        out.resize(at + c.len, 0);
        if r.read(c.offset as usize, &mut out[at..]).is_err() {
            return false;
        }
    }
    let pad = p.fpdu.pad_len();
    out.extend_from_slice(&p.trailer[..p.trailer_len.min(pad + 4)]);
    true
}

/// Writes as much of a pending FPDU as the socket takes.
fn send_pending(fd: i32, p: &PendingTx) -> io::Result<usize> {
    let mut iov: [libc::iovec; softrnic_proto::MAX_SGE + 3] = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; softrnic_proto::MAX_SGE + 3];
    let mut n = 0;
    let mut skip = p.written;
    let mut push = |ptr: *const u8, len: usize, n: &mut usize| {
        if skip >= len {
            skip -= len;
            return;
        }
        iov[*n] = libc::iovec {
            // SAFETY: `skip < len`, so the pointer stays inside the same buffer.
            iov_base: unsafe { ptr.add(skip) } as *mut libc::c_void,
            iov_len: len - skip,
        };
        skip = 0;
        *n += 1;
    };
    let header = p.fpdu.header_bytes();
    push(header.as_ptr(), header.len(), &mut n);
    for (c, r) in p.fpdu.chunks.iter().zip(&p.regions) {
        if let Ok(s) = r.io_slice(c.offset as usize, c.len) {
            push(s.as_ptr(), s.len(), &mut n);
        }
    }
    let pad = p.fpdu.pad_len();
    push(p.trailer.as_ptr(), p.trailer_len.min(pad + 4), &mut n);
    // SAFETY: a zeroed msghdr is a valid empty header; we then point it at `iov`.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = n as _;
    // SAFETY: every iovec points into memory that stays alive and unmoved for the call
    // (the FPDU header and trailer are owned by `p`; region memory is kept alive by the
    // Arcs in `p.regions`); the kernel only reads from them. MSG_NOSIGNAL: a closed
    // peer is an EPIPE error, not a signal.
    let r = unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// A queue pair.
pub struct Qp {
    pub(crate) shared: Arc<QpShared>,
}

impl std::fmt::Debug for Qp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Qp({})", self.shared.id.0)
    }
}

impl Qp {
    /// Its number.
    pub fn id(&self) -> QpId {
        self.shared.id
    }

    /// Its protection domain.
    pub fn pd(&self) -> PdId {
        self.shared.pd
    }

    pub(crate) fn shared_dev_is(&self, dev: &Arc<Shared>) -> bool {
        std::ptr::eq(self.shared.dev.as_ptr(), Arc::as_ptr(dev))
    }

    /// Current state.
    pub fn state(&self) -> QpState {
        self.shared
            .lock()
            .map(|g| g.core.state())
            .unwrap_or(QpState::Error)
    }

    /// I/O statistics.
    pub fn stats(&self) -> QpStats {
        self.shared.lock().map(|g| g.stats).unwrap_or_default()
    }

    /// The negotiated parameters.
    pub fn params(&self) -> QpParams {
        self.shared
            .lock()
            .map(|g| *g.core.params())
            .unwrap_or_default()
    }

    /// The Terminate cause and whether the peer sent it, once the QP failed.
    pub fn fatal_cause(&self) -> Option<(softrnic_wire::TerminateCause, bool)> {
        self.shared.lock().ok()?.core.fatal_cause()
    }

    fn dev(&self) -> Result<Arc<Shared>> {
        self.shared
            .dev
            .upgrade()
            .ok_or(Error::BadState("device closed"))
    }

    /// Posts a receive work request.
    pub fn post_recv(&self, wr: RecvWr) -> Result<()> {
        let dev = self.dev()?;
        let mut g = self.shared.lock()?;
        {
            let t = dev
                .tpt
                .lock()
                .map_err(|_| Error::BadState("TPT poisoned"))?;
            g.core.post_recv(wr, &t)?;
        }
        if g.core.state() == QpState::Error {
            // A bad receive SGE is a local error: close the connection now (nothing
            // else may wake this QP), so the peer learns.
            self.shared.progress_locked(&mut g, &dev);
        } else {
            self.shared.deliver(&mut g, &dev);
        }
        Ok(())
    }

    /// Posts a send-queue work request and starts transmitting it on this thread.
    pub fn post_send(&self, wr: SendWr) -> Result<()> {
        self.post_send_batch(std::iter::once(wr))
    }

    /// Posts a chain of send-queue work requests, transmitting once after all are queued
    /// (one doorbell for the batch).
    pub fn post_send_batch(&self, wrs: impl IntoIterator<Item = SendWr>) -> Result<()> {
        let dev = self.dev()?;
        let mut g = self.shared.lock()?;
        {
            let mut t = dev
                .tpt
                .lock()
                .map_err(|_| Error::BadState("TPT poisoned"))?;
            for wr in wrs {
                g.core.post_send(wr, &mut t)?;
            }
        }
        self.shared.progress_locked(&mut g, &dev);
        Ok(())
    }

    /// Graceful close: queued sends finish, then FIN; the QP goes to error (flushing what
    /// is left) once the peer closes too. [`crate::AsyncEvent::Disconnected`] follows.
    pub fn disconnect(&self) -> Result<()> {
        let dev = self.dev()?;
        let mut g = self.shared.lock()?;
        g.core.close();
        self.shared.progress_locked(&mut g, &dev);
        Ok(())
    }

    /// Abortive close: the connection is reset (RST) and all outstanding work flushes.
    pub fn abort(&self) -> Result<()> {
        let dev = self.dev()?;
        let mut g = self.shared.lock()?;
        g.core.to_error();
        let mut disconnected = false;
        if let Some(c) = g.conn.take() {
            // Closing the socket with a zero linger time sends RST, not FIN (a
            // `shutdown` would send FIN, and the peer would take it for a graceful
            // close). The engine forgets the socket before it is closed.
            self.shared.drop_conn(c, &dev);
            disconnected = !std::mem::replace(&mut g.disconnected, true);
        }
        // The flushes reach the CQ before Disconnected is posted.
        self.shared.progress_locked(&mut g, &dev);
        if disconnected {
            dev.post_event(AsyncEvent::Disconnected { qp: self.shared.id });
        }
        Ok(())
    }
}

/// Makes close send RST instead of FIN.
fn set_linger_zero(s: &mio::net::TcpStream) {
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a valid socket fd and a correctly sized, initialised `linger` value.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&l as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        if let Some(dev) = self.shared.dev.upgrade() {
            if let Ok(mut g) = self.shared.inner.lock()
                && let Some(c) = g.conn.take()
            {
                // Destroying a connected QP is an abortive close: RST.
                self.shared.drop_conn(c, &dev);
            }
            if let Ok(mut q) = dev.qps.lock() {
                q.remove(&self.shared.id.0);
            }
        }
    }
}
