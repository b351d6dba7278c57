//! The closing short table: softrnic against the baselines, size by size, with the
//! CPU each moved.

use super::{RULE, Reporter, bw_unit, human_size};
use crate::bench::pairs::{LatPairs, LatStat, Paired};
use crate::bench::placement::where_ran;
use crate::bench::{Measured, ResultRow, TcpKind};
use std::io::{self, Write};

impl Reporter<'_> {
    /// The closing short table: one line per size, softrnic against the baselines
    /// (latency: one line per size and system, with the tail).
    pub fn summary(&mut self, rows: &[ResultRow]) -> io::Result<()> {
        if self.cfg.json {
            return Ok(());
        }
        if self.cfg.test.is_bw() {
            self.bw_summary(rows)
        } else {
            self.lat_summary(rows)
        }
    }

    fn bw_summary(&mut self, rows: &[ResultRow]) -> io::Result<()> {
        let c = self.cfg;
        let kinds = c.tcp_kinds();
        let unit = self.unit();
        let o = &mut self.out;
        writeln!(o, "{RULE}")?;
        writeln!(
            o,
            " summary: {}, {} QP(s){}, CRC {} (BW average, {unit}{})",
            c.test.name(),
            c.qps,
            if c.shared_buffers {
                " SHARING ONE BUFFER PER SIDE (extra measurement)"
            } else {
                ""
            },
            if c.crc { "on" } else { "off" },
            if kinds.is_empty() {
                ""
            } else {
                "; softrnic/TCP: against the strongest TCP baseline, named; above 1: softrnic faster"
            }
        )?;
        write!(o, " {:>10} {:>12}", "size", "softrnic")?;
        for k in &kinds {
            write!(o, " {:>14}", format!("TCP {}", k.label()))?;
        }
        if !kinds.is_empty() {
            write!(o, " {:>13} {:>10}", "softrnic/TCP", "against")?;
        }
        writeln!(o)?;
        let val = |m: &Measured| match m {
            Measured::Bw(b) => bw_unit(b.avg_bps, c.gbits),
            Measured::Lat(l) => l.stats.typical,
        };
        for r in rows {
            write!(o, " {:>10} {:>12.2}", human_size(r.size), val(&r.softrnic))?;
            for k in &kinds {
                let t = r
                    .baselines
                    .iter()
                    .find(|(x, _)| x == k)
                    .map_or_else(|| "-".into(), |(_, m)| format!("{:.2}", val(m)));
                write!(o, " {t:>14}")?;
            }
            if !kinds.is_empty() {
                let x = r.ratio().map_or_else(|| "-".into(), |x| format!("{x:.2}"));
                write!(o, " {x:>13} {:>10}", r.tcp_kind.map_or("-", TcpKind::label))?;
            }
            writeln!(o)?;
        }
        if rows.iter().any(|r| r.softrnic.cpu().is_some()) {
            let scope = cpu_scope(rows);
            writeln!(
                o,
                " CPU seconds (user + system, {scope}) per GB moved / per million messages:"
            )?;
            write!(o, " {:>10} {:>20}", "size", "softrnic")?;
            for k in &kinds {
                write!(o, " {:>20}", format!("TCP {}", k.label()))?;
            }
            writeln!(o)?;
            for r in rows {
                write!(
                    o,
                    " {:>10} {:>20}",
                    human_size(r.size),
                    cpu_cell(r.softrnic.cpu(), true)
                )?;
                for k in &kinds {
                    let m = r.baselines.iter().find(|(x, _)| x == k).map(|(_, m)| m);
                    write!(o, " {:>20}", cpu_cell(m.and_then(Measured::cpu), true))?;
                }
                writeln!(o)?;
            }
        }
        bw_paired_lines(*o, rows)?;
        where_ran(o, &self.ran)?;
        writeln!(o, "{RULE}")?;
        o.flush()
    }

    fn lat_summary(&mut self, rows: &[ResultRow]) -> io::Result<()> {
        let c = self.cfg;
        let o = &mut self.out;
        writeln!(o, "{RULE}")?;
        writeln!(
            o,
            " summary: {}, CRC {} (usec, {}{})",
            c.test.name(),
            if c.crc { "on" } else { "off" },
            if c.test == crate::bench::Test::ReadLat {
                "full round trip"
            } else {
                "half round trip"
            },
            if c.baseline.is_some() {
                "; softrnic/X: each figure of softrnic over the strongest TCP baseline's \
                 (lowest t_typical); below 1: softrnic faster"
            } else {
                ""
            }
        )?;
        let cpu = rows.iter().any(|r| r.softrnic.cpu().is_some());
        write!(
            o,
            " {:>10}  {:<20} {:>10} {:>10} {:>10} {:>10}",
            "size", "system", "t_typical", "t_avg", "99%", "99.9%"
        )?;
        if cpu {
            write!(o, "  CPU s per M msgs ({})", cpu_scope(rows))?;
        }
        writeln!(o)?;
        for r in rows {
            let line = |o: &mut dyn Write, who: &str, l: &crate::bench::LatResult| {
                let s = &l.stats;
                write!(
                    o,
                    " {:>10}  {:<20} {:>10.2} {:>10.2} {:>10.2} {:>10.2}",
                    human_size(r.size),
                    who,
                    s.typical,
                    s.avg,
                    s.p99,
                    s.p999
                )?;
                if cpu {
                    write!(o, "  {:>10}", cpu_cell(l.cpu.as_ref(), false))?;
                }
                writeln!(o)
            };
            let Measured::Lat(l) = &r.softrnic else {
                continue;
            };
            line(*o, "softrnic", l)?;
            for (k, m) in &r.baselines {
                if let Measured::Lat(t) = m {
                    line(*o, &format!("TCP {}", k.label()), t)?;
                }
            }
            if let (Some(Measured::Lat(t)), Some(k)) = (&r.tcp, r.tcp_kind) {
                let q = |a: f64, b: f64| {
                    if b > 0.0 {
                        format!("{:.2}", a / b)
                    } else {
                        "-".into()
                    }
                };
                let (s, t) = (&l.stats, &t.stats);
                writeln!(
                    o,
                    " {:>10}  {:<20} {:>10} {:>10} {:>10} {:>10}",
                    human_size(r.size),
                    format!("softrnic/{}", k.label()),
                    q(s.typical, t.typical),
                    q(s.avg, t.avg),
                    q(s.p99, t.p99),
                    q(s.p999, t.p999)
                )?;
            }
            if let Some(p) = r.paired.as_ref().and_then(Paired::lat) {
                paired_lines(*o, r.size, p)?;
            }
        }
        if let Some(p) = rows.iter().find_map(|r| r.paired.as_ref()?.lat()) {
            writeln!(
                o,
                " paired median, paired pooled: softrnic/{} TCP from --pairs {} (alternating \
                 sub-runs after each headline; the median of the pairs' ratios, and the ratio \
                 of all sub-runs' samples pooled), beside the headline's softrnic/X",
                p.baseline.label(),
                p.runs.len()
            )?;
        }
        where_ran(o, &self.ran)?;
        writeln!(o, "{RULE}")?;
        o.flush()
    }
}

