//! The flash tier (Toshiba's flash KVS with Cascade Mapping's segment generations): a
//! log-structured store per partition on its own region of a flash file. Items are appended to a
//! DRAM write buffer that is written whole, as one segment, into a FIFO ring of segments; a
//! compact DRAM index (8 bytes per item, 2-byte tags) finds them, so a hit costs one read and a
//! miss costs none. Or, with `FlashConfig::cascade`, the cascade index (`cascade/`): only hot
//! mappings in DRAM, the rest in mapping blocks on flash, about a byte of DRAM per item. GC
//! reclaims the oldest segment, keeping the items that were read while on flash; a clean close
//! writes an index snapshot so the next open serves everything again.
//!
//! The store is a state machine over an `IoEngine`: calls queue I/O and return at once; `poll`
//! consumes completions and hands back finished lookups. It must not block except in `open`
//! and `close`, must never serve bytes that fail their checks, and must never panic on what the
//! device returns.

pub mod admission;
mod cascade;
mod config;
mod crash;
mod durable;
mod entry;
mod errors;
mod faults;
#[cfg(test)]
mod faults_tests;
mod gc;
mod identity;
mod index;
pub mod io;
mod layout;
#[cfg(test)]
mod layout_tests;
mod mapblock;
mod packing;
mod recovery;
mod ring;
#[cfg(test)]
mod scenarios;
mod sets;
mod setup;
mod stats;
#[cfg(test)]
mod tests;
mod twins;

use crate::hash::KeyHash;
use crate::time::is_expired;
pub use admission::AdmissionPolicy;
pub use cascade::{CascadeStats, TierCounts};
pub use config::{
    on_flash_item_bytes, CascadeConfig, FlashConfig, LayoutError, RegionLayout, DEFAULT_EXPECTED_ITEM_BYTES,
    DEFAULT_ITEM_BYTES, DEFAULT_SEGMENT_BYTES, MAX_SEGMENT_BYTES, MIN_SEGMENT_BYTES,
};
pub use errors::{DeviceError, RecoveryError, StoreError};
#[cfg(test)]
use identity::claim_file;
pub use identity::ClaimError;
use index::{Entry, FlashIndex};
#[cfg(test)]
pub(crate) use io::sim::SimDisk;
pub use io::{engine_for, open_file, AlignedBuf, FlashIo, IoEngine};
use io::{Completion, IoKind, IoOp};
pub use layout::ItemMeta;
use layout::{decode_item, item_bytes, Corrupt, PAGE};
pub use recovery::{Closed, OpenReport, NEW_FILE};
use ring::{Slot, SlotState, WriteBuf};
pub use sets::{SetsConfig, SetsLayout, SetsStats};
pub use setup::{OpenError, TestIo, TierFile, TierSettings};
pub use stats::{FlashMemory, FlashStats};

/// The two clocks the store reads, passed in so tests control time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Now {
    /// Unix seconds, for expiry.
    pub unix: u32,
    /// A monotonic clock in nanoseconds, for the flush delay and the write budget.
    pub nanos: u64,
}

/// An item read from flash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlashItem {
    /// The value.
    pub value: Vec<u8>,
    /// Its metadata.
    pub meta: ItemMeta,
}

/// What an insert did. Whatever it did, the key's previous flash copy is gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InsertOutcome {
    /// Written (or queued in a write buffer).
    Stored,
    /// The admission policy or write budget said no.
    Rejected,
    /// Every write buffer is full or being written; poll and try again.
    Busy,
    /// Larger than a segment can hold.
    TooLarge,
}

/// What a lookup found.
#[derive(Debug, PartialEq, Eq)]
pub enum Lookup {
    /// Not on flash.
    Miss,
    /// Found in a DRAM write buffer.
    Hit(FlashItem),
    /// A read is in flight; `poll` returns its `ReadDone` under the caller's token.
    Pending,
    /// Too many reads in flight; poll and try again.
    Busy,
}

/// A finished read: the item, or None for a miss (the reason is counted in the stats).
#[derive(Debug, PartialEq, Eq)]
pub struct ReadDone {
    /// The lookup's token.
    pub token: u64,
    /// The item (None: nothing current was found).
    pub item: Option<FlashItem>,
}

