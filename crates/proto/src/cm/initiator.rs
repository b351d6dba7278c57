//! The active side: sends the MPA Request, waits for the Reply.

use super::{
    CmError, CrcPolicy, MpaConfig, Negotiated, Rtr, RtrType, RtrTypes, emit_frame, take_frame,
};
use softrnic_wire::{MpaFrameKind, MpaFrameRepr, Rfc6581};

/// How far the initiator's exchange has come.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitiatorProgress {
    /// The Reply is not complete yet: call again with more octets.
    NeedMore,
    /// The responder accepted. The stream is in RDMA mode from `consumed` on.
    Established {
        /// What the QP runs with.
        negotiated: Negotiated,
        /// Octets of the input the Reply took; the rest are FPDUs.
        consumed: usize,
    },
    /// The responder set R=1. The connection is over (no FPDUs will follow).
    Rejected {
        /// The responder's ULP private data (without an RFC 6581 word).
        private_data: Vec<u8>,
        /// Octets of the input the Reply took.
        consumed: usize,
    },
}

/// The active side of MPA setup. Send [`Initiator::request`] once TCP is connected, then
/// feed everything received to [`Initiator::handle_input`] until it completes.
#[derive(Debug, Clone)]
pub struct Initiator {
    cfg: MpaConfig,
    done: bool,
}

impl Initiator {
    /// Checks `cfg` (revision, IRD/ORD range, private data size, P2P settings).
    pub fn new(cfg: MpaConfig) -> Result<Self, CmError> {
        cfg.validate()?;
        Ok(Initiator { cfg, done: false })
    }

    /// The configuration in use.
    pub fn config(&self) -> &MpaConfig {
        &self.cfg
    }

    /// The RFC 6581 word we offer: our IRD/ORD and, in P2P mode, the RTR types we can
    /// send. `None` for revision 1, which never sets the enhanced flag.
    fn offer(&self) -> Option<Rfc6581> {
        (self.cfg.revision == 2).then(|| {
            let mut word = Rfc6581 {
                peer_to_peer: self.cfg.peer_to_peer,
                ird: self.cfg.ird,
                ord: self.cfg.ord,
                ..Rfc6581::default()
            };
            if self.cfg.peer_to_peer {
                self.cfg.rtr_types.apply_to(&mut word);
            }
            word
        })
    }

    /// The MPA Request frame, to be sent before anything else on the connection.
    pub fn request(&self) -> Vec<u8> {
        let rfc6581 = self.offer();
        let repr = MpaFrameRepr {
            kind: MpaFrameKind::Request,
            markers: self.cfg.markers,
            crc: self.cfg.crc.sets_crc(),
            reject: false,
            enhanced: rfc6581.is_some(),
            reserved: 0,
            revision: self.cfg.revision,
            rfc6581,
            private_data: &self.cfg.private_data,
        };
        // `new` validated everything `emit` checks (revision, private data length), and
        // the configuration cannot change afterwards.
        emit_frame(&repr).expect("configuration validated by Initiator::new")
    }

    /// Processes the octets received so far (the caller accumulates them; the same
    /// prefix may be passed again with more octets behind it). Returns
    /// [`InitiatorProgress::NeedMore`] until the Reply is complete; octets after it are
    /// never consumed. After completion, further calls fail with [`CmError::Finished`].
    pub fn handle_input(&mut self, input: &[u8]) -> Result<InitiatorProgress, CmError> {
        if self.done {
            return Err(CmError::Finished);
        }
        let Some(reply) = take_frame(input, MpaFrameKind::Reply)? else {
            return Ok(InitiatorProgress::NeedMore);
        };
        let consumed = reply.buffer_len();
        // A reject ends the connection whatever else the frame says; its private data is
        // for the application (often the reason).
        if reply.reject {
            self.done = true;
            return Ok(InitiatorProgress::Rejected {
                private_data: reply.private_data.to_vec(),
                consumed,
            });
        }
        let negotiated = self.conclude(&reply)?;
        self.done = true;
        Ok(InitiatorProgress::Established {
            negotiated,
            consumed,
        })
    }

    /// Applies the negotiation rules to an accepting Reply.
    fn conclude(&self, reply: &MpaFrameRepr<'_>) -> Result<Negotiated, CmError> {
        let cfg = &self.cfg;
        if reply.revision > cfg.revision {
            return Err(CmError::ReplyRevision {
                sent: cfg.revision,
                got: reply.revision,
            });
        }
        if cfg.crc == CrcPolicy::Strict && !reply.crc {
            return Err(CmError::CrcRequired);
        }
        // A reply of our revision 2 may still lack the word (no enhanced flag): then the
        // responder told us nothing, as a revision-1 one would.
        let peer_ird = reply.rfc6581.map_or(cfg.rev1_ird_ord.0, |w| w.ird);
        let ord = cfg.ord.min(peer_ird);
        let rtr = match reply.rfc6581 {
            Some(word) if word.peer_to_peer => Some(self.rtr_from_reply(&word, ord)?),
            // Without P2P in the reply (responder declined it, or answered with revision
            // 1) we are in client/server mode: the application's first FPDU goes first.
            _ => None,
        };
        Ok(Negotiated {
            revision: reply.revision,
            crc: cfg.crc.sets_crc() || reply.crc,
            markers_tx: reply.markers,
            markers_rx: cfg.markers,
            ird: cfg.ird,
            ord,
            rtr,
            peer_private_data: reply.private_data.to_vec(),
            peer_rfc6581: reply.rfc6581,
        })
    }

    /// The RTR the responder chose. A compliant reply names exactly one type we offered;
    /// we take the most preferred of those it names that we can send. A reply that
    /// turns on P2P although we did not ask is honoured the same way (the responder will
    /// wait for an RTR), as long as the type is one we can send.
    fn rtr_from_reply(&self, word: &Rfc6581, ord: u16) -> Result<Rtr, CmError> {
        let usable = RtrTypes::from_rfc6581(word) & self.cfg.rtr_types;
        let kind = RtrType::PREFERENCE
            .into_iter()
            .find(|t| usable.contains(t.flag()))
            .ok_or(CmError::NoMatchingRtr)?;
        // A zero-length Read Request still occupies an ORD slot until its response.
        if kind == RtrType::Read && ord == 0 {
            return Err(CmError::InsufficientIrd);
        }
        Ok(Rtr {
            kind,
            we_send: true,
        })
    }
}
