//! The circular log (MICA's cache-mode store): one ring of bytes, mapped once, written only at
//! the tail. Positions are virtual: they grow forever (64 bits) and map to the ring as
//! `position - lap_start` (or, in the lap before, `position - lap_start + previous lap's
//! length`). An item is intact while its age (`tail - position`) is at most `live_span`, so
//! eviction is implicit FIFO and costs nothing.
//!
//! An item never straddles the end of a lap: when it would, the tail skips to the next lap and
//! the skipped bytes are dead. That wastes at most one item per lap and keeps every item one
//! contiguous slice, so reads are zero-copy.
//!
//! The ring is mapped at its largest size (`cache_memlimit` may grow the log up to it), but a
//! lap uses only its first `lap_len` bytes. A new length takes effect when the tail next
//! wraps: from then on the new lap overwrites the previous one from byte 0 while the previous
//! lap's items above the tail stay readable. So an item of the previous lap (length `P`) is
//! intact while its age is at most `P`, an item of this lap always is, and older ones never
//! are: `live_span = max(P, tail - lap_start)`. Bytes beyond both laps are given back to the
//! kernel when a shrink leaves them behind.

use std::sync::Arc;

use crate::cache::crew::{Geometry, Published};
use crate::region::{prefetch, Region, SharedBytes};

/// Where `plan` would put an item.
pub(crate) struct Placement {
    position: u64,
    index: usize,
    lap_start: u64,
    new_tail: u64,
    wraps: bool,
}

/// The ring and its tail.
pub(crate) struct Log {
    region: Region,
    /// Length of the current lap (bytes of the ring it may use).
    lap_len: u64,
    /// Length of the previous lap (0 before the first wrap).
    prev_lap_len: u64,
    /// The length the next lap will have (`resize`).
    next_lap_len: u64,
    /// How old a live item may be: `max(prev_lap_len, tail - lap_start)`.
    live_span: u64,
    /// Items older than this are copied forward when read (7/8 of the shorter of the two
    /// laps: they are close to being overwritten).
    reappend_age: u64,
    /// Virtual position where the next item goes.
    tail: u64,
    /// Virtual position of ring byte 0 in the current lap (`tail - lap_start <= lap_len`).
    lap_start: u64,
    /// Items before this position were flushed (flush_all).
    floor: u64,
    /// The last two places the tail skipped to a new lap: (the old tail, the new lap's
    /// start), oldest first. The bytes between are dead (the flash tier's eviction walk jumps
    /// them).
    wraps: [(u64, u64); 2],
    /// The geometry as readers on other threads see it (`crew.rs`), published before the
    /// owner writes any byte a change gives up.
    published: Arc<Published>,
}

impl Log {
    /// Maps a ring of `max_capacity` bytes whose laps are `capacity` bytes long for now; None
    /// if the kernel refuses the memory.
    pub(crate) fn new(capacity: usize, max_capacity: usize) -> Option<Log> {
        assert!(capacity > 0 && capacity <= max_capacity);
        Some(Log {
            region: Region::new(max_capacity)?,
            lap_len: capacity as u64,
            prev_lap_len: 0,
            next_lap_len: capacity as u64,
            live_span: 0,
            reappend_age: Log::reappend_age_for(capacity as u64),
            tail: 0,
            lap_start: 0,
            floor: 0,
            wraps: [(u64::MAX, u64::MAX); 2],
            published: Arc::default(),
        })
    }

    /// What readers on other threads read through: the published geometry and the ring.
    pub(crate) fn shared(&self) -> (Arc<Published>, SharedBytes) {
        (Arc::clone(&self.published), self.region.shared())
    }

    /// The published state, for in-place changes' brackets.
    pub(crate) fn published(&self) -> Arc<Published> {
        Arc::clone(&self.published)
    }

    /// Publishes the geometry for readers on other threads (`crew.rs`); called after every
    /// change of it and before any byte it gives up is written.
    fn publish(&self) {
        self.published.publish(&Geometry {
            tail: self.tail,
            lap_start: self.lap_start,
            prev_lap_len: self.prev_lap_len,
            live_span: self.live_span,
            floor: self.floor,
            reappend_age: self.reappend_age,
        });
    }

    /// The lap length the log has or is moving to (the `cache_memlimit` share) in bytes.
    pub(crate) fn capacity(&self) -> u64 {
        self.next_lap_len
    }

