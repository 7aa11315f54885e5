//! Tests of log cleaning: live items survive rewrite churn while the log has room, `bytes`
//! is the live items' bytes, and eviction starts only when live data nears the budget.

use std::collections::HashMap;

use crate::cache::tests::partition;
use crate::*;

/// A partition with a log of about `log_kib` KiB, 512-byte items at most.
fn with_log(log_kib: usize) -> Partition {
    partition(log_kib * 1024 + 64 * 64 * 8 + 512, 64 * 8)
}

fn value(p: &mut Partition, key: &[u8]) -> Option<Vec<u8>> {
    p.get(key).unwrap().map(|item| item.value.to_vec())
}

fn put(p: &mut Partition, mode: StoreMode, key: &[u8], value: &[u8]) -> StoreOutcome {
    p.store(&StoreRequest { mode, key, value, flags: 0, exptime: 0, cas: 0 }).unwrap()
}

/// Log bytes of an item written by `set` (no CAS field) or copied forward (CAS field).
fn sizes(key: &[u8], value: &[u8]) -> [u64; 2] {
    let bare = item_log_bytes(key.len(), value.len()) as u64;
    [bare, bare + 8]
}

#[test]
fn live_items_survive_ten_logs_of_rewrites() {
    let mut p = with_log(256);
    let capacity = p.log_bytes();
    // Live data: 30% of the log in small items that are never touched again.
    let mut live = Vec::new();
    let mut bytes = 0;
    while bytes < capacity * 3 / 10 {
        let key = format!("live:{}", live.len()).into_bytes();
        let value = vec![live.len() as u8; 100];
        bytes += item_log_bytes(key.len(), value.len());
        p.set(&key, &value, 0, 0).unwrap();
        live.push((key, value));
    }
    // Rewrites of large values: set, append and prepend, ten logs' worth.
    let mut written = 0;
    let mut round = 0u32;
    while written < 10 * capacity {
        let key = format!("big:{}", round % 7).into_bytes();
        let outcome = match round % 3 {
            0 => put(&mut p, StoreMode::Set, &key, &[b's'; 300]),
            1 => put(&mut p, StoreMode::Append, &key, &[b'a'; 100]),
            _ => put(&mut p, StoreMode::Prepend, &key, &[b'p'; 60]),
        };
        assert!(matches!(outcome, StoreOutcome::Stored { .. } | StoreOutcome::NotStored), "{outcome:?}");
        written += 400;
        round += 1;
    }
    let stats = p.stats();
    assert!(stats.log_bytes_written > 9 * capacity as u64, "the log went round: {stats:?}");
    let missing = live.iter().filter(|(k, _)| p.debug_item(k).unwrap().is_none()).count();
    assert_eq!(
        stats.evictions,
        0,
        "no live item was evicted: {stats:?}, {missing} of {} small ones missing",
        live.len()
    );
    assert!(stats.items_copied_forward > 0 && stats.clean_lost_track == 0, "{stats:?}");
    let mut expected_bytes = 0;
    for (key, v) in &live {
        assert_eq!(value(&mut p, key).as_ref(), Some(v), "{}", String::from_utf8_lossy(key));
    }
    for round in 0..7 {
        let key = format!("big:{round}").into_bytes();
        if let Some(v) = value(&mut p, &key) {
            expected_bytes += sizes(&key, &v)[1];
        }
    }
    // Every live item was copied forward at least once, so each carries its CAS field.
    expected_bytes += live.iter().map(|(k, v)| sizes(k, v)[1]).sum::<u64>();
    let bytes = p.stats().live_bytes;
    let bare: u64 = live.iter().map(|(k, v)| sizes(k, v)[0]).sum();
    assert!(bytes <= expected_bytes && bytes >= bare, "live bytes {bytes}, expected at most {expected_bytes}");
    assert_eq!(p.stats().live_items, p.resident_items() as u64);
}

#[test]
fn live_data_beyond_the_room_is_evicted_oldest_first_at_a_bounded_copy_cost() {
    let mut p = with_log(128);
    let capacity = p.log_bytes();
    let count = 3 * capacity / item_log_bytes(6, 100);
    for i in 0..count {
        p.set(format!("k{i:05}").as_bytes(), &[7; 100], 0, 0).unwrap();
    }
    let stats = p.stats();
    assert!(stats.evictions > 0, "three logs of distinct keys cannot all stay: {stats:?}");
    // Counted at segment grain (1/64 of the log): the census may lag by a segment.
    assert!(stats.live_bytes <= capacity as u64 + capacity as u64 / 32, "{stats:?}");
    assert!(stats.bytes_copied_forward <= 16 * stats.log_bytes_written, "copying is bounded by the appends: {stats:?}");
    assert_eq!(value(&mut p, b"k00000"), None, "the oldest went first");
    assert!(value(&mut p, format!("k{:05}", count - 1).as_bytes()).is_some(), "the newest stays");
}

