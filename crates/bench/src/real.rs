//! `tierkv-bench real`: tierkv beside memcached where users run them. The servers are not
//! pinned; `-t` is 1 and 2; 0, 1 and 3 processes that only burn CPU run beside them (their own
//! progress, iterations per second, is reported, so a server that wins by starving its
//! neighbours shows it); the loads are memcached's own tool (`memcaslap`, text and binary)
//! and this crate's load generator in memcaslap's shape (90% gets, 64 connections, pipeline 1)
//! for latency percentiles, closed loop (saturation) and open loop (a fixed offered rate),
//! and in YCSB-B's shape at pipeline 1 and 16. Every round starts each server afresh, in turn.
//!
//! It must not fail on a figure: it prints what it measured.

use crate::loadgen::{self, process_cpu_seconds, Protocol, RunConfig};
use crate::workload::Distribution;
use std::fmt::Write as _;
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One kind of load.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Load {
    /// `memcaslap -T 2 -c 32`, text or binary (`-B`).
    Caslap {
        /// memcached's binary protocol.
        binary: bool,
    },
    /// The load generator in memcaslap's shape: 90% gets, `connections`, pipeline 1, closed
    /// loop, or open loop at `rate` requests/s.
    Mix {
        /// memcached's binary protocol.
        binary: bool,
        /// Client connections.
        connections: usize,
        /// Open loop at this many requests/s (None: closed loop).
        rate: Option<f64>,
    },
    /// YCSB-B (95% gets, zipf 0.99) at `pipeline`, 50 connections, closed loop.
    YcsbB {
        /// Requests in flight per connection.
        pipeline: usize,
    },
}

impl Load {
    /// Parses `caslap`, `caslap-binary`, `mix:CONNS[:RATE]`, `mix-binary:CONNS[:RATE]`,
    /// `ycsb-b:PIPELINE`.
    pub fn parse(text: &str) -> Result<Load, String> {
        let bad = || format!("load {text:?}: caslap, caslap-binary, mix:CONNS[:RATE], mix-binary:..., ycsb-b:DEPTH");
        let mut parts = text.split(':');
        let name = parts.next().ok_or_else(bad)?;
        let mut number = || parts.next().map(|part| part.parse::<f64>().map_err(|_| bad())).transpose();
        Ok(match name {
            "caslap" => Load::Caslap { binary: false },
            "caslap-binary" => Load::Caslap { binary: true },
            "mix" | "mix-binary" => {
                let connections = number()?.ok_or_else(bad)? as usize;
                Load::Mix { binary: name == "mix-binary", connections, rate: number()? }
            }
            "ycsb-b" => Load::YcsbB { pipeline: number()?.ok_or_else(bad)? as usize },
            _ => return Err(bad()),
        })
    }

    fn name(&self) -> String {
        match self {
            Load::Caslap { binary } => format!("memcaslap{}", if *binary { " -B" } else { "" }),
            Load::Mix { binary, connections, rate } => format!(
                "mix {} p1 x{connections} {}",
                if *binary { "binary" } else { "text" },
                rate.map_or("closed".to_string(), |rate| format!("open {:.0}k/s", rate / 1000.0))
            ),
            Load::YcsbB { pipeline } => format!("YCSB-B p{pipeline} x50"),
        }
    }
}

/// What to measure.
#[derive(Clone, Debug)]
pub struct RealConfig {
    /// The tierkv binary.
    pub tierkv_bin: PathBuf,
    /// More arguments for tierkv (after `-t`, `-m`, `-l`, `-p`).
    pub tierkv_args: Vec<String>,
    /// Servers, by name: `tierkv`, `memcached`.
    pub servers: Vec<String>,
    /// Worker threads (`-t`) for both servers.
    pub threads: Vec<usize>,
    /// Busy processes beside the servers.
    pub busy: Vec<usize>,
    /// Loads run on every server.
    pub loads: Vec<Load>,
    /// Seconds each load runs.
    pub seconds: f64,
    /// Rounds (every server once per round, in turn; every other round in reverse).
    pub rounds: usize,
    /// Item memory (-m) of each server.
    pub memory_mib: usize,
    /// Keys preloaded for the load generator's runs (memcaslap writes its own).
    pub keys: u64,
    /// Where real.md goes.
    pub out: PathBuf,
    /// A cgroup directory (with a CPU quota, say) each server is moved into once started.
    pub server_cgroup: Option<PathBuf>,
    /// How long the busy processes run before each load starts.
    pub busy_lead: Duration,
}

