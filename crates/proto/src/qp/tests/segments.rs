//! `Qp::handle_segment`: TCP segments handed in out of order, as softrnic's own TCP will
//! (each FPDU one segment, as an MPA-aware sender aligns them). What lands in memory and
//! what completes, in which order, must be exactly what the in-order stream gives.

use super::*;

/// A splitmix64 step: the permutations below replay from their seed.
fn next(seed: &mut u64) -> u64 {
    *seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *seed;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Everything `a` transmits, as (stream position, FPDU) segments.
fn segments(a: &mut Side) -> Vec<(u64, Vec<u8>)> {
    let mut at = 0u64;
    std::iter::from_fn(|| a.next_fpdu())
        .map(|f| {
            let s = (at, f);
            at += s.1.len() as u64;
            s
        })
        .collect()
}

/// Hands `segs` to `b` in a shuffled order (Fisher-Yates with `seed`, swaps only within
/// `window` places, as reordering on a path does), keeping what `b` says to keep and
/// handing it in again, in order, after each segment, as a TCP reassembly queue does.
/// Returns how many segments were taken ahead of the stream.
fn deliver_shuffled(
    b: &mut Side,
    mut segs: Vec<(u64, Vec<u8>)>,
    seed: u64,
    window: usize,
) -> usize {
    let mut s = seed;
    for i in 0..segs.len() {
        let j = i + (next(&mut s) as usize) % window.min(segs.len() - i);
        segs.swap(i, j);
    }
    let mut kept: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut ahead = 0;
    for seg in segs {
        let before = b.qp.rx_position();
        match b.segment(seg.0, &seg.1) {
            SegmentOutcome::Keep => kept.push(seg),
            SegmentOutcome::Taken if seg.0 > before => ahead += 1,
            _ => {}
        }
        // Whatever the stream now reaches goes in, oldest first.
        kept.sort_by_key(|k| k.0);
        while let Some(k) = kept.first() {
            if k.0 > b.qp.rx_position() {
                break;
            }
            let k = kept.remove(0);
            assert_ne!(
                b.segment(k.0, &k.1),
                SegmentOutcome::Keep,
                "in order, taken"
            );
        }
    }
    assert!(kept.is_empty(), "segments left over: {}", kept.len());
    ahead
}

impl Side {
    fn segment(&mut self, seq: u64, bytes: &[u8]) -> SegmentOutcome {
        let mem = &mut self.mem;
        self.qp
            .handle_segment(seq, bytes, &mut RxCtx::new(&self.tpt), &mut |c, data| {
                let r = &mut mem[c.region.0 as usize];
                r[c.offset as usize..c.offset as usize + data.len()].copy_from_slice(data);
            })
    }
}

/// Three multi-FPDU Sends (one with Invalidate and Solicited) and two Writes, from `a`
/// to `b`; returns the two sides, with `b`'s receives posted, the posts made, and the
/// regions: (b's Send target, b's Write target, a's source).
fn workload(crc: bool) -> (Side, Side, [STag; 3]) {
    workload_with(QpParams {
        crc,
        max_fpdu: 256,
        ..Default::default()
    })
}

/// [`workload`] on connections with parameters `p`.
fn workload_with(p: QpParams) -> (Side, Side, [STag; 3]) {
    let (mut a, mut b) = pair(p);
    let (src, sbase) = a.reg(20_000, Access::empty(), 1);
    let (rdst, rbase) = b.reg(12_000, Access::LOCAL_WRITE, 2);
    let (wdst, wbase) = b.reg(8_000, Access::LOCAL_WRITE | Access::REMOTE_WRITE, 3);
    let (inv, _) = b.reg(16, Access::REMOTE_WRITE | Access::REMOTE_INVALIDATE, 4);
    for (i, at) in [0u64, 4_000, 8_000].into_iter().enumerate() {
        b.qp.post_recv(
            RecvWr {
                wr_id: 100 + i as u64,
                sgl: [sge(rdst, rbase + at, 4_000)].into(),
            },
            &b.tpt,
        )
        .unwrap();
    }
    let sends = [
        (1u64, 0u64, 3_001usize, None),
        (2, 3_001, 2_500, Some(inv)),
        (3, 5_501, 3_999, None),
    ];
    for (wr_id, off, len, invalidate) in sends {
        let mut wr = send_wr(wr_id, [sge(src, sbase + off, len)]);
        wr.op = SendOp::Send {
            solicited: invalidate.is_some(),
            invalidate,
        };
        a.qp.post_send(wr, &a.tpt).unwrap();
        let w = SendWr {
            wr_id: wr_id + 10,
            op: SendOp::Write {
                remote_addr: wbase + off,
                rkey: wdst,
            },
            sgl: [sge(src, sbase + 10_000 + off, len.min(2_000))].into(),
            signaled: true,
            fence: false,
        };
        a.qp.post_send(w, &a.tpt).unwrap();
    }
    (a, b, [rdst, wdst, src])
}

#[test]
fn segments_in_any_order_place_and_complete_as_in_order() {
    // The reference: the same workload through the in-order stream.
    let (mut ra, mut rb, [rd, wd, _]) = workload(true);
    pump(&mut ra, &mut rb, false);
    let want_cb = rb.completions();
    let want_events: Vec<QpEvent> = std::iter::from_fn(|| rb.qp.poll_event()).collect();
    assert_eq!(want_cb.len(), 3);
    assert_eq!(want_events, [QpEvent::Solicited]);
    let mut total_ahead = 0;
    for seed in 0..40u64 {
        let (mut a, mut b, [rdst, wdst, _]) = workload(true);
        let segs = segments(&mut a);
        assert!(segs.len() > 60, "many FPDUs: {}", segs.len());
        total_ahead += deliver_shuffled(&mut b, segs, seed, 8);
        assert_eq!(b.region(rdst), rb.region(rd), "seed {seed}: Send data");
        assert_eq!(b.region(wdst), rb.region(wd), "seed {seed}: Write data");
        assert_eq!(b.completions(), want_cb, "seed {seed}: receive completions");
        let events: Vec<QpEvent> = std::iter::from_fn(|| b.qp.poll_event()).collect();
        assert_eq!(events, want_events, "seed {seed}");
        assert_eq!(b.qp.state(), QpState::Rts);
        assert_eq!(b.qp.recv_queue_len(), 0);
    }
    // The shuffles did put FPDUs ahead of holes (else this test shows nothing).
    assert!(
        total_ahead > 200,
        "FPDUs placed ahead of the stream: {total_ahead}"
    );
}

#[test]
fn without_crc_nothing_is_taken_ahead() {
    let (mut a, mut b, [rdst, wdst, _]) = workload(false);
    let (mut ra, mut rb, [rd, wd, _]) = workload(false);
    pump(&mut ra, &mut rb, false);
    let segs = segments(&mut a);
    assert_eq!(deliver_shuffled(&mut b, segs, 7, 8), 0);
    assert_eq!(b.region(rdst), rb.region(rd));
    assert_eq!(b.region(wdst), rb.region(wd));
    assert_eq!(b.completions(), rb.completions());
}

#[test]
fn a_bad_segment_ahead_is_kept_and_terminates_in_order() {
    let (mut a, mut b, _) = workload(true);
    let mut segs = segments(&mut a);
    // Point one Write FPDU at an STag no region has (and fix its CRC, so only the STag
    // is wrong).
    let i = segs
        .iter()
        .position(|(_, f)| f[2] & 0x80 != 0)
        .expect("a tagged FPDU");
    let f = &mut segs[i].1;
    f[4..8].copy_from_slice(&0x0077_7742u32.to_be_bytes());
    let n = f.len();
    let crc = softrnic_wire::crc::crc32c(&f[..n - 4]);
    f[n - 4..].copy_from_slice(&crc.to_le_bytes());
    let (seq, bad) = segs.remove(i);
    // Ahead of the stream it is kept, and changes nothing.
    assert!(seq > 0);
    assert_eq!(b.segment(seq, &bad), SegmentOutcome::Keep);
    assert_eq!(b.qp.state(), QpState::Rts);
    // When the stream reaches it, it is the in-order fault: invalid STag (DDP 1/0).
    for (s, f) in segs.iter().filter(|(s, _)| *s < seq) {
        assert_eq!(b.segment(*s, f), SegmentOutcome::Taken);
    }
    assert_eq!(b.segment(seq, &bad), SegmentOutcome::Stopped);
    assert_eq!(
        b.qp.fatal_cause(),
        Some((TerminateCause::new(Layer::Ddp, 1, 0), false))
    );
}

#[test]
fn after_to_error_nothing_more_is_taken_or_placed() {
    let (mut a, mut b, [_, wdst, _]) = workload(true);
    let before = b.region(wdst).to_vec();
    let segs = segments(&mut a);
    b.qp.to_error();
    assert_eq!(b.qp.rx_need(), RxNeed::Stopped);
    for (seq, f) in &segs {
        assert_eq!(b.segment(*seq, f), SegmentOutcome::Stopped);
    }
    assert_eq!(b.region(wdst), &before[..], "nothing placed after to_error");
}

#[test]
fn with_markers_segments_are_taken_in_order_only() {
    let p = QpParams {
        crc: true,
        max_fpdu: 256,
        markers_tx: true,
        markers_rx: true,
        ..Default::default()
    };
    let (mut ra, mut rb, [rd, wd, _]) = workload_with(p);
    pump(&mut ra, &mut rb, false);
    let want_cb = rb.completions();
    assert_eq!(want_cb.len(), 3);
    for seed in 0..10u64 {
        let (mut a, mut b, [rdst, wdst, _]) = workload_with(p);
        let segs = segments(&mut a);
        // A marked stream's segments are found by position, in order: none ahead.
        assert_eq!(deliver_shuffled(&mut b, segs, seed, 8), 0, "seed {seed}");
        assert_eq!(b.region(rdst), rb.region(rd), "seed {seed}: Send data");
        assert_eq!(b.region(wdst), rb.region(wd), "seed {seed}: Write data");
        assert_eq!(b.completions(), want_cb, "seed {seed}");
        assert_eq!(b.qp.state(), QpState::Rts);
    }
}
