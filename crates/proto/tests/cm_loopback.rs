//! MPA setup between our own Initiator and Responder, in memory.

use softrnic_proto::cm::{
    CmError, ConnectRequest, CrcPolicy, Initiator, InitiatorProgress, MpaConfig, Negotiated,
    RefusalReason, Responder, ResponderProgress, Rtr, RtrType, RtrTypes,
};
use softrnic_wire::terminate::{Layer, llp_code};
use softrnic_wire::{MpaFrameKind, MpaFrameRepr, Rfc6581};

/// Runs the responder over the whole request; returns the request.
fn receive_request(request: &[u8]) -> ConnectRequest {
    let mut r = Responder::new();
    match r.handle_input(request).expect("request parses") {
        ResponderProgress::Request {
            request: req,
            consumed,
        } => {
            assert_eq!(consumed, request.len());
            req
        }
        other => panic!("expected a request, got {other:?}"),
    }
}

/// Outcome of a full exchange.
enum Outcome {
    Connected { init: Negotiated, resp: Negotiated },
    Refused(CmError),
    InitiatorFailed(CmError),
}

fn connect(icfg: MpaConfig, rcfg: &MpaConfig) -> Outcome {
    let mut init = Initiator::new(icfg).expect("initiator config");
    let req = receive_request(&init.request());
    let (reply, resp) = match Responder::new().accept(&req, rcfg) {
        Ok(x) => x,
        Err(e) => return Outcome::Refused(e),
    };
    match init.handle_input(&reply) {
        Ok(InitiatorProgress::Established {
            negotiated,
            consumed,
        }) => {
            assert_eq!(consumed, reply.len());
            Outcome::Connected {
                init: negotiated,
                resp,
            }
        }
        Ok(other) => panic!("expected Established, got {other:?}"),
        Err(e) => Outcome::InitiatorFailed(e),
    }
}

fn connected(icfg: MpaConfig, rcfg: &MpaConfig) -> (Negotiated, Negotiated) {
    match connect(icfg, rcfg) {
        Outcome::Connected { init, resp } => (init, resp),
        Outcome::Refused(e) => panic!("responder refused: {e}"),
        Outcome::InitiatorFailed(e) => panic!("initiator failed: {e}"),
    }
}

fn cfg() -> MpaConfig {
    MpaConfig::default()
}

#[test]
fn defaults_rev2() {
    let init = Initiator::new(cfg()).unwrap();
    let req = init.request();
    let parsed = MpaFrameRepr::parse(&req).unwrap();
    assert_eq!(parsed.kind, MpaFrameKind::Request);
    assert_eq!(parsed.revision, 2);
    assert!(parsed.enhanced && !parsed.crc && !parsed.markers);
    assert_eq!(
        parsed.rfc6581,
        Some(Rfc6581 {
            ird: 16,
            ord: 16,
            ..Rfc6581::default()
        })
    );
    let (i, r) = connected(cfg(), &cfg());
    for n in [&i, &r] {
        assert_eq!(n.revision, 2);
        assert!(!n.crc && !n.markers_rx && !n.markers_tx);
        assert_eq!((n.ird, n.ord), (16, 16));
        assert_eq!(n.rtr, None);
        assert!(n.peer_private_data.is_empty());
    }
    assert_eq!(i.peer_rfc6581.unwrap().ird, 16);
}

#[test]
fn rev1_both() {
    let c = MpaConfig {
        revision: 1,
        ird: 4,
        ord: 4,
        ..cfg()
    };
    let req = Initiator::new(c.clone()).unwrap().request();
    assert_eq!(req.len(), 20, "revision 1 sends no IRD/ORD word");
    assert_eq!(&req[16..20], &[0x00, 0x01, 0x00, 0x00]);
    let (i, r) = connected(c.clone(), &c);
    for n in [&i, &r] {
        assert_eq!(n.revision, 1);
        assert_eq!(n.peer_rfc6581, None);
        // The peer's IRD is assumed to be rev1_ird_ord.0 = 1.
        assert_eq!((n.ird, n.ord), (4, 1));
    }
    // Another assumption is honoured.
    let c2 = MpaConfig {
        rev1_ird_ord: (3, 3),
        ..c
    };
    let (i, r) = connected(c2.clone(), &c2);
    assert_eq!((i.ord, r.ord), (3, 3));
}

