//! What the twin-pair unit tests (`cq_direct_tests`, `qp/quiet_mark_tests`) share: the
//! Send they post, the receive slots, the log of completions, the seeded generator,
//! the connect over a loopback listener, the slot-cycling receive post and the read of
//! a region's octets. Each test file keeps its own `End` (split CQs in one, the quiet
//! mark's switch in the other).

use crate::{Device, Mr, Qp, RecvWr, SendOp, WcOpcode, WcStatus};

pub(crate) const SEND: SendOp = SendOp::Send {
    solicited: false,
    invalidate: None,
};
pub(crate) const SLOT: usize = 64;
pub(crate) const SLOTS: usize = 32;

pub(crate) type Log = Vec<(u64, WcOpcode, WcStatus, u32)>;

/// Connects `a_qp` on `a_dev` to `b_qp` on `b_dev` through a loopback listener on `b_dev`.
pub(crate) fn connect(a_dev: &Device, a_qp: &Qp, b_dev: &Device, b_qp: &Qp) {
    let listener = b_dev.listen("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::scope(|s| {
        let h = s.spawn(|| listener.accept().unwrap().accept(b_qp, b"").unwrap());
        a_dev.connect(addr, a_qp, b"").unwrap();
        h.join().unwrap();
    });
}

pub(crate) fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Posts receive `*next` into slot `*next % SLOTS` of `mr`, then counts it.
pub(crate) fn post_recv_slot(qp: &Qp, mr: &Mr, next: &mut u64) {
    let s = (*next % SLOTS as u64) as usize;
    qp.post_recv(RecvWr::new(*next, mr.sge(s * SLOT, SLOT)))
        .unwrap();
    *next += 1;
}

/// All of `mr`'s octets.
pub(crate) fn octets(mr: &Mr) -> Vec<u8> {
    let mut mem = vec![0; mr.len()];
    mr.read(0, &mut mem).unwrap();
    mem
}
