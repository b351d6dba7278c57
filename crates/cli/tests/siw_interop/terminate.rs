//! siw's Terminate for bad remote accesses softrnic makes on purpose, and the proof
//! asked of a connection where siw, whose Terminate is best effort, sent none.

use crate::rig::{self, one_guest, rig};
use crate::{RPING_MAX, opts, softrnic_server};
use softrnic_cli::decode::{BodyInfo, ConnectionDecode, Dir};
use softrnic_cli::rping::{Fault, RpingError, RpingOpts};
use softrnic_rnic::{AsyncEvent, TerminateCause, WcOpcode, WcStatus};
use softrnic_wire::Opcode;
use softrnic_wire::terminate::{Layer, ddp_code, ddp_etype, rdmap_code, rdmap_etype};

/// softrnic makes bad remote accesses into siw's memory on purpose (an RDMA Read and
/// an RDMA Write, each with a wrong STag and beyond the advertised bounds): siw answers
/// each with a Terminate whose layer/type/code are the RFC's, softrnic reports that
/// cause exactly, and both QPs flush (siw's rping client fails its next step).
///
/// siw's Terminate is best effort: it skips it when its own last Send is still marked
/// in progress as it closes (`siw_send_terminate`: "cannot send TERMINATE: op 3 in
/// progress"), a window the emulated guest hits about once in 300 connections on a
/// busy host (docs/INTEROP.md). Such a connection passes only as [`no_terminate`]
/// proves it: no Terminate on the wire, siw silent after our fault and closing with a
/// FIN, and softrnic reporting exactly a flushed step with no Terminate and no lost
/// connection. At least one of the four must carry siw's Terminate.
#[test]
fn siw_terminates_bad_remote_access() {
    let Some(rig) = rig() else { return };
    let _g = one_guest();
    let faults = [
        Fault::ReadBadStag,
        Fault::ReadBeyondBounds,
        Fault::WriteBadStag,
        Fault::WriteBeyondBounds,
    ];
    let cases = faults
        .iter()
        .map(|f| RpingOpts {
            inject: Some(*f),
            ..opts(RPING_MAX, 2)
        })
        .collect();
    let (port, server) = softrnic_server(cases);
    let cmd = faults
        .iter()
        .map(|_| {
            format!("timeout 120 rping -c -a $HOST_IP -p {port} -C 2 -V -S 100; echo rping-rc=$?")
        })
        .collect::<Vec<_>>()
        .join("; ");
    let f = rig.client("term-cli", &cmd, &[port], &[]);
    let served = server.wait_served(&f.output);
    // One result and one captured connection per fault: the checks below zip them.
    assert_eq!(served.len(), faults.len(), "{}", f.output);
    assert_eq!(
        f.conns.len(),
        faults.len(),
        "connections captured\n{}",
        f.output
    );
    let expect = |f: Fault| match f {
        Fault::ReadBadStag => (
            Layer::Rdmap,
            rdmap_etype::REMOTE_PROTECTION,
            rdmap_code::INVALID_STAG,
        ),
        Fault::ReadBeyondBounds => (
            Layer::Rdmap,
            rdmap_etype::REMOTE_PROTECTION,
            rdmap_code::BASE_BOUNDS,
        ),
        Fault::WriteBadStag => (
            Layer::Ddp,
            ddp_etype::TAGGED_BUFFER,
            ddp_code::tagged::INVALID_STAG,
        ),
        Fault::WriteBeyondBounds => (
            Layer::Ddp,
            ddp_etype::TAGGED_BUFFER,
            ddp_code::tagged::BASE_BOUNDS,
        ),
    };
    let mut terminated = 0;
    for ((fault, served), conn) in faults.iter().zip(served).zip(&f.conns) {
        let (layer, etype, code) = expect(*fault);
        let want = TerminateCause { layer, etype, code };
        match served.result {
            Err(RpingError::Terminated {
                cause,
                remote: true,
                opcode,
                status,
            }) => {
                assert_eq!(cause, want, "{fault:?}: siw's Terminate");
                match fault {
                    // The Read itself fails with the peer's verdict.
                    Fault::ReadBadStag | Fault::ReadBeyondBounds => {
                        assert_eq!(
                            (opcode, status),
                            (WcOpcode::Read, WcStatus::RemoteAccessError)
                        )
                    }
                    // A Write completes once sent; what follows is flushed.
                    _ => assert_eq!(status, WcStatus::WrFlushError, "{fault:?}: {opcode:?}"),
                }
                // The Terminate on the wire, decoded independently of the QP.
                let term = conn
                    .fpdus()
                    .find_map(|p| match p.body {
                        BodyInfo::Terminate { cause, .. } => Some(cause),
                        _ => None,
                    })
                    .unwrap_or_else(|| panic!("{fault:?}: no Terminate on the wire"));
                assert_eq!(term, want, "{fault:?}: Terminate on the wire");
                terminated += 1;
            }
            Err(RpingError::Failed { opcode, status }) => {
                no_terminate(*fault, opcode, status, &served.events, conn, &f.output);
                eprintln!("{fault:?}: siw closed without its Terminate (best effort)");
            }
            other => panic!(
                "{fault:?}: expected siw's Terminate, got {other:?}; events {:?}; wire: {:?}\n{}",
                served.events,
                conn.fpdus()
                    .map(|p| format!("{:?} {:?}", p.dir, p.body))
                    .collect::<Vec<_>>(),
                f.output
            ),
        }
    }
    assert!(terminated > 0, "siw sent no Terminate at all\n{}", f.output);
    // Each of siw's four rping clients ended by itself, not by `timeout` (124): rping's
    // own exit status does not tell a flushed QP from success, so the Terminates above
    // are the evidence of what happened; this shows that nothing hung.
    let rcs: Vec<&str> = f
        .output
        .lines()
        .filter_map(|l| l.trim().strip_prefix("rping-rc="))
        .collect();
    assert_eq!(rcs.len(), faults.len(), "{}", f.output);
    assert!(
        rcs.iter().all(|rc| *rc != "124"),
        "an rping hung: {rcs:?}\n{}",
        f.output
    );
}

