//! The sets index (Kangaroo, SOSP'21): most of the region is 4 KiB sets whose pages hold small
//! items with their keys, so a key's hash names its set and no per-item index is needed; a
//! Bloom filter per set in DRAM keeps misses nearly free, one DRAM hit bit per item position
//! feeds RRIP inside the set (`page.rs`). In front, a small log (the segment ring, a few percent
//! of the region) with a one-choice DRAM index whose bucket names a run of sets, so "every log
//! item bound for set S" is one bucket walk. When the ring reclaims its oldest segment, a set
//! that at least `threshold` log items are bound for gets them all in one page write (`moves.rs`);
//! below it, items hit while in the log are written to the log again and the rest are dropped,
//! unless the set may hold an older copy of the key (then the item is written to the set).
//! While a clean close writes the DRAM items out, every small item goes to its set whatever
//! the threshold (a warm restart keeps what was served). Items too large for a set (over a
//! page less its header) stay in the log (the full index's rules).
//!
//! Never stale: a log entry shadows its set; a key whose newest state left the log while its set
//! may hold an older copy keeps a tombstone entry in the log index (`bury`); a tombstone the
//! index cannot keep voids the set (its page is ignored until written again). A set's DRAM
//! version (the low bits of its last write's sequence number, 0 = void) must match the page a
//! read returns.
//!
//! Across a crash (`recover.rs`): a page's sequence number is a record sequence number taken
//! when its move was bound, so the log's records and marks and the pages are ordered alike: a
//! small log record older than its set's page was moved into it (or dropped), a mark or record
//! newer than a page item kills it. A tombstone lasts no longer than the record that grounds
//! it: before a segment is retired, every set with a tombstone grounded in it is rewritten
//! (`buried`, a purge move). A clean close saves the sets' DRAM state in the snapshot
//! (`persist.rs`).

mod buried;
mod config;
mod moves;
pub(super) mod page;
mod persist;
mod recover;
#[cfg(test)]
pub(super) mod tests;

pub(in crate::flash) use config::LOG_SPAN;
pub use config::{SetsConfig, SetsLayout};
pub(super) use recover::SetsScan;

use super::index::{is_tombstone, tombstone, Entry};
use super::io::{AlignedBuf, Completion, IoKind, IoOp};
use super::layout::PAGE;
use super::{FlashItem, FlashStore, Lookup, Now, PendingRead, ReadDone, TOKEN_SET_READ};
use crate::hash::KeyHash;
use crate::time::is_expired;

/// DRAM per set besides its Bloom filter: hit bits and item count (one u32), version (u16).
pub(super) const SET_DRAM_BYTES: u64 = 6;
/// Snapshot bytes per set besides its Bloom filter: version and item count.
pub(super) const SNAPSHOT_PER_SET: u64 = 3;

/// The sets index's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetsStats {
    /// Lookups answered by the log (a buffer or a read).
    pub hits_log: u64,
    /// Lookups answered by a set.
    pub hits_set: u64,
    /// Device reads of the lookups that hit.
    pub reads_hit: u64,
    /// Lookups that found nothing.
    pub misses: u64,
    /// Their device reads (of a set whose Bloom filter said maybe, or of a log item with the
    /// same tag).
    pub reads_miss: u64,
    /// Set pages read for lookups that did not hold the key (Bloom false positives).
    pub false_positives: u64,
    /// Set pages that failed their checks (a miss each).
    pub bad_pages: u64,
    /// Set pages written.
    pub set_writes: u64,
    /// Items they brought in from the log.
    pub items_moved: u64,
    /// Log items read back to join their set's write.
    pub move_reads: u64,
    /// Items written to a set only because it may hold an older copy (below the threshold).
    pub shadow_moves: u64,
    /// Small items below the threshold: dropped, or written to the log again (hit while there).
    pub threshold_drops: u64,
    /// Items written to the log again at a reclaim (hit while there).
    pub readmitted: u64,
    /// Items a clean close could not keep (`Closed::dropped`): too large for a set and not hit,
    /// reclaimed from the log to make room for the DRAM items the close writes, or pushed out
    /// of a full set (RRIP) by the items the close moved in.
    pub close_drops: u64,
    /// Items RRIP evicted from sets.
    pub rrip_evictions: u64,
    /// Tombstones put in the log index.
    pub tombstones: u64,
    /// Sets voided (a tombstone the index could not keep, a failed write).
    pub voided: u64,
    /// Set writes (and move reads) the device failed.
    pub io_errors: u64,
    /// Set writes bound only to apply tombstones before the record grounding them is retired.
    pub purges: u64,
    /// Sets whose pages crash recovery took back.
    pub recovered_sets: u64,
    /// Page items crash recovery found killed by a newer record or mark.
    pub recovered_killed: u64,
}

