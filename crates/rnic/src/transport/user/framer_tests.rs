//! The framer's gather path against a real (sans-IO) stack: a batch of FPDUs that does
//! not fit the send buffer whole is queued FPDU by FPDU as room comes, each FPDU whole
//! in its segments, and the peer reads exactly the octets of the batch, in order.

use super::Framer;
use crate::sys::socket::IoVecs;
use softrnic_tcp::{Config, ConnId, NoRaw, RxMode, Segment, Stack, StackConfig, StackError};
use softrnic_wire::mpa::fpdu_len;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

const A: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
/// ULPDU octets per FPDU: an FPDU of 1004 octets, several per segment would fit.
const ULPDU: usize = 998;

/// Two stacks, a connection from `a` to `b`, and the packets `a` sent with data.
struct Net {
    a: Stack,
    b: Stack,
    ca: ConnId,
    cb: ConnId,
    now: Duration,
    /// Payload lengths of the data segments `a` sent.
    payloads: Vec<usize>,
}

impl Net {
    fn new(send_buffer: usize) -> Net {
        let tcp = Config {
            mss: 1460,
            send_buffer,
            recv_buffer: 64 << 10,
            delayed_ack: None,
            ..Config::default()
        };
        let cfg = StackConfig {
            tcp,
            ..StackConfig::default()
        };
        let mut a = Stack::new(cfg.clone(), &[A]);
        let mut b = Stack::new(cfg, &[B]);
        let l = b
            .listen(SocketAddrV4::new(B, 7000), 4, RxMode::Stream)
            .expect("listen");
        let now = Duration::from_millis(1);
        let ca = a
            .connect(now, Some(A), SocketAddrV4::new(B, 7000), RxMode::Stream)
            .expect("connect");
        let mut net = Net {
            a,
            b,
            ca,
            cb: ca,
            now,
            payloads: Vec::new(),
        };
        net.exchange();
        net.cb = net.b.accept(l).expect("accept").expect("established");
        net
    }

    /// Carries packets both ways until neither stack has any to send.
    fn exchange(&mut self) {
        let mut buf = vec![0u8; 1500];
        loop {
            let mut moved = false;
            while let Some(n) = self.a.poll_transmit(self.now, &mut buf) {
                let seg = Segment::parse(&buf[..n]).expect("a's packet parses");
                if !seg.payload.is_empty() {
                    self.payloads.push(seg.payload.len());
                }
                let _ = self.b.handle_packet(self.now, &buf[..n], &mut NoRaw);
                moved = true;
            }
            while let Some(n) = self.b.poll_transmit(self.now, &mut buf) {
                let _ = self.a.handle_packet(self.now, &buf[..n], &mut NoRaw);
                moved = true;
            }
            if !moved {
                return;
            }
            self.now += Duration::from_micros(10);
        }
    }
}

/// `count` FPDUs of `ULPDU` octets each (length field, ULPDU, pad, a CRC field),
/// numbered in their octets.
fn fpdus(count: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..count {
        let len = fpdu_len(ULPDU);
        let start = out.len();
        out.extend_from_slice(&(ULPDU as u16).to_be_bytes());
        out.extend((0..len - 2).map(|k| (i * 31 + k) as u8));
        assert_eq!(out.len() - start, len);
    }
    out
}

/// `data` as a gather list cut into pieces that do not follow FPDU boundaries.
fn gather(data: &[u8], storage: &mut Vec<libc::iovec>) {
    storage.clear();
    for piece in data.chunks(700) {
        storage.push(libc::iovec {
            iov_base: piece.as_ptr() as *mut libc::c_void,
            iov_len: piece.len(),
        });
    }
}

