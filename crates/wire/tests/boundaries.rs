//! Exact boundaries of the codecs that the round-trip properties do not pin down:
//! header lengths at the octet, reserved-field values, error kinds and the octet counts
//! in truncation errors. Written to kill the mutants `cargo mutants -p softrnic-wire`
//! found surviving (see docs/MUTANTS.md).

use softrnic_wire::WireError;
use softrnic_wire::ddp::{DdpHeader, TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN};
use softrnic_wire::markers::{MARKER_LEN, MARKER_SPACING, fpdu_pointer, marker_bytes, strip};
use softrnic_wire::mpa::{self, MpaFrame, MpaFrameRepr, Rfc6581};

/// DDP control octet: T, L, reserved bits, DV = 1.
fn control(tagged: bool, last: bool, reserved: u8) -> u8 {
    (u8::from(tagged) << 7) | (u8::from(last) << 6) | (reserved << 2) | 1
}

#[test]
fn ddp_header_needs_exactly_its_own_length() {
    let mut tagged = [0u8; TAGGED_HEADER_LEN];
    tagged[0] = control(true, true, 0);
    assert!(
        DdpHeader::new_checked(&tagged[..]).is_ok(),
        "14 octets hold a tagged header"
    );
    assert_eq!(
        DdpHeader::new_checked(&tagged[..TAGGED_HEADER_LEN - 1]).unwrap_err(),
        WireError::Truncated {
            needed: TAGGED_HEADER_LEN,
            have: TAGGED_HEADER_LEN - 1
        }
    );
    let mut untagged = [0u8; UNTAGGED_HEADER_LEN];
    untagged[0] = control(false, true, 0);
    assert!(DdpHeader::new_checked(&untagged[..]).is_ok());
    // 14..17 octets would hold a tagged header, not an untagged one.
    for have in TAGGED_HEADER_LEN..UNTAGGED_HEADER_LEN {
        assert_eq!(
            DdpHeader::new_checked(&untagged[..have]).unwrap_err(),
            WireError::Truncated {
                needed: UNTAGGED_HEADER_LEN,
                have
            },
            "untagged header cut to {have} octets"
        );
    }
}

#[test]
fn ddp_reserved_bits_read_back_as_sent() {
    for reserved in 0..16u8 {
        let mut h = [0u8; UNTAGGED_HEADER_LEN];
        h[0] = control(false, true, reserved);
        let view = DdpHeader::new_checked(&h[..]).unwrap();
        assert_eq!(view.ddp_reserved(), reserved);
        assert!(!view.tagged());
        assert!(view.last());
        assert_eq!(view.ddp_version(), 1);
    }
}

#[test]
fn only_truncation_is_truncated() {
    assert!(WireError::Truncated { needed: 2, have: 1 }.is_truncated());
    for e in [
        WireError::BadReadRequestLength(27),
        WireError::BadTerminate("x"),
    ] {
        assert!(!e.is_truncated(), "{e:?}");
    }
}

/// Marks `ulpdu` (an FPDU's octets) as the sender would from marked position `start`.
fn marked(fpdu: &[u8], start: u64) -> Vec<u8> {
    let mut out = Vec::new();
    let mut pos = start;
    for &b in fpdu {
        if pos.is_multiple_of(MARKER_SPACING) {
            out.extend_from_slice(&marker_bytes(fpdu_pointer(start, pos)));
            pos += MARKER_LEN as u64;
        }
        out.push(b);
        pos += 1;
    }
    out
}

#[test]
fn strip_removes_markers_in_the_middle_and_near_the_end() {
    let fpdu: Vec<u8> = (0..1500u32).map(|i| (i * 7 + i / 256) as u8).collect();
    for start in [0u64, 100, 508, 1000, 1020] {
        let m = marked(&fpdu, start);
        assert!(m.len() > fpdu.len(), "start {start}: a marker falls inside");
        let mut out = vec![0u8; fpdu.len()];
        strip(&m, start, &mut out).unwrap_or_else(|e| panic!("start {start}: {e}"));
        assert_eq!(out, fpdu, "start {start}");
        // Cut anywhere: the exact octets needed are reported.
        for cut in [1, MARKER_LEN, 600, m.len() - 1] {
            let cut = cut.min(m.len() - 1);
            match strip(&m[..cut], start, &mut out) {
                Err(WireError::Truncated { needed, have }) => {
                    assert_eq!(have, cut, "start {start} cut {cut}");
                    assert!(
                        needed > cut && needed <= m.len(),
                        "start {start} cut {cut}: {needed}"
                    );
                }
                other => panic!("start {start} cut {cut}: {other:?}"),
            }
        }
    }
}