    /// The bytes live items can fill without the tail overwriting them: the shorter of the
    /// current lap and the one `resize` set for the next (a larger lap is not there yet to
    /// hold what is copied forward in this one).
    pub(crate) fn settled_capacity(&self) -> u64 {
        self.lap_len.min(self.next_lap_len)
    }

    /// The largest lap length `resize` accepts: the mapping's size.
    pub(crate) fn max_capacity(&self) -> u64 {
        self.region.len() as u64
    }

    /// Ring bytes that may hold live items now (both laps' extent).
    pub(crate) fn resident_bytes(&self) -> u64 {
        self.lap_len.max(self.prev_lap_len)
    }

    /// Makes the next lap `capacity` bytes long (at most `max_capacity`, at least the largest
    /// item). Takes effect when the tail next wraps.
    pub(crate) fn resize(&mut self, capacity: u64) {
        assert!(capacity > 0 && capacity <= self.max_capacity());
        self.next_lap_len = capacity;
    }

    fn reappend_age_for(lap_len: u64) -> u64 {
        lap_len - lap_len / 8
    }

    /// Age beyond which a read item should be copied to the tail to keep it.
    #[inline]
    pub(crate) fn reappend_age(&self) -> u64 {
        self.reappend_age
    }

    /// Virtual tail position (total bytes ever consumed, including skipped ones).
    pub(crate) fn tail(&self) -> u64 {
        self.tail
    }

    /// How far back from the tail a position may be and still hold an intact item.
    #[inline]
    pub(crate) fn live_span(&self) -> u64 {
        self.live_span
    }

    /// How far back from the tail a position may be and still hold a live item.
    #[inline]
    pub(crate) fn max_age(&self) -> u64 {
        self.live_span.min(self.tail - self.floor)
    }

    /// Whether items below the flush floor may still be intact (a flush_all less than a lap ago).
    #[inline]
    pub(crate) fn hides_flushed(&self) -> bool {
        self.tail - self.floor < self.live_span
    }

    /// Age (tail minus position) of the item whose position has these low 48 bits; exact as
    /// long as the true age is below 2^48, which the index sweep guarantees.
    #[inline]
    pub(crate) fn age_of(&self, offset48: u64) -> u64 {
        self.tail.wrapping_sub(offset48) & crate::cache::index::OFFSET_MASK
    }

    /// The ring index of a live position.
    #[inline]
    pub(crate) fn ring_index(&self, position: u64) -> usize {
        debug_assert!(self.tail - position <= self.live_span);
        if position >= self.lap_start {
            (position - self.lap_start) as usize
        } else {
            (position + self.prev_lap_len - self.lap_start) as usize
        }
    }

    /// Bytes of the ring from `index` on (an item starting there lies inside).
    #[inline]
    pub(crate) fn bytes_from(&self, index: usize) -> &[u8] {
        &self.region.bytes()[index..]
    }

    /// Mutable bytes of the ring from `index` on.
    #[inline]
    pub(crate) fn bytes_from_mut(&mut self, index: usize) -> &mut [u8] {
        &mut self.region.bytes_mut()[index..]
    }

    /// The whole ring, for moving bytes within it.
    pub(crate) fn ring_mut(&mut self) -> &mut [u8] {
        self.region.bytes_mut()
    }

    /// Starts loading the lines of the first `bytes` bytes of the item at ring index `index`
    /// (at least one line, at most four).
    #[inline]
    pub(crate) fn prefetch_item(&self, index: usize, bytes: usize) {
        let ring = self.region.bytes();
        let last = (index + bytes.clamp(1, 4 * 64) - 1).min(ring.len() - 1);
        let mut line = index & !63;
        while line <= last {
            prefetch(&ring[line.max(index)]);
            line += 64;
        }
    }

    /// Where an item of `size` bytes would go. Changes nothing.
    #[inline]
    pub(crate) fn plan(&self, size: usize) -> Placement {
        let size = size as u64;
        let wraps = self.tail - self.lap_start + size > self.lap_len;
        assert!(size <= if wraps { self.next_lap_len } else { self.lap_len });
        let lap_start = if wraps { self.lap_start + self.lap_len } else { self.lap_start };
        let position = if wraps { lap_start } else { self.tail };
        Placement { position, index: (position - lap_start) as usize, lap_start, new_tail: position + size, wraps }
    }

