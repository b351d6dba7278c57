//! The bandwidth benchmarks stop their clock after the data has landed at the peer, not
//! at the last local completion.
//!
//! A relay between client and server holds back the client's data: from the first Write
//! (or, for send_bw, Send) FPDU with payload on a connection, it forwards nothing more to
//! the server until an RDMA Read Request follows the whole of the run's payload (or the
//! client closes). While
//! it holds, the server cannot place anything, and every Write or Send still completes at
//! the client (a completion means the FPDUs are in the send path, and the relay reads
//! eagerly). So:
//! - a client that stopped its clock at its last local completion stops it before the
//!   relay releases anything, and long before the server's answer to any Read exists:
//!   the assertions below fail, whatever the timing;
//! - a client that stops it when its closing Read returns cannot do so before the relay
//!   has forwarded the Read Response, which the server sends only after placing every
//!   octet before it: the relay takes the time just before it forwards each Read
//!   Response, and the last of them must come before the clock's stop.
//!
//! Both sides run in this process, so their `Instant`s share one clock. No sleep and no
//! timing threshold: only the order of events is checked.

use softrnic_cli::bench::{BenchCommand, BenchConfig, BwResult, Measured, rdma, rdma_cm, server};
use softrnic_rnic::Device;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// RDMAP opcodes (RFC 5040).
const OP_WRITE: u8 = 0;
const OP_READ_REQUEST: u8 = 1;
const OP_READ_RESPONSE: u8 = 2;
const OP_SEND_FIRST: u8 = 3;
const OP_SEND_LAST: u8 = 6;
/// DDP/RDMAP header lengths: tagged (Write, Read Response), untagged (Send...).
const TAGGED_HDR: usize = 14;
const UNTAGGED_HDR: usize = 18;

/// Why the relay released what it held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Release {
    /// A Read Request after the whole payload: the client asks for proof of delivery.
    ReadRequest,
    /// The client sent something on another connection (`-R`'s control connection:
    /// the exchange after the run), or closed: it has stopped waiting for the data.
    ClientMovedOn,
}

/// What the relay saw on one connection, and what it holds.
#[derive(Debug, Default)]
struct ConnLog {
    /// Write or Send payload octets from the client.
    payload: u64,
    /// When the relay started holding (the first Write or Send with payload).
    held_from: Option<Instant>,
    /// When it released what it held, and why.
    released: Option<(Instant, Release)>,
    /// Just before each Read Response went on to the client.
    read_responses: Vec<Instant>,
    /// Client octets held back.
    held: Vec<u8>,
    /// The way to the server.
    to_server: Option<TcpStream>,
}

impl ConnLog {
    /// Sends everything held on, noting when (before the first octet goes) and why.
    fn release(&mut self, why: Release) {
        if self.released.is_some() {
            return;
        }
        self.released = Some((Instant::now(), why));
        if let Some(s) = &mut self.to_server {
            let _ = s.write_all(&self.held);
        }
        self.held.clear();
    }
}

type Logs = Arc<Mutex<Vec<Arc<Mutex<ConnLog>>>>>;

/// Releases whatever the other connections hold (one lock at a time).
fn release_others(logs: &Logs, me: &Arc<Mutex<ConnLog>>) {
    let others: Vec<_> = logs
        .lock()
        .unwrap()
        .iter()
        .filter(|l| !Arc::ptr_eq(l, me))
        .cloned()
        .collect();
    for l in others {
        let mut l = l.lock().unwrap();
        if l.held_from.is_some() {
            l.release(Release::ClientMovedOn);
        }
    }
}

/// Reads one MPA Request or Reply frame (16-octet key, flags, revision, private data
/// length, private data) from `from` and writes it to `to`.
fn pass_mpa_frame(from: &mut TcpStream, to: &mut TcpStream) -> std::io::Result<()> {
    let mut head = [0u8; 20];
    from.read_exact(&mut head)?;
    let pd = usize::from(u16::from_be_bytes([head[18], head[19]]));
    let mut data = vec![0u8; pd];
    from.read_exact(&mut data)?;
    to.write_all(&head)?;
    to.write_all(&data)
}

/// Reads one FPDU (MPA length, ULPDU, padding, CRC field; no markers). `None` at the end
/// of the stream.
fn read_fpdu(from: &mut TcpStream) -> Option<Vec<u8>> {
    let mut len = [0u8; 2];
    from.read_exact(&mut len).ok()?;
    let ulpdu = usize::from(u16::from_be_bytes(len));
    let pad = (4 - (2 + ulpdu) % 4) % 4;
    let mut f = vec![0u8; 2 + ulpdu + pad + 4];
    f[..2].copy_from_slice(&len);
    from.read_exact(&mut f[2..]).ok()?;
    Some(f)
}

