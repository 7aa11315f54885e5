//! The lossy set-associative index (MICA's cache-mode index).
//!
//! A bucket is one 64-byte cache line of eight entries. Buckets `2k` and `2k + 1` form a pair
//! that shares its sixteen slots: a key lives in its home bucket when it can and spills into the
//! other bucket of the pair when the home one is full, so a hot GET usually reads one line while
//! a burst of keys on one bucket still has sixteen slots before anything is dropped.
//!
//! ```text
//!  entry (u64):  63          48 47                                        0
//!               +--------------+-------------------------------------------+
//!               |     tag      |  log offset (low 48 bits of the virtual    |
//!               |   (never 0)  |  byte position where the item starts)      |
//!               +--------------+-------------------------------------------+
//!  entry == 0 means empty.
//!
//!  pair:  [ bucket 2k: 8 entries | bucket 2k+1: 8 entries ]   128 bytes, 128-byte aligned
//! ```
//!
//! Invariant: within a pair no two entries carry the same tag. An insert replaces the entry with
//! its tag if there is one (dropping, at worst, a different key that collides on 16 bits of
//! hash), so a key can never have two entries and a lookup can stop at the first key match.

use crate::region::{prefetch, Region, ZeroIsValid};

/// Entries in one bucket (one cache line).
pub(crate) const ENTRIES_PER_BUCKET: usize = 8;
/// Slots a key may use: its home bucket and the other bucket of its pair.
#[cfg(test)]
pub(crate) const SLOTS_PER_PAIR: usize = 2 * ENTRIES_PER_BUCKET;

/// Bits of an entry that hold the log offset.
pub(crate) const OFFSET_BITS: u32 = 48;
/// Mask of the offset bits.
pub(crate) const OFFSET_MASK: u64 = (1 << OFFSET_BITS) - 1;

/// One cache line of index entries.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(crate) struct Bucket {
    pub(crate) entries: [u64; ENTRIES_PER_BUCKET],
}

const _: () = assert!(std::mem::size_of::<Bucket>() == 64);
const _: () = assert!(std::mem::align_of::<Bucket>() == 64);
const _: () = assert!(ENTRIES_PER_BUCKET * std::mem::size_of::<u64>() == 64);
const _: () = assert!(OFFSET_BITS + 16 == 64);

// SAFETY: a Bucket is eight u64s; every bit pattern is a valid Bucket.
unsafe impl ZeroIsValid for Bucket {}

/// Packs a tag and a virtual log position into an entry.
#[inline]
pub(crate) fn make_entry(tag: u16, position: u64) -> u64 {
    debug_assert!(tag != 0);
    (u64::from(tag) << OFFSET_BITS) | (position & OFFSET_MASK)
}

/// The tag of an entry (0 for an empty entry).
#[inline]
pub(crate) fn entry_tag(entry: u64) -> u16 {
    (entry >> OFFSET_BITS) as u16
}

/// The low 48 bits of the position an entry points at.
#[inline]
pub(crate) fn entry_offset(entry: u64) -> u64 {
    entry & OFFSET_MASK
}

/// Where one slot of a pair is: bucket number and entry number within it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Slot {
    pub(crate) bucket: usize,
    pub(crate) entry: usize,
}

/// The index: a power-of-two number of buckets in one mapping.
pub(crate) struct Index {
    region: Region,
    buckets: usize,
}

impl Index {
    /// Maps an index of `buckets` buckets (a power of two, at least 2); None if the kernel
    /// refuses the memory.
    pub(crate) fn new(buckets: usize) -> Option<Index> {
        assert!(buckets.is_power_of_two() && buckets >= 2);
        let region = Region::new(buckets * std::mem::size_of::<Bucket>())?;
        Some(Index { region, buckets })
    }

    /// Number of buckets.
    pub(crate) fn buckets(&self) -> usize {
        self.buckets
    }

    /// Bytes the index occupies.
    pub(crate) fn bytes(&self) -> usize {
        self.region.len()
    }

    /// The two buckets of `bucket`'s pair, home first.
    #[inline]
    pub(crate) fn pair_order(bucket: usize) -> [usize; 2] {
        [bucket, bucket ^ 1]
    }

    /// The entry at `slot`.
    #[inline]
    pub(crate) fn get(&self, slot: Slot) -> u64 {
        self.region.typed::<Bucket>()[slot.bucket].entries[slot.entry]
    }

    /// Overwrites the entry at `slot`, with a Release store: a reader on another thread that
    /// loads the entry (`crew.rs`) sees the item bytes written before it.
    #[inline]
    pub(crate) fn set(&mut self, slot: Slot, entry: u64) {
        self.region.store_u64((slot.bucket * ENTRIES_PER_BUCKET + slot.entry) * 8, entry);
    }

    /// Other threads' view of the entries.
    pub(crate) fn shared(&self) -> crate::region::SharedBytes {
        self.region.shared()
    }

    /// The eight entries of one bucket.
    #[inline]
    pub(crate) fn bucket(&self, bucket: usize) -> &[u64; ENTRIES_PER_BUCKET] {
        &self.region.typed::<Bucket>()[bucket].entries
    }

    /// Starts loading a bucket's line and its pair partner's.
    #[inline]
    pub(crate) fn prefetch_pair(&self, bucket: usize) {
        let buckets = self.region.typed::<Bucket>();
        prefetch(&buckets[bucket]);
        prefetch(&buckets[bucket ^ 1]);
    }

    /// Every slot of the index, for sweeps and counts.
    pub(crate) fn all_slots(&self) -> impl Iterator<Item = Slot> + '_ {
        (0..self.buckets).flat_map(|bucket| (0..ENTRIES_PER_BUCKET).map(move |entry| Slot { bucket, entry }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_packs_tag_and_offset() {
        let e = make_entry(0xBEEF, 0x1234_5678_9ABC_DEF0);
        assert_eq!(entry_tag(e), 0xBEEF);
        assert_eq!(entry_offset(e), 0x5678_9ABC_DEF0);
        assert_ne!(make_entry(1, 0), 0, "a real entry is never the empty value");
    }

    #[test]
    fn pairs_are_adjacent_buckets() {
        assert_eq!(Index::pair_order(6), [6, 7]);
        assert_eq!(Index::pair_order(7), [7, 6]);
        let mut index = Index::new(4).unwrap();
        assert_eq!(index.bytes(), 256);
        let slot = Slot { bucket: 3, entry: 7 };
        index.set(slot, 42);
        assert_eq!(index.get(slot), 42);
        assert_eq!(index.bucket(3)[7], 42);
        assert_eq!(index.all_slots().count(), 32);
    }
}
