//! Deterministic scenarios that each pin down one mechanism of the flash store: one read per
//! hit and none per miss, GC keeping what was read, corruption detected, crashes and layout
//! changes starting empty, generations never wrapping onto a live entry; and the cases the
//! model tests once found (an invalidation racing GC, a bit flipped inside a large item, a
//! damaged superblock, commits overlapping a seal), replayed.

use super::io::sim::{Faults, SimDisk};
use super::tests::{cascade_config, config, key, run, value, Harness, Op};
use super::*;

fn sealed(h: &mut Harness) {
    // Past the flush delay the active buffer is written; wait for the write.
    h.now.nanos += 2_000_000_000;
    h.poll();
    while h.store().in_flight() > 0 {
        let mut done = Vec::new();
        let now = h.now;
        h.store().wait(now, &mut done);
    }
}

fn hits(h: &mut Harness, keys: impl Iterator<Item = u32>) -> usize {
    let keys: Vec<u32> = keys.collect();
    let buffer_hits = h.store().stats().hits_buffer;
    let mut n = 0;
    for chunk in keys.chunks(8) {
        for &k in chunk {
            h.lookup(k);
        }
        n += h.settle().len();
    }
    n + (h.store().stats().hits_buffer - buffer_hits) as usize
}

#[test]
fn a_hit_costs_one_read_and_a_miss_none() {
    let mut h = Harness::new(1, Faults::default());
    for k in 0..2000 {
        h.insert(k, 100, None);
    }
    sealed(&mut h);
    let before = h.store().stats();
    assert_eq!(hits(&mut h, 0..2000), 2000, "every item fits and is found");
    let after = h.store().stats();
    assert_eq!(after.reads - before.reads, 2000, "one read per hit");
    assert_eq!(hits(&mut h, 10_000..30_000), 0);
    let misses = h.store().stats();
    assert!(misses.reads - after.reads <= 20_000 / 1000, "reads per miss below 0.001: {}", misses.reads - after.reads);
    assert_eq!(misses.miss_tag, misses.reads - after.reads, "each wasted read was a tag twin");
}

#[test]
fn gc_rewrites_items_read_on_flash_and_drops_the_rest() {
    let mut h = Harness::new(2, Faults::default());
    for k in 0..300 {
        h.insert(k, 300, None);
    }
    sealed(&mut h);
    // Keys 0..100 are read (hot); 100..300 are not.
    assert_eq!(hits(&mut h, 0..100), 100);
    // Fill the ring twice over with other keys, reading the hot set now and then.
    for round in 0..16 {
        for i in 0..700 {
            h.insert(1000 + round * 700 + i, 300, None);
            if i % 50 == 0 {
                h.poll();
            }
        }
        sealed(&mut h);
        assert_eq!(hits(&mut h, 0..100), 100, "round {round}: hot items survive GC");
    }
    let s = h.store().stats();
    assert!(s.gc_rewrites >= 100 && s.dropped_items > 0 && s.reclaims > 24, "{s:?}");
    assert_eq!(hits(&mut h, 100..300), 0, "cold items were dropped");
}

#[test]
fn a_flipped_bit_on_the_device_is_a_counted_miss() {
    let mut h = Harness::new(3, Faults::default());
    h.insert(7, 100, None);
    sealed(&mut h);
    let layout = *h.store().layout();
    // The first item sits right after the first segment's header.
    h.disk.flip(layout.segment_offset(0) as usize + layout::SEGMENT_HEADER + layout::ITEM_HEADER + 3, 2);
    assert_eq!(hits(&mut h, 7..8), 0);
    assert_eq!(h.store().stats().miss_corrupt, 1);
}

#[test]
fn a_crash_brings_back_what_was_durable_and_nothing_superseded() {
    let mut h = Harness::new(4, Faults::default());
    for k in 0..200 {
        h.insert(k, 100, None);
    }
    h.clean_restart();
    assert_eq!(hits(&mut h, 0..200), 200);
    // New values for keys 0..100: each old copy's invalidation is durable before the write.
    for k in 0..100 {
        h.insert(k, 150, None);
    }
    h.poll();
    let report = h.crash();
    assert!(report.restored && report.reason.starts_with("recovered"), "{report:?}");
    // Keys 0..100 hit only with their new value (checked by the harness) or miss.
    assert_eq!(hits(&mut h, 100..200), 100, "the untouched items come back from the segments");
    hits(&mut h, 0..100);
    for k in 500..520 {
        h.insert(k, 100, None);
    }
    h.clean_restart();
    assert_eq!(hits(&mut h, 500..520), 20);
    assert_eq!(hits(&mut h, 100..200), 100);
}

