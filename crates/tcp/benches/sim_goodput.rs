//! Goodput of one connection over the simulated wire, clean and with 1% loss, 5%
//! reordering and both, each reported as a ratio to the clean run of the same profile
//! in the same invocation. Four profiles:
//!
//! - `link`: a 1 Gbit/s link with a 1 ms round trip and a 1000-packet queue, 1500-octet
//!   packets, 4 MiB buffers, default timers, in virtual time (deterministic): goodput
//!   is octets per simulated second, so it measures the protocol's recovery on a link
//!   that bounds the clean run.
//! - `cpu`: no rate limit and a 50 us round trip, 64 KiB packets and 1 MiB buffers (as
//!   softrnic's in-process network), `Config::fast_link()` timers, in real time: both
//!   ends and the wire run in this thread on this machine's clock, waits included (a
//!   timer that fires after 5 ms costs 5 ms), so the CPU bounds the clean run, and
//!   what costs goodput is timeouts, waiting, and spurious work.
//!   Ten times the volume (64 KiB segments are few).
//! - `cpu-default-timers`: as `cpu`, with the default timers (Linux's), for comparison.
//! - `cpu1500`: as `cpu`, with 1500-octet packets and 4 MiB buffers.
//!
//! The real-time profiles run five rounds of the four cases, each round with its own
//! seed, each case's ratio to the clean run of its round; the round with the median
//! ratio is shown (this machine is shared: the clean runs themselves vary).
//!
//! In both, a reordered packet is held back by half the round trip. Columns:
//! retransmitted segments, recoveries entered (fast retransmits), retransmission
//! timeouts, loss probes (TLP), and spurious retransmissions: data segments in which
//! the receiver found nothing it had not kept already (the wire duplicates nothing
//! here, so each is a retransmission of a segment that had arrived), counted from the
//! receiver's counters by this bench, independently of the sender's own D-SACK
//! accounting. Refused: octets the receiver refused (they would have opened more
//! out-of-order ranges than it keeps, `max_ooo_ranges`), which must come again.
//!
//! `cargo bench -p softrnic-tcp --bench sim_goodput` (`-- MB` sets the volume,
//! `-- link`, `-- cpu`, `-- cpu-default-timers` or `-- cpu1500` one profile).

use softrnic_tcp::sim::{End, Impairments, Wire};
use softrnic_tcp::{Config, Connection, Reassembly, Segment, SeqNum, Stats};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

struct Outcome {
    /// Goodput, octets per (virtual or real) second.
    goodput: f64,
    stats: Stats,
    /// Data segments that arrived at the receiver carrying nothing it lacked.
    spurious: u64,
    /// The receiver's counters.
    rx: Stats,
}

/// Which clock the connections and the wire run on.
#[derive(Clone, Copy, PartialEq)]
enum Clock {
    /// Jump to the next event: deterministic, free waits.
    Virtual,
    /// This machine's clock: waits are spent (spinning, to keep microsecond delays).
    Real,
}

/// Whether `packet`, just handled by `b`, carried payload of which the receiver found
/// nothing new (it kept nothing and refused nothing): a duplicate.
fn duplicate(packet: &[u8], b: &Connection, before: &Stats) -> bool {
    let s = b.stats();
    Segment::parse(packet).is_ok_and(|seg| !seg.payload.is_empty())
        && s.bytes_in == before.bytes_in
        && s.bytes_refused == before.bytes_refused
}

/// Reads everything readable (the buffer may be smaller than what is ready).
fn read_all(rb: &mut Reassembly, b: &mut Connection, buf: &mut [u8]) -> usize {
    let mut got = 0;
    loop {
        match rb.read_from(b, buf) {
            0 => return got,
            n => got += n,
        }
    }
}

