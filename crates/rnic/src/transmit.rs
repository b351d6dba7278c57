//! A QP's transmit path on a byte stream: take the FPDUs the protocol core wants sent,
//! gather small ones into the connection's transmit buffer (many per `send`), and send
//! large ones with `sendmsg(2)`, which gathers headers, registered memory and trailers
//! without a copy: all the FPDUs of a large message up to its last one (at most
//! [`TX_BATCH`]) in one call, and the Read Responses queued behind each other (they
//! complete nothing) together.

use crate::buf_pool;
use crate::close::connection_lost;
use crate::device::Shared;
use crate::qp::{Conn, QpStats};
use crate::region::Region;
use crate::region_table::LastRegion;
use crate::sys::socket::IoVecs;
use crate::transport::Transport;
use crate::tx_turns::Turn;
use arrayvec::ArrayVec;
use softrnic_proto::qp::PostError;
use softrnic_proto::qp::{Gathered, Qp as Core, SmallFpdu, TxFpdu};
use softrnic_proto::tpt::KeptKeyMemo;
use softrnic_proto::{QpId, SendWr};
use softrnic_wire::crc::{crc32c, crc32c_append};
use softrnic_wire::mpa;
use std::collections::VecDeque;
use std::io;
use std::sync::Arc;

mod single;
pub(crate) use single::post_single;

/// FPDUs at most this long (all framing included) are copied into the connection's
/// transmit buffer and go out together, many per `send`: small messages then cost a
/// copy of a few hundred octets instead of a system call each. Their work requests
/// complete once copied, as an inline send does on a hardware RNIC: the buffer may be
/// reused at once, and the octets are owned by the RNIC.
pub const TX_GATHER_MAX: usize = 16384;

/// Most octets a connection's transmit buffer holds for gathered FPDUs. The QP holds
/// the buffer only while gathered octets wait in it: it takes it from the driving
/// thread's pool (`buf_pool`) for the first small FPDU and gives it back once every
/// gathered octet is out, so an idle QP holds none.
pub(crate) const TX_BUF_LEN: usize = 64 * 1024;

/// Large FPDUs sent together in one `sendmsg` at most: the FPDUs of one message up
/// to the one that completes it (16 x 65000 octets: a 1 MiB Write in two calls where
/// the socket takes it), or of the Read Responses queued (8 of 64 KiB).
pub(crate) const TX_BATCH: usize = 16;

/// Without markers, the large FPDUs of several Writes and Sends are prepared (with
/// CRC on, their CRCs computed back to back) and sent together, up to this many
/// octets: a CRC that follows the kernel's copy of the previous message runs 1.3-1.5x
/// slower (the copy's dirty lines are written back while it reads) and the send after
/// it finds its own state pushed out of the cache (ARCHITECTURE.md, "CRC on: why the
/// CRC in place is slower"); without CRC one `sendmsg` for several messages saves the
/// calls and the turns between them. Small enough that what was checksummed is still
/// in L2 when it is copied.
pub(crate) const TX_AHEAD_BYTES: usize = 256 * 1024;

/// Gather-list entries of one FPDU at most: header, payload pieces, trailer.
const FPDU_IOVECS: usize = softrnic_proto::MAX_SGE + 2;

/// An FPDU ready to go: its header, the regions that hold its payload (kept alive
/// until it is out), its trailer (pad and CRC), and how much of it is written.
struct PendingTx {
    fpdu: TxFpdu,
    regions: ArrayVec<Arc<Region>, { softrnic_proto::MAX_SGE }>,
    trailer: [u8; 7],
    trailer_len: usize,
    /// With markers: the whole FPDU as framed (markers inserted among its payload, so
    /// it is copied, not gathered); empty otherwise.
    marked: Vec<u8>,
    written: usize,
    total: usize,
}

