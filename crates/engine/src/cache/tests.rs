//! Unit tests of every partition operation and error.

use crate::*;

const NOW: u32 = 1_800_000_000;

pub(super) fn partition(memory_bytes: usize, buckets: usize) -> Partition {
    let config = PartitionConfig {
        memory_bytes,
        max_memory_bytes: None,
        index_buckets: Some(buckets),
        max_item_bytes: MIN_ITEM_BYTES,
        expected_item_bytes: 32,
    };
    let mut p = Partition::new(&config).expect("config is valid");
    p.set_clock(NOW);
    p
}

fn roomy() -> Partition {
    partition(1 << 20, 1 << 10)
}

fn value(p: &mut Partition, key: &[u8]) -> Option<Vec<u8>> {
    p.get(key).unwrap().map(|item| item.value.to_vec())
}

fn store(p: &mut Partition, mode: StoreMode, key: &[u8], value: &[u8], cas: u64) -> StoreOutcome {
    p.store(&StoreRequest { mode, key, value, flags: 0, exptime: 0, cas }).unwrap()
}

fn incr(p: &mut Partition, key: &[u8], delta: u64, decrement: bool) -> Result<ArithOutcome, EngineError> {
    p.arith(key, &ArithRequest { delta, decrement, cas: 0, initial: None })
}

#[test]
fn set_then_get_returns_value_flags_and_cas() {
    let mut p = roomy();
    let cas = p.set(b"k", b"hello", 42, 0).unwrap();
    let item = p.get(b"k").unwrap().unwrap();
    assert_eq!((item.value, item.flags, item.cas, item.expiry), (&b"hello"[..], 42, cas, 0));
    let cas2 = p.set(b"k", b"", 0, 0).unwrap();
    assert!(cas2 > cas, "every write gets a new, larger CAS");
    assert_eq!(value(&mut p, b"k"), Some(vec![]));
    assert_eq!(value(&mut p, b"other"), None);
}

#[test]
fn keys_may_hold_any_bytes_up_to_250() {
    let mut p = roomy();
    let key: Vec<u8> = (0..250u32).map(|i| (i * 7) as u8).collect();
    p.set(&key, b"v", 0, 0).unwrap();
    assert_eq!(value(&mut p, &key), Some(b"v".to_vec()));
    p.set(b" \r\n\0", b"w", 0, 0).unwrap();
    assert_eq!(value(&mut p, b" \r\n\0"), Some(b"w".to_vec()));
}

#[test]
fn bad_keys_are_typed_errors_for_every_operation() {
    let mut p = roomy();
    let long = [b'x'; 251];
    for key in [&b""[..], &long[..]] {
        let expected = if key.is_empty() { EngineError::EmptyKey } else { EngineError::KeyTooLong { len: 251 } };
        assert_eq!(p.get(key).unwrap_err(), expected);
        assert_eq!(p.set(key, b"v", 0, 0).unwrap_err(), expected);
        assert_eq!(
            p.store(&StoreRequest { mode: StoreMode::Add, key, value: b"v", flags: 0, exptime: 0, cas: 0 })
                .unwrap_err(),
            expected
        );
        assert_eq!(p.delete(key, 0).unwrap_err(), expected);
        assert_eq!(incr(&mut p, key, 1, false).unwrap_err(), expected);
        assert_eq!(p.touch(key, 0).unwrap_err(), expected);
        assert_eq!(p.get_and_touch(key, 0).unwrap_err(), expected);
    }
    assert_eq!(p.resident_items(), 0, "nothing was stored");
}

#[test]
fn items_larger_than_the_maximum_are_refused_and_change_nothing() {
    let mut p = roomy();
    let max = p.max_item_bytes();
    let fits = vec![b'a'; max - item_log_bytes(1, 0) - 1];
    assert_eq!(item_log_bytes(1, fits.len()), max, "header grows by one byte past 255");
    p.set(b"k", &fits, 0, 0).unwrap();
    let too_big = vec![b'b'; fits.len() + 1];
    assert_eq!(p.set(b"k", &too_big, 0, 0), Err(EngineError::ItemTooLarge { bytes: max + 1, max_bytes: max }));
    assert_eq!(value(&mut p, b"k"), Some(fits.clone()), "the old value is intact");
    assert!(matches!(
        p.store(&StoreRequest { mode: StoreMode::Append, key: b"k", value: b"x", flags: 0, exptime: 0, cas: 0 }),
        Err(EngineError::ItemTooLarge { .. })
    ));
    assert_eq!(value(&mut p, b"k"), Some(fits));
}