/// A lookup waiting for a read or for a write buffer's write.
struct PendingRead {
    token: u64,
    hash: KeyHash,
    key: Vec<u8>,
    entry: Entry,
    /// Set when the mapping came from below tier 1 (the cascade index).
    below: Option<cascade::Below>,
    /// Mapping blocks being read (the cascade index).
    map: Option<Box<cascade::lookup::MapRead>>,
    /// Flash reads this lookup issued.
    reads: u32,
    /// The sets index: the set read and the version it must still have.
    set: Option<(u32, u16)>,
    /// When its slot was taken (the store's clock, ns), for `faults::READ_DEADLINE_NS`.
    started_ns: u64,
    /// Answered as a miss after the deadline: its I/O still owns the slot, and its end answers
    /// no one.
    abandoned: bool,
}

impl PendingRead {
    fn new(token: u64, hash: KeyHash, key: &[u8]) -> PendingRead {
        let key = key.to_vec();
        PendingRead {
            token,
            hash,
            key,
            entry: Entry(0),
            below: None,
            map: None,
            reads: 0,
            set: None,
            started_ns: 0,
            abandoned: false,
        }
    }
}

/// Why bytes found for a key are not served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Miss {
    Corrupt(Corrupt),
    /// A tag twin: another key's item.
    OtherKey,
    Expired,
}

/// Checks the item at the start of `bytes` against `key` and the clock.
fn check(key: &[u8], bytes: &[u8], now: Now, seed: u64) -> Result<FlashItem, Miss> {
    let item = decode_item(bytes, seed).map_err(Miss::Corrupt)?;
    if item.key != key {
        return Err(Miss::OtherKey);
    }
    if is_expired(item.meta.expiry, now.unix) {
        return Err(Miss::Expired);
    }
    Ok(FlashItem { value: item.value.to_vec(), meta: item.meta })
}

/// Device tokens: the kind in the top byte, a number below it.
const TOKEN_READ: u64 = 1 << 56;
const TOKEN_WRITE: u64 = 2 << 56;
const TOKEN_GC: u64 = 3 << 56;
const TOKEN_META: u64 = 4 << 56;
const TOKEN_MAP_READ: u64 = 5 << 56;
const TOKEN_MAP_WRITE: u64 = 6 << 56;
const TOKEN_REORG: u64 = 7 << 56;
const TOKEN_SUPER: u64 = 8 << 56;
const TOKEN_SYNC: u64 = 9 << 56;
const TOKEN_SET_READ: u64 = 10 << 56;
const TOKEN_MOVE: u64 = 11 << 56;
const TOKEN_TWIN: u64 = 12 << 56;
const TOKEN_KIND: u64 = 0xFF << 56;

/// One partition's flash store.
pub struct FlashStore {
    cfg: FlashConfig,
    layout: RegionLayout,
    io: Box<dyn IoEngine>,
    /// The full index, or the cascade index's tier 1.
    index: FlashIndex,
    cascade: Option<Box<cascade::Cascade>>,
    /// The sets index (`index` is then the log's).
    sets: Option<Box<sets::Sets>>,
    slots: Vec<Slot>,
    /// The ring: `used_slots` slots in use, oldest at `tail`, the next to fill at `head`.
    head: u32,
    used_slots: u32,
    bufs: Vec<WriteBuf>,
    active: Option<usize>,
    /// The segment-sized buffer a commit copies its pages into (the active buffer keeps filling
    /// while they are written); allocated once, None while its write is in flight.
    copy: Option<AlignedBuf>,
    copy_out: bool,
    reads: Vec<Option<PendingRead>>,
    free_reads: Vec<usize>,
    page_pool: Vec<AlignedBuf>,
    gc: gc::Gc,
    admission: Box<dyn admission::Admission>,
    epoch: u64,
    next_seq: u64,
    /// The lowest segment sequence number still valid in this region (see `recovery`).
    watermark: u64,
    /// The watermark of the superblock write in flight (`durable::retire_tail`).
    pending_watermark: u64,
    durable: durable::Durable,
    /// Lookups finished inside a blocking wait, handed out at the next `poll`.
    early: Vec<ReadDone>,
    max_cas: u64,
    /// A pending delayed flush_all's deadline (Unix seconds, 0 = none), kept across a clean
    /// restart for the owner to apply.
    flush_at: u32,
    /// Reads go to the device as they are queued (see `set_submit_at_once`).
    submit_at_once: bool,
    stats: FlashStats,
    completions: Vec<Completion>,
    /// Completions the cascade index's pressure wait (`relieve`) left for the next `poll`.
    deferred: Vec<Completion>,
    relieving: bool,
    /// The clock of the last call, for completions handled inside an insert.
    last_now: Now,
    /// New items stay out while writes fail (`faults`).
    degraded: faults::Degraded,
    /// Failed watermark writes pause the next (`faults`).
    watermark_retry: faults::WatermarkRetry,
    /// A close waited `recovery::DEVICE_PATIENCE` for the device in vain.
    device_stuck: bool,
    /// When a close (that started) stops waiting for the device.
    close_by: Option<std::time::Instant>,
    /// Removed entries read back to count tag twins (`twins.rs`).
    twins: twins::Twins,
}

