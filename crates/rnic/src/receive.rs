//! A QP's receive path on a byte stream: read the stream, staging what is read ahead,
//! and feed the protocol core, placing payload into registered memory either by copying
//! it out of the staging buffer or by reading it there directly (the copy policy,
//! [`RX_DIRECT_MIN`]). [`QpStats`] counts the octets of each kind.

use crate::buf_pool;
use crate::close::connection_lost;
use crate::device::Shared;
use crate::qp::{Conn, QpStats};
use crate::region_table::LastRegion;
use crate::srq::{SrqShared, SrqSource};
use softrnic_proto::QpId;
use softrnic_proto::qp::{Qp as Core, Queued, RecvHandoff, RxCtx, RxNeed};
use softrnic_wire::crc::crc32c_append;
use softrnic_wire::ddp::TAGGED_HEADER_LEN;
use std::io;

mod quick;
pub(crate) use quick::{Quick, receive_applying, receive_claimed};

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

/// Size of a QP's receive staging buffer. The QP holds one only while it reads: it takes
/// it from the driving thread's pool (`buf_pool`) for a read-ahead and gives it back once
/// the protocol core has taken every octet in it, so an idle QP holds none. It also
/// bounds what a large payload can lose to copying: at most this much of its start
/// comes in with a read-ahead, the rest is read directly.
pub const RX_STAGING_LEN: usize = 32768;

/// Every FPDU header has at least this many octets (MPA length and a tagged DDP header):
/// in exact mode, a trailer is read together with this much of what follows it.
const MIN_FPDU_HEADER: usize = softrnic_wire::mpa::ULPDU_LEN_LEN + TAGGED_HEADER_LEN;

/// Octets read ahead and not yet handed to the protocol core, and the copy policy's
/// state (see [`RX_DIRECT_MIN`]).
#[derive(Default)]
pub(crate) struct Staging {
    /// The staging buffer while the QP holds one (empty, unallocated, when not): octets
    /// `start..end` are read and not yet taken by the core.
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// What [`feed`] works on, apart from the buffer: so the octets read are fed where
    /// they lie, a slice of `buf` beside a borrow of this (moving the buffer out and
    /// back around every read cost a message about 10 instructions between its
    /// `recvfrom` and the core).
    pub(crate) fed: FeedState,
    /// A polling consumer holds the socket: the buffer stays with the QP between its
    /// passes (see `QpShared::claim`).
    pub(crate) keep: bool,
    /// The last read found the stream empty: in exact mode the next one is preceded
    /// by [`Transport::yield_before_reread`](crate::transport::Transport).
    waited: bool,
    /// A read the claimed pass ([`quick`]) made that ended the stream or failed: the
    /// general receive path takes it as its own next read's result.
    pending: Option<io::Result<usize>>,
}

/// The copy policy's state and the placement's memo, which [`feed`] keeps up to date.
#[derive(Default)]
pub(crate) struct FeedState {
    /// Exact mode: no read-ahead, every payload read directly.
    exact: bool,
    /// Small FPDUs in a row (up to [`RX_EXACT_SMALL_RUN`]).
    small_run: u8,
    /// The core's placed-octet count when the current FPDU began.
    fpdu_mark: u64,
    /// The core's last need was payload: an internal need now is the trailer.
    after_payload: bool,
    /// The region the last payload went to, kept across reads (a ping-pong's Writes
    /// all land in one).
    region: LastRegion,
}

