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

use super::{Driven, Fed, RX_STAGING_LEN, Staging, answer_reads, feed};
use crate::device::Shared;
use crate::qp::{Conn, QpStats};
use crate::srq::SrqShared;
use crate::transport::ClaimedRead;
use softrnic_proto::qp::{Qp as Core, RecvHandoff, RxNeed};

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
    /// As [`Quick::Took`], and the core's simple path took the whole read
    /// (`receive::Fed::simple`): nothing was queued to send, and the state, the close
    /// and its timer are as before the read. The pass goes on only to deliver what the
    /// read released, if anything.
    Simple,
}

/// Whether the one-pass receive applies: read-ahead mode between FPDUs of an unmarked
/// stream with nothing staged or pending, the buffer kept (claimed), the stream
/// neither ended nor held back by its receive queue.
#[inline]
fn applies(core: &Core, staging: &Staging) -> bool {
    staging.keep
        && !staging.fed.exact
        && staging.start == staging.end
        && staging.buf.len() >= RX_STAGING_LEN
        && staging.pending.is_none()
        && core.rx_between_fpdus()
        && !core.peer_finished()
        && !core.transport_closed()
}

/// A claimed, quiet QP's receive (the caller checked: nothing queued to send, no
/// close timer, not closing): one read into the kept staging buffer, its octets fed
/// to the core at once (`feed`: whole small FPDUs parsed, checked, placed and
/// completed by its run path; a receive completion offered to `to` first, see
/// `crate::cq_direct`). See [`Quick`] for what is left to the caller.
#[inline]
#[allow(clippy::too_many_arguments)] // The QP's parts, borrowed apart.
pub(crate) fn receive_claimed(
    at: Driven,
    core: &mut Core,
    conn: &mut Conn,
    stats: &mut QpStats,
    staging: &mut Staging,
    dev: &Shared,
    srq: Option<&SrqShared>,
    to: &mut impl RecvHandoff,
) -> Quick {
    if !applies(core, staging) {
        return Quick::General;
    }
    receive_applying(at, core, conn, stats, staging, dev, srq, to)
}

/// [`receive_claimed`] for a caller that knows its `applies` holds: a drive with the
/// consumer's quiet mark set (`QpInner::quiet_claimed`). The mark outlives only
/// empty reads made after `applies` held, which change none of its inputs, and every
/// other holder of the QP's lock clears it; so the answer stands, and the empty poll
/// does not ask it again (about 25 instructions).
#[inline]
#[allow(clippy::too_many_arguments)] // The QP's parts, borrowed apart.
pub(crate) fn receive_applying(
    at: Driven,
    core: &mut Core,
    conn: &mut Conn,
    stats: &mut QpStats,
    staging: &mut Staging,
    dev: &Shared,
    srq: Option<&SrqShared>,
    to: &mut impl RecvHandoff,
) -> Quick {
    debug_assert!(
        applies(core, staging),
        "a quiet mark outlived its receive's checks"
    );
    // The two answers a stale mark would lose data over, kept in release builds too
    // (two compares): octets still staged, or a kept end of stream or error, would be
    // overwritten by the read below. The general path takes them as they are.
    if staging.start != staging.end || staging.pending.is_some() {
        return Quick::General;
    }
    stats.rx_syscalls += 1;
    let n = match conn
        .transport
        .read_claimed(&mut staging.buf[..RX_STAGING_LEN])
    {
        ClaimedRead::Got(n) if n > 0 => n,
        ClaimedRead::Empty => {
            staging.waited = true;
            return Quick::Empty;
        }
        // An end of stream, an interrupted or failed read: the general path's.
        ClaimedRead::Got(n) => {
            staging.pending = Some(Ok(n));
            return Quick::General;
        }
        ClaimedRead::Failed(e) => {
            staging.pending = Some(Err(e));
            return Quick::General;
        }
    };
    staging.waited = false;
    staging.start = 0;
    staging.end = n;
    // As the general path's loop takes a read-ahead, once, where it lies.
    let fed = feed(
        core,
        stats,
        &mut staging.fed,
        dev,
        srq,
        &staging.buf[..n],
        to,
    );
    let Ok(Fed { used, simple }) = fed else {
        // A placement failed: the QP is in error, the receive ends.
        return Quick::Took;
    };
    staging.start += used;
    answer_reads(at, core, conn, stats, dev);
    if simple {
        // Whole FPDUs, the stream between two, the core taking octets: of the
        // checks below only the kernel queue's is left.
        return if n < RX_STAGING_LEN && conn.transport.drained_polled() {
            Quick::Simple
        } else {
            Quick::Rest
        };
    }
    // (Between FPDUs the core neither stopped nor waits: the common case asks no more.)
    if used == 0
        || (!core.rx_between_fpdus() && matches!(core.rx_need(), RxNeed::Stopped | RxNeed::Wait))
    {
        return Quick::Took;
    }
    if used < n {
        // The general path feeds the rest.
        return Quick::Rest;
    }
    // A short read emptied the kernel's queue: the general path would ask the
    // transport now and stop (`PolledTransport::drained`), which also forgets that the
    // queue was empty; so does this pass. After a full read it reads on.
    if n < RX_STAGING_LEN && conn.transport.drained_polled() {
        return Quick::Took;
    }
    Quick::Rest
}

#[cfg(test)]
#[path = "quick_tests.rs"]
mod tests;
