//! Either partition kind behind one type, for callers that choose the mode at start-up (the
//! server's `--mode`): every operation forwards to the cache-mode `Partition` or the store-mode
//! `StorePartition`.

use crate::config::{ConfigError, PartitionConfig};
use crate::hash::KeyHash;
use crate::cache::Partition;
use crate::store::{StoreConfig, StorePartition, StoreStats};
use crate::types::{
    ArithOutcome, ArithRequest, DeleteOutcome, EngineError, EngineStats, Item, ItemDebug, MetaGet, MetaItem,
    StoreOutcome, StoreRequest,
};

/// How a partition keeps its items.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// MICA's cache mode: a circular log and a lossy index; old items make room for new ones.
    Cache,
    /// MICA's store mode: nothing is evicted; a write without room fails with `OutOfMemory`.
    Store,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Cache => "cache",
            Mode::Store => "store",
        }
    }
}

/// A partition of either kind.
// One per worker, created once and never moved on the request path: the size difference
// between the variants (the allocator's free-list heads live inline) costs nothing.
#[allow(clippy::large_enum_variant)]
pub enum AnyPartition {
    Cache(Partition),
    Store(StorePartition),
}

macro_rules! forward {
    () => {};
    (fn $name:ident(&mut self $(, $arg:ident: $ty:ty)*) -> $ret:ty; $($rest:tt)*) => {
        #[inline]
        pub fn $name(&mut self $(, $arg: $ty)*) -> $ret {
            match self {
                AnyPartition::Cache(partition) => partition.$name($($arg),*),
                AnyPartition::Store(partition) => partition.$name($($arg),*),
            }
        }
        forward!($($rest)*);
    };
    (fn $name:ident(&self $(, $arg:ident: $ty:ty)*) -> $ret:ty; $($rest:tt)*) => {
        #[inline]
        pub fn $name(&self $(, $arg: $ty)*) -> $ret {
            match self {
                AnyPartition::Cache(partition) => partition.$name($($arg),*),
                AnyPartition::Store(partition) => partition.$name($($arg),*),
            }
        }
        forward!($($rest)*);
    };
}

impl AnyPartition {
    /// A partition of `mode` with `config`'s budget, item limit and expected item size.
    pub fn new(mode: Mode, config: &PartitionConfig) -> Result<AnyPartition, ConfigError> {
        Ok(match mode {
            Mode::Cache => AnyPartition::Cache(Partition::new(config)?),
            Mode::Store => AnyPartition::Store(StorePartition::new(&StoreConfig {
                memory_bytes: config.memory_bytes,
                max_item_bytes: config.max_item_bytes,
                expected_item_bytes: config.expected_item_bytes,
            })?),
        })
    }

    pub fn mode(&self) -> Mode {
        match self {
            AnyPartition::Cache(_) => Mode::Cache,
            AnyPartition::Store(_) => Mode::Store,
        }
    }

    /// Store mode's memory figures (None in cache mode).
    pub fn store_stats(&self) -> Option<StoreStats> {
        match self {
            AnyPartition::Cache(_) => None,
            AnyPartition::Store(partition) => Some(partition.stats()),
        }
    }

    /// The engine counters `stats` reports (in store mode: items, stores; nothing is evicted).
    pub fn stats(&self) -> EngineStats {
        match self {
            AnyPartition::Cache(partition) => partition.stats(),
            AnyPartition::Store(partition) => {
                let stats = partition.stats();
                EngineStats {
                    live_items: stats.live_items,
                    items_stored: stats.items_stored,
                    log_bytes_written: stats.managed_bytes - stats.free_bytes,
                    ..EngineStats::default()
                }
            }
        }
    }

    /// Changes the memory budget (`cache_memlimit`): cache mode moves its log's length within
    /// the maximum given at creation; store mode cannot move its arena (`NotResizable`).
    pub fn set_memory_bytes(&mut self, memory_bytes: usize) -> Result<(), ConfigError> {
        match self {
            AnyPartition::Cache(partition) => partition.set_memory_bytes(memory_bytes),
            AnyPartition::Store(_) => Err(ConfigError::NotResizable),
        }
    }

    /// Bytes of item memory: the log (cache) or the allocator's arena (store).
    pub fn log_bytes(&self) -> usize {
        match self {
            AnyPartition::Cache(partition) => partition.log_bytes(),
            AnyPartition::Store(partition) => partition.stats().managed_bytes as usize,
        }
    }