impl FlashStore {
    /// Where the region's parts lie.
    pub fn layout(&self) -> &RegionLayout {
        &self.layout
    }

    /// The store's counters.
    pub fn stats(&self) -> FlashStats {
        let mut stats = self.stats;
        stats.items = self.slots.iter().map(|s| u64::from(s.live)).sum();
        if let Some(c) = self.cascade.as_deref() {
            let (t2, t3) = c.counts();
            stats.items += t2 + t3;
        }
        stats.items += self.sets.as_deref().map_or(0, sets::Sets::items);
        stats.in_flight = self.io.in_flight() as u64;
        stats.degraded = u64::from(self.writes_failing());
        stats
    }

    /// The largest CAS any stored item carried (restored across a clean restart).
    pub fn max_cas(&self) -> u64 {
        self.max_cas
    }

    /// Raises the largest CAS to keep across a clean restart to `cas` (every CAS the owner
    /// issued, not only those of items on flash).
    pub fn note_cas(&mut self, cas: u64) {
        self.max_cas = self.max_cas.max(cas);
    }

    /// The pending delayed flush_all kept across a clean restart (Unix seconds, 0 = none).
    pub fn flush_at(&self) -> u32 {
        self.flush_at
    }

    /// Records the owner's pending delayed flush_all for the next clean close.
    pub fn set_flush_at(&mut self, at: u32) {
        self.flush_at = at;
    }

    /// Records the owner's pending delayed flush_all (0: none) and writes it to the device at
    /// once, so a crash before its deadline does not forget it (flush_all is rare).
    pub fn persist_flush_at(&mut self, at: u32) {
        if self.flush_at != at {
            self.flush_at = at;
            if self.write_superblock(layout::STATE_OPEN, 0, 0).is_err() {
                self.stats.write_errors += 1;
            }
        }
    }

    /// Forgets every item (flush_all): no I/O, the segments are reclaimed as they come due.
    pub fn clear(&mut self) {
        // No set page written before the flush may answer after a crash either.
        self.raise_sets_floor();
        self.flush_mark();
        self.index.clear();
        if let Some(c) = self.cascade.as_deref_mut() {
            c.clear();
        }
        if let Some(s) = self.sets.as_deref_mut() {
            s.clear();
        }
        for slot in &mut self.slots {
            slot.live = 0;
        }
        self.stats.clears += 1;
    }

