//! What a partition kind provides: the item primitives memcached's operations (`ops.rs`) are
//! written over, and the partition-wide ones (clock, memory, counters, prefetching, walks).
//! Every kind that implements `Storage` is an `Engine` (`api.rs`). Crate-private: callers see
//! only `Engine`.

use crate::config::{ConfigError, Mode};
use crate::hash::KeyHash;
use crate::item::ItemHeader;
use crate::numeric::CounterValue;
use crate::tiering::FlashTier;
use crate::types::{EngineError, EngineStats, Item, StoreStats};

/// The value of an item being written.
pub(crate) enum NewValue<'a, F> {
    /// These bytes, concatenated.
    Parts([&'a [u8]; 2]),
    /// `data` after (or, with `old_first` false, before) the value of `old`, an item of the
    /// same partition.
    Combined { old: F, data: &'a [u8], old_first: bool },
    /// A counter's digits.
    Counter(CounterValue),
}

/// What the caller of `Storage::write` already knows of the key's current item, so that a
/// kind which must replace it (store mode) need not look it up again.
#[derive(Clone, Copy)]
pub(crate) enum Prior<F> {
    /// Not looked up.
    Unknown,
    /// Looked up just now: no live item.
    Absent,
    /// Looked up just now: this item.
    Present(F),
}

impl<F> From<Option<F>> for Prior<F> {
    fn from(found: Option<F>) -> Prior<F> {
        found.map_or(Prior::Absent, Prior::Present)
    }
}

/// What a partition kind provides to the operations.
pub(crate) trait Storage {
    /// A found item: where it is and its header.
    type Found: Copy;

    fn now(&self) -> u32;
    fn header(found: &Self::Found) -> &ItemHeader;
    fn cas(found: &Self::Found) -> u64;
    /// Bytes the item takes (memcached's `me` size).
    fn size(found: &Self::Found) -> usize;
    /// The item for `key`, expired ones removed and reported absent.
    fn lookup(&mut self, key: &[u8], hash: KeyHash) -> Option<Self::Found>;
    /// A read: `lookup`, then whatever a read does to the item (marked fetched; the cache
    /// copies an item close to eviction forward). The header returned has the state before.
    fn read(&mut self, key: &[u8], hash: KeyHash) -> Option<Self::Found>;
    fn item(&self, found: &Self::Found) -> Item<'_>;
    fn value(&self, found: &Self::Found) -> &[u8];
    fn set_state(&mut self, found: &Self::Found, bits: u8);
    /// Writes an item with `header` (a `cas` of None gets a new CAS) in place of any other
    /// item of its key (`prior`, when the caller looked it up); returns its CAS. Nothing
    /// changes on an error.
    fn write(
        &mut self,
        hash: KeyHash,
        header: &ItemHeader,
        key: &[u8],
        value: NewValue<'_, Self::Found>,
        prior: Prior<Self::Found>,
    ) -> Result<u64, EngineError>;
    fn remove(&mut self, found: &Self::Found);
    /// A delete found no item: any copy another tier still holds goes too (a flash read that
    /// missed for a moment must not let a deleted key come back).
    fn forget_absent(&mut self, _hash: KeyHash) {}
    /// The same key and value with a new header (a `cas` of None gets a new CAS).
    fn rewrite(&mut self, found: &Self::Found, header: &ItemHeader) -> Result<Self::Found, EngineError>;
    /// A new expiry, keeping the CAS.
    fn set_expiry(&mut self, found: Self::Found, expiry: u32) -> Result<Self::Found, EngineError>;
    /// When the item was written or last copied (Unix seconds), for meta `l` and `me`.
    fn written_at(&self, found: &Self::Found) -> u32;
    fn max_item_bytes(&self) -> usize;

    /// A read that returns the item (`read`, then `item`); kinds with a faster path override it.
    #[inline]
    fn read_item(&mut self, key: &[u8], hash: KeyHash) -> Option<Item<'_>> {
        let found = self.read(key, hash)?;
        Some(self.item(&found))
    }

    // ----- the partition as a whole (see `Engine` for what each means) -----

    fn mode(&self) -> Mode;
    fn set_clock(&mut self, now: u32);
    fn stats(&self) -> EngineStats;
    /// Items by memcached's size classes (cache mode; None where the kind has no such figures).
    fn size_classes(&self) -> Option<[crate::types::ClassFigures; crate::types::SIZE_CLASSES]> {
        None
    }
    fn store_stats(&self) -> Option<StoreStats>;
    fn allocated_bytes(&self) -> usize;
    fn index_bytes(&self) -> usize;
    fn log_bytes(&self) -> usize;
    fn set_memory_bytes(&mut self, memory_bytes: usize) -> Result<(), ConfigError>;
    fn flush_all(&mut self, delay: i64);
    fn prefetch(&self, hashes: &[KeyHash], access: Access);
    fn dump_buckets(&self) -> usize;
    fn bucket_keys(&self, bucket: usize, f: &mut dyn FnMut(&[u8]));

    // ----- a flash tier behind the partition (cache mode only; see `Engine`) -----
    /// The flash tier behind this partition (None: it has none).
    fn flash(&mut self) -> Option<&mut dyn FlashTier> {
        None
    }
    fn flash_ref(&self) -> Option<&dyn FlashTier> {
        None
    }
}

/// Which operations a prefetch prepares for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// GETs and other reads, or a mix of requests: the key's bucket and the item it points at.
    Read,
    /// SETs: everything a write of the key touches in the index.
    Write,
}