#[test]
fn add_replace_and_their_misses() {
    let mut p = roomy();
    assert_eq!(store(&mut p, StoreMode::Replace, b"k", b"r", 0), StoreOutcome::NotStored);
    assert_eq!(value(&mut p, b"k"), None);
    assert!(matches!(store(&mut p, StoreMode::Add, b"k", b"a", 0), StoreOutcome::Stored { .. }));
    assert_eq!(store(&mut p, StoreMode::Add, b"k", b"b", 0), StoreOutcome::NotStored);
    assert_eq!(value(&mut p, b"k"), Some(b"a".to_vec()));
    assert!(matches!(store(&mut p, StoreMode::Replace, b"k", b"r", 0), StoreOutcome::Stored { .. }));
    assert_eq!(value(&mut p, b"k"), Some(b"r".to_vec()));
}

#[test]
fn add_succeeds_over_an_expired_item() {
    let mut p = roomy();
    p.set(b"k", b"old", 0, 5).unwrap();
    p.set_clock(NOW + 5);
    assert!(matches!(store(&mut p, StoreMode::Add, b"k", b"new", 0), StoreOutcome::Stored { .. }));
    assert_eq!(value(&mut p, b"k"), Some(b"new".to_vec()));
}

#[test]
fn append_and_prepend_keep_flags_and_expiry() {
    let mut p = roomy();
    assert_eq!(store(&mut p, StoreMode::Append, b"k", b"x", 0), StoreOutcome::NotStored);
    p.set(b"k", b"mid", 7, 100).unwrap();
    let request = StoreRequest { mode: StoreMode::Append, key: b"k", value: b">>", flags: 99, exptime: 0, cas: 0 };
    assert!(matches!(p.store(&request).unwrap(), StoreOutcome::Stored { .. }));
    let request = StoreRequest { mode: StoreMode::Prepend, value: b"<<", ..request };
    let StoreOutcome::Stored { cas } = p.store(&request).unwrap() else { panic!("prepend failed") };
    let item = p.get(b"k").unwrap().unwrap();
    assert_eq!((item.value, item.flags, item.expiry, item.cas), (&b"<<mid>>"[..], 7, NOW + 100, cas));
}

#[test]
fn append_with_cas_checks_it() {
    let mut p = roomy();
    let cas = p.set(b"k", b"a", 0, 0).unwrap();
    assert_eq!(store(&mut p, StoreMode::Append, b"k", b"b", cas + 1), StoreOutcome::Exists);
    assert!(matches!(store(&mut p, StoreMode::Append, b"k", b"b", cas), StoreOutcome::Stored { .. }));
    assert_eq!(value(&mut p, b"k"), Some(b"ab".to_vec()));
}

#[test]
fn cas_semantics() {
    let mut p = roomy();
    assert_eq!(store(&mut p, StoreMode::Cas, b"k", b"v", 1), StoreOutcome::NotFound);
    let cas = p.set(b"k", b"v1", 0, 0).unwrap();
    assert_eq!(store(&mut p, StoreMode::Cas, b"k", b"v2", cas + 1), StoreOutcome::Exists);
    assert_eq!(store(&mut p, StoreMode::Cas, b"k", b"v2", 0), StoreOutcome::Exists, "cas 0 never matches");
    let StoreOutcome::Stored { cas: new_cas } = store(&mut p, StoreMode::Cas, b"k", b"v2", cas) else {
        panic!("matching cas must store")
    };
    assert_ne!(new_cas, cas);
    assert_eq!(store(&mut p, StoreMode::Cas, b"k", b"v3", cas), StoreOutcome::Exists, "old cas is stale now");
    assert_eq!(value(&mut p, b"k"), Some(b"v2".to_vec()));
}

#[test]
fn delete_semantics() {
    let mut p = roomy();
    assert_eq!(p.delete(b"k", 0).unwrap(), DeleteOutcome::NotFound);
    let cas = p.set(b"k", b"v", 0, 0).unwrap();
    assert_eq!(p.delete(b"k", cas + 1).unwrap(), DeleteOutcome::Exists);
    assert_eq!(value(&mut p, b"k"), Some(b"v".to_vec()));
    assert_eq!(p.delete(b"k", cas).unwrap(), DeleteOutcome::Deleted);
    assert_eq!(value(&mut p, b"k"), None);
    assert_eq!(p.delete(b"k", 0).unwrap(), DeleteOutcome::NotFound);
}

