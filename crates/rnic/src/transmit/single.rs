//! A request posted alone (`Qp::post_send`, a batch of one) that is a small one-SGE
//! Send or Write, to a QP whose transmit buffer is flushed: framed and handed to the
//! socket at once, before its completion is written. A ping-pong's reply used to go
//! through the run of posts and then `send_gathered`, whose checks and bookkeeping
//! repeat what the post has just established; here the FPDU's octets go to `send(2)`
//! from the post itself, and what the post does after it (the completion) is off the
//! message's way.

use super::{TX_GATHER_MAX, TxQueue, append_trailer, room_in};
use crate::close::connection_lost;
use crate::device::Shared;
use crate::qp::{Conn, QpStats};
use crate::region::Region;
use crate::region_table::LastRegion;
use crate::transport::ConnTransport;
use softrnic_proto::qp::{Gathered, Qp as Core, SMALL_HEADER_MAX, SingleFpdu};
use softrnic_proto::{QpId, SendWr};
use softrnic_wire::crc::crc32c;
use softrnic_wire::mpa;
use std::io;

/// FPDUs of a single post at most this long are framed in the QP's frame buffer
/// ([`Frame`]) and sent from it: no transmit buffer to make room in and append to.
/// Longer ones are written into the transmit buffer and sent from there.
const FRAME: usize = 128;

/// Zeros written right after a framed payload: they cover its pad (at most 3 octets)
/// and an empty CRC field (4), whatever the payload's length.
const TRAILER_ZEROS: usize = 8;

/// The buffer a single post frames its FPDU in, kept with the QP's transmit queue.
/// It used to be an array on the stack, zeroed on every post (nine instructions, and
/// a larger stack frame) for the pad and CRC field; here only [`TRAILER_ZEROS`]
/// octets after the payload are cleared, and the rest is overwritten by the frame.
pub(crate) struct Frame([u8; FRAME + TRAILER_ZEROS]);

impl Default for Frame {
    fn default() -> Self {
        Frame([0; FRAME + TRAILER_ZEROS])
    }
}

impl Frame {
    /// The frame's first octets, where the core writes the length field and header
    /// (always there: the frame is longer).
    #[inline(always)]
    fn head(&mut self) -> Option<&mut [u8; SMALL_HEADER_MAX]> {
        self.0.first_chunk_mut()
    }
}

/// Posts `wr` and sends its FPDU, if it is a request the direct post takes
/// ([`Core::begin_single_small`]) and the connection has nothing waiting to be sent
/// (no gathered octets unsent, no large FPDU, the socket not known to be full, the
/// transport open). Returns None, with nothing done, otherwise: the caller posts it
/// the general way, so a misuse fails with the same error value and completion.
///
/// The octets the socket does not take are queued in the transmit buffer, in order,
/// for the progress pass that follows (a full socket marks the queue blocked, as
/// `send_gathered` does); a failed send ends the connection as it does there, after
/// the request completed (it was copied: handed to the RNIC).
#[inline(always)]
pub(crate) fn post_single(
    qp: QpId,
    core: &mut Core,
    conn: &mut Conn,
    stats: &mut QpStats,
    dev: &Shared,
    wr: &SendWr,
) -> Option<()> {
    let tx = &mut conn.tx;
    if !tx.pending.is_empty() || tx.sent != tx.buf.len() || tx.blocked || core.transport_closed() {
        return None;
    }
    let TxQueue {
        buf,
        sent,
        region,
        memo,
        blocked,
        frame,
        ..
    } = tx;
    let transport = &mut conn.transport;
    let mut failed = None;
    // No closure for the framing and the send (see `Core::begin_single_small`): the
    // post's common case is inlined whole; the transmit buffer's, rarer and longer,
    // is a call.
    let single = core.begin_single_small(wr, &dev.tpt, memo, frame.head()?)?;
    let f = single.fpdu();
    let total = f.wire_len();
    let framed = if total > FRAME {
        post_buffered(
            *f,
            frame.0.get(..f.header_len).unwrap_or_default(),
            buf,
            sent,
            dev,
            region,
            transport,
            stats,
            blocked,
            &mut failed,
        )
    } else if let Some(octets) = region
        .get_inlined(dev, f.payload.region)
        .and_then(|r| frame_small(f, r, &mut frame.0))
    {
        let taken = settle(send(transport, stats, octets), blocked, &mut failed);
        // Octets of the frame the socket did not take are queued (the buffer was
        // flushed: it has room).
        if let Some(rest) = octets.get(taken..)
            && !rest.is_empty()
        {
            room_in(buf, sent, rest.len());
            buf.extend_from_slice(rest);
        }
        Gathered::Taken
    } else {
        Gathered::Lost
    };
    let gathered = single.finish(framed, &dev.tpt);
    match gathered {
        Gathered::Taken => stats.tx_fpdus += 1,
        Gathered::NoRoom => {}
        // As in `post_gathered`: a region vanished between the TPT check and the copy.
        Gathered::Lost => core.to_error(),
    }
    if let Some(kind) = failed {
        connection_lost(qp, core, dev, kind);
    }
    Some(())
}