#[test]
fn rev2_initiator_rev1_responder() {
    let rcfg = MpaConfig {
        revision: 1,
        ..cfg()
    };
    let mut init = Initiator::new(cfg()).unwrap();
    let req = receive_request(&init.request());
    assert_eq!(req.revision, 2);
    let (reply, r) = Responder::new().accept(&req, &rcfg).unwrap();
    let parsed = MpaFrameRepr::parse(&reply).unwrap();
    assert_eq!(parsed.revision, 1);
    assert!(!parsed.enhanced);
    assert_eq!(parsed.rfc6581, None);
    assert_eq!(r.revision, 1);
    // The responder still learnt the initiator's IRD (16) from the request.
    assert_eq!((r.ird, r.ord), (16, 16));
    let InitiatorProgress::Established { negotiated: i, .. } = init.handle_input(&reply).unwrap()
    else {
        panic!("not established");
    };
    assert_eq!(i.revision, 1);
    assert_eq!((i.ird, i.ord), (16, 1), "falls back to rev1_ird_ord");
}

#[test]
fn rev1_initiator_rev2_responder() {
    let icfg = MpaConfig {
        revision: 1,
        ..cfg()
    };
    let req = Initiator::new(icfg.clone()).unwrap().request();
    assert_eq!(req[16] & 0x10, 0, "revision 1 never sets the enhanced flag");
    let (i, r) = connected(icfg, &cfg());
    assert_eq!((i.revision, r.revision), (1, 1));
    assert_eq!((i.ord, r.ord), (1, 1));
}

#[test]
fn reply_with_higher_revision_is_an_error() {
    let mut init = Initiator::new(MpaConfig {
        revision: 1,
        ..cfg()
    })
    .unwrap();
    // A revision-2 reply to a revision-1 request.
    let req = receive_request(&Initiator::new(cfg()).unwrap().request());
    let (reply, _) = Responder::new().accept(&req, &cfg()).unwrap();
    let err = init.handle_input(&reply).unwrap_err();
    assert_eq!(err, CmError::ReplyRevision { sent: 1, got: 2 });
    assert_eq!(err.terminate_cause().code, llp_code::INVALID_REQ_REP);
}

#[test]
fn crc_policy_matrix() {
    use CrcPolicy::*;
    // (initiator, responder) -> Some(crc) if connected, None if refused by the responder.
    let cases = [
        (Off, Off, Some(false)),
        (Off, Required, Some(true)),
        (Off, Strict, None),
        (Required, Off, Some(true)),
        (Required, Required, Some(true)),
        (Required, Strict, Some(true)),
        (Strict, Off, Some(true)),
        (Strict, Required, Some(true)),
        (Strict, Strict, Some(true)),
    ];
    for (ip, rp, want) in cases {
        let out = connect(
            MpaConfig { crc: ip, ..cfg() },
            &MpaConfig { crc: rp, ..cfg() },
        );
        match (out, want) {
            (Outcome::Connected { init, resp }, Some(crc)) => {
                assert_eq!((init.crc, resp.crc), (crc, crc), "{ip:?} vs {rp:?}");
            }
            (Outcome::Refused(CmError::Refused { reply, reason }), None) => {
                assert_eq!(reason, RefusalReason::CrcPolicy);
                let f = MpaFrameRepr::parse(&reply).unwrap();
                assert!(f.reject && !f.crc && f.enhanced);
                assert_eq!(f.rfc6581, Some(Rfc6581::default()));
                // The initiator sees a reject.
                let mut init = Initiator::new(MpaConfig { crc: ip, ..cfg() }).unwrap();
                assert!(matches!(
                    init.handle_input(&reply),
                    Ok(InitiatorProgress::Rejected { .. })
                ));
            }
            (Outcome::Refused(e), _) => panic!("{ip:?} vs {rp:?}: refused: {e}"),
            (Outcome::InitiatorFailed(e), _) => panic!("{ip:?} vs {rp:?}: initiator: {e}"),
            (Outcome::Connected { .. }, None) => panic!("{ip:?} vs {rp:?}: should refuse"),
        }
    }
}

