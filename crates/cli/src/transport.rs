//! `--transport`: what carries the QPs' streams. `kernel` (the default) is kernel TCP;
//! `user:sim` is softrnic's own TCP on an in-process simulated network (both sides in
//! this process: `--loopback`), with `--loss`, `--reorder`, `--duplicate`,
//! `--corrupt` (probabilities per packet, `1%` or `0.01`), `--seed` and `--mtu`;
//! `user:udp:LOCAL,REMOTE`, `user:tap:NAME` and `user:packet:IFNAME` put the own TCP
//! on a frame device (Ethernet in UDP datagrams, as QEMU's `-netdev dgram`; a TAP
//! interface; AF_PACKET), at the address `--ip ADDR/PREFIX`.
//! [`Counters`] are what the own TCP and the simulated wire did, for the reports.

use clap::Args;
use serde_json::{Value, json};
use softrnic_rnic::{Device, SimImpairments, SimNet, SimWireStats, TcpStats, UserLink, UserTcp};
use std::net::{Ipv4Addr, SocketAddr};

/// The flags that choose and shape the transport.
#[derive(Args, Debug, Clone, PartialEq)]
pub struct TransportArgs {
    /// What carries the QPs: `kernel` (kernel TCP), `user:sim` (softrnic's own TCP on
    /// an in-process simulated network; both sides in this process), or the own TCP on
    /// a frame device: `user:udp:LOCAL,REMOTE` (Ethernet in UDP datagrams: bind LOCAL,
    /// send to REMOTE, as QEMU's -netdev dgram), `user:tap:NAME`, `user:packet:IFNAME`
    /// (with `--ip`).
    #[arg(long, default_value = "kernel", value_parser = TransportSpec::parse, value_name = "KIND")]
    pub transport: TransportSpec,
    /// user:sim: probability that a packet is lost (`1%` or `0.01`).
    #[arg(long, default_value = "0", value_parser = parse_probability, value_name = "P")]
    pub loss: f64,
    /// user:sim: probability that a packet is held back and overtaken.
    #[arg(long, default_value = "0", value_parser = parse_probability, value_name = "P")]
    pub reorder: f64,
    /// user:sim: probability that a packet arrives twice.
    #[arg(long, default_value = "0", value_parser = parse_probability, value_name = "P")]
    pub duplicate: f64,
    /// user:sim: probability that a bit of a packet is flipped.
    #[arg(long, default_value = "0", value_parser = parse_probability, value_name = "P")]
    pub corrupt: f64,
    /// user:sim: the seed of the network's decisions (a run replays from it).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// user:sim: the network's MTU, octets [default: 65535, as loopback].
    #[arg(long, value_name = "OCTETS")]
    pub mtu: Option<usize>,
    /// user:udp/tap/packet: this side's IPv4 address and prefix on the link.
    #[arg(long, value_parser = parse_cidr, value_name = "ADDR/PREFIX")]
    pub ip: Option<(Ipv4Addr, u8)>,
    /// user:udp/tap/packet: the router to other subnets.
    #[arg(long, value_name = "ADDR")]
    pub gateway: Option<Ipv4Addr>,
}

impl Default for TransportArgs {
    fn default() -> Self {
        TransportArgs {
            transport: TransportSpec::Kernel,
            loss: 0.0,
            reorder: 0.0,
            duplicate: 0.0,
            corrupt: 0.0,
            seed: 1,
            mtu: None,
            ip: None,
            gateway: None,
        }
    }
}

impl TransportArgs {
    /// The own TCP of the one device of this process on a frame link; `None` on
    /// kernel TCP; an error for `user:sim` (two devices) or a frame link without
    /// `--ip`.
    pub fn frame_link(&self) -> Result<Option<UserTcp>, String> {
        let link = match &self.transport {
            TransportSpec::Kernel => return Ok(None),
            TransportSpec::Sim => {
                return Err("user:sim has both sides in this process".into());
            }
            TransportSpec::Udp { local, remote } => UserLink::Udp {
                local: *local,
                remote: *remote,
            },
            TransportSpec::Tap(name) => UserLink::Tap { name: name.clone() },
            TransportSpec::Packet(ifname) => UserLink::Packet {
                ifname: ifname.clone(),
            },
        };
        let (ip, prefix) = self.ip.ok_or_else(|| {
            format!(
                "--transport {} needs this side's address: --ip ADDR/PREFIX",
                self.transport.name()
            )
        })?;
        let mut u = UserTcp::on(link, ip, prefix);
        u.gateway = self.gateway;
        Ok(Some(u))
    }
}

