//! Two devices connected over loopback: both ends of the QP's TCP connection start
//! without BBR and with the fixed receive buffer, unless a device is told to keep the
//! system's settings (`DeviceConfig::same_host_tcp`). The sockets are found the way a
//! user would, among the process's descriptors.

mod common;
use common::*;
use softrnic_rnic::*;
use std::os::fd::RawFd;

/// An int socket option of `fd`, if it has it.
fn int_opt(fd: RawFd, level: libc::c_int, opt: libc::c_int) -> Option<libc::c_int> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `fd` is one of this process's descriptors (at worst not a socket: the
    // call fails), and `v`/`len` are a correctly sized out-parameter pair.
    let r = unsafe {
        libc::getsockopt(
            fd,
            level,
            opt,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    (r == 0).then_some(v)
}

/// (socket, congestion control, receive buffer) of every connected TCP socket this
/// process holds; a socket is named by its `/proc/self/fd` link (`socket:[inode]`).
fn connected_tcp_sockets() -> Vec<(String, String, libc::c_int)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd").unwrap() {
        let entry = entry.unwrap();
        let Ok(fd) = entry.file_name().to_string_lossy().parse::<RawFd>() else {
            continue;
        };
        let Ok(link) = std::fs::read_link(entry.path()) else {
            continue;
        };
        if int_opt(fd, libc::SOL_SOCKET, libc::SO_TYPE) != Some(libc::SOCK_STREAM) {
            continue;
        }
        // SAFETY: a zeroed sockaddr_storage is a valid out-parameter of its size.
        let mut peer: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        // SAFETY: `peer`/`len` describe a writable sockaddr_storage.
        let connected = unsafe {
            libc::getpeername(
                fd,
                (&mut peer as *mut libc::sockaddr_storage).cast(),
                &mut len,
            )
        } == 0;
        if let (true, Some(cc), Some(rcv)) = (
            connected,
            socket::tcp_congestion(fd),
            int_opt(fd, libc::SOL_SOCKET, libc::SO_RCVBUF),
        ) {
            found.push((link.to_string_lossy().into_owned(), cc, rcv));
        }
    }
    found
}

fn system_congestion() -> String {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
        .unwrap()
        .trim()
        .to_owned()
}

#[test]
fn a_loopback_qp_connection_is_unpaced_with_a_fixed_receive_buffer_unless_told_otherwise() {
    let system = system_congestion();
    if !system.starts_with("bbr") {
        eprintln!("SKIPPED: the system's congestion control ({system}) does not pace");
        return;
    }
    for policy in [SameHostTcp::Tuned, SameHostTcp::System] {
        let cfg = DeviceConfig {
            same_host_tcp: policy,
            ..DeviceConfig::default()
        };
        let before: Vec<String> = connected_tcp_sockets().into_iter().map(|s| s.0).collect();
        let (a, b) = end().config(cfg).pair();
        let sockets: Vec<_> = connected_tcp_sockets()
            .into_iter()
            .filter(|s| !before.contains(&s.0))
            .collect();
        assert_eq!(sockets.len(), 2, "{policy:?}: the QP connection's two ends");
        for (_, cc, rcv) in &sockets {
            match policy {
                SameHostTcp::Tuned => {
                    assert!(cc == "cubic" || cc == "reno", "{cc}");
                    // 1 MiB, doubled by Linux for its bookkeeping.
                    assert_eq!(*rcv, 2 << 20);
                }
                SameHostTcp::System => {
                    assert_eq!(*cc, system);
                    assert_ne!(*rcv, 2 << 20, "Linux's tuning");
                }
            }
        }
        // The connection works: one Send, its octets verified.
        let src = a.pd.alloc_mr(4096, Access::empty()).unwrap();
        let data = pattern(4096, 1);
        src.write(0, &data).unwrap();
        let dst = b.pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
        b.qp.post_recv(RecvWr::new(2, [dst.sge(0, 4096)])).unwrap();
        a.qp.post_send(SendWr::send(1, [src.sge(0, 4096)])).unwrap();
        assert_eq!(one(&a.cq).status, WcStatus::Success);
        let r = one(&b.cq);
        assert_eq!((r.status, r.byte_len), (WcStatus::Success, 4096));
        assert_eq!(dst.to_vec(), data);
        drop((a, b));
    }
}