/// The bandwidth pairs' ratios, size by size (`--pairs`): the median of the pairs' and
/// the pooled one, against the discipline paired with (`--pairs-with`).
fn bw_paired_lines(o: &mut dyn Write, rows: &[ResultRow]) -> io::Result<()> {
    let paired: Vec<_> = rows
        .iter()
        .filter_map(|r| match &r.paired {
            Some(Paired::Bw(p)) => Some((r.size, p)),
            _ => None,
        })
        .collect();
    let Some((_, first)) = paired.first() else {
        return Ok(());
    };
    let show = |x: Option<f64>| x.map_or_else(|| "-".to_string(), |x| format!("{x:.2}"));
    writeln!(
        o,
        " paired softrnic/{} TCP from --pairs {} (extra, not the headline: alternating \
         sub-runs after each headline; the median of the pairs' ratios, and all sub-runs \
         pooled):",
        first.baseline.label(),
        first.runs.len()
    )?;
    writeln!(
        o,
        " {:>10} {:>14} {:>14}",
        "size", "paired median", "paired pooled"
    )?;
    for (size, p) in paired {
        writeln!(
            o,
            " {:>10} {:>14} {:>14}",
            human_size(size),
            show(p.median_ratio()),
            show(p.pooled_ratio())
        )?;
    }
    Ok(())
}

/// A size's paired latency ratios: the median of the pairs' and the pooled one, per
/// figure (the pairs compare no 99.9%).
fn paired_lines(o: &mut dyn Write, size: usize, p: &LatPairs) -> io::Result<()> {
    let show = |x: Option<f64>| x.map_or_else(|| "-".to_string(), |x| format!("{x:.2}"));
    let lines = [
        ("paired median", LatStat::ALL.map(|k| p.median_ratio(k))),
        ("paired pooled", LatStat::ALL.map(|k| p.pooled_ratio(k))),
    ];
    for (who, figures) in lines {
        write!(o, " {:>10}  {who:<20}", human_size(size))?;
        for x in figures {
            write!(o, " {:>10}", show(x))?;
        }
        writeln!(o, " {:>10}", "-")?;
    }
    Ok(())
}

/// Whose CPU the rows counted.
fn cpu_scope(rows: &[ResultRow]) -> &'static str {
    match rows.iter().find_map(|r| r.softrnic.cpu()) {
        Some(u) if u.both_sides => "both sides",
        Some(_) => "this side only",
        None => "-",
    }
}

/// A CPU cell: seconds per GB / per million messages (`per_gb`), or per million
/// messages only.
fn cpu_cell(u: Option<&crate::bench::CpuUse>, per_gb: bool) -> String {
    let f = |x: Option<f64>| x.map_or_else(|| "-".to_string(), |x| format!("{x:.3}"));
    match u {
        None => "-".into(),
        Some(u) if per_gb => format!("{} / {}", f(u.per_gb()), f(u.per_mmsg())),
        Some(u) => f(u.per_mmsg()),
    }
}
