//! A benchmark run resolved from its command line: every default filled in and every
//! combination checked, so that the runners read one plain structure.

use super::*;

/// Where the run takes place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// Both sides in this process.
    Loopback,
    /// Server, bound to this address.
    Server(String),
    /// Client of this server.
    Client(String),
}

/// A resolved benchmark configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchConfig {
    /// The test.
    pub test: Test,
    /// Message sizes, one round each.
    pub sizes: Vec<usize>,
    /// Iterations per QP (ignored with a duration).
    pub iters: u64,
    /// Duration of each round, instead of iterations.
    pub duration: Option<Duration>,
    /// QPs per round.
    pub qps: u16,
    /// Every QP count asked for (`-q` list; `qps` is the first): the rounds run for
    /// each in turn.
    pub qp_counts: Vec<u16>,
    /// Outstanding work requests per QP.
    pub tx_depth: u32,
    /// Receive depth at the receiver of Sends.
    pub rx_depth: u32,
    /// Signal one work request in this many.
    pub cq_mod: u32,
    /// Gb/s instead of MB/s.
    pub gbits: bool,
    /// Server port.
    pub port: u16,
    /// Loopback, server or client.
    pub mode: Mode,
    /// MPA CRC required.
    pub crc: bool,
    /// MPA markers asked for.
    pub markers: bool,
    /// TCP baseline.
    pub baseline: Option<Baseline>,
    /// TCP baseline stream with TCP_NODELAY.
    pub tcp_nodelay: bool,
    /// Alternating sub-run pairs after each size's headline (an extra measurement).
    pub pairs: u32,
    /// The TCP baseline those pairs run (one `-q` count).
    pub pairs_with: TcpKind,
    /// JSON lines output.
    pub json: bool,
    /// Largest FPDU.
    pub fpdu: Option<usize>,
    /// Devices' progress model.
    pub progress_mode: ProgressMode,
    /// Engine threads per device.
    pub engine_threads: usize,
    /// Engine spin time before blocking.
    pub engine_spin: Option<Duration>,
    /// Loopback: engine threads pinned to their side's CPU.
    pub pin_engines: bool,
    /// Where unpinned engines run.
    pub engine_placement: softrnic_rnic::EnginePlacement,
    /// Kernel socket send buffer shared by a device's connections.
    pub socket_send_budget: Option<usize>,
    /// QPs sending large messages at once, and each one's quantum (device defaults).
    pub tx_turns: Option<usize>,
    pub tx_turn_quantum: Option<usize>,
    pub same_host_tcp: softrnic_rnic::SameHostTcp,
    /// Server thread busy-polls in the one-sided tests.
    pub server_poll: bool,
    /// All QPs of a round share one buffer per side (an extra measurement).
    pub shared_buffers: bool,
    /// Both sides sleep on completion events; engine progress, no spinning.
    pub events: bool,
    /// Server: rounds silent this long are dropped.
    pub idle_timeout: Duration,
    /// Latency warm-up iterations.
    pub warmup: u64,
    /// Latency results keep every sample (the `--pairs` sub-runs, which pool them).
    pub keep_samples: bool,
    /// Progress line on stderr.
    pub show_progress: bool,
    /// QP counters on stderr.
    pub verbose: bool,
    /// perftest's -R exchange instead of softrnic's own.
    pub rdma_cm: bool,
    /// Record this side's connections (the client's in loopback) into this pcap file.
    pub pcap: Option<PathBuf>,
    /// The transport under the QPs.
    pub net: crate::transport::TransportArgs,
}

/// Largest message size (and the top of `-a`).
pub const MAX_SIZE: usize = 8 << 20;