    /// One bounded step of a walk over every live item (memcached's `lru_crawler metadump`):
    /// visits the index buckets from `cursor` on, at most `buckets` of them, calling `f` with
    /// each live item's key and details; returns where the next step starts (None: done).
    pub fn dump_step(&mut self, cursor: usize, buckets: usize, f: &mut dyn FnMut(&[u8], &ItemDebug)) -> Option<usize> {
        let total = match self {
            AnyPartition::Cache(partition) => partition.dump_buckets(),
            AnyPartition::Store(partition) => partition.dump_buckets(),
        };
        let end = cursor.saturating_add(buckets).min(total);
        let mut keys = Vec::new();
        let mut lengths = Vec::new();
        let mut collect = |key: &[u8]| {
            keys.extend_from_slice(key);
            lengths.push(key.len());
        };
        for bucket in cursor..end {
            match self {
                AnyPartition::Cache(partition) => partition.bucket_keys(bucket, &mut collect),
                AnyPartition::Store(partition) => partition.bucket_keys(bucket, &mut collect),
            }
        }
        let mut at = 0;
        for length in lengths {
            let key = &keys[at..at + length];
            at += length;
            if let Ok(Some(debug)) = self.debug_item(key) {
                f(key, &debug);
            }
        }
        (end < total).then_some(end)
    }

    forward! {
        fn set_clock(&mut self, now: u32) -> ();
        fn now(&self) -> u32;
        fn max_item_bytes(&self) -> usize;
        fn allocated_bytes(&self) -> usize;
        fn index_bytes(&self) -> usize;
        fn prefetch_hashes(&self, hashes: &[KeyHash]) -> ();
        fn get(&mut self, key: &[u8]) -> Result<Option<Item<'_>>, EngineError>;
        fn get_and_touch(&mut self, key: &[u8], exptime: i64) -> Result<Option<Item<'_>>, EngineError>;
        fn set(&mut self, key: &[u8], value: &[u8], flags: u32, exptime: i64) -> Result<u64, EngineError>;
        fn store(&mut self, request: &StoreRequest<'_>) -> Result<StoreOutcome, EngineError>;
        fn store_invalidating(&mut self, request: &StoreRequest<'_>) -> Result<StoreOutcome, EngineError>;
        fn delete(&mut self, key: &[u8], cas: u64) -> Result<DeleteOutcome, EngineError>;
        fn invalidate(&mut self, key: &[u8], cas: u64, exptime: Option<i64>) -> Result<DeleteOutcome, EngineError>;
        fn arith(&mut self, key: &[u8], request: &ArithRequest) -> Result<ArithOutcome, EngineError>;
        fn touch(&mut self, key: &[u8], exptime: i64) -> Result<bool, EngineError>;
        fn meta_get(&mut self, key: &[u8], request: &MetaGet) -> Result<Option<MetaItem<'_>>, EngineError>;
        fn debug_item(&mut self, key: &[u8]) -> Result<Option<ItemDebug>, EngineError>;
        fn flush_all(&mut self, delay: i64) -> ();
    }
}

impl crate::batch::sealed::Hashed for AnyPartition {
    fn prefetch_for_get(&self, hashes: &[KeyHash]) {
        match self {
            AnyPartition::Cache(partition) => partition.prefetch_for_get(hashes),
            AnyPartition::Store(partition) => partition.prefetch_for_get(hashes),
        }
    }

    fn prefetch_for_set(&self, hashes: &[KeyHash]) {
        match self {
            AnyPartition::Cache(partition) => partition.prefetch_for_set(hashes),
            AnyPartition::Store(partition) => partition.prefetch_for_set(hashes),
        }
    }

    fn get_hashed_item(&mut self, key: &[u8], hash: KeyHash) -> Result<Option<Item<'_>>, EngineError> {
        match self {
            AnyPartition::Cache(partition) => partition.get_hashed_item(key, hash),
            AnyPartition::Store(partition) => partition.get_hashed_item(key, hash),
        }
    }

    fn set_hashed_item(
        &mut self,
        key: &[u8],
        hash: KeyHash,
        value: &[u8],
        flags: u32,
        exptime: i64,
    ) -> Result<u64, EngineError> {
        match self {
            AnyPartition::Cache(partition) => partition.set_hashed_item(key, hash, value, flags, exptime),
            AnyPartition::Store(partition) => partition.set_hashed_item(key, hash, value, flags, exptime),
        }
    }
}
