//! `--transport user:sim`: the benchmarks and rping over softrnic's own TCP on an
//! in-process simulated network, through the library functions the `softrnic` binary
//! calls. Checked: the JSON says the transport and carries the own TCP's and the wire's
//! counters, impairments show in them, the data is verified. No timing is asserted.

use serde_json::Value;
use softrnic_cli::bench::{self, BenchCommand};
use softrnic_cli::rping::RpingArgs;

fn run_json(argv: &[&str]) -> Vec<Value> {
    let cmd = BenchCommand::parse_from(argv.iter().copied()).expect("flags parse");
    let mut out = Vec::new();
    bench::run(&cmd, &mut out).expect("benchmark runs");
    String::from_utf8(out)
        .expect("UTF-8 output")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l:?}: {e}")))
        .collect()
}

fn count(v: &Value, obj: &str, key: &str) -> u64 {
    v[obj][key]
        .as_u64()
        .unwrap_or_else(|| panic!("{obj}.{key} missing in {v}"))
}

#[test]
fn write_bw_on_a_clean_simulated_network_says_so() {
    let lines = run_json(&[
        "write_bw",
        "--loopback",
        "-n",
        "200",
        "-s",
        "64K",
        "--json",
        "--transport",
        "user:sim",
    ]);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let v = &lines[0];
    assert_eq!(v["rnic_transport"], "user:sim");
    assert_eq!(v["iterations"], 200);
    // 200 Writes of 64 KiB: at least that many full segments out, nothing lost.
    assert!(count(v, "own_tcp", "segments_out") >= 200, "{v}");
    assert_eq!(count(v, "sim_wire", "lost"), 0, "{v}");
    // Nothing is lost or reordered, so no acknowledgement ever shows a hole. The
    // timers run on real time, though: a side descheduled on a busy machine may send a
    // loss probe (or even time out), which is correct TCP, so those are not asserted.
    assert_eq!(count(v, "own_tcp", "fast_retransmits"), 0, "{v}");
    assert_eq!(
        count(v, "sim_wire", "packets"),
        count(v, "own_tcp", "segments_out"),
        "every segment crossed the wire: {v}"
    );
}

#[test]
fn send_bw_through_loss_and_reordering_counts_the_recovery() {
    let lines = run_json(&[
        "send_bw",
        "--loopback",
        "-n",
        "300",
        "-s",
        "16K",
        "--json",
        "--transport",
        "user:sim",
        "--loss",
        "2%",
        "--reorder",
        "5%",
        "--mtu",
        "1500",
        "--seed",
        "7",
    ]);
    let v = &lines[0];
    assert_eq!(v["rnic_transport"], "user:sim");
    assert_eq!(v["iterations"], 300);
    assert!(count(v, "sim_wire", "lost") > 0, "{v}");
    assert!(count(v, "sim_wire", "reordered") > 0, "{v}");
    assert!(count(v, "own_tcp", "retransmitted_segments") > 0, "{v}");
    // The holes and repairs were timed: a retransmission is delivered some time, or
    // its loss left a hole at the receiver.
    let timed = |h: &str| v["own_tcp_timing"][h]["count"].as_u64().expect("a count");
    assert!(
        timed("resend_to_delivery") + timed("hole_at_nxt") > 0,
        "{v}"
    );
}

#[test]
fn kernel_is_the_default_and_user_sim_needs_loopback() {
    let lines = run_json(&["write_bw", "--loopback", "-n", "20", "--json"]);
    assert_eq!(lines[0]["rnic_transport"], "kernel");
    assert!(lines[0].get("own_tcp").is_none());
    let cmd =
        BenchCommand::parse_from(["write_bw", "--transport", "user:sim"]).expect("flags parse");
    let err = cmd.config().unwrap_err();
    assert!(err.contains("--loopback"), "{err}");
    assert!(BenchCommand::parse_from(["write_bw", "--transport", "user:nothing"]).is_err());
}

#[test]
fn rping_runs_both_roles_on_a_lossy_simulated_network_data_verified() {
    use clap::Parser;
    #[derive(Parser)]
    struct Wrap {
        #[command(flatten)]
        r: RpingArgs,
    }
    let w = Wrap::try_parse_from([
        "rping",
        "-c",
        "-C",
        "20",
        "-V",
        "-q",
        "-S",
        "20000",
        "--transport",
        "user:sim",
        "--loss",
        "1%",
        "--mtu",
        "1500",
    ])
    .expect("flags parse");
    softrnic_cli::rping::main(&w.r).expect("rping verified every iteration");
}

#[test]
fn rping_between_two_devices_on_ethernet_in_udp_datagrams() {
    use clap::Parser;
    #[derive(Parser)]
    struct Wrap {
        #[command(flatten)]
        r: RpingArgs,
    }
    let parse = |argv: &[&str]| Wrap::try_parse_from(argv).expect("flags parse").r;
    let (a, b) = (
        std::net::UdpSocket::bind("127.0.0.1:0").unwrap(),
        std::net::UdpSocket::bind("127.0.0.1:0").unwrap(),
    );
    let (pa, pb) = (a.local_addr().unwrap(), b.local_addr().unwrap());
    drop((a, b));
    let server = parse(&[
        "rping",
        "-s",
        "-a",
        "192.168.91.2",
        "-C",
        "10",
        "-q",
        "-S",
        "3000",
        "--transport",
        &format!("user:udp:{pb},{pa}"),
        "--ip",
        "192.168.91.2/24",
    ]);
    let client = parse(&[
        "rping",
        "-c",
        "-a",
        "192.168.91.2",
        "-C",
        "10",
        "-V",
        "-q",
        "-S",
        "3000",
        "--transport",
        &format!("user:udp:{pa},{pb}"),
        "--ip",
        "192.168.91.1/24",
    ]);
    use softrnic_cli::rping;
    // The client starts once the server listens, as a user starts rping: a SYN that
    // reaches the server's stack before its listener is answered with a reset (the
    // client then fails with "connection refused", as it would against kernel TCP).
    let (listening, ready) = std::sync::mpsc::channel();
    let s = std::thread::spawn(move || {
        let (addr, opts) = (server.socket_addr()?, server.opts()?);
        rping::server(addr, &opts, |a| listening.send(a).unwrap()).map_err(|e| e.to_string())
    });
    ready.recv().expect("the server listens");
    let (addr, opts) = (client.socket_addr().unwrap(), client.opts().unwrap());
    let n = rping::client(addr, &opts).expect("the client verified every iteration");
    assert_eq!(n, 10);
    assert_eq!(s.join().unwrap().expect("the server served them"), 10);
}
