//! Two processes: the test re-executes its own binary as the peer (`--exact <peer test>
//! --ignored` with `SOFTRNIC_PEER_ROLE` set). The peer roles are `#[ignore]`d tests, so
//! a normal run lists them as ignored rather than counting them as passed, and one
//! run without its role fails instead of passing vacuously. Covers a
//! Send/Recv + Write + Read exchange with data verified across processes, and a peer
//! killed with SIGKILL in the middle of a transfer: the surviving QP goes to Error and
//! flushes all its work in bounded time.

mod common;

use common::*;
use softrnic_rnic::*;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

const ROLE: &str = "SOFTRNIC_PEER_ROLE";
const ADDR: &str = "SOFTRNIC_PEER_ADDR";
const HALF: usize = 32 << 10;
const MIB: usize = 1 << 20;

/// The peer process, killed if the test ends without waiting for it.
struct Peer {
    child: Option<Child>,
    lines: mpsc::Receiver<String>,
}

impl Peer {
    fn spawn(test: &str, role: &str, addr: Option<SocketAddr>) -> Peer {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "--exact",
            test,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE, role)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
        if let Some(a) = addr {
            cmd.env(ADDR, a.to_string());
        }
        let mut child = cmd.spawn().unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(l) = line else { break };
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Peer {
            child: Some(child),
            lines,
        }
    }

    /// Waits for a line containing `tag`; returns what follows the tag.
    fn expect(&self, tag: &str) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    if let Some(i) = l.find(tag) {
                        return l[i + tag.len()..].trim().to_string();
                    }
                }
                Err(e) => panic!("the peer never printed {tag:?} ({e:?})"),
            }
        }
    }

    /// Waits (bounded) for the peer to exit; returns its status and remaining output.
    fn finish(mut self) -> (ExitStatus, Vec<String>) {
        let deadline = Instant::now() + WAIT;
        let mut rest = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => rest.push(l),
                // Its stdout closed: it has exited (or is exiting).
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => panic!("the peer did not exit in {WAIT:?}"),
            }
        }
        let status = self.child.take().unwrap().wait().unwrap();
        (status, rest)
    }

    /// SIGKILL, and reap it.
    fn kill(mut self) {
        let mut c = self.child.take().unwrap();
        c.kill().unwrap();
        c.wait().unwrap();
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn role_is(role: &str) -> bool {
    std::env::var(ROLE).is_ok_and(|r| r == role)
}

/// An exposed region's address, key and length, for the private data.
fn advert(mr: &Mr) -> Vec<u8> {
    let mut v = mr.addr().to_le_bytes().to_vec();
    v.extend_from_slice(&mr.rkey().to_le_bytes());
    v.extend_from_slice(&(mr.len() as u32).to_le_bytes());
    v
}

fn parse_advert(p: &[u8]) -> (u64, STag, usize) {
    assert_eq!(p.len(), 16, "advert {p:?}");
    (
        u64::from_le_bytes(p[..8].try_into().unwrap()),
        u32::from_le_bytes(p[8..12].try_into().unwrap()),
        u32::from_le_bytes(p[12..16].try_into().unwrap()) as usize,
    )
}

/// Peer of `send_write_read_across_processes`: listens, exposes a region in the
/// accept's private data, checks what the parent sent and wrote, and answers.
#[test]
#[ignore = "a peer role: its parent test runs it in a second process"]
fn peer_server() {
    assert!(
        role_is("server"),
        "run by its parent test with {ROLE}=server, not on its own"
    );
    let e = end().cq(256).queues(16, 16).build();
    let exposed =
        e.pd.alloc_mr(
            2 * HALF,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        )
        .unwrap();
    exposed.write(0, &pattern(HALF, 7)).unwrap();
    let rbuf = e.pd.alloc_mr(HALF + 64, Access::LOCAL_WRITE).unwrap();
    e.qp.post_recv(RecvWr::new(1, rbuf.sge(0, HALF))).unwrap();
    e.qp.post_recv(RecvWr::new(2, rbuf.sge(HALF, 64))).unwrap();
    let listener = e.dev.listen("127.0.0.1:0").unwrap();
    println!("ADDR {}", listener.local_addr().unwrap());
    std::io::stdout().flush().unwrap();
    let req = listener.accept().unwrap();
    assert_eq!(req.private_data(), b"two-process client");
    req.accept(&e.qp, &advert(&exposed)).unwrap();

    let r1 = one(&e.cq);
    assert_eq!(
        (r1.wr_id, r1.status, r1.byte_len),
        (1, WcStatus::Success, HALF as u32)
    );
    let r2 = one(&e.cq);
    assert_eq!(
        (r2.wr_id, r2.status, r2.byte_len),
        (2, WcStatus::Success, 4)
    );
    let got = rbuf.to_vec();
    assert!(got[..HALF] == pattern(HALF, 8)[..], "Send data");
    assert_eq!(&got[HALF..HALF + 4], b"done");
    // The Write came before "done" on the wire, so it is in place.
    assert!(
        exposed.to_vec()[HALF..] == pattern(HALF, 9)[..],
        "Write data"
    );
    // Answer with what arrived: the Send's octets and the Write's.
    e.qp.post_send(SendWr::send(
        3,
        [rbuf.sge(0, HALF), exposed.sge(HALF, HALF)],
    ))
    .unwrap();
    let s = one(&e.cq);
    assert_eq!((s.wr_id, s.status), (3, WcStatus::Success));
    // The parent closes once it has the answer.
    disconnected(&e.dev, &e.qp);
    println!("PEER OK");
}

#[test]
fn send_write_read_across_processes() {
    let peer = Peer::spawn("peer_server", "server", None);
    let addr: SocketAddr = peer.expect("ADDR ").parse().unwrap();
    let e = end().cq(256).queues(16, 16).build();
    let conn = e.dev.connect(addr, &e.qp, b"two-process client").unwrap();
    let (raddr, rkey, rlen) = parse_advert(conn.peer_private_data());
    assert_eq!(rlen, 2 * HALF);

    let src = e.pd.alloc_mr(2 * HALF + 4, Access::empty()).unwrap();
    src.write(0, &pattern(HALF, 8)).unwrap();
    src.write(HALF, &pattern(HALF, 9)).unwrap();
    src.write(2 * HALF, b"done").unwrap();
    let sink = e.pd.alloc_mr(HALF, Access::LOCAL_WRITE).unwrap();
    let answer = e.pd.alloc_mr(2 * HALF, Access::LOCAL_WRITE).unwrap();
    e.qp.post_recv(RecvWr::new(10, answer.sge(0, 2 * HALF)))
        .unwrap();
    e.qp.post_send_batch([
        SendWr::send(1, src.sge(0, HALF)),
        SendWr::write(2, src.sge(HALF, HALF), raddr + HALF as u64, rkey),
        SendWr::read(3, sink.sge(0, HALF), raddr, rkey),
        SendWr::send(4, src.sge(2 * HALF, 4)),
    ])
    .unwrap();
    let got = take(&e.cq, 5);
    exactly_once(&got, [1, 2, 3, 4, 10]);
    assert_eq!(
        got.iter()
            .filter(|c| c.wr_id < 10)
            .map(|c| (c.wr_id, c.status, c.opcode))
            .collect::<Vec<_>>(),
        vec![
            (1, WcStatus::Success, WcOpcode::Send),
            (2, WcStatus::Success, WcOpcode::Write),
            (3, WcStatus::Success, WcOpcode::Read),
            (4, WcStatus::Success, WcOpcode::Send),
        ]
    );
    let r = got.iter().find(|c| c.wr_id == 10).unwrap();
    assert_eq!((r.status, r.byte_len), (WcStatus::Success, 2 * HALF as u32));
    assert!(sink.to_vec() == pattern(HALF, 7), "Read data");
    let a = answer.to_vec();
    assert!(
        a[..HALF] == pattern(HALF, 8)[..],
        "the peer received the Send"
    );
    assert!(
        a[HALF..] == pattern(HALF, 9)[..],
        "the peer found the Write"
    );

    e.qp.disconnect().unwrap();
    disconnected(&e.dev, &e.qp);
    let (status, out) = peer.finish();
    assert!(
        status.success(),
        "peer exited with {status}; output {out:?}"
    );
    assert!(out.iter().any(|l| l.contains("PEER OK")), "{out:?}");
}

/// Peer of `killed_peer_flushes_everything`: connects and streams 1 MiB Writes with a
/// few Sends among them, until it is killed (or, as a safety net, for a minute).
#[test]
#[ignore = "a peer role: its parent test runs it in a second process"]
fn peer_streamer() {
    assert!(
        role_is("streamer"),
        "run by its parent test with {ROLE}=streamer, not on its own"
    );
    let addr: SocketAddr = std::env::var(ADDR).unwrap().parse().unwrap();
    let e = end().cq(256).queues(64, 4).build();
    let conn = e.dev.connect(addr, &e.qp, b"streamer").unwrap();
    let (raddr, rkey, rlen) = parse_advert(conn.peer_private_data());
    assert_eq!(rlen, 4 * MIB);
    let src = e.pd.alloc_mr(MIB, Access::empty()).unwrap();
    src.write(0, &pattern(MIB, 13)).unwrap();
    let note = e.pd.alloc_mr(1024, Access::empty()).unwrap();
    note.write(0, &pattern(1024, 14)).unwrap();
    println!("STREAMING");
    let stop = Instant::now() + Duration::from_secs(60);
    let (mut posted, mut outstanding, mut sends) = (0u64, 0usize, 0);
    while Instant::now() < stop {
        while outstanding < 32 {
            let wr = if posted % 4 == 3 && sends < 8 {
                sends += 1;
                SendWr::send(posted, note.sge(0, 1024))
            } else {
                let at = raddr + (posted % 4) * MIB as u64;
                SendWr::write(posted, src.sge(0, MIB), at, rkey)
            };
            if e.qp.post_send(wr).is_err() {
                return;
            }
            posted += 1;
            outstanding += 1;
        }
        for c in e.cq.wait_for(1, Duration::from_secs(1)) {
            outstanding -= 1;
            if c.status != WcStatus::Success {
                return;
            }
        }
    }
}

#[test]
fn killed_peer_flushes_everything() {
    const RECVS: u64 = 64;
    let e = end().cq(256).queues(16, RECVS as usize).build();
    let exposed =
        e.pd.alloc_mr(4 * MIB, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
    let rbuf =
        e.pd.alloc_mr(RECVS as usize * 1024, Access::LOCAL_WRITE)
            .unwrap();
    for i in 0..RECVS {
        e.qp.post_recv(RecvWr::new(i, rbuf.sge(i as usize * 1024, 1024)))
            .unwrap();
    }
    let listener = e.dev.listen("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let peer = Peer::spawn("peer_streamer", "streamer", Some(addr));
    // Accept on a helper thread, so a peer that never connects fails the test in
    // bounded time instead of hanging it.
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(listener.accept());
    });
    let req = rx
        .recv_timeout(WAIT)
        .expect("the peer did not connect")
        .unwrap();
    assert_eq!(req.private_data(), b"streamer");
    req.accept(&e.qp, &advert(&exposed)).unwrap();
    peer.expect("STREAMING");

    // The transfer is under way once the first Send has arrived (after 3 MiB of
    // Writes, with more queued behind it): kill the peer now.
    let first = take(&e.cq, 1)[0];
    assert_eq!((first.wr_id, first.status), (0, WcStatus::Success));
    peer.kill();

    let id = e.qp.id();
    let ev = event(
        &e.dev,
        "Disconnected or ConnectionLost",
        |ev| matches!(ev, AsyncEvent::Disconnected { qp } | AsyncEvent::ConnectionLost { qp, .. } if *qp == id),
    );
    if let AsyncEvent::ConnectionLost { .. } = ev {
        disconnected(&e.dev, &e.qp);
    }
    assert_eq!(e.qp.state(), QpState::Error);
    // Every receive completes exactly once: those the peer's Sends filled, in order,
    // then the rest flushed; all are in the CQ by the time Disconnected is posted.
    let mut got = vec![first];
    got.extend(drained(&e.cq));
    assert!(got.iter().map(|c| c.wr_id).eq(0..RECVS), "in posting order");
    let ok = got
        .iter()
        .take_while(|c| c.status == WcStatus::Success)
        .count();
    assert!(ok <= 8, "the peer sent at most 8 Sends");
    for c in &got[..ok] {
        assert_eq!(c.byte_len, 1024);
        let mut v = vec![0u8; 1024];
        rbuf.read(c.wr_id as usize * 1024, &mut v).unwrap();
        assert_eq!(v, pattern(1024, 14), "Send {}", c.wr_id);
    }
    for c in &got[ok..] {
        assert_eq!(
            (c.status, c.opcode),
            (WcStatus::WrFlushError, WcOpcode::Recv),
            "{c:?}"
        );
    }
    assert_eq!(e.cq.poll_one(), None);
    // Work posted now flushes at once.
    e.qp.post_recv(RecvWr::new(500, rbuf.sge(0, 8))).unwrap();
    let c = take(&e.cq, 1)[0];
    assert_eq!((c.wr_id, c.status), (500, WcStatus::WrFlushError));
}
