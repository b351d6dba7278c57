//! Output: perftest's tables (one line per size as it completes, then a short summary),
//! or one JSON object per result line.

use super::placement::where_ran;
use super::stats::MB;
use super::{BenchConfig, Clock, Measured, Mode, ResultRow, TcpKind};
use serde_json::{Value, json};
use std::io::{self, Write};

const RULE: &str =
    "---------------------------------------------------------------------------------------";

/// Prints a run's results.
pub struct Reporter<'a> {
    out: &'a mut dyn Write,
    cfg: &'a BenchConfig,
    placement: String,
    clock: Option<Clock>,
    /// What the transport did during the next row: JSON fields and a text line.
    annotation: Option<(Value, Option<String>)>,
    /// Where the threads ran, per size (text), for the summary.
    ran: Vec<(usize, String)>,
}

/// Bandwidth in the unit asked for: MB/s (2^20 octets) or Gb/s (10^9 bits).
pub fn bw_unit(octets_per_sec: f64, gbits: bool) -> f64 {
    if gbits {
        octets_per_sec * 8.0 / 1e9
    } else {
        octets_per_sec / MB
    }
}

/// A size for people: 64 B, 4 KiB, 1 MiB.
pub fn human_size(s: usize) -> String {
    if s >= 1 << 20 && s.is_multiple_of(1 << 20) {
        format!("{} MiB", s >> 20)
    } else if s >= 1 << 10 && s.is_multiple_of(1 << 10) {
        format!("{} KiB", s >> 10)
    } else {
        format!("{s} B")
    }
}

impl<'a> Reporter<'a> {
    /// A reporter; `placement` says where the sides run (shown in the header).
    pub fn new(out: &'a mut dyn Write, cfg: &'a BenchConfig, placement: String) -> Self {
        Reporter {
            out,
            cfg,
            placement,
            clock: None,
            annotation: None,
            ran: Vec::new(),
        }
    }

    /// Adds `fields` to the next row's softrnic JSON line, and `text` under the row in
    /// text mode (the transport and what it did); a second call adds to the first.
    pub fn annotate(&mut self, fields: Value, text: Option<String>) {
        self.annotation = Some(match self.annotation.take() {
            None => (fields, text),
            Some((mut v, t)) => {
                if let (Value::Object(a), Value::Object(b)) = (&mut v, fields) {
                    a.extend(b);
                }
                let t = match (t, text) {
                    (Some(a), Some(b)) => Some(format!("{a}\n   {b}")),
                    (a, b) => a.or(b),
                };
                (v, t)
            }
        });
    }

    /// Where the threads ran during the next row (size `size`): under the row, in its
    /// JSON line, and again in the summary.
    pub fn ran(&mut self, size: usize, p: &super::placement::Placement) {
        let text = p.text();
        if let Some(t) = &text {
            self.ran.push((size, t.clone()));
        }
        self.annotate(p.json(), text);
    }

    /// States what the softrnic figures mean: lines in the header, `clock` in JSON.
    pub fn clock(&mut self, c: Clock) {
        self.clock = Some(c);
    }

