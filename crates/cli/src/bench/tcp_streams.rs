//! The TCP baseline with many streams: `write_bw` and `send_bw` with `-q N` run N TCP
//! connections, as softrnic runs N QPs, each sending from its own buffer of the message
//! size and received into its own (the layout perftest gives its QPs, and softrnic's
//! benchmark too). One thread per side serves all its streams through one epoll set
//! (mio), as softrnic's engine does: *blocking* and *batching* sleep in `epoll_wait`,
//! *busy-poll* spins on it with a zero timeout. A stream sends whole messages; at the
//! deadline each finishes the message it is in.
//!
//! Each stream's sockets are set as softrnic's and read and written through its direct
//! system calls ([`super::tcp_sockets`]).
//!
//! So the 256-QP figure is compared with what the machine gives 256 TCP streams with
//! the same memory layout, not only with one stream whose buffers stay in cache.

use super::tcp::TcpKind;
use super::tcp_sockets;
use mio::net::TcpStream as MioStream;
use mio::{Events, Interest, Poll, Token};
use softrnic_rnic::SameHostTcp;
use softrnic_rnic::socket;
use std::io;
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// The epoll wait of `kind`: spin (zero timeout) or sleep.
fn timeout(kind: TcpKind) -> Option<Duration> {
    (kind == TcpKind::BusyPoll).then_some(Duration::ZERO)
}

/// Registers `streams` (made non-blocking) with a new poll for `interest`.
fn register(streams: Vec<TcpStream>, interest: Interest) -> io::Result<(Poll, Vec<MioStream>)> {
    let poll = Poll::new()?;
    let mut out = Vec::with_capacity(streams.len());
    for (i, s) in streams.into_iter().enumerate() {
        s.set_nonblocking(true)?;
        let mut m = MioStream::from_std(s);
        poll.registry().register(&mut m, Token(i), interest)?;
        out.push(m);
    }
    Ok((poll, out))
}