impl SetsStats {
    /// Device reads per hit.
    pub fn reads_per_hit(&self) -> f64 {
        self.reads_hit as f64 / (self.hits_log + self.hits_set).max(1) as f64
    }
    /// Device reads per miss.
    pub fn reads_per_miss(&self) -> f64 {
        self.reads_miss as f64 / self.misses.max(1) as f64
    }
    /// Items each set write carried from the log.
    pub fn items_per_write(&self) -> f64 {
        self.items_moved as f64 / self.set_writes.max(1) as f64
    }
}

/// The sets' DRAM state.
pub(super) struct Sets {
    pub geo: SetsLayout,
    blooms: Vec<u8>,
    /// Per set: the hit bits of its first `page::HIT_BITS` item positions (low bits) and its
    /// item count (the top 8 bits).
    state: Vec<u32>,
    /// 0: void (nothing in the page is used); else the low bits of its last write's sequence.
    versions: Vec<u16>,
    /// Pages of a lower sequence number, or written in a lower epoch, hold nothing valid
    /// (kept in the superblock for crash recovery).
    pub floor_seq: u64,
    pub floor_epoch: u64,
    /// Tombstones by the sequence number of the segment whose record grounds them (mark,
    /// dropped item): (segment seq, bucket, tag), oldest first. Their sets are rewritten before
    /// that segment is retired.
    pub buried: buried::Buried,
    pub moves: moves::Moves,
    pub stats: SetsStats,
}

/// Where a set's item count starts in its state word (below it: hit bits).
const COUNT_SHIFT: u32 = page::HIT_BITS as u32;

/// A page's sequence number as the DRAM version that must match it (never 0).
fn version_of(seq: u64) -> u16 {
    (seq % 65535) as u16 + 1
}

impl Sets {
    pub(super) fn new(geo: SetsLayout) -> Sets {
        let n = geo.sets as usize;
        Sets {
            blooms: vec![0; n * geo.bloom.bytes()],
            state: vec![0; n],
            versions: vec![0; n],
            floor_seq: 0,
            floor_epoch: 0,
            buried: buried::Buried::default(),
            moves: moves::Moves::new(geo.max_moves as usize),
            stats: SetsStats::default(),
            geo,
        }
    }

    /// The set a fingerprint (log-index bucket, tag) is bound for.
    pub(super) fn set_of(&self, fp: (u32, u16)) -> u32 {
        fp.0 * self.geo.per_bucket + u32::from(fp.1) % self.geo.per_bucket
    }

    fn bloom(&self, s: u32) -> &[u8] {
        let b = self.geo.bloom.bytes();
        &self.blooms[s as usize * b..][..b]
    }

    /// Whether set `s` may hold the key of `fp` (its Bloom filter says maybe).
    pub(super) fn may_contain(&self, fp: (u32, u16)) -> bool {
        let s = self.set_of(fp);
        self.versions[s as usize] != 0 && self.geo.bloom.may_contain(self.bloom(s), fp)
    }

