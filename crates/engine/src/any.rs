//! Either partition kind behind one type, for callers that choose the mode at start-up (the
//! server's `--mode`): an `Engine` whose every method runs on the kind inside. A new kind is one
//! variant here and one arm in `each_kind!`.

use crate::api::Engine;
use crate::atomics::{AtomicOutcome, AtomicRequest};
use crate::cache::Partition;
use crate::config::{ConfigError, Mode, PartitionConfig};
use crate::flash::FlashStore;
use crate::hash::KeyHash;
use crate::storage::Access;
use crate::store::{StoreConfig, StorePartition};
use crate::tiering::{AttachError, FlashTier};
use crate::types::{
    ArithOutcome, ArithRequest, DeleteOutcome, EngineError, EngineStats, Item, ItemDebug, MetaGet, MetaItem,
    StoreOutcome, StoreRequest, StoreStats,
};
use crate::vectors::{ElemType, VectorUpdate};

/// A partition of either kind.
// One per worker, created once and never moved on the request path: the size difference
// between the variants (the allocator's free-list heads live inline) costs nothing.
#[allow(clippy::large_enum_variant)]
pub enum AnyPartition {
    /// A cache-mode partition (MICA's log and lossy index).
    Cache(Partition),
    /// A store-mode partition (lossless index, segregated fits).
    Store(StorePartition),
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

    /// A read-only view for other threads (MICA's CREW); cache mode only (store mode's
    /// readers go to its owner).
    pub fn crew_reader(&self) -> Option<crate::cache::crew::CrewReader> {
        match self {
            AnyPartition::Cache(p) => Some(p.crew_reader()),
            AnyPartition::Store(_) => None,
        }
    }

    /// Applies other threads' fetched-bit notices (`Partition::apply_crew_notices`).
    #[inline]
    pub fn apply_crew_notices(&mut self) {
        if let AnyPartition::Cache(p) = self {
            p.apply_crew_notices();
        }
    }

    /// Puts a flash store behind this partition (cache mode only; before the first write).
    pub fn attach_flash(&mut self, store: FlashStore) -> Result<(), AttachError> {
        match self {
            AnyPartition::Cache(p) => p.attach_flash(store),
            AnyPartition::Store(_) => Err(AttachError::StoreMode),
        }
    }
}

/// `$body` with `$p` bound to the partition inside, whatever its kind.
macro_rules! each_kind {
    ($self:expr, $p:ident => $body:expr) => {
        match $self {
            AnyPartition::Cache($p) => $body,
            AnyPartition::Store($p) => $body,
        }
    };
}

impl Engine for AnyPartition {
    fn mode(&self) -> Mode {
        each_kind!(self, p => p.mode())
    }

    #[inline]
    fn set_clock(&mut self, now: u32) {
        each_kind!(self, p => p.set_clock(now));
    }

    #[inline]
    fn now(&self) -> u32 {
        each_kind!(self, p => p.now())
    }

    #[inline]
    fn max_item_bytes(&self) -> usize {
        each_kind!(self, p => p.max_item_bytes())
    }

    fn stats(&self) -> EngineStats {
        each_kind!(self, p => p.stats())
    }

    fn size_classes(&self) -> Option<[crate::types::ClassFigures; crate::types::SIZE_CLASSES]> {
        each_kind!(self, p => p.size_classes())
    }

    fn store_stats(&self) -> Option<StoreStats> {
        each_kind!(self, p => p.store_stats())
    }

    fn allocated_bytes(&self) -> usize {
        each_kind!(self, p => p.allocated_bytes())
    }

    fn index_bytes(&self) -> usize {
        each_kind!(self, p => p.index_bytes())
    }

    fn log_bytes(&self) -> usize {
        each_kind!(self, p => p.log_bytes())
    }

    fn set_memory_bytes(&mut self, memory_bytes: usize) -> Result<(), ConfigError> {
        each_kind!(self, p => p.set_memory_bytes(memory_bytes))
    }

    fn flush_all(&mut self, delay: i64) {
        each_kind!(self, p => p.flush_all(delay));
    }