#[test]
fn a_changed_layout_or_a_damaged_superblock_starts_empty_and_says_why() {
    let disk = SimDisk::new(config().file_bytes as usize, 5);
    let now = Now { unix: 100, nanos: 1 };
    let (mut store, report) = FlashStore::open(Box::new(disk.device()), config(), now).unwrap();
    assert_eq!(report.reason, crate::flash::NEW_FILE, "a blank file is new");
    let k = key(1);
    assert_eq!(store.insert(KeyHash::of(&k), &k, &value(1, 1, 10), ItemMeta::default(), now), InsertOutcome::Stored);
    store.close(now).unwrap();
    let mut other = config();
    other.expected_item_bytes = 512;
    let (store, report) = FlashStore::open(Box::new(disk.device()), other, now).unwrap();
    assert!(!report.restored && report.reason.contains("layout changed"), "{report:?}");
    store.close(now).unwrap();
    let (store, report) = FlashStore::open(Box::new(disk.device()), config(), now).unwrap();
    assert!(!report.restored, "the other layout's close replaced the superblock: {report:?}");
    let region = store.layout().region_offset as usize;
    store.close(now).unwrap();
    // Both superblock pages damaged.
    disk.flip(region + 10, 1);
    disk.flip(region + 4096 + 10, 1);
    let (_, report) = FlashStore::open(Box::new(disk.device()), config(), now).unwrap();
    assert!(report.reason.contains("no valid superblock"), "{report:?}");
    // Zeroed (as a tool that lays the file out anew leaves it): new again.
    disk.zero(region, 8192);
    let (_, report) = FlashStore::open(Box::new(disk.device()), config(), now).unwrap();
    assert_eq!(report.reason, crate::flash::NEW_FILE, "{report:?}");
}

#[test]
fn a_clean_restart_keeps_deletes_overwrites_and_cas() {
    let mut h = Harness::new(6, Faults::default());
    for k in 0..50 {
        h.insert(k, 100, None);
    }
    sealed(&mut h);
    for k in 0..10 {
        h.delete(k);
    }
    for k in 10..20 {
        h.insert(k, 120, None);
    }
    let cas = h.store().max_cas();
    h.clean_restart();
    assert_eq!(h.store().max_cas(), cas);
    assert_eq!(hits(&mut h, 0..10), 0, "deleted items stay deleted");
    assert_eq!(hits(&mut h, 10..50), 40, "overwritten ones come back with their new values");
}

#[test]
fn writes_during_a_read_supersede_it_and_expiry_is_honoured() {
    let mut h = Harness::new(7, Faults::default());
    h.insert(1, 100, None);
    h.insert(2, 100, Some(2));
    sealed(&mut h);
    let token = h.lookup(1).expect("a read");
    // A new version written meanwhile (as the owner spills one whose invalidation is done).
    let (k, now) = (key(1), h.now);
    let stored = h.store().insert(KeyHash::of(&k), &k, &value(1, 99, 100), ItemMeta::default(), now);
    assert_eq!(stored, InsertOutcome::Stored);
    let mut done = Vec::new();
    while done.is_empty() {
        let now = h.now;
        h.store().wait(now, &mut done);
    }
    assert_eq!((done[0].token, done[0].item.is_none()), (token, true));
    h.pending.clear();
    assert_eq!(h.store().stats().miss_superseded, 1);
    h.now.unix += 3;
    assert_eq!(hits(&mut h, 2..3), 0);
    assert_eq!(h.store().stats().miss_expired, 1);
}

#[test]
fn entries_into_reclaimed_slots_are_swept_before_a_generation_repeats() {
    let mut h = Harness::new(8, Faults::default());
    h.insert(0, 100, None);
    // Many trips round the ring; key 0 is never read, so GC drops it at once.
    for i in 0..60_000 {
        h.insert(100 + i, 400, None);
        if i % 64 == 0 {
            h.poll();
        }
    }
    sealed(&mut h);
    let s = h.store().stats();
    assert!(s.reclaims > 24 * 9 && s.swept > 0, "{s:?}");
    assert!(!h.store().may_contain(KeyHash::of(&key(0))), "the dead entry is gone from the index");
}