#[test]
fn incr_decr_follow_memcached() {
    let mut p = roomy();
    assert_eq!(incr(&mut p, b"n", 1, false).unwrap(), ArithOutcome::NotFound);
    p.set(b"n", b"100", 5, 0).unwrap();
    let ArithOutcome::Value { value: v, cas, .. } = incr(&mut p, b"n", 1, false).unwrap() else { panic!() };
    assert_eq!(v, 101);
    let item = p.get(b"n").unwrap().unwrap();
    assert_eq!((item.value, item.flags, item.cas), (&b"101"[..], 5, cas));
    assert!(matches!(incr(&mut p, b"n", 92, true).unwrap(), ArithOutcome::Value { value: 9, .. }));
    assert_eq!(value(&mut p, b"n"), Some(b"9  ".to_vec()), "shrunk counters keep their length");
    assert!(matches!(incr(&mut p, b"n", 100, true).unwrap(), ArithOutcome::Value { value: 0, .. }));
    assert!(matches!(incr(&mut p, b"n", 1000, false).unwrap(), ArithOutcome::Value { value: 1000, .. }));
    assert_eq!(value(&mut p, b"n"), Some(b"1000".to_vec()));
    p.set(b"n", b"18446744073709551615", 0, 0).unwrap();
    assert!(matches!(incr(&mut p, b"n", 2, false).unwrap(), ArithOutcome::Value { value: 1, .. }), "incr wraps");
    assert_eq!(value(&mut p, b"n"), Some(b"1                   ".to_vec()));
    p.set(b"s", b"12a", 0, 0).unwrap();
    assert_eq!(incr(&mut p, b"s", 1, false), Err(EngineError::NonNumeric));
    p.set(b"e", b"", 0, 0).unwrap();
    assert_eq!(incr(&mut p, b"e", 1, false), Err(EngineError::NonNumeric));
    assert_eq!(value(&mut p, b"s"), Some(b"12a".to_vec()));
}

#[test]
fn incr_with_cas_and_initial_value() {
    let mut p = roomy();
    let initial = Some(ArithInitial { value: 40, flags: 3, exptime: 0 });
    let request = ArithRequest { delta: 2, decrement: false, cas: 0, initial };
    assert!(matches!(p.arith(b"n", &request).unwrap(), ArithOutcome::Value { value: 40, .. }));
    let ArithOutcome::Value { value: 42, cas, .. } = p.arith(b"n", &request).unwrap() else { panic!() };
    assert_eq!(p.get(b"n").unwrap().unwrap().flags, 3);
    let stale = ArithRequest { cas: cas + 1, ..request };
    assert_eq!(p.arith(b"n", &stale).unwrap(), ArithOutcome::Exists);
    let fresh = ArithRequest { cas, ..request };
    assert!(matches!(p.arith(b"n", &fresh).unwrap(), ArithOutcome::Value { value: 44, .. }));
}

#[test]
fn expiry_rules() {
    let mut p = roomy();
    p.set(b"rel", b"v", 0, 10).unwrap();
    p.set(b"abs", b"v", 0, i64::from(NOW) + 20).unwrap();
    p.set(b"past", b"v", 0, i64::from(NOW) - 1).unwrap();
    p.set(b"neg", b"v", 0, -1).unwrap();
    p.set(b"never", b"v", 0, 0).unwrap();
    assert_eq!(p.get(b"rel").unwrap().unwrap().expiry, NOW + 10);
    assert_eq!(value(&mut p, b"past"), None, "an absolute time in the past has expired");
    assert_eq!(value(&mut p, b"neg"), None, "a negative exptime has expired");
    p.set_clock(NOW + 9);
    assert!(value(&mut p, b"rel").is_some());
    p.set_clock(NOW + 10);
    assert_eq!(value(&mut p, b"rel"), None, "expires at its expiry second");
    assert!(value(&mut p, b"abs").is_some());
    p.set_clock(NOW + 20);
    assert_eq!(value(&mut p, b"abs"), None);
    p.set_clock(u32::MAX - 1);
    assert!(value(&mut p, b"never").is_some());
}

#[test]
fn negative_exptime_set_removes_the_old_value() {
    let mut p = roomy();
    p.set(b"k", b"v", 0, 0).unwrap();
    p.set(b"k", b"w", 0, -1).unwrap();
    assert_eq!(value(&mut p, b"k"), None);
    assert_eq!(store(&mut p, StoreMode::Replace, b"k", b"x", 0), StoreOutcome::NotStored);
}

#[test]
fn touch_and_gat_change_expiry_not_cas() {
    let mut p = roomy();
    assert!(!p.touch(b"k", 10).unwrap());
    assert_eq!(p.get_and_touch(b"k", 10).unwrap(), None);
    let cas = p.set(b"k", b"v", 9, 0).unwrap();
    assert!(p.touch(b"k", 10).unwrap(), "touch adds an expiry (the item moves)");
    let item = p.get(b"k").unwrap().unwrap();
    assert_eq!((item.cas, item.expiry, item.flags, item.value), (cas, NOW + 10, 9, &b"v"[..]));
    let item = p.get_and_touch(b"k", 20).unwrap().unwrap();
    assert_eq!((item.cas, item.expiry), (cas, NOW + 20), "touch in place");
    assert!(p.touch(b"k", 0).unwrap(), "touch to never expire");
    let item = p.get(b"k").unwrap().unwrap();
    assert_eq!((item.cas, item.expiry), (cas, 0));
    p.set_clock(NOW + 1000);
    assert!(value(&mut p, b"k").is_some());
    assert!(p.touch(b"k", -1).unwrap());
    assert_eq!(value(&mut p, b"k"), None, "touch with a negative exptime expires the item");
    assert_eq!(store(&mut p, StoreMode::Cas, b"k", b"w", cas), StoreOutcome::NotFound);
}

