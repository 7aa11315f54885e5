//! tierkv-bench: drive a memcached-compatible (or redis) server with a YCSB-style workload and
//! report throughput, latency and CPU per operation (`run`), or serve the network floor
//! (`floor`). Prints figures; never fails on a time, only on wrong or missing replies.

use clap::{Parser, Subcommand};
use std::net::{SocketAddr, ToSocketAddrs};
use tierkv_bench::floor::{self, FloorProtocol};
use tierkv_bench::loadgen::{self, Protocol, RunConfig};
use tierkv_bench::workload::Distribution;

#[derive(Parser, Debug)]
#[command(name = "tierkv-bench", about = "YCSB-style load generator and network floor for tierkv, memcached and redis")]
struct Cli {
    #[command(subcommand)]
    command: Mode,
}

#[derive(Subcommand, Debug)]
enum Mode {
    /// Drive one server and report ops/s, latency percentiles and CPU per operation.
    Run(RunArgs),
    /// Start memcached, redis, the floor (and tierkv) in turn and compare them side by side.
    Compare(CompareArgs),
    /// Print, for each key on standard input (one a line), the server the client's ketama
    /// picks: `key HOST:PORT`.
    Placement(tierkv_bench::fleet::PlacementArgs),
    /// Drive a fleet (or one server) through tierkv-client, or through the `memcache` crate,
    /// and report ops/s and server CPU per operation.
    ClientLoad(tierkv_bench::fleet::ClientLoadArgs),
    /// tierkv beside memcached where users run them: unpinned, -t 1 and 2, beside 0, 1 and 3
    /// busy processes, under memcaslap and the load generator (latency percentiles).
    Real(RealArgs),
    /// Burn CPU for a while, then print iterations per second (a busy neighbour for `real`).
    Burn {
        /// How long to burn.
        #[arg(long, default_value_t = 10.0)]
        seconds: f64,
    },
    /// Serve canned replies with no storage: the network floor of this machine.
    Floor {
        /// Port to listen on (127.0.0.1).
        #[arg(long)]
        port: u16,
        /// Protocol to answer.
        #[arg(long, value_enum, default_value = "text")]
        protocol: FloorProtocol,
    },
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// Server address, HOST:PORT.
    #[arg(long)]
    target: String,
    #[arg(long, value_enum, default_value = "text")]
    protocol: Protocol,
    /// YCSB workload: A (50% GET), B (95% GET), C (100% GET).
    #[arg(long, default_value = "B")]
    workload: String,
    /// Share of GETs, 0..1 (overrides --workload).
    #[arg(long)]
    get_ratio: Option<f64>,
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    #[arg(long, default_value_t = 16)]
    key_bytes: usize,
    /// N, or MIN..MAX (uniform).
    #[arg(long, default_value = "32", value_parser = parse_range)]
    value_bytes: (usize, usize),
    /// uniform or zipf:THETA.
    #[arg(long, default_value = "zipf:0.99")]
    dist: Distribution,
    #[arg(long, default_value_t = 20)]
    connections: usize,
    /// Single-key requests in flight per connection.
    #[arg(long, default_value_t = 1)]
    pipeline: usize,
    /// Load-generating threads (connections are split between them).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Write every key once before measuring.
    #[arg(long)]
    preload: bool,
    /// Open loop at this many operations per second, latency measured from each request's
    /// intended send time.
    #[arg(long)]
    rate: Option<f64>,
    /// Closed loop with a sliding window: each connection sends a new request as each reply
    /// arrives, keeping --pipeline in flight (like memtier_benchmark's pipelining or fio's
    /// queue depth), instead of waiting for its whole round of --pipeline replies.
    #[arg(long)]
    window: bool,
    /// Open loop at each of these rates in turn (comma-separated ops/s); one result per rate.
    #[arg(long, value_delimiter = ',')]
    sweep: Vec<f64>,
    /// The server's process id, for its CPU time per operation.
    #[arg(long)]
    server_pid: Option<u32>,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print one compact JSON line on stdout.
    #[arg(long)]
    json: bool,
    /// Request direction: read the partitions of the tierkv target (`stats tierkv`) and send
    /// each key to its owner's direct port (the target must run with --direct-ports).
    #[arg(long)]
    direct: bool,
    /// memcached's UDP protocol (the target runs with -U): each connection is a UDP socket with
    /// one request in flight; text or binary protocol. The preload still uses TCP.
    #[arg(long)]
    udp: bool,
    /// TLS (the target runs with -Z): trust the CAs in this PEM file; the server's certificate
    /// must name the target's IP address.
    #[arg(long, value_name = "FILE")]
    tls_ca: Option<std::path::PathBuf>,
}

