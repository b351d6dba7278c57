//! A claimed QP's receive in one pass: a busy-polling consumer that holds the socket
//! (`QpShared::claim`) reads into the kept staging buffer, and whole small FPDUs of
//! data messages go through the core's run path at once, without the general receive
//! path's loop, its checks between reads and its set-up. Everything else (a partial
//! or large FPDU, a control message, a Terminate, a malformed FPDU, an end of stream
//! or a failed read) is left to the general path exactly where it is: the octets read
//! stay staged, an end or a failure stays pending as the general path's next read.
//!
//! Why: on an 8-octet ping-pong's side every instruction between the `recvfrom` that
//! brings the message and the reply's post is latency, and so is half of every empty
//! poll's (docs/ARCHITECTURE.md, "Session 24").

use super::{Driven, RX_STAGING_LEN, Staging, answer_reads, ctx_for, would_block};
use crate::device::Shared;
use crate::qp::{Conn, QpStats};
use crate::srq::{SrqShared, SrqSource};
use softrnic_proto::qp::{Qp as Core, RxNeed};

/// What [`receive_claimed`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Quick {
    /// The stream was empty: nothing moved.
    Empty,
    /// The receive is done for this pass, as the general path would have ended it
    /// (whole FPDUs taken and the stream empty, or the receive stopped): the pass goes
    /// on as after a receive that moved.
    Took,
    /// Octets were read that the general receive path goes on with (left staged, or
    /// a full read after which the stream may hold more): call it, then go on as after
    /// a receive that moved.
    Rest,
    /// The pass does not apply (or its read ended the stream or failed, kept pending):
    /// run the general pass from its start.
    General,
}

/// Whether the one-pass receive applies: read-ahead mode between FPDUs with nothing
/// staged or pending, the buffer kept (claimed), the stream neither ended nor held back.
#[inline]
fn applies(core: &Core, staging: &Staging) -> bool {
    staging.keep
        && !staging.exact
        && staging.start == staging.end
        && staging.buf.len() >= RX_STAGING_LEN
        && staging.pending.is_none()
        && matches!(core.rx_need(), RxNeed::Internal(_))
        && !core.rx_mid_fpdu()
        && !core.peer_finished()
        && !core.transport_closed()
}

/// A claimed, quiet QP's receive (the caller checked: RTS, nothing queued to send,
/// no close timer, not closing): one read; whole small FPDUs parsed, checked, placed
/// and completed in one call of the core. See [`Quick`] for what is left to the caller.
#[inline]
pub(crate) fn receive_claimed(
    at: Driven,
    core: &mut Core,
    conn: &mut Conn,
    stats: &mut QpStats,
    staging: &mut Staging,
    dev: &Shared,
    srq: Option<&SrqShared>,
) -> Quick {
    if !applies(core, staging) {
        return Quick::General;
    }
    stats.rx_syscalls += 1;
    let n = match conn.transport.read(&mut staging.buf[..RX_STAGING_LEN]) {
        Ok(n) if n > 0 => n,
        Err(e) if would_block(&e) => {
            staging.waited = true;
            return Quick::Empty;
        }
        r => {
            // An end of stream, an interrupted or failed read: the general path's.
            staging.pending = Some(r);
            return Quick::General;
        }
    };
    staging.waited = false;
    staging.start = 0;
    staging.end = n;
    take_staged(at, core, conn, stats, staging, dev, srq, n)
}

/// [`receive_claimed`] once `n` octets are staged: the run of whole FPDUs at their
/// front, as `receive::feed` takes it (every octet read fits the staging buffer, so
/// every whole FPDU is small).
#[allow(clippy::too_many_arguments)]
#[inline]
fn take_staged(
    at: Driven,
    core: &mut Core,
    conn: &mut Conn,
    stats: &mut QpStats,
    staging: &mut Staging,
    dev: &Shared,
    srq: Option<&SrqShared>,
    n: usize,
) -> Quick {
    let mut src = srq.map(|s| SrqSource { srq: s, dev });
    let mut ctx = ctx_for(dev, &mut src);
    let mut lost = false;
    let mut copied = 0;
    let buf = std::mem::take(&mut staging.buf);
    let region = &mut staging.region;
    let run = core.rx_take_run(&buf[..n], usize::MAX, &mut ctx, &mut |c, bytes| {
        let ok = region
            .get(dev, c.region)
            .map(|r| r.write(c.offset as usize, bytes).is_ok());
        // A region deregistered after the TPT check: the payload has nowhere to go.
        debug_assert!(ok != Some(false), "placement outside its region: {c:?}");
        lost = ok != Some(true);
        copied += if lost { 0 } else { bytes.len() };
        !lost
    });
    staging.buf = buf;
    let Some(run) = run else {
        // Not a whole data FPDU at the front: the general path takes the octets.
        return Quick::Rest;
    };
    stats.rx_copied_bytes += copied as u64;
    if lost {
        // As `feed`'s failed placement: the QP is in error, the receive ends.
        core.to_error();
        return Quick::Took;
    }
    staging.start = run.taken;
    staging.after_payload = false;
    if run.fpdus > 0 {
        staging.after_small_run(core, run.fpdus);
        if !run.complete {
            staging.after_internal(core);
        }
    } else {
        staging.after_internal(core);
    }
    if run.taken < n {
        // `feed` would go on with the rest in the same call, then answer reads.
        return Quick::Rest;
    }
    answer_reads(at, core, conn, stats, dev);
    if matches!(core.rx_need(), RxNeed::Stopped | RxNeed::Wait) {
        return Quick::Took;
    }
    // A short read emptied the kernel's queue: the general path would ask the
    // transport now and stop (`PolledTransport::drained`), which also forgets that the
    // queue was empty; so does this pass. After a full read it reads on.
    if n < RX_STAGING_LEN && conn.transport.drained() {
        return Quick::Took;
    }
    Quick::Rest
}

#[cfg(test)]
#[path = "quick_tests.rs"]
mod tests;
