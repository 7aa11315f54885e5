//! The store-mode index (MICA's lossless index): it never drops an entry. A bucket is one
//! 64-byte line of seven entries and a link; when a key's bucket is full, a spare bucket from a
//! pool sized at creation is linked after it (chains grow in whole buckets), and a delete moves
//! the chain's last entry into the hole, so chains shrink and empty spare buckets go back to
//! the pool.
//!
//! ```text
//!  bucket: [ entry 0 .. entry 6 | link ]        entry = tag:16 | location:48 (0 = empty)
//!  link:   0 = end of chain, else (spare bucket number + 1)
//!  main buckets 0..buckets, then spare buckets; free spares are chained through their links
//! ```
//!
//! The bucket count is any number (a multiply-shift of 32 hash bits picks the bucket), so the
//! index is sized to its items instead of doubling in powers of two.
//!
//! Occupied entries of a chain are packed: every bucket but the last is full and the last one's
//! entries fill from slot 0, so "the last entry" is found without scanning holes. Tags are not
//! unique (nothing is dropped to make them so); a lookup checks every entry with its tag.

use crate::hash::KeyHash;
use crate::region::{prefetch, Region};

/// Entries in one store-mode bucket.
pub(crate) const CHAIN_ENTRIES: usize = 7;
const LINK: usize = CHAIN_ENTRIES;
const LOCATION_BITS: u32 = 48;
const LOCATION_MASK: u64 = (1 << LOCATION_BITS) - 1;

/// A slot of a chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ChainSlot {
    pub bucket: usize,
    pub entry: usize,
}

/// A lossless, chained index.
pub(crate) struct ChainIndex {
    region: Region,
    buckets: usize,
    spares: usize,
    /// Head of the free spare list (bucket number + 1; 0 = none left).
    free_spare: u64,
    spares_free: usize,
    entries: usize,
}

impl ChainIndex {
    /// `buckets` main buckets (any count from 1 to 2^32) and `spares` spare buckets; None if
    /// the kernel refuses the memory.
    pub(crate) fn new(buckets: usize, spares: usize) -> Option<ChainIndex> {
        assert!((1..=1 << 32).contains(&buckets));
        let region = Region::new((buckets + spares) * 64)?;
        let mut index = ChainIndex { region, buckets, spares, free_spare: 0, spares_free: 0, entries: 0 };
        for spare in (buckets..buckets + spares).rev() {
            index.release_spare(spare);
        }
        Some(index)
    }

    /// Bytes the index occupies (main and spare buckets).
    pub(crate) fn bytes(&self) -> usize {
        self.region.len()
    }

    pub(crate) fn buckets(&self) -> usize {
        self.buckets
    }

    /// Spare buckets not in any chain.
    pub(crate) fn spares_free(&self) -> usize {
        self.spares_free
    }

