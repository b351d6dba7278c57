//! softrnic's own TCP against Linux siw: rdma-core's `rping` in both roles, data
//! verified, with softrnic on the UDP frame backend (`--transport user:udp:...`) and
//! the siw guest on the rig's `--net udp` link (QEMU `-netdev dgram`): no kernel TCP
//! on our side, no privilege. The guest is 192.168.78.2 and expects us at
//! 192.168.78.1; QEMU takes frames for the guest on UDP port P and sends the guest's
//! to P+1, which our device binds.
//!
//! Without a usable rig the tests skip loudly (see `rig/mod.rs`); `SOFTRNIC_RIG=require`
//! makes that a failure.

mod rig;

use rig::{each_rping, one_guest, rig, rping_runs};
use softrnic_cli::rping::{self, RpingOpts};
use softrnic_rnic::{CrcPolicy, Device, DeviceConfig, UserLink, UserTcp};
use softrnic_testkit::text;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const OUR_IP: Ipv4Addr = Ipv4Addr::new(192, 168, 78, 1);
const GUEST_IP: Ipv4Addr = Ipv4Addr::new(192, 168, 78, 2);
/// rping's largest buffer (`-S`): its limit is 64 KiB exclusive.
const RPING_MAX: usize = 65535;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/rig/siw-vm.sh")
}

/// A UDP port P for QEMU whose P+1 is free for us (both free now; QEMU binds P when
/// the guest boots, our device binds P+1 when it opens).
fn udp_ports() -> (u16, SocketAddr) {
    for _ in 0..100 {
        let s = UdpSocket::bind("127.0.0.1:0").expect("a UDP port");
        let ours = s.local_addr().unwrap().port();
        if ours > 1024 && UdpSocket::bind(("127.0.0.1", ours - 1)).is_ok() {
            return (ours - 1, SocketAddr::from(([127, 0, 0, 1], ours)));
        }
    }
    panic!("no pair of free UDP ports");
}

/// The device's own TCP on the frames QEMU exchanges with the guest.
fn user_tcp(qemu_port: u16, ours: SocketAddr) -> UserTcp {
    let link = UserLink::Udp {
        local: ours,
        remote: SocketAddr::from(([127, 0, 0, 1], qemu_port)),
    };
    UserTcp::on(link, OUR_IP, 24)
}

fn opts(size: usize, count: u64, user: &UserTcp) -> RpingOpts {
    RpingOpts {
        count,
        size,
        verify: true,
        // The guest runs under software emulation: generous, never reached when all
        // is well.
        timeout: Duration::from_secs(60),
        user_tcp: Some(user.clone()),
        ..RpingOpts::default()
    }
}

/// A guest booted by `siw-vm.sh serve ... --net udp`; stopped when dropped.
struct Guest {
    name: &'static str,
    stopped: bool,
}

impl Guest {
    fn serve(name: &'static str, cmd: &str, qemu_port: u16, guest_port: u16) -> Guest {
        let o = Command::new(script())
            .args(["serve", cmd, "--net", "udp", "--name", name])
            .args(["--udp-port", &qemu_port.to_string()])
            .args(["--port", &guest_port.to_string()])
            .output()
            .expect("siw-vm.sh serve runs");
        let out = text(&o);
        assert!(
            o.status.success() && out.contains("READY"),
            "siw guest did not come up:\n{out}"
        );
        Guest {
            name,
            stopped: false,
        }
    }

    /// Stops the guest; what its command printed.
    fn stop(mut self) -> String {
        self.stopped = true;
        let o = Command::new(script())
            .args(["stop", "--name", self.name])
            .output()
            .expect("siw-vm.sh stop runs");
        text(&o)
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        if !self.stopped {
            let _ = Command::new(script())
                .args(["stop", "--name", self.name])
                .output();
        }
    }
}

/// softrnic's `rping -c` on its own TCP against siw's `rping -s`: rping's smallest,
/// a middle and its largest buffer, then CRC asked for by softrnic.
#[test]
fn rping_softrnic_user_tcp_client_to_siw_server_over_udp_frames() {
    let Some(_rig) = rig() else { return };
    let _g = one_guest();
    let (qemu_port, ours) = udp_ports();
    let guest = Guest::serve(
        "udp-rping-srv",
        &format!("rping -s -P -a $GUEST_IP -p 7174 -C 2 -S {RPING_MAX} -v"),
        qemu_port,
        7174,
    );
    let user = user_tcp(qemu_port, ours);
    let server = SocketAddr::from((GUEST_IP, 7174));
    for (size, crc) in [(23, false), (4096, false), (RPING_MAX, false), (1000, true)] {
        let mut o = opts(size, 2, &user);
        if crc {
            o.mpa.crc = CrcPolicy::Required;
        }
        // Each run opens a device of its own, which binds our UDP port anew.
        let n = rping::client(server, &o).unwrap_or_else(|e| panic!("rping -S {size}: {e}"));
        assert_eq!(n, 2, "rping -S {size}");
    }
    let out = guest.stop();
    assert!(out.contains("server ping data: rdma-ping-1"), "{out}");
}

/// siw's `rping -c` against softrnic's server on its own TCP: sizes from smallest to
/// largest, each verified by siw (`-V`) and served by softrnic.
#[test]
fn rping_siw_client_to_softrnic_user_tcp_server_over_udp_frames() {
    let Some(_rig) = rig() else { return };
    let _g = one_guest();
    let (qemu_port, ours) = udp_ports();
    let sizes = [23usize, 4096, RPING_MAX];
    let user = user_tcp(qemu_port, ours);
    let dev = Device::open(DeviceConfig {
        user_tcp: Some(user.clone()),
        ..DeviceConfig::default()
    })
    .expect("device on UDP frames");
    let l = dev.listen((OUR_IP, 0)).expect("listen");
    let port = l.local_addr().expect("bound").port();
    let cases: Vec<RpingOpts> = sizes.iter().map(|_| opts(RPING_MAX, 2, &user)).collect();
    let server = std::thread::spawn(move || {
        cases
            .iter()
            .map(|o| rping::serve_one(&dev, &l, o))
            .collect::<Vec<_>>()
    });
    let clients: Vec<String> = sizes
        .iter()
        .map(|s| format!("timeout 120 rping -c -a $HOST_IP -p {port} -C 2 -V -S {s}"))
        .collect();
    let cmd = each_rping(&clients);
    let o = Command::new(script())
        .args(["client", &cmd, "--net", "udp", "--name", "udp-rping-cli"])
        .args(["--udp-port", &qemu_port.to_string(), "--timeout", "400"])
        .output()
        .expect("siw-vm.sh client runs");
    let out = text(&o);
    let runs = rping_runs(&out);
    assert_eq!(runs.len(), sizes.len(), "{out}");
    assert!(
        runs.iter().all(rig::RpingRun::ok),
        "siw rping clients failed: {runs:?}\n{out}"
    );
    for (i, r) in server
        .join()
        .expect("server thread")
        .into_iter()
        .enumerate()
    {
        assert_eq!(r.expect("softrnic server"), 2, "client {i}");
    }
}