/// An MPA Request frame header (key, flags, rev 2) announcing `pd_len` octets, followed
/// by `have` octets of private data.
fn mpa_request(pd_len: u16, have: usize) -> Vec<u8> {
    let mut v = b"MPA ID Req Frame".to_vec();
    v.extend_from_slice(&[0x10, 2]);
    v.extend_from_slice(&pd_len.to_be_bytes());
    v.extend((0..have).map(|i| (i % 251) as u8));
    v
}

#[test]
fn mpa_private_data_is_512_octets_at_most_and_read_back_exactly() {
    let ok = mpa_request(512, 512);
    let f = MpaFrame::new_checked(&ok[..]).expect("512 octets of private data are allowed");
    assert_eq!(f.private_data(), &ok[20..]);
    assert_eq!(f.private_data().len(), 512);
    assert_eq!(
        MpaFrame::new_checked(&mpa_request(513, 513)[..]).unwrap_err(),
        WireError::PrivateDataTooLong(513)
    );
    // Emitting refuses 513 octets and takes 512.
    let mut repr = MpaFrameRepr::parse(&ok).unwrap();
    let mut out = vec![0u8; 600];
    assert_eq!(repr.emit(&mut out), Ok(ok.len()));
    let long = vec![7u8; 513];
    repr.private_data = &long;
    repr.rfc6581 = None;
    repr.enhanced = false;
    assert_eq!(repr.emit(&mut out), Err(WireError::PrivateDataTooLong(513)));
}

#[test]
fn rfc6581_word_needs_four_octets() {
    assert_eq!(
        Rfc6581::parse(&[0x80, 1, 0x40, 2]),
        Ok(Rfc6581 {
            peer_to_peer: true,
            rtr_send: false,
            ird: 1,
            rtr_write: false,
            rtr_read: true,
            ord: 2,
        })
    );
    assert_eq!(
        Rfc6581::parse(&[0x80, 1, 0x40]),
        Err(WireError::MissingRfc6581Params)
    );
}

#[test]
fn largest_fpdu_is_length_field_ulpdu_pad_and_crc() {
    assert_eq!(mpa::MAX_FPDU_LEN, 2 + 65535 + 3 + 4);
}

/// The incremental receive check (`mpa::FpduCheck`) agrees with the whole-FPDU deframer
/// on every length's padding and CRC, and catches a flipped octet anywhere.
#[test]
fn fpdu_check_agrees_with_the_deframer() {
    use softrnic_wire::mpa::FpduCheck;
    for len in [0usize, 1, 2, 3, 4, 5, 17, 1000] {
        let ulpdu: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
        let mut f = vec![0u8; mpa::fpdu_len(len)];
        let n = mpa::emit_fpdu(&[&ulpdu], true, None, &mut f).unwrap();
        assert_eq!(n, f.len());
        assert_eq!(
            mpa::fpdu_prefix(len).unwrap(),
            [f[0], f[1]],
            "prefix of {len}"
        );
        let check = |f: &[u8]| {
            let mut c = FpduCheck::begin([f[0], f[1]], true);
            let end = 2 + c.ulpdu_len();
            // Fed in two pieces, as a receiver that places payload does.
            let mid = 2 + c.ulpdu_len() / 2;
            c.update(&f[2..mid]);
            c.update_with(|crc| softrnic_wire::crc::crc32c_append(crc, &f[mid..end]));
            assert_eq!(c.trailer_len(), f.len() - end);
            c.finish(&f[end..])
        };
        assert_eq!(check(&f), Ok(()), "len {len}");
        for at in 2..f.len() {
            let mut bad = f.clone();
            bad[at] ^= 0x20;
            let pad = (2 + len..2 + len + mpa::pad_len(len)).contains(&at);
            assert!(
                matches!(check(&bad), Err(WireError::CrcMismatch { .. })),
                "len {len}, octet {at} flipped{}",
                if pad { " (pad)" } else { "" }
            );
        }
        // CRC off: the field is not checked.
        let c = FpduCheck::begin([f[0], f[1]], false);
        assert_eq!(c.finish(&[0; 7][..c.trailer_len()]), Ok(()));
    }
    assert!(mpa::fpdu_prefix(65536).is_err());
}

/// The pad after every ULPDU length the length field can announce makes length field
/// and ULPDU a multiple of 4 with fewer than 4 octets, and the FPDU length is length
/// field, ULPDU, pad and CRC field (the pad is computed by bit operations, not by
/// remainders: this pins its arithmetic at every length).
#[test]
fn the_pad_aligns_every_ulpdu_length() {
    for len in 0..=mpa::MAX_ULPDU_LEN {
        let pad = mpa::pad_len(len);
        assert!(pad < 4, "len {len}: pad {pad}");
        assert_eq!((2 + len + pad) % 4, 0, "len {len}: pad {pad}");
        assert_eq!(mpa::fpdu_len(len), 2 + len + pad + 4, "len {len}");
    }
}
