//! The polled transport over a real kernel socket: its reads made on the socket itself
//! (`kernel_socket`) give what the socket's own transport gives, and keep the skip of
//! the read after a short one while a consumer owns the socket.

use super::PolledTransport;
use crate::socket_buffers::SocketBuffers;
use crate::transport::socket::SocketTransport;
use crate::transport::{ConnTransport, Transport};
use std::io::{self, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::RawFd;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

fn pair(claimed: bool) -> (ConnTransport, TcpStream, RawFd) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (b, _) = l.accept().unwrap();
    let buffers = SocketBuffers::new(0, crate::SameHostTcp::System);
    let sock = SocketTransport::new(a, &buffers).unwrap();
    let fd = sock
        .kernel_socket()
        .expect("a kernel socket's read is its recv(2)");
    let polled = PolledTransport::new(Box::new(sock), Arc::new(AtomicBool::new(claimed)));
    assert_eq!(
        polled.kernel_socket(),
        None,
        "the polled transport skips reads"
    );
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
