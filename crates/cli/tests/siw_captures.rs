//! Proof on real traffic: every capture of the Linux siw driver in
//! `shared/testdata/siw/` decodes completely, every CRC that is used verifies, every MPA
//! frame and FPDU re-emits to the identical octets, and what tshark saw in each capture
//! (`tshark-summary.txt`, where the capture is listed) is what we see. A capture dropped
//! into that folder is picked up with no code change.

use softrnic_capture::Connection;
use softrnic_cli::decode::{ConnectionDecode, CrcStatus, Dir, Event, decode_all, stream};
use softrnic_wire::Ulpdu;
use softrnic_wire::mpa::{self, MpaFrameKind, MpaFrameRepr};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/testdata/siw")
}

fn captures() -> Vec<PathBuf> {
    let dir = testdata();
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("pcap" | "pcapng")
            )
        })
        .collect();
    v.sort();
    assert!(!v.is_empty(), "no captures in {}", dir.display());
    v
}

/// An MPA frame as tshark shows it: (rev, M, C, R, enhanced, private data hex).
type MpaFlags = (u8, bool, bool, bool, bool, String);

/// What tshark reported for one capture.
#[derive(Default, Debug)]
struct Expected {
    /// (tcp stream index, "Request"/"Reply") -> (rev, M, C, R, enhanced, pd hex)
    mpa: HashMap<(usize, String), MpaFlags>,
    opcodes: BTreeMap<String, usize>,
    fpdus: usize,
    crc_good: Option<usize>,
}

fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key))
        .unwrap_or_else(|| panic!("{key} missing in {line}"))
}

fn tshark_summary() -> HashMap<String, Expected> {
    let path = testdata().join("tshark-summary.txt");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (the tshark cross-check needs it)", path.display()));
    let mut all = HashMap::new();
    let mut cur: Option<(String, Expected)> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("== ") {
            if let Some((n, e)) = cur.take() {
                all.insert(n, e);
            }
            let name = rest.split(':').next().unwrap_or_default().to_string();
            cur = Some((name, Expected::default()));
            continue;
        }
        let Some((_, e)) = cur.as_mut() else { continue };
        let l = line.trim();
        if l.starts_with("stream ") && l.contains(" MPA ") {
            let idx: usize = l.split_whitespace().nth(1).unwrap().parse().unwrap();
            let kind = l.split_whitespace().nth(4).unwrap().to_string();
            let b = |k: &str| field(l, k) == "1";
            e.mpa.insert(
                (idx, kind),
                (
                    field(l, "rev=").parse().unwrap(),
                    b("M="),
                    b("C="),
                    b("R="),
                    b("enhanced="),
                    field(l, "pd=").trim_start_matches('-').to_string(),
                ),
            );
        } else if let Some(ops) = l.strip_prefix("RDMAP opcodes:") {
            for w in ops.split_whitespace().filter(|w| *w != "-") {
                let name = w.split('(').next().unwrap().to_string();
                let n = w.rsplit('x').next().unwrap().parse().unwrap();
                e.opcodes.insert(name, n);
            }
        } else if let Some(r) = l.strip_prefix("MPA FPDUs: ") {
            e.fpdus = r.split(',').next().unwrap().parse().unwrap();
            if let Some(g) = r.split("CRC32c check: ").nth(1) {
                e.crc_good = Some(g.split_whitespace().next().unwrap().parse().unwrap());
            }
        }
    }
    if let Some((n, e)) = cur {
        all.insert(n, e);
    }
    all
}

/// Re-emits every MPA frame and FPDU of a decoded connection and compares octets.
fn assert_reemit_identical(name: &str, tcp: &Connection, d: &ConnectionDecode) -> usize {
    let mut checked = 0;
    let mut out = vec![0u8; 70_000];
    for e in &d.events {
        match e {
            Event::Mpa(m) => {
                let original = &stream(tcp, m.dir)[m.range.clone()];
                let repr = MpaFrameRepr::parse(original).expect("parses again");
                let n = repr.emit(&mut out).expect("emits");
                assert_eq!(&out[..n], original, "{name}: MPA frame re-emit differs");
            }
            Event::Fpdu(f) => {
                let markers = match f.dir {
                    Dir::ToServer => d.markers.0,
                    Dir::ToClient => d.markers.1,
                };
                assert!(!markers, "siw never negotiates markers");
                let original = &stream(tcp, f.dir)[f.range.clone()];
                let ulpdu_bytes = &original[mpa::ULPDU_LEN_LEN..mpa::ULPDU_LEN_LEN + f.ulpdu_len];
                let ulpdu = Ulpdu::parse(ulpdu_bytes).expect("parses again");
                let mut u = vec![0u8; ulpdu.buffer_len()];
                ulpdu.emit(&mut u).expect("ulpdu emits");
                assert_eq!(
                    u, ulpdu_bytes,
                    "{name}: ULPDU re-emit differs at {:?}",
                    f.range
                );
                // siw leaves its pad octets uninitialised; keep them for the comparison.
                let mut pad = [0u8; 3];
                let pad_at = mpa::ULPDU_LEN_LEN + f.ulpdu_len;
                let pad_len = mpa::pad_len(f.ulpdu_len);
                pad[..pad_len].copy_from_slice(&original[pad_at..pad_at + pad_len]);
                let n =
                    mpa::emit_fpdu_padded(&[&u], pad, d.crc, None, &mut out).expect("fpdu emits");
                assert_eq!(
                    &out[..n],
                    original,
                    "{name}: FPDU re-emit differs at {:?}",
                    f.range
                );
            }
            Event::Error { error, .. } => panic!("{name}: decode error {error}"),
        }
        checked += 1;
    }
    checked
}