#[derive(clap::Args, Debug)]
struct RealArgs {
    /// The tierkv binary.
    #[arg(long, default_value = "target/release/tierkv")]
    tierkv_bin: std::path::PathBuf,
    /// More arguments for tierkv, space-separated (`--tierkv-args "--idle-yields 0"`).
    #[arg(long, default_value = "")]
    tierkv_args: String,
    /// Comma-separated servers: tierkv, memcached (the ratio column is the first over the second).
    #[arg(long, default_value = "tierkv,memcached", value_delimiter = ',')]
    servers: Vec<String>,
    /// Comma-separated worker counts (-t), for both servers.
    #[arg(long, default_value = "2", value_delimiter = ',')]
    threads: Vec<usize>,
    /// Comma-separated counts of busy processes beside the servers.
    #[arg(long, default_value = "0,1,3", value_delimiter = ',')]
    busy: Vec<usize>,
    /// Comma-separated loads: caslap, caslap-binary, mix:CONNS[:RATE], mix-binary:CONNS[:RATE]
    /// (the load generator in memcaslap's shape, open loop at RATE requests/s), ycsb-b:DEPTH.
    #[arg(long, default_value = "caslap,caslap-binary,mix:64,mix-binary:64", value_delimiter = ',')]
    loads: Vec<String>,
    /// Seconds each load runs.
    #[arg(long, default_value_t = 8.0)]
    seconds: f64,
    /// Rounds, interleaved.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Item memory (-m) of each server.
    #[arg(long, default_value_t = 256)]
    memory_mib: usize,
    /// Keys preloaded for the load generator's runs.
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// Directory for real.md.
    #[arg(long, default_value = "real-out")]
    out: std::path::PathBuf,
    /// A cgroup directory each server is moved into once started (one with a CPU quota:
    /// `echo 100000 > /sys/fs/cgroup/cpu/q/cpu.cfs_quota_us` on cgroup v1, `cpu.max` on v2).
    #[arg(long)]
    server_cgroup: Option<std::path::PathBuf>,
    /// Milliseconds the busy processes run before each load starts (tierkv learns that its
    /// CPUs are shared from its workers' yields within about two seconds; connections made
    /// before it knows are dealt as on an idle machine).
    #[arg(long, default_value_t = 2500)]
    busy_lead_ms: u64,
}

