//! One result row: what a run measured for softrnic and for each TCP baseline, and the
//! ratio to the strongest baseline.

use super::*;
use tcp_sockets::Settings;

/// One measurement.
#[derive(Debug, Clone, PartialEq)]
pub enum Measured {
    /// Bandwidth.
    Bw(BwResult),
    /// Latency.
    Lat(LatResult),
}

impl Measured {
    /// The CPU the run used, if counted.
    pub fn cpu(&self) -> Option<&CpuUse> {
        match self {
            Measured::Bw(b) => b.cpu.as_ref(),
            Measured::Lat(l) => l.cpu.as_ref(),
        }
    }

    /// Adds the CPU counted by `clock` since the run began, with what the run moved:
    /// bandwidth, its messages; latency, two messages per iteration (both directions),
    /// the `warmup` iterations included, since the clock ran through them too.
    pub fn with_cpu(mut self, clock: &CpuClock, warmup: u64) -> Measured {
        match &mut self {
            Measured::Bw(b) => {
                b.cpu = clock.stop(b.iterations, b.iterations * b.bytes as u64);
            }
            Measured::Lat(l) => {
                let msgs = 2 * (l.iterations + warmup);
                l.cpu = clock.stop(msgs, msgs * l.bytes as u64);
            }
        }
        self
    }

    /// Iterations measured.
    pub fn iterations(&self) -> u64 {
        match self {
            Measured::Bw(b) => b.iterations,
            Measured::Lat(l) => l.iterations,
        }
    }
}

/// The results of one size.
#[derive(Debug, Clone, PartialEq)]
pub struct ResultRow {
    /// The test.
    pub test: Test,
    /// Message size.
    pub size: usize,
    /// softrnic's result.
    pub softrnic: Measured,
    /// The strongest TCP baseline's result, if any ran: the one [`ResultRow::ratio`]
    /// compares with (the highest average bandwidth, or the lowest typical latency).
    pub tcp: Option<Measured>,
    /// Which baseline `tcp` is.
    pub tcp_kind: Option<TcpKind>,
    /// Every TCP baseline run for this size, in the order run.
    pub baselines: Vec<(TcpKind, Measured)>,
    /// How the baselines' first socket was set, read back from it.
    pub baseline_sockets: Option<Settings>,
    /// `--pairs`: the alternating sub-runs after the headline (an extra measurement).
    pub paired: Option<super::pairs::Paired>,
}

/// Whether `a` is a stronger result than `b`: more bandwidth, or less typical latency.
fn stronger(a: &Measured, b: &Measured) -> bool {
    match (a, b) {
        (Measured::Bw(a), Measured::Bw(b)) => a.avg_bps > b.avg_bps,
        (Measured::Lat(a), Measured::Lat(b)) => a.stats.typical < b.stats.typical,
        _ => false,
    }
}

impl ResultRow {
    /// A row: softrnic's result beside the baselines run for the size; the strongest
    /// baseline becomes `tcp`.
    pub fn new(
        test: Test,
        size: usize,
        softrnic: Measured,
        baselines: Vec<(TcpKind, Measured)>,
    ) -> ResultRow {
        let best = baselines
            .iter()
            .fold(None::<&(TcpKind, Measured)>, |best, b| match best {
                Some(x) if !stronger(&b.1, &x.1) => Some(x),
                _ => Some(b),
            })
            .cloned();
        let (tcp_kind, tcp) = best.unzip();
        ResultRow {
            test,
            size,
            softrnic,
            tcp,
            tcp_kind,
            baselines,
            baseline_sockets: None,
            paired: None,
        }
    }

    /// softrnic / the strongest TCP baseline: average bandwidth ratio (above 1:
    /// softrnic faster), or typical latency ratio (below 1: softrnic faster).
    pub fn ratio(&self) -> Option<f64> {
        ratio_of(&self.softrnic, self.tcp.as_ref()?)
    }

    /// softrnic / the baseline `kind`, as [`ResultRow::ratio`].
    pub fn ratio_to(&self, kind: TcpKind) -> Option<f64> {
        let (_, t) = self.baselines.iter().find(|(k, _)| *k == kind)?;
        ratio_of(&self.softrnic, t)
    }
}

/// softrnic / TCP: average bandwidth, or typical latency.
fn ratio_of(s: &Measured, t: &Measured) -> Option<f64> {
    match (s, t) {
        (Measured::Bw(s), Measured::Bw(t)) if t.avg_bps > 0.0 => Some(s.avg_bps / t.avg_bps),
        (Measured::Lat(s), Measured::Lat(t)) if t.stats.typical > 0.0 => {
            Some(s.stats.typical / t.stats.typical)
        }
        _ => None,
    }
}