#[test]
fn flush_all_now_and_later() {
    let mut p = roomy();
    p.set(b"a", b"1", 0, 0).unwrap();
    p.flush_all(0);
    assert_eq!(value(&mut p, b"a"), None);
    p.set(b"b", b"2", 0, 0).unwrap();
    assert!(value(&mut p, b"b").is_some(), "items stored after a flush live");
    p.flush_all(10);
    p.set(b"c", b"3", 0, 0).unwrap();
    p.set_clock(NOW + 8);
    assert!(value(&mut p, b"b").is_some() && value(&mut p, b"c").is_some(), "not yet");
    p.set_clock(NOW + 9);
    assert_eq!((value(&mut p, b"b"), value(&mut p, b"c")), (None, None), "everything before the deadline is gone");
    p.set_clock(NOW + 9);
    p.set(b"during", b"4", 0, 0).unwrap();
    assert_eq!(value(&mut p, b"during"), None, "stores in the deadline second go too, as in memcached");
    p.set_clock(NOW + 10);
    p.set(b"d", b"4", 0, 0).unwrap();
    p.set_clock(NOW + 100);
    assert!(value(&mut p, b"d").is_some(), "a delayed flush ends with its deadline second");
    p.flush_all(5);
    p.flush_all(0);
    p.set(b"e", b"5", 0, 0).unwrap();
    p.set_clock(NOW + 200);
    assert!(value(&mut p, b"e").is_some(), "an immediate flush cancels a pending one");
    p.flush_all(1);
    assert_eq!(value(&mut p, b"e"), None, "memcached flushes at once with a delay of 1");
    p.set(b"f", b"6", 0, 0).unwrap();
    assert_eq!(value(&mut p, b"f"), None, "and hides what is stored in the same second");
    p.set_clock(NOW + 201);
    p.set(b"f", b"6", 0, 0).unwrap();
    assert!(value(&mut p, b"f").is_some());
}

#[test]
fn a_full_log_evicts_the_oldest_items() {
    let mut p = partition(4096 + 512 * 3 + 64 * 64, 64);
    let capacity = p.log_bytes();
    let item = item_log_bytes(4, 60);
    let count = 4 * capacity / item;
    for i in 0..count as u32 {
        p.set(&i.to_le_bytes(), &[i as u8; 60], 0, 0).unwrap();
    }
    let newest = (count - 1) as u32;
    assert_eq!(value(&mut p, &newest.to_le_bytes()), Some(vec![newest as u8; 60]));
    assert_eq!(value(&mut p, &0u32.to_le_bytes()), None, "the oldest item was evicted");
    let resident = p.resident_items();
    assert!(resident <= capacity / item && resident > capacity / item / 2, "resident {resident}");
}

#[test]
fn reading_an_item_near_eviction_copies_it_forward() {
    let mut p = partition(4096 + 512 * 3 + 64 * 64, 64);
    let capacity = p.log_bytes();
    let cas = p.set(b"keep", b"precious", 3, 0).unwrap();
    let filler = item_log_bytes(4, 40);
    let mut i = 0u32;
    // Write until "keep" is in the oldest eighth of the log, then read it.
    while (p.stats().log_bytes_written as usize) < capacity - capacity / 8 + filler {
        p.set(&i.to_le_bytes(), &[1; 40], 0, 0).unwrap();
        i += 1;
    }
    let item = p.get(b"keep").unwrap().unwrap();
    assert_eq!((item.value, item.flags, item.cas), (&b"precious"[..], 3, cas));
    assert_eq!(p.stats().reappends, 1);
    // Another half-lap of writes would have evicted the original position.
    for j in 0..(capacity / 2 / filler) as u32 {
        p.set(&(i + j).to_le_bytes(), &[2; 40], 0, 0).unwrap();
    }
    let item = p.get(b"keep").unwrap().unwrap();
    assert_eq!((item.value, item.cas), (&b"precious"[..], cas), "CAS survives the move");
    let StoreOutcome::Stored { cas: new_cas } = store(&mut p, StoreMode::Cas, b"keep", b"new", cas) else {
        panic!("the preserved CAS must still match")
    };
    assert!(new_cas > cas);
}

/// Keys (from "k0" on) whose hashes share a tag: `n` of them.
fn tag_twins(n: usize) -> Vec<Vec<u8>> {
    let mut by_tag: std::collections::HashMap<u16, Vec<Vec<u8>>> = std::collections::HashMap::new();
    for i in 0.. {
        let key = format!("k{i}").into_bytes();
        let twins = by_tag.entry(crate::hash::KeyHash::of(&key).tag()).or_default();
        twins.push(key);
        if twins.len() == n {
            return twins.clone();
        }
    }
    unreachable!()
}