#[test]
fn strict_initiator_aborts_on_reply_without_crc() {
    // A non-compliant responder that ignores our C=1.
    let reply = emit(&MpaFrameRepr {
        kind: MpaFrameKind::Reply,
        markers: false,
        crc: false,
        reject: false,
        enhanced: true,
        reserved: 0,
        revision: 2,
        rfc6581: Some(Rfc6581 {
            ird: 1,
            ord: 1,
            ..Rfc6581::default()
        }),
        private_data: &[],
    });
    let mut strict = Initiator::new(MpaConfig {
        crc: CrcPolicy::Strict,
        ..cfg()
    })
    .unwrap();
    let err = strict.handle_input(&reply).unwrap_err();
    assert_eq!(err, CmError::CrcRequired);
    assert_eq!(err.terminate_cause().layer, Layer::Llp);
    // Required takes CRC anyway: either side's C turns it on.
    let mut required = Initiator::new(MpaConfig {
        crc: CrcPolicy::Required,
        ..cfg()
    })
    .unwrap();
    let Ok(InitiatorProgress::Established { negotiated, .. }) = required.handle_input(&reply)
    else {
        panic!("Required should accept");
    };
    assert!(negotiated.crc);
}

#[test]
fn ird_ord_unequal() {
    let icfg = MpaConfig {
        ird: 4,
        ord: 8,
        ..cfg()
    };
    let rcfg = MpaConfig {
        ird: 2,
        ord: 16,
        ..cfg()
    };
    let (i, r) = connected(icfg, &rcfg);
    assert_eq!((i.ird, i.ord), (4, 2));
    assert_eq!((r.ird, r.ord), (2, 4));
    let w = i.peer_rfc6581.unwrap();
    assert_eq!(
        (w.ird, w.ord),
        (2, 4),
        "the reply carries IRD 2, ORD min(16, 4)"
    );
}

#[test]
fn zero_ird_ord() {
    // perftest's parameter-exchange connection runs with IRD = ORD = 0.
    let z = MpaConfig {
        ird: 0,
        ord: 0,
        ..cfg()
    };
    let (i, r) = connected(z.clone(), &z);
    assert_eq!((i.ird, i.ord, r.ird, r.ord), (0, 0, 0, 0));
}

fn p2p(types: RtrTypes) -> MpaConfig {
    MpaConfig {
        peer_to_peer: true,
        rtr_types: types,
        ird: 1,
        ord: 1,
        ..cfg()
    }
}

#[test]
fn p2p_write_read_offered_picks_write() {
    let (i, r) = connected(p2p(RtrTypes::WRITE | RtrTypes::READ), &p2p(RtrTypes::all()));
    assert_eq!(
        i.rtr,
        Some(Rtr {
            kind: RtrType::Write,
            we_send: true
        })
    );
    assert_eq!(
        r.rtr,
        Some(Rtr {
            kind: RtrType::Write,
            we_send: false
        })
    );
}

#[test]
fn p2p_read_only_picks_read() {
    let (i, r) = connected(p2p(RtrTypes::READ), &p2p(RtrTypes::default()));
    assert_eq!(i.rtr.map(|x| x.kind), Some(RtrType::Read));
    assert_eq!(r.rtr.map(|x| x.kind), Some(RtrType::Read));
}