/// `ADDR/PREFIX` (a bare address is a /24).
pub fn parse_cidr(s: &str) -> Result<(Ipv4Addr, u8), String> {
    let (a, p) = s.split_once('/').unwrap_or((s, "24"));
    let ip = a.parse().map_err(|e| format!("{a}: {e}"))?;
    let prefix = p.parse().map_err(|e| format!("{p}: {e}"))?;
    if prefix > 32 {
        return Err(format!("{s}: a prefix is 0..=32"));
    }
    Ok((ip, prefix))
}

/// A `--transport` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransportSpec {
    /// Kernel TCP.
    Kernel,
    /// softrnic's own TCP on an in-process simulated network.
    Sim,
    /// The own TCP on Ethernet frames in UDP datagrams.
    Udp {
        /// Where frames arrive.
        local: SocketAddr,
        /// Where frames go.
        remote: SocketAddr,
    },
    /// The own TCP on a TAP interface.
    Tap(String),
    /// The own TCP on AF_PACKET.
    Packet(String),
}

impl TransportSpec {
    /// Parses `kernel`, `user:sim`, `user:udp:LOCAL,REMOTE`, `user:tap:NAME` or
    /// `user:packet:IFNAME`.
    pub fn parse(s: &str) -> Result<TransportSpec, String> {
        let bad = || {
            format!(
                "{s}: expected kernel, user:sim, user:udp:LOCAL,REMOTE, user:tap:NAME or user:packet:IFNAME"
            )
        };
        match s {
            "kernel" => return Ok(TransportSpec::Kernel),
            "user:sim" => return Ok(TransportSpec::Sim),
            _ => {}
        }
        if let Some(pair) = s.strip_prefix("user:udp:") {
            let (l, r) = pair.split_once(',').ok_or_else(bad)?;
            let addr = |a: &str| a.parse::<SocketAddr>().map_err(|e| format!("{a}: {e}"));
            return Ok(TransportSpec::Udp {
                local: addr(l)?,
                remote: addr(r)?,
            });
        }
        let name = |n: &str| {
            // An interface name: at most 15 octets, no slash or blank.
            let ok = !n.is_empty() && n.len() < 16 && !n.contains(['/', ' ', '\t']);
            ok.then(|| n.to_string()).ok_or_else(bad)
        };
        if let Some(n) = s.strip_prefix("user:tap:") {
            return Ok(TransportSpec::Tap(name(n)?));
        }
        if let Some(n) = s.strip_prefix("user:packet:") {
            return Ok(TransportSpec::Packet(name(n)?));
        }
        Err(bad())
    }

    /// Its name, as given.
    pub fn name(&self) -> String {
        match self {
            TransportSpec::Kernel => "kernel".into(),
            TransportSpec::Sim => "user:sim".into(),
            TransportSpec::Udp { local, remote } => format!("user:udp:{local},{remote}"),
            TransportSpec::Tap(n) => format!("user:tap:{n}"),
            TransportSpec::Packet(n) => format!("user:packet:{n}"),
        }
    }

    /// Whether both sides must be in this process.
    pub fn in_process_only(&self) -> bool {
        *self == TransportSpec::Sim
    }
}

/// A probability: `0.01` or `1%`, within 0..=1.
pub fn parse_probability(s: &str) -> Result<f64, String> {
    let (num, scale) = match s.strip_suffix('%') {
        Some(n) => (n, 100.0),
        None => (s, 1.0),
    };
    let p = num.trim().parse::<f64>().map_err(|e| format!("{s}: {e}"))? / scale;
    if (0.0..=1.0).contains(&p) {
        Ok(p)
    } else {
        Err(format!(
            "{s}: a probability is between 0 and 1 (0% and 100%)"
        ))
    }
}

/// The transport of one run: the simulated network, when there is one, shared by the
/// devices of the run.
#[derive(Debug, Clone)]
pub struct Net {
    args: TransportArgs,
    sim: Option<SimNet>,
}

impl Net {
    /// Sets up what `args` ask for (a fresh simulated network for `user:sim`).
    pub fn new(args: &TransportArgs) -> Net {
        let sim = (args.transport == TransportSpec::Sim).then(|| {
            SimNet::new(SimImpairments {
                loss: args.loss,
                reorder: args.reorder,
                duplicate: args.duplicate,
                corrupt: args.corrupt,
                mtu: args.mtu.unwrap_or(65535),
                seed: args.seed,
                ..SimImpairments::default()
            })
        });
        Net {
            args: args.clone(),
            sim,
        }
    }