#[test]
fn keys_that_share_a_tag_in_one_pair_are_all_kept() {
    // One pair: every key lands in it, so twins meet.
    let mut p = partition(1 << 20, 2);
    let twins = tag_twins(3);
    for (i, key) in twins.iter().enumerate() {
        p.set(key, format!("v{i}").as_bytes(), 0, 0).unwrap();
    }
    for (i, key) in twins.iter().enumerate() {
        assert_eq!(value(&mut p, key), Some(format!("v{i}").into_bytes()), "{key:?}");
    }
    // Replacing one twin replaces only that key; deleting one leaves the others.
    p.set(&twins[1], b"new", 0, 0).unwrap();
    assert_eq!(p.delete(&twins[0], 0).unwrap(), DeleteOutcome::Deleted);
    assert_eq!(value(&mut p, &twins[0]), None);
    assert_eq!(value(&mut p, &twins[1]), Some(b"new".to_vec()));
    assert_eq!(value(&mut p, &twins[2]), Some(b"v2".to_vec()));
    assert_eq!((p.stats().live_items, p.stats().evictions), (2, 0));
}

#[test]
fn forty_keys_crafted_to_share_a_key_s_tag_and_pair_do_not_push_it_out() {
    let mut p = partition(1 << 20, 2);
    let twins = tag_twins(41);
    p.set(&twins[0], b"target", 0, 0).unwrap();
    for key in &twins[1..] {
        p.set(key, b"attack", 0, 0).unwrap();
    }
    assert_eq!(value(&mut p, &twins[0]), Some(b"target".to_vec()));
    assert!(twins[1..].iter().all(|key| value(&mut p, key) == Some(b"attack".to_vec())));
    assert_eq!((p.stats().live_items, p.stats().evictions), (41, 0));
}

#[test]
fn a_full_pair_grows_an_overflow_chain_and_drops_nothing() {
    let mut p = partition(1 << 20, 2);
    for i in 0..200u32 {
        p.set(&i.to_le_bytes(), &i.to_le_bytes(), 0, 0).unwrap();
    }
    let stats = p.stats();
    assert_eq!((stats.live_items, stats.evictions, stats.index_evictions), (200, 0, 0));
    // 200 keys in 16 slots plus overflow buckets of seven each (the eighth links on).
    assert!(stats.overflow_buckets >= (200 - 15) / 7, "{stats:?}");
    assert_eq!(p.resident_items(), 200);
    for i in 0..200u32 {
        assert_eq!(value(&mut p, &i.to_le_bytes()), Some(i.to_le_bytes().to_vec()), "key {i}");
    }
    // Emptied buckets at the chain's end go back as the pair takes new keys.
    for i in 0..200u32 {
        p.delete(&i.to_le_bytes(), 0).unwrap();
    }
    for i in 0..40u32 {
        p.set(&(1000 + i).to_le_bytes(), b"x", 0, 0).unwrap();
    }
    assert!(p.stats().overflow_buckets < stats.overflow_buckets, "{:?}", p.stats());
    for i in 0..40u32 {
        assert_eq!(value(&mut p, &(1000 + i).to_le_bytes()), Some(b"x".to_vec()));
    }
}

#[test]
fn when_every_overflow_bucket_is_used_the_oldest_item_goes_counted() {
    let mut p = partition(1 << 20, 2);
    p.cap_overflow(2);
    // The pair keeps 15 slots beside its link, the first overflow bucket 7, the last 8.
    let slots = 15 + 7 + 8;
    for i in 0..100u32 {
        p.set(&i.to_le_bytes(), &i.to_le_bytes(), 0, 0).unwrap();
        assert_eq!(value(&mut p, &i.to_le_bytes()), Some(i.to_le_bytes().to_vec()), "the newest is always readable");
    }
    let stats = p.stats();
    assert_eq!(p.resident_items(), slots);
    assert_eq!(stats.index_evictions, 100 - slots as u64);
    assert_eq!(stats.evictions, stats.index_evictions, "counted as evictions");
    assert_eq!(stats.live_items + stats.evictions, 100);
    for i in 0..100u32 {
        let expected = (i >= 100 - slots as u32).then(|| i.to_le_bytes().to_vec());
        assert_eq!(value(&mut p, &i.to_le_bytes()), expected, "the oldest went first: key {i}");
    }
}

#[test]
fn overflow_buckets_are_charged_to_the_budget() {
    let mut p = partition(1 << 20, 2);
    let (fixed, log) = (p.allocated_bytes() - p.log_bytes(), p.log_bytes());
    for i in 0..2000u32 {
        p.set(&i.to_le_bytes(), b"", 0, 0).unwrap();
    }
    let grown = p.index_bytes() - 128;
    assert!(grown >= 4096, "overflow buckets were touched: {grown}");
    // The log's next lap pays for them: the budget holds once the log wraps.
    for i in 0..20_000u32 {
        p.set(b"filler", &i.to_le_bytes().repeat(64), 0, 0).unwrap();
    }
    assert!(
        p.log_bytes() + p.index_bytes() <= log + fixed,
        "{} + {} > {}",
        p.log_bytes(),
        p.index_bytes(),
        log + fixed
    );
    assert!(p.allocated_bytes() <= 1 << 20);
}

