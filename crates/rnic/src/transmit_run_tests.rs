//! A run of direct posts (`Core::post_small_run`, written by `append_small`) against
//! the wire crate's framer: the octets of a run of mixed Sends and Writes (every pad
//! length, CRC off and on) are the framer's FPDUs back to back, and a request in the
//! middle that the run cannot take (a misuse, or an SGE the TPT refuses) ends it with
//! the requests before it posted and completed, itself untouched, and nothing after it
//! written.

use super::*;
use softrnic_proto::qp::{PostError, QpConfig, QpParams};
use softrnic_proto::tpt::{Tpt, TptEntry};
use softrnic_proto::{
    Access, Completion, PdId, QpState, RegionId, STag, SendOp, Sge, WcOpcode, WcStatus,
};
use softrnic_wire::ddp::{DdpRepr, Placement};
use softrnic_wire::rdmap::{Opcode, QN_SEND};

const REGION: usize = 4096;

struct Rig {
    core: Core,
    tpt: Tpt,
    lkey: STag,
    region: Region,
    pattern: Vec<u8>,
}

fn rig(crc: bool) -> Rig {
    let tpt = Tpt::new();
    let lkey = tpt
        .insert(TptEntry {
            pd: PdId(1),
            key: 1,
            base: 0,
            len: REGION as u64,
            access: Access::empty(),
            region: RegionId(1),
            valid: true,
        })
        .unwrap();
    let mut core = Core::new(QpConfig {
        id: QpId(1),
        pd: PdId(1),
        sq_depth: 64,
        rq_depth: 4,
    });
    core.connect(QpParams {
        crc,
        ord: 4,
        ..QpParams::default()
    })
    .unwrap();
    let region = Region::alloc(RegionId(1), REGION).unwrap();
    let pattern: Vec<u8> = (0..REGION as u32).map(|i| (i * 13 + 5) as u8).collect();
    region.write(0, &pattern).unwrap();
    Rig {
        core,
        tpt,
        lkey,
        region,
        pattern,
    }
}

impl Rig {
    fn sge(&self, addr: u64, len: u32) -> Sge {
        Sge {
            addr,
            len,
            lkey: self.lkey,
        }
    }

    /// Posts `wrs` as `Qp::post_send_batch` does: runs, and the request that ends one
    /// posted the general way (here `post_send_ref`: nothing it queues is written);
    /// stops at the first error. The octets the runs wrote are appended to `out`.
    fn post(&mut self, wrs: &[SendWr], out: &mut Vec<u8>) -> Result<(), PostError> {
        let mut it = wrs.iter();
        loop {
            let end = self.core.post_small_run(&self.tpt, &mut it, |f| {
                if append_small(f, &self.region, out) {
                    Gathered::Taken
                } else {
                    Gathered::Lost
                }
            });
            assert!(!end.lost);
            let Some(wr) = end.rest else {
                return Ok(());
            };
            self.core.post_send_ref(wr, &self.tpt)?;
        }
    }

    /// The framer's FPDU for `wr` (a one-SGE Send or Write), `msn` its Send's MSN.
    fn framed(&self, wr: &SendWr, msn: u32, crc: bool) -> Vec<u8> {
        let sge = wr.sgl[0];
        framed(
            wr,
            &self.pattern[sge.addr as usize..][..sge.len as usize],
            msn,
            crc,
        )
    }

    /// The framer's FPDUs of `wrs` back to back, Sends numbered from `msn` on.
    fn framed_all(&self, wrs: &[SendWr], mut msn: u32, crc: bool) -> (Vec<u8>, u32) {
        let mut out = Vec::new();
        for wr in wrs {
            out.extend(self.framed(wr, msn, crc));
            if matches!(wr.op, SendOp::Send { .. }) {
                msn += 1;
            }
        }
        (out, msn)
    }

    fn completions(&mut self) -> Vec<(u64, WcStatus, WcOpcode, u32)> {
        std::iter::from_fn(|| self.core.poll_completion())
            .map(|(_, c): (_, Completion)| (c.wr_id, c.status, c.opcode, c.byte_len))
            .collect()
    }
}

/// Sends (plain, solicited, with invalidate) and Writes of 0-7, 13, 64 and 80 octets
/// (pads 3, 2, 1, 0 in turn), from offsets all over the region, every third signaled.
fn mixed(r: &Rig, ids: std::ops::Range<u64>) -> Vec<SendWr> {
    ids.map(|i| {
        let len = [0u32, 1, 2, 3, 4, 5, 6, 7, 13, 64, 80][i as usize % 11];
        let sge = r.sge(i * 37 % 3000, len);
        let wr = match i % 4 {
            0 => SendWr::send(i, [sge]),
            1 => SendWr::write(i, [sge], 0x1_0000_0000 + i * 1000, 0x4400 + i as u32),
            2 => SendWr::send(i, [sge]).solicited(),
            _ => SendWr::send(i, [sge]).invalidate(0x7700 + i as u32),
        };
        if i % 3 == 2 { wr } else { wr.unsignaled() }
    })
    .collect()
}