impl BenchConfig {
    /// Fills in perftest's defaults and checks the flags.
    pub fn resolve(test: Test, a: &BenchArgs) -> Result<BenchConfig, String> {
        let sizes = if a.all {
            (1..=23).map(|p| 1usize << p).collect()
        } else if let Some(s) = &a.size {
            s.0.clone()
        } else if test.is_bw() {
            vec![65536]
        } else {
            vec![2]
        };
        if let Some(&s) = sizes.iter().find(|&&s| s > MAX_SIZE) {
            return Err(format!("size {s} above the largest, {MAX_SIZE}"));
        }
        let duration = match a.duration {
            Some(d) if !(d > 0.0 && d <= 3600.0) => {
                return Err("duration must be in (0, 3600] seconds".into());
            }
            Some(d) => Some(Duration::from_secs_f64(d)),
            None => None,
        };
        let iters = a.iters.unwrap_or(if test.is_bw() { 5000 } else { 1000 });
        if iters == 0 {
            return Err("iterations must be at least 1".into());
        }
        let qps = a.qps.first().copied().unwrap_or(1);
        if a.qps.contains(&0) || (a.qps.iter().any(|&q| q > 1) && !test.is_bw()) {
            return Err("-q: 1 or more QPs, and only 1 for latency tests".into());
        }
        if a.qps.len() > 1 && a.rdma_cm {
            return Err("-q: one count with -R".into());
        }
        let tx_depth = if test.is_bw() {
            a.tx_depth.unwrap_or(128)
        } else {
            1
        };
        if !(1..=8192).contains(&tx_depth) {
            return Err("tx depth must be 1..=8192".into());
        }
        let rx_depth = a
            .rx_depth
            .unwrap_or(if test == Test::SendBw { 512 } else { 16 });
        if !(2..=16384).contains(&rx_depth) {
            return Err("rx depth must be 2..=16384".into());
        }
        let cq_mod = a.cq_mod.unwrap_or((tx_depth / 8).max(1));
        if cq_mod == 0 || cq_mod > tx_depth {
            return Err("cq-mod must be 1..=tx depth".into());
        }
        if a.engine_threads == 0 {
            return Err("engine threads must be at least 1".into());
        }
        if a.net.transport.in_process_only() && (!a.loopback || a.rdma_cm) {
            return Err(format!(
                "--transport {} runs both sides in this process: add --loopback (without -R)",
                a.net.transport.name()
            ));
        }
        let frame_link = !a.net.transport.in_process_only()
            && a.net.transport != crate::transport::TransportSpec::Kernel;
        if frame_link && a.loopback {
            return Err(format!(
                "--transport {} is one side's link: run the server and the client apart",
                a.net.transport.name()
            ));
        }
        if frame_link {
            a.net.frame_link()?;
        }
        if a.events {
            match test {
                Test::WriteLat => {
                    return Err(
                        "-e: write_lat's answer is a Write, which completes nothing at \
                                its target, so there is no event to sleep on; use send_lat"
                            .into(),
                    );
                }
                Test::SendBw => {
                    return Err("-e: send_bw's credits come back as RDMA Writes, which \
                                complete nothing at the client, so a client out of credit \
                                would have no event to wake it"
                        .into());
                }
                _ => {}
            }
            if a.rdma_cm || a.server_poll {
                return Err("-e cannot be combined with -R or --server-poll".into());
            }
        }
        super::pairs::check(test, a)?;
        let mode = match (&a.address, a.loopback) {
            (_, true) => Mode::Loopback,
            (Some(addr), false) => Mode::Client(addr.clone()),
            (None, false) => Mode::Server(a.bind.clone()),
        };
        Ok(BenchConfig {
            test,
            sizes,
            iters,
            duration,
            qps,
            qp_counts: if a.qps.is_empty() {
                vec![1]
            } else {
                a.qps.clone()
            },
            tx_depth,
            rx_depth,
            cq_mod,
            gbits: a.report_gbits,
            port: a.port,
            mode,
            crc: a.crc,
            markers: a.markers,
            baseline: a.baseline,
            tcp_nodelay: a.tcp_nodelay,
            pairs: a.pairs,
            pairs_with: a.pairs_with.map_or(super::pairs::KIND, PairsWith::kind),
            json: a.json,
            fpdu: a.fpdu,
            progress_mode: match a.progress_mode {
                _ if a.events => ProgressMode::Engine,
                ProgressArg::Hybrid => ProgressMode::Hybrid,
                ProgressArg::Engine => ProgressMode::Engine,
            },
            engine_threads: a.engine_threads,
            engine_spin: a
                .engine_spin_us
                .or(a.events.then_some(0))
                .map(Duration::from_micros),
            pin_engines: a.pin_engines,
            engine_placement: match a.engine_placement {
                PlacementArg::Follow => softrnic_rnic::EnginePlacement::FollowConsumers,
                PlacementArg::Inherit => softrnic_rnic::EnginePlacement::Inherit,
            },
            socket_send_budget: a.socket_send_budget,
            tx_turns: a.tx_turns,
            tx_turn_quantum: a.tx_turn_quantum,
            same_host_tcp: match a.same_host_tcp {
                SameHostArg::Tuned => softrnic_rnic::SameHostTcp::Tuned,
                SameHostArg::System => softrnic_rnic::SameHostTcp::System,
            },
            server_poll: a.server_poll,
            shared_buffers: a.shared_buffers,
            events: a.events,
            idle_timeout: Duration::from_secs(a.idle_timeout.max(1)),
            warmup: a.warmup,
            keep_samples: false,
            show_progress: !a.quiet,
            verbose: a.verbose,
            rdma_cm: a.rdma_cm,
            pcap: a.pcap.clone(),
            net: a.net.clone(),
        })
        .and_then(|c| {
            if c.rdma_cm {
                rdma_cm::check(&c)?;
            }
            Ok(c)
        })
    }

