//! Running a test inside a network namespace of its own: the outer test re-runs an
//! `#[ignore]`d test of the same binary under `unshare -n` (as root) or `unshare -rn`
//! (an unprivileged user namespace), where it may make interfaces without touching
//! the host's. Where neither works, or `ip` is missing, the test skips loudly.

use std::process::Command;

/// Set for the child that runs inside the namespace.
const CHILD: &str = "SOFTRNIC_NETNS_CHILD";

/// True in the child: the `#[ignore]`d half runs only there.
pub fn in_child() -> bool {
    std::env::var_os(CHILD).is_some()
}

/// Runs the ignored test `inner` of this binary in a new network namespace, asserts
/// that it passed and records `ran` under `test`; returns what the child printed.
/// `None` after a loud skip (recorded under `test`) when no namespace can be made.
pub fn run_in_netns(test: &str, inner: &str) -> Option<String> {
    if Command::new("ip").arg("-V").output().is_err() {
        crate::skip_as(test, "`ip` (iproute2) is not installed", test);
        return None;
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
        crate::skip_as(test, "neither `unshare -n` nor `unshare -rn` works", test);
        return None;
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
    let out = crate::text(&o);
    assert!(o.status.success(), "{inner} in a namespace failed:\n{out}");
    assert!(
        out.contains("1 passed"),
        "{inner} did not run in the namespace:\n{out}"
    );
    crate::record_as("ran", test);
    Some(out)
}

/// Runs `ip ARGS` (in the namespace), asserts it succeeded; what it printed.
pub fn ip(args: &str) -> String {
    let o = Command::new("ip")
        .args(args.split_whitespace())
        .output()
        .expect("ip runs");
    assert!(o.status.success(), "ip {args}: {}", crate::text(&o));
    crate::text(&o)
}