impl FeedState {
    /// Whether to read the next payload piece, `len` octets, straight into memory.
    fn direct(&mut self, core: &Core, len: usize) -> bool {
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

    /// `fpdus` whole FPDUs were taken from a read-ahead, each with a payload shorter
    /// than the staging buffer, so shorter than [`RX_DIRECT_MIN`]: what
    /// [`FeedState::after_internal`] does after each of them, at once.
    fn after_small_run(&mut self, core: &Core, fpdus: usize) {
        self.after_payload = false;
        self.fpdu_mark = core.rx_placed_bytes();
        let run = (usize::from(self.small_run) + fpdus).min(usize::from(RX_EXACT_SMALL_RUN));
        self.small_run = run as u8;
        if self.small_run == RX_EXACT_SMALL_RUN {
            self.exact = false;
        }
    }

    /// The core consumed internal octets; `core` may have finished an FPDU.
    fn after_internal(&mut self, core: &Core) {
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

impl Staging {
    /// Octets of buffer the QP holds now.
    pub(crate) fn held(&self) -> usize {
        self.buf.capacity()
    }

    /// Whether the stream carries large FPDUs (exact mode, see [`RX_DIRECT_MIN`]): a pass
    /// then ends at a short read about once an FPDU while the stream flows.
    pub(crate) fn streams_large(&self) -> bool {
        self.fed.exact
    }

    /// Gives the buffer back to the pool unless it holds octets the core has not taken
    /// (an SRQ holding the stream back): those are the stream's, and must stay. A core
    /// that stopped receiving will never take them. Kept while claimed (`keep`).
    pub(crate) fn release_if_drained(&mut self, core: &Core) {
        let drained = self.start == self.end || core.rx_need() == RxNeed::Stopped;
        if drained && !self.keep && !self.buf.is_empty() {
            buf_pool::give_staging(std::mem::take(&mut self.buf));
            self.start = 0;
            self.end = 0;
        }
    }
}

/// The QP a receive pass drives and the engine serving its socket: a Read Request's
/// answer is transmitted from inside the pass (see [`answer_reads`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Driven {
    pub(crate) qp: QpId,
    pub(crate) engine: usize,
}

/// Reads the connection and feeds the core until the stream would block (or, over a
/// kernel socket, a read comes back short: `PolledTransport::pass_drained`), ends, or
/// the core stops receiving. Returns whether anything moved.
pub(crate) fn receive(
    at: Driven,
    core: &mut Core,
    conn: &mut Conn,
    stats: &mut QpStats,
    staging: &mut Staging,
    dev: &Shared,
    srq: Option<&SrqShared>,
) -> bool {
    if core.transport_closed() {
        staging.release_if_drained(core);
        return false;
    }
    conn.transport.begin_pass();
    let moved = receive_stream(at, core, conn, stats, staging, dev, srq);
    staging.release_if_drained(core);
    moved
}

/// [`receive`], with the staging buffer taken as it is needed.
fn receive_stream(
    at: Driven,
    core: &mut Core,
    conn: &mut Conn,
    stats: &mut QpStats,
    staging: &mut Staging,
    dev: &Shared,
    srq: Option<&SrqShared>,
) -> bool {
    let qp = at.qp;
    let mut moved = false;
    if core.rx_need() == RxNeed::Wait {
        // Held back by the SRQ (back-pressure): ask again; still held back, the
        // socket stays unread until the SRQ wakes this QP.
        let mut src = srq.map(|s| SrqSource { srq: s, dev });
        core.rx_retry(&mut ctx_for(dev, &mut src));
        if core.rx_need() == RxNeed::Wait {
            return false;
        }
        moved = true;
    }
    // A marked stream asks for at most 512 octets at a time (a marker sits between):
    // it is always read ahead, never piece by piece into memory.
    let marked = core.params().markers_rx;
    loop {
        // Octets read ahead go first.
        if staging.start < staging.end {
            let data = &staging.buf[staging.start..staging.end];
            let fed = feed(core, stats, &mut staging.fed, dev, srq, data, &mut Queued);
            let used = match fed {
                Ok(fed) => fed.used,
                Err(()) => {
                    // A placement failed: the QP is in error (the connection closes).
                    moved = true;
                    break;
                }
            };
            staging.start += used;
            moved |= used > 0;
            answer_reads(at, core, conn, stats, dev);
            if used == 0 || matches!(core.rx_need(), RxNeed::Stopped | RxNeed::Wait) {
                break;
            }
            continue;
        }
        // A read the claimed pass made (an end or a failure) is this one's result.
        let r = if let Some(r) = staging.pending.take() {
            r
        } else {
            if core.peer_finished() || conn.transport.pass_drained() {
                break;
            }
            if staging.fed.exact && staging.waited && conn.transport.yield_before_reread() {
                stats.rx_idle_yields += 1;
            }
            match core.rx_need() {
                RxNeed::Stopped | RxNeed::Wait => break,
                RxNeed::Place(chunk) if !marked && staging.fed.direct(core, chunk.len) => {
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
                            // The payload's last piece: its trailer and the least of the
                            // next header come in the same call (`readv`), into staging.
                            let tail = core
                                .rx_trailer_after_place()
                                .map(|t| (t + MIN_FPDU_HEADER).min(RX_STAGING_LEN));
                            let r = match tail {
                                Some(t) => {
                                    if staging.buf.is_empty() {
                                        staging.buf = buf_pool::take_staging();
                                    }
                                    conn.transport.read_into_then(&slice, &mut staging.buf[..t])
                                }
                                None => conn.transport.read_into(&slice),
                            };
                            if let Ok(n) = r
                                && n > 0
                            {
                                let placed = n.min(chunk.len);
                                core.rx_placed_with(placed, |crc| {
                                    // SAFETY: the first `placed` octets were just written
                                    // by the read; the shared view lives only for this CRC
                                    // computation.
                                    crc32c_append(crc, unsafe { &slice.as_slice()[..placed] })
                                });
                                stats.rx_direct_bytes += placed as u64;
                                staging.fed.after_payload = true;
                                // What came after the payload is the stream's next octets.
                                staging.start = 0;
                                staging.end = n - placed;
                            }
                            r
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
                    let want = if marked {
                        RX_STAGING_LEN
                    } else {
                        staging.fed.read_len(need)
                    };
                    if staging.buf.is_empty() {
                        staging.buf = buf_pool::take_staging();
                    }
                    stats.rx_syscalls += 1;
                    match conn.transport.read_polled(&mut staging.buf[..want]) {
                        Ok(n) => {
                            staging.start = 0;
                            staging.end = n;
                            Ok(n)
                        }
                        Err(e) => Err(e),
                    }
                }
            }
        };
        match r {
            Ok(0) => {
                core.peer_fin();
                moved = true;
                if core.rx_mid_fpdu() {
                    // The stream ended inside an FPDU: it was lost (a peer that
                    // died mid-transfer), not closed between messages.
                    connection_lost(qp, core, dev, io::ErrorKind::UnexpectedEof);
                }
                break;
            }
            Ok(_) => {
                staging.waited = false;
                moved = true;
            }
            Err(e) if would_block(&e) => {
                staging.waited = true;
                break;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                connection_lost(qp, core, dev, e.kind());
                moved = true;
                break;
            }
        }
    }
    moved
}

/// Whether a read's error says the stream is empty for now: the kernel's `EAGAIN` (a
/// busy-polling consumer's every empty poll) is told from its code, a few instructions,
/// before `io::Error::kind`, a call that maps every errno (16 instructions).
#[inline]
fn would_block(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EAGAIN) || e.kind() == io::ErrorKind::WouldBlock
}

/// Transmits at once when the octets just fed finished a Read Request whose response
/// has not begun, instead of at the end of the pass: a pass reads until the stream
/// would block, so the response would otherwise wait behind every Write read after its
/// request (up to the socket's whole receive buffer, and more while the peer keeps
/// sending). The core queues a response only once its request's FPDU is whole, CRC
/// checked (`Receiver::deliver`). The order on the wire is the transmit path's as always (RFC 5040: a
/// response goes out only after its request was delivered, here after every message
/// before it in the stream; responses in the order of their requests; IRD enforced
/// when the request was taken). A socket known to be full, or a QP waiting for its turn
/// to send, is left to the pass's end and the readiness event.
///
/// Always inline, with the transmit out of line ([`answer_now`]): the test is one
/// load and compare, and without a Read Request in the read (a ping-pong's Write or
/// Send) the whole call was a call of its own (about 10 instructions natively between
/// `feed`'s return and the reply's post).
#[inline(always)]
fn answer_reads(at: Driven, core: &mut Core, conn: &mut Conn, stats: &mut QpStats, dev: &Shared) {
    if core.read_response_unstarted() {
        answer_now(at, core, conn, stats, dev);
    }
}

/// [`answer_reads`]' transmit, unless the socket is known to be full.
#[inline(never)]
fn answer_now(at: Driven, core: &mut Core, conn: &mut Conn, stats: &mut QpStats, dev: &Shared) {
    if !conn.tx.waits_for_room() {
        stats.rx_read_answers += 1;
        crate::transmit::transmit(at.qp, at.engine, core, conn, stats, dev);
    }
}

/// The receive context: the device's TPT, and the QP's SRQ if it has one.
fn ctx_for<'a>(dev: &'a Shared, src: &'a mut Option<SrqSource<'a>>) -> RxCtx<'a> {
    match src {
        Some(s) => RxCtx::with_srq(&dev.tpt, s),
        None => RxCtx::new(&dev.tpt),
    }
}