    /// The live span after `placement` is taken.
    #[inline]
    fn span_after(&self, placement: &Placement) -> u64 {
        let previous = if placement.wraps { self.lap_len } else { self.prev_lap_len };
        previous.max(placement.new_tail - placement.lap_start)
    }

    /// Claims `size` bytes at the tail; returns (position, ring index).
    #[inline]
    pub(crate) fn reserve(&mut self, size: usize) -> (u64, usize) {
        let placement = self.plan(size);
        self.live_span = self.span_after(&placement);
        let mut released = None;
        if placement.wraps {
            self.wraps = [self.wraps[1], (self.tail, placement.lap_start)];
            released = self.start_lap();
        }
        self.lap_start = placement.lap_start;
        self.tail = placement.new_tail;
        debug_assert!(self.tail - self.lap_start <= self.lap_len);
        self.publish();
        if let Some((start, end)) = released {
            self.region.release(start, end);
        }
        (placement.position, placement.index)
    }

    /// The tail wraps: the finished lap becomes the previous one and the next length applies.
    /// Returns the ring bytes neither lap reaches any more, to give back to the kernel once
    /// the new geometry is published.
    fn start_lap(&mut self) -> Option<(usize, usize)> {
        let resident = self.resident_bytes();
        self.prev_lap_len = self.lap_len;
        self.lap_len = self.next_lap_len;
        self.reappend_age = Log::reappend_age_for(self.lap_len.min(self.prev_lap_len));
        let still = self.resident_bytes();
        (still < resident).then_some((still as usize, resident as usize))
    }

    /// Whether the item at `position` survives writing `size` more bytes at the tail.
    #[inline]
    pub(crate) fn survives_append(&self, position: u64, size: usize) -> bool {
        let placement = self.plan(size);
        placement.new_tail - position <= self.span_after(&placement)
    }

    /// The lowest position whose item survives writing `size` more bytes at the tail.
    #[inline]
    pub(crate) fn survivors_from(&self, size: usize) -> u64 {
        let placement = self.plan(size);
        placement.new_tail.saturating_sub(self.span_after(&placement))
    }

    /// Where the tail skipped from `position` to a new lap's start, if it did.
    #[inline]
    pub(crate) fn skip_at(&self, position: u64) -> Option<u64> {
        // A lap that ended exactly full skipped nothing (from == to): no skip.
        self.wraps.iter().find(|&&(from, to)| from == position && to > from).map(|&(_, to)| to)
    }

    /// Starts an empty log at virtual position `position` (a flash tier's CAS floor, and tests
    /// of 48-bit wrap-around).
    pub(crate) fn start_at(&mut self, position: u64) {
        assert_eq!(self.tail, 0);
        (self.tail, self.lap_start, self.floor) = (position, position, position);
        self.publish();
    }

