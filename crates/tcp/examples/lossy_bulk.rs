//! A bulk transfer between two connections over the simulated wire in virtual time,
//! shaped like softrnic's in-process network (`--transport user:sim`): 64 KiB
//! segments, 8 MiB buffers, `Config::fast_link()` timers, ACKs not delayed, a
//! reordered packet held back 200 us. The wire's rate limit stands for the CPU that
//! bounds the real network (about 6.5 GB/s each way), so goodput is octets per
//! simulated second and every run replays from its seed.
//!
//! For each seed it runs the clean case and the impaired one (1% loss and 5%
//! reordering by default, both ways) and prints the ratio of their goodput and what
//! the sender counted. With `--trace`, every retransmission timeout prints the
//! sender's recovery state at that instant ([`Connection::recovery_snapshot`]), and
//! so does every wait of more than 1 ms with nothing on the wire.
//!
//! With `--timer-us G`, a timer wakes its end only at the granularity `G` of a sleep
//! (whole multiples, at least one; mio's epoll sleeps whole milliseconds), as when the
//! end's thread sleeps for it; packets still wake an end at once.
//!
//! With `--stall-every-us E --stall-us S`, the sender's thread is off the CPU for S
//! about every E (as threads are on a busy machine): what arrives meanwhile waits,
//! and when it runs again it takes that first, then its timers, then sends. With
//! `--stall-rx`, the receiver's thread stalls instead (the shape the CLI's clean runs
//! showed): the sender's data waits for it, and when it runs again it takes all of
//! it and answers with one ACK, as softrnic's stack thread does (its pump takes every
//! packet, then sends). With `--stall-reader`, only the receiver's reader stalls: its
//! TCP takes packets and answers them meanwhile, as on softrnic's in-process network,
//! where the sender's thread hands each packet to the receiving stack (the QP's
//! thread, descheduled, reads nothing). `--rto-min-us F` sets the floor under the retransmission
//! timeout (default: the in-process network's, `RTO_MIN` below). `--reorder-us D`
//! holds a reordered packet back D (default 200); `--delay-us T` is the one-way delay
//! (default 5); `--buffer-kib K` the send and receive buffers (default 8192, as
//! `--transport user:sim`). `--rx-cpu`: the receiver copies what
//! it reads at the sender's rate, giving the window back slice by slice, as the QP's
//! copy into region memory does. `--batch B`: the sender queues 65000-octet records
//! B at a time, a batch only once all of it fits (as the user transport queued a
//! QP's gather list of B FPDUs before this was changed; 1 is FPDU by FPDU). The
//! last three columns are the milliseconds the sender waited for the congestion
//! window, the peer's window and room in its send buffer.
//!
//! `cargo run --release -p softrnic-tcp --example lossy_bulk -- [--seeds N] [--mb M]
//! [--first SEED] [--loss P] [--reorder P] [--reorder-us D] [--delay-us T] [--queue]
//! [--timer-us G]
//! [--stall-every-us E --stall-us S [--stall-rx | --stall-reader]] [--rto-min-us F] [--rx-cpu]
//! [--batch B] [--records A,B] [--reply-every-kib K] [--trace]`
//!
//! `--reply-every-kib K`: the receiver sends a 24-octet record back (a Read Response
//! to a delivery probe) each time K KiB more have arrived; the sender reads them. The
//! summary then counts the replier's timeouts too: a lone message has no later
//! segment for RACK to find its loss by, only loss probes.
//!
//! `--records A,B`: the sender queues records of A and B octets in turn (a message's
//! FPDUs; `--records 65492,84` is a 64 KiB Write on the in-process network, whose
//! 16-bit MPA length leaves every such Write a small second FPDU in a segment of its
//! own, so the wire carries twice the packets, and twice the losses and reorderings,
//! per octet).

use softrnic_tcp::sim::{End, Impairments, Wire};
use softrnic_tcp::{Config, Connection, Reassembly, SeqNum, Stats};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

struct Outcome {
    goodput: f64,
    stats: Stats,
    rx: Stats,
}

/// The floor under the retransmission timeout on softrnic's in-process network
/// (`SIM_RTO_MIN` in softrnic-rnic's `transport/user/mod.rs`).
const RTO_MIN: Duration = Duration::from_millis(100);

