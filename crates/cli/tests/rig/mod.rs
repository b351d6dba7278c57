//! Drives `../shared/rig` (a QEMU guest running Linux's siw) from tests: builds it once,
//! boots one guest at a time, and reads back what the guest printed and captured.
//!
//! A test that needs the rig calls [`rig()`]; when the rig cannot be built here (no
//! qemu, no Debian mirror...) it gets `None` after one loud message on stderr and
//! returns. Setting `SOFTRNIC_RIG=require` turns that skip into a failure, and
//! `SOFTRNIC_RIG=skip` skips on purpose (also loudly).

#![allow(dead_code)]

use softrnic_capture::read_capture;
use softrnic_cli::decode::{ConnectionDecode, decode_all};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};

/// The built rig, ready to boot guests.
pub struct Rig {
    dir: PathBuf,
    scratch: PathBuf,
}

/// A guest that was booted by [`Rig::serve`]; stopped when dropped.
pub struct Served<'a> {
    rig: &'a Rig,
    name: String,
    pcap: Option<PathBuf>,
    capture: Option<HostCapture>,
    done: bool,
}

/// What a finished guest left: the command's output and its capture.
pub struct Finished {
    /// The guest command's exit status (as the rig reports it).
    pub success: bool,
    /// What the rig and the guest command printed.
    pub output: String,
    /// The capture, decoded, when one was asked for.
    pub conns: Vec<ConnectionDecode>,
}

/// How long [`Served::wait`] waits for a guest's server command to end.
const WAIT_LIMIT_SECS: u64 = 180;

static BUILT: OnceLock<Result<Rig, String>> = OnceLock::new();
static ONE_GUEST: Mutex<()> = Mutex::new(());

use softrnic_testkit::rig::dir as rig_dir;
use softrnic_testkit::text;
pub use softrnic_testkit::{record, skip_test};

fn skip(why: &str) -> Option<&'static Rig> {
    skip_test("siw interop test", why);
    None
}

/// The rig, built on first use; `None` (after a loud message) when it cannot be built.
pub fn rig() -> Option<&'static Rig> {
    let built = BUILT.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/rig");
        if softrnic_testkit::rig::skipped_on_purpose() {
            return Err("SOFTRNIC_RIG=skip".into());
        }
        if Command::new("dumpcap").arg("-v").output().is_err() {
            return Err(
                "dumpcap is not installed (Debian package tshark; .ci/run installs \
                        it): the guest's own capture loses packets under emulation"
                    .into(),
            );
        }
        if !dir.join("siw-vm.sh").exists() {
            return Err(format!("no rig at {}", dir.display()));
        }
        let scratch = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("siw-interop");
        std::fs::create_dir_all(&scratch).expect("scratch directory");
        match Command::new(dir.join("build-artifacts.sh")).output() {
            Ok(o) if o.status.success() => Ok(Rig { dir, scratch }),
            Ok(o) => Err(format!(
                "build-artifacts.sh failed: {}",
                String::from_utf8_lossy(&o.stderr)
            )),
            Err(e) => Err(format!("build-artifacts.sh did not run: {e}")),
        }
    });
    match built {
        Ok(r) => {
            record("ran");
            Some(r)
        }
        Err(why) => skip(why),
    }
}

/// The one-guest-at-a-time lock, held by a test for as long as its guest lives.
pub struct GuestLock {
    _machine: std::fs::File,
    _process: MutexGuard<'static, ()>,
}

/// Takes the one-guest-at-a-time lock: within this test binary (a mutex) and across
/// every process on the machine ([`softrnic_testkit::rig::lock_guest`]). The lock
/// goes with the process.
pub fn one_guest() -> GuestLock {
    let process = ONE_GUEST.lock().unwrap_or_else(|p| p.into_inner());
    GuestLock {
        _machine: softrnic_testkit::rig::lock_guest(),
        _process: process,
    }
}

