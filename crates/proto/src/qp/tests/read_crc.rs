//! An inbound Read Request and its CRC: the response is queued only once the request's
//! FPDU is whole and intact.

use super::*;

/// With CRC on, a Read Request is answered only once its CRC is checked: the core
/// takes the request at its body, and fed up to its CRC field the responder has nothing
/// to send yet. Intact, the response follows; corrupted, only the MPA Terminate does.
#[test]
fn a_read_request_is_answered_only_after_its_crc() {
    for corrupt in [false, true] {
        let (mut a, mut b) = pair(QpParams {
            crc: true,
            ..Default::default()
        });
        let (local, lbase) = a.reg(64, Access::LOCAL_WRITE, 1);
        let (remote, rbase) = b.reg(64, Access::REMOTE_READ, 2);
        a.qp.post_send(
            SendWr {
                wr_id: 1,
                op: SendOp::Read {
                    remote_addr: rbase,
                    rkey: remote,
                },
                sgl: [sge(local, lbase, 64)].into(),
                signaled: true,
                fence: false,
            },
            &a.tpt,
        )
        .unwrap();
        let f = a.next_fpdu().unwrap();
        let (head, crc) = f.split_at(f.len() - 4);
        b.feed(head, false);
        assert!(
            !b.qp.may_transmit() && !b.qp.read_response_unstarted(),
            "corrupt {corrupt}: nothing to send before the request's CRC"
        );
        let mut crc = crc.to_vec();
        if corrupt {
            crc[0] ^= 0x01;
        }
        b.feed(&crc, false);
        let sent = b.next_fpdu().expect("something to send after the CRC");
        let opcode = sent[2 + 1] & 0x0f;
        if corrupt {
            assert_eq!(
                b.qp.fatal_cause(),
                Some((TerminateCause::new(Layer::Llp, 0, 0x02), false))
            );
            assert_eq!(opcode, 0x07, "a Terminate, no Read Response");
            assert!(b.next_fpdu().is_none(), "nothing after the Terminate");
        } else {
            assert_eq!(b.qp.fatal_cause(), None);
            assert_eq!(opcode, 0x02, "the Read Response");
        }
    }
}