#[test]
fn rmw_operations_work_when_the_new_item_overwrites_the_old() {
    // A log barely larger than the values: every append overwrites the item it reads.
    let config = PartitionConfig {
        memory_bytes: 64 * 2 + 512 + 1100,
        max_memory_bytes: None,
        index_buckets: Some(2),
        max_item_bytes: 512,
        expected_item_bytes: 0,
    };
    let mut p = Partition::new(&config).unwrap();
    let mut expected = vec![b'a'; 300];
    p.set(b"k", &expected, 0, 0).unwrap();
    for round in 0..20u8 {
        let cas = p.get(b"k").unwrap().unwrap().cas;
        assert!(p.touch(b"k", if round % 2 == 0 { 1000 } else { 0 }).unwrap());
        assert_eq!(p.get(b"k").unwrap().unwrap().cas, cas);
        let data = [round; 3];
        let mode = if round % 2 == 0 { StoreMode::Append } else { StoreMode::Prepend };
        assert!(matches!(store(&mut p, mode, b"k", &data, 0), StoreOutcome::Stored { .. }));
        if mode == StoreMode::Append {
            expected.extend_from_slice(&data);
        } else {
            expected.splice(0..0, data);
        }
        expected.truncate(expected.len());
        assert_eq!(value(&mut p, b"k"), Some(expected.clone()), "round {round}");
    }
}

#[test]
fn offsets_wrap_around_48_bits() {
    let mut p = partition(4096 + 512 * 3 + 64 * 64, 64);
    p.start_log_at((1 << 48) - 1000);
    for i in 0..2000u32 {
        p.set(&(i % 50).to_le_bytes(), &i.to_le_bytes(), 0, 0).unwrap();
        let got = value(&mut p, &(i % 50).to_le_bytes());
        assert_eq!(got, Some(i.to_le_bytes().to_vec()));
    }
    assert!(p.stats().log_bytes_written > 1 << 48);
}

#[test]
fn sweep_clears_stale_entries() {
    let mut p = partition(4096 + 512 * 3 + 64 * 64, 64);
    p.force_sweep_stride(1);
    for i in 0..200u32 {
        p.set(&i.to_le_bytes(), &[0; 40], 0, 0).unwrap();
    }
    // One lap of a different key set makes every old entry stale; a sweep of one bucket per
    // byte written has visited every bucket many times since.
    for i in 1000..1200u32 {
        p.set(&i.to_le_bytes(), &[0; 40], 0, 0).unwrap();
    }
    assert_eq!(p.stale_entries(), 0);
}

#[test]
fn config_errors_are_reported() {
    let config = |memory_bytes, index_buckets, max_item_bytes| PartitionConfig {
        memory_bytes,
        max_memory_bytes: None,
        index_buckets,
        max_item_bytes,
        expected_item_bytes: 64,
    };
    assert_eq!(Partition::new(&config(1 << 20, Some(3), 1024)).err(), Some(ConfigError::BadBucketCount(3)));
    assert_eq!(Partition::new(&config(1 << 20, Some(1), 1024)).err(), Some(ConfigError::BadBucketCount(1)));
    assert_eq!(Partition::new(&config(1 << 20, None, 100)).err(), Some(ConfigError::MaxItemOutOfRange(100)));
    assert!(matches!(Partition::new(&config(3000, Some(2), 1024)), Err(ConfigError::TooSmall { .. })));
    let message = Partition::new(&config(3000, Some(2), 1024)).err().unwrap().to_string();
    assert!(message.contains("too small"), "{message}");
    let p = Partition::new(&config(64 << 20, None, DEFAULT_MAX_ITEM_BYTES)).unwrap();
    assert_eq!(p.allocated_bytes(), 64 << 20, "the budget is spent exactly");
    assert!(p.index_bytes().is_power_of_two());
}

#[test]
fn automatic_index_sizing_gives_about_two_slots_per_item() {
    let config = PartitionConfig { expected_item_bytes: 100, ..PartitionConfig::new(1 << 30) };
    let buckets = config.buckets();
    let items = (1usize << 30) / (100 + 3);
    let slots = buckets * ENTRIES_PER_BUCKET;
    assert!(slots as f64 / items as f64 > 1.4 && (slots as f64 / items as f64) < 2.9, "{slots} slots");
}

#[test]
fn memory_overhead_of_small_items() {
    let config = PartitionConfig {
        memory_bytes: (1 << 22) * 64 + 16_000_000 * 19 * 115 / 100 + (1 << 20),
        max_memory_bytes: None,
        index_buckets: Some(1 << 22),
        max_item_bytes: DEFAULT_MAX_ITEM_BYTES,
        expected_item_bytes: 16,
    };
    let p = Partition::new(&config).unwrap();
    let overhead = p.memory_overhead(8, 8);
    assert_eq!(overhead.header_bytes, 3);
    assert!(overhead.items >= 16_000_000);
    assert!(overhead.total_bytes_per_item < 24.0, "{overhead:?}");
}

