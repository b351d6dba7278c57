//! RFC 5044 markers on the data path: every message kind places exactly the octets sent
//! whatever the FPDU sizes (around the 512-octet marker spacing) and however the
//! octets are cut into reads; every marker on the wire is where the wire crate's own
//! deframer expects it; a bad marker ends in the MPA Terminate at both ends.

use super::*;
use softrnic_wire::mpa::Deframer;

fn marked(crc: bool, max_fpdu: usize) -> QpParams {
    QpParams {
        crc,
        max_fpdu,
        markers_tx: true,
        markers_rx: true,
        ..Default::default()
    }
}

/// Payload octets that fill one FPDU of `max_fpdu` with markers for an untagged
/// message (the MULPDU less the header): the transmit path's own sizing.
fn mulpdu_send(max_fpdu: usize) -> usize {
    let budget = softrnic_wire::markers::unmarked_budget(max_fpdu);
    softrnic_wire::mpa::max_ulpdu_for(budget).unwrap() - softrnic_wire::ddp::UNTAGGED_HEADER_LEN
}

/// Sends, Writes and Reads of every size in `sizes`, one after another on one
/// connection (so that FPDUs start at many stream positions), over `link`; checks the
/// octets placed and the completions, and that both directions' streams deframe with
/// the wire crate's marker-checking deframer.
fn exchange(p: QpParams, sizes: &[usize], chunking: Chunking) {
    let (mut a, mut b) = pair(p);
    let total: usize = sizes.iter().sum::<usize>().max(1);
    let (src, sbase) = a.reg(total, Access::empty(), 1);
    let (sink, kbase) = a.reg(total, Access::LOCAL_WRITE, 2);
    let (rdst, rbase) = b.reg(total, Access::LOCAL_WRITE, 3);
    let (wdst, wbase) = b.reg(total, Access::REMOTE_WRITE | Access::REMOTE_READ, 4);
    let mut link = Link::new(chunking);
    link.record = true;
    let mut at = 0u64;
    let mut want_a = Vec::new();
    for (i, &n) in sizes.iter().enumerate() {
        let i = i as u64 * 3;
        b.qp.post_recv(
            RecvWr {
                wr_id: i,
                sgl: [sge(rdst, rbase + at, n)].into(),
            },
            &b.tpt,
        )
        .unwrap();
        a.qp.post_send(send_wr(i, [sge(src, sbase + at, n)]), &a.tpt)
            .unwrap();
        let write = SendOp::Write {
            remote_addr: wbase + at,
            rkey: wdst,
        };
        let read = SendOp::Read {
            remote_addr: wbase + at,
            rkey: wdst,
        };
        for (id, op, sgl) in [
            (i + 1, write, sge(src, sbase + at, n)),
            (i + 2, read, sge(sink, kbase + at, n)),
        ] {
            let wr = SendWr {
                wr_id: id,
                op,
                sgl: [sgl].into(),
                signaled: true,
                fence: true,
            };
            a.qp.post_send(wr, &a.tpt).unwrap();
        }
        link.run(&mut a, &mut b);
        want_a.extend([
            (i, WcOpcode::Send, n as u32),
            (i + 1, WcOpcode::Write, n as u32),
            (i + 2, WcOpcode::Read, n as u32),
        ]);
        at += n as u64;
    }
    let ctx = format!("{p:?} {chunking:?}");
    let at = at as usize;
    assert_eq!(
        &b.region(rdst)[..at],
        &a.region(src)[..at],
        "Send data, {ctx}"
    );
    assert_eq!(
        &b.region(wdst)[..at],
        &a.region(src)[..at],
        "Write data, {ctx}"
    );
    assert_eq!(
        &a.region(sink)[..at],
        &a.region(src)[..at],
        "Read data, {ctx}"
    );
    let ca: Vec<_> = a
        .completions()
        .into_iter()
        .map(|(_, c)| {
            assert_eq!(c.status, WcStatus::Success, "{ctx}");
            (c.wr_id, c.opcode, c.byte_len)
        })
        .collect();
    assert_eq!(ca, want_a, "{ctx}");
    let cb: Vec<_> = b
        .completions()
        .into_iter()
        .map(|(_, c)| (c.wr_id, c.status, c.byte_len))
        .collect();
    let want_b: Vec<_> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| (i as u64 * 3, WcStatus::Success, n as u32))
        .collect();
    assert_eq!(cb, want_b, "{ctx}");
    // Every marker where RFC 5044 puts it, as an independent parser sees it.
    for stream in &link.recorded {
        let mut d = Deframer::new(true, p.crc);
        let mut scratch = vec![0u8; softrnic_wire::mpa::MAX_FPDU_LEN];
        let mut rest = &stream[..];
        while !rest.is_empty() {
            let f = d.next(rest, &mut scratch).expect("a well-marked FPDU");
            rest = &rest[f.consumed..];
        }
        assert!(stream.len() > 512, "markers were due: {}", stream.len());
    }
}

