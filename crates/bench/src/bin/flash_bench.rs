//! flash-bench: the flash store alone on a real file, one thread. Inserts N items, then GETs of
//! present keys and of absent keys at a fixed queue depth, then a clean close and a reopen.
//! Prints inserts/s, GET hits/s, reads per hit and per miss, device bytes, DRAM bytes per flash
//! item (every heap byte the store holds), write amplification, hit latency and reopen time.
//! Prints figures; never fails on a time.

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use hdrhistogram::Histogram;
use tierkv_bench::loadgen::process_cpu_seconds;
use tierkv_bench::workload::{key_sequence, write_text_key, Distribution};
use tierkv_engine::flash::{
    engine_for, open_file, CascadeConfig, CascadeStats, FlashConfig, FlashIo, FlashStore, InsertOutcome, ItemMeta,
    Lookup, Now, ReadDone, SetsConfig, SetsStats,
};
use tierkv_engine::KeyHash;

#[derive(Parser, Debug)]
#[command(name = "flash-bench", about = "Measure the tierkv flash store alone on a real file")]
struct Args {
    /// The flash file (created; removed first unless --keep).
    #[arg(long, default_value = "target/flash-bench.bin")]
    path: PathBuf,
    /// Flash file size in MiB.
    #[arg(long, default_value_t = 1024)]
    size_mib: u64,
    #[arg(long, default_value_t = 16)]
    key_bytes: usize,
    #[arg(long, default_value_t = 100)]
    value_bytes: usize,
    /// Items inserted (default: what fills 90% of the file).
    #[arg(long)]
    items: Option<u64>,
    /// GETs of present keys (and as many of absent keys).
    #[arg(long, default_value_t = 500_000)]
    gets: usize,
    /// Lookups in flight.
    #[arg(long, default_value_t = 32)]
    depth: u32,
    /// The I/O engine: uring or threads.
    #[arg(long, alias = "flash-io", default_value = "uring")]
    io: FlashIo,
    #[arg(long, default_value_t = 1024)]
    segment_kib: u32,
    /// Index sizing: flash bytes per expected item (default: the item's size on flash).
    #[arg(long)]
    expected_item_bytes: Option<u32>,
    /// Key choice for GETs: uniform or zipf:THETA.
    #[arg(long, default_value = "uniform")]
    dist: Distribution,
    /// After the GETs, insert this fraction of `items` again as new keys while reading zipf-hot
    /// old keys (one read per 4 inserts), so GC runs: prints its rewrites and the write
    /// amplification with GC.
    #[arg(long, default_value_t = 0.5)]
    churn: f64,
    /// Keep an existing file (reopen it) instead of starting fresh.
    #[arg(long)]
    keep: bool,
    /// At the end, drop the store without closing it (as a kill -9 would) and time the
    /// reopen's crash recovery instead of a clean close and a reopen.
    #[arg(long)]
    crash: bool,
    /// The index: full (8 bytes of DRAM per item), cascade (Cascade Mapping) or sets (Kangaroo).
    #[arg(long, default_value = "full")]
    index: IndexKind,
    /// The sets index: percent of the file its log takes.
    #[arg(long, default_value_t = 5)]
    sets_log_percent: u32,
    /// The sets index: log items bound for a set that move them into it.
    #[arg(long, default_value_t = 2)]
    sets_threshold: u32,
    /// The cascade index's tier-1 DRAM budget in MiB.
    #[arg(long, default_value_t = 16)]
    index_mib: u64,
    /// GETs of present keys before the measured ones (the cascade index's tier 1 warms up).
    #[arg(long, default_value_t = 0)]
    warm_gets: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum IndexKind {
    Full,
    Cascade,
    Sets,
}

/// This process's user + system CPU seconds.
fn cpu_seconds() -> f64 {
    process_cpu_seconds(std::process::id()).unwrap_or(0.0)
}

fn now(start: Instant) -> Now {
    Now { unix: tierkv_engine::unix_now(), nanos: start.elapsed().as_nanos() as u64 + 1 }
}

fn open(args: &Args, start: Instant) -> (FlashStore, String) {
    let size = args.size_mib << 20;
    let (file, direct) = open_file(&args.path, size).unwrap_or_else(|e| panic!("{}: {e}", args.path.display()));
    let (engine, note) = engine_for(args.io, &file, args.depth.max(8)).expect("an I/O engine");
    let mut cfg = FlashConfig::new(size, 0, 1);
    cfg.segment_bytes = args.segment_kib << 10;
    cfg.max_reads = args.depth.max(1);
    let on_flash = tierkv_engine::flash::on_flash_item_bytes((args.key_bytes + args.value_bytes) as u32);
    cfg.expected_item_bytes = args.expected_item_bytes.unwrap_or(on_flash);
    if args.index == IndexKind::Cascade {
        cfg.cascade = Some(CascadeConfig::with_t1_bytes(args.index_mib << 20));
    }
    if args.index == IndexKind::Sets {
        let (log_percent, threshold) = (args.sets_log_percent, args.sets_threshold);
        cfg.sets = Some(SetsConfig { log_percent, threshold, ..SetsConfig::default() });
    }
    let (store, report) = FlashStore::open(engine, cfg, now(start)).unwrap_or_else(|e| panic!("open: {e}"));
    let mode = format!("io={} direct={direct} {} ({} items)", store.io_name(), report.reason, report.items);
    (store, note.map_or(mode.clone(), |n| format!("{mode}; {n}")))
}

fn insert_all(store: &mut FlashStore, args: &Args, items: u64, start: Instant) -> f64 {
    let mut key = vec![0u8; args.key_bytes];
    let value = vec![b'v'; args.value_bytes];
    let began = Instant::now();
    for i in 0..items {
        write_text_key(i, &mut key);
        let meta = ItemMeta { flags: 0, expiry: 0, cas: i + 1, state: 0 };
        while store.insert(KeyHash::of(&key), &key, &value, meta, now(start)) == InsertOutcome::Busy {
            store.wait(now(start), &mut Vec::new());
            store.commit();
        }
        // As the server's loop does each turn: completions, then the marks waiting to be written.
        if i % 1024 == 0 {
            store.poll(now(start), &mut Vec::new());
            store.commit();
        }
    }
    let seconds = began.elapsed().as_secs_f64();
    items as f64 / seconds
}

/// Looks up `keys` with `depth` in flight; returns (hits, seconds, hit latency histogram).
fn get_all(
    store: &mut FlashStore,
    args: &Args,
    keys: &[u32],
    offset: u64,
    start: Instant,
) -> (u64, f64, Histogram<u64>) {
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("histogram");
    let mut key = vec![0u8; args.key_bytes];
    let mut issued = vec![Instant::now(); keys.len()];
    let (mut hits, mut next) = (0u64, 0usize);
    let mut done: Vec<ReadDone> = Vec::new();
    let began = Instant::now();
    while next < keys.len() || store.in_flight() > 0 {
        while next < keys.len() && store.in_flight() < args.depth as usize {
            write_text_key(u64::from(keys[next]) + offset, &mut key);
            issued[next] = Instant::now();
            match store.lookup(KeyHash::of(&key), &key, next as u64, now(start)) {
                Lookup::Hit(_) => hits += 1,
                Lookup::Busy => break,
                Lookup::Miss | Lookup::Pending => {}
            }
            next += 1;
        }
        store.poll(now(start), &mut done);
        if done.is_empty() {
            store.wait(now(start), &mut done);
        }
        store.commit();
        for d in done.drain(..) {
            if d.item.is_some() {
                hits += 1;
                let _ = hist.record(issued[d.token as usize].elapsed().as_nanos() as u64);
            }
        }
    }
    (hits, began.elapsed().as_secs_f64(), hist)
}

/// New keys past `items` while zipf-hot old keys are read; GC keeps what was read.
fn churn(store: &mut FlashStore, args: &Args, items: u64, start: Instant) {
    let extra = (items as f64 * args.churn) as u64;
    if extra == 0 {
        return;
    }
    let hot = key_sequence(Distribution::Zipf(0.99), items, (extra / 4) as usize + 1, 11);
    let (mut key, value) = (vec![0u8; args.key_bytes], vec![b'w'; args.value_bytes]);
    let before = store.stats();
    let (mut done, mut looked, mut hits) = (Vec::new(), 0u64, 0u64);
    for i in 0..extra {
        write_text_key(2 * items + i, &mut key);
        let meta = ItemMeta { flags: 0, expiry: 0, cas: items + i + 1, state: 0 };
        while store.insert(KeyHash::of(&key), &key, &value, meta, now(start)) == InsertOutcome::Busy {
            store.wait(now(start), &mut done);
        }
        if i % 4 == 0 {
            write_text_key(u64::from(hot[(i / 4) as usize]), &mut key);
            while store.in_flight() >= args.depth as usize {
                store.wait(now(start), &mut done);
            }
            looked += 1;
            hits += u64::from(matches!(store.lookup(KeyHash::of(&key), &key, i, now(start)), Lookup::Hit(_)));
        }
        store.poll(now(start), &mut done);
        if i % 1024 == 0 {
            store.commit();
        }
        hits += done.drain(..).filter(|d| d.item.is_some()).count() as u64;
    }
    while store.in_flight() > 0 {
        store.wait(now(start), &mut done);
    }
    hits += done.drain(..).filter(|d| d.item.is_some()).count() as u64;
    let s = store.stats();
    println!(
        "churn: {extra} new items, {looked} zipf-hot reads of old keys ({:.4} hit); gc: {} reclaims, {} rewrites, {} items dropped, {} pressure drops; write amplification {:.3}",
        hits as f64 / looked.max(1) as f64,
        s.reclaims - before.reclaims,
        s.gc_rewrites - before.gc_rewrites,
        s.dropped_items - before.dropped_items,
        s.pressure_drops - before.pressure_drops,
        (s.write_bytes - before.write_bytes) as f64 / (s.admitted_bytes - before.admitted_bytes).max(1) as f64,
    );
}

fn main() {
    let args = Args::parse();
    let start = Instant::now();
    if !args.keep {
        let _ = std::fs::remove_file(&args.path);
    }
    let (mut store, mode) = open(&args, start);
    println!("flash-bench: {} MiB at {}, {mode}", args.size_mib, args.path.display());
    let on_flash = (32 + args.key_bytes + args.value_bytes).next_multiple_of(16) as u64;
    // 90% of the segment ring (the cascade index's mapping areas take part of the file), and
    // of the sets.
    let ring = u64::from(store.layout().slots) * u64::from(store.layout().segment_bytes);
    let in_sets =
        store.layout().sets.map_or(0, |s| u64::from(s.sets) * (4064 / (24 + args.key_bytes + args.value_bytes) as u64));
    let items = args.items.unwrap_or((ring / on_flash + in_sets) * 9 / 10);
    let rate = insert_all(&mut store, &args, items, start);
    let s = store.stats();
    println!(
        "insert: {items} items of {}+{} bytes, {rate:.0} inserts/s, {} stored, {} in the index",
        args.key_bytes, args.value_bytes, s.inserts, s.items
    );
    let keys = key_sequence(args.dist, items, args.gets, 7);
    if args.warm_gets > 0 {
        let warm = key_sequence(args.dist, items, args.warm_gets, 8);
        let (hits, seconds, _) = get_all(&mut store, &args, &warm, 0, start);
        println!("warm-up: {} gets, hit ratio {:.4}, {seconds:.1} s", warm.len(), hits as f64 / warm.len() as f64);
    }
    let tiers_before = store.cascade_stats();
    let sets_before = store.sets_stats();
    let before = store.stats();
    let cpu = cpu_seconds();
    let (hits, seconds, hist) = get_all(&mut store, &args, &keys, 0, start);
    let cpu = cpu_seconds() - cpu;
    let after = store.stats();
    println!(
        "get (present keys, {}, depth {}): {:.0} hits/s, hit ratio {:.4}, reads per hit {:.4}, p50 {:.1} us, p99 {:.1} us, cpu {:.2} us per get ({:.0}% of a core)",
        args.dist,
        args.depth,
        hits as f64 / seconds,
        hits as f64 / keys.len() as f64,
        (after.reads - before.reads) as f64 / hits.max(1) as f64,
        hist.value_at_quantile(0.5) as f64 / 1e3,
        hist.value_at_quantile(0.99) as f64 / 1e3,
        cpu * 1e6 / keys.len() as f64,
        cpu * 100.0 / seconds,
    );
    let tiers_after = store.cascade_stats();
    println!(
        "misses by reason: index {}, superseded {}, corrupt or unreadable {}, other key {}, expired {}, busy {}",
        after.miss_index - before.miss_index,
        after.miss_superseded - before.miss_superseded,
        after.miss_corrupt + after.miss_io_error - before.miss_corrupt - before.miss_io_error,
        after.miss_tag - before.miss_tag,
        after.miss_expired - before.miss_expired,
        after.read_busy - before.read_busy,
    );
    let (miss_hits, _, _) = get_all(&mut store, &args, &keys, items, start);
    let missed = store.stats();
    println!(
        "get (absent keys): {} lookups, {miss_hits} hits, reads per miss {:.5}",
        keys.len(),
        (missed.reads - after.reads) as f64 / keys.len() as f64
    );
    if let (Some(a), Some(b)) = (tiers_before, tiers_after) {
        report_tiers(&store, a, b);
    }
    if let (Some(a), Some(b)) = (sets_before, store.sets_stats()) {
        report_sets(a, b);
    }
    report_memory_and_writes(&store, hits as f64 / keys.len() as f64);
    churn(&mut store, &args, items, start);
    let began = Instant::now();
    if args.crash {
        // Writes in flight finish or not; the superblock still says "open".
        drop(store);
    } else {
        store.close(now(start)).expect("a clean close");
    }
    let closed = began.elapsed().as_secs_f64();
    let began = Instant::now();
    let (store, mode) = open(&Args { keep: true, ..args }, start);
    let reopened = began.elapsed().as_secs_f64();
    let gib = (store.layout().region_bytes as f64) / f64::from(1u32 << 30);
    let close = if args.crash { "dropped unclosed" } else { "close" };
    println!("{close}: {closed:.2} s; reopen: {reopened:.2} s = {:.2} s per GiB of flash; {mode}", reopened / gib);
    if let Some(x) = store.sets_stats().filter(|_| args.crash) {
        println!(
            "sets after the crash: {} pages taken back, {} of their items killed",
            x.recovered_sets, x.recovered_killed
        );
    }
}

/// Hits and flash reads by the tier that answered, over the measured GETs of present keys.
fn report_tiers(store: &FlashStore, a: CascadeStats, b: CascadeStats) {
    let per = |reads: u64, n: u64| reads as f64 / n.max(1) as f64;
    let (t1, t2, t3, miss) = (b.hits_t1 - a.hits_t1, b.hits_t2 - a.hits_t2, b.hits_t3 - a.hits_t3, b.misses - a.misses);
    println!(
        "tiers (present keys): tier 1 {t1} hits at {:.3} reads, tier 2 {t2} at {:.3}, tier 3 {t3} at {:.3}, {miss} misses at {:.3}; reads per hit {:.4}",
        per(b.reads_t1 - a.reads_t1, t1),
        per(b.reads_t2 - a.reads_t2, t2),
        per(b.reads_t3 - a.reads_t3, t3),
        per(b.reads_miss - a.reads_miss, miss),
        per(b.reads_t1 - a.reads_t1 + b.reads_t2 - a.reads_t2 + b.reads_t3 - a.reads_t3, t1 + t2 + t3),
    );
    let c = store.tier_counts();
    let s = store.cascade_stats().unwrap_or_default();
    println!(
        "cascade: mappings tier 1 {}, tier 2 {}, tier 3 {}; {} demotions, {} tombstones, {} promotions, {} tier-2 blocks, {} merges ({} MiB read, {} MiB written), {} page overflow drops, {} stream drops, {} merge errors",
        c.t1,
        c.t2,
        c.t3,
        s.demotions,
        s.tombstones,
        s.promotions,
        s.t2_blocks_written,
        s.reorgs,
        s.reorg_read_bytes >> 20,
        s.reorg_write_bytes >> 20,
        s.t3_overflow_drops,
        s.stream_drops,
        s.reorg_errors,
    );
}

/// The sets index: hits by where they were found, reads per hit and per miss over the measured
/// GETs (present and absent keys), and what the moves did since the start.
fn report_sets(a: SetsStats, b: SetsStats) {
    let per = |reads: u64, n: u64| reads as f64 / n.max(1) as f64;
    println!(
        "sets (measured gets): {} log hits, {} set hits, reads per hit {:.4}; {} misses at {:.4} reads ({} Bloom false positives)",
        b.hits_log - a.hits_log,
        b.hits_set - a.hits_set,
        per(b.reads_hit - a.reads_hit, b.hits_log - a.hits_log + b.hits_set - a.hits_set),
        b.misses - a.misses,
        per(b.reads_miss - a.reads_miss, b.misses - a.misses),
        b.false_positives - a.false_positives,
    );
    println!(
        "sets (since start): {} set writes carrying {} items ({:.2} per write), {} move reads, {} shadow moves, {} threshold drops, {} readmitted, {} RRIP evictions, {} tombstones, {} purges, {} voided, {} bad pages, {} I/O errors",
        b.set_writes,
        b.items_moved,
        b.items_per_write(),
        b.move_reads,
        b.shadow_moves,
        b.threshold_drops,
        b.readmitted,
        b.rrip_evictions,
        b.tombstones,
        b.purges,
        b.voided,
        b.bad_pages,
        b.io_errors,
    );
}

/// DRAM per item, counted two ways: per item the index holds (its own count) and per item a
/// uniform lookup finds (items inserted x `served`, the measured hit ratio on present keys).
fn report_memory_and_writes(store: &FlashStore, served: f64) {
    let s = store.stats();
    let m = store.memory();
    let items = s.items.max(1) as f64;
    let found = (s.inserts as f64 * served).max(1.0);
    println!(
        "dram: {:.3} bytes per indexed item ({} items), {:.3} per item found ({found:.0} = inserts x hit ratio); per indexed item: index/tier 1/log index {:.3}, demotion blocks {:.3}, tier-2 filters {:.3}, tier-3 filters {:.3}, merge buffers {:.3}, set filters {:.3}, set state {:.3}, set moves {:.3}, segment table {:.3}, write buffers {:.3}, gc buffer {:.3}, reads {:.3}",
        m.total() as f64 / items,
        s.items,
        m.total() as f64 / found,
        m.index as f64 / items,
        m.demotion as f64 / items,
        m.t2_filters as f64 / items,
        m.t3_filters as f64 / items,
        m.merge_buffers as f64 / items,
        m.set_filters as f64 / items,
        m.set_state as f64 / items,
        m.set_moves as f64 / items,
        m.segment_table as f64 / items,
        m.write_buffers as f64 / items,
        m.gc_buffer as f64 / items,
        m.reads as f64 / items
    );
    println!(
        "device: {} bytes written, {} read; write amplification {:.3} (device bytes written / bytes of items admitted); {} index evictions, {} busy",
        s.write_bytes,
        s.read_bytes,
        s.write_bytes as f64 / s.admitted_bytes.max(1) as f64,
        s.index_evictions,
        s.busy
    );
}
