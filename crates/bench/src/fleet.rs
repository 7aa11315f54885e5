//! tierkv-client from the shell: `placement` prints which server the client's ketama picks for
//! each key, and `client_load` drives a fleet through tierkv-client (or one server through the
//! `memcache` crate, for comparison) and reports ops/s and the servers' CPU per operation.
//!
//! It must not reimplement placement: it asks tierkv-client's ring.

use std::io::{BufRead, Write};
use std::time::{Duration, Instant};

use tierkv_client::ketama::{Ring, ServerSpec};

use crate::loadgen::process_cpu_seconds;

/// `tierkv-bench placement`.
#[derive(clap::Args, Debug)]
pub struct PlacementArgs {
    /// The fleet: `HOST:PORT[:WEIGHT][ LABEL],...`, in libmemcached's (or twemproxy's) order.
    #[arg(long)]
    pub servers: String,
    /// Servers taken off the ring, as ejection does: `HOST:PORT,...`.
    #[arg(long, default_value = "")]
    pub eject: String,
}

/// Parses a comma-separated fleet.
pub fn parse_servers(list: &str) -> Result<Vec<ServerSpec>, String> {
    list.split(',').filter(|s| !s.trim().is_empty()).map(|s| ServerSpec::parse(s.trim())).collect()
}

/// Reads keys, one a line, from `input`; writes `key HOST:PORT` for each to `output`.
pub fn placement(args: &PlacementArgs, input: impl BufRead, mut output: impl Write) -> Result<(), String> {
    let servers = parse_servers(&args.servers).map_err(|e| format!("--servers: {e}"))?;
    if servers.is_empty() {
        return Err("--servers: no servers".into());
    }
    let ejected: Vec<&str> = args.eject.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
    for name in &ejected {
        if !servers.iter().any(|s| s.to_string() == *name) {
            return Err(format!("--eject {name}: not one of --servers"));
        }
    }
    let live = servers.iter().enumerate().filter(|(_, s)| !ejected.contains(&s.to_string().as_str()));
    let ring = Ring::build(live.clone());
    let lone = live.clone().count() == 1;
    let mut out = std::io::BufWriter::new(&mut output);
    for line in input.lines() {
        let key = line.map_err(|e| format!("reading keys: {e}"))?;
        let server = if lone { live.clone().next().map(|(i, _)| i) } else { ring.server_for(key.as_bytes()) };
        let server = server.ok_or("every server is ejected")?;
        writeln!(out, "{key} {}", servers[server]).map_err(|e| format!("writing: {e}"))?;
    }
    out.flush().map_err(|e| format!("writing: {e}"))
}

/// Which library drives the load.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// tierkv-client (direct ports unless --no-direct).
    Client,
    /// The `memcache` crate, to the first server's main port.
    MemcacheCrate,
}

/// `tierkv-bench client-load`.
#[derive(clap::Args, Debug)]
pub struct ClientLoadArgs {
    /// The fleet: `HOST:PORT[:WEIGHT],...` (the memcache crate uses the first).
    #[arg(long)]
    pub servers: String,
    /// Which library drives the load.
    #[arg(long, value_enum, default_value = "client")]
    pub via: Via,
    /// tierkv-client: use the main ports only.
    #[arg(long)]
    pub no_direct: bool,
    /// Client threads, each with one request (or one get_many) in flight.
    #[arg(long, default_value_t = 4)]
    pub threads: usize,
    /// Keys per request: 1 is a get (or set), more is a multi-key get.
    #[arg(long, default_value_t = 1)]
    pub batch: usize,
    /// Share of single-key requests that are sets.
    #[arg(long, default_value_t = 0.0)]
    pub set_ratio: f64,
    /// Keys written first, then read at random (uniformly).
    #[arg(long, default_value_t = 100_000)]
    pub keys: usize,
    /// Bytes per value.
    #[arg(long, default_value_t = 32)]
    pub value_bytes: usize,
    /// How long the measured run lasts.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Server processes whose CPU time is counted (comma-separated pids).
    #[arg(long, default_value = "")]
    pub server_pids: String,
}

/// One thread's way of talking.
enum Driver {
    Client(std::sync::Arc<tierkv_client::blocking::Client>),
    Crate(memcache::Client),
}

impl Driver {
    fn get_many(&self, keys: &[&[u8]]) -> Result<usize, String> {
        match self {
            Driver::Client(c) => Ok(c.get_many(keys).map_err(|e| e.to_string())?.iter().flatten().count()),
            Driver::Crate(c) if keys.len() == 1 => {
                let key = std::str::from_utf8(keys[0]).map_err(|e| e.to_string())?;
                Ok(c.get::<Vec<u8>>(key).map_err(|e| e.to_string())?.map_or(0, |_| 1))
            }
            Driver::Crate(c) => {
                let keys: Vec<&str> = keys.iter().map(|k| std::str::from_utf8(k).unwrap_or("")).collect();
                Ok(c.gets::<Vec<u8>>(&keys).map_err(|e| e.to_string())?.len())
            }
        }
    }

