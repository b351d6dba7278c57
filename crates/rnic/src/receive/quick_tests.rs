//! The claimed pass's receive ([`receive_claimed`]) against the general one
//! ([`receive`]): the same seeded streams of small Writes and Sends (with CRC and
//! without, one octet perhaps corrupted, the stream cut at every offset, perhaps
//! ended there by a FIN or a reset) end alike: the same octets placed, the same
//! completions in the same order, the same state, events and Terminate cause, and
//! the same reads of the socket.

use super::{Quick, receive_claimed};
use crate::device::{Device, DeviceConfig};
use crate::mr::Mr;
use crate::qp::{Conn, QpStats};
use crate::receive::{Driven, RX_STAGING_LEN, Staging, receive};
use crate::region::RegionSlice;
use crate::sys::socket::IoVecs;
use crate::transport::polled::PolledTransport;
use crate::transport::{ConnTransport, Transport};
use softrnic_proto::qp::Qp as Core;
use softrnic_proto::qp::{CqSide, QpConfig, QpEvent, QpParams, TxFpdu};
use softrnic_proto::tpt::{Tpt, TptEntry};
use softrnic_proto::{Access, Completion, QpId, QpState, RecvWr, RegionId, SendOp, SendWr, Sge};
use softrnic_wire::terminate::TerminateCause;
use std::collections::VecDeque;
use std::io;
use std::net::Shutdown;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// What the scripted socket answers, read by read.
#[derive(Debug, Clone)]
enum Answer {
    Data(Vec<u8>),
    Empty,
    Fin,
    Reset,
}

/// A socket that answers from a script: octets (as much as the read takes), an empty
/// queue (the kernel's `EAGAIN`), the end (again and again), a reset.
struct Script {
    answers: VecDeque<Answer>,
    /// The reads that reached the socket (a skipped one does not).
    reads: Arc<AtomicUsize>,
}

impl Transport for Script {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        match self.answers.pop_front() {
            Some(Answer::Data(mut d)) => {
                let n = d.len().min(buf.len());
                buf[..n].copy_from_slice(&d[..n]);
                if n < d.len() {
                    self.answers.push_front(Answer::Data(d.split_off(n)));
                }
                Ok(n)
            }
            Some(Answer::Empty) | None => Err(io::Error::from_raw_os_error(libc::EAGAIN)),
            Some(Answer::Fin) => {
                self.answers.push_front(Answer::Fin);
                Ok(0)
            }
            Some(Answer::Reset) => Err(io::Error::from_raw_os_error(libc::ECONNRESET)),
        }
    }

    fn read_into(&mut self, _: &RegionSlice<'_>) -> io::Result<usize> {
        unreachable!("small FPDUs are read ahead")
    }

    fn send(&mut self, buf: &[u8]) -> io::Result<usize> {
        Ok(buf.len())
    }

    fn send_gather(&mut self, iov: IoVecs<'_>) -> io::Result<usize> {
        Ok(iov.len())
    }

    fn shutdown(&mut self, _: Shutdown) -> io::Result<()> {
        Ok(())
    }

    fn abort(&mut self) {}
}

impl mio::event::Source for Script {
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

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The device, the memory the streams land in, and the receives posted for them.
struct Bench {
    dev: Device,
    pd: crate::mr::Pd,
    target: Mr,
    recv: Mr,
}

const RECVS: usize = 8;
const RECV_LEN: usize = 24;

impl Bench {
    fn new() -> Bench {
        let dev = Device::open(DeviceConfig::default()).unwrap();
        let pd = dev.alloc_pd();
        let target = pd
            .alloc_mr(256, Access::REMOTE_WRITE | Access::LOCAL_WRITE)
            .unwrap();
        let recv = pd.alloc_mr(RECVS * RECV_LEN, Access::LOCAL_WRITE).unwrap();
        Bench {
            dev,
            pd,
            target,
            recv,
        }
    }

    /// A stream of `msgs` small Writes and Sends (seeded), with or without CRC, one
    /// octet perhaps corrupted.
    fn stream(&self, seed: u64, msgs: usize, crc: bool, flip: bool) -> Vec<u8> {
        self.stream_of(seed, msgs, crc, flip, false)
    }

