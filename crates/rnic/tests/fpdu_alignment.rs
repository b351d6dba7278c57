//! FPDUs and segments on softrnic's own TCP (RFC 5044's MPA-aware TCP), read off the
//! simulated wire: every FPDU begins a segment or follows a whole FPDU in it, no FPDU
//! crosses a segment, and while data is queued every segment is full (the next FPDU
//! would not have fit). Large Writes end in a small FPDU; the next message's first
//! FPDU is sized to fill that segment. Data verified.

mod common;

use common::*;
use softrnic_rnic::*;
use softrnic_wire::mpa;
use std::collections::BTreeMap;
use std::net::Ipv4Addr;

const A: Ipv4Addr = Ipv4Addr::new(10, 0, 7, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 0, 7, 2);

/// The payload of a segment on a SimNet (the largest IPv4 packet less 40).
const MSS: usize = 65495;

fn device(net: &SimNet, addr: Ipv4Addr) -> End {
    end()
        .config(DeviceConfig {
            user_tcp: Some(UserTcp::sim(net, addr)),
            ..DeviceConfig::default()
        })
        .build()
}

/// A TCP segment from A to B, as captured: its sequence number, flags and payload.
struct Seg {
    seq: u32,
    flags: u8,
    payload: Vec<u8>,
}

const SYN: u8 = 0x02;

/// The segments from A to B among captured IPv4 packets.
fn a_to_b(packets: &[Vec<u8>]) -> Vec<Seg> {
    packets
        .iter()
        .filter(|p| p[9] == 6 && p[12..16] == A.octets() && p[16..20] == B.octets())
        .map(|p| {
            let tcp = &p[usize::from(p[0] & 0xf) * 4..];
            let data = usize::from(tcp[12] >> 4) * 4;
            Seg {
                seq: u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]),
                flags: tcp[13],
                payload: tcp[data..].to_vec(),
            }
        })
        .collect()
}

/// The wire length of the FPDU at `at` in `stream`.
fn fpdu_at(stream: &[u8], at: usize) -> usize {
    mpa::fpdu_len(usize::from(u16::from_be_bytes([
        stream[at],
        stream[at + 1],
    ])))
}

#[test]
fn fpdus_start_segments_none_crosses_one_and_segments_are_full_while_data_is_queued() {
    let net = SimNet::new(SimImpairments::default());
    net.capture(true);
    let a = device(&net, A);
    let b = device(&net, B);
    connect_qps_at((&a.dev, &a.qp), (&b.dev, &b.qp), (B, 0));
    assert_eq!(a.qp.params().max_fpdu, MSS);

    // Large Writes with small ones among them, and a 1 MiB one: 3.7 MiB, less than
    // the send buffer and the peer's window (8 MiB each), so that everything is
    // queued while the wire holds the first window.
    let mut sizes: Vec<usize> = (0..40)
        .map(|i| if i % 7 == 3 { 1000 + i } else { 64 << 10 })
        .collect();
    sizes.insert(20, 1 << 20);
    let total: usize = sizes.iter().sum();
    let data = pattern(total, 17);
    let src = a.pd.alloc_mr(total, Access::empty()).unwrap();
    src.write(0, &data).unwrap();
    let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    let target = b.pd.alloc_mr(total, rw).unwrap();
    let note = b.pd.alloc_mr(16, Access::LOCAL_WRITE).unwrap();
    b.qp.post_recv(RecvWr::new(99, note.sge(0, 16))).unwrap();

    net.pause();
    let mut at = 0;
    for (i, &n) in sizes.iter().enumerate() {
        let wr = SendWr::write(
            i as u64,
            src.sge(at, n),
            target.addr() + at as u64,
            target.rkey(),
        );
        a.qp.post_send(wr).unwrap();
        at += n;
    }
    // A Write completes once the TCP has taken all of it: everything is queued now.
    let done = take(&a.cq, sizes.len());
    assert!(done.iter().all(|c| c.status == WcStatus::Success));
    let before_resume = net.captured();
    net.resume();
    a.qp.post_send(SendWr::send(100, src.sge(0, 16))).unwrap();
    assert_eq!(one(&a.cq).status, WcStatus::Success);
    let r = one(&b.cq);
    assert_eq!((r.wr_id, r.status), (99, WcStatus::Success));
    assert!(
        target.to_vec() == data,
        "bytes placed are the bytes written"
    );
    let after_resume = net.captured();

    // The stream from A, rebuilt from its segments (each sequence number once).
    let early = a_to_b(&before_resume);
    let late = a_to_b(&after_resume);
    let isn = early
        .iter()
        .find(|s| s.flags & SYN != 0)
        .expect("A's SYN")
        .seq;
    let offset = |s: &Seg| s.seq.wrapping_sub(isn).wrapping_sub(1) as usize;
    let mut segs: BTreeMap<usize, (usize, bool)> = BTreeMap::new();
    let mut stream = Vec::new();
    for (s, queued) in early
        .iter()
        .map(|s| (s, false))
        .chain(late.iter().map(|s| (s, true)))
    {
        if s.payload.is_empty() || s.flags & SYN != 0 {
            continue;
        }
        let off = offset(s);
        let end = off + s.payload.len();
        if stream.len() < end {
            stream.resize(end, 0);
        }
        stream[off..end].copy_from_slice(&s.payload);
        // A segment sent again keeps its first sending's place in the record.
        segs.entry(off).or_insert((end, queued));
    }

    // The MPA Request (20 octets and no private data) goes before any FPDU, in a
    // segment of its own (the Reply comes before the first FPDU).
    assert_eq!(&stream[..16], b"MPA ID Req Frame");
    let first = 20 + usize::from(u16::from_be_bytes([stream[18], stream[19]]));
    assert!(segs.contains_key(&first), "the first FPDU starts a segment");
    // FPDU boundaries, and where the Writes end (the Send that follows is untagged).
    let mut bounds = vec![first];
    let mut writes_end = None;
    let mut p = first;
    while p < stream.len() {
        let tagged = stream[p + 2] & 0x80 != 0;
        if !tagged && writes_end.is_none() {
            writes_end = Some(p);
        }
        p += fpdu_at(&stream, p);
        bounds.push(p);
    }
    assert_eq!(p, stream.len(), "the stream ends with a whole FPDU");
    let writes_end = writes_end.expect("the Send after the Writes");

    let mut full = 0;
    let sent_before = segs
        .iter()
        .filter(|(_, (_, q))| !q)
        .map(|(_, (e, _))| *e)
        .max()
        .unwrap_or(0);
    for (&start, &(end, queued)) in segs.range(first..) {
        assert!(
            bounds.binary_search(&start).is_ok(),
            "segment [{start}, {end}) starts inside an FPDU"
        );
        assert!(
            bounds.binary_search(&end).is_ok(),
            "segment [{start}, {end}) ends inside an FPDU"
        );
        assert!(end - start <= MSS);
        // Sent after the wire resumed, everything before the Send queued: full, short
        // only by less than an FPDU of 64 payload octets takes (its MPA length, DDP
        // header, CRC field) and the 4-octet alignment.
        if queued && start >= sent_before && end < writes_end {
            assert!(
                MSS - (end - start) < 2 + 18 + 64 + 4 + 3,
                "segment [{start}, {end}) of {} octets left while data was queued",
                end - start
            );
            full += 1;
        }
    }
    // Most of the Writes' 3.7 MiB left after the resume, in full segments.
    assert!(full * MSS > total / 2, "{full} full segments");
}