#[test]
fn batches_match_single_operations() {
    let mut batched = roomy();
    let mut single = roomy();
    let keys: Vec<Vec<u8>> = (0..150u32).map(|i| format!("key{i}").into_bytes()).collect();
    let values: Vec<Vec<u8>> = (0..150u32).map(|i| vec![i as u8; (i % 40) as usize]).collect();
    let requests: Vec<SetRequest<'_>> = keys
        .iter()
        .zip(&values)
        .step_by(2)
        .map(|(key, value)| SetRequest { key, value, flags: 1, exptime: 0 })
        .collect();
    let mut cas_batched = Vec::new();
    batched.set_batch(&requests, |i, result| cas_batched.push((i, result.unwrap())));
    for (i, request) in requests.iter().enumerate() {
        let cas = single.set(request.key, request.value, 1, 0).unwrap();
        assert_eq!(cas_batched[i], (i, cas));
    }
    let mut all_keys: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
    all_keys.push(b"");
    let mut results = Vec::new();
    batched.get_batch(&all_keys, |i, result| {
        results.push((i, result.map(|item| item.map(|item| (item.value.to_vec(), item.flags, item.cas)))))
    });
    assert_eq!(results.len(), all_keys.len());
    for (i, key) in all_keys.iter().enumerate() {
        let expected = single.get(key).map(|item| item.map(|item| (item.value.to_vec(), item.flags, item.cas)));
        assert_eq!(results[i], (i, expected));
    }
    assert!(results.iter().filter(|(_, r)| matches!(r, Ok(Some(_)))).count() == 75);
}

#[test]
fn short_and_long_keys_compare_exactly() {
    let mut p = roomy();
    // Keys that differ only in one byte, at every position, for lengths around the fast path.
    for len in [1usize, 7, 8, 9, 15, 16, 17, 250] {
        let base = vec![b'k'; len];
        p.set(&base, b"base", 0, 0).unwrap();
        for at in 0..len {
            let mut other = base.clone();
            other[at] = b'z';
            assert_eq!(value(&mut p, &other), None, "len {len}, differing byte {at}");
        }
        assert_eq!(value(&mut p, &base), Some(b"base".to_vec()));
    }
}

/// Random operations over few keys, with a mix every item-killing path sees.
fn churn(p: &mut Partition, rounds: u32, mut check: impl FnMut(&mut Partition)) {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for _ in 0..rounds {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let key = ((x >> 8) % 300).to_le_bytes();
        let key = &key[..2];
        let len = (x >> 20) as usize % 50;
        match x % 8 {
            0 | 1 => drop(p.set(key, &vec![b'7'; len], 0, 0).unwrap()),
            2 => drop(p.delete(key, 0).unwrap()),
            3 => drop(store(p, StoreMode::Append, key, b"1", 0)),
            4 => drop(incr(p, key, 3, false)),
            5 => drop(p.touch(key, if x & 1 << 40 == 0 { 0 } else { 100 }).unwrap()),
            6 => drop(p.set(key, b"gone", 0, -1).unwrap()),
            _ => drop(p.get(key).unwrap()),
        }
        check(p);
    }
}

#[test]
fn live_item_count_matches_the_index_exactly_while_nothing_wraps() {
    // 16 buckets for 300 keys: pairs grow overflow chains.
    let mut p = partition(1 << 20, 16);
    let mut stored = 0;
    churn(&mut p, 5_000, |p| {
        // Expired items are live until noticed, as resident_items counts them.
        assert_eq!(p.stats().live_items, p.resident_items() as u64);
        stored = p.stats().items_stored;
    });
    let stats = p.stats();
    assert!(stored > 1_000 && stats.evictions == 0 && stats.overflow_buckets > 0, "{stats:?}");
    p.flush_all(0);
    assert_eq!((p.stats().live_items, p.stats().evictions), (0, stats.evictions));
}

#[test]
fn live_item_count_follows_the_log_around_within_one_segment() {
    let mut p = partition(4096 + 512 * 3 + 64 * 64 * 4, 256);
    let capacity = p.log_bytes();
    let per_segment = (capacity / 64).next_power_of_two() / item_log_bytes(2, 0) + 1;
    churn(&mut p, 40_000, |p| {
        let (live, resident) = (p.stats().live_items as usize, p.resident_items());
        assert!(live.abs_diff(resident) <= per_segment, "live {live}, resident {resident}");
    });
    assert!(p.stats().log_bytes_written > 4 * capacity as u64, "the log wrapped several times");
    assert!(p.stats().evictions > p.stats().index_evictions, "{:?}", p.stats());
}

