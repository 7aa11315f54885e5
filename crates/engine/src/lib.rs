//! tierkv-engine: the storage engine. A `Partition` is MICA's cache-mode store: a circular log
//! with implicit FIFO eviction and a lossy set-associative index, owned by one thread, allocated
//! once at creation, serving memcached's data operations one at a time or in prefetching batches.
//! A `StorePartition` is MICA's store mode (a lossless chained index over a segregated-fits
//! allocator, nothing evicted); `AnyPartition` is either, chosen at start-up.
//!
//! It must never do network I/O, parse protocol bytes, spawn threads, take locks, read the clock
//! per operation, or allocate after a partition is created.

mod any;
mod batch;
mod cache;
mod config;
mod hash;
mod item;
mod numeric;
mod ops;
mod region;
mod store;
mod time;
mod types;

pub use store::alloc::{Allocator, AllocatorStats, BLOCK_HEADER_BYTES};
pub use any::{AnyPartition, Mode};
pub use batch::{Batched, SetRequest, BATCH_CHUNK};
pub use store::chain_index::{ChainIndex, ChainSlot, CHAIN_ENTRIES};
pub use hash::{partition_of, KeyHash, MAX_PARTITIONS};
pub use cache::index::{ENTRIES_PER_BUCKET, SLOTS_PER_PAIR};
pub use item::{item_log_bytes, MAX_HEADER_BYTES, MIN_HEADER_BYTES};
pub use numeric::{apply_delta, parse_counter, CounterValue};
pub use cache::{
    check_key, ArithInitial, ArithOutcome, ArithRequest, ConfigError, DeleteOutcome, EngineError, EngineStats, Item,
    ItemDebug, MemoryOverhead, MetaGet, MetaItem, Partition, PartitionConfig, StoreMode, StoreOutcome, StoreRequest,
    DEFAULT_EXPECTED_ITEM_BYTES, DEFAULT_MAX_ITEM_BYTES, MAX_ITEM_BYTES_CEILING, MAX_KEY_BYTES, MIN_ITEM_BYTES,
};
pub use store::{StoreConfig, StorePartition, StoreStats, STORE_FIXED_HEADER_BYTES};
pub use time::{expiry_from_exptime, unix_now, RELATIVE_EXPTIME_MAX};
