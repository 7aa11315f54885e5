//! The set-associative index (MICA's cache-mode index), with overflow chains.
//!
//! A bucket is one 64-byte cache line of eight entries. Buckets `2k` and `2k + 1` form a pair
//! that shares its sixteen slots: a key lives in its home bucket when it can and spills into the
//! other bucket of the pair when the home one is full, so a hot GET usually reads one line while
//! a burst of keys on one bucket still has sixteen slots. When both are full, the pair grows a
//! chain of overflow buckets: the last slot of bucket `2k + 1` becomes a link to the first one,
//! and the last slot of each overflow bucket links to the next. Overflow buckets come from a
//! second mapping touched only as used (the partition charges them to its budget), and an empty
//! one at the end of a chain goes back to a free list when its pair next takes a key.
//!
//! ```text
//!  item entry (u64): 63          48 47                                        0
//!                   +--------------+-------------------------------------------+
//!                   |     tag      |  log offset (low 48 bits of the virtual    |
//!                   |   (never 0)  |  byte position where the item starts)      |
//!                   +--------------+-------------------------------------------+
//!  link entry:      tag 0, low bits = overflow bucket number + 1 (last slot of a bucket only)
//!  entry == 0 means empty.
//!
//!  pair:  [ bucket 2k: 8 entries | bucket 2k+1: 7 entries + link ] -> [ 7 + link ] -> [ 8 ]
//! ```
//!
//! Two keys may share a tag (16 bits of hash): lookups compare the key on every tag match and
//! go on past a twin, and an insert replaces only the entry of the same key. A key has at most
//! one entry. Nothing is dropped for lack of slots until the overflow mapping is used up (half
//! the partition's largest budget: then the oldest item of the pair goes, counted).

use crate::region::{prefetch, Region, ZeroIsValid};

/// Entries in one bucket (one cache line).
pub(crate) const ENTRIES_PER_BUCKET: usize = 8;

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

/// Slot of a bucket that may hold a link to the next overflow bucket.
pub(crate) const LINK_SLOT: usize = ENTRIES_PER_BUCKET - 1;

/// Whether an entry names an item (not empty, not a link).
#[inline]
pub(crate) fn is_item(entry: u64) -> bool {
    entry_tag(entry) != 0
}

/// Whether an entry links to an overflow bucket.
#[inline]
pub(crate) fn is_link(entry: u64) -> bool {
    entry != 0 && entry_tag(entry) == 0
}

/// The index: a power-of-two number of buckets in one mapping, and overflow buckets in another.
pub(crate) struct Index {
    region: Region,
    buckets: usize,
    /// Overflow buckets, numbered from `buckets` on (`Slot::bucket` covers both mappings).
    chain: Region,
    chain_cap: usize,
    /// Overflow buckets ever handed out: `chain_top..chain_cap` were never touched.
    chain_top: usize,
    /// The free list's first overflow bucket (number + 1, 0 when empty); each free bucket's
    /// entry 0 holds the next, as a link entry.
    chain_free: u64,
    /// Overflow buckets in chains now.
    chain_used: usize,
}

impl Index {
    /// Maps an index of `buckets` buckets (a power of two, at least 2) and room for
    /// `chain_cap` overflow buckets (address space only until used); None if the kernel
    /// refuses the memory.
    pub(crate) fn new(buckets: usize, chain_cap: usize) -> Option<Index> {
        assert!(buckets.is_power_of_two() && buckets >= 2);
        let region = Region::new(buckets * std::mem::size_of::<Bucket>())?;
        let chain_cap = chain_cap.max(1);
        let chain = Region::new_small_pages(chain_cap * std::mem::size_of::<Bucket>())?;
        Some(Index { region, buckets, chain, chain_cap, chain_top: 0, chain_free: 0, chain_used: 0 })
    }

    /// Number of buckets a key's hash chooses from (the pairs' buckets, not overflow ones).
    pub(crate) fn buckets(&self) -> usize {
        self.buckets
    }

    /// Bytes the index occupies: the pairs and every overflow bucket ever touched.
    pub(crate) fn bytes(&self) -> usize {
        self.region.len() + (self.chain_top * std::mem::size_of::<Bucket>()).next_multiple_of(4096)
    }

    /// Overflow buckets in chains now.
    pub(crate) fn chain_buckets(&self) -> usize {
        self.chain_used
    }

    /// The two buckets of `bucket`'s pair, home first.
    #[inline]
    pub(crate) fn pair_order(bucket: usize) -> [usize; 2] {
        [bucket, bucket ^ 1]
    }