#[test]
fn p2p_send_only() {
    let (i, _) = connected(p2p(RtrTypes::SEND), &p2p(RtrTypes::all()));
    assert_eq!(i.rtr.map(|x| x.kind), Some(RtrType::Send));
    let w = i.peer_rfc6581.unwrap();
    assert!(w.peer_to_peer && w.rtr_send && !w.rtr_write && !w.rtr_read);
}

#[test]
fn p2p_no_match_refuses() {
    let out = connect(p2p(RtrTypes::SEND), &p2p(RtrTypes::WRITE | RtrTypes::READ));
    let Outcome::Refused(err) = out else {
        panic!("should refuse");
    };
    assert_eq!(err.terminate_cause().code, llp_code::NO_MATCHING_RTR);
    let CmError::Refused { reply, reason } = err else {
        panic!("wrong error");
    };
    assert_eq!(reason, RefusalReason::NoMatchingRtr);
    let f = MpaFrameRepr::parse(&reply).unwrap();
    assert!(f.reject);
}

#[test]
fn p2p_read_rtr_needs_depth() {
    // Only Read offered, but the responder has IRD 0: no Read RTR possible.
    let out = connect(
        p2p(RtrTypes::READ),
        &MpaConfig {
            ird: 0,
            ..p2p(RtrTypes::all())
        },
    );
    let Outcome::Refused(err) = out else {
        panic!("should refuse");
    };
    assert_eq!(err.terminate_cause().code, llp_code::INSUFFICIENT_IRD);
    // With Write on offer too, Write is chosen.
    let (i, _) = connected(
        p2p(RtrTypes::all()),
        &MpaConfig {
            ird: 0,
            ..p2p(RtrTypes::all())
        },
    );
    assert_eq!(i.rtr.map(|x| x.kind), Some(RtrType::Write));
}

#[test]
fn p2p_lenient_responder() {
    // The responder is not configured for P2P but goes along with the initiator.
    let (i, r) = connected(p2p(RtrTypes::default()), &cfg());
    assert_eq!(
        i.rtr.map(|x| (x.kind, x.we_send)),
        Some((RtrType::Write, true))
    );
    assert_eq!(
        r.rtr.map(|x| (x.kind, x.we_send)),
        Some((RtrType::Write, false))
    );
    // A P2P responder facing a non-P2P initiator stays in client/server mode.
    let (i, r) = connected(cfg(), &p2p(RtrTypes::default()));
    assert_eq!((i.rtr, r.rtr), (None, None));
    assert!(!i.peer_rfc6581.unwrap().peer_to_peer);
}

#[test]
fn p2p_initiator_rejects_unoffered_choice() {
    let reply = emit(&MpaFrameRepr {
        kind: MpaFrameKind::Reply,
        markers: false,
        crc: false,
        reject: false,
        enhanced: true,
        reserved: 0,
        revision: 2,
        rfc6581: Some(Rfc6581 {
            peer_to_peer: true,
            rtr_send: true,
            ird: 1,
            ord: 1,
            ..Rfc6581::default()
        }),
        private_data: &[],
    });
    let mut init = Initiator::new(p2p(RtrTypes::WRITE)).unwrap();
    let err = init.handle_input(&reply).unwrap_err();
    assert_eq!(err, CmError::NoMatchingRtr);
    assert_eq!(err.terminate_cause().code, llp_code::NO_MATCHING_RTR);
}

#[test]
fn p2p_initiator_read_rtr_with_zero_peer_ird() {
    let reply = emit(&MpaFrameRepr {
        kind: MpaFrameKind::Reply,
        markers: false,
        crc: false,
        reject: false,
        enhanced: true,
        reserved: 0,
        revision: 2,
        rfc6581: Some(Rfc6581 {
            peer_to_peer: true,
            rtr_read: true,
            ird: 0,
            ord: 1,
            ..Rfc6581::default()
        }),
        private_data: &[],
    });
    let mut init = Initiator::new(p2p(RtrTypes::READ)).unwrap();
    let err = init.handle_input(&reply).unwrap_err();
    assert_eq!(err, CmError::InsufficientIrd);
    assert_eq!(err.terminate_cause().code, llp_code::INSUFFICIENT_IRD);
}

