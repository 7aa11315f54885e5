//! A cache-mode partition (MICA): one circular log plus one index, owned by one thread. Both
//! are mapped once at creation; the index's overflow buckets are charged to the budget as they
//! are used, and the log's next lap shrinks to pay for them.

pub(crate) mod census;
mod cleaner;
#[cfg(test)]
mod cleaner_tests;
mod copies;
pub(crate) mod crew;
#[cfg(test)]
mod crew_tests;
pub(crate) mod index;
mod install;
pub(crate) mod log;
mod lookup;
#[cfg(test)]
mod tests;
pub(crate) mod tier;
#[cfg(test)]
mod tier_tests;

use crate::batch::BATCH_CHUNK;
use crate::cache::census::Census;
use crate::cache::index::{entry_offset, entry_tag, is_item, make_entry, Index, Slot, ENTRIES_PER_BUCKET};
use crate::cache::log::Log;
use crate::config::SWEEP_PERIOD_BYTES;
use crate::config::{ConfigError, Mode, PartitionConfig, MAX_ITEM_BYTES_CEILING, MIN_ITEM_BYTES};
use crate::hash::KeyHash;
use crate::item;
use crate::item::ItemHeader;
use crate::ops;
use crate::region::Region;
use crate::storage::{Access, NewValue, Prior, Storage};
use crate::time::unix_now;
use crate::time::ClockMarks;
use crate::types::{EngineError, EngineStats, Item, MemoryOverhead, StoreStats};

/// The smallest log: two of the largest items, each with its CAS field (an item as large as
/// the partition takes is 8 bytes larger in the log once copied forward). An append writes
/// its new item while keeping the old one, so both must fit in one lap.
pub(crate) fn smallest_log(max_item_bytes: usize) -> usize {
    2 * (max_item_bytes + 8)
}

/// An item found in the index.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Found {
    slot: Slot,
    position: u64,
    ring_index: usize,
    header: ItemHeader,
    /// Encoded length of `header`.
    header_len: usize,
}

impl Found {
    /// The item `item` (position, ring index, header, header length) that `slot` names.
    #[inline(always)]
    fn at(slot: Slot, item: (u64, usize, ItemHeader, usize)) -> Found {
        let (position, ring_index, header, header_len) = item;
        Found { slot, position, ring_index, header, header_len }
    }

    fn cas(&self) -> u64 {
        self.header.cas.unwrap_or(self.position + 1)
    }

    fn payload_start(&self) -> usize {
        self.ring_index + self.header_len
    }

    fn total_len(&self) -> usize {
        self.header_len + self.header.key_len + self.header.value_len
    }
}

/// One partition: index + circular log, owned by a single thread.
pub struct Partition {
    index: Index,
    log: Log,
    /// Holds a value while it is rewritten into the log region it came from.
    scratch: Region,
    /// An item (or an append's old value) copied out before room is made for its rewrite:
    /// making room may evict or move it (the cleaner uses `scratch`); reserved at creation,
    /// touched only as far as items reach.
    carried: Vec<u8>,
    max_item_bytes: usize,
    /// The budget the log's length follows (`set_memory_bytes`), index and scratch included.
    budget: usize,
    now: u32,
    flush: ops::FlushSchedule,
    sweep_cursor: usize,
    sweep_next_at: u64,
    sweep_stride: u64,
    /// Running average of the size of items read, so batches prefetch whole items.
    item_bytes_hint: usize,
    stats: EngineStats,
    census: Census,
    clock_marks: ClockMarks,
    /// The flash tier behind the log, if the server has one (`tier.rs`).
    tier: Option<Box<tier::Tier>>,
    /// The log's first position (0 without a flash tier).
    origin: u64,
    /// Where the cleaner's walk is: every item before it was looked at (`cleaner.rs`).
    clean_cursor: u64,
    /// What readers on other threads see (`crew.rs`): in-place changes are bracketed in it.
    published: std::sync::Arc<crew::Published>,
    /// Fetched-bit notices taken from readers (swapped with the published queue).
    notices: Vec<(u64, u64)>,
}

