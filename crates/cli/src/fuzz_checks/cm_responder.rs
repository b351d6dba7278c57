//! The `cm_responder` property: proto's MPA responder takes arbitrary octets from an
//! initiator without panicking, and every reply it produces (accept, policy refusal,
//! application reject) is a well-formed MPA Reply.

use softrnic_proto::cm::{
    CmError, CrcPolicy, MpaConfig, Negotiated, Responder, ResponderProgress, RtrTypes,
};
use softrnic_wire::{MpaFrameKind, MpaFrameRepr};

/// Octets at the start of the input that choose the responder's settings.
pub const SETUP_LEN: usize = 2;

/// The responder's settings from the two setup octets. First octet: bit 0 revision 1
/// (else 2), bits 1-2 CRC policy (off, required, strict, off), bit 3 peer-to-peer,
/// bits 4-6 the RTR types accepted (Send, Write, Read), bit 7 markers. Second octet:
/// IRD in the low nibble, ORD in the high one.
pub fn config(mode: u8, depths: u8) -> MpaConfig {
    MpaConfig {
        revision: if mode & 1 != 0 { 1 } else { 2 },
        crc: match (mode >> 1) & 3 {
            1 => CrcPolicy::Required,
            2 => CrcPolicy::Strict,
            _ => CrcPolicy::Off,
        },
        peer_to_peer: mode & 8 != 0,
        rtr_types: RtrTypes::from_bits_truncate((mode >> 4) & 7),
        markers: mode & 0x80 != 0,
        ird: u16::from(depths & 0x0f),
        ord: u16::from(depths >> 4),
        private_data: b"responder".to_vec(),
        ..MpaConfig::default()
    }
}

/// What the responder did with an input, for tests that want a seed to reach a branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The input is shorter than the setup, or than a Request.
    NeedMore,
    /// The input is not a Request.
    Malformed(CmError),
    /// Accepted with these parameters.
    Accepted(Negotiated),
    /// Refused by our policy (a reject reply was produced).
    Refused,
    /// Our settings cannot be put on the wire.
    BadConfig(CmError),
}

/// The `cm_responder` fuzz target's check.
pub fn cm_responder(data: &[u8]) {
    let _ = cm_responder_outcome(data);
}

/// [`cm_responder`]'s check, returning what the responder did.
pub fn cm_responder_outcome(data: &[u8]) -> Outcome {
    let Some(([mode, depths], input)) = data.split_first_chunk::<SETUP_LEN>() else {
        return Outcome::NeedMore;
    };
    let cfg = config(*mode, *depths);
    let mut r = Responder::new();
    // Fed the way octets arrive: growing prefixes, cut inside and after the frame
    // header, until the Request is complete or refused.
    let mut cuts = vec![1, 4, 16, 19, 20, 23, 24, input.len()];
    cuts.retain(|&c| c <= input.len());
    let mut progress = Ok(ResponderProgress::NeedMore);
    for cut in cuts {
        progress = r.handle_input(&input[..cut]);
        match &progress {
            Ok(ResponderProgress::NeedMore) => continue,
            Ok(ResponderProgress::Request { consumed, .. }) => {
                assert!(*consumed <= cut, "consumed past the input");
                break;
            }
            Err(_) => break,
        }
    }
    let (request, consumed) = match progress {
        Ok(ResponderProgress::NeedMore) => return Outcome::NeedMore,
        Err(e) => return Outcome::Malformed(e),
        Ok(ResponderProgress::Request { request, consumed }) => (request, consumed),
    };
    let frame = MpaFrameRepr::parse(&input[..consumed]).expect("the Request taken parses");
    assert_eq!(
        (frame.kind, frame.buffer_len()),
        (MpaFrameKind::Request, consumed)
    );
    assert_eq!(r.handle_input(input), Err(CmError::Finished));
    let reject = r
        .reject(&request, b"application says no")
        .expect("a Request taken can be rejected");
    check_reply(&reject, true);
    match r.accept(&request, &cfg) {
        Ok((reply, n)) => {
            let f = check_reply(&reply, false);
            assert_eq!(
                (f.revision, f.crc),
                (n.revision, n.crc),
                "reply vs negotiated"
            );
            assert!(
                n.revision <= request.revision,
                "reply revision above the request's"
            );
            Outcome::Accepted(n)
        }
        Err(CmError::Refused { reply, .. }) => {
            check_reply(&reply, true);
            Outcome::Refused
        }
        Err(e) => Outcome::BadConfig(e),
    }
}

/// `reply` is exactly one MPA Reply, with R as expected.
fn check_reply(reply: &[u8], reject: bool) -> MpaFrameRepr<'_> {
    let f = MpaFrameRepr::parse(reply).expect("the responder's reply parses");
    assert_eq!(f.kind, MpaFrameKind::Reply);
    assert_eq!(f.reject, reject, "R flag");
    assert_eq!(f.buffer_len(), reply.len(), "reply length");
    f
}
