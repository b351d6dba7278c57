//! Our MPA state machines against the frames Linux siw put on the wire in
//! `shared/testdata/siw/*.pcap` (copied here as bytes: proto does not depend on the
//! capture crate).

use softrnic_proto::cm::{
    CmError, CrcPolicy, Initiator, InitiatorProgress, MpaConfig, RefusalReason, Responder,
    ResponderProgress, Rtr, RtrType,
};

/// key ++ flags ++ revision ++ PD_Length ++ PD, as siw sends them.
fn frame(key: &[u8; 16], flags: u8, rev: u8, pd: &[u8]) -> Vec<u8> {
    let mut v = key.to_vec();
    v.push(flags);
    v.push(rev);
    v.extend_from_slice(&(pd.len() as u16).to_be_bytes());
    v.extend_from_slice(pd);
    v
}

const REQ: &[u8; 16] = b"MPA ID Req Frame";
const REP: &[u8; 16] = b"MPA ID Rep Frame";

/// siw-rping.pcap (and siw-rping-kill.pcap): revision 2, enhanced, IRD = ORD = 1.
fn rping_req() -> Vec<u8> {
    frame(REQ, 0x10, 2, &[0x00, 0x01, 0x00, 0x01])
}
fn rping_rep() -> Vec<u8> {
    frame(REP, 0x10, 2, &[0x00, 0x01, 0x00, 0x01])
}

/// rping's own settings: IRD = ORD = 1.
fn rping_cfg() -> MpaConfig {
    MpaConfig {
        ird: 1,
        ord: 1,
        ..MpaConfig::default()
    }
}

fn take_request(bytes: &[u8]) -> softrnic_proto::cm::ConnectRequest {
    match Responder::new().handle_input(bytes).unwrap() {
        ResponderProgress::Request { request, consumed } => {
            assert_eq!(consumed, bytes.len());
            request
        }
        other => panic!("{other:?}"),
    }
}

