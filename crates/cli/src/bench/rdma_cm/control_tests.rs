//! The control connection's wait against a scripted perftest server that takes our first
//! message and then ends the connection (FIN, RST, Terminate) or falls silent: the wait
//! ends with the cause and where the exchange stood, not after [`CTRL_TIMEOUT`]
//! (session 30, helper D: a `-R` client that waited 600 s for its peer).

use super::*;
use softrnic_proto::cm::{Responder, ResponderProgress};
use softrnic_rnic::{DeviceConfig, TerminateCause};
use softrnic_wire::ddp::{DdpRepr, Placement};
use softrnic_wire::mpa;
use softrnic_wire::rdmap::{Opcode, QN_TERMINATE};
use softrnic_wire::terminate::Layer;
use std::io::Read;
use std::net::{TcpListener, TcpStream};

/// How the scripted server ends things after reading the client's first message.
#[derive(Clone, Copy)]
enum End {
    /// Closes its side (FIN) and reads until the client closes.
    Fin,
    /// Resets the connection (zero linger time).
    Rst,
    /// Sends a Terminate (RDMAP, remote operation, unexpected opcode), then closes.
    Terminate,
    /// Says nothing and keeps the connection open until the client closes it.
    Silent,
}

/// The Terminate's control word: RDMAP layer, remote operation error, unexpected opcode.
const TERMINATE_CTRL: [u8; 4] = [0x02, 0x06, 0x00, 0x00];

/// Accepts a connection on `l` and reads its MPA Request; returns the connection, the
/// Reply that accepts the Request, and whether CRC was negotiated.
fn take_request(l: &TcpListener) -> (TcpStream, Vec<u8>, bool) {
    let (mut s, _) = l.accept().expect("a connection");
    s.set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    let mut responder = Responder::new();
    let mut got = Vec::new();
    loop {
        let mut buf = [0u8; 512];
        let n = s.read(&mut buf).expect("the MPA Request");
        assert!(n > 0, "the client closed during MPA setup");
        got.extend_from_slice(&buf[..n]);
        if let ResponderProgress::Request { request, .. } =
            responder.handle_input(&got).expect("a valid Request")
        {
            let (reply, n) = responder
                .accept(&request, &MpaConfig::default())
                .expect("accepted");
            return (s, reply, n.crc);
        }
    }
}

/// Resets `s` (zero linger time: the close sends RST).
fn reset(s: TcpStream) {
    socket2::SockRef::from(&s)
        .set_linger(Some(Duration::ZERO))
        .expect("linger");
    drop(s);
}

/// Accepts one MPA connection on `l` (after resetting a first one that sent its
/// Request, if `reset_first`: the rig's port forwarding does that while perftest is not
/// listening yet), reads one FPDU from the client (its version message), then ends as
/// `end` says. Returns the ULPDU length it read.
fn scripted_server(l: &TcpListener, end: End, reset_first: bool) -> usize {
    if reset_first {
        reset(take_request(l).0);
    }
    let (mut s, reply, crc) = take_request(l);
    s.write_all(&reply).expect("the Reply");
    let mut len = [0u8; 2];
    s.read_exact(&mut len).expect("the client's first FPDU");
    let ulpdu_len = usize::from(u16::from_be_bytes(len));
    let mut rest = vec![0u8; mpa::fpdu_len(ulpdu_len) - 2];
    s.read_exact(&mut rest).expect("the client's first FPDU");
    match end {
        End::Fin => {
            s.shutdown(std::net::Shutdown::Write).expect("FIN");
            drain(&mut s);
        }
        End::Rst => reset(s),
        End::Terminate => {
            s.write_all(&terminate_fpdu(crc)).expect("the Terminate");
            s.shutdown(std::net::Shutdown::Write).expect("FIN");
            drain(&mut s);
        }
        End::Silent => drain(&mut s),
    }
    ulpdu_len
}

/// Reads until the client closes (or resets).
fn drain(s: &mut TcpStream) {
    let mut buf = [0u8; 512];
    while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
}

/// A Terminate FPDU carrying [`TERMINATE_CTRL`].
fn terminate_fpdu(crc: bool) -> Vec<u8> {
    let h = DdpRepr {
        last: true,
        opcode: Opcode::Terminate,
        placement: Placement::Untagged {
            rsvd_ulp: 0,
            qn: QN_TERMINATE,
            msn: 1,
            mo: 0,
        },
    };
    let (b, n) = h.to_bytes();
    let ulpdu = [&b[..n], &TERMINATE_CTRL[..]].concat();
    let mut out = vec![0u8; mpa::fpdu_len(ulpdu.len())];
    let n = mpa::emit_fpdu(&[&ulpdu], crc, None, &mut out).expect("an FPDU");
    out.truncate(n);
    out
}

