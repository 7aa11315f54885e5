//! The cache partition with a flash tier on the simulated device, against a plain model: a hit
//! is always the key's last acknowledged value, whichever tier held it, across promotions,
//! evictions, flush_all and clean restarts; evicted items come back from flash; CAS values
//! survive a restart and new ones are larger.

use std::collections::HashMap;

use proptest::prelude::*;

use crate::flash::{FlashConfig, FlashStore, Now, SimDisk};
use crate::*;

const NOW: u32 = 1_800_000_000;
const SEGMENT: u32 = 64 << 10;

fn flash_config() -> FlashConfig {
    let mut cfg = FlashConfig::new(32 * u64::from(SEGMENT) + (256 << 10), 0, 1);
    cfg.segment_bytes = SEGMENT;
    cfg.max_reads = 8;
    cfg
}

fn open(disk: &SimDisk) -> (Partition, bool) {
    open_with(disk, flash_config())
}

fn open_with(disk: &SimDisk, flash: FlashConfig) -> (Partition, bool) {
    open_indexed(disk, flash, 256)
}

fn open_indexed(disk: &SimDisk, flash: FlashConfig, buckets: usize) -> (Partition, bool) {
    let config = PartitionConfig {
        memory_bytes: 48 << 10,
        max_memory_bytes: None,
        index_buckets: Some(buckets),
        max_item_bytes: MIN_ITEM_BYTES,
        expected_item_bytes: 32,
    };
    let mut p = Partition::new(&config).expect("config");
    p.set_clock(NOW);
    let (store, report) = FlashStore::open(Box::new(disk.device()), flash, Now { unix: NOW, nanos: 1 }).unwrap();
    p.attach_flash(store).unwrap();
    p.set_clock(NOW);
    (p, report.restored)
}

/// Waits until `key` may be operated on (its flash read, if any, finished) by anything but a
/// plain read: an item read from flash is promoted.
fn ready(p: &mut Partition, key: &[u8]) {
    wait_for(p, key, false);
}

/// Waits until `key` may be operated on; `copy`: by a plain read, which a first flash hit
/// answers from the read's copy (selected here, as the server does before running it).
fn wait_for(p: &mut Partition, key: &[u8], copy: bool) {
    let hash = KeyHash::of(key);
    let mut tokens = Vec::new();
    for _ in 0..10_000 {
        match p.flash_probe(key, hash, 7, copy) {
            FlashProbe::Ready => return,
            FlashProbe::Pending => {
                while !tokens.contains(&7) {
                    p.flash_poll(true, &mut tokens);
                }
                if copy {
                    p.flash_serve_copy(key, hash);
                }
                return;
            }
            FlashProbe::Busy => p.flash_poll(true, &mut tokens),
        }
    }
    panic!("the probe never became ready");
}

/// A plain get, as the server runs one (a first flash hit is not promoted).
fn get(p: &mut Partition, key: &[u8]) -> Option<(Vec<u8>, u64)> {
    wait_for(p, key, true);
    p.get(key).unwrap().map(|item| (item.value.to_vec(), item.cas))
}

/// A get that promotes what it reads from flash (as a touch or a write would need).
fn get_promoting(p: &mut Partition, key: &[u8]) -> Option<(Vec<u8>, u64)> {
    ready(p, key);
    p.get(key).unwrap().map(|item| (item.value.to_vec(), item.cas))
}

fn key(k: u16) -> Vec<u8> {
    format!("key:{k}").into_bytes()
}

fn value(k: u16, version: u32, len: usize) -> Vec<u8> {
    let stamp = format!("{k}/{version};");
    stamp.bytes().cycle().take(len.max(stamp.len())).collect()
}