#[test]
fn p2p_needs_revision_2() {
    let err = Initiator::new(MpaConfig {
        revision: 1,
        ..p2p(RtrTypes::default())
    })
    .unwrap_err();
    assert!(matches!(err, CmError::BadConfig(_)));
}

#[test]
fn reject_with_private_data_round_trip() {
    for revision in [1, 2] {
        let mut init = Initiator::new(MpaConfig { revision, ..cfg() }).unwrap();
        let req = receive_request(&init.request());
        let reply = Responder::new().reject(&req, b"go away").unwrap();
        let f = MpaFrameRepr::parse(&reply).unwrap();
        assert!(f.reject && !f.crc && !f.markers);
        assert_eq!(f.revision, revision);
        let mut stream = reply.clone();
        stream.extend_from_slice(b"trailing");
        match init.handle_input(&stream).unwrap() {
            InitiatorProgress::Rejected {
                private_data,
                consumed,
            } => {
                assert_eq!(private_data, b"go away");
                assert_eq!(consumed, reply.len());
            }
            other => panic!("expected Rejected, got {other:?}"),
        }
    }
}

#[test]
fn private_data_both_ways() {
    let icfg = MpaConfig {
        private_data: b"hello from the initiator".to_vec(),
        ..cfg()
    };
    let rcfg = MpaConfig {
        private_data: vec![0xa5; 508],
        ..cfg()
    };
    let (i, r) = connected(icfg, &rcfg);
    assert_eq!(r.peer_private_data, b"hello from the initiator");
    assert_eq!(i.peer_private_data, vec![0xa5; 508]);
    // Revision 1 allows the full 512.
    let big = MpaConfig {
        revision: 1,
        private_data: vec![7; 512],
        ..cfg()
    };
    let (i, r) = connected(big.clone(), &big);
    assert_eq!(
        (i.peer_private_data.len(), r.peer_private_data.len()),
        (512, 512)
    );
}

#[test]
fn private_data_limits() {
    let too_big = MpaConfig {
        private_data: vec![0; 509],
        ..cfg()
    };
    assert!(matches!(
        Initiator::new(too_big.clone()),
        Err(CmError::BadConfig(_))
    ));
    // Private data that shows a lost, duplicated or shifted octet.
    let pd = |n: usize| (0..n).map(|i| (i * 7 + i / 251) as u8).collect::<Vec<u8>>();
    let big = MpaConfig {
        private_data: pd(509),
        ..cfg()
    };
    // A revision-2 responder answering a revision-1 request may send 509 octets (no
    // RFC 6581 word), and the initiator receives every one of them...
    let mut rev1 = Initiator::new(MpaConfig {
        revision: 1,
        ..cfg()
    })
    .unwrap();
    let req = receive_request(&rev1.request());
    let (reply, _) = Responder::new()
        .accept(&req, &big)
        .expect("509 octets fit a rev-1 reply");
    assert_eq!(
        MpaFrameRepr::parse(&reply).unwrap().private_data,
        &pd(509)[..]
    );
    match rev1.handle_input(&reply) {
        Ok(InitiatorProgress::Established {
            negotiated,
            consumed,
        }) => {
            assert_eq!(consumed, reply.len());
            assert_eq!(negotiated.peer_private_data, pd(509));
        }
        other => panic!("expected Established, got {other:?}"),
    }
    // ...but not when it must carry the RFC 6581 word: 508 is the limit then.
    let mut rev2 = Initiator::new(cfg()).unwrap();
    let req2 = receive_request(&rev2.request());
    assert!(matches!(
        Responder::new().accept(&req2, &big),
        Err(CmError::BadConfig(_))
    ));
    let (reply2, _) = Responder::new()
        .accept(
            &req2,
            &MpaConfig {
                private_data: pd(508),
                ..cfg()
            },
        )
        .expect("508 octets fit beside the RFC 6581 word");
    match rev2.handle_input(&reply2) {
        Ok(InitiatorProgress::Established { negotiated, .. }) => {
            assert_eq!(negotiated.peer_private_data, pd(508))
        }
        other => panic!("expected Established, got {other:?}"),
    }
    assert!(Responder::new().reject(&req2, &pd(509)).is_err());
    // A reject of a rev-1 request carries all 512 octets to the initiator.
    let mut rev1b = Initiator::new(MpaConfig {
        revision: 1,
        ..cfg()
    })
    .unwrap();
    let req3 = receive_request(&rev1b.request());
    let reject = Responder::new()
        .reject(&req3, &pd(512))
        .expect("512 octets fit a reject");
    match rev1b.handle_input(&reject) {
        Ok(InitiatorProgress::Rejected {
            private_data,
            consumed,
        }) => {
            assert_eq!(consumed, reject.len());
            assert_eq!(private_data, pd(512));
        }
        other => panic!("expected Rejected, got {other:?}"),
    }
}

