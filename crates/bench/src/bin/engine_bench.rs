//! engine-bench: the engine alone, in-process, one thread, beside a
//! `std::collections::HashMap<Box<[u8]>, Box<[u8]>>` holding the same items in the same run.
//! Prints figures; never fails on a time.
//!
//! Phases (each measured for `--seconds`): engine GET, HashMap GET, engine SET, HashMap SET.
//! GETs fold every value byte into a printed checksum so a GET that skips the value cannot look
//! fast. The hit ratio is the engine GET phase's.

use clap::Parser;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tierkv_bench::workload::{key_sequence, write_key, Distribution, Rng};

use tierkv_engine::{
    item_log_bytes, AnyPartition, Engine, Item, Partition, PartitionConfig, SetRequest, DEFAULT_MAX_ITEM_BYTES,
};

#[derive(Parser, Debug)]
#[command(name = "engine-bench", about = "Measure the tierkv engine in-process against std HashMap")]
struct Args {
    /// Items preloaded (the key space).
    #[arg(long, default_value_t = 16_000_000)]
    items: u64,
    /// Bytes per key.
    #[arg(long, default_value_t = 8)]
    key_bytes: usize,
    /// Bytes per value: N, or MIN..MAX (uniform).
    #[arg(long, default_value = "8", value_parser = parse_range)]
    value_bytes: (usize, usize),
    /// Key choice: uniform or zipf:THETA.
    #[arg(long, default_value = "uniform")]
    dist: Distribution,
    /// Requests per engine batch call.
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Seconds per measured phase.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Engine memory budget in MiB (default: enough to hold every item).
    #[arg(long)]
    memory_mib: Option<usize>,
    /// Run each measured phase for exactly this many batch calls instead of `--seconds` (for
    /// instruction counts under callgrind, which repeat exactly).
    #[arg(long)]
    rounds: Option<usize>,
    /// Seed for keys, values and the operation sequence.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Skip the HashMap phases.
    #[arg(long)]
    no_hashmap: bool,
    /// Skip the SET phases (for profiling the GET path alone).
    #[arg(long)]
    no_sets: bool,
    /// Print one compact JSON line on stdout.
    #[arg(long)]
    json: bool,
    /// cache (the circular log, lossy) or store (MICA's store mode: lossless index over a
    /// segregated-fits allocator).
    #[arg(long, default_value = "cache")]
    mode: Mode,
    /// How the phases reach the cache partition: `direct` (the concrete type, monomorphised)
    /// or `enum` (through `AnyPartition`, as the server does).
    #[arg(long, default_value = "direct")]
    dispatch: Dispatch,
    /// Store mode: churn (overwrites and deletes with fresh random sizes, writing three times
    /// the budget), then write new items until the first write fails, and report
    /// allocator_utilization and payload_ratio. Needs --memory-mib.
    #[arg(long)]
    fill: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Dispatch {
    Direct,
    Enum,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Mode {
    Cache,
    Store,
}

fn parse_range(text: &str) -> Result<(usize, usize), String> {
    let parse = |t: &str| t.trim().parse::<usize>().map_err(|_| format!("bad size {t:?}"));
    let (min, max) = match text.split_once("..") {
        Some((a, b)) => (parse(a)?, parse(b)?),
        None => (parse(text)?, parse(text)?),
    };
    if min > max {
        return Err(format!("empty range {text:?}"));
    }
    Ok((min, max))
}

/// Deterministic data, generated once: the key of every request in request order (as a server
/// finds keys one after another in its receive buffer), and the values.
struct Dataset {
    key_bytes: usize,
    /// Key number of each request.
    sequence: Vec<u32>,
    /// The keys of `sequence`, back to back.
    request_keys: Vec<u8>,
    value_range: (usize, usize),
    pool: Vec<u8>,
    seed: u64,
}

const POOL_BYTES: usize = 1 << 20;

/// The baseline the engine is compared with.
type BoxedMap = HashMap<Box<[u8]>, Box<[u8]>>;

impl Dataset {
    fn new(args: &Args) -> Dataset {
        // 2^24 requests, or fewer so the keys take at most 256 MiB; the loops cycle through it.
        let mut length = 1usize << 24;
        while length > 1024 && length * args.key_bytes > 256 << 20 {
            length /= 2;
        }
        let sequence = key_sequence(args.dist, args.items, length, args.seed);
        let mut request_keys = vec![0u8; length * args.key_bytes];
        for (key, &i) in request_keys.chunks_exact_mut(args.key_bytes).zip(&sequence) {
            write_key(u64::from(i), key);
        }
        let mut rng = Rng::new(args.seed ^ 0x5EED);
        let pool = (0..POOL_BYTES + args.value_bytes.1).map(|_| rng.next_u64() as u8).collect();
        Dataset {
            key_bytes: args.key_bytes,
            sequence,
            request_keys,
            value_range: args.value_bytes,
            pool,
            seed: args.seed,
        }
    }

    /// The key of request `r` (modulo the cycle) and its key number.
    #[inline]
    fn request(&self, r: usize) -> (&[u8], u32) {
        (self.request_key(r), self.sequence[r & (self.sequence.len() - 1)])
    }

    /// The key of request `r` (modulo the cycle).
    #[inline]
    fn request_key(&self, r: usize) -> &[u8] {
        let start = (r & (self.sequence.len() - 1)) * self.key_bytes;
        &self.request_keys[start..start + self.key_bytes]
    }

    /// Key number `i` written into `out`.
    fn key_into<'a>(&self, i: u32, out: &'a mut [u8]) -> &'a [u8] {
        write_key(u64::from(i), &mut out[..self.key_bytes]);
        &out[..self.key_bytes]
    }

