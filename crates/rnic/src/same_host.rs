//! Kernel TCP between two ends on the same host: no pacing, a fixed receive window.
//!
//! BBR is the only mainline congestion control that makes Linux TCP pace its own
//! sends (it asks for pacing when it starts; without the `fq` qdisc TCP then paces
//! with a high-resolution timer per socket). Over loopback there is no bottleneck
//! link to pace for, and the pacing costs the sender twice: `tcp_write_xmit` arms
//! the pacing timer whenever it gets ahead of the rate (with interrupts off: in this
//! KVM guest the sender's largest kernel cost in slow runs), and the rate is BBR's
//! estimate of the bandwidth, which an early low sample can hold below what the two
//! ends can move (slow runs armed the timer 9,800-38,000 times in 2 s, fast ones
//! 74-1,700). On a host whose default is BBR, 1 MiB Writes with CRC over loopback ran in
//! a fast mode (6.5-7.4 GB/s) or, one run in three to six, a slow one (3.5-5.8 GB/s)
//! whose sender spent up to a third of its CPU in `tcp_write_xmit` with interrupts
//! off (docs/ARCHITECTURE.md, "CRC on: the slow mode was the kernel's pacing").
//!
//! So a kernel TCP connection whose peer is on this host uses CUBIC (or Reno, which
//! every Linux has and lets any user choose) instead of BBR unless the device is told
//! otherwise ([`SameHostTcp::System`]). Connections to other hosts keep the
//! system's choice: there a bottleneck may be worth pacing for.
//!
//! The choice has to be made before the connection is established: BBR turns the
//! socket's pacing on when it starts and nothing turns it off, so a socket switched
//! afterwards still paces, at CUBIC's rate (twice the window per round trip, high
//! over loopback, yet one slow round in 15 remained that way). So `connect` to a
//! loopback address chooses on the socket before the SYN, and a listener bound to a
//! loopback address chooses on the listening socket, whose connections inherit it.
//! A connection to this host found otherwise (a listener on all addresses, the host's
//! own non-loopback address) is switched when it is taken over, the best left then.
//!
//! Without pacing a second mode showed: the receiver's automatic buffer tuning, which
//! grows the window with what the program reads per round trip, stayed at 430-760 KB
//! over loopback's microsecond round trips in some runs (`ss`: the sender
//! `rwnd_limited` 97-100% of the time, 5,860-7,130 MB/s), while a fixed buffer of
//! 1, 2 or 4 MiB gave 8,080-8,890 MB/s in every run. So a connection to this host
//! also gets a fixed receive buffer, [`SAME_HOST_RECEIVE`], when it is taken over,
//! however many there are: with 256 QPs streaming 1 MiB Writes, 1 MiB each moved
//! 7,860-8,510 MB/s, Linux's tuning 7,060-7,390, and a share of the send budget
//! (256 KiB each) 6,360-7,330; 64 KiB each 4,180-4,350. The buffer is a bound, not
//! an allocation: an idle connection holds nothing in it.
//!
//! [`connect`], [`listening`] and [`apply`] are public so that a plain TCP program
//! (the benchmark's TCP baselines) sets its sockets exactly as softrnic sets its own.

use crate::sys;
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

/// The receive buffer of a kernel TCP connection to this host (Linux doubles it for
/// its bookkeeping): a 1 MiB message in flight; 1, 2 and 4 MiB moved 1 MiB Writes at
/// the same rate, and the smaller stays nearer the caches.
pub const SAME_HOST_RECEIVE: u64 = 1 << 20;

/// What a device does with its kernel TCP connections to its own host
/// ([`crate::DeviceConfig::same_host_tcp`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SameHostTcp {
    /// A connection to this host that would pace (BBR) uses CUBIC, or Reno where
    /// CUBIC is not allowed, and has a fixed receive buffer. The default.
    #[default]
    Tuned,
    /// Keep the system's congestion control (`net.ipv4.tcp_congestion_control`) and
    /// Linux's receive buffer tuning.
    System,
}

/// Whether `peer` is on this host as seen from `local`: a loopback address, or the
/// connection's own local address.
pub(crate) fn is_same_host(local: SocketAddr, peer: SocketAddr) -> bool {
    peer.ip().is_loopback() || peer.ip() == local.ip()
}

/// The algorithms to try instead of `current`, in order, on a connection to this
/// host; empty when `current` does not pace.
pub(crate) fn unpaced_instead_of(current: &str) -> &'static [&'static str] {
    if current.starts_with("bbr") {
        &["cubic", "reno"]
    } else {
        &[]
    }
}

/// Moves socket `fd` off a pacing algorithm; returns the one it chose, if it did.
fn unpace(fd: RawFd) -> Option<&'static str> {
    let current = sys::socket::tcp_congestion(fd)?;
    unpaced_instead_of(&current)
        .iter()
        .copied()
        .find(|name| sys::socket::set_tcp_congestion(fd, name).is_ok())
}

/// Applies `policy` to a connected kernel socket `fd` between `local` and `peer` as
/// it is taken over: the receive buffer [`SAME_HOST_RECEIVE`] and, if it still paces,
/// the congestion control switched (see the module's notes on what a switch after the
/// fact leaves). Returns whether the connection is to this host and was tuned.
pub fn apply(policy: SameHostTcp, fd: RawFd, local: SocketAddr, peer: SocketAddr) -> bool {
    if policy == SameHostTcp::System || !is_same_host(local, peer) {
        return false;
    }
    unpace(fd);
    sys::socket::set_receive_buffer(fd, SAME_HOST_RECEIVE);
    true
}

