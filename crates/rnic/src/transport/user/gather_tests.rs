//! A gather list of several whole FPDUs (a large message's, or several messages' with
//! the transmit path's look-ahead) goes out one TCP record per FPDU, so each FPDU
//! starts a segment or follows a whole one (RFC 5044) instead of the list being cut at
//! segment size. (From branch s16-fix, session 16.)

use super::SimNet;
use super::pair_fixture::{self, stack};
use super::transport::UserTransport;
use crate::sys::socket::IoVecs;
use crate::transport::Transport;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

const A: Ipv4Addr = Ipv4Addr::new(10, 0, 4, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 0, 4, 2);
const PORT: u16 = 7004;

/// An FPDU of `wire` octets (a multiple of 4): MPA length, payload, CRC field.
fn fpdu(wire: usize, seed: u8) -> Vec<u8> {
    let ulpdu = wire - 2 - 4;
    let mut f = Vec::with_capacity(wire);
    f.extend_from_slice(&(ulpdu as u16).to_be_bytes());
    f.extend((0..ulpdu).map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed)));
    f.extend_from_slice(&[0; 4]);
    assert_eq!(f.len(), softrnic_wire::mpa::fpdu_len(ulpdu));
    f
}

#[test]
fn a_gather_list_of_three_fpdus_arrives_as_three_segments() {
    let net = SimNet::default();
    let a = stack(&net, A, 1);
    let b = stack(&net, B, 2);
    let (id_a, id_b) = pair_fixture::connect(&a.stack, &b.stack, A, SocketAddrV4::new(B, PORT));
    let mut sender = UserTransport::new(a.stack.clone(), id_a, false).unwrap();

    // Three FPDUs of 40,000 octets: two do not fit one segment, one list of all three
    // would be cut at the segment size, inside the second.
    const WIRE: usize = 40_000;
    let data: Vec<u8> = (0..3).flat_map(|k| fpdu(WIRE, k as u8)).collect();
    // Two pieces, split inside the second FPDU, as a header and region memory are.
    let (left, right) = data.split_at(50_000);
    let iov = [left, right].map(|p| libc::iovec {
        iov_base: p.as_ptr() as *mut libc::c_void,
        iov_len: p.len(),
    });
    // SAFETY: both entries point into `data`, which lives and is not written until
    // the send below returns.
    let list = unsafe { IoVecs::new(&iov) };
    assert_eq!(sender.send_gather(list).unwrap(), data.len());

    let deadline = Instant::now() + Duration::from_secs(60);
    while b.stack.lock().unwrap().stack.readable(id_b) < data.len() {
        assert!(Instant::now() < deadline, "the FPDUs did not arrive");
        std::thread::yield_now();
    }
    let mut segments = Vec::new();
    let mut got = Vec::new();
    let mut g = b.stack.lock().unwrap();
    while let Some(mut piece) = g.stack.take_piece(id_b).unwrap() {
        segments.push(piece.len());
        let mut out = vec![0u8; piece.len()];
        assert_eq!(piece.copy_to(&mut out), out.len());
        got.extend_from_slice(&out);
        g.stack.piece_read(id_b, piece).unwrap();
    }
    drop(g);
    assert_eq!(segments, [WIRE; 3], "each FPDU in a segment of its own");
    assert!(got == data, "bytes received are the bytes sent");
    drop(sender);
}
