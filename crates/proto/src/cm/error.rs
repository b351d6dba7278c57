//! Why an MPA exchange failed, and the Terminate cause that says so.

use softrnic_wire::WireError;
use softrnic_wire::terminate::{Layer, TerminateCause, llp_code, llp_etype};

/// Why our policy refused an initiator's MPA Request ([`CmError::Refused`]). Each maps
/// to the RFC 6581 LLP/MPA code that reports it ([`RefusalReason::llp_code`]); `Display`
/// says it in words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RefusalReason {
    /// [`crate::cm::CrcPolicy::Strict`]: the initiator did not set C.
    CrcPolicy,
    /// The initiator offered only RTR types we do not accept.
    NoMatchingRtr,
    /// Only a Read RTR matched, and an IRD or ORD of zero cannot carry it.
    InsufficientIrd,
    /// The initiator asked for markers (M=1) in what we send, and this responder does
    /// not insert them. softrnic's own transports all do (markers sit at positions
    /// counted from the first FPDU octet); the reason stays for a responder that
    /// refuses, as Linux siw does.
    Markers,
}

impl RefusalReason {
    /// The LLP/MPA error code (RFC 5044 section 8, RFC 6581) of a Terminate that
    /// reports this refusal.
    pub fn llp_code(self) -> u8 {
        match self {
            RefusalReason::CrcPolicy | RefusalReason::Markers => llp_code::INVALID_REQ_REP,
            RefusalReason::NoMatchingRtr => llp_code::NO_MATCHING_RTR,
            RefusalReason::InsufficientIrd => llp_code::INSUFFICIENT_IRD,
        }
    }
}

impl std::fmt::Display for RefusalReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RefusalReason::CrcPolicy => "CRC policy conflict: strict responder, request without C",
            RefusalReason::NoMatchingRtr => "no RTR type in common with the initiator",
            RefusalReason::InsufficientIrd => "Read RTR impossible with an IRD or ORD of zero",
            RefusalReason::Markers => "markers requested, which this transport cannot insert",
        })
    }
}

/// Why an MPA exchange failed. After any of these the connection is over: send what the
/// variant says (a reject reply, or a Terminate with [`CmError::terminate_cause`] where
/// the stream already is in RDMA mode), then close.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CmError {
    /// A malformed frame: bad key, unknown revision, private data too long, a Request
    /// with R set, an enhanced frame too short for its IRD/ORD word.
    #[error("malformed MPA frame: {0}")]
    Wire(#[from] WireError),
    /// The configuration cannot be put on the wire (a local error).
    #[error("bad MPA configuration: {0}")]
    BadConfig(&'static str),
    /// [`crate::cm::CrcPolicy::Strict`] initiator: the reply has C=0.
    #[error("CRC policy is strict but the peer's reply has C=0")]
    CrcRequired,
    /// Peer-to-peer mode: the reply picked an RTR type we did not offer, or none.
    #[error("no matching RTR type: the reply names none that we offered")]
    NoMatchingRtr,
    /// Peer-to-peer mode: the reply picked a Read RTR, but the negotiated ORD is zero.
    #[error("the chosen Read RTR needs an ORD of at least 1 (peer IRD is 0)")]
    InsufficientIrd,
    /// Our policy refuses the request. `reply` is a reject frame (R=1) to send before
    /// closing.
    #[error("connection refused: {reason}")]
    Refused {
        /// The reject reply to send.
        reply: Vec<u8>,
        /// Why.
        reason: RefusalReason,
    },
    /// A frame of the wrong kind: a Request where a Reply is due, or the reverse.
    #[error("unexpected MPA frame kind")]
    UnexpectedFrame,
    /// The reply's revision is higher than the one we requested.
    #[error("MPA reply revision {got} is higher than the requested {sent}")]
    ReplyRevision {
        /// The revision of our request.
        sent: u8,
        /// The revision of the reply.
        got: u8,
    },
    /// `handle_input` was called again after the exchange completed; the octets now
    /// belong to the RDMA stream.
    #[error("the MPA exchange is already complete")]
    Finished,
}

impl CmError {
    /// The Terminate layer/type/code (LLP/MPA, RFC 5044 section 8 and RFC 6581) that
    /// reports this error to the peer.
    pub fn terminate_cause(&self) -> TerminateCause {
        let llp = |code| TerminateCause::new(Layer::Llp, llp_etype::MPA, code);
        match self {
            CmError::Wire(e) => e.terminate_cause(),
            CmError::BadConfig(_) | CmError::Finished => llp(llp_code::LOCAL_CATASTROPHIC),
            CmError::CrcRequired | CmError::UnexpectedFrame | CmError::ReplyRevision { .. } => {
                llp(llp_code::INVALID_REQ_REP)
            }
            CmError::NoMatchingRtr => llp(llp_code::NO_MATCHING_RTR),
            CmError::InsufficientIrd => llp(llp_code::INSUFFICIENT_IRD),
            CmError::Refused { reason, .. } => llp(reason.llp_code()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_keep_their_words_and_codes() {
        for (r, text, code) in [
            (
                RefusalReason::CrcPolicy,
                "CRC policy conflict: strict responder, request without C",
                llp_code::INVALID_REQ_REP,
            ),
            (
                RefusalReason::NoMatchingRtr,
                "no RTR type in common with the initiator",
                llp_code::NO_MATCHING_RTR,
            ),
            (
                RefusalReason::InsufficientIrd,
                "Read RTR impossible with an IRD or ORD of zero",
                llp_code::INSUFFICIENT_IRD,
            ),
            (
                RefusalReason::Markers,
                "markers requested, which this transport cannot insert",
                llp_code::INVALID_REQ_REP,
            ),
        ] {
            assert_eq!(r.to_string(), text);
            let e = CmError::Refused {
                reply: Vec::new(),
                reason: r,
            };
            assert_eq!(e.to_string(), format!("connection refused: {text}"));
            assert_eq!(
                e.terminate_cause(),
                TerminateCause::new(Layer::Llp, llp_etype::MPA, code)
            );
        }
    }
}