/// Decodes a capture into its iWARP connections (empty when the file is missing).
pub fn decode(pcap: &Path) -> Vec<ConnectionDecode> {
    match read_capture(pcap) {
        Ok(conns) => decode_all(&conns),
        Err(e) => panic!("capture {}: {e}", pcap.display()),
    }
}

/// A host-side capture (dumpcap on loopback, where the guest's traffic enters the host
/// through QEMU's user network). Lossless, unlike a capture inside the emulated guest,
/// which drops packets of large transfers.
///
/// dumpcap says "Capturing on" a little before its filter really runs, and a SIGINT
/// loses what it has not written yet. So the capture also watches a marker port of its
/// own: [`HostCapture::start`] returns only once a connection to the marker shows up
/// in the file, and [`HostCapture::stop`] makes one more and waits for it to show up
/// before it stops dumpcap; everything in between is in the file.
pub struct HostCapture {
    child: Child,
    path: PathBuf,
    marker: std::net::TcpListener,
    marks_seen: usize,
}

impl HostCapture {
    /// Starts capturing TCP `ports` on `lo`. `None` when dumpcap cannot start or never
    /// captures (the guest's own capture is used then).
    pub fn start(dir: &Path, name: &str, ports: &[u16]) -> Option<HostCapture> {
        let marker = std::net::TcpListener::bind("127.0.0.1:0").ok()?;
        let marker_port = marker.local_addr().ok()?.port();
        let filter = ports
            .iter()
            .chain([&marker_port])
            .map(|p| format!("tcp port {p}"))
            .collect::<Vec<_>>()
            .join(" or ");
        let path = dir.join(format!("{name}-host.pcap"));
        let _ = std::fs::remove_file(&path);
        let mut child = Command::new("dumpcap")
            .args(["-i", "lo", "-q", "-f", &filter, "-w"])
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .ok()?;
        let err = child.stderr.take().expect("piped stderr");
        std::thread::spawn(move || BufReader::new(err).lines().for_each(drop));
        let mut c = HostCapture {
            child,
            path,
            marker,
            marks_seen: 0,
        };
        if c.mark() { Some(c) } else { None }
    }

    /// Connections to the marker port in the file so far.
    fn marks_in_file(&self) -> usize {
        let port = self.marker.local_addr().map(|a| a.port()).unwrap_or(0);
        std::fs::read(&self.path)
            .ok()
            .and_then(|d| softrnic_capture::parse_capture(&d).ok())
            .map_or(0, |conns| {
                conns.iter().filter(|c| c.server.port == port).count()
            })
    }

