//! An engine drives only the QPs whose sockets it serves: a readiness event or a timer
//! it fetched for a QP that has since moved to another engine (its CQ moved) is
//! skipped. Before, such a stale event drove the QP from the old engine's thread, which
//! then served the peer's RDMA Read on the wrong CPU: `tests/handoff.rs`
//! (`a_claimed_qp_moves_with_its_cq`) saw the Read served with neither the QP's new
//! engine nor its consumer involved, a few times in a hundred on a loaded machine.
//! Here the stale event is handed to the QP directly, as the old engine's loop would,
//! so the check does not depend on timing.
//!
//! Also here, read under the QP's lock rather than through the device's lifetime
//! (which an engine at work extends): a consumer that arms its CQ gives back the
//! socket and the device it held at once.

use crate::{Access, Cq, Device, DeviceConfig, Pd, Qp, QpInit, SendWr, WcStatus};

struct Side {
    dev: Device,
    pd: Pd,
    cq: Cq,
    qp: Qp,
}

fn side(engines: usize) -> Side {
    let dev = Device::open(DeviceConfig {
        engine_threads: engines,
        comp_vectors: engines,
        ..DeviceConfig::default()
    })
    .unwrap();
    let pd = dev.alloc_pd();
    let cq = dev.create_cq_on(64, 0).unwrap();
    let qp = dev.create_qp(&pd, QpInit::new(&cq, 16, 16)).unwrap();
    Side { dev, pd, cq, qp }
}

/// `a` (two engines, its QP on engine 0) connected to `b`.
fn connected() -> (Side, Side) {
    let (a, b) = (side(2), side(1));
    let listener = b.dev.listen("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::scope(|s| {
        s.spawn(|| listener.accept().unwrap().accept(&b.qp, b"").unwrap());
        a.dev.connect(addr, &a.qp, b"").unwrap();
    });
    assert_eq!(a.qp.shared.engine(), 0);
    (a, b)
}

/// `b` reads 4 KiB of `a`'s memory; the Read Request is on its way when this returns
/// (the post sends it). Returns the check that it completed with the right data.
fn read_from(a: &Side, b: &Side) -> impl FnOnce() {
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 31 + 7) as u8).collect();
    let exposed = a.pd.alloc_mr(data.len(), Access::REMOTE_READ).unwrap();
    exposed.write(0, &data).unwrap();
    let sink = b.pd.alloc_mr(data.len(), Access::LOCAL_WRITE).unwrap();
    let wr = SendWr::read(5, sink.sge(0, data.len()), exposed.addr(), exposed.rkey());
    b.qp.post_send(wr).unwrap();
    let cq = b.cq.clone();
    move || {
        let c = cq.wait_for(1, std::time::Duration::from_secs(20));
        assert_eq!(c.len(), 1, "the Read did not complete");
        assert_eq!((c[0].wr_id, c[0].status), (5, WcStatus::Success));
        let mut got = vec![0; data.len()];
        sink.read(0, &mut got).unwrap();
        assert_eq!(got, data);
        drop(exposed);
    }
}

#[test]
fn an_event_fetched_before_the_qp_moved_does_not_drive_it() {
    let (a, b) = connected();
    a.dev.modify_cq(&a.cq, Some(1)).unwrap();
    assert_eq!(a.qp.shared.engine(), 1);
    let completed = read_from(&a, &b);
    // Engine 0 fetched a readiness event for the socket before the move and handles
    // it now.
    let mut drove = false;
    a.qp.shared
        .on_ready(&a.dev.shared, 0, false, || drove = true);
    assert!(!drove, "engine 0 drove a QP that moved to engine 1");
    // Engine 1 serves the Read.
    completed();
}

#[test]
fn a_timer_taken_before_the_qp_moved_does_not_run_it() {
    let (a, b) = connected();
    a.dev.modify_cq(&a.cq, Some(1)).unwrap();
    let completed = read_from(&a, &b);
    let mut ran = false;
    a.qp.shared.on_timer(&a.dev.shared, 0, || ran = true);
    assert!(!ran, "engine 0 ran a timer of a QP that moved to engine 1");
    completed();
}

#[test]
fn the_engine_of_the_qp_drives_it() {
    let (a, b) = connected();
    let completed = read_from(&a, &b);
    // What the other two tests skip is the engine's own work, done here by hand (the
    // engine's own event may come before or after: either serves the Read).
    let mut drove = false;
    a.qp.shared
        .on_ready(&a.dev.shared, 0, false, || drove = true);
    assert!(drove, "the QP's own engine was turned away");
    completed();
}

#[test]
fn a_consumer_that_arms_its_cq_lets_go_of_the_socket_and_the_device() {
    let (a, _b) = connected();
    let mut spins = 0u64;
    while a.qp.shared.claim_state() != (true, true) {
        assert!(a.cq.poll_one().is_none(), "no traffic expected");
        spins += 1;
        assert!(spins < 100_000_000, "the polling consumer never claimed");
    }
    a.cq.req_notify(false);
    assert_eq!(
        a.qp.shared.claim_state(),
        (false, false),
        "the socket or the device is still held by the sleeping consumer"
    );
}
