//! Replays the committed fuzz seeds (`fuzz/seeds/<target>/`) and any saved crash
//! reproducers (`fuzz/regressions/<target>/`) through the same checks the cargo-fuzz
//! targets run, so the plain test run guards what fuzzing found.

use softrnic_cli::fuzz_checks::{TARGETS, by_name, capture_decoded};
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
