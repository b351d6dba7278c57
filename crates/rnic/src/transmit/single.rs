//! A request posted alone (`Qp::post_send`, a batch of one) that is a small one-SGE
//! Send or Write, to a QP whose transmit buffer is flushed: framed and handed to the
//! socket at once, before its completion is written. A ping-pong's reply used to go
//! through the run of posts and then `send_gathered`, whose checks and bookkeeping
//! repeat what the post has just established; here the FPDU's octets go to `send(2)`
//! from the post itself, and what the post does after it (the completion) is off the
//! message's way.

use super::{TxQueue, room_in, write_small};
use crate::close::connection_lost;
use crate::device::Shared;
use crate::qp::{Conn, QpStats};
use crate::region::Region;
use crate::transport::Transport;
use softrnic_proto::qp::{Gathered, Qp as Core, SMALL_HEADER_MAX, SmallFpdu};
use softrnic_proto::{QpId, SendWr};
use softrnic_wire::crc::crc32c;
use softrnic_wire::mpa;
use std::io;

/// FPDUs of a single post at most this long are framed in a zeroed buffer on the
/// stack (its pad and an empty CRC field are already there) and sent from it: no
/// transmit buffer to make room in and append to. Longer ones are written into the
/// transmit buffer and sent from there.
const FRAME: usize = 128;

/// Posts `wr` and sends its FPDU, if it is a request the direct post takes
/// ([`Core::post_single_small`]) and the connection has nothing waiting to be sent
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
        ..
    } = tx;
    let transport = &mut *conn.transport;
    let mut failed = None;
    let gathered = core.post_single_small(wr, &dev.tpt, memo, |f| {
        let mut frame = [0u8; FRAME];
        let total = f.wire_len();
        let r = if total <= FRAME {
            let Some(r) = region.get(dev, f.payload.region) else {
                return Gathered::Lost;
            };
            if !frame_small(f, r, &mut frame) {
                return Gathered::Lost;
            }
            send(transport, stats, frame.get(..total).unwrap_or_default())
        } else {
            let g = write_small(f, buf, sent, dev, region);
            if g != Gathered::Taken {
                return g;
            }
            send(transport, stats, buf.get(*sent..).unwrap_or_default())
        };
        // Octets of the stack frame the socket did not take are queued (the buffer
        // was flushed: it has room); those of the transmit buffer stay where they are.
        let taken = match r {
            Ok(n) => n,
            Err(e) => {
                match e.kind() {
                    io::ErrorKind::WouldBlock => *blocked = true,
                    // The pass that follows tries again.
                    io::ErrorKind::Interrupted => {}
                    kind => failed = Some(kind),
                }
                0
            }
        };
        if total <= FRAME {
            if taken < total {
                let rest = frame.get(taken..total).unwrap_or_default();
                room_in(buf, sent, rest.len());
                buf.extend_from_slice(rest);
            }
        } else {
            *sent += taken;
        }
        Gathered::Taken
    })?;
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

/// One `send` of `octets`, counted.
#[inline(always)]
fn send(transport: &mut dyn Transport, stats: &mut QpStats, octets: &[u8]) -> io::Result<usize> {
    stats.tx_syscalls += 1;
    let r = transport.send(octets);
    stats.sent(&r);
    r
}

/// Frames `f` in `frame` (zeroed, at least its wire length long): length field and
/// header, payload copied from `r`, and the CRC when negotiated (pad and an empty CRC
/// field are the frame's zeros). False if `r` no longer holds the payload's range.
#[inline(always)]
fn frame_small(f: &SmallFpdu, r: &Region, frame: &mut [u8; FRAME]) -> bool {
    let Some(head) = frame.first_chunk_mut::<SMALL_HEADER_MAX>() else {
        return false;
    };
    let at = f.write_header(head);
    let Some(payload) = frame.get_mut(at..at + f.payload.len) else {
        return false;
    };
    if r.read(f.payload.offset as usize, payload).is_err() {
        return false;
    }
    if f.crc {
        let total = f.wire_len();
        let covered = total - mpa::CRC_LEN;
        let crc = crc32c(frame.get(..covered).unwrap_or_default());
        let (trailer, len) = mpa::fpdu_trailer(f.ulpdu_len(), crc);
        if let Some(field) = frame.get_mut(covered..total) {
            field.copy_from_slice(&trailer[len - mpa::CRC_LEN..len]);
        }
    }
    true
}

#[cfg(test)]
#[path = "../transmit_single_tests.rs"]
mod tests;
