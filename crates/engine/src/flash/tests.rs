//! The flash store against a plain model, on the simulated device: random operations, crashes
//! at random moments (writes torn mid-flight), clean restarts, bit flips and failed I/O. A hit must
//! always be the last acknowledged value of its key; after a clean close every item the store
//! held must come back.

use std::collections::HashMap;

use proptest::prelude::*;

use super::io::sim::{Faults, SimDisk};
use super::*;

const SEGMENT: u32 = 64 << 10;
const SEGMENTS: u64 = 24;

pub(super) fn config() -> FlashConfig {
    let mut cfg = FlashConfig::new(SEGMENTS * u64::from(SEGMENT) + (256 << 10), 0, 1);
    cfg.segment_bytes = SEGMENT;
    cfg.max_reads = 16;
    cfg.flush_delay_ns = 1_000_000_000;
    cfg
}

/// `config()` with the cascade index sized tiny: 16 tier-1 entries, blocks of six mappings, a
/// stream per four tier-3 pages, a merge every two tier-2 blocks, so demotion, merging, page
/// overflow and GC happen all the time.
pub(super) fn cascade_config() -> FlashConfig {
    let mut cfg = config();
    cfg.file_bytes += 1536 << 10;
    // Sizes tier 3 at 128 pages.
    cfg.expected_item_bytes = 4096;
    let mut c = CascadeConfig::with_t1_bytes(128);
    c.reorg_at = 2;
    c.pages_per_stream = 4;
    c.block_entries = 6;
    cfg.cascade = Some(c);
    cfg
}

/// The number of random cases a model test runs: `default`, or PROPTEST_CASES (a longer soak).
pub(super) fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

pub(super) fn key(k: u32) -> Vec<u8> {
    format!("key:{k}").into_bytes()
}

/// A value that names its key and version, `len` bytes long.
pub(super) fn value(k: u32, version: u64, len: usize) -> Vec<u8> {
    let stamp = format!("{k}/{version};");
    stamp.bytes().cycle().take(len.max(stamp.len())).collect()
}

pub(super) struct Harness {
    pub(super) cfg: FlashConfig,
    pub(super) disk: SimDisk,
    store: Option<FlashStore>,
    pub(super) now: Now,
    /// The last acknowledged value (and expiry) per key; None: must miss.
    pub(super) model: HashMap<Vec<u8>, Option<(Vec<u8>, u32)>>,
    pub(super) pending: HashMap<u64, Vec<u8>>,
    next_token: u64,
    version: u64,
    faults: Faults,
    /// Keys with an invalidation never waited for (`Op::Invalidate`): GC may drop them.
    pub(super) doomed: std::collections::HashSet<Vec<u8>>,
    /// How the last clean close went (None: none yet, or it failed).
    pub(super) last_close: Option<super::Closed>,
}

impl Harness {
    pub(super) fn new(seed: u64, faults: Faults) -> Harness {
        Harness::with(config(), seed, faults)
    }

    pub(super) fn with(cfg: FlashConfig, seed: u64, faults: Faults) -> Harness {
        let disk = SimDisk::new(cfg.file_bytes as usize, seed);
        let now = Now { unix: 1_000_000, nanos: 1 };
        let (store, report) = FlashStore::open(Box::new(disk.device()), cfg.clone(), now).expect("open");
        assert!(!report.restored);
        disk.set_faults(faults);
        Harness {
            cfg,
            disk,
            store: Some(store),
            now,
            model: HashMap::new(),
            pending: HashMap::new(),
            next_token: 0,
            version: 0,
            faults,
            doomed: Default::default(),
            last_close: None,
        }
    }

    pub(super) fn store(&mut self) -> &mut FlashStore {
        self.store.as_mut().expect("an open store")
    }

    /// The store, out of the harness (to close it).
    pub(super) fn take_store(&mut self) -> FlashStore {
        self.pending.clear();
        self.store.take().expect("an open store")
    }