#[test]
fn a_write_budget_rejects_what_exceeds_it() {
    let disk = SimDisk::new(config().file_bytes as usize, 9);
    let mut cfg = config();
    cfg.admission = AdmissionPolicy::RateMbps(0.1);
    let now = Now { unix: 100, nanos: 1 };
    let (mut store, _) = FlashStore::open(Box::new(disk.device()), cfg, now).unwrap();
    let stored = (0..2000u32)
        .filter(|&k| {
            store.insert(KeyHash::of(&key(k)), &key(k), &value(k, 1, 100), ItemMeta::default(), now)
                == InsertOutcome::Stored
        })
        .count();
    // 100 KB/s with a second's burst: about 100_000 / 144 items.
    assert!((600..800).contains(&stored), "{stored}");
    assert_eq!(store.stats().rejected, 2000 - stored as u64);
}

#[test]
fn every_injected_fault_is_a_counted_miss() {
    let mut h = Harness::new(10, Faults::default());
    for k in 0..300 {
        h.insert(k, 1000, None);
    }
    sealed(&mut h);
    // Every read comes back with one bit flipped somewhere in its page: the ones that land in
    // the item are caught (the harness checks every hit's value), the rest are harmless.
    h.disk.set_faults(Faults { fail_per_million: 0, flip_per_million: 1_000_000 });
    let served = hits(&mut h, 0..300);
    let s = h.store().stats();
    assert_eq!(h.disk.counters().flipped, 300);
    assert!(s.miss_corrupt > 30 && served as u64 + s.miss_corrupt == 300, "{served} {s:?}");
    h.disk.set_faults(Faults { fail_per_million: 1_000_000, flip_per_million: 0 });
    assert_eq!(hits(&mut h, 0..300), 0);
    assert_eq!(h.store().stats().miss_io_error, 300);
    h.disk.set_faults(Faults::default());
    assert_eq!(hits(&mut h, 0..300), 300, "the data on the device was never damaged");
}

/// The cascade index with a 16-entry tier 1 (almost every mapping lives on flash), blocks of 32
/// mappings and room for 8192 mappings in tier 3.
fn cascade_harness(seed: u64) -> Harness {
    cascade_harness_merging_at(seed, 2)
}

/// `cascade_harness` whose streams merge their tier-2 blocks into tier 3 at `reorg_at` blocks.
fn cascade_harness_merging_at(seed: u64, reorg_at: u32) -> Harness {
    let mut cfg = config();
    cfg.file_bytes += 4 << 20;
    cfg.expected_item_bytes = 2048;
    let mut c = CascadeConfig::with_t1_bytes(128);
    (c.reorg_at, c.pages_per_stream, c.block_entries) = (reorg_at, 32, 32);
    cfg.cascade = Some(c);
    Harness::with(cfg, seed, Faults::default())
}

#[test]
fn cascade_mappings_demote_to_flash_and_a_hit_below_costs_two_reads() {
    let mut h = cascade_harness(11);
    for k in 0..2000 {
        h.insert(k, 100, None);
    }
    sealed(&mut h);
    let tiers = h.store().tier_counts();
    // Two keys with the same tag in one of tier 1's two buckets share a fingerprint (about 15
    // pairs of 2000 keys): the newer one shadows the older.
    assert!(tiers.t1 <= 16 && tiers.t2 + tiers.t3 >= 1950, "{tiers:?} {:?}", h.store().cascade_stats());
    let c = h.store().cascade_stats().expect("cascade");
    assert!(c.reorgs > 0 && c.t2_blocks_written > 0, "{c:?}");
    assert!(hits(&mut h, 0..2000) >= 1960, "items are found through the tiers");
    let c = h.store().cascade_stats().expect("cascade");
    let below = c.hits_t2 + c.hits_t3;
    assert!(below >= 1950, "{c:?}");
    let per_hit = (c.reads_t2 + c.reads_t3) as f64 / below as f64;
    assert!((1.9..2.3).contains(&per_hit), "a mapping read and a data read per hit below: {per_hit}");
    // A hit moves the mapping into tier 1: the next hit is one read.
    let before = h.store().cascade_stats().expect("cascade");
    assert_eq!(hits(&mut h, 1999..2000), 1);
    let after = h.store().cascade_stats().expect("cascade");
    assert_eq!((after.hits_t1 - before.hits_t1, after.reads_t1 - before.reads_t1), (1, 1));
    // Absent keys: the Bloom filters keep misses nearly free.
    let before = h.store().cascade_stats().expect("cascade");
    assert_eq!(hits(&mut h, 10_000..30_000), 0);
    let after = h.store().cascade_stats().expect("cascade");
    let per_miss = (after.reads_miss - before.reads_miss) as f64 / 20_000.0;
    assert!(per_miss < 0.2, "reads per miss {per_miss}");
}