impl Partition {
    /// Allocates a partition; after this it never allocates again.
    pub fn new(config: &PartitionConfig) -> Result<Partition, ConfigError> {
        let buckets = config.buckets();
        if !buckets.is_power_of_two() || buckets < 2 {
            return Err(ConfigError::BadBucketCount(buckets));
        }
        if !(MIN_ITEM_BYTES..=MAX_ITEM_BYTES_CEILING).contains(&config.max_item_bytes) {
            return Err(ConfigError::MaxItemOutOfRange(config.max_item_bytes));
        }
        let index_bytes = buckets * std::mem::size_of::<crate::cache::index::Bucket>();
        let fixed_bytes = index_bytes + config.max_item_bytes;
        let log_bytes = Partition::log_share(config.memory_bytes, fixed_bytes, config.max_item_bytes)?;
        let max_memory = config.max_memory();
        if max_memory < config.memory_bytes {
            return Err(ConfigError::AboveMaximum { memory_bytes: config.memory_bytes, max_bytes: max_memory });
        }
        let max_log_bytes = max_memory - fixed_bytes;
        if max_log_bytes as u64 >= SWEEP_PERIOD_BYTES {
            return Err(ConfigError::TooLarge(max_log_bytes));
        }
        // Overflow buckets may take up to half the largest budget (address space until used).
        let chain_cap = max_memory / 2 / std::mem::size_of::<crate::cache::index::Bucket>();
        let index = Index::new(buckets, chain_cap).ok_or(ConfigError::OutOfMemory(index_bytes))?;
        let log = Log::new(log_bytes, max_log_bytes).ok_or(ConfigError::OutOfMemory(max_log_bytes))?;
        let scratch = Region::new(config.max_item_bytes).ok_or(ConfigError::OutOfMemory(config.max_item_bytes))?;
        let sweep_stride = (SWEEP_PERIOD_BYTES / buckets as u64).max(1);
        Ok(Partition {
            index,
            scratch,
            carried: Vec::with_capacity(config.max_item_bytes),
            max_item_bytes: config.max_item_bytes,
            budget: config.memory_bytes,
            now: unix_now(),
            flush: ops::FlushSchedule::default(),
            sweep_cursor: 0,
            sweep_next_at: sweep_stride,
            sweep_stride,
            item_bytes_hint: 64,
            stats: EngineStats::default(),
            census: Census::new(log_bytes as u64, 0),
            clock_marks: ClockMarks::starting(unix_now()),
            tier: None,
            origin: 0,
            clean_cursor: 0,
            published: log.published(),
            log,
            notices: Vec::with_capacity(crew::MAX_NOTICES),
        })
    }

    /// The index and scratch space: the part of the budget the log cannot use.
    fn fixed_bytes(&self) -> usize {
        self.index.bytes() + self.scratch.len()
    }

    /// The log's share of a `memory_bytes` budget, if it holds two items of the largest size.
    fn log_share(memory_bytes: usize, fixed_bytes: usize, max_item_bytes: usize) -> Result<usize, ConfigError> {
        let needed_bytes = fixed_bytes + smallest_log(max_item_bytes);
        if memory_bytes < needed_bytes {
            return Err(ConfigError::TooSmall { memory_bytes, needed_bytes });
        }
        Ok(memory_bytes - fixed_bytes)
    }

    /// Index entries that point at intact, unflushed items (expired ones included until a
    /// read notices). Walks the whole index: for reports, not for the request path.
    pub fn resident_items(&self) -> usize {
        let max_age = self.log.max_age();
        self.index
            .all_slots()
            .map(|slot| self.index.get(slot))
            .filter(|&entry| is_item(entry) && self.log.age_of(entry_offset(entry)) <= max_age)
            .count()
    }

    /// What an item of these sizes costs beyond its key and value when the partition is full
    /// of such items, from the partition's own allocation sizes.
    pub fn memory_overhead(&self, key_len: usize, value_len: usize) -> MemoryOverhead {
        let item_bytes = crate::item::item_log_bytes(key_len, value_len);
        let slots = self.index.buckets() * ENTRIES_PER_BUCKET;
        let items = (self.log_bytes() / item_bytes).min(slots).max(1);
        let payload = items * (key_len + value_len);
        MemoryOverhead {
            items,
            header_bytes: item_bytes - key_len - value_len,
            index_bytes_per_item: self.index_bytes() as f64 / items as f64,
            total_bytes_per_item: (self.allocated_bytes() - payload) as f64 / items as f64,
        }
    }

