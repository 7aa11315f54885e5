//! Pointing the index at a new item: the key's own entry is replaced, else a free or dead slot
//! is taken (its pair first, then the pair's overflow chain), else the chain grows. Only when
//! every overflow bucket is in use does the pair's oldest item go (counted in `evictions`).
//!
//! It must not move an entry that names a live item, except the one `Index::extend` moves (a
//! caller's `Found` for that key is not used after an insert).

use crate::cache::index::{entry_offset, entry_tag, is_item, make_entry, Index, Slot, ENTRIES_PER_BUCKET};
use crate::cache::{smallest_log, Partition};
use crate::hash::KeyHash;
use crate::item::ItemHeader;

/// What a walk of a key's buckets found for an insert.
struct Choice {
    /// The live entry of the same key, and its item's position and header.
    same: Option<(Slot, u64, ItemHeader)>,
    /// The first empty slot, or one whose item the log no longer holds.
    free: Option<Slot>,
    /// The live entry whose item is oldest, and its age.
    oldest: Option<(Slot, u64)>,
    /// Where the chain ends: its last overflow bucket, or the pair's odd bucket.
    end: usize,
    /// The bucket that links to `end`, when `end` is an overflow bucket.
    before_end: usize,
    /// Whether `end` holds a live item.
    end_live: bool,
}

impl Partition {
    /// Points the index at the item of `key` just written at `position` for `hash`, with
    /// `header` (its CAS field's value aside: the census needs only its sizes and class).
    pub(super) fn install(&mut self, hash: KeyHash, key: &[u8], header: &ItemHeader, position: u64) {
        let choice = self.choose_slot(hash, key);
        let slot = if let Some((slot, old, old_header)) = choice.same {
            if crate::time::is_expired(old_header.expiry, self.now) {
                // As memcached's allocation taking an expired item's memory.
                self.census.reclaimed(&old_header);
                self.stats.reclaimed += 1;
            }
            self.census.removed(old, &old_header);
            slot
        } else if let Some(slot) = choice.free {
            slot
        } else if let Some(slot) = self.index.extend(choice.end) {
            self.charge_index();
            slot
        } else {
            self.stats.index_evictions += 1;
            let (slot, age) = choice.oldest.expect("a full chain has an oldest entry");
            let old = self.log.tail() - age;
            self.spill_pushed_out(old);
            self.census.removed(old, &self.header_at(old));
            slot
        };
        let end_is_overflow = choice.end >= self.index.buckets();
        if end_is_overflow && !choice.end_live && slot.bucket != choice.end {
            self.index.unlink(choice.before_end, choice.end);
        }
        self.index.set(slot, make_entry(hash.tag(), position));
        debug_assert_eq!(self.header_at(position).total_len(), header.total_len());
        self.census.stored(position, header);
        // memcached hides whatever is stored during a delayed flush's deadline second.
        if self.flush.hides_writes(self.now) {
            self.flush_now();
        }
    }

    /// Walks every bucket the key may be in (the pair, then its chain) once, or until it
    /// finds the key's own entry.
    fn choose_slot(&self, hash: KeyHash, key: &[u8]) -> Choice {
        let home = hash.bucket(self.index.buckets());
        let mut choice =
            Choice { same: None, free: None, oldest: None, end: home | 1, before_end: home | 1, end_live: false };
        for bucket in Index::pair_order(home) {
            if self.look_at(bucket, self.index.pair_bucket(bucket), hash.tag(), key, &mut choice) {
                return choice;
            }
        }
        let mut at = home | 1;
        while let Some(bucket) = self.index.next_in_chain(at) {
            (choice.before_end, choice.end, choice.end_live) = (choice.end, bucket, false);
            if self.look_at(bucket, self.index.bucket(bucket), hash.tag(), key, &mut choice) {
                return choice;
            }
            at = bucket;
        }
        choice
    }

    /// Notes what the entries of `bucket` offer an insert of `key`; true if one is the key's.
    #[inline(always)]
    fn look_at(
        &self,
        bucket: usize,
        entries: &[u64; ENTRIES_PER_BUCKET],
        tag: u16,
        key: &[u8],
        choice: &mut Choice,
    ) -> bool {
        let max_age = self.log.max_age();
        for (entry_no, &entry) in entries.iter().enumerate() {
            let slot = Slot { bucket, entry: entry_no };
            if entry == 0 {
                choice.free = choice.free.or(Some(slot));
                continue;
            }
            if !is_item(entry) {
                continue; // the link to the next overflow bucket
            }
            let age = self.log.age_of(entry_offset(entry));
            if age > max_age {
                choice.free = choice.free.or(Some(slot));
                continue;
            }
            choice.end_live |= bucket == choice.end;
            if entry_tag(entry) == tag {
                let position = self.log.tail() - age;
                if let Some(header) = self.header_if_key(position, key) {
                    choice.same = Some((slot, position, header));
                    return true;
                }
            }
            if choice.oldest.is_none_or(|(_, oldest_age)| age > oldest_age) {
                choice.oldest = Some((slot, age));
            }
        }
        false
    }

    /// The key of the intact item at `position`.
    pub(super) fn key_at(&self, position: u64) -> &[u8] {
        let bytes = self.log.bytes_from(self.log.ring_index(position));
        let (header, header_len) = ItemHeader::decode(bytes);
        &bytes[header_len..header_len + header.key_len]
    }

    /// The log's next lap gives up what the index's overflow buckets now take of the budget.
    pub(super) fn charge_index(&mut self) {
        let log_bytes = self.budget.saturating_sub(self.fixed_bytes()).max(smallest_log(self.max_item_bytes));
        self.log.resize((log_bytes as u64).min(self.log.max_capacity()));
    }
}
