//! The polled transport over a real kernel socket: its reads made on the socket itself
//! (`kernel_socket`) give what the socket's own transport gives, and keep the skip of
//! the read after a short one while a consumer owns the socket; its sends made on the
//! socket itself (`send_polled`) answer as the socket's own transport does (the seat in
//! the send buffer budget, a short send, `EAGAIN`, a failed connection).

use super::PolledTransport;
use crate::socket_buffers::SocketBuffers;
use crate::transport::ConnTransport;
use crate::transport::socket::SocketTransport;
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

fn pair(claimed: bool) -> (ConnTransport, TcpStream, RawFd) {
    pair_in(
        claimed,
        true,
        &SocketBuffers::new(0, crate::SameHostTcp::System),
    )
}

/// A polled transport over a kernel socket and the socket's peer: `direct`, holding
/// the socket itself (as a connection does); otherwise holding it as any other
/// transport, boxed (as under a recording or fault plan: every call through the trait).
fn pair_in(
    claimed: bool,
    direct: bool,
    buffers: &Arc<SocketBuffers>,
) -> (ConnTransport, TcpStream, RawFd) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (b, _) = l.accept().unwrap();
    let sock = SocketTransport::new(a, buffers).unwrap();
    let fd = sock.fd();
    let claimed = Arc::new(AtomicBool::new(claimed));
    let polled = if direct {
        PolledTransport::over_socket(sock, claimed)
    } else {
        PolledTransport::new(Box::new(sock), claimed)
    };
    (ConnTransport::Polled(polled), b, fd)
}

/// Waits until the socket has something to read (or its end); a socket that stays
/// empty for 30 s fails the test instead of hanging it.
fn readable(fd: RawFd) {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, and its count.
    let ready = unsafe { libc::poll(&mut pfd, 1, 30_000) };
    assert_eq!(ready, 1, "the socket did not become readable within 30 s");
}

fn read(t: &mut ConnTransport, through_trait: bool) -> io::Result<Vec<u8>> {
    let mut buf = [0u8; 64];
    let n = if through_trait {
        (**t).read(&mut buf)?
    } else {
        t.read_polled(&mut buf)?
    };
    Ok(buf[..n].to_vec())
}

fn would_block(r: io::Result<Vec<u8>>) -> bool {
    matches!(r, Err(e) if e.kind() == io::ErrorKind::WouldBlock)
}

#[test]
fn a_claimed_socket_read_directly_gives_its_octets_and_skips_the_read_after_a_short_one() {
    for through_trait in [false, true] {
        let (mut t, mut peer, fd) = pair(true);
        assert!(would_block(read(&mut t, through_trait)), "nothing sent yet");
        peer.write_all(b"hello").unwrap();
        readable(fd);
        assert_eq!(read(&mut t, through_trait).unwrap(), b"hello");
        // Short: the kernel's queue was empty after it; asked, the transport says so
        // and forgets it.
        assert!(t.drained_polled());
        assert!(!t.drained_polled());
        peer.write_all(b"world").unwrap();
        readable(fd);
        assert_eq!(read(&mut t, through_trait).unwrap(), b"world");
        // Not asked this time: the next read is skipped (the consumer reads again on
        // its next poll) although octets wait, and the one after reads them.
        peer.write_all(b"abc").unwrap();
        readable(fd);
        assert!(would_block(read(&mut t, through_trait)));
        assert_eq!(read(&mut t, through_trait).unwrap(), b"abc");
        drop(peer);
        readable(fd);
        assert!(t.drained_polled());
        assert_eq!(
            read(&mut t, through_trait).unwrap(),
            b"",
            "the end of the stream"
        );
    }
}

#[test]
fn an_engine_owned_socket_read_directly_is_never_skipped() {
    let (mut t, mut peer, fd) = pair(false);
    peer.write_all(b"hello").unwrap();
    readable(fd);
    assert_eq!(read(&mut t, false).unwrap(), b"hello");
    peer.write_all(b"more").unwrap();
    readable(fd);
    assert_eq!(read(&mut t, false).unwrap(), b"more", "not skipped");
    // The kernel's own answer: `EAGAIN`.
    let mut buf = [0u8; 8];
    let e = t.read_polled(&mut buf).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EAGAIN));
}

