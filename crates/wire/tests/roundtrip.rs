//! Property tests: every `Repr` emits and parses back to itself, FPDU framing round-trips
//! with and without markers and CRC, and no input makes a parser panic.

use proptest::prelude::*;
use softrnic_wire::ddp::{DdpRepr, Placement};
use softrnic_wire::mpa::{self, Deframer, MAX_FPDU_LEN, MpaFrameKind, MpaFrameRepr, Rfc6581};
use softrnic_wire::rdmap::{Opcode, ReadRequest};
use softrnic_wire::terminate::{
    Layer, TerminateCause, TerminateLayout, TerminateRepr, TerminatedDdp,
};
use softrnic_wire::{Body, Ulpdu, WireError};

fn arb_rfc6581() -> impl Strategy<Value = Rfc6581> {
    (any::<[bool; 4]>(), 0..=0x3fffu16, 0..=0x3fffu16).prop_map(|(f, ird, ord)| Rfc6581 {
        peer_to_peer: f[0],
        rtr_send: f[1],
        ird,
        rtr_write: f[2],
        rtr_read: f[3],
        ord,
    })
}

fn arb_mpa_frame() -> impl Strategy<Value = (MpaFrameKind, [bool; 4], u8, u8, Rfc6581, Vec<u8>)> {
    (
        prop_oneof![Just(MpaFrameKind::Request), Just(MpaFrameKind::Reply)],
        any::<[bool; 4]>(),
        0..16u8,
        1..=2u8,
        arb_rfc6581(),
        proptest::collection::vec(any::<u8>(), 0..=508),
    )
}

fn arb_read_request() -> impl Strategy<Value = ReadRequest> {
    any::<(u32, u64, u32, u32, u64)>().prop_map(|(a, b, c, d, e)| ReadRequest {
        sink_stag: a,
        sink_to: b,
        size: c,
        source_stag: d,
        source_to: e,
    })
}

