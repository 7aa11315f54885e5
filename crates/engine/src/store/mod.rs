//! Store mode (MICA's store mode): a partition that never evicts, built from the lossless
//! chained index (`chain_index`) and the segregated-fits allocator (`alloc`). It serves every
//! operation of the cache-mode partition with the same meaning (through `ops`); a write that
//! finds no memory or no spare bucket fails with `EngineError::OutOfMemory` and changes nothing,
//! and every item it acknowledged stays readable. It must never drop or move an acknowledged
//! item except on the user's delete, overwrite, expiry or flush_all.
//!
//! ```text
//!  item (one allocator block):  [ block header 4 | item header, CAS always explicit | key | value ]
//!  fixed cost per item: 4 (block) + 3 (control, key length, value length) + 8 (CAS) = 15 bytes,
//!  plus 4 more with flags and 4 with an expiry, plus padding to 8 bytes
//! ```

pub(crate) mod alloc;
pub(crate) mod chain_index;

use crate::batch::BATCH_CHUNK;
use crate::config::{ConfigError, Mode, MAX_ITEM_BYTES_CEILING, MAX_KEY_BYTES, MIN_ITEM_BYTES};
use crate::hash::KeyHash;
use crate::item::{self, ItemHeader};
use crate::ops;
use crate::storage::{Access, NewValue, Prior, Storage};
use crate::store::alloc::{Allocator, BLOCK_HEADER_BYTES};
use crate::store::chain_index::{ChainIndex, CHAIN_ENTRIES};
use crate::time::{is_expired, unix_now};
use crate::types::{keys_equal, EngineError, EngineStats, Item, StoreStats};

/// Bytes every item costs besides its key, value, flags and expiry: block header, item header
/// with an explicit CAS.
pub const STORE_FIXED_HEADER_BYTES: usize = BLOCK_HEADER_BYTES + 3 + 8;

/// Spare buckets per main bucket (MICA uses 10%).
const SPARE_FRACTION: f64 = 0.10;
/// Share of the main buckets' entries an index sized for a full arena expects to fill.
const LOAD: f64 = 0.6;

/// How a store-mode partition is sized.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreConfig {
    /// Everything the partition may allocate: index (main and spare buckets) and arena.
    pub memory_bytes: usize,
    /// Largest item (header + key + value) accepted.
    pub max_item_bytes: usize,
    /// Typical key + value size: sizes the index at about 60% load for a full arena of such
    /// items (smaller items fill the arena later than the spare buckets run out).
    pub expected_item_bytes: usize,
}

/// A store-mode partition, owned by one thread.
pub struct StorePartition {
    index: ChainIndex,
    alloc: Allocator,
    max_item_bytes: usize,
    next_cas: u64,
    now: u32,
    flush: ops::FlushSchedule,
    stats: StoreStats,
}

/// An item found: its index slot, its location (payload offset), its key's hash and header.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Found {
    slot: crate::store::chain_index::ChainSlot,
    location: usize,
    hash: KeyHash,
    header: ItemHeader,
    header_len: usize,
}

impl StorePartition {
    /// A store-mode partition sized by `config`, or why it cannot be.
    pub fn new(config: &StoreConfig) -> Result<StorePartition, ConfigError> {
        if !(MIN_ITEM_BYTES..=MAX_ITEM_BYTES_CEILING).contains(&config.max_item_bytes) {
            return Err(ConfigError::MaxItemOutOfRange(config.max_item_bytes));
        }
        // Each item: its block (fixed header, key and value, padded to 8 bytes) and its share
        // of the index at 60% load (7 entries per 64-byte bucket, plus 10% spare buckets: at
        // that load about 6% of buckets overflow into a spare, so the arena fills first).
        let block = (STORE_FIXED_HEADER_BYTES + config.expected_item_bytes.max(1)).div_ceil(8) * 8;
        let index_per_item = 64.0 * (1.0 + SPARE_FRACTION) / (CHAIN_ENTRIES as f64 * LOAD);
        let items = (config.memory_bytes as f64 / (block as f64 + index_per_item)) as usize;
        let buckets = ((items as f64 / (CHAIN_ENTRIES as f64 * LOAD)).ceil() as usize).clamp(1, 1 << 32);
        let spares = ((buckets as f64 * SPARE_FRACTION) as usize).max(1);
        let index_bytes = (buckets + spares) * 64;
        let needed_bytes = index_bytes + 2 * config.max_item_bytes;
        if config.memory_bytes < needed_bytes {
            return Err(ConfigError::TooSmall { memory_bytes: config.memory_bytes, needed_bytes });
        }
        let arena_bytes = config.memory_bytes - index_bytes;
        let index = ChainIndex::new(buckets, spares).ok_or(ConfigError::OutOfMemory(index_bytes))?;
        let alloc = Allocator::new(arena_bytes).ok_or(ConfigError::TooLarge(arena_bytes))?;
        let stats = StoreStats {
            managed_bytes: alloc.stats().managed_bytes as u64,
            spare_buckets: spares as u64,
            ..StoreStats::default()
        };
        Ok(StorePartition {
            index,
            alloc,
            max_item_bytes: config.max_item_bytes,
            next_cas: 1,
            now: unix_now(),
            flush: ops::FlushSchedule::default(),
            stats,
        })
    }

