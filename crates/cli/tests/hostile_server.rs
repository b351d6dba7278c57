//! The benchmark server against clients that lie: absurd parameters, rounds left
//! incomplete, silent QPs, memory bombs. Each bad client ends its own round only: the
//! server rejects or drops it, allocates nothing for what it refused, and serves the
//! legitimate client that comes next, then exits after that client's last round.

use softrnic_cli::bench::meta::{FLAG_LAST, Meta};
use softrnic_cli::bench::server::{self, ServerOpts};
use softrnic_cli::bench::{BenchCommand, Measured, Test, rdma};
use softrnic_rnic::*;
use std::net::SocketAddr;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

/// A client device with one QP on one CQ.
struct Client {
    dev: Device,
    qp: Qp,
    _cq: Cq,
}

fn client() -> Client {
    let dev = Device::open(DeviceConfig::default()).unwrap();
    let pd = dev.alloc_pd();
    let cq = dev.create_cq(16).unwrap();
    let qp = dev
        .create_qp(
            &pd,
            QpInit {
                send_cq: &cq,
                recv_cq: &cq,
                sq_depth: 4,
                rq_depth: 4,
            },
        )
        .unwrap();
    Client { dev, qp, _cq: cq }
}

fn meta(test: Test, qp_index: u16, num_qps: u16, size: u64, depth: u32) -> Meta {
    Meta {
        test,
        flags: 0,
        qp_index,
        num_qps,
        size,
        iters: 10,
        duration_ms: 0,
        depth,
        addr: 0,
        rkey: 0,
        len: 0,
    }
}

/// Connects with `m` and expects a reject whose reason contains `why`.
fn rejected(addr: SocketAddr, m: Meta, why: &str) {
    let c = client();
    match c.dev.connect(addr, &c.qp, &m.encode()) {
        Err(Error::Rejected { private_data }) => {
            let text = String::from_utf8_lossy(&private_data);
            assert!(text.contains(why), "reject said {text:?}, not {why:?}");
        }
        r => panic!("expected a reject ({why}), got {r:?}"),
    }
}

/// A legitimate write_bw client's last round, through the benchmark's own client.
fn legit_round(addr: SocketAddr) {
    let argv = [
        "write_bw",
        "127.0.0.1",
        "-p",
        &addr.port().to_string(),
        "-n",
        "20",
        "-s",
        "4096",
    ];
    let cfg = BenchCommand::parse_from(argv).unwrap().config().unwrap();
    let dev = Device::open(cfg.device_config()).unwrap();
    let m = rdma::client_round(&cfg, &dev, addr, 4096, true).expect("the round runs");
    assert!(matches!(m, Measured::Bw(b) if b.iterations == 20), "{m:?}");
}

/// The server on its own device (registered memory bounded as the standalone server's
/// is, but smaller), its listener, and a thread serving until a client's last round.
type Serving = std::thread::JoinHandle<std::result::Result<(), String>>;

fn server(opts: ServerOpts) -> (Device, SocketAddr, Serving) {
    let dev = Device::open(DeviceConfig {
        max_registered: 64 << 20,
        ..DeviceConfig::default()
    })
    .unwrap();
    let l = dev.listen("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let d = dev.clone();
    let h = std::thread::spawn(move || server::serve(&d, &l, opts));
    (dev, addr, h)
}

/// Parameters beyond any limit are rejected with the reason, nothing is allocated for
/// them, and the server goes on to serve a legitimate client.
#[test]
fn absurd_parameters_are_rejected_and_cost_nothing() {
    let (dev, addr, h) = server(ServerOpts::default());
    rejected(addr, meta(Test::SendBw, 0, 65535, 4096, 16384), "65535 QPs");
    rejected(addr, meta(Test::WriteBw, 0, 0, 4096, 0), "0 QPs");
    rejected(addr, meta(Test::WriteBw, 0, 1, 0, 0), "message size 0");
    rejected(addr, meta(Test::WriteBw, 0, 1, 1 << 40, 0), "message size");
    rejected(
        addr,
        meta(Test::SendBw, 0, 1, 4096, 1 << 20),
        "receive depth",
    );
    // 256 QPs of 4096 + 16384 receives each: a CQ of more than a million entries.
    rejected(addr, meta(Test::SendBw, 0, 256, 4096, 16384), "a CQ of");
    // Memory bombs: each asks for more than the server's 64 MiB, again and again.
    for _ in 0..64 {
        rejected(
            addr,
            meta(Test::WriteBw, 0, 200, 8 << 20, 0),
            "octets of buffers",
        );
    }
    assert_eq!(
        dev.usage().registered,
        0,
        "nothing registered for refused rounds"
    );
    assert_eq!(dev.usage().qps, 0);
    // A round that is not the first QP of anything.
    rejected(
        addr,
        meta(Test::WriteBw, 3, 4, 4096, 0),
        "no round in progress",
    );
    legit_round(addr);
    h.join()
        .unwrap()
        .expect("the server exits after the client's last round");
    assert_eq!(dev.usage().registered, 0);
}

/// A client that announces two QPs and opens one holds the server for the setup time
/// only: the next client's first QP waits for the next round (it is not rejected), the
/// incomplete round is dropped (its QP reset), and the next client is served.
#[test]
fn an_incomplete_round_is_dropped_and_the_next_client_served() {
    let opts = ServerOpts {
        setup: Duration::from_millis(500),
        ..ServerOpts::default()
    };
    let (_dev, addr, h) = server(opts);
    let cheat = client();
    let mut m = meta(Test::WriteBw, 0, 2, 4096, 0);
    m.flags = FLAG_LAST;
    cheat.dev.connect(addr, &cheat.qp, &m.encode()).unwrap();
    legit_round(addr);
    connection_ends(&cheat);
    h.join()
        .unwrap()
        .expect("the server exits after the client's last round");
}

/// A client whose QP connects and then sends nothing holds the server for the idle
/// time only; its round is dropped and the next client served.
#[test]
fn a_silent_client_is_dropped_after_the_idle_time() {
    let opts = ServerOpts {
        idle: Duration::from_millis(500),
        ..ServerOpts::default()
    };
    let (_dev, addr, h) = server(opts);
    let silent = client();
    silent
        .dev
        .connect(
            addr,
            &silent.qp,
            &meta(Test::WriteBw, 0, 1, 4096, 0).encode(),
        )
        .unwrap();
    legit_round(addr);
    connection_ends(&silent);
    h.join()
        .unwrap()
        .expect("the server exits after the client's last round");
}

/// Waits for the end of `c`'s connection (the server dropped its round: reset).
fn connection_ends(c: &Client) {
    let id = c.qp.id();
    let e = c
        .dev
        .wait_event_matching(WAIT, |e| match e {
            AsyncEvent::ConnectionLost { qp, .. } | AsyncEvent::Disconnected { qp } => *qp == id,
            _ => false,
        })
        .expect("the connection ends");
    assert!(
        matches!(
            e,
            AsyncEvent::ConnectionLost { .. } | AsyncEvent::Disconnected { .. }
        ),
        "{e:?}"
    );
    assert_eq!(c.qp.state(), QpState::Error);
}
