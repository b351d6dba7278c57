//! The properties each fuzz target checks, shared by `fuzz/` (cargo-fuzz) and by the
//! plain test run, which replays the committed seed corpus through them.
//!
//! Each parser check parses arbitrary octets; where the parse succeeds, the value must
//! emit back to the very same octets. The protocol-core checks ([`qp_input`],
//! [`cm_responder`]) feed arbitrary octets to proto's state machines and check their
//! promises. Any panic, in the code under test or in the check, is a finding.

pub mod built_seeds;
pub mod cm_responder;
pub mod qp_input;

pub use cm_responder::{cm_responder, cm_responder_outcome};
pub use qp_input::{qp_input, qp_input_outcome};

use crate::decode::{BodyInfo, ConnectionDecode, Dir, Event, decode_all, stream};
use softrnic_capture::Connection;
use softrnic_wire::mpa::{self, Deframer, MAX_FPDU_LEN, MpaFrameKind, MpaFrameRepr};
use softrnic_wire::{TerminateRepr, Ulpdu};

/// MPA request/reply frames.
pub fn mpa_frame(data: &[u8]) {
    if let Ok(f) = MpaFrameRepr::parse(data) {
        let mut out = vec![0u8; f.buffer_len()];
        assert_eq!(f.emit(&mut out), Ok(out.len()));
        assert_eq!(&out[..], &data[..out.len()], "MPA frame re-emit differs");
    }
}

/// A ULPDU: DDP header, RDMAP control and body (Read Request, Terminate, payload). The
/// reserved control bits are ignored on receive (RFC 5041, RFC 5040) and emitted as
/// zero, so they are the one thing the re-emit may differ in.
pub fn ulpdu(data: &[u8]) {
    if let Ok(u) = Ulpdu::parse(data) {
        let mut out = vec![0u8; u.buffer_len()];
        assert_eq!(u.emit(&mut out), Ok(data.len()));
        let mut expected = data.to_vec();
        expected[0] &= !DDP_RESERVED;
        expected[1] &= !RDMAP_RESERVED;
        assert_eq!(out, expected, "ULPDU re-emit differs");
    }
}

/// The reserved bits of the DDP control octet and of the RDMAP control octet.
const DDP_RESERVED: u8 = 0x3c;
const RDMAP_RESERVED: u8 = 0x30;

/// A Terminate body.
pub fn terminate(data: &[u8]) {
    if let Ok(t) = TerminateRepr::parse(data) {
        let mut out = vec![0u8; t.buffer_len()];
        assert_eq!(t.emit(&mut out), Ok(data.len()));
        assert_eq!(&out[..], data, "Terminate re-emit differs");
    }
}

/// An FPDU stream. The first octet picks markers (bit 0) and CRC (bit 1); the rest is
/// deframed FPDU by FPDU until it ends or fails, and each FPDU is re-emitted.
pub fn fpdu_stream(data: &[u8]) {
    let Some((&mode, stream)) = data.split_first() else {
        return;
    };
    let (markers, crc) = (mode & 1 != 0, mode & 2 != 0);
    let mut d = Deframer::new(markers, crc);
    let mut scratch = vec![0u8; MAX_FPDU_LEN];
    let mut out = vec![0u8; MAX_FPDU_LEN + 1024];
    let mut at = 0;
    while at < stream.len() {
        let pos = d.position();
        let Ok(f) = d.next(&stream[at..], &mut scratch) else {
            break;
        };
        let mut pad = [0u8; 3];
        pad[..f.pad.len()].copy_from_slice(f.pad);
        let ulpdu = f.ulpdu.to_vec();
        let n = mpa::emit_fpdu_padded(&[&ulpdu], pad, crc, markers.then_some(pos), &mut out)
            .expect("a deframed FPDU re-emits");
        assert_eq!(n, f.consumed, "re-emitted FPDU length differs");
        let original = &stream[at..at + n];
        if crc {
            assert_eq!(&out[..n], original, "FPDU re-emit differs");
        } else {
            // Without CRC the field is not interpreted: compare all but it.
            assert_eq!(&out[..n - 4], &original[..n - 4], "FPDU re-emit differs");
        }
        // Whatever deframes must parse or fail cleanly as a ULPDU too.
        self::ulpdu(&ulpdu);
        at += n;
    }
}

