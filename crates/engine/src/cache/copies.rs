//! Flash hits answered from the read's own copy instead of a promotion into the log.
//!
//! Copying every flash hit into the log costs a write there, and in a full log it evicts
//! another item, which may have to go to flash again: a uniform read load churns DRAM for
//! nothing. So a plain read (`get`, `gets`, binary GET) of an item read from flash is answered
//! from the bytes the read brought (`Copies`), and only an item hit a second time while the
//! filter remembers its first hit is promoted (CacheLib and memcached's extstore recache
//! rarely, too). Requests that change the item, or need more than its value, get it promoted.
//!
//! A copy lives only while the owner finishes the requests whose reads completed (between
//! `flash_poll` and `flash_submit`), and goes at once when anything changes its key or
//! forgets flash copies (the same calls that drop the store's copy): it can never outlive a
//! newer write.
//!
//! It must not read or write the device, nor touch the log.

use crate::flash::ItemMeta;
use crate::hash::KeyHash;

/// Entries of the second-hit filter: 16384 x 4 bytes = 64 KiB per partition.
const SEEN: usize = 1 << 14;

/// An item read from flash and not promoted.
#[derive(Debug)]
pub(super) struct FlashCopy {
    pub(super) hash: KeyHash,
    pub(super) key: Vec<u8>,
    pub(super) value: Vec<u8>,
    pub(super) meta: ItemMeta,
}

/// The copies of this turn, the one the running request reads, and the second-hit filter.
#[derive(Debug)]
pub(super) struct Copies {
    items: Vec<FlashCopy>,
    /// The copy the request now running reads (`Partition::read_item` on a DRAM miss).
    serving: Option<usize>,
    /// Part of the hash of a key hit once recently, at a slot its hash picks (0: none).
    seen: Box<[u32]>,
}

impl Default for Copies {
    fn default() -> Copies {
        Copies { items: Vec::new(), serving: None, seen: vec![0; SEEN].into_boxed_slice() }
    }
}

impl Copies {
    /// The filter's DRAM, bytes.
    pub(super) fn filter_bytes(&self) -> usize {
        self.seen.len() * std::mem::size_of::<u32>()
    }

    /// Whether a hit on `hash` should be promoted: true if its key was hit recently (the
    /// filter forgets it then), false on a first hit (remembered).
    pub(super) fn hit_again(&mut self, hash: KeyHash) -> bool {
        let slot = (hash.0 as usize) & (SEEN - 1);
        let mark = ((hash.0 >> 32) as u32) | 1;
        if self.seen[slot] == mark {
            self.seen[slot] = 0;
            true
        } else {
            self.seen[slot] = mark;
            false
        }
    }

    pub(super) fn push(&mut self, copy: FlashCopy) {
        self.items.push(copy);
    }

    /// Forgets every copy (the turn is over, or every flash copy is).
    #[inline]
    pub(super) fn clear(&mut self) {
        if !self.items.is_empty() {
            self.items.clear();
        }
        self.serving = None;
    }

    /// The request now running reads no copy.
    #[inline]
    pub(super) fn stop_serving(&mut self) {
        self.serving = None;
    }

    fn position(&self, key: &[u8], hash: KeyHash) -> Option<usize> {
        self.items.iter().position(|c| c.hash == hash && c.key == key)
    }

    /// Makes `key`'s copy, if any, the one the next read sees; true if there is one.
    pub(super) fn serve(&mut self, key: &[u8], hash: KeyHash) -> bool {
        self.serving = self.position(key, hash);
        self.serving.is_some()
    }

    /// Takes `key`'s copy out (to be promoted).
    pub(super) fn take(&mut self, key: &[u8], hash: KeyHash) -> Option<FlashCopy> {
        let at = self.position(key, hash)?;
        self.serving = None;
        Some(self.items.swap_remove(at))
    }

    /// Drops every copy of `hash`: its key changed, or its flash copy went.
    #[inline]
    pub(super) fn drop_hash(&mut self, hash: KeyHash) {
        if !self.items.is_empty() {
            self.items.retain(|c| c.hash != hash);
            self.serving = None;
        }
    }

    /// The copy the running request reads, if it is `key`'s.
    #[inline]
    pub(super) fn serving(&self, key: &[u8], hash: KeyHash) -> Option<&FlashCopy> {
        let copy = self.items.get(self.serving?)?;
        (copy.hash == hash && copy.key == key).then_some(copy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy(key: &[u8]) -> FlashCopy {
        FlashCopy { hash: KeyHash::of(key), key: key.to_vec(), value: b"v".to_vec(), meta: ItemMeta::default() }
    }

    #[test]
    fn a_copy_is_served_only_to_its_key_and_only_while_selected() {
        let mut copies = Copies::default();
        copies.push(copy(b"a"));
        copies.push(copy(b"b"));
        let (a, b) = (KeyHash::of(b"a"), KeyHash::of(b"b"));
        assert!(copies.serving(b"a", a).is_none(), "nothing selected yet");
        assert!(copies.serve(b"a", a));
        assert!(copies.serving(b"a", a).is_some());
        assert!(copies.serving(b"b", b).is_none(), "only the selected key's copy");
        copies.stop_serving();
        assert!(copies.serving(b"a", a).is_none());
        // A change of the key drops its copy for good.
        copies.drop_hash(a);
        assert!(!copies.serve(b"a", a));
        assert!(copies.take(b"b", b).is_some());
        assert!(!copies.serve(b"b", b));
        copies.push(copy(b"c"));
        copies.clear();
        assert!(!copies.serve(b"c", KeyHash::of(b"c")));
    }

    #[test]
    fn the_second_hit_is_promoted_and_the_first_is_not() {
        let mut copies = Copies::default();
        let h = KeyHash::of(b"k");
        assert!(!copies.hit_again(h));
        assert!(copies.hit_again(h));
        assert!(!copies.hit_again(h), "promotion forgets the hit");
        assert_eq!(copies.filter_bytes(), 64 << 10);
    }
}
