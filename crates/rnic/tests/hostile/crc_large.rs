//! A 1 MiB RDMA Write with CRC on, one octet of it flipped: softrnic must find the bad
//! FPDU whether its payload came in through the staging buffer or straight into the
//! region, answer with the MPA CRC Terminate (LLP, code 0x02), place nothing that
//! follows it and complete nothing after it.

use crate::peer::*;
use softrnic_rnic::*;
use softrnic_wire::mpa;
use softrnic_wire::rdmap::Opcode;
use std::io::Write;

const MESSAGE: usize = 1 << 20;
/// Payload per FPDU: as large as softrnic's loopback FPDUs, so the receive path switches
/// to reading payloads straight into the region (its first 32 KiB come in a read-ahead).
const SEGMENT: usize = 64_960;
/// The target region's octets before the Write.
const FILL: u8 = 0x30;

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

/// The Write's FPDUs on the wire, each with its payload range in the message, and a
/// one-segment Send after them.
fn wire(rkey: u32, addr: u64) -> (Vec<u8>, Vec<(usize, std::ops::Range<usize>)>) {
    let message: Vec<u8> = (0..MESSAGE).map(pattern).collect();
    let mut out = Vec::new();
    let mut fpdus = Vec::new();
    for (i, chunk) in message.chunks(SEGMENT).enumerate() {
        let at = i * SEGMENT;
        let last = at + chunk.len() == MESSAGE;
        let f = fpdu(
            &tagged(Opcode::Write, rkey, addr + at as u64, last, chunk),
            true,
        );
        fpdus.push((out.len(), at..at + chunk.len()));
        out.extend_from_slice(&f);
    }
    let send = untagged(
        Opcode::Send,
        softrnic_wire::rdmap::QN_SEND,
        1,
        0,
        true,
        0,
        b"after",
    );
    out.extend_from_slice(&fpdu(&send, true));
    (out, fpdus)
}

fn run(bad: usize, at: At) {
    let name = format!("FPDU {bad}, {at:?}");
    let t = Target::new(DeviceConfig::default());
    let region =
        t.pd.alloc_mr(MESSAGE, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
    region.fill(0, MESSAGE, FILL).unwrap();
    let recv = t.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    t.qp.post_recv(RecvWr {
        wr_id: 77,
        sgl: [recv.sge(0, 64)].into(),
    })
    .unwrap();
    let mut peer = t.accept_peer(MpaConfig {
        crc: CrcPolicy::Required,
        ..MpaConfig::default()
    });
    assert!(peer.negotiated.crc);
    let (mut octets, fpdus) = wire(region.rkey(), region.addr());
    let (start, range) = fpdus[bad].clone();
    let header = mpa::ULPDU_LEN_LEN + softrnic_wire::ddp::TAGGED_HEADER_LEN;
    let flip = match at {
        At::Payload(n) => start + header + n.min(range.len() - 1),
        At::Crc => start + mpa::fpdu_len(header - mpa::ULPDU_LEN_LEN + range.len()) - 1,
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
    let placed = region.to_vec();
    let good = fpdus[bad].1.start;
    assert!(
        placed[..good]
            .iter()
            .enumerate()
            .all(|(i, &b)| b == pattern(i)),
        "{name}: the FPDUs before the bad one are placed"
    );
    let after = fpdus[bad].1.end;
    assert!(
        placed[after..].iter().all(|&b| b == FILL),
        "{name}: nothing after the bad FPDU is placed"
    );
    // The Send after the Write does not complete: its receive is flushed.
    let wc = t.cq.wait_for(1, WAIT);
    assert_eq!(
        wc.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(77, WcStatus::WrFlushError)],
        "{name}"
    );
    assert_eq!(t.qp.state(), QpState::Error, "{name}");
}

/// One octet flipped at offsets across the message: in the part of the first FPDU that
/// is read ahead and copied, in the part read straight into the region, in a middle
/// FPDU's first and last payload octets, in a CRC field, and in the last FPDU (the one
/// with the L bit, whose end would complete the Write).
#[test]
fn a_flipped_octet_in_a_large_write_ends_at_its_fpdu() {
    let last = MESSAGE.div_ceil(SEGMENT) - 1;
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
        run(bad, at);
    }
}
