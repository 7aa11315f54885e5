//! `tierkv-bench compare`: start each server on a free loopback port pinned to core 0, preload
//! it, run every workload and pipeline depth against it from core 1, stop it, and write
//! results.json, table.md and plot.svg. Given several tierkv builds (`--tierkv-bin
//! old=PATH --tierkv-bin new=PATH`), it runs them interleaved, each round in the other order
//! from the last, and writes ab.md: each build against the first, round by round.

use crate::ab::{is_tierkv, server_name};
use crate::loadgen::{self, Measurement, Protocol, RunConfig};
use crate::workload::Distribution;
use std::fmt::Write as _;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What to compare.
#[derive(Clone, Debug)]
pub struct CompareConfig {
    /// Servers to run, by name (`tierkv`, `memcached`, `redis`).
    pub servers: Vec<String>,
    /// The tierkv builds to start, by label: one unlabelled build is the server `tierkv`;
    /// several are the servers `tierkv@LABEL`, which `tierkv` in `servers` stands for.
    pub tierkv_bins: Vec<(String, PathBuf)>,
    /// YCSB workloads to run, by letter.
    pub workloads: Vec<char>,
    /// Pipeline depths to run each workload at.
    pub pipelines: Vec<usize>,
    /// Client connections per run.
    pub connections: usize,
    /// Item memory each server is given (MiB).
    pub memory_mib: usize,
    /// How long each run measures.
    pub seconds: f64,
    /// Distinct keys, all preloaded.
    pub keys: u64,
    /// Bytes per key.
    pub key_bytes: usize,
    /// Bytes per value.
    pub value_bytes: usize,
    /// How keys are drawn.
    pub dist: Distribution,
    /// Where the JSON results are written.
    pub out: PathBuf,
    /// Open-loop rates to run for every workload and depth (empty: closed loop only).
    pub sweep: Vec<f64>,
    /// Rounds; each starts every server afresh, one after another (interleaved), and the
    /// table reports the median round of each configuration.
    pub repeat: usize,
    /// More key distributions to run after `dist` on the same preloaded server.
    pub more_dists: Vec<Distribution>,
    /// The flash workload: flash files, memcached's extstore and its cgroup.
    pub flash: Option<crate::flash_compare::FlashCompare>,
}

/// One row of the results.
#[derive(Clone, Debug)]
pub struct Row {
    /// The server measured.
    pub server: String,
    /// The YCSB workload letter.
    pub workload: char,
    /// Requests each connection keeps in flight.
    pub pipeline: usize,
    /// The open-loop rate, or None for the closed-loop run.
    pub rate: Option<f64>,
    /// Which round (0-based) of `--repeat`.
    pub round: usize,
    /// How keys were drawn.
    pub dist: Distribution,
    /// What the run measured.
    pub measurement: Measurement,
}

struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn on_path(binary: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(binary).is_file()))
}

/// Starts `server` pinned to core 0; returns the process, its port and the protocol to use.
fn start(server: &str, config: &CompareConfig) -> Result<(Running, u16, Protocol), String> {
    start_on(server, config, crate::ports::free_port()?)
}