    #[inline]
    fn get(&mut self, key: &[u8]) -> Result<Option<Item<'_>>, EngineError> {
        each_kind!(self, p => p.get(key))
    }

    #[inline]
    fn get_hashed(&mut self, key: &[u8], hash: KeyHash) -> Result<Option<Item<'_>>, EngineError> {
        each_kind!(self, p => p.get_hashed(key, hash))
    }

    #[inline]
    fn set(&mut self, key: &[u8], value: &[u8], flags: u32, exptime: i64) -> Result<u64, EngineError> {
        each_kind!(self, p => p.set(key, value, flags, exptime))
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
        each_kind!(self, p => p.set_hashed(key, hash, value, flags, exptime))
    }

    #[inline]
    fn store(&mut self, request: &StoreRequest<'_>) -> Result<StoreOutcome, EngineError> {
        each_kind!(self, p => p.store(request))
    }

    fn store_invalidating(&mut self, request: &StoreRequest<'_>) -> Result<StoreOutcome, EngineError> {
        each_kind!(self, p => p.store_invalidating(request))
    }

    #[inline]
    fn delete(&mut self, key: &[u8], cas: u64) -> Result<DeleteOutcome, EngineError> {
        each_kind!(self, p => p.delete(key, cas))
    }

    fn invalidate(&mut self, key: &[u8], cas: u64, exptime: Option<i64>) -> Result<DeleteOutcome, EngineError> {
        each_kind!(self, p => p.invalidate(key, cas, exptime))
    }

    #[inline]
    fn arith(&mut self, key: &[u8], request: &ArithRequest) -> Result<ArithOutcome, EngineError> {
        each_kind!(self, p => p.arith(key, request))
    }

    #[inline]
    fn atomic_many(
        &mut self,
        key: &[u8],
        requests: &[AtomicRequest],
        out: &mut Vec<Result<AtomicOutcome, EngineError>>,
    ) -> Result<(), EngineError> {
        each_kind!(self, p => p.atomic_many(key, requests, out))
    }

    #[inline]
    fn vector_create(
        &mut self,
        key: &[u8],
        elem: ElemType,
        len: u32,
        flags: u32,
        exptime: i64,
    ) -> Result<u64, EngineError> {
        each_kind!(self, p => p.vector_create(key, elem, len, flags, exptime))
    }

    #[inline]
    fn vector_update_many(
        &mut self,
        key: &[u8],
        updates: &[VectorUpdate<'_>],
        out: &mut Vec<Result<bool, EngineError>>,
    ) -> Result<(), EngineError> {
        each_kind!(self, p => p.vector_update_many(key, updates, out))
    }

    #[inline]
    fn touch(&mut self, key: &[u8], exptime: i64) -> Result<bool, EngineError> {
        each_kind!(self, p => p.touch(key, exptime))
    }

    #[inline]
    fn get_and_touch(&mut self, key: &[u8], exptime: i64) -> Result<Option<Item<'_>>, EngineError> {
        each_kind!(self, p => p.get_and_touch(key, exptime))
    }

    #[inline]
    fn meta_get(&mut self, key: &[u8], request: &MetaGet) -> Result<Option<MetaItem<'_>>, EngineError> {
        each_kind!(self, p => p.meta_get(key, request))
    }

    fn debug_item(&mut self, key: &[u8]) -> Result<Option<ItemDebug>, EngineError> {
        each_kind!(self, p => p.debug_item(key))
    }

    #[inline]
    fn prefetch(&self, hashes: &[KeyHash], access: Access) {
        each_kind!(self, p => p.prefetch(hashes, access));
    }

    fn dump_buckets(&self) -> usize {
        each_kind!(self, p => p.dump_buckets())
    }

    fn bucket_keys(&self, bucket: usize, f: &mut dyn FnMut(&[u8])) {
        each_kind!(self, p => p.bucket_keys(bucket, f));
    }

    #[inline]
    fn flash(&mut self) -> Option<&mut dyn FlashTier> {
        each_kind!(self, p => Engine::flash(p))
    }

    fn flash_ref(&self) -> Option<&dyn FlashTier> {
        each_kind!(self, p => Engine::flash_ref(p))
    }
}
