//! What the workspace's test suites share (a dev-dependency only, never published):
//!
//! - [`record`], [`skip`], [`skip_test`]: a test that cannot run here says so loudly
//!   and writes `ran` or `skipped(why)` to the file `SOFTRNIC_INTEROP_LOG` names, so a
//!   run counts its skips (`cargo test` hides a passing test's stderr, so a banner
//!   alone goes unseen; `.ci/run` sets the variable). `SOFTRNIC_RIG=require` turns a
//!   [`skip_test`] into a failure, and `SOFTRNIC_RIG=skip` skips rig tests on purpose.
//! - [`netns`]: re-running one ignored test of the binary in a network namespace of
//!   its own.
//! - [`rig`]: where the siw rig keeps its guests, and the machine's one-guest lock.

pub mod netns;
pub mod rig;

/// The calling test's name (its thread's, as the test harness names it).
fn current_test() -> String {
    std::thread::current()
        .name()
        .unwrap_or("(unnamed test)")
        .to_string()
}

/// Records that `test` ran (`ran`) or skipped (`skipped(why)`) in the file
/// `SOFTRNIC_INTEROP_LOG` names, one line each; nothing without the variable.
pub fn record_as(outcome: &str, test: &str) {
    let Ok(path) = std::env::var("SOFTRNIC_INTEROP_LOG") else {
        return;
    };
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("SOFTRNIC_INTEROP_LOG={path}: {e}"));
    std::io::Write::write_all(&mut f, format!("{outcome} {test}\n").as_bytes())
        .expect("interop log written");
}

/// [`record_as`] under the calling test's name.
pub fn record(outcome: &str) {
    record_as(outcome, &current_test());
}

/// A loud skip of `what` for what the machine lacks, recorded under `test`.
pub fn skip_as(what: &str, why: &str, test: &str) {
    eprintln!();
    eprintln!("======================================================================");
    eprintln!("SKIPPED {what}: {why}");
    eprintln!("======================================================================");
    record_as(&format!("skipped({why})"), test);
}

/// [`skip_as`] under the calling test's name.
pub fn skip(what: &str, why: &str) {
    skip_as(what, why, &current_test());
}

/// A test's skip where `SOFTRNIC_RIG=require` wants it to run: then a failure, else
/// [`skip_as`].
pub fn skip_test_as(what: &str, why: &str, test: &str) {
    let mode = std::env::var("SOFTRNIC_RIG").unwrap_or_default();
    assert!(
        mode != "require",
        "SOFTRNIC_RIG=require, but the {what} cannot run: {why}"
    );
    skip_as(what, why, test);
}

/// [`skip_test_as`] under the calling test's name.
pub fn skip_test(what: &str, why: &str) {
    skip_test_as(what, why, &current_test());
}

/// A command's stdout and stderr, as one text.
pub fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
