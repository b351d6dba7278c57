//! No input makes the MPA state machines panic, and truncation is never an error.

use proptest::prelude::*;
use softrnic_proto::cm::{
    ConnectRequest, CrcPolicy, Initiator, InitiatorProgress, MpaConfig, Responder,
    ResponderProgress, RtrTypes,
};
use softrnic_wire::Rfc6581;

/// Input that is either random or a plausible frame header followed by random octets,
/// so that the parsers get past the key check often.
fn stream() -> impl Strategy<Value = Vec<u8>> {
    let key = prop_oneof![
        Just(b"MPA ID Req Frame".to_vec()),
        Just(b"MPA ID Rep Frame".to_vec()),
        Just(Vec::new()),
    ];
    (
        key,
        any::<u8>(),
        0u8..4,
        0u16..600,
        proptest::collection::vec(any::<u8>(), 0..700),
    )
        .prop_map(|(mut v, flags, rev, pd_len, rest)| {
            if !v.is_empty() {
                v.push(flags);
                v.push(rev);
                v.extend_from_slice(&pd_len.to_be_bytes());
            }
            v.extend_from_slice(&rest);
            v
        })
}

fn policy() -> impl Strategy<Value = CrcPolicy> {
    prop_oneof![
        Just(CrcPolicy::Off),
        Just(CrcPolicy::Required),
        Just(CrcPolicy::Strict)
    ]
}

fn config() -> impl Strategy<Value = MpaConfig> {
    (
        0u8..4,
        policy(),
        any::<bool>(),
        any::<u16>(),
        any::<u16>(),
        any::<bool>(),
        0u8..8,
        proptest::collection::vec(any::<u8>(), 0..520),
        (any::<u16>(), any::<u16>()),
    )
        .prop_map(
            |(revision, crc, markers, ird, ord, peer_to_peer, rtr, private_data, rev1)| MpaConfig {
                revision,
                crc,
                markers,
                ird,
                ord,
                peer_to_peer,
                rtr_types: RtrTypes::from_bits_truncate(rtr),
                private_data,
                rev1_ird_ord: rev1,
            },
        )
}

fn word() -> impl Strategy<Value = Option<Rfc6581>> {
    proptest::option::of(
        (
            any::<bool>(),
            any::<bool>(),
            any::<u16>(),
            any::<bool>(),
            any::<bool>(),
            any::<u16>(),
        )
            .prop_map(
                |(peer_to_peer, rtr_send, ird, rtr_write, rtr_read, ord)| Rfc6581 {
                    peer_to_peer,
                    rtr_send,
                    ird,
                    rtr_write,
                    rtr_read,
                    ord,
                },
            ),
    )
}

proptest! {
    #[test]
    fn responder_never_panics(input in stream()) {
        let mut r = Responder::new();
        let whole = r.handle_input(&input);
        let frame_len = match &whole {
            Ok(ResponderProgress::Request { consumed, .. }) => {
                prop_assert!(*consumed <= input.len());
                Some(*consumed)
            }
            Ok(ResponderProgress::NeedMore) | Err(_) => None,
        };
        // Every prefix: a truncated frame is never an error unless the whole input is
        // one too (more octets never cure an error), and a prefix of a good Request
        // asks for more.
        for n in 0..input.len().min(64) {
            match Responder::new().handle_input(&input[..n]) {
                Err(e) => prop_assert!(whole.is_err(), "prefix {n} fails ({e}) but the whole input does not"),
                Ok(ResponderProgress::NeedMore) => {}
                Ok(ResponderProgress::Request { consumed, .. }) => {
                    prop_assert_eq!(Some(consumed), frame_len, "prefix {} completes a different frame", n)
                }
            }
            if frame_len.is_some_and(|len| n < len) {
                prop_assert!(matches!(
                    Responder::new().handle_input(&input[..n]),
                    Ok(ResponderProgress::NeedMore)
                ));
            }
        }
    }

    #[test]
    fn initiator_never_panics(input in stream(), cfg in config()) {
        if let Ok(mut init) = Initiator::new(cfg) {
            let _ = init.request();
            match init.handle_input(&input) {
                Ok(InitiatorProgress::Established { consumed, .. })
                | Ok(InitiatorProgress::Rejected { consumed, .. }) => {
                    prop_assert!(consumed <= input.len())
                }
                Ok(InitiatorProgress::NeedMore) | Err(_) => {}
            }
        }
    }

    #[test]
    fn accept_and_reject_never_panic(
        revision in 0u8..4,
        crc in any::<bool>(),
        markers in any::<bool>(),
        rfc6581 in word(),
        pd in proptest::collection::vec(any::<u8>(), 0..600),
        cfg in config(),
    ) {
        let req = ConnectRequest { revision, crc, markers, rfc6581, private_data: pd.clone() };
        let r = Responder::new();
        if let Ok((reply, _)) = r.accept(&req, &cfg) {
            // Whatever we accept with parses back as a Reply.
            prop_assert!(softrnic_wire::MpaFrameRepr::parse(&reply).is_ok());
        }
        if let Ok(reply) = r.reject(&req, &pd) {
            prop_assert!(softrnic_wire::MpaFrameRepr::parse(&reply).unwrap().reject);
        }
    }

    /// A valid exchange split at any point completes only once everything is there.
    #[test]
    fn split_anywhere(cfg in config(), split in any::<prop::sample::Index>()) {
        let Ok(mut init) = Initiator::new(cfg.clone()) else { return Ok(()) };
        let request = init.request();
        let at = split.index(request.len());
        prop_assert_eq!(Responder::new().handle_input(&request[..at]), Ok(ResponderProgress::NeedMore));
        let Ok(ResponderProgress::Request { request: req, consumed }) = Responder::new().handle_input(&request) else {
            return Err(TestCaseError::fail("request did not parse"));
        };
        prop_assert_eq!(consumed, request.len());
        if let Ok((reply, _)) = Responder::new().accept(&req, &MpaConfig::default()) {
            let at = split.index(reply.len());
            prop_assert_eq!(init.handle_input(&reply[..at]), Ok(InitiatorProgress::NeedMore));
            let done = init.handle_input(&reply);
            let completed = matches!(done, Ok(InitiatorProgress::Established { .. }));
            prop_assert!(completed, "{:?}", done);
        }
    }
}