#[test]
fn a_batch_larger_than_the_room_is_queued_fpdu_by_fpdu_each_whole_in_a_segment() {
    let one = fpdu_len(ULPDU);
    // Room for two and a half FPDUs: a batch of six fits only in parts.
    let mut net = Net::new(5 * one / 2);
    let data = fpdus(6);
    let mut framer = Framer::new(false);
    let mut storage = Vec::new();
    let mut sent = 0;
    let mut calls = Vec::new();
    while sent < data.len() {
        gather(&data[sent..], &mut storage);
        // SAFETY: every entry points into `data`, which outlives the list.
        let iov = unsafe { IoVecs::new(&storage) };
        match framer.queue_gather(&mut net.a, net.ca, iov) {
            Ok(n) => {
                calls.push(n);
                sent += n;
            }
            Err(StackError::WouldBlock) => calls.push(0),
            Err(e) => panic!("queue_gather: {e:?}"),
        }
        net.exchange();
    }
    // Two FPDUs at a time (what the room holds), never the whole batch at once and
    // never a part of an FPDU.
    assert_eq!(calls, vec![2 * one, 2 * one, 2 * one]);
    assert!(!framer.lost, "boundaries kept");
    // Each FPDU travelled alone in its segment (the MSS would hold one, not two).
    assert_eq!(net.payloads, vec![one; 6]);
    let mut got = vec![0u8; data.len() + 10];
    let n = net.b.read(net.cb, &mut got).expect("read");
    assert_eq!(&got[..n], &data[..]);
}

#[test]
fn a_batch_that_fits_goes_at_once_and_nothing_fits_is_would_block() {
    let one = fpdu_len(ULPDU);
    let mut net = Net::new(3 * one);
    let data = fpdus(3);
    let mut framer = Framer::new(false);
    let mut storage = Vec::new();
    gather(&data, &mut storage);
    // SAFETY: every entry points into `data`, which outlives the list.
    let iov = unsafe { IoVecs::new(&storage) };
    assert_eq!(framer.queue_gather(&mut net.a, net.ca, iov), Ok(3 * one));
    // The buffer is full until the peer acknowledges: not even one FPDU fits.
    assert_eq!(
        framer.queue_gather(&mut net.a, net.ca, iov),
        Err(StackError::WouldBlock)
    );
    net.exchange();
    assert_eq!(framer.queue_gather(&mut net.a, net.ca, iov), Ok(3 * one));
    net.exchange();
    let mut got = vec![0u8; 2 * data.len()];
    let n = net.b.read(net.cb, &mut got).expect("read");
    assert_eq!(n, 2 * data.len());
    assert_eq!(&got[..data.len()], &data[..]);
    assert_eq!(&got[data.len()..n], &data[..]);
    assert!(!framer.lost);
}

#[test]
fn a_batch_that_would_fit_an_empty_buffer_does_not_wait_for_all_of_its_room() {
    let one = fpdu_len(ULPDU);
    let mut net = Net::new(5 * one);
    let data = fpdus(6);
    let mut framer = Framer::new(false);
    let mut storage = Vec::new();
    gather(&data[..2 * one], &mut storage);
    // SAFETY: every entry points into `data`, which outlives the list.
    let iov = unsafe { IoVecs::new(&storage) };
    assert_eq!(framer.queue_gather(&mut net.a, net.ca, iov), Ok(2 * one));
    // Not acknowledged yet: room for three more. A batch of four (which the empty
    // buffer would hold) puts three in now rather than waiting for room for four.
    gather(&data[2 * one..], &mut storage);
    // SAFETY: as above.
    let iov = unsafe { IoVecs::new(&storage) };
    assert_eq!(framer.queue_gather(&mut net.a, net.ca, iov), Ok(3 * one));
    net.exchange();
    gather(&data[5 * one..], &mut storage);
    // SAFETY: as above.
    let iov = unsafe { IoVecs::new(&storage) };
    assert_eq!(framer.queue_gather(&mut net.a, net.ca, iov), Ok(one));
    net.exchange();
    let mut got = vec![0u8; data.len() + 10];
    let n = net.b.read(net.cb, &mut got).expect("read");
    assert_eq!(&got[..n], &data[..]);
    assert_eq!(net.payloads, vec![one; 6]);
}