#[test]
fn bad_configs() {
    for bad in [
        MpaConfig {
            revision: 3,
            ..cfg()
        },
        MpaConfig {
            revision: 0,
            ..cfg()
        },
        MpaConfig {
            ird: 0x4000,
            ..cfg()
        },
        MpaConfig {
            ord: u16::MAX,
            ..cfg()
        },
        MpaConfig {
            peer_to_peer: true,
            rtr_types: RtrTypes::empty(),
            ..cfg()
        },
    ] {
        let err = Initiator::new(bad.clone()).unwrap_err();
        assert!(matches!(err, CmError::BadConfig(_)), "{bad:?}");
        assert_eq!(err.terminate_cause().code, llp_code::LOCAL_CATASTROPHIC);
        let req = receive_request(&Initiator::new(cfg()).unwrap().request());
        assert!(Responder::new().accept(&req, &bad).is_err());
    }
    let max = MpaConfig {
        ird: 0x3fff,
        ord: 0x3fff,
        ..cfg()
    };
    let (i, r) = connected(max.clone(), &max);
    assert_eq!((i.ord, r.ord), (0x3fff, 0x3fff));
}

#[test]
fn markers_both_directions() {
    let want = MpaConfig {
        markers: true,
        ..cfg()
    };
    // Initiator asks, responder does not.
    let (i, r) = connected(want.clone(), &cfg());
    assert!(i.markers_rx && !i.markers_tx);
    assert!(r.markers_tx && !r.markers_rx);
    // Responder asks.
    let (i, r) = connected(cfg(), &want);
    assert!(i.markers_tx && !i.markers_rx);
    assert!(r.markers_rx && !r.markers_tx);
    // Both.
    let (i, r) = connected(want.clone(), &want);
    assert!(i.markers_tx && i.markers_rx && r.markers_tx && r.markers_rx);
}

#[test]
fn one_octet_at_a_time() {
    let icfg = MpaConfig {
        private_data: b"abc".to_vec(),
        ..cfg()
    };
    let mut init = Initiator::new(icfg).unwrap();
    let request = init.request();
    let mut resp = Responder::new();
    let mut req = None;
    for n in 0..=request.len() {
        match resp.handle_input(&request[..n]).unwrap() {
            ResponderProgress::NeedMore => assert!(n < request.len(), "NeedMore at {n}"),
            ResponderProgress::Request {
                request: r,
                consumed,
            } => {
                assert_eq!(n, request.len());
                assert_eq!(consumed, n);
                req = Some(r);
            }
        }
    }
    let req = req.expect("request completes");
    assert_eq!(resp.handle_input(&request), Err(CmError::Finished));
    let (reply, _) = resp.accept(&req, &cfg()).unwrap();
    for n in 0..reply.len() {
        assert_eq!(
            init.handle_input(&reply[..n]).unwrap(),
            InitiatorProgress::NeedMore,
            "at {n}"
        );
    }
    assert!(matches!(
        init.handle_input(&reply).unwrap(),
        InitiatorProgress::Established { consumed, .. } if consumed == reply.len()
    ));
    assert_eq!(init.handle_input(&reply), Err(CmError::Finished));
}

