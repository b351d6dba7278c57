//! `softrnic srq-sim`: what shared receive queues with statistical provisioning save.
//!
//! N connections receive bursty on/off traffic (seeded, [`traffic`]) and three ways of
//! providing receive buffers are compared:
//! - (a) `peak`: a receive queue per QP, sized for the per-connection peak;
//! - (b) `grow`: one SRQ of fixed size, doubled on each limit event (what MPI libraries
//!   do), never shrunk;
//! - (c) `stat`: one SRQ sized by statistical provisioning (the SRQ manager: sum of
//!   means plus z root of summed variances, per interval).
//!
//! Reported per strategy: peak receive-buffer memory, messages, starved messages (found
//! no buffer), back-pressure stall time, throughput; and a PNG of depth against demand.
//! `--mode model` plays the trace in a fast model ([`model`]); `--mode rnic` plays it
//! end to end through two softrnic devices over loopback ([`rnic`]).

pub mod model;
pub mod plot;
pub mod rnic;
pub mod traffic;

use softrnic_proto::srq::stats::{Estimator, ProvisionConfig, z_for};
use std::path::PathBuf;
use traffic::{Dist, TrafficSpec};

/// `srq-sim`'s flags.
#[derive(Debug, Clone, clap::Args)]
pub struct SimArgs {
    /// `model` (fast, simulated time) or `rnic` (end to end over loopback).
    #[arg(long, value_enum, default_value_t = Mode::Model)]
    pub mode: Mode,
    /// Connections [default: 1000 in the model, 256 through the RNIC].
    #[arg(short = 'n', long)]
    pub connections: Option<usize>,
    /// Ticks (replenishment periods) to play [default: 2000 model, 300 rnic].
    #[arg(long)]
    pub ticks: Option<usize>,
    /// Ticks at the start not measured, in which the strategies settle.
    #[arg(long, default_value_t = 50)]
    pub warmup: usize,
    /// Seed of the traffic.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Mean length of an on period, in ticks.
    #[arg(long, default_value_t = 20.0)]
    pub on_mean: f64,
    /// Mean length of an off period, in ticks.
    #[arg(long, default_value_t = 180.0)]
    pub off_mean: f64,
    /// Mean messages per tick of a connection that is on (Poisson).
    #[arg(long, default_value_t = 4.0)]
    pub rate: f64,
    /// Distribution of period lengths.
    #[arg(long, value_enum, default_value_t = Dist::Geometric)]
    pub dist: Dist,
    /// Octets per message, and per receive buffer.
    #[arg(short = 's', long, default_value_t = 256)]
    pub size: usize,
    /// Starvation probability per interval the statistical target is sized for.
    #[arg(long, default_value_t = 1e-4)]
    pub starvation: f64,
    /// Statistics the target follows.
    #[arg(long, value_enum, default_value_t = EstimatorArg::Ewma)]
    pub estimator: EstimatorArg,
    /// Weight of the newest interval in the dynamic statistics.
    #[arg(long, default_value_t = 0.125)]
    pub alpha: f64,
    /// Initial SRQ depth of `grow` and `stat`.
    #[arg(long, default_value_t = 64)]
    pub grow_initial: usize,
    /// Length of a tick in the model, for its throughput figure, in milliseconds.
    #[arg(long, default_value_t = 1.0)]
    pub tick_ms: f64,
    /// Strategies to run.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Strategy::Peak, Strategy::Grow, Strategy::Stat])]
    pub strategies: Vec<Strategy>,
    /// One JSON object per strategy on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Where to write the plot of depth against demand [default:
    /// srq-sim-MODE.png]; `-` for none.
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

/// Where the trace is played.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// The fast model.
    Model,
    /// Through two softrnic devices over loopback.
    Rnic,
}

/// How the statistics are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EstimatorArg {
    /// Exponentially weighted mean and variance.
    Ewma,
    /// Mean and variance over a window of 64 intervals.
    Empirical,
}

/// A way of providing receive buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Strategy {
    /// A receive queue per QP sized for the per-connection peak.
    Peak,
    /// One SRQ doubled on limit events.
    Grow,
    /// One SRQ sized by statistical provisioning.
    Stat,
}

impl Strategy {
    /// Its name in the output.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Peak => "peak",
            Strategy::Grow => "grow",
            Strategy::Stat => "stat",
        }
    }
}

/// The run's parameters, resolved.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// The traffic.
    pub traffic: TrafficSpec,
    /// Ticks played.
    pub ticks: usize,
    /// Ticks not measured.
    pub warmup: usize,
    /// Octets per message and buffer.
    pub msg_size: usize,
    /// A tick's length in the model.
    pub tick_secs: f64,
    /// Initial depth of `grow` and `stat`.
    pub grow_initial: usize,
    /// The statistics and target parameters of `stat`.
    pub provision: ProvisionConfig,
}

impl SimConfig {
    /// From the flags.
    pub fn from_args(a: &SimArgs) -> SimConfig {
        let rnic = a.mode == Mode::Rnic;
        SimConfig {
            traffic: TrafficSpec {
                connections: a.connections.unwrap_or(if rnic { 256 } else { 1000 }),
                on_mean: a.on_mean,
                off_mean: a.off_mean,
                rate: a.rate,
                dist: a.dist,
                seed: a.seed,
            },
            ticks: a.ticks.unwrap_or(if rnic { 300 } else { 2000 }),
            warmup: a.warmup,
            msg_size: a.size.max(1),
            tick_secs: a.tick_ms / 1000.0,
            grow_initial: a.grow_initial.max(1),
            provision: ProvisionConfig {
                z: z_for(a.starvation),
                alpha: a.alpha,
                estimator: match a.estimator {
                    EstimatorArg::Ewma => Estimator::Ewma,
                    EstimatorArg::Empirical => Estimator::Empirical,
                },
                min_depth: 1,
                ..ProvisionConfig::default()
            },
        }
    }
}

