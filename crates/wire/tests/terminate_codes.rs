//! Each malformed input maps to the exact Terminate layer/type/code of RFC 5040/5041/5044.

use softrnic_wire::ddp::{DdpRepr, Placement};
use softrnic_wire::mpa::{self, MpaFrameRepr};
use softrnic_wire::rdmap::Opcode;
use softrnic_wire::terminate::{Layer, TerminateCause};
use softrnic_wire::{Ulpdu, WireError};

fn cause(l: Layer, t: u8, c: u8) -> TerminateCause {
    TerminateCause::new(l, t, c)
}

fn send(qn: u32, mo: u32) -> Vec<u8> {
    let h = DdpRepr {
        last: true,
        opcode: Opcode::Send,
        placement: Placement::Untagged {
            rsvd_ulp: 0,
            qn,
            msn: 1,
            mo,
        },
    };
    let mut b = vec![0u8; 18 + 4];
    h.emit(&mut b).unwrap();
    b
}

fn write() -> Vec<u8> {
    let h = DdpRepr {
        last: true,
        opcode: Opcode::Write,
        placement: Placement::Tagged { stag: 0x100, to: 0 },
    };
    let mut b = vec![0u8; 14 + 4];
    h.emit(&mut b).unwrap();
    b
}

fn ulpdu_err(b: &[u8]) -> (WireError, TerminateCause) {
    let e = Ulpdu::parse(b).unwrap_err();
    (e, e.terminate_cause())
}

#[test]
fn ddp_version() {
    let mut t = write();
    t[0] = (t[0] & !3) | 2;
    assert_eq!(ulpdu_err(&t).1, cause(Layer::Ddp, 1, 0x04));
    let mut u = send(0, 0);
    u[0] &= !3;
    assert_eq!(ulpdu_err(&u).1, cause(Layer::Ddp, 2, 0x06));
}

/// RFC 5041 and RFC 5040: reserved control bits are zero on transmit and not checked
/// on receive. A header with all of them set parses as if they were clear.
#[test]
fn reserved_control_bits_are_ignored() {
    for clean in [send(0, 0), write()] {
        let mut dirty = clean.clone();
        dirty[0] |= 0x3c; // DDP Rsvd
        dirty[1] |= 0x30; // RDMAP Rsvd
        let got = Ulpdu::parse(&dirty).expect("reserved bits are not an error");
        assert_eq!(got.header, Ulpdu::parse(&clean).unwrap().header);
        let view = softrnic_wire::ddp::DdpHeader::new_checked(&dirty[..]).unwrap();
        assert_eq!((view.ddp_reserved(), view.rdmap_reserved()), (0xf, 0x3));
    }
}

#[test]
fn rdmap_version_and_opcode() {
    let mut u = send(0, 0);
    u[1] = (u[1] & 0x3f) | 0x80; // RV = 2
    assert_eq!(
        ulpdu_err(&u),
        (WireError::BadRdmapVersion(2), cause(Layer::Rdmap, 2, 0x05))
    );
    let mut u = send(0, 0);
    u[1] = (u[1] & 0xf0) | 0x0c;
    assert_eq!(
        ulpdu_err(&u),
        (WireError::UnknownOpcode(0xc), cause(Layer::Rdmap, 2, 0x06))
    );
    // A Write opcode in an untagged segment.
    let mut u = send(0, 0);
    u[1] &= 0xf0;
    assert_eq!(ulpdu_err(&u).1, cause(Layer::Rdmap, 2, 0x06));
}

#[test]
fn untagged_queue_and_offset_rules() {
    assert_eq!(ulpdu_err(&send(1, 0)).1, cause(Layer::Ddp, 2, 0x01));
    // A Read Request must be one segment at MO 0.
    let h = DdpRepr {
        last: true,
        opcode: Opcode::ReadRequest,
        placement: Placement::Untagged {
            rsvd_ulp: 0,
            qn: 1,
            msn: 1,
            mo: 4,
        },
    };
    let mut b = vec![0u8; 18 + 28];
    h.emit(&mut b).unwrap();
    assert_eq!(ulpdu_err(&b).1, cause(Layer::Ddp, 2, 0x04));
    // With MO 0 but a short body it is a Read Request length error.
    let h = DdpRepr {
        placement: Placement::Untagged {
            rsvd_ulp: 0,
            qn: 1,
            msn: 1,
            mo: 0,
        },
        ..h
    };
    let mut b = vec![0u8; 18 + 27];
    h.emit(&mut b).unwrap();
    assert_eq!(
        ulpdu_err(&b),
        (
            WireError::BadReadRequestLength(27),
            cause(Layer::Rdmap, 2, 0xff)
        )
    );
}

#[test]
fn short_ulpdu_is_a_framing_error() {
    assert_eq!(
        ulpdu_err(&write()[..10]),
        (WireError::BadUlpduLength(10), cause(Layer::Llp, 0, 0x03))
    );
    assert_eq!(ulpdu_err(&[]).1, cause(Layer::Llp, 0, 0x03));
}

