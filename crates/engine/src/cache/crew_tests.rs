//! Stress test of concurrent reads (`crew.rs`): one owner thread sets, overwrites, deletes,
//! touches, expires and flushes keys in a small log that wraps all the time, while reader
//! threads read the same keys through `CrewReader`. Every value carries its key, its version
//! and a checksum; a reader checks that every hit is whole, belongs to its key, and is never
//! older than what the owner had acknowledged before the read began (no torn, mixed or
//! resurrected value).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::cache::crew::{self, CrewGet, CrewReader};
use crate::*;

use super::tests::partition;

const NOW: u32 = 1_800_000_000;
const KEYS: u64 = 300;
const DELETED: u64 = 1;

fn key(k: u64) -> Vec<u8> {
    format!("crew:{k}").into_bytes()
}

fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

fn value(k: u64, version: u64, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len + 24);
    v.extend_from_slice(&k.to_le_bytes());
    v.extend_from_slice(&version.to_le_bytes());
    v.extend((0..len).map(|j| (version as usize * 31 + j) as u8));
    let sum = checksum(&v);
    v.extend_from_slice(&sum.to_le_bytes());
    v
}

/// The (key, version) a value carries, or a panic if it is torn or mixed.
fn check(bytes: &[u8]) -> (u64, u64) {
    assert!(bytes.len() >= 24, "a value too short to be whole: {} bytes", bytes.len());
    let (body, sum) = bytes.split_at(bytes.len() - 8);
    assert_eq!(checksum(body), u64::from_le_bytes(sum.try_into().unwrap()), "a torn or mixed value");
    (u64::from_le_bytes(body[..8].try_into().unwrap()), u64::from_le_bytes(body[8..16].try_into().unwrap()))
}

struct Shared {
    /// Per key: the version of the last acknowledged change, shifted, with DELETED set when it
    /// removed the key.
    acked: Vec<AtomicU64>,
    flushed_at: AtomicU64,
    stop: AtomicBool,
}

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn owner(mut p: Partition, shared: &Shared, ops: u64) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for version in 1..=ops {
        p.apply_crew_notices();
        let k = rng.below(KEYS);
        let key = key(k);
        let ack = |bits: u64| shared.acked[k as usize].store(bits, Ordering::Release);
        match rng.below(100) {
            0..=54 => {
                let exptime = if rng.below(4) == 0 { 1000 } else { 0 };
                p.set(&key, &value(k, version, rng.below(400) as usize), 0, exptime).unwrap();
                ack(version << 1);
            }
            55..=64 => {
                p.delete(&key, 0).unwrap();
                ack(version << 1 | DELETED);
            }
            65..=72 => {
                // In place when the item already has an expiry.
                p.touch(&key, 2000).unwrap();
            }
            73..=74 => {
                p.touch(&key, -1).unwrap();
                ack(version << 1 | DELETED);
            }
            75..=99 if version % 5000 != 0 => {
                // Sets the fetched bit, so readers may answer the key themselves.
                let _ = p.get(&key).unwrap();
            }
            _ => {
                p.flush_all(0);
                shared.flushed_at.store(version, Ordering::Release);
            }
        }
    }
}

fn reader(r: &CrewReader, shared: &Shared, seed: u64) -> [u64; 3] {
    let mut rng = Rng(seed);
    let mut counts = [0u64; 3];
    let mut buf = Vec::new();
    while !shared.stop.load(Ordering::Acquire) {
        let k = rng.below(KEYS);
        let key = key(k);
        let before = shared.acked[k as usize].load(Ordering::Acquire);
        let flushed = shared.flushed_at.load(Ordering::Acquire);
        match r.get(&key, KeyHash::of(&key), NOW, &mut buf) {
            CrewGet::Hit { flags, .. } => {
                assert_eq!(flags, 0);
                let (owner_key, version) = check(&buf);
                assert_eq!(owner_key, k, "a value of another key");
                let floor = if before & DELETED != 0 { (before >> 1) + 1 } else { before >> 1 };
                assert!(version >= floor, "k{k}: version {version} read after {before:#x} was acknowledged");
                assert!(version > flushed || flushed == 0, "k{k}: version {version} survived a flush at {flushed}");
                counts[0] += 1;
            }
            CrewGet::Miss => counts[1] += 1,
            CrewGet::Owner => counts[2] += 1,
        }
    }
    counts
}

fn stress(memory_bytes: usize, buckets: usize, ops: u64) -> [u64; 3] {
    let p = partition(memory_bytes, buckets);
    let r = p.crew_reader();
    let shared = Arc::new(Shared {
        acked: (0..KEYS).map(|_| AtomicU64::new(0)).collect(),
        flushed_at: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    });
    let readers: Vec<_> = (0..2)
        .map(|i| {
            let (r, shared) = (r.clone(), Arc::clone(&shared));
            std::thread::spawn(move || reader(&r, &shared, 0x1234_5678 + i))
        })
        .collect();
    owner(p, &shared, ops);
    shared.stop.store(true, Ordering::Release);
    let mut total = [0u64; 3];
    for handle in readers {
        let counts = handle.join().expect("a reader found a wrong value");
        for (t, c) in total.iter_mut().zip(counts) {
            *t += c;
        }
    }
    total
}