    fn unit(&self) -> &'static str {
        if self.cfg.gbits { "Gb/sec" } else { "MB/sec" }
    }

    /// The header: test, parameters, column titles (text mode only).
    pub fn header(&mut self) -> io::Result<()> {
        if self.cfg.json {
            return Ok(());
        }
        let c = self.cfg;
        let fpdu = c
            .fpdu
            .map_or_else(|| "TCP MSS".to_string(), |f| format!("{f} octets"));
        let amount = match c.duration {
            Some(d) => format!("{:.1} s per size", d.as_secs_f64()),
            None => format!("{} iterations per QP", c.iters),
        };
        let u = self.unit();
        let o = &mut self.out;
        writeln!(o, "{RULE}")?;
        writeln!(o, "{:>30}{}", "", c.test.title())?;
        writeln!(
            o,
            " Transport       : iWARP (softrnic, MPA over kernel TCP)   Progress : {:?}, {} engine thread(s)",
            c.progress_mode, c.engine_threads
        )?;
        if c.test.is_bw() {
            writeln!(
                o,
                " Number of qps   : {:<6} TX depth : {:<6} CQ moderation : {}",
                c.qps, c.tx_depth, c.cq_mod
            )?;
        }
        writeln!(
            o,
            " CRC             : {:<6} Max FPDU : {fpdu}",
            if c.crc { "on" } else { "off" }
        )?;
        writeln!(o, " Run             : {amount}; {}", self.placement)?;
        if c.shared_buffers {
            writeln!(
                o,
                " Buffers         : SHARED by all QPs on each side (--shared-buffers: an extra \
                 measurement of what per-QP buffers cost, not perftest's pattern)"
            )?;
        }
        if c.events {
            writeln!(
                o,
                " Waiting         : both sides sleep on completion events (a completion channel: \
                 poll, arm, poll, wait); engine threads do the socket work and block when idle \
                 (spin {} us)",
                c.engine_spin.map_or(0, |d| d.as_micros())
            )?;
        }
        if let Some(clock) = self.clock {
            for l in clock.describe(c.test, c.rdma_cm) {
                writeln!(o, "{l}")?;
            }
        }
        let kinds = c.tcp_kinds();
        if !kinds.is_empty() {
            writeln!(
                o,
                " Baseline        : plain TCP, same sizes and threads, run right before each size ({}):",
                match (c.test.is_bw(), c.tcp_nodelay, super::tcp::streams(c)) {
                    (false, ..) => "TCP_NODELAY".to_string(),
                    (true, true, 1) => "one stream, TCP_NODELAY".to_string(),
                    (true, false, 1) => "one stream, Nagle on".to_string(),
                    (true, true, n) => format!("{n} streams, TCP_NODELAY"),
                    (true, false, n) => format!("{n} streams, Nagle on"),
                }
            )?;
            let streams = super::tcp::streams(c);
            for k in &kinds {
                let what = if streams > 1 {
                    k.describe_streams(streams)
                } else {
                    k.describe(c.test)
                };
                writeln!(o, "   TCP {:<13}: {}", k.label(), what)?;
            }
            writeln!(
                o,
                "   TCP {:<13}: {}",
                "sockets",
                super::tcp_sockets::describe(c.same_host_tcp)
            )?;
            writeln!(
                o,
                " softrnic/TCP    : against the strongest TCP baseline of each size ({}), named",
                if c.test.is_bw() {
                    "highest BW average"
                } else {
                    "lowest t_typical"
                }
            )?;
        }
        writeln!(o, "{RULE}")?;
        if c.test.is_bw() {
            write!(
                o,
                " {:<10} {:<14} {:>18} {:>21} {:>15}",
                "#bytes",
                "#iterations",
                format!("BW peak[{u}]"),
                format!("BW average[{u}]"),
                "MsgRate[Mpps]"
            )?;
            for k in &kinds {
                write!(o, " {:>28}", format!("TCP {} BW avg[{u}]", k.label()))?;
            }
        } else {
            write!(
                o,
                " {:<8} {:<12} {:>12} {:>12} {:>16} {:>12} {:>14} {:>21} {:>23}",
                "#bytes",
                "#iterations",
                "t_min[usec]",
                "t_max[usec]",
                "t_typical[usec]",
                "t_avg[usec]",
                "t_stdev[usec]",
                "99% percentile[usec]",
                "99.9% percentile[usec]"
            )?;
            for k in &kinds {
                write!(
                    o,
                    " {:>30} {:>26}",
                    format!("TCP {} t_typical[usec]", k.label()),
                    format!("TCP {} t_avg[usec]", k.label())
                )?;
            }
        }
        if !kinds.is_empty() {
            write!(o, " {:>13} {:>10}", "softrnic/TCP", "against")?;
        }
        writeln!(o)?;
        o.flush()
    }

    /// One size's results.
    pub fn row(&mut self, r: &ResultRow) -> io::Result<()> {
        if self.cfg.json {
            if let (Some(t), Some(k)) = (&r.tcp, r.tcp_kind) {
                let mut v = self.json_of(r, t, "tcp");
                if let Value::Object(a) = &mut v {
                    a.insert("baseline".into(), json!(k.name()));
                    let all: serde_json::Map<String, Value> = r
                        .baselines
                        .iter()
                        .map(|(k, m)| (k.name().to_string(), self.figures(m)))
                        .collect();
                    a.insert("baselines".into(), Value::Object(all));
                    if let Some(set) = &r.baseline_sockets {
                        a.insert("baseline_sockets".into(), set.json());
                    }
                }
                writeln!(self.out, "{v}")?;
            }
            let mut v = self.json_of(r, &r.softrnic, "softrnic");
            if let Value::Object(a) = &mut v {
                if let (Some(x), Some(k)) = (r.ratio(), r.tcp_kind) {
                    a.insert("ratio_vs_tcp".into(), json!(x));
                    a.insert("ratio_baseline".into(), json!(k.name()));
                }
                if !r.baselines.is_empty() {
                    let ratios: serde_json::Map<String, Value> = r
                        .baselines
                        .iter()
                        .filter_map(|(k, _)| Some((k.name().to_string(), json!(r.ratio_to(*k)?))))
                        .collect();
                    a.insert("ratios_vs_tcp".into(), Value::Object(ratios));
                    if let Some(set) = &r.baseline_sockets {
                        a.insert("baseline_sockets".into(), set.json());
                    }
                }
                if let Measured::Lat(s) = &r.softrnic {
                    let tails: serde_json::Map<String, Value> = r
                        .baselines
                        .iter()
                        .filter_map(|(k, m)| match m {
                            Measured::Lat(t) => Some((k.name().to_string(), lat_ratios(s, t))),
                            Measured::Bw(_) => None,
                        })
                        .collect();
                    if !tails.is_empty() {
                        a.insert("lat_ratios_vs_tcp".into(), Value::Object(tails));
                    }
                }
                if let Some(p) = &r.paired {
                    a.insert("paired".into(), p.json());
                }
                if let Some((Value::Object(x), _)) = self.annotation.take() {
                    a.extend(x);
                }
            }
            writeln!(self.out, "{v}")?;
            return self.out.flush();
        }
        let g = self.cfg.gbits;
        let o = &mut self.out;
        match &r.softrnic {
            Measured::Bw(b) => {
                write!(
                    o,
                    " {:<10} {:<14} {:>18.2} {:>21.2} {:>15.6}",
                    r.size,
                    b.iterations,
                    bw_unit(b.peak_bps, g),
                    bw_unit(b.avg_bps, g),
                    b.msg_rate / 1e6
                )?;
                for (_, m) in &r.baselines {
                    if let Measured::Bw(t) = m {
                        write!(o, " {:>28.2}", bw_unit(t.avg_bps, g))?;
                    }
                }
            }
            Measured::Lat(l) => {
                let s = &l.stats;
                write!(
                    o,
                    " {:<8} {:<12} {:>12.2} {:>12.2} {:>16.2} {:>12.2} {:>14.2} {:>21.2} {:>23.2}",
                    r.size, l.iterations, s.min, s.max, s.typical, s.avg, s.stdev, s.p99, s.p999
                )?;
                for (_, m) in &r.baselines {
                    if let Measured::Lat(t) = m {
                        write!(o, " {:>30.2} {:>26.2}", t.stats.typical, t.stats.avg)?;
                    }
                }
            }
        }
        if !r.baselines.is_empty() {
            let ratio = r
                .ratio()
                .map_or_else(|| "-".to_string(), |x| format!("{x:.2}"));
            let k = r.tcp_kind.map_or("-", TcpKind::label);
            write!(o, " {ratio:>13} {k:>10}")?;
        }
        writeln!(o)?;
        if let Some((_, Some(text))) = self.annotation.take() {
            writeln!(o, "   {text}")?;
        }
        if let Some(p) = &r.paired {
            writeln!(o, "   {}", p.text())?;
        }
        o.flush()
    }

    /// A result's figures, as JSON fields (the part every transport shares).
    fn figures(&self, m: &Measured) -> Value {
        let mut v = self.timing(m);
        if let (Some(u), Value::Object(a)) = (m.cpu(), &mut v) {
            a.extend([
                ("cpu_seconds".to_string(), json!(u.seconds())),
                (
                    "cpu_user_seconds".to_string(),
                    json!(u.time.user.as_secs_f64()),
                ),
                (
                    "cpu_system_seconds".to_string(),
                    json!(u.time.system.as_secs_f64()),
                ),
                ("cpu_s_per_gb".to_string(), json!(u.per_gb())),
                ("cpu_s_per_mmsg".to_string(), json!(u.per_mmsg())),
                ("cpu_scope".to_string(), json!(u.scope())),
            ]);
        }
        v
    }

    fn timing(&self, m: &Measured) -> Value {
        let c = self.cfg;
        match m {
            // A peer's report: not timed here, so no seconds.
            Measured::Bw(b) if b.clock.is_none() => json!({
                "bw_unit": self.unit(),
                "bw_peak": bw_unit(b.peak_bps, c.gbits),
                "bw_average": bw_unit(b.avg_bps, c.gbits),
                "msg_rate_mpps": b.msg_rate / 1e6,
            }),
            Measured::Bw(b) => {
                let mut v = json!({
                    "iterations": b.iterations,
                    "seconds": b.elapsed.as_secs_f64(),
                    "bw_unit": self.unit(),
                    "bw_peak": bw_unit(b.peak_bps, c.gbits),
                    "bw_average": bw_unit(b.avg_bps, c.gbits),
                    "msg_rate_mpps": b.msg_rate / 1e6,
                });
                if let (Some(f), Value::Object(a)) = (b.per_qp, &mut v) {
                    a.insert("per_qp_completions".into(), f.json());
                }
                if let (Some(k), Value::Object(a)) = (b.calls, &mut v) {
                    a.insert("calls".into(), k.json(b.iterations));
                }
                v
            }
            Measured::Lat(l) => json!({
                "iterations": l.iterations,
                "t_min_usec": l.stats.min,
                "t_max_usec": l.stats.max,
                "t_typical_usec": l.stats.typical,
                "t_avg_usec": l.stats.avg,
                "t_stdev_usec": l.stats.stdev,
                "p99_usec": l.stats.p99,
                "p99_9_usec": l.stats.p999,
                "half_round_trip": c.test != super::Test::ReadLat,
            }),
        }
    }

    fn json_of(&self, r: &ResultRow, m: &Measured, transport: &str) -> Value {
        let c = self.cfg;
        let mut v = json!({
            "type": "result",
            "test": c.test.name(),
            "transport": transport,
            "bytes": r.size,
            "iterations": m.iterations(),
            "qps": c.qps,
            "crc": c.crc,
            "markers": c.markers,
            "loopback": c.mode == Mode::Loopback,
        });
        if c.shared_buffers
            && let Value::Object(a) = &mut v
        {
            a.insert("shared_buffers".into(), true.into());
        }
        if transport == "softrnic"
            && let (Some(clock), Value::Object(a)) = (self.clock, &mut v)
        {
            a.insert("clock".into(), json!(clock.code()));
        }
        if let Value::Object(a) = &mut v {
            // softrnic slept on completion events; the baselines beside it do not spin.
            a.insert("events".into(), json!(c.events));
            if transport == "tcp" {
                // One per QP for write_bw and send_bw (see `tcp_streams`).
                a.insert("streams".into(), json!(super::tcp::streams(c)));
            }
        }
        if let (Value::Object(a), Value::Object(b)) = (&mut v, self.figures(m)) {
            a.extend(b);
        }
        v
    }

    /// A free-form line under the table (text mode only), e.g. why a side has no result.
    pub fn note(&mut self, text: &str) -> io::Result<()> {
        if self.cfg.json {
            return Ok(());
        }
        writeln!(self.out, " {text}")?;
        writeln!(self.out, "{RULE}")?;
        self.out.flush()
    }

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
            if c.test == super::Test::ReadLat {
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
            let line = |o: &mut dyn Write, who: &str, l: &super::LatResult| {
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
        }
        where_ran(o, &self.ran)?;
        writeln!(o, "{RULE}")?;
        o.flush()
    }
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
fn cpu_cell(u: Option<&super::CpuUse>, per_gb: bool) -> String {
    let f = |x: Option<f64>| x.map_or_else(|| "-".to_string(), |x| format!("{x:.3}"));
    match u {
        None => "-".into(),
        Some(u) if per_gb => format!("{} / {}", f(u.per_gb()), f(u.per_mmsg())),
        Some(u) => f(u.per_mmsg()),
    }
}

/// softrnic's latency figures over a baseline's, as JSON.
fn lat_ratios(s: &super::LatResult, t: &super::LatResult) -> Value {
    let q = |a: f64, b: f64| if b > 0.0 { json!(a / b) } else { Value::Null };
    let (s, t) = (&s.stats, &t.stats);
    json!({
        "t_typical": q(s.typical, t.typical),
        "t_avg": q(s.avg, t.avg),
        "p99": q(s.p99, t.p99),
        "p99_9": q(s.p999, t.p999),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_sizes() {
        assert_eq!(bw_unit(MB * 3.0, false), 3.0);
        assert_eq!(bw_unit(1.25e9, true), 10.0);
        assert_eq!(human_size(64), "64 B");
        assert_eq!(human_size(4096), "4 KiB");
        assert_eq!(human_size(1 << 20), "1 MiB");
        assert_eq!(human_size(1000), "1000 B");
    }
}
