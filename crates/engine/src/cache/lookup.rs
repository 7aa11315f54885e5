//! Finding a key's item in the log through the index: the one read path every operation
//! shares, with expired and flushed items treated as absent (and counted, as memcached counts
//! `get_expired` and `get_flushed`).
//!
//! It must not write items: only index entries of items found dead are dropped.

use crate::cache::index::{entry_offset, entry_tag, Index, Slot};
use crate::cache::{Found, Partition};
use crate::hash::KeyHash;
use crate::item::ItemHeader;
use crate::time::is_expired;
use crate::types::keys_equal;

impl Partition {
    /// Finds the item for `key` if its index entry is present and its bytes are intact. A tag
    /// match whose item has another key (a twin) or is gone is passed over. The pair's two
    /// buckets are read first; its overflow chain, if it has one, only after them.
    #[inline]
    pub(super) fn find(&self, key: &[u8], hash: KeyHash) -> Option<Found> {
        let tag = hash.tag();
        let home = hash.bucket(self.index.buckets());
        for bucket in Index::pair_order(home) {
            for (entry_no, &entry) in self.index.pair_bucket(bucket).iter().enumerate() {
                if entry_tag(entry) != tag {
                    continue;
                }
                if let Some(item) = self.item_of(entry, key) {
                    return Some(Found::at(Slot { bucket, entry: entry_no }, item));
                }
            }
        }
        if self.index.has_chain(home) {
            return self.find_in_chain(home, key, tag);
        }
        None
    }

    #[cold]
    #[inline(never)]
    fn find_in_chain(&self, home: usize, key: &[u8], tag: u16) -> Option<Found> {
        let mut at = home | 1;
        while let Some(bucket) = self.index.next_in_chain(at) {
            let mut candidates =
                self.index.bucket(bucket).iter().enumerate().filter(|(_, &entry)| entry_tag(entry) == tag);
            let hit = candidates.find_map(|(entry_no, &entry)| Some((entry_no, self.item_of(entry, key)?)));
            if let Some((entry_no, item)) = hit {
                return Some(Found::at(Slot { bucket, entry: entry_no }, item));
            }
            at = bucket;
        }
        None
    }

    /// Where the live item an entry names is (position, ring index, header and its length),
    /// if its key is `key`.
    #[inline(always)]
    fn item_of(&self, entry: u64, key: &[u8]) -> Option<(u64, usize, ItemHeader, usize)> {
        let age = self.log.age_of(entry_offset(entry));
        if age > self.log.max_age() {
            return None;
        }
        let position = self.log.tail() - age;
        let (ring_index, header, header_len) = self.item_with_key(position, key)?;
        Some((position, ring_index, header, header_len))
    }

    /// The ring index, header and header length of the intact item at `position`, if its key
    /// is `key`.
    #[inline(always)]
    fn item_with_key(&self, position: u64, key: &[u8]) -> Option<(usize, ItemHeader, usize)> {
        let ring_index = self.log.ring_index(position);
        let bytes = self.log.bytes_from(ring_index);
        let (header, header_len) = ItemHeader::decode(bytes);
        let same = header.key_len == key.len() && keys_equal(&bytes[header_len..header_len + key.len()], key);
        same.then_some((ring_index, header, header_len))
    }

    /// The header of the intact item at `position`, if its key is `key`.
    #[inline]
    pub(super) fn header_if_key(&self, position: u64, key: &[u8]) -> Option<ItemHeader> {
        self.item_with_key(position, key).map(|(_, header, _)| header)
    }

    /// The header of the intact item at `position`.
    #[inline]
    pub(super) fn header_at(&self, position: u64) -> ItemHeader {
        ItemHeader::decode(self.log.bytes_from(self.log.ring_index(position))).0
    }

    /// `find`, treating an expired item as absent (and dropping its entry).
    #[inline]
    pub(super) fn find_live(&mut self, key: &[u8], hash: KeyHash) -> Option<Found> {
        let Some(found) = self.find(key, hash) else {
            if self.log.hides_flushed() {
                self.forget_flushed(key, hash);
            }
            return None;
        };
        if is_expired(found.header.expiry, self.now) {
            self.index.set(found.slot, 0);
            self.census.removed(found.position, &found.header);
            self.stats.expired_reads += 1;
            return None;
        }
        Some(found)
    }

    /// After a flush_all, the key's entry may name an item still intact but below the flush
    /// floor: counted once (`EngineStats::flushed_reads`) and dropped, as memcached unlinks a
    /// flushed item its get finds.
    fn forget_flushed(&mut self, key: &[u8], hash: KeyHash) {
        let tag = hash.tag();
        let (max_age, live_span) = (self.log.max_age(), self.log.live_span());
        let found = self.index.walk(hash.bucket(self.index.buckets())).find_map(|bucket| {
            let entries = self.index.bucket(bucket);
            entries.iter().enumerate().find_map(|(entry_no, &entry)| {
                let age = self.log.age_of(entry_offset(entry));
                let hidden = entry_tag(entry) == tag && age > max_age && age <= live_span;
                (hidden && self.header_if_key(self.log.tail() - age, key).is_some())
                    .then_some(Slot { bucket, entry: entry_no })
            })
        });
        if let Some(slot) = found {
            self.stats.flushed_reads += 1;
            self.index.set(slot, 0);
        }
    }
}
