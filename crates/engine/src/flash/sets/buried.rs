//! The sets whose tombstones (or voids) must reach their pages before a segment retires: one
//! entry per burial, (ground segment's sequence, log-index bucket, tag), oldest ground first.
//!
//! A burial is pushed each time a key is buried, so repeated deletes or dropped writes of keys
//! whose sets may hold them (a Bloom filter's maybe, all the more while the device is saturated
//! and writes are dropped) would grow the heap without bound until their grounds retire, and its
//! capacity would stay at the peak. So when it doubles past what the last compaction kept, it is
//! compacted: duplicates go (the same ground, bucket and tag), and so do entries a pop would
//! not act on (their tombstone is gone and their set is not void; a tombstone put down again,
//! or a set voided again, pushes an entry of its own). An entry of a later ground is kept even
//! when an earlier one names the same key: it is the backstop for a purge at the earlier ground
//! that does not happen (a move voided meanwhile). What is kept is bounded by the log index's
//! tombstones and the void sets, once per segment of the log at most.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::super::index::is_tombstone;
use super::super::FlashStore;

/// Burials below this many are never compacted (small in tests, so the model test compacts).
const MIN_COMPACT: usize = if cfg!(test) { 8 } else { 4096 };

/// One burial: (ground segment's sequence number, log-index bucket, tag).
type Burial = Reverse<(u64, u32, u16)>;

#[derive(Default)]
pub(in crate::flash) struct Buried {
    heap: BinaryHeap<Burial>,
    /// Entries the last compaction kept (or fewer, as they were popped since).
    kept: usize,
}

impl Buried {
    pub(in crate::flash) fn push(&mut self, ground: u64, bucket: u32, tag: u16) {
        self.heap.push(Reverse((ground, bucket, tag)));
    }

    /// The oldest burial, if its ground is at most `limit`.
    pub(super) fn pop_due(&mut self, limit: u64) -> Option<(u64, u32, u16)> {
        let &Reverse(b) = self.heap.peek()?;
        if b.0 > limit {
            return None;
        }
        self.heap.pop();
        self.kept = self.kept.min(self.heap.len());
        Some(b)
    }

    /// Gives back memory once most of it is unused (after pops).
    pub(super) fn trim(&mut self) {
        if self.heap.capacity() > MIN_COMPACT.max(4 * self.heap.len()) {
            self.heap.shrink_to(MIN_COMPACT.max(2 * self.heap.len()));
        }
    }

    pub(super) fn clear(&mut self) {
        self.heap = BinaryHeap::new();
        self.kept = 0;
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.heap.len()
    }

    pub(super) fn heap_bytes(&self) -> usize {
        self.heap.capacity() * std::mem::size_of::<Burial>()
    }

    fn over(&self) -> bool {
        self.heap.len() >= MIN_COMPACT.max(2 * self.kept)
    }
}

impl FlashStore {
    /// Compacts the burials when they have doubled since the last compaction (see the module
    /// comment): every purge a pop would bind still happens at its ground.
    pub(super) fn bound_buried(&mut self) {
        let Some(sets) = self.sets.as_deref_mut() else { return };
        if !sets.buried.over() {
            return;
        }
        let mut kept = std::mem::take(&mut sets.buried.heap).into_vec();
        kept.sort_unstable();
        kept.dedup();
        kept.retain(|&Reverse((_, bucket, tag))| self.burial_due(bucket, tag));
        let sets = self.sets.as_deref_mut().expect("the sets index");
        sets.buried.kept = kept.len();
        sets.buried.heap = BinaryHeap::from(kept);
    }

    /// Whether a burial of (`bucket`, `tag`) still needs its set purged: its tombstone stands
    /// in the log index, or its set is void.
    pub(super) fn burial_due(&self, bucket: u32, tag: u16) -> bool {
        let sets = self.sets.as_deref().expect("the sets index");
        sets.version(sets.set_of((bucket, tag))) == 0
            || self.index.bucket_entries(bucket as usize).any(|e| is_tombstone(e) && e.tag() == tag)
    }
}
