//! Diagnostic events through the `tracing` facade: MPA exchanges with what they
//! negotiated, QP state changes, Terminates sent and received, connection loss and
//! close, CQ overflow, engine start. Nothing is emitted unless the program installs a
//! subscriber (the `softrnic` command does when `RUST_LOG` or `--log` asks); when none
//! listens, each call site costs one relaxed load and a compare.
//!
//! The protocol core is I/O free and says nothing itself: these are emitted where the
//! rnic layer observes a change (an MPA frame read or written, a QP's state after it
//! was driven, an asynchronous event posted). Every event names its device (`dev`, a
//! number unique in the process, since QP numbers repeat across devices) and, where
//! there is one, its QP. Targets: `softrnic_rnic::cm` (MPA), `softrnic_rnic::qp`
//! (states, Terminates, connections), `softrnic_rnic::cq`, `softrnic_rnic::engine`.

use crate::device::AsyncEvent;
use crate::engine::EngineInfo;
use crate::error::Error;
use softrnic_proto::cm::{ConnectRequest, MpaConfig, Negotiated, RefusalReason};
use softrnic_proto::{QpId, QpState};
use std::net::SocketAddr;
use tracing::{debug, info, warn};

const CM: &str = "softrnic_rnic::cm";
const QP: &str = "softrnic_rnic::qp";
const CQ: &str = "softrnic_rnic::cq";
const SRQ: &str = "softrnic_rnic::srq";
const ENGINE: &str = "softrnic_rnic::engine";

/// An asynchronous event as it is posted: connection established or closed, a QP gone
/// to error with a Terminate (sent or received), a lost transport, a CQ overflow.
pub(crate) fn async_event(dev: u32, e: &AsyncEvent) {
    match *e {
        AsyncEvent::Established { qp } => info!(target: QP, dev, qp = qp.0, "connected"),
        AsyncEvent::Disconnected { qp } => info!(target: QP, dev, qp = qp.0, "disconnected"),
        AsyncEvent::QpFatal { qp, cause, remote } => {
            let (layer, etype, code) = (cause.layer.to_bits(), cause.etype, cause.code);
            if remote {
                warn!(target: QP, dev, qp = qp.0, layer, etype, code, %cause, "Terminate received");
            } else {
                warn!(target: QP, dev, qp = qp.0, layer, etype, code, %cause, "Terminate sent");
            }
        }
        AsyncEvent::ConnectionLost { qp, error } => {
            warn!(target: QP, dev, qp = qp.0, ?error, "connection lost");
        }
        AsyncEvent::CqOverflow { cq } => warn!(target: CQ, dev, cq, "CQ overflow"),
        AsyncEvent::SrqLimitReached { srq } => info!(target: SRQ, dev, srq, "SRQ limit reached"),
        AsyncEvent::SrqSoftLimit { srq, analysis: a } => {
            info!(target: SRQ, dev, srq, qp = a.qp.0, count = a.count, available = a.available,
                sustained = a.sustained, verdict = ?a.verdict, "SRQ soft limit")
        }
        AsyncEvent::SrqHardLimit { srq, analysis: a } => {
            warn!(target: SRQ, dev, srq, qp = a.qp.0, count = a.count, limit = ?a.limit,
                "SRQ hard limit: terminating the QP")
        }
        AsyncEvent::SrqBelowTarget {
            srq,
            target,
            posted,
        } => {
            debug!(target: SRQ, dev, srq, target, posted, "SRQ below its target depth")
        }
    }
}

/// Reports a QP's state when it differs from the last one reported (`last`).
#[inline]
pub(crate) fn qp_state(dev: u32, qp: QpId, last: &mut QpState, now: QpState) {
    if *last != now {
        debug!(target: QP, dev, qp = qp.0, from = ?*last, to = ?now, "QP state");
        *last = now;
    }
}

/// An engine thread is serving.
pub(crate) fn engine_started(dev: u32, e: &EngineInfo) {
    debug!(target: ENGINE, dev, vector = e.vector, cpu = e.cpu, tid = e.tid, "engine started");
}

/// Initiator: our MPA Request is out.
pub(crate) fn mpa_request_sent(dev: u32, qp: QpId, peer: SocketAddr, cfg: &MpaConfig) {
    debug!(
        target: CM, dev, qp = qp.0, %peer,
        revision = cfg.revision, crc = ?cfg.crc, markers = cfg.markers,
        ird = cfg.ird, ord = cfg.ord, p2p = cfg.peer_to_peer,
        private_data = cfg.private_data.len(),
        "MPA Request sent"
    );
}

/// Responder: the initiator's MPA Request arrived.
pub(crate) fn mpa_request_received(dev: u32, peer: SocketAddr, r: &ConnectRequest) {
    debug!(
        target: CM, dev, %peer,
        revision = r.revision, crc = r.crc, markers = r.markers,
        ird = r.rfc6581.map(|w| w.ird), ord = r.rfc6581.map(|w| w.ord),
        p2p = r.rfc6581.is_some_and(|w| w.peer_to_peer),
        private_data = r.private_data.len(),
        "MPA Request received"
    );
}

/// The exchange is over and the QP runs with `n`: `accepted` on the responder (our
/// Reply is out), otherwise on the initiator (the peer's Reply arrived).
pub(crate) fn mpa_established(
    dev: u32,
    qp: QpId,
    peer: SocketAddr,
    n: &Negotiated,
    accepted: bool,
) {
    let what = if accepted {
        "MPA Reply sent: accepted"
    } else {
        "MPA Reply received: accepted"
    };
    info!(
        target: CM, dev, qp = qp.0, %peer,
        revision = n.revision, crc = n.crc, ird = n.ird, ord = n.ord,
        markers_tx = n.markers_tx, markers_rx = n.markers_rx, rtr = ?n.rtr,
        private_data = n.peer_private_data.len(),
        "{what}"
    );
}

/// Responder: we sent a reject Reply, because the application said so (`reason`
/// `None`) or because our policy refuses the request.
pub(crate) fn mpa_reject_sent(dev: u32, peer: SocketAddr, reason: Option<RefusalReason>) {
    match reason {
        Some(r) => info!(target: CM, dev, %peer, reason = %r, "MPA Reply sent: refused"),
        None => info!(target: CM, dev, %peer, "MPA Reply sent: rejected"),
    }
}

/// Responder: a listener dropped a connection before its MPA Request was whole (late,
/// evicted, refused, not MPA, malformed).
pub(crate) fn mpa_dropped(dev: u32, peer: SocketAddr, why: &str) {
    info!(target: CM, dev, %peer, why, "connection dropped during MPA setup");
}

/// Initiator: the first FPDU is held this long after the MPA exchange took `rtt`.
pub(crate) fn first_fpdu_hold(
    dev: u32,
    qp: QpId,
    peer: SocketAddr,
    rtt: std::time::Duration,
    hold: std::time::Duration,
) {
    debug!(
        target: CM, dev, qp = qp.0, %peer,
        rtt_us = rtt.as_micros() as u64, hold_us = hold.as_micros() as u64,
        "first FPDU held after the MPA Reply"
    );
}

/// Either side: the exchange failed.
pub(crate) fn mpa_failed(dev: u32, e: &Error) {
    info!(target: CM, dev, error = %e, fault = %e.fault(), "MPA exchange failed");
}
