//! A hang report says what each side holds: the Read outstanding at its requester (ORD
//! in use), the octets in flight and the timer that will resend them, the packets the
//! network dropped, and at the responder that nothing arrived.

use super::{Impairments, SimNet, UserTcp};
use crate::{Access, Device, DeviceConfig, QpInit, SendWr, WcStatus};
use std::net::Ipv4Addr;
use std::time::Duration;

const A: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 2);

fn device(net: &SimNet, addr: Ipv4Addr) -> Device {
    Device::open(DeviceConfig {
        user_tcp: Some(UserTcp::sim(net, addr)),
        ..DeviceConfig::default()
    })
    .unwrap()
}

/// The report's line that starts with `prefix` (after indentation).
fn line<'a>(report: &'a str, prefix: &str) -> &'a str {
    report
        .lines()
        .map(str::trim_start)
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line {prefix:?} in:\n{report}"))
}

#[test]
fn a_stall_report_shows_the_outstanding_read_its_octets_in_flight_and_the_dropped_packet() {
    let net = SimNet::new(Impairments::default());
    let (da, db) = (device(&net, A), device(&net, B));
    let (pa, pb) = (da.alloc_pd(), db.alloc_pd());
    let (ca, cb) = (da.create_cq(16).unwrap(), db.create_cq(16).unwrap());
    let qa = da.create_qp(&pa, QpInit::with_cqs(&ca, &ca, 8, 8)).unwrap();
    let qb = db.create_qp(&pb, QpInit::with_cqs(&cb, &cb, 8, 8)).unwrap();
    let listener = db.listen((B, 0)).unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::scope(|s| {
        s.spawn(|| listener.accept().unwrap().accept(&qb, b"").unwrap());
        da.connect(addr, &qa, b"").unwrap();
    });
    let source = pb.alloc_mr(64, Access::REMOTE_READ).unwrap();
    source.write(0, &[0x5a; 64]).unwrap();
    let sink = pa.alloc_mr(64, Access::LOCAL_WRITE).unwrap();

    // Every packet from now on is lost: the Read Request goes out and never arrives.
    net.set_impairments(Impairments {
        loss: 1.0,
        ..Impairments::default()
    });
    qa.post_send(SendWr::read(
        7,
        sink.sge(0, 64),
        source.addr(),
        source.rkey(),
    ))
    .unwrap();
    let ra = da.stall_report();
    let rb = db.stall_report();
    let rn = net.stall_report();

    // The requester: one Read outstanding, nothing queued behind it.
    let qp_line = line(&ra, &format!("QP {}:", qa.id().0));
    assert!(
        qp_line.starts_with(&format!("QP {}: Rts ", qa.id().0)),
        "{ra}"
    );
    assert!(qp_line.contains("sq: 0, orq: 1, irq: 0"), "{ra}");
    // Its connection: the Request in flight (sent, not acknowledged) and a timer armed
    // to repair it.
    let tcp_a = line(&ra, &format!("{A}:"));
    let field = |l: &str, name: &str| -> u64 {
        let at = l.find(name).unwrap_or_else(|| panic!("no {name} in {l}")) + name.len();
        l[at..].split_whitespace().next().unwrap().parse().unwrap()
    };
    assert!(
        field(tcp_a, " flight ") > 0 && field(tcp_a, " nxt ") > field(tcp_a, " una "),
        "{ra}"
    );
    assert!(tcp_a.contains(" pto ") || tcp_a.contains(" rto "), "{ra}");
    // The responder: no inbound Read queued, nothing unread, nothing held out of order.
    let qp_b = line(&rb, &format!("QP {}:", qb.id().0));
    assert!(qp_b.contains("orq: 0, irq: 0"), "{rb}");
    let tcp_b = line(&rb, &format!("{B}:"));
    assert_eq!(field(tcp_b, " unread "), 0, "{rb}");
    assert_eq!(field(tcp_b, " ooo "), 0, "{rb}");
    // The network: the packet was dropped, none is held.
    assert!(rn.contains("lost: 1") || rn.contains("lost: 2"), "{rn}");
    assert!(rn.contains(&format!("to {A}: 0 packets")), "{rn}");

    // The network heals: the Read completes (on a resend) and the report shows it gone.
    net.set_impairments(Impairments::default());
    let c = ca.wait_for(1, Duration::from_secs(60));
    assert_eq!(c.len(), 1);
    assert_eq!((c[0].wr_id, c[0].status), (7, WcStatus::Success));
    let mut got = [0u8; 64];
    sink.read(0, &mut got).unwrap();
    assert_eq!(got, [0x5a; 64]);
    let ra = da.stall_report();
    assert!(
        line(&ra, &format!("QP {}:", qa.id().0)).contains("orq: 0"),
        "{ra}"
    );
}

/// A Write posted behind an outstanding Read is finished (its octets are in the TCP) but
/// its completion waits for the Read's, in posting order: the report says so (the
/// outbox holds both requests, none released, nothing in the CQ). Once the Read's
/// response comes, both are released and delivered: the CQ holds them.
#[test]
fn a_stall_report_shows_completions_held_behind_a_read_and_what_the_cq_holds() {
    let net = SimNet::new(Impairments::default());
    let (da, db) = (device(&net, A), device(&net, B));
    let (pa, pb) = (da.alloc_pd(), db.alloc_pd());
    let (ca, cb) = (da.create_cq(16).unwrap(), db.create_cq(16).unwrap());
    let qa = da.create_qp(&pa, QpInit::with_cqs(&ca, &ca, 8, 8)).unwrap();
    let qb = db.create_qp(&pb, QpInit::with_cqs(&cb, &cb, 8, 8)).unwrap();
    let listener = db.listen((B, 0)).unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::scope(|s| {
        s.spawn(|| listener.accept().unwrap().accept(&qb, b"").unwrap());
        da.connect(addr, &qa, b"").unwrap();
    });
    let target = pb
        .alloc_mr(
            64,
            Access::REMOTE_READ | Access::REMOTE_WRITE | Access::LOCAL_WRITE,
        )
        .unwrap();
    target.write(0, &[0x5a; 64]).unwrap();
    let local = pa.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    local.write(32, &[0xa5; 32]).unwrap();

    // Nothing arrives: the Read stays outstanding, the Write behind it is sent (handed
    // to the TCP) and waits for it.
    net.set_impairments(Impairments {
        loss: 1.0,
        ..Impairments::default()
    });
    qa.post_send(SendWr::read(
        7,
        local.sge(0, 16),
        target.addr(),
        target.rkey(),
    ))
    .unwrap();
    qa.post_send(SendWr::write(
        8,
        local.sge(32, 32),
        target.addr() + 32,
        target.rkey(),
    ))
    .unwrap();
    let ra = da.stall_report();
    let qp_line = line(&ra, &format!("QP {}:", qa.id().0));
    assert!(qp_line.contains("sq: 0, orq: 1"), "{ra}");
    assert!(
        qp_line.contains("outbox 0 completions 0 events, seq posted 2 released 0, held 2"),
        "{ra}"
    );
    assert!(qp_line.contains("send CQ holds 0,"), "{ra}");

    net.set_impairments(Impairments::default());
    let c = ca.wait_for(2, Duration::from_secs(60));
    assert_eq!(
        c.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        [(7, WcStatus::Success), (8, WcStatus::Success)]
    );
    let ra = da.stall_report();
    let qp_line = line(&ra, &format!("QP {}:", qa.id().0));
    assert!(
        qp_line.contains("outbox 0 completions 0 events, seq posted 2 released 2, held 0"),
        "{ra}"
    );
}