    fn value(&self, i: u32) -> &[u8] {
        let h = tierkv_bench::workload::mix64(u64::from(i) ^ self.seed);
        let (min, max) = self.value_range;
        let len = min + (h % (max - min + 1) as u64) as usize;
        let start = (h >> 32) as usize % POOL_BYTES;
        &self.pool[start..start + len]
    }

    fn mean_value_bytes(&self) -> f64 {
        (self.value_range.0 + self.value_range.1) as f64 / 2.0
    }
}

/// Folds every byte of a value into a checksum.
#[inline]
fn fold(checksum: u64, value: &[u8]) -> u64 {
    let mut sum = checksum;
    let mut words = value.chunks_exact(8);
    for word in &mut words {
        sum = sum.rotate_left(5) ^ u64::from_le_bytes(word.try_into().unwrap());
    }
    for &byte in words.remainder() {
        sum = sum.rotate_left(5) ^ u64::from(byte);
    }
    sum
}

/// Runs `step` (which does one batch and returns the operations it did) until `seconds` pass.
/// `--rounds`, if given: every phase runs exactly this many rounds (0: timed by `--seconds`).
static FIXED_ROUNDS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn timed(seconds: f64, mut step: impl FnMut(usize) -> usize) -> (u64, Duration) {
    let limit = Duration::from_secs_f64(seconds);
    let start = Instant::now();
    let mut ops = 0u64;
    let mut round = 0usize;
    let fixed = FIXED_ROUNDS.load(std::sync::atomic::Ordering::Relaxed);
    if fixed > 0 {
        for round in 0..fixed {
            ops += step(round) as u64;
        }
        return (ops, start.elapsed());
    }
    loop {
        for _ in 0..256 {
            ops += step(round) as u64;
            round += 1;
        }
        let elapsed = start.elapsed();
        if elapsed >= limit {
            return (ops, elapsed);
        }
    }
}

fn mops(ops: u64, elapsed: Duration) -> f64 {
    ops as f64 / elapsed.as_secs_f64() / 1e6
}

