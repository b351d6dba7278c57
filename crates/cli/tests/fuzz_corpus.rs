//! Replays the committed fuzz seeds (`fuzz/seeds/<target>/`) and any saved crash
//! reproducers (`fuzz/regressions/<target>/`) through the same checks the cargo-fuzz
//! targets run, so the plain test run guards what fuzzing found.

use softrnic_cli::fuzz_checks::{
    TARGETS, built_seeds, by_name, capture_decoded, cm_responder_outcome, qp_input,
    qp_input_outcome,
};
use softrnic_proto::cm::RtrType;
use softrnic_proto::qp::CqSide;
use softrnic_proto::{WcOpcode, WcStatus};
use softrnic_wire::Body;
use softrnic_wire::mpa::Deframer;
use softrnic_wire::terminate::{Layer, TerminateCause, ddp_code, ddp_etype};
use std::path::Path;

fn files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn replay_seed_corpus_and_regressions() {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    // The capture seeds hold real connections, so the replay exercises the decoder.
    let with_conns = files(&fuzz.join("seeds/capture"))
        .iter()
        .filter(|p| {
            let data = std::fs::read(p).expect("read seed");
            capture_decoded(&data).is_some_and(|d| d.iter().any(|c| c.fpdus().count() > 0))
        })
        .count();
    assert!(with_conns >= 2, "capture seeds with FPDUs: {with_conns}");
    for target in TARGETS {
        let check = by_name(target).expect("known target");
        let seeds = files(&fuzz.join("seeds").join(target));
        assert!(!seeds.is_empty(), "no seeds for fuzz target {target}");
        for f in seeds
            .iter()
            .chain(&files(&fuzz.join("regressions").join(target)))
        {
            let data = std::fs::read(f).expect("read seed");
            check(&data);
            // Every truncation of a seed must be handled too.
            for cut in (0..data.len()).step_by(data.len() / 16 + 1) {
                check(&data[..cut]);
            }
        }
    }
}

#[test]
fn capture_check_accepts_the_real_captures() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/testdata/siw");
    let check = by_name("capture").expect("known target");
    let pcaps: Vec<_> = files(&dir)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "pcap"))
        .collect();
    assert!(!pcaps.is_empty());
    for p in pcaps {
        let data = std::fs::read(&p).expect("read capture");
        check(&data);
        // The check must have seen the capture's connections, not failed to read it.
        let decoded = capture_decoded(&data)
            .unwrap_or_else(|| panic!("{}: not read as a capture", p.display()));
        assert!(!decoded.is_empty(), "{}: no iWARP connection", p.display());
        for d in &decoded {
            assert_eq!(d.to_server.error, None, "{}", p.display());
            assert_eq!(d.to_client.error, None, "{}", p.display());
        }
    }
}

/// The committed `qp_input` and `cm_responder` seeds are the ones the proto API builds
/// now (regenerate them with the `fuzz_seeds` example when the layout changes).
#[test]
fn built_seeds_are_committed() {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds");
    for (target, seeds) in [
        ("qp_input", built_seeds::qp_input_seeds()),
        ("cm_responder", built_seeds::cm_responder_seeds()),
    ] {
        for (name, seed) in seeds {
            let path = fuzz.join(target).join(&name);
            let committed = std::fs::read(&path).unwrap_or_default();
            assert!(committed == seed, "{}: not the built seed", path.display());
        }
    }
}

fn qp_seed(name: &str) -> qp_input::Outcome {
    let seeds = built_seeds::qp_input_seeds();
    let (_, seed) = seeds.iter().find(|(n, _)| n == name).expect("seed");
    let outcome = qp_input_outcome(seed).expect("longer than the setup");
    if !name.starts_with("terminate") && !name.starts_with("mixed") {
        assert_eq!(outcome.fatal, None, "{name}");
        assert_eq!(outcome.consumed, seed.len() - qp_input::SETUP_LEN, "{name}");
    }
    outcome
}

