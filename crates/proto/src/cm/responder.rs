//! The passive side: waits for the MPA Request, then accepts or rejects it.

use super::{
    CmError, CrcPolicy, MpaConfig, Negotiated, RefusalReason, Rtr, RtrType, RtrTypes, emit_frame,
    take_frame,
};
use softrnic_wire::{MpaFrameKind, MpaFrameRepr, Rfc6581, WireError};

/// An initiator's MPA Request, as the application sees it before deciding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectRequest {
    /// The requested revision (1 or 2).
    pub revision: u8,
    /// C: the initiator wants CRC32c.
    pub crc: bool,
    /// M: the initiator wants markers in what we send.
    pub markers: bool,
    /// The RFC 6581 word (IRD/ORD, P2P, offered RTR types), if the request carried one.
    pub rfc6581: Option<Rfc6581>,
    /// The ULP private data (without the RFC 6581 word).
    pub private_data: Vec<u8>,
}

/// How far the responder's exchange has come.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResponderProgress {
    /// The Request is not complete yet: call again with more octets.
    NeedMore,
    /// The Request arrived. Decide with [`Responder::accept`] or [`Responder::reject`].
    Request {
        /// The request.
        request: ConnectRequest,
        /// Octets of the input the Request took. Nothing should follow it before our
        /// Reply, but if something does, it is the caller's.
        consumed: usize,
    },
}

/// The passive side of MPA setup. Feed everything received to
/// [`Responder::handle_input`] until the Request is complete, then answer it.
#[derive(Debug, Clone, Default)]
pub struct Responder {
    done: bool,
}

impl Responder {
    /// A responder waiting for a Request.
    pub fn new() -> Self {
        Responder::default()
    }

    /// Processes the octets received so far (the caller accumulates them). Returns
    /// [`ResponderProgress::NeedMore`] until the Request is complete; octets after it are
    /// never consumed. After the Request, further calls fail with [`CmError::Finished`].
    pub fn handle_input(&mut self, input: &[u8]) -> Result<ResponderProgress, CmError> {
        if self.done {
            return Err(CmError::Finished);
        }
        let Some(frame) = take_frame(input, MpaFrameKind::Request)? else {
            return Ok(ResponderProgress::NeedMore);
        };
        self.done = true;
        Ok(ResponderProgress::Request {
            request: ConnectRequest {
                revision: frame.revision,
                crc: frame.crc,
                markers: frame.markers,
                rfc6581: frame.rfc6581,
                private_data: frame.private_data.to_vec(),
            },
            consumed: frame.buffer_len(),
        })
    }

    /// Accepts `req` with our settings `cfg`: returns the Reply frame to send and what
    /// the QP runs with.
    ///
    /// The reply has the lower of the two revisions and carries the RFC 6581 word only
    /// if the request did (an initiator that sent none would take it for private data).
    /// Its IRD is ours and its ORD is min(ours, the initiator's IRD); an initiator whose
    /// ORD exceeds our IRD is not refused (relaxed negotiation): it lowers its ORD.
    ///
    /// Fails with [`CmError::Refused`], carrying a reject reply to send before closing,
    /// when our policy forbids the connection: [`CrcPolicy::Strict`] against C=0, or a
    /// peer-to-peer request without an RTR type we accept. Peer-to-peer mode follows the
    /// request: without P2P in it there is no RTR even if `cfg.peer_to_peer` is set, and
    /// with P2P in it we go along even if `cfg.peer_to_peer` is clear (the initiator
    /// would send its RTR anyway), choosing among `cfg.rtr_types`.
    pub fn accept(
        &self,
        req: &ConnectRequest,
        cfg: &MpaConfig,
    ) -> Result<(Vec<u8>, Negotiated), CmError> {
        cfg.check_settings()?;
        check_request_revision(req)?;
        let revision = cfg.revision.min(req.revision);
        let enhanced = revision == 2 && req.rfc6581.is_some();
        cfg.check_private_data(enhanced)?;

        if cfg.crc == CrcPolicy::Strict && !req.crc {
            return Err(refuse(req, revision, RefusalReason::CrcPolicy));
        }
        // Echo C=1 even when our own policy would not ask for it, as siw does: CRC is on
        // if either side wants it.
        let crc = cfg.crc.sets_crc() || req.crc;

        let peer_ird = req.rfc6581.map_or(cfg.rev1_ird_ord.0, |w| w.ird);
        let ord = cfg.ord.min(peer_ird);

        let rtr = match req.rfc6581 {
            // P2P needs the word in our reply too, so a revision-1 reply cannot do it.
            Some(offer) if offer.peer_to_peer && enhanced => {
                Some(choose_rtr(&offer, cfg).map_err(|reason| refuse(req, revision, reason))?)
            }
            _ => None,
        };

        let rfc6581 = enhanced.then(|| {
            let mut word = Rfc6581 {
                peer_to_peer: rtr.is_some(),
                ird: cfg.ird,
                ord,
                ..Rfc6581::default()
            };
            if let Some(kind) = rtr {
                kind.flag().apply_to(&mut word);
            }
            word
        });
        let reply = emit_frame(&MpaFrameRepr {
            kind: MpaFrameKind::Reply,
            markers: cfg.markers,
            crc,
            reject: false,
            enhanced,
            reserved: 0,
            revision,
            rfc6581,
            private_data: &cfg.private_data,
        })?;
        let negotiated = Negotiated {
            revision,
            crc,
            markers_tx: req.markers,
            markers_rx: cfg.markers,
            ird: cfg.ird,
            ord,
            rtr: rtr.map(|kind| Rtr {
                kind,
                we_send: false,
            }),
            peer_private_data: req.private_data.clone(),
            peer_rfc6581: req.rfc6581,
        };
        Ok((reply, negotiated))
    }

