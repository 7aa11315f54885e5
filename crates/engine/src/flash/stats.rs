//! The flash store's counters and its DRAM footprint.

use super::FlashStore;

/// What the store has done since it was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlashStats {
    /// Items the index points at now.
    pub items: u64,
    /// Requests at the device now.
    pub in_flight: u64,
    /// Items written to flash.
    pub inserts: u64,
    /// Their bytes.
    pub admitted_bytes: u64,
    /// Items the admission policy turned away.
    pub rejected: u64,
    /// Items dropped because every write buffer was busy.
    pub busy: u64,
    /// Items too large for a segment.
    pub too_large: u64,
    /// Flash copies dropped.
    pub deletes: u64,
    /// Live entries a full index bucket pushed out (demoted with the cascade index).
    pub index_evictions: u64,
    /// Lookups.
    pub lookups: u64,
    /// Lookups answered from a write buffer.
    pub hits_buffer: u64,
    /// Lookups answered by a read from flash.
    pub hits_flash: u64,
    /// Lookups the index answered with a miss (no read).
    pub miss_index: u64,
    /// Another key with the same tag: one wasted read.
    pub miss_tag: u64,
    /// Live items of other keys removed with a key's tag (tag twins, `twins.rs`): lost items.
    pub twin_drops: u64,
    /// Removed live entries whose key could not be checked (too many waiting, segment gone,
    /// read failed).
    pub twin_unchecked: u64,
    /// Reads of removed entries' records for those checks (not in `reads`).
    pub twin_reads: u64,
    /// Bad magic, length or checksum.
    pub miss_corrupt: u64,
    /// Reads the device failed (a miss).
    pub miss_io_error: u64,
    /// Items found expired.
    pub miss_expired: u64,
    /// Written, deleted or reclaimed while the read was in flight.
    pub miss_superseded: u64,
    /// Lookups turned away with too many reads in flight.
    pub read_busy: u64,
    /// Reads issued.
    pub reads: u64,
    /// Their bytes.
    pub read_bytes: u64,
    /// Segments written.
    pub segments_written: u64,
    /// Their bytes.
    pub write_bytes: u64,
    /// Segment writes the device failed.
    pub write_errors: u64,
    /// Segments given up after `faults::WRITE_TRIES` failed writes (their items died).
    pub segments_given_up: u64,
    /// 1 from a segment's give-up until a write reaches the device again (a gauge); new items
    /// stay out of the tier for pauses meanwhile.
    pub degraded: u64,
    /// Items kept out meanwhile.
    pub rejected_degraded: u64,
    /// Lookups answered as misses after waiting `faults::READ_DEADLINE_NS` for the device (or
    /// finding every read slot held by such reads).
    pub read_timeouts: u64,
    /// Segments reclaimed by GC.
    pub reclaims: u64,
    /// Segment reads for GC.
    pub gc_reads: u64,
    /// Items GC kept (written again).
    pub gc_rewrites: u64,
    /// Their bytes.
    pub write_rewrite_bytes: u64,
    /// GC reads the device failed.
    pub gc_read_errors: u64,
    /// Segments GC found damaged.
    pub gc_bad_segments: u64,
    /// Live items that died with their segment (GC drops and pressure drops).
    pub dropped_items: u64,
    /// Tail segments dropped unread because the ring was full.
    pub pressure_drops: u64,
    /// Dead index entries cleared by the sweep.
    pub swept: u64,
    /// flush_all: every entry forgotten at once.
    pub clears: u64,
    /// Marks appended (invalidations, drops, flushes) and commits written for them.
    pub marks: u64,
    /// Commits of invalidation marks.
    pub commits: u64,
    /// Superblock writes that raised the watermark (one per retired segment).
    pub watermark_writes: u64,
    /// Crash recovery: segments scanned and items adopted.
    pub recovered_segments: u64,
    /// Items recovered after a crash (or a damaged snapshot): the records the index kept and
    /// the set pages' items, as `items` counts them.
    pub recovered_items: u64,
    /// Clean opens whose snapshot was damaged and whose segments were recovered instead.
    pub snapshot_fallbacks: u64,
}

/// Every heap byte the store holds, by structure.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlashMemory {
    /// The index's DRAM.
    pub index: u64,
    /// The segment table's DRAM.
    pub segment_table: u64,
    /// The write buffers' DRAM.
    pub write_buffers: u64,
    /// GC's read buffer.
    pub gc_buffer: u64,
    /// Pooled and in-flight read buffers plus pending-lookup records.
    pub reads: u64,
    /// The cascade index below tier 1 (`index` is tier 1): demotion blocks and stream records,
    /// tier-2 Bloom filters, tier-3 Bloom filters, the merge's buffers.
    pub demotion: u64,
    /// Tier-2 Bloom filters.
    pub t2_filters: u64,
    /// Tier-3 Bloom filters.
    pub t3_filters: u64,
    /// The cascade index's merge buffers.
    pub merge_buffers: u64,
    /// The sets index's per-set Bloom filters.
    pub set_filters: u64,
    /// Its per-set hit bits, versions and item counts.
    pub set_state: u64,
    /// Its moves' pages and items.
    pub set_moves: u64,
}

impl FlashMemory {
    /// All of it.
    pub fn total(&self) -> u64 {
        self.index
            + self.segment_table
            + self.write_buffers
            + self.gc_buffer
            + self.reads
            + self.demotion
            + self.t2_filters
            + self.t3_filters
            + self.merge_buffers
            + self.set_filters
            + self.set_state
            + self.set_moves
    }
}

impl FlashStore {
    /// The DRAM the store holds, by part.
    pub fn memory(&self) -> FlashMemory {
        let segment = u64::from(self.layout.segment_bytes);
        let pending: usize = self
            .reads
            .iter()
            .flatten()
            .map(|r| {
                r.key.capacity()
                    + r.entry.pages() as usize * super::layout::PAGE
                    + r.map.as_ref().map_or(0, |m| m.cands.capacity() * 24 + m.found.capacity() * 24)
            })
            .sum();
        let (demotion, t2_filters, t3_filters, merge_buffers) =
            self.cascade.as_deref().map_or((0, 0, 0, 0), |c| c.heap_bytes());
        let (set_filters, set_state, set_moves) = self.sets.as_deref().map_or((0, 0, 0), |s| s.heap_bytes());
        FlashMemory {
            set_filters,
            set_state,
            set_moves,
            demotion,
            t2_filters,
            t3_filters,
            merge_buffers,
            index: self.index.heap_bytes() as u64,
            segment_table: (self.slots.capacity() * std::mem::size_of::<super::ring::Slot>()) as u64,
            write_buffers: (self.bufs.len() as u64 + u64::from(self.copy.is_some() || self.copy_out)) * segment,
            gc_buffer: segment,
            reads: (self.page_pool.len() * super::layout::PAGE
                + pending
                + self.reads.capacity() * std::mem::size_of::<Option<super::PendingRead>>()) as u64,
        }
    }
}
