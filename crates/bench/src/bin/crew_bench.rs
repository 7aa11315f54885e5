//! crew-bench: the parts of issue 29's model, in-process. One partition of `--items` items;
//! prints ns per operation of: a local GET by the owner, a concurrent read (CREW) of the same
//! keys from this thread, CREW reads while the owner thread writes at full speed on another
//! thread (with how many the owner had to answer), one request round trip between two
//! threads through a pair of bounded queues (what forwarding costs at minimum, without the
//! event loop), and a SET with and without a partition lock taken around it, alone and with
//! two threads taking turns at the lock (`--concurrency crcw`; the lock here is a std
//! `Mutex` taken with `try_lock` in a spin, the same compare-and-swap and release store as the
//! server's `sys::partition_lock`). Prints figures; never fails on a time.

use clap::Parser;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;
use tierkv_bench::workload::{key_sequence, write_key, Distribution, Rng};
use tierkv_engine::{CrewGet, CrewReader, Engine, KeyHash, Partition, PartitionConfig, DEFAULT_MAX_ITEM_BYTES};

#[derive(Parser, Debug)]
#[command(name = "crew-bench", about = "Measure local reads, concurrent reads and a thread round trip")]
struct Args {
    #[arg(long, default_value_t = 1_000_000)]
    items: u64,
    #[arg(long, default_value_t = 16)]
    key_bytes: usize,
    #[arg(long, default_value_t = 32)]
    value_bytes: usize,
    #[arg(long, default_value = "zipf:0.99")]
    dist: Distribution,
    /// Operations per measured phase.
    #[arg(long, default_value_t = 5_000_000)]
    ops: u64,
}

fn key(buf: &mut Vec<u8>, id: u64, bytes: usize) {
    buf.clear();
    buf.resize(bytes, 0);
    write_key(id, buf);
}