    /// Whether set `s`'s page on flash may hold the key of `fp`, answering or not (a voided
    /// set keeps its filter until it is written again).
    pub(super) fn on_flash(&self, fp: (u32, u16)) -> bool {
        let s = self.set_of(fp);
        self.geo.bloom.may_contain(self.bloom(s), fp)
    }

    /// Adds `fp` to its set's filter (an item on its way in).
    pub(super) fn add(&mut self, fp: (u32, u16)) {
        let s = self.set_of(fp) as usize;
        let b = self.geo.bloom.bytes();
        self.geo.bloom.add(&mut self.blooms[s * b..][..b], fp);
    }

    /// Set `s`'s hit bits (item positions read since its last write).
    pub(super) fn hits(&self, s: u32) -> u32 {
        self.state[s as usize] & ((1 << COUNT_SHIFT) - 1)
    }

    /// Set `s`'s item count as of its last write.
    pub(super) fn count(&self, s: u32) -> u8 {
        (self.state[s as usize] >> COUNT_SHIFT) as u8
    }

    pub(super) fn version(&self, s: u32) -> u16 {
        self.versions[s as usize]
    }

    /// Set `s`'s page is no longer used (until written again). Its filter stays: the page
    /// still holds what it says until then (`on_flash`).
    pub(super) fn void(&mut self, s: u32) {
        self.versions[s as usize] = 0;
        self.state[s as usize] = 0;
        self.stats.voided += 1;
        self.moves.voided(s);
    }

    /// Set `s` was written as sequence `seq` holding the keys of `fps`.
    pub(super) fn written(&mut self, s: u32, seq: u64, fps: &[(u32, u16)]) {
        let b = self.geo.bloom.bytes();
        let filter = &mut self.blooms[s as usize * b..][..b];
        filter.fill(0);
        for &fp in fps {
            self.geo.bloom.add(filter, fp);
        }
        self.versions[s as usize] = version_of(seq);
        self.state[s as usize] = (fps.len().min(255) as u32) << COUNT_SHIFT;
    }

    /// Forgets every set (flush_all, or a crash).
    pub(super) fn clear(&mut self) {
        self.blooms.fill(0);
        self.versions.fill(0);
        self.state.fill(0);
        self.buried.clear();
        self.moves.abort_all();
    }

    /// Items the sets hold (as of their last writes).
    pub(super) fn items(&self) -> u64 {
        self.state.iter().map(|&x| u64::from(x >> COUNT_SHIFT)).sum()
    }

    /// Heap bytes: filters, per-set state, and the moves' buffers.
    pub(super) fn heap_bytes(&self) -> (u64, u64, u64) {
        let state = self.state.capacity() * 4 + self.versions.capacity() * 2;
        (self.blooms.capacity() as u64, state as u64, self.moves.heap_bytes() + self.buried.heap_bytes() as u64)
    }
}

impl FlashStore {
    /// The log-index bucket and tag of a fingerprint as a key hash (for the index's calls).
    fn hash_at(&self, fp: (u32, u16)) -> KeyHash {
        let n = u64::from(self.index.buckets());
        let x = (u64::from(fp.0) << 32).div_ceil(n);
        KeyHash(x << 16 | u64::from(fp.1))
    }

    /// Makes sure the set below does not answer for `fp` again: a tombstone in the log index if
    /// the set may hold the key, grounded by a record in the segment of sequence number `ground`
    /// or a later one (0: whatever segment is retired next).
    /// A voided set that may hold the key gets no tombstone (it answers nothing) but is
    /// rewritten before the ground is retired all the same.
    pub(super) fn bury_set(&mut self, fp: (u32, u16), ground: u64) {
        let Some(sets) = self.sets.as_deref_mut() else { return };
        sets.moves.touched(sets.set_of(fp), fp.1);
        if !sets.on_flash(fp) {
            return;
        }
        sets.buried.push(ground, fp.0, fp.1);
        if sets.may_contain(fp) {
            sets.stats.tombstones += 1;
            let hash = self.hash_at(fp);
            self.t1_insert(hash, tombstone(fp.1));
        }
        // After the tombstone is down: a compaction keeps the burials of standing tombstones.
        self.bound_buried();
    }

