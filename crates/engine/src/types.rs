//! The types every partition kind shares with its callers: requests, outcomes, items as read,
//! errors and counters, and the key checks. Plain data and pure functions: no storage here.

use crate::config::MAX_KEY_BYTES;
use std::fmt;

/// Why an operation was refused; the partition is unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineError {
    /// The key is empty.
    EmptyKey,
    /// The key is longer than MAX_KEY_BYTES.
    KeyTooLong {
        /// The key's length.
        len: usize,
    },
    /// Header + key + value would exceed the maximum item size.
    ItemTooLarge {
        /// The item's size.
        bytes: usize,
        /// The largest item allowed.
        max_bytes: usize,
    },
    /// incr/decr on a value that is not a decimal number.
    NonNumeric,
    /// Store mode: no free block or index slot is left for the write (nothing changed).
    OutOfMemory,
    /// A vector request the item cannot take (see `vectors`).
    Vector(VectorError),
}

/// Why a vector request was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VectorError {
    /// The item is not a vector.
    NotAVector,
    /// The request names another element type than the vector has.
    TypeMismatch,
    /// The slice reaches past the vector's end.
    OutOfBounds,
    /// The data is not a whole number of elements.
    BadData,
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EngineError::EmptyKey => write!(f, "key is empty"),
            EngineError::KeyTooLong { len } => write!(f, "key of {len} bytes exceeds {MAX_KEY_BYTES}"),
            EngineError::ItemTooLarge { bytes, max_bytes } => {
                write!(f, "item of {bytes} bytes exceeds the maximum of {max_bytes}")
            }
            EngineError::NonNumeric => write!(f, "cannot increment or decrement non-numeric value"),
            EngineError::OutOfMemory => write!(f, "out of memory storing object"),
            EngineError::Vector(e) => write!(f, "vector: {e:?}"),
        }
    }
}

impl std::error::Error for EngineError {}

/// A stored item as a GET sees it; the value borrows the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Item<'a> {
    /// The value bytes.
    pub value: &'a [u8],
    /// memcached's client flags.
    pub flags: u32,
    /// The CAS unique.
    pub cas: u64,
    /// Absolute Unix expiry in seconds, 0 = never.
    pub expiry: u32,
    /// Fetched before this read (meta `h`).
    pub fetched: bool,
    /// Marked stale by an invalidation (meta `X`).
    pub stale: bool,
    /// A recache token was handed out before this read (meta `Z`).
    pub token_sent: bool,
}

/// What a meta get (`mg`) asks beyond the plain read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MetaGet {
    /// `T`: new exptime.
    pub touch: Option<i64>,
    /// `N`: on a miss, create an empty item with this exptime and hand out the token.
    pub vivify: Option<i64>,
    /// `R`: hand out the token when the item expires before this exptime would.
    pub recache: Option<i64>,
    /// `l`: report the seconds since the item was written (a search of the clock marks).
    pub last_access: bool,
}

/// A meta get's item and the token decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetaItem<'a> {
    /// The item.
    pub item: Item<'a>,
    /// This reader got the recache token (meta `W`).
    pub won: bool,
    /// Seconds since the item was stored or last copied forward (meta `l`, memcached's `la`);
    /// 0 unless asked for.
    pub last_access: u32,
}

/// What `me` (meta debug) reports about an item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ItemDebug {
    /// Seconds to live, -1 for never.
    pub ttl: i64,
    /// Seconds since it was last accessed.
    pub last_access: u32,
    /// Its CAS.
    pub cas: u64,
    /// Whether it was read since it was written.
    pub fetched: bool,
    /// Bytes the item takes in the log (header, key and value).
    pub size: usize,
    /// Bytes of the value.
    pub value_len: usize,
}

/// Which memcached storage command a store performs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreMode {
    /// Store unconditionally.
    Set,
    /// Store only if the key is absent.
    Add,
    /// Store only if the key is present.
    Replace,
    /// Add the data after the existing value (flags and expiry stay as they were).
    Append,
    /// Add the data before the existing value (flags and expiry stay as they were).
    Prepend,
    /// Store only if the key is present with exactly this CAS (memcached's `cas`).
    Cas,
}

/// One storage request.
#[derive(Clone, Copy, Debug)]
pub struct StoreRequest<'a> {
    /// set, add, replace, append or prepend.
    pub mode: StoreMode,
    /// The key.
    pub key: &'a [u8],
    /// The value.
    pub value: &'a [u8],
    /// memcached's client flags.
    pub flags: u32,
    /// memcached exptime (see `time`); ignored by Append and Prepend.
    pub exptime: i64,
    /// For Cas: the CAS the item must have. For Append/Prepend: 0, or a CAS the item must have.
    /// Ignored otherwise.
    pub cas: u64,
}

/// What a store did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreOutcome {
    /// Stored; the item's new CAS.
    Stored {
        /// The item's new CAS.
        cas: u64,
    },
    /// add on a present key, or replace/append/prepend on an absent one.
    NotStored,
    /// The item's CAS differs from the request's.
    Exists,
    /// cas on an absent key.
    NotFound,
}

/// What a delete did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteOutcome {
    /// The item is gone.
    Deleted,
    /// No such key.
    NotFound,
    /// The item's CAS differs from the request's.
    Exists,
}

/// An incr or decr.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArithRequest {
    /// How much to add or take away.
    pub delta: u64,
    /// Take away (decr) rather than add.
    pub decrement: bool,
    /// 0, or the CAS the item must have.
    pub cas: u64,
    /// Create the item with this value when it is absent (binary protocol / meta `N`).
    pub initial: Option<ArithInitial>,
}