    /// Connects to the marker port until a new connection to it is in the file.
    fn mark(&mut self) -> bool {
        let addr = self.marker.local_addr().expect("marker bound");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while std::time::Instant::now() < deadline {
            let _ = std::net::TcpStream::connect(addr);
            for _ in 0..20 {
                let seen = self.marks_in_file();
                if seen > self.marks_seen {
                    self.marks_seen = seen;
                    return true;
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        }
        false
    }

    /// Stops the capture and decodes it (the marker's connections left out).
    pub fn finish(self) -> Vec<ConnectionDecode> {
        self.finish_with_path().1
    }

    /// [`HostCapture::finish`], also giving the file's path.
    pub fn finish_with_path(self) -> (PathBuf, Vec<ConnectionDecode>) {
        let marker = self.marker.local_addr().map(|a| a.port()).unwrap_or(0);
        let path = self.stop();
        let conns = decode(&path)
            .into_iter()
            .filter(|c| c.server.port != marker)
            .collect();
        (path, conns)
    }

    /// Stops the capture once everything so far is in the file; returns its path.
    fn stop(mut self) -> PathBuf {
        assert!(
            self.mark(),
            "dumpcap stopped writing {}",
            self.path.display()
        );
        let _ = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
        self.path.clone()
    }
}

impl Drop for HostCapture {
    /// A test that fails before it stops its capture must not leave dumpcap running.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Rig {
    fn script(&self) -> PathBuf {
        self.dir.join("siw-vm.sh")
    }

    /// A file for this test's capture.
    pub fn pcap_path(&self, name: &str) -> PathBuf {
        self.scratch.join(format!("{name}.pcap"))
    }

    /// Boots a guest running the siw server `cmd` (restarted after each client when
    /// `repeat`), its port forwarded to host `127.0.0.1:host_port`. Panics if the guest
    /// does not come up: the rig was built, so a boot failure is a failure.
    pub fn serve(
        &self,
        name: &str,
        cmd: &str,
        host_port: u16,
        guest_port: u16,
        repeat: bool,
        siw_params: &[&str],
    ) -> Served<'_> {
        self.serve_ports(name, cmd, &[(host_port, guest_port)], repeat, siw_params)
    }

    /// [`Rig::serve`] with several forwarded ports, `(host, guest)`; READY waits for the
    /// first guest port to listen.
    pub fn serve_ports(
        &self,
        name: &str,
        cmd: &str,
        ports: &[(u16, u16)],
        repeat: bool,
        siw_params: &[&str],
    ) -> Served<'_> {
        let pcap = self.pcap_path(name);
        let _ = std::fs::remove_file(&pcap);
        let hosts: Vec<u16> = ports.iter().map(|p| p.0).collect();
        let capture = HostCapture::start(&self.scratch, name, &hosts);
        let mut c = Command::new(self.script());
        c.args(["serve", cmd, "--name", name])
            .args(["--port", &ports[0].1.to_string()]);
        for (h, g) in ports {
            c.args(["--fwd", &format!("{h}:{g}")]);
        }
        if capture.is_none() {
            c.arg("--pcap").arg(&pcap);
        }
        if repeat {
            c.arg("--loop");
        }
        for p in siw_params {
            c.args(["--siw", p]);
        }
        let o = c.output().expect("siw-vm.sh serve runs");
        let out = text(&o);
        assert!(
            o.status.success() && out.contains("READY"),
            "siw guest did not come up:\n{out}"
        );
        Served {
            rig: self,
            name: name.to_string(),
            pcap: Some(pcap),
            capture,
            done: false,
        }
    }

    /// Boots a guest that runs the siw client `cmd` (it reaches the host as
    /// `$HOST_IP`), waits for it, and returns what it did; the traffic to host
    /// `ports` is captured.
    pub fn client(&self, name: &str, cmd: &str, ports: &[u16], siw_params: &[&str]) -> Finished {
        let pcap = self.pcap_path(name);
        let _ = std::fs::remove_file(&pcap);
        let capture = HostCapture::start(&self.scratch, name, ports);
        let mut c = Command::new(self.script());
        c.args(["client", cmd, "--name", name, "--timeout", "300"]);
        if capture.is_none() {
            c.arg("--pcap").arg(&pcap);
        }
        for p in siw_params {
            c.args(["--siw", p]);
        }
        let o = c.output().expect("siw-vm.sh client runs");
        let output = text(&o);
        assert!(
            !output.contains("kernel BUG"),
            "the siw guest's kernel crashed:\n{output}"
        );
        let conns = match capture {
            Some(c) => c.finish(),
            None if pcap.exists() => decode(&pcap),
            None => Vec::new(),
        };
        Finished {
            success: o.status.success(),
            conns,
            output,
        }
    }

    /// The guest's console log (kernel messages), for diagnosis.
    pub fn console(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir_of(name).join("console.log")).unwrap_or_default()
    }

    fn dir_of(&self, name: &str) -> PathBuf {
        rig_dir().join("run").join(name)
    }
}

