//! Live-item accounting for the circular log, so `curr_items`, `total_items` and `evictions`
//! cost O(1) per operation and nothing to report.
//!
//! The log's eviction is implicit: the tail overwrites the oldest bytes and nobody visits the
//! items lost. So the virtual positions are cut into segments (a power of two, about 1/64 of
//! the log each, twice as long each time `cache_memlimit` grows the log past 64 of them) and the census counts the live items whose position lies in each.
//! When the log's live span leaves a whole segment behind, the items still counted in it are
//! the evicted ones. An item that dies earlier (deleted, overwritten, found expired, dropped by
//! a full index pair, copied forward) is taken off its segment's count, unless that segment
//! was already evicted. Eviction is thus counted at segment granularity: up to one segment
//! after the log really overwrites an item.

use crate::item::ItemHeader;
use crate::types::{ClassFigures, CLASS_CHUNK_BYTES, SIZE_CLASSES};

/// What memcached would allocate for an item (`ITEM_ntotal`: its 48-byte header, the key and
/// a NUL, the value and its CRLF, the CAS, the flags when not 0) and the index of the class it
/// would be in (larger items are chunked in the last class).
pub(crate) fn memcached_size(header: &ItemHeader) -> (u64, usize) {
    let requested = 48 + header.key_len + 1 + header.value_len + 2 + 8 + if header.flags != 0 { 4 } else { 0 };
    let class = CLASS_CHUNK_BYTES.partition_point(|&chunk| (chunk as usize) < requested).min(SIZE_CLASSES - 1);
    (requested as u64, class)
}

/// Per segment and class: items and memcached's requested bytes (boxed: 60 KiB).
struct PerClass {
    items: [[u32; SIZE_CLASSES]; MAX_SEGMENTS],
    requested: [[u64; SIZE_CLASSES]; MAX_SEGMENTS],
}

/// Slots for segment counts: a live span of the largest log covers at most 64 whole segments
/// and parts of two more; a power of two so a segment's slot is a mask.
const MAX_SEGMENTS: usize = 128;

/// Per-segment live-item counts and the totals derived from them.
pub(crate) struct Census {
    shift: u32,
    /// The oldest segment still counted; segments before it were evicted.
    oldest: u64,
    counts: [u64; MAX_SEGMENTS],
    /// Log bytes (header, key and value) of the items counted in each segment.
    bytes: [u64; MAX_SEGMENTS],
    live: u64,
    live_bytes: u64,
    stored: u64,
    evicted: u64,
    per_class: Box<PerClass>,
    /// Live items, requested bytes and evictions by memcached class.
    classes: [ClassFigures; SIZE_CLASSES],
}

impl Census {
    /// A census for a log of `capacity` bytes whose tail is at `tail`.
    pub(crate) fn new(capacity: u64, tail: u64) -> Census {
        let segment_bytes = (capacity / 64).max(1).next_power_of_two();
        let shift = segment_bytes.trailing_zeros();
        Census {
            shift,
            oldest: tail >> shift,
            counts: [0; MAX_SEGMENTS],
            bytes: [0; MAX_SEGMENTS],
            live: 0,
            live_bytes: 0,
            stored: 0,
            evicted: 0,
            per_class: Box::new(PerClass {
                items: [[0; SIZE_CLASSES]; MAX_SEGMENTS],
                requested: [[0; SIZE_CLASSES]; MAX_SEGMENTS],
            }),
            classes: [ClassFigures::default(); SIZE_CLASSES],
        }
    }

    /// Makes segments longer until a log of `capacity` bytes spans at most 64 of them (live
    /// spans of up to two laps must fit the slots).
    pub(crate) fn fit(&mut self, capacity: u64) {
        while capacity / 64 > 1 << self.shift {
            self.widen();
        }
    }

