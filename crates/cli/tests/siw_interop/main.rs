//! softrnic against Linux's siw (the kernel's soft-iWARP, in a QEMU guest booted by
//! `../shared/rig`): rdma-core's `rping` in both roles with data verified, MPA with
//! CRC asked for by either side, RFC 6581 IRD/ORD with unequal values, peer-to-peer
//! RTR, siw's Terminate for bad remote accesses, graceful close from each side, and a
//! peer killed mid-transfer in each direction.
//!
//! siw's Terminates are in `terminate.rs`.
//!
//! Every conversation is also captured in the guest and decoded here, so each test
//! checks the wire (CRC on every FPDU, opcodes, FIN without RST) besides the results.
//! Without a usable rig the tests skip loudly (see `rig/mod.rs`).

#[path = "../rig/mod.rs"]
mod rig;
mod terminate;

use rig::{RpingRun, each_rping, one_guest, rig, rping_runs};
use softrnic_cli::decode::{ConnectionDecode, Dir, DirSummary};
use softrnic_cli::rping::{self, RpingError, RpingOpts};
use softrnic_rnic::{
    AsyncEvent, CrcPolicy, Device, DeviceConfig, RtrTypes, TerminateCause, WcOpcode, WcStatus,
};
use softrnic_wire::Opcode;
use softrnic_wire::mpa::MpaFrameKind;
use softrnic_wire::terminate::{Layer, ddp_etype, rdmap_code, rdmap_etype};
use std::net::SocketAddr;
use std::time::Duration;

/// rping's largest buffer (`-S`): its limit is 64 KiB exclusive.
const RPING_MAX: usize = 65535;

fn opts(size: usize, count: u64) -> RpingOpts {
    RpingOpts {
        count,
        size,
        verify: true,
        // The guest runs under software emulation: generous, never reached when all
        // is well.
        timeout: Duration::from_secs(60),
        ..RpingOpts::default()
    }
}

fn count(d: &DirSummary, op: Opcode) -> usize {
    d.opcodes.get(&op).copied().unwrap_or(0)
}

/// Messages of kind `op` sent in direction `dir`: FPDUs with L set (a peer may cut a
/// message into several FPDUs).
fn messages(c: &ConnectionDecode, dir: Dir, op: Opcode) -> usize {
    c.fpdus()
        .filter(|p| p.dir == dir && p.header.opcode == op && p.header.last)
        .count()
}

/// One rping conversation of `iterations` on the wire, as rping does it.
fn assert_rping_wire(c: &ConnectionDecode, iterations: usize, crc: bool) {
    let (up, down) = (&c.to_server, &c.to_client);
    let (to_s, to_c) = (Dir::ToServer, Dir::ToClient);
    assert_eq!(messages(c, to_s, Opcode::Send), 2 * iterations, "{up:?}");
    assert_eq!(
        messages(c, to_s, Opcode::ReadResponse),
        iterations,
        "{up:?}"
    );
    assert_eq!(
        messages(c, to_c, Opcode::ReadRequest),
        iterations,
        "{down:?}"
    );
    assert_eq!(messages(c, to_c, Opcode::Write), iterations, "{down:?}");
    assert_eq!(messages(c, to_c, Opcode::Send), 2 * iterations, "{down:?}");
    assert_eq!(c.crc, crc, "CRC negotiated");
    for d in [up, down] {
        assert_eq!(d.error, None, "decode error: {d:?}");
        assert_eq!(d.crc_bad, 0, "bad CRCs: {d:?}");
        if crc {
            assert_eq!(d.crc_good, d.fpdus, "every FPDU carries a good CRC: {d:?}");
        } else {
            assert_eq!(d.crc_not_used, d.fpdus, "{d:?}");
        }
    }
}

fn assert_graceful(c: &ConnectionDecode) {
    assert!(c.to_server.fin && c.to_client.fin, "FIN both ways: {c:?}");
    assert!(!c.to_server.rst && !c.to_client.rst, "no RST: {c:?}");
}

