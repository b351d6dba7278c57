//! Replays the committed fuzz seeds (`fuzz/seeds/<target>/`) and any saved crash
//! reproducers (`fuzz/regressions/<target>/`) through the same checks the cargo-fuzz
//! targets run, so the plain test run guards what fuzzing found.

use softrnic_cli::fuzz_checks::{TARGETS, by_name};
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
        check(&std::fs::read(p).expect("read capture"));
    }
}