    fn check_hit(&self, key: &[u8], item: &FlashItem) {
        let expected = self.model.get(key).cloned().flatten();
        let Some((value, expiry)) = expected else {
            panic!(
                "{:?} hit {:?} but must miss",
                String::from_utf8_lossy(key),
                String::from_utf8_lossy(&item.value[..12.min(item.value.len())])
            )
        };
        assert!(
            item.value == value,
            "{:?}: a hit must be the last acknowledged value: got {:?} ({} bytes), want {:?} ({} bytes)",
            String::from_utf8_lossy(key),
            String::from_utf8_lossy(&item.value[..12.min(item.value.len())]),
            item.value.len(),
            String::from_utf8_lossy(&value[..12.min(value.len())]),
            value.len()
        );
        assert_eq!(item.meta.expiry, expiry);
        assert!(expiry == 0 || expiry > self.now.unix, "expired items are never served");
    }

    /// Makes a change of `k` durable first, as the server does (`durable`): false if the
    /// device failed the mark's write (the change must not happen).
    fn invalidate_first(&mut self, k: u32) -> bool {
        let key = key(k);
        let hash = KeyHash::of(&key);
        if !self.store().needs_durable(hash) {
            return true;
        }
        let mut ticket = None;
        for _ in 0..1000 {
            let now = self.now;
            if ticket.is_none() {
                ticket = self.store().invalidate(hash, now).ok();
            }
            if let Some(t) = ticket {
                self.store().commit();
                let mut commits = Vec::new();
                self.store().take_commits(&mut commits);
                if let Some(&(_, written)) = commits.iter().find(|&&(done, _)| done == t) {
                    if written {
                        let _ = self.store().remove_invalidated(hash);
                    }
                    return written;
                }
                // Reported for other tickets: not ours, keep waiting.
            }
            let mut done = Vec::new();
            self.store().wait(now, &mut done);
            self.absorb(done);
            // The owner's clock moves while it waits: a failed write is tried again after its
            // pause, a stalled one's ticket fails after the deadline (`faults`).
            self.now.nanos += 3_000_000;
        }
        let now = self.now;
        panic!("an invalidation never reached the device: {now:?} {:?}", self.store().stats());
    }

    pub(super) fn insert(&mut self, k: u32, len: usize, ttl: Option<u8>) {
        self.insert_with(k, len, ttl, 4, false);
    }

    /// Writes an item as a clean stop writes DRAM items out: past the admission policy, waiting
    /// for a buffer as long as the server's close does.
    pub(super) fn spill(&mut self, k: u32, len: usize) {
        self.insert_with(k, len, None, 1000, true);
    }

    fn insert_with(&mut self, k: u32, len: usize, ttl: Option<u8>, tries: usize, always: bool) {
        if !self.invalidate_first(k) {
            return;
        }
        self.version += 1;
        let (key, value) = (key(k), value(k, self.version, len));
        let expiry = ttl.map_or(0, |t| self.now.unix + u32::from(t));
        let meta = ItemMeta { flags: k, expiry, cas: self.version, state: (k % 3) as u8 * 0x20 };
        let mut outcome = InsertOutcome::Busy;
        // Busy means every buffer is full or being written: wait for a write, as a caller would.
        for _ in 0..tries {
            let now = self.now;
            outcome = self.store().insert_admitted(KeyHash::of(&key), &key, &value, meta, now, always);
            if outcome != InsertOutcome::Busy {
                break;
            }
            let mut done = Vec::new();
            self.store().wait(now, &mut done);
            self.absorb(done);
        }
        let acknowledged = outcome == InsertOutcome::Stored;
        self.model.insert(key, acknowledged.then_some((value, expiry)));
    }

    pub(super) fn lookup(&mut self, k: u32) -> Option<u64> {
        let key = key(k);
        let token = self.next_token;
        self.next_token += 1;
        let now = self.now;
        match self.store().lookup(KeyHash::of(&key), &key, token, now) {
            Lookup::Hit(item) => self.check_hit(&key, &item),
            Lookup::Pending => {
                self.pending.insert(token, key);
                return Some(token);
            }
            Lookup::Miss | Lookup::Busy => {}
        }
        None
    }

    pub(super) fn delete(&mut self, k: u32) {
        if !self.invalidate_first(k) {
            return;
        }
        let key = key(k);
        self.store().delete(KeyHash::of(&key));
        self.model.insert(key, None);
    }

    fn absorb(&mut self, done: Vec<ReadDone>) -> Vec<(Vec<u8>, FlashItem)> {
        let mut hits = Vec::new();
        for d in done {
            let key = self.pending.remove(&d.token).expect("a token the harness issued");
            if let Some(item) = d.item {
                self.check_hit(&key, &item);
                hits.push((key, item));
            }
        }
        hits
    }

