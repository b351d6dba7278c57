//! Awaiting completions from Tokio: a receiver whose CQ is bound to a completion
//! channel awaits its events in an async task (no thread blocks, no polling loop spins),
//! while a plain thread sends it 100 messages. The task runs the verbs loop: drain the
//! CQ, arm it, drain again, then await the next event; it acknowledges events in
//! batches.
//!
//! `cargo run -p softrnic-rnic --features tokio --example tokio_completions`

use softrnic_rnic::*;
use std::time::Duration;

const MSGS: u64 = 100;

fn main() -> Result<()> {
    let (rdev, sdev) = (
        Device::open(DeviceConfig::default())?,
        Device::open(DeviceConfig::default())?,
    );
    let (rpd, spd) = (rdev.alloc_pd(), sdev.alloc_pd());
    // The receiver's CQ is on handler 0, a completion channel.
    let ch = CompChannel::new()?;
    rdev.set_handler(0, Handler::channel(&ch))?;
    let rcq = rdev.create_cq_on(2 * MSGS as usize, 0)?;
    let scq = sdev.create_cq(2 * MSGS as usize)?;
    let init = |cq| QpInit {
        send_cq: cq,
        recv_cq: cq,
        sq_depth: MSGS as usize,
        rq_depth: MSGS as usize,
    };
    let (rqp, sqp) = (
        rdev.create_qp(&rpd, init(&rcq))?,
        sdev.create_qp(&spd, init(&scq))?,
    );
    let bufs = rpd.alloc_mr(8 * MSGS as usize, Access::LOCAL_WRITE)?;
    for i in 0..MSGS as usize {
        rqp.post_recv(RecvWr::new(i as u64, bufs.sge(8 * i, 8)))?;
    }
    let listener = rdev.listen("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let acceptor = std::thread::spawn(move || -> Result<Qp> {
        listener.accept()?.accept(&rqp, b"")?;
        Ok(rqp)
    });
    sdev.connect(addr, &sqp, b"")?;
    let _rqp = acceptor.join().expect("acceptor")?;

    // A plain thread sends, with pauses, so the task really waits for events.
    let sender = std::thread::spawn(move || -> Result<()> {
        let src = spd.alloc_mr(8, Access::empty())?;
        for i in 0..MSGS {
            src.write(0, &i.to_le_bytes())?;
            sqp.post_send(SendWr::send(i, src.sge(0, 8)))?;
            let c = scq.wait_for(1, Duration::from_secs(10));
            assert_eq!(c.len(), 1, "send {i} did not complete");
            if i % 10 == 9 {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        Ok(())
    });

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()?;
    let (got, events) = rt.block_on(async {
        let ch = AsyncCompChannel::new(ch)?;
        let mut got = Vec::new();
        let mut events = 0u64;
        let mut unacked = 0u64;
        let drain = |got: &mut Vec<Completion>| {
            while let Some(c) = rcq.poll_one() {
                got.push(c);
            }
        };
        while (got.len() as u64) < MSGS {
            drain(&mut got);
            rcq.req_notify(false);
            drain(&mut got);
            if got.len() as u64 == MSGS {
                break;
            }
            let ev = tokio::time::timeout(Duration::from_secs(10), ch.get_event())
                .await
                .map_err(|_| Error::Timeout)??;
            assert!(ev.cq().same_as(&rcq));
            events += 1;
            unacked += 1;
            if unacked == 8 {
                rcq.ack_events(unacked)?;
                unacked = 0;
            }
        }
        rcq.ack_events(unacked)?;
        Ok::<_, Error>((got, events))
    })?;
    sender.join().expect("sender")?;

    for (i, c) in got.iter().enumerate() {
        assert_eq!((c.status, c.wr_id), (WcStatus::Success, i as u64));
        let mut v = [0u8; 8];
        bufs.read(8 * i, &mut v)?;
        assert_eq!(u64::from_le_bytes(v), i as u64);
    }
    let counts = rcq.event_counts();
    println!(
        "awaited {} completions through {events} events (raised {}, acknowledged {})",
        got.len(),
        counts.raised,
        counts.acked
    );
    Ok(())
}