fn request(c: &ConnectionDecode) -> &softrnic_cli::decode::MpaFrameInfo {
    c.mpa(MpaFrameKind::Request).expect("an MPA Request")
}

fn reply(c: &ConnectionDecode) -> &softrnic_cli::decode::MpaFrameInfo {
    c.mpa(MpaFrameKind::Reply).expect("an MPA Reply")
}

fn carried_fpdus(c: &ConnectionDecode) -> bool {
    c.to_server.fpdus + c.to_client.fpdus > 0
}

fn localhost(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// softrnic's `rping -c` against siw's `rping -s`, one connection per case: buffer
/// sizes from rping's smallest to its largest, CRC asked for by softrnic, and
/// IRD/ORD that differ from siw's. softrnic closes each connection (graceful close
/// from our side). The client runs as a user runs it, with no look at the guest: siw
/// takes its socket into RDMA mode only after sending its Reply, and softrnic's
/// initiator holds its first FPDU for that (`DeviceConfig::first_fpdu_hold`,
/// docs/INTEROP.md).
#[test]
fn rping_softrnic_client_to_siw_server() {
    let Some(rig) = rig() else { return };
    let _g = one_guest();
    let port = 27511;
    let served = rig.serve(
        "rping-srv",
        &format!("rping -s -P -a 0.0.0.0 -p 7174 -C 2 -S {RPING_MAX} -v"),
        port,
        7174,
        false,
        &[],
    );
    struct Case {
        size: usize,
        crc: bool,
        ird: u16,
        ord: u16,
    }
    let plain = |size| Case {
        size,
        crc: false,
        ird: 1,
        ord: 1,
    };
    let cases = [
        plain(23),
        plain(100),
        plain(4096),
        plain(RPING_MAX),
        Case {
            size: 1000,
            crc: true,
            ird: 1,
            ord: 1,
        },
        Case {
            size: 1000,
            crc: false,
            ird: 8,
            ord: 4,
        },
    ];
    for c in &cases {
        let mut o = opts(c.size, 2);
        o.mpa.ird = c.ird;
        o.mpa.ord = c.ord;
        if c.crc {
            o.mpa.crc = CrcPolicy::Required;
        }
        let n = rping::client(localhost(port), &o)
            .unwrap_or_else(|e| panic!("rping -S {}: {e}\n{}", c.size, rig.console("rping-srv")));
        assert_eq!(n, 2);
    }
    let f = served.stop();
    assert!(
        f.output.contains("server ping data: rdma-ping-1"),
        "{}",
        f.output
    );
    assert_eq!(f.conns.len(), cases.len(), "{}", f.output);
    for (conn, c) in f.conns.iter().zip(&cases) {
        assert_rping_wire(conn, 2, c.crc);
        assert_graceful(conn);
        let (req, rep) = (request(conn), reply(conn));
        assert_eq!(req.crc, c.crc);
        let ours = req.rfc6581.expect("RFC 6581 word in our Request");
        assert_eq!((ours.ird, ours.ord), (c.ird, c.ord));
        let theirs = rep.rfc6581.expect("RFC 6581 word in siw's Reply");
        // siw answers with its own depths, never more than we can take.
        assert!(
            theirs.ord <= c.ird,
            "siw's ORD {} > our IRD {}",
            theirs.ord,
            c.ird
        );
        eprintln!(
            "case -S {} crc {}: request IRD/ORD {}/{}, siw reply IRD/ORD {}/{}",
            c.size, c.crc, ours.ird, ours.ord, theirs.ird, theirs.ord
        );
    }
}

/// How long a softrnic server may take to end once the guest's clients have ended.
const SERVER_LIMIT: Duration = Duration::from_secs(60);

/// How [`softrnic_server`] served one client: `serve_one`'s result, and the device's
/// events it left queued (those it did not wait for).
struct Served {
    result: Result<u64, RpingError>,
    events: Vec<AsyncEvent>,
}

/// The per-client outcomes of [`softrnic_server`], sent when it has served them all.
struct ServerResults(std::sync::mpsc::Receiver<Vec<Served>>);

impl ServerResults {
    /// The results, once the guest (whose `output` is shown on failure) has finished:
    /// a server still waiting for a client that never came fails the test instead of
    /// hanging it (`serve_one` waits for a client as long as it takes).
    fn wait(self, output: &str) -> Vec<Result<u64, RpingError>> {
        self.wait_served(output)
            .into_iter()
            .map(|s| s.result)
            .collect()
    }

    /// [`ServerResults::wait`], with each client's leftover device events.
    fn wait_served(self, output: &str) -> Vec<Served> {
        self.0.recv_timeout(SERVER_LIMIT).unwrap_or_else(|e| {
            panic!("the softrnic server did not end within {SERVER_LIMIT:?} ({e}):\n{output}")
        })
    }
}

/// Serves `clients` rping clients one after another on a softrnic device, each with
/// its own options; returns the listening port and the per-client results.
fn softrnic_server(cases: Vec<RpingOpts>) -> (u16, ServerResults) {
    let dev = Device::open(DeviceConfig {
        mpa: cases[0].mpa.clone(),
        ..DeviceConfig::default()
    })
    .expect("device");
    let l = dev.listen(localhost(0)).expect("listen");
    let port = l.local_addr().expect("bound").port();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let results = cases
            .iter()
            .map(|o| {
                let result = rping::serve_one(&dev, &l, o);
                let events = std::iter::from_fn(|| dev.poll_event()).collect();
                Served { result, events }
            })
            .collect();
        let _ = tx.send(results);
    });
    (port, ServerResults(rx))
}

