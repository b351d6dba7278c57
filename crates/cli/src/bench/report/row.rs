//! One size's results as they complete: a table line (text) or JSON lines.

use super::{Reporter, bw_unit};
use crate::bench::{Measured, Mode, ResultRow, TcpKind};
use serde_json::{Value, json};
use std::io::{self, Write};

impl Reporter<'_> {
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
                "half_round_trip": c.test != crate::bench::Test::ReadLat,
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
                a.insert("streams".into(), json!(crate::bench::tcp::streams(c)));
            }
        }
        if let (Value::Object(a), Value::Object(b)) = (&mut v, self.figures(m)) {
            a.extend(b);
        }
        v
    }
}

/// softrnic's latency figures over a baseline's, as JSON.
fn lat_ratios(s: &crate::bench::LatResult, t: &crate::bench::LatResult) -> Value {
    let q = |a: f64, b: f64| if b > 0.0 { json!(a / b) } else { Value::Null };
    let (s, t) = (&s.stats, &t.stats);
    json!({
        "t_typical": q(s.typical, t.typical),
        "t_avg": q(s.avg, t.avg),
        "p99": q(s.p99, t.p99),
        "p99_9": q(s.p999, t.p999),
    })
}
