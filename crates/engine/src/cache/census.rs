//! Live-item accounting for the circular log, so `curr_items`, `total_items` and `evictions`
//! cost O(1) per operation and nothing to report.
//!
//! The log's eviction is implicit: the tail overwrites the oldest bytes and nobody visits the
//! items lost. So the virtual positions are cut into segments (a power of two, about 1/64 of
//! the largest log each) and the census counts the live items whose position lies in each.
//! When the log's live span leaves a whole segment behind, the items still counted in it are
//! the evicted ones. An item that dies earlier (deleted, overwritten, found expired, dropped by
//! a full index pair, copied forward) is taken off its segment's count, unless that segment
//! was already evicted. Eviction is thus counted at segment granularity: up to one segment
//! after the log really overwrites an item.

/// Slots for segment counts: a live span of the largest log covers at most 64 whole segments
/// and parts of two more; a power of two so a segment's slot is a mask.
const MAX_SEGMENTS: usize = 128;

/// Per-segment live-item counts and the totals derived from them.
#[derive(Clone, Debug)]
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
}

impl Census {
    /// A census for a log of at most `max_capacity` bytes whose tail is at `tail`.
    pub(crate) fn new(max_capacity: u64, tail: u64) -> Census {
        let segment_bytes = (max_capacity / 64).max(1).next_power_of_two();
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
        }
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
        }
        self.oldest = dead_before;
    }

    /// A new item of `bytes` log bytes was stored at `position` (the tail has already been
    /// advanced past it).
    #[inline]
    pub(crate) fn stored(&mut self, position: u64, bytes: u64) {
        self.stored += 1;
        self.moved_in(position, bytes);
    }

    /// An existing item of `bytes` log bytes was copied to `position`.
    #[inline]
    pub(crate) fn moved_in(&mut self, position: u64, bytes: u64) {
        let segment = position >> self.shift;
        debug_assert!(segment >= self.oldest && segment - self.oldest < MAX_SEGMENTS as u64);
        let slot = Census::slot(segment);
        self.counts[slot] += 1;
        self.bytes[slot] += bytes;
        self.live += 1;
        self.live_bytes += bytes;
    }

    /// The item of `bytes` log bytes at `position` died before the tail reached it.
    #[inline]
    pub(crate) fn removed(&mut self, position: u64, bytes: u64) {
        let segment = position >> self.shift;
        if segment >= self.oldest {
            let slot = Census::slot(segment);
            debug_assert!(self.counts[slot] > 0 && self.bytes[slot] >= bytes);
            self.counts[slot] -= 1;
            self.bytes[slot] -= bytes;
            self.live -= 1;
            self.live_bytes -= bytes;
        }
    }

    /// Every item is gone at once (flush_all); not evictions.
    pub(crate) fn flushed(&mut self) {
        self.counts = [0; MAX_SEGMENTS];
        self.bytes = [0; MAX_SEGMENTS];
        self.live = 0;
        self.live_bytes = 0;
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

    #[test]
    fn items_the_tail_reaches_again_are_evicted_once() {
        let mut census = Census::new(6400, 0);
        // Segments of 128 bytes.
        for position in (0..6400).step_by(100) {
            census.advance(position + 100, position + 100);
            census.stored(position, 100);
        }
        assert_eq!((census.live(), census.evicted(), census.stored_total()), (64, 0, 64));
        census.removed(150, 100);
        assert_eq!((census.live(), census.live_bytes()), (63, 6300));
        // One more lap: the first lap's items are all evicted, the removed one not again.
        census.advance(12_900, 6400);
        assert_eq!((census.live(), census.evicted(), census.live_bytes()), (0, 63, 0));
        // Removing an item whose segment was recycled changes nothing.
        census.removed(300, 100);
        assert_eq!((census.live(), census.evicted()), (0, 63));
    }

    #[test]
    fn flush_is_not_eviction() {
        let mut census = Census::new(1 << 20, 5_000);
        census.advance(5_100, 5_100);
        census.stored(5_000, 70);
        census.flushed();
        census.advance(10 << 20, 1 << 20);
        assert_eq!((census.live(), census.evicted(), census.stored_total()), (0, 0, 1));
    }
}
