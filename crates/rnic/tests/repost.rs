//! Reposting the same receive buffer, as a server does with each completion it gets
//! back: the post keeps the last TPT check's result while the table is unchanged
//! (`proto::qp::rq`), so each such repost must still land the next Send's octets
//! exactly, and a repost after the region's deregistration must still be refused.

mod common;

use common::*;
use softrnic_rnic::*;

/// Receives reposted into one buffer take each Send's octets; once the region is
/// deregistered, the same SGE posted again completes with a local protection error,
/// the QP fails and the connection closes (the earlier result is not reused).
#[test]
fn a_repost_into_a_deregistered_region_is_refused() {
    let (a, b) = end().pair();
    let landing = a.pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let sge = landing.sge(64, 32);
    let src = b.pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    for i in 0..3u8 {
        a.qp.post_recv(RecvWr::new(10 + u64::from(i), sge)).unwrap();
        let msg = [i + 1; 20];
        src.write(usize::from(i) * 32, &msg).unwrap();
        b.qp.post_send(SendWr::send(
            100 + u64::from(i),
            src.sge(usize::from(i) * 32, 20),
        ))
        .unwrap();
        let c = one(&a.cq);
        assert_eq!(
            (c.wr_id, c.status, c.opcode, c.byte_len),
            (10 + u64::from(i), WcStatus::Success, WcOpcode::Recv, 20)
        );
        let mut got = [0u8; 20];
        landing.read(64, &mut got).unwrap();
        assert_eq!(got, msg);
    }
    drop(landing);
    a.qp.post_recv(RecvWr::new(1, sge)).unwrap();
    let c = one(&a.cq);
    assert_eq!(
        (c.wr_id, c.status, c.opcode),
        (1, WcStatus::LocalProtectionError, WcOpcode::Recv)
    );
    assert_eq!(a.qp.state(), QpState::Error);
    disconnected(&a.dev, &a.qp);
    disconnected(&b.dev, &b.qp);
}