/// What a connection has queued for transmission but not yet handed to the stream.
#[derive(Default)]
pub(crate) struct TxQueue {
    /// Large FPDUs, sent from registered memory, in order; only the last may
    /// complete something (see [`TX_BATCH`]), except without markers, where several
    /// messages may wait here (see [`TX_AHEAD_BYTES`]).
    pending: VecDeque<PendingTx>,
    /// Gathered small FPDUs (see [`TX_GATHER_MAX`]); `sent` octets of it are out. Empty
    /// and unallocated when nothing waits (see [`TX_BUF_LEN`]).
    buf: Vec<u8>,
    sent: usize,
    /// An FPDU header buffer, reused.
    scratch: TxFpdu,
    /// With markers: a marked FPDU's payload, collected before it is framed.
    payload: Vec<u8>,
    /// The stream said `WouldBlock` at the last send and has taken nothing since (see
    /// [`TxQueue::waits_for_room`]).
    blocked: bool,
    /// The region the last gathered payload came from, kept across calls.
    region: LastRegion,
    /// A polling consumer holds the socket: the gather buffer stays with the QP between
    /// its posts (see `QpShared::claim`).
    pub(crate) keep: bool,
    /// Its turn to send large FPDUs among the device's QPs (`tx_turns.rs`).
    turn: Turn,
    /// An FPDU polled behind messages queued ahead could not be prepared (a region
    /// gone): the QP fails once those are out, so they complete as they would have
    /// without the look-ahead instead of being flushed with it.
    failed_behind: bool,
    /// The last local key a single post checked, kept across posts
    /// (`single::post_single`).
    memo: KeptKeyMemo,
    /// The buffer a single post frames its FPDU in (`single::post_single`).
    frame: single::Frame,
}

impl TxQueue {
    /// Whether every queued octet is out.
    pub(crate) fn is_flushed(&self) -> bool {
        self.pending.is_empty() && self.sent == self.buf.len()
    }

    /// Whether the stream was full at the last send: it reports room by a readiness
    /// event (a socket in an edge-triggered epoll set, or the own TCP's eventfd), so
    /// until then another send only returns `WouldBlock`. With 256 QPs backlogged,
    /// trying each on every post and every poll cost 25-62 `sendmsg` calls per 1 MiB
    /// Write, most of them empty; whoever owns the readiness sends when there is room.
    /// A QP waiting for its turn to send (`tx_turns.rs`) is skipped the same way: its
    /// engine drives it when the turn comes.
    pub(crate) fn waits_for_room(&self) -> bool {
        self.blocked || self.turn.is_waiting()
    }

    /// Octets of buffer the QP holds now.
    pub(crate) fn held(&self) -> usize {
        self.buf.capacity()
    }

    /// Gives the gather buffer back to the pool once every gathered octet is out,
    /// unless a polling consumer holds the socket (`keep`).
    pub(crate) fn release_if_sent(&mut self) {
        if self.sent == self.buf.len() && !self.keep && self.buf.capacity() > 0 {
            buf_pool::give_gather(std::mem::take(&mut self.buf));
            self.sent = 0;
        }
    }

    /// Makes room for `len` more gathered octets (see [`room_in`]).
    fn room_for(&mut self, len: usize) -> bool {
        room_in(&mut self.buf, &mut self.sent, len)
    }
}

/// Makes room for `len` more gathered octets in a transmit buffer of which `sent`
/// octets are out, if it can take them: takes a buffer if the QP has none, and moves
/// unsent octets to its start when the octets already sent are in the way, so the
/// buffer never grows beyond [`TX_BUF_LEN`].
#[inline(always)]
fn room_in(buf: &mut Vec<u8>, sent: &mut usize, len: usize) -> bool {
    if buf.len() - *sent + len > TX_BUF_LEN {
        return false;
    }
    if buf.capacity() == 0 {
        *buf = buf_pool::take_gather();
    } else if *sent == buf.len() {
        buf.clear();
        *sent = 0;
    } else if buf.len() + len > TX_BUF_LEN {
        buf.drain(..*sent);
        *sent = 0;
    }
    true
}

