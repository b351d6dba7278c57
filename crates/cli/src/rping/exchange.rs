//! The rping exchange itself: opening the verbs objects, the client's and the server's
//! side of each iteration, and waiting for their completions.

use super::{Advert, Result, RpingError, RpingOpts, ping_data};
use softrnic_rnic::{
    Access, AsyncEvent, Completion, Cq, Device, DeviceConfig, Listener, Mr, Pd, Qp, QpInit, RecvWr,
    SendWr, Srq, SrqInit, WcOpcode, WcStatus,
};
use std::net::SocketAddr;
use std::time::Duration;

/// One connection's verbs objects (the device lives outside, so a persistent server
/// keeps one device and listener for all its clients).
struct Ends {
    dev: Device,
    cq: Cq,
    qp: Qp,
    pd: Pd,
    /// With `--srq`: where the receives go.
    srq: Option<Srq>,
}

fn open_device(opts: &RpingOpts) -> Result<Device> {
    Ok(Device::open(DeviceConfig {
        mpa: opts.mpa.clone(),
        pcap: opts.pcap.clone(),
        first_fpdu_hold: opts.hold,
        user_tcp: opts.user_tcp.clone(),
        ..DeviceConfig::default()
    })?)
}

fn open(dev: &Device, opts: &RpingOpts) -> Result<Ends> {
    let pd = dev.alloc_pd();
    let cq = dev.create_cq(16)?;
    let init = QpInit::new(&cq, 16, 16);
    let (qp, srq) = if opts.srq {
        let srq = dev.create_srq(&pd, SrqInit::new(16, 1))?;
        (dev.create_qp_on_srq(&pd, init, &srq)?, Some(srq))
    } else {
        (dev.create_qp(&pd, init)?, None)
    };
    Ok(Ends {
        dev: dev.clone(),
        cq,
        qp,
        pd,
        srq,
    })
}

/// Waits for the next completion of kind `op` (earlier ones of other kinds are
/// skipped). A failed work request is reported with the Terminate that put the QP into
/// error, when there was one: the QP posts that event before its completions, so it is
/// already queued.
fn wait(e: &Ends, opts: &RpingOpts, op: WcOpcode) -> Result<Completion> {
    let deadline = std::time::Instant::now() + opts.timeout;
    loop {
        let now = std::time::Instant::now();
        let wc = e.cq.wait_for(1, deadline.saturating_duration_since(now));
        let Some(c) = wc.first() else {
            return Err(RpingError::Timeout(op));
        };
        if c.status != WcStatus::Success {
            let id = e.qp.id();
            let fatal = e.dev.wait_event_matching(
                Duration::ZERO,
                |ev| matches!(ev, AsyncEvent::QpFatal { qp, .. } if *qp == id),
            );
            return Err(match fatal {
                Some(AsyncEvent::QpFatal { cause, remote, .. }) => RpingError::Terminated {
                    opcode: c.opcode,
                    status: c.status,
                    cause,
                    remote,
                },
                _ => RpingError::Failed {
                    opcode: c.opcode,
                    status: c.status,
                },
            });
        }
        if c.opcode == op {
            return Ok(*c);
        }
    }
}