    pub(super) fn poll(&mut self) {
        let mut done = Vec::new();
        let now = self.now;
        self.store().poll(now, &mut done);
        self.absorb(done);
    }

    /// Waits for every lookup in flight; returns the hits.
    pub(super) fn settle(&mut self) -> Vec<(Vec<u8>, FlashItem)> {
        let mut hits = Vec::new();
        while !self.pending.is_empty() {
            let mut done = Vec::new();
            let now = self.now;
            self.store().wait(now, &mut done);
            hits.extend(self.absorb(done));
            // The clock moves while the owner waits (a stalled device's lookups end as misses
            // after `faults::READ_DEADLINE_NS`).
            self.now.nanos += 1_000_000;
        }
        hits
    }

    /// Every key the store serves now, with its value (each checked against the model).
    fn present(&mut self) -> HashMap<Vec<u8>, Vec<u8>> {
        self.settle();
        let keys: Vec<u32> = (0..KEYS).collect();
        let mut found = HashMap::new();
        for chunk in keys.chunks(8) {
            self.find_all(chunk, &mut found);
        }
        if self.cfg.cascade.is_some() || self.cfg.sets.is_some() {
            // A lookup whose mapping moved below tier 1 while its data was read (these very
            // lookups promote and demote) ends as a miss: ask once more, one key at a time.
            let missing: Vec<u32> = keys.into_iter().filter(|&k| !found.contains_key(&key(k))).collect();
            for k in missing {
                self.find_all(&[k], &mut found);
            }
        }
        found
    }

    /// Looks `keys` up together; hits go to `found`.
    fn find_all(&mut self, keys: &[u32], found: &mut HashMap<Vec<u8>, Vec<u8>>) {
        for &k in keys {
            let key = key(k);
            let token = self.next_token;
            self.next_token += 1;
            let now = self.now;
            let r = self.store().lookup(KeyHash::of(&key), &key, token, now);
            match r {
                Lookup::Hit(item) => {
                    self.check_hit(&key, &item);
                    found.insert(key, item.value);
                }
                Lookup::Pending => {
                    self.pending.insert(token, key);
                }
                Lookup::Miss | Lookup::Busy => {}
            }
        }
        for (key, item) in self.settle() {
            found.insert(key, item.value);
        }
    }

    pub(super) fn reopen(&mut self) -> OpenReport {
        self.pending.clear();
        for _ in 0..100 {
            match FlashStore::open(Box::new(self.disk.device()), self.cfg.clone(), self.now) {
                Ok((store, report)) => {
                    self.store = Some(store);
                    return report;
                }
                // A failed superblock write (an injected fault): the tier stays closed; retry.
                Err(_) => continue,
            }
        }
        panic!("open kept failing");
    }

    /// Closes cleanly and reopens; every item served before must be served after.
    pub(super) fn clean_restart(&mut self) {
        self.restart(None);
    }

    /// Closes, the process dying after `fuse` more requests if given (the close itself torn
    /// anywhere), and reopens: either everything served before is served again, or nothing.
    fn restart(&mut self, fuse: Option<u64>) {
        self.restart_damaged(fuse, None);
    }

