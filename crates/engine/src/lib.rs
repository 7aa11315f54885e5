//! tierkv-engine: the storage engine. A `Partition` is MICA's cache-mode store: a circular log
//! with implicit FIFO eviction and a lossy set-associative index, owned by one thread, allocated
//! once at creation, serving memcached's data operations one at a time or in prefetching batches.
//! A `StorePartition` is MICA's store mode (a lossless chained index over a segregated-fits
//! allocator, nothing evicted); `AnyPartition` is either, chosen at start-up.
//!
//! `flash` is the flash tier's store: a log-structured store per partition on a region of a flash
//! file, with its own I/O engines (io_uring, or a small `pread`/`pwrite` thread pool where the
//! kernel refuses io_uring: the only threads this crate starts).
//!
//! It must never do network I/O, parse protocol bytes, spawn threads (but the flash I/O pool),
//! take locks on the data path, read the clock per operation, or allocate after a partition is
//! created (flash lookups in flight hold their own small buffers, bounded by `max_reads`).

#![warn(missing_docs)]

mod any;
mod api;
mod atomics;
mod batch;
mod cache;
mod config;
pub mod flash;
mod hash;
mod item;
mod numeric;
mod ops;
mod region;
mod storage;
mod store;
mod tiering;
mod time;
mod types;
mod vectors;

pub use any::AnyPartition;
pub use api::Engine;
pub use atomics::{AtomicOp, AtomicOutcome, AtomicRequest, CounterKind};
pub use batch::{SetRequest, BATCH_CHUNK};
pub use cache::crew::{CrewGet, CrewReader};
pub use cache::Partition;
pub use config::{
    ConfigError, Mode, PartitionConfig, DEFAULT_EXPECTED_ITEM_BYTES, DEFAULT_MAX_ITEM_BYTES, MAX_ITEM_BYTES_CEILING,
    MAX_KEY_BYTES, MIN_ITEM_BYTES,
};
pub use hash::{partition_of, KeyHash};
pub use item::item_log_bytes;
pub use numeric::{apply_delta, parse_counter, CounterValue};
pub use storage::Access;
pub use store::{StoreConfig, StorePartition, STORE_FIXED_HEADER_BYTES};
pub use tiering::{AttachError, FlashProbe, FlashReport, FlashTier, TierStats, FLASH_FAILED};
pub use time::unix_now;
pub use types::{
    ArithInitial, ArithOutcome, ArithRequest, ClassFigures, DeleteOutcome, EngineError, EngineStats, Item, ItemDebug,
    MetaGet, MetaItem, StoreMode, StoreOutcome, StoreRequest, StoreStats, CLASS_CHUNK_BYTES, SIZE_CLASSES,
};
pub use vectors::{apply_update, vector_header, vector_slice, ElemType, VectorError, VectorOp, VectorUpdate};

#[cfg(test)]
use cache::index::ENTRIES_PER_BUCKET;
