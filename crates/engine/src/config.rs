//! How a partition is sized (`PartitionConfig`), the limits every partition shares, and why a
//! size is refused (`ConfigError`). Plain data: nothing here allocates.

use crate::cache::index::ENTRIES_PER_BUCKET;
use std::fmt;

/// Longest key memcached accepts, in bytes.
pub const MAX_KEY_BYTES: usize = 250;
/// Default largest item (header + key + value), as memcached's `-I 1m`.
pub const DEFAULT_MAX_ITEM_BYTES: usize = 1 << 20;
/// Largest `max_item_bytes` a partition accepts (memcached's own ceiling for `-I`).
pub const MAX_ITEM_BYTES_CEILING: usize = 1 << 30;
/// Smallest `max_item_bytes`: room for a 250-byte key and a small value.
pub const MIN_ITEM_BYTES: usize = 512;
/// Item sizes (key + value) the automatic index sizing assumes when the caller gives none.
pub const DEFAULT_EXPECTED_ITEM_BYTES: usize = 128;
/// Log positions are kept in 48 bits; a full sweep of the index runs every 2^46 bytes written,
/// so the ring must stay below that.
pub(crate) const SWEEP_PERIOD_BYTES: u64 = 1 << 46;

/// How a partition is sized.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionConfig {
    /// Everything the partition may allocate: index, log and scratch space.
    pub memory_bytes: usize,
    /// The most `memory_bytes` may later grow to (`Partition::set_memory_bytes`): the log's
    /// address space is reserved for it, and the index grows by overflow buckets as the log
    /// does. None: `memory_bytes`.
    pub max_memory_bytes: Option<usize>,
    /// Index buckets (a power of two, at least 2); None sizes the index from
    /// `expected_item_bytes` so it has about two slots per item the log can hold.
    pub index_buckets: Option<usize>,
    /// Largest item (header + key + value) accepted.
    pub max_item_bytes: usize,
    /// Typical key + value size, used only when `index_buckets` is None.
    pub expected_item_bytes: usize,
}

impl PartitionConfig {
    /// A configuration with `memory_bytes` of budget and every other setting at its default.
    pub fn new(memory_bytes: usize) -> PartitionConfig {
        PartitionConfig {
            memory_bytes,
            max_memory_bytes: None,
            index_buckets: None,
            max_item_bytes: DEFAULT_MAX_ITEM_BYTES,
            expected_item_bytes: DEFAULT_EXPECTED_ITEM_BYTES,
        }
    }

    /// The largest budget the partition may grow to.
    pub fn max_memory(&self) -> usize {
        self.max_memory_bytes.unwrap_or(self.memory_bytes)
    }

    /// The bucket count the partition will use (sized for the first budget).
    pub fn buckets(&self) -> usize {
        self.index_buckets.unwrap_or_else(|| {
            // Each item costs its log bytes plus about 16 bytes of index at two slots per item.
            let per_item = self.expected_item_bytes.max(1) + crate::item::MIN_HEADER_BYTES + 16;
            let wanted = (self.memory_bytes / per_item / (ENTRIES_PER_BUCKET / 2)).max(2);
            let up = wanted.next_power_of_two();
            // Round to the nearer power of two on a log scale.
            if up > 2 && up as f64 / wanted as f64 > std::f64::consts::SQRT_2 {
                up / 2
            } else {
                up
            }
        })
    }
}

/// Why a partition could not be created.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// `index_buckets` is not a power of two of at least 2.
    BadBucketCount(usize),
    /// `max_item_bytes` is outside MIN_ITEM_BYTES..=MAX_ITEM_BYTES_CEILING.
    MaxItemOutOfRange(usize),
    /// The budget leaves a log smaller than two maximum-size items.
    TooSmall {
        /// What was asked.
        memory_bytes: usize,
        /// The least that works.
        needed_bytes: usize,
    },
    /// The log would exceed what 48-bit positions can track.
    TooLarge(usize),
    /// The operating system refused the memory.
    OutOfMemory(usize),
    /// A budget above the maximum reserved at creation (`max_memory_bytes`).
    AboveMaximum {
        /// What was asked.
        memory_bytes: usize,
        /// The most that works.
        max_bytes: usize,
    },
    /// Store mode's arena cannot change size while it holds items.
    NotResizable,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::BadBucketCount(n) => write!(f, "index bucket count {n} is not a power of two >= 2"),
            ConfigError::MaxItemOutOfRange(n) => {
                write!(f, "maximum item size {n} is outside {MIN_ITEM_BYTES}..={MAX_ITEM_BYTES_CEILING} bytes")
            }
            ConfigError::TooSmall { memory_bytes, needed_bytes } => write!(
                f,
                "memory budget of {memory_bytes} bytes is too small: the index, scratch space and a log of two \
                 maximum-size items need {needed_bytes} bytes"
            ),
            ConfigError::TooLarge(n) => write!(f, "a log of {n} bytes is larger than one partition supports"),
            ConfigError::OutOfMemory(n) => write!(f, "the operating system refused {n} bytes"),
            ConfigError::AboveMaximum { memory_bytes, max_bytes } => {
                write!(f, "memory budget of {memory_bytes} bytes exceeds the maximum of {max_bytes} reserved at start")
            }
            ConfigError::NotResizable => write!(f, "store mode's memory cannot be resized"),
        }
    }
}

impl std::error::Error for ConfigError {}

/// How a partition keeps its items.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// MICA's cache mode: a circular log and a lossy index; old items make room for new ones.
    Cache,
    /// MICA's store mode: nothing is evicted; a write without room fails with `OutOfMemory`.
    Store,
}

impl Mode {
    /// The mode's name as `-o mode=` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Cache => "cache",
            Mode::Store => "store",
        }
    }
}