/// siw's `rping -c` against softrnic's server: sizes from smallest to largest, then
/// one connection where softrnic asks for CRC. siw closes (graceful close from siw's
/// side).
#[test]
fn rping_siw_client_to_softrnic_server() {
    let Some(rig) = rig() else { return };
    let _g = one_guest();
    let sizes = [23usize, 100, 4096, RPING_MAX, 1000];
    let mut cases: Vec<RpingOpts> = sizes.iter().map(|_| opts(RPING_MAX, 2)).collect();
    cases[4].mpa.crc = CrcPolicy::Required;
    let (port, server) = softrnic_server(cases);
    let clients: Vec<String> = sizes
        .iter()
        .map(|s| format!("timeout 120 rping -c -a $HOST_IP -p {port} -C 2 -V -S {s}"))
        .collect();
    let f = rig.client("rping-cli", &each_rping(&clients), &[port], &[]);
    let runs = rping_runs(&f.output);
    assert_eq!(runs.len(), sizes.len(), "{}", f.output);
    assert!(
        runs.iter().all(RpingRun::ok),
        "siw rping clients failed: {runs:?}\n{}",
        f.output
    );
    for (i, r) in server.wait(&f.output).into_iter().enumerate() {
        assert_eq!(r.expect("softrnic server"), 2, "client {i}");
    }
    assert_eq!(f.conns.len(), sizes.len());
    for (i, c) in f.conns.iter().enumerate() {
        assert_rping_wire(c, 2, i == 4);
        assert_graceful(c);
        assert_eq!(reply(c).crc, i == 4, "our Reply's C flag");
    }
}

