//! Running a test inside a network namespace of its own: the outer test re-runs an
//! `#[ignore]`d test of the same binary under `unshare -n` (as root) or `unshare -rn`
//! (an unprivileged user namespace), where it may make interfaces without touching
//! the host's. Where neither works, or a tool is missing, the test skips loudly.

#![allow(dead_code)]

pub use softrnic_testkit::netns::{in_child, ip};

/// Runs the ignored test `inner` of this binary in a new network namespace (it needs
/// a TAP device) and asserts that it passed; skips loudly when it cannot.
pub fn run_in_netns(outer: &str, inner: &str) {
    if !std::path::Path::new("/dev/net/tun").exists() {
        return softrnic_testkit::skip(outer, "no /dev/net/tun");
    }
    let Some(out) = softrnic_testkit::netns::run_in_netns(outer, inner) else {
        return;
    };
    // What the child measured, for the reader of the test output.
    for line in out.lines().filter(|l| l.contains("echo:")) {
        eprintln!("{line}");
    }
}