/// Sets keys 0..2000 (100-byte values, flags = the key's number), 4x the DRAM log: most of
/// them go to flash. Returns their CAS values.
fn fill(p: &mut Partition) -> Vec<u64> {
    let mut tokens = Vec::new();
    let mut cas = Vec::new();
    for k in 0..2000u16 {
        cas.push(p.set(&key(k), &value(k, 0, 100), u32::from(k), 0).unwrap());
        // As the server does once per loop: finished writes free their buffers.
        p.flash_poll(false, &mut tokens);
    }
    cas
}

#[test]
fn evicted_items_come_back_from_flash_with_their_cas() {
    let disk = SimDisk::new(flash_config().file_bytes as usize, 1);
    let (mut p, _) = open(&disk);
    let cas = fill(&mut p);
    // 2000 items of ~110 bytes are 4x the DRAM log: most of them are on flash now.
    let report = p.flash_report().unwrap();
    assert!(report.tier.spilled > 1000, "{report:?}");
    for k in 0..2000u16 {
        let got = get_promoting(&mut p, &key(k));
        assert_eq!(got, Some((value(k, 0, 100), cas[usize::from(k)])), "key {k}: {:?}", p.flash_report());
    }
    assert!(p.flash_report().unwrap().tier.promoted > 1000);
}

#[test]
fn items_a_full_index_pushes_out_go_to_flash_instead_of_being_lost() {
    // Small items: the DRAM log holds hundreds, its index (one pair of buckets) sixteen. An
    // item the index pushes out used to be lost outright, though the log still held it.
    let disk = SimDisk::new(flash_config().file_bytes as usize, 1);
    let (mut p, _) = open_indexed(&disk, flash_config(), 2);
    let mut tokens = Vec::new();
    let cas: Vec<u64> = (0..300u16)
        .map(|k| {
            let cas = p.set(&key(k), &value(k, 0, 10), u32::from(k), 0).unwrap();
            p.flash_poll(false, &mut tokens);
            cas
        })
        .collect();
    for k in 0..300u16 {
        let got = get(&mut p, &key(k));
        assert_eq!(got, Some((value(k, 0, 10), cas[usize::from(k)])), "key {k}: {:?}", p.flash_report());
    }
}

#[test]
fn a_first_flash_hit_of_a_plain_read_is_answered_from_its_copy_and_a_second_promotes() {
    let disk = SimDisk::new(flash_config().file_bytes as usize, 3);
    let (mut p, _) = open(&disk);
    let cas = fill(&mut p);
    // Key 0 went to flash long ago; the first get reads it and leaves DRAM alone.
    let spilled = p.flash_report().unwrap().tier.spilled;
    assert_eq!(get(&mut p, &key(0)), Some((value(0, 0, 100), cas[0])));
    let tier = p.flash_report().unwrap().tier;
    assert_eq!((tier.copies_served, tier.promoted, tier.spilled), (1, 0, spilled), "{tier:?}");
    // The copy ends with the turn: nothing without a probe sees it.
    p.flash_submit();
    assert_eq!(p.get(&key(0)).unwrap().map(|item| item.value.to_vec()), None);
    // Hit again while the filter remembers it: promoted into DRAM.
    assert_eq!(get(&mut p, &key(0)), Some((value(0, 0, 100), cas[0])));
    assert_eq!(p.flash_report().unwrap().tier.promoted, 1);
    p.flash_submit();
    assert_eq!(p.get(&key(0)).unwrap().map(|item| item.value.to_vec()), Some(value(0, 0, 100)));
    // A delete while a copy waits: the copy goes with the key.
    assert_eq!(get(&mut p, &key(1)), Some((value(1, 0, 100), cas[1])));
    ready(&mut p, &key(1));
    assert!(matches!(p.delete(&key(1), 0).unwrap(), DeleteOutcome::Deleted));
    assert_eq!(get(&mut p, &key(1)), None);
    // A set while a copy waits: the new value, never the copy.
    assert_eq!(get(&mut p, &key(2)), Some((value(2, 0, 100), cas[2])));
    p.set(&key(2), b"new", 0, 0).unwrap();
    assert_eq!(get(&mut p, &key(2)).map(|(v, _)| v), Some(b"new".to_vec()));
    // flush_all while a copy waits.
    assert_eq!(get(&mut p, &key(3)), Some((value(3, 0, 100), cas[3])));
    p.flush_all(0);
    assert_eq!(get(&mut p, &key(3)), None);
}