/// siw as the client asks for CRC (`mpa_crc_required`) and peer-to-peer mode
/// (`peer_to_peer`), against softrnic with its default policy (CRC only when asked):
/// CRC is on, every FPDU's CRC checks out, and siw's RTR opens the connection we
/// accept. (siw as the *server* never asks for CRC by itself: its `mpa_crc_required`
/// only turns C on in a Reply when the Request had it, see docs/INTEROP.md.)
#[test]
fn crc_required_by_siw_client_in_peer_to_peer_mode() {
    let Some(rig) = rig() else { return };
    let _g = one_guest();
    // siw as the client, asking for CRC and peer-to-peer mode; softrnic accepts both
    // RTR kinds siw may send.
    let mut o = opts(RPING_MAX, 2);
    o.mpa.rtr_types = RtrTypes::WRITE | RtrTypes::READ;
    let (port, server) = softrnic_server(vec![o]);
    let client = format!("timeout 120 rping -c -a $HOST_IP -p {port} -C 2 -v -V -S 4096");
    let f = rig.client(
        "crc-cli",
        &each_rping(&[client]),
        &[port],
        &["mpa_crc_required=1", "peer_to_peer=1"],
    );
    let runs = rping_runs(&f.output);
    assert!(runs.len() == 1 && runs[0].ok(), "{runs:?}\n{}", f.output);
    let results = server.wait(&f.output);
    assert_eq!(*results[0].as_ref().expect("softrnic server"), 2);
    let c = &f.conns[0];
    let req = request(c);
    assert!(req.crc, "siw's Request sets C");
    let p2p = req.rfc6581.expect("RFC 6581");
    assert!(p2p.peer_to_peer, "siw asks for peer-to-peer mode");
    let chosen = reply(c).rfc6581.expect("RFC 6581 in our Reply");
    assert!(chosen.peer_to_peer);
    // The first FPDU is siw's RTR: a zero-length Write or Read, the kind we chose.
    let first = c.fpdus().next().expect("FPDUs");
    match first.header.opcode {
        Opcode::Write => assert!(chosen.rtr_write),
        Opcode::ReadRequest => assert!(chosen.rtr_read),
        other => panic!("RTR is a {other:?}"),
    }
    // The RTR is an extra FPDU before rping's own.
    assert_eq!(count(&c.to_server, Opcode::Send), 4);
    assert_eq!(c.to_server.crc_good, c.to_server.fpdus);
    assert_eq!(c.to_client.crc_good, c.to_client.fpdus);
    assert_graceful(c);
}

/// How siw rping clients' runs are judged from the guest's output (no rig): the
/// output of session 12's failure, where the third client's conversation went well
/// (softrnic served it) and rping then tripped over its own teardown race.
#[test]
fn rpings_teardown_race_is_told_from_a_failed_run() {
    let clients: Vec<String> = (1..=4).map(|i| format!("rping -C {i}")).collect();
    let cmd = each_rping(&clients);
    let output = format!(
        "siw-vm: guest ready after 13.6s, running: {cmd}\n\
         rping-start\nclient DISCONNECT EVENT...\nrping-rc=0\n\
         rping-start\nclient DISCONNECT EVENT...\nrdma_get_cm_event: Bad file descriptor\nrping-rc=255\n\
         rping-start\nclient DISCONNECT EVENT...\nwait for RDMA_WRITE_COMPLETE state 10\nrping-rc=255\n\
         rping-start\nrdma_get_cm_event: Bad file descriptor\nrping-rc=1\n"
    );
    let runs = rping_runs(&output);
    assert_eq!(
        runs.len(),
        4,
        "the echoed command holds no whole marker line"
    );
    let ok: Vec<bool> = runs.iter().map(RpingRun::ok).collect();
    assert_eq!(ok, [true, true, false, false], "{runs:?}");
    let unfinished = rping_runs("rping-start\nclient DISCONNECT EVENT...\n");
    assert!(!unfinished[0].ok(), "a run that never ended");
}

