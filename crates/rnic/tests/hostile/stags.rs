//! STags a peer cannot guess, and regions a peer cannot invalidate.

use softrnic_rnic::*;

/// RFC 5042 asks for STags that a peer cannot predict from the ones it has seen. The
/// consumer keys of consecutive registrations are random: were they an arithmetic
/// sequence (as they once were, +0x3b each), every step would be the same.
#[test]
fn consumer_keys_are_not_predictable() {
    let dev = Device::open(DeviceConfig::default()).unwrap();
    let pd = dev.alloc_pd();
    let mrs: Vec<Mr> = (0..64)
        .map(|_| pd.alloc_mr(16, Access::REMOTE_WRITE).unwrap())
        .collect();
    let keys: Vec<u8> = mrs.iter().map(|m| m.rkey() as u8).collect();
    let mut steps: Vec<u8> = keys.windows(2).map(|w| w[1].wrapping_sub(w[0])).collect();
    steps.sort_unstable();
    steps.dedup();
    // 63 random steps take fewer than 16 distinct values with probability below 1e-40.
    assert!(steps.len() >= 16, "keys {keys:02x?}");
    // The STags are distinct, and a deregistered index comes back under another key.
    let old = mrs[10].rkey();
    drop(mrs);
    let again: Vec<Mr> = (0..64)
        .map(|_| pd.alloc_mr(16, Access::REMOTE_WRITE).unwrap())
        .collect();
    assert!(again.iter().all(|m| m.rkey() != old), "{old:#x} came back");
}

/// REMOTE_INVALIDATE means "a peer may invalidate this": only with a remote right.
#[test]
fn remote_invalidate_needs_a_remote_right() {
    let dev = Device::open(DeviceConfig::default()).unwrap();
    let pd = dev.alloc_pd();
    let e = pd
        .alloc_mr(16, Access::LOCAL_WRITE | Access::REMOTE_INVALIDATE)
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    assert_eq!(e.fault(), Fault::Caller);
    for right in [Access::REMOTE_READ, Access::REMOTE_WRITE] {
        pd.alloc_mr(16, right | Access::REMOTE_INVALIDATE).unwrap();
    }
}