#[test]
fn a_clean_restart_serves_everything_and_cas_keeps_rising() {
    let disk = SimDisk::new(flash_config().file_bytes as usize, 2);
    let (mut p, restored) = open(&disk);
    assert!(!restored);
    let mut cas = Vec::new();
    for k in 0..1500u16 {
        cas.push(p.set(&key(k), &value(k, 1, 90), 0, 0).unwrap());
    }
    p.flush_all(3600);
    p.close_flash().unwrap();
    let (mut p, restored) = open(&disk);
    assert!(restored);
    for k in 0..1500u16 {
        assert_eq!(get(&mut p, &key(k)), Some((value(k, 1, 90), cas[usize::from(k)])), "key {k}");
    }
    let newest = cas.iter().max().copied().unwrap();
    assert!(p.set(b"new", b"v", 0, 0).unwrap() > newest, "a CAS after a restart is larger than any before");
    // The delayed flush_all survived the restart.
    p.set_clock(NOW + 3600);
    assert_eq!(get(&mut p, &key(3)), None);
}

/// Waits until a change of `key` may run (its invalidation, if it needs one, is on the device);
/// false if the device failed it.
fn guard(p: &mut Partition, key: &[u8]) -> bool {
    let hash = KeyHash::of(key);
    let mut tokens = Vec::new();
    for _ in 0..10_000 {
        match p.flash_guard_write(key, hash, 9) {
            FlashProbe::Ready => return true,
            FlashProbe::Pending => loop {
                p.flash_submit();
                p.flash_poll(true, &mut tokens);
                if let Some(&token) = tokens.iter().find(|&&t| t & !FLASH_FAILED == 9) {
                    return token & FLASH_FAILED == 0;
                }
            },
            FlashProbe::Busy => p.flash_poll(true, &mut tokens),
        }
    }
    panic!("the guard never became ready");
}

/// kill -9 under a mix of overwrites and deletes, each change of a flash-resident key made
/// durable first (as the server does): what comes back is each key's last value or nothing.
#[test]
fn a_crash_brings_back_flash_items_and_never_an_old_value() {
    let disk = SimDisk::new(flash_config().file_bytes as usize, 3);
    // Buffers written 1 ms after they open (real time), so the fill reaches the device.
    let cfg = FlashConfig { flush_delay_ns: 1_000_000, ..flash_config() };
    let (mut p, _) = open_with(&disk, cfg.clone());
    let mut model: HashMap<u16, Option<Vec<u8>>> = HashMap::new();
    for k in 0..1500u16 {
        p.set(&key(k), &value(k, 1, 90), 0, 0).unwrap();
        model.insert(k, Some(value(k, 1, 90)));
    }
    // Past the flush delay the write buffers go to the device.
    std::thread::sleep(std::time::Duration::from_millis(5));
    p.set_clock(NOW + 2);
    let mut tokens = Vec::new();
    while p.flash_in_flight() > 0 || tokens.is_empty() {
        p.flash_poll(true, &mut tokens);
        tokens.push(0);
    }
    let on_flash = p.flash_report().unwrap().store.items;
    // Changes in batches, as a server's loop turn makes them: every invalidation of a batch
    // goes to the device in one commit, then the batch runs.
    let changed: Vec<u16> = (0..1500u16).step_by(3).collect();
    for batch in changed.chunks(50) {
        for &k in batch {
            ready(&mut p, &key(k));
        }
        let mut waiting = 0;
        for &k in batch {
            match p.flash_guard_write(&key(k), KeyHash::of(&key(k)), u64::from(k)) {
                FlashProbe::Ready => {}
                FlashProbe::Pending => waiting += 1,
                FlashProbe::Busy => assert!(guard(&mut p, &key(k))),
            }
        }
        p.flash_submit();
        let mut tokens = Vec::new();
        while tokens.len() < waiting {
            p.flash_poll(true, &mut tokens);
        }
        assert!(tokens.iter().all(|t| t & FLASH_FAILED == 0));
        for &k in batch {
            if k % 2 == 0 {
                p.set(&key(k), &value(k, 2, 90), 0, 0).unwrap();
                model.insert(k, Some(value(k, 2, 90)));
            } else {
                p.delete(&key(k), 0).unwrap();
                model.insert(k, None);
            }
        }
    }
    disk.crash();
    disk.revive();
    drop(p);
    let (mut p, restored) = open_with(&disk, cfg);
    assert!(restored, "the segments bring the tier back");
    let mut back = 0;
    for k in 0..1500u16 {
        if let Some((v, _)) = get(&mut p, &key(k)) {
            assert_eq!(Some(v), model[&k], "key {k}: only its last value may come back");
            back += 1;
        }
    }
    // A third of the keys changed; of the rest, nine in ten that were on flash come back.
    assert!(back as u64 >= on_flash * 2 / 3 * 9 / 10, "most flash items come back: {back} of {on_flash}");
}