fn main() {
    let args = Args::parse();
    let config = PartitionConfig {
        memory_bytes: (args.items as usize * (args.key_bytes + args.value_bytes + 8) * 2).max(64 << 20),
        max_memory_bytes: None,
        index_buckets: None,
        max_item_bytes: DEFAULT_MAX_ITEM_BYTES,
        expected_item_bytes: args.key_bytes + args.value_bytes + 4,
    };
    let mut p = Partition::new(&config).expect("a partition");
    p.set_clock(tierkv_engine::unix_now());
    let value = vec![b'v'; args.value_bytes];
    let mut k = Vec::new();
    for id in 0..args.items {
        key(&mut k, id, args.key_bytes);
        p.set(&k, &value, 0, 0).expect("set");
        let _ = p.get(&k);
    }
    let ids: Vec<u32> = key_sequence(args.dist, args.items, 1 << 20, 7);
    let now = tierkv_engine::unix_now();
    let mut sum = 0u64;
    let start = Instant::now();
    for i in 0..args.ops {
        key(&mut k, u64::from(ids[i as usize & ((1 << 20) - 1)]), args.key_bytes);
        if let Ok(Some(item)) = p.get(&k) {
            sum += item.value.len() as u64;
        }
    }
    let local = start.elapsed().as_nanos() as f64 / args.ops as f64;
    let reader = p.crew_reader();
    let idle = crew_reads(&reader, &ids, &args, now);
    println!(
        "local GET {local:.1} ns/op; CREW read {:.1} ns/op (owner left {}); checksum {}",
        idle.ns,
        idle.owner,
        sum + idle.bytes
    );

    // CREW reads while the owner writes on another thread.
    let stop = Arc::new(AtomicBool::new(false));
    let writes = Arc::new(AtomicU64::new(0));
    let writer = {
        let (stop, writes, args_items, key_bytes) =
            (Arc::clone(&stop), Arc::clone(&writes), args.items, args.key_bytes);
        std::thread::spawn(move || {
            let mut rng = Rng::new(11);
            let mut k = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                key(&mut k, rng.below(args_items), key_bytes);
                p.set(&k, &value, 0, 0).expect("set");
                p.apply_crew_notices();
                writes.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let busy = crew_reads(&reader, &ids, &args, now);
    stop.store(true, Ordering::Relaxed);
    writer.join().expect("the writer");
    let w = writes.load(Ordering::Relaxed);
    println!(
        "CREW read beside a writing owner {:.1} ns/op ({w} writes meanwhile; owner left {:.2}%, misses {}); checksum {}",
        busy.ns,
        busy.owner as f64 * 100.0 / args.ops as f64,
        busy.misses,
        busy.bytes
    );
    println!("round trip between two threads: {:.0} ns", round_trip(200_000));
    locked_sets(&args, &config);
}

/// SETs of random keys: by the owner alone, under an uncontended lock, and by two threads that
/// share the partition through the lock, each taking it for every SET (ns per SET, all threads).
fn locked_sets(args: &Args, config: &PartitionConfig) {
    let sets = args.ops / 2;
    let value = vec![b'v'; args.value_bytes];
    let run = |p: &mut dyn FnMut(&[u8]), seed: u64| {
        let (mut rng, mut k) = (Rng::new(seed), Vec::new());
        let start = Instant::now();
        for _ in 0..sets {
            key(&mut k, rng.below(args.items), args.key_bytes);
            p(&k);
        }
        start.elapsed().as_nanos() as f64 / sets as f64
    };
    let mut plain = Partition::new(config).expect("a partition");
    // Every key once first, so each measured phase overwrites items that exist.
    let mut k = Vec::new();
    for id in 0..args.items {
        key(&mut k, id, args.key_bytes);
        plain.set(&k, &value, 0, 0).expect("set");
    }
    let alone = run(&mut |k| plain.set(k, &value, 0, 0).map(drop).expect("set"), 3);
    let shared = Arc::new(Mutex::new(plain));
    let uncontended = run(&mut |k| spin_lock(&shared).set(k, &value, 0, 0).map(drop).expect("set"), 5);
    let start = Instant::now();
    let threads: Vec<_> = (0..2u64)
        .map(|t| {
            let (shared, value, items, key_bytes) = (Arc::clone(&shared), value.clone(), args.items, args.key_bytes);
            std::thread::spawn(move || {
                let (mut rng, mut k) = (Rng::new(9 + t), Vec::new());
                for _ in 0..sets {
                    key(&mut k, rng.below(items), key_bytes);
                    spin_lock(&shared).set(&k, &value, 0, 0).map(drop).expect("set");
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("a setting thread");
    }
    let contended = start.elapsed().as_nanos() as f64 / (2 * sets) as f64;
    println!(
        "SET alone {alone:.1} ns/op; under an uncontended lock {uncontended:.1} ns/op; \
         two threads sharing the lock {contended:.1} ns per SET (elapsed / all SETs)"
    );
}

fn spin_lock(shared: &Mutex<Partition>) -> MutexGuard<'_, Partition> {
    loop {
        if let Ok(guard) = shared.try_lock() {
            return guard;
        }
        std::hint::spin_loop();
    }
}

/// What one phase of concurrent reads measured.
struct Reads {
    ns: f64,
    bytes: u64,
    owner: u64,
    misses: u64,
}

/// `args.ops` concurrent reads of the keys `ids` names, timed.
fn crew_reads(reader: &CrewReader, ids: &[u32], args: &Args, now: u32) -> Reads {
    let (mut k, mut out) = (Vec::new(), Vec::new());
    let mut reads = Reads { ns: 0.0, bytes: 0, owner: 0, misses: 0 };
    let start = Instant::now();
    for i in 0..args.ops {
        key(&mut k, u64::from(ids[i as usize % ids.len()]), args.key_bytes);
        match reader.get(&k, KeyHash::of(&k), now, &mut out) {
            CrewGet::Hit { .. } => reads.bytes += out.len() as u64,
            CrewGet::Owner => reads.owner += 1,
            CrewGet::Miss => reads.misses += 1,
        }
    }
    reads.ns = start.elapsed().as_nanos() as f64 / args.ops as f64;
    reads
}

/// One request and its reply between two spinning threads through two queues (crossbeam-free:
/// a pair of atomics), in ns per round trip: the floor of what forwarding a request costs.
fn round_trip(rounds: u64) -> f64 {
    let ping = Arc::new(AtomicU64::new(0));
    let pong = Arc::new(AtomicU64::new(0));
    let other = {
        let (ping, pong) = (Arc::clone(&ping), Arc::clone(&pong));
        std::thread::spawn(move || {
            for i in 1..=rounds {
                while ping.load(Ordering::Acquire) != i {
                    std::hint::spin_loop();
                }
                pong.store(i, Ordering::Release);
            }
        })
    };
    let start = Instant::now();
    for i in 1..=rounds {
        ping.store(i, Ordering::Release);
        while pong.load(Ordering::Acquire) != i {
            std::hint::spin_loop();
        }
    }
    let ns = start.elapsed().as_nanos() as f64 / rounds as f64;
    other.join().expect("the other thread");
    ns
}
