//! MPA markers (RFC 5044) asked for by both ends, over kernel TCP on loopback and over
//! softrnic's own TCP on the simulated network: the MPA exchange negotiates them both
//! ways, and Sends, Writes and Reads of sizes around the 512-octet marker spacing and
//! of many FPDUs place exactly the octets sent.

mod common;

use common::*;
use softrnic_proto::cm::MpaConfig;
use softrnic_rnic::*;
use std::net::Ipv4Addr;

const A: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

/// A device configuration that asks its peers for markers, with FPDUs of `max_fpdu`.
fn asking(max_fpdu: Option<usize>) -> DeviceConfig {
    DeviceConfig {
        mpa: MpaConfig {
            markers: true,
            ..MpaConfig::default()
        },
        max_fpdu,
        ..DeviceConfig::default()
    }
}

const SIZES: [usize; 6] = [1, 511, 513, 4000, 70_001, 1 << 20];

/// Sends, Writes and Reads of every size in [`SIZES`], data verified at the other end.
fn every_operation(a: &End, b: &End) {
    for side in [a, b] {
        let p = side.qp.params();
        assert!(p.markers_tx && p.markers_rx, "markers both ways: {p:?}");
    }
    let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    for (i, &size) in SIZES.iter().enumerate() {
        let tag = 10 * i as u64;
        let data = pattern(size, tag + 1);
        let src = a.pd.alloc_mr(size, Access::empty()).unwrap();
        src.write(0, &data).unwrap();
        let dst = b.pd.alloc_mr(size, Access::LOCAL_WRITE).unwrap();
        b.qp.post_recv(RecvWr::new(tag, dst.sge(0, size))).unwrap();
        a.qp.post_send(SendWr::send(tag, src.sge(0, size))).unwrap();
        assert_eq!(one(&a.cq).status, WcStatus::Success);
        let r = one(&b.cq);
        assert_eq!(
            (r.wr_id, r.status, r.byte_len),
            (tag, WcStatus::Success, size as u32)
        );
        assert!(dst.to_vec() == data, "send of {size}");
        let target = b.pd.alloc_mr(size, rw).unwrap();
        a.qp.post_send(SendWr::write(
            tag + 1,
            src.sge(0, size),
            target.addr(),
            target.rkey(),
        ))
        .unwrap();
        let sink = a.pd.alloc_mr(size, Access::LOCAL_WRITE).unwrap();
        let mut read = SendWr::read(tag + 2, sink.sge(0, size), target.addr(), target.rkey());
        read.fence = true;
        a.qp.post_send(read).unwrap();
        let c = take(&a.cq, 2);
        assert_eq!(
            c.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
            [(tag + 1, WcStatus::Success), (tag + 2, WcStatus::Success)]
        );
        assert!(target.to_vec() == data, "write of {size}");
        assert!(sink.to_vec() == data, "read of {size}");
    }
}

#[test]
fn markers_both_ways_over_kernel_tcp() {
    for max_fpdu in [None, Some(1448), Some(700)] {
        let (a, b) = end().config(asking(max_fpdu)).pair();
        every_operation(&a, &b);
    }
}

#[test]
fn markers_both_ways_over_the_own_tcp() {
    let net = SimNet::new(SimImpairments::default());
    let dev = |addr| {
        end()
            .config(DeviceConfig {
                user_tcp: Some(UserTcp::sim(&net, addr)),
                ..asking(None)
            })
            .build()
    };
    let (a, b) = (dev(A), dev(B));
    connect_qps_at((&a.dev, &a.qp), (&b.dev, &b.qp), (B, 0));
    every_operation(&a, &b);
}

#[test]
fn a_peer_that_asks_for_markers_gets_them_from_a_server_that_does_not() {
    // Only the active side sets M: markers flow server -> client only.
    let a = end().config(asking(None)).build();
    let b = end().build();
    connect(&a, &b);
    let (pa, pb) = (a.qp.params(), b.qp.params());
    assert!(pa.markers_rx && !pa.markers_tx, "{pa:?}");
    assert!(pb.markers_tx && !pb.markers_rx, "{pb:?}");
    let size = 100_000;
    let data = pattern(size, 5);
    let target =
        b.pd.alloc_mr(size, Access::REMOTE_READ | Access::LOCAL_WRITE)
            .unwrap();
    target.write(0, &data).unwrap();
    let sink = a.pd.alloc_mr(size, Access::LOCAL_WRITE).unwrap();
    a.qp.post_send(SendWr::read(
        1,
        sink.sge(0, size),
        target.addr(),
        target.rkey(),
    ))
    .unwrap();
    assert_eq!(one(&a.cq).status, WcStatus::Success);
    assert!(sink.to_vec() == data);
}

#[test]
fn a_bad_marker_from_the_wire_is_an_mpa_terminate() {
    use softrnic_wire::mpa::{MAX_FPDU_LEN, parse_fpdu};
    use softrnic_wire::terminate::Layer;
    use softrnic_wire::{Body, TerminateCause, Ulpdu};
    use std::io::{Read, Write};
    // The device asks for markers (so it checks ours); we ask too (so its Terminate
    // comes back marked).
    let e = end().config(asking(None)).cq(64).queues(8, 8).build();
    let buf = e.pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    e.qp.post_recv(RecvWr::new(7, buf.sge(0, 64))).unwrap();
    let mut s = raw_initiator_with(
        &e,
        MpaConfig {
            markers: true,
            ..MpaConfig::default()
        },
    );
    // A well-formed marked Send for the posted receive, but its leading marker (stream
    // position 0) points 4 octets back instead of 0.
    let (hdr, n) = softrnic_wire::DdpRepr {
        last: true,
        opcode: softrnic_wire::Opcode::Send,
        placement: softrnic_wire::Placement::Untagged {
            rsvd_ulp: 0,
            qn: 0,
            msn: 1,
            mo: 0,
        },
    }
    .to_bytes();
    let mut bad = Vec::new();
    softrnic_wire::mpa::append_fpdu(&[&hdr[..n], &[0x5a; 40]], false, Some(0), &mut bad).unwrap();
    assert_eq!(&bad[..4], &[0, 0, 0, 0]);
    bad[3] = 4;
    s.write_all(&bad).unwrap();
    let mismatch = TerminateCause::new(Layer::Llp, 0, 0x03);
    disconnected(&e.dev, &e.qp);
    assert_eq!(e.qp.fatal_cause().map(|(c, _)| c), Some(mismatch));
    let g = drained(&e.cq);
    assert_eq!(
        g.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        [(7, WcStatus::WrFlushError)]
    );
    // What the peer reads: one marked FPDU, the Terminate with the same cause.
    let mut got = Vec::new();
    s.read_to_end(&mut got).unwrap();
    let mut scratch = vec![0u8; MAX_FPDU_LEN];
    let f = parse_fpdu(&got, Some(0), false, &mut scratch).expect("a marked FPDU");
    assert_eq!(f.consumed, got.len(), "the Terminate, then the close");
    match Ulpdu::parse(f.ulpdu).unwrap().body {
        Body::Terminate(t) => assert_eq!(t.cause, mismatch),
        b => panic!("not a Terminate: {b:?}"),
    }
}
