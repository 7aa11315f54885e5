//! Arbitrary operation sequences on two tiny partitions, each checked against a model after
//! every step:
//! - cache mode, a few KiB of log and a 4-bucket index (eviction, wrap-around, the lossy index
//!   and `cache_memlimit` resizes all happen constantly): a hit is always the last value written
//!   for its key, never an older or a foreign one; a miss is allowed (eviction); the
//!   cleaner never loses its place in the log;
//! - store mode, 16 KiB: it never loses an acknowledged item, and a write refused for memory
//!   changes nothing, so every read matches the model exactly.
//!
//! Never a panic: errors are values.

#![no_main]

use libfuzzer_sys::fuzz_target;
use std::collections::HashMap;
use tierkv_engine::*;

/// A key from one byte: short, long (up to 250 bytes) and binary keys.
fn key_of(k: u8) -> Vec<u8> {
    let k = k % 24;
    match k % 3 {
        0 => format!("key{k}").into_bytes(),
        1 => vec![b'x'; 200 + usize::from(k)],
        _ => vec![0, k, b' ', b'\n'],
    }
}

/// A value of `len` bytes that no other write in the run has: it starts with the write's
/// sequence number.
fn value_of(seq: u64, len: usize) -> Vec<u8> {
    let mut value = format!("{seq}:").into_bytes();
    value.resize(len.max(value.len()), b'a' + (seq % 26) as u8);
    value
}

/// What the cache partition may answer for a key.
#[derive(Clone, PartialEq)]
enum Known {
    Absent,
    /// The last value written; a read may hit it or miss.
    Latest(Vec<u8>),
}

struct Run {
    cache: AnyPartition,
    store: AnyPartition,
    known: HashMap<Vec<u8>, Known>,
    exact: HashMap<Vec<u8>, Vec<u8>>,
    seq: u64,
}

impl Run {
    fn check_cache(&mut self, key: &[u8]) {
        let got = self.cache.get(key).expect("a valid key").map(|item| item.value.to_vec());
        let entry = self.known.entry(key.to_vec()).or_insert(Known::Absent);
        match (got, &*entry) {
            (None, _) => *entry = Known::Absent,
            (Some(value), Known::Latest(latest)) => assert!(&value == latest, "stale or foreign value"),
            (Some(_), Known::Absent) => panic!("a key came back after it was gone"),
        }
    }

    fn check_store(&mut self, key: &[u8]) {
        let got = self.store.get(key).expect("a valid key").map(|item| item.value.to_vec());
        assert!(got.as_ref() == self.exact.get(key), "store mode lost or changed an item");
    }

    fn store(&mut self, mode: StoreMode, key: &[u8], len: usize) {
        self.seq += 1;
        let value = value_of(self.seq, len);
        let request = StoreRequest { mode, key, value: &value, flags: 0, exptime: 0, cas: 0 };
        let before = self.known.get(key).cloned().unwrap_or(Known::Absent);
        match self.cache.store(&request) {
            Ok(StoreOutcome::Stored { .. }) => {
                let new = match (mode, before) {
                    (StoreMode::Append, Known::Latest(old)) => [old, value.clone()].concat(),
                    (StoreMode::Append, Known::Absent) => panic!("append found a key that is gone"),
                    _ => value.clone(),
                };
                self.known.insert(key.to_vec(), Known::Latest(new));
            }
            Ok(StoreOutcome::NotStored) if mode == StoreMode::Add => {
                assert!(before != Known::Absent, "add refused for an absent key");
            }
            Ok(StoreOutcome::NotStored) => {
                self.known.insert(key.to_vec(), Known::Absent);
            }
            Ok(other) => panic!("{other:?}"),
            Err(EngineError::ItemTooLarge { .. }) => {}
            Err(e) => panic!("cache mode: {e}"),
        }
        let present = self.exact.get(key).cloned();
        match self.store.store(&request) {
            Ok(StoreOutcome::Stored { .. }) => {
                let new = match (mode, present) {
                    (StoreMode::Append, Some(old)) => [old, value].concat(),
                    (StoreMode::Append, None) | (StoreMode::Add, Some(_)) => panic!("stored against the model"),
                    _ => value,
                };
                self.exact.insert(key.to_vec(), new);
            }
            Ok(StoreOutcome::NotStored) => {
                assert!(matches!((mode, present), (StoreMode::Add, Some(_)) | (StoreMode::Append, None)))
            }
            Ok(other) => panic!("{other:?}"),
            Err(EngineError::ItemTooLarge { .. } | EngineError::OutOfMemory) => {}
            Err(e) => panic!("store mode: {e}"),
        }
    }

    fn step(&mut self, op: u8, k: u8, arg: u8) {
        let key = key_of(k);
        match op % 8 {
            0 | 1 => self.store(StoreMode::Set, &key, usize::from(arg) * 2),
            2 => self.store(StoreMode::Add, &key, usize::from(arg)),
            3 => self.store(StoreMode::Append, &key, usize::from(arg % 64)),
            4 => {
                self.cache.delete(&key, 0).expect("a valid key");
                self.known.insert(key.clone(), Known::Absent);
                self.store.delete(&key, 0).expect("a valid key");
                self.exact.remove(&key);
            }
            5 => {
                // A budget from 1.5 to 16 KiB: the smallest ones are refused.
                let _ = self.cache.set_memory_bytes(1536 + usize::from(arg) * 58);
            }
            6 => {
                let keys: Vec<Vec<u8>> = (0..arg % 8).map(|i| key_of(k.wrapping_add(i))).collect();
                let mut got = Vec::new();
                self.cache.get_batch(&keys, |_, result| got.push(result.unwrap().map(|item| item.value.to_vec())));
                for (key, value) in keys.iter().zip(got) {
                    let entry = self.known.entry(key.clone()).or_insert(Known::Absent);
                    match (value, &*entry) {
                        (None, _) => *entry = Known::Absent,
                        (Some(value), Known::Latest(latest)) => assert!(&value == latest, "stale batch value"),
                        (Some(_), Known::Absent) => panic!("a batch read found a key that is gone"),
                    }
                }
            }
            _ => {}
        }
        self.check_cache(&key);
        self.check_store(&key);
        // The cleaner's walk never falls behind what the log still holds.
        assert_eq!(self.cache.stats().clean_lost_track, 0, "the cleaner lost its place in the log");
    }
}

fuzz_target!(|data: &[u8]| {
    let cache = PartitionConfig {
        memory_bytes: 4096,
        max_memory_bytes: Some(16384),
        index_buckets: Some(4),
        max_item_bytes: 512,
        expected_item_bytes: 64,
    };
    let store = PartitionConfig { memory_bytes: 16 << 10, max_item_bytes: 1024, ..cache.clone() };
    let mut run = Run {
        cache: AnyPartition::new(Mode::Cache, &cache).expect("a valid configuration"),
        store: AnyPartition::new(Mode::Store, &store).expect("a valid configuration"),
        known: HashMap::new(),
        exact: HashMap::new(),
        seq: 0,
    };
    for step in data.chunks_exact(3) {
        run.step(step[0], step[1], step[2]);
    }
    // At the end every key the store model holds reads back exactly.
    for key in run.exact.keys().cloned().collect::<Vec<_>>() {
        run.check_store(&key);
    }
});