#[test]
fn bytes_counts_live_items_not_log_space() {
    let mut p = with_log(64);
    p.set(b"a", &[1; 200], 0, 0).unwrap();
    p.set(b"a", &[2; 10], 0, 0).unwrap();
    p.set(b"b", &[3; 20], 0, 0).unwrap();
    p.delete(b"b", 0).unwrap();
    // With room in the log an item carries its CAS field (8 bytes).
    assert_eq!(p.stats().live_bytes, item_log_bytes(1, 10) as u64 + 8, "overwritten and deleted items are not counted");
    assert_eq!(p.stats().live_items, 1);
    p.flush_all(0);
    assert_eq!((p.stats().live_bytes, p.stats().live_items), (0, 0));
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// Random writes over a small log against a map: a hit is always the model's value, and
    /// while the model's data stays under half the log, no key is lost.
    #[test]
    fn cleaning_never_loses_or_corrupts_an_item_while_there_is_room(
        ops in proptest::collection::vec((0u8..6, 0u8..24, 0usize..400), 1..1500),
    ) {
        let mut p = with_log(32);
        let capacity = p.log_bytes() as u64;
        let mut model: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
        for (n, (op, key, len)) in ops.into_iter().enumerate() {
            let key = format!("key{key}").into_bytes();
            let data = vec![(n % 251) as u8; len];
            match op {
                0 | 1 => {
                    p.set(&key, &data, 0, 0).unwrap();
                    model.insert(key.clone(), data);
                }
                2 | 3 => {
                    let mode = if op == 2 { StoreMode::Append } else { StoreMode::Prepend };
                    let grown = model.get(&key).map(|old| old.len() + len).unwrap_or(0);
                    if grown <= 480 {
                        if let StoreOutcome::Stored { .. } = put(&mut p, mode, &key, &data[..len.min(60)]) {
                            let old = model.get_mut(&key).expect("append stores only over an item");
                            if op == 2 { old.extend_from_slice(&data[..len.min(60)]) } else { old.splice(0..0, data[..len.min(60)].iter().copied()); }
                        }
                    }
                }
                4 => {
                    p.delete(&key, 0).unwrap();
                    model.remove(&key);
                }
                _ => {
                    p.touch(&key, if len % 2 == 0 { 0 } else { 1000 }).unwrap();
                }
            }
            let model_bytes: u64 = model.iter().map(|(k, v)| item_log_bytes(k.len(), v.len()) as u64 + 16).sum();
            for (k, v) in &model {
                match value(&mut p, k) {
                    Some(got) => proptest::prop_assert_eq!(&got, v),
                    None => proptest::prop_assert!(model_bytes > capacity / 2, "lost {:?} with {} of {} bytes live", k, model_bytes, capacity),
                }
            }
            proptest::prop_assert_eq!(p.stats().clean_lost_track, 0);
        }
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

    /// The engine fuzz target's partition (a few KiB, 4 buckets, budgets changing under it):
    /// appends and touches never make the cleaner lose its place in the log, and a hit is
    /// always the model's value. (An append used to force its old item's copy past items the
    /// walk had not seen; the walk then lost track, and a later append read overwritten bytes.)
    #[test]
    fn appends_and_touches_under_budget_changes_keep_the_walk_in_order(
        ops in proptest::collection::vec((0u8..6, 0u8..12, 0usize..256), 1..600),
    ) {
        let config = PartitionConfig {
            memory_bytes: 4096,
            max_memory_bytes: Some(16384),
            index_buckets: Some(4),
            max_item_bytes: 512,
            expected_item_bytes: 64,
        };
        let mut p = Partition::new(&config).unwrap();
        let mut model: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
        for (n, (op, key, arg)) in ops.into_iter().enumerate() {
            let key = if key % 2 == 0 { format!("key{key}").into_bytes() } else { vec![b'x'; 150 + usize::from(key)] };
            let data = vec![b'a' + (n % 26) as u8; arg];
            match op {
                0 | 1 => {
                    if p.set(&key, &data, 0, 0).is_ok() {
                        model.insert(key.clone(), data);
                    }
                }
                2 => {
                    if let Ok(StoreOutcome::Stored { .. }) = p.store(&StoreRequest { mode: StoreMode::Append, key: &key, value: &data[..arg % 64], flags: 0, exptime: 0, cas: 0 }) {
                        model.get_mut(&key).expect("append stores only over an item").extend_from_slice(&data[..arg % 64]);
                    }
                }
                3 => {
                    p.touch(&key, (1000 + arg as u32).into()).unwrap();
                }
                4 => {
                    let _ = p.set_memory_bytes(1536 + arg * 58);
                }
                _ => {
                    p.delete(&key, 0).unwrap();
                    model.remove(&key);
                }
            }
            let keys: Vec<Vec<u8>> = model.keys().cloned().collect();
            for k in keys {
                match value(&mut p, &k) {
                    Some(got) => proptest::prop_assert_eq!(Some(&got), model.get(&k)),
                    None => { model.remove(&k); }
                }
            }
            proptest::prop_assert_eq!(p.stats().clean_lost_track, 0);
        }
    }
}