#[test]
fn messages_around_the_marker_spacing_place_exact_octets_in_any_reads() {
    let max = 1448;
    let sizes = [0, 1, 511, 512, 513, mulpdu_send(max), 3 * 1024 + 5, 65537];
    for crc in [false, true] {
        for chunking in [
            Chunking::Whole,
            Chunking::Primes,
            Chunking::Seeded { seed: 7, max: 600 },
        ] {
            exchange(marked(crc, max), &sizes, chunking);
        }
    }
}

#[test]
fn fpdus_of_every_length_near_a_marker_in_one_octet_reads() {
    // Small FPDUs whose ends fall at every 4-octet offset around the marker positions.
    let sizes: Vec<usize> = (0..40).map(|i| 480 + i * 4 + i % 4).collect();
    for crc in [false, true] {
        exchange(
            marked(crc, 700),
            &sizes,
            Chunking::Seeded { seed: 3, max: 1 },
        );
        exchange(
            marked(crc, 256),
            &sizes,
            Chunking::Seeded { seed: 11, max: 37 },
        );
    }
}

#[test]
fn seeded_cuts_and_fpdu_sizes() {
    for seed in 0..24u64 {
        let max = 64 + (pair::splitmix(seed) % 3000) as usize;
        let sizes: Vec<usize> = (0..6)
            .map(|i| (pair::splitmix(seed * 31 + i) % 5000) as usize)
            .collect();
        let chunking = Chunking::Seeded {
            seed,
            max: 1 + (seed as usize * 97) % 2000,
        };
        exchange(marked(seed % 2 == 0, max), &sizes, chunking);
    }
}

#[test]
fn markers_in_one_direction_only() {
    // a inserts markers for b (b set M); b sends a plain stream back.
    let pa = QpParams {
        markers_tx: true,
        ..Default::default()
    };
    let pb = QpParams {
        markers_rx: true,
        ..Default::default()
    };
    let (mut a, mut b) = (Side::new(1, pa), Side::new(2, pb));
    let n = 5000;
    let (src, sbase) = a.reg(n, Access::empty(), 1);
    let (sink, kbase) = a.reg(n, Access::LOCAL_WRITE, 2);
    let (t, tbase) = b.reg(n, Access::REMOTE_WRITE | Access::REMOTE_READ, 3);
    for (id, op, sgl) in [
        (
            1,
            SendOp::Write {
                remote_addr: tbase,
                rkey: t,
            },
            sge(src, sbase, n),
        ),
        (
            2,
            SendOp::Read {
                remote_addr: tbase,
                rkey: t,
            },
            sge(sink, kbase, n),
        ),
    ] {
        let wr = SendWr {
            wr_id: id,
            op,
            sgl: [sgl].into(),
            signaled: true,
            fence: true,
        };
        a.qp.post_send(wr, &a.tpt).unwrap();
    }
    let mut link = Link::new(Chunking::Primes);
    link.record = true;
    link.run(&mut a, &mut b);
    assert_eq!(b.region(t), a.region(src));
    assert_eq!(a.region(sink), a.region(src));
    assert_eq!(a.completions().len(), 2);
    let mut scratch = vec![0u8; softrnic_wire::mpa::MAX_FPDU_LEN];
    // a -> b is marked, b -> a (the Read Responses) is not.
    for (dir, markers) in [(0, true), (1, false)] {
        let mut d = Deframer::new(markers, false);
        let mut rest = &link.recorded[dir][..];
        while !rest.is_empty() {
            rest = &rest[d.next(rest, &mut scratch).unwrap().consumed..];
        }
    }
}

/// A Send of `n` octets from a to b with the octets `at..at + 4` of its first FPDU on
/// the wire replaced by `marker`; returns the causes b sent and a received.
fn corrupt_marker(crc: bool, at: usize, marker: [u8; 4]) -> [Option<(TerminateCause, bool)>; 2] {
    let (mut a, mut b) = pair(marked(crc, 1448));
    let (s, base) = a.reg(1200, Access::empty(), 0);
    let (d, dbase) = b.reg(1200, Access::LOCAL_WRITE, 0);
    b.qp.post_recv(
        RecvWr {
            wr_id: 5,
            sgl: [sge(d, dbase, 1200)].into(),
        },
        &b.tpt,
    )
    .unwrap();
    a.qp.post_send(send_wr(1, [sge(s, base, 1200)]), &a.tpt)
        .unwrap();
    let mut f = a.next_fpdu().unwrap();
    f[at..at + 4].copy_from_slice(&marker);
    b.feed(&f, true);
    assert_eq!(b.qp.state(), QpState::Terminate);
    pump(&mut a, &mut b, false);
    let cb: Vec<_> = b
        .completions()
        .into_iter()
        .map(|(_, c)| (c.wr_id, c.status))
        .collect();
    assert_eq!(cb, vec![(5, WcStatus::WrFlushError)]);
    [b.qp.fatal_cause(), a.qp.fatal_cause()]
}