/// What [`feed`] took.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fed {
    /// Octets taken.
    pub(crate) used: usize,
    /// The core's simple path took them all (whole plain Writes and Sends on the QP's
    /// own receive queue, `Qp::rx_take_simple`): the core changed only its stream
    /// position, its receive queue and the completions and events it released;
    /// nothing was queued to send and the state, the close and its timer are as before.
    pub(crate) simple: bool,
}

/// Hands octets read into user space to the protocol core, copying the payload among
/// them into registered memory; returns how many it took (fewer when receiving has
/// stopped). A payload that cannot be placed (its region was deregistered after the
/// TPT check) moves the QP to error: `Err`, and nothing after it is taken.
///
/// Inline, so that the SRQ's test is the caller's and the QP without one (a claimed
/// ping-pong's) calls [`feed_own_rq`] with one argument fewer: its call was 12 of the
/// 41 instructions from a message's `recvfrom` to this function (session 29).
#[inline]
pub(crate) fn feed(
    core: &mut Core,
    stats: &mut QpStats,
    staging: &mut FeedState,
    dev: &Shared,
    srq: Option<&SrqShared>,
    data: &[u8],
    to: &mut impl RecvHandoff,
) -> std::result::Result<Fed, ()> {
    match srq {
        None => feed_own_rq(core, stats, staging, dev, data, to),
        Some(_) => feed_general(core, stats, staging, dev, srq, data, 0).map(|used| Fed {
            used,
            simple: false,
        }),
    }
}