#[test]
fn concurrent_readers_never_see_a_torn_mixed_or_resurrected_value() {
    let [hits, misses, owner] = stress(256 << 10, 1 << 6, 1_500_000);
    eprintln!("crew stress: {hits} hits, {misses} misses, {owner} left to the owner");
    assert!(hits > 1000, "too few hits to test anything: {hits}");
    assert!(misses > 0 && owner > 0);
}

/// A hit on an unfetched item hands the fetched bit to the owner, who sets it before its next
/// request; a full notice queue sends the read to the owner instead.
#[test]
fn the_fetched_bit_of_a_concurrent_hit_reaches_the_owner() {
    let mut p = partition(4 << 20, 1 << 12);
    let r = p.crew_reader();
    let mut buf = Vec::new();
    let total = crew::MAX_NOTICES + 10;
    for k in 0..total as u64 {
        p.set(&key(k), b"v", 0, 0).unwrap();
    }
    let answers: Vec<CrewGet> =
        (0..total as u64).map(|k| r.get(&key(k), KeyHash::of(&key(k)), NOW, &mut buf)).collect();
    let hits = answers.iter().filter(|a| matches!(a, CrewGet::Hit { .. })).count();
    assert_eq!(hits, crew::MAX_NOTICES, "hits while the notice queue had room");
    assert_eq!(answers[total - 1], CrewGet::Owner, "a full queue leaves the read to the owner");
    assert!(!p.get(&key(0)).unwrap().unwrap().fetched, "not applied yet");
    p.set(&key(1), b"w", 0, 0).unwrap();
    p.apply_crew_notices();
    for k in 2..10 {
        assert!(p.get(&key(k)).unwrap().unwrap().fetched, "k{k} was read by another thread");
    }
    assert!(!p.get(&key(1)).unwrap().unwrap().fetched, "a notice never marks a newer item");
    assert!(!p.get(&key(total as u64 - 1)).unwrap().unwrap().fetched, "the owner answers this one");
    assert!(matches!(r.get(&key(5), KeyHash::of(&key(5)), NOW, &mut buf), CrewGet::Hit { .. }));
}

/// An owner that loses its CPU half-way through publishing its log's geometry does not keep a
/// reader spinning: after a bounded number of looks the read goes to the owner, and once the
/// publish completes the reader serves hits again.
#[test]
fn a_publish_left_half_done_sends_reads_to_the_owner_instead_of_spinning() {
    let mut p = partition(1 << 20, 1 << 8);
    p.set(b"k", b"v", 7, 0).unwrap();
    let r = p.crew_reader();
    let mut buf = Vec::new();
    p.published.stall_publish();
    let started = std::time::Instant::now();
    assert_eq!(r.get(b"k", KeyHash::of(b"k"), NOW, &mut buf), CrewGet::Owner);
    // Bounded by looks, not by time: far below a scheduler slice even in a debug build.
    assert!(started.elapsed() < std::time::Duration::from_secs(1));
    p.published.resume_publish();
    assert!(matches!(r.get(b"k", KeyHash::of(b"k"), NOW, &mut buf), CrewGet::Hit { flags: 7, .. }));
}

/// The reader keeps its memory after the owner is gone (the mapping lives while a view does).
#[test]
fn a_reader_outlives_its_partition() {
    let mut p = partition(1 << 20, 1 << 8);
    p.set(b"k", b"v", 7, 0).unwrap();
    let r = p.crew_reader();
    let mut buf = Vec::new();
    assert!(matches!(r.get(b"k", KeyHash::of(b"k"), NOW, &mut buf), CrewGet::Hit { flags: 7, .. }));
    assert_eq!(buf, b"v");
    assert_eq!(r.get(b"x", KeyHash::of(b"x"), NOW, &mut buf), CrewGet::Miss);
    drop(p);
    assert!(matches!(r.get(b"k", KeyHash::of(b"k"), NOW, &mut buf), CrewGet::Hit { .. }));
}

/// A large item is left to the owner, whose one plain copy is cheaper than a reader's atomic
/// copy followed by the reply's; an item just under the limit is still read.
#[test]
fn a_large_item_is_left_to_the_owner() {
    let config = PartitionConfig {
        memory_bytes: 4 << 20,
        max_memory_bytes: None,
        index_buckets: Some(1 << 8),
        max_item_bytes: 64 << 10,
        expected_item_bytes: 32,
    };
    let mut p = Partition::new(&config).expect("config is valid");
    p.set_clock(NOW);
    let r = p.crew_reader();
    let mut buf = Vec::new();
    let small = vec![b's'; crew::MAX_CREW_COPY - 64];
    let large = vec![b'l'; crew::MAX_CREW_COPY];
    p.set(b"small", &small, 0, 0).unwrap();
    p.set(b"large", &large, 0, 0).unwrap();
    assert!(matches!(r.get(b"small", KeyHash::of(b"small"), NOW, &mut buf), CrewGet::Hit { .. }));
    assert_eq!(buf, small);
    assert_eq!(r.get(b"large", KeyHash::of(b"large"), NOW, &mut buf), CrewGet::Owner);
    assert_eq!(p.get(b"large").unwrap().unwrap().value, large);
}
