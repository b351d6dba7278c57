//! The single post (`transmit::post_single`) against the general path it shortcuts
//! (`post_run`, `post_gathered`, `send_gathered`, as `Qp::post_send_batch` posts a
//! batch): its FPDUs are the wire framer's, a socket that takes part of one keeps the
//! rest queued in order, and a seeded mix of requests, misuses, region changes and
//! socket answers posted to twin QPs, one through the single post and one the general
//! way, gives the same results, octets, completions and states.

use super::*;
use crate::device::{Device, Shared};
use crate::sys::socket::IoVecs;
use crate::transmit::run_tests::framed;
use crate::transmit::{post_gathered, post_run, send_gathered, transmit};
use crate::transport::{ConnTransport, Transport};
use crate::{Access, DeviceConfig, Mr, Pd};
use softrnic_proto::qp::{PostError, QpConfig, QpParams};
use softrnic_proto::{Completion, STag, SendOp, Sge, WcOpcode, WcStatus};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// What the scripted socket does at one `send`.
#[derive(Debug, Clone, Copy)]
enum Take {
    /// Takes at most this many octets.
    Upto(usize),
    /// Full: `WouldBlock`.
    Block,
    /// `Interrupted`.
    Interrupt,
    /// The connection failed.
    Fail,
}

/// A socket that records what it takes and answers each send from a script (all of
/// it when the script is empty).
#[derive(Default)]
struct Script {
    wire: Vec<u8>,
    takes: VecDeque<Take>,
    failed: bool,
}

struct Scripted(Arc<Mutex<Script>>);

impl Scripted {
    fn take(&mut self, len: usize, mut copy: impl FnMut(&mut Vec<u8>, usize)) -> io::Result<usize> {
        let mut s = self.0.lock().unwrap();
        if s.failed {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        let n = match s.takes.pop_front() {
            None => len,
            Some(Take::Upto(n)) => n.min(len),
            Some(Take::Block) => return Err(io::ErrorKind::WouldBlock.into()),
            Some(Take::Interrupt) => return Err(io::ErrorKind::Interrupted.into()),
            Some(Take::Fail) => {
                s.failed = true;
                return Err(io::ErrorKind::ConnectionReset.into());
            }
        };
        copy(&mut s.wire, n);
        Ok(n)
    }
}

impl Transport for Scripted {
    fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
        Err(io::ErrorKind::WouldBlock.into())
    }

    fn read_into(&mut self, _: &crate::region::RegionSlice<'_>) -> io::Result<usize> {
        Err(io::ErrorKind::WouldBlock.into())
    }

    fn send(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.take(buf.len(), |w, n| w.extend_from_slice(&buf[..n]))
    }

    fn send_gather(&mut self, iov: IoVecs<'_>) -> io::Result<usize> {
        self.take(iov.len(), |w, n| {
            iov.for_each_piece(n, |p| w.extend_from_slice(p))
        })
    }

    fn shutdown(&mut self, _: std::net::Shutdown) -> io::Result<()> {
        Ok(())
    }

    fn abort(&mut self) {}
}

impl mio::event::Source for Scripted {
    fn register(&mut self, _: &mio::Registry, _: mio::Token, _: mio::Interest) -> io::Result<()> {
        Ok(())
    }

    fn reregister(&mut self, _: &mio::Registry, _: mio::Token, _: mio::Interest) -> io::Result<()> {
        Ok(())
    }

    fn deregister(&mut self, _: &mio::Registry) -> io::Result<()> {
        Ok(())
    }
}

/// One QP's core and connection on a scripted socket.
struct Side {
    core: Core,
    conn: Conn,
    stats: QpStats,
    script: Arc<Mutex<Script>>,
    /// Requests the single post took.
    single: u64,
}

const QP: QpId = QpId(1);

fn side(pd: &Pd, crc: bool, sq_depth: usize) -> Side {
    let mut core = Core::new(QpConfig {
        id: QP,
        pd: pd.id(),
        sq_depth,
        rq_depth: 4,
    });
    core.connect(QpParams {
        crc,
        ord: 2,
        ..QpParams::default()
    })
    .unwrap();
    let script = Arc::new(Mutex::new(Script::default()));
    Side {
        core,
        conn: Conn {
            transport: ConnTransport::Wrapped(Box::new(Scripted(script.clone()))),
            tx: TxQueue::default(),
        },
        stats: QpStats::default(),
        script,
        single: 0,
    }
}

