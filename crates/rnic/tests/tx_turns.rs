//! Transmit turns (`DeviceConfig::tx_turns`): at most that many QPs send large messages
//! at once, a QP that has sent its quantum gives way to a waiting one, and every QP's
//! Writes still all go out, exact and in order, each completing once.

mod common;

use common::*;
use softrnic_rnic::*;
use softrnic_wire::ddp::TAGGED_HEADER_LEN;
use std::io::{ErrorKind, Read};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// A stall limit no test reaches: a holder keeps its turn however long its peer waits.
const NEVER: Duration = Duration::from_secs(3600);

/// Octets per Write: one FPDU, sent from registered memory (above the gather limit).
const LEN: usize = 60 << 10;
/// Writes per QP: 7.5 MiB, more than a socket and an unread peer's window hold, so a
/// QP cannot finish before its peer reads.
const EACH: usize = 128;
/// Source slots: Write `n` of QP `q` comes from slot `(n + q) % SLOTS`.
const SLOTS: usize = 8;

struct Qps {
    _dev: Device,
    cq: Cq,
    qps: Vec<Qp>,
    peers: Vec<TcpStream>,
    _src: Mr,
}

/// `count` QPs on one CQ of an engine-progress device with `turns` turns of `quantum`
/// octets, each with a raw peer that has not read yet, and every Write posted. A turn
/// holder whose socket stays full for `stall` gives way to a waiting QP.
fn posted(count: usize, turns: usize, quantum: u64, stall: Duration) -> Qps {
    posted_on(
        count,
        DeviceConfig {
            progress: ProgressMode::Engine,
            tx_turns: turns,
            tx_turn_quantum: quantum,
            tx_turn_stall: stall,
            ..DeviceConfig::default()
        },
    )
}

/// [`posted`] on a device opened with `cfg`.
fn posted_on(count: usize, cfg: DeviceConfig) -> Qps {
    let dev = Device::open(cfg).unwrap();
    let pd = dev.alloc_pd();
    let cq = dev.create_cq(count * EACH + 64).unwrap();
    let src = pd.alloc_mr(SLOTS * LEN, Access::LOCAL_WRITE).unwrap();
    for k in 0..SLOTS {
        src.write(k * LEN, &pattern(LEN, k as u64)).unwrap();
    }
    let qps: Vec<Qp> = (0..count)
        .map(|_| dev.create_qp(&pd, QpInit::new(&cq, EACH + 8, 1)).unwrap())
        .collect();
    let peers = qps
        .iter()
        .map(|q| raw_initiator_to(&dev, q, MpaConfig::default()))
        .collect();
    for (i, q) in qps.iter().enumerate() {
        for n in 0..EACH {
            let slot = (n + i) % SLOTS;
            q.post_send(SendWr::write(
                n as u64,
                src.sge(slot * LEN, LEN),
                0x1000,
                src.rkey(),
            ))
            .unwrap();
        }
    }
    Qps {
        _dev: dev,
        cq,
        qps,
        peers,
        _src: src,
    }
}

/// What a raw peer has read of its QP's Writes: whole FPDUs checked, and the octets of
/// the one under way.
#[derive(Default)]
struct Reader {
    buf: Vec<u8>,
    writes: usize,
}

impl Reader {
    /// FPDU octets on the wire: MPA length, tagged header, payload, pad, CRC.
    const FPDU: usize =
        2 + TAGGED_HEADER_LEN + LEN + (4 - (2 + TAGGED_HEADER_LEN + LEN) % 4) % 4 + 4;

    /// Reads what `peer` has (all of it if `block`, else what one `read` finds now) and
    /// checks each whole Write of QP `qp` against its source slot.
    fn read(&mut self, peer: &mut TcpStream, qp: usize, block: bool) {
        peer.set_nonblocking(!block).unwrap();
        let mut chunk = vec![0u8; 256 << 10];
        while self.writes < EACH {
            match peer.read(&mut chunk) {
                Ok(0) => panic!("QP {qp}'s connection closed after {} Writes", self.writes),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock && !block => break,
                Err(e) => panic!("QP {qp}: {e}"),
            }
            while self.buf.len() >= Self::FPDU {
                let ulpdu = u16::from_be_bytes([self.buf[0], self.buf[1]]) as usize;
                assert_eq!(
                    ulpdu,
                    TAGGED_HEADER_LEN + LEN,
                    "QP {qp}, Write {}",
                    self.writes
                );
                let payload = &self.buf[2 + TAGGED_HEADER_LEN..2 + ulpdu];
                let slot = (self.writes + qp) % SLOTS;
                assert!(
                    payload == pattern(LEN, slot as u64),
                    "QP {qp}, Write {} exact",
                    self.writes
                );
                self.buf.drain(..Self::FPDU);
                self.writes += 1;
            }
            if !block {
                break;
            }
        }
    }
}

/// Whether any octet of QP `qp`'s Writes has reached its peer.
fn has_data(peer: &TcpStream) -> bool {
    peer.set_nonblocking(true).unwrap();
    let mut b = [0u8; 1];
    match peer.peek(&mut b) {
        Ok(n) => n > 0,
        Err(e) if e.kind() == ErrorKind::WouldBlock => false,
        Err(e) => panic!("{e}"),
    }
}

fn check_completions(t: &Qps, got: &[Completion]) {
    assert!(got.iter().all(|c| c.status == WcStatus::Success));
    for q in &t.qps {
        let mine: Vec<Completion> = got.iter().filter(|c| c.qp == q.id()).copied().collect();
        exactly_once(&mine, 0..EACH as u64);
    }
}

