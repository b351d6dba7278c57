//! The TCP baselines' sockets, set as softrnic sets its own in the same run.
//!
//! softrnic's kernel TCP connections to this host avoid BBR's pacing (chosen before
//! the SYN, or on a loopback listener) and get a fixed receive buffer
//! ([`softrnic_rnic::same_host`], `--same-host-tcp`), and its data path makes its
//! socket calls through `syscall(2)`, without glibc's cancellation-point wrappers
//! ([`softrnic_rnic::socket`]). A plain TCP program on this host could do the same, so
//! the baselines do too, through the same functions: the ratio then measures softrnic,
//! not BBR or glibc. With `--same-host-tcp system` both keep the system's settings.

use serde_json::{Value, json};
use softrnic_rnic::SameHostTcp;
use softrnic_rnic::same_host::{self, SAME_HOST_RECEIVE};
use softrnic_rnic::socket;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::Duration;

/// How long a baseline's connect may take.
const CONNECT: Duration = Duration::from_secs(10);

/// Connects a baseline stream to `addr` as softrnic connects its own: unpaced from the
/// first segment to a loopback address, then its receive buffer fixed.
pub fn connect(addr: SocketAddr, policy: SameHostTcp) -> io::Result<(TcpStream, bool)> {
    let s = same_host::connect(addr, CONNECT, policy)?;
    let tuned = take_over(&s, policy)?;
    Ok((s, tuned))
}

/// Sets a listener's congestion control as softrnic sets its own listener's.
pub fn listening(l: &TcpListener, policy: SameHostTcp) {
    same_host::listening(policy, l);
}

/// Applies `policy` to a connected stream as softrnic does when it takes a connection
/// over; true if the stream is to this host and was tuned.
pub fn take_over(s: &TcpStream, policy: SameHostTcp) -> io::Result<bool> {
    let (local, peer) = (s.local_addr()?, s.peer_addr()?);
    Ok(same_host::apply(policy, s.as_raw_fd(), local, peer))
}

/// A stream read and written through softrnic's direct system calls (`recvfrom`,
/// `sendto` by `syscall(2)`), not std's glibc `read`/`write`.
#[derive(Clone, Copy)]
pub struct Direct<'a>(pub &'a TcpStream);

impl Read for Direct<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        socket::recv(self.0.as_raw_fd(), buf)
    }
}

impl Write for Direct<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        socket::send(self.0.as_raw_fd(), buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// How a baseline's socket was set, read back from it: for the JSON
/// (`baseline_sockets`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `TCP_CONGESTION` as the kernel reports it.
    pub congestion: Option<String>,
    /// The receive buffer asked for, or `None`: Linux's automatic tuning.
    pub rcvbuf: Option<u64>,
    /// `SO_RCVBUF` as the kernel reports it (twice what was asked, when asked).
    pub so_rcvbuf: Option<usize>,
}

impl Settings {
    /// Reads `s`'s settings back; `tuned` is what [`connect`] returned.
    pub fn of(s: &TcpStream, tuned: bool) -> Settings {
        Settings {
            congestion: socket::tcp_congestion(s.as_raw_fd()),
            rcvbuf: tuned.then_some(SAME_HOST_RECEIVE),
            so_rcvbuf: socket2::SockRef::from(s).recv_buffer_size().ok(),
        }
    }

    /// As JSON.
    pub fn json(&self) -> Value {
        json!({
            "congestion": self.congestion,
            "rcvbuf": self.rcvbuf.map_or(json!("auto"), |b| json!(b)),
            "so_rcvbuf": self.so_rcvbuf,
            "syscalls": "direct",
        })
    }
}

