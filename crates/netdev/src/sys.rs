//! Every system call the crate makes that std does not wrap, and so every `unsafe`
//! block of the crate. Each wrapper takes safe Rust types and returns `io::Result`.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// `-1` from a libc call becomes the thread's `errno`.
fn check(ret: libc::ssize_t) -> io::Result<usize> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
}

/// Receives one datagram or packet without blocking. Returns its *real* length
/// (`MSG_TRUNC`), which exceeds `buf.len()` when the tail was cut off.
pub(crate) fn recv_trunc(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is a live, writable allocation of `buf.len()` octets for the whole
    // call, and recv writes at most that many; an invalid fd only yields EBADF.
    let n = unsafe {
        libc::recv(
            fd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_TRUNC | libc::MSG_DONTWAIT,
        )
    };
    check(n)
}

/// Waits until `fd` is readable or `timeout` passes (`None`: no limit). True when
/// readable (or in error or hung up: the next read tells which).
pub(crate) fn poll_readable(fd: RawFd, timeout: Option<Duration>) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.map_or(-1, |t| {
        // Round up so that a short wait does not become a busy poll of 0 ms.
        let ms = t.as_nanos().div_ceil(1_000_000);
        ms.min(i32::MAX as u128) as libc::c_int
    });
    loop {
        // SAFETY: `pfd` is one valid pollfd that lives across the call, and the count
        // passed is 1.
        let ret = unsafe { libc::poll(&mut pfd, 1, ms) };
        if ret >= 0 {
            return Ok(ret > 0);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Reads one frame with `readv` into `buf`, spilling into `spill` what does not fit;
/// returns the frame's whole length (more than `buf.len()` when it did not fit).
pub(crate) fn read_spill(fd: RawFd, buf: &mut [u8], spill: &mut [u8]) -> io::Result<usize> {
    let iov = [
        libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        },
        libc::iovec {
            iov_base: spill.as_mut_ptr().cast(),
            iov_len: spill.len(),
        },
    ];
    // SAFETY: both iovecs describe live, writable, non-overlapping buffers that the
    // mutable borrows keep alive and unaliased for the whole call; the count is 2.
    let n = unsafe { libc::readv(fd, iov.as_ptr(), 2) };
    check(n)
}

/// An `ifreq` naming interface `name` (at most 15 octets, no NUL).
fn ifreq(name: &str) -> io::Result<libc::ifreq> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains('\0') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("interface name {name:?}: 1..=15 octets, no NUL"),
        ));
    }
    // SAFETY: ifreq is plain old data (arrays, integers, a union of such and a raw
    // pointer); all zeroes is a valid value of it.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    Ok(req)
}

fn ifreq_name(req: &libc::ifreq) -> String {
    let bytes: Vec<u8> = req
        .ifr_name
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Attaches `tun` (an open `/dev/net/tun`) to TAP interface `name`, without the
/// packet-information prefix, creating the interface if it does not exist. Returns
/// the interface's name as the kernel has it.
pub(crate) fn tap_attach(tun: &impl AsRawFd, name: &str) -> io::Result<String> {
    let mut req = ifreq(name)?;
    req.ifr_ifru.ifru_flags = (libc::IFF_TAP | libc::IFF_NO_PI) as libc::c_short;
    // SAFETY: TUNSETIFF reads and writes one `ifreq`, which `req` is, exclusively
    // borrowed for the call.
    let ret = unsafe { libc::ioctl(tun.as_raw_fd(), libc::TUNSETIFF, &mut req) };
    check(ret as libc::ssize_t)?;
    Ok(ifreq_name(&req))
}

/// A datagram socket to ask the kernel about interfaces with.
fn control_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket takes no pointers; the result is checked before use.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    check(fd as libc::ssize_t)?;
    // SAFETY: `fd` is a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Runs the `ifreq` ioctl `request` on interface `name`.
fn if_ioctl(name: &str, request: libc::c_ulong) -> io::Result<libc::ifreq> {
    let sock = control_socket()?;
    let mut req = ifreq(name)?;
    // SAFETY: the SIOCGIF* requests used here read and write one `ifreq`, which `req`
    // is, exclusively borrowed for the call.
    let ret = unsafe { libc::ioctl(sock.as_raw_fd(), request, &mut req) };
    check(ret as libc::ssize_t)?;
    Ok(req)
}

/// The MTU of interface `name`.
pub(crate) fn interface_mtu(name: &str) -> io::Result<usize> {
    let req = if_ioctl(name, libc::SIOCGIFMTU)?;
    // SAFETY: SIOCGIFMTU filled in the `ifru_mtu` member of the union.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu };
    Ok(mtu.max(0) as usize)
}
/// The hardware (MAC) address of Ethernet interface `name`.
pub(crate) fn interface_mac(name: &str) -> io::Result<[u8; 6]> {
    let req = if_ioctl(name, libc::SIOCGIFHWADDR)?;
    // SAFETY: SIOCGIFHWADDR filled in the `ifru_hwaddr` member of the union.
    let sa = unsafe { req.ifr_ifru.ifru_hwaddr };
    if sa.sa_family != libc::ARPHRD_ETHER {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name} is not an Ethernet interface"),
        ));
    }
    let mut mac = [0u8; 6];
    for (m, &b) in mac.iter_mut().zip(sa.sa_data.iter()) {
        *m = b as u8;
    }
    Ok(mac)
}