/// A peer killed mid-transfer, each way, with 64 KiB pings running (rping -C 0):
/// siw's rping client is killed (SIGKILL) while softrnic serves it, and a softrnic
/// `rping -s` process is killed while it serves siw's client. The survivor notices
/// the dead connection by itself, flushes, and ends; nothing hangs.
#[test]
fn peer_killed_mid_transfer_each_way() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let Some(rig) = rig() else { return };
    let _g = one_guest();
    // softrnic survives: a library server, counting until its QP flushes.
    let (port_a, server) = softrnic_server(vec![opts(RPING_MAX, 0)]);
    // siw survives: a softrnic server process, killed after it served three pings.
    let port_b = std::net::TcpListener::bind(localhost(0))
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let mut victim = Command::new(env!("CARGO_BIN_EXE_softrnic"))
        .args(["rping", "-s", "-a", "127.0.0.1", "-p", &port_b.to_string()])
        .args(["-S", &RPING_MAX.to_string(), "-v", "--timeout", "300"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("softrnic rping -s starts");
    let out = victim.stdout.take().expect("piped stdout");
    // Shared with this thread, which kills it too once the guest has ended: a server
    // whose client never came (or left early) would otherwise wait for its third
    // ping, and the killer thread with it, for ever.
    let victim = std::sync::Arc::new(std::sync::Mutex::new(victim));
    let killer = {
        let victim = victim.clone();
        std::thread::spawn(move || {
            let pings = BufReader::new(out)
                .lines()
                .map_while(Result::ok)
                .filter(|l| l.starts_with("server ping data"))
                .take(3)
                .count();
            let mut v = victim.lock().unwrap_or_else(|p| p.into_inner());
            v.kill().expect("SIGKILL");
            let _ = v.wait();
            pings
        })
    };
    // siw's client is killed once it printed its third ping (rping -v prints a ping
    // after the server's Write landed), so the kill is mid-transfer by construction.
    let cmd = format!(
        "mkfifo /tmp/pings; rping -c -v -a $HOST_IP -p {port_a} -C 0 -S {RPING_MAX} >/tmp/pings & \
         p=$!; {{ head -n 3 >/dev/null; kill -9 $p; cat >/dev/null; }} </tmp/pings; \
         wait $p; echo; echo killed-siw-client; \
         timeout 120 rping -c -a $HOST_IP -p {port_b} -C 0 -S {RPING_MAX}; echo; echo survivor-rc=$?"
    );
    let f = rig.client("kill-cli", &cmd, &[port_a, port_b], &[]);
    // Nothing can reach the victim any more; if it is alive, its stdout closes now.
    let _ = victim.lock().unwrap_or_else(|p| p.into_inner()).kill();
    assert_eq!(
        killer.join().expect("killer thread"),
        3,
        "softrnic served 3 pings before it was killed:\n{}",
        f.output
    );
    // siw's client noticed softrnic's death and exited by itself, not by `timeout`.
    let rc = f
        .output
        .lines()
        .find_map(|l| l.strip_prefix("survivor-rc="))
        .unwrap_or_else(|| panic!("siw's client did not finish:\n{}", f.output));
    assert_ne!(
        rc.trim(),
        "124",
        "siw's client hung after softrnic died:\n{}",
        f.output
    );
    // softrnic noticed siw's death: the server ended with the iterations it did.
    let served = server.wait(&f.output).remove(0);
    // Either between two pings (the iterations done) or in the middle of one (the
    // step in progress flushed); never another error, never a hang.
    let how = match served {
        Ok(n) => {
            assert!(
                n >= 3,
                "siw's client was killed after its third ping, served {n}"
            );
            format!("after {n} iterations")
        }
        Err(RpingError::Failed {
            opcode,
            status: WcStatus::WrFlushError,
        }) => format!("in the middle of a ping ({opcode:?} flushed)"),
        // Or siw's QP, torn down with its process, said so first: a Terminate with
        // DDP's local catastrophic error (RFC 5041 section 7.2), which softrnic reports
        // exactly, the step in progress flushed. (Seen once in about 30 runs.)
        Err(RpingError::Terminated {
            cause,
            remote: true,
            opcode,
            status: WcStatus::WrFlushError,
        }) => {
            assert_eq!(
                cause,
                TerminateCause {
                    layer: Layer::Ddp,
                    etype: ddp_etype::LOCAL_CATASTROPHIC,
                    code: 0,
                },
                "{}",
                f.output
            );
            format!("in the middle of a ping (siw's Terminate, {opcode:?} flushed)")
        }
        // Or the killed process's memory region went before its QP: the server's RDMA
        // Read of the client's buffer met an STag siw no longer knows, and siw said so
        // with RDMAP's invalid-STag Terminate (RFC 5040 section 7.2), which softrnic
        // reports exactly on the Read. (Seen once, session 28.)
        Err(RpingError::Terminated {
            cause,
            remote: true,
            opcode: WcOpcode::Read,
            status: WcStatus::RemoteAccessError,
        }) => {
            assert_eq!(
                cause,
                TerminateCause {
                    layer: Layer::Rdmap,
                    etype: rdmap_etype::REMOTE_PROTECTION,
                    code: rdmap_code::INVALID_STAG,
                },
                "{}",
                f.output
            );
            "in the middle of a ping (siw's invalid-STag Terminate on the Read)".to_string()
        }
        Err(e) => panic!("softrnic server: {e}\n{}", f.output),
    };
    // Both connections ended at the TCP level: FIN both ways, or a reset from either
    // side (after a reset the other side has nothing left to send).
    assert_eq!(f.conns.len(), 2, "{}", f.output);
    // Mid-transfer: at least the three pings siw's client printed are on the wire.
    let to_a = f
        .conns
        .iter()
        .find(|c| c.server.port == port_a)
        .expect("the killed client's connection was captured");
    let reads = messages(to_a, Dir::ToServer, Opcode::ReadResponse);
    assert!(reads >= 3, "{reads} Read Responses before the kill");
    for c in &f.conns {
        let fins = c.to_server.fin && c.to_client.fin;
        let reset = c.to_server.rst || c.to_client.rst;
        assert!(fins || reset, "connection not closed: {c:?}");
        assert_eq!(c.to_server.error, None);
        assert_eq!(c.to_client.error, None);
    }
    eprintln!("siw client killed {how}; softrnic killed after 3, siw's rping exited with {rc}");
}

/// perftest's tests in RDMA CM mode (`-R`), in both roles: softrnic's client against
/// perftest's servers in the guest, and perftest's clients against softrnic's servers
/// (the `softrnic` binary, as a user runs it). Each pair runs to completion, both
/// sides exit 0 and print their result line.
#[test]
fn perftest_rdma_cm_both_roles() {
    use std::process::{Command, Stdio};
    let Some(rig) = rig() else { return };
    let _g = one_guest();
    // (test, flags, size): bandwidth tests at 64 KiB, latency tests at 64 B.
    let tests = [
        ("write_bw", "65536"),
        ("read_bw", "65536"),
        ("send_bw", "65536"),
        ("write_lat", "64"),
        ("send_lat", "64"),
    ];
    let iters = "50";
    // Result lines of `size` whose iteration column is `n`. perftest prints `-n`;
    // softrnic prints the samples it took, one fewer than `-n` in the latency tests
    // (the first exchange starts the clock).
    let lines_with = |out: &str, size: &str, n: &str| {
        out.lines()
            .filter(|l| {
                let mut w = l.split_whitespace();
                w.next() == Some(size) && w.next() == Some(n)
            })
            .count()
    };
    let result_line = |out: &str, size: &str| lines_with(out, size, iters);
    let ours = |out: &str, t: &str, size: &str| {
        lines_with(out, size, if t.ends_with("_lat") { "49" } else { iters })
    };

    // softrnic clients -> perftest servers, all five servers at once on their own ports.
    let ports: Vec<(u16, u16)> = (0..tests.len() as u16)
        .map(|i| (27530 + i, 18530 + i))
        .collect();
    let cmd = tests
        .iter()
        .zip(&ports)
        .map(|((t, size), (_, g))| format!("ib_{t} -R -F -n {iters} -s {size} -p {g} &"))
        .collect::<Vec<_>>()
        .join(" ")
        + " wait";
    let served = rig.serve_ports("pt-srv", &cmd, &ports, false, &[]);
    for ((t, size), (h, _)) in tests.iter().zip(&ports) {
        let o = Command::new(env!("CARGO_BIN_EXE_softrnic"))
            .args([
                t,
                "-R",
                "127.0.0.1",
                "-p",
                &h.to_string(),
                "-n",
                iters,
                "-s",
                size,
            ])
            .output()
            .expect("softrnic runs");
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "softrnic {t} -R against perftest: {out}{}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(
            ours(&out, t, size),
            1,
            "softrnic {t} printed its result:\n{out}"
        );
    }
    let f = served.wait();
    assert!(f.success, "perftest servers:\n{}", f.output);
    for (t, size) in &tests {
        assert!(
            result_line(&f.output, size) >= 1,
            "perftest ib_{t} server printed no result:\n{}",
            f.output
        );
    }
    // Two connections per test carry traffic (perftest's control connection and the
    // test QP). Any other is a first attempt at the test connection that siw accepted
    // and reset before any FPDU, while perftest's server was still busy with the
    // control exchange; softrnic's client connects again, as perftest's does.
    let established: Vec<_> = f.conns.iter().filter(|c| carried_fpdus(c)).collect();
    assert_eq!(established.len(), 2 * tests.len(), "{}", f.output);
    for c in established {
        assert_eq!(c.to_server.error, None);
        assert_eq!(c.to_client.error, None);
    }

    // perftest clients -> softrnic servers (the binary), one port each.
    let mut servers = Vec::new();
    // One free port per server, all probed before any is released: a port probed and
    // released at once may be handed out again by the next probe, and two servers
    // would then listen on one port (seen once: the second server's client got
    // "rdma_connect failed").
    let probes: Vec<_> = tests
        .iter()
        .map(|_| std::net::TcpListener::bind(localhost(0)).expect("a free port"))
        .collect();
    let host_ports: Vec<u16> = probes
        .iter()
        .map(|l| l.local_addr().expect("a bound port").port())
        .collect();
    drop(probes);
    for ((t, size), &port) in tests.iter().zip(&host_ports) {
        let child = Command::new(env!("CARGO_BIN_EXE_softrnic"))
            .args([t, "-R", "-p", &port.to_string(), "-n", iters, "-s", size])
            .args(["--bind", "127.0.0.1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("softrnic server starts");
        servers.push((t, size, child));
    }
    let cmd = tests
        .iter()
        .zip(&host_ports)
        .map(|((t, size), p)| {
            format!(
                "timeout 120 ib_{t} -R -F -n {iters} -s {size} -p {p} $HOST_IP; echo perftest-rc=$?"
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    let f = rig.client("pt-cli", &cmd, &host_ports, &[]);
    let rcs: Vec<&str> = f
        .output
        .lines()
        .filter_map(|l| l.strip_prefix("perftest-rc="))
        .collect();
    assert_eq!(
        rcs,
        vec!["0"; tests.len()],
        "perftest clients:\n{}",
        f.output
    );
    for (t, size) in &tests {
        assert!(
            result_line(&f.output, size) >= 1,
            "ib_{t} client result:\n{}",
            f.output
        );
    }
    for (t, size, child) in servers {
        let o = child.wait_with_output().expect("softrnic server ends");
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "softrnic {t} -R server: {out}{}",
            String::from_utf8_lossy(&o.stderr)
        );
        if *t != "read_lat" {
            assert_eq!(ours(&out, t, size), 1, "softrnic {t} server result:\n{out}");
        }
    }
    let established = f.conns.iter().filter(|c| carried_fpdus(c)).count();
    assert_eq!(established, 2 * tests.len(), "{}", f.output);
}