    /// [`Bench::stream`], of Writes only (to known STags) with `writes`.
    fn stream_of(&self, seed: u64, msgs: usize, crc: bool, flip: bool, writes: bool) -> Vec<u8> {
        let tpt = Tpt::new();
        let src_len = 64;
        let src: Vec<u8> = (0..src_len)
            .map(|i| splitmix(seed ^ i as u64) as u8)
            .collect();
        let lkey = tpt
            .insert(TptEntry {
                pd: self.pd.id(),
                key: 7,
                base: 0x1000,
                len: src_len as u64,
                access: Access::empty(),
                region: RegionId(0),
                valid: true,
            })
            .unwrap();
        let mut a = Core::new(QpConfig {
            id: QpId(1),
            pd: self.pd.id(),
            sq_depth: 64,
            rq_depth: 64,
        });
        a.connect(QpParams {
            crc,
            ..Default::default()
        })
        .unwrap();
        let mut wire = Vec::new();
        for i in 0..msgs {
            let r = splitmix(seed.wrapping_mul(31) ^ i as u64);
            let len = (r % 21) as usize;
            let from = 0x1000 + (r >> 8) % 40;
            let sgl = [Sge {
                addr: from,
                len: len as u32,
                lkey,
            }];
            let op = if writes || r & 0x80_0000 != 0 {
                let rkey = if !writes && r.is_multiple_of(97) {
                    // An STag the receiver does not know: a Terminate.
                    self.target.rkey() ^ 0x100
                } else {
                    self.target.rkey()
                };
                SendOp::Write {
                    remote_addr: self.target.addr() + (r >> 16) % 232,
                    rkey,
                }
            } else {
                SendOp::Send {
                    solicited: r & 0x100_0000 != 0,
                    invalidate: None,
                }
            };
            a.post_send(SendWr::new(i as u64, op, sgl), &tpt).unwrap();
            let mut f = TxFpdu::default();
            assert!(a.poll_transmit(&mut f));
            let mut v = f.header_bytes().to_vec();
            for c in &f.chunks {
                v.extend_from_slice(&src[c.offset as usize..c.offset as usize + c.len]);
            }
            v.extend(std::iter::repeat_n(0u8, f.pad_len()));
            let crc = softrnic_wire::crc::crc32c_append(0, &v);
            let (t, n) = f.trailer(crc);
            v.extend_from_slice(&t[f.pad_len()..n]);
            a.transmit_done();
            wire.extend(v);
        }
        if flip {
            let at = (splitmix(seed ^ 0xf11f) as usize) % wire.len();
            wire[at] ^= 1 + (seed as u8 % 255);
        }
        wire
    }

    /// A receiver with its receives posted (fewer than the Sends, for some seeds: a
    /// Send without a receive is a Terminate), and the memory cleared.
    fn receiver(&self, crc: bool, recvs: usize) -> Core {
        self.target.write(0, &[0; 256]).unwrap();
        self.recv.write(0, &[0; RECVS * RECV_LEN]).unwrap();
        let mut b = Core::new(QpConfig {
            id: QpId(2),
            pd: self.pd.id(),
            sq_depth: 64,
            rq_depth: 64,
        });
        b.connect(QpParams {
            crc,
            ..Default::default()
        })
        .unwrap();
        let tpt = &self.dev.shared.tpt;
        for i in 0..recvs {
            let sge = Sge {
                addr: self.recv.addr() + (i * RECV_LEN) as u64,
                len: RECV_LEN as u32,
                lkey: self.recv.lkey(),
            };
            b.post_recv(RecvWr::new(100 + i as u64, [sge]), tpt)
                .unwrap();
        }
        b
    }