    /// The sequence number of the newest segment: a mark appended from now on lands in it or a
    /// later one.
    pub(super) fn head_ground(&self) -> u64 {
        self.next_seq.saturating_sub(1)
    }

    /// An entry the log index let go of without a set write taking its item: if the set may
    /// hold an older copy of the key (or it was a tombstone), the set is voided, and rewritten
    /// before the newest segment retires (its page on flash still holds that copy).
    pub(super) fn lost_entry(&mut self, bucket: usize, e: Entry) {
        let fp = (bucket as u32, e.tag());
        let ground = self.head_ground();
        let Some(sets) = self.sets.as_deref_mut() else { return };
        if sets.may_contain(fp) || (is_tombstone(e) && sets.version(sets.set_of(fp)) != 0) {
            let s = sets.set_of(fp);
            sets.void(s);
            sets.buried.push(ground, fp.0, fp.1);
            self.bound_buried();
        }
    }

    /// Pages written before now hold nothing valid after a crash (a flush, or an I/O error that
    /// left a page or a segment unknown); the next superblock carries it.
    pub(super) fn raise_sets_floor(&mut self) {
        let seq = self.durable.record_seq + 1;
        if let Some(sets) = self.sets.as_deref_mut() {
            sets.floor_seq = sets.floor_seq.max(seq);
        }
    }

    /// How a full one-choice bucket ranks its entries for eviction (smallest first): dead entries
    /// no set needs, then live items oldest first, then live items whose set may hold an older
    /// copy (letting one go voids the set), and last tombstones and dead entries that shadow.
    pub(super) fn set_age(&self, bucket: usize, e: Entry) -> u64 {
        let shadows = |e: Entry| self.sets.as_deref().is_some_and(|s| s.may_contain((bucket as u32, e.tag())));
        let seq = |e: Entry| self.slots[e.slot() as usize].seq & ((1 << 61) - 1);
        match (Self::valid(&self.slots, e), is_tombstone(e) || shadows(e)) {
            (true, false) => 1 + seq(e),
            (true, true) => (1 << 62) + seq(e),
            (false, true) => u64::MAX,
            (false, false) => 0,
        }
    }

    /// A lookup the log index knows nothing of: the key's set, if its filter says maybe.
    pub(super) fn lookup_set(&mut self, hash: KeyHash, key: &[u8], token: u64) -> Lookup {
        let fp = self.fingerprint(hash);
        let sets = self.sets.as_deref_mut().expect("the sets index");
        if !sets.may_contain(fp) {
            sets.stats.misses += 1;
            self.stats.miss_index += 1;
            return Lookup::Miss;
        }
        let s = sets.set_of(fp);
        let offset = sets.geo.set_offset(s);
        let mut pending = PendingRead::new(token, hash, key);
        pending.set = Some((s, sets.version(s)));
        pending.reads = 1;
        let Some(i) = self.take_read_slot(pending) else { return self.no_read_slot() };
        let buf = self.page_pool.pop().unwrap_or_else(|| AlignedBuf::new(PAGE));
        self.io.submit(IoOp { kind: IoKind::Read, offset, buf, len: PAGE, at: 0, token: TOKEN_SET_READ | i as u64 });
        if self.submit_at_once {
            self.io.flush();
        }
        self.stats.reads += 1;
        self.stats.read_bytes += PAGE as u64;
        Lookup::Pending
    }

