//! What an I/O layer that reads exactly (rnic's exact receive mode) reads after a
//! payload's last piece and its trailer, in the same call (`Qp::rx_read_after_trailer`):
//! the next FPDU's header, guessed untagged within a run of Sends, so each FPDU costs
//! one read, and tagged otherwise, so a lone Send between Writes brings in no payload
//! octets; and after a long FPDU that does not end its message, the short FPDU that
//! followed the last one, so same-sized messages a little longer than an FPDU (64 KiB)
//! cost one read each.

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
/// a payload's last piece with its trailer and `rx_read_after_trailer` octets after them
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
                    let end = (at + t + b.qp.rx_read_after_trailer()).min(stream.len());
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

/// Messages a little longer than an FPDU (two FPDUs each, the second short, as 64 KiB
/// ones are with the 65,000-octet loopback FPDU): from the second message on, the
/// short FPDU and the next header come with the first FPDU's trailer, one read per
/// message, and only the short FPDU's payload is copied.
#[test]
fn same_sized_messages_a_little_longer_than_an_fpdu_take_one_read_each() {
    const LONGER: usize = (16 << 10) + 200;
    for write in [false, true] {
        for crc in [false, true] {
            let (mut a, mut b) = pair(params(crc));
            let (src, sbase) = a.reg(MSGS * LONGER, Access::empty(), 1);
            let (dst, dbase) = b.reg(MSGS * LONGER, Access::LOCAL_WRITE | Access::REMOTE_WRITE, 2);
            for i in 0..MSGS {
                let off = (i * LONGER) as u64;
                let wr = if write {
                    SendWr::write(
                        i as u64,
                        Sgl::from(sge(src, sbase + off, LONGER)),
                        dbase + off,
                        dst,
                    )
                } else {
                    b.qp.post_recv(RecvWr::new(i as u64, sge(dst, dbase + off, LONGER)), &b.tpt)
                        .unwrap();
                    send(i as u64, src, sbase + off, LONGER)
                };
                a.qp.post_send(wr, &a.tpt).unwrap();
            }
            let (stream, fpdus) = stream_of(&mut a);
            assert_eq!(fpdus, 2 * MSGS);
            let header = if write { 16 } else { 20 };
            let first = usize::from(u16::from_be_bytes([stream[0], stream[1]])) + 2 - header;
            let cost = read_exactly(&mut b, &stream);
            // The first message as before (prefix, header, payload; a Send's second
            // header rest; payload), then one read per message.
            let first_message = if write { 4 } else { 5 };
            assert_eq!(
                cost,
                Cost {
                    reads: first_message + MSGS - 1,
                    copied: (MSGS - 1) * (LONGER - first),
                },
                "write {write}, crc {crc}"
            );
            assert!(
                b.region(dst) == a.region(src),
                "write {write}, crc {crc}: placed data"
            );
            if !write {
                let got = b.completions();
                assert_eq!(got.len(), MSGS, "crc {crc}: {got:?}");
                assert!(
                    got.iter().all(
                        |(_, c)| c.status == WcStatus::Success && c.byte_len as usize == LONGER
                    )
                );
            }
        }
    }
}