    /// Invalidates every item written so far (flush_all).
    pub(crate) fn flush(&mut self) {
        self.floor = self.tail;
        self.publish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserve_wraps_without_straddling_the_end() {
        let mut log = Log::new(100, 100).unwrap();
        assert_eq!(log.reserve(40), (0, 0));
        assert_eq!(log.reserve(40), (40, 40));
        // 20 bytes left in this lap: a 30-byte item skips to the next lap.
        assert_eq!(log.reserve(30), (100, 0));
        assert_eq!(log.tail(), 130);
        assert_eq!(log.ring_index(40), 40, "the previous lap's items map behind the tail");
        assert_eq!(log.ring_index(100), 0);
        // An item that ends exactly at the ring's end leaves the next one to start a new lap.
        assert_eq!(log.reserve(70), (130, 30));
        assert_eq!(log.reserve(1), (200, 0));
        assert!(!log.survives_append(130, 100), "a full lap overwrites everything");
        assert!(log.survives_append(130, 29));
        assert!(!log.survives_append(130, 30));
    }

    #[test]
    fn ages_and_flush_floor() {
        let mut log = Log::new(1000, 1000).unwrap();
        log.reserve(10);
        log.reserve(10);
        assert_eq!(log.age_of(10), 10);
        assert_eq!(log.max_age(), 20);
        log.flush();
        assert_eq!(log.max_age(), 0, "nothing written before a flush is live");
        log.reserve(5);
        assert_eq!(log.max_age(), 5);
    }

    #[test]
    fn skips_are_recorded_only_where_the_tail_skipped_bytes() {
        let mut log = Log::new(100, 100).unwrap();
        log.reserve(40);
        log.reserve(40);
        assert_eq!(log.reserve(30), (100, 0));
        assert_eq!(log.skip_at(80), Some(100), "bytes 80..100 were skipped");
        log.reserve(70);
        // The lap ended exactly full: the next item starts where the last one ended.
        assert_eq!(log.reserve(10), (200, 0));
        assert_eq!(log.skip_at(200), None, "a full lap skips nothing (the eviction walk once looped here)");
    }

    #[test]
    fn a_shrink_applies_at_the_next_wrap_and_keeps_the_previous_lap_readable() {
        let mut log = Log::new(100, 200).unwrap();
        log.reserve(60);
        assert_eq!(log.reserve(30), (60, 60));
        log.resize(50);
        assert_eq!(log.capacity(), 50);
        assert_eq!(log.reserve(20), (100, 0), "the wrap starts a lap of 50");
        assert_eq!(log.reserve(30), (120, 20));
        assert!(log.tail() - 60 <= log.live_span(), "ring bytes 60..90 are beyond the new lap");
        assert_eq!(log.ring_index(60), 60);
        assert_eq!(log.reserve(10), (150, 0));
        assert_eq!(log.live_span(), 50, "only the 50-byte lap is left");
        assert!(log.tail() - 60 > log.live_span());
        assert_eq!(log.ring_index(120), 20);
        assert_eq!(log.resident_bytes(), 50);
    }

    #[test]
    fn a_grown_lap_uses_more_of_the_ring() {
        let mut log = Log::new(100, 300).unwrap();
        log.reserve(100);
        log.resize(300);
        assert_eq!(log.reserve(10), (100, 0));
        assert_eq!(log.live_span(), 100);
        assert_eq!(log.reserve(200), (110, 10));
        assert_eq!(log.live_span(), 210, "the previous lap is all overwritten");
        assert_eq!(log.reserve(90), (310, 210));
        assert!(log.survives_append(110, 1), "the next item wraps onto bytes 0..1 only");
        assert!(!log.survives_append(100, 1));
    }

    /// A ring that records which item wrote every byte, and the lap each item was written in.
    /// An item is intact while it still owns all its bytes; the log must call it live exactly
    /// when it is intact and written in this lap or the one before (older laps' positions can
    /// no longer be mapped to the ring, so a shrink may evict them early, never late).
    struct Model {
        owner: Vec<u64>,
        /// (position, ring index, size, lap).
        items: Vec<(u64, usize, usize, u64)>,
        lap: u64,
        /// The length asked for by the last resize, and the current lap's length.
        asked: usize,
        lap_len: usize,
    }

    proptest::proptest! {
        #[test]
        fn live_span_matches_which_items_are_intact(
            steps in proptest::collection::vec((1usize..40, 0u8..10, 40usize..=256), 1..400),
        ) {
            let mut log = Log::new(128, 256).unwrap();
            let mut model = Model { owner: vec![u64::MAX; 256], items: Vec::new(), lap: 0, asked: 128, lap_len: 128 };
            for (size, action, length) in steps {
                if action == 0 {
                    log.resize(length as u64);
                    model.asked = length;
                    continue;
                }
                let predicted: Vec<bool> =
                    model.items.iter().map(|&(position, ..)| log.survives_append(position, size)).collect();
                let (position, index) = log.reserve(size);
                if index == 0 && position > 0 {
                    model.lap += 1;
                    model.lap_len = model.asked;
                }
                proptest::prop_assert!(index + size <= model.lap_len);
                model.owner[index..index + size].fill(position);
                model.items.push((position, index, size, model.lap));
                for (n, &(position, index, size, lap)) in model.items.iter().enumerate() {
                    let intact = model.owner[index..index + size].iter().all(|&o| o == position);
                    let live = log.tail() - position <= log.live_span();
                    proptest::prop_assert_eq!(intact && lap + 1 >= model.lap, live, "item at {} (ring {})", position, index);
                    if n < predicted.len() {
                        proptest::prop_assert_eq!(predicted[n], live);
                    }
                    if live {
                        proptest::prop_assert_eq!(log.ring_index(position), index);
                    }
                }
                model.items.retain(|&(position, ..)| log.tail() - position <= log.live_span());
            }
        }
    }
}
