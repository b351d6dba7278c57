//! Running a test inside a network namespace of its own: the outer test re-runs an
//! `#[ignore]`d test of the same binary under `unshare -n` (as root) or `unshare -rn`
//! (an unprivileged user namespace), where it may make interfaces without touching
//! the host's. Where neither works, or a tool is missing, the test skips loudly.

#![allow(dead_code)]

use std::process::Command;

/// Set for the child that runs inside the namespace.
const CHILD: &str = "SOFTRNIC_TCP_NETNS_CHILD";

/// True in the child: the `#[ignore]`d half runs only there.
pub fn in_child() -> bool {
    std::env::var_os(CHILD).is_some()
}

/// Runs the ignored test `inner` of this binary in a new network namespace and
/// asserts that it passed; skips loudly when no namespace can be made.
pub fn run_in_netns(outer: &str, inner: &str) {
    if !std::path::Path::new("/dev/net/tun").exists() {
        return super::common::skip(outer, "no /dev/net/tun");
    }
    if Command::new("ip").arg("-V").output().is_err() {
        return super::common::skip(outer, "`ip` (iproute2) is not installed");
    }
    let works = |args: &[&str]| {
        Command::new("unshare")
            .args(args)
            .arg("true")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let Some(args) = [&["-n"][..], &["-r", "-n"][..]]
        .into_iter()
        .find(|a| works(a))
    else {
        return super::common::skip(outer, "neither `unshare -n` nor `unshare -rn` works");
    };
    let exe = std::env::current_exe().expect("the test binary");
    let o = Command::new("unshare")
        .args(args)
        .arg(exe)
        .args([
            inner,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .output()
        .expect("unshare runs");
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "{inner} in a namespace failed:\n{out}");
    assert!(out.contains("1 passed"), "{inner} did not run:\n{out}");
    // What the child measured, for the reader of the test output.
    for line in out.lines().filter(|l| l.contains("echo:")) {
        eprintln!("{line}");
    }
    super::common::record("ran");
}

/// Runs `ip ARGS` and asserts it succeeded.
pub fn ip(args: &str) {
    let o = Command::new("ip")
        .args(args.split_whitespace())
        .output()
        .expect("ip runs");
    assert!(
        o.status.success(),
        "ip {args}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}