/// Runs the client's opening against a scripted server that ends as `end` says, with
/// `first` as the wait for the peer's first message; returns the client's error.
fn opening_against(end: End, first: Duration) -> String {
    opening_against_second(end, first, false)
}

/// [`opening_against`], the server resetting a first connection if `reset_first`.
fn opening_against_second(end: End, first: Duration, reset_first: bool) -> String {
    let l = TcpListener::bind("127.0.0.1:0").expect("a port");
    let addr = l.local_addr().expect("an address");
    let dev = Device::open(DeviceConfig::default()).expect("a device");
    std::thread::scope(|sc| {
        let server = sc.spawn(|| scripted_server(&l, end, reset_first));
        let mut ctrl = Ctrl::new(&dev, Side::Client).expect("a control QP");
        ctrl.first_message_timeout = first;
        let m = MpaConfig {
            ird: 0,
            ord: 0,
            ..MpaConfig::default()
        };
        if let Err(e) = connect(&dev, addr, &ctrl.qp, &m) {
            // Free the server from its wait for a connection before failing.
            drop(TcpStream::connect(addr));
            let _ = server.join();
            panic!("the client did not connect: {e}");
        }
        let e = opening(&mut ctrl).expect_err("the opening cannot succeed");
        // The client closes as it does after an error; the server's drain ends then.
        drop(ctrl);
        let len = server.join().expect("the scripted server");
        // Our version message: 18 octets of headers and 16 of version.
        assert_eq!(len, 18 + pt::encode_version(pt::VERSION).len());
        e
    })
}

/// Waits no one should reach: the connection's end must end the wait by itself.
const NEVER: Duration = CTRL_TIMEOUT;

#[test]
fn a_fin_on_the_control_connection_ends_the_wait_with_its_cause() {
    let e = opening_against(End::Fin, NEVER);
    assert!(
        e.starts_with("control connection: Recv completed with WrFlushError: the connection was closed (no Terminate, no reset)"),
        "{e}"
    );
    assert!(
        e.contains("Client side, 1 messages sent, 0 received"),
        "{e}"
    );
}

#[test]
fn a_reset_on_the_control_connection_ends_the_wait_with_its_cause() {
    let e = opening_against(End::Rst, NEVER);
    assert!(
        e.starts_with(
            "control connection: Recv completed with WrFlushError: the connection was lost (ConnectionReset)"
        ),
        "{e}"
    );
    assert!(
        e.contains("Client side, 1 messages sent, 0 received"),
        "{e}"
    );
}

#[test]
fn a_terminate_on_the_control_connection_ends_the_wait_with_its_cause() {
    let e = opening_against(End::Terminate, NEVER);
    let cause = TerminateCause::new(Layer::Rdmap, 2, 0x06);
    let want = format!(
        "control connection: Recv completed with WrFlushError: Terminate received from the peer: {cause}"
    );
    assert!(e.starts_with(&want), "{e}\nwanted: {want}");
    assert!(
        e.contains("Client side, 1 messages sent, 0 received"),
        "{e}"
    );
}

#[test]
fn a_peer_silent_after_our_first_message_is_named_as_such() {
    let e = opening_against(End::Silent, Duration::from_millis(200));
    assert!(
        e.starts_with("control connection: no message from the peer in 200ms (Client side, 1 messages sent, 0 received, QP state Rts"),
        "{e}"
    );
    assert!(
        e.ends_with(
            "the peer answered nothing since the connection was established: a Linux siw \
             responder loses an FPDU that lands while it moves its socket into RDMA mode \
             (docs/INTEROP.md, first_fpdu_hold)"
        ),
        "{e}"
    );
}

/// A first connection reset during MPA setup is retried, and the exchange starts from
/// its first message on the new connection (the server reads our version there).
#[test]
fn a_connection_reset_during_mpa_setup_is_retried_from_the_start() {
    let e = opening_against_second(End::Fin, NEVER, true);
    assert!(
        e.starts_with(
            "control connection: Recv completed with WrFlushError: the connection was closed"
        ),
        "{e}"
    );
    assert!(
        e.contains("Client side, 1 messages sent, 0 received"),
        "{e}"
    );
}