/// The completion of `wr_id`: its CQ, status, opcode and length.
fn completion_of(o: &qp_input::Outcome, wr_id: u64) -> (CqSide, WcStatus, WcOpcode, u32) {
    let (side, c) = o
        .completions
        .iter()
        .find(|(_, c)| c.wr_id == wr_id)
        .unwrap_or_else(|| panic!("no completion for {wr_id}"));
    (*side, c.status, c.opcode, c.byte_len)
}

/// Each `qp_input` seed reaches what it is named for: the payload lands where the peer
/// sent it, octet for octet, and the requests complete as they should.
#[test]
fn qp_input_seeds_reach_their_paths() {
    use qp_input::*;
    let peer = |i: usize| qp_input::pattern(1, i);
    for tag in ["plain", "crc"] {
        let o = qp_seed(&format!("send-{tag}"));
        assert_eq!(
            completion_of(&o, RECV_WR_ID),
            (CqSide::Recv, WcStatus::Success, WcOpcode::Recv, 700)
        );
        let [(a, al), (b, _)] = recv_sges(0).map(|(o, l)| (o as usize, l as usize));
        let local = &o.memory[LOCAL];
        assert_eq!(&local[a..a + al], &peer(SOURCE)[..al]);
        assert_eq!(&local[b..b + 700 - al], &peer(SOURCE)[al..700]);
        assert_eq!(o.placed, 700);

        let o = qp_seed(&format!("write-{tag}"));
        assert_eq!(&o.memory[WRITE_TARGET][16..3016], &peer(SOURCE)[..3000]);
        assert_eq!((o.placed, o.fpdus_sent), (3000, 0));

        // One Read Response of 1000 octets from our source region.
        let o = qp_seed(&format!("read_request-{tag}"));
        let mut d = Deframer::new(false, tag == "crc");
        let f = d.next(&o.sent, &mut []).expect("a Read Response");
        assert_eq!(f.consumed, o.sent.len());
        let u = softrnic_wire::Ulpdu::parse(f.ulpdu).unwrap();
        assert_eq!(u.header.opcode, softrnic_wire::Opcode::ReadResponse);
        assert_eq!(
            u.body,
            Body::Payload(&qp_input::pattern(0, SOURCE)[24..1024])
        );

        let o = qp_seed(&format!("read_response-{tag}"));
        assert_eq!(
            completion_of(&o, READ_WR_ID),
            (CqSide::Send, WcStatus::Success, WcOpcode::Read, READ_SINK.1)
        );
        let sink = READ_SINK.0 as usize..(READ_SINK.0 + u64::from(READ_SINK.1)) as usize;
        assert_eq!(
            &o.memory[LOCAL][sink],
            &peer(SOURCE)[..READ_SINK.1 as usize]
        );

        // The peer's Terminate (no receive for its Send) fails the QP, remotely.
        let o = qp_seed(&format!("terminate-{tag}"));
        let no_buffer = TerminateCause::new(
            Layer::Ddp,
            ddp_etype::UNTAGGED_BUFFER,
            ddp_code::untagged::NO_BUFFER,
        );
        assert_eq!(o.fatal, Some((no_buffer, true)));
        assert_eq!(o.terminates_sent, 0);

        // Our Send and Write wait for the RTR, then go out and complete.
        let o = qp_seed(&format!("rtr_send-{tag}"));
        assert_eq!(o.fpdus_sent, 2);
        for (wr, op, len) in [
            (SEND_WR_ID, WcOpcode::Send, 100),
            (WRITE_WR_ID, WcOpcode::Write, 50),
        ] {
            assert_eq!(
                completion_of(&o, wr),
                (CqSide::Send, WcStatus::Success, op, len)
            );
        }
        assert_eq!(completion_of(&o, RECV_WR_ID).1, WcStatus::Success);

        // A Write to the region a Send with Invalidate revoked gets a Terminate.
        let o = qp_seed(&format!("mixed-{tag}"));
        let invalid = TerminateCause::new(
            Layer::Ddp,
            ddp_etype::TAGGED_BUFFER,
            ddp_code::tagged::INVALID_STAG,
        );
        assert_eq!((o.fatal, o.terminates_sent), (Some((invalid, false)), 1));
        let second = o
            .completions
            .iter()
            .find(|(_, c)| c.wr_id == RECV_WR_ID + 1);
        assert_eq!(second.unwrap().1.invalidated, Some(stag(WRITE_TARGET)));
        assert_eq!(&o.memory[WRITE_TARGET][..200], &peer(SOURCE)[..200]);

        // The same two with markers both ways (stream cut into 1 to 8 octet reads): the
        // same outcome, and what the QP sent (its Read Response and Terminate) is
        // marked, as the check of every sent FPDU verified.
        let m = qp_seed(&format!("mixed_markers-{tag}"));
        assert_eq!((m.fatal, m.terminates_sent), (o.fatal, 1));
        assert_eq!(&m.memory[WRITE_TARGET][..200], &peer(SOURCE)[..200]);
        assert_eq!(&m.sent[..4], &[0, 0, 0, 0], "the leading marker");
        let m = qp_seed(&format!("write_markers-{tag}"));
        assert_eq!(&m.memory[WRITE_TARGET][16..3016], &peer(SOURCE)[..3000]);
        assert_eq!(m.placed, 3000);
    }
}