#[test]
fn mpa_setup_errors() {
    let e = MpaFrameRepr::parse(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap_err();
    assert_eq!(
        (e, e.terminate_cause()),
        (WireError::BadMpaKey, cause(Layer::Llp, 0, 0x04))
    );
    let mut f = *b"MPA ID Req Frame\x20\x02\x00\x00";
    assert_eq!(MpaFrameRepr::parse(&f), Err(WireError::RejectInRequest));
    f[16] = 0;
    f[17] = 3;
    assert_eq!(MpaFrameRepr::parse(&f), Err(WireError::BadMpaRevision(3)));
    f[17] = 2;
    f[16] = 0x10; // enhanced, but no IRD/ORD word
    assert_eq!(
        MpaFrameRepr::parse(&f),
        Err(WireError::MissingRfc6581Params)
    );
    f[16] = 0;
    f[18..20].copy_from_slice(&513u16.to_be_bytes());
    assert_eq!(
        MpaFrameRepr::parse(&f),
        Err(WireError::PrivateDataTooLong(513))
    );
}

#[test]
fn crc_and_marker_errors() {
    let mut out = [0u8; 64];
    let n = mpa::emit_fpdu(&[&write()], true, Some(0), &mut out).unwrap();
    let mut scratch = vec![0u8; mpa::MAX_FPDU_LEN];
    assert!(
        mpa::Deframer::new(true, true)
            .next(&out[..n], &mut scratch)
            .is_ok()
    );
    let mut bad = out;
    bad[3] = 4; // the leading marker's FPDUPTR must be 0
    let e = mpa::Deframer::new(true, true)
        .next(&bad[..n], &mut scratch)
        .unwrap_err();
    assert!(matches!(
        e,
        WireError::BadMarker {
            fpduptr: 4,
            expected: 0,
            ..
        }
    ));
    assert_eq!(e.terminate_cause(), cause(Layer::Llp, 0, 0x03));
    // Without markers negotiated, the same octets fail the CRC instead of framing.
    let n = mpa::emit_fpdu(&[&write()], true, None, &mut out).unwrap();
    out[n - 1] ^= 0xff;
    let e = mpa::Deframer::new(false, true)
        .next(&out[..n], &mut [])
        .unwrap_err();
    assert_eq!(e.terminate_cause(), cause(Layer::Llp, 0, 0x02));
}

#[test]
fn buffer_too_small_is_an_error_not_a_panic() {
    let mut tiny = [0u8; 3];
    assert!(matches!(
        mpa::emit_fpdu(&[&[1, 2, 3]], false, None, &mut tiny),
        Err(WireError::BufferTooSmall { .. })
    ));
    let w = write();
    let u = Ulpdu::parse(&w).unwrap();
    assert!(matches!(
        u.emit(&mut tiny),
        Err(WireError::BufferTooSmall { .. })
    ));
}

/// A Terminate exactly as Linux siw 6.1 (x86) sent it when softrnic made an RDMA Read
/// with an STag siw never handed out (captured by crates/cli/tests/siw_interop/):
/// siw's bit-field layout swaps Layer and EType and puts M, D, R into the low bits
/// of the third octet. The cause is RDMAP / remote protection / invalid STag, with the
/// offending Read Request's DDP header and RDMAP header copied.
#[test]
fn siw_little_endian_terminate_layout() {
    use softrnic_wire::terminate::{TerminateLayout, TerminateRepr};
    let body = hex(concat!(
        "10000700",                                                 // control word
        "0000",                                                     // DDP segment length
        "414100000000000000010000000100000000",                     // copied DDP header
        "0000011700007f1a20ae6000000000641cb4fe00000056046f789700", // Read Request
    ));
    let t = TerminateRepr::parse(&body).expect("siw's Terminate parses");
    assert_eq!(t.layout, TerminateLayout::SiwLittleEndian);
    assert_eq!(
        t.cause,
        TerminateCause::new(
            Layer::Rdmap,
            1,
            softrnic_wire::terminate::rdmap_code::INVALID_STAG
        )
    );
    assert!(t.segment_len_valid);
    assert_eq!(t.ddp.expect("DDP header copied").header.len(), 18);
    assert_eq!(t.rdmap.expect("Read Request copied").len(), 28);
    assert_eq!(t.reserved, 0);

    // The same cause in RFC 5040's layout, as softrnic emits it, reads as RFC 5040.
    let mut rfc = body.clone();
    rfc[0] = 0x01;
    rfc[2] = 0xe0;
    let t = TerminateRepr::parse(&rfc).expect("RFC layout parses");
    assert_eq!(t.layout, TerminateLayout::Rfc5040);
    assert_eq!(t.cause.layer, Layer::Rdmap);
    assert_eq!(t.cause.etype, 1);

    // siw's flag bits with copied headers that do not fit them: not siw's layout, and
    // not a valid RFC one either (reserved bits set, headers unaccounted for).
    let mut bad = body.clone();
    bad[2] = 0x01; // siw's M only, yet headers follow
    assert!(TerminateRepr::parse(&bad).is_err());
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}