    /// Entries stored.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries
    }

    /// Starts loading a key's first bucket.
    #[inline]
    pub(crate) fn prefetch(&self, hash: KeyHash) {
        prefetch(self.words(self.home(hash)).as_ptr());
    }

    /// The location of the first entry with `hash`'s tag in its home bucket, for prefetching
    /// the item before the lookup proper.
    #[inline]
    pub(crate) fn first_with_tag(&self, hash: KeyHash) -> Option<u64> {
        let tag = u64::from(hash.tag());
        let words = self.words(self.home(hash));
        words[..CHAIN_ENTRIES].iter().find(|&&word| word >> LOCATION_BITS == tag).map(|word| word & LOCATION_MASK)
    }

    /// The location stored for the first entry of `hash`'s chain with its tag that `is_key`
    /// accepts, and where that entry is.
    #[inline]
    pub(crate) fn find(&self, hash: KeyHash, mut is_key: impl FnMut(u64) -> bool) -> Option<(ChainSlot, u64)> {
        let tag = u64::from(hash.tag());
        let mut bucket = self.home(hash);
        loop {
            let words = self.words(bucket);
            for (entry, &word) in words[..CHAIN_ENTRIES].iter().enumerate() {
                if word == 0 {
                    return None; // entries are packed: the chain ends here
                }
                if word >> LOCATION_BITS == tag && is_key(word & LOCATION_MASK) {
                    return Some((ChainSlot { bucket, entry }, word & LOCATION_MASK));
                }
            }
            match words[LINK] {
                0 => return None,
                link => bucket = link as usize - 1,
            }
        }
    }

    /// Points an existing entry at a new location.
    pub(crate) fn replace(&mut self, slot: ChainSlot, hash: KeyHash, location: u64) {
        debug_assert!(location <= LOCATION_MASK);
        self.words_mut(slot.bucket)[slot.entry] = u64::from(hash.tag()) << LOCATION_BITS | location;
    }

    /// Adds an entry (the caller knows the key is absent). False, changing nothing, when the
    /// chain is full and no spare bucket is left.
    pub(crate) fn insert(&mut self, hash: KeyHash, location: u64) -> bool {
        debug_assert!(location <= LOCATION_MASK);
        let entry_word = u64::from(hash.tag()) << LOCATION_BITS | location;
        let (last, used) = self.chain_end(self.home(hash));
        let (bucket, entry) = if used < CHAIN_ENTRIES {
            (last, used)
        } else {
            let Some(spare) = self.take_spare() else { return false };
            self.words_mut(last)[LINK] = spare as u64 + 1;
            (spare, 0)
        };
        self.words_mut(bucket)[entry] = entry_word;
        self.entries += 1;
        true
    }

    /// Removes the entry at `slot`, moving the chain's last entry into its place and giving an
    /// emptied spare bucket back.
    pub(crate) fn remove(&mut self, slot: ChainSlot, hash: KeyHash) {
        let home = self.home(hash);
        let (last, used) = self.chain_end(home);
        debug_assert!(used > 0);
        let moved = self.words(last)[used - 1];
        self.words_mut(last)[used - 1] = 0;
        if (last, used - 1) != (slot.bucket, slot.entry) {
            self.words_mut(slot.bucket)[slot.entry] = moved;
        }
        self.entries -= 1;
        if used == 1 && last != home {
            // The last bucket is empty now: unlink it from the bucket before it.
            let mut bucket = home;
            while self.words(bucket)[LINK] as usize - 1 != last {
                bucket = self.words(bucket)[LINK] as usize - 1;
            }
            self.words_mut(bucket)[LINK] = 0;
            self.release_spare(last);
        }
    }

    /// Clears every entry and returns every spare to the pool.
    pub(crate) fn clear(&mut self) {
        self.region.bytes_mut().fill(0);
        self.free_spare = 0;
        self.spares_free = 0;
        self.entries = 0;
        for spare in (self.buckets..self.buckets + self.spares).rev() {
            self.release_spare(spare);
        }
    }

    /// Calls `f` with every location stored in the chain of main bucket `home`.
    pub(crate) fn chain_locations(&self, home: usize, f: &mut dyn FnMut(u64)) {
        let mut bucket = home;
        // A chain is at most every spare bucket long.
        for _ in 0..=self.spares {
            let words = self.words(bucket);
            words[..CHAIN_ENTRIES].iter().filter(|&&w| w != 0).for_each(|w| f(w & LOCATION_MASK));
            match words[LINK] {
                0 => return,
                link => bucket = link as usize - 1,
            }
        }
    }

    /// Every stored location, for reports and tests (walks the whole index).
    #[cfg(test)]
    pub(crate) fn locations(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.buckets).flat_map(move |home| {
            let mut chain = vec![home];
            while let link @ 1.. = self.words(*chain.last().expect("non-empty"))[LINK] {
                chain.push(link as usize - 1);
            }
            chain.into_iter().flat_map(move |bucket| {
                self.words(bucket)[..CHAIN_ENTRIES].iter().filter(|&&w| w != 0).map(|w| w & LOCATION_MASK)
            })
        })
    }

    /// A key's first bucket: 32 bits of the hash that neither the partition (top 16 bits) nor
    /// the tag (low 16) use, scaled to the bucket count (so it need not be a power of two and
    /// the index can be sized to the items it must hold).
    #[inline]
    fn home(&self, hash: KeyHash) -> usize {
        ((u64::from((hash.0 >> 16) as u32) * self.buckets as u64) >> 32) as usize
    }

    /// The chain's last bucket and how many entries it holds.
    fn chain_end(&self, home: usize) -> (usize, usize) {
        let mut bucket = home;
        loop {
            let words = self.words(bucket);
            match words[LINK] {
                0 => return (bucket, words[..CHAIN_ENTRIES].iter().take_while(|&&w| w != 0).count()),
                link => bucket = link as usize - 1,
            }
        }
    }

    fn take_spare(&mut self) -> Option<usize> {
        let spare = self.free_spare.checked_sub(1)? as usize;
        self.free_spare = self.words(spare)[LINK];
        self.words_mut(spare)[LINK] = 0;
        self.spares_free -= 1;
        Some(spare)
    }

    fn release_spare(&mut self, spare: usize) {
        let next = self.free_spare;
        let words = self.words_mut(spare);
        words.fill(0);
        words[LINK] = next;
        self.free_spare = spare as u64 + 1;
        self.spares_free += 1;
    }

    fn words(&self, bucket: usize) -> &[u64] {
        &self.region.typed::<u64>()[bucket * 8..bucket * 8 + 8]
    }

    fn words_mut(&mut self, bucket: usize) -> &mut [u64] {
        &mut self.region.typed_mut::<u64>()[bucket * 8..bucket * 8 + 8]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    /// Keys are numbers; a location is the key itself, so `is_key` is an equality test.
    fn find(index: &ChainIndex, key: u64) -> Option<u64> {
        let hash = KeyHash::of(&key.to_le_bytes());
        index.find(hash, |location| location == key).map(|(_, location)| location)
    }

    #[test]
    fn a_full_bucket_borrows_spares_and_gives_them_back() {
        let mut index = ChainIndex::new(1, 3).unwrap();
        assert_eq!(index.spares_free(), 3);
        for key in 1..=28u64 {
            assert!(index.insert(KeyHash::of(&key.to_le_bytes()), key), "key {key}");
        }
        // 1 main + 3 spare buckets of 7 entries: 28 fit, the 29th does not.
        assert_eq!(index.spares_free(), 0);
        assert!(!index.insert(KeyHash::of(&29u64.to_le_bytes()), 29));
        assert!((1..=28).all(|key| find(&index, key) == Some(key)));
        for key in 1..=28u64 {
            let hash = KeyHash::of(&key.to_le_bytes());
            let (slot, _) = index.find(hash, |location| location == key).unwrap();
            index.remove(slot, hash);
            assert_eq!(find(&index, key), None);
            assert!((key + 1..=28).all(|other| find(&index, other) == Some(other)));
        }
        assert_eq!((index.len(), index.spares_free()), (0, 3));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Against a HashMap: inserts, replacements and removals in a small index with few
        /// spares; nothing acknowledged is ever lost, a refused insert changes nothing.
        #[test]
        fn matches_a_map_and_never_drops(ops in prop::collection::vec((0u8..3, 0u64..300), 1..600)) {
            let mut index = ChainIndex::new(8, 4).unwrap();
            let mut model: HashMap<u64, u64> = HashMap::new();
            for (op, key) in ops {
                let key = key + 1;
                let hash = KeyHash::of(&key.to_le_bytes());
                // A location encodes the key (low 20 bits) and a version, so replacements show.
                let found = index.find(hash, |location| location & 0xFFFFF == key);
                match op {
                    0 | 1 => {
                        let location = key | (u64::from(op) + 1) << 20;
                        match found {
                            Some((slot, _)) => {
                                index.replace(slot, hash, location);
                                model.insert(key, location);
                            }
                            None => {
                                if index.insert(hash, location) {
                                    model.insert(key, location);
                                } else {
                                    prop_assert_eq!(index.spares_free(), 0);
                                }
                            }
                        }
                    }
                    _ => {
                        if let Some((slot, _)) = found {
                            index.remove(slot, hash);
                            model.remove(&key);
                        }
                    }
                }
                prop_assert_eq!(index.len(), model.len());
            }
            for (&key, &location) in &model {
                let hash = KeyHash::of(&key.to_le_bytes());
                prop_assert_eq!(index.find(hash, |l| l & 0xFFFFF == key).map(|(_, l)| l), Some(location));
            }
            let mut stored: Vec<u64> = index.locations().collect();
            let mut expected: Vec<u64> = model.values().copied().collect();
            stored.sort_unstable();
            expected.sort_unstable();
            prop_assert_eq!(stored, expected);
        }
    }
}