/// A header that is valid for its opcode (queue number, single-segment rules).
fn arb_header() -> impl Strategy<Value = DdpRepr> {
    (
        proptest::sample::select(Opcode::ALL.to_vec()),
        any::<bool>(),
        any::<(u32, u64, u32, u32, u32)>(),
    )
        .prop_map(|(opcode, last, (stag, to, rsvd, msn, mo))| {
            let placement = if opcode.is_tagged() {
                Placement::Tagged { stag, to }
            } else {
                Placement::Untagged {
                    rsvd_ulp: rsvd,
                    qn: opcode.queue_number().unwrap_or(msn % 8),
                    msn,
                    mo: if matches!(opcode, Opcode::ReadRequest | Opcode::Terminate) {
                        0
                    } else {
                        mo
                    },
                }
            };
            let single = matches!(opcode, Opcode::ReadRequest | Opcode::Terminate);
            DdpRepr {
                last: last || single,
                opcode,
                placement,
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn mpa_frame_roundtrip((kind, flags, reserved, revision, p, pd) in arb_mpa_frame()) {
        let enhanced = flags[3];
        let repr = MpaFrameRepr {
            kind,
            markers: flags[0],
            crc: flags[1],
            reject: flags[2] && kind == MpaFrameKind::Reply,
            enhanced,
            reserved,
            revision,
            rfc6581: (revision == 2 && enhanced).then_some(p),
            private_data: &pd,
        };
        let mut buf = vec![0u8; repr.buffer_len()];
        prop_assert_eq!(repr.emit(&mut buf), Ok(buf.len()));
        prop_assert_eq!(MpaFrameRepr::parse(&buf), Ok(repr));
        // Every proper prefix is "wait for more", never another error.
        for cut in [0, 1, 15, 19, buf.len() - 1] {
            if cut < buf.len() {
                prop_assert!(MpaFrameRepr::parse(&buf[..cut]).unwrap_err().is_truncated());
            }
        }
    }

    #[test]
    fn ulpdu_roundtrip(
        header in arb_header(),
        payload in proptest::collection::vec(any::<u8>(), 0..600),
        rr in arb_read_request(),
        copied in arb_header(),
        term in (0..3u8, 0..16u8, any::<u8>(), any::<[bool; 4]>()),
    ) {
        let (copied_bytes, copied_len) = copied.to_bytes();
        let rr_bytes = rr.to_bytes();
        let body = match header.opcode {
            Opcode::ReadRequest => Body::ReadRequest(rr),
            Opcode::Terminate => Body::Terminate(TerminateRepr {
                cause: TerminateCause::new(Layer::from_bits(term.0), term.1, term.2),
                segment_len_valid: term.3[0],
                ddp: term.3[1].then_some(TerminatedDdp {
                    segment_len: payload.len() as u16,
                    header: &copied_bytes[..copied_len],
                }),
                rdmap: term.3[2].then_some(&rr_bytes[..]),
                reserved: 0,
                layout: TerminateLayout::Rfc5040,
            }),
            Opcode::AtomicRequest | Opcode::AtomicResponse => Body::Opaque(&payload),
            _ => Body::Payload(&payload),
        };
        let u = Ulpdu { header, body };
        let mut buf = vec![0u8; u.buffer_len()];
        prop_assert_eq!(u.emit(&mut buf), Ok(buf.len()));
        prop_assert_eq!(Ulpdu::parse(&buf), Ok(u));
    }

    #[test]
    fn fpdu_roundtrip(
        ulpdus in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..1500), 1..6),
        crc in any::<bool>(),
        markers in any::<bool>(),
    ) {
        // Emit a stream of FPDUs, then take them off again with a Deframer.
        let mut stream = Vec::new();
        let mut pos = 0u64;
        for u in &ulpdus {
            let mut out = vec![0u8; MAX_FPDU_LEN + 600];
            let n = mpa::emit_fpdu(&[u], crc, markers.then_some(pos), &mut out).unwrap();
            if !markers {
                prop_assert_eq!(n, mpa::fpdu_len(u.len()));
            }
            stream.extend_from_slice(&out[..n]);
            pos += n as u64;
        }
        let mut d = Deframer::new(markers, crc);
        let mut scratch = vec![0u8; MAX_FPDU_LEN];
        let mut at = 0;
        for u in &ulpdus {
            let f = d.next(&stream[at..], &mut scratch).unwrap();
            prop_assert_eq!(f.ulpdu, &u[..]);
            at += f.consumed;
        }
        prop_assert_eq!(at, stream.len());
        prop_assert_eq!(d.position(), stream.len() as u64);
    }

    #[test]
    fn corrupted_crc_fpdu_is_a_crc_error(
        u in proptest::collection::vec(any::<u8>(), 1..300),
        flip in any::<proptest::sample::Index>(),
    ) {
        let mut out = vec![0u8; 400];
        let n = mpa::emit_fpdu(&[&u], true, None, &mut out).unwrap();
        // Flip a bit anywhere after the length field (a length change is a framing error).
        let i = 2 + flip.index(n - 2);
        out[i] ^= 0x01;
        let mut scratch = [];
        let e = Deframer::new(false, true).next(&out[..n], &mut scratch).unwrap_err();
        let is_crc = matches!(e, WireError::CrcMismatch { .. });
        prop_assert!(is_crc);
        prop_assert_eq!(e.terminate_cause(), TerminateCause::new(Layer::Llp, 0, 0x02));
    }

    #[test]
    fn parsers_never_panic(data in proptest::collection::vec(any::<u8>(), 0..2000), pos in 0..2048u64) {
        let _ = MpaFrameRepr::parse(&data);
        let _ = Ulpdu::parse(&data);
        let _ = TerminateRepr::parse(&data);
        let _ = ReadRequest::parse(&data);
        let mut scratch = vec![0u8; MAX_FPDU_LEN];
        let _ = mpa::parse_fpdu(&data, None, true, &mut scratch);
        let _ = mpa::parse_fpdu(&data, Some(pos & !3), true, &mut scratch);
    }
}

#[test]
fn max_ulpdu_for_mss() {
    // siw's full tagged FPDU: 1448 octets on a 1448-octet MSS, carrying 1428 payload.
    assert_eq!(mpa::max_ulpdu_for(1448), Some(1442));
    assert_eq!(mpa::fpdu_len(1442), 1448);
    assert_eq!(mpa::max_ulpdu_for(5), None);
    assert_eq!(mpa::max_ulpdu_for(7), None); // an empty ULPDU needs 8 octets
    for budget in 8..3000 {
        let u = mpa::max_ulpdu_for(budget).unwrap();
        assert!(mpa::fpdu_len(u) <= budget);
        assert!(mpa::fpdu_len(u + 1) > budget || u == mpa::MAX_ULPDU_LEN);
    }
}

#[test]
fn trailer_matches_emit() {
    let u = [7u8; 21];
    let mut out = [0u8; 64];
    let n = mpa::emit_fpdu(&[&u], true, None, &mut out).unwrap();
    let crc = softrnic_wire::crc::crc32c(&out[..n - 4]);
    let (t, tn) = mpa::fpdu_trailer(u.len(), crc);
    assert_eq!(&out[2 + u.len()..n], &t[..tn]);
}

#[test]
fn append_fpdu_frames_as_emit_fpdu_does() {
    let payload: Vec<u8> = (0..3000u32).map(|i| (i * 7 + 3) as u8).collect();
    for len in [0usize, 1, 2, 3, 507, 508, 509, 1024, 3000] {
        for crc in [false, true] {
            for at in [None, Some(0u64), Some(4), Some(500), Some(508), Some(1020)] {
                let parts: [&[u8]; 2] = [&payload[..len / 2], &payload[len / 2..len]];
                let mut slice = vec![0u8; MAX_FPDU_LEN + 64];
                let n = mpa::emit_fpdu(&parts, crc, at, &mut slice).unwrap();
                let mut v = vec![0xee; 5];
                let m = mpa::append_fpdu(&parts, crc, at, &mut v).unwrap();
                assert_eq!(m, n, "len {len} crc {crc} at {at:?}");
                assert_eq!(&v[5..], &slice[..n], "len {len} crc {crc} at {at:?}");
                assert_eq!(&v[..5], &[0xee; 5], "what was there stays");
            }
        }
    }
    let big = vec![0u8; mpa::MAX_ULPDU_LEN + 1];
    assert!(mpa::append_fpdu(&[&big], false, None, &mut Vec::new()).is_err());
}