#[test]
fn a_mapping_demoted_again_is_read_from_its_newest_block_only() {
    // Merges far apart, so a key's older block stays beside the newer one.
    let mut h = cascade_harness_merging_at(13, 40);
    for k in 0..2000 {
        h.insert(k, 100, None);
    }
    sealed(&mut h);
    // Each hit promotes its mapping into the 16-entry tier 1, and the next hits demote it into
    // a newer tier-2 block: these keys are now in two blocks, both filters saying yes.
    assert!(hits(&mut h, 0..400) >= 390);
    sealed(&mut h);
    let before = h.store().cascade_stats().expect("cascade");
    assert!(hits(&mut h, 0..400) >= 390, "found again");
    let after = h.store().cascade_stats().expect("cascade");
    let below = (after.hits_t2 + after.hits_t3) - (before.hits_t2 + before.hits_t3);
    assert!(below >= 350, "{after:?}");
    let map_reads = (after.map_reads - before.map_reads) as f64 / below as f64;
    assert!(map_reads < 1.3, "the newest candidate is read first; older ones only if it misses: {map_reads}");
}

#[test]
fn cascade_deletes_and_failed_overwrites_stay_gone_through_merges_and_a_restart() {
    let mut h = cascade_harness(12);
    for k in 0..600 {
        h.insert(k, 100, None);
    }
    sealed(&mut h);
    for k in 0..100 {
        h.delete(k);
    }
    // Too large to store: the old value must not come back either.
    for k in 100..110 {
        h.insert(k, 5 << 20, None);
    }
    // More keys push the tombstones through tier 2 and into tier 3.
    for k in 1000..3000 {
        h.insert(k, 100, None);
    }
    sealed(&mut h);
    assert_eq!(hits(&mut h, 0..110), 0, "deleted and overwritten keys miss");
    assert!(hits(&mut h, 110..600) >= 480);
    h.clean_restart();
    assert_eq!(hits(&mut h, 0..110), 0, "and still miss after a restart");
    assert!(h.store().cascade_stats().expect("cascade").reorgs == 0, "counters start again after a restart");
    assert!(h.store().tier_counts().t3 > 0, "tier 3 survives the restart");
}

#[test]
fn a_store_holds_no_more_dram_than_its_configuration_says() {
    for cfg in [config(), super::tests::cascade_config(), super::sets::tests::sets_config()] {
        let bound = cfg.dram_bytes().unwrap();
        let mut h = Harness::with(cfg, 11, Faults::default());
        for k in 0..3000 {
            h.insert(k % 500, 100 + (k as usize * 7) % 900, None);
            if k % 7 == 0 {
                h.lookup(k % 500);
            }
            if k % 64 == 0 {
                h.poll();
            }
        }
        h.settle();
        let held = h.store().memory().total();
        assert!(held <= bound, "{held} bytes held, {bound} promised");
    }
}