fn run(imp: Impairments, cfg: &Config, clock: Clock, seed: u64, total: usize) -> Outcome {
    let a_addr = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 1000);
    let b_addr = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 2000);
    let iss = SeqNum(1);
    let mut a = Connection::connect(cfg.clone(), a_addr, b_addr, iss);
    let mut b = Connection::listen(cfg.clone(), b_addr, SeqNum(2));
    let mut rb = Reassembly::for_connection(&b);
    let mut wire = Wire::new(imp, seed);
    let mut spurious = 0;
    let data: Vec<u8> = (0..1 << 16).map(|i| (i * 7 + 3) as u8).collect();
    let (mut queued, mut got) = (0usize, 0usize);
    let started = Instant::now();
    let real_now = || started.elapsed();
    let mut now = Duration::ZERO;
    let mut packet = vec![0u8; wire.impairments().mtu];
    let mut read = vec![0u8; 1 << 16];
    while got < total {
        while queued < total {
            let n = (total - queued).min(data.len());
            match a.send(&data[..n]) {
                Ok(k) => queued += k,
                Err(_) => break,
            }
        }
        if clock == Clock::Real {
            now = real_now();
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
        match clock {
            Clock::Virtual => now = now.max(next),
            Clock::Real => {
                while real_now() < next {
                    std::hint::spin_loop();
                }
                now = real_now();
            }
        }
        while let Some((end, p)) = wire.poll_arrival(now) {
            let _ = match end {
                End::A => a.handle_packet(now, p, &mut softrnic_tcp::Refuse),
                End::B => {
                    let before = b.stats().clone();
                    let r = b.handle_packet(now, p, &mut rb);
                    spurious += u64::from(duplicate(p, &b, &before));
                    r
                }
            };
            // Each packet on its own: what it makes due goes out at once.
            if end == End::B {
                got += read_all(&mut rb, &mut b, &mut read);
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
        got += read_all(&mut rb, &mut b, &mut read);
    }
    let elapsed = match clock {
        Clock::Virtual => now,
        Clock::Real => real_now(),
    };
    Outcome {
        goodput: total as f64 / elapsed.as_secs_f64(),
        stats: a.stats().clone(),
        spurious,
        rx: b.stats().clone(),
    }
}

struct Profile {
    name: &'static str,
    /// The volume moved, in multiples of the volume asked for.
    scale: usize,
    title: &'static str,
    link: Impairments,
    clock: Clock,
    cfg: Config,
    runs: usize,
}

fn profiles() -> [Profile; 4] {
    let big = Config {
        send_buffer: 4 << 20,
        recv_buffer: 4 << 20,
        ..Config::default()
    };
    // What softrnic's in-process transport uses: the largest IPv4 packet, 1 MiB
    // buffers, the timers for a fast link (a floor of 5 ms under the retransmission
    // timeout, ACKs delayed 1 ms at most).
    let in_process = Config {
        mss: u16::MAX - 40,
        send_buffer: 1 << 20,
        recv_buffer: 1 << 20,
        ..Config::fast_link()
    };
    let fast = Impairments {
        delay: Duration::from_micros(25),
        reorder_delay: Duration::from_micros(25),
        ..Impairments::default()
    };
    [
        Profile {
            name: "link",
            scale: 1,
            title: "1 Gbit/s, 1 ms RTT, 1000-packet queue, MTU 1500, 4 MiB buffers, \
                    virtual time",
            link: Impairments {
                delay: Duration::from_micros(500),
                rate: Some(125_000_000),
                queue_limit: 1000,
                reorder_delay: Duration::from_micros(500),
                ..Impairments::default()
            },
            clock: Clock::Virtual,
            cfg: big.clone(),
            runs: 1,
        },
        Profile {
            name: "cpu",
            scale: 10,
            title: "no rate limit, 50 us RTT, MTU 65535, 1 MiB buffers, fast_link timers, \
                    real time",
            link: Impairments {
                mtu: 65535,
                ..fast.clone()
            },
            clock: Clock::Real,
            cfg: in_process,
            runs: 5,
        },
        Profile {
            name: "cpu-default-timers",
            scale: 10,
            title: "as cpu, with the default timers (rto_min 200 ms, delayed ACKs 40 ms)",
            link: Impairments {
                mtu: 65535,
                ..fast.clone()
            },
            clock: Clock::Real,
            cfg: Config {
                mss: u16::MAX - 40,
                send_buffer: 1 << 20,
                recv_buffer: 1 << 20,
                ..Config::default()
            },
            runs: 5,
        },
        Profile {
            name: "cpu1500",
            scale: 1,
            title: "no rate limit, 50 us RTT, MTU 1500, 4 MiB buffers, fast_link timers, \
                    real time",
            link: fast,
            clock: Clock::Real,
            cfg: Config {
                send_buffer: 4 << 20,
                recv_buffer: 4 << 20,
                ..Config::fast_link()
            },
            runs: 5,
        },
    ]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mb: usize = args.iter().find_map(|a| a.parse().ok()).unwrap_or(50);
    let only = args
        .iter()
        .find(|a| !a.starts_with("--") && a.parse::<usize>().is_err());
    for p in profiles() {
        if only.is_some_and(|o| o != p.name) {
            continue;
        }
        let total = p.scale * mb * 1_000_000;
        let cases = [
            ("clean", 0.0, 0.0),
            ("1% loss", 0.01, 0.0),
            ("5% reorder", 0.0, 0.05),
            ("1% loss + 5% reorder", 0.01, 0.05),
        ];
        println!("{} ({} MB): {}", p.name, total / 1_000_000, p.title);
        println!(
            "{:<22} {:>9} {:>6} {:>6} {:>6} {:>6} {:>6} {:>9} {:>9}",
            "case", "MB/s", "ratio", "rtx", "fast", "rto", "tlp", "spurious", "refused"
        );
        // Round by round, every case once (with the round's seed), so that what else
        // this machine does weighs on all cases alike; each case's ratio is to the
        // clean run of its round, and the median round is shown.
        let mut outs: Vec<Vec<(f64, Outcome)>> = (0..cases.len()).map(|_| Vec::new()).collect();
        for round in 0..p.runs {
            let mut base = None;
            for (i, (_, loss, reorder)) in cases.iter().enumerate() {
                let imp = Impairments {
                    loss: *loss,
                    reorder: *reorder,
                    ..p.link.clone()
                };
                let o = run(imp, &p.cfg, p.clock, 1 + round as u64, total);
                let b = *base.get_or_insert(o.goodput);
                outs[i].push((o.goodput / b, o));
            }
        }
        for ((name, _, _), mut rounds) in cases.iter().zip(outs) {
            rounds.sort_by(|x, y| x.0.total_cmp(&y.0));
            let (ratio, o) = &rounds[rounds.len() / 2];
            let s = &o.stats;
            println!(
                "{name:<22} {:>9.1} {ratio:>6.2} {:>6} {:>6} {:>6} {:>6} {:>9} {:>9}",
                o.goodput / 1e6,
                s.retransmitted_segments,
                s.fast_retransmits,
                s.timeouts,
                s.loss_probes,
                o.spurious,
                o.rx.bytes_refused
            );
        }
        println!();
    }
}