impl Served<'_> {
    fn finish(&mut self, verb: &str) -> Finished {
        self.done = true;
        // `siw-vm.sh wait` has no limit of its own: a hung guest command must not hang
        // the test, so it is stopped after WAIT_LIMIT_SECS.
        let o = Command::new("timeout")
            .arg(WAIT_LIMIT_SECS.to_string())
            .arg(self.rig.script())
            .args([verb, "--name", &self.name])
            .output()
            .expect("siw-vm.sh runs");
        let mut output = text(&o);
        if o.status.code() == Some(124) {
            output.push_str("\n(the guest command did not end in time: stopped)\n");
            let s = Command::new(self.rig.script())
                .args(["stop", "--name", &self.name])
                .output()
                .expect("siw-vm.sh stop runs");
            output.push_str(&text(&s));
        }
        let console = self.rig.console(&self.name);
        if console.contains("kernel BUG") {
            output.push_str("\n--- guest console ---\n");
            output.push_str(&console);
        }
        let conns = match (self.capture.take(), &self.pcap) {
            (Some(c), _) => c.finish(),
            (None, Some(p)) if p.exists() => decode(p),
            _ => Vec::new(),
        };
        Finished {
            success: o.status.success(),
            output,
            conns,
        }
    }

    /// Waits for the server command to end by itself.
    pub fn wait(mut self) -> Finished {
        self.finish("wait")
    }

    /// Stops the guest now (the capture is flushed first).
    pub fn stop(mut self) -> Finished {
        self.finish("stop")
    }
}

impl Drop for Served<'_> {
    fn drop(&mut self) {
        if !self.done {
            let _ = Command::new(self.rig.script())
                .args(["stop", "--name", &self.name])
                .output();
        }
    }
}

/// The line that marks where a siw rping client's run begins in a guest's output.
const RPING_START: &str = "rping-start";
/// The prefix of the line that gives a siw rping client's exit status.
const RPING_RC: &str = "rping-rc=";

/// A guest command that runs each of `clients` (one siw `rping -c` command line each)
/// in turn, whatever the one before did, and marks each run's start and exit status
/// for [`rping_runs`].
pub fn each_rping(clients: &[String]) -> String {
    clients
        .iter()
        .map(|c| format!("echo {RPING_START}; {c}; echo {RPING_RC}$?"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// One siw rping client's run in the output of an [`each_rping`] command.
#[derive(Debug)]
pub struct RpingRun {
    /// Its exit status (`None`: the run never ended).
    pub rc: Option<i32>,
    /// What it printed.
    pub lines: Vec<String>,
}

/// The runs of an [`each_rping`] command, in order, from the guest's `output` (the
/// rig also echoes the command, whose markers are not whole lines).
pub fn rping_runs(output: &str) -> Vec<RpingRun> {
    let mut runs: Vec<RpingRun> = Vec::new();
    for line in output.lines().map(str::trim) {
        if line == RPING_START {
            runs.push(RpingRun {
                rc: None,
                lines: Vec::new(),
            });
        } else if let Some(run) = runs.last_mut().filter(|r| r.rc.is_none()) {
            match line.strip_prefix(RPING_RC) {
                Some(rc) => run.rc = Some(rc.parse().unwrap_or(-1)),
                None => run.lines.push(line.to_string()),
            }
        }
    }
    runs
}

impl RpingRun {
    /// Whether rping reports its conversation done: exit status 0, or rping's own
    /// teardown race as its only complaint (besides its data and disconnect lines). rping before rdma-core PR 1622 (2025;
    /// Debian bookworm's is older) lets its connection-event thread read the event
    /// channel again after the main thread, done, has destroyed it: it prints
    /// `rdma_get_cm_event: Bad file descriptor` and exits 255 after a run that went
    /// well. Whether it did is for the caller to check (the server's count, the wire).
    pub fn ok(&self) -> bool {
        let complaints: Vec<&str> = self
            .lines
            .iter()
            .map(String::as_str)
            .filter(|l| !l.starts_with("ping data: ") && *l != "client DISCONNECT EVENT...")
            .collect();
        match self.rc {
            Some(0) => true,
            Some(255) => complaints == ["rdma_get_cm_event: Bad file descriptor"],
            _ => false,
        }
    }
}
