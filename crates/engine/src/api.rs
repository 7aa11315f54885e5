//! The seam between the server and storage. `Engine` is everything a caller (the server, the
//! benchmarks, the tests) may ask of one partition: memcached's operations, batches, the
//! clock, memory and counters, and the bounded walk behind dumps. memcached's operations are
//! written once (`ops.rs`) over the primitives a partition kind provides (`storage::Storage`);
//! every such kind is an `Engine` through the one impl below. `AnyPartition` is an `Engine`
//! that dispatches to the kind chosen at start-up; a future kind (DRAM + flash) either
//! provides `Storage` or implements `Engine` itself, and joins `AnyPartition` as one variant.

use crate::atomics::{AtomicOutcome, AtomicRequest};
use crate::batch::{in_chunks, SetRequest};
use crate::config::{ConfigError, Mode};
use crate::hash::KeyHash;
use crate::ops;
use crate::storage::{Access, Prior, Storage};
use crate::tiering::FlashTier;
use crate::types::{
    check_key, ArithOutcome, ArithRequest, DeleteOutcome, EngineError, EngineStats, Item, ItemDebug, MetaGet, MetaItem,
    StoreOutcome, StoreRequest, StoreStats,
};
use crate::vectors::{ElemType, VectorUpdate};

/// One partition, owned by one thread. Every operation checks its key first; an error leaves
/// the partition unchanged.
pub trait Engine {
    // ----- the partition -----

    /// How this partition keeps its items.
    fn mode(&self) -> Mode;
    /// Sets the clock (Unix seconds); the owner calls this once per batch or loop turn. A
    /// delayed `flush_all` takes effect here.
    fn set_clock(&mut self, now: u32);
    /// The partition's current time.
    fn now(&self) -> u32;
    /// The largest item (header + key + value) accepted.
    fn max_item_bytes(&self) -> usize;
    /// The counters `stats` reports (store mode: items and stores; nothing is evicted).
    fn stats(&self) -> EngineStats;
    /// Items by memcached's size classes (None in store mode).
    fn size_classes(&self) -> Option<[crate::types::ClassFigures; crate::types::SIZE_CLASSES]>;
    /// Store mode's memory figures (None in cache mode).
    fn store_stats(&self) -> Option<StoreStats>;
    /// The memory budget in use (index, log or arena, scratch).
    fn allocated_bytes(&self) -> usize;
    /// Bytes of the index.
    fn index_bytes(&self) -> usize;
    /// Bytes of item memory: the log (cache) or the allocator's arena (store).
    fn log_bytes(&self) -> usize;
    /// Changes the memory budget (`cache_memlimit`): cache mode moves its log's length within
    /// the maximum given at creation; store mode cannot move its arena (`NotResizable`).
    fn set_memory_bytes(&mut self, memory_bytes: usize) -> Result<(), ConfigError>;
    /// flush_all: every item is gone now (delay <= 0) or, with memcached's timing, a second
    /// before the delay runs out; a new flush_all replaces a pending one.
    fn flush_all(&mut self, delay: i64);

    // ----- memcached's operations -----