fn config(rto_min: Duration, buffer: usize) -> Config {
    Config {
        mss: u16::MAX - 40,
        send_buffer: buffer,
        recv_buffer: buffer as u32,
        delayed_ack: None,
        checksum_offload: true,
        rto_min,
        ..Config::fast_link()
    }
}

/// Octets per second the sender's CPU writes (or the wire carries, with `queue`).
const RATE: u64 = 6_500_000_000;

fn link(
    loss: f64,
    reorder: f64,
    reorder_delay: Duration,
    delay: Duration,
    queue: bool,
) -> Impairments {
    Impairments {
        delay,
        loss,
        reorder,
        reorder_delay,
        rate: queue.then_some(RATE),
        mtu: 65535,
        queue_limit: 100_000,
        ..Impairments::default()
    }
}

fn read_all(rb: &mut Reassembly, b: &mut Connection, buf: &mut [u8]) -> usize {
    let mut got = 0;
    loop {
        match rb.read_from(b, buf) {
            0 => return got,
            n => got += n,
        }
    }
}

/// With `queue`, the wire's rate limit bounds goodput and packets queue in it (the
/// round trip grows to the window's worth of serialisation); without, the sender's CPU
/// does: it writes a packet in `len / RATE` and sends nothing meanwhile, while the wire
/// delivers at once (the round trip stays microseconds, as on the in-process network,
/// whose receiver takes each packet in the sender's thread).
/// How the ends' threads are scheduled.
#[derive(Clone, Copy)]
struct Threads {
    /// A timer wakes a sleeping end only at this granularity (zero: exactly).
    granularity: Duration,
    /// The sender's thread (the receiver's, with `stall_rx`) is off the CPU for
    /// `stall` about every `stall_every` (zero: never): it takes what arrived
    /// meanwhile, then its timers, then sends, as softrnic's stack thread does when it
    /// runs again.
    stall_every: Duration,
    stall: Duration,
    stall_rx: bool,
    /// With `stall_rx`: only the receiver's reader stalls (its TCP goes on taking
    /// packets and answering them, as on softrnic's in-process network, where the
    /// sender's thread hands each packet to the receiving stack itself).
    stall_reader: bool,
    rto_min: Duration,
    /// Send and receive buffers, octets.
    buffer: usize,
    /// The sender queues FPDU-sized records this many at a time, a batch only when
    /// all of it fits (0: a byte stream, as much as fits).
    batch: usize,
    /// The receiver's reader copies at the sender's rate, so reading takes time and
    /// the window reopens only as it reads (as the QP's copy into region memory does).
    rx_cpu: bool,
    /// The sender queues records of these two sizes in turn, each as room comes (a
    /// message's FPDUs: a 64 KiB Write on the in-process network is one FPDU of
    /// 65492 octets and one of 84, each alone in its segment).
    records: Option<(usize, usize)>,
    /// The receiver sends a small record back each time this many more octets have
    /// arrived (0: never).
    reply_every: usize,
}

/// A reply from the receiver: the size of an RDMA Read Response to a delivery probe.
const REPLY: [u8; 24] = [0x5a; 24];

/// The receiver's reader: with `rx_cpu` it copies at [`RATE`], one slice at a time,
/// and gives the window back when a slice is copied.
#[derive(Default)]
struct Reader {
    busy_until: Option<Duration>,
    unreleased: usize,
}

/// Octets of a record with `--batch` (an FPDU of softrnic's loopback size).
const FPDU: usize = 65_000;

/// Octets the reader copies in one go with `rx_cpu`.
const READ_SLICE: usize = 256 << 10;

impl Reader {
    /// Reads what it may at `now`; returns how many octets were delivered.
    fn run(
        &mut self,
        rx_cpu: bool,
        now: Duration,
        rb: &mut Reassembly,
        b: &mut Connection,
        buf: &mut [u8],
    ) -> usize {
        if !rx_cpu {
            return read_all(rb, b, buf);
        }
        if self.busy_until.is_some_and(|t| t > now) {
            return 0;
        }
        self.busy_until = None;
        b.release(std::mem::take(&mut self.unreleased));
        let slice = READ_SLICE.min(buf.len());
        let n = rb.read(&mut buf[..slice]);
        if n > 0 {
            self.unreleased = n;
            self.busy_until = Some(now + Duration::from_nanos(n as u64 * 1_000_000_000 / RATE));
        }
        n
    }
}