/// [`feed`] for a QP on its own receive queue.
fn feed_own_rq(
    core: &mut Core,
    stats: &mut QpStats,
    staging: &mut FeedState,
    dev: &Shared,
    data: &[u8],
    to: &mut impl RecvHandoff,
) -> std::result::Result<Fed, ()> {
    let mut at = 0;
    // Every whole FPDU in octets no longer than the staging buffer is small (see
    // `after_small_run`).
    if data.len() <= RX_DIRECT_MIN {
        // A read-ahead of simple Writes and Sends (a ping-pong's, a small-message
        // stream's) is taken here without the general run's set-up; whatever they
        // leave (a control message, a cut FPDU, a fault) the loop below takes.
        let before = core.rx_placed_bytes();
        let run = core.rx_take_simple_to(
            data,
            &dev.tpt,
            &mut |c, bytes| {
                // A region gone after the TPT check refuses: the loop below meets the
                // same FPDU and fails the QP.
                staging
                    .region
                    .get(dev, c.region)
                    .is_some_and(|r| r.write(c.offset as usize, bytes).is_ok())
            },
            to,
        );
        if run.fpdus > 0 {
            stats.rx_copied_bytes += core.rx_placed_bytes() - before;
            staging.after_payload = false;
            staging.after_small_run(core, run.fpdus);
            at = run.taken;
            if at == data.len() {
                return Ok(Fed {
                    used: at,
                    simple: true,
                });
            }
        }
    }
    feed_general(core, stats, staging, dev, None, data, at).map(|used| Fed {
        used,
        simple: false,
    })
}