    /// Doubles the segments' length, adding each pair's counts.
    fn widen(&mut self) {
        let (counts, bytes) = (self.counts, self.bytes);
        (self.counts, self.bytes) = ([0; MAX_SEGMENTS], [0; MAX_SEGMENTS]);
        let old = std::mem::replace(
            &mut self.per_class,
            Box::new(PerClass {
                items: [[0; SIZE_CLASSES]; MAX_SEGMENTS],
                requested: [[0; SIZE_CLASSES]; MAX_SEGMENTS],
            }),
        );
        for segment in self.oldest..self.oldest + MAX_SEGMENTS as u64 {
            let (from, to) = (Census::slot(segment), Census::slot(segment >> 1));
            self.counts[to] += counts[from];
            self.bytes[to] += bytes[from];
            for class in 0..SIZE_CLASSES {
                self.per_class.items[to][class] += old.items[from][class];
                self.per_class.requested[to][class] += old.requested[from][class];
            }
        }
        self.oldest >>= 1;
        self.shift += 1;
    }

    #[inline]
    fn slot(segment: u64) -> usize {
        (segment & (MAX_SEGMENTS as u64 - 1)) as usize
    }

    /// The tail moved to `tail` and items older than `live_span` are gone: the segments wholly
    /// behind that are evicted.
    #[inline]
    pub(crate) fn advance(&mut self, tail: u64, live_span: u64) {
        let dead_before = tail.saturating_sub(live_span) >> self.shift;
        if dead_before <= self.oldest {
            return;
        }
        // Only the last MAX_SEGMENTS segments can hold counts.
        for segment in dead_before.saturating_sub(MAX_SEGMENTS as u64).max(self.oldest)..dead_before {
            let slot = Census::slot(segment);
            self.evicted += self.counts[slot];
            self.live -= self.counts[slot];
            self.live_bytes -= self.bytes[slot];
            self.counts[slot] = 0;
            self.bytes[slot] = 0;
            for (class, figures) in self.classes.iter_mut().enumerate() {
                let items = u64::from(std::mem::take(&mut self.per_class.items[slot][class]));
                figures.evicted += items;
                figures.items -= items;
                figures.requested_bytes -= std::mem::take(&mut self.per_class.requested[slot][class]);
            }
        }
        self.oldest = dead_before;
    }

    /// A new item with `header` was stored at `position` (the tail has already been advanced
    /// past it).
    #[inline]
    pub(crate) fn stored(&mut self, position: u64, header: &ItemHeader) {
        self.stored += 1;
        self.moved_in(position, header);
    }

    /// An existing item, now with `header`, was copied to `position`.
    #[inline]
    pub(crate) fn moved_in(&mut self, position: u64, header: &ItemHeader) {
        let segment = position >> self.shift;
        debug_assert!(segment >= self.oldest && segment - self.oldest < MAX_SEGMENTS as u64);
        let slot = Census::slot(segment);
        let bytes = header.total_len() as u64;
        self.counts[slot] += 1;
        self.bytes[slot] += bytes;
        self.live += 1;
        self.live_bytes += bytes;
        let (requested, class) = memcached_size(header);
        self.per_class.items[slot][class] += 1;
        self.per_class.requested[slot][class] += requested;
        self.classes[class].items += 1;
        self.classes[class].requested_bytes += requested;
    }

    /// The item with `header` at `position` died before the tail reached it.
    #[inline]
    pub(crate) fn removed(&mut self, position: u64, header: &ItemHeader) {
        let segment = position >> self.shift;
        if segment >= self.oldest {
            let slot = Census::slot(segment);
            let bytes = header.total_len() as u64;
            debug_assert!(self.counts[slot] > 0 && self.bytes[slot] >= bytes);
            self.counts[slot] -= 1;
            self.bytes[slot] -= bytes;
            self.live -= 1;
            self.live_bytes -= bytes;
            let (requested, class) = memcached_size(header);
            self.per_class.items[slot][class] -= 1;
            self.per_class.requested[slot][class] -= requested;
            self.classes[class].items -= 1;
            self.classes[class].requested_bytes -= requested;
        }
    }

    /// The expired item with `header` was dropped (before `removed`): memcached's `reclaimed`.
    pub(crate) fn reclaimed(&mut self, header: &ItemHeader) {
        self.classes[memcached_size(header).1].reclaimed += 1;
    }