#[test]
fn an_engine_owned_socket_says_drained_after_a_short_read_only_within_its_pass() {
    let (mut t, mut peer, fd) = pair(false);
    t.begin_pass();
    peer.write_all(b"hello").unwrap();
    readable(fd);
    assert_eq!(read(&mut t, false).unwrap(), b"hello");
    // Short: the receive loop stops here instead of reading `EAGAIN`; asked once.
    assert!(t.pass_drained());
    assert!(!t.pass_drained());
    // A short read whose pass did not ask (it stopped for another reason): the next
    // pass, started by the next readiness event, must read.
    peer.write_all(b"more").unwrap();
    readable(fd);
    assert_eq!(read(&mut t, false).unwrap(), b"more");
    peer.write_all(b"next").unwrap();
    readable(fd);
    t.begin_pass();
    assert!(
        !t.pass_drained(),
        "a new pass reads what the event announced"
    );
    assert_eq!(read(&mut t, false).unwrap(), b"next");
    // The consumer's quick pass asks only whether it holds the socket: after this
    // short read of an engine-owned socket it says not drained, where the engine's
    // own pass would stop.
    t.event_ends(false);
    t.begin_pass();
    peer.write_all(b"quick").unwrap();
    readable(fd);
    assert_eq!(read(&mut t, false).unwrap(), b"quick");
    assert!(!t.drained_polled(), "not claimed: the quick pass reads on");
    // An event that carried the peer's end: its pass reads past the short read, to
    // the end itself (no later event comes for it).
    peer.write_all(b"last").unwrap();
    peer.shutdown(std::net::Shutdown::Write).unwrap();
    readable(fd);
    t.event_ends(true);
    t.begin_pass();
    assert_eq!(read(&mut t, false).unwrap(), b"last");
    assert!(!t.pass_drained(), "the end behind the octets is read");
    assert_eq!(read(&mut t, false).unwrap(), b"");
    // The polled transport over any other (boxed: a recording, a fault plan, the own
    // TCP): the engine still reads until the stream says it would block.
    let (mut t, mut peer, fd) = pair_in(
        false,
        false,
        &SocketBuffers::new(0, crate::SameHostTcp::System),
    );
    peer.write_all(b"boxed").unwrap();
    readable(fd);
    assert_eq!(read(&mut t, false).unwrap(), b"boxed");
    assert!(!t.pass_drained());
    assert!(would_block(read(&mut t, false)));
}

/// A single post's send (`send_polled`) on a transport from [`pair_in`]: the socket's
/// own `send(2)` when `direct`, else through the boxed socket transport.
fn send(t: &mut ConnTransport, octets: &[u8]) -> io::Result<usize> {
    t.send_polled(octets)
}

fn pair_sending(direct: bool) -> (ConnTransport, TcpStream, RawFd) {
    pair_in(
        true,
        direct,
        &SocketBuffers::new(0, crate::SameHostTcp::System),
    )
}

fn send_buffer(fd: RawFd) -> libc::c_int {
    let mut v: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: a valid socket fd and a correctly sized out-parameter pair.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    assert_eq!(r, 0);
    v
}

#[test]
fn a_direct_send_takes_the_sockets_share_of_the_budget_as_the_wrappers_does() {
    for direct in [false, true] {
        // 1 MiB for all: alone, the socket has all of it; with 15 more, 64 KiB.
        let buffers = SocketBuffers::new(1 << 20, crate::SameHostTcp::System);
        let (mut t, mut peer, fd) = pair_in(true, direct, &buffers);
        let others: Vec<_> = (0..15).map(|_| buffers.join()).collect();
        assert_eq!(send_buffer(fd), 2 << 20, "nothing changes before a send");
        assert_eq!(send(&mut t, b"x").unwrap(), 1);
        // Linux doubles what it is given, for its bookkeeping.
        assert_eq!(
            send_buffer(fd),
            2 * crate::socket_buffers::MIN_SHARE as libc::c_int,
            "direct: {direct}"
        );
        drop(others);
        let mut got = [0u8; 1];
        peer.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"x");
    }
}

/// The octet at `pos` of the stream the full-socket test sends.
fn octet(pos: usize) -> u8 {
    (pos % 251) as u8
}

#[test]
fn a_direct_send_to_a_full_socket_is_short_then_would_block_as_the_wrappers_is() {
    const CHUNK: usize = 64 << 10;
    for direct in [false, true] {
        let (mut t, mut peer, fd) = pair_sending(direct);
        crate::sys::socket::set_send_buffer(fd, 16 << 10);
        // The peer reads nothing: sends fill its window and this side's buffer.
        let mut sent = 0usize;
        let mut short = 0;
        let e = loop {
            assert!(sent < 256 << 20, "never full (direct: {direct})");
            let chunk: Vec<u8> = (sent..sent + CHUNK).map(octet).collect();
            match send(&mut t, &chunk) {
                Ok(n) => {
                    assert!(n > 0, "a send to an open socket takes something or blocks");
                    if n < CHUNK {
                        short += 1;
                    }
                    sent += n;
                }
                Err(e) => break e,
            }
        };
        assert_eq!(e.raw_os_error(), Some(libc::EAGAIN), "direct: {direct}");
        assert!(
            short > 0,
            "the socket filled without a short send (direct: {direct})"
        );
        // Everything a send said it took arrives, in order, and nothing else.
        let mut got = vec![0u8; sent];
        peer.read_exact(&mut got).unwrap();
        assert!(
            got.iter().enumerate().all(|(i, &b)| b == octet(i)),
            "direct: {direct}"
        );
        drop(t);
        let mut rest = Vec::new();
        peer.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty(), "direct: {direct}");
    }
}

