//! A 1 MiB RDMA Write or Send with CRC on, one octet of it flipped: softrnic must find
//! the bad FPDU whether its payload came in through the staging buffer or straight into
//! memory, answer with the MPA CRC Terminate (LLP, code 0x02), place nothing that follows
//! it and complete nothing after it.

use crate::peer::*;
use softrnic_rnic::*;
use softrnic_wire::mpa;
use softrnic_wire::rdmap::{Opcode, QN_SEND};
use std::io::Write;
use std::ops::Range;

const MESSAGE: usize = 1 << 20;
/// Payload per FPDU: as large as softrnic's loopback FPDUs, so the receive path switches
/// to reading payloads straight into memory (its first 32 KiB come in a read-ahead).
const SEGMENT: usize = 64_960;
/// The target memory's octets before the message.
const FILL: u8 = 0x30;

/// The large message's kind: tagged (placed by STag and TO) or untagged (into the
/// posted receive, by MSN and MO).
#[derive(Clone, Copy, Debug)]
enum Kind {
    Write,
    Send,
}

/// Where in an FPDU the flipped octet lies.
#[derive(Clone, Copy, Debug)]
enum At {
    /// Payload octet `n` of the FPDU.
    Payload(usize),
    /// The last octet of the FPDU's CRC field.
    Crc,
}

fn pattern(i: usize) -> u8 {
    (i.wrapping_mul(131) >> 3) as u8 ^ 0x5a
}

/// One FPDU on the wire: where it starts, its DDP header's length, and its payload's
/// range in the message.
struct Placed {
    start: usize,
    header: usize,
    payload: Range<usize>,
}

/// The large message's FPDUs on the wire, and a one-segment Send after them.
fn wire(kind: Kind, rkey: u32, addr: u64) -> (Vec<u8>, Vec<Placed>) {
    let message: Vec<u8> = (0..MESSAGE).map(pattern).collect();
    let mut out = Vec::new();
    let mut fpdus = Vec::new();
    for (i, chunk) in message.chunks(SEGMENT).enumerate() {
        let at = i * SEGMENT;
        let last = at + chunk.len() == MESSAGE;
        let ulpdu = match kind {
            Kind::Write => tagged(Opcode::Write, rkey, addr + at as u64, last, chunk),
            Kind::Send => untagged(Opcode::Send, QN_SEND, 1, at as u32, last, 0, chunk),
        };
        fpdus.push(Placed {
            start: out.len(),
            header: ulpdu.len() - chunk.len(),
            payload: at..at + chunk.len(),
        });
        out.extend_from_slice(&fpdu(&ulpdu, true));
    }
    let msn = match kind {
        Kind::Write => 1,
        Kind::Send => 2,
    };
    let after = untagged(Opcode::Send, QN_SEND, msn, 0, true, 0, b"after");
    out.extend_from_slice(&fpdu(&after, true));
    (out, fpdus)
}

fn run(kind: Kind, bad: usize, at: At) {
    let name = format!("{kind:?}, FPDU {bad}, {at:?}");
    let t = Target::new(DeviceConfig::default());
    let target =
        t.pd.alloc_mr(MESSAGE, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
    target.fill(0, MESSAGE, FILL).unwrap();
    let note = t.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let mut posted = Vec::new();
    if let Kind::Send = kind {
        t.qp.post_recv(RecvWr {
            wr_id: 76,
            sgl: [target.sge(0, MESSAGE)].into(),
        })
        .unwrap();
        posted.push(76);
    }
    t.qp.post_recv(RecvWr {
        wr_id: 77,
        sgl: [note.sge(0, 64)].into(),
    })
    .unwrap();
    posted.push(77);
    let mut peer = t.accept_peer(MpaConfig {
        crc: CrcPolicy::Required,
        ..MpaConfig::default()
    });
    assert!(peer.negotiated.crc);
    let (mut octets, fpdus) = wire(kind, target.rkey(), target.addr());
    let f = &fpdus[bad];
    let payload_at = f.start + mpa::ULPDU_LEN_LEN + f.header;
    let flip = match at {
        At::Payload(n) => payload_at + n.min(f.payload.len() - 1),
        At::Crc => f.start + mpa::fpdu_len(f.header + f.payload.len()) - 1,
    };
    octets[flip] ^= 0x01;
    // softrnic stops reading at the bad FPDU and closes: what follows it may find the
    // connection reset, so the peer writes from its own thread and ignores the outcome.
    let mut s = peer.s.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        let _ = s.write_all(&octets);
    });
    let (cause, _, _) = peer.terminate();
    let crc_error = TerminateCause::new(softrnic_wire::terminate::Layer::Llp, 0, 0x02);
    assert_eq!(cause, crc_error, "{name}: the cause on the wire");
    assert_eq!(t.sent_terminate(), crc_error, "{name}: the cause reported");
    writer.join().unwrap();
    // The FPDUs before the bad one are placed octet for octet; nothing after it is.
    let placed = target.to_vec();
    let good = f.payload.start;
    assert!(
        placed[..good]
            .iter()
            .enumerate()
            .all(|(i, &b)| b == pattern(i)),
        "{name}: the FPDUs before the bad one are placed"
    );
    assert!(
        placed[f.payload.end..].iter().all(|&b| b == FILL),
        "{name}: nothing after the bad FPDU is placed"
    );
    // Nothing completes: the large Send's receive and the one for the Send after the
    // message are flushed, in order.
    let wc = t.cq.wait_for(posted.len(), WAIT);
    assert_eq!(
        wc.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        posted
            .iter()
            .map(|&id| (id, WcStatus::WrFlushError))
            .collect::<Vec<_>>(),
        "{name}"
    );
    assert_eq!(t.qp.state(), QpState::Error, "{name}");
}

/// One octet flipped at offsets across the message: in the part of the first FPDU that
/// is read ahead and copied, in the part read straight into memory, in a middle FPDU's
/// first and last payload octets, in a CRC field, and in the last FPDU (the one with
/// the L bit, whose end would complete the message).
#[test]
fn a_flipped_octet_in_a_large_message_ends_at_its_fpdu() {
    let last = MESSAGE.div_ceil(SEGMENT) - 1;
    for kind in [Kind::Write, Kind::Send] {
        for (bad, at) in [
            (0, At::Payload(100)),
            (0, At::Payload(40_000)),
            (0, At::Crc),
            (7, At::Payload(0)),
            (7, At::Payload(usize::MAX)),
            (9, At::Crc),
            (last, At::Payload(3)),
            (last, At::Crc),
        ] {
            run(kind, bad, at);
        }
    }
}
