//! The `softrnic` command's diagnostic output: nothing without a filter; with one, the
//! events of the targets and levels it enables, on stderr; a bad filter is refused.

use std::process::{Command, Output};

fn softrnic(args: &[&str], rust_log: Option<&str>) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_softrnic"));
    c.args(["write_bw", "--loopback", "-n", "20", "-s", "64", "--quiet"])
        .args(args)
        .env_remove("RUST_LOG");
    if let Some(f) = rust_log {
        c.env("RUST_LOG", f);
    }
    c.output().expect("softrnic runs")
}

fn stderr_lines(o: &Output) -> Vec<String> {
    assert!(o.status.success(), "{o:?}");
    String::from_utf8_lossy(&o.stderr)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn silent_without_a_filter() {
    let lines = stderr_lines(&softrnic(&[], None));
    assert!(
        lines.iter().all(|l| !l.contains("softrnic_rnic")),
        "{lines:?}"
    );
}

#[test]
fn the_flag_selects_targets_and_levels() {
    let lines = stderr_lines(&softrnic(&["--log", "softrnic_rnic::cm=info"], None));
    let with = |what: &str| lines.iter().filter(|l| l.contains(what)).count();
    // One connection per round, one round: each side's MPA Reply once.
    assert_eq!(
        with("softrnic_rnic::cm: MPA Reply sent: accepted"),
        1,
        "{lines:?}"
    );
    assert_eq!(
        with("softrnic_rnic::cm: MPA Reply received: accepted"),
        1,
        "{lines:?}"
    );
    // Debug events and other targets stay out.
    assert_eq!(with("MPA Request"), 0, "{lines:?}");
    assert_eq!(with("softrnic_rnic::qp"), 0, "{lines:?}");
}

#[test]
fn rust_log_works_too() {
    let lines = stderr_lines(&softrnic(&[], Some("softrnic_rnic::qp=debug")));
    let with = |what: &str| lines.iter().filter(|l| l.contains(what)).count();
    assert_eq!(with("QP state dev=1 qp=1 from=Idle to=Rts"), 1, "{lines:?}");
    assert_eq!(with("QP state dev=2 qp=1 from=Idle to=Rts"), 1, "{lines:?}");
    assert_eq!(with("softrnic_rnic::cm"), 0, "{lines:?}");
}

#[test]
fn a_bad_filter_is_refused() {
    let o = softrnic(&["--log", "softrnic_rnic=loud"], None);
    assert!(!o.status.success());
    assert!(o.stdout.is_empty(), "nothing ran");
}
