//! Every opcode between two devices over loopback TCP, data verified byte for byte at
//! sizes 0, 1, 4095, 4096, 65537 and 16 MiB, with multi-element scatter/gather lists.

mod common;
use common::*;
use softrnic_rnic::*;

const SIZES: [usize; 6] = [0, 1, 4095, 4096, 65537, 16 << 20];

#[test]
fn send_recv_all_sizes_with_sg_lists() {
    for crc in [CrcPolicy::Off, CrcPolicy::Required] {
        let mut cfg = DeviceConfig::default();
        cfg.mpa.crc = crc;
        let (a, b) = end().config(cfg).queues(64, 64).pair();
        assert_eq!(a.qp.params().crc, crc == CrcPolicy::Required);
        for (i, &size) in SIZES.iter().enumerate() {
            let data = pattern(size, i as u64);
            let src = a.pd.alloc_mr(size + 7, Access::empty()).unwrap();
            src.write(7, &data).unwrap();
            let dst = b.pd.alloc_mr(size + 3, Access::LOCAL_WRITE).unwrap();
            // Receive into three SGEs, send from two.
            let c1 = size / 3;
            b.qp.post_recv(RecvWr::new(
                100 + i as u64,
                [
                    dst.sge(0, c1),
                    dst.sge(c1, 1.min(size - c1)),
                    dst.sge(c1 + 1.min(size - c1), size + 3 - c1 - 1.min(size - c1)),
                ],
            ))
            .unwrap();
            let h = size / 2;
            a.qp.post_send(SendWr::send(
                i as u64,
                [src.sge(7, h), src.sge(7 + h, size - h)],
            ))
            .unwrap();
            let s = one(&a.cq);
            let r = one(&b.cq);
            assert_eq!(
                (s.wr_id, s.status, s.opcode, s.byte_len),
                (i as u64, WcStatus::Success, WcOpcode::Send, size as u32)
            );
            assert_eq!(
                (r.wr_id, r.status, r.opcode, r.byte_len),
                (
                    100 + i as u64,
                    WcStatus::Success,
                    WcOpcode::Recv,
                    size as u32
                )
            );
            assert_eq!(&dst.to_vec()[..size], &data[..], "size {size}");
        }
    }
}

#[test]
fn write_and_read_all_sizes() {
    let (a, b) = pair();
    for (i, &size) in SIZES.iter().enumerate() {
        let data = pattern(size, 50 + i as u64);
        let src = a.pd.alloc_mr(size.max(1), Access::empty()).unwrap();
        src.write(0, &data).unwrap();
        let target =
            b.pd.alloc_mr(
                size + 16,
                Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
            )
            .unwrap();
        target.fill(0, size + 16, 0xee).unwrap();
        let sgl = if size > 1 {
            Sgl::from([src.sge(0, 1), src.sge(1, size - 1)])
        } else {
            Sgl::from(src.sge(0, size))
        };
        a.qp.post_send(SendWr::write(1, sgl, target.addr() + 8, target.rkey()))
            .unwrap();
        // Read it back into another buffer; the fence orders it after the Write.
        let sink = a.pd.alloc_mr(size.max(1), Access::LOCAL_WRITE).unwrap();
        a.qp.post_send(
            SendWr::read(2, sink.sge(0, size), target.addr() + 8, target.rkey()).fence(),
        )
        .unwrap();
        let w = one(&a.cq);
        let r = one(&a.cq);
        assert_eq!(
            (w.wr_id, w.status, w.opcode, w.byte_len),
            (1, WcStatus::Success, WcOpcode::Write, size as u32)
        );
        assert_eq!(
            (r.wr_id, r.status, r.opcode, r.byte_len),
            (2, WcStatus::Success, WcOpcode::Read, size as u32)
        );
        let t = target.to_vec();
        assert_eq!(&t[8..8 + size], &data[..], "write, size {size}");
        assert!(
            t[..8].iter().chain(&t[8 + size..]).all(|&x| x == 0xee),
            "octets outside the target untouched"
        );
        assert_eq!(&sink.to_vec()[..size], &data[..], "read, size {size}");
    }
    assert!(
        b.cq.poll_one().is_none(),
        "one-sided operations complete nothing at the target"
    );
    // All payload was placed. The copy policy (RX_DIRECT_MIN; per size in rx_copy.rs):
    // the small Writes (0, 1, 4095, 4096) come in with read-aheads and are copied whole;
    // each large Write follows small FPDUs (the Read Requests), so of its first FPDU at
    // most one staging buffer's worth is copied, and the rest of it, its other FPDUs
    // and the 65537-octet Write's short last FPDU go straight into memory.
    let st = b.qp.stats();
    let total = SIZES.iter().sum::<usize>() as u64;
    let small: u64 = SIZES.iter().filter(|&&s| s < RX_DIRECT_MIN).sum::<usize>() as u64;
    let large = SIZES.iter().filter(|&&s| s >= RX_DIRECT_MIN).count() as u64;
    assert_eq!(st.rx_direct_bytes + st.rx_copied_bytes, total);
    assert!(
        st.rx_copied_bytes >= small && st.rx_copied_bytes <= small + large * RX_STAGING_LEN as u64,
        "{st:?}"
    );
}