    /// The engine's name.
    pub fn io_name(&self) -> &'static str {
        self.io.name()
    }

    fn tail(&self) -> u32 {
        (self.head + self.layout.slots - self.used_slots) % self.layout.slots
    }

    /// Whether `e` still names a live place: its slot holds the generation it was written in.
    fn valid(slots: &[Slot], e: Entry) -> bool {
        if cascade::is_tombstone(e) {
            return false;
        }
        let slot = &slots[e.slot() as usize];
        slot.gen == e.gen() && slot.state != SlotState::Free
    }

    /// Drops an index entry's claim on its slot's live count.
    fn forget(&mut self, e: Option<Entry>) {
        if let Some(e) = e.filter(|&e| Self::valid(&self.slots, e)) {
            let slot = &mut self.slots[e.slot() as usize];
            slot.live = slot.live.saturating_sub(1);
        }
    }

    /// Stores `key` (hashed to `hash`) with `value`; see `InsertOutcome`.
    pub fn insert(&mut self, hash: KeyHash, key: &[u8], value: &[u8], meta: ItemMeta, now: Now) -> InsertOutcome {
        self.insert_admitted(hash, key, value, meta, now, false)
    }

    /// `insert`; with `always` the admission policy is not asked (a clean shutdown writes
    /// every DRAM item).
    pub fn insert_admitted(
        &mut self,
        hash: KeyHash,
        key: &[u8],
        value: &[u8],
        meta: ItemMeta,
        now: Now,
        always: bool,
    ) -> InsertOutcome {
        self.last_now = now;
        if !self.durable.invalidated.is_empty() {
            // An invalidation of the key still on its way (its change never ran) must not
            // remove what this stores when its write finishes.
            self.durable.invalidated.retain(|&(_, h, _)| h.0 != hash.0);
        }
        let removed = self.index.remove_at(hash);
        let old = removed.map(|(_, e)| e);
        self.check_twin(hash, old);
        self.dropped_entry(hash, removed);
        // (A copy below tier 1 was dropped by the owner's invalidation, see `durable`.)
        let had_copy = old.is_some_and(|e| Self::valid(&self.slots, e));
        self.forget(old);
        let bytes = item_bytes(key.len(), value.len());
        let outcome = if bytes > self.layout.max_item_bytes() || key.is_empty() || key.len() > 250 {
            self.stats.too_large += 1;
            InsertOutcome::TooLarge
        } else if self.degraded(now) {
            // Writes failed a moment ago: items stay out (even at close) until the pause ends.
            self.stats.rejected_degraded += 1;
            InsertOutcome::Rejected
        } else if !always && !self.admission.admit(bytes, now.nanos) {
            self.stats.rejected += 1;
            InsertOutcome::Rejected
        } else if self.append(hash, key, value, meta, now).is_none() {
            if self.writes_failing() {
                // No room while writes fail (the tail waits for a watermark the device
                // refuses): waiting would not make any.
                self.stats.rejected_degraded += 1;
                InsertOutcome::Rejected
            } else {
                self.stats.busy += 1;
                InsertOutcome::Busy
            }
        } else {
            InsertOutcome::Stored
        };
        if outcome != InsertOutcome::Stored {
            if had_copy {
                // Its older copy stays dead only if a mark says so (a stored record would).
                self.drop_group(self.group(hash));
            }
            // The key's older mappings below tier 1 must not come back.
            self.bury(self.fingerprint(hash), self.head_ground());
            return outcome;
        }
        self.stats.inserts += 1;
        self.stats.admitted_bytes += bytes as u64;
        self.max_cas = self.max_cas.max(meta.cas);
        InsertOutcome::Stored
    }

    /// Forgets `key`; true if the index had an entry for its tag. No I/O: the space returns
    /// with its segment.
    pub fn delete(&mut self, hash: KeyHash) -> bool {
        let old = self.index.remove(hash);
        let found = old.is_some_and(|e| Self::valid(&self.slots, e));
        self.check_twin(hash, old);
        if found {
            // Durable with the next commit (an owner that must wait uses `invalidate` first).
            self.drop_group(self.group(hash));
        }
        self.forget(old);
        self.bury(self.fingerprint(hash), self.head_ground());
        self.stats.deletes += u64::from(found);
        found
    }

    /// Whether tier 1 (the whole full index) holds a live entry for `key`: the flash copy of a
    /// key no write has touched since it was read (no I/O; a tag twin may answer yes). With the
    /// sets index, also a key the log index does not name and its set's filter says may be
    /// there (a key read from its set is still there unless RRIP evicted it since).
    pub fn may_contain(&self, hash: KeyHash) -> bool {
        match (self.index.find(hash), self.sets.as_deref()) {
            (Some(e), _) => Self::valid(&self.slots, e),
            (None, Some(sets)) => sets.may_contain(self.fingerprint(hash)),
            (None, None) => false,
        }
    }

    /// Whether a lookup of `key` may find anything: `may_contain`, or (cascade index) a lower
    /// tier's DRAM block or Bloom filter says maybe (no I/O; false positives cost a lookup).
    /// With the sets index, also a key a voided set's page may still hold on flash (it answers
    /// no lookup, but a crash could bring it back: a change of it needs a mark).
    pub fn may_hold(&self, hash: KeyHash) -> bool {
        self.may_contain(hash)
            || self
                .cascade
                .as_deref()
                .is_some_and(|c| self.index.find(hash).is_none() && c.below_may_contain(self.fingerprint(hash)))
            || self.sets.as_deref().is_some_and(|s| s.on_flash(self.fingerprint(hash)))
    }

    /// Starts loading the index entries a lookup of `hash` reads (a batch of requests
    /// prefetches them all before the first runs).
    #[inline]
    pub fn prefetch(&self, hash: KeyHash) {
        self.index.prefetch(hash);
    }

    /// Looks `key` up; a `Pending` answer arrives from `poll` under `token`.
    pub fn lookup(&mut self, hash: KeyHash, key: &[u8], token: u64, now: Now) -> Lookup {
        self.last_now = now;
        self.stats.lookups += 1;
        let entry = match self.index.find(hash) {
            Some(e) if Self::valid(&self.slots, e) => e,
            Some(e) if self.sets.is_some() && cascade::is_tombstone(e) => {
                self.stats.miss_index += 1;
                self.count_outcome(0, false, 0);
                return Lookup::Miss;
            }
            Some(_) => {
                // Its newest item is gone: no older one below may answer for it.
                self.index.remove(hash);
                self.bury(self.fingerprint(hash), 0);
                self.stats.miss_index += 1;
                self.count_outcome(0, false, 0);
                return Lookup::Miss;
            }
            None if self.cascade.is_some() => return self.lookup_below(hash, key, token, now),
            None if self.sets.is_some() => return self.lookup_set(hash, key, token),
            None => {
                self.stats.miss_index += 1;
                return Lookup::Miss;
            }
        };
        let mut pending = PendingRead::new(token, hash, key);
        pending.entry = entry;
        self.fetch_new(pending, now)
    }

    /// Gets the item `pending.entry` names: from a write buffer at once, after its write, or
    /// with a read.
    fn fetch_new(&mut self, pending: PendingRead, now: Now) -> Lookup {
        let entry = pending.entry;
        match self.slots[entry.slot() as usize].state {
            SlotState::Free => Lookup::Miss,
            SlotState::Buffer(b) => match self.bufs[b].data.take() {
                Some(data) => {
                    let at = entry.offset_units() as usize * layout::ITEM_ALIGN;
                    let found = self.verify(pending.hash, &pending.key, entry, &data[at..], now);
                    self.bufs[b].data = Some(data);
                    let tier = pending.below.map_or(1, |b| b.tier);
                    self.count_outcome(tier, found.is_some(), 0);
                    match found {
                        Some(item) => {
                            self.stats.hits_buffer += 1;
                            if pending.below.is_some() {
                                self.promote(&pending);
                            }
                            Lookup::Hit(item)
                        }
                        None => Lookup::Miss,
                    }
                }
                None => self.park(b, pending),
            },
            SlotState::Sealed => self.read(pending),
        }
    }

    /// `fetch_new` for lookup `i`, whose mapping was just read: answers go to `out`.
    fn fetch_existing(&mut self, i: usize, now: Now, out: &mut Vec<ReadDone>) {
        let entry = self.reads[i].as_ref().expect("a lookup").entry;
        match self.slots[entry.slot() as usize].state {
            SlotState::Free => self.finish_miss(i, out),
            SlotState::Buffer(b) => match self.bufs[b].data.take() {
                Some(data) => {
                    let at = entry.offset_units() as usize * layout::ITEM_ALIGN;
                    self.finish_read(i, Ok(&data[at..]), now, out);
                    self.bufs[b].data = Some(data);
                }
                None => self.bufs[b].waiters.push(i),
            },
            SlotState::Sealed => self.submit_data_read(i),
        }
    }

    /// Ends lookup `i` as a miss.
    fn finish_miss(&mut self, i: usize, out: &mut Vec<ReadDone>) {
        let pending = self.reads[i].take().expect("a lookup");
        self.free_reads.push(i);
        self.count_outcome(0, false, pending.reads);
        if !pending.abandoned {
            out.push(ReadDone { token: pending.token, item: None });
        }
    }

    fn take_read_slot(&mut self, mut pending: PendingRead) -> Option<usize> {
        pending.started_ns = self.last_now.nanos;
        if self.reads.len() - self.free_reads.len() >= self.cfg.max_reads as usize {
            self.stats.read_busy += 1;
            return None;
        }
        Some(match self.free_reads.pop() {
            Some(i) => {
                self.reads[i] = Some(pending);
                i
            }
            None => {
                self.reads.push(Some(pending));
                self.reads.len() - 1
            }
        })
    }

    /// Waits for buffer `b`'s write: the item is answered from the buffer when it comes back.
    fn park(&mut self, b: usize, pending: PendingRead) -> Lookup {
        match self.take_read_slot(pending) {
            Some(i) => {
                self.bufs[b].waiters.push(i);
                Lookup::Pending
            }
            None => self.no_read_slot(),
        }
    }

    fn read(&mut self, pending: PendingRead) -> Lookup {
        let Some(i) = self.take_read_slot(pending) else { return self.no_read_slot() };
        self.submit_data_read(i);
        Lookup::Pending
    }

    /// Reads the item lookup `i` names.
    fn submit_data_read(&mut self, i: usize) {
        let pending = self.reads[i].as_mut().expect("a lookup");
        pending.reads += 1;
        let entry = pending.entry;
        let len = entry.pages() as usize * PAGE;
        let buf = match self.page_pool.pop() {
            Some(buf) if buf.len() >= len => buf,
            Some(small) => {
                self.page_pool.push(small);
                AlignedBuf::new(len)
            }
            None => AlignedBuf::new(len),
        };
        let first_page = entry.offset_units() as u64 * layout::ITEM_ALIGN as u64 / PAGE as u64;
        let offset = self.layout.segment_offset(entry.slot()) + first_page * PAGE as u64;
        self.io.submit(IoOp { kind: IoKind::Read, offset, buf, len, at: 0, token: TOKEN_READ | i as u64 });
        // Submitted at once, not at the next poll: a read queued behind a batch waits for the
        // batch, and measured hits/s at depth 32 rose from ~65k to ~80k (docs/benchmarks.md).
        // An owner that submits once per batch of lookups itself (`submit`) turns this off.
        if self.submit_at_once {
            self.io.flush();
        }
        self.stats.reads += 1;
        self.stats.read_bytes += len as u64;
    }

    /// Checks bytes found for `entry` (starting at the item): magic, checksum, key, expiry.
    /// Misses are counted; an expired item leaves the index.
    fn verify(&mut self, hash: KeyHash, key: &[u8], entry: Entry, bytes: &[u8], now: Now) -> Option<FlashItem> {
        let seed = self.slots[entry.slot() as usize].seq;
        let miss = match check(key, bytes, now, seed) {
            Ok(item) => return Some(item),
            Err(miss) => miss,
        };
        match miss {
            Miss::Corrupt(_) => self.stats.miss_corrupt += 1,
            Miss::OtherKey => self.stats.miss_tag += 1,
            Miss::Expired => {
                self.stats.miss_expired += 1;
                if self.index.find(hash).is_some_and(|e| e.same_place(entry)) {
                    let old = self.index.remove(hash);
                    self.forget(old);
                    self.bury(self.fingerprint(hash), 0);
                }
            }
        }
        None
    }

    /// Completes a lookup from `bytes` (the page(s) read, or the written buffer).
    fn finish_read(&mut self, i: usize, bytes: Result<&[u8], i32>, now: Now, out: &mut Vec<ReadDone>) {
        let pending = self.reads[i].take().expect("a read in flight");
        self.free_reads.push(i);
        let current = self.still_current(&pending);
        let item = match bytes {
            Err(_) => {
                self.stats.miss_io_error += 1;
                None
            }
            // Written or deleted meanwhile, or its segment reclaimed: the bytes are not current.
            Ok(_) if !current => {
                self.stats.miss_superseded += 1;
                None
            }
            Ok(bytes) => self.verify(pending.hash, &pending.key, pending.entry, bytes, now),
        };
        if item.is_some() {
            self.stats.hits_flash += 1;
            self.promote(&pending);
        }
        self.count_outcome(pending.below.map_or(1, |b| b.tier), item.is_some(), pending.reads);
        if !pending.abandoned {
            out.push(ReadDone { token: pending.token, item });
        }
    }

    /// Consumes finished I/O, writes a buffer that waited too long, runs GC; finished lookups
    /// go to `out`. Never blocks.
    pub fn poll(&mut self, now: Now, out: &mut Vec<ReadDone>) {
        self.last_now = now;
        out.append(&mut self.early);
        for c in std::mem::take(&mut self.deferred) {
            self.complete(c, now, out);
        }
        self.tick(now);
        let mut completions = std::mem::take(&mut self.completions);
        self.io.poll(&mut completions);
        // Each finished read checks its key's index entry again (`still_current`): load them
        // all before the first is looked at.
        for c in &completions {
            if c.token & TOKEN_KIND == TOKEN_READ {
                if let Some(Some(read)) = self.reads.get((c.token & !TOKEN_KIND) as usize) {
                    self.index.prefetch(read.hash);
                }
            }
        }
        for c in completions.drain(..) {
            self.complete(c, now, out);
        }
        self.completions = completions;
        self.tick(now);
        if self.twin_checks() > 0 {
            self.start_twin_checks();
        }
        self.io.flush();
        self.abandon_late_reads(now, out);
    }

    /// Blocks until at least one request finishes (if any is in flight), then polls. A caller
    /// that waits wants progress: failed writes waiting for their pause are tried at once.
    pub fn wait(&mut self, now: Now, out: &mut Vec<ReadDone>) {
        if !self.deferred.is_empty() {
            return self.poll(now, out);
        }
        if self.stuck() {
            return self.poll(now, out);
        }
        if self.io.in_flight() == 0 {
            self.retry_writes(now, true);
        }
        let mut completions = std::mem::take(&mut self.completions);
        self.io.flush();
        self.io.wait(&mut completions);
        for c in completions.drain(..) {
            self.complete(c, now, out);
        }
        self.completions = completions;
        self.poll(now, out);
    }

    /// The I/O engine's completion eventfd, if it has one (see `IoEngine::notify_fd`).
    pub fn notify_fd(&self) -> Option<std::os::fd::RawFd> {
        self.io.notify_fd()
    }

    /// Whether each read is handed to the device as it is queued (the default), or only at
    /// `submit`/`poll` (the owner batches: one system call for a batch of lookups).
    pub fn set_submit_at_once(&mut self, at_once: bool) {
        self.submit_at_once = at_once;
    }

    /// Hands queued requests to the device.
    pub fn submit(&mut self) {
        self.io.flush();
    }

    /// Requests in flight on the device.
    pub fn in_flight(&self) -> usize {
        self.io.in_flight()
    }

    fn complete(&mut self, c: Completion, now: Now, out: &mut Vec<ReadDone>) {
        let number = (c.token & !TOKEN_KIND) as usize;
        match c.token & TOKEN_KIND {
            TOKEN_READ => {
                let entry = self.reads[number].as_ref().expect("a read in flight").entry;
                let at = entry.offset_units() as usize * layout::ITEM_ALIGN % PAGE;
                let len = entry.pages() as usize * PAGE;
                let bytes = c.result.map(|_| &c.buf[at..len]);
                self.finish_read(number, bytes, now, out);
                if c.buf.len() == PAGE && self.page_pool.len() < self.cfg.max_reads as usize {
                    self.page_pool.push(c.buf);
                }
            }
            TOKEN_WRITE => self.write_done(number, c, now, out),
            TOKEN_GC => self.gc_read_done(number as u32, c, now),
            TOKEN_MAP_READ => self.map_read_done(number as u64, c, now, out),
            TOKEN_MAP_WRITE => self.t2_written(number as u64, c),
            TOKEN_REORG => self.reorg_done(number as u64, c),
            TOKEN_SUPER => self.watermark_done(number as u32, c),
            TOKEN_SYNC => {
                // A flush reported failed at the deadline answers no one when it ends.
                let ticket = number as u64;
                if let Some(i) = self.durable.syncing.iter().position(|&(t, _)| t == ticket) {
                    self.durable.syncing.swap_remove(i);
                    self.ticket_done(ticket, c.result.is_ok());
                }
            }
            TOKEN_SET_READ => self.set_read_done(number, c, now, out),
            TOKEN_MOVE => self.move_done(number as u64, c, now),
            TOKEN_TWIN => self.twin_read_done(number, c),
            _ => {}
        }
    }
}