    /// What the simulated network holds, for a hang report (`None` without one).
    pub fn stall_report(&self) -> Option<String> {
        self.sim.as_ref().map(SimNet::stall_report)
    }

    /// The transport's name (`kernel`, `user:sim`).
    pub fn name(&self) -> String {
        self.args.transport.name()
    }

    /// The simulated network's address of side `i` (0: client, 1: server).
    pub fn sim_addr(i: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, 0, 0, 1 + i)
    }

    /// The own TCP of the device of side `i`, or `None` for kernel TCP.
    pub fn user_tcp(&self, i: u8) -> Option<UserTcp> {
        self.sim.as_ref().map(|s| UserTcp::sim(s, Net::sim_addr(i)))
    }

    /// Where the server side of an in-process run listens (any free port).
    pub fn listen_addr(&self) -> String {
        match &self.sim {
            Some(_) => format!("{}:0", Net::sim_addr(1)),
            None => "127.0.0.1:0".into(),
        }
    }

    /// What the own TCP of `devs` and the simulated wire have done so far.
    pub fn counters(&self, devs: &[&Device]) -> Counters {
        let mut c = Counters {
            wire: self.sim.as_ref().map(SimNet::stats),
            ..Counters::default()
        };
        for d in devs {
            if let Some(s) = d.user_tcp_stats() {
                let t = c.tcp.get_or_insert_with(TcpStats::default);
                t.segments_out += s.tcp.segments_out;
                t.retransmitted_segments += s.tcp.retransmitted_segments;
                t.retransmitted_bytes += s.tcp.retransmitted_bytes;
                t.fast_retransmits += s.tcp.fast_retransmits;
                t.timeouts += s.tcp.timeouts;
                t.handshake_timeouts += s.tcp.handshake_timeouts;
                t.spurious_timeouts += s.tcp.spurious_timeouts;
                t.spurious_retransmits += s.tcp.spurious_retransmits;
                t.sack_followup_acks += s.tcp.sack_followup_acks;
                t.loss_probes += s.tcp.loss_probes;
                t.dup_acks_in += s.tcp.dup_acks_in;
                t.out_of_order_in += s.tcp.out_of_order_in;
                t.dropped_checksum += s.tcp.dropped_checksum + s.stack.dropped_checksum;
                t.undone_reductions += s.tcp.undone_reductions;
                t.cwnd_limited_us += s.tcp.cwnd_limited_us;
                t.rwnd_limited_us += s.tcp.rwnd_limited_us;
                t.rwnd_hole_limited_us += s.tcp.rwnd_hole_limited_us;
                t.sndbuf_limited_us += s.tcp.sndbuf_limited_us;
                t.timing.add(&s.tcp.timing);
                let k = c.stacks.get_or_insert_with(StackThreads::default);
                k.turns += s.stack_thread_turns;
                k.polled_pumps += s.polled_pumps;
                k.busy_handovers += s.busy_handovers;
            }
        }
        c
    }
}

/// The own TCP's hole and repair durations (`softrnic_rnic::TcpTiming`) as JSON: each
/// histogram as its count, mean, largest, median and 90th/99th percentile (bucket
/// upper bounds, microseconds) and its log2 buckets.
fn timing_json(t: &softrnic_rnic::TcpTiming) -> Value {
    let h = |h: &softrnic_rnic::TcpHistogram| {
        json!({
            "count": h.count,
            "mean_us": h.sum_us.checked_div(h.count).unwrap_or(0),
            "max_us": h.max_us,
            "p50_us": h.quantile_us(0.5),
            "p90_us": h.quantile_us(0.9),
            "p99_us": h.quantile_us(0.99),
            "log2_us_buckets": h.buckets.to_vec(),
        })
    };
    json!({
        "hole_at_nxt": h(&t.hole_at_nxt),
        "ooo_bytes_at_fill_mean": t.ooo_bytes_at_fill_sum.checked_div(t.hole_at_nxt.count).unwrap_or(0),
        "ooo_bytes_at_fill_max": t.ooo_bytes_at_fill_max,
        "reader_starved": h(&t.reader_starved),
        "send_to_verdict": h(&t.send_to_verdict),
        "rtx_lost_again": t.rtx_lost_again,
        "verdict_to_resend": h(&t.verdict_to_resend),
        "resend_to_delivery": h(&t.resend_to_delivery),
        "first_send_to_delivery": h(&t.first_send_to_delivery),
        "reo_wnd": h(&t.reo_wnd),
        "min_rtt_ns": t.min_rtt_ns,
        "srtt_us": t.srtt_us,
        "hole_limited_verdict_us": t.hole_limited_verdict_us,
        "hole_limited_resend_us": t.hole_limited_resend_us,
        "hole_limited_repair_us": t.hole_limited_repair_us,
        "hole_limited_waits": t.hole_limited_waits,
        "hole_limited_sacked_mean": t.hole_limited_sacked_sum.checked_div(t.hole_limited_waits).unwrap_or(0),
        "hole_limited_sacked_max": t.hole_limited_sacked_max,
    })
}