    /// Whether `--pairs` pairs the first `-q` count with the last (several counts)
    /// rather than softrnic with TCP.
    pub fn count_pairs(&self) -> bool {
        self.pairs > 0 && self.qp_counts.len() > 1
    }

    /// The TCP baselines to run (none without `--baseline`).
    pub fn tcp_kinds(&self) -> Vec<TcpKind> {
        match self.baseline {
            Some(Baseline::Tcp) => TcpKind::for_test(self.test, self.events),
            None => Vec::new(),
        }
    }

    /// What the server side takes from the flags (the rest comes from the client).
    pub fn server_opts(&self) -> server::ServerOpts {
        server::ServerOpts {
            poll: self.server_poll,
            verbose: self.verbose,
            idle: self.idle_timeout,
            ..server::ServerOpts::default()
        }
    }

    /// The device configuration: the defaults with the chosen progress model, FPDU size,
    /// CRC policy, and IRD/ORD 128 (as Linux siw's maximum) so Reads can fill the pipe.
    pub fn device_config(&self) -> DeviceConfig {
        let mut c = DeviceConfig {
            engine_threads: self.engine_threads,
            engine_placement: self.engine_placement,
            progress: self.progress_mode,
            max_fpdu: self.fpdu,
            pcap: self.pcap.clone(),
            same_host_tcp: self.same_host_tcp,
            ..DeviceConfig::default()
        };
        if let Some(s) = self.engine_spin {
            c.engine_spin = s;
        }
        if let Some(b) = self.socket_send_budget {
            c.socket_send_budget = b as u64;
        }
        if let Some(n) = self.tx_turns {
            c.tx_turns = n;
        }
        if let Some(q) = self.tx_turn_quantum {
            c.tx_turn_quantum = q as u64;
        }
        // A frame link (one device per process); a simulated network is set per side.
        c.user_tcp = self.net.frame_link().ok().flatten();
        if self.crc {
            c.mpa.crc = CrcPolicy::Required;
        }
        c.mpa.markers = self.markers;
        c.mpa.ird = 128;
        c.mpa.ord = 128;
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(argv: &[&str]) -> Result<BenchConfig, String> {
        BenchCommand::parse_from(argv.iter().copied())
            .map_err(|e| e.to_string())?
            .config()
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("64"), Ok(64));
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("1m"), Ok(1 << 20));
        assert_eq!(parse_size("8MB"), Ok(8 << 20));
        assert!(parse_size("").is_err());
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("K").is_err());
        assert_eq!(
            parse_size_list("64,4K,64K,1M"),
            Ok(SizeList(vec![64, 4096, 65536, 1 << 20]))
        );
        assert!(parse_size_list("0").is_err());
    }

    #[test]
    fn perftest_defaults() {
        let c = cfg(&["write_bw"]).unwrap();
        assert_eq!(c.test, Test::WriteBw);
        assert_eq!(c.sizes, vec![65536]);
        assert_eq!(
            (c.iters, c.duration, c.qps, c.tx_depth),
            (5000, None, 1, 128)
        );
        assert_eq!(c.cq_mod, 16);
        assert_eq!(c.port, 18515);
        assert_eq!(c.mode, Mode::Server("0.0.0.0".into()));
        assert!(!c.gbits && !c.crc && !c.json && c.baseline.is_none());
        assert_eq!(c.progress_mode, ProgressMode::Hybrid);
        assert_eq!(c.engine_threads, 1);
        let c = cfg(&["send_lat"]).unwrap();
        assert_eq!((c.sizes.clone(), c.iters, c.tx_depth), (vec![2], 1000, 1));
        assert_eq!(cfg(&["send_bw"]).unwrap().rx_depth, 512);
    }

    #[test]
    fn perftest_flags() {
        let c = cfg(&[
            "read_bw",
            "-s",
            "4096",
            "-n",
            "77",
            "-q",
            "4",
            "-t",
            "64",
            "-Q",
            "8",
            "-p",
            "9000",
            "--report_gbits",
            "--crc",
            "--fpdu",
            "16K",
            "--json",
            "10.0.0.1",
        ])
        .unwrap();
        assert_eq!(c.sizes, vec![4096]);
        assert_eq!(
            (c.iters, c.qps, c.tx_depth, c.cq_mod, c.port),
            (77, 4, 64, 8, 9000)
        );
        assert!(c.gbits && c.crc && c.json);
        assert_eq!(c.fpdu, Some(16384));
        assert_eq!(c.mode, Mode::Client("10.0.0.1".into()));
        let d = c.device_config();
        assert_eq!(d.mpa.crc, CrcPolicy::Required);
        assert_eq!(d.max_fpdu, Some(16384));

        let c = cfg(&["write_lat", "--loopback", "-D", "1.5", "--baseline", "tcp"]).unwrap();
        assert_eq!(c.mode, Mode::Loopback);
        assert_eq!(c.duration, Some(Duration::from_millis(1500)));
        assert_eq!(c.baseline, Some(Baseline::Tcp));

        let c = cfg(&["write-bw", "-a", "--report-gbits"]).unwrap();
        assert_eq!(c.sizes.len(), 23);
        assert_eq!((c.sizes[0], c.sizes[22]), (2, 8 << 20));
        assert!(c.gbits);

        let c = cfg(&["send_bw", "-s", "64,4K,64K,1M", "--progress-mode", "engine"]).unwrap();
        assert_eq!(c.sizes, vec![64, 4096, 65536, 1 << 20]);
        assert_eq!(c.progress_mode, ProgressMode::Engine);
        assert_eq!((c.qps, c.qp_counts.clone()), (1, vec![1]));

        let c = cfg(&["write_bw", "-q", "1,16,256"]).unwrap();
        assert_eq!((c.qps, c.qp_counts), (1, vec![1, 16, 256]));
    }

    #[test]
    fn bad_flags() {
        assert!(cfg(&["write_bw", "-n", "5", "-D", "2"]).is_err());
        assert!(cfg(&["write_bw", "-a", "-s", "64"]).is_err());
        assert!(cfg(&["write_bw", "--loopback", "host"]).is_err());
        assert!(cfg(&["write_bw", "-s", "16M"]).is_err());
        assert!(cfg(&["write_bw", "-n", "0"]).is_err());
        assert!(cfg(&["write_bw", "-D", "0"]).is_err());
        assert!(cfg(&["write_lat", "-q", "2"]).is_err());
        assert!(cfg(&["write_lat", "-q", "1,2"]).is_err());
        assert!(cfg(&["write_bw", "-q", "1,0"]).is_err());
        assert!(cfg(&["write_bw", "-R", "-q", "1,2"]).is_err());
        assert!(cfg(&["write_bw", "-t", "8", "-Q", "16"]).is_err());
        assert!(cfg(&["write_bw", "--baseline", "udp"]).is_err());
        assert!(cfg(&["nope_bw"]).is_err());
    }

    /// The row's `tcp` is the strongest baseline: most bandwidth, least typical latency.
    #[test]
    fn the_ratio_is_against_the_strongest_baseline() {
        let bw = |mbs: f64| {
            let t0 = std::time::Instant::now();
            let mut r = stats::BwMeter::start(t0).finish(t0 + Duration::from_secs(1), 10, 1);
            r.avg_bps = mbs;
            Measured::Bw(r)
        };
        let row = ResultRow::new(
            Test::WriteBw,
            64,
            bw(100.0),
            vec![
                (TcpKind::Blocking, bw(50.0)),
                (TcpKind::BusyPoll, bw(80.0)),
                (TcpKind::Batching, bw(400.0)),
            ],
        );
        assert_eq!(row.tcp_kind, Some(TcpKind::Batching));
        assert_eq!(row.ratio(), Some(0.25));
        assert_eq!(row.ratio_to(TcpKind::Blocking), Some(2.0));
        let lat = |typical: f64| {
            let s = [typical];
            Measured::Lat(LatResult {
                bytes: 8,
                iterations: 1,
                stats: LatStats::from_samples(&s).unwrap(),
                cpu: None,
                samples: None,
            })
        };
        let row = ResultRow::new(
            Test::SendLat,
            8,
            lat(6.0),
            vec![
                (TcpKind::Blocking, lat(40.0)),
                (TcpKind::BusyPoll, lat(4.0)),
            ],
        );
        assert_eq!(row.tcp_kind, Some(TcpKind::BusyPoll));
        assert_eq!(row.ratio(), Some(1.5));
        let none = ResultRow::new(Test::SendLat, 8, lat(6.0), Vec::new());
        assert_eq!(
            (&none.tcp, none.tcp_kind, none.ratio()),
            (&None, None, None)
        );
    }

    #[test]
    fn test_codes() {
        for t in Test::ALL {
            assert_eq!(Test::from_code(t.code()), Some(t));
        }
        assert_eq!(Test::from_code(6), None);
    }

    #[test]
    fn addresses() {
        assert_eq!(
            resolve_addr("127.0.0.1", 18515).unwrap(),
            "127.0.0.1:18515".parse().unwrap()
        );
        assert_eq!(
            resolve_addr("127.0.0.1:9", 18515).unwrap(),
            "127.0.0.1:9".parse().unwrap()
        );
        assert_eq!(resolve_addr("::1", 7).unwrap(), "[::1]:7".parse().unwrap());
    }
}
