//! Replays the `tcp_input` fuzz target's committed seeds (`fuzz/seeds/tcp_input/`) and
//! any saved crash reproducers (`fuzz/regressions/tcp_input/`), each whole and cut
//! short, through the check the target runs (`softrnic_tcp::fuzz_input`), and a few
//! thousand seeded random scripts besides, so that the plain test run guards what
//! fuzzing found.

use softrnic_tcp::fuzz_input::connection_input;
use softrnic_tcp::sim::Rng;
use std::path::{Path, PathBuf};

fn files(dir: &Path) -> Vec<PathBuf> {
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
fn the_seeds_and_regressions_replay() {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let seeds = files(&fuzz.join("seeds/tcp_input"));
    assert!(seeds.len() >= 3, "seeds: {seeds:?}");
    for f in seeds
        .iter()
        .chain(&files(&fuzz.join("regressions/tcp_input")))
    {
        let data = std::fs::read(f).expect("read seed");
        for cut in (0..=data.len()).rev() {
            connection_input(&data[..cut]);
        }
    }
}

#[test]
fn random_scripts_keep_the_invariants() {
    for seed in 0..3000 {
        let mut r = Rng::new(seed);
        let len = r.below(400) as usize;
        let script: Vec<u8> = (0..len).map(|_| r.below(256) as u8).collect();
        connection_input(&script);
    }
}