    /// Feeds `script` to a fresh receiver, poll by poll: with `quick`, as a claimed
    /// consumer's pass does (`QpShared::claimed_pass`), otherwise by the general path
    /// alone. Returns what it ended with and how many times each outcome came.
    fn run(&self, script: &[Answer], crc: bool, recvs: usize, quick: bool) -> (End, [usize; 5]) {
        let mut core = self.receiver(crc, recvs);
        let claimed = Arc::new(AtomicBool::new(true));
        let reads = Arc::new(AtomicUsize::new(0));
        let mut conn = Conn {
            transport: ConnTransport::Polled(PolledTransport::new(
                Box::new(Script {
                    answers: script.iter().cloned().collect(),
                    reads: reads.clone(),
                }),
                claimed,
            )),
            tx: crate::transmit::TxQueue::default(),
        };
        let mut stats = QpStats::default();
        let mut staging = Staging {
            keep: true,
            ..Staging::default()
        };
        let dev = &*self.dev.shared;
        let at = Driven {
            qp: QpId(2),
            engine: 0,
        };
        let mut seen = [0; 5];
        // Every answer is taken by a poll that reads at most once more than it has
        // answers: twice as many polls leave none.
        for _ in 0..2 * script.len() + 2 {
            if core.transport_closed() {
                break;
            }
            if quick && !core.is_closing() && core.poll_timeout().is_none() {
                let q = receive_claimed(
                    at,
                    &mut core,
                    &mut conn,
                    &mut stats,
                    &mut staging,
                    dev,
                    None,
                    &mut softrnic_proto::qp::Queued,
                );
                seen[q as usize] += 1;
                match q {
                    Quick::Empty | Quick::Took | Quick::Simple => {}
                    Quick::Rest | Quick::General => {
                        receive(
                            at,
                            &mut core,
                            &mut conn,
                            &mut stats,
                            &mut staging,
                            dev,
                            None,
                        );
                    }
                }
            } else {
                receive(
                    at,
                    &mut core,
                    &mut conn,
                    &mut stats,
                    &mut staging,
                    dev,
                    None,
                );
            }
        }
        let mut target = vec![0; 256];
        self.target.read(0, &mut target).unwrap();
        let mut recv = vec![0; RECVS * RECV_LEN];
        self.recv.read(0, &mut recv).unwrap();
        let end = End {
            completions: std::iter::from_fn(|| core.poll_completion()).collect(),
            events: std::iter::from_fn(|| core.poll_event()).collect(),
            state: core.state(),
            fatal: core.fatal_cause(),
            closed: (core.peer_finished(), core.transport_closed()),
            target,
            recv,
            reads: (stats.rx_syscalls, reads.load(Ordering::Relaxed)),
            copied: stats.rx_copied_bytes,
        };
        (end, seen)
    }
}

/// What a receiver ended with.
#[derive(Debug, PartialEq, Eq)]
struct End {
    completions: Vec<(CqSide, Completion)>,
    events: Vec<QpEvent>,
    state: QpState,
    fatal: Option<(TerminateCause, bool)>,
    closed: (bool, bool),
    target: Vec<u8>,
    recv: Vec<u8>,
    /// Reads asked for, and those that reached the socket.
    reads: (u64, usize),
    copied: u64,
}

/// The stream cut at `k`: two reads' worth, an empty queue between, and after it an
/// empty queue, the end, or a reset.
fn cut(wire: &[u8], k: usize, tail: u64) -> Vec<Answer> {
    let mut s = vec![Answer::Empty];
    if k > 0 {
        s.extend([Answer::Data(wire[..k].to_vec()), Answer::Empty]);
    }
    match tail % 4 {
        // The end in the middle: the rest never comes.
        0 => s.push(Answer::Fin),
        1 => s.push(Answer::Reset),
        _ => {
            if k < wire.len() {
                s.extend([Answer::Data(wire[k..].to_vec()), Answer::Empty]);
            }
            if tail % 4 == 2 {
                s.push(Answer::Fin);
            }
        }
    }
    s
}

#[test]
fn a_claimed_pass_ends_every_cut_stream_as_the_general_path_does() {
    let bench = Bench::new();
    let mut seen = [0; 5];
    for seed in 0..24u64 {
        let crc = seed.is_multiple_of(2);
        let flip = seed.is_multiple_of(3);
        let msgs = 1 + (seed % 7) as usize;
        let recvs = if seed % 5 == 4 { 1 } else { RECVS };
        let wire = bench.stream(seed, msgs, crc, flip);
        for k in 0..=wire.len() {
            let script = cut(&wire, k, splitmix(seed ^ k as u64));
            let (general, _) = bench.run(&script, crc, recvs, false);
            let (quick, s) = bench.run(&script, crc, recvs, true);
            assert_eq!(
                quick,
                general,
                "seed {seed}, cut at {k} of {}, script {script:?}",
                wire.len()
            );
            for (a, b) in seen.iter_mut().zip(s) {
                *a += b;
            }
        }
    }
    // The claimed pass met empty queues, took reads itself and left ends and
    // failures to the general path. (`Rest` needs a read that fills the staging
    // buffer: the next test.)
    let [empty, took, _, general, simple] = seen;
    assert!(
        empty > 0 && took > 0 && simple > 0 && general > 0,
        "{seen:?}"
    );
}

#[test]
fn whole_small_fpdus_are_taken_in_one_pass_and_one_read() {
    let bench = Bench::new();
    for crc in [false, true] {
        // Writes and Sends, all well-formed.
        let wire = bench.stream(if crc { 2 } else { 1 }, 6, crc, false);
        // The first poll finds the queue empty (and takes the staging buffer the
        // claim keeps); the second brings the stream.
        let script = [Answer::Empty, Answer::Data(wire.clone()), Answer::Empty];
        let (general, _) = bench.run(&script, crc, RECVS, false);
        let (quick, seen) = bench.run(&script, crc, RECVS, true);
        assert_eq!(quick, general);
        assert_eq!(quick.state, QpState::Rts);
        assert_eq!(quick.fatal, None);
        // One pass took them all with the read that brought them, by the core's
        // simple path alone; the polls after it found the queue empty.
        assert_eq!(seen[Quick::Simple as usize], 1, "{seen:?}");
        assert_eq!(seen[Quick::Took as usize], 0, "{seen:?}");
        // Only the first poll, which took the buffer, was the general path's.
        assert_eq!(seen[Quick::General as usize], 1, "{seen:?}");
        assert_eq!(seen[Quick::Rest as usize], 0, "{seen:?}");
        // The read after the short one is skipped in the same pass, as the general
        // path skips it: the reads are the polls' and the one that brought them.
        assert_eq!(quick.reads, general.reads);
    }
}

#[test]
fn a_read_that_fills_the_staging_buffer_is_read_on_by_the_general_path() {
    let bench = Bench::new();
    // Small Writes, more than a staging buffer of them: the first read fills it and
    // ends inside an FPDU.
    let wire = bench.stream_of(5, 3000, true, false, true);
    assert!(wire.len() > RX_STAGING_LEN);
    let script = [Answer::Empty, Answer::Data(wire), Answer::Empty];
    let (general, _) = bench.run(&script, true, RECVS, false);
    let (quick, seen) = bench.run(&script, true, RECVS, true);
    assert_eq!(quick, general);
    assert_eq!(quick.fatal, None);
    assert_eq!(seen[Quick::Rest as usize], 1, "{seen:?}");
}