#[derive(clap::Args, Debug)]
struct CompareArgs {
    /// Comma-separated: memcached, redis, floor, floor-resp, tierkv.
    #[arg(long, default_value = "memcached,redis,floor")]
    servers: String,
    /// The tierkv binary, for --servers tierkv. Given more than once as LABEL=PATH (old=...,
    /// new=...), the builds run interleaved as servers tierkv@LABEL, and ab.md compares each
    /// with the first.
    #[arg(long, value_name = "[LABEL=]PATH")]
    tierkv_bin: Vec<String>,
    /// Comma-separated YCSB workloads (A, B, C).
    #[arg(long, default_value = "B,A")]
    workloads: String,
    /// Comma-separated pipeline depths.
    #[arg(long, default_value = "1,16")]
    pipelines: String,
    #[arg(long, default_value_t = 20)]
    connections: usize,
    #[arg(long, default_value_t = 1024)]
    memory_mib: usize,
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    #[arg(long, default_value_t = 16)]
    key_bytes: usize,
    #[arg(long, default_value_t = 32)]
    value_bytes: usize,
    #[arg(long, default_value = "zipf:0.99")]
    dist: Distribution,
    /// Directory for results.json, table.md and plot.svg.
    #[arg(long, default_value = "compare-out")]
    out: std::path::PathBuf,
    /// Also run open loop at each of these rates (comma-separated ops/s) for every workload and
    /// depth; the plot then shows throughput against p99 latency.
    #[arg(long, value_delimiter = ',')]
    sweep: Vec<f64>,
    /// Rounds: every server is run once per round, in turn, and the table shows each
    /// configuration's median round (by server CPU per operation); rounds.md has them all.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// More key distributions (comma-separated) to run after --dist on the same preloaded
    /// servers.
    #[arg(long, value_delimiter = ',')]
    more_dists: Vec<Distribution>,
    /// The flash workload: tierkv gets a flash file and memcached extstore, both in this
    /// directory (memcached in a memory cgroup of -m plus --cgroup-slack-mib, page cache
    /// counted).
    #[arg(long)]
    flash_dir: Option<std::path::PathBuf>,
    /// Each server's flash file size in MiB.
    #[arg(long, default_value_t = 8192)]
    flash_size_mib: u64,
    /// memcached's ext_item_size: low enough that the workload's items go to extstore.
    #[arg(long, default_value_t = 64)]
    ext_item_size: usize,
    #[arg(long, default_value_t = 128)]
    cgroup_slack_mib: u64,
    /// tierkv's flash index: full, cascade or sets.
    #[arg(long, default_value = "full")]
    flash_index: String,
    /// tierkv's cascade tier-1 MiB (`--flash-index-mib`).
    #[arg(long)]
    flash_index_mib: Option<u64>,
    /// tierkv's flash file size in MiB if not --flash-size-mib.
    #[arg(long)]
    tierkv_flash_size_mib: Option<u64>,
}

fn real(args: RealArgs) {
    let loads = args.loads.iter().map(|load| tierkv_bench::real::Load::parse(load)).collect::<Result<Vec<_>, _>>();
    let config = tierkv_bench::real::RealConfig {
        tierkv_bin: args.tierkv_bin,
        tierkv_args: args.tierkv_args.split_whitespace().map(String::from).collect(),
        servers: args.servers,
        threads: args.threads,
        busy: args.busy,
        loads: loads.unwrap_or_else(|e| fail(e)),
        seconds: args.seconds,
        rounds: args.rounds,
        memory_mib: args.memory_mib,
        keys: args.keys,
        out: args.out,
        server_cgroup: args.server_cgroup,
        busy_lead: std::time::Duration::from_millis(args.busy_lead_ms),
    };
    if let Err(e) = tierkv_bench::real::real(&config) {
        fail(e);
    }
}

fn compare(args: CompareArgs) {
    let workloads: Vec<char> = args
        .workloads
        .split(',')
        .map(|w| match w.trim().to_ascii_uppercase().as_str() {
            "A" => 'A',
            "B" => 'B',
            "C" => 'C',
            other => fail(format!("--workloads: {other:?} is not A, B or C")),
        })
        .collect();
    let pipelines: Vec<usize> = args
        .pipelines
        .split(',')
        .map(|p| {
            p.trim()
                .parse()
                .ok()
                .filter(|p| (1..=4096).contains(p))
                .unwrap_or_else(|| fail(format!("--pipelines: {p:?}")))
        })
        .collect();
    if args.keys == 0 || args.keys > u64::from(u32::MAX) || args.key_bytes < 16 || args.key_bytes > 250 {
        fail("--keys must be 1..2^32-1 and --key-bytes 16..250");
    }
    if args.sweep.iter().any(|&r| r.is_nan() || r <= 0.0) || args.seconds.is_nan() || args.seconds <= 0.0 {
        fail("--sweep rates and --seconds must be positive");
    }
    let config = tierkv_bench::compare::CompareConfig {
        servers: args.servers.split(',').map(|s| s.trim().to_string()).collect(),
        tierkv_bins: tierkv_builds(&args.tierkv_bin),
        workloads,
        pipelines,
        connections: args.connections.clamp(1, 10_000),
        memory_mib: args.memory_mib,
        seconds: args.seconds,
        keys: args.keys,
        key_bytes: args.key_bytes,
        value_bytes: args.value_bytes.min(1 << 20),
        dist: args.dist,
        out: args.out,
        sweep: args.sweep,
        repeat: args.repeat.clamp(1, 100),
        more_dists: args.more_dists,
        flash: args.flash_dir.map(|dir| tierkv_bench::flash_compare::FlashCompare {
            dir,
            size_mib: args.flash_size_mib,
            ext_item_size: args.ext_item_size,
            cgroup_slack_mib: args.cgroup_slack_mib,
            index: args.flash_index,
            index_mib: args.flash_index_mib,
            tierkv_size_mib: args.tierkv_flash_size_mib,
            item_bytes: args.key_bytes + args.value_bytes.min(1 << 20),
        }),
    };
    let rows = tierkv_bench::compare::compare(&config).unwrap_or_else(|e| fail(e));
    print!("{}", tierkv_bench::compare::table(&tierkv_bench::compare::medians(&rows)));
}