/// Each `cm_responder` seed reaches the answer it is named for.
#[test]
fn cm_responder_seeds_reach_their_answers() {
    use softrnic_cli::fuzz_checks::cm_responder::Outcome;
    for (name, seed) in built_seeds::cm_responder_seeds() {
        let got = cm_responder_outcome(&seed);
        match name.as_str() {
            "rev2" => {
                assert!(matches!(got, Outcome::Accepted(n) if n.revision == 2 && n.rtr.is_none()))
            }
            "rev1-crc" => assert!(matches!(got, Outcome::Accepted(n) if n.revision == 1 && n.crc)),
            "p2p-read" => assert!(
                matches!(got, Outcome::Accepted(n) if n.rtr.is_some_and(|r| r.kind == RtrType::Read))
            ),
            _ => assert_eq!(got, Outcome::Refused, "{name}"),
        }
    }
}

/// The marked seeds, corrupted: an octet changed, octets dropped or repeated, at seeded
/// places (so a marker goes missing, lands in a payload, or points wrong). The check's
/// own invariants hold for every one (no panic; every posted request completes exactly
/// once; placements stay in bounds), and a corrupted marker octet before any other
/// damage ends the stream with the MPA Terminate 0x03.
#[test]
fn corrupted_marked_streams_terminate_and_never_break_the_invariants() {
    let seeds = built_seeds::qp_input_seeds();
    let marked: Vec<_> = seeds
        .iter()
        .filter(|(n, _)| n.contains("markers"))
        .collect();
    assert_eq!(marked.len(), 4);
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let setup = qp_input::SETUP_LEN;
    for round in 0..1500 {
        let (_, seed) = marked[round % marked.len()];
        let mut data = seed.clone();
        let body = data.len() - setup;
        let at = setup + (next() as usize) % body;
        match next() % 3 {
            0 => data[at] ^= 1 << (next() % 8),
            1 => {
                data.remove(at);
            }
            _ => data.insert(at, data[at]),
        }
        qp_input(&data);
    }
    // The first marker sits at stream octet 0: any bit flipped there is caught first.
    let mismatch = TerminateCause::new(Layer::Llp, 0, 0x03);
    for (name, seed) in &marked {
        for octet in 0..4 {
            for bit in 0..8 {
                let mut data = seed.clone();
                data[setup + octet] ^= 1 << bit;
                let o = qp_input_outcome(&data).expect("longer than the setup");
                assert_eq!(o.fatal, Some((mismatch, false)), "{name}: {octet}/{bit}");
                assert_eq!(o.placed, 0, "{name}: nothing placed");
            }
        }
    }
}
