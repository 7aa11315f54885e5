//! A device whose writes fail, for good or for a while (`faults`), against the plain model:
//! every lookup is answered (a hit is the last acknowledged value, a miss is allowed), failed
//! writes are tried a bounded number of times, new items stay out while writes fail, a close
//! returns, and once writes work again the tier takes and serves items again.

use super::io::sim::Faults;
use super::sets::tests::sets_config;
use super::tests::{cascade_config, config, key, Harness};
use super::*;

/// The three indexes: full, cascade, sets.
fn configs() -> [FlashConfig; 3] {
    [config(), cascade_config(), sets_config()]
}

/// Inserts and looks up keys `from..to` for `rounds` rounds, the clock moving 5 ms a round.
fn churn(h: &mut Harness, from: u32, to: u32, rounds: u32) {
    for round in 0..rounds {
        for k in from..to {
            if (k + round) % 3 == 0 {
                h.insert(k, 1500 + (k as usize * 37) % 3000, None);
            }
            h.lookup(k);
        }
        h.now.nanos += 5_000_000;
        h.poll();
        h.settle();
    }
}

/// Closes the store on another thread: it must return within 10 s whatever the device does.
fn close_within_bound(h: &mut Harness) -> Result<Closed, StoreError> {
    let store = h.take_store();
    let now = h.now;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(store.close(now));
    });
    rx.recv_timeout(std::time::Duration::from_secs(10)).expect("close returned")
}

#[test]
fn writes_failing_for_good_are_tried_a_bounded_number_of_times_and_nothing_waits_on_them() {
    for (seed, cfg) in (0..6).zip(configs().into_iter().cycle()) {
        let mut h = Harness::with(cfg, seed, Faults::default());
        churn(&mut h, 0, 40, 5);
        h.disk.fail_writes(true);
        churn(&mut h, 0, 60, 60);
        let stats = h.store().stats();
        assert!(stats.segments_given_up > 0, "{stats:?}");
        let most = (stats.segments_given_up + 4) * u64::from(faults::WRITE_TRIES) + stats.commits;
        assert!(stats.write_errors <= most, "failed writes tried again without a bound: {stats:?}");
        assert!(stats.rejected_degraded > 0, "new items kept going to a failing tier: {stats:?}");
        // Every item acknowledged before the failures still answers (hit or miss, never wrong).
        for k in 0..60 {
            h.lookup(k);
        }
        h.settle();
        let closed = close_within_bound(&mut h);
        assert!(closed.is_err(), "a close on a device that fails every write cannot succeed");
    }
}

#[test]
fn after_writes_fail_for_a_while_the_tier_takes_and_serves_items_again() {
    for cfg in configs() {
        comes_back_after_failing_writes(cfg);
    }
}

fn comes_back_after_failing_writes(cfg: FlashConfig) {
    let mut h = Harness::with(cfg, 7, Faults::default());
    churn(&mut h, 0, 40, 5);
    h.disk.fail_writes(true);
    churn(&mut h, 0, 60, 40);
    assert!(h.store().stats().segments_given_up > 0);
    h.disk.fail_writes(false);
    // The pause after the last give-up (at most a minute of the store's clock) ends.
    h.now.nanos += 61_000_000_000;
    let written_before = h.store().stats().segments_written;
    churn(&mut h, 100, 160, 10);
    let stats = h.store().stats();
    assert_eq!(stats.degraded, 0, "{stats:?}");
    assert!(stats.segments_written > written_before, "nothing reached the device again: {stats:?}");
    // Items written after the failures come back after a clean restart, checked against the model.
    h.clean_restart();
    let served = (100..160).filter(|&k| {
        h.lookup(k);
        !h.settle().is_empty() || h.model.get(&key(k)).is_some_and(Option::is_none)
    });
    assert!(served.count() > 40, "the tier serves again");
}

/// A device that stalls (nothing completes): every lookup is answered within the deadline (a
/// miss), lookups while the stalled reads hold every slot are misses at once, a close returns
/// within its bound, and reads finishing after the deadline answer no one.
#[test]
fn a_stalled_device_answers_lookups_as_misses_after_the_deadline_and_a_close_returns() {
    for cfg in configs() {
        let mut h = Harness::with(cfg, 11, Faults::default());
        churn(&mut h, 0, 60, 5);
        h.disk.stall(true);
        let mut waiting = Vec::new();
        for k in 0..60 {
            if let Some(token) = h.lookup(k) {
                waiting.push(token);
            }
        }
        assert!(!waiting.is_empty(), "no lookup went to the device");
        h.now.nanos += faults::READ_DEADLINE_NS;
        let mut done = Vec::new();
        let now = h.now;
        h.store().poll(now, &mut done);
        let answered: Vec<u64> = done.iter().map(|d| d.token).collect();
        assert!(waiting.iter().all(|t| answered.contains(t)), "a lookup waits past the deadline");
        assert!(done.iter().all(|d| d.item.is_none()), "answered past the deadline: misses");
        h.pending.clear();
        assert!(h.store().stats().read_timeouts >= waiting.len() as u64);
        // The stalled reads' ends answer no one.
        h.disk.stall(false);
        let mut late = Vec::new();
        for _ in 0..50 {
            h.store().poll(now, &mut late);
        }
        assert!(late.iter().all(|d| !answered.contains(&d.token)), "a read answered twice");
        h.disk.stall(true);
        churn(&mut h, 0, 10, 1);
        let closed = close_within_bound(&mut h);
        assert!(closed.is_err(), "a close on a stalled device cannot finish");
    }
}