/// Gathers the run of small messages at the head of the send queue into the transmit
/// buffer in one core call ([`Core::transmit_run`]); returns how many, or None if a
/// region vanished under one of them (the QP is then put in error, as on the general
/// path).
fn gather_run(core: &mut Core, tx: &mut TxQueue, dev: &Shared) -> Option<usize> {
    let TxQueue {
        buf,
        sent,
        scratch,
        region,
        ..
    } = tx;
    // The region kept across calls: a ping-pong posts one message a call, and a fresh
    // look-up per call cost a shard lock and a reference count (four atomic
    // read-modify-writes) before every `sendto`.
    let (taken, lost) = core.transmit_run(scratch, |f| gather_small(f, buf, sent, dev, region));
    if lost {
        core.to_error();
        return None;
    }
    Some(taken)
}

/// One small FPDU of a run or a direct post into the transmit buffer, if it has room.
#[inline(always)]
fn gather_small(
    f: &TxFpdu,
    buf: &mut Vec<u8>,
    sent: &mut usize,
    dev: &Shared,
    region: &mut LastRegion,
) -> Gathered {
    let total = f.wire_len();
    if total > TX_GATHER_MAX || !room_in(buf, sent, total) {
        Gathered::NoRoom
    } else if gather(f, buf, dev, region) {
        Gathered::Taken
    } else {
        Gathered::Lost
    }
}

/// Posts `wr` ([`Core::post_send_gather`]): a small Send or Write posted to an idle
/// send queue goes straight into the transmit buffer and completes, with no queue
/// entry to write and read back (the next transmit pass only sends the buffer).
/// Anything else is queued as `post_send_ref` queues it; so is everything while large
/// FPDUs wait, since gathered octets go out before them.
pub(crate) fn post_gathered(
    core: &mut Core,
    conn: &mut Conn,
    stats: &mut QpStats,
    dev: &Shared,
    wr: &SendWr,
) -> Result<(), PostError> {
    let tx = &mut conn.tx;
    if !tx.pending.is_empty() || core.transport_closed() {
        return core.post_send_ref(wr, &dev.tpt);
    }
    let TxQueue {
        buf,
        sent,
        scratch,
        region,
        ..
    } = tx;
    // The commonest small request (one SGE) is written straight into the buffer; the
    // rest, and every request that fails a check, go through the scratch FPDU.
    let gathered =
        match core.post_send_small(wr, &dev.tpt, |f| write_small(f, buf, sent, dev, region)) {
            Some(g) => g,
            None => core.post_send_gather(wr, &dev.tpt, scratch, |f| {
                gather_small(f, buf, sent, dev, region)
            })?,
        };
    match gathered {
        Gathered::Taken => stats.tx_fpdus += 1,
        Gathered::NoRoom => {}
        // A region vanished between the TPT check and the copy: as after a failed
        // gather of a run, the QP cannot send correct data (the request flushes).
        Gathered::Lost => core.to_error(),
    }
    Ok(())
}

/// Posts the requests of `wrs` as a run of direct posts ([`Core::post_small_run`]):
/// small one-SGE Sends and Writes to an idle send queue are written straight into the
/// transmit buffer one after the other, with the QP's state and queue checked once for
/// the run. Returns the first request the run did not post, for [`post_gathered`] (None:
/// `wrs` is done); the requests before it are posted.
#[inline(always)]
pub(crate) fn post_run<W: std::borrow::Borrow<SendWr>>(
    core: &mut Core,
    conn: &mut Conn,
    stats: &mut QpStats,
    dev: &Shared,
    wrs: &mut impl Iterator<Item = W>,
) -> Option<W> {
    let tx = &mut conn.tx;
    if !tx.pending.is_empty() || core.transport_closed() {
        return wrs.next();
    }
    let TxQueue {
        buf, sent, region, ..
    } = tx;
    let end = core.post_small_run(&dev.tpt, wrs, |f| write_small(f, buf, sent, dev, region));
    stats.tx_fpdus += end.taken;
    if end.lost {
        // As in `post_gathered`: a region vanished between the TPT check and the copy.
        core.to_error();
    }
    end.rest
}

