//! The next-header guess of an I/O layer that reads exactly (`Qp::rx_next_header_len`,
//! used by rnic's exact receive mode): a payload's last piece, its trailer and the next
//! FPDU's header come in one read. Within a run of Sends the guess is the untagged
//! header, so each FPDU costs one read; a lone Send between Writes keeps the tagged
//! guess, so no read meant for a header brings in payload octets.

use super::*;

/// What reading a stream exactly cost.
#[derive(Debug, PartialEq, Eq)]
struct Cost {
    reads: usize,
    /// Payload octets that a read for a trailer and header brought in (an I/O layer
    /// must copy them out of its staging buffer).
    copied: usize,
}

/// Reads `stream` into `b` as rnic's exact mode does, with every octet already there:
/// a payload's last piece with its trailer and `rx_next_header_len` octets after them
/// in one read, any other need exactly; octets read beyond a need wait in a staging
/// buffer and go to the core first.
fn read_exactly(b: &mut Side, stream: &[u8]) -> Cost {
    let mut cost = Cost {
        reads: 0,
        copied: 0,
    };
    let mut at = 0;
    let mut staged: Vec<u8> = Vec::new();
    loop {
        let ctx = &mut RxCtx::new(&b.tpt);
        let need = b.qp.rx_need();
        if !staged.is_empty() {
            match need {
                RxNeed::Internal(n) => {
                    let k = n.min(staged.len());
                    b.qp.rx_buffer()[..k].copy_from_slice(&staged[..k]);
                    staged.drain(..k);
                    b.qp.rx_filled(k, ctx);
                }
                RxNeed::Place(c) => {
                    let k = c.len.min(staged.len());
                    let m = &mut b.mem[c.region.0 as usize];
                    m[c.offset as usize..c.offset as usize + k].copy_from_slice(&staged[..k]);
                    b.qp.rx_placed(&staged[..k]);
                    staged.drain(..k);
                    cost.copied += k;
                }
                other => panic!("{other:?} with octets staged"),
            }
            continue;
        }
        if at == stream.len() {
            return cost;
        }
        cost.reads += 1;
        match need {
            RxNeed::Internal(n) => {
                staged.extend_from_slice(&stream[at..(at + n).min(stream.len())]);
                at += staged.len();
            }
            RxNeed::Place(c) => {
                let tail = b.qp.rx_trailer_after_place();
                let k = c.len.min(stream.len() - at);
                let m = &mut b.mem[c.region.0 as usize];
                m[c.offset as usize..c.offset as usize + k].copy_from_slice(&stream[at..at + k]);
                b.qp.rx_placed(&stream[at..at + k]);
                at += k;
                if let Some(t) = tail {
                    let end = (at + t + b.qp.rx_next_header_len()).min(stream.len());
                    staged.extend_from_slice(&stream[at..end]);
                    at = end;
                }
            }
            other => panic!("{other:?} with {} octets left", stream.len() - at),
        }
    }
}

/// Every FPDU `a` has to send, as one stream.
fn stream_of(a: &mut Side) -> (Vec<u8>, usize) {
    let mut v = Vec::new();
    let mut fpdus = 0;
    while let Some(f) = a.next_fpdu() {
        v.extend_from_slice(&f);
        fpdus += 1;
    }
    (v, fpdus)
}

fn send(wr_id: u64, stag: STag, addr: u64, len: usize) -> SendWr {
    SendWr::new(
        wr_id,
        SendOp::Send {
            solicited: false,
            invalidate: None,
        },
        Sgl::from(sge(stag, addr, len)),
    )
}

fn params(crc: bool) -> QpParams {
    QpParams {
        crc,
        max_fpdu: 16 << 10,
        ..Default::default()
    }
}

/// Messages per stream, of `LEN` octets: three FPDUs each.
const MSGS: usize = 6;
const LEN: usize = 40_000;