#[test]
fn meta_get_vivifies_a_miss_and_hands_out_one_token() {
    let mut p = roomy();
    let ask = MetaGet { vivify: Some(30), ..MetaGet::default() };
    assert_eq!(p.meta_get(b"k", &MetaGet::default()).unwrap(), None, "no N, no item");
    let first = p.meta_get(b"k", &ask).unwrap().unwrap();
    assert!(first.won && first.item.value.is_empty() && !first.item.token_sent);
    assert_eq!(first.item.expiry, NOW + 30);
    let second = p.meta_get(b"k", &ask).unwrap().unwrap();
    assert!(!second.won && second.item.token_sent, "later readers see Z, not W");
}

#[test]
fn meta_get_recache_wins_once_when_the_ttl_is_below_the_token() {
    let mut p = roomy();
    p.set(b"k", b"v", 0, 100).unwrap();
    let late = MetaGet { recache: Some(50), ..MetaGet::default() };
    assert!(!p.meta_get(b"k", &late).unwrap().unwrap().won, "expires after the R time: no token");
    let soon = MetaGet { recache: Some(200), ..MetaGet::default() };
    assert!(p.meta_get(b"k", &soon).unwrap().unwrap().won);
    let again = p.meta_get(b"k", &soon).unwrap().unwrap();
    assert!(!again.won && again.item.token_sent);
    p.set(b"forever", b"v", 0, 0).unwrap();
    assert!(!p.meta_get(b"forever", &soon).unwrap().unwrap().won, "an item without expiry never recaches");
}

#[test]
fn reads_mark_items_fetched_and_report_time_since_written() {
    let mut p = roomy();
    p.set(b"k", b"v", 0, 0).unwrap();
    assert!(!p.get(b"k").unwrap().unwrap().fetched, "h0 on the first read");
    let with_l = MetaGet { last_access: true, ..MetaGet::default() };
    let read = p.meta_get(b"k", &with_l).unwrap().unwrap();
    assert!(read.item.fetched && read.last_access == 0);
    p.set_clock(NOW + 7);
    assert_eq!(p.meta_get(b"k", &with_l).unwrap().unwrap().last_access, 7);
    p.set(b"k", b"w", 0, 0).unwrap();
    assert!(!p.get(b"k").unwrap().unwrap().fetched, "a new value starts unfetched");
    assert!(p.touch(b"t", 5).is_ok_and(|hit| !hit));
}

#[test]
fn invalidation_marks_stale_with_a_new_cas_and_gives_the_token_to_the_next_reader() {
    let mut p = roomy();
    let cas = p.set(b"k", b"v", 0, 0).unwrap();
    assert_eq!(p.invalidate(b"k", cas + 1, None).unwrap(), DeleteOutcome::Exists);
    assert_eq!(p.invalidate(b"k", cas, Some(30)).unwrap(), DeleteOutcome::Deleted);
    let first = p.meta_get(b"k", &MetaGet::default()).unwrap().unwrap();
    assert!(first.item.stale && first.won && first.item.cas != cas && first.item.value == b"v");
    assert_eq!(first.item.expiry, NOW + 30);
    let new_cas = first.item.cas;
    let second = p.meta_get(b"k", &MetaGet::default()).unwrap().unwrap();
    assert!(second.item.stale && !second.won && second.item.token_sent);
    assert_eq!(p.invalidate(b"absent", 0, None).unwrap(), DeleteOutcome::NotFound);
    let debug = p.debug_item(b"k").unwrap().unwrap();
    assert_eq!((debug.ttl, debug.fetched, debug.cas), (30, true, new_cas));
}

#[test]
fn a_late_cas_write_with_invalidate_stores_a_stale_value() {
    let mut p = roomy();
    let first = p.set(b"k", b"v1", 0, 100).unwrap();
    let second = p.set(b"k", b"v2", 0, 100).unwrap();
    let late = |cas| StoreRequest { mode: StoreMode::Cas, key: b"k", value: b"v3", flags: 4, exptime: 0, cas };
    assert_eq!(p.store_invalidating(&late(second + 1)).unwrap(), StoreOutcome::Exists, "a newer CAS is refused");
    let StoreOutcome::Stored { cas } = p.store_invalidating(&late(first)).unwrap() else { panic!() };
    assert!(cas > second);
    let read = p.meta_get(b"k", &MetaGet::default()).unwrap().unwrap();
    assert_eq!((read.item.value, read.item.flags, read.item.expiry), (&b"v3"[..], 4, NOW + 100));
    assert!(read.item.stale && read.won, "stale, and the first reader gets the token");
    let StoreOutcome::Stored { cas: again } = p.store_invalidating(&late(first)).unwrap() else { panic!() };
    let read = p.meta_get(b"k", &MetaGet::default()).unwrap().unwrap();
    assert!(
        read.item.stale && read.item.token_sent && !read.won && read.item.cas == again,
        "the token stays handed out"
    );
    let StoreOutcome::Stored { .. } = p.store_invalidating(&late(again)).unwrap() else { panic!() };
    assert!(!p.meta_get(b"k", &MetaGet::default()).unwrap().unwrap().item.stale, "a matching CAS is a plain cas");
}
