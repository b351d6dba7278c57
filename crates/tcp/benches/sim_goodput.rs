//! Goodput of one connection over the simulated wire: a clean 1 Gbit/s link with a
//! 1 ms round trip, then the same link with loss and reordering, each reported as a
//! ratio to the clean run of the same invocation. Virtual goodput (octets per
//! simulated second) measures the protocol's recovery; real-time throughput (octets
//! per second of this machine) measures the implementation's speed.
//!
//! `cargo bench -p softrnic-tcp --bench sim_goodput` (`-- MB` sets the volume).

use softrnic_tcp::sim::{End, Impairments, Wire};
use softrnic_tcp::{Config, Connection, Reassembly, SeqNum, Stats};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

struct Outcome {
    virtual_time: Duration,
    real_time: Duration,
    stats: Stats,
}

fn run(imp: Impairments, seed: u64, total: usize) -> Outcome {
    let cfg = Config {
        send_buffer: 4 << 20,
        recv_buffer: 4 << 20,
        ..Config::default()
    };
    let a_addr = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 1000);
    let b_addr = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 2000);
    let mut a = Connection::connect(cfg.clone(), a_addr, b_addr, SeqNum(1));
    let mut b = Connection::listen(cfg, b_addr, SeqNum(2));
    let mut rb = Reassembly::for_connection(&b);
    let mut wire = Wire::new(imp, seed);
    let data: Vec<u8> = (0..1 << 16).map(|i| (i * 7 + 3) as u8).collect();
    let (mut queued, mut got) = (0usize, 0usize);
    let mut now = Duration::ZERO;
    let mut packet = vec![0u8; 1500];
    let mut read = vec![0u8; 1 << 16];
    let started = Instant::now();
    while got < total {
        while queued < total {
            let n = (total - queued).min(data.len());
            match a.send(&data[..n]) {
                Ok(k) => queued += k,
                Err(_) => break,
            }
        }
        while let Some(n) = a.poll_transmit(now, &mut packet) {
            wire.send(End::A, now, &packet[..n]);
        }
        while let Some(n) = b.poll_transmit(now, &mut packet) {
            wire.send(End::B, now, &packet[..n]);
        }
        let next = [wire.next_arrival(), a.poll_timeout(), b.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
            .expect("something is due");
        now = now.max(next);
        while let Some((end, p)) = wire.poll_arrival(now) {
            let _ = match end {
                End::A => a.handle_packet(now, p, &mut softrnic_tcp::Refuse),
                End::B => b.handle_packet(now, p, &mut rb),
            };
            // Each packet on its own: what it makes due goes out at once.
            if end == End::B {
                got += rb.read_from(&mut b, &mut read);
                while let Some(n) = b.poll_transmit(now, &mut packet) {
                    wire.send(End::B, now, &packet[..n]);
                }
            } else {
                while let Some(n) = a.poll_transmit(now, &mut packet) {
                    wire.send(End::A, now, &packet[..n]);
                }
            }
        }
        for c in [&mut a, &mut b] {
            if c.poll_timeout().is_some_and(|t| t <= now) {
                c.handle_timeout(now);
            }
        }
        got += rb.read_from(&mut b, &mut read);
    }
    Outcome {
        virtual_time: now,
        real_time: started.elapsed(),
        stats: a.stats().clone(),
    }
}

fn main() {
    let mb: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(50);
    let total = mb * 1_000_000;
    let link = Impairments {
        delay: Duration::from_micros(500),
        rate: Some(125_000_000),
        queue_limit: 1000,
        ..Impairments::default()
    };
    let cases = [
        ("clean", link.clone()),
        (
            "1% loss",
            Impairments {
                loss: 0.01,
                ..link.clone()
            },
        ),
        (
            "5% reorder",
            Impairments {
                reorder: 0.05,
                reorder_delay: Duration::from_micros(100),
                ..link.clone()
            },
        ),
        (
            "1% loss + 5% reorder",
            Impairments {
                loss: 0.01,
                reorder: 0.05,
                reorder_delay: Duration::from_micros(100),
                ..link.clone()
            },
        ),
    ];
    println!("{mb} MB over 1 Gbit/s, 1 ms RTT, 1000-packet queue (simulated)");
    println!(
        "{:<22} {:>11} {:>7} {:>11} {:>7} {:>6} {:>6} {:>6}",
        "case", "virt MB/s", "ratio", "real MB/s", "ratio", "rtx", "fast", "rto"
    );
    let mut base = None;
    for (name, imp) in cases {
        let o = run(imp, 1, total);
        let virt = total as f64 / o.virtual_time.as_secs_f64() / 1e6;
        let real = total as f64 / o.real_time.as_secs_f64() / 1e6;
        let (bv, br) = *base.get_or_insert((virt, real));
        println!(
            "{name:<22} {virt:>11.1} {:>7.2} {real:>11.1} {:>7.2} {:>6} {:>6} {:>6}",
            virt / bv,
            real / br,
            o.stats.retransmitted_segments,
            o.stats.fast_retransmits,
            o.stats.timeouts
        );
    }
}
