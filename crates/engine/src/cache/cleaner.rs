//! Log cleaning: live items are copied forward instead of evicted while the log has room.
//!
//! The circular log overwrites its oldest bytes whether or not they hold live items, so a
//! workload that rewrites large values would push out items that are still wanted long before
//! live data fills the budget (memcached, with its slab LRU, keeps them). Before every append,
//! a cursor walks the items the append will overwrite, oldest first, as a log-structured file
//! system's cleaner walks its oldest segment: an item that is still its key's current version
//! and not expired is copied to the tail while the live bytes (the census) stay below 7/8 of
//! the log; an expired one is dropped. Only when live data approaches the budget does the log
//! evict live items (in FIFO order, reads near eviction still being copied forward).
//!
//! The copy cost is bounded by the room rule: with at most 7/8 of the log live, walking a
//! byte of the oldest data frees on average at least an eighth of it, so the bytes copied
//! per byte appended stay below 7 over a lap (`EngineStats::bytes_copied_forward` counts
//! them). The walk also runs ahead of what the append needs, up to an eighth of the log and
//! at most `COPY_FACTOR` times the append plus `COPY_SLACK` bytes per append, so that
//! runs of live items are crossed a little at a time with the dead bytes found before them.
//! A run the tail meets with nothing walked ahead (the first lap after a bulk load) is copied
//! by the append that needs its room: a one-time cost at memory-copy speed.
//! Segments the census counts empty are walked without looking anything up. With a flash
//! tier the walk is the tier's: items spill to flash instead.
//!
//! New items carry their CAS field while the cleaner may copy them (`with_cas_field`): a copy
//! must keep the CAS, and an implicit one (the position) would need the field added, growing
//! the copy past the bytes the walk has seen.
//!
//! It must not run while the scratch buffer holds a value (copies may pass through it):
//! callers make room before they fill it.

use crate::cache::{Found, Partition};
use crate::hash::KeyHash;
use crate::item::ItemHeader;
use crate::time::is_expired;

/// What `clean_one` did with the item at the cursor.
enum Step {
    Walked,
    Cannot,
}

/// Bytes one append may copy forward per byte it appends.
const COPY_FACTOR: u64 = 16;
/// Bytes one append may copy forward whatever its size.
const COPY_SLACK: u64 = 64 << 10;
/// An explicit CAS field whose value is the item's position plus one, filled in when the
/// position is known (`with_cas_field`).
const PENDING_CAS: u64 = u64::MAX;

/// The CAS of an item written at `position` with `header`.
#[inline]
pub(super) fn cas_of(header: &ItemHeader, position: u64) -> u64 {
    match header.cas {
        Some(cas) if cas != PENDING_CAS => cas,
        _ => position + 1,
    }
}

impl Partition {
    /// Before the log writes `size` bytes: with a flash tier the items that write overwrites
    /// spill to flash; without, live ones are copied forward while there is room. Any item
    /// may be copied or evicted: a caller that needs one afterwards copies it out first.
    #[inline]
    pub(super) fn make_room(&mut self, size: usize) {
        if self.tier.is_some() {
            self.spill_before(size);
        } else if self.clean_cursor < self.log.survivors_from(size) {
            self.clean_before(size);
        }
    }

    /// The header a new item is written with. While the cleaner may copy it (no flash tier,
    /// room in the log) it carries its CAS explicitly: a first copy would otherwise grow by
    /// the field, and a run of live items copied with no dead bytes before them would have no
    /// room for the growth. When live data nears the budget, the CAS stays implicit in the
    /// position and saves 8 bytes an item.
    #[inline]
    pub(super) fn with_cas_field(&self, header: &ItemHeader) -> ItemHeader {
        if header.cas.is_none() && self.tier.is_none() && self.may_copy(header.total_len() as u64) {
            ItemHeader { cas: Some(PENDING_CAS), ..*header }
        } else {
            *header
        }
    }

    /// Whether live items may be copied forward now: live bytes below 7/8 of the log (of the
    /// lap that holds them while a resize waits for the next wrap).
    fn may_copy(&self, extra: u64) -> bool {
        let capacity = self.log.settled_capacity();
        self.census.live_bytes() + extra <= capacity - capacity / 8
    }