    #[inline]
    /// The allocator's and index's figures.
    pub fn memory_stats(&self) -> StoreStats {
        let alloc = self.alloc.stats();
        StoreStats {
            free_bytes: alloc.free_bytes as u64,
            spare_buckets_free: self.index.spares_free() as u64,
            ..self.stats
        }
    }

    fn find(&self, key: &[u8], hash: KeyHash) -> Option<Found> {
        let alloc = &self.alloc;
        let mut decoded = None;
        let (slot, location) = self.index.find(hash, |location| {
            let bytes = alloc.bytes_from(location as usize);
            let (header, header_len) = ItemHeader::decode(bytes);
            let hit = header.key_len == key.len() && keys_equal(&bytes[header_len..header_len + key.len()], key);
            if hit {
                decoded = Some((header, header_len));
            }
            hit
        })?;
        let (header, header_len) = decoded?;
        Some(Found { slot, location: location as usize, hash, header, header_len })
    }

    /// `find`, with an expired item removed and reported absent.
    fn find_live(&mut self, key: &[u8], hash: KeyHash) -> Option<Found> {
        let found = self.find(key, hash)?;
        if is_expired(found.header.expiry, self.now) {
            Storage::remove(self, &found);
            return None;
        }
        Some(found)
    }

    fn forget(&mut self, header: &ItemHeader) {
        self.stats.live_items -= 1;
        self.stats.item_bytes -= Self::counted_bytes(header) as u64;
        self.stats.payload_bytes -= (header.key_len + header.value_len) as u64;
    }

    /// An item's size as the utilization figure counts it: its encoded header (with the CAS)
    /// plus the block header, key and value; padding excluded.
    fn counted_bytes(header: &ItemHeader) -> usize {
        BLOCK_HEADER_BYTES + header.total_len()
    }

    fn flush_now(&mut self) {
        self.index.clear();
        self.alloc.reset();
        let StoreStats { managed_bytes, spare_buckets, items_stored, .. } = self.stats;
        self.stats = StoreStats { managed_bytes, spare_buckets, items_stored, ..StoreStats::default() };
    }

    /// Writes an item (header, key and value) into the block at `location`.
    #[inline]
    fn fill_block(&mut self, location: usize, header: &ItemHeader, key: &[u8], value: &NewValue<'_, Found>) {
        let key_start = {
            let out = self.alloc.payload_mut(location);
            let key_start = header.encode(out);
            out[key_start..key_start + key.len()].copy_from_slice(key);
            key_start
        };
        let value_start = location + key_start + key.len();
        match value {
            NewValue::Parts([first, second]) => {
                let out = &mut self.alloc.payload_mut(location)[key_start + key.len()..];
                out[..first.len()].copy_from_slice(first);
                out[first.len()..first.len() + second.len()].copy_from_slice(second);
            }
            NewValue::Counter(counter) => {
                let out = &mut self.alloc.payload_mut(location)[key_start + key.len()..];
                counter.write(&mut out[..counter.value_len]);
            }
            NewValue::Combined { old, data, old_first } => {
                // The old item's block is still allocated: copy its value across the arena.
                let old_value = old.location + old.header_len + old.header.key_len;
                let old_len = old.header.value_len;
                let (at_old, at_data) = if *old_first { (0, old_len) } else { (data.len(), 0) };
                self.alloc.copy_within(old_value, value_start + at_old, old_len);
                let out = &mut self.alloc.payload_mut(location)[key_start + key.len()..];
                out[at_data..at_data + data.len()].copy_from_slice(data);
            }
        }
    }
}