#[test]
fn a_bad_marker_is_an_mpa_terminate_at_both_ends() {
    let mismatch = TerminateCause::new(Layer::Llp, 0, 0x03);
    for crc in [false, true] {
        // The leading marker at 0 (FPDUPTR 0), the one at 512 (FPDUPTR 508): a wrong
        // pointer, a pointer to another FPDU, a reserved half not zero.
        for (at, marker) in [
            (0, [0, 0, 0, 4]),
            (512, [0, 0, 0x01, 0xfc - 4]),
            (512, [0, 0, 0, 0]),
            (512, [0x80, 0, 0x01, 0xfc]),
        ] {
            assert_eq!(
                corrupt_marker(crc, at, marker),
                [Some((mismatch, false)), Some((mismatch, true))],
                "crc {crc}, marker at {at}: {marker:?}"
            );
        }
    }
}

#[test]
fn markers_are_inside_the_crc() {
    // RFC 5044 (and Wireshark) compute the CRC over the FPDU as it is on the wire,
    // markers included. The marker at 512 points 508 back (to the length field after
    // the leading marker); a payload octet flipped after it is a CRC error.
    let (mut a, mut b) = pair(marked(true, 1448));
    let (s, base) = a.reg(1200, Access::empty(), 0);
    let (d, dbase) = b.reg(1200, Access::LOCAL_WRITE, 0);
    b.qp.post_recv(
        RecvWr {
            wr_id: 5,
            sgl: [sge(d, dbase, 1200)].into(),
        },
        &b.tpt,
    )
    .unwrap();
    a.qp.post_send(send_wr(1, [sge(s, base, 1200)]), &a.tpt)
        .unwrap();
    let f = a.next_fpdu().unwrap();
    assert_eq!(&f[0..4], &[0, 0, 0, 0], "leading marker");
    assert_eq!(&f[512..516], &[0, 0, 0x01, 0xfc], "FPDUPTR 508");
    let mut g = f.clone();
    g[600] ^= 1;
    let mut c = b;
    c.feed(&g, false);
    assert_eq!(
        c.qp.fatal_cause(),
        Some((TerminateCause::new(Layer::Llp, 0, 0x02), false))
    );
    // And the CRC field is the CRC32c of every octet before it, markers included.
    let n = f.len();
    let crc = softrnic_wire::crc::crc32c(&f[..n - 4]);
    assert_eq!(&f[n - 4..], &crc.to_le_bytes());
}

#[test]
fn the_rtr_is_the_first_marked_fpdu() {
    // RFC 6581 peer-to-peer: the initiator's zero-length Write is the first FPDU of its
    // stream, so it opens with the marker at position 0.
    let p = |rtr: Option<RtrKind>| QpParams {
        send_rtr: rtr,
        await_rtr: rtr.is_none(),
        ..marked(true, 1448)
    };
    let (mut a, mut b) = (Side::new(1, p(Some(RtrKind::Write))), Side::new(2, p(None)));
    let (s, base) = b.reg(600, Access::empty(), 0);
    let (d, dbase) = a.reg(600, Access::LOCAL_WRITE, 0);
    a.qp.post_recv(
        RecvWr {
            wr_id: 1,
            sgl: [sge(d, dbase, 600)].into(),
        },
        &a.tpt,
    )
    .unwrap();
    b.qp.post_send(send_wr(2, [sge(s, base, 600)]), &b.tpt)
        .unwrap();
    assert!(b.next_fpdu().is_none(), "held until the RTR");
    let rtr = a.next_fpdu().unwrap();
    assert_eq!(
        rtr.len(),
        4 + 2 + 14 + 4,
        "marker and a zero-length RDMA Write"
    );
    assert_eq!(&rtr[..4], &[0, 0, 0, 0]);
    b.feed(&rtr, true);
    pump(&mut a, &mut b, true);
    assert_eq!(a.region(d), b.region(s));
    assert_eq!(a.completions().len(), 1);
    assert_eq!(b.completions().len(), 1);
}

#[test]
fn a_stream_that_ends_inside_a_leading_marker_is_mid_fpdu() {
    // A stream cut after a marker that leads an FPDU was cut inside that FPDU (lost),
    // not closed between FPDUs: a sender never ends its stream with a marker.
    let (mut a, _) = pair(marked(false, 1448));
    let (s, base) = a.reg(8, Access::empty(), 0);
    a.qp.post_send(send_wr(1, [sge(s, base, 8)]), &a.tpt)
        .unwrap();
    let f = a.next_fpdu().unwrap();
    assert_eq!(&f[..4], &[0, 0, 0, 0], "the leading marker");
    for n in 0..=4 {
        let (_, mut b) = pair(marked(false, 1448));
        b.feed(&f[..n], false);
        assert_eq!(
            b.qp.rx_mid_fpdu(),
            n > 0,
            "{n} octets of the leading marker"
        );
    }
}