fn opcode(f: &[u8]) -> u8 {
    f[3] & 0x0f
}

/// Client to server: holds the data as described in the module notes.
fn client_to_server(
    mut c: TcpStream,
    mut s: TcpStream,
    me: Arc<Mutex<ConnLog>>,
    logs: Logs,
    expect: u64,
    hold_sends: bool,
) -> std::io::Result<()> {
    pass_mpa_frame(&mut c, &mut s)?;
    me.lock().unwrap().to_server = Some(s.try_clone()?);
    while let Some(f) = read_fpdu(&mut c) {
        let ulpdu = usize::from(u16::from_be_bytes([f[0], f[1]]));
        let op = opcode(&f);
        // A zero-length Write may be the MPA RTR; `-R`'s control connection carries Sends.
        let payload = match op {
            OP_WRITE => Some(ulpdu - TAGGED_HDR),
            OP_SEND_FIRST..=OP_SEND_LAST if hold_sends => Some(ulpdu - UNTAGGED_HDR),
            _ => None,
        }
        .filter(|&p| p > 0);
        let mut l = me.lock().unwrap();
        if let Some(p) = payload {
            l.payload += p as u64;
        }
        if l.released.is_some() {
            s.write_all(&f)?;
            continue;
        }
        if payload.is_some() {
            l.held_from.get_or_insert_with(Instant::now);
        }
        if l.held_from.is_none() {
            drop(l);
            // This connection moves on: the client is no longer waiting for the data
            // another one holds.
            release_others(&logs, &me);
            s.write_all(&f)?;
            continue;
        }
        l.held.extend_from_slice(&f);
        if op == OP_READ_REQUEST && l.payload >= expect {
            l.release(Release::ReadRequest);
        }
    }
    me.lock().unwrap().release(Release::ClientMovedOn);
    s.shutdown(Shutdown::Write)
}

/// Server to client: forwards everything, noting the time before each Read Response.
fn server_to_client(
    mut s: TcpStream,
    mut c: TcpStream,
    log: Arc<Mutex<ConnLog>>,
) -> std::io::Result<()> {
    pass_mpa_frame(&mut s, &mut c)?;
    while let Some(f) = read_fpdu(&mut s) {
        if opcode(&f) == OP_READ_RESPONSE && f[2] & 0x80 != 0 {
            log.lock().unwrap().read_responses.push(Instant::now());
        }
        c.write_all(&f)?;
    }
    c.shutdown(Shutdown::Write)
}

/// A relay to `target` on a port of its own; every connection gets a log. `expect`:
/// the payload octets of one connection's run; `hold_sends`: Sends are the data.
fn relay(target: SocketAddr, expect: u64, hold_sends: bool) -> (SocketAddr, Logs) {
    let l = TcpListener::bind("127.0.0.1:0").expect("relay listens");
    let addr = l.local_addr().expect("address");
    let logs: Logs = Arc::default();
    let all = logs.clone();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(c) = c else { return };
            let Ok(s) = TcpStream::connect(target) else {
                return;
            };
            let _ = c.set_nodelay(true);
            let _ = s.set_nodelay(true);
            let log = Arc::new(Mutex::new(ConnLog::default()));
            all.lock().unwrap().push(log.clone());
            let (c2, s2, log2) = (c.try_clone().unwrap(), s.try_clone().unwrap(), log.clone());
            let logs = all.clone();
            std::thread::spawn(move || client_to_server(c, s, log, logs, expect, hold_sends));
            std::thread::spawn(move || server_to_client(s2, c2, log2));
        }
    });
    (addr, logs)
}

fn config(argv: &[&str]) -> BenchConfig {
    BenchCommand::parse_from(argv.iter().copied())
        .expect("flags parse")
        .config()
        .expect("flags valid")
}

/// The one connection that carried the run's data, once the run is over.
fn data_conn(logs: &Logs, expect: u64) -> ConnLog {
    let logs = logs.lock().unwrap();
    let mut with_data: Vec<ConnLog> = logs
        .iter()
        .filter_map(|l| {
            let l = std::mem::take(&mut *l.lock().unwrap());
            l.held_from.is_some().then_some(l)
        })
        .collect();
    assert_eq!(with_data.len(), 1, "one connection carries the data");
    let l = with_data.remove(0);
    assert_eq!(l.payload, expect, "{:?}", l.released);
    l
}