    /// Every bucket a key whose home is `home` may be in: its pair, home first, then the
    /// pair's overflow chain.
    #[inline]
    pub(crate) fn walk(&self, home: usize) -> Walk<'_> {
        Walk { index: self, home, step: 0, at: home | 1 }
    }

    /// The overflow bucket `bucket`'s last slot links to, if any.
    #[inline]
    pub(crate) fn next_in_chain(&self, bucket: usize) -> Option<usize> {
        let entry = self.bucket(bucket)[LINK_SLOT];
        is_link(entry).then(|| self.buckets + (entry - 1) as usize)
    }

    /// The entry at `slot`.
    #[inline]
    pub(crate) fn get(&self, slot: Slot) -> u64 {
        self.bucket(slot.bucket)[slot.entry]
    }

    /// Overwrites the entry at `slot`, with a Release store: a reader on another thread that
    /// loads the entry (`crew.rs`) sees the item bytes written before it.
    #[inline]
    pub(crate) fn set(&mut self, slot: Slot, entry: u64) {
        if slot.bucket < self.buckets {
            self.region.store_u64((slot.bucket * ENTRIES_PER_BUCKET + slot.entry) * 8, entry);
        } else {
            let at = ((slot.bucket - self.buckets) * ENTRIES_PER_BUCKET + slot.entry) * 8;
            self.chain.store_u64(at, entry);
        }
    }

    /// Other threads' view of the pairs' entries (readers leave chains to the owner).
    pub(crate) fn shared(&self) -> crate::region::SharedBytes {
        self.region.shared()
    }

    /// The eight entries of one of the pairs' buckets (`bucket` < `buckets()`): the hot path's
    /// read, without the test `bucket` makes.
    #[inline]
    pub(crate) fn pair_bucket(&self, bucket: usize) -> &[u64; ENTRIES_PER_BUCKET] {
        &self.region.typed::<Bucket>()[bucket].entries
    }

    /// Whether the pair of `home` has an overflow chain.
    #[inline]
    pub(crate) fn has_chain(&self, home: usize) -> bool {
        is_link(self.pair_bucket(home | 1)[LINK_SLOT])
    }

    /// The eight entries of one bucket (a pair's or an overflow one).
    #[inline]
    pub(crate) fn bucket(&self, bucket: usize) -> &[u64; ENTRIES_PER_BUCKET] {
        if bucket < self.buckets {
            &self.region.typed::<Bucket>()[bucket].entries
        } else {
            &self.chain.typed::<Bucket>()[bucket - self.buckets].entries
        }
    }

    /// Starts loading a bucket's line and its pair partner's.
    #[inline]
    pub(crate) fn prefetch_pair(&self, bucket: usize) {
        let buckets = self.region.typed::<Bucket>();
        prefetch(&buckets[bucket]);
        prefetch(&buckets[bucket ^ 1]);
    }

    /// Every slot of the index (pairs, then overflow buckets ever used), for sweeps and
    /// counts; free overflow buckets hold no item entries.
    pub(crate) fn all_slots(&self) -> impl Iterator<Item = Slot> + '_ {
        (0..self.buckets + self.chain_top)
            .flat_map(|bucket| (0..ENTRIES_PER_BUCKET).map(move |entry| Slot { bucket, entry }))
    }

    /// Grows `last` (the last bucket of a pair's walk, full) by an overflow bucket: the entry in
    /// its last slot moves to the new bucket's first slot, written before the link that
    /// replaces it, so a reader sees it in one place or the other. Returns the new bucket's
    /// free slot, or None when every overflow bucket is in use.
    pub(crate) fn extend(&mut self, last: usize) -> Option<Slot> {
        debug_assert!(!is_link(self.bucket(last)[LINK_SLOT]));
        let number = if self.chain_free != 0 {
            let number = (self.chain_free - 1) as usize;
            self.chain_free = self.chain.typed::<Bucket>()[number].entries[0];
            number
        } else if self.chain_top < self.chain_cap {
            self.chain_top += 1;
            self.chain_top - 1
        } else {
            return None;
        };
        self.chain_used += 1;
        let bucket = self.buckets + number;
        let moved = self.get(Slot { bucket: last, entry: LINK_SLOT });
        for entry in 0..ENTRIES_PER_BUCKET {
            self.set(Slot { bucket, entry }, 0);
        }
        self.set(Slot { bucket, entry: 0 }, moved);
        self.set(Slot { bucket: last, entry: LINK_SLOT }, number as u64 + 1);
        Some(Slot { bucket, entry: 1 })
    }

    /// Takes the overflow bucket `last` (the end of a chain, holding no live item) off the
    /// chain after `prev` and puts it on the free list.
    pub(crate) fn unlink(&mut self, prev: usize, last: usize) {
        debug_assert!(last >= self.buckets && self.next_in_chain(prev) == Some(last));
        debug_assert!(self.next_in_chain(last).is_none());
        self.set(Slot { bucket: prev, entry: LINK_SLOT }, 0);
        for entry in 0..ENTRIES_PER_BUCKET {
            self.set(Slot { bucket: last, entry }, 0);
        }
        self.set(Slot { bucket: last, entry: 0 }, self.chain_free);
        self.chain_free = (last - self.buckets) as u64 + 1;
        self.chain_used -= 1;
    }
}

#[cfg(test)]
impl Index {
    /// Leaves at most `buckets` overflow buckets (of those never used).
    pub(crate) fn cap_overflow(&mut self, buckets: usize) {
        self.chain_cap = self.chain_cap.min(self.chain_top + buckets);
    }
}

/// The buckets a key may be in, in the order lookups read them (`Index::walk`).
pub(crate) struct Walk<'a> {
    index: &'a Index,
    home: usize,
    step: u8,
    /// The bucket whose link the next step follows.
    at: usize,
}

impl Iterator for Walk<'_> {
    type Item = usize;

    #[inline]
    fn next(&mut self) -> Option<usize> {
        match self.step {
            0 => {
                self.step = 1;
                Some(self.home)
            }
            1 => {
                self.step = 2;
                Some(self.home ^ 1)
            }
            _ => {
                self.at = self.index.next_in_chain(self.at)?;
                Some(self.at)
            }
        }
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
        let mut index = Index::new(4, 4).unwrap();
        assert_eq!(index.bytes(), 256);
        let slot = Slot { bucket: 3, entry: 7 };
        index.set(slot, 42);
        assert_eq!(index.get(slot), 42);
        assert_eq!(index.bucket(3)[7], 42);
        assert_eq!(index.all_slots().count(), 32);
    }
}
