//! A large RDMA Read whose Read Response carries one flipped octet, CRC on: the
//! requester places large payloads straight into the sink before each FPDU's CRC is
//! checked, so this shows what that may and may not expose. softrnic must answer with
//! the MPA CRC Terminate (LLP, code 0x02), never complete the Read with success (it
//! flushes), and place nothing that follows the
//! bad FPDU.

use crate::peer::*;
use softrnic_rnic::*;
use softrnic_wire::rdmap::Opcode;
use softrnic_wire::{Body, Ulpdu, mpa};
use std::io::Write;

/// The Read's length: four FPDUs of [`SEGMENT`] and a short last one.
const READ: usize = 4 * SEGMENT + 1000;
/// Payload per Read Response FPDU, as large as softrnic's loopback FPDUs, so the
/// requester reads payloads straight into the sink.
const SEGMENT: usize = 64_960;
/// The sink's octets before the Read.
const FILL: u8 = 0x30;

fn pattern(i: usize) -> u8 {
    (i.wrapping_mul(151) >> 2) as u8 ^ 0xa5
}

/// Runs one Read whose response has octet `flip` of FPDU `bad` flipped, where `flip`
/// counts from the FPDU's first octet (its MPA length).
fn run(bad: usize, flip: impl Fn(usize) -> usize) {
    let name = format!("FPDU {bad}");
    let t = Target::new(DeviceConfig::default());
    let sink = t.pd.alloc_mr(READ, Access::LOCAL_WRITE).unwrap();
    sink.fill(0, READ, FILL).unwrap();
    let mut peer = t.accept_peer(MpaConfig {
        crc: CrcPolicy::Required,
        ..MpaConfig::default()
    });
    assert!(peer.negotiated.crc);
    t.qp.post_send(SendWr::read(1, sink.sge(0, READ), 0x1000, 0x77))
        .unwrap();
    let Reply::Fpdu(request) = peer.next() else {
        panic!("{name}: expected the Read Request first");
    };
    let Body::ReadRequest(rr) = Ulpdu::parse(&request).unwrap().body else {
        panic!("{name}: expected the Read Request first");
    };
    assert_eq!(rr.size as usize, READ);

    let data: Vec<u8> = (0..READ).map(pattern).collect();
    let mut octets = Vec::new();
    let mut bad_payload = 0..0;
    for (i, chunk) in data.chunks(SEGMENT).enumerate() {
        let at = i * SEGMENT;
        let last = at + chunk.len() == READ;
        let ulpdu = tagged(
            Opcode::ReadResponse,
            rr.sink_stag,
            rr.sink_to + at as u64,
            last,
            chunk,
        );
        let mut f = fpdu(&ulpdu, true);
        if i == bad {
            let k = flip(f.len());
            f[k] ^= 0x01;
            bad_payload = at..at + chunk.len();
        }
        octets.extend_from_slice(&f);
    }
    // softrnic stops reading at the bad FPDU and closes: the rest may meet a reset.
    let mut s = peer.s.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        let _ = s.write_all(&octets);
    });
    let (cause, _, _) = peer.terminate();
    let crc_error = TerminateCause::new(softrnic_wire::terminate::Layer::Llp, 0, 0x02);
    assert_eq!(cause, crc_error, "{name}: the cause on the wire");
    assert_eq!(t.sent_terminate(), crc_error, "{name}: the cause reported");
    writer.join().unwrap();

    // The Read never completes with success: it flushes.
    let wc = t.cq.wait_for(1, WAIT);
    assert_eq!(
        wc.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(1, WcStatus::WrFlushError)],
        "{name}"
    );
    assert_eq!(t.qp.state(), QpState::Error, "{name}");
    // Before the bad FPDU, the good ones are placed; after it, nothing is.
    let placed = sink.to_vec();
    assert!(
        placed[..bad_payload.start]
            .iter()
            .enumerate()
            .all(|(i, &b)| b == pattern(i)),
        "{name}: the FPDUs before the bad one are placed"
    );
    assert!(
        placed[bad_payload.end..].iter().all(|&b| b == FILL),
        "{name}: nothing after the bad FPDU is placed"
    );
}

/// A payload octet of the first FPDU (read ahead and copied), of a middle one (read
/// straight into the sink), the CRC field of a middle one, and a payload octet of the
/// last FPDU, whose end would complete the Read.
#[test]
fn a_read_response_with_a_bad_crc_never_completes_the_read() {
    let header = mpa::ULPDU_LEN_LEN + softrnic_wire::ddp::TAGGED_HEADER_LEN;
    let last = READ.div_ceil(SEGMENT) - 1;
    run(0, |_| header + 100);
    run(2, |_| header + 40_000);
    run(2, |len| len - 1);
    run(last, |_| header + 3);
}