/// [`feed`]'s general loop, from `at` on: runs of whole data FPDUs by the core's run
/// path, the rest piece by piece. Out of line, so that a read the simple paths take
/// whole does not pay this loop's frame and set-up.
#[inline(never)]
fn feed_general(
    core: &mut Core,
    stats: &mut QpStats,
    staging: &mut FeedState,
    dev: &Shared,
    srq: Option<&SrqShared>,
    data: &[u8],
    mut at: usize,
) -> std::result::Result<usize, ()> {
    let small_only = data.len() <= RX_DIRECT_MIN;
    let mut src = srq.map(|s| SrqSource { srq: s, dev });
    let mut ctx = ctx_for(dev, &mut src);
    while at < data.len() {
        // Whole small FPDUs in the read-ahead (the usual case for small messages) go
        // through the core's fast path, one call each; `staging.region` keeps the
        // region the previous one went to.
        let mut lost = false;
        let mut copied = 0;
        // A run of small FPDUs goes in one call.
        let max = if small_only { usize::MAX } else { 1 };
        let run = core.rx_take_run(&data[at..], max, &mut ctx, &mut |c, bytes| {
            let ok = staging
                .region
                .get(dev, c.region)
                .map(|r| r.write(c.offset as usize, bytes).is_ok());
            // A region deregistered after the TPT check: the payload has nowhere to go
            // (and the TPT entry's bounds are the region's, so `write` cannot fail).
            debug_assert!(ok != Some(false), "placement outside its region: {c:?}");
            lost = ok != Some(true);
            copied += if lost { 0 } else { bytes.len() };
            !lost
        });
        if let Some(run) = run {
            stats.rx_copied_bytes += copied as u64;
            if lost {
                core.to_error();
                return Err(());
            }
            at += run.taken;
            staging.after_payload = false;
            if small_only && run.fpdus > 0 {
                staging.after_small_run(core, run.fpdus);
                if !run.complete {
                    staging.after_internal(core);
                }
            } else {
                staging.after_internal(core);
            }
            continue;
        }
        match feed_piece(core, stats, staging, dev, &mut ctx, &data[at..]) {
            Piece::Took(k) => at += k,
            Piece::Stopped => break,
            Piece::Lost => return Err(()),
        }
    }
    Ok(at)
}

/// What [`feed_piece`] did with the octets it was given.
enum Piece {
    /// Took this many.
    Took(usize),
    /// The core takes nothing now (receiving stopped, or held back by the SRQ).
    Stopped,
    /// A payload could not be placed: the QP is in error.
    Lost,
}

/// The general receive step of [`feed`]: a header or trailer piece, or a payload piece
/// copied into place. Out of line, so that `feed` inlines the whole-FPDU path's
/// placement: with this step inlined beside it, the compiler made that closure a call
/// of its own, and an 8-octet Write FPDU cost about 40 instructions more.
#[inline(never)]
fn feed_piece(
    core: &mut Core,
    stats: &mut QpStats,
    staging: &mut FeedState,
    dev: &Shared,
    ctx: &mut RxCtx<'_>,
    data: &[u8],
) -> Piece {
    match core.rx_need() {
        RxNeed::Stopped | RxNeed::Wait => Piece::Stopped,
        RxNeed::Internal(n) => {
            let k = n.min(data.len());
            core.rx_buffer()[..k].copy_from_slice(&data[..k]);
            core.rx_filled(k, ctx);
            staging.after_internal(core);
            Piece::Took(k)
        }
        RxNeed::Place(c) => {
            let k = c.len.min(data.len());
            let bytes = &data[..k];
            match staging
                .region
                .get(dev, c.region)
                .map(|r| r.write(c.offset as usize, bytes))
            {
                Some(Ok(())) => {}
                Some(Err(e)) => {
                    // The TPT entry's bounds are the region's: cannot happen.
                    debug_assert!(false, "placement outside its region: {e:?}");
                    core.to_error();
                    return Piece::Lost;
                }
                None => {
                    // Deregistered after the TPT check: the payload has nowhere to
                    // go. Dropping it would complete a receive that was never
                    // placed; the QP goes to error instead.
                    core.to_error();
                    return Piece::Lost;
                }
            }
            stats.rx_copied_bytes += k as u64;
            core.rx_placed(bytes);
            staging.after_payload = true;
            Piece::Took(k)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::would_block;
    use std::io;

    #[test]
    fn would_block_knows_the_kernels_eagain_and_the_transports_own() {
        // The kernel's answer on an empty non-blocking socket.
        assert!(would_block(&io::Error::from_raw_os_error(libc::EAGAIN)));
        // What a skipped read (`transport/polled.rs`) and the user-space TCP answer.
        assert!(would_block(&io::ErrorKind::WouldBlock.into()));
        assert!(would_block(&io::Error::new(
            io::ErrorKind::WouldBlock,
            "later"
        )));
        // Anything else ends the stream or is retried, never taken for an empty one.
        assert!(!would_block(&io::Error::from_raw_os_error(libc::EINTR)));
        assert!(!would_block(&io::Error::from_raw_os_error(
            libc::ECONNRESET
        )));
        assert!(!would_block(&io::ErrorKind::UnexpectedEof.into()));
    }
}