/// What the own TCP (both sides added up) and the simulated wire did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    /// The own TCP's counters (`None` on kernel TCP).
    pub tcp: Option<TcpStats>,
    /// The simulated wire's (`None` without one).
    pub wire: Option<SimWireStats>,
    /// The own TCP stacks' threads (both sides added up; `None` on kernel TCP).
    pub stacks: Option<StackThreads>,
}

/// What the own TCP's stacks did beside TCP (both sides added up): who did their
/// timed work and how often a packet handed over found a stack busy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StackThreads {
    /// Wake-ups of the stack threads.
    pub turns: u64,
    /// Timed work done by threads that poll a connection instead.
    pub polled_pumps: u64,
    /// Packets handed over while another thread held the receiving stack.
    pub busy_handovers: u64,
}

impl Counters {
    /// What happened between `before` and `self`.
    pub fn since(&self, before: &Counters) -> Counters {
        let tcp = match (&self.tcp, &before.tcp) {
            (Some(a), Some(b)) => Some(TcpStats {
                segments_out: a.segments_out - b.segments_out,
                retransmitted_segments: a.retransmitted_segments - b.retransmitted_segments,
                retransmitted_bytes: a.retransmitted_bytes - b.retransmitted_bytes,
                fast_retransmits: a.fast_retransmits - b.fast_retransmits,
                timeouts: a.timeouts - b.timeouts,
                handshake_timeouts: a.handshake_timeouts - b.handshake_timeouts,
                spurious_timeouts: a.spurious_timeouts - b.spurious_timeouts,
                spurious_retransmits: a.spurious_retransmits - b.spurious_retransmits,
                sack_followup_acks: a.sack_followup_acks - b.sack_followup_acks,
                loss_probes: a.loss_probes - b.loss_probes,
                dup_acks_in: a.dup_acks_in - b.dup_acks_in,
                out_of_order_in: a.out_of_order_in - b.out_of_order_in,
                dropped_checksum: a.dropped_checksum - b.dropped_checksum,
                undone_reductions: a.undone_reductions - b.undone_reductions,
                cwnd_limited_us: a.cwnd_limited_us - b.cwnd_limited_us,
                rwnd_limited_us: a.rwnd_limited_us - b.rwnd_limited_us,
                rwnd_hole_limited_us: a.rwnd_hole_limited_us - b.rwnd_hole_limited_us,
                sndbuf_limited_us: a.sndbuf_limited_us - b.sndbuf_limited_us,
                timing: a.timing.since(&b.timing),
                ..TcpStats::default()
            }),
            (a, _) => a.clone(),
        };
        let wire = match (self.wire, before.wire) {
            (Some(a), Some(b)) => Some(SimWireStats {
                packets: a.packets - b.packets,
                lost: a.lost - b.lost,
                reordered: a.reordered - b.reordered,
                duplicated: a.duplicated - b.duplicated,
                corrupted: a.corrupted - b.corrupted,
                unroutable: a.unroutable - b.unroutable,
                too_big: a.too_big - b.too_big,
                queue_drops: a.queue_drops - b.queue_drops,
            }),
            (a, _) => a,
        };
        let stacks = match (self.stacks, before.stacks) {
            (Some(a), Some(b)) => Some(StackThreads {
                turns: a.turns - b.turns,
                polled_pumps: a.polled_pumps - b.polled_pumps,
                busy_handovers: a.busy_handovers - b.busy_handovers,
            }),
            (a, _) => a,
        };
        Counters { tcp, wire, stacks }
    }