impl Storage for StorePartition {
    type Found = Found;

    fn mode(&self) -> Mode {
        Mode::Store
    }

    /// The engine counters `stats` reports: items and stores (nothing is evicted).
    fn stats(&self) -> EngineStats {
        let stats = self.memory_stats();
        EngineStats {
            live_items: stats.live_items,
            live_bytes: stats.item_bytes,
            items_stored: stats.items_stored,
            log_bytes_written: stats.managed_bytes - stats.free_bytes,
            ..EngineStats::default()
        }
    }

    fn store_stats(&self) -> Option<StoreStats> {
        Some(self.memory_stats())
    }

    fn log_bytes(&self) -> usize {
        self.memory_stats().managed_bytes as usize
    }

    fn set_memory_bytes(&mut self, _memory_bytes: usize) -> Result<(), ConfigError> {
        Err(ConfigError::NotResizable)
    }

    /// Reads and writes alike: each key's home bucket, then the item it points at.
    fn prefetch(&self, hashes: &[KeyHash], _access: Access) {
        let hashes = &hashes[..hashes.len().min(BATCH_CHUNK)];
        for hash in hashes {
            self.index.prefetch(*hash);
        }
        for hash in hashes {
            if let Some(location) = self.index.first_with_tag(*hash) {
                crate::region::prefetch(self.alloc.arena_ptr(location as usize));
            }
        }
    }

    /// Sets the partition's clock (Unix seconds), once per batch; a delayed flush_all takes
    /// effect here.
    fn set_clock(&mut self, now: u32) {
        self.now = now;
        if self.flush.on_clock(now) {
            self.flush_now();
        }
    }

    /// Bytes of the index (main and spare buckets).
    fn index_bytes(&self) -> usize {
        self.index.bytes()
    }

    /// Bytes allocated at creation (index and arena).
    fn allocated_bytes(&self) -> usize {
        self.index.bytes() + self.alloc.arena_bytes()
    }

    /// flush_all, with memcached's timing (as the cache-mode partition): every item is gone
    /// now (delay <= 0), or a second before the delay runs out, and what is stored during the
    /// deadline second goes too. Flushed memory is free again.
    fn flush_all(&mut self, delay: i64) {
        if self.flush.request(delay, self.now) {
            self.flush_now();
        }
    }

    /// Starts loading, for up to `BATCH_CHUNK` keys, their home buckets and then the items
    /// those point at (as the cache-mode partition does).
    /// Calls `f` with the key of every item in the chain of main bucket `bucket` (for dumps).
    fn bucket_keys(&self, bucket: usize, f: &mut dyn FnMut(&[u8])) {
        let alloc = &self.alloc;
        self.index.chain_locations(bucket, &mut |location| {
            let bytes = alloc.bytes_from(location as usize);
            let (header, header_len) = ItemHeader::decode(bytes);
            f(&bytes[header_len..header_len + header.key_len]);
        });
    }

    /// Main index buckets `bucket_keys` walks.
    fn dump_buckets(&self) -> usize {
        self.index.buckets()
    }

    fn now(&self) -> u32 {
        self.now
    }

    fn header(found: &Found) -> &ItemHeader {
        &found.header
    }

    fn cas(found: &Found) -> u64 {
        found.header.cas.unwrap_or(0)
    }

    fn size(found: &Found) -> usize {
        found.header_len + found.header.key_len + found.header.value_len
    }

    fn lookup(&mut self, key: &[u8], hash: KeyHash) -> Option<Found> {
        self.find_live(key, hash)
    }

    fn read(&mut self, key: &[u8], hash: KeyHash) -> Option<Found> {
        let found = self.find_live(key, hash)?;
        self.set_state(&found, item::FETCHED);
        Some(found)
    }