/// A direct post's FPDU ([`SmallFpdu`]) written into the transmit buffer, if it has
/// room: header, payload copied from its region, pad and CRC field. The same octets
/// [`gather`] writes for the same request framed through a [`TxFpdu`].
#[inline(always)]
fn write_small(
    f: &SmallFpdu,
    buf: &mut Vec<u8>,
    sent: &mut usize,
    dev: &Shared,
    region: &mut LastRegion,
) -> Gathered {
    let total = f.wire_len();
    if total > TX_GATHER_MAX || !room_in(buf, sent, total) {
        return Gathered::NoRoom;
    }
    match region.get(dev, f.payload.region) {
        Some(r) if append_small(f, r, buf) => Gathered::Taken,
        _ => Gathered::Lost,
    }
}

/// Appends the whole [`SmallFpdu`] to `out`, its payload from `r`; false if `r` no
/// longer holds the payload's range (`out` is then left as it was).
#[inline(always)]
fn append_small(f: &SmallFpdu, r: &Region, out: &mut Vec<u8>) -> bool {
    let start = out.len();
    f.append_header(out);
    if r.append_to(f.payload.offset as usize, f.payload.len, out)
        .is_err()
    {
        out.truncate(start);
        return false;
    }
    append_trailer(out, start, f.ulpdu_len(), f.crc);
    true
}

/// Sends the octets a post just gathered ([`post_gathered`]) at once, before the
/// post's progress pass: a ping-pong's reply leaves without that pass's bookkeeping
/// (its timer check, the transmit loop's look at the send queue) ahead of its
/// `sendto`. Only when the gather buffer is all there is to send and the socket is
/// not known to be full; the pass that follows sends whatever is left, as before.
pub(crate) fn send_gathered(
    qp: QpId,
    core: &mut Core,
    conn: &mut Conn,
    stats: &mut QpStats,
    dev: &Shared,
) {
    let tx = &mut conn.tx;
    if !tx.pending.is_empty() || tx.blocked || tx.sent >= tx.buf.len() || core.transport_closed() {
        return;
    }
    stats.tx_syscalls += 1;
    let r = conn.transport.send(&tx.buf[tx.sent..]);
    stats.sent(&r);
    match r {
        Ok(n) => tx.sent += n,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => tx.blocked = true,
        // The pass that follows tries again.
        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
        Err(e) => connection_lost(qp, core, dev, e.kind()),
    }
}

/// After a post and its [`send_gathered`]: whether the transmit pass that would follow
/// has nothing to do, because every gathered octet is out, no large FPDU waits and the
/// core has nothing more to send (no queued request, Read Response, Terminate or RTR).
/// If so, the gather buffer goes back to the pool as that pass would give it (unless a
/// polling consumer keeps it) and true is returned: the caller skips the pass.
pub(crate) fn post_sent_all(core: &Core, conn: &mut Conn) -> bool {
    let tx = &mut conn.tx;
    if !tx.is_flushed() || core.may_transmit() || core.transport_closed() {
        return false;
    }
    // No large FPDU waits, so no turn is needed (as the pass releases it).
    if !tx.turn.is_waiting() {
        tx.turn.release();
    }
    tx.release_if_sent();
    true
}

/// Sends what the core has to send until the stream would block or the core has no
/// more. Returns whether anything moved.
/// `engine` serves the QP's socket: it drives the QP when a turn to send is handed to
/// it (`tx_turns.rs`).
pub(crate) fn transmit(
    qp: QpId,
    engine: usize,
    core: &mut Core,
    conn: &mut Conn,
    stats: &mut QpStats,
    dev: &Shared,
) -> bool {
    if core.transport_closed() {
        conn.tx.turn.release();
        return false;
    }
    if conn.tx.blocked {
        // Driven with the socket full: a turn held for a peer that does not read goes
        // to a waiting QP (`tx_turns.rs`).
        conn.tx.turn.watch(qp, engine, dev);
    }
    let moved = transmit_stream(qp, engine, core, conn, stats, dev);
    let tx = &mut conn.tx;
    if tx.pending.is_empty() && !tx.turn.is_waiting() {
        // Nothing large left to send: the turn is another QP's.
        tx.turn.release();
    }
    tx.release_if_sent();
    moved
}

