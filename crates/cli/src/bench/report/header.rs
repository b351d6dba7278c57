//! The text header of a run: the test, its parameters, what the figures mean, and
//! the column titles.

use super::{RULE, Reporter};
use std::io::{self, Write};

impl Reporter<'_> {
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
                match (c.test.is_bw(), c.tcp_nodelay, crate::bench::tcp::streams(c)) {
                    (false, ..) => "TCP_NODELAY".to_string(),
                    (true, true, 1) => "one stream, TCP_NODELAY".to_string(),
                    (true, false, 1) => "one stream, Nagle on".to_string(),
                    (true, true, n) => format!("{n} streams, TCP_NODELAY"),
                    (true, false, n) => format!("{n} streams, Nagle on"),
                }
            )?;
            let streams = crate::bench::tcp::streams(c);
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
                crate::bench::tcp_sockets::describe(c.same_host_tcp)
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
}