    /// Every item is gone at once (flush_all); not evictions.
    pub(crate) fn flushed(&mut self) {
        self.counts = [0; MAX_SEGMENTS];
        self.bytes = [0; MAX_SEGMENTS];
        self.live = 0;
        self.live_bytes = 0;
        self.per_class.items = [[0; SIZE_CLASSES]; MAX_SEGMENTS];
        self.per_class.requested = [[0; SIZE_CLASSES]; MAX_SEGMENTS];
        for figures in &mut self.classes {
            (figures.items, figures.requested_bytes) = (0, 0);
        }
    }

    /// Live items, memcached's requested bytes and evictions by memcached's size classes.
    pub(crate) fn classes(&self) -> [ClassFigures; SIZE_CLASSES] {
        self.classes
    }

    /// Items that are in the index and the log now (expired ones too, until noticed).
    pub(crate) fn live(&self) -> u64 {
        self.live
    }

    /// Log bytes of the items `live` counts.
    pub(crate) fn live_bytes(&self) -> u64 {
        self.live_bytes
    }

    /// Whether the segment holding `position` counts no live item (a walk may pass it by).
    #[inline]
    pub(crate) fn segment_empty(&self, position: u64) -> bool {
        let segment = position >> self.shift;
        segment < self.oldest || self.counts[Census::slot(segment)] == 0
    }

    /// Items ever stored (copies forward not counted).
    pub(crate) fn stored_total(&self) -> u64 {
        self.stored
    }

    /// Live items the log overwrote.
    pub(crate) fn evicted(&self) -> u64 {
        self.evicted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(value_len: usize) -> ItemHeader {
        ItemHeader { key_len: 4, value_len, flags: 0, expiry: 0, cas: None, state: 0 }
    }

    #[test]
    fn items_the_tail_reaches_again_are_evicted_once() {
        let mut census = Census::new(6400, 0);
        // Segments of 128 bytes.
        for position in (0..6400).step_by(100) {
            census.advance(position + 100, position + 100);
            census.stored(position, &item(93));
        }
        assert_eq!((census.live(), census.evicted(), census.stored_total()), (64, 0, 64));
        census.removed(150, &item(93));
        assert_eq!((census.live(), census.live_bytes()), (63, 6300));
        // One more lap: the first lap's items are all evicted, the removed one not again.
        census.advance(12_900, 6400);
        assert_eq!((census.live(), census.evicted(), census.live_bytes()), (0, 63, 0));
        // 4 + 93 bytes: memcached's 156-byte item, class 4 (192-byte chunks).
        assert_eq!(memcached_size(&item(93)), (156, 3));
        let classes = census.classes();
        assert_eq!((classes[3].items, classes[3].requested_bytes, classes[3].evicted), (0, 0, 63));
        // Removing an item whose segment was recycled changes nothing.
        census.removed(300, &item(93));
        assert_eq!((census.live(), census.evicted()), (0, 63));
    }

    #[test]
    fn a_log_grown_past_64_segments_is_counted_in_longer_ones() {
        let mut census = Census::new(6400, 0);
        for position in (0..6400).step_by(100) {
            census.advance(position + 100, position + 100);
            census.stored(position, &item(93));
        }
        // cache_memlimit four times larger: segments of 512 bytes, nothing lost or evicted.
        census.fit(4 * 6400);
        assert_eq!(census.shift, 9);
        assert_eq!((census.live(), census.evicted(), census.live_bytes()), (64, 0, 6400));
        census.removed(150, &item(93));
        assert_eq!(census.live(), 63);
        // A lap of the longer log later, the items written before it are evicted once.
        census.advance(6400 + 4 * 6400 + 512, 4 * 6400);
        assert_eq!((census.live(), census.evicted(), census.classes()[3].evicted), (0, 63, 63));
    }

    #[test]
    fn flush_is_not_eviction() {
        let mut census = Census::new(1 << 20, 5_000);
        census.advance(5_100, 5_100);
        census.stored(5_000, &item(64));
        census.flushed();
        census.advance(10 << 20, 1 << 20);
        assert_eq!((census.live(), census.evicted(), census.stored_total()), (0, 0, 1));
    }
}
