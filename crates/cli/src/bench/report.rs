//! Output: perftest's tables (one line per size as it completes, then a short summary),
//! or one JSON object per result line.

use super::stats::MB;
use super::{BenchConfig, Clock, Measured, Mode, ResultRow};
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
        }
    }

    /// Adds `fields` to the next row's softrnic JSON line, and `text` under the row in
    /// text mode (the transport and what it did).
    pub fn annotate(&mut self, fields: Value, text: Option<String>) {
        self.annotation = Some((fields, text));
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
        if let Some(clock) = self.clock {
            for l in clock.describe(c.test, c.rdma_cm) {
                writeln!(o, "{l}")?;
            }
        }
        if let Some(super::Baseline::Tcp) = c.baseline {
            writeln!(
                o,
                " Baseline        : plain TCP ({}, same sizes and threads), run right before each size",
                if c.test.is_bw() && c.tcp_nodelay {
                    "one stream, TCP_NODELAY, writes and reads of the message size"
                } else if c.test.is_bw() {
                    "one stream, Nagle on, writes and reads of the message size"
                } else {
                    "busy-polling ping-pong on non-blocking sockets"
                }
            )?;
        }
        writeln!(o, "{RULE}")?;
        let base = c.baseline.is_some();
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
            if base {
                write!(
                    o,
                    " {:>24} {:>19} {:>13}",
                    format!("TCP BW average[{u}]"),
                    "TCP MsgRate[Mpps]",
                    "softrnic/TCP"
                )?;
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
            if base {
                write!(
                    o,
                    " {:>20} {:>16} {:>13}",
                    "TCP t_typical[usec]", "TCP t_avg[usec]", "softrnic/TCP"
                )?;
            }
        }
        writeln!(o)?;
        o.flush()
    }

    /// One size's results.
    pub fn row(&mut self, r: &ResultRow) -> io::Result<()> {
        if self.cfg.json {
            if let Some(t) = &r.tcp {
                let v = self.json_of(r, t, "tcp", None);
                writeln!(self.out, "{v}")?;
            }
            let mut v = self.json_of(r, &r.softrnic, "softrnic", r.ratio());
            if let (Some((Value::Object(x), _)), Value::Object(m)) =
                (self.annotation.take(), &mut v)
            {
                m.extend(x);
            }
            writeln!(self.out, "{v}")?;
            return self.out.flush();
        }
        let g = self.cfg.gbits;
        let ratio = r
            .ratio()
            .map_or_else(|| "-".to_string(), |x| format!("{x:.2}"));
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
                if let Some(Measured::Bw(t)) = &r.tcp {
                    write!(
                        o,
                        " {:>24.2} {:>19.6} {:>13}",
                        bw_unit(t.avg_bps, g),
                        t.msg_rate / 1e6,
                        ratio
                    )?;
                }
            }
            Measured::Lat(l) => {
                let s = &l.stats;
                write!(
                    o,
                    " {:<8} {:<12} {:>12.2} {:>12.2} {:>16.2} {:>12.2} {:>14.2} {:>21.2} {:>23.2}",
                    r.size, l.iterations, s.min, s.max, s.typical, s.avg, s.stdev, s.p99, s.p999
                )?;
                if let Some(Measured::Lat(t)) = &r.tcp {
                    write!(
                        o,
                        " {:>20.2} {:>16.2} {:>13}",
                        t.stats.typical, t.stats.avg, ratio
                    )?;
                }
            }
        }
        writeln!(o)?;
        if let Some((_, Some(text))) = self.annotation.take() {
            writeln!(o, "   {text}")?;
        }
        o.flush()
    }

    fn json_of(&self, r: &ResultRow, m: &Measured, transport: &str, ratio: Option<f64>) -> Value {
        let c = self.cfg;
        let mut v = json!({
            "type": "result",
            "test": c.test.name(),
            "transport": transport,
            "bytes": r.size,
            "iterations": m.iterations(),
            "qps": c.qps,
            "crc": c.crc,
            "loopback": c.mode == Mode::Loopback,
        });
        if transport == "softrnic"
            && let (Some(clock), Value::Object(a)) = (self.clock, &mut v)
        {
            a.insert("clock".into(), json!(clock.code()));
        }
        let extra = match m {
            // A peer's report: not timed here, so no seconds.
            Measured::Bw(b) if b.clock.is_none() => json!({
                "bw_unit": self.unit(),
                "bw_peak": bw_unit(b.peak_bps, c.gbits),
                "bw_average": bw_unit(b.avg_bps, c.gbits),
                "msg_rate_mpps": b.msg_rate / 1e6,
            }),
            Measured::Bw(b) => json!({
                "seconds": b.elapsed.as_secs_f64(),
                "bw_unit": self.unit(),
                "bw_peak": bw_unit(b.peak_bps, c.gbits),
                "bw_average": bw_unit(b.avg_bps, c.gbits),
                "msg_rate_mpps": b.msg_rate / 1e6,
            }),
            Measured::Lat(l) => json!({
                "t_min_usec": l.stats.min,
                "t_max_usec": l.stats.max,
                "t_typical_usec": l.stats.typical,
                "t_avg_usec": l.stats.avg,
                "t_stdev_usec": l.stats.stdev,
                "p99_usec": l.stats.p99,
                "p99_9_usec": l.stats.p999,
                "half_round_trip": c.test != super::Test::ReadLat,
            }),
        };
        if let (Value::Object(a), Value::Object(b)) = (&mut v, extra) {
            a.extend(b);
            if let Some(x) = ratio {
                a.insert("ratio_vs_tcp".into(), json!(x));
            }
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

    /// The closing short table: one line per size, softrnic against the baseline.
    pub fn summary(&mut self, rows: &[ResultRow]) -> io::Result<()> {
        if self.cfg.json {
            return Ok(());
        }
        let c = self.cfg;
        let bw = c.test.is_bw();
        let what = if bw {
            format!("BW average, {}", self.unit())
        } else if c.test == super::Test::ReadLat {
            "t_typical, usec, full round trip".to_string()
        } else {
            "t_typical, usec, half round trip".to_string()
        };
        let base = c.baseline.is_some();
        let o = &mut self.out;
        writeln!(o, "{RULE}")?;
        writeln!(
            o,
            " summary: {}, {} QP(s), CRC {} ({what}{})",
            c.test.name(),
            c.qps,
            if c.crc { "on" } else { "off" },
            if base && !bw {
                "; ratio below 1: softrnic faster"
            } else {
                ""
            }
        )?;
        if base {
            writeln!(
                o,
                " {:>10} {:>12} {:>12} {:>13}",
                "size", "softrnic", "TCP", "softrnic/TCP"
            )?;
        } else {
            writeln!(o, " {:>10} {:>12}", "size", "softrnic")?;
        }
        let val = |m: &Measured| match m {
            Measured::Bw(b) => bw_unit(b.avg_bps, c.gbits),
            Measured::Lat(l) => l.stats.typical,
        };
        for r in rows {
            write!(o, " {:>10} {:>12.2}", human_size(r.size), val(&r.softrnic))?;
            if base {
                let t = r
                    .tcp
                    .as_ref()
                    .map_or_else(|| "-".into(), |t| format!("{:.2}", val(t)));
                let x = r.ratio().map_or_else(|| "-".into(), |x| format!("{x:.2}"));
                write!(o, " {t:>12} {x:>13}")?;
            }
            writeln!(o)?;
        }
        writeln!(o, "{RULE}")?;
        o.flush()
    }
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