impl Side {
    /// Posts `wr` as `Qp::post_send` does: the single post, else the general way.
    fn post_single(&mut self, dev: &Shared, wr: &SendWr) -> Result<(), PostError> {
        match post_single(QP, &mut self.core, &mut self.conn, &mut self.stats, dev, wr) {
            Some(()) => {
                self.single += 1;
                Ok(())
            }
            None => self.post_general(dev, wr),
        }
    }

    /// Posts `wr` the general way (a batch of one as `post_send_batch` posted it).
    fn post_general(&mut self, dev: &Shared, wr: &SendWr) -> Result<(), PostError> {
        let (core, conn, stats) = (&mut self.core, &mut self.conn, &mut self.stats);
        let mut wrs = std::iter::once(wr);
        while let Some(wr) = post_run(core, conn, stats, dev, &mut wrs) {
            post_gathered(core, conn, stats, dev, wr)?;
        }
        send_gathered(QP, core, conn, stats, dev);
        Ok(())
    }

    /// The pass after a post: transmits unless the socket is known to be full.
    fn pass(&mut self, dev: &Shared) {
        if !self.conn.tx.waits_for_room() {
            transmit(QP, 0, &mut self.core, &mut self.conn, &mut self.stats, dev);
        }
    }

    /// The socket has room again (its readiness event): the engine's pass.
    fn writable(&mut self, dev: &Shared) {
        self.conn.tx.blocked = false;
        transmit(QP, 0, &mut self.core, &mut self.conn, &mut self.stats, dev);
    }

    fn wire(&self) -> Vec<u8> {
        self.script.lock().unwrap().wire.clone()
    }

    fn completions(&mut self) -> Vec<(u64, WcStatus, WcOpcode, u32)> {
        std::iter::from_fn(|| self.core.poll_completion())
            .map(|(_, c): (_, Completion)| (c.wr_id, c.status, c.opcode, c.byte_len))
            .collect()
    }
}

fn device() -> (Device, Pd) {
    let dev = Device::open(DeviceConfig::default()).unwrap();
    let pd = dev.alloc_pd();
    (dev, pd)
}

