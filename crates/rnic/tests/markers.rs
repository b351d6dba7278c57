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
    let listener = b.dev.listen((B, 0)).unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::scope(|s| {
        let h = s.spawn(|| listener.accept().unwrap().accept(&b.qp, b"").unwrap());
        a.dev.connect(addr, &a.qp, b"").unwrap();
        h.join().unwrap();
    });
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