fn run(imp: Impairments, seed: u64, total: usize, trace: bool, threads: Threads) -> Outcome {
    let granularity = threads.granularity;
    let mut stalls = softrnic_tcp::sim::Rng::new(seed ^ 0x5eed);
    let gap = |r: &mut softrnic_tcp::sim::Rng| threads.stall_every.mul_f64(0.5 + r.unit());
    let mut next_stall = (!threads.stall_every.is_zero()).then(|| gap(&mut stalls));
    let mut a_stalled_until = Duration::ZERO;
    let mut b_stalled_until = Duration::ZERO;
    let mut reader_stalled_until = Duration::ZERO;
    let mut a_inbox: Vec<Vec<u8>> = Vec::new();
    let mut b_inbox: Vec<Vec<u8>> = Vec::new();
    let paced = imp.rate.is_none();
    let mut a_busy: Option<Duration> = None;
    let mut reader = Reader::default();
    let a_addr = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 1000);
    let b_addr = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 2000);
    let mut a = Connection::connect(
        config(threads.rto_min, threads.buffer),
        a_addr,
        b_addr,
        SeqNum(1),
    );
    let mut b = Connection::listen(config(threads.rto_min, threads.buffer), b_addr, SeqNum(2));
    let mut rb = Reassembly::for_connection(&b);
    let mut ra = Reassembly::for_connection(&a);
    let mut replies = vec![0u8; 4096];
    let mut next_reply = threads.reply_every;
    let mut wire = Wire::new(imp, seed);
    let data: Vec<u8> = (0..1 << 16).map(|i| (i * 7 + 3) as u8).collect();
    let (mut queued, mut got) = (0usize, 0usize);
    let mut now = Duration::ZERO;
    let mut packet = vec![0u8; 65535];
    let mut read = vec![0u8; 1 << 20];
    let mut small_next = false;
    while got < total {
        while threads.reply_every > 0 && got >= next_reply {
            if b.send_record(&REPLY).is_err() {
                break;
            }
            next_reply += threads.reply_every;
        }
        if let Some((r0, r1)) = threads.records {
            while queued < total {
                let size = if small_next { r1 } else { r0 };
                let n = size.min(total - queued).min(data.len());
                if a.send_record(&data[..n]).is_err() {
                    break;
                }
                small_next = !small_next;
                queued += n;
            }
        } else if threads.batch == 0 {
            while queued < total {
                let n = (total - queued).min(data.len());
                match a.send(&data[..n]) {
                    Ok(k) => queued += k,
                    Err(_) => break,
                }
            }
        } else {
            // FPDU-sized records, a batch at a time, each batch whole or not at all.
            let batch = (threads.batch * FPDU).min(total - queued);
            if a.send_capacity() >= batch {
                let mut left = batch;
                while left > 0 {
                    let n = left.min(FPDU);
                    if a.send_record(&data[..n]).is_err() {
                        break;
                    }
                    left -= n;
                    queued += n;
                }
            }
        }
        if let Some(at) = next_stall.filter(|&t| t <= now) {
            if threads.stall_rx && threads.stall_reader {
                reader_stalled_until = at + threads.stall;
            } else if threads.stall_rx {
                b_stalled_until = at + threads.stall;
            } else {
                a_stalled_until = at + threads.stall;
            }
            next_stall = Some(at + gap(&mut stalls));
        }
        let a_awake = now >= a_stalled_until;
        let b_awake = now >= b_stalled_until;
        if a_awake {
            send_a(&mut a, &mut wire, now, &mut packet, paced, &mut a_busy);
        }
        if b_awake && !b_inbox.is_empty() {
            // b's thread runs again: everything that waited, then one answer.
            for p in b_inbox.drain(..) {
                let _ = b.handle_packet(now, &p, &mut rb);
            }
            if now >= reader_stalled_until {
                got += reader.run(threads.rx_cpu, now, &mut rb, &mut b, &mut read);
            }
        }
        while let Some(n) = b_awake.then(|| b.poll_transmit(now, &mut packet)).flatten() {
            wire.send(End::B, now, &packet[..n]);
        }
        // A timer wakes a sleeping thread only at the granularity of its wait (mio's
        // epoll waits whole milliseconds, at least one); packets wake it at once.
        let a_timer = if a_awake {
            a.poll_timeout()
        } else {
            Some(a_stalled_until)
        };
        let b_timer = if b_awake {
            b.poll_timeout()
        } else {
            Some(b_stalled_until)
        };
        let timer =
            [a_timer, b_timer]
                .into_iter()
                .flatten()
                .min()
                .map(|t| match t.checked_sub(now) {
                    Some(d) if !granularity.is_zero() && !d.is_zero() => {
                        let whole = d.as_nanos() / granularity.as_nanos();
                        now + granularity.saturating_mul((whole as u32).max(1))
                    }
                    _ => t,
                });
        let next = [
            wire.next_arrival(),
            a_busy.filter(|&t| t > now),
            reader.busy_until.filter(|&t| t > now),
            Some(reader_stalled_until).filter(|&t| t > now),
            timer,
        ]
        .into_iter()
        .flatten()
        .min()
        .expect("something is due");
        if trace && next > now + Duration::from_millis(1) {
            println!(
                "  idle {:?} from {now:?} ({got} of {total} delivered; a's timer {:?}, b's {:?}): {}",
                next - now,
                a.poll_timeout(),
                b.poll_timeout(),
                a.recovery_snapshot(now)
            );
        }
        now = now.max(next);
        while let Some((end, p)) = wire.poll_arrival(now) {
            if end == End::A && now < a_stalled_until {
                a_inbox.push(p.to_vec());
            } else if end == End::A {
                let _ = a.handle_packet(now, p, &mut ra);
                read_all(&mut ra, &mut a, &mut replies);
                if !paced {
                    send_a(&mut a, &mut wire, now, &mut packet, paced, &mut a_busy);
                }
            } else if now < b_stalled_until {
                b_inbox.push(p.to_vec());
            } else {
                let _ = b.handle_packet(now, p, &mut rb);
                if now >= reader_stalled_until {
                    got += reader.run(threads.rx_cpu, now, &mut rb, &mut b, &mut read);
                }
                while let Some(n) = b.poll_transmit(now, &mut packet) {
                    wire.send(End::B, now, &packet[..n]);
                }
            }
        }
        if now < a_stalled_until {
            // (a's timers wait for its thread.)
        } else if !a_inbox.is_empty() {
            for p in a_inbox.drain(..) {
                let _ = a.handle_packet(now, &p, &mut ra);
                read_all(&mut ra, &mut a, &mut replies);
            }
        }
        if now >= a_stalled_until && a.poll_timeout().is_some_and(|t| t <= now) {
            let before = trace.then(|| a.recovery_snapshot(now));
            let timeouts = a.stats().timeouts;
            a.handle_timeout(now);
            if let Some(s) = before.filter(|_| a.stats().timeouts > timeouts) {
                println!("  RTO at {:?} ({got} of {total} delivered): {s}", now);
            }
        }
        if now >= b_stalled_until && b.poll_timeout().is_some_and(|t| t <= now) {
            b.handle_timeout(now);
        }
        if now >= reader_stalled_until {
            got += reader.run(threads.rx_cpu, now, &mut rb, &mut b, &mut read);
        }
    }
    Outcome {
        goodput: total as f64 / now.as_secs_f64(),
        stats: a.stats().clone(),
        rx: b.stats().clone(),
    }
}

