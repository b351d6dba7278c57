//! Device-wide limits: each one exceeded is a clean [`Error::Limit`] that allocates
//! nothing, and what is freed can be used again.

use softrnic_rnic::*;

fn limit<T: std::fmt::Debug>(r: Result<T>, what: &str) {
    match r {
        Err(Error::Limit(w)) => assert_eq!(w, what),
        r => panic!("expected Limit({what}), got {r:?}"),
    }
}

#[test]
fn cq_entries_per_cq_and_in_all() {
    let dev = Device::open(DeviceConfig {
        max_cqe: 64,
        max_cq_entries: 100,
        ..DeviceConfig::default()
    })
    .unwrap();
    limit(dev.create_cq(65), "max_cqe");
    let a = dev.create_cq(60).unwrap();
    limit(dev.create_cq(41), "max_cq_entries");
    let b = dev.create_cq(40).unwrap();
    assert_eq!(dev.usage().cq_entries, 100);
    drop(a);
    assert_eq!(dev.usage().cq_entries, 40);
    let _c = dev.create_cq(60).unwrap();
    drop(b);
    assert_eq!(dev.usage().cq_entries, 60);
    let attr = dev.query();
    assert_eq!((attr.max_cqe, attr.max_cq_entries), (64, 100));
}

#[test]
fn registered_memory_per_region_and_in_all() {
    let dev = Device::open(DeviceConfig {
        max_mr_size: 1 << 20,
        max_registered: 3 << 20,
        ..DeviceConfig::default()
    })
    .unwrap();
    let pd = dev.alloc_pd();
    limit(
        pd.alloc_mr((1 << 20) + 1, Access::LOCAL_WRITE),
        "max_mr_size",
    );
    let mrs: Vec<Mr> = (0..3)
        .map(|_| pd.alloc_mr(1 << 20, Access::LOCAL_WRITE).unwrap())
        .collect();
    limit(pd.alloc_mr(1, Access::LOCAL_WRITE), "max_registered");
    assert_eq!(dev.usage().registered, 3 << 20);
    drop(mrs);
    assert_eq!(dev.usage().registered, 0);
    pd.alloc_mr(1 << 20, Access::LOCAL_WRITE).unwrap();
    assert_eq!(dev.query().max_registered, 3 << 20);
}

#[test]
fn queue_pairs() {
    let dev = Device::open(DeviceConfig {
        max_qp: 2,
        ..DeviceConfig::default()
    })
    .unwrap();
    let pd = dev.alloc_pd();
    let cq = dev.create_cq(16).unwrap();
    let init = || QpInit {
        send_cq: &cq,
        recv_cq: &cq,
        sq_depth: 4,
        rq_depth: 4,
    };
    let a = dev.create_qp(&pd, init()).unwrap();
    let _b = dev.create_qp(&pd, init()).unwrap();
    limit(dev.create_qp(&pd, init()), "max_qp");
    assert_eq!(dev.usage().qps, 2);
    drop(a);
    dev.create_qp(&pd, init()).unwrap();
    let e = dev
        .create_qp(
            &pd,
            QpInit {
                sq_depth: 16385,
                ..init()
            },
        )
        .unwrap_err();
    assert_eq!(e.fault(), Fault::Caller, "{e:?}");
}
