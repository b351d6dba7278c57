//! `softrnic rping`: the exchange of rdma-core's `rping`, compatible with it in both
//! roles, so softrnic can be checked against Linux siw with the tool RDMA users run
//! first.
//!
//! Each iteration: the client advertises its source buffer with a Send (address, rkey,
//! size: 16 octets, network order); the server RDMA-Reads it, answers with a Send; the
//! client advertises its sink buffer; the server RDMA-Writes what it read into it and
//! Sends again. With verify, the client checks that the sink holds the source's bytes.

use softrnic_rnic::*;
use std::net::SocketAddr;
use std::time::Duration;

/// rping options (the meaning of rping's flags).
#[derive(Debug, Clone)]
pub struct RpingOpts {
    /// `-C`: iterations (0: forever).
    pub count: u64,
    /// `-S`: buffer size (at least 16, the advert's own size... rping's minimum).
    pub size: usize,
    /// `-v`: print each ping's data.
    pub verbose: bool,
    /// `-V`: verify the data the server wrote back.
    pub verify: bool,
    /// Wait limit for each step.
    pub timeout: Duration,
    /// MPA settings (CRC policy etc.).
    pub mpa: MpaConfig,
}

impl Default for RpingOpts {
    fn default() -> Self {
        let mpa = MpaConfig {
            ird: 1,
            ord: 1,
            ..MpaConfig::default()
        };
        RpingOpts {
            count: 10,
            size: 64,
            verbose: false,
            verify: false,
            timeout: Duration::from_secs(10),
            mpa,
        }
    }
}

/// The 16-octet buffer advert rping sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Advert {
    /// Buffer address (tagged offset).
    pub addr: u64,
    /// Its rkey.
    pub rkey: u32,
    /// Its size.
    pub size: u32,
}

impl Advert {
    /// Wire form.
    pub fn to_bytes(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.addr.to_be_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        b[12..].copy_from_slice(&self.size.to_be_bytes());
        b
    }

    /// From wire form.
    pub fn parse(b: &[u8]) -> Option<Advert> {
        Some(Advert {
            addr: u64::from_be_bytes(b.get(..8)?.try_into().ok()?),
            rkey: u32::from_be_bytes(b.get(8..12)?.try_into().ok()?),
            size: u32::from_be_bytes(b.get(12..16)?.try_into().ok()?),
        })
    }
}

/// rping's ping data: "rdma-ping-N: " then printable characters.
pub fn ping_data(iter: u64, size: usize) -> Vec<u8> {
    let mut v = format!("rdma-ping-{iter}: ").into_bytes();
    let mut c = 65 + (iter % 62) as u8;
    while v.len() < size {
        v.push(c);
        c = if c >= 122 { 65 } else { c + 1 };
    }
    v.truncate(size);
    if let Some(last) = v.last_mut() {
        *last = 0;
    }
    v
}

struct Ends {
    dev: Device,
    cq: Cq,
    qp: Qp,
    pd: Pd,
}

fn open(opts: &RpingOpts) -> Result<Ends> {
    let cfg = DeviceConfig {
        mpa: opts.mpa.clone(),
        ..DeviceConfig::default()
    };
    let dev = Device::open(cfg)?;
    let pd = dev.alloc_pd();
    let cq = dev.create_cq(16)?;
    let qp = dev.create_qp(
        &pd,
        QpInit {
            send_cq: &cq,
            recv_cq: &cq,
            sq_depth: 16,
            rq_depth: 16,
        },
    )?;
    Ok(Ends { dev, cq, qp, pd })
}

fn wait(e: &Ends, opts: &RpingOpts, op: WcOpcode) -> Result<Completion> {
    let deadline = std::time::Instant::now() + opts.timeout;
    loop {
        let now = std::time::Instant::now();
        let wc = e.cq.wait_for(1, deadline.saturating_duration_since(now));
        let Some(c) = wc.first() else {
            return Err(Error::Timeout);
        };
        if c.status != WcStatus::Success {
            return Err(Error::BadState(match c.status {
                WcStatus::WrFlushError => "work request flushed (connection closed or in error)",
                WcStatus::RemoteAccessError => "remote access error",
                _ => "work request failed",
            }));
        }
        if c.opcode == op {
            return Ok(*c);
        }
    }
}

