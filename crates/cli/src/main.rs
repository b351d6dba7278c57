//! `softrnic`: the command-line face of the software RNIC.
#![forbid(unsafe_code)]

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

mod decode_cmd;

/// Counts the heap once `conn-scale` starts it (until then, one relaxed load more per
/// allocation than the system allocator).
#[global_allocator]
static HEAP: softrnic_rnic::heap_count::CountingAlloc = softrnic_rnic::heap_count::CountingAlloc;

/// softrnic: a software iWARP RNIC in user space.
#[derive(Parser)]
#[command(version, about, long_about = None)]
struct Cli {
    /// Diagnostic events on stderr, by target and level (RUST_LOG syntax without
    /// regexes), e.g. `softrnic_rnic=debug` or `softrnic_rnic::cm=info` [default: the
    /// RUST_LOG variable; none if unset].
    #[arg(long, global = true, value_name = "FILTER")]
    log: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Decode the iWARP (MPA/DDP/RDMAP) traffic in a pcap or pcapng capture.
    Decode {
        /// The capture file.
        file: PathBuf,
        /// Print one JSON object per line instead of text.
        #[arg(long)]
        json: bool,
    },
    /// rdma-core's rping exchange (Send advert, RDMA Read, RDMA Write back), either
    /// role, compatible with Linux `rping`.
    Rping(softrnic_cli::rping::RpingArgs),
    /// Shared receive queues against per-QP receive queues: N bursty connections,
    /// peak-sized RQs vs an SRQ grown on limit events vs statistical provisioning;
    /// buffer memory, starvation, throughput, and a PNG of depth against demand.
    #[command(name = "srq-sim")]
    SrqSim(softrnic_cli::srq_sim::SimArgs),
    #[command(flatten)]
    Bench(softrnic_cli::bench::BenchCommand),
    /// Completion events per second and wake-up latency with many CQs on completion
    /// handlers bound to CPUs.
    CqBench(softrnic_cli::cq_bench::CqBenchArgs),
    /// Memory and set-up time per connection: connect N QP pairs over loopback (1,
    /// 1000, 10000 by default), RSS and softrnic heap per pair, every pair's Write and
    /// Send verified.
    ConnScale(softrnic_cli::conn_scale::ConnScaleArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(e) = softrnic_cli::logging::init(cli.log.as_deref()) {
        eprintln!("softrnic: {e}");
        return ExitCode::FAILURE;
    }
    let result = match cli.command {
        Command::Decode { file, json } => decode_cmd::run(&file, json),
        Command::Rping(r) => softrnic_cli::rping::main(&r),
        Command::SrqSim(a) => softrnic_cli::srq_sim::main(&a),
        Command::Bench(b) => softrnic_cli::bench::main(&b),
        Command::CqBench(a) => softrnic_cli::cq_bench::main(&a),
        Command::ConnScale(a) => softrnic_cli::conn_scale::main(&a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("softrnic: {e}");
            ExitCode::FAILURE
        }
    }
}