    /// As JSON fields: `own_tcp` and `sim_wire` objects, when there are such counters.
    pub fn json(&self) -> Value {
        let mut v = json!({});
        if let (Some(t), Value::Object(m)) = (&self.tcp, &mut v) {
            m.insert(
                "own_tcp".into(),
                json!({
                    "segments_out": t.segments_out,
                    "retransmitted_segments": t.retransmitted_segments,
                    "retransmitted_bytes": t.retransmitted_bytes,
                    "fast_retransmits": t.fast_retransmits,
                    "timeouts": t.timeouts,
                    "handshake_timeouts": t.handshake_timeouts,
                    "spurious_timeouts": t.spurious_timeouts,
                    "spurious_retransmits": t.spurious_retransmits,
                    "sack_followup_acks": t.sack_followup_acks,
                    "loss_probes": t.loss_probes,
                    "dup_acks_in": t.dup_acks_in,
                    "out_of_order_in": t.out_of_order_in,
                    "dropped_checksum": t.dropped_checksum,
                    "undone_reductions": t.undone_reductions,
                    "cwnd_limited_us": t.cwnd_limited_us,
                    "rwnd_limited_us": t.rwnd_limited_us,
                    "rwnd_hole_limited_us": t.rwnd_hole_limited_us,
                    "sndbuf_limited_us": t.sndbuf_limited_us,
                }),
            );
            m.insert("own_tcp_timing".into(), timing_json(&t.timing));
        }
        if let (Some(k), Value::Object(m)) = (&self.stacks, &mut v) {
            m.insert(
                "own_tcp_stacks".into(),
                json!({
                    "turns": k.turns,
                    "polled_pumps": k.polled_pumps,
                    "busy_handovers": k.busy_handovers,
                }),
            );
        }
        if let (Some(w), Value::Object(m)) = (&self.wire, &mut v) {
            m.insert(
                "sim_wire".into(),
                json!({
                    "packets": w.packets,
                    "lost": w.lost,
                    "reordered": w.reordered,
                    "duplicated": w.duplicated,
                    "corrupted": w.corrupted,
                    "too_big": w.too_big,
                    "queue_drops": w.queue_drops,
                }),
            );
        }
        v
    }

    /// One line for a text report, or `None` on kernel TCP.
    pub fn text(&self) -> Option<String> {
        let t = self.tcp.as_ref()?;
        let mut s = format!(
            "own TCP: {} segments, {} retransmitted ({} fast retransmits, {} timeouts)",
            t.segments_out, t.retransmitted_segments, t.fast_retransmits, t.timeouts
        );
        if let Some(w) = &self.wire {
            s += &format!(
                "; wire: {} packets, {} lost, {} reordered, {} duplicated, {} corrupted",
                w.packets, w.lost, w.reordered, w.duplicated, w.corrupted
            );
        }
        Some(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probabilities_and_kinds_parse() {
        assert_eq!(parse_probability("1%"), Ok(0.01));
        assert_eq!(parse_probability("0.05"), Ok(0.05));
        assert!(parse_probability("101%").is_err());
        assert!(parse_probability("-1").is_err());
        assert!(parse_probability("x").is_err());
        assert_eq!(TransportSpec::parse("user:sim"), Ok(TransportSpec::Sim));
        assert_eq!(TransportSpec::parse("kernel"), Ok(TransportSpec::Kernel));
        assert!(TransportSpec::parse("user:carrier-pigeon").is_err());
        assert_eq!(
            TransportSpec::parse("user:udp:127.0.0.1:47001,127.0.0.1:47000"),
            Ok(TransportSpec::Udp {
                local: "127.0.0.1:47001".parse().unwrap(),
                remote: "127.0.0.1:47000".parse().unwrap(),
            })
        );
        assert!(TransportSpec::parse("user:udp:127.0.0.1:1").is_err());
        assert_eq!(
            TransportSpec::parse("user:tap:tap0"),
            Ok(TransportSpec::Tap("tap0".into()))
        );
        assert!(TransportSpec::parse("user:packet:a/b").is_err());
        assert_eq!(
            parse_cidr("10.1.2.3/16"),
            Ok((Ipv4Addr::new(10, 1, 2, 3), 16))
        );
        assert_eq!(parse_cidr("10.1.2.3"), Ok((Ipv4Addr::new(10, 1, 2, 3), 24)));
        assert!(parse_cidr("10.1.2.3/33").is_err());
        let a = TransportArgs {
            transport: TransportSpec::Tap("t0".into()),
            ..TransportArgs::default()
        };
        assert!(a.frame_link().unwrap_err().contains("--ip"));
    }
}