    fn set(&self, key: &[u8], value: &[u8]) -> Result<(), String> {
        match self {
            Driver::Client(c) => c.set(key, value).map(drop).map_err(|e| e.to_string()),
            Driver::Crate(c) => {
                let key = std::str::from_utf8(key).map_err(|e| e.to_string())?;
                c.set(key, value, 0).map_err(|e| e.to_string())
            }
        }
    }
}

fn driver(
    args: &ClientLoadArgs,
    shared: &Option<std::sync::Arc<tierkv_client::blocking::Client>>,
) -> Result<Driver, String> {
    match (args.via, shared) {
        (Via::Client, Some(client)) => Ok(Driver::Client(client.clone())),
        _ => {
            let first = parse_servers(&args.servers)?.into_iter().next().ok_or("--servers: empty")?;
            let url = format!("memcache://{first}?tcp_nodelay=true&timeout=5");
            memcache::Client::with_pool_size(url.as_str(), 1).map(Driver::Crate).map_err(|e| format!("{url}: {e}"))
        }
    }
}

/// A small fast generator for key choice (xorshift64*).
fn next(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

fn cpu_of(pids: &[u32]) -> Result<f64, String> {
    pids.iter().map(|&p| process_cpu_seconds(p)).sum()
}

/// Preloads every key, then runs the threads for `seconds`; prints one line of figures.
pub fn client_load(args: &ClientLoadArgs) -> Result<(), String> {
    let pids: Vec<u32> = args
        .server_pids
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().map_err(|_| format!("--server-pids: {s:?}")))
        .collect::<Result<_, _>>()?;
    let mut config = tierkv_client::Config::new(parse_servers(&args.servers)?);
    config.direct = !args.no_direct;
    config.pool_size = args.threads.max(1) * 2;
    let shared = match args.via {
        Via::Client => {
            Some(std::sync::Arc::new(tierkv_client::blocking::Client::new(config).map_err(|e| e.to_string())?))
        }
        Via::MemcacheCrate => None,
    };
    let keys: Vec<String> = (0..args.keys).map(|i| format!("key:{i:010}")).collect();
    let value = vec![b'v'; args.value_bytes];
    match &shared {
        Some(client) => {
            for chunk in keys.chunks(1000) {
                let items: Vec<(&[u8], &[u8])> = chunk.iter().map(|k| (k.as_bytes(), value.as_slice())).collect();
                client.set_many(&items, 0).map_err(|e| format!("preload: {e}"))?;
            }
        }
        None => {
            let loader = driver(args, &shared)?;
            for key in &keys {
                loader.set(key.as_bytes(), &value)?;
            }
        }
    }
    let before = cpu_of(&pids)?;
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(args.seconds);
    let results: Vec<Result<(u64, u64), String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..args.threads)
            .map(|t| {
                let (keys, value, shared) = (&keys, &value, &shared);
                scope.spawn(move || -> Result<(u64, u64), String> {
                    let driver = driver(args, shared)?;
                    let mut state = 0x9e37_79b9_7f4a_7c15 ^ (t as u64 + 1);
                    let (mut ops, mut hits) = (0u64, 0u64);
                    let mut batch: Vec<&[u8]> = Vec::with_capacity(args.batch);
                    while Instant::now() < deadline {
                        batch.clear();
                        batch.extend(
                            (0..args.batch.max(1))
                                .map(|_| keys[(next(&mut state) % keys.len() as u64) as usize].as_bytes()),
                        );
                        if args.batch <= 1 && (next(&mut state) % 1_000_000) as f64 / 1e6 < args.set_ratio {
                            driver.set(batch[0], value)?;
                        } else {
                            hits += driver.get_many(&batch)? as u64;
                        }
                        ops += batch.len() as u64;
                    }
                    Ok((ops, hits))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("a load thread panicked".into()))).collect()
    });
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = cpu_of(&pids)? - before;
    let (mut ops, mut hits) = (0u64, 0u64);
    for result in results {
        let (o, h) = result?;
        ops += o;
        hits += h;
    }
    let forwarded = match &shared {
        Some(client) => {
            client.topologies().iter().flatten().map(|t| t.server.to_string()).collect::<Vec<_>>().join(",")
        }
        None => String::new(),
    };
    println!(
        "via={:?} direct={} threads={} batch={} keys/s={:.0} server_cpu_us_per_key={} hit_ratio={:.3} direct_servers={}",
        args.via,
        shared.is_some() && !args.no_direct,
        args.threads,
        args.batch,
        ops as f64 / elapsed,
        if pids.is_empty() { "-".to_string() } else { format!("{:.3}", cpu * 1e6 / ops.max(1) as f64) },
        hits as f64 / ops.max(1) as f64,
        if forwarded.is_empty() { "-" } else { &forwarded },
    );
    Ok(())
}