    /// `restart`; with `damage`, a bit of the index snapshot at that byte is flipped after the
    /// close: a close that wrote every drop mark then comes back through recovery from the
    /// segments (every hit still the model's), one that could not starts empty.
    fn restart_damaged(&mut self, fuse: Option<u64>, damage: Option<usize>) {
        let snapshot = self.store().layout().snapshot_offset as usize;
        let saved = self.faults;
        self.disk.set_faults(Faults::default());
        let drops_before = self.drops();
        let superseded_before = self.store().stats().miss_superseded;
        let before = self.present();
        // A GC rewrite while a lookup's read was in flight makes that lookup miss (superseded):
        // the item is there all the same and may show up after the restart.
        let superseded = self.store().stats().miss_superseded != superseded_before;
        // The cascade index's GC keeps only what tier 1 names, and the lookups above move
        // mappings in and out of a tiny tier 1: an item found early may be dropped by the end
        // (or by a merge still in flight, which the close finishes: let it finish first).
        for _ in 0..1000 {
            if self.store().stats().in_flight == 0 {
                break;
            }
            let (now, mut done) = (self.now, Vec::new());
            self.store().wait(now, &mut done);
            self.absorb(done);
        }
        let mut dropped_meanwhile = self.drops() != drops_before;
        self.disk.set_faults(saved);
        let now = self.now;
        if let Some(fuse) = fuse {
            self.disk.crash_after(fuse);
        }
        let closed = self.store.take().expect("open").close(now);
        self.last_close = closed.as_ref().ok().copied();
        if fuse.is_some() {
            self.disk.revive();
        }
        if let Some(at) = damage {
            self.disk.flip(snapshot + at, (at % 8) as u8);
        }
        let report = self.reopen();
        if damage.is_some() && report.reason != "restored" {
            // Recovered from the segments (or empty: the close could not write its marks, or
            // injected faults damaged a segment too, which recovery refuses to guess past).
            let marks = self.last_close.is_some_and(|c| !c.crash_unsafe);
            let faults = self.faults.fail_per_million > 0 || self.faults.flip_per_million > 0;
            assert!(report.restored || !marks || faults, "{report:?} after {:?}", self.last_close);
            assert!(!report.restored || report.reason.contains("recovered"), "{report:?}");
        }
        // With injected faults the close may fail (the region stays marked open, unless only
        // the last sync failed) or the snapshot may read back damaged: then the tier is empty.
        if self.faults.fail_per_million == 0 && self.faults.flip_per_million == 0 && fuse.is_none() {
            assert!(closed.is_ok() && report.restored, "{closed:?} {report:?}");
        }
        if !report.restored {
            self.forget_all();
            return;
        }
        // A close torn by the crash: the segments, not the snapshot, brought the tier back, and
        // what was still in DRAM buffers is lost (a miss, checked against the model as any hit).
        let recovered = report.reason.contains("recovered");
        self.disk.set_faults(Faults::default());
        let drops_before = self.drops();
        let after = self.present();
        dropped_meanwhile |= self.drops() != drops_before;
        self.disk.set_faults(saved);
        let lost: Vec<_> = before
            .keys()
            .filter(|k| !after.contains_key(*k) && !self.doomed.contains(*k))
            .map(|k| String::from_utf8_lossy(k))
            .collect();
        let new: Vec<_> =
            after.keys().filter(|k| !before.contains_key(*k)).map(|k| String::from_utf8_lossy(k)).collect();
        // A segment write that failed during the close loses its items (never serves them).
        // So does a close that says it could not keep some (the sets index, `Closed::dropped`).
        let close_dropped = self.last_close.is_some_and(|c| c.dropped > 0);
        let faulty = saved.fail_per_million > 0 || dropped_meanwhile || recovered || close_dropped;
        // After a recovery an item the index had dropped may come back: still its key's last
        // acknowledged value (every hit was checked against the model).
        assert!(
            (lost.is_empty() || faulty) && (new.is_empty() || recovered || superseded),
            "a clean restart brings back every item and nothing else: lost {lost:?}, new {new:?}"
        );
        assert!(after.iter().all(|(k, v)| before.get(k).is_none_or(|b| b == v)));
    }

    /// Everything that drops live items on purpose (GC, pressure, the cascade index's page
    /// overflow and stream drops), summed.
    fn drops(&mut self) -> u64 {
        let (s, c) = (self.store().stats(), self.store().cascade_stats().unwrap_or_default());
        s.reclaims + s.pressure_drops + c.stream_drops + c.t3_overflow_drops
    }

    /// kill -9: the store vanishes with its writes in flight (each applied whole, torn or not at
    /// all). The reopened tier rebuilds from the segments (with either index); every hit is
    /// checked against the model.
    pub(super) fn crash(&mut self) -> OpenReport {
        drop(self.store.take());
        self.disk.crash();
        let report = self.reopen();
        if !report.restored {
            self.forget_all();
        }
        report
    }

    fn forget_all(&mut self) {
        for v in self.model.values_mut() {
            *v = None;
        }
    }
}

const KEYS: u32 = 40;

#[derive(Clone, Debug)]
pub(super) enum Op {
    Insert(u32, usize, Option<u8>),
    Lookup(u32),
    Delete(u32),
    /// A change whose invalidation mark is appended and committed but never waited for (a
    /// request still parked when the process dies): the old value may stay or go, never more.
    Invalidate(u32),
    Poll,
    Advance(u8),
    Fill(u16),
    CleanRestart,
    Crash,
    CrashWriteCloseReopen(u16),
    CrashDuringClose(u16),
    /// A clean close, then a bit flipped in the index snapshot (at this byte of its first
    /// pages) before the reopen.
    DamagedSnapshot(u16),
}

