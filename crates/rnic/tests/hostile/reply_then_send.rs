//! softrnic as the MPA initiator against a scripted responder that sends its first Send
//! right behind its Reply: in the same write (a peer under load whose octets coalesce),
//! and in pieces that cut both. The Send's octets reach the socket before the QP is
//! handed to its engine, so they are delivered only if that hand-over reads what is
//! already waiting (session 30, helper D: a `-R` run that waited 600 s for its peer).

use crate::peer::*;
use softrnic_proto::cm::{Responder, ResponderProgress};
use softrnic_rnic::*;
use softrnic_wire::rdmap::{Opcode, QN_SEND};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};

/// Reads the MPA Request on `conn` and returns the Reply that accepts it with default
/// settings, and whether CRC was negotiated.
fn read_request_and_accept(conn: &mut TcpStream) -> (Vec<u8>, bool) {
    let mut responder = Responder::new();
    let mut got = Vec::new();
    loop {
        let mut buf = [0u8; 512];
        let n = conn.read(&mut buf).unwrap();
        assert!(n > 0, "the initiator closed during MPA setup");
        got.extend_from_slice(&buf[..n]);
        match responder.handle_input(&got).unwrap() {
            ResponderProgress::NeedMore => continue,
            ResponderProgress::Request { request, consumed } => {
                assert_eq!(consumed, got.len(), "nothing before our Reply");
                let (reply, negotiated) =
                    responder.accept(&request, &MpaConfig::default()).unwrap();
                return (reply, negotiated.crc);
            }
        }
    }
}

/// Connects a softrnic QP with one receive posted to a responder that writes its Reply
/// and a Send of `payload` cut at `cuts` (offsets into the Reply and FPDU together;
/// none: one write), and returns the completion and the octets received.
fn connect_to_eager_responder(payload: &[u8], cuts: &[usize]) -> (Completion, Vec<u8>) {
    let t = Target::new(DeviceConfig::default());
    let sink = t.pd.alloc_mr(256, Access::LOCAL_WRITE).unwrap();
    t.qp.post_recv(RecvWr::new(7, sink.sge(0, 256))).unwrap();
    let raw = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = raw.local_addr().unwrap();
    std::thread::scope(|s| {
        let responder = s.spawn(|| {
            let (mut conn, _) = raw.accept().unwrap();
            conn.set_read_timeout(Some(WAIT)).unwrap();
            conn.set_nodelay(true).unwrap();
            let (reply, crc) = read_request_and_accept(&mut conn);
            let send = fpdu(
                &untagged(Opcode::Send, QN_SEND, 1, 0, true, 0, payload),
                crc,
            );
            let all = [reply, send].concat();
            let mut at = 0;
            for &cut in cuts.iter().chain(std::iter::once(&all.len())) {
                conn.write_all(&all[at..cut]).unwrap();
                at = cut;
            }
            // Keep the connection open until softrnic has read everything.
            conn
        });
        t.dev.connect(addr, &t.qp, b"").unwrap();
        let wc = t.cq.wait_for(1, WAIT);
        let _conn = responder.join().unwrap();
        assert_eq!(wc.len(), 1, "the Send behind the Reply completed");
        let mut got = vec![0u8; wc[0].byte_len as usize];
        sink.read(0, &mut got).unwrap();
        (wc[0], got)
    })
}

#[test]
fn a_send_in_the_same_write_as_the_reply_is_delivered() {
    let payload: Vec<u8> = (0..56u8).collect();
    let (wc, got) = connect_to_eager_responder(&payload, &[]);
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode, wc.byte_len),
        (7, WcStatus::Success, WcOpcode::Recv, 56)
    );
    assert_eq!(got, payload);
}

#[test]
fn a_send_in_pieces_that_cut_the_reply_is_delivered() {
    let payload: Vec<u8> = (100..116u8).collect();
    // The Reply is 20 octets of header and 4 of RFC 6581 private data: cut inside its
    // header, at its end together with the FPDU's first octet, and inside the FPDU.
    let (wc, got) = connect_to_eager_responder(&payload, &[10, 25, 30]);
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode, wc.byte_len),
        (7, WcStatus::Success, WcOpcode::Recv, 16)
    );
    assert_eq!(got, payload);
}