    /// A reject Reply (R=1) carrying `private_data` for the initiator's application.
    /// Send it, then close the connection. It has the request's revision, C=0, M=0 and,
    /// when the request was enhanced, an all-zero RFC 6581 word: what siw sends.
    pub fn reject(&self, req: &ConnectRequest, private_data: &[u8]) -> Result<Vec<u8>, CmError> {
        check_request_revision(req)?;
        reject_frame(req, req.revision, private_data)
    }
}

/// A [`ConnectRequest`] is public and may be built by hand: refuse revisions we cannot
/// emit rather than produce a frame that would not parse.
fn check_request_revision(req: &ConnectRequest) -> Result<(), CmError> {
    match req.revision {
        1 | 2 => Ok(()),
        r => Err(CmError::Wire(WireError::BadMpaRevision(r))),
    }
}

fn reject_frame(
    req: &ConnectRequest,
    revision: u8,
    private_data: &[u8],
) -> Result<Vec<u8>, CmError> {
    let enhanced = revision == 2 && req.rfc6581.is_some();
    if private_data.len() > MpaConfig::private_data_limit(enhanced) {
        return Err(CmError::BadConfig(
            "reject private data too long for an MPA frame",
        ));
    }
    emit_frame(&MpaFrameRepr {
        kind: MpaFrameKind::Reply,
        markers: false,
        crc: false,
        reject: true,
        enhanced,
        reserved: 0,
        revision,
        rfc6581: enhanced.then(Rfc6581::default),
        private_data,
    })
}

/// [`CmError::Refused`] with a reject reply (no private data) of `revision`.
fn refuse(req: &ConnectRequest, revision: u8, reason: RefusalReason) -> CmError {
    match reject_frame(req, revision, &[]) {
        Ok(reply) => CmError::Refused { reply, reason },
        Err(e) => e,
    }
}

/// Picks the RTR type for a peer-to-peer request: the most preferred one the initiator
/// offered and `cfg` accepts. A Read RTR is only possible when our IRD and the
/// initiator's ORD leave room for one Read. Errs with the reason for refusing.
fn choose_rtr(offer: &Rfc6581, cfg: &MpaConfig) -> Result<RtrType, RefusalReason> {
    let common = RtrTypes::from_rfc6581(offer) & cfg.rtr_types;
    let read_fits = cfg.ird >= 1 && offer.ord >= 1;
    RtrType::PREFERENCE
        .into_iter()
        .filter(|t| common.contains(t.flag()))
        .find(|&t| t != RtrType::Read || read_fits)
        .ok_or(if common.contains(RtrTypes::READ) {
            RefusalReason::InsufficientIrd
        } else {
            RefusalReason::NoMatchingRtr
        })
}