fn source(pd: &Pd, len: usize, seed: u8) -> (Mr, Vec<u8>) {
    let mr = pd.alloc_mr(len, Access::LOCAL_WRITE).unwrap();
    let data: Vec<u8> = (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect();
    mr.write(0, &data).unwrap();
    (mr, data)
}

/// Single posts of Writes and Sends (plain, solicited, with invalidate) of 0-17 (every
/// width of the short copy, `Region::read`), 64 and 80 octets (framed in the QP's frame
/// buffer), 101, 110 and 200 (the frame buffer's edge and
/// beyond: framed in the transmit buffer), CRC off and on, each sent by the post
/// itself: the octets on the wire
/// are the framer's FPDUs, one `send` each, and every request completes in order.
#[test]
fn single_posts_are_the_framers_fpdus_one_send_each() {
    let (dev, pd) = device();
    let (mr, data) = source(&pd, 1024, 5);
    for crc in [false, true] {
        let mut s = side(&pd, crc, 16);
        let mut want = Vec::new();
        let mut msn = 1;
        let mut done = Vec::new();
        for (i, len) in (0usize..=17).chain([64, 80, 101, 110, 200]).enumerate() {
            for kind in 0..4u64 {
                let id = i as u64 * 4 + kind;
                let sge = mr.sge(i * 17, len);
                let wr = match kind {
                    0 => SendWr::write(id, [sge], 0x10_0000 + id, 0x4400 + id as u32),
                    1 => SendWr::send(id, [sge]),
                    2 => SendWr::send(id, [sge]).solicited(),
                    _ => SendWr::send(id, [sge]).invalidate(0x7700 + id as u32),
                };
                let calls = s.stats.tx_syscalls;
                assert!(
                    post_single(QP, &mut s.core, &mut s.conn, &mut s.stats, &dev.shared, &wr)
                        .is_some(),
                    "taken by the single post: len {len} kind {kind}"
                );
                assert_eq!(s.stats.tx_syscalls, calls + 1);
                want.extend(framed(&wr, &data[i * 17..][..len], msn, crc));
                if kind != 0 {
                    msn += 1;
                }
                let op = if kind == 0 {
                    WcOpcode::Write
                } else {
                    WcOpcode::Send
                };
                done.push((id, WcStatus::Success, op, len as u32));
                assert!(s.conn.tx.is_flushed());
            }
        }
        assert!(s.wire() == want, "crc {crc}");
        assert_eq!(s.completions(), done);
    }
}

/// The frame buffer is kept across posts, not zeroed: a short FPDU after a longer one
/// (its pad and CRC field where the longer one's payload was) is still the framer's,
/// with and without CRC, for a Write and a Send, at every pad length.
#[test]
fn a_short_fpdu_after_a_long_one_has_its_own_pad_and_crc_field() {
    let (dev, pd) = device();
    let (mr, data) = source(&pd, 512, 9);
    for crc in [false, true] {
        let mut s = side(&pd, crc, 16);
        let mut want = Vec::new();
        let mut msn = 1;
        for (i, len) in [101usize, 0, 90, 1, 80, 2, 70, 3, 60, 5]
            .into_iter()
            .enumerate()
        {
            let sge = mr.sge(i * 13, len);
            let id = i as u64;
            let wr = if i % 4 < 2 {
                SendWr::write(id, [sge], 0x20_0000 + id, 0x5500 + id as u32)
            } else {
                SendWr::send(id, [sge])
            };
            assert!(
                post_single(QP, &mut s.core, &mut s.conn, &mut s.stats, &dev.shared, &wr).is_some(),
                "taken by the single post: len {len}"
            );
            want.extend(framed(&wr, &data[i * 13..][..len], msn, crc));
            if i % 4 >= 2 {
                msn += 1;
            }
        }
        assert!(s.wire() == want, "crc {crc}");
    }
}

/// A socket that takes a few octets and then is full: the post completes its request,
/// the rest of the FPDU stays queued, the next posts queue behind it (the single post
/// steps aside), and once the socket has room everything leaves in posting order.
#[test]
fn a_partly_taken_fpdu_keeps_the_rest_queued_in_order() {
    let (dev, pd) = device();
    let (mr, data) = source(&pd, 256, 9);
    for crc in [false, true] {
        let mut s = side(&pd, crc, 16);
        s.script
            .lock()
            .unwrap()
            .takes
            .extend([Take::Upto(3), Take::Block]);
        let wrs: Vec<SendWr> = (0..4u64)
            .map(|i| {
                let sge = mr.sge(i as usize * 8, 8 + i as usize);
                if i % 2 == 0 {
                    SendWr::send(i, [sge])
                } else {
                    SendWr::write(i, [sge], 0x2000, 0x99)
                }
            })
            .collect();
        for wr in &wrs {
            s.post_single(&dev.shared, wr).unwrap();
            s.pass(&dev.shared);
        }
        assert_eq!(s.wire().len(), 3, "the socket took 3 octets, then was full");
        assert!(s.conn.tx.blocked);
        s.writable(&dev.shared);
        let mut want = Vec::new();
        let mut msn = 1;
        for (i, wr) in wrs.iter().enumerate() {
            want.extend(framed(wr, &data[i * 8..][..8 + i], msn, crc));
            msn += u32::from(i % 2 == 0);
        }
        assert!(s.wire() == want, "crc {crc}");
        assert!(s.conn.tx.is_flushed());
        assert_eq!(s.completions().len(), 4);
    }
}

/// xorshift64*: the seeded choices of the differential test.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A request of the seeded mix: small and large Sends and Writes, Reads (which stay
/// outstanding: no peer answers), fenced ones, and misuses (two-SGE Read, an unknown
/// lkey, a range outside its region, a region of another PD, an SGE of a
/// deregistered region).
fn request(rng: &mut Rng, id: u64, keys: &[(STag, u64, usize)]) -> SendWr {
    // The last key is another PD's region: rarely, as each misuse ends the QP.
    let pick = match rng.below(150) {
        0 => keys.len() - 1,
        n => n as usize % (keys.len() - 1),
    };
    let (lkey, addr, len) = keys[pick];
    let size = [0usize, 1, 3, 4, 7, 8, 13, 64, 80, 200, 1500, 3000][rng.below(12) as usize];
    let off = rng.below(64) as usize;
    let mut sge = Sge {
        addr: addr + off as u64,
        len: size.min(len.saturating_sub(off)) as u32,
        lkey,
    };
    match rng.below(200) {
        0 => sge.lkey = 0x00de_ad00,
        1 => sge.len = len as u32,
        _ => {}
    }
    let mut wr = match rng.below(10) {
        0..=3 => SendWr::write(id, [sge], 0x4000 + id, 0x4400),
        4..=6 => SendWr::send(id, [sge]),
        7 => SendWr::send(id, [sge]).solicited().invalidate(0x77),
        8 if rng.below(8) == 0 => SendWr::new(
            id,
            SendOp::Read {
                remote_addr: 0,
                rkey: 0x100,
            },
            [sge, sge],
        ),
        8 if rng.below(3) == 0 => SendWr::read(id, sge, 0x8000, 0x100),
        8 => SendWr::send(id, [sge]),
        _ => SendWr::send(id, [sge, sge]),
    };
    if rng.below(10) == 0 {
        wr = wr.fence();
    }
    if rng.below(3) == 0 {
        wr = wr.unsignaled();
    }
    wr
}

/// Twin QPs on one device, given the same seeded requests and socket answers, one
/// posting through the single post and one the general way: after every step the
/// post's result, the octets sent, the completions (status and order), the QP's state
/// and the queue's emptiness are equal. Regions are deregistered and registered in
/// between, so the single post's kept lkey memo must see the table change.
#[test]
fn single_posts_and_the_general_path_agree_on_seeded_mixes() {
    let (dev, pd) = device();
    let other_pd = dev.alloc_pd();
    let mut taken = 0u64;
    for seed in 1..=300u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let crc = seed % 2 == 0;
        let depth = [4usize, 8, 64][seed as usize % 3];
        let mut a = side(&pd, crc, depth);
        let mut b = side(&pd, crc, depth);
        let mut mrs: Vec<(Mr, Vec<u8>)> = (0..2).map(|i| source(&pd, 4096, i)).collect();
        let foreign = source(&other_pd, 4096, 7);
        let mut stale = None;
        for step in 0..60u64 {
            match rng.below(25) {
                0 => {
                    // A region deregistered, another registered.
                    let (gone, _) = mrs.remove(0);
                    // Now and then the next request names the region just gone: a
                    // key the single post may have remembered.
                    if rng.below(2) == 0 {
                        stale = Some((gone.lkey(), gone.addr(), gone.len()));
                    }
                    mrs.push(source(&pd, 4096, step as u8));
                }
                1..=8 => {
                    a.writable(&dev.shared);
                    b.writable(&dev.shared);
                }
                9 if rng.below(8) == 0 => {
                    a.core.to_error();
                    b.core.to_error();
                }
                _ => {}
            }
            let takes: Vec<Take> = (0..rng.below(3))
                .map(|_| match rng.below(12) {
                    0..=5 => Take::Upto(1 + rng.below(40) as usize),
                    6..=8 => Take::Block,
                    9 | 10 => Take::Interrupt,
                    _ if rng.below(6) == 0 => Take::Fail,
                    _ => Take::Upto(1000),
                })
                .collect();
            a.script.lock().unwrap().takes.extend(takes.iter().copied());
            b.script.lock().unwrap().takes.extend(takes.iter().copied());
            let mut keys: Vec<(STag, u64, usize)> = mrs
                .iter()
                .map(|(m, _)| (m.lkey(), m.addr(), m.len()))
                .collect();
            keys.push((foreign.0.lkey(), foreign.0.addr(), foreign.0.len()));
            if let Some(k) = stale.take() {
                keys = vec![k, k];
            }
            let wr = request(&mut rng, step, &keys);
            let ra = a.post_single(&dev.shared, &wr);
            let rb = b.post_general(&dev.shared, &wr);
            a.pass(&dev.shared);
            b.pass(&dev.shared);
            let at = format!("seed {seed} step {step} {wr:?}");
            assert_eq!(ra, rb, "{at}");
            assert!(a.wire() == b.wire(), "{at}");
            assert_eq!(a.completions(), b.completions(), "{at}");
            assert_eq!(a.core.state(), b.core.state(), "{at}");
            assert_eq!(a.conn.tx.is_flushed(), b.conn.tx.is_flushed(), "{at}");
            assert_eq!(a.core.send_queue_len(), b.core.send_queue_len(), "{at}");
        }
        a.writable(&dev.shared);
        b.writable(&dev.shared);
        assert!(a.wire() == b.wire(), "seed {seed} at the end");
        assert_eq!(a.completions(), b.completions(), "seed {seed} at the end");
        taken += a.single;
    }
    assert!(taken > 1500, "the single post took {taken} requests");
}