    fn item(&self, found: &Found) -> Item<'_> {
        Item {
            value: self.value(found),
            flags: found.header.flags,
            cas: found.header.cas.unwrap_or(0),
            expiry: found.header.expiry,
            fetched: found.header.state & item::FETCHED != 0,
            stale: found.header.state & item::STALE != 0,
            token_sent: found.header.state & item::TOKEN_SENT != 0,
        }
    }

    fn value(&self, found: &Found) -> &[u8] {
        let start = found.header_len + found.header.key_len;
        &self.alloc.bytes_from(found.location)[start..start + found.header.value_len]
    }

    fn set_state(&mut self, found: &Found, bits: u8) {
        if found.header.state & bits != bits {
            self.alloc.payload_mut(found.location)[0] |= bits;
        }
    }

    #[inline]
    fn write(
        &mut self,
        hash: KeyHash,
        header: &ItemHeader,
        key: &[u8],
        value: NewValue<'_, Found>,
        prior: Prior<Found>,
    ) -> Result<u64, EngineError> {
        let cas = header.cas.unwrap_or(self.next_cas);
        let header = ItemHeader { cas: Some(cas), ..*header };
        let bytes = header.total_len();
        let existing = match prior {
            Prior::Unknown => self.find(key, hash),
            Prior::Absent => None,
            Prior::Present(found) => Some(found),
        };
        // An overwrite whose block size does not change is written in place: no allocation,
        // no free, no index change. (Not when the new value is built from the old one.)
        let same_block = !matches!(value, NewValue::Combined { .. })
            && existing.as_ref().is_some_and(|old| {
                Allocator::units_for(bytes).map(|units| units * 8) == Some(self.alloc.block_bytes(old.location))
            });
        let location = match (&existing, same_block) {
            (Some(old), true) => old.location,
            _ => self.alloc.alloc(bytes).ok_or(EngineError::OutOfMemory)?,
        };
        self.fill_block(location, &header, key, &value);
        match existing {
            Some(old) if same_block => self.forget(&old.header),
            Some(old) => {
                self.index.replace(old.slot, hash, location as u64);
                self.alloc.free(old.location);
                self.forget(&old.header);
            }
            None => {
                if !self.index.insert(hash, location as u64) {
                    self.alloc.free(location);
                    return Err(EngineError::OutOfMemory);
                }
            }
        }
        self.next_cas += 1;
        self.stats.live_items += 1;
        self.stats.items_stored += 1;
        self.stats.item_bytes += Self::counted_bytes(&header) as u64;
        self.stats.payload_bytes += (key.len() + header.value_len) as u64;
        // memcached hides whatever is stored during a delayed flush's deadline second.
        if self.flush.hides_writes(self.now) {
            self.flush_now();
        }
        Ok(cas)
    }

    fn remove(&mut self, found: &Found) {
        self.index.remove(found.slot, found.hash);
        self.alloc.free(found.location);
        self.forget(&found.header);
    }

    fn rewrite(&mut self, found: &Found, header: &ItemHeader) -> Result<Found, EngineError> {
        let mut key = [0u8; MAX_KEY_BYTES];
        let key_len = found.header.key_len;
        key[..key_len].copy_from_slice(&self.alloc.bytes_from(found.location + found.header_len)[..key_len]);
        let key = &key[..key_len];
        let value = NewValue::Combined { old: *found, data: &[], old_first: true };
        self.write(found.hash, header, key, value, Prior::Present(*found))?;
        self.find(key, found.hash).ok_or(EngineError::OutOfMemory)
    }

    fn set_expiry(&mut self, found: Found, expiry: u32) -> Result<Found, EngineError> {
        match (found.header.expiry_field(), expiry) {
            (None, 0) => Ok(found),
            (Some(field), expiry) if expiry != 0 => {
                self.alloc.payload_mut(found.location)[field..field + 4].copy_from_slice(&expiry.to_le_bytes());
                Ok(Found { header: ItemHeader { expiry, ..found.header }, ..found })
            }
            _ => {
                let header = ItemHeader { expiry, ..found.header };
                self.rewrite(&found, &header)
            }
        }
    }

    /// Store mode keeps no write times: an item reads as written now (meta `l`, `me`'s `la`).
    fn written_at(&self, _found: &Found) -> u32 {
        self.now
    }

    fn max_item_bytes(&self) -> usize {
        self.max_item_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::SetRequest;
    use crate::{DeleteOutcome, Engine};
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn small() -> StorePartition {
        StorePartition::new(&StoreConfig { memory_bytes: 256 << 10, max_item_bytes: 4096, expected_item_bytes: 200 })
            .unwrap()
    }

    #[test]
    fn writes_until_full_then_every_acknowledged_item_reads_back() {
        let mut store = small();
        let mut stored = Vec::new();
        let mut refused = 0;
        for i in 0..10_000u32 {
            let key = format!("key:{i}");
            let value = vec![(i % 251) as u8; 50 + (i as usize * 37) % 900];
            match store.set(key.as_bytes(), &value, i, 0) {
                Ok(_) => stored.push((key, value)),
                Err(EngineError::OutOfMemory) => refused += 1,
                Err(other) => panic!("{other}"),
            }
        }
        assert!(refused > 0, "the store filled up");
        for (key, value) in &stored {
            assert_eq!(store.get(key.as_bytes()).unwrap().map(|item| item.value.to_vec()), Some(value.clone()));
        }
        // Deleting half makes room again.
        for (key, _) in stored.iter().step_by(2) {
            assert_eq!(store.delete(key.as_bytes(), 0).unwrap(), DeleteOutcome::Deleted);
        }
        assert!(store.set(b"again", &[7; 500], 0, 0).is_ok());
        let stats = store.memory_stats();
        assert_eq!(stats.live_items as usize, stored.len() - stored.len().div_ceil(2) + 1);
        assert!(stats.item_bytes <= stats.managed_bytes - stats.free_bytes);
    }

    #[test]
    fn batches_give_what_single_operations_give() {
        let mut store = small();
        let keys: Vec<String> = (0..200).map(|i| format!("batch:{i}")).collect();
        let values: Vec<Vec<u8>> = (0..200).map(|i| vec![i as u8; 1 + i % 40]).collect();
        let requests: Vec<SetRequest<'_>> = keys
            .iter()
            .zip(&values)
            .step_by(2)
            .map(|(key, value)| SetRequest { key: key.as_bytes(), value, flags: 3, exptime: 0 })
            .collect();
        let mut stored = 0;
        store.set_batch(&requests, |_, result| stored += usize::from(result.is_ok()));
        assert_eq!(stored, 100);
        let mut seen = Vec::new();
        store.get_batch(&keys, |i, result| {
            seen.push((i, result.unwrap().map(|item| (item.value.to_vec(), item.flags))))
        });
        for (i, got) in seen {
            let want = (i % 2 == 0).then(|| (values[i].clone(), 3));
            assert_eq!(got, want, "key {i}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// Against a HashMap, exactly, with random sizes, overwrites and deletes, through the
        /// point where memory runs out and after: a refused write changes nothing.
        #[test]
        fn matches_a_map_exactly(ops in prop::collection::vec((0u8..4, 0u16..400, 0usize..3000), 1..500)) {
            let mut store = small();
            let mut model: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
            for (op, key, size) in ops {
                let key = format!("k{key}").into_bytes();
                match op {
                    0 | 1 => {
                        let value = vec![size as u8; size];
                        match store.set(&key, &value, 0, 0) {
                            Ok(_) => {
                                model.insert(key, value);
                            }
                            Err(EngineError::OutOfMemory) => {}
                            Err(other) => prop_assert!(false, "{}", other),
                        }
                    }
                    2 => {
                        let deleted = store.delete(&key, 0).unwrap() == DeleteOutcome::Deleted;
                        prop_assert_eq!(deleted, model.remove(&key).is_some());
                    }
                    _ => {
                        let got = store.get(&key).unwrap().map(|item| item.value.to_vec());
                        prop_assert_eq!(got.as_ref(), model.get(&key));
                    }
                }
                prop_assert_eq!(store.memory_stats().live_items as usize, model.len());
            }
            for (key, value) in &model {
                let got = store.get(key).unwrap().map(|item| item.value.to_vec());
                prop_assert_eq!(got.as_ref(), Some(value));
            }
        }
    }
}