    #[inline]
    fn item_at(&self, found: &Found) -> Item<'_> {
        let start = found.payload_start() + found.header.key_len;
        Item {
            value: &self.log.bytes_from(start)[..found.header.value_len],
            flags: found.header.flags,
            cas: found.cas(),
            expiry: found.header.expiry,
            fetched: found.header.state & item::FETCHED != 0,
            stale: found.header.state & item::STALE != 0,
            token_sent: found.header.state & item::TOKEN_SENT != 0,
        }
    }

    /// Sets state bits of the item in place (one byte in a line just read).
    #[inline]
    fn set_state(&mut self, found: &Found, bits: u8) {
        if found.header.state & bits != bits {
            self.published.begin_in_place();
            self.log.bytes_from_mut(found.ring_index)[0] |= bits;
            self.published.end_in_place();
        }
    }

    /// Sets the fetched bit of the items other threads' readers served (`crew.rs`) while they
    /// are still where they were read. Call before executing requests: one atomic load when
    /// there is nothing to do.
    pub fn apply_crew_notices(&mut self) {
        self.published.take_notices(&mut self.notices);
        let mut notices = std::mem::take(&mut self.notices);
        for &(hash, position) in &notices {
            if let Some(slot) = self.slot_at(KeyHash(hash), position) {
                let ring_index = self.log.ring_index(position);
                let (header, header_len) = ItemHeader::decode(self.log.bytes_from(ring_index));
                self.set_state(&Found { slot, position, ring_index, header, header_len }, item::FETCHED);
            }
        }
        notices.clear();
        self.notices = notices;
    }

    /// The slot whose entry names the live item at `position` for `hash`, if one still does.
    fn slot_at(&self, hash: KeyHash, position: u64) -> Option<Slot> {
        let tag = hash.tag();
        let max_age = self.log.max_age();
        self.index.walk(hash.bucket(self.index.buckets())).find_map(|bucket| {
            let entries = self.index.bucket(bucket);
            entries
                .iter()
                .position(|&entry| {
                    let age = self.log.age_of(entry_offset(entry));
                    entry_tag(entry) == tag && age <= max_age && self.log.tail() - age == position
                })
                .map(|entry| Slot { bucket, entry })
        })
    }

    /// A read-only view of this partition for other threads (MICA's CREW, `crew.rs`).
    pub fn crew_reader(&self) -> crew::CrewReader {
        let (published, ring) = self.log.shared();
        crew::CrewReader::new(published, self.index.shared(), ring, self.index.buckets(), self.max_item_bytes)
    }

    fn value_of(&self, found: &Found) -> &[u8] {
        self.item_at(found).value
    }

    // ----- writes -----

    /// Claims log space for an item and writes its header and key; returns (position, ring
    /// index of the value).
    /// `header` comes from `with_cas_field`.
    fn start_item(&mut self, header: &ItemHeader, key: &[u8]) -> (u64, usize) {
        debug_assert_eq!(header.key_len, key.len());
        self.make_room(header.total_len());
        let (position, ring_index) = self.log.reserve(header.total_len());
        self.census.advance(self.log.tail(), self.log.live_span());
        let header = ItemHeader { cas: header.cas.map(|_| cleaner::cas_of(header, position)), ..*header };
        let out = self.log.bytes_from_mut(ring_index);
        let key_start = header.encode(out);
        out[key_start..key_start + key.len()].copy_from_slice(key);
        self.sweep_to_tail();
        (position, ring_index + key_start + key.len())
    }

    /// Writes an item whose value is `parts` concatenated and points the index at it.
    fn write_item(&mut self, hash: KeyHash, header: &ItemHeader, key: &[u8], parts: [&[u8]; 2]) -> u64 {
        debug_assert_eq!(header.value_len, parts[0].len() + parts[1].len());
        let header = &self.with_cas_field(header);
        let (position, value_start) = self.start_item(header, key);
        let out = self.log.bytes_from_mut(value_start);
        out[..parts[0].len()].copy_from_slice(parts[0]);
        out[parts[0].len()..header.value_len].copy_from_slice(parts[1]);
        self.install(hash, key, header, position);
        cleaner::cas_of(header, position)
    }

    /// Like `write_item` for a value that is `first` followed by (or, with `old_first`,
    /// preceded by) the value of `found`, which lives in the log itself. The old value goes
    /// through scratch space because the new item may overwrite it.
    fn write_combined(
        &mut self,
        hash: KeyHash,
        header: &ItemHeader,
        key: &[u8],
        found: &Found,
        data: &[u8],
        old_first: bool,
    ) -> u64 {
        // The old value is copied out before room is made: making room may evict the old item
        // and overwrite it with copies of others.
        let old = self.carry_out(found.payload_start() + found.header.key_len, found.header.value_len);
        let header = &self.with_cas_field(header);
        let (position, value_start) = self.start_item(header, key);
        let out = self.log.bytes_from_mut(value_start);
        let (first, second) = if old_first { (&old[..], data) } else { (data, &old[..]) };
        out[..first.len()].copy_from_slice(first);
        out[first.len()..header.value_len].copy_from_slice(second);
        self.carried = old;
        self.install(hash, key, header, position);
        cleaner::cas_of(header, position)
    }

    /// Copies `found` to the tail with `header` (which must keep its key and value lengths
    /// and carry its CAS explicitly) and repoints its index entry. With `only_if_cheap`, gives
    /// up (returning `found`) when the copy would overwrite the original.
    fn rewrite_item(&mut self, found: &Found, header: &ItemHeader, only_if_cheap: bool) -> Found {
        let size = header.total_len();
        if only_if_cheap && !self.log.survives_append(found.position, size) {
            return *found;
        }
        // Copied out first: making room may copy the item forward, or evict it and overwrite
        // it with copies of others. (Forcing the cleaner to keep it let that copy overwrite
        // items its walk had not seen; the engine fuzz target's input of stop 53.)
        let payload_len = found.header.key_len + found.header.value_len;
        let carried = self.carry_out(found.payload_start(), payload_len);
        let tag = entry_tag(self.index.get(found.slot));
        self.make_room(size);
        // The slot still names this key (making room installs nothing); its item may have moved.
        let entry = self.index.get(found.slot);
        let age = self.log.age_of(entry_offset(entry));
        if entry != 0 && age <= self.log.max_age() {
            let now_at = self.log.tail() - age;
            self.census.removed(now_at, &self.header_at(now_at));
        }
        let (position, ring_index, header_len) = self.reserve_copy(header);
        self.log.bytes_from_mut(ring_index + header_len)[..payload_len].copy_from_slice(&carried);
        self.carried = carried;
        self.index.set(found.slot, make_entry(tag, position));
        self.sweep_to_tail();
        Found { slot: found.slot, position, ring_index, header: *header, header_len }
    }

    /// `len` bytes of the ring from `ring_index`, copied into `carried` (taken: give it back).
    fn carry_out(&mut self, ring_index: usize, len: usize) -> Vec<u8> {
        let mut carried = std::mem::take(&mut self.carried);
        carried.clear();
        carried.extend_from_slice(&self.log.bytes_from(ring_index)[..len]);
        carried
    }

    /// Reserves room at the tail for a copy of an item with `header` (the caller made room and
    /// took the old copy out of the census), counts it and writes the header: (position, ring
    /// index, header length). The caller writes the key and value and repoints the slot.
    fn reserve_copy(&mut self, header: &ItemHeader) -> (u64, usize, usize) {
        let (position, ring_index) = self.log.reserve(header.total_len());
        self.census.advance(self.log.tail(), self.log.live_span());
        self.census.moved_in(position, header);
        (position, ring_index, header.encode(self.log.bytes_from_mut(ring_index)))
    }

    /// Clears index entries whose items are gone, one bucket per `sweep_stride` bytes written,
    /// so every bucket is swept at least once per 2^46 bytes and no stale 48-bit offset can
    /// live long enough to wrap around and look valid again.
    /// An odd bucket's sweep covers its pair's overflow chain too.
    fn sweep_to_tail(&mut self) {
        while self.log.tail() >= self.sweep_next_at {
            let max_age = self.log.max_age();
            let mut next = Some(self.sweep_cursor);
            while let Some(bucket) = next {
                for entry_no in 0..ENTRIES_PER_BUCKET {
                    let slot = Slot { bucket, entry: entry_no };
                    let entry = self.index.get(slot);
                    if is_item(entry) && self.log.age_of(entry_offset(entry)) > max_age {
                        self.index.set(slot, 0);
                    }
                }
                next = self.index.next_in_chain(bucket);
            }
            let bucket = self.sweep_cursor;
            self.sweep_cursor = (bucket + 1) & (self.index.buckets() - 1);
            self.sweep_next_at += self.sweep_stride;
        }
    }

    // ----- the memcached operations -----

    /// The read behind every get: finds the item, copies it forward when it is close to
    /// eviction, marks it fetched (the returned header still has the state before).
    #[inline]
    fn read_hashed(&mut self, key: &[u8], hash: KeyHash) -> Option<Found> {
        let mut found = self.find_live(key, hash)?;
        self.item_bytes_hint = (self.item_bytes_hint * 7 + found.total_len()) / 8;
        if self.log.tail() - found.position > self.log.reappend_age() {
            let header = ItemHeader { cas: Some(found.cas()), ..found.header };
            found = self.rewrite_item(&found, &header, true);
            self.stats.reappends += 1;
        }
        self.set_state(&found, item::FETCHED);
        Some(found)
    }

    fn flush_now(&mut self) {
        self.log.flush();
        self.census.flushed();
        self.flush_tier();
    }

    // ----- batch support -----

    #[inline]
    pub(crate) fn prefetch_bucket(&self, hash: KeyHash, both_lines: bool) {
        let bucket = hash.bucket(self.index.buckets());
        if both_lines {
            self.index.prefetch_pair(bucket);
        } else {
            crate::region::prefetch(self.index.pair_bucket(bucket));
        }
    }

    /// Starts loading the item a key's home bucket points at, if any.
    #[inline]
    pub(crate) fn prefetch_item(&self, hash: KeyHash) {
        let tag = hash.tag();
        let bucket = self.index.pair_bucket(hash.bucket(self.index.buckets()));
        if let Some(&entry) = bucket.iter().find(|&&entry| entry_tag(entry) == tag) {
            let age = self.log.age_of(entry_offset(entry));
            if age <= self.log.max_age() {
                self.log.prefetch_item(self.log.ring_index(self.log.tail() - age), self.item_bytes_hint);
            }
        }
    }

    #[cfg(test)]
    pub(crate) fn force_sweep_stride(&mut self, stride: u64) {
        self.sweep_stride = stride;
        self.sweep_next_at = self.log.tail() + stride;
    }
}