/// Runs the client side against an rping server; returns the iterations done.
pub fn client(addr: SocketAddr, opts: &RpingOpts) -> Result<u64> {
    let dev = open_device(opts)?;
    let e = open(&dev, opts)?;
    let start =
        e.pd.alloc_mr(opts.size, Access::LOCAL_WRITE | Access::REMOTE_READ)?;
    let sink =
        e.pd.alloc_mr(opts.size, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let adv = e.pd.alloc_mr(16, Access::LOCAL_WRITE)?;
    let rx = e.pd.alloc_mr(16, Access::LOCAL_WRITE)?;
    repost(&e, &rx)?;
    let mut cfg = opts.mpa.clone();
    cfg.private_data.clear();
    dev.connect_with(addr, &e.qp, cfg)?;
    let mut i = 0;
    while opts.count == 0 || i < opts.count {
        let data = ping_data(i, opts.size);
        start.write(0, &data)?;
        sink.fill(0, opts.size, 0)?;
        adv.write(0, &Advert::of(&start, opts.size).to_bytes())?;
        send_advert(&e, &adv, opts, 10)?;
        // The server has read our buffer when it answers.
        match wait(&e, opts, WcOpcode::Recv) {
            Err(RpingError::Timeout(_)) if i == 0 => return Err(RpingError::NoFirstAnswer),
            other => other?,
        };
        repost(&e, &rx)?;
        adv.write(0, &Advert::of(&sink, opts.size).to_bytes())?;
        send_advert(&e, &adv, opts, 11)?;
        // The server has written our sink when it answers again.
        wait(&e, opts, WcOpcode::Recv)?;
        repost(&e, &rx)?;
        let got = sink.to_vec();
        if opts.verify
            && let Some(offset) = got.iter().zip(&data).position(|(g, d)| g != d)
        {
            return Err(RpingError::Mismatch {
                iteration: i,
                offset,
                sent: data[offset],
                got: got[offset],
            });
        }
        if opts.verbose {
            let end = got.iter().position(|&b| b == 0).unwrap_or(got.len());
            println!("ping data: {}", String::from_utf8_lossy(&got[..end]));
        }
        i += 1;
    }
    e.qp.disconnect()?;
    let _ = dev.wait_event_matching(opts.timeout, |ev| {
        matches!(ev, AsyncEvent::Disconnected { .. })
    });
    Ok(i)
}

/// Sends the 16-octet advert held in `adv` and waits until the Send completed.
fn send_advert(e: &Ends, adv: &Mr, opts: &RpingOpts, wr_id: u64) -> Result<()> {
    e.qp.post_send(SendWr::send(wr_id, adv.sge(0, 16)))?;
    wait(e, opts, WcOpcode::Send)?;
    Ok(())
}

/// Posts the one receive an rping side keeps for the peer's next advert.
fn repost(e: &Ends, rx: &Mr) -> Result<()> {
    let wr = RecvWr::new(1, rx.sge(0, 16));
    match &e.srq {
        Some(srq) => srq.post_recv(wr)?,
        None => e.qp.post_recv(wr)?,
    }
    Ok(())
}

/// Reads the advert a receive completion brought and re-posts the receive.
fn take_advert(e: &Ends, rx: &Mr, c: Completion) -> Result<Advert> {
    if c.byte_len != 16 {
        return Err(RpingError::ShortAdvert(c.byte_len));
    }
    let mut b = [0u8; 16];
    rx.read(0, &mut b)?;
    repost(e, rx)?;
    Ok(Advert::parse(&b).expect("16 octets"))
}

/// Serves rping clients on `listen`: one, or one after another with
/// [`RpingOpts::persistent`] (a failed client is then reported and the next one
/// served). Returns the iterations done.
pub fn server(listen: SocketAddr, opts: &RpingOpts, ready: impl FnOnce(SocketAddr)) -> Result<u64> {
    let dev = open_device(opts)?;
    let l = dev.listen(listen)?;
    ready(l.local_addr()?);
    let mut total = 0;
    loop {
        match serve_one(&dev, &l, opts) {
            Ok(n) => total += n,
            Err(e) if opts.persistent => eprintln!("rping: client failed: {e}"),
            Err(e) => return Err(e),
        }
        if !opts.persistent {
            return Ok(total);
        }
    }
}

/// Accepts the next client on `l` and serves it until it disconnects or `-C`
/// iterations are done; returns the iterations done.
pub fn serve_one(dev: &Device, l: &Listener, opts: &RpingOpts) -> Result<u64> {
    let e = open(dev, opts)?;
    let buf = e.pd.alloc_mr(opts.size.max(16), Access::LOCAL_WRITE)?;
    let adv = e.pd.alloc_mr(16, Access::LOCAL_WRITE)?;
    let rx = e.pd.alloc_mr(16, Access::LOCAL_WRITE)?;
    repost(&e, &rx)?;
    let req = l.accept()?;
    let mut cfg = opts.mpa.clone();
    cfg.private_data.clear();
    cfg.markers |= req.request().markers;
    req.accept_with(&e.qp, cfg)?;
    adv.write(0, &Advert::of(&buf, opts.size).to_bytes())?;
    let mut i = 0;
    loop {
        // The client's source buffer, or the end. After a fault we injected, how the
        // connection ended is the outcome being checked: a flush with no Terminate is
        // reported, not taken for a client that left.
        let first = match wait(&e, opts, WcOpcode::Recv) {
            Ok(c) => c,
            Err(RpingError::Failed { .. } | RpingError::Timeout(_))
                if (i > 0 || opts.count > 0) && opts.inject.is_none() =>
            {
                break;
            }
            Err(err) => return Err(err),
        };
        let src = take_advert(&e, &rx, first)?;
        let len = src.size as usize;
        if len > buf.len() {
            return Err(RpingError::AdvertTooLarge {
                theirs: src.size,
                ours: buf.len(),
            });
        }
        let (remote_addr, rkey) = opts.inject.map_or((src.addr, src.rkey), |f| f.read(&src));
        e.qp.post_send(SendWr::read(20, buf.sge(0, len), remote_addr, rkey))?;
        wait(&e, opts, WcOpcode::Read)?;
        if opts.verbose {
            let got = buf.to_vec();
            let end = got[..len].iter().position(|&b| b == 0).unwrap_or(len);
            println!("server ping data: {}", String::from_utf8_lossy(&got[..end]));
        }
        send_advert(&e, &adv, opts, 21)?;
        let c = wait(&e, opts, WcOpcode::Recv)?;
        let dst = take_advert(&e, &rx, c)?;
        let len = (dst.size as usize).min(len);
        let (remote_addr, rkey) = opts.inject.map_or((dst.addr, dst.rkey), |f| f.write(&dst));
        e.qp.post_send(SendWr::write(22, buf.sge(0, len), remote_addr, rkey))?;
        // A Write completes locally once sent; the Send behind it tells whether the
        // peer took it (a Terminate would flush the Send).
        wait(&e, opts, WcOpcode::Write)?;
        send_advert(&e, &adv, opts, 23)?;
        i += 1;
        if opts.count != 0 && i >= opts.count {
            break;
        }
    }
    let _ = dev.wait_event_matching(
        opts.timeout,
        |ev| matches!(ev, AsyncEvent::Disconnected { qp } if *qp == e.qp.id()),
    );
    Ok(i)
}