#[test]
fn fpdu_octets_after_the_frame_are_not_consumed() {
    let mut init = Initiator::new(cfg()).unwrap();
    let mut stream = init.request();
    let req_len = stream.len();
    // The initiator's first FPDU may arrive in the same read as the request.
    stream.extend_from_slice(&[0x00, 0x0e, 0x41, 0x43, 0, 0, 0, 1]);
    let mut resp = Responder::new();
    let ResponderProgress::Request { request, consumed } = resp.handle_input(&stream).unwrap()
    else {
        panic!("no request");
    };
    assert_eq!(consumed, req_len);
    let (mut reply, _) = resp.accept(&request, &cfg()).unwrap();
    let reply_len = reply.len();
    reply.extend_from_slice(&[0x00, 0x12, 0x41, 0x42, 0xde, 0xad]);
    let InitiatorProgress::Established { consumed, .. } = init.handle_input(&reply).unwrap() else {
        panic!("not established");
    };
    assert_eq!(consumed, reply_len);
}

#[test]
fn malformed_input_is_invalid_req_rep() {
    let good = Initiator::new(cfg()).unwrap().request();
    let mut cases: Vec<Vec<u8>> = Vec::new();
    // Bad key, detected at the first octet.
    cases.push(b"GET / HTTP/1.1\r\n".to_vec());
    cases.push(b"X".to_vec());
    // Bad revision.
    let mut v = good.clone();
    v[17] = 3;
    cases.push(v);
    // PD_Length above 512.
    let mut v = good.clone();
    v[18..20].copy_from_slice(&513u16.to_be_bytes());
    cases.push(v);
    // Enhanced revision 2 without room for the word.
    let mut v = good[..20].to_vec();
    v[19] = 2;
    v.extend_from_slice(&[0, 1]);
    cases.push(v);
    // R in a request.
    let mut v = good.clone();
    v[16] |= 0x20;
    cases.push(v);
    for case in cases {
        let err = Responder::new().handle_input(&case).unwrap_err();
        let cause = err.terminate_cause();
        assert_eq!(cause.layer, Layer::Llp, "{case:?}");
        assert_eq!(cause.code, llp_code::INVALID_REQ_REP, "{case:?}: {err}");
    }
}

#[test]
fn wrong_frame_kind() {
    let request = Initiator::new(cfg()).unwrap().request();
    let mut init = Initiator::new(cfg()).unwrap();
    // Detected as soon as the key differs ("MPA ID Req" vs "MPA ID Rep").
    assert_eq!(
        init.handle_input(&request[..8]),
        Ok(InitiatorProgress::NeedMore)
    );
    assert_eq!(
        init.handle_input(&request[..10]),
        Err(CmError::UnexpectedFrame)
    );
    assert_eq!(init.handle_input(&request), Err(CmError::UnexpectedFrame));
    let req = receive_request(&request);
    let (reply, _) = Responder::new().accept(&req, &cfg()).unwrap();
    let err = Responder::new().handle_input(&reply).unwrap_err();
    assert_eq!(err, CmError::UnexpectedFrame);
    assert_eq!(err.terminate_cause().code, llp_code::INVALID_REQ_REP);
}

#[test]
fn hand_built_request_with_bad_revision_is_refused() {
    let req = ConnectRequest {
        revision: 9,
        crc: false,
        markers: false,
        rfc6581: None,
        private_data: Vec::new(),
    };
    assert!(matches!(
        Responder::new().accept(&req, &cfg()),
        Err(CmError::Wire(_))
    ));
    assert!(Responder::new().reject(&req, &[]).is_err());
}

fn emit(repr: &MpaFrameRepr<'_>) -> Vec<u8> {
    let mut out = vec![0; repr.buffer_len()];
    let n = repr.emit(&mut out).unwrap();
    out.truncate(n);
    out
}