    /// Walks the items an append of `size` bytes will overwrite (it must), and on towards
    /// `ahead_of` bytes ahead of the tail's reach while the allowance lasts (it may), copying
    /// live items forward. Bytes walked past dead items are the room later copies use.
    fn clean_before(&mut self, size: usize) {
        let ahead = self.clean_ahead(size);
        let mut allowance = COPY_FACTOR * size as u64 + COPY_SLACK;
        // Walking ahead past dead items costs a header read each: bounded like the copies.
        let walk_until = self.clean_cursor + allowance;
        loop {
            let tail = self.log.tail();
            let must = self.clean_cursor < self.log.survivors_from(size).min(tail);
            let far = self.clean_cursor >= self.log.survivors_from(ahead).min(tail) || self.clean_cursor >= walk_until;
            if !must && (allowance == 0 || far) {
                return;
            }
            if let Some(to) = self.log.skip_at(self.clean_cursor) {
                self.clean_cursor = to;
                continue;
            }
            if self.clean_cursor < tail - self.log.live_span() {
                // Overwritten unseen (never expected): start again at the tail.
                self.stats.clean_lost_track += 1;
                self.clean_cursor = tail;
                return;
            }
            // What the append overwrites is copied while there is room, whatever the
            // allowance: dropping live items is what the cleaner is for avoiding.
            let mut unbounded = u64::MAX;
            match self.clean_one(size, if must { &mut unbounded } else { &mut allowance }) {
                Step::Walked => {}
                Step::Cannot if must => {
                    // Evicted: the append overwrites it.
                    let len = self.header_at(self.clean_cursor).total_len() as u64;
                    self.clean_cursor += len;
                }
                Step::Cannot => return,
            }
        }
    }

    /// How far ahead of the tail's reach the walk may go: an eighth of the log.
    fn clean_ahead(&self, size: usize) -> usize {
        let capacity = self.log.settled_capacity();
        (size as u64 + capacity / 8).min(capacity) as usize
    }

    /// The item at the cursor: passed (dead, expired, or copied forward, the cursor moved past
    /// it), or it cannot be copied now (no room, no allowance, or its copy would overwrite
    /// items not yet looked at; the cursor stays).
    fn clean_one(&mut self, size: usize, allowance: &mut u64) -> Step {
        let position = self.clean_cursor;
        let ring_index = self.log.ring_index(position);
        let (header, header_len) = ItemHeader::decode(self.log.bytes_from(ring_index));
        let len = header.total_len() as u64;
        let found = if self.census.segment_empty(position) {
            None
        } else {
            let key = &self.log.bytes_from(ring_index + header_len)[..header.key_len];
            self.find(key, KeyHash::of(key)).filter(|found| found.position == position)
        };
        let Some(found) = found else {
            self.clean_cursor += len;
            return Step::Walked;
        };
        if is_expired(header.expiry, self.now) {
            self.index.set(found.slot, 0);
            self.census.reclaimed(&header);
            self.census.removed(position, &header);
            self.stats.reclaimed += 1;
            self.clean_cursor += len;
            return Step::Walked;
        }
        let copy = ItemHeader { cas: Some(found.cas()), ..found.header };
        let copy_len = copy.total_len() as u64;
        let room = self.may_copy(size as u64 + copy_len) && *allowance >= copy_len;
        // The copy must not overwrite items the walk has not seen.
        let in_order = position + len >= self.log.survivors_from(copy.total_len());
        if !(room && in_order) {
            if room && !in_order {
                self.stats.clean_order_evictions += 1;
            }

            return Step::Cannot;
        }
        self.clean_cursor += len;
        *allowance = allowance.saturating_sub(copy_len);
        self.relocate(&found, &copy);
        self.stats.items_copied_forward += 1;
        self.stats.bytes_copied_forward += copy_len;
        Step::Walked
    }

    /// Copies `found` to the tail with `header` (its key and value lengths, its CAS explicit)
    /// and repoints its index entry. The caller made room; the scratch buffer is free.
    fn relocate(&mut self, found: &Found, header: &ItemHeader) {
        debug_assert_eq!((header.key_len, header.value_len), (found.header.key_len, found.header.value_len));
        let size = header.total_len();
        let payload_len = found.header.key_len + found.header.value_len;
        let old_start = found.payload_start();
        let survives = self.log.survives_append(found.position, size);
        if !survives {
            let (scratch, log) = (self.scratch.bytes_mut(), &self.log);
            scratch[..payload_len].copy_from_slice(&log.bytes_from(old_start)[..payload_len]);
        }
        self.census.removed(found.position, &found.header);
        let (position, ring_index, header_len) = self.reserve_copy(header);
        let new_start = ring_index + header_len;
        if survives {
            self.log.ring_mut().copy_within(old_start..old_start + payload_len, new_start);
        } else {
            let payload = &self.scratch.bytes()[..payload_len];
            self.log.bytes_from_mut(new_start)[..payload_len].copy_from_slice(payload);
        }
        let tag = crate::cache::index::entry_tag(self.index.get(found.slot));
        self.index.set(found.slot, crate::cache::index::make_entry(tag, position));
        self.sweep_to_tail();
    }
}