#[test]
fn a_run_of_sends_is_read_one_fpdu_per_read() {
    for crc in [false, true] {
        let (mut a, mut b) = pair(params(crc));
        let (src, sbase) = a.reg(MSGS * LEN, Access::empty(), 1);
        let (dst, dbase) = b.reg(MSGS * LEN, Access::LOCAL_WRITE, 2);
        for i in 0..MSGS {
            let off = (i * LEN) as u64;
            b.qp.post_recv(RecvWr::new(i as u64, sge(dst, dbase + off, LEN)), &b.tpt)
                .unwrap();
            a.qp.post_send(send(i as u64, src, sbase + off, LEN), &a.tpt)
                .unwrap();
        }
        let (stream, fpdus) = stream_of(&mut a);
        assert_eq!(fpdus, 3 * MSGS);
        let cost = read_exactly(&mut b, &stream);
        // The first FPDU: its prefix, the rest of its header, its payload with the
        // trailer and the next 16 octets; the second: the rest of its header, then its
        // payload; from then on one read per FPDU (two for each one with a 16-octet
        // guess, which is what every FPDU cost before the guess).
        assert_eq!(
            cost,
            Cost {
                reads: fpdus + 3,
                copied: 0
            },
            "crc {crc}"
        );
        let got: Vec<_> = b.completions();
        assert_eq!(got.len(), MSGS, "crc {crc}: {got:?}");
        assert!(
            got.iter()
                .all(|(_, c)| c.status == WcStatus::Success && c.byte_len as usize == LEN),
            "crc {crc}: {got:?}"
        );
        assert!(b.region(dst) == a.region(src), "crc {crc}: placed data");
    }
}

/// A lone Send between large Writes leaves the guess tagged: reading the next header
/// never takes a Write's payload octets. After a run of Sends, the first Write's first 4
/// payload octets come with the guessed untagged header: the price of the guess, once
/// per change from Sends to Writes.
#[test]
fn a_send_between_writes_keeps_the_tagged_guess_and_a_run_of_sends_costs_four_octets() {
    for sends_per_write in [1usize, 2] {
        let (mut a, mut b) = pair(params(false));
        let (src, sbase) = a.reg(MSGS * LEN, Access::empty(), 1);
        let (wdst, wbase) = b.reg(MSGS * LEN, Access::REMOTE_WRITE, 2);
        let (rdst, rbase) = b.reg(MSGS * sends_per_write * 8, Access::LOCAL_WRITE, 3);
        let mut recvs = 0u64;
        for i in 0..MSGS {
            let off = (i * LEN) as u64;
            let w = SendWr::write(
                100 + i as u64,
                Sgl::from(sge(src, sbase + off, LEN)),
                wbase + off,
                wdst,
            );
            a.qp.post_send(w, &a.tpt).unwrap();
            for _ in 0..sends_per_write {
                let r = recvs * 8;
                b.qp.post_recv(RecvWr::new(recvs, sge(rdst, rbase + r, 8)), &b.tpt)
                    .unwrap();
                a.qp.post_send(send(200 + recvs, src, sbase + r, 8), &a.tpt)
                    .unwrap();
                recvs += 1;
            }
        }
        let (stream, _) = stream_of(&mut a);
        let cost = read_exactly(&mut b, &stream);
        let copied = if sends_per_write == 1 {
            0
        } else {
            4 * (MSGS - 1)
        };
        assert_eq!(cost.copied, copied, "{sends_per_write} Sends per Write");
        assert!(b.region(wdst) == a.region(src), "Write data");
        let got = b.completions();
        assert_eq!(got.len(), recvs as usize, "{got:?}");
        assert!(got.iter().all(|(_, c)| c.status == WcStatus::Success));
        for r in 0..recvs as usize {
            assert_eq!(
                b.region(rdst)[r * 8..r * 8 + 8],
                a.region(src)[r * 8..r * 8 + 8],
                "Send {r}"
            );
        }
    }
}