fn signaled(wrs: &[SendWr]) -> Vec<(u64, WcStatus, WcOpcode, u32)> {
    wrs.iter()
        .filter(|wr| wr.signaled)
        .map(|wr| {
            let op = match wr.op {
                SendOp::Write { .. } => WcOpcode::Write,
                _ => WcOpcode::Send,
            };
            (wr.wr_id, WcStatus::Success, op, wr.sgl[0].len)
        })
        .collect()
}

/// A whole run of mixed requests is the framer's FPDUs back to back, and completes
/// the signaled ones in order.
#[test]
fn a_run_of_mixed_requests_is_the_framers_fpdus() {
    for crc in [false, true] {
        let mut r = rig(crc);
        let wrs = mixed(&r, 0..40);
        let mut out = vec![0xee; 3];
        r.post(&wrs, &mut out).unwrap();
        let (want, _) = r.framed_all(&wrs, 1, crc);
        assert_eq!(&out[..3], &[0xee; 3]);
        assert!(out[3..] == want[..], "crc {crc}");
        assert_eq!(r.completions(), signaled(&wrs), "crc {crc}");
    }
}

/// A misuse in the middle of a batch (a Read with two SGEs) returns its error: the
/// requests before it are written and completed, nothing of it or after it is
/// written, the QP stays in RTS, and the next batch goes on with the next MSN.
#[test]
fn a_misuse_in_the_middle_of_a_run_ends_it_after_the_requests_before() {
    for crc in [false, true] {
        let mut r = rig(crc);
        let mut wrs = mixed(&r, 0..20);
        let bad = SendWr::new(
            99,
            SendOp::Read {
                remote_addr: 0,
                rkey: 0x100,
            },
            [r.sge(0, 8), r.sge(8, 8)],
        );
        wrs.insert(9, bad);
        let mut out = Vec::new();
        assert_eq!(r.post(&wrs, &mut out), Err(PostError::ReadNeedsOneSge));
        let (want, msn) = r.framed_all(&wrs[..9], 1, crc);
        assert!(out == want, "crc {crc}");
        assert_eq!(r.completions(), signaled(&wrs[..9]));
        assert_eq!(r.core.state(), QpState::Rts);
        let mut more = Vec::new();
        r.post(&wrs[10..], &mut more).unwrap();
        assert!(more == r.framed_all(&wrs[10..], msn, crc).0, "crc {crc}");
        assert_eq!(r.completions(), signaled(&wrs[10..]));
    }
}

/// An SGE outside its region in the middle of a run: the requests before it are
/// written and completed, it completes with LocalProtectionError (the general path's
/// check), the QP fails, and the requests after it are flushed, none written.
#[test]
fn a_refused_sge_in_the_middle_of_a_run_fails_it_as_the_general_path_does() {
    for crc in [false, true] {
        let mut r = rig(crc);
        let mut wrs = mixed(&r, 0..20);
        wrs.insert(7, SendWr::write(77, [r.sge(REGION as u64 - 4, 8)], 0, 1));
        let mut out = Vec::new();
        r.post(&wrs, &mut out).unwrap();
        assert!(out == r.framed_all(&wrs[..7], 1, crc).0, "crc {crc}");
        let mut want = signaled(&wrs[..7]);
        want.push((77, WcStatus::LocalProtectionError, WcOpcode::Write, 0));
        want.extend(wrs[8..].iter().map(|wr| {
            let op = match wr.op {
                SendOp::Write { .. } => WcOpcode::Write,
                _ => WcOpcode::Send,
            };
            (wr.wr_id, WcStatus::WrFlushError, op, 0)
        }));
        assert_eq!(r.completions(), want, "crc {crc}");
        assert_eq!(r.core.state(), QpState::Error);
    }
}

/// The wire crate's framing of a one-SGE Send or Write carrying `payload`, `msn` its
/// Send's MSN: what the transmit paths' octets are compared with (here and in the
/// single post's tests).
pub(super) fn framed(wr: &SendWr, payload: &[u8], msn: u32, crc: bool) -> Vec<u8> {
    let h = match wr.op {
        SendOp::Write { remote_addr, rkey } => DdpRepr {
            last: true,
            opcode: Opcode::Write,
            placement: Placement::Tagged {
                stag: rkey,
                to: remote_addr,
            },
        },
        SendOp::Send {
            solicited,
            invalidate,
        } => DdpRepr {
            last: true,
            opcode: match (solicited, invalidate.is_some()) {
                (false, false) => Opcode::Send,
                (true, false) => Opcode::SendSe,
                (false, true) => Opcode::SendInvalidate,
                (true, true) => Opcode::SendSeInvalidate,
            },
            placement: Placement::Untagged {
                rsvd_ulp: invalidate.unwrap_or(0),
                qn: QN_SEND,
                msn,
                mo: 0,
            },
        },
        _ => unreachable!("only Sends and Writes are framed here"),
    };
    let (bytes, n) = h.to_bytes();
    let mut out = Vec::new();
    mpa::append_fpdu(&[&bytes[..n], payload], crc, None, &mut out).unwrap();
    out
}