/// A whole capture file, through reassembly and the iWARP decoder. What decodes must
/// account for its stream exactly (see [`check_decode`]).
pub fn capture(data: &[u8]) {
    let _ = capture_decoded(data);
}

/// [`capture`]'s check, returning what it decoded (`None` when the octets are not a
/// capture) so that tests can also require that real captures decode to something.
pub fn capture_decoded(data: &[u8]) -> Option<Vec<ConnectionDecode>> {
    let conns = softrnic_capture::parse_capture(data).ok()?;
    let decoded = decode_all(&conns);
    for d in &decoded {
        check_decode(&conns[d.index], d);
    }
    Some(decoded)
}

/// The decoder's accounting for one connection, per direction: the MPA frame and the
/// FPDUs tile the stream from its first octet with no gap or overlap; decoding stops
/// only at an error (right where the last item ended), at a truncated FPDU (the
/// trailing octets), or at the end; the counters agree with the events.
pub fn check_decode(c: &Connection, d: &ConnectionDecode) {
    // FPDUs are decoded only after an accepting Reply.
    let fpdus_decoded = d
        .mpa(MpaFrameKind::Reply)
        .is_some_and(|r| !r.reject && d.mpa(MpaFrameKind::Request).is_some());
    for (dir, summary) in [(Dir::ToServer, &d.to_server), (Dir::ToClient, &d.to_client)] {
        let len = stream(c, dir).len();
        let mut end = 0;
        let (mut fpdus, mut payload, mut errors) = (0, 0u64, 0);
        for e in d.events.iter() {
            match e {
                Event::Mpa(m) if m.dir == dir => {
                    assert_eq!(m.range.start, end, "{dir:?}: MPA frame not where expected");
                    end = m.range.end;
                }
                Event::Fpdu(f) if f.dir == dir => {
                    assert_eq!(f.range.start, end, "{dir:?}: FPDUs do not tile the stream");
                    assert!(
                        f.range.len() >= mpa::ULPDU_LEN_LEN + f.ulpdu_len + mpa::CRC_LEN,
                        "{dir:?}: FPDU shorter than its ULPDU"
                    );
                    end = f.range.end;
                    fpdus += 1;
                    if let BodyInfo::Payload(n) = f.body {
                        payload += n as u64;
                    }
                }
                Event::Error {
                    dir: ed, offset, ..
                } if *ed == dir => {
                    assert_eq!(*offset, end, "{dir:?}: error not where decoding stopped");
                    errors += 1;
                }
                _ => {}
            }
        }
        assert!(end <= len, "{dir:?}: decoded past the stream's end");
        assert_eq!(
            errors,
            usize::from(summary.error.is_some()),
            "{dir:?}: errors"
        );
        assert_eq!(summary.fpdus, fpdus, "{dir:?}: FPDU count");
        assert_eq!(summary.opcodes.values().sum::<usize>(), fpdus);
        assert_eq!(
            summary.crc_good + summary.crc_bad + summary.crc_not_used,
            fpdus,
            "{dir:?}: CRC counts"
        );
        assert_eq!(summary.payload_bytes, payload, "{dir:?}: payload octets");
        if fpdus_decoded && summary.error.is_none() {
            assert_eq!(
                end + summary.trailing_bytes,
                len,
                "{dir:?}: octets neither decoded nor trailing"
            );
        }
    }
}

/// Looks up a check by fuzz target name.
pub fn by_name(name: &str) -> Option<fn(&[u8])> {
    Some(match name {
        "mpa_frame" => mpa_frame,
        "ulpdu" => ulpdu,
        "terminate" => terminate,
        "fpdu_stream" => fpdu_stream,
        "capture" => capture,
        "qp_input" => qp_input,
        "cm_responder" => cm_responder,
        _ => return None,
    })
}

/// Every fuzz target name.
pub const TARGETS: [&str; 7] = [
    "mpa_frame",
    "ulpdu",
    "terminate",
    "fpdu_stream",
    "capture",
    "qp_input",
    "cm_responder",
];