/// Connects a kernel TCP socket to `addr` within `timeout`, unpaced from its first
/// segment when `addr` is a loopback address and `policy` says so.
pub fn connect(addr: SocketAddr, timeout: Duration, policy: SameHostTcp) -> io::Result<TcpStream> {
    if policy == SameHostTcp::System || !addr.ip().is_loopback() {
        return TcpStream::connect_timeout(&addr, timeout);
    }
    let s = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    unpace(s.as_raw_fd());
    s.connect_timeout(&addr.into(), timeout)?;
    Ok(s.into())
}

/// Applies `policy` to a kernel listener: one bound to a loopback address hands out
/// only connections to this host, so its connections start unpaced.
pub fn listening(policy: SameHostTcp, l: &TcpListener) -> Option<&'static str> {
    let bound = l.local_addr().ok()?;
    if policy == SameHostTcp::System || !bound.ip().is_loopback() {
        return None;
    }
    unpace(l.as_raw_fd())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_pacing_algorithm_is_replaced() {
        assert_eq!(unpaced_instead_of("bbr"), &["cubic", "reno"]);
        assert_eq!(unpaced_instead_of("bbr3"), &["cubic", "reno"]);
        assert!(unpaced_instead_of("cubic").is_empty());
        assert!(unpaced_instead_of("reno").is_empty());
        assert!(unpaced_instead_of("dctcp").is_empty());
    }

    #[test]
    fn same_host_means_loopback_or_our_own_address() {
        let a = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert!(is_same_host(a("127.0.0.1:5"), a("127.0.0.1:6")));
        assert!(is_same_host(a("10.0.0.2:5"), a("127.0.0.5:6")));
        assert!(is_same_host(a("[::1]:5"), a("[::1]:6")));
        assert!(is_same_host(a("10.0.0.2:5"), a("10.0.0.2:6")));
        assert!(!is_same_host(a("10.0.0.2:5"), a("10.0.0.3:6")));
        assert!(!is_same_host(a("127.0.0.1:5"), a("10.0.0.3:6")));
    }

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (a, b)
    }

    /// Sets `name` on `s`, or says why this host cannot (no such algorithm here).
    fn start_with(s: &TcpStream, name: &str) -> bool {
        match sys::socket::set_tcp_congestion(s.as_raw_fd(), name) {
            Ok(()) => true,
            Err(e) => {
                eprintln!("SKIPPED: this host cannot set {name} on a socket: {e}");
                false
            }
        }
    }

    fn apply_to(policy: SameHostTcp, s: &TcpStream) -> bool {
        let (local, peer) = (s.local_addr().unwrap(), s.peer_addr().unwrap());
        apply(policy, s.as_raw_fd(), local, peer)
    }

    fn receive_buffer(s: &TcpStream) -> libc::c_int {
        let mut v: libc::c_int = -1;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: a valid socket fd and a correctly sized out-parameter pair.
        let r = unsafe {
            libc::getsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                (&mut v as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        assert_eq!(r, 0);
        v
    }

    #[test]
    fn a_bbr_socket_to_this_host_stops_pacing_and_gets_its_receive_buffer_unless_told_not_to() {
        let (a, b) = pair();
        if !start_with(&a, "bbr") || !start_with(&b, "bbr") {
            return;
        }
        let tuned_by_linux = receive_buffer(&a);
        assert!(!apply_to(SameHostTcp::System, &a));
        assert_eq!(cc(&a), "bbr");
        assert_eq!(receive_buffer(&a), tuned_by_linux);
        assert!(apply_to(SameHostTcp::Tuned, &b));
        assert!(["cubic", "reno"].contains(&cc(&b).as_str()), "{}", cc(&b));
        // Linux doubles what it is given, for its bookkeeping.
        assert_eq!(receive_buffer(&b), 2 * SAME_HOST_RECEIVE as libc::c_int);
    }

    /// The system's congestion control, if it paces (else this host cannot show what
    /// starting unpaced changes, and says so).
    fn system_paces() -> bool {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let cc = sys::socket::tcp_congestion(l.as_raw_fd()).unwrap();
        let paces = !unpaced_instead_of(&cc).is_empty();
        if !paces {
            eprintln!("SKIPPED: the system's congestion control ({cc}) does not pace");
        }
        paces
    }

    fn cc(s: &TcpStream) -> String {
        sys::socket::tcp_congestion(s.as_raw_fd()).unwrap()
    }

    #[test]
    fn loopback_connections_start_unpaced_on_both_ends_unless_told_to_keep_the_system_s() {
        if !system_paces() {
            return;
        }
        let t = Duration::from_secs(5);
        for (policy, unpaced) in [(SameHostTcp::Tuned, true), (SameHostTcp::System, false)] {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            assert_eq!(listening(policy, &l).is_some(), unpaced, "{policy:?}");
            let a = connect(l.local_addr().unwrap(), t, policy).unwrap();
            let (b, _) = l.accept().unwrap();
            for s in [&a, &b] {
                let now = cc(s);
                assert_eq!(
                    unpaced_instead_of(&now).is_empty(),
                    unpaced,
                    "{policy:?}: {now}"
                );
            }
            let mut a = a;
            let mut b = b;
            use std::io::{Read, Write};
            a.write_all(b"ok").unwrap();
            let mut got = [0u8; 2];
            b.read_exact(&mut got).unwrap();
            assert_eq!(&got, b"ok");
        }
    }

    #[test]
    fn a_listener_on_all_addresses_is_left_to_the_system() {
        let l = TcpListener::bind("0.0.0.0:0").unwrap();
        let before = sys::socket::tcp_congestion(l.as_raw_fd()).unwrap();
        assert_eq!(listening(SameHostTcp::Tuned, &l), None);
        assert_eq!(sys::socket::tcp_congestion(l.as_raw_fd()).unwrap(), before);
    }
}