/// The item an incr/decr creates on a miss.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArithInitial {
    /// The value a missing counter starts at.
    pub value: u64,
    /// Its client flags.
    pub flags: u32,
    /// Its expiry.
    pub exptime: i64,
}

/// What an incr or decr did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArithOutcome {
    /// The counter's new value and the item's new CAS; `created` when the key was missing
    /// and the initial value was stored.
    Value {
        /// The new value.
        value: u64,
        /// The item's CAS.
        cas: u64,
        /// The counter was created.
        created: bool,
    },
    /// No such key.
    NotFound,
    /// The item's CAS differs from the request's.
    Exists,
}

/// Counters of the engine's own work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Items copied to the tail because they were read close to eviction.
    pub reappends: u64,
    /// Live index entries dropped because their pair was full and no overflow bucket was
    /// left (cache mode; counted in `evictions` too).
    pub index_evictions: u64,
    /// Overflow buckets in the index's chains now (cache mode).
    pub overflow_buckets: u64,
    /// Bytes consumed in the log so far.
    pub log_bytes_written: u64,
    /// Items in the index and the log now, expired ones included until a read notices them
    /// (memcached's `curr_items`; exact up to the eviction granularity of ~1/64 of the log).
    pub live_items: u64,
    /// Bytes of the items `live_items` counts, each with its header (memcached's `bytes`).
    pub live_bytes: u64,
    /// Lookups that found their item expired (memcached's `get_expired` counts gets).
    pub expired_reads: u64,
    /// Lookups that found their item flushed by flush_all (memcached's `get_flushed`).
    pub flushed_reads: u64,
    /// Expired items dropped before the tail reached them: by the log's cleaner, or replaced by
    /// a new value of their key (memcached's `reclaimed`).
    pub reclaimed: u64,
    /// Live items the log's cleaner copied forward instead of evicting.
    pub items_copied_forward: u64,
    /// Their bytes (header, key and value as copied).
    pub bytes_copied_forward: u64,
    /// Times the cleaner found items overwritten before it looked at them (never expected).
    pub clean_lost_track: u64,
    /// Live items the cleaner could not copy because the copy would overwrite items it had
    /// not looked at yet (evicted instead).
    pub clean_order_evictions: u64,
    /// Items stored since creation (memcached's `total_items`); copies forward not counted.
    pub items_stored: u64,
    /// Live items lost to memory pressure: overwritten by the log or dropped from a full index
    /// pair (memcached's `evictions`).
    pub evictions: u64,
}

/// memcached's slab classes with its default growth factor: what `stats items` and `stats
/// slabs` number item figures by.
pub const SIZE_CLASSES: usize = 39;

/// memcached 1.6.18's slab class chunk sizes with its defaults (`-n 48 -f 1.25`,
/// slab_chunk_max 512 KiB): `stats items` and `stats slabs` number classes by these.
pub const CLASS_CHUNK_BYTES: [u32; SIZE_CLASSES] = [
    96, 120, 152, 192, 240, 304, 384, 480, 600, 752, 944, 1184, 1480, 1856, 2320, 2904, 3632, 4544, 5680, 7104, 8880,
    11104, 13880, 17352, 21696, 27120, 33904, 42384, 52984, 66232, 82792, 103496, 129376, 161720, 202152, 252696,
    315872, 394840, 524288,
];

/// The items of one memcached size class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassFigures {
    /// Live items whose memcached size falls in the class.
    pub items: u64,
    /// memcached's `mem_requested`: the bytes memcached would allocate for them (its item
    /// header, key, value, CAS).
    pub requested_bytes: u64,
    /// Live items of the class evicted.
    pub evicted: u64,
    /// Expired items of the class whose room was taken back (memcached's per-class
    /// `reclaimed`).
    pub reclaimed: u64,
}

/// The DRAM an item costs beyond its key and value when the partition is full of such items.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MemoryOverhead {
    /// Items of this size the partition holds when full.
    pub items: usize,
    /// Header bytes per item in the log (items are never padded).
    pub header_bytes: usize,
    /// Index bytes per item.
    pub index_bytes_per_item: f64,
    /// Every allocated byte that is not key or value, per item (index, headers, spare log,
    /// scratch).
    pub total_bytes_per_item: f64,
}

/// Compares two keys of equal length; short keys (the common case) without a library call.
#[inline]
pub(crate) fn keys_equal(a: &[u8], b: &[u8]) -> bool {
    debug_assert_eq!(a.len(), b.len());
    let len = a.len();
    let word = |s: &[u8], at: usize| u64::from_le_bytes(s[at..at + 8].try_into().unwrap());
    if (8..=16).contains(&len) {
        // Two overlapping 8-byte words cover every byte.
        word(a, 0) == word(b, 0) && word(a, len - 8) == word(b, len - 8)
    } else {
        a == b
    }
}

/// Checks a key against memcached's length limits (any byte values are allowed).
#[inline]
pub(crate) fn check_key(key: &[u8]) -> Result<(), EngineError> {
    match key.len() {
        0 => Err(EngineError::EmptyKey),
        1..=MAX_KEY_BYTES => Ok(()),
        len => Err(EngineError::KeyTooLong { len }),
    }
}

/// Where a store partition's memory is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Items stored.
    pub live_items: u64,
    /// Items stored since creation (memcached's `total_items`).
    pub items_stored: u64,
    /// Bytes of live items counted as fixed header + key + value (+ flags, expiry fields).
    pub item_bytes: u64,
    /// Key + value bytes of live items.
    pub payload_bytes: u64,
    /// Bytes the allocator manages, and how many of them are free.
    pub managed_bytes: u64,
    /// Bytes free in the allocator.
    pub free_bytes: u64,
    /// Spare buckets for overflowing index buckets.
    pub spare_buckets: u64,
    /// Those not in use.
    pub spare_buckets_free: u64,
}
