//! The counter lines a round prints: the engines' work and the QPs' I/O counters.

use softrnic_rnic::{Device, QpStats};

/// The I/O counters of some QPs, summed, as one line; per message too when `msgs` is
/// known (non-zero).
/// Per engine: the QPs it serves, the readiness events it handled so far, and the CPU
/// time its thread used so far (user + system, ms), which, unlike a bandwidth, does not
/// depend on what else the machine runs: with `--engine-spin-us 0` it is the engine's
/// work.
pub(in crate::bench) fn engines_line(dev: &Device) -> String {
    let e = dev.engines();
    let qps: Vec<usize> = e.iter().map(|e| e.qps).collect();
    let events: Vec<u64> = e.iter().map(|e| e.events).collect();
    let cpu: Vec<u64> = e.iter().map(|e| thread_cpu_ms(e.tid)).collect();
    format!("engine QPs {qps:?}, engine events {events:?}, engine CPU ms {cpu:?}")
}

/// User + system time of one of this process's threads, ms (0 if unknown): fields 14
/// and 15 of `/proc/self/task/<tid>/stat`, in USER_HZ (100 per second on Linux).
fn thread_cpu_ms(tid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap_or_default();
    // The command name may hold spaces: fields are counted after its closing parenthesis.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
    let tick = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    (tick(11) + tick(12)) * 10
}

pub(in crate::bench) fn stats_line(stats: impl Iterator<Item = QpStats>, msgs: u64) -> String {
    let mut t = QpStats::default();
    for s in stats {
        t.rx_direct_bytes += s.rx_direct_bytes;
        t.rx_copied_bytes += s.rx_copied_bytes;
        t.rx_syscalls += s.rx_syscalls;
        t.rx_idle_yields += s.rx_idle_yields;
        t.tx_syscalls += s.tx_syscalls;
        t.tx_fpdus += s.tx_fpdus;
        t.tx_engine_syscalls += s.tx_engine_syscalls;
        t.tx_bytes += s.tx_bytes;
        t.tx_engine_bytes += s.tx_engine_bytes;
    }
    let c = |name: &str, x: u64| {
        if msgs > 0 {
            format!("{name} {x} ({:.2}/msg)", x as f64 / msgs as f64)
        } else {
            format!("{name} {x}")
        }
    };
    format!(
        "{msgs} msgs: {}, {} (by engines {}, octets {} of {}), {}, {}, rx_direct_bytes {}, rx_copied_bytes {}",
        c("tx_fpdus", t.tx_fpdus),
        c("tx_syscalls", t.tx_syscalls),
        t.tx_engine_syscalls,
        t.tx_engine_bytes,
        t.tx_bytes,
        c("rx_syscalls", t.rx_syscalls),
        c("rx_idle_yields", t.rx_idle_yields),
        t.rx_direct_bytes,
        t.rx_copied_bytes
    )
}