/// What one strategy did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Outcome {
    /// Which.
    #[serde(serialize_with = "ser_strategy")]
    pub strategy: Strategy,
    /// `model` or `rnic`.
    pub mode: &'static str,
    /// Connections.
    pub connections: usize,
    /// Most receive buffers provided at once (measured ticks).
    pub buffers_peak: usize,
    /// Their memory: peak receive-buffer octets.
    pub buffer_bytes: usize,
    /// Messages offered (measured ticks).
    pub messages: u64,
    /// Messages that found no buffer.
    pub starved: u64,
    /// Time connections spent held back by back-pressure, summed.
    pub stall_seconds: f64,
    /// Messages received per second (simulated time in the model, wall time through
    /// the RNIC).
    pub throughput_msgs_per_sec: f64,
    /// The measured time.
    pub seconds: f64,
    /// Buffers provided per tick.
    #[serde(skip)]
    pub depth: Vec<u32>,
    /// Messages per tick.
    #[serde(skip)]
    pub demand: Vec<u32>,
}

fn ser_strategy<S: serde::Serializer>(s: &Strategy, ser: S) -> Result<S::Ok, S::Error> {
    ser.serialize_str(s.name())
}

impl Outcome {
    pub(crate) fn new(strategy: Strategy, mode: &'static str, connections: usize) -> Outcome {
        Outcome {
            strategy,
            mode,
            connections,
            buffers_peak: 0,
            buffer_bytes: 0,
            messages: 0,
            starved: 0,
            stall_seconds: 0.0,
            throughput_msgs_per_sec: 0.0,
            seconds: 0.0,
            depth: Vec::new(),
            demand: Vec::new(),
        }
    }

    pub(crate) fn finish(&mut self, msg_size: usize) {
        if self.buffer_bytes == 0 {
            self.buffer_bytes = self.buffers_peak * msg_size;
        }
        if self.seconds > 0.0 {
            self.throughput_msgs_per_sec =
                (self.messages - self.starved.min(self.messages)) as f64 / self.seconds;
        }
    }
}

/// Runs `srq-sim`.
pub fn main(a: &SimArgs) -> Result<(), String> {
    run(a).map_err(|e| e.to_string())
}

fn run(a: &SimArgs) -> Result<(), Box<dyn std::error::Error>> {
    let cfg = SimConfig::from_args(a);
    if cfg.traffic.connections == 0 || cfg.ticks <= cfg.warmup {
        return Err("need at least one connection and more ticks than warm-up ticks".into());
    }
    let peak = model::calibrate_peak(cfg.traffic, cfg.ticks);
    let mut outcomes = Vec::new();
    for &s in &a.strategies {
        let o = match a.mode {
            Mode::Model => model::run(&cfg, s, peak),
            Mode::Rnic => rnic::run(&cfg, s, peak)?,
        };
        if a.json {
            println!("{}", serde_json::to_string(&o)?);
        }
        outcomes.push(o);
    }
    if !a.json {
        print_table(&cfg, peak, &outcomes);
    }
    let mode = match a.mode {
        Mode::Model => "model",
        Mode::Rnic => "rnic",
    };
    let path = a
        .plot
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("srq-sim-{mode}.png")));
    if path.as_os_str() != "-" {
        plot::write(&path, &outcomes)?;
        eprintln!(
            "srq-sim: plot of depth against demand in {} (log scale; grey demand, green peak, red grow, blue stat)",
            path.display()
        );
    }
    Ok(())
}

fn print_table(cfg: &SimConfig, peak: u32, outcomes: &[Outcome]) {
    let t = &cfg.traffic;
    println!(
        "srq-sim: {} connections, {} ticks ({} warm-up), on {} / off {} ticks ({:?}), {} msgs/tick when on, {} B messages, seed {}",
        t.connections,
        cfg.ticks,
        cfg.warmup,
        t.on_mean,
        t.off_mean,
        t.dist,
        t.rate,
        cfg.msg_size,
        t.seed
    );
    println!(
        "per-connection peak {peak} msgs/tick; stat: z {:.3} ({:?})",
        cfg.provision.z, cfg.provision.estimator
    );
    println!(
        "{:<6} {:>6} {:>10} {:>12} {:>12} {:>9} {:>10} {:>11} {:>14}",
        "strat",
        "mode",
        "buffers",
        "buffer KiB",
        "messages",
        "starved",
        "per 10^4",
        "stall s",
        "msgs/s"
    );
    for o in outcomes {
        println!(
            "{:<6} {:>6} {:>10} {:>12.1} {:>12} {:>9} {:>10.3} {:>11.3} {:>14.0}",
            o.strategy.name(),
            o.mode,
            o.buffers_peak,
            o.buffer_bytes as f64 / 1024.0,
            o.messages,
            o.starved,
            o.starved as f64 * 1e4 / o.messages.max(1) as f64,
            o.stall_seconds,
            o.throughput_msgs_per_sec
        );
    }
    let get = |s| outcomes.iter().find(|o| o.strategy == s);
    if let (Some(p), Some(s)) = (get(Strategy::Peak), get(Strategy::Stat)) {
        println!(
            "stat uses {:.3} of peak's buffer memory",
            s.buffer_bytes as f64 / p.buffer_bytes.max(1) as f64
        );
    }
    if let (Some(g), Some(s)) = (get(Strategy::Grow), get(Strategy::Stat)) {
        println!(
            "stat uses {:.3} of grow's buffer memory",
            s.buffer_bytes as f64 / g.buffer_bytes.max(1) as f64
        );
    }
}