/// The server side: reads every stream to its end, each into its own buffer of
/// `read_len` octets; returns the octets read. The streams after `first` are set by
/// `policy` as they are accepted.
pub fn receive(
    first: TcpStream,
    listener: &TcpListener,
    n: u32,
    kind: TcpKind,
    read_len: usize,
    policy: SameHostTcp,
) -> io::Result<(TcpStream, u64)> {
    let mut streams = vec![first.try_clone()?];
    for _ in 1..n {
        let (s, _) = listener.accept()?;
        tcp_sockets::take_over(&s, policy)?;
        streams.push(s);
    }
    let (mut poll, socks) = register(streams, Interest::READABLE)?;
    let mut bufs: Vec<Vec<u8>> = (0..socks.len()).map(|_| vec![0u8; read_len]).collect();
    // Each stream's reads go on where its last one ended (`tcp::next_read_at`).
    let mut at = vec![0usize; socks.len()];
    let mut open = socks.len();
    let mut ended = vec![false; socks.len()];
    let mut total = 0u64;
    let mut events = Events::with_capacity(1024);
    while open > 0 {
        poll.poll(&mut events, timeout(kind))?;
        for e in &events {
            let i = e.token().0;
            if ended[i] {
                continue;
            }
            loop {
                match socket::recv(socks[i].as_raw_fd(), &mut bufs[i][at[i]..]) {
                    Ok(0) => {
                        ended[i] = true;
                        open -= 1;
                        break;
                    }
                    Ok(k) => {
                        at[i] = super::tcp::next_read_at(at[i], k, read_len);
                        total += k as u64;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }
    first.set_nonblocking(false)?;
    Ok((first, total))
}

/// What the client's sending loop reports each time whole messages go out.
pub trait Tick {
    /// `ops` whole messages are out in all, at `now`.
    fn tick(&mut self, now: Instant, ops: u64);
}

impl<F: FnMut(Instant, u64)> Tick for F {
    fn tick(&mut self, now: Instant, ops: u64) {
        self(now, ops)
    }
}

/// The client side: sends `size`-octet messages on every stream, each from its own
/// buffer, until `deadline` (each stream then finishes its message) or `msgs` per
/// stream; shuts every stream down for writing. Returns the messages sent.
pub fn send(
    streams: Vec<TcpStream>,
    kind: TcpKind,
    size: usize,
    deadline: Option<Instant>,
    msgs: u64,
    tick: &mut impl Tick,
) -> io::Result<u64> {
    let clones: Vec<TcpStream> = streams
        .iter()
        .map(TcpStream::try_clone)
        .collect::<io::Result<_>>()?;
    let (mut poll, socks) = register(streams, Interest::WRITABLE)?;
    let n = socks.len();
    let bufs: Vec<Vec<u8>> = (0..n).map(|i| vec![0x5a ^ i as u8; size]).collect();
    // Per stream: octets of the current message out, messages sent, finished.
    let mut off = vec![0usize; n];
    let mut sent = vec![0u64; n];
    let mut done = vec![false; n];
    let mut left = n;
    let mut ops = 0u64;
    let mut events = Events::with_capacity(1024);
    while left > 0 {
        poll.poll(&mut events, timeout(kind))?;
        let over = deadline.is_some_and(|d| Instant::now() >= d);
        for e in &events {
            let i = e.token().0;
            while !done[i] {
                if off[i] == 0 && (over || (deadline.is_none() && sent[i] >= msgs)) {
                    done[i] = true;
                    left -= 1;
                    break;
                }
                match socket::send(socks[i].as_raw_fd(), &bufs[i][off[i]..]) {
                    Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                    Ok(k) => {
                        off[i] += k;
                        if off[i] == size {
                            off[i] = 0;
                            sent[i] += 1;
                            ops += 1;
                            tick.tick(Instant::now(), ops);
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
        }
        if over {
            // Streams with no event since the deadline are between messages too.
            for i in 0..n {
                if !done[i] && off[i] == 0 {
                    done[i] = true;
                    left -= 1;
                }
            }
        }
    }
    for s in &clones {
        s.shutdown(std::net::Shutdown::Write)?;
    }
    Ok(ops)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every stream sends its messages whole, and the reader gets every octet of all of
    /// them, in each discipline.
    #[test]
    fn many_streams_deliver_every_message() {
        const N: usize = 8;
        const SIZE: usize = 100_000;
        const MSGS: u64 = 5;
        for kind in [TcpKind::Blocking, TcpKind::BusyPoll, TcpKind::Batching] {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            let reader = std::thread::spawn(move || {
                let (first, _) = l.accept().unwrap();
                receive(first, &l, N as u32, kind, SIZE, SameHostTcp::Tuned)
                    .unwrap()
                    .1
            });
            let streams: Vec<TcpStream> =
                (0..N).map(|_| TcpStream::connect(addr).unwrap()).collect();
            let mut ticks = 0;
            let mut tick = |_: Instant, ops: u64| {
                ticks += 1;
                assert_eq!(ops, ticks, "one tick per whole message");
            };
            let sent = send(streams, kind, SIZE, None, MSGS, &mut tick).unwrap();
            assert_eq!(sent, N as u64 * MSGS, "{kind:?}");
            assert_eq!(reader.join().unwrap(), sent * SIZE as u64, "{kind:?}");
        }
    }

    /// With a deadline, each stream stops between messages: the reader's count is a
    /// whole number of messages.
    #[test]
    fn a_deadline_ends_every_stream_between_messages() {
        const N: usize = 4;
        const SIZE: usize = 1 << 20;
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let reader = std::thread::spawn(move || {
            let (first, _) = l.accept().unwrap();
            receive(
                first,
                &l,
                N as u32,
                TcpKind::Blocking,
                SIZE,
                SameHostTcp::Tuned,
            )
            .unwrap()
            .1
        });
        let streams: Vec<TcpStream> = (0..N).map(|_| TcpStream::connect(addr).unwrap()).collect();
        let deadline = Some(Instant::now());
        let sent = send(
            streams,
            TcpKind::Blocking,
            SIZE,
            deadline,
            0,
            &mut |_, _| {},
        )
        .unwrap();
        assert_eq!(reader.join().unwrap(), sent * SIZE as u64);
    }
}