/// Found by the fault-injecting model test on a fresh clone: GC ran between an invalidation's
/// write finishing and its key leaving the index, and copied the old value past the mark; after
/// a crash that copy was the newest record of the key.
#[test]
fn gc_never_copies_a_value_past_its_invalidation() {
    use Op::*;
    let ops = [
        Insert(0, 2756, None),
        Insert(3, 1, None),
        Invalidate(1),
        Insert(19, 1, None),
        Insert(9, 1, None),
        Fill(321),
        CrashDuringClose(4),
        Insert(18, 1, None),
        Insert(0, 1, None),
        Insert(10, 1, None),
        Fill(25),
        Insert(6, 1, None),
        Insert(32, 1, None),
        Lookup(0),
        Insert(0, 1, None),
        Insert(7, 1, None),
        Insert(2, 1, None),
        Lookup(0),
        Insert(0, 1, None),
        Delete(2),
        CleanRestart,
        Fill(312),
        Fill(25),
        Advance(1),
        Insert(18, 138, None),
        Insert(32, 189, None),
        Crash,
        Fill(430),
    ];
    for seed in [15_420_672_538_523_154_027, 1, 2, 3, 4, 5, 6, 7] {
        run(&ops, seed, Faults { fail_per_million: 20_000, flip_per_million: 50_000 }, config());
    }
}

/// Found by the cascade index's fault test: the first item of a segment (5 KiB, two pages) read
/// back with a bit flipped on its second page, the walk skipped to the next page boundary, and
/// the invalidation mark right after the item was never seen: recovery served the deleted key.
#[test]
fn a_bit_flipped_inside_a_large_item_does_not_hide_the_marks_after_it() {
    use Op::*;
    let ops = [
        Insert(15, 1, None),
        Insert(27, 1, None),
        Advance(1),
        Insert(0, 1, None),
        Insert(13, 1, None),
        Poll,
        Invalidate(0),
        CrashWriteCloseReopen(51),
        Fill(65),
        Insert(3, 1, None),
        Poll,
        Poll,
        Lookup(22),
        Poll,
        Delete(19),
        Invalidate(14),
        Lookup(34),
        Insert(1, 1, None),
        Insert(10, 1, None),
        Insert(0, 5222, None),
        Lookup(25),
        Delete(21),
        Crash,
        CrashDuringClose(0),
    ];
    run(&ops, 11212907957173230586, Faults { fail_per_million: 20_000, flip_per_million: 50_000 }, cascade_config());
}

/// Found by the cascade index's model test: an invalidation never waited for (its request still
/// parked) finished after a later change of the same key had stored a new value, and removed
/// that value's index entry; the key's next delete then saw no flash copy, wrote no mark, and
/// after a crash the removed value came back.
#[test]
fn an_earlier_invalidation_never_removes_a_newer_value() {
    use Op::*;
    let ops = [
        Insert(17, 1, None),
        Insert(13, 1, None),
        Insert(32, 1, None),
        CleanRestart,
        Insert(25, 1, None),
        Insert(0, 1, None),
        Insert(32, 1, None),
        Crash,
        CrashWriteCloseReopen(170),
        Insert(3, 1, None),
        Lookup(8),
        Lookup(5),
        Poll,
        Insert(21, 1, None),
        Poll,
        Crash,
        Insert(2, 1, None),
        Lookup(0),
        Lookup(3),
        Lookup(3),
        Insert(17, 1, None),
        Insert(3, 1, None),
        Crash,
        Insert(32, 1, None),
        CleanRestart,
        Fill(533),
        Insert(6, 11860, None),
        Insert(31, 1, None),
        Invalidate(10),
        Insert(10, 1, None),
        Delete(29),
        Delete(10),
        Crash,
        CrashDuringClose(0),
    ];
    run(&ops, 4916721965290933677, Faults::default(), cascade_config());
}

/// Found by the cascade index's fault test: a clean restart read both superblock pages as
/// damaged (injected read faults) and started empty under the clock's epoch, which was the
/// last run's; that run's segments then passed the new watermark, and after a crash a key's
/// older value came back over the one stored since. Now such a start takes an epoch above every
/// segment header and writes both superblock pages.
#[test]
fn a_start_after_a_damaged_superblock_never_adopts_an_earlier_run_after_a_crash() {
    use Op::*;
    let ops = [
        Fill(359),
        Fill(53),
        Fill(242),
        Insert(26, 1, None),
        Insert(14, 1, None),
        Insert(6, 1, None),
        Insert(32, 1, None),
        Insert(0, 1, None),
        Insert(11, 1, None),
        Insert(8, 1, None),
        Advance(1),
        Insert(24, 1, None),
        Insert(16, 1, None),
        Insert(25, 1, None),
        Insert(9, 1, None),
        Insert(33, 1, None),
        Poll,
        Poll,
        Lookup(8),
        Insert(8, 1, None),
        Insert(20, 1, None),
        Insert(10, 1, None),
        Insert(1, 1, None),
        Insert(6, 1, None),
        Crash,
        Insert(32, 1, None),
        CleanRestart,
        Insert(0, 1, None),
        Crash,
        Fill(1),
    ];
    run(&ops, 12870954940707532393, Faults { fail_per_million: 20_000, flip_per_million: 50_000 }, cascade_config());
}