/// Two turns among six QPs: while nobody reads, only the two QPs that came first have
/// sent anything; each of the others starts when a turn is free (its predecessors'
/// Writes all handed to their sockets), in the order they asked, and all finish exact.
#[test]
fn only_as_many_qps_as_turns_send_at_once_and_every_one_finishes() {
    const QPS: usize = 6;
    let mut t = posted(QPS, 2, 1 << 40, NEVER);
    // The posting thread sent inline: the two QPs holding the turns filled their
    // sockets; the others hold nothing back but have sent nothing.
    for (i, p) in t.peers.iter().enumerate().skip(2) {
        assert!(!has_data(p), "QP {i} sent without a turn");
    }
    for i in 0..QPS {
        // The QPs before `i` are read to the end; of the others none can have handed
        // all its Writes over (they exceed what its socket holds), so each that has
        // sent anything holds a turn now.
        let sending = (i..QPS).filter(|&j| has_data(&t.peers[j])).count();
        assert!(
            sending <= 2,
            "{sending} QPs sending at once before QP {i} is read"
        );
        Reader::default().read(&mut t.peers[i], i, true);
    }
    let got = take(&t.cq, QPS * EACH);
    check_completions(&t, &got);
}

/// One turn with a 1 MiB quantum among three QPs whose peers do not read: the first QP
/// gives its turn up after its quantum (its own Writes unfinished), so the second one's
/// peer gets data; reading round robin then brings every Write of every QP, exact.
#[test]
fn a_qp_gives_its_turn_up_after_its_quantum_and_none_starves() {
    const QPS: usize = 3;
    let mut t = posted(QPS, 1, 1 << 20, NEVER);
    let mut readers: Vec<Reader> = (0..QPS).map(|_| Reader::default()).collect();
    // QP 0 holds the turn; only its peer reads until QP 1 has sent something, which
    // only a turn handed over lets it do.
    let give_up = Instant::now() + WAIT;
    while !has_data(&t.peers[1]) {
        assert!(Instant::now() < give_up, "QP 1 never got a turn");
        readers[0].read(&mut t.peers[0], 0, false);
        std::thread::yield_now();
    }
    let mut got = drained(&t.cq);
    let qp0_done = got.iter().filter(|c| c.qp == t.qps[0].id()).count();
    assert!(
        qp0_done < EACH,
        "QP 0 had handed all its Writes over before QP 1 sent: {qp0_done}, read {}",
        readers[0].writes
    );
    while readers.iter().any(|r| r.writes < EACH) {
        assert!(
            Instant::now() < give_up,
            "a QP starved: {:?}",
            readers.iter().map(|r| r.writes).collect::<Vec<_>>()
        );
        for (i, r) in readers.iter_mut().enumerate() {
            r.read(&mut t.peers[i], i, false);
        }
        std::thread::yield_now();
    }
    got.extend(take(&t.cq, QPS * EACH - got.len()));
    check_completions(&t, &got);
}

/// One turn, an endless quantum, and a peer that does not read: the QP holding the turn
/// finds its socket full, and after the stall limit gives the turn to the next QP, so
/// the QPs whose peers read are not held behind it; once its peer reads, it finishes
/// too, every Write of every QP exact.
#[test]
fn a_turn_holder_whose_peer_does_not_read_gives_way() {
    const QPS: usize = 3;
    let mut t = posted(QPS, 1, 1 << 40, DeviceConfig::default().tx_turn_stall);
    // QP 0 took the turn first (its Writes were posted first) and its peer reads
    // nothing until the others have read everything.
    for (i, peer) in t.peers.iter_mut().enumerate().skip(1) {
        peer.set_read_timeout(Some(WAIT)).unwrap();
        Reader::default().read(peer, i, true);
    }
    Reader::default().read(&mut t.peers[0], 0, true);
    let got = take(&t.cq, QPS * EACH);
    check_completions(&t, &got);
}

/// A device's default turns, in either progress mode: twelve QPs whose peers all read
/// as they can; every QP gets its turns and every Write of every QP arrives exact and
/// completes once.
#[test]
fn with_the_default_turns_every_qp_of_many_finishes() {
    const QPS: usize = 12;
    for progress in [ProgressMode::Engine, ProgressMode::Hybrid] {
        let cfg = DeviceConfig {
            progress,
            ..DeviceConfig::default()
        };
        assert!(
            cfg.tx_turns > 0 && cfg.tx_turns < QPS,
            "turns on by default"
        );
        let mut t = posted_on(QPS, cfg);
        let mut readers: Vec<Reader> = (0..QPS).map(|_| Reader::default()).collect();
        let mut got = Vec::new();
        let mut wcs = vec![Completion::default(); 256];
        let give_up = Instant::now() + WAIT;
        while readers.iter().any(|r| r.writes < EACH) {
            assert!(
                Instant::now() < give_up,
                "{progress:?}: a QP starved: {:?}",
                readers.iter().map(|r| r.writes).collect::<Vec<_>>()
            );
            for (i, r) in readers.iter_mut().enumerate() {
                r.read(&mut t.peers[i], i, false);
            }
            // Hybrid progress: the program's polls send for its QPs too.
            let n = t.cq.poll(&mut wcs);
            got.extend_from_slice(&wcs[..n]);
        }
        got.extend(take(&t.cq, QPS * EACH - got.len()));
        check_completions(&t, &got);
    }
}