/// [`transmit`], with the gather buffer taken as it is needed.
fn transmit_stream(
    qp: QpId,
    engine: usize,
    core: &mut Core,
    conn: &mut Conn,
    stats: &mut QpStats,
    dev: &Shared,
) -> bool {
    let mut moved = false;
    loop {
        let tx = &mut conn.tx;
        // 1. The next FPDU: small ones are gathered, large ones wait their turn, as
        // many as may go in one call (those of one message, up to the one that
        // completes it). The core builds each in the reused scratch header (nothing
        // allocated per small FPDU).
        // Without markers the FPDUs of the next messages may be polled behind a
        // message's last one (see `TX_AHEAD_BYTES`). A lone message in flight (an
        // 8-octet ping-pong) is untouched: its FPDU is gathered into `buf` and done at
        // once, so nothing is ever queued to go ahead of, and with one request posted
        // there is no next message to poll.
        let ahead = !core.params().markers_tx;
        if tx.failed_behind && tx.pending.is_empty() {
            tx.failed_behind = false;
            core.to_error();
            continue;
        }
        let room = !tx.failed_behind
            && match tx.pending.back() {
                None => true,
                Some(p) => {
                    tx.pending.len() < TX_BATCH
                        && (!p.fpdu.completes || (ahead && may_go_ahead(&tx.pending)))
                }
            };
        if room && core.may_transmit() {
            if core.packs_segments() && tx.is_flushed() && conn.transport.all_sent() {
                // The own TCP sent everything: the next FPDU starts a segment.
                core.segments_sent();
            }
            // First the small messages at the head of the queue, many in one core
            // call; then whatever stopped the run goes the general way, one FPDU at a
            // time.
            if tx.pending.is_empty() {
                let Some(taken) = gather_run(core, tx, dev) else {
                    // The QP is in error now; what was queued before goes out below.
                    continue;
                };
                stats.tx_fpdus += taken as u64;
                moved |= taken > 0;
            }
            let mut has = poll(core, ahead, &mut tx.scratch);
            if !has && tx.pending.is_empty() {
                core.run_local_ops(&dev.tpt);
                has = poll(core, ahead, &mut tx.scratch);
            }
            if has {
                let total = tx.scratch.wire_len();
                if tx.pending.is_empty() && total <= TX_GATHER_MAX && tx.room_for(total) {
                    let gathered = if tx.scratch.marker_pos.is_some() {
                        gather_marked(
                            &tx.scratch,
                            &mut tx.buf,
                            &mut tx.payload,
                            dev,
                            &mut tx.region,
                        )
                    } else {
                        gather(&tx.scratch, &mut tx.buf, dev, &mut tx.region)
                    };
                    if !gathered {
                        // A region vanished under a queued request: the QP cannot
                        // continue sending correct data. What was queued before it
                        // still goes out (below), so that the close that follows is
                        // not left waiting for octets nobody sends.
                        core.to_error();
                        continue;
                    }
                    stats.tx_fpdus += 1;
                    if tx.scratch.completes {
                        core.transmit_done();
                    }
                    moved = true;
                    continue;
                }
                let Some(mut p) = prepare(std::mem::take(&mut tx.scratch), &mut tx.payload, dev)
                else {
                    // As for a failed gather: the octets queued before still go out.
                    // Messages queued ahead of this one complete first.
                    if tx.pending.iter().any(|p| p.fpdu.completes) {
                        tx.failed_behind = true;
                    } else {
                        core.to_error();
                    }
                    continue;
                };
                if p.fpdu.completes && core.read_response_in_flight() {
                    // A Read Response finishes nothing the program sees, and its
                    // source regions stay alive in `p` until it is out: done now, so
                    // the responses queued behind it go in the same `sendmsg` (up to
                    // TX_BATCH FPDUs) instead of one call each.
                    core.transmit_done();
                    p.fpdu.completes = false;
                }
                tx.pending.push_back(p);
                continue;
            }
        }
        // 2. Gathered octets go first: they were queued before the pending FPDUs.
        if tx.sent < tx.buf.len() {
            stats.tx_syscalls += 1;
            let r = conn.transport.send(&tx.buf[tx.sent..]);
            stats.sent(&r);
            match r {
                Ok(n) => {
                    tx.sent += n;
                    tx.blocked = false;
                    moved = true;
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    tx.blocked = true;
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
        // 3. Large FPDUs, gathered from registered memory by the kernel, in the QP's
        // turn (a polling consumer's QP needs none: see `tx_turns.rs`).
        if tx.pending.is_empty() || !(tx.keep || tx.turn.may_send(qp, engine, dev)) {
            break;
        }
        stats.tx_syscalls += 1;
        let r = send_pending(&mut *conn.transport, &tx.pending);
        stats.sent(&r);
        match r {
            Ok(mut n) => {
                moved = true;
                tx.blocked = false;
                tx.turn.sent(n);
                let mut message_done = false;
                while let Some(p) = tx.pending.front_mut() {
                    let left = p.total - p.written;
                    if n < left {
                        p.written += n;
                        break;
                    }
                    n -= left;
                    if let Some(p) = tx.pending.pop_front() {
                        stats.tx_fpdus += 1;
                        if p.fpdu.completes {
                            core.transmit_done();
                            message_done = true;
                        }
                        // Its header buffer is the scratch again.
                        tx.scratch = p.fpdu;
                    }
                }
                if message_done && tx.turn.should_yield() {
                    // Its quantum is sent and another QP waits: that one goes next,
                    // this one queues again for the rest.
                    tx.turn.release();
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                tx.blocked = true;
                tx.turn.watch(qp, engine, dev);
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

/// The core's next FPDU, past a finished message's last one when `ahead`.
#[inline]
fn poll(core: &mut Core, ahead: bool, out: &mut TxFpdu) -> bool {
    if ahead {
        core.poll_transmit_ahead(out)
    } else {
        core.poll_transmit(out)
    }
}

/// Whether the next message's FPDUs may be prepared behind the queued ones: they hold
/// less than [`TX_AHEAD_BYTES`] and none of them is partly written. After a partial
/// write the socket is full, and a large message that follows would be cut at the
/// budget into more calls (at 1 MiB: 2.25 `sendmsg` per message instead of 2.0).
fn may_go_ahead(pending: &VecDeque<PendingTx>) -> bool {
    pending.front().is_some_and(|p| p.written == 0)
        && pending.iter().map(|p| p.total).sum::<usize>() < TX_AHEAD_BYTES
}

/// Resolves an FPDU's payload to live regions and computes its trailer; `None` if a
/// region no longer holds the payload's range.
fn prepare(fpdu: TxFpdu, payload: &mut Vec<u8>, dev: &Shared) -> Option<PendingTx> {
    let mut regions = ArrayVec::new();
    for c in &fpdu.chunks {
        let r = dev.region(c.region)?;
        r.check(c.offset as usize, c.len).ok()?;
        regions.push(r);
    }
    if fpdu.marker_pos.is_some() {
        // Markers fall among the payload's octets: the FPDU is framed in one buffer,
        // its payload collected first in `payload` (reused).
        payload.clear();
        for (c, r) in fpdu.chunks.iter().zip(&regions) {
            r.append_to(c.offset as usize, c.len, payload).ok()?;
        }
        let mut marked = Vec::with_capacity(fpdu.wire_len());
        fpdu.emit_marked(payload, &mut marked);
        return Some(PendingTx {
            total: marked.len(),
            fpdu,
            regions,
            trailer: [0; 7],
            trailer_len: 0,
            marked,
            written: 0,
        });
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
        marked: Vec::new(),
        written: 0,
        total,
    })
}

/// Appends a whole FPDU (header, payload copied from registered memory, pad and CRC)
/// to `out`; false if a region no longer holds the payload's range (`out` is then left
/// as it was). `last` saves a look-up per FPDU from the region the previous one came
/// from. The CRC, when negotiated, is computed over the gathered octets. Inlined: it
/// runs once per small FPDU.
#[inline(always)]
fn gather(f: &TxFpdu, out: &mut Vec<u8>, dev: &Shared, last: &mut LastRegion) -> bool {
    let start = out.len();
    // A data header is written in place, not copied (see `append_header`).
    f.append_header(out);
    for c in &f.chunks {
        let copied = last
            .get(dev, c.region)
            .map(|r| r.append_to(c.offset as usize, c.len, out).is_ok());
        if copied != Some(true) {
            out.truncate(start);
            return false;
        }
    }
    append_trailer(out, start, f.ulpdu_len, f.crc);
    true
}

/// Appends the pad and the CRC field of the FPDU (of a ULPDU of `ulpdu_len` octets)
/// that starts at `start` in `out`: zeros without CRC, else the wire crate's trailer
/// with the CRC32c over the FPDU's octets and its pad.
#[inline(always)]
fn append_trailer(out: &mut Vec<u8>, start: usize, ulpdu_len: usize, crc: bool) {
    let pad = mpa::pad_len(ulpdu_len);
    if !crc {
        // Pad and an empty CRC field: zeros, in one step of a fixed length (a
        // variable one was a `memset` call per FPDU).
        match pad {
            0 => out.extend_from_slice(&[0u8; 4]),
            1 => out.extend_from_slice(&[0u8; 5]),
            2 => out.extend_from_slice(&[0u8; 6]),
            _ => out.extend_from_slice(&[0u8; 7]),
        }
        return;
    }
    out.extend_from_slice(&[0u8; 3][..pad]);
    let (trailer, trailer_len) =
        mpa::fpdu_trailer(ulpdu_len, crc32c(out.get(start..).unwrap_or_default()));
    out.extend_from_slice(&trailer[trailer_len - 4..trailer_len]);
}

/// [`gather`] for an FPDU with markers: its payload is collected in `payload` (reused)
/// and the FPDU framed by the wire crate's framer, markers and CRC included. Out of
/// line, so that the unmarked path stays as it was.
#[cold]
#[inline(never)]
fn gather_marked(
    f: &TxFpdu,
    out: &mut Vec<u8>,
    payload: &mut Vec<u8>,
    dev: &Shared,
    last: &mut LastRegion,
) -> bool {
    payload.clear();
    for c in &f.chunks {
        let copied = last
            .get(dev, c.region)
            .map(|r| r.append_to(c.offset as usize, c.len, payload).is_ok());
        if copied != Some(true) {
            return false;
        }
    }
    f.emit_marked(payload, out);
    true
}

/// Writes as much of the pending FPDUs, in order, as the stream takes (one call).
fn send_pending(t: &mut dyn Transport, pending: &VecDeque<PendingTx>) -> io::Result<usize> {
    let mut iov = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; TX_BATCH * FPDU_IOVECS];
    let mut n = 0;
    for p in pending.iter().take(TX_BATCH) {
        let mut skip = p.written;
        if !p.marked.is_empty() {
            if skip < p.marked.len() && n < iov.len() {
                iov[n] = libc::iovec {
                    iov_base: p.marked[skip..].as_ptr() as *mut libc::c_void,
                    iov_len: p.marked.len() - skip,
                };
                n += 1;
            }
            continue;
        }
        let mut push = |ptr: *const u8, len: usize| {
            if skip >= len {
                skip -= len;
                return;
            }
            if let Some(slot) = iov.get_mut(n) {
                *slot = libc::iovec {
                    // SAFETY: `skip < len`, so the pointer stays inside the same buffer.
                    iov_base: unsafe { ptr.add(skip) } as *mut libc::c_void,
                    iov_len: len - skip,
                };
                n += 1;
            }
            skip = 0;
        };
        let header = p.fpdu.header_bytes();
        push(header.as_ptr(), header.len());
        for (c, r) in p.fpdu.chunks.iter().zip(&p.regions) {
            if let Ok(s) = r.io_slice(c.offset as usize, c.len) {
                push(s.as_ptr(), s.len());
            }
        }
        let pad = p.fpdu.pad_len();
        push(p.trailer.as_ptr(), p.trailer_len.min(pad + 4));
    }
    // SAFETY: every entry points into memory that stays alive and unmoved while
    // `pending` is borrowed (FPDU headers, trailers and marked FPDUs are owned by its
    // entries; region
    // memory is kept alive by the Arcs in their `regions`), and the gather list lives
    // no longer than that.
    let iov = unsafe { IoVecs::new(&iov[..n]) };
    t.send_gather(iov)
}

#[cfg(test)]
#[path = "transmit_run_tests.rs"]
mod run_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use softrnic_proto::RegionId;
    use softrnic_proto::qp::Chunk;
    use softrnic_wire::ddp::{DdpRepr, Placement};
    use softrnic_wire::rdmap::{Opcode, QN_SEND};

    /// The FPDU as the wire crate's framer builds it from the header and the payload.
    fn framed(h: &DdpRepr, payload: &[u8], crc: bool) -> Vec<u8> {
        let (bytes, n) = h.to_bytes();
        let mut out = Vec::new();
        mpa::append_fpdu(&[&bytes[..n], payload], crc, None, &mut out).unwrap();
        out
    }

    fn headers() -> [DdpRepr; 3] {
        [
            DdpRepr {
                last: true,
                opcode: Opcode::Write,
                placement: Placement::Tagged {
                    stag: 0x1234_5678,
                    to: 0x0102_0304_0506_0708,
                },
            },
            DdpRepr {
                last: true,
                opcode: Opcode::Send,
                placement: Placement::Untagged {
                    rsvd_ulp: 0,
                    qn: QN_SEND,
                    msn: 0x00ab_cdef,
                    mo: 0,
                },
            },
            DdpRepr {
                last: true,
                opcode: Opcode::SendSeInvalidate,
                placement: Placement::Untagged {
                    rsvd_ulp: 0x0bad_cafe,
                    qn: QN_SEND,
                    msn: 7,
                    mo: 0,
                },
            },
        ]
    }

    /// The direct post's FPDU (`append_small`) is octet for octet the FPDU the wire
    /// crate's framer builds, for Writes and Sends, CRC off and on, every pad length,
    /// appended behind octets already in the buffer (the CRC covers only its own FPDU).
    #[test]
    fn a_small_fpdu_written_directly_is_the_framers_fpdu() {
        let r = Region::alloc(RegionId(1), 256).unwrap();
        let pattern: Vec<u8> = (0..256u32).map(|i| (i * 7 + 3) as u8).collect();
        r.write(0, &pattern).unwrap();
        for h in headers() {
            for crc in [false, true] {
                for (offset, len) in [(0, 0), (1, 1), (5, 2), (9, 3), (17, 4), (100, 64), (3, 80)] {
                    let f = SmallFpdu {
                        header: h,
                        payload: Chunk {
                            region: RegionId(1),
                            offset: offset as u64,
                            len,
                        },
                        crc,
                    };
                    let mut out = vec![0xee; 5];
                    assert!(append_small(&f, &r, &mut out));
                    let want = framed(&h, &pattern[offset..offset + len], crc);
                    assert_eq!(&out[..5], &[0xee; 5]);
                    assert_eq!(&out[5..], &want[..], "{h:?} crc {crc} len {len}");
                    assert_eq!(f.wire_len(), want.len());
                }
            }
        }
    }

    /// A payload range the region does not hold writes nothing.
    #[test]
    fn a_small_fpdu_outside_its_region_leaves_the_buffer_as_it_was() {
        let r = Region::alloc(RegionId(1), 64).unwrap();
        let f = SmallFpdu {
            header: headers()[0],
            payload: Chunk {
                region: RegionId(1),
                offset: 60,
                len: 8,
            },
            crc: false,
        };
        let mut out = vec![1, 2, 3];
        assert!(!append_small(&f, &r, &mut out));
        assert_eq!(out, [1, 2, 3]);
    }
}