/// Found by the cascade index's fault test: recovery read a segment whose last record (a
/// 5.7 KiB item) had a bit flipped on a page the second read did not cover, so the item looked
/// like the end and the key's older copy (killed by a mark) was all it found. The key's delete
/// then saw no flash copy and wrote no mark, and the next recovery read the item intact.
#[test]
fn a_record_recovery_misses_once_never_comes_back_after_a_delete() {
    use Op::*;
    let ops = [
        CrashWriteCloseReopen(79),
        Lookup(23),
        Insert(21, 1, None),
        Insert(27, 1, None),
        Lookup(28),
        Insert(11, 1, None),
        Delete(22),
        Insert(18, 1, None),
        Delete(30),
        Delete(30),
        Lookup(2),
        Insert(26, 1, None),
        Delete(9),
        Insert(13, 1, None),
        Insert(21, 1, None),
        Insert(5, 8100, None),
        Insert(34, 1, None),
        Invalidate(1),
        Insert(22, 1, None),
        Lookup(29),
        Insert(12, 5826, None),
        Invalidate(37),
        Insert(14, 1, None),
        Lookup(0),
        Lookup(16),
        Invalidate(30),
        Delete(10),
        Insert(24, 1, None),
        Lookup(2),
        Insert(2, 1, None),
        Lookup(23),
        Delete(29),
        Lookup(5),
        Insert(31, 1, None),
        Lookup(23),
        Insert(20, 1, None),
        Insert(10, 1, None),
        Insert(13, 1, None),
        Insert(2, 1, None),
        Lookup(0),
        Lookup(3),
        Insert(2, 1, None),
        Insert(0, 1, None),
        Delete(12),
        CrashDuringClose(0),
    ];
    run(&ops, 16723929610449587653, Faults { fail_per_million: 20_000, flip_per_million: 50_000 }, cascade_config());
}

/// Invalidations committed while buffers fill, seal and are written all reach the device, the
/// commits share one copy (a commit waits while it is out, and its return starts the commit),
/// and the tier never holds more than its budget's buffers.
#[test]
fn commits_that_overlap_a_seal_all_reach_the_device_through_one_copy() {
    let mut h = Harness::new(7, Faults::default());
    let cfg = h.cfg.clone();
    let budget = cfg.dram_bytes().expect("layout");
    let most_buffers = (u64::from(cfg.write_buffers) + 1) * u64::from(cfg.segment_bytes);
    let now = h.now;
    let mut tickets = std::collections::HashSet::new();
    let mut written = 0;
    for k in 0..4000u32 {
        // Items fill buffers; invalidations of keys on flash need commits between them.
        h.insert(k, 300, None);
        let hash = KeyHash::of(&key(k / 2));
        if let Ok(t) = h.store().invalidate(hash, now) {
            tickets.insert(t);
        }
        h.store().commit();
        let memory = h.store().memory();
        assert!(memory.write_buffers <= most_buffers, "{} > {most_buffers}", memory.write_buffers);
        assert!(memory.total() <= budget);
        let mut commits = Vec::new();
        h.store().take_commits(&mut commits);
        for (t, ok) in commits {
            assert!(ok && tickets.remove(&t), "ticket {t} reported once, written");
            written += 1;
        }
        if k % 7 == 0 {
            h.poll();
        }
    }
    for _ in 0..1000 {
        if tickets.is_empty() {
            break;
        }
        let mut done = Vec::new();
        h.store().wait(now, &mut done);
        let mut commits = Vec::new();
        h.store().take_commits(&mut commits);
        for (t, ok) in commits {
            assert!(ok && tickets.remove(&t));
            written += 1;
        }
    }
    assert!(tickets.is_empty(), "{} invalidations never reached the device", tickets.len());
    assert!(written > 200, "only {written} commits were tested");
    let s = h.store().stats();
    assert!(s.commits > 100 && s.segments_written > 3, "{s:?}");
}