#[test]
fn a_direct_send_to_a_reset_connection_fails_as_the_wrappers_does() {
    let mut errors = Vec::new();
    for direct in [false, true] {
        let (mut t, peer, fd) = pair_sending(direct);
        crate::sys::socket::set_linger_zero(peer.as_raw_fd());
        drop(peer);
        // The RST arrived once the socket reports it (readable, with its error).
        readable(fd);
        let e = send(&mut t, b"hello").unwrap_err();
        // No SIGPIPE either (`MSG_NOSIGNAL`): the test process is still here.
        let again = send(&mut t, b"hello").unwrap_err();
        errors.push((e.raw_os_error(), again.raw_os_error()));
    }
    assert_eq!(
        errors[0],
        (Some(libc::ECONNRESET), Some(libc::EPIPE)),
        "the wrapper's"
    );
    assert_eq!(errors[1], errors[0], "the direct send's");
}

/// The claimed consumer's read (`read_claimed`), over the socket itself and through
/// the boxed transport: an empty socket is `Empty` (no `io::Error`), octets come
/// exactly, the read after a short one is skipped, the peer's end is `Got(0)` and its
/// reset a failure with the kernel's code, never taken for an empty stream.
#[test]
fn a_claimed_read_tells_empty_octets_end_and_reset_apart() {
    use crate::transport::ClaimedRead;
    for direct in [true, false] {
        let buffers = SocketBuffers::new(0, crate::SameHostTcp::System);
        let (mut t, mut peer, fd) = pair_in(true, direct, &buffers);
        let mut buf = [0u8; 64];
        assert!(
            matches!(t.read_claimed(&mut buf), ClaimedRead::Empty),
            "nothing sent"
        );
        peer.write_all(b"hello").unwrap();
        readable(fd);
        assert!(matches!(t.read_claimed(&mut buf), ClaimedRead::Got(5)));
        assert_eq!(&buf[..5], b"hello");
        // Short: the next read is skipped although octets wait; the one after reads.
        peer.write_all(b"abc").unwrap();
        readable(fd);
        assert!(
            matches!(t.read_claimed(&mut buf), ClaimedRead::Empty),
            "skipped"
        );
        assert!(matches!(t.read_claimed(&mut buf), ClaimedRead::Got(3)));
        assert_eq!(&buf[..3], b"abc");
        assert!(
            matches!(t.read_claimed(&mut buf), ClaimedRead::Empty),
            "skipped"
        );
        if direct {
            drop(peer);
            readable(fd);
            assert!(
                matches!(t.read_claimed(&mut buf), ClaimedRead::Got(0)),
                "the end"
            );
        } else {
            crate::sys::socket::set_linger_zero(peer.as_raw_fd());
            drop(peer);
            readable(fd);
            match t.read_claimed(&mut buf) {
                ClaimedRead::Failed(e) => assert_eq!(e.raw_os_error(), Some(libc::ECONNRESET)),
                other => panic!("a reset read as {other:?}"),
            }
        }
    }
}

#[test]
fn a_claimed_read_is_skipped_only_after_a_short_one() {
    use crate::transport::ClaimedRead;
    let buffers = SocketBuffers::new(0, crate::SameHostTcp::System);
    let (mut t, mut peer, fd) = pair_in(true, true, &buffers);
    let mut buf = [0u8; 4];
    // A full read: the kernel may hold more, so the next read is made.
    peer.write_all(b"12345678").unwrap();
    readable(fd);
    assert!(matches!(t.read_claimed(&mut buf), ClaimedRead::Got(4)));
    assert!(
        matches!(t.read_claimed(&mut buf), ClaimedRead::Got(4)),
        "read after a full one"
    );
    assert_eq!(&buf, b"5678");
    // Nothing left: empty, and an empty read skips nothing either.
    assert!(matches!(t.read_claimed(&mut buf), ClaimedRead::Empty));
    peer.write_all(b"ab").unwrap();
    readable(fd);
    assert!(
        matches!(t.read_claimed(&mut buf), ClaimedRead::Got(2)),
        "read after an empty one"
    );
    // The end of the stream is not a short read: the read after it is made, and tells
    // the end again.
    drop(peer);
    readable(fd);
    assert!(
        matches!(t.read_claimed(&mut buf), ClaimedRead::Empty),
        "skipped after the short one"
    );
    assert!(
        matches!(t.read_claimed(&mut buf), ClaimedRead::Got(0)),
        "the end"
    );
    assert!(
        matches!(t.read_claimed(&mut buf), ClaimedRead::Got(0)),
        "the end, again: not skipped"
    );
}