/// `--tierkv-bin`: one PATH, or several LABEL=PATH with distinct labels.
fn tierkv_builds(given: &[String]) -> Vec<(String, std::path::PathBuf)> {
    if let [only] = given {
        if !only.contains('=') {
            return vec![(String::new(), only.into())];
        }
    }
    let mut builds: Vec<(String, std::path::PathBuf)> = Vec::new();
    for text in given {
        let Some((label, path)) = text.split_once('=') else {
            fail(format!("--tierkv-bin {text:?}: with several builds, give each as LABEL=PATH"))
        };
        let valid = !label.is_empty() && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !valid || path.is_empty() || builds.iter().any(|(l, _)| l == label) {
            fail(format!("--tierkv-bin {text:?}: LABEL=PATH with a distinct label of letters, digits, - or _"));
        }
        builds.push((label.to_string(), path.into()));
    }
    builds
}

fn parse_range(text: &str) -> Result<(usize, usize), String> {
    let parse = |t: &str| t.trim().parse::<usize>().map_err(|_| format!("bad size {t:?}"));
    let (min, max) = match text.split_once("..") {
        Some((a, b)) => (parse(a)?, parse(b)?),
        None => (parse(text)?, parse(text)?),
    };
    if min > max || max > 1 << 20 {
        return Err(format!("value size range {text:?} must be MIN..MAX with MAX <= 1048576"));
    }
    Ok((min, max))
}

fn fail(message: impl std::fmt::Display) -> ! {
    eprintln!("tierkv-bench: {message}");
    std::process::exit(1);
}

fn main() {
    match Cli::parse().command {
        Mode::Floor { port, protocol } => {
            let listener = std::net::TcpListener::bind(("127.0.0.1", port))
                .unwrap_or_else(|e| fail(format!("cannot listen on 127.0.0.1:{port}: {e}")));
            eprintln!("tierkv-bench floor: {protocol:?} on 127.0.0.1:{port}");
            if let Err(e) = floor::serve(listener, protocol) {
                fail(format!("floor server failed: {e}"));
            }
        }
        Mode::Run(args) => run(args),
        Mode::Placement(args) => {
            if let Err(e) = tierkv_bench::fleet::placement(&args, std::io::stdin().lock(), std::io::stdout().lock()) {
                fail(e);
            }
        }
        Mode::ClientLoad(args) => {
            if let Err(e) = tierkv_bench::fleet::client_load(&args) {
                fail(e);
            }
        }
        Mode::Compare(args) => compare(args),
        Mode::Real(args) => real(args),
        Mode::Burn { seconds } => tierkv_bench::real::burn(seconds),
    }
}

