//! Live-item accounting for the circular log, so `curr_items`, `total_items` and `evictions`
//! cost O(1) per operation and nothing to report.
//!
//! The log's eviction is implicit: the tail overwrites the oldest bytes and nobody visits the
//! items lost. So the log is cut into segments (a power of two, about 1/64 of the log each) and
//! the census counts the live items whose position lies in each. When the tail enters a
//! segment, the items still counted in the segment one lap earlier are the evicted ones. An
//! item that dies earlier (deleted, overwritten, found expired, dropped by a full index pair,
//! copied forward) is taken off its segment's count, unless that segment was already recycled.
//! Eviction is thus counted at segment granularity: up to one segment before or after the log
//! really overwrites an item.

/// Most segments in the ring (about 64 per lap plus the one the tail is in).
const MAX_SEGMENTS: usize = 66;

/// Per-segment live-item counts and the totals derived from them.
#[derive(Clone, Debug)]
pub(crate) struct Census {
    shift: u32,
    segments: u64,
    /// Virtual segment number the tail is in.
    current: u64,
    counts: [u64; MAX_SEGMENTS],
    live: u64,
    stored: u64,
    evicted: u64,
}

impl Census {
    /// A census for a log of `capacity` bytes whose tail is at `tail`.
    pub(crate) fn new(capacity: u64, tail: u64) -> Census {
        let segment_bytes = (capacity / 64).max(1).next_power_of_two();
        let segments = capacity / segment_bytes + 1;
        debug_assert!(segments as usize <= MAX_SEGMENTS);
        let shift = segment_bytes.trailing_zeros();
        Census { shift, segments, current: tail >> shift, counts: [0; MAX_SEGMENTS], live: 0, stored: 0, evicted: 0 }
    }

    #[inline]
    fn slot(&self, segment: u64) -> usize {
        (segment % self.segments) as usize
    }

    /// Moves the tail to `tail`; the items of every segment it enters again are evicted.
    #[inline]
    pub(crate) fn advance(&mut self, tail: u64) {
        let target = tail >> self.shift;
        if target == self.current {
            return;
        }
        // Past a whole lap every slot is recycled once; later laps find them empty.
        let steps = (target - self.current).min(self.segments);
        for segment in target - steps + 1..=target {
            let slot = self.slot(segment);
            self.evicted += self.counts[slot];
            self.live -= self.counts[slot];
            self.counts[slot] = 0;
        }
        self.current = target;
    }

    /// A new item was stored at `position` (the tail has already been advanced past it).
    #[inline]
    pub(crate) fn stored(&mut self, position: u64) {
        self.stored += 1;
        self.moved_in(position);
    }

    /// An existing item was copied to `position`.
    #[inline]
    pub(crate) fn moved_in(&mut self, position: u64) {
        let slot = self.slot(position >> self.shift);
        self.counts[slot] += 1;
        self.live += 1;
    }

    /// The item at `position` died before the tail reached it.
    #[inline]
    pub(crate) fn removed(&mut self, position: u64) {
        let segment = position >> self.shift;
        if self.current.wrapping_sub(segment) < self.segments {
            let slot = self.slot(segment);
            debug_assert!(self.counts[slot] > 0);
            self.counts[slot] -= 1;
            self.live -= 1;
        }
    }

    /// Every item is gone at once (flush_all); not evictions.
    pub(crate) fn flushed(&mut self) {
        self.counts = [0; MAX_SEGMENTS];
        self.live = 0;
    }

    /// Items that are in the index and the log now (expired ones too, until noticed).
    pub(crate) fn live(&self) -> u64 {
        self.live
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
        // Segments of 128 bytes, 51 in the ring.
        for position in (0..6400).step_by(100) {
            census.advance(position + 100);
            census.stored(position);
        }
        assert_eq!((census.live(), census.evicted(), census.stored_total()), (64, 0, 64));
        census.removed(150);
        assert_eq!(census.live(), 63);
        // One more lap: the first lap's items are all evicted, the removed one not again.
        census.advance(12_900);
        assert_eq!((census.live(), census.evicted()), (0, 63));
        // Removing an item whose segment was recycled changes nothing.
        census.removed(300);
        assert_eq!((census.live(), census.evicted()), (0, 63));
    }

    #[test]
    fn flush_is_not_eviction() {
        let mut census = Census::new(1 << 20, 5_000);
        census.advance(5_100);
        census.stored(5_000);
        census.flushed();
        census.advance(10 << 20);
        assert_eq!((census.live(), census.evicted(), census.stored_total()), (0, 0, 1));
    }
}