    /// get: the item, marked fetched.
    fn get(&mut self, key: &[u8]) -> Result<Option<Item<'_>>, EngineError>;
    /// `get` of a key whose hash is known (from a batch's prefetch).
    fn get_hashed(&mut self, key: &[u8], hash: KeyHash) -> Result<Option<Item<'_>>, EngineError>;
    /// set: stores unconditionally; returns the new CAS.
    fn set(&mut self, key: &[u8], value: &[u8], flags: u32, exptime: i64) -> Result<u64, EngineError>;
    /// `set` of a key whose hash is known.
    fn set_hashed(
        &mut self,
        key: &[u8],
        hash: KeyHash,
        value: &[u8],
        flags: u32,
        exptime: i64,
    ) -> Result<u64, EngineError>;
    /// set, add, replace, append, prepend and cas with memcached's semantics.
    fn store(&mut self, request: &StoreRequest<'_>) -> Result<StoreOutcome, EngineError>;
    /// ms with `I` and a CAS: a late writer's value is stored stale (see `ops`).
    fn store_invalidating(&mut self, request: &StoreRequest<'_>) -> Result<StoreOutcome, EngineError>;
    /// delete, optionally only if the item has CAS `cas` (0 = any).
    fn delete(&mut self, key: &[u8], cas: u64) -> Result<DeleteOutcome, EngineError>;
    /// md with `I`: marks the item stale with a new CAS instead of deleting it.
    fn invalidate(&mut self, key: &[u8], cas: u64, exptime: Option<i64>) -> Result<DeleteOutcome, EngineError>;
    /// incr / decr with memcached's semantics.
    fn arith(&mut self, key: &[u8], request: &ArithRequest) -> Result<ArithOutcome, EngineError>;
    /// KV-Direct atomics on one key, applied in order with one lookup and one write (see
    /// `atomics`); every request must have the same `CounterKind`. One answer per request goes
    /// to `out`.
    fn atomic_many(
        &mut self,
        key: &[u8],
        requests: &[AtomicRequest],
        out: &mut Vec<Result<AtomicOutcome, EngineError>>,
    ) -> Result<(), EngineError>;
    /// A vector of `len` zeroes of type `elem` (see `vectors`), replacing any item of the key.
    fn vector_create(
        &mut self,
        key: &[u8],
        elem: ElemType,
        len: u32,
        flags: u32,
        exptime: i64,
    ) -> Result<u64, EngineError>;
    /// Vector updates on one key, in order, with one lookup and one write; per update Ok(true)
    /// applied, Ok(false) no such key, or the error.
    fn vector_update_many(
        &mut self,
        key: &[u8],
        updates: &[VectorUpdate<'_>],
        out: &mut Vec<Result<bool, EngineError>>,
    ) -> Result<(), EngineError>;
    /// touch: sets a new exptime; false if the key is absent. The CAS does not change.
    fn touch(&mut self, key: &[u8], exptime: i64) -> Result<bool, EngineError>;
    /// gat / gats: touch, then return the item.
    fn get_and_touch(&mut self, key: &[u8], exptime: i64) -> Result<Option<Item<'_>>, EngineError>;
    /// mg: a get with memcached's meta semantics (see `ops::meta_get`).
    fn meta_get(&mut self, key: &[u8], request: &MetaGet) -> Result<Option<MetaItem<'_>>, EngineError>;
    /// me: what memcached's meta debug reports, without counting as a read.
    fn debug_item(&mut self, key: &[u8]) -> Result<Option<ItemDebug>, EngineError>;

    // ----- batches -----

    /// Starts loading what operations of `access` on these keys will touch (at most
    /// `BATCH_CHUNK` of them are used). Changes nothing.
    fn prefetch(&self, hashes: &[KeyHash], access: Access);

    /// GETs every key in order, calling `on_result(i, result)` for key i before looking up
    /// key i + 1. Results equal those of `get` one key at a time.
    fn get_batch<K, F>(&mut self, keys: &[K], mut on_result: F)
    where
        Self: Sized,
        K: AsRef<[u8]>,
        F: FnMut(usize, Result<Option<Item<'_>>, EngineError>),
    {
        in_chunks(
            self,
            keys,
            |key| key.as_ref(),
            |partition, hashes| partition.prefetch(hashes, Access::Read),
            |partition, i, key, hash| on_result(i, partition.get_hashed(key.as_ref(), hash)),
        );
    }

    /// SETs every request in order, calling `on_result(i, cas or error)` for each. Results
    /// equal those of `set` one request at a time.
    fn set_batch<F>(&mut self, requests: &[SetRequest<'_>], mut on_result: F)
    where
        Self: Sized,
        F: FnMut(usize, Result<u64, EngineError>),
    {
        in_chunks(
            self,
            requests,
            |request| request.key,
            |partition, hashes| partition.prefetch(hashes, Access::Write),
            |partition, i, r, hash| on_result(i, partition.set_hashed(r.key, hash, r.value, r.flags, r.exptime)),
        );
    }

    // ----- walks -----

    /// Index buckets a walk visits (`bucket_keys`).
    fn dump_buckets(&self) -> usize;
    /// Calls `f` with the key of every item index bucket `bucket` leads to (expired ones too:
    /// `debug_item` tells).
    fn bucket_keys(&self, bucket: usize, f: &mut dyn FnMut(&[u8]));

    // ----- a flash tier behind the partition (cache mode with `AnyPartition::attach_flash`) -----

    /// The flash tier behind this partition, if it has one: every flash call goes through it.
    fn flash(&mut self) -> Option<&mut dyn FlashTier>;
    /// `flash`, to read.
    fn flash_ref(&self) -> Option<&dyn FlashTier>;

    /// One bounded step of a walk over every live item (memcached's `lru_crawler metadump`):
    /// visits the index buckets from `cursor` on, at most `buckets` of them, calling `f` with
    /// each live item's key and details; returns where the next step starts (None: done).
    /// With a flash tier, the walk goes on with one flash segment per step.
    fn dump_step(&mut self, cursor: usize, buckets: usize, f: &mut dyn FnMut(&[u8], &ItemDebug)) -> Option<usize> {
        let total = self.dump_buckets();
        if cursor >= total {
            return self.flash().is_some_and(|tier| tier.dump_flash(cursor - total, f)).then_some(cursor + 1);
        }
        let end = cursor.saturating_add(buckets).min(total);
        let mut keys = Vec::new();
        let mut lengths = Vec::new();
        for bucket in cursor..end {
            self.bucket_keys(bucket, &mut |key| {
                keys.extend_from_slice(key);
                lengths.push(key.len());
            });
        }
        let mut at = 0;
        for length in lengths {
            let key = &keys[at..at + length];
            at += length;
            if let Ok(Some(debug)) = self.debug_item(key) {
                f(key, &debug);
            }
        }
        (end < total || self.flash_ref().is_some()).then_some(end)
    }
}

/// Every partition kind that provides the storage primitives runs memcached's operations of
/// `ops.rs` over them.
impl<S: Storage> Engine for S {
    #[inline]
    fn mode(&self) -> Mode {
        Storage::mode(self)
    }

    #[inline]
    fn set_clock(&mut self, now: u32) {
        Storage::set_clock(self, now);
    }

    #[inline]
    fn now(&self) -> u32 {
        Storage::now(self)
    }

    #[inline]
    fn max_item_bytes(&self) -> usize {
        Storage::max_item_bytes(self)
    }

    fn stats(&self) -> EngineStats {
        Storage::stats(self)
    }

    fn size_classes(&self) -> Option<[crate::types::ClassFigures; crate::types::SIZE_CLASSES]> {
        Storage::size_classes(self)
    }

    fn store_stats(&self) -> Option<StoreStats> {
        Storage::store_stats(self)
    }

    fn allocated_bytes(&self) -> usize {
        Storage::allocated_bytes(self)
    }

    fn index_bytes(&self) -> usize {
        Storage::index_bytes(self)
    }

    fn log_bytes(&self) -> usize {
        Storage::log_bytes(self)
    }

    fn set_memory_bytes(&mut self, memory_bytes: usize) -> Result<(), ConfigError> {
        Storage::set_memory_bytes(self, memory_bytes)
    }

    fn flush_all(&mut self, delay: i64) {
        Storage::flush_all(self, delay);
    }

    #[inline(always)]
    fn get(&mut self, key: &[u8]) -> Result<Option<Item<'_>>, EngineError> {
        check_key(key)?;
        Ok(self.read_item(key, KeyHash::of(key)))
    }

    #[inline]
    fn get_hashed(&mut self, key: &[u8], hash: KeyHash) -> Result<Option<Item<'_>>, EngineError> {
        check_key(key)?;
        Ok(self.read_item(key, hash))
    }

    #[inline]
    fn set(&mut self, key: &[u8], value: &[u8], flags: u32, exptime: i64) -> Result<u64, EngineError> {
        check_key(key)?;
        ops::set(self, key, KeyHash::of(key), value, flags, exptime, Prior::Unknown)
    }

    #[inline]
    fn set_hashed(
        &mut self,
        key: &[u8],
        hash: KeyHash,
        value: &[u8],
        flags: u32,
        exptime: i64,
    ) -> Result<u64, EngineError> {
        check_key(key)?;
        ops::set(self, key, hash, value, flags, exptime, Prior::Unknown)
    }

    fn store(&mut self, request: &StoreRequest<'_>) -> Result<StoreOutcome, EngineError> {
        check_key(request.key)?;
        ops::store(self, request)
    }

    fn store_invalidating(&mut self, request: &StoreRequest<'_>) -> Result<StoreOutcome, EngineError> {
        check_key(request.key)?;
        ops::store_invalidating(self, request)
    }

    fn delete(&mut self, key: &[u8], cas: u64) -> Result<DeleteOutcome, EngineError> {
        check_key(key)?;
        Ok(ops::delete(self, key, cas))
    }

    fn invalidate(&mut self, key: &[u8], cas: u64, exptime: Option<i64>) -> Result<DeleteOutcome, EngineError> {
        check_key(key)?;
        ops::invalidate(self, key, cas, exptime)
    }

    fn arith(&mut self, key: &[u8], request: &ArithRequest) -> Result<ArithOutcome, EngineError> {
        check_key(key)?;
        ops::arith(self, key, request)
    }

    fn atomic_many(
        &mut self,
        key: &[u8],
        requests: &[AtomicRequest],
        out: &mut Vec<Result<AtomicOutcome, EngineError>>,
    ) -> Result<(), EngineError> {
        check_key(key)?;
        debug_assert!(requests.windows(2).all(|w| w[0].kind == w[1].kind), "one counter kind per call");
        crate::atomics::atomic_many(self, key, requests, out)
    }

    fn vector_create(
        &mut self,
        key: &[u8],
        elem: ElemType,
        len: u32,
        flags: u32,
        exptime: i64,
    ) -> Result<u64, EngineError> {
        check_key(key)?;
        crate::vectors::vector_create(self, key, elem, len, flags, exptime)
    }

    fn vector_update_many(
        &mut self,
        key: &[u8],
        updates: &[VectorUpdate<'_>],
        out: &mut Vec<Result<bool, EngineError>>,
    ) -> Result<(), EngineError> {
        check_key(key)?;
        crate::vectors::vector_update_many(self, key, updates, out)
    }

    fn touch(&mut self, key: &[u8], exptime: i64) -> Result<bool, EngineError> {
        check_key(key)?;
        Ok(ops::touch(self, key, exptime)?.is_some())
    }

    fn get_and_touch(&mut self, key: &[u8], exptime: i64) -> Result<Option<Item<'_>>, EngineError> {
        check_key(key)?;
        let found = ops::touch(self, key, exptime)?;
        Ok(found.map(|found| self.item(&found)))
    }

    fn meta_get(&mut self, key: &[u8], request: &MetaGet) -> Result<Option<MetaItem<'_>>, EngineError> {
        check_key(key)?;
        ops::meta_get(self, key, request)
    }

    fn debug_item(&mut self, key: &[u8]) -> Result<Option<ItemDebug>, EngineError> {
        check_key(key)?;
        Ok(ops::debug_item(self, key))
    }

    #[inline]
    fn prefetch(&self, hashes: &[KeyHash], access: Access) {
        Storage::prefetch(self, hashes, access);
    }

    fn dump_buckets(&self) -> usize {
        Storage::dump_buckets(self)
    }

    fn bucket_keys(&self, bucket: usize, f: &mut dyn FnMut(&[u8])) {
        Storage::bucket_keys(self, bucket, f);
    }

    fn flash(&mut self) -> Option<&mut dyn FlashTier> {
        Storage::flash(self)
    }

    fn flash_ref(&self) -> Option<&dyn FlashTier> {
        Storage::flash_ref(self)
    }
}
