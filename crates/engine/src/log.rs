//! The circular log (MICA's cache-mode store): one ring of bytes, allocated once, written only at
//! the tail. Positions are virtual: they grow forever (64 bits) and map to the ring as
//! `position - lap_start` (or the lap before). An item at `position` is intact while
//! `tail - position <= capacity`, so eviction is implicit FIFO and costs nothing.
//!
//! An item never straddles the end of the ring: when it would, the tail skips to the next lap
//! and the skipped bytes are dead. That wastes at most one item per lap and keeps every item one
//! contiguous slice, so reads are zero-copy.

use crate::region::{prefetch, Region};

/// Where `plan` would put an item.
pub(crate) struct Placement {
    position: u64,
    index: usize,
    lap_start: u64,
    new_tail: u64,
}

/// The ring and its tail.
pub(crate) struct Log {
    region: Region,
    capacity: u64,
    /// Virtual position where the next item goes.
    tail: u64,
    /// Virtual position of ring byte 0 in the current lap (`tail - lap_start < capacity`).
    lap_start: u64,
    /// Items before this position were flushed (flush_all).
    floor: u64,
}

impl Log {
    /// Maps a ring of `capacity` bytes; None if the kernel refuses the memory.
    pub(crate) fn new(capacity: usize) -> Option<Log> {
        assert!(capacity > 0);
        Some(Log { region: Region::new(capacity)?, capacity: capacity as u64, tail: 0, lap_start: 0, floor: 0 })
    }

    /// Ring size in bytes.
    pub(crate) fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Virtual tail position (total bytes ever consumed, including skipped ones).
    pub(crate) fn tail(&self) -> u64 {
        self.tail
    }

    /// How far back from the tail a position may be and still hold a live item.
    #[inline]
    pub(crate) fn max_age(&self) -> u64 {
        self.capacity.min(self.tail - self.floor)
    }

    /// Age (tail minus position) of the item whose position has these low 48 bits; exact as
    /// long as the true age is below 2^48, which the index sweep guarantees.
    #[inline]
    pub(crate) fn age_of(&self, offset48: u64) -> u64 {
        self.tail.wrapping_sub(offset48) & crate::index::OFFSET_MASK
    }

    /// The ring index of a live position.
    #[inline]
    pub(crate) fn ring_index(&self, position: u64) -> usize {
        debug_assert!(self.tail - position <= self.capacity);
        if position >= self.lap_start {
            (position - self.lap_start) as usize
        } else {
            (position + self.capacity - self.lap_start) as usize
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
        assert!(size <= self.capacity);
        let wraps = self.tail - self.lap_start + size > self.capacity;
        let lap_start = if wraps { self.lap_start + self.capacity } else { self.lap_start };
        let position = if wraps { lap_start } else { self.tail };
        Placement { position, index: (position - lap_start) as usize, lap_start, new_tail: position + size }
    }

    /// Claims `size` bytes at the tail; returns (position, ring index).
    #[inline]
    pub(crate) fn reserve(&mut self, size: usize) -> (u64, usize) {
        let placement = self.plan(size);
        self.lap_start = placement.lap_start;
        self.tail = placement.new_tail;
        debug_assert!(self.tail - self.lap_start <= self.capacity);
        (placement.position, placement.index)
    }

    /// Whether the item at `position` survives writing `size` more bytes at the tail.
    #[inline]
    pub(crate) fn survives_append(&self, position: u64, size: usize) -> bool {
        self.plan(size).new_tail - position <= self.capacity
    }

    /// Starts an empty log at virtual position `position` (tests of 48-bit wrap-around).
    #[cfg(test)]
    pub(crate) fn start_at(&mut self, position: u64) {
        assert_eq!(self.tail, 0);
        (self.tail, self.lap_start, self.floor) = (position, position, position);
    }

    /// Invalidates every item written so far (flush_all).
    pub(crate) fn flush(&mut self) {
        self.floor = self.tail;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserve_wraps_without_straddling_the_end() {
        let mut log = Log::new(100).unwrap();
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
        let mut log = Log::new(1000).unwrap();
        log.reserve(10);
        log.reserve(10);
        assert_eq!(log.age_of(10), 10);
        assert_eq!(log.max_age(), 20);
        log.flush();
        assert_eq!(log.max_age(), 0, "nothing written before a flush is live");
        log.reserve(5);
        assert_eq!(log.max_age(), 5);
    }
}