fn established(init: &mut Initiator, reply: &[u8]) -> softrnic_proto::cm::Negotiated {
    match init.handle_input(reply).unwrap() {
        InitiatorProgress::Established {
            negotiated,
            consumed,
        } => {
            assert_eq!(consumed, reply.len());
            negotiated
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn our_request_equals_siws() {
    assert_eq!(Initiator::new(rping_cfg()).unwrap().request(), rping_req());
    let crc = MpaConfig {
        crc: CrcPolicy::Required,
        ..rping_cfg()
    };
    assert_eq!(
        Initiator::new(crc).unwrap().request(),
        frame(REQ, 0x50, 2, &[0, 1, 0, 1])
    );
    let p2p = MpaConfig {
        peer_to_peer: true,
        ..rping_cfg()
    };
    assert_eq!(
        Initiator::new(p2p).unwrap().request(),
        frame(REQ, 0x10, 2, &[0x80, 0x01, 0xc0, 0x01])
    );
    let v1 = MpaConfig {
        revision: 1,
        ..rping_cfg()
    };
    assert_eq!(
        Initiator::new(v1).unwrap().request(),
        frame(REQ, 0x00, 1, &[])
    );
}

#[test]
fn responder_answers_siw_rping_like_siw() {
    let req = take_request(&rping_req());
    assert_eq!(req.revision, 2);
    assert!(!req.crc && !req.markers);
    let (reply, n) = Responder::new().accept(&req, &rping_cfg()).unwrap();
    assert_eq!(reply, rping_rep(), "byte-identical to siw's own reply");
    assert_eq!((n.ird, n.ord, n.crc, n.rtr), (1, 1, false, None));
    // With our default depths (16/16) the reply still suits siw: IRD 16, ORD min(16, 1).
    let (reply, n) = Responder::new()
        .accept(&req, &MpaConfig::default())
        .unwrap();
    assert_eq!(reply, frame(REP, 0x10, 2, &[0x00, 0x10, 0x00, 0x01]));
    assert_eq!((n.ird, n.ord), (16, 1));
}

#[test]
fn initiator_accepts_siw_rping_reply() {
    let mut init = Initiator::new(MpaConfig::default()).unwrap();
    let n = established(&mut init, &rping_rep());
    assert_eq!(n.revision, 2);
    assert!(!n.crc && !n.markers_tx && !n.markers_rx);
    assert_eq!((n.ird, n.ord), (16, 1));
    assert_eq!(n.rtr, None);
    assert!(n.peer_private_data.is_empty());
}

#[test]
fn perftest_read_bw_depths() {
    // siw-ib_read_bw.pcap: the test connection runs with IRD = ORD = 128.
    let req = take_request(&frame(REQ, 0x10, 2, &[0x00, 0x80, 0x00, 0x80]));
    let cfg = MpaConfig {
        ird: 128,
        ord: 128,
        ..MpaConfig::default()
    };
    let (reply, _) = Responder::new().accept(&req, &cfg).unwrap();
    assert_eq!(reply, frame(REP, 0x10, 2, &[0x00, 0x80, 0x00, 0x80]));
    // Its parameter-exchange connection: IRD = ORD = 0.
    let mut init = Initiator::new(MpaConfig::default()).unwrap();
    let n = established(&mut init, &frame(REP, 0x10, 2, &[0, 0, 0, 0]));
    assert_eq!(n.ord, 0);
}

#[test]
fn crc_with_siw() {
    // siw-rping-crc.pcap: flags 0x50 both ways.
    let req = take_request(&frame(REQ, 0x50, 2, &[0, 1, 0, 1]));
    assert!(req.crc);
    // Our Off responder echoes C=1, as siw does.
    let (reply, n) = Responder::new().accept(&req, &rping_cfg()).unwrap();
    assert_eq!(reply, frame(REP, 0x50, 2, &[0, 1, 0, 1]));
    assert!(n.crc);
    // Our Off initiator adopts siw's C=1 reply.
    let mut init = Initiator::new(rping_cfg()).unwrap();
    assert!(established(&mut init, &frame(REP, 0x50, 2, &[0, 1, 0, 1])).crc);
    // Strict initiator is satisfied by it.
    let mut strict = Initiator::new(MpaConfig {
        crc: CrcPolicy::Strict,
        ..rping_cfg()
    })
    .unwrap();
    assert!(established(&mut strict, &frame(REP, 0x50, 2, &[0, 1, 0, 1])).crc);
    // A Strict initiator facing siw's default (C=0) reply aborts.
    let mut strict = Initiator::new(MpaConfig {
        crc: CrcPolicy::Strict,
        ..rping_cfg()
    })
    .unwrap();
    assert_eq!(strict.handle_input(&rping_rep()), Err(CmError::CrcRequired));
}

#[test]
fn p2p_with_siw() {
    // siw-rping-p2p.pcap: offered Write|Read with P2P, siw picked Write.
    let req = take_request(&frame(REQ, 0x10, 2, &[0x80, 0x01, 0xc0, 0x01]));
    let cfg = MpaConfig {
        peer_to_peer: true,
        ..rping_cfg()
    };
    let (reply, n) = Responder::new().accept(&req, &cfg).unwrap();
    assert_eq!(reply, frame(REP, 0x10, 2, &[0x80, 0x01, 0x80, 0x01]));
    assert_eq!(
        n.rtr,
        Some(Rtr {
            kind: RtrType::Write,
            we_send: false
        })
    );
    let mut init = Initiator::new(cfg).unwrap();
    let n = established(&mut init, &frame(REP, 0x10, 2, &[0x80, 0x01, 0x80, 0x01]));
    assert_eq!(
        n.rtr,
        Some(Rtr {
            kind: RtrType::Write,
            we_send: true
        })
    );
    assert_eq!((n.ird, n.ord), (1, 1));
}

#[test]
fn siw_reject_is_recognised() {
    // siw-mpa-reject-*.pcap: strict siw responder refusing a C=1 initiator.
    let reject = frame(REP, 0x30, 2, &[0, 0, 0, 0]);
    let mut init = Initiator::new(MpaConfig {
        crc: CrcPolicy::Required,
        ..rping_cfg()
    })
    .unwrap();
    let mut stream = reject.clone();
    stream.extend_from_slice(b"after");
    assert_eq!(
        init.handle_input(&stream),
        Ok(InitiatorProgress::Rejected {
            private_data: Vec::new(),
            consumed: reject.len()
        })
    );
}

#[test]
fn our_refusal_looks_like_siws() {
    // Our Strict responder refusing siw's default C=0 request sends the same shape of
    // reject siw sent in the reject capture: R=1, C=0, enhanced, PD 00000000.
    let req = take_request(&rping_req());
    let cfg = MpaConfig {
        crc: CrcPolicy::Strict,
        ..rping_cfg()
    };
    let err = Responder::new().accept(&req, &cfg).unwrap_err();
    assert_eq!(
        err,
        CmError::Refused {
            reply: frame(REP, 0x30, 2, &[0, 0, 0, 0]),
            reason: RefusalReason::CrcPolicy
        }
    );
    // The plain reject() produces the same frame.
    assert_eq!(
        Responder::new().reject(&req, &[]).unwrap(),
        frame(REP, 0x30, 2, &[0, 0, 0, 0])
    );
}

#[test]
fn mpa_v1_with_siw() {
    // siw-rping-mpav1.pcap: flags 0, revision 1, no private data, both ways.
    let v1_req = frame(REQ, 0x00, 1, &[]);
    let req = take_request(&v1_req);
    assert_eq!((req.revision, req.rfc6581), (1, None));
    // Our revision-2 responder answers with revision 1, exactly like siw did.
    let (reply, n) = Responder::new().accept(&req, &rping_cfg()).unwrap();
    assert_eq!(reply, frame(REP, 0x00, 1, &[]));
    // Unlike siw (which assumed ORD 0 and failed rping's first Read), we assume the
    // peer can take one Read.
    assert_eq!((n.ird, n.ord), (1, 1));
    // Our revision-2 initiator falls back on siw's revision-1 reply.
    let mut init = Initiator::new(MpaConfig::default()).unwrap();
    let n = established(&mut init, &frame(REP, 0x00, 1, &[]));
    assert_eq!(n.revision, 1);
    assert_eq!((n.ird, n.ord), (16, 1));
}