/// `start` on a given port (a restart keeps its port).
fn start_on(server: &str, config: &CompareConfig, port: u16) -> Result<(Running, u16, Protocol), String> {
    let port_text = port.to_string();
    let memory = config.memory_mib.to_string();
    let self_exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let (program, args, protocol, package): (PathBuf, Vec<String>, Protocol, &str) = match server {
        "memcached" => {
            let mut args: Vec<String> =
                ["-t", "1", "-m", &memory, "-U", "0", "-l", "127.0.0.1", "-p", &port_text].map(String::from).to_vec();
            // SAFETY: geteuid only reads the process's user id.
            if unsafe { libc::geteuid() } == 0 {
                args.extend(["-u".to_string(), "root".to_string()]);
            }
            ("memcached".into(), args, Protocol::Text, "memcached")
        }
        "redis" => {
            let maxmemory = format!("{}mb", config.memory_mib);
            let args = [
                "--save",
                "",
                "--appendonly",
                "no",
                "--maxmemory",
                &maxmemory,
                "--bind",
                "127.0.0.1",
                "--port",
                &port_text,
            ];
            ("redis-server".into(), args.map(String::from).to_vec(), Protocol::Resp, "redis-server")
        }
        "floor" => (
            self_exe,
            ["floor", "--port", &port_text, "--protocol", "text"].map(String::from).to_vec(),
            Protocol::Text,
            "",
        ),
        "floor-resp" => (
            self_exe,
            ["floor", "--port", &port_text, "--protocol", "resp"].map(String::from).to_vec(),
            Protocol::Resp,
            "",
        ),
        build if is_tierkv(build) => {
            let bin = config
                .tierkv_bins
                .iter()
                .find(|(label, _)| server_name(label) == build)
                .map(|(_, path)| path.clone())
                .ok_or("--servers tierkv needs --tierkv-bin PATH")?;
            (
                bin,
                ["-t", "1", "-m", &memory, "-l", "127.0.0.1", "-p", &port_text].map(String::from).to_vec(),
                Protocol::Text,
                "",
            )
        }
        other => return Err(format!("unknown server {other:?}: use memcached, redis, floor, floor-resp or tierkv")),
    };
    let mut args = args;
    if let Some(flash) = &config.flash {
        args.extend(flash.args(server));
    }
    if !package.is_empty() && !on_path(&program.to_string_lossy()) {
        return Err(format!("{} is not installed: apt-get install {package} (Debian's package)", program.display()));
    }
    // Each start's stderr is appended to `<out>/<server>.stderr`, so a surprising figure
    // (a restart that starts empty, say) can be explained afterwards.
    let _ = std::fs::create_dir_all(&config.out);
    let log = config.out.join(format!("{server}.stderr"));
    let stderr = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .map_err(|e| format!("{}: {e}", log.display()))?;
    let child = Command::new("taskset")
        .arg("-c")
        .arg("0")
        .arg(&program)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", program.display()))?;
    let running = Running(child);
    if let Some(flash) = &config.flash {
        flash.confine(server, running.0.id(), config.memory_mib)?;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            return Err(format!("{server} did not listen on port {port} within 60 s"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok((running, port, protocol))
}

/// taskset starts the server with exec, so the pid is the server's.
fn server_pid(running: &Running) -> u32 {
    running.0.id()
}

/// `servers` with `tierkv` standing for every build, in the order given.
fn expand(config: &CompareConfig) -> Vec<String> {
    let mut out = Vec::new();
    for server in &config.servers {
        if server == "tierkv" && !config.tierkv_bins.is_empty() {
            out.extend(config.tierkv_bins.iter().map(|(label, _)| server_name(label)));
        } else {
            out.push(server.clone());
        }
    }
    out
}

/// Runs the whole comparison and writes its files.
pub fn compare(config: &CompareConfig) -> Result<Vec<Row>, String> {
    if !loadgen::pin_to_cpu(1) {
        eprintln!("tierkv-bench compare: could not pin to CPU 1; figures will be noisier");
    }
    std::fs::create_dir_all(&config.out).map_err(|e| format!("cannot create {}: {e}", config.out.display()))?;
    let mut rows = Vec::new();
    let mut flash_rows = Vec::new();
    let servers = expand(config);
    for round in 0..config.repeat.max(1) {
        // Every other round runs the servers in the reverse order, so a machine that slows
        // down or speeds up during the run does not favour whichever always goes first.
        let order: Vec<&String> =
            if round % 2 == 0 { servers.iter().collect() } else { servers.iter().rev().collect() };
        for server in order {
            if let Some(flash) = &config.flash {
                flash.reset();
            }
            // One failed round (a server that stalled past the reply timeout, say) is run
            // again on a fresh server once, so a single hiccup does not void a long comparison;
            // the failure is reported either way.
            let mut taken = Vec::new();
            if let Err(first) = run_server(server, round, config, &mut taken, &mut flash_rows) {
                eprintln!("round {round} {server} failed: {first}; running the round again on a fresh server");
                taken.clear();
                if let Some(flash) = &config.flash {
                    flash.reset();
                }
                run_server(server, round, config, &mut taken, &mut flash_rows)
                    .map_err(|again| format!("{server} failed twice in round {round}: {first}; then {again}"))?;
            }
            rows.append(&mut taken);
        }
    }
    write_files(config, &rows)?;
    if config.flash.is_some() {
        let table = crate::flash_compare::table(&flash_rows);
        eprint!("{table}");
        let path = config.out.join("flash.md");
        std::fs::write(&path, table).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    if config.tierkv_bins.len() > 1 {
        let labels: Vec<String> = config.tierkv_bins.iter().map(|(label, _)| server_name(label)).collect();
        let samples: Vec<crate::ab::Sample> = rows
            .iter()
            .map(|r| crate::ab::Sample {
                server: r.server.clone(),
                configuration: format!(
                    "{} {} p{} {}",
                    r.workload,
                    r.dist,
                    r.pipeline,
                    r.rate.map_or("closed loop".to_string(), |rate| format!("{rate:.0}/s"))
                ),
                round: r.round,
                server_cpu: r.measurement.server_cpu_us_per_op,
                client_cpu: r.measurement.client_cpu_us_per_op,
                ops_per_sec: r.measurement.ops_per_sec,
            })
            .collect();
        let flash: Vec<_> = flash_rows.iter().map(|f| (f.server.clone(), f.round, f.flash_gets_per_sec)).collect();
        let table = crate::ab::table(&samples, &flash, &labels);
        eprint!("{table}");
        let path = config.out.join("ab.md");
        std::fs::write(&path, table).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(rows)
}

/// One round of one server: start, preload, every workload and depth, stop.
fn run_server(
    server: &str,
    round: usize,
    config: &CompareConfig,
    rows: &mut Vec<Row>,
    flash_rows: &mut Vec<crate::flash_compare::FlashRow>,
) -> Result<(), String> {
    {
        let (mut running, port, protocol) = start(server, config)?;
        let target: SocketAddr = ([127, 0, 0, 1], port).into();
        let base = RunConfig {
            target,
            protocol,
            get_ratio: 1.0,
            keys: config.keys,
            key_bytes: config.key_bytes,
            value_bytes: (config.value_bytes, config.value_bytes),
            dist: config.dist,
            connections: config.connections,
            pipeline: 16,
            seconds: config.seconds,
            preload: true,
            seed: 1,
            rate: None,
            window: false,
            threads: 1,
            direct: None,
            udp: false,
            tls: None,
        };
        eprintln!("{server}: preloading {} keys", config.keys);
        let started = Instant::now();
        loadgen::preload(&base)?;
        eprintln!("{server}: preloaded in {:.1} s", started.elapsed().as_secs_f64());
        let dists = std::iter::once(config.dist).chain(config.more_dists.iter().copied());
        // Each run draws its own keys: one replaying another's would find the items the other
        // brought into DRAM (a flash tier promotes what it reads).
        let mut seed = 1;
        for (dist, &workload) in dists.flat_map(|d| config.workloads.iter().map(move |w| (d, w))) {
            for &pipeline in &config.pipelines {
                let get_ratio = match workload {
                    'A' => 0.5,
                    'B' => 0.95,
                    _ => 1.0,
                };
                let rates = std::iter::once(None).chain(config.sweep.iter().map(|&r| Some(r)));
                for rate in rates {
                    seed += 1;
                    let run = RunConfig { get_ratio, pipeline, preload: false, rate, dist, seed, ..base.clone() };
                    let measurement = loadgen::measure(&run, Some(server_pid(&running)))?;
                    let label = rate.map_or("closed loop".to_string(), |r| format!("{r:.0} ops/s offered"));
                    eprintln!(
                        "round {round} {server} workload {workload} {dist} pipeline {pipeline} {label}: {}",
                        measurement.summary()
                    );
                    let row = Row { server: server.to_string(), workload, pipeline, rate, round, dist, measurement };
                    rows.push(row);
                }
            }
        }
        if config.flash.is_some() && (is_tierkv(server) || server == "memcached") {
            flash_rows.push(flash_figures(server, round, config, &base, &mut running, port)?);
        }
        drop(running);
    }
    Ok(())
}

/// The flash workload's own figures of one server (`flash_compare`), then, for tierkv, a warm
/// restart on the same port.
fn flash_figures(
    server: &str,
    round: usize,
    config: &CompareConfig,
    base: &RunConfig,
    running: &mut Running,
    port: u16,
) -> Result<crate::flash_compare::FlashRow, String> {
    use crate::flash_compare as fc;
    let mut row = fc::FlashRow { server: server.to_string(), round, ..Default::default() };
    fc::dram_figures(server, port, &mut row, config.key_bytes)?;
    let sample = RunConfig {
        get_ratio: 1.0,
        dist: Distribution::Uniform,
        seconds: 3.0,
        preload: false,
        seed: 1001,
        ..base.clone()
    };
    row.hits_before = loadgen::measure(&sample, None)?.get_hit_ratio;
    if !is_tierkv(server) {
        return Ok(row);
    }
    fc::flash_gets(base, port, server_pid(running), &mut row)?;
    let flash = config.flash.as_ref().expect("a flash comparison");
    // Segments fill the region from its start (one partition here), after its metadata.
    let written = fc::stats(port, "").map(|s| {
        s.iter().find(|(n, _)| n == "extstore_bytes_written").and_then(|(_, v)| v.parse::<u64>().ok()).unwrap_or(0)
    })?;
    // Only the written part of tierkv's own file (which may be smaller than memcached's).
    let used = written.min(flash.tierkv_mib() << 20);
    row.fio_iops = fc::fio_iops(&flash.tierkv_file(), used, row.mean_depth).unwrap_or_else(|e| {
        eprintln!("fio: {e}");
        0.0
    });
    row.stop_ms = fc::stop(&mut running.0);
    let started = Instant::now();
    let (restarted, _, _) = start_on(server, config, port)?;
    // Listening comes first; the partitions restore as their workers start.
    while fc::stats(port, "").map_or(true, |s| s.iter().all(|(n, _)| n != "extstore_objects_used")) {
        std::thread::sleep(Duration::from_millis(5));
    }
    row.start_ms = started.elapsed().as_secs_f64() * 1e3;
    row.hits_after = loadgen::measure(&RunConfig { seed: 1002, ..sample }, None)?.get_hit_ratio;
    *running = restarted;
    Ok(row)
}

/// For each (server, workload, depth, rate), the round with the median server CPU per
/// operation (all of them when there is one round).
pub fn medians(rows: &[Row]) -> Vec<Row> {
    let mut out: Vec<Row> = Vec::new();
    for row in rows {
        let same = |r: &Row| {
            r.server == row.server
                && r.workload == row.workload
                && r.pipeline == row.pipeline
                && r.rate == row.rate
                && r.dist == row.dist
        };
        if out.iter().any(same) {
            continue;
        }
        let mut group: Vec<&Row> = rows.iter().filter(|r| same(r)).collect();
        group.sort_by(|a, b| {
            let cpu = |r: &Row| r.measurement.server_cpu_us_per_op.unwrap_or(f64::MAX);
            cpu(a).total_cmp(&cpu(b))
        });
        out.push(group[group.len() / 2].clone());
    }
    out
}

fn write_files(config: &CompareConfig, rows: &[Row]) -> Result<(), String> {
    let write = |name: &str, text: String| {
        let path = config.out.join(name);
        std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
    };
    let json: Vec<String> = rows
        .iter()
        .map(|row| {
            let rate = row.rate.map_or("null".to_string(), |r| format!("{r}"));
            let extra = format!(
                "\"server\":\"{}\",\"workload\":\"{}\",\"dist\":\"{}\",\"pipeline\":{},\"rate\":{rate},\"round\":{}",
                row.server, row.workload, row.dist, row.pipeline, row.round
            );
            row.measurement.json(&extra)
        })
        .collect();
    write("results.json", format!("[\n{}\n]\n", json.join(",\n")))?;
    let median = medians(rows);
    write("table.md", table(&median))?;
    write("plot.svg", plot(&median))?;
    if config.repeat > 1 {
        write("rounds.md", table(rows))?;
    }
    eprintln!("wrote {}", Path::new(&config.out).join("{results.json,table.md,plot.svg}").display());
    Ok(())
}

fn memcached_cpu(rows: &[Row], workload: char, dist: Distribution, pipeline: usize, round: usize) -> Option<f64> {
    rows.iter()
        .find(|r| {
            r.server == "memcached"
                && r.dist == dist
                && r.workload == workload
                && r.pipeline == pipeline
                && r.rate.is_none()
                && r.round == round
        })
        .or_else(|| {
            rows.iter().find(|r| {
                r.server == "memcached"
                    && r.dist == dist
                    && r.workload == workload
                    && r.pipeline == pipeline
                    && r.rate.is_none()
            })
        })
        .and_then(|r| r.measurement.server_cpu_us_per_op)
}

/// The Markdown table.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| server | round | workload | keys | pipeline | offered ops/s | ops/s | hit ratio | p50 us | p99 us | p99.9 us | server CPU us/op | CPU vs memcached |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for row in rows {
        let m = &row.measurement;
        let cpu = m.server_cpu_us_per_op.map_or("n/a".to_string(), |c| format!("{c:.3}"));
        let base = memcached_cpu(rows, row.workload, row.dist, row.pipeline, row.round);
        let ratio = match (m.server_cpu_us_per_op, base) {
            (Some(cpu), Some(base)) if base > 0.0 => format!("{:.2}", cpu / base),
            _ => "n/a".to_string(),
        };
        let offered = row.rate.map_or("closed loop".to_string(), |r| format!("{r:.0}"));
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {offered} | {:.0} | {:.4} | {:.1} | {:.1} | {:.1} | {cpu} | {ratio} |",
            row.server,
            row.round,
            row.workload,
            row.dist,
            row.pipeline,
            m.ops_per_sec,
            m.get_hit_ratio,
            m.latency_us_p50,
            m.latency_us_p99,
            m.latency_us_p999
        );
    }
    out
}

/// Reads one figure of a measurement.
type Figure = fn(&Measurement) -> f64;

/// Bar charts: server CPU per operation and throughput, one group per workload and depth.
pub fn plot(all_rows: &[Row]) -> String {
    let closed: Vec<Row> = all_rows.iter().filter(|r| r.rate.is_none()).cloned().collect();
    let rows = closed.as_slice();
    let groups: Vec<(char, usize)> = {
        let mut groups: Vec<(char, usize)> = rows.iter().map(|r| (r.workload, r.pipeline)).collect();
        groups.dedup();
        groups.sort();
        groups.dedup();
        groups
    };
    let servers: Vec<&str> = {
        let mut servers: Vec<&str> = Vec::new();
        for row in rows {
            if !servers.contains(&row.server.as_str()) {
                servers.push(&row.server);
            }
        }
        servers
    };
    let colors = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1"];
    let (width, chart_height, bar) = (900.0, 260.0, 18.0);
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{}\" font-family=\"sans-serif\" font-size=\"12\">\n",
        if all_rows.iter().any(|r| r.rate.is_some()) { 3.0 * chart_height + 160.0 } else { 2.0 * chart_height + 120.0 }
    );
    let charts: [(&str, Figure); 2] =
        [("server CPU us per op", |m| m.server_cpu_us_per_op.unwrap_or(0.0)), ("ops per second", |m| m.ops_per_sec)];
    for (chart, (title, value)) in charts.iter().enumerate() {
        let top = 30.0 + chart as f64 * (chart_height + 50.0);
        let max = rows.iter().map(|r| value(&r.measurement)).fold(0.0f64, f64::max).max(1e-9);
        let _ = writeln!(svg, "<text x=\"10\" y=\"{}\" font-weight=\"bold\">{title}</text>", top - 10.0);
        for (g, (workload, pipeline)) in groups.iter().enumerate() {
            let group_x = 60.0 + g as f64 * (bar * servers.len() as f64 + 30.0);
            for (s, server) in servers.iter().enumerate() {
                let Some(row) =
                    rows.iter().find(|r| r.server == *server && r.workload == *workload && r.pipeline == *pipeline)
                else {
                    continue;
                };
                let v = value(&row.measurement);
                let h = v / max * (chart_height - 30.0);
                let x = group_x + s as f64 * bar;
                let y = top + chart_height - 30.0 - h;
                let _ = writeln!(
                    svg,
                    "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{h:.1}\" fill=\"{}\"><title>{server}: {v:.3}</title></rect>",
                    bar - 2.0,
                    colors[s % colors.len()]
                );
            }
            let _ = writeln!(
                svg,
                "<text x=\"{group_x:.1}\" y=\"{:.1}\">{workload}/p{pipeline}</text>",
                top + chart_height - 12.0
            );
        }
        let _ = writeln!(svg, "<text x=\"10\" y=\"{:.1}\">max {max:.3}</text>", top + 5.0);
    }
    for (s, server) in servers.iter().enumerate() {
        let y = 2.0 * chart_height + 100.0;
        let x = 60.0 + s as f64 * 140.0;
        let _ = writeln!(
            svg,
            "<rect x=\"{x}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/>",
            y - 10.0,
            colors[s % colors.len()]
        );
        let _ = writeln!(svg, "<text x=\"{}\" y=\"{y}\">{server}</text>", x + 16.0);
    }
    sweep_chart(&mut svg, all_rows, &servers, 2.0 * chart_height + 130.0);
    svg.push_str("</svg>\n");
    svg
}

/// With a sweep: achieved throughput (x) against p99 latency (y), one line per server, for the
/// first workload and depth.
fn sweep_chart(svg: &mut String, rows: &[Row], servers: &[&str], top: f64) {
    let Some(first) = rows.iter().find(|r| r.rate.is_some()) else { return };
    let points: Vec<&Row> = rows
        .iter()
        .filter(|r| r.rate.is_some() && r.workload == first.workload && r.pipeline == first.pipeline)
        .collect();
    let max_x = points.iter().map(|r| r.measurement.ops_per_sec).fold(1.0f64, f64::max);
    let max_y = points.iter().map(|r| r.measurement.latency_us_p99).fold(1.0f64, f64::max);
    let (width, height) = (800.0, 240.0);
    let _ = writeln!(
        svg,
        "<text x=\"10\" y=\"{}\" font-weight=\"bold\">p99 latency (us, up to {max_y:.0}) against throughput (ops/s, up to {max_x:.0}), workload {} pipeline {}</text>",
        top - 10.0,
        first.workload,
        first.pipeline
    );
    let colors = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1"];
    for (s, server) in servers.iter().enumerate() {
        let coordinates: Vec<String> = points
            .iter()
            .filter(|r| r.server == *server)
            .map(|r| {
                let x = 60.0 + r.measurement.ops_per_sec / max_x * width;
                let y = top + height - r.measurement.latency_us_p99 / max_y * height;
                format!("{x:.1},{y:.1}")
            })
            .collect();
        if !coordinates.is_empty() {
            let _ = writeln!(
                svg,
                "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\" points=\"{}\"><title>{server}</title></polyline>",
                colors[s % colors.len()],
                coordinates.join(" ")
            );
        }
    }
}
