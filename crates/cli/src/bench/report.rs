//! Output: perftest's tables (one line per size as it completes, then a short summary),
//! or one JSON object per result line.

use super::stats::MB;
use super::{BenchConfig, Clock};
use serde_json::Value;
use std::io::{self, Write};

mod header;
mod row;
mod summary;

pub(crate) const RULE: &str =
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

    /// A free-form line under the table (text mode only), e.g. why a side has no result.
    pub fn note(&mut self, text: &str) -> io::Result<()> {
        if self.cfg.json {
            return Ok(());
        }
        writeln!(self.out, " {text}")?;
        writeln!(self.out, "{RULE}")?;
        self.out.flush()
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