#[test]
fn every_siw_capture_decodes_completely_and_reemits_identically() {
    let expected = tshark_summary();
    let mut report = Vec::new();
    for path in captures() {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let tcp = softrnic_capture::read_capture(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        let decoded = decode_all(&tcp);
        assert!(!decoded.is_empty(), "{name}: no iWARP connection found");
        let mut fpdus = 0;
        let mut crc_good = 0;
        let mut opcodes: BTreeMap<String, usize> = BTreeMap::new();
        for d in &decoded {
            let c = &tcp[d.index];
            for (dir, s, raw) in [
                (Dir::ToServer, &d.to_server, &c.to_server),
                (Dir::ToClient, &d.to_client, &c.to_client),
            ] {
                assert!(
                    raw.gaps.is_empty(),
                    "{name}: capture has gaps {:?}",
                    raw.gaps
                );
                assert_eq!(s.error, None, "{name} {dir:?}: decode error");
                assert_eq!(s.trailing_bytes, 0, "{name} {dir:?}: octets left undecoded");
                assert_eq!(s.crc_bad, 0, "{name} {dir:?}: bad CRC");
                if d.crc {
                    assert_eq!(s.crc_not_used, 0, "{name}: CRC negotiated but not checked");
                }
                // 100%: the MPA frame and the FPDUs cover the whole stream.
                let covered: usize = d
                    .events
                    .iter()
                    .filter_map(|e| match e {
                        Event::Mpa(m) if m.dir == dir => Some(m.range.len()),
                        Event::Fpdu(f) if f.dir == dir => Some(f.range.len()),
                        _ => None,
                    })
                    .sum();
                assert_eq!(
                    covered,
                    raw.bytes.len(),
                    "{name} {dir:?}: stream not fully decoded"
                );
                fpdus += s.fpdus;
                crc_good += s.crc_good;
                for (op, n) in &s.opcodes {
                    *opcodes.entry(op.name().to_string()).or_default() += n;
                }
            }
            for f in d.fpdus() {
                if let CrcStatus::NotUsed(v) = f.crc {
                    assert_eq!(v, 0, "{name}: siw sends a zero CRC field when CRC is off");
                }
            }
            assert_reemit_identical(&name, c, d);
        }
        // Every capture is cross-checked: one without a tshark summary fails (run
        // ../shared/rig/summarize-pcap.py for a new one).
        let exp = expected
            .get(&name)
            .unwrap_or_else(|| panic!("{name}: no entry in tshark-summary.txt"));
        assert!(
            !exp.mpa.is_empty(),
            "{name}: tshark summary lists no MPA frame"
        );
        {
            assert_eq!(fpdus, exp.fpdus, "{name}: FPDU count differs from tshark");
            assert_eq!(
                opcodes, exp.opcodes,
                "{name}: opcode counts differ from tshark"
            );
            if let Some(g) = exp.crc_good {
                assert_eq!(crc_good, g, "{name}: good CRCs differ from tshark");
            }
            for ((idx, kind), (rev, m, c, r, enh, pd)) in &exp.mpa {
                let d = decoded
                    .iter()
                    .find(|d| d.index == *idx)
                    .unwrap_or_else(|| panic!("{name}: tcp stream {idx} not decoded"));
                let k = if kind == "Request" {
                    MpaFrameKind::Request
                } else {
                    MpaFrameKind::Reply
                };
                let f = d
                    .mpa(k)
                    .unwrap_or_else(|| panic!("{name}: no {kind} in stream {idx}"));
                assert_eq!(
                    (f.revision, f.markers, f.crc, f.reject, f.enhanced),
                    (*rev, *m, *c, *r, *enh),
                    "{name} stream {idx} {kind}: flags differ from tshark"
                );
                let mut pd_bytes = f.rfc6581.map(|p| p.to_bytes().to_vec()).unwrap_or_default();
                pd_bytes.extend_from_slice(&f.private_data);
                let hex: String = pd_bytes.iter().map(|b| format!("{b:02x}")).collect();
                assert_eq!(&hex, pd, "{name} stream {idx} {kind}: private data differs");
            }
        }
        report.push(format!(
            "{name}: {} conn, {fpdus} FPDUs, {crc_good} CRC good",
            decoded.len()
        ));
    }
    assert_eq!(
        report.len(),
        expected.len(),
        "captures and tshark-summary.txt entries differ"
    );
    println!("{}", report.join("\n"));
}

/// Known facts per capture that later issues rely on.
#[test]
fn wire_facts_of_siw() {
    let load = |n: &str| {
        let tcp = softrnic_capture::read_capture(&testdata().join(n)).unwrap();
        decode_all(&tcp)
    };
    // RFC 6581 P2P: initiator offers Write and Read RTR, responder picks Write; the RTR
    // is a zero-length RDMA Write.
    let p2p = load("siw-rping-p2p.pcap");
    let req = p2p[0].mpa(MpaFrameKind::Request).unwrap().rfc6581.unwrap();
    let rep = p2p[0].mpa(MpaFrameKind::Reply).unwrap().rfc6581.unwrap();
    assert!(req.peer_to_peer && req.rtr_write && req.rtr_read && !req.rtr_send);
    assert!(rep.peer_to_peer && rep.rtr_write && !rep.rtr_read);
    let first = p2p[0].fpdus().find(|f| f.dir == Dir::ToServer).unwrap();
    assert_eq!(first.header.opcode, softrnic_wire::Opcode::Write);
    assert_eq!(first.ulpdu_len, softrnic_wire::ddp::TAGGED_HEADER_LEN);

    // MPA revision 1: no enhanced flag, no private data, so no IRD/ORD.
    let v1 = load("siw-rping-mpav1.pcap");
    let r = v1[0].mpa(MpaFrameKind::Request).unwrap();
    assert_eq!((r.revision, r.enhanced, r.rfc6581), (1, false, None));

    // perftest -R: two connections, the test QP negotiates IRD=ORD=128.
    let rd = load("siw-ib_read_bw.pcap");
    assert_eq!(rd.len(), 2);
    let p = rd[1].mpa(MpaFrameKind::Request).unwrap().rfc6581.unwrap();
    assert_eq!((p.ird, p.ord), (128, 128));

    // FPDUs are sized to the MSS: 1448 octets for a full tagged segment.
    let wr = load("siw-ib_write_bw.pcap");
    let max = wr[1].fpdus().map(|f| f.range.len()).max().unwrap();
    assert_eq!(max, 1448);

    // A rejected connection: R=1 in the reply, no FPDUs.
    let rej = load("siw-mpa-reject-client.pcap");
    assert!(rej[0].mpa(MpaFrameKind::Reply).unwrap().reject);
    assert_eq!(rej[0].fpdus().count(), 0);
}

/// A capture made by `tests/siw_interop/` (siw's rping client, softrnic's server
/// making an RDMA Read with a wrong STag, then one beyond the buffer): siw's
/// Terminates use siw's own bit-field layout, and decode to the RFC cause regardless.
#[test]
fn siw_terminate_in_siw_layout_decodes() {
    use softrnic_cli::decode::{BodyInfo, decode_all};
    use softrnic_wire::TerminateLayout;
    use softrnic_wire::terminate::{Layer, TerminateCause, rdmap_code, rdmap_etype};
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/siw-terminate-read.pcap");
    let conns = decode_all(&softrnic_capture::read_capture(&path).expect("capture"));
    let terms: Vec<_> = conns
        .iter()
        .flat_map(|c| c.fpdus())
        .filter_map(|p| match p.body {
            BodyInfo::Terminate {
                cause,
                layout,
                rdmap_header,
                ddp_header,
            } => Some((cause, layout, ddp_header, rdmap_header)),
            _ => None,
        })
        .filter(|t| t.1 == TerminateLayout::SiwLittleEndian)
        .collect();
    let cause = |code| TerminateCause::new(Layer::Rdmap, rdmap_etype::REMOTE_PROTECTION, code);
    assert_eq!(
        terms,
        vec![
            (
                cause(rdmap_code::INVALID_STAG),
                TerminateLayout::SiwLittleEndian,
                true,
                true
            ),
            (
                cause(rdmap_code::BASE_BOUNDS),
                TerminateLayout::SiwLittleEndian,
                true,
                true
            ),
        ]
    );
    for c in &conns {
        assert_eq!(c.to_server.error, None);
        assert_eq!(c.to_client.error, None);
    }
}