impl Storage for Partition {
    type Found = Found;

    fn mode(&self) -> Mode {
        Mode::Cache
    }

    fn store_stats(&self) -> Option<StoreStats> {
        None
    }

    #[inline(always)]
    fn read_item(&mut self, key: &[u8], hash: KeyHash) -> Option<Item<'_>> {
        match self.read_hashed(key, hash) {
            Some(found) => Some(self.item_at(&found)),
            // A flash hit answered from its read's copy (`copies`), if one is being served.
            None => self.tier.as_ref()?.copy_item(key, hash),
        }
    }

    /// Reads: each key's bucket, then the item it points at; writes: both lines of the
    /// bucket pair a write may use.
    #[inline]
    fn prefetch(&self, hashes: &[KeyHash], access: Access) {
        let hashes = &hashes[..hashes.len().min(BATCH_CHUNK)];
        match access {
            Access::Read => {
                for hash in hashes {
                    self.prefetch_bucket(*hash, false);
                }
                for hash in hashes {
                    self.prefetch_item(*hash);
                }
                // Behind a flash tier a read may miss DRAM: its flash index entry is asked next.
                if let Some(tier) = self.tier.as_ref() {
                    for hash in hashes {
                        tier.prefetch(*hash);
                    }
                }
            }
            Access::Write => {
                for hash in hashes {
                    self.prefetch_bucket(*hash, true);
                }
            }
        }
    }

    /// Sets the partition's clock (Unix seconds); the owner calls this once per batch or loop
    /// turn. A delayed flush_all takes effect here.
    fn set_clock(&mut self, now: u32) {
        self.now = now;
        self.clock_marks.mark(self.log.tail(), now);
        if self.flush.on_clock(now) {
            self.flush_now();
        }
        self.tier_clock();
    }

    /// The budget in use: index + log + scratch bytes (the log's share is what
    /// `set_memory_bytes` last gave; it takes effect as the log wraps).
    fn allocated_bytes(&self) -> usize {
        self.fixed_bytes() + self.log.capacity() as usize
    }

    /// Changes the budget (memcached's `cache_memlimit`), up to the maximum given at creation.
    /// The log's next lap has the new length; a shrink evicts the oldest items as the tail
    /// wraps and gives the ring bytes beyond the new length back to the kernel one lap later.
    /// A budget below what the index and scratch space need leaves the log at its smallest
    /// (two items of the largest size), as memcached accepts any limit and keeps its minimum.
    fn set_memory_bytes(&mut self, memory_bytes: usize) -> Result<(), ConfigError> {
        let smallest = smallest_log(self.max_item_bytes);
        let log_bytes = memory_bytes.saturating_sub(self.fixed_bytes()).max(smallest);
        let max_log_bytes = self.log.max_capacity() as usize;
        if log_bytes > max_log_bytes {
            let max_bytes = self.fixed_bytes() + max_log_bytes;
            return Err(ConfigError::AboveMaximum { memory_bytes, max_bytes });
        }
        self.log.resize(log_bytes as u64);
        self.census.fit(log_bytes as u64);
        self.budget = memory_bytes;
        Ok(())
    }

    /// Bytes of the index.
    fn index_bytes(&self) -> usize {
        self.index.bytes()
    }

    /// Bytes of the circular log.
    fn log_bytes(&self) -> usize {
        self.log.capacity() as usize
    }

    /// Calls `f` with the key of every item index bucket `bucket` points at (for dumps; the
    /// items may still be expired: `debug_item` tells).
    /// An odd bucket's keys include its pair's overflow chain's.
    fn bucket_keys(&self, bucket: usize, f: &mut dyn FnMut(&[u8])) {
        let max_age = self.log.max_age();
        let mut next = Some(bucket);
        while let Some(bucket) = next {
            for &entry in self.index.bucket(bucket).iter() {
                let age = self.log.age_of(entry_offset(entry));
                if is_item(entry) && age <= max_age {
                    f(self.key_at(self.log.tail() - age));
                }
            }
            next = self.index.next_in_chain(bucket);
        }
    }

    /// Index buckets `bucket_keys` walks.
    fn dump_buckets(&self) -> usize {
        self.index.buckets()
    }

    /// flush_all: with a delay of 0 or less every item is gone now; otherwise every item
    /// stored before the delay (memcached exptime rules) runs out is gone then. Like memcached
    /// (which flushes items not newer than the deadline minus one second), the flush happens a
    /// second before the deadline, so a delay of 1 flushes now. A new flush_all replaces a
    /// pending one.
    fn flush_all(&mut self, delay: i64) {
        if self.flush.request(delay, self.now) {
            self.flush_now();
        }
        self.persist_flush_deadline();
    }

    /// Counters of the engine's own work.
    fn stats(&self) -> EngineStats {
        EngineStats {
            log_bytes_written: self.log.tail() - self.origin,
            live_items: self.census.live(),
            live_bytes: self.census.live_bytes(),
            items_stored: self.census.stored_total(),
            evictions: self.census.evicted() + self.stats.index_evictions,
            overflow_buckets: self.index.chain_buckets() as u64,
            ..self.stats
        }
    }

    fn size_classes(&self) -> Option<[crate::types::ClassFigures; crate::types::SIZE_CLASSES]> {
        Some(self.census.classes())
    }

    fn now(&self) -> u32 {
        self.now
    }

    fn header(found: &Found) -> &ItemHeader {
        &found.header
    }

    fn cas(found: &Found) -> u64 {
        found.cas()
    }

    fn size(found: &Found) -> usize {
        found.total_len()
    }

    fn lookup(&mut self, key: &[u8], hash: KeyHash) -> Option<Found> {
        self.find_live(key, hash)
    }

    fn read(&mut self, key: &[u8], hash: KeyHash) -> Option<Found> {
        self.read_hashed(key, hash)
    }

    fn item(&self, found: &Found) -> Item<'_> {
        self.item_at(found)
    }

    fn value(&self, found: &Found) -> &[u8] {
        self.value_of(found)
    }

    fn set_state(&mut self, found: &Found, bits: u8) {
        Partition::set_state(self, found, bits);
        // Stale and token state are part of what a flash copy must match.
        if bits & (item::STALE | item::TOKEN_SENT) != 0 {
            self.invalidate_found(found);
        }
    }

    fn write(
        &mut self,
        hash: KeyHash,
        header: &ItemHeader,
        key: &[u8],
        value: NewValue<'_, Found>,
        // The log appends and installs by tag: the old item needs no finding.
        _prior: Prior<Found>,
    ) -> Result<u64, EngineError> {
        let cas = match value {
            NewValue::Parts(parts) => self.write_item(hash, header, key, parts),
            NewValue::Combined { old, data, old_first } => {
                self.write_combined(hash, header, key, &old, data, old_first)
            }
            NewValue::Counter(counter) => {
                let header = &self.with_cas_field(header);
                let (position, value_start) = self.start_item(header, key);
                counter.write(&mut self.log.bytes_from_mut(value_start)[..counter.value_len]);
                self.install(hash, key, header, position);
                cleaner::cas_of(header, position)
            }
        };
        // After the write: spilling during it may have put the old version on flash.
        self.invalidate_flash(hash);
        Ok(cas)
    }

    fn forget_absent(&mut self, hash: KeyHash) {
        self.invalidate_flash(hash);
    }

    fn remove(&mut self, found: &Found) {
        self.invalidate_found(found);
        self.index.set(found.slot, 0);
        self.census.removed(found.position, &found.header);
    }

    fn rewrite(&mut self, found: &Found, header: &ItemHeader) -> Result<Found, EngineError> {
        // A copy at a new position: with `cas` None its implicit CAS is new and unique.
        let found = self.rewrite_item(found, header, false);
        self.invalidate_found(&found);
        Ok(found)
    }

    /// In place when the header keeps its size; otherwise the item is copied forward.
    fn set_expiry(&mut self, found: Found, expiry: u32) -> Result<Found, EngineError> {
        let found = match (found.header.expiry_field(), expiry) {
            (None, 0) => found,
            (Some(field), expiry) if expiry != 0 => {
                let at = found.ring_index + field;
                self.published.begin_in_place();
                self.log.bytes_from_mut(at)[..4].copy_from_slice(&expiry.to_le_bytes());
                self.published.end_in_place();
                Found { header: ItemHeader { expiry, ..found.header }, ..found }
            }
            _ => {
                let header = ItemHeader { expiry, cas: Some(found.cas()), ..found.header };
                self.rewrite_item(&found, &header, false)
            }
        };
        self.invalidate_found(&found);
        Ok(found)
    }

    fn written_at(&self, found: &Found) -> u32 {
        self.clock_marks.time_at(found.position)
    }

    fn max_item_bytes(&self) -> usize {
        self.max_item_bytes
    }

    fn flash(&mut self) -> Option<&mut dyn crate::tiering::FlashTier> {
        if self.tier.is_some() {
            Some(self)
        } else {
            None
        }
    }

    fn flash_ref(&self) -> Option<&dyn crate::tiering::FlashTier> {
        if self.tier.is_some() {
            Some(self)
        } else {
            None
        }
    }
}

#[cfg(test)]
impl Partition {
    /// Moves an empty partition's log to start at `position`, to test 48-bit wrap-around.
    pub(crate) fn start_log_at(&mut self, position: u64) {
        assert_eq!(self.log.tail(), 0);
        self.log.start_at(position);
        self.clean_cursor = position;
        self.sweep_next_at = position + self.sweep_stride;
    }

    /// Leaves the index at most `buckets` overflow buckets.
    pub(crate) fn cap_overflow(&mut self, buckets: usize) {
        self.index.cap_overflow(buckets);
    }

    /// Entries that are non-empty but point outside the live window.
    pub(crate) fn stale_entries(&self) -> usize {
        let max_age = self.log.max_age();
        self.index
            .all_slots()
            .map(|slot| self.index.get(slot))
            .filter(|&entry| is_item(entry) && self.log.age_of(entry_offset(entry)) > max_age)
            .count()
    }
}
