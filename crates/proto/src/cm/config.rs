//! What one side of an MPA exchange wants and can do.

use super::CmError;
use bitflags::bitflags;
use softrnic_wire::Rfc6581;
use softrnic_wire::mpa::{MAX_PRIVATE_DATA, RFC6581_LEN};

/// How we treat CRC32c on the MPA stream.
///
/// CRC is on as soon as either side sets C (RFC 5044), so the policies differ only in
/// what we send and in what we tolerate from the peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CrcPolicy {
    /// Send C=0, but use CRC if the peer asks for it. Linux siw's default, and ours:
    /// over TCP the checksum mostly guards against middleboxes that rewrite payload.
    #[default]
    Off,
    /// Send C=1: CRC is on whatever the peer says.
    Required,
    /// Like [`CrcPolicy::Required`], and the peer must set C=1 too: a responder refuses a
    /// request with C=0 (reject reply), an initiator aborts on a reply with C=0. This is
    /// siw's `mpa_crc_strict` rule, "the peer's C must equal ours", with ours being 1.
    Strict,
}

impl CrcPolicy {
    /// The C flag we put into our own frame.
    pub fn sets_crc(self) -> bool {
        self != CrcPolicy::Off
    }
}

/// A zero-length message that can serve as the RTR of peer-to-peer mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RtrType {
    /// A zero-length Send (needs a posted receive at the responder, which is why siw and
    /// we prefer the others).
    Send,
    /// A zero-length RDMA Write.
    Write,
    /// A zero-length RDMA Read Request (uses one ORD slot of the initiator and one IRD
    /// slot of the responder).
    Read,
}

impl RtrType {
    /// The order a responder picks in when several types are possible: Write first, as
    /// siw does (it costs the responder nothing), then Read, then Send.
    pub const PREFERENCE: [RtrType; 3] = [RtrType::Write, RtrType::Read, RtrType::Send];

    /// The flag for this type.
    pub fn flag(self) -> RtrTypes {
        match self {
            RtrType::Send => RtrTypes::SEND,
            RtrType::Write => RtrTypes::WRITE,
            RtrType::Read => RtrTypes::READ,
        }
    }
}

bitflags! {
    /// A set of RTR message types.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct RtrTypes: u8 {
        /// Zero-length Send (RFC 6581: IRD half, bit 14).
        const SEND = 1 << 0;
        /// Zero-length RDMA Write (ORD half, bit 15).
        const WRITE = 1 << 1;
        /// Zero-length RDMA Read (ORD half, bit 14).
        const READ = 1 << 2;
    }
}

impl Default for RtrTypes {
    /// Write and Read, like siw: a zero-length Send would consume a receive buffer.
    fn default() -> Self {
        RtrTypes::WRITE | RtrTypes::READ
    }
}

impl RtrTypes {
    /// The RTR bits of an RFC 6581 word (offered types in a Request, the chosen one in
    /// a Reply), regardless of its P2P bit.
    pub fn from_rfc6581(word: &Rfc6581) -> Self {
        let mut t = RtrTypes::empty();
        t.set(RtrTypes::SEND, word.rtr_send);
        t.set(RtrTypes::WRITE, word.rtr_write);
        t.set(RtrTypes::READ, word.rtr_read);
        t
    }

    /// Writes these types into the RTR bits of `word` (the P2P bit is left alone).
    pub fn apply_to(self, word: &mut Rfc6581) {
        word.rtr_send = self.contains(RtrTypes::SEND);
        word.rtr_write = self.contains(RtrTypes::WRITE);
        word.rtr_read = self.contains(RtrTypes::READ);
    }
}

/// One side's MPA settings. The defaults match Linux siw's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MpaConfig {
    /// MPA revision: 2 (RFC 6581 enhanced setup, the default) or 1 (plain RFC 5044).
    pub revision: u8,
    /// CRC policy.
    pub crc: CrcPolicy,
    /// Ask the peer to insert markers into what it sends us (we set M). Off by default:
    /// siw refuses markers. A peer's own request for markers is always honoured.
    pub markers: bool,
    /// Our inbound RDMA Read depth: Read Requests we serve concurrently (at most
    /// [`MpaConfig::MAX_DEPTH`]).
    pub ird: u16,
    /// Our outbound RDMA Read depth: Read Requests we would like to have outstanding (at
    /// most [`MpaConfig::MAX_DEPTH`]; the peer's IRD may lower it).
    pub ord: u16,
    /// RFC 6581 peer-to-peer mode: an RTR message goes from initiator to responder
    /// before any other FPDU. Needs revision 2.
    pub peer_to_peer: bool,
    /// The RTR types we can send (initiator) or accept (responder).
    pub rtr_types: RtrTypes,
    /// ULP private data for our Request or Reply: at most 508 octets with revision 2
    /// (the RFC 6581 word takes 4 of the 512), 512 with revision 1.
    pub private_data: Vec<u8>,
    /// (IRD, ORD) to assume for a peer whose frame carries none (revision 1, or
    /// revision 2 without the enhanced flag). Default (1, 1): enough for the usual single
    /// outstanding Read. Linux siw assumes 0 here, and a revision-1 rping then fails its
    /// first RDMA Read; we would rather let one Read through, which every RNIC supports.
    /// Only the IRD half matters today (it caps our ORD): each side's IRD is its own.
    pub rev1_ird_ord: (u16, u16),
}

impl Default for MpaConfig {
    fn default() -> Self {
        MpaConfig {
            revision: 2,
            crc: CrcPolicy::Off,
            markers: false,
            ird: 16,
            ord: 16,
            peer_to_peer: false,
            rtr_types: RtrTypes::default(),
            private_data: Vec::new(),
            rev1_ird_ord: (1, 1),
        }
    }
}

impl MpaConfig {
    /// Largest IRD or ORD: the RFC 6581 fields have 14 bits.
    pub const MAX_DEPTH: u16 = Rfc6581::MAX_DEPTH;

    /// Private data octets a frame may carry besides the RFC 6581 word.
    pub fn private_data_limit(enhanced: bool) -> usize {
        if enhanced {
            MAX_PRIVATE_DATA - RFC6581_LEN
        } else {
            MAX_PRIVATE_DATA
        }
    }

    /// Checks everything except the private data length, which depends on the
    /// revision a responder ends up replying with.
    pub(crate) fn check_settings(&self) -> Result<(), CmError> {
        if self.revision != 1 && self.revision != 2 {
            return Err(CmError::BadConfig("MPA revision must be 1 or 2"));
        }
        if self.ird > Self::MAX_DEPTH || self.ord > Self::MAX_DEPTH {
            return Err(CmError::BadConfig("IRD and ORD must not exceed 0x3fff"));
        }
        if self.peer_to_peer && self.revision != 2 {
            return Err(CmError::BadConfig("peer-to-peer mode needs MPA revision 2"));
        }
        if self.peer_to_peer && self.rtr_types.is_empty() {
            return Err(CmError::BadConfig(
                "peer-to-peer mode needs at least one RTR type",
            ));
        }
        Ok(())
    }

    /// Checks that `private_data` fits a frame with or without the RFC 6581 word.
    pub(crate) fn check_private_data(&self, enhanced: bool) -> Result<(), CmError> {
        if self.private_data.len() > Self::private_data_limit(enhanced) {
            return Err(CmError::BadConfig("private data too long for an MPA frame"));
        }
        Ok(())
    }

    /// Validates the whole configuration for a frame of `self.revision`.
    pub fn validate(&self) -> Result<(), CmError> {
        self.check_settings()?;
        self.check_private_data(self.revision == 2)
    }
}