/// The order the module notes demand: the relay held the data, a Read Request released
/// it, and the clock stopped after the relay passed on the answer to the last Read.
fn assert_clock_after_landing(what: &str, b: &BwResult, l: &ConnLog) {
    let (start, end) = b.clock.expect("the client timed its run");
    let held_from = l.held_from.expect("the relay held the data");
    assert!(
        start <= held_from,
        "{what}: the run started before its data"
    );
    let (released, why) = l.released.unwrap_or_else(|| {
        panic!(
            "{what}: the relay never released the data ({} payload octets)",
            l.payload
        )
    });
    assert!(
        released < end,
        "{what}: the clock stopped {:?} before any of the data could reach the server \
         (released: {why:?})",
        released - end,
    );
    assert_eq!(
        why,
        Release::ReadRequest,
        "{what}: no Read Request followed the data: nothing proved its delivery"
    );
    let answer = *l
        .read_responses
        .last()
        .unwrap_or_else(|| panic!("{what}: the server answered no Read: nothing proved delivery"));
    assert!(released < answer);
    assert!(
        answer < end,
        "{what}: the clock stopped {:?} before the answer to the closing Read was on its way",
        answer - end
    );
}

fn bw_of(m: Measured) -> BwResult {
    match m {
        Measured::Bw(b) => b,
        Measured::Lat(_) => panic!("a bandwidth result expected"),
    }
}

/// softrnic's own mode: `test` with `-n iters -s size`, one QP, through the relay.
fn native(test: &str, iters: u64, size: usize) {
    let n = iters.to_string();
    let s = size.to_string();
    let sdev = Device::open(config(&[test]).device_config()).expect("device");
    let listener = sdev.listen("127.0.0.1:0").expect("listen");
    let target = listener.local_addr().expect("address");
    let server = std::thread::spawn(move || server::serve(&sdev, &listener, Default::default()));
    let expect = iters * size as u64;
    let (addr, logs) = relay(target, expect, test == "send_bw");
    let port = addr.port().to_string();
    let cfg = config(&[
        test,
        "-n",
        &n,
        "-s",
        &s,
        "-p",
        &port,
        "--quiet",
        "127.0.0.1",
    ]);
    let dev = Device::open(cfg.device_config()).expect("device");
    let m = rdma::client_round(&cfg, &dev, addr, size, true).expect("client runs");
    server.join().expect("server thread").expect("server");
    let b = bw_of(m);
    assert_eq!(b.iterations, iters);
    assert_clock_after_landing(&format!("{test} {size} B"), &b, &data_conn(&logs, expect));
}

#[test]
fn write_bw_clock_stops_after_the_writes_landed() {
    // Small Writes complete when copied into the transmit buffer; large ones when
    // written to the socket.
    native("write_bw", 64, 4096);
    native("write_bw", 16, 65536);
}

#[test]
fn send_bw_clock_stops_after_the_sends_landed() {
    // Fewer Sends than the receive depth: no credit is needed while the relay holds.
    native("send_bw", 64, 4096);
}

/// `-R` between two softrnic sides: they recognise each other, so write_bw ends with a
/// closing Read there too. (send_bw -R cannot be held this way: perftest's credit window
/// is below the iteration count, so the client waits for the server's credits.)
#[test]
fn rdma_cm_write_bw_clock_stops_after_the_writes_landed() {
    let (iters, size) = (64u64, 4096usize);
    let flags = ["write_bw", "-R", "--quiet", "-n", "64", "-s", "4096"];
    let scfg = config(&flags);
    let sdev = Device::open(scfg.device_config()).expect("device");
    let listener = sdev.listen("127.0.0.1:0").expect("listen");
    let target = listener.local_addr().expect("address");
    let server = std::thread::spawn(move || {
        let mut out = Vec::new();
        rdma_cm::serve(&scfg, &sdev, &listener, &mut out)
    });
    let expect = iters * size as u64;
    let (addr, logs) = relay(target, expect, false);
    let port = addr.port().to_string();
    let mut c_argv = flags.to_vec();
    c_argv.extend_from_slice(&["-p", &port, "127.0.0.1"]);
    let ccfg = config(&c_argv);
    let cdev = Device::open(ccfg.device_config()).expect("device");
    let mut out = Vec::new();
    let row = rdma_cm::client(&ccfg, &cdev, addr, &mut out).expect("client runs");
    let srow = server.join().expect("server thread").expect("server");
    let b = bw_of(row.softrnic);
    assert_eq!(b.iterations, iters);
    assert_clock_after_landing("write_bw -R", &b, &data_conn(&logs, expect));
    // The server counted every Write's payload in its own memory.
    let s = bw_of(srow.expect("the server measures write_bw").softrnic);
    assert_eq!(s.iterations, iters);
}