    /// A set page read for lookup `i` is back.
    pub(super) fn set_read_done(&mut self, i: usize, c: Completion, now: Now, out: &mut Vec<ReadDone>) {
        let pending = self.reads[i].take().expect("a set read in flight");
        self.free_reads.push(i);
        let item = self.find_in_set(&pending, &c, now);
        if self.page_pool.len() < self.cfg.max_reads as usize {
            self.page_pool.push(c.buf);
        }
        let sets = self.sets.as_deref_mut().expect("the sets index");
        if item.is_some() {
            sets.stats.hits_set += 1;
            sets.stats.reads_hit += 1;
            self.stats.hits_flash += 1;
        } else {
            sets.stats.misses += 1;
            sets.stats.reads_miss += 1;
        }
        if !pending.abandoned {
            out.push(ReadDone { token: pending.token, item });
        }
    }

    /// The key's current item in the page read for `p`, if it is there; misses are counted.
    fn find_in_set(&mut self, p: &PendingRead, c: &Completion, now: Now) -> Option<FlashItem> {
        let (s, version) = p.set.expect("a set read");
        let partition = self.cfg.partition;
        let seed = self.set_seed();
        // Written, deleted or moved meanwhile: the page is not the key's current state.
        let current = self.index.find(p.hash).is_none();
        let sets = self.sets.as_deref_mut().expect("the sets index");
        if c.result.is_err() {
            self.stats.miss_io_error += 1;
            return None;
        }
        if !current || sets.version(s) != version {
            self.stats.miss_superseded += 1;
            return None;
        }
        let page = match page::decode_page(&c.buf[..PAGE], s, partition, seed) {
            Ok(page) if version_of(page.seq) == version => page,
            Ok(_) => {
                self.stats.miss_superseded += 1;
                return None;
            }
            Err(_) => {
                sets.stats.bad_pages += 1;
                self.stats.miss_corrupt += 1;
                return None;
            }
        };
        let Some((pos, view)) = page.find(&p.key) else {
            sets.stats.false_positives += 1;
            self.stats.miss_tag += 1;
            return None;
        };
        if is_expired(view.meta.expiry, now.unix) {
            self.stats.miss_expired += 1;
            return None;
        }
        if pos < page::HIT_BITS {
            sets.state[s as usize] |= 1 << pos;
        }
        Some(FlashItem { value: view.value.to_vec(), meta: view.meta })
    }

    /// `dump_slot` past the ring: calls `f` with every current item of set `s` (one blocking
    /// read, for `lru_crawler metadump`); false past the last set (or without sets).
    pub(super) fn dump_set(&mut self, s: u32, now: Now, f: &mut super::gc::DumpVisit<'_>) -> bool {
        let Some(sets) = self.sets.as_deref() else { return false };
        if s >= sets.geo.sets {
            return false;
        }
        let (version, offset) = (sets.version(s), sets.geo.set_offset(s));
        if version == 0 {
            return true;
        }
        let (partition, seed) = (self.cfg.partition, self.set_seed());
        let (buf, result) = self.sync_io(IoKind::Read, offset, AlignedBuf::new(PAGE), PAGE);
        let Ok(page) = result.map_err(|_| ()).and_then(|_| page::decode_page(&buf, s, partition, seed).map_err(|_| ()))
        else {
            return true;
        };
        if version_of(page.seq) != version {
            return true;
        }
        for (_, item) in page.iter() {
            // A key the log index names (a newer copy, or a tombstone) is not the set's.
            if self.index.find(KeyHash::of(item.key)).is_none() && !is_expired(item.meta.expiry, now.unix) {
                f(item.key, item.value, item.meta, page::set_item_bytes(item.key.len(), item.value.len()));
            }
        }
        true
    }

    /// The seed every set page of this region is checksummed under.
    pub(super) fn set_seed(&self) -> u64 {
        self.cfg.identity ^ u64::from(self.cfg.partition).rotate_left(32) ^ 0x5345_5453
    }

    /// The sets index's counters, if the store has one.
    pub fn sets_stats(&self) -> Option<SetsStats> {
        self.sets.as_deref().map(|s| s.stats)
    }
}