/// Lets the sender send what it may at `now`: everything (unpaced), or one packet if
/// its CPU is free, which keeps it busy until `busy`.
fn send_a(
    a: &mut Connection,
    wire: &mut Wire,
    now: Duration,
    packet: &mut [u8],
    paced: bool,
    busy: &mut Option<Duration>,
) {
    if !paced {
        while let Some(n) = a.poll_transmit(now, packet) {
            wire.send(End::A, now, &packet[..n]);
        }
        return;
    }
    if busy.is_some_and(|t| t > now) {
        return;
    }
    *busy = None;
    if let Some(n) = a.poll_transmit(now, packet) {
        let cost = Duration::from_nanos(n as u64 * 1_000_000_000 / RATE);
        wire.send(End::A, now + cost, &packet[..n]);
        *busy = Some(now + cost);
    }
}

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let seeds: u64 = arg(&args, "--seeds", 20);
    let first: u64 = arg(&args, "--first", 1);
    let mb: usize = arg(&args, "--mb", 200);
    let loss: f64 = arg(&args, "--loss", 0.01);
    let reorder: f64 = arg(&args, "--reorder", 0.05);
    let trace = args.iter().any(|a| a == "--trace");
    let reorder_delay = Duration::from_micros(arg(&args, "--reorder-us", 200));
    let delay = Duration::from_micros(arg(&args, "--delay-us", 5));
    let queue = args.iter().any(|a| a == "--queue");
    let threads = Threads {
        granularity: Duration::from_micros(arg(&args, "--timer-us", 0)),
        stall_every: Duration::from_micros(arg(&args, "--stall-every-us", 0)),
        stall: Duration::from_micros(arg(&args, "--stall-us", 0)),
        stall_rx: args
            .iter()
            .any(|a| a == "--stall-rx" || a == "--stall-reader"),
        stall_reader: args.iter().any(|a| a == "--stall-reader"),
        rto_min: Duration::from_micros(arg(&args, "--rto-min-us", RTO_MIN.as_micros() as u64)),
        rx_cpu: args.iter().any(|a| a == "--rx-cpu"),
        batch: arg(&args, "--batch", 0),
        records: arg::<String>(&args, "--records", String::new())
            .split_once(',')
            .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?))),
        buffer: arg(&args, "--buffer-kib", 8192) << 10,
        reply_every: arg::<usize>(&args, "--reply-every-kib", 0) << 10,
    };
    let total = mb * 1_000_000;
    println!(
        "{} MB per run, loss {loss}, reorder {reorder}, seeds {first}..{}",
        mb,
        first + seeds
    );
    println!(
        "{:>5} {:>8} {:>8} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>9} {:>6} {:>6} {:>6} {:>6} {:>6}",
        "seed",
        "clean",
        "lossy",
        "ratio",
        "rtx",
        "fast",
        "rto",
        "sprto",
        "tlp",
        "dsack",
        "refused",
        "c.rto",
        "c.sp",
        "cwnd",
        "rwnd",
        "sndbuf"
    );
    let (mut ratios, mut rtos, mut clean_rtos, mut syn_rtos) = (Vec::new(), 0, 0, 0);
    let (mut replier_rtos, mut replier_syn_rtos) = (0, 0);
    for seed in first..first + seeds {
        let clean = run(
            link(0.0, 0.0, reorder_delay, delay, queue),
            seed,
            total,
            false,
            threads,
        );
        let lossy = run(
            link(loss, reorder, reorder_delay, delay, queue),
            seed,
            total,
            trace,
            threads,
        );
        let ratio = lossy.goodput / clean.goodput;
        let s = &lossy.stats;
        rtos += s.timeouts;
        syn_rtos += s.handshake_timeouts;
        replier_rtos += lossy.rx.timeouts;
        replier_syn_rtos += lossy.rx.handshake_timeouts;
        clean_rtos += clean.stats.timeouts;
        ratios.push(ratio);
        println!(
            "{seed:>5} {:>8.0} {:>8.0} {ratio:>6.3} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>9} {:>6} {:>6} {:>6} {:>6} {:>6}",
            clean.goodput / 1e6,
            lossy.goodput / 1e6,
            s.retransmitted_segments,
            s.fast_retransmits,
            s.timeouts,
            s.spurious_timeouts,
            s.loss_probes,
            s.spurious_retransmits,
            lossy.rx.bytes_refused,
            clean.stats.timeouts,
            clean.stats.spurious_timeouts,
            s.cwnd_limited_us / 1000,
            s.rwnd_limited_us / 1000,
            s.sndbuf_limited_us / 1000,
        );
    }
    ratios.sort_by(f64::total_cmp);
    let mean = ratios.iter().sum::<f64>() / ratios.len() as f64;
    println!(
        "ratio mean {mean:.3} median {:.3} min {:.3}; timeouts {rtos} lossy ({syn_rtos} of them in the handshake), {clean_rtos} clean, in {} runs each",
        ratios[ratios.len() / 2],
        ratios[0],
        ratios.len()
    );
    if threads.reply_every > 0 {
        println!(
            "the replier's timeouts (lossy runs): {replier_rtos} ({replier_syn_rtos} of them in the handshake)"
        );
    }
}