/// What the timed phases need of an engine (cache or store mode).
trait Bench {
    /// GETs `keys`, calling `on_value` with each found value.
    fn get_values(&mut self, keys: &[&[u8]], on_value: &mut dyn FnMut(&[u8]));
    /// SETs `requests`; returns how many failed.
    fn set_all(&mut self, requests: &[SetRequest<'_>]) -> u64;
}

impl<P: Engine> Bench for P {
    fn get_values(&mut self, keys: &[&[u8]], on_value: &mut dyn FnMut(&[u8])) {
        self.get_batch(keys, |_, result| {
            if let Ok(Some(Item { value, .. })) = result {
                on_value(value);
            }
        });
    }

    fn set_all(&mut self, requests: &[SetRequest<'_>]) -> u64 {
        let mut errors = 0;
        self.set_batch(requests, |_, result| errors += u64::from(result.is_err()));
        errors
    }
}

/// Writes every key once, in key order, in batches; returns the time taken and the failures.
fn preload_all(engine: &mut impl Bench, data: &Dataset, args: &Args) -> (Duration, u64) {
    let start = Instant::now();
    let mut errors = 0;
    let mut key_buffer = vec![0u8; args.batch * args.key_bytes];
    for first in (0..args.items as u32).step_by(args.batch) {
        let last = (first + args.batch as u32).min(args.items as u32);
        for (i, key) in (first..last).zip(key_buffer.chunks_exact_mut(args.key_bytes)) {
            write_key(u64::from(i), key);
        }
        let preload: Vec<SetRequest<'_>> = (first..last)
            .zip(key_buffer.chunks_exact(args.key_bytes))
            .map(|(i, key)| SetRequest { key, value: data.value(i), flags: 0, exptime: 0 })
            .collect();
        errors += engine.set_all(&preload);
    }
    (start.elapsed(), errors)
}

/// The timed GET phase along the request sequence: (operations, time, hits, checksum).
#[inline(never)]
fn get_phase(engine: &mut impl Bench, data: &Dataset, args: &Args) -> (u64, Duration, u64, u64) {
    let (mut hits, mut checksum) = (0u64, 0u64);
    let mut keys: Vec<&[u8]> = Vec::with_capacity(args.batch);
    let (ops, time) = timed(args.seconds, |round| {
        keys.clear();
        let base = round * args.batch;
        keys.extend((0..args.batch).map(|j| data.request_key(base + j)));
        engine.get_values(&keys, &mut |value| {
            hits += 1;
            checksum = fold(checksum, value);
        });
        args.batch
    });
    (ops, time, hits, checksum)
}

/// The timed SET phase (overwrites with the same values along the sequence from `offset`):
/// (operations, time, failures).
#[inline(never)]
fn set_phase(engine: &mut impl Bench, data: &Dataset, args: &Args, offset: usize) -> (u64, Duration, u64) {
    let mut errors = 0;
    let mut requests: Vec<SetRequest<'_>> = Vec::with_capacity(args.batch);
    let seconds = if args.no_sets { 1e-9 } else { args.seconds };
    let (ops, time) = timed(seconds, |round| {
        requests.clear();
        let base = offset + round * args.batch;
        for j in 0..args.batch {
            let (key, i) = data.request(base + j);
            requests.push(SetRequest { key, value: data.value(i), flags: 0, exptime: 0 });
        }
        errors += engine.set_all(&requests);
        args.batch
    });
    (ops, time, errors)
}

fn engine_config(args: &Args, data: &Dataset) -> PartitionConfig {
    let mean_item = item_log_bytes(args.key_bytes, data.mean_value_bytes().round() as usize);
    let max_item_bytes = DEFAULT_MAX_ITEM_BYTES.max(item_log_bytes(args.key_bytes, args.value_bytes.1));
    match args.memory_mib {
        Some(mib) => PartitionConfig {
            memory_bytes: mib << 20,
            max_memory_bytes: None,
            index_buckets: None,
            max_item_bytes,
            expected_item_bytes: args.key_bytes + data.mean_value_bytes() as usize,
        },
        None => {
            // Two index slots per item, and a log with 15% room beyond the items (overwrites
            // leave dead copies behind until the tail comes round).
            let buckets = (args.items as usize).div_ceil(4).next_power_of_two().max(2);
            let log_bytes = (args.items as f64 * mean_item as f64 * 1.15) as usize + 2 * max_item_bytes;
            PartitionConfig {
                memory_bytes: buckets * 64 + log_bytes + max_item_bytes,
                max_memory_bytes: None,
                index_buckets: Some(buckets),
                max_item_bytes,
                expected_item_bytes: args.key_bytes + data.mean_value_bytes() as usize,
            }
        }
    }
}

struct Figures {
    fields: Vec<(&'static str, String)>,
}

impl Figures {
    fn put(&mut self, name: &'static str, value: impl std::fmt::Display) {
        self.fields.push((name, value.to_string()));
    }

    fn put_str(&mut self, name: &'static str, value: &str) {
        self.fields.push((name, format!("\"{value}\"")));
    }

    fn json(&self) -> String {
        let body: Vec<String> = self.fields.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
        format!("{{{}}}", body.join(","))
    }
}

fn main() {
    let args = Args::parse();
    FIXED_ROUNDS.store(args.rounds.unwrap_or(0), std::sync::atomic::Ordering::Relaxed);
    if let Err(message) = validate(&args) {
        eprintln!("engine-bench: {message}");
        std::process::exit(2);
    }
    if args.mode == Mode::Store {
        store_mode::run(&args);
        return;
    }
    let data = Dataset::new(&args);
    let config = engine_config(&args, &data);
    let mut engine = match Partition::new(&config) {
        Ok(engine) => engine,
        Err(error) => {
            eprintln!("engine-bench: cannot create the partition: {error}");
            std::process::exit(2);
        }
    };
    eprintln!(
        "engine-bench: {} items, key {} B, value {:?} B, {}, batch {}, index {} MiB, log {} MiB",
        args.items,
        args.key_bytes,
        args.value_bytes,
        args.dist,
        args.batch,
        engine.index_bytes() >> 20,
        engine.log_bytes() >> 20
    );
    // Preload every key once, in key order.
    let (preload, errors) = preload_all(&mut engine, &data, &args);
    let resident_items = engine.resident_items();
    let mismatches = verify(&mut engine, &data, &args);
    eprintln!("preload: {:.2} Mops, {resident_items} resident, {mismatches} wrong values", mops(args.items, preload));
    let mut run = Run { preload, resident_items, errors: errors + mismatches, ..Run::default() };
    let engine = match args.dispatch {
        Dispatch::Direct => {
            run.phases(&mut engine, &data, &args);
            engine
        }
        // Through the enum the server holds, to measure what its dispatch costs.
        Dispatch::Enum => {
            let mut any = AnyPartition::Cache(engine);
            run.phases(&mut any, &data, &args);
            match any {
                AnyPartition::Cache(engine) => engine,
                AnyPartition::Store(_) => unreachable!("built as a cache partition"),
            }
        }
    };
    report(&engine, &run, &data, &args);
    if run.errors > 0 {
        eprintln!("engine-bench: {} failed operations or wrong values", run.errors);
        std::process::exit(1);
    }
}

/// What the phases measured.
#[derive(Default)]
struct Run {
    preload: Duration,
    resident_items: usize,
    errors: u64,
    get_mops: f64,
    set_mops: f64,
    hit_ratio: f64,
    checksum: u64,
    map_get_mops: f64,
    map_set_mops: f64,
    map_checksum: u64,
}

impl Run {
    /// Engine GET, HashMap GET, engine SET, HashMap SET, in that order.
    fn phases(&mut self, engine: &mut impl Bench, data: &Dataset, args: &Args) {
        let (get_ops, get_time, hits, checksum) = get_phase(engine, data, args);
        (self.get_mops, self.hit_ratio, self.checksum) =
            (mops(get_ops, get_time), hits as f64 / get_ops as f64, checksum);
        eprintln!("engine GET: {:.2} Mops, hit ratio {:.4}, checksum {checksum:016x}", self.get_mops, self.hit_ratio);
        let mut map = (!args.no_hashmap).then(|| self.map_get_phase(data, args));
        // Engine SET (overwrites with the same values, along the same sequence).
        let offset = get_ops as usize;
        let (set_ops, set_time, set_errors) = set_phase(engine, data, args, offset);
        self.errors += set_errors;
        self.set_mops = mops(set_ops, set_time);
        eprintln!("engine SET: {:.2} Mops", self.set_mops);
        self.map_set_mops = f64::NAN;
        if let Some(map) = map.as_mut().filter(|_| !args.no_sets) {
            self.map_set_phase(map, data, args, offset);
        }
    }

    /// The HashMap baseline's GET phase: the map, filled with every item.
    fn map_get_phase(&mut self, data: &Dataset, args: &Args) -> BoxedMap {
        let batch = args.batch;
        let mut map = HashMap::with_capacity(args.items as usize);
        let mut key = [0u8; tierkv_engine::MAX_KEY_BYTES];
        for i in 0..args.items as u32 {
            map.insert(Box::from(data.key_into(i, &mut key)), Box::from(data.value(i)));
        }
        let mut checksum = 0;
        let (ops, time) = timed(args.seconds, |round| {
            let base = round * batch;
            for j in 0..batch {
                if let Some(value) = map.get(data.request_key(base + j)) {
                    checksum = fold(checksum, value);
                }
            }
            batch
        });
        (self.map_get_mops, self.map_checksum) = (mops(ops, time), checksum);
        eprintln!("HashMap GET: {:.2} Mops, checksum {checksum:016x}", self.map_get_mops);
        map
    }

    fn map_set_phase(&mut self, map: &mut BoxedMap, data: &Dataset, args: &Args, offset: usize) {
        let batch = args.batch;
        let (ops, time) = timed(args.seconds, |round| {
            let base = offset + round * batch;
            for j in 0..batch {
                let (key, i) = data.request(base + j);
                match map.get_mut(key) {
                    Some(value) => *value = Box::from(data.value(i)),
                    None => {
                        map.insert(Box::from(key), Box::from(data.value(i)));
                    }
                }
            }
            batch
        });
        self.map_set_mops = mops(ops, time);
        eprintln!("HashMap SET: {:.2} Mops", self.map_set_mops);
    }
}

/// Prints the memory figures, and the JSON line with `--json`.
fn report(engine: &Partition, run: &Run, data: &Dataset, args: &Args) {
    let resident_items = run.resident_items;
    let allocated = engine.allocated_bytes();
    let payload = (args.key_bytes as f64 + data.mean_value_bytes()) * resident_items as f64;
    let overhead = (allocated as f64 - payload) / resident_items.max(1) as f64;
    let stats = engine.stats();
    let key_bytes = args.key_bytes;
    let model = engine.memory_overhead(key_bytes, data.mean_value_bytes().round() as usize);
    eprintln!(
        "memory: {allocated} bytes allocated, {overhead:.2} bytes/item overhead at {resident_items} resident \
         (model when full: header {} + index {:.2} -> {:.2} bytes/item)",
        model.header_bytes, model.index_bytes_per_item, model.total_bytes_per_item
    );
    if !args.json {
        return;
    }
    let mut figures = Figures { fields: Vec::new() };
    figures.put("get_mops", format!("{:.3}", run.get_mops));
    figures.put("set_mops", format!("{:.3}", run.set_mops));
    figures.put("hashmap_get_mops", json_float(if args.no_hashmap { f64::NAN } else { run.map_get_mops }));
    figures.put("hashmap_set_mops", json_float(run.map_set_mops));
    figures.put("hit_ratio", format!("{:.5}", run.hit_ratio));
    figures.put("resident_items", resident_items);
    figures.put("resident_items_after_sets", engine.resident_items());
    figures.put("allocated_bytes", allocated);
    figures.put("overhead_bytes_per_item", format!("{overhead:.3}"));
    figures.put("index_bytes", engine.index_bytes());
    figures.put("log_bytes", engine.log_bytes());
    figures.put("header_bytes", model.header_bytes);
    figures.put("preload_mops", format!("{:.3}", mops(args.items, run.preload)));
    figures.put("index_evictions", stats.index_evictions);
    figures.put("reappends", stats.reappends);
    figures.put("checksum", format!("\"{:016x}\"", run.checksum));
    figures.put("hashmap_checksum", format!("\"{:016x}\"", run.map_checksum));
    figures.put("errors", run.errors);
    figures.put("items", args.items);
    figures.put("key_bytes", key_bytes);
    figures.put_str("value_bytes", &format!("{}..{}", args.value_bytes.0, args.value_bytes.1));
    figures.put_str("dist", &args.dist.to_string());
    figures.put_str("dispatch", if args.dispatch == Dispatch::Enum { "enum" } else { "direct" });
    figures.put("batch", args.batch);
    figures.put("seconds", args.seconds);
    println!("{}", figures.json());
}

fn json_float(value: f64) -> String {
    if value.is_finite() {
        format!("{value:.3}")
    } else {
        "null".to_string()
    }
}

fn validate(args: &Args) -> Result<(), String> {
    if args.items == 0 || args.items > u64::from(u32::MAX) {
        return Err("--items must be between 1 and 2^32 - 1".into());
    }
    if args.key_bytes == 0 || args.key_bytes > tierkv_engine::MAX_KEY_BYTES {
        return Err("--key-bytes must be between 1 and 250".into());
    }
    if args.key_bytes < 8 && args.items > 1u64 << (8 * args.key_bytes) {
        return Err(format!("{} items need keys of more than {} bytes", args.items, args.key_bytes));
    }
    if args.batch == 0 || args.batch > 4096 {
        return Err("--batch must be between 1 and 4096".into());
    }
    if args.seconds.is_nan() || args.seconds <= 0.0 {
        return Err("--seconds must be positive".into());
    }
    Ok(())
}

/// Reads back a sample of keys and counts values that differ from what was written (misses
/// are allowed: the index is lossy).
fn verify(engine: &mut Partition, data: &Dataset, args: &Args) -> u64 {
    let mut rng = Rng::new(args.seed ^ 0xC0FFEE);
    let mut wrong = 0;
    let mut key = [0u8; tierkv_engine::MAX_KEY_BYTES];
    for _ in 0..100_000.min(args.items) {
        let i = rng.below(args.items) as u32;
        if let Ok(Some(item)) = engine.get(data.key_into(i, &mut key)) {
            wrong += u64::from(item.value != data.value(i));
        }
    }
    wrong
}

/// `--mode store`: the store-mode partition, GET and SET phases (same keys, values, batches and
/// JSON names as cache mode), or with `--fill` the allocator's utilization after churn.
mod store_mode {
    use super::{get_phase, mops, preload_all, set_phase, Args, Dataset, Figures};
    use super::{write_key, Engine, Instant, Rng, DEFAULT_MAX_ITEM_BYTES};
    use tierkv_engine::{StoreConfig, StorePartition, STORE_FIXED_HEADER_BYTES};

    fn partition(args: &Args, memory_bytes: usize) -> StorePartition {
        let config = StoreConfig {
            memory_bytes,
            max_item_bytes: DEFAULT_MAX_ITEM_BYTES,
            expected_item_bytes: args.key_bytes + (args.value_bytes.0 + args.value_bytes.1) / 2,
        };
        StorePartition::new(&config).unwrap_or_else(|error| {
            eprintln!("engine-bench: cannot create the store partition: {error}");
            std::process::exit(2);
        })
    }

    pub(super) fn run(args: &Args) {
        if args.fill {
            return fill(args);
        }
        let data = Dataset::new(args);
        let mean_item = STORE_FIXED_HEADER_BYTES + args.key_bytes + data.mean_value_bytes() as usize;
        // Room for every item (rounded to 8-byte blocks) and its index share, with 10% spare.
        let default_bytes = (args.items as f64 * (mean_item.div_ceil(8) * 8 + 16) as f64 * 1.1) as usize + (64 << 20);
        let mut engine = partition(args, args.memory_mib.map_or(default_bytes, |mib| mib << 20));
        let batch = args.batch;
        let (preload, mut errors) = preload_all(&mut engine, &data, args);
        eprintln!("store preload: {:.2} Mops, {errors} refused", mops(args.items, preload));
        let (get_ops, get_time, hits, checksum) = get_phase(&mut engine, &data, args);
        let get_mops = mops(get_ops, get_time);
        let hit_ratio = hits as f64 / get_ops as f64;
        eprintln!("store GET: {get_mops:.2} Mops, hit ratio {hit_ratio:.4}, checksum {checksum:016x}");
        let (set_ops, set_time, set_errors) = set_phase(&mut engine, &data, args, get_ops as usize);
        errors += set_errors;
        let set_mops = mops(set_ops, set_time);
        eprintln!("store SET: {set_mops:.2} Mops");
        let stats = engine.memory_stats();
        let mut figures = Figures { fields: Vec::new() };
        figures.put_str("mode", "store");
        figures.put("get_mops", format!("{get_mops:.3}"));
        figures.put("set_mops", format!("{set_mops:.3}"));
        figures.put("hit_ratio", format!("{hit_ratio:.5}"));
        figures.put("live_items", stats.live_items);
        figures.put("allocated_bytes", engine.allocated_bytes());
        figures.put(
            "overhead_bytes_per_item",
            format!(
                "{:.3}",
                (engine.allocated_bytes() as f64 - stats.payload_bytes as f64) / stats.live_items.max(1) as f64
            ),
        );
        figures.put("spare_buckets_free", stats.spare_buckets_free);
        figures.put("preload_mops", format!("{:.3}", mops(args.items, preload)));
        figures.put("checksum", format!("\"{checksum:016x}\""));
        figures.put("errors", errors);
        figures.put("items", args.items);
        figures.put("key_bytes", args.key_bytes);
        figures.put_str("value_bytes", &format!("{}..{}", args.value_bytes.0, args.value_bytes.1));
        figures.put_str("dist", &args.dist.to_string());
        figures.put("batch", batch);
        if args.json {
            println!("{}", figures.json());
        }
    }

    /// Churn, then fill until the first refused write; report how well the memory is used.
    fn fill(args: &Args) {
        let Some(mib) = args.memory_mib else {
            eprintln!("engine-bench: --fill needs --memory-mib");
            std::process::exit(2);
        };
        let budget = mib << 20;
        let mut engine = partition(args, budget);
        let (min, max) = args.value_bytes;
        let mut rng = Rng::new(args.seed ^ 0xF111);
        let pool: Vec<u8> = (0..max + 4096).map(|_| rng.next_u64() as u8).collect();
        let mut key = vec![0u8; args.key_bytes];
        // Keys are numbered; a churn step overwrites or deletes a random key below `next`.
        let mut next = 0u64;
        let mut written = 0usize;
        let mut refused = 0u64;
        let value = |rng: &mut Rng| {
            let len = min + rng.below((max - min + 1) as u64) as usize;
            let start = rng.below(4096) as usize;
            &pool[start..start + len]
        };
        let start = Instant::now();
        while written < 3 * budget {
            let roll = rng.below(10);
            if roll < 2 && next > 0 {
                write_key(rng.below(next), &mut key);
                let _ = engine.delete(&key, 0);
                continue;
            }
            let number = if roll < 6 && next > 0 { rng.below(next) } else { next };
            write_key(number, &mut key);
            let value = value(&mut rng);
            match engine.set(&key, value, 0, 0) {
                Ok(_) => {
                    written += key.len() + value.len();
                    next = next.max(number + 1);
                }
                // Full: make room the way a store's user would, by deleting.
                Err(_) => {
                    refused += 1;
                    for _ in 0..64 {
                        write_key(rng.below(next.max(1)), &mut key);
                        let _ = engine.delete(&key, 0);
                    }
                }
            }
        }
        let churn = start.elapsed();
        // Fill with new keys until the first write fails.
        loop {
            write_key(next, &mut key);
            next += 1;
            let value = value(&mut rng);
            if engine.set(&key, value, 0, 0).is_err() {
                break;
            }
        }
        let stats = engine.memory_stats();
        let utilization = stats.item_bytes as f64 / stats.managed_bytes as f64;
        let payload_ratio = stats.payload_bytes as f64 / budget as f64;
        eprintln!(
            "store fill: churn wrote {written} bytes ({refused} refused) in {:.1} s; at the first failed write: \
             {} items, allocator_utilization {utilization:.4}, payload_ratio {payload_ratio:.4}, \
             {} of {} bytes free, {} of {} spare buckets free",
            churn.as_secs_f64(),
            stats.live_items,
            stats.free_bytes,
            stats.managed_bytes,
            stats.spare_buckets_free,
            stats.spare_buckets,
        );
        let mut figures = Figures { fields: Vec::new() };
        figures.put_str("mode", "store");
        figures.put("memory_mib", mib);
        figures.put("key_bytes", args.key_bytes);
        figures.put_str("value_bytes", &format!("{min}..{max}"));
        figures.put("churn_bytes_written", written);
        figures.put("live_items", stats.live_items);
        figures.put("allocator_utilization", format!("{utilization:.4}"));
        figures.put("payload_ratio", format!("{payload_ratio:.4}"));
        figures.put("free_bytes", stats.free_bytes);
        figures.put("spare_buckets_free", stats.spare_buckets_free);
        figures.put("fixed_header_bytes", STORE_FIXED_HEADER_BYTES);
        if args.json {
            println!("{}", figures.json());
        }
    }
}