/// The baseline header's line on sockets, for `policy`.
pub fn describe(policy: SameHostTcp) -> String {
    match policy {
        SameHostTcp::Tuned => format!(
            "as softrnic's (--same-host-tcp tuned): to this host no BBR (CUBIC/Reno, chosen \
             before the SYN), SO_RCVBUF {} MiB; syscall(2) without glibc's wrappers",
            SAME_HOST_RECEIVE >> 20
        ),
        SameHostTcp::System => "as softrnic's (--same-host-tcp system): the system's congestion \
                                control and receive buffer tuning; syscall(2) without glibc's \
                                wrappers"
            .into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What softrnic's own connection to this host gets under `policy`: its kernel
    /// socket's settings, read back with getsockopt.
    fn softrnic_sockets(policy: SameHostTcp) -> (Option<String>, usize) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        same_host::listening(policy, &l);
        let a = same_host::connect(l.local_addr().unwrap(), CONNECT, policy).unwrap();
        let (b, _) = l.accept().unwrap();
        for s in [&a, &b] {
            let (local, peer) = (s.local_addr().unwrap(), s.peer_addr().unwrap());
            same_host::apply(policy, s.as_raw_fd(), local, peer);
        }
        let got = |s: &TcpStream| {
            (
                socket::tcp_congestion(s.as_raw_fd()),
                socket2::SockRef::from(s).recv_buffer_size().unwrap(),
            )
        };
        assert_eq!(got(&a), got(&b));
        got(&a)
    }

    /// Both ends of a baseline connection get softrnic's congestion control and receive
    /// buffer in the same configuration, tuned or the system's.
    #[test]
    fn a_baseline_socket_is_set_as_softrnic_s_own() {
        for policy in [SameHostTcp::Tuned, SameHostTcp::System] {
            let want = softrnic_sockets(policy);
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            listening(&l, policy);
            let (client, tuned) = connect(l.local_addr().unwrap(), policy).unwrap();
            let (server, _) = l.accept().unwrap();
            take_over(&server, policy).unwrap();
            assert_eq!(tuned, policy == SameHostTcp::Tuned);
            for s in [&client, &server] {
                let set = Settings::of(s, tuned);
                assert_eq!(
                    (set.congestion, set.so_rcvbuf),
                    (want.0.clone(), Some(want.1))
                );
            }
            if policy == SameHostTcp::Tuned {
                // Linux doubles what it is given, for its bookkeeping.
                assert_eq!(want.1, 2 * SAME_HOST_RECEIVE as usize);
            }
        }
    }

    /// The benchmark's own baseline client sets its sockets so, in each configuration.
    #[test]
    fn the_baseline_client_reports_softrnic_s_settings() {
        use super::super::{BenchCommand, tcp};
        for (flag, policy) in [
            ("tuned", SameHostTcp::Tuned),
            ("system", SameHostTcp::System),
        ] {
            let argv = ["write_bw", "--loopback", "-s", "4096", "-n", "10"];
            let cmd = BenchCommand::parse_from(argv.into_iter().chain(["--same-host-tcp", flag]))
                .unwrap();
            let cfg = cmd.config().unwrap();
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            listening(&l, policy);
            let addr = l.local_addr().unwrap();
            let server = std::thread::spawn(move || tcp::serve(&l, Some(1), policy));
            let (_, set) = tcp::client_round(&cfg, addr, 4096, tcp::TcpKind::BusyPoll).unwrap();
            server.join().unwrap().unwrap();
            let want = softrnic_sockets(policy);
            assert_eq!(
                (set.congestion, set.so_rcvbuf),
                (want.0, Some(want.1)),
                "{flag}"
            );
            let asked = (policy == SameHostTcp::Tuned).then_some(SAME_HOST_RECEIVE);
            assert_eq!(set.rcvbuf, asked, "{flag}");
        }
    }

    /// What goes out through the direct calls arrives whole.
    #[test]
    fn direct_calls_carry_the_octets() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let (a, _) = connect(l.local_addr().unwrap(), SameHostTcp::Tuned).unwrap();
        let (b, _) = l.accept().unwrap();
        let sent: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
        Direct(&a).write_all(&sent).unwrap();
        a.shutdown(std::net::Shutdown::Write).unwrap();
        let mut got = Vec::new();
        Direct(&b).read_to_end(&mut got).unwrap();
        assert_eq!(got, sent);
    }
}
