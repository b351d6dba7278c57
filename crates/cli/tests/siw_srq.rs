//! A softrnic server on a shared receive queue serving Linux siw's `rping` clients
//! (the rig: a QEMU guest running siw, see `rig/mod.rs`): every advert arrives in an
//! SRQ receive, the clients verify the data the server wrote back (`-V`), and the wire
//! shows rping's exchange, graceful close, no Terminate. Without a usable rig the test
//! skips loudly (`SOFTRNIC_RIG=require` makes that a failure).
//!
//! Not written yet: the same against siw's perftest clients (`ib_send_bw -R` with the
//! server's receives on an SRQ): the perftest server has no SRQ option yet.

mod rig;

use rig::{each_rping, one_guest, rig, rping_runs};
use softrnic_cli::rping::{self, RpingOpts};
use softrnic_rnic::{Device, DeviceConfig};
use softrnic_wire::Opcode;
use std::net::SocketAddr;
use std::time::Duration;

#[test]
fn rping_siw_clients_to_a_softrnic_server_on_an_srq() {
    let Some(rig) = rig() else { return };
    let _g = one_guest();
    let sizes = [23usize, 4096, 65535];
    let dev = Device::open(DeviceConfig::default()).expect("device");
    let l = dev
        .listen(SocketAddr::from(([127, 0, 0, 1], 0)))
        .expect("listen");
    let port = l.local_addr().expect("bound").port();
    let opts = RpingOpts {
        count: 3,
        size: 65535,
        verify: true,
        srq: true,
        timeout: Duration::from_secs(60),
        ..RpingOpts::default()
    };
    let n = sizes.len();
    let server = std::thread::spawn(move || {
        (0..n)
            .map(|_| rping::serve_one(&dev, &l, &opts))
            .collect::<Vec<_>>()
    });
    let clients: Vec<String> = sizes
        .iter()
        .map(|s| format!("timeout 120 rping -c -a $HOST_IP -p {port} -C 3 -V -S {s}"))
        .collect();
    let f = rig.client("srq-rping-cli", &each_rping(&clients), &[port], &[]);
    let runs = rping_runs(&f.output);
    assert_eq!(runs.len(), sizes.len(), "{}", f.output);
    assert!(
        runs.iter().all(rig::RpingRun::ok),
        "siw rping clients failed: {runs:?}\n{}",
        f.output
    );
    for (i, r) in server
        .join()
        .expect("server thread")
        .into_iter()
        .enumerate()
    {
        assert_eq!(r.expect("softrnic server on an SRQ"), 3, "client {i}");
    }
    assert_eq!(f.conns.len(), sizes.len());
    for c in &f.conns {
        let sends = c
            .fpdus()
            .filter(|p| p.header.opcode == Opcode::Send && p.header.last)
            .count();
        // Per iteration two adverts each way.
        assert_eq!(sends, 4 * 3, "{c:?}");
        assert!(
            !c.fpdus().any(|p| p.header.opcode == Opcode::Terminate),
            "no Terminate: {c:?}"
        );
        assert!(
            c.to_server.fin && c.to_client.fin && !c.to_server.rst,
            "graceful: {c:?}"
        );
    }
}

/// The same server and softrnic's own rping client (also on an SRQ) over loopback,
/// which needs no rig: the data the client verifies went through SRQ receives at both
/// ends.
#[test]
fn rping_on_srqs_over_loopback() {
    let dev = Device::open(DeviceConfig::default()).expect("device");
    let l = dev
        .listen(SocketAddr::from(([127, 0, 0, 1], 0)))
        .expect("listen");
    let addr = l.local_addr().expect("bound");
    let opts = RpingOpts {
        count: 20,
        size: 4000,
        verify: true,
        srq: true,
        ..RpingOpts::default()
    };
    let o = opts.clone();
    let server = std::thread::spawn(move || rping::serve_one(&dev, &l, &o));
    assert_eq!(rping::client(addr, &opts).expect("client"), 20);
    assert_eq!(server.join().expect("server thread").expect("server"), 20);
}
