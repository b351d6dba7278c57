//! The `tokio` feature: a task awaits completion events on a channel. Run with
//! `cargo test -p softrnic-rnic --features tokio --test tokio_channel`.
//!
//! A sender thread streams messages in random bursts while the task runs the verbs loop
//! (drain, arm, drain, await the event). The task never blocks its thread, so a wake-up
//! lost between Tokio's readiness and the channel's queue would leave it waiting: each
//! wait has a timeout that fails the test.
#![cfg(feature = "tokio")]

use softrnic_rnic::*;
use std::time::Duration;

const T: Duration = Duration::from_secs(60);

struct Pair {
    rcq: Cq,
    _rqp: Qp,
    sqp: Qp,
    scq: Cq,
    _bufs: Mr,
    src: Mr,
    _devs: (Device, Device),
}

fn pair(ch: &CompChannel, msgs: usize) -> Pair {
    let (rdev, sdev) = (
        Device::open(DeviceConfig::default()).unwrap(),
        Device::open(DeviceConfig::default()).unwrap(),
    );
    let (rpd, spd) = (rdev.alloc_pd(), sdev.alloc_pd());
    rdev.set_handler(0, Handler::channel(ch)).unwrap();
    let rcq = rdev.create_cq_on(msgs + 8, 0).unwrap();
    let scq = sdev.create_cq(256).unwrap();
    let init = |cq, rq| QpInit {
        send_cq: cq,
        recv_cq: cq,
        sq_depth: 64,
        rq_depth: rq,
    };
    let rqp = rdev.create_qp(&rpd, init(&rcq, msgs)).unwrap();
    let sqp = sdev.create_qp(&spd, init(&scq, 4)).unwrap();
    let bufs = rpd.alloc_mr(8 * msgs, Access::LOCAL_WRITE).unwrap();
    for i in 0..msgs {
        rqp.post_recv(RecvWr::new(i as u64, bufs.sge(8 * i, 8)))
            .unwrap();
    }
    let listener = rdev.listen("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::scope(|s| {
        let h = s.spawn(|| listener.accept().unwrap().accept(&rqp, b"").unwrap());
        sdev.connect(addr, &sqp, b"").unwrap();
        h.join().unwrap();
    });
    let src = spd.alloc_mr(8, Access::empty()).unwrap();
    Pair {
        rcq,
        _rqp: rqp,
        sqp,
        scq,
        _bufs: bufs,
        src,
        _devs: (rdev, sdev),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .unwrap()
}

#[test]
fn without_a_runtime_the_async_channel_is_an_error() {
    let e = AsyncCompChannel::new(CompChannel::new().unwrap()).unwrap_err();
    assert!(matches!(e, Error::BadState(_)), "{e:?}");
}

#[test]
fn a_task_awaits_every_completion_through_events() {
    const MSGS: usize = 2000;
    let ch = CompChannel::new().unwrap();
    let p = pair(&ch, MSGS);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut rng = 0x2545_f491_4f6c_dd1du64;
            let mut sent = 0;
            while sent < MSGS {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let burst = ((rng % 8) as usize + 1).min(MSGS - sent);
                let wrs = (sent..sent + burst).map(|i| SendWr::send(i as u64, p.src.sge(0, 8)));
                p.sqp.post_send_batch(wrs).unwrap();
                assert_eq!(p.scq.wait_for(burst, T).len(), burst);
                sent += burst;
                for _ in 0..(rng >> 8) % 64 {
                    std::thread::yield_now();
                }
            }
        });
        let (got, events) = runtime().block_on(async {
            let ch = AsyncCompChannel::new(ch.clone()).unwrap();
            assert!(ch.channel().same_as(&ch.channel().clone()));
            let mut got = vec![false; MSGS];
            let (mut n, mut events) = (0, 0u64);
            let mut drain = |got: &mut Vec<bool>| {
                while let Some(c) = p.rcq.poll_one() {
                    assert_eq!(c.status, WcStatus::Success);
                    assert!(!got[c.wr_id as usize], "completion {} twice", c.wr_id);
                    got[c.wr_id as usize] = true;
                    n += 1;
                }
                n
            };
            loop {
                drain(&mut got);
                p.rcq.req_notify(false);
                if drain(&mut got) == MSGS {
                    break;
                }
                let ev = tokio::time::timeout(T, ch.get_event()).await;
                let ev = ev
                    .expect("lost wake-up: no event within the timeout")
                    .unwrap();
                assert!(ev.cq().same_as(&p.rcq));
                events += 1;
            }
            (got, events)
        });
        assert!(got.iter().all(|&x| x));
        p.rcq.ack_events(events).unwrap();
        eprintln!("{MSGS} completions, {events} events awaited");
    });
}