fn signaled(wr_id: u64, op: SendOp, sgl: Vec<Sge>) -> SendWr {
    SendWr {
        wr_id,
        op,
        sgl,
        signaled: true,
        fence: false,
    }
}

/// Runs the client side against an rping server; returns the iterations done.
pub fn client(addr: SocketAddr, opts: &RpingOpts) -> Result<u64> {
    let e = open(opts)?;
    let start =
        e.pd.alloc_mr(opts.size, Access::LOCAL_WRITE | Access::REMOTE_READ)?;
    let sink =
        e.pd.alloc_mr(opts.size, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let adv = e.pd.alloc_mr(16, Access::LOCAL_WRITE)?;
    let rx = e.pd.alloc_mr(16, Access::LOCAL_WRITE)?;
    e.qp.post_recv(RecvWr {
        wr_id: 1,
        sgl: vec![rx.sge(0, 16)],
    })?;
    let mut cfg = opts.mpa.clone();
    cfg.private_data.clear();
    e.dev.connect_with(addr, &e.qp, cfg)?;
    let mut i = 0;
    while opts.count == 0 || i < opts.count {
        let data = ping_data(i, opts.size);
        start.write(0, &data)?;
        sink.fill(0, opts.size, 0)?;
        adv.write(
            0,
            &Advert {
                addr: start.addr(),
                rkey: start.rkey(),
                size: opts.size as u32,
            }
            .to_bytes(),
        )?;
        e.qp.post_send(signaled(
            10,
            SendOp::Send {
                solicited: false,
                invalidate: None,
            },
            vec![adv.sge(0, 16)],
        ))?;
        wait(&e, opts, WcOpcode::Send)?;
        // The server has read our buffer when it answers.
        wait(&e, opts, WcOpcode::Recv)?;
        e.qp.post_recv(RecvWr {
            wr_id: 1,
            sgl: vec![rx.sge(0, 16)],
        })?;
        adv.write(
            0,
            &Advert {
                addr: sink.addr(),
                rkey: sink.rkey(),
                size: opts.size as u32,
            }
            .to_bytes(),
        )?;
        e.qp.post_send(signaled(
            11,
            SendOp::Send {
                solicited: false,
                invalidate: None,
            },
            vec![adv.sge(0, 16)],
        ))?;
        wait(&e, opts, WcOpcode::Send)?;
        // The server has written our sink when it answers again.
        wait(&e, opts, WcOpcode::Recv)?;
        e.qp.post_recv(RecvWr {
            wr_id: 1,
            sgl: vec![rx.sge(0, 16)],
        })?;
        let got = sink.to_vec();
        if opts.verify && got != data {
            return Err(Error::BadState("rping data mismatch"));
        }
        if opts.verbose {
            let end = got.iter().position(|&b| b == 0).unwrap_or(got.len());
            println!("ping data: {}", String::from_utf8_lossy(&got[..end]));
        }
        i += 1;
    }
    e.qp.disconnect()?;
    let _ = e.dev.wait_event_matching(opts.timeout, |ev| {
        matches!(ev, AsyncEvent::Disconnected { .. })
    });
    Ok(i)
}

/// Serves one rping client on `listen`; returns the iterations done.
pub fn server(listen: SocketAddr, opts: &RpingOpts, ready: impl FnOnce(SocketAddr)) -> Result<u64> {
    let e = open(opts)?;
    let buf = e.pd.alloc_mr(opts.size.max(16), Access::LOCAL_WRITE)?;
    let adv = e.pd.alloc_mr(16, Access::LOCAL_WRITE)?;
    let rx = e.pd.alloc_mr(16, Access::LOCAL_WRITE)?;
    e.qp.post_recv(RecvWr {
        wr_id: 1,
        sgl: vec![rx.sge(0, 16)],
    })?;
    let l = e.dev.listen(listen)?;
    ready(l.local_addr()?);
    let req = l.accept()?;
    let mut cfg = opts.mpa.clone();
    cfg.private_data.clear();
    req.accept_with(&e.qp, cfg)?;
    adv.write(
        0,
        &Advert {
            addr: buf.addr(),
            rkey: buf.rkey(),
            size: opts.size as u32,
        }
        .to_bytes(),
    )?;
    let mut i = 0;
    loop {
        // The client's source buffer, or the end.
        match wait(&e, opts, WcOpcode::Recv) {
            Ok(_) => {}
            Err(_) if i > 0 || opts.count > 0 => break,
            Err(err) => return Err(err),
        }
        let mut b = [0u8; 16];
        rx.read(0, &mut b)?;
        let src = Advert::parse(&b).ok_or(Error::BadState("short advert"))?;
        e.qp.post_recv(RecvWr {
            wr_id: 1,
            sgl: vec![rx.sge(0, 16)],
        })?;
        let len = (src.size as usize).min(buf.len());
        e.qp.post_send(signaled(
            20,
            SendOp::Read {
                remote_addr: src.addr,
                rkey: src.rkey,
            },
            vec![buf.sge(0, len)],
        ))?;
        wait(&e, opts, WcOpcode::Read)?;
        if opts.verbose {
            let got = buf.to_vec();
            let end = got[..len].iter().position(|&b| b == 0).unwrap_or(len);
            println!("server ping data: {}", String::from_utf8_lossy(&got[..end]));
        }
        e.qp.post_send(signaled(
            21,
            SendOp::Send {
                solicited: false,
                invalidate: None,
            },
            vec![adv.sge(0, 16)],
        ))?;
        wait(&e, opts, WcOpcode::Send)?;
        wait(&e, opts, WcOpcode::Recv)?;
        rx.read(0, &mut b)?;
        let dst = Advert::parse(&b).ok_or(Error::BadState("short advert"))?;
        e.qp.post_recv(RecvWr {
            wr_id: 1,
            sgl: vec![rx.sge(0, 16)],
        })?;
        let len = (dst.size as usize).min(len);
        e.qp.post_send(signaled(
            22,
            SendOp::Write {
                remote_addr: dst.addr,
                rkey: dst.rkey,
            },
            vec![buf.sge(0, len)],
        ))?;
        wait(&e, opts, WcOpcode::Write)?;
        e.qp.post_send(signaled(
            23,
            SendOp::Send {
                solicited: false,
                invalidate: None,
            },
            vec![adv.sge(0, 16)],
        ))?;
        wait(&e, opts, WcOpcode::Send)?;
        i += 1;
        if opts.count != 0 && i >= opts.count {
            break;
        }
    }
    let _ = e.dev.wait_event_matching(opts.timeout, |ev| {
        matches!(ev, AsyncEvent::Disconnected { .. })
    });
    Ok(i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advert_round_trip() {
        let a = Advert {
            addr: 0x5629_408c_7700,
            rkey: 0x8d6b_a600,
            size: 100,
        };
        assert_eq!(Advert::parse(&a.to_bytes()), Some(a));
        assert_eq!(Advert::parse(&[0; 15]), None);
    }

    #[test]
    fn softrnic_client_and_server_verify() {
        let opts = RpingOpts {
            count: 5,
            size: 100,
            verify: true,
            ..RpingOpts::default()
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let o = opts.clone();
        let s = std::thread::spawn(move || {
            server("127.0.0.1:0".parse().unwrap(), &o, |a| tx.send(a).unwrap())
        });
        let addr = rx.recv().unwrap();
        assert_eq!(client(addr, &opts).unwrap(), 5);
        assert_eq!(s.join().unwrap().unwrap(), 5);
    }
}