fn run(args: RunArgs) {
    let target: SocketAddr = args
        .target
        .to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.next())
        .unwrap_or_else(|| fail(format!("--target {:?} is not HOST:PORT", args.target)));
    let get_ratio = match (args.get_ratio, args.workload.to_ascii_uppercase().as_str()) {
        (Some(ratio), _) if (0.0..=1.0).contains(&ratio) => ratio,
        (Some(ratio), _) => fail(format!("--get-ratio {ratio} must be between 0 and 1")),
        (None, "A") => 0.5,
        (None, "B") => 0.95,
        (None, "C") => 1.0,
        (None, other) => fail(format!("--workload {other:?} must be A, B or C")),
    };
    if args.keys == 0 || args.keys > u64::from(u32::MAX) || args.key_bytes == 0 || args.key_bytes > 250 {
        fail("--keys must be 1..2^32-1 and --key-bytes 1..250");
    }
    if args.key_bytes < 16 && args.keys > 1u64 << (4 * args.key_bytes) {
        fail(format!("{} keys need keys of more than {} bytes", args.keys, args.key_bytes));
    }
    if args.connections == 0 || args.connections > 10_000 || args.pipeline == 0 || args.pipeline > 4096 {
        fail("--connections must be 1..10000 and --pipeline 1..4096");
    }
    if args.seconds.is_nan() || args.seconds <= 0.0 {
        fail("--seconds must be positive");
    }
    let config = RunConfig {
        target,
        protocol: args.protocol,
        get_ratio,
        keys: args.keys,
        key_bytes: args.key_bytes,
        value_bytes: args.value_bytes,
        dist: args.dist,
        connections: args.connections,
        pipeline: args.pipeline,
        seconds: args.seconds,
        preload: args.preload,
        seed: args.seed,
        rate: args.rate,
        window: args.window,
        threads: args.threads.clamp(1, 64),
        direct: None,
        udp: args.udp,
        tls: args.tls_ca.as_deref().map(|ca| tierkv_bench::loadgen::tls::client_config(ca).unwrap_or_else(|e| fail(e))),
    };
    if args.window && (args.udp || args.direct || args.rate.is_some() || !args.sweep.is_empty()) {
        fail("--window is a closed loop over TCP to the main port: drop --udp, --direct, --rate and --sweep");
    }
    if config.tls.is_some() && (args.udp || args.direct) {
        fail("--tls-ca runs over TCP to the main port: drop --udp and --direct");
    }
    // A TLS target is not asked for its topology (that query is plain text).
    let topology = match config.tls {
        None => Some(tierkv_client::Topology::fetch(target, std::time::Duration::from_secs(2))),
        Some(_) => None,
    };
    let direct = match (&topology, args.direct) {
        (Some(Ok(topology)), true) if topology.direct_port_base.is_some() => {
            Some((0..topology.partitions).map(|p| topology.address_of(p)).collect())
        }
        (Some(Ok(_)), true) => {
            fail(format!("--direct: {target} has no direct ports (start tierkv with --direct-ports)"))
        }
        (Some(Err(e)), true) => fail(format!("--direct: {e}")),
        _ => None,
    };
    let config = RunConfig { direct, ..config };
    let rates: Vec<Option<f64>> =
        if args.sweep.is_empty() { vec![args.rate] } else { args.sweep.iter().map(|&r| Some(r)).collect() };
    if rates.iter().flatten().any(|&r| r.is_nan() || r <= 0.0) {
        fail("--rate and --sweep rates must be positive");
    }
    for (i, rate) in rates.into_iter().enumerate() {
        let config = RunConfig { rate, preload: config.preload && i == 0, ..config.clone() };
        measure_and_report(&args, &config);
    }
    // For a tierkv target: how many requests its workers forwarded to each other.
    if let Some(Ok(before)) = topology {
        if let Ok(after) = tierkv_client::Topology::fetch(target, std::time::Duration::from_secs(2)) {
            eprintln!(
                "{target}: {} partitions, {} requests forwarded between workers",
                after.partitions,
                after.forwarded_requests - before.forwarded_requests
            );
        }
    }
}

fn measure_and_report(args: &RunArgs, config: &RunConfig) {
    let measurement = loadgen::measure(config, args.server_pid).unwrap_or_else(|e| fail(e));
    eprintln!(
        "{} {:?} get_ratio {} pipeline {} connections {}: {}",
        config.target,
        config.protocol,
        config.get_ratio,
        config.pipeline,
        config.connections,
        measurement.summary()
    );
    if args.json {
        let rate = config.rate.map_or("null".to_string(), |r| format!("{r}"));
        let extra = format!(
            "\"protocol\":\"{:?}\",\"get_ratio\":{},\"pipeline\":{},\"connections\":{},\"keys\":{},\"dist\":\"{}\",\"rate\":{rate}",
            config.protocol, config.get_ratio, config.pipeline, config.connections, config.keys, config.dist
        );
        println!("{}", measurement.json(&extra));
    }
}