#[test]
fn a_dump_lists_every_item_once_whichever_tier_holds_it() {
    let disk = SimDisk::new(flash_config().file_bytes as usize, 4);
    let (mut p, _) = open(&disk);
    let mut tokens = Vec::new();
    for k in 0..2000u16 {
        p.set(&key(k), &value(k, 0, 100), 0, 0).unwrap();
        p.flash_poll(false, &mut tokens);
    }
    // As the server does: a key only on flash comes back into DRAM before it is deleted.
    ready(&mut p, &key(7));
    assert_eq!(p.delete(&key(7), 0).unwrap(), DeleteOutcome::Deleted);
    let mut listed: HashMap<Vec<u8>, usize> = HashMap::new();
    let mut cursor = Some(0);
    while let Some(at) = cursor {
        cursor = p.dump_step(at, 64, &mut |key, debug| {
            assert_eq!(debug.value_len, 100);
            *listed.entry(key.to_vec()).or_default() += 1;
        });
    }
    assert!(listed.values().all(|&n| n == 1), "an item listed twice");
    assert!(!listed.contains_key(&key(7)), "a deleted item listed");
    let missing: Vec<u16> = (0..2000u16).filter(|&k| k != 7 && !listed.contains_key(&key(k))).collect();
    let gettable = missing.iter().filter(|&&k| get(&mut p, &key(k)).is_some()).count();
    assert_eq!(
        listed.len(),
        1999,
        "every live item, in DRAM or on flash: {} missing, {gettable} of them gettable: {:?} {:?}",
        missing.len(),
        &missing[..missing.len().min(20)],
        p.flash_report()
    );
}

#[derive(Clone, Debug)]
enum Op {
    Set(u16, u16),
    Append(u16),
    Incr(u16),
    Delete(u16),
    Touch(u16),
    Get(u16),
    Flush,
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    let k = 0..300u16;
    prop_oneof![
        8 => (k.clone(), 1..300u16).prop_map(|(k, len)| Op::Set(k, len)),
        2 => k.clone().prop_map(Op::Append),
        2 => k.clone().prop_map(Op::Incr),
        2 => k.clone().prop_map(Op::Delete),
        1 => k.clone().prop_map(Op::Touch),
        10 => k.prop_map(Op::Get),
        1 => Just(Op::Flush),
        1 => Just(Op::Restart),
    ]
}