/// Whether the store serves key `k` now (a hit is checked against the model).
fn served(h: &mut Harness, k: u32) -> bool {
    let hits = |h: &mut Harness| h.store().stats().hits_flash + h.store().stats().hits_buffer;
    let before = hits(h);
    if h.lookup(k).is_some() {
        h.settle();
    }
    hits(h) > before
}

/// A damaged page of the index snapshot after a clean close that wrote its drop marks (its
/// superblock says so): the region comes back through recovery from the segments, with all
/// three indexes: every item served before is served again (each hit the model's value), and
/// the store counts the fallback.
#[test]
fn a_damaged_snapshot_falls_back_to_recovery_from_the_segments() {
    for (seed, cfg) in (0..3).zip(configs()) {
        let mut h = Harness::with(cfg, seed, Faults::default());
        churn(&mut h, 0, 40, 4);
        let before: Vec<u32> = (0..40).filter(|&k| served(&mut h, k)).collect();
        let snapshot = h.store().layout().snapshot_offset as usize;
        let now = h.now;
        let closed = h.take_store().close(now).expect("a clean close");
        assert!(!closed.crash_unsafe);
        h.disk.flip(snapshot + 100, 3);
        let report = h.reopen();
        assert!(report.restored && report.reason.contains("recovered"), "{report:?}");
        assert_eq!(h.store().stats().snapshot_fallbacks, 1);
        assert_eq!(h.store().stats().recovered_items, h.store().stats().items);
        let after = before.iter().filter(|&&k| served(&mut h, k)).count();
        assert_eq!(after, before.len(), "index {seed}: {report:?}");
    }
}

/// `--flash-sync` with a device whose flushes hang (reads and writes go on): a change of a
/// flash key waits for its marks' write and then its flush; at the deadline its ticket is
/// reported not written (the change is refused, `SERVER_ERROR`) instead of waiting, and the
/// flush's late end answers no one. With all three indexes.
#[test]
fn a_stalled_flush_reports_the_change_failed_at_the_deadline() {
    for (seed, cfg) in (0..3).zip(configs()) {
        let mut h = Harness::with(FlashConfig { sync_commits: true, ..cfg }, seed, Faults::default());
        churn(&mut h, 0, 40, 4);
        let k = (0..40).find(|&k| h.store().needs_durable(KeyHash::of(&key(k)))).expect("a key on flash");
        h.disk.stall_syncs(true);
        let started = h.now;
        let ticket = h.store().invalidate(KeyHash::of(&key(k)), started).expect("room for the mark");
        h.store().commit();
        let mut reported = None;
        while reported.is_none() {
            assert!(h.now.nanos - started.nanos <= faults::READ_DEADLINE_NS + 100_000_000, "waited past the deadline");
            let (now, mut done, mut commits) = (h.now, Vec::new(), Vec::new());
            h.store().poll(now, &mut done);
            h.store().take_commits(&mut commits);
            reported = commits.iter().find(|&&(t, _)| t == ticket).map(|&(_, written)| written);
            h.now.nanos += 10_000_000;
        }
        assert_eq!(reported, Some(false), "a change acknowledged whose flush never ended");
        assert!(h.now.nanos - started.nanos >= faults::READ_DEADLINE_NS, "reported before the deadline");
        // The flush ends late: it reports nothing more.
        h.disk.stall_syncs(false);
        let (now, mut done, mut commits) = (h.now, Vec::new(), Vec::new());
        for _ in 0..50 {
            h.store().poll(now, &mut done);
        }
        h.store().take_commits(&mut commits);
        assert!(commits.iter().all(|&(t, _)| t != ticket), "a ticket reported twice");
    }
}

/// A crash while writes fail, some of the failed ones having reached the media all the same
/// (the simulated device lets half of them land): the recovered tier serves only each key's
/// last acknowledged value (every hit checked against the model), with all three indexes,
/// including keys changed or deleted while their old records' segments were given up.
#[test]
fn a_crash_while_writes_fail_never_brings_back_an_old_value() {
    for (seed, cfg) in (0..6).zip(configs().into_iter().cycle()) {
        let mut h = Harness::with(cfg, seed, Faults::default());
        churn(&mut h, 0, 40, 4);
        h.disk.fail_writes(true);
        churn(&mut h, 0, 60, 20);
        assert!(h.store().stats().segments_given_up > 0, "{:?}", h.store().stats());
        h.disk.fail_writes(false);
        // Writes work again: changes of keys whose given-up records may be on the media.
        h.now.nanos += 61_000_000_000;
        for k in 0..30 {
            if k % 3 == 0 {
                h.delete(k);
            } else {
                h.insert(k, 700 + k as usize, None);
            }
            h.poll();
        }
        h.settle();
        h.crash();
        for k in 0..60 {
            h.lookup(k);
        }
        h.settle();
    }
}
