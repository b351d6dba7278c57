//! Whatever path takes an FPDU, the outcome is the same: a stream of Sends (some
//! solicited, some without a receive posted, some longer than their buffer) and RDMA
//! Writes (some beyond their region, to a region without remote write rights, or to an
//! invalid STag), perhaps one octet corrupted, fed whole, so that runs of whole FPDUs
//! and the one-step Send and Write paths take what they can, ends exactly as the same
//! stream cut into pieces of 1 to 11
//! octets, which only the step machine can take: the same completions in the same
//! order, the same Terminate cause, the same events, the same octets in memory. Fed
//! whole through [`Qp::rx_take_simple`] first (as the I/O layer feeds a QP with its own
//! receive queue), it ends alike too; and so it does with every receive completion the
//! simple paths offer handed over on the way ([`Qp::rx_take_simple_to`], as a polling
//! caller takes one): the handed ones first, then the queued ones, are the same
//! completions in the same order, also when the receiver's own send completion was
//! queued before the stream came (nothing may overtake it).

use super::*;
use proptest::prelude::*;

/// One Send of the stream: its length, whether it asks for a solicited event, and the
/// receive posted for it (`None`: none, so a later receive serves it or none does).
/// With `write`, an RDMA Write of that length instead: where it lands in the target
/// region (64 octets) and the target (0, 1: the region; 2: a region without remote
/// write rights; 3: an invalid STag).
#[derive(Debug, Clone)]
struct Msg {
    len: usize,
    solicited: bool,
    recv: Option<(usize, bool)>,
    write: Option<(u64, u8)>,
}

fn msg() -> impl Strategy<Value = Msg> {
    (
        0..48usize,
        any::<bool>(),
        prop::option::weighted(0.85, (0..48usize, any::<bool>())),
        prop::option::weighted(0.4, (0..40u64, 0..4u8)),
    )
        .prop_map(|(len, solicited, recv, write)| Msg {
            len,
            solicited,
            recv,
            write,
        })
}

/// What a receiver ended with.
#[derive(Debug, PartialEq, Eq)]
struct End {
    completions: Vec<(CqSide, Completion)>,
    events: Vec<QpEvent>,
    fatal: Option<(TerminateCause, bool)>,
    mem: Vec<Vec<u8>>,
}

/// How the receiver takes the stream.
#[derive(Debug, Clone, Copy)]
enum Feed {
    /// Whole, by runs and the steps.
    Whole,
    /// Whole, by the simple paths alone first.
    SimpleFirst,
    /// Cut, by the steps alone.
    Cut,
    /// Whole, by the simple paths alone first, each receive completion they offer
    /// handed over.
    Handed,
}

/// Builds the pair, the receives (each a one- or two-SGE buffer) and the stream, and
/// feeds it to the receiver as `feed` says.
/// With `own_send`, the receiver has sent a Send of its own first, whose completion
/// waits in its QP, released and not yet polled.
fn run(msgs: &[Msg], crc: bool, flip: Option<(usize, u8)>, own_send: bool, feed: Feed) -> End {
    let (mut a, mut b) = pair(QpParams {
        crc,
        ..Default::default()
    });
    if own_send {
        let (own, obase) = b.reg(16, Access::empty(), 92);
        b.qp.post_send(send_wr(77, [sge(own, obase, 16)]), &b.tpt)
            .unwrap();
        assert!(b.next_fpdu().is_some());
    }
    let (src, sbase) = a.reg(64, Access::empty(), 1);
    let (target, tbase) = b.reg(64, Access::REMOTE_WRITE, 90);
    let (no_rights, nbase) = b.reg(64, Access::LOCAL_WRITE, 91);
    let mut wire = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        if let Some((at, to)) = m.write {
            let (rkey, base) = match to {
                0 | 1 => (target, tbase),
                2 => (no_rights, nbase),
                _ => (target ^ 0x100, tbase),
            };
            let mut wr = send_wr(i as u64, [sge(src, sbase + i as u64, m.len)]);
            wr.op = SendOp::Write {
                remote_addr: base + at,
                rkey,
            };
            a.qp.post_send(wr, &a.tpt).unwrap();
            wire.extend(a.next_fpdu().unwrap());
            continue;
        }
        if let Some((len, two)) = m.recv {
            let (dst, base) = b.reg(64, Access::LOCAL_WRITE, 2 + i as u8);
            let wr_id = 100 + i as u64;
            let wr = if two && len > 1 {
                RecvWr::new(
                    wr_id,
                    [sge(dst, base, len / 2), sge(dst, base + 32, len - len / 2)],
                )
            } else {
                RecvWr::new(wr_id, [sge(dst, base, len)])
            };
            b.qp.post_recv(wr, &b.tpt).unwrap();
        }
        let mut wr = send_wr(i as u64, [sge(src, sbase + i as u64, m.len)]);
        if m.solicited {
            wr = wr.solicited();
        }
        a.qp.post_send(wr, &a.tpt).unwrap();
        wire.extend(a.next_fpdu().unwrap());
    }
    if let Some((at, x)) = flip {
        let at = at % wire.len();
        wire[at] ^= x;
    }
    let mut handed = Vec::new();
    match feed {
        Feed::Whole => b.feed(&wire, false),
        Feed::SimpleFirst => b.feed_simple_first(&wire),
        Feed::Cut => b.feed(&wire, true),
        Feed::Handed => handed = b.feed_handed(&wire),
    }
    let mut completions: Vec<_> = handed.into_iter().map(|c| (CqSide::of(&c), c)).collect();
    completions.extend(b.completions());
    End {
        completions,
        events: std::iter::from_fn(|| b.qp.poll_event()).collect(),
        fatal: b.qp.fatal_cause(),
        mem: b.mem.clone(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn a_stream_of_sends_and_writes_ends_alike_in_runs_and_in_steps(
        msgs in prop::collection::vec(msg(), 1..10),
        crc in any::<bool>(),
        flip in prop::option::of((any::<usize>(), 1..=255u8)),
        own_send in any::<bool>(),
    ) {
        let whole = run(&msgs, crc, flip, own_send, Feed::Whole);
        let simple = run(&msgs, crc, flip, own_send, Feed::SimpleFirst);
        let handed = run(&msgs, crc, flip, own_send, Feed::Handed);
        let cut = run(&msgs, crc, flip, own_send, Feed::Cut);
        prop_assert_eq!(&simple, &cut);
        prop_assert_eq!(&handed, &cut);
        prop_assert_eq!(whole, cut);
    }
}