/// Runs `ops`; a hit must equal the model, and whatever an operation reports updates it (the
/// cache may lose items, never invent or resurrect them).
fn run(ops: &[Op], seed: u64, buckets: usize) {
    let disk = SimDisk::new(flash_config().file_bytes as usize, seed);
    let (mut p, _) = open_indexed(&disk, flash_config(), buckets);
    let mut model: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
    for (version, op) in ops.iter().enumerate() {
        let version = version as u32;
        match *op {
            Op::Set(k, len) => {
                p.set(&key(k), &value(k, version, usize::from(len)), 0, 0).unwrap();
                model.insert(key(k), value(k, version, usize::from(len)));
            }
            Op::Append(k) => {
                ready(&mut p, &key(k));
                let request =
                    StoreRequest { mode: StoreMode::Append, key: &key(k), value: b"+", flags: 0, exptime: 0, cas: 0 };
                match p.store(&request).unwrap() {
                    StoreOutcome::Stored { .. } => model.get_mut(&key(k)).expect("append hit a value").push(b'+'),
                    _ => drop(model.remove(&key(k))),
                }
            }
            Op::Incr(k) => {
                ready(&mut p, &key(k));
                let request = ArithRequest { delta: 1, decrement: false, cas: 0, initial: None };
                match p.arith(&key(k), &request) {
                    Ok(ArithOutcome::Value { value, .. }) => {
                        model.insert(key(k), value.to_string().into_bytes());
                    }
                    Ok(ArithOutcome::NotFound) => drop(model.remove(&key(k))),
                    Ok(other) => panic!("{other:?}"),
                    // Not a number: the value stays.
                    Err(_) => assert!(model.contains_key(&key(k))),
                }
            }
            Op::Delete(k) => {
                ready(&mut p, &key(k));
                let _ = p.delete(&key(k), 0).unwrap();
                model.remove(&key(k));
            }
            Op::Touch(k) => {
                ready(&mut p, &key(k));
                if !p.touch(&key(k), 0).unwrap() {
                    model.remove(&key(k));
                }
            }
            Op::Get(k) => {
                if let Some((got, _)) = get(&mut p, &key(k)) {
                    assert_eq!(Some(&got), model.get(&key(k)), "key {k} after {version} ops");
                }
            }
            Op::Flush => {
                p.flush_all(0);
                model.clear();
            }
            Op::Restart => {
                p.close_flash().unwrap();
                (p, _) = open_indexed(&disk, flash_config(), buckets);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn every_hit_is_the_last_acknowledged_value(ops in proptest::collection::vec(op(), 1..1500), seed in 0..1000u64) {
        run(&ops, seed, 256);
    }

    /// The same with an index of one pair of buckets: items it pushes out go to flash.
    #[test]
    fn every_hit_is_the_last_acknowledged_value_with_a_tiny_index(ops in proptest::collection::vec(op(), 1..1500), seed in 0..1000u64) {
        run(&ops, seed, 2);
    }
}

/// flush_all with a delay, then kill -9 before the deadline: the recovered tier still flushes
/// at the deadline (nothing set before the flush_all comes back after it).
#[test]
fn a_delayed_flush_all_survives_a_crash() {
    let disk = SimDisk::new(flash_config().file_bytes as usize, 5);
    let cfg = FlashConfig { flush_delay_ns: 1_000_000, ..flash_config() };
    let (mut p, _) = open_with(&disk, cfg.clone());
    for k in 0..1500u16 {
        p.set(&key(k), &value(k, 1, 90), 0, 0).unwrap();
    }
    std::thread::sleep(std::time::Duration::from_millis(5));
    let mut tokens = Vec::new();
    while p.flash_in_flight() > 0 || tokens.is_empty() {
        p.flash_poll(true, &mut tokens);
        tokens.push(0);
    }
    p.flush_all(100);
    disk.crash();
    disk.revive();
    drop(p);
    let (mut p, restored) = open_with(&disk, cfg);
    assert!(restored);
    assert!((0..1500u16).any(|k| get(&mut p, &key(k)).is_some()), "before the deadline items are served");
    p.set_clock(NOW + 200);
    assert!((0..1500u16).all(|k| get(&mut p, &key(k)).is_none()), "after it none");
}