/// The index of interface `name`.
pub(crate) fn interface_index(name: &str) -> io::Result<libc::c_int> {
    let req = if_ioctl(name, libc::SIOCGIFINDEX)?;
    // SAFETY: SIOCGIFINDEX filled in the `ifru_ifindex` member of the union.
    Ok(unsafe { req.ifr_ifru.ifru_ifindex })
}

/// `PACKET_OUTGOING` from linux/if_packet.h: a frame this host sent.
pub(crate) const PACKET_OUTGOING: u8 = 4;
/// `PACKET_IGNORE_OUTGOING` (Linux 4.20): do not show a packet socket what it and
/// others send.
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;

/// A raw packet socket (whole Ethernet frames), non-blocking, bound to interface
/// `ifindex` for every protocol, not shown outgoing frames where the kernel can.
pub(crate) fn packet_socket(ifindex: libc::c_int) -> io::Result<OwnedFd> {
    // Protocol 0: nothing is queued before the bind below picks the interface.
    // SAFETY: socket takes no pointers; the result is checked before use.
    let fd = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    check(fd as libc::ssize_t)?;
    // SAFETY: `fd` is a new descriptor that nothing else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let one: libc::c_int = 1;
    // SAFETY: the option value is one live c_int, and its size is passed with it.
    let ret = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_PACKET,
            PACKET_IGNORE_OUTGOING,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    // Older kernels lack the option: outgoing frames are then skipped on receive.
    if ret < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::ENOPROTOOPT) {
        return Err(io::Error::last_os_error());
    }
    // Room for bursts both ways (a TCP window's worth of frames): the defaults
    // (~200 KiB) drop frames a busy reader has not taken yet. Forced where we may.
    let size: libc::c_int = 4 << 20;
    for (force, plain) in [
        (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
        (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
    ] {
        for opt in [force, plain] {
            // SAFETY: one live c_int and its size.
            let ret = unsafe {
                libc::setsockopt(
                    sock.as_raw_fd(),
                    libc::SOL_SOCKET,
                    opt,
                    (&size as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            if ret == 0 {
                break;
            }
        }
    }
    // With each frame, its status: whether its checksum is still to be computed.
    // SAFETY: as above: one live c_int and its size.
    let ret = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_AUXDATA,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    check(ret as libc::ssize_t)?;
    // SAFETY: sockaddr_ll is plain old data; all zeroes is a valid value of it.
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as libc::c_ushort;
    addr.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
    addr.sll_ifindex = ifindex;
    // SAFETY: `addr` is a live sockaddr_ll and its exact size is passed.
    let ret = unsafe {
        libc::bind(
            sock.as_raw_fd(),
            (&addr as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    check(ret as libc::ssize_t)?;
    Ok(sock)
}

/// One frame received from a packet socket.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PacketInfo {
    /// Its whole length (`MSG_TRUNC`), which may exceed the buffer.
    pub len: usize,
    /// Its packet type (`PACKET_OUTGOING`, ...).
    pub kind: u8,
    /// The kernel has not computed its transport checksum yet
    /// (`TP_STATUS_CSUMNOTREADY`): a frame another interface of this host sent with
    /// checksum offload, as on a veth pair.
    pub csum_not_ready: bool,
}

/// Receives one frame from a packet socket without blocking.
pub(crate) fn recv_packet(fd: RawFd, buf: &mut [u8]) -> io::Result<PacketInfo> {
    // SAFETY: sockaddr_ll is plain old data; all zeroes is a valid value of it.
    let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // Room for one cmsghdr with a tpacket_auxdata, aligned as cmsghdr needs.
    let mut control = [0u64; 16];
    // SAFETY: msghdr is plain old data; all zeroes is a valid (empty) value of it.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = (&mut from as *mut libc::sockaddr_ll).cast();
    msg.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: every pointer in `msg` is to a live local or to `buf`, each with the size
    // given beside it; recvmsg writes no more than those sizes.
    let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_TRUNC | libc::MSG_DONTWAIT) };
    let len = check(n)?;
    let mut csum_not_ready = false;
    // SAFETY: `msg` was filled by recvmsg: the CMSG macros walk its control buffer
    // within `msg_controllen`, which the kernel set to what it wrote.
    let mut c = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    while !c.is_null() {
        // SAFETY: `c` is a header inside the control buffer (CMSG_FIRSTHDR/NXTHDR
        // return null past its end); reading its fields is in bounds.
        let (level, kind) = unsafe { ((*c).cmsg_level, (*c).cmsg_type) };
        if level == libc::SOL_PACKET && kind == libc::PACKET_AUXDATA {
            // SAFETY: a PACKET_AUXDATA message carries one tpacket_auxdata after its
            // header; read_unaligned copes with any alignment of the data.
            let aux: libc::tpacket_auxdata =
                unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(c).cast()) };
            csum_not_ready = aux.tp_status & libc::TP_STATUS_CSUMNOTREADY != 0;
        }
        // SAFETY: as for CMSG_FIRSTHDR: the next header, or null past the end.
        c = unsafe { libc::CMSG_NXTHDR(&msg, c) };
    }
    Ok(PacketInfo {
        len,
        kind: from.sll_pkttype,
        csum_not_ready,
    })
}

/// Sends one datagram or frame on a connected or bound socket without blocking.
pub(crate) fn send(fd: RawFd, frame: &[u8]) -> io::Result<()> {
    // SAFETY: `frame` is readable for `frame.len()` octets for the whole call.
    let n = unsafe {
        libc::send(
            fd,
            frame.as_ptr().cast(),
            frame.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    check(n).map(drop)
}