pub(super) fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        20 => (0..KEYS, prop_oneof![8 => 1usize..300, 2 => 300usize..5000, 1 => 5000usize..20_000], prop::option::weighted(0.2, 1u8..5)).prop_map(|(k, l, t)| Op::Insert(k, l, t)),
        20 => (0..KEYS).prop_map(Op::Lookup),
        4 => (0..KEYS).prop_map(Op::Delete),
        3 => (0..KEYS).prop_map(Op::Invalidate),
        8 => Just(Op::Poll),
        2 => (0u8..4).prop_map(Op::Advance),
        3 => (1u16..600).prop_map(Op::Fill),
        1 => Just(Op::CleanRestart),
        1 => Just(Op::Crash),
        1 => (1u16..200).prop_map(Op::CrashWriteCloseReopen),
        1 => (0u16..12).prop_map(Op::CrashDuringClose),
        1 => (0u16..12_288).prop_map(Op::DamagedSnapshot),
    ]
}

pub(super) fn run(ops: &[Op], seed: u64, faults: Faults, cfg: FlashConfig) {
    let mut h = Harness::with(cfg, seed, faults);
    for op in ops {
        run_op(&mut h, op);
    }
    h.settle();
}

fn run_op(h: &mut Harness, op: &Op) {
    {
        match *op {
            Op::Insert(k, len, ttl) => h.insert(k, len, ttl),
            Op::Lookup(k) => {
                h.lookup(k);
            }
            Op::Delete(k) => h.delete(k),
            Op::Invalidate(k) => {
                let (key, now) = (key(k), h.now);
                if h.store().invalidate(KeyHash::of(&key), now).is_ok() {
                    h.store().commit();
                }
                h.doomed.insert(key);
            }
            Op::Poll => h.poll(),
            Op::Advance(secs) => {
                h.now.unix += u32::from(secs);
                h.now.nanos += u64::from(secs) * 1_000_000_000 + 1;
            }
            // Keys beyond KEYS fill the ring so GC runs; reads of some keep them hot.
            Op::Fill(n) => {
                for i in 0..u32::from(n) {
                    h.insert(KEYS + 1 + i % 500, 200 + (i as usize * 37) % 700, None);
                    if i % 16 == 0 {
                        h.poll();
                        h.lookup(i % KEYS);
                    }
                }
            }
            Op::CleanRestart => h.clean_restart(),
            Op::Crash => {
                h.crash();
            }
            Op::CrashWriteCloseReopen(n) => {
                h.crash();
                for i in 0..u32::from(n) {
                    h.insert(i % KEYS, 100 + i as usize, None);
                }
                h.clean_restart();
            }
            Op::CrashDuringClose(fuse) => h.restart(Some(u64::from(fuse))),
            Op::DamagedSnapshot(at) => h.restart_damaged(None, Some(usize::from(at))),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(96), ..ProptestConfig::default() })]

    #[test]
    fn the_store_serves_only_last_acknowledged_values(ops in prop::collection::vec(op(), 1..120), seed in any::<u64>()) {
        run(&ops, seed, Faults::default(), config());
    }

    #[test]
    fn synced_commits_serve_only_last_acknowledged_values(ops in prop::collection::vec(op(), 1..120), seed in any::<u64>()) {
        run(&ops, seed, Faults::default(), FlashConfig { sync_commits: true, ..config() });
    }

    #[test]
    fn bit_flips_and_failed_io_are_misses_never_wrong_values(ops in prop::collection::vec(op(), 1..120), seed in any::<u64>()) {
        run(&ops, seed, Faults { fail_per_million: 20_000, flip_per_million: 50_000 }, config());
    }

    #[test]
    fn the_cascade_index_serves_only_last_acknowledged_values(ops in prop::collection::vec(op(), 1..120), seed in any::<u64>()) {
        run(&ops, seed, Faults::default(), cascade_config());
    }

    #[test]
    fn the_cascade_index_turns_faults_into_misses_never_wrong_values(ops in prop::collection::vec(op(), 1..120), seed in any::<u64>()) {
        run(&ops, seed, Faults { fail_per_million: 20_000, flip_per_million: 50_000 }, cascade_config());
    }
}