/// One measured run.
#[derive(Clone, Debug)]
pub struct RealRow {
    /// `tierkv` or `memcached`.
    pub server: String,
    /// Worker threads (`-t`).
    pub threads: usize,
    /// Busy processes beside the server.
    pub busy: usize,
    /// The load's name.
    pub load: String,
    /// Which round (0-based).
    pub round: usize,
    /// Requests answered per second.
    pub requests_per_sec: f64,
    /// p50, p99, p99.9 in microseconds (None for memcaslap, which does not report them).
    pub latency_us: Option<[f64; 3]>,
    /// The run's length in seconds.
    pub seconds: f64,
    /// The server's CPU seconds over the run.
    pub server_cpu_seconds: f64,
    /// The busy processes' iterations per second, summed.
    pub busy_iterations_per_sec: f64,
}

struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts a server unpinned with `threads` workers on a free port.
fn start(server: &str, config: &RealConfig, threads: usize) -> Result<(Running, u16), String> {
    let port = crate::ports::free_port()?;
    let (t, m, p) = (threads.to_string(), config.memory_mib.to_string(), port.to_string());
    let mut command = match server {
        "tierkv" => Command::new(&config.tierkv_bin),
        "memcached" => {
            let mut command = Command::new("memcached");
            command.args(["-U", "0", "-u", "root"]);
            command
        }
        other => return Err(format!("unknown server {other:?}: tierkv or memcached")),
    };
    command.args(["-t", &t, "-m", &m, "-l", "127.0.0.1", "-p", &p]);
    if server == "tierkv" {
        command.args(&config.tierkv_args);
    }
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {server}: {e}"))?;
    let running = Running(child);
    if let Some(group) = &config.server_cgroup {
        let procs = group.join("cgroup.procs");
        std::fs::write(&procs, running.0.id().to_string()).map_err(|e| format!("{}: {e}", procs.display()))?;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            return Err(format!("{server} did not listen on port {port} within 30 s"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok((running, port))
}

/// Starts `count` processes that burn CPU for `seconds` and report their iterations/s.
fn start_busy(count: usize, seconds: f64) -> Result<Vec<Child>, String> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    (0..count)
        .map(|_| {
            Command::new(&me)
                .args(["burn", "--seconds", &seconds.to_string()])
                .stdout(Stdio::piped())
                .spawn()
                .map_err(|e| format!("cannot start a busy process: {e}"))
        })
        .collect()
}

/// The busy processes' iterations per second, summed.
fn finish_busy(children: Vec<Child>) -> f64 {
    children
        .into_iter()
        .filter_map(|child| child.wait_with_output().ok())
        .filter_map(|output| String::from_utf8_lossy(&output.stdout).trim().parse::<f64>().ok())
        .fold(0.0, |sum, rate| sum + rate)
}

/// `tierkv-bench burn`: spins for `seconds`, then prints its iterations per second.
pub fn burn(seconds: f64) {
    let start = Instant::now();
    let (mut iterations, mut x) = (0u64, 1u64);
    while start.elapsed().as_secs_f64() < seconds {
        for _ in 0..10_000 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        iterations += 10_000;
    }
    println!("{:.0}", iterations as f64 / start.elapsed().as_secs_f64());
}

/// memcaslap's requests/s against `port` (the TPS of its summary line).
fn caslap(port: u16, binary: bool, seconds: f64) -> Result<f64, String> {
    let mut command = Command::new("memcaslap");
    let time = format!("{}s", seconds.round() as u64);
    command.args(["-s", &format!("127.0.0.1:{port}"), "-T", "2", "-c", "32", "-t", &time]);
    if binary {
        command.arg("-B");
    }
    let output = command.output().map_err(|e| format!("memcaslap (apt-get install libmemcached-tools): {e}"))?;
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines()
        .filter(|line| line.starts_with("Run time"))
        .find_map(|line| line.split("TPS: ").nth(1)?.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| format!("memcaslap printed no TPS: {}", text.lines().last().unwrap_or("")))
}

/// The load generator's settings for `load` against `target`.
fn run_config(load: Load, target: SocketAddr, config: &RealConfig, seconds: f64) -> RunConfig {
    let (protocol, get_ratio, connections, pipeline, rate, dist) = match load {
        Load::Mix { binary, connections, rate } => {
            let protocol = if binary { Protocol::Binary } else { Protocol::Text };
            (protocol, 0.9, connections, 1, rate, Distribution::Uniform)
        }
        Load::YcsbB { pipeline } => (Protocol::Text, 0.95, 50, pipeline, None, Distribution::Zipf(0.99)),
        Load::Caslap { .. } => unreachable!("memcaslap runs itself"),
    };
    RunConfig {
        target,
        protocol,
        get_ratio,
        keys: config.keys,
        key_bytes: 16,
        value_bytes: (32, 32),
        dist,
        connections,
        pipeline,
        seconds,
        preload: false,
        seed: 7,
        rate,
        window: false,
        threads: 2,
        direct: None,
        udp: false,
        tls: None,
    }
}

/// Runs every configuration, interleaved by round, and writes `real.md` into `out`.
pub fn real(config: &RealConfig) -> Result<Vec<RealRow>, String> {
    std::fs::create_dir_all(&config.out).map_err(|e| format!("cannot create {}: {e}", config.out.display()))?;
    let mut rows = Vec::new();
    for round in 0..config.rounds.max(1) {
        let order: Vec<&String> =
            if round % 2 == 0 { config.servers.iter().collect() } else { config.servers.iter().rev().collect() };
        for &threads in &config.threads {
            for server in &order {
                run_server(server, threads, round, config, &mut rows)?;
            }
        }
    }
    let table = table(&rows, &config.servers);
    print!("{table}");
    let path = config.out.join("real.md");
    std::fs::write(&path, &table).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(rows)
}

/// One server at `threads`: started afresh, preloaded, every busy count and load in turn.
fn run_server(
    server: &str,
    threads: usize,
    round: usize,
    config: &RealConfig,
    rows: &mut Vec<RealRow>,
) -> Result<(), String> {
    let (running, port) = start(server, config, threads)?;
    let target: SocketAddr = ([127, 0, 0, 1], port).into();
    if config.loads.iter().any(|load| !matches!(load, Load::Caslap { .. })) {
        let mut preload = run_config(Load::YcsbB { pipeline: 16 }, target, config, 1.0);
        preload.preload = true;
        loadgen::preload(&preload)?;
    }
    let pid = running.0.id();
    for &busy in &config.busy {
        for &load in &config.loads {
            // The busy processes start first (they were there before the clients connected, as
            // on a host that runs other work) and outlive the run by a little.
            let lead = if busy > 0 { config.busy_lead } else { Duration::from_millis(300) };
            let burners = start_busy(busy, config.seconds + lead.as_secs_f64() + 0.7)?;
            std::thread::sleep(lead);
            let cpu_before = process_cpu_seconds(pid)?;
            let (requests_per_sec, latency_us) = match load {
                Load::Caslap { binary } => (caslap(port, binary, config.seconds)?, None),
                _ => {
                    let measured = loadgen::measure(&run_config(load, target, config, config.seconds), None)?;
                    let latency = [measured.latency_us_p50, measured.latency_us_p99, measured.latency_us_p999];
                    (measured.ops_per_sec, Some(latency))
                }
            };
            let server_cpu_seconds = process_cpu_seconds(pid)? - cpu_before;
            let busy_iterations_per_sec = finish_busy(burners);
            let row = RealRow {
                server: server.to_string(),
                threads,
                busy,
                load: load.name(),
                round,
                requests_per_sec,
                latency_us,
                seconds: config.seconds,
                server_cpu_seconds,
                busy_iterations_per_sec,
            };
            eprintln!("{}", line(&row));
            rows.push(row);
        }
    }
    drop(running);
    Ok(())
}

fn line(row: &RealRow) -> String {
    let latency = row.latency_us.map_or("-".to_string(), |[p50, p99, p999]| format!("{p50:.0}/{p99:.0}/{p999:.0}"));
    format!(
        "round {} {} -t {} busy {} {}: {:.0} req/s, p50/p99/p99.9 {latency} us, server CPU {:.2} s, busy {:.1} M it/s",
        row.round,
        row.server,
        row.threads,
        row.busy,
        row.load,
        row.requests_per_sec,
        row.server_cpu_seconds,
        row.busy_iterations_per_sec / 1e6
    )
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

/// One line per (threads, busy, load): each server's median requests/s over the rounds with
/// the spread, latency, CPU and the neighbours' progress, then the ratio of the first server
/// to the second; the geometric mean of the ratios closes the table.
pub fn table(rows: &[RealRow], servers: &[String]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "| -t | busy | load | server | req/s (median, min-max) | p50/p99/p99.9 us | server CPU s | us CPU/req | busy M it/s | req/s ratio |");
    let _ = writeln!(out, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    let mut keys: Vec<(usize, usize, String)> = Vec::new();
    for row in rows {
        let key = (row.threads, row.busy, row.load.clone());
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    let mut ratios = Vec::new();
    for (threads, busy, load) in keys {
        let mut medians = Vec::new();
        for server in servers {
            let runs: Vec<&RealRow> = rows
                .iter()
                .filter(|r| &r.server == server && r.threads == threads && r.busy == busy && r.load == load)
                .collect();
            if runs.is_empty() {
                continue;
            }
            let rates: Vec<f64> = runs.iter().map(|r| r.requests_per_sec).collect();
            let rate = median(rates.clone());
            let (low, high) = rates.iter().fold((f64::MAX, 0f64), |(l, h), &r| (l.min(r), h.max(r)));
            let cpu = median(runs.iter().map(|r| r.server_cpu_seconds).collect());
            let busy_rate = median(runs.iter().map(|r| r.busy_iterations_per_sec).collect());
            let latency = if runs[0].latency_us.is_some() {
                let q = |i: usize| median(runs.iter().filter_map(|r| r.latency_us.map(|l| l[i])).collect());
                format!("{:.0}/{:.0}/{:.0}", q(0), q(1), q(2))
            } else {
                "-".to_string()
            };
            let per_request = median(
                runs.iter().map(|r| r.server_cpu_seconds * 1e6 / (r.requests_per_sec * r.seconds).max(1.0)).collect(),
            );
            medians.push(rate);
            let ratio = if medians.len() == 2 { format!("{:.2}", medians[0] / medians[1]) } else { String::new() };
            let _ = writeln!(
                out,
                "| {threads} | {busy} | {load} | {server} | {:.0}k ({:.0}-{:.0}k) | {latency} | {cpu:.2} | {:.2} | {:.1} | {ratio} |",
                rate / 1e3,
                low / 1e3,
                high / 1e3,
                per_request,
                busy_rate / 1e6
            );
        }
        if medians.len() == 2 && medians[1] > 0.0 {
            ratios.push(medians[0] / medians[1]);
        }
    }
    if !ratios.is_empty() {
        let geo = (ratios.iter().map(|r| r.ln()).sum::<f64>() / ratios.len() as f64).exp();
        let worst = ratios.iter().copied().fold(f64::MAX, f64::min);
        let _ = writeln!(
            out,
            "\n{} / {} requests/s: geometric mean {geo:.2}, lowest {worst:.2}, over {} configurations",
            servers[0],
            servers.get(1).map_or("", String::as_str),
            ratios.len()
        );
    }
    out
}