/// A bad remote access that siw answered with no Terminate (best effort on its side,
/// see [`siw_terminates_bad_remote_access`]): accepted only if the wire and softrnic
/// agree. No Terminate either way, our fault went out and siw sent nothing after it but
/// its FIN (not an RST), and softrnic reported the step in progress (`opcode`, `status`)
/// flushed by that FIN, with no Terminate and no lost connection among its events.
fn no_terminate(
    fault: Fault,
    opcode: WcOpcode,
    status: WcStatus,
    events: &[AsyncEvent],
    conn: &ConnectionDecode,
    output: &str,
) {
    let wire: Vec<String> = conn
        .fpdus()
        .map(|p| format!("{:?} {:?}", p.dir, p.body))
        .collect();
    let ctx =
        format!("{fault:?} without siw's Terminate: events {events:?}; wire {wire:?}\n{output}");
    assert!(
        !conn.fpdus().any(|p| p.header.opcode == Opcode::Terminate),
        "a Terminate on the wire was not reported: {ctx}"
    );
    // The Read is what fails a Read fault; a Write completes once sent, and the receive
    // waiting for the client's next advert flushes.
    let (fault_op, step) = match fault {
        Fault::ReadBadStag | Fault::ReadBeyondBounds => (Opcode::ReadRequest, WcOpcode::Read),
        Fault::WriteBadStag | Fault::WriteBeyondBounds => (Opcode::Write, WcOpcode::Recv),
    };
    let at = conn
        .fpdus()
        .position(|p| p.dir == Dir::ToClient && p.header.opcode == fault_op)
        .unwrap_or_else(|| panic!("our fault is not on the wire: {ctx}"));
    assert!(
        conn.fpdus().skip(at + 1).all(|p| p.dir == Dir::ToClient),
        "siw answered our fault: {ctx}"
    );
    // (softrnic's side may show an RST after both FINs: slirp now and then repeats its
    // FIN after our last ACK, and our closed socket answers it; seen on 5 of 300
    // connections that did carry siw's Terminate.)
    assert!(
        conn.to_server.fin && !conn.to_server.rst,
        "siw's FIN, not an RST: {ctx}"
    );
    assert_eq!((opcode, status), (step, WcStatus::WrFlushError), "{ctx}");
    assert!(
        !events.iter().any(|e| matches!(
            e,
            AsyncEvent::QpFatal { .. } | AsyncEvent::ConnectionLost { .. }
        )),
        "{ctx}"
    );
}

/// [`no_terminate`]'s proof on a real capture, without the rig
/// (`tests/data/siw-write-no-terminate.pcap`, taken between QEMU's slirp and softrnic
/// in session 12 with two busy loops beside the guest): siw's rping client took our
/// Write with a bad STag and closed with no Terminate (siw's log: "cannot send
/// TERMINATE: op 3 in progress"); on the next connection it answered our Write beyond
/// bounds with its Terminate. The proof accepts the first with the statuses softrnic
/// reported then, and refuses the second, and the first with any other report.
#[test]
fn a_missing_terminate_is_accepted_only_with_its_proof() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/siw-write-no-terminate.pcap");
    let conns = rig::decode(&path);
    assert_eq!(conns.len(), 2, "{conns:?}");
    let (silent, answered) = (&conns[0], &conns[1]);
    let (recv, flushed) = (WcOpcode::Recv, WcStatus::WrFlushError);
    let qp = softrnic_rnic::QpId(1);
    let closed = [
        AsyncEvent::Established { qp },
        AsyncEvent::Disconnected { qp },
    ];
    no_terminate(Fault::WriteBadStag, recv, flushed, &closed, silent, "");
    let refused = |fault, opcode, status, events: &[AsyncEvent], conn| {
        std::panic::catch_unwind(|| no_terminate(fault, opcode, status, events, conn, "")).is_err()
    };
    let fatal = AsyncEvent::QpFatal {
        qp,
        cause: TerminateCause {
            layer: Layer::Ddp,
            etype: ddp_etype::TAGGED_BUFFER,
            code: ddp_code::tagged::INVALID_STAG,
        },
        remote: true,
    };
    let lost = AsyncEvent::ConnectionLost {
        qp,
        error: std::io::ErrorKind::UnexpectedEof,
    };
    let bounds = Fault::WriteBeyondBounds;
    assert!(
        refused(bounds, recv, flushed, &closed, answered),
        "a Terminate on the wire"
    );
    assert!(
        refused(Fault::WriteBadStag, recv, flushed, &[fatal], silent),
        "a Terminate reported"
    );
    assert!(
        refused(Fault::WriteBadStag, recv, flushed, &[lost], silent),
        "a lost connection"
    );
    assert!(
        refused(
            Fault::WriteBadStag,
            WcOpcode::Send,
            flushed,
            &closed,
            silent
        ),
        "another step"
    );
    assert!(
        refused(
            Fault::WriteBadStag,
            recv,
            WcStatus::RemoteAccessError,
            &closed,
            silent
        ),
        "another status"
    );
    assert!(
        refused(Fault::ReadBadStag, WcOpcode::Read, flushed, &closed, silent),
        "a Read fault"
    );
}