/// A single post's FPDU longer than [`FRAME`]: its length field and header (`head`,
/// written by the core) and its payload appended to the transmit buffer, if it has
/// room, with pad and CRC field, and sent from there (the octets the socket does not
/// take stay where they are). The same octets `write_small` appends for the request.
/// Not inlined: it kept the post's common case from being inlined into the post.
#[allow(clippy::too_many_arguments)]
#[inline(never)]
fn post_buffered(
    f: SingleFpdu,
    head: &[u8],
    buf: &mut Vec<u8>,
    sent: &mut usize,
    dev: &Shared,
    region: &mut LastRegion,
    transport: &mut ConnTransport,
    stats: &mut QpStats,
    blocked: &mut bool,
    failed: &mut Option<io::ErrorKind>,
) -> Gathered {
    let total = f.wire_len();
    if total > TX_GATHER_MAX || !room_in(buf, sent, total) {
        return Gathered::NoRoom;
    }
    let Some(r) = region.get(dev, f.payload.region) else {
        return Gathered::Lost;
    };
    let start = buf.len();
    buf.extend_from_slice(head);
    if r.append_to(f.payload.offset as usize, f.payload.len, buf)
        .is_err()
    {
        buf.truncate(start);
        return Gathered::Lost;
    }
    append_trailer(buf, start, f.ulpdu_len(), f.crc);
    let r = send(transport, stats, buf.get(*sent..).unwrap_or_default());
    *sent += settle(r, blocked, failed);
    Gathered::Taken
}

/// The octets a `send` took (0 on an error): a full socket marks the queue blocked, an
/// interrupted call is tried again by the pass that follows, any other error is kept
/// in `failed` (the connection ends once the request completed).
#[inline(always)]
fn settle(r: io::Result<usize>, blocked: &mut bool, failed: &mut Option<io::ErrorKind>) -> usize {
    match r {
        Ok(n) => n,
        Err(e) => {
            match e.kind() {
                io::ErrorKind::WouldBlock => *blocked = true,
                io::ErrorKind::Interrupted => {}
                kind => *failed = Some(kind),
            }
            0
        }
    }
}

/// One `send` of `octets`, counted: the polled transport's own (over the kernel
/// socket, `send(2)` without a dynamic call), or a wrapper's.
#[inline(always)]
fn send(transport: &mut ConnTransport, stats: &mut QpStats, octets: &[u8]) -> io::Result<usize> {
    stats.tx_syscalls += 1;
    let r = transport.send_polled(octets);
    stats.sent(&r);
    r
}

/// Frames `f` at the start of `frame` (at least its wire length and
/// [`TRAILER_ZEROS`] long), whose length field and header the core wrote there:
/// payload copied from `r` after them, pad and CRC field zeroed, and the CRC when
/// negotiated. Returns the FPDU's octets; None if `r` no longer holds the payload's
/// range.
#[inline(always)]
fn frame_small<'a>(
    f: &SingleFpdu,
    r: &Region,
    frame: &'a mut [u8; FRAME + TRAILER_ZEROS],
) -> Option<&'a [u8]> {
    let at = f.header_len;
    let end = at + f.payload.len;
    r.read(f.payload.offset as usize, frame.get_mut(at..end)?)
        .ok()?;
    frame
        .get_mut(end..end + TRAILER_ZEROS)?
        .copy_from_slice(&[0; TRAILER_ZEROS]);
    let total = f.wire_len();
    if f.crc {
        let covered = total - mpa::CRC_LEN;
        let crc = crc32c(frame.get(..covered)?);
        let (trailer, len) = mpa::fpdu_trailer(f.ulpdu_len(), crc);
        frame
            .get_mut(covered..total)?
            .copy_from_slice(trailer.get(len - mpa::CRC_LEN..len)?);
    }
    frame.get(..total)
}

#[cfg(test)]
#[path = "../transmit_single_tests.rs"]
mod tests;