#[test]
fn send_with_invalidate_solicited_and_local_invalidate() {
    let (a, b) = pair();
    let exposed =
        b.pd.alloc_mr(
            64,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_INVALIDATE,
        )
        .unwrap();
    let buf = b.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let src = a.pd.alloc_mr(64, Access::empty()).unwrap();
    b.qp.post_recv(RecvWr::new(9, buf.sge(0, 64))).unwrap();
    b.cq.req_notify(true);
    a.qp.post_send(
        SendWr::send(1, src.sge(0, 10))
            .solicited()
            .invalidate(exposed.rkey()),
    )
    .unwrap();
    let r = one(&b.cq);
    assert_eq!(
        (r.status, r.solicited, r.invalidated),
        (WcStatus::Success, true, Some(exposed.rkey()))
    );
    assert!(!exposed.is_valid());
    assert_eq!(one(&a.cq).status, WcStatus::Success);
    // Local invalidate on the sender side, signaled.
    let mine = a.pd.alloc_mr(64, Access::REMOTE_READ).unwrap();
    a.qp.post_send(SendWr::local_invalidate(3, mine.rkey()))
        .unwrap();
    let c = one(&a.cq);
    assert_eq!(
        (c.wr_id, c.status, c.opcode),
        (3, WcStatus::Success, WcOpcode::LocalInvalidate)
    );
    assert!(!mine.is_valid());
}

/// A chain of receives posted in one call (`post_recv_batch`) takes the Sends in
/// order, each into its own buffer, and a bad SGE in the chain stops it there: the
/// receives before it are posted, it completes in error, and the QP fails.
#[test]
fn receives_posted_as_a_chain_take_sends_in_order() {
    let (a, b) = end().queues(16, 16).pair();
    let src = a.pd.alloc_mr(3 * 100, Access::empty()).unwrap();
    let data = pattern(300, 9);
    src.write(0, &data).unwrap();
    let dst = b.pd.alloc_mr(300, Access::LOCAL_WRITE).unwrap();
    b.qp.post_recv_batch((0..3u64).map(|i| RecvWr::new(50 + i, [dst.sge(i as usize * 100, 100)])))
        .unwrap();
    a.qp.post_send_batch((0..3u64).map(|i| SendWr::send(i, [src.sge(i as usize * 100, 100)])))
        .unwrap();
    let r = take(&b.cq, 3);
    let got: Vec<_> = r.iter().map(|c| (c.wr_id, c.status, c.byte_len)).collect();
    assert_eq!(
        got,
        (0..3u64)
            .map(|i| (50 + i, WcStatus::Success, 100))
            .collect::<Vec<_>>()
    );
    assert_eq!(dst.to_vec(), data);
    let ro = b.pd.alloc_mr(8, Access::empty()).unwrap();
    b.qp.post_recv_batch([
        RecvWr::new(60, [dst.sge(0, 8)]),
        RecvWr::new(61, [ro.sge(0, 8)]),
    ])
    .unwrap();
    let c = one(&b.cq);
    assert_eq!((c.wr_id, c.status), (61, WcStatus::LocalProtectionError));
    assert_eq!(b.qp.state(), QpState::Error);
    assert_eq!(status_of(&drained(&b.cq), 60), WcStatus::WrFlushError);
}
