//! How the sets index is sized and where its parts lie in a partition's region: a small
//! segment ring in front (the log, `log_percent` of the region, with the one-choice DRAM index)
//! and the rest as 4 KiB sets, `per_bucket` of them behind each index bucket, so that every log
//! item bound for a set sits in one bucket.
//!
//! ```text
//!  | superblocks | snapshot (slots, index buckets, sets section) | sets: page per set | ring |
//! ```

use super::super::config::{LayoutError, RegionLayout};
use super::super::index::{BUCKET_BYTES, MAX_SLOTS};
use super::super::layout::{PAGE, SLOT_RECORD, SUPERBLOCK_PAGES};
use super::super::mapblock::Bloom;
use super::super::packing::Packing;
use super::super::FlashConfig;
use super::page::{SET_HEADER, SET_ITEM_HEADER};

/// The sets index's settings (Kangaroo's KLog + KSet).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SetsConfig {
    /// Percent of the region the log in front of the sets takes (Kangaroo: about 5).
    pub log_percent: u32,
    /// Log items bound for one set that move them into it together (threshold admission).
    pub threshold: u32,
    /// Items of at most this many bytes in a set (its 24-byte header, key and value) live in
    /// sets; larger ones stay in the log.
    pub max_item_bytes: u32,
    /// Bloom filter bits per item a set is expected to hold.
    pub bloom_bits: u32,
    /// Set moves (read, merge, write) in flight at most.
    pub max_moves: u32,
    /// Keep the log's live items to a share of its index's ways (`FlashStore::log_load`);
    /// off only in tests that drive the index past its ways on purpose. It does not shape the
    /// file.
    pub log_pressure: bool,
}

impl Default for SetsConfig {
    fn default() -> SetsConfig {
        SetsConfig {
            log_percent: 5,
            threshold: 2,
            // Anything a page holds: a log of 5% cannot keep a workload's items of 1-4 KiB
            // (they would be dropped at every reclaim, and a clean close would lose them).
            max_item_bytes: (PAGE - SET_HEADER) as u32,
            bloom_bits: 3,
            max_moves: 64,
            log_pressure: true,
        }
    }
}

/// Physical (64-byte; 8 entries, or 10 packed) buckets per log-index bucket. One choice of bucket leaves
/// each bucket's share of a full log to chance, and a full bucket loses an item: in a
/// simulation of a full FIFO log at 64% load (`scripts/log_bucket_sim.py`), 8-way buckets
/// overflow on 11.5% of inserts (`flash-bench` found 11-13%), 32-way on 0.9% and 64-way on
/// 0.03% (0.6% at 72%).
pub(in crate::flash) const LOG_SPAN: u64 = 8;
/// Eighths of a physical bucket's ways the log's expected items fill (7 of 8 plain ways,
/// 8.75 of 10 packed ones).
const LOAD_EIGHTHS: u64 = 7;

/// Where the sets lie and how their DRAM state is sized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SetsLayout {
    /// File offset of set 0 (set `s` is the page `s` pages after it).
    pub offset: u64,
    /// Sets in the region: log-index buckets (`RegionLayout::buckets / LOG_SPAN`) times
    /// `per_bucket`.
    pub sets: u32,
    /// Sets behind each log-index bucket.
    pub per_bucket: u32,
    /// Each set's Bloom filter.
    pub bloom: Bloom,
    /// Bytes of the snapshot's sets section at most.
    pub snapshot_bytes: u64,
    /// Log items bound for a set that move them (`SetsConfig::threshold`).
    pub threshold: u32,
    /// The largest item a set takes (`SetsConfig::max_item_bytes`).
    pub max_item_bytes: u32,
    /// Moves in flight at most (`SetsConfig::max_moves`).
    pub max_moves: u32,
    /// Ways of the log index (0: no pressure, `SetsConfig::log_pressure`). A log of items
    /// smaller than the layout expected holds more than its index can keep (one-choice buckets
    /// overflow and lose items long before every way is taken), so the log's live items are
    /// kept to a share of these (`FlashStore::log_load`).
    pub log_ways: u64,
}

impl SetsLayout {
    /// DRAM per set: its Bloom filter, hit bits, version and item count.
    pub fn dram_per_set(&self) -> u64 {
        self.bloom.bytes() as u64 + super::SET_DRAM_BYTES
    }

    /// The file offset of set `s`.
    pub fn set_offset(&self, s: u32) -> u64 {
        self.offset + u64::from(s) * PAGE as u64
    }
}

fn snapshot_section(sets: u64, bloom: Bloom) -> u64 {
    64 + sets * (bloom.bytes() as u64 + super::SNAPSHOT_PER_SET)
}

impl RegionLayout {
    /// Lays out a region holding the sets index (see the module drawing).
    pub(in super::super) fn with_sets(
        cfg: &FlashConfig,
        sc: &SetsConfig,
        region_offset: u64,
        region_bytes: u64,
    ) -> Result<RegionLayout, LayoutError> {
        if !(1..=50).contains(&sc.log_percent) || sc.threshold == 0 || sc.max_moves == 0 || sc.bloom_bits == 0 {
            return Err(LayoutError("sets: a log of 1-50%, a threshold, moves and Bloom bits of 1+".into()));
        }
        if !(64..=(PAGE - SET_HEADER) as u32).contains(&sc.max_item_bytes) {
            return Err(LayoutError(format!("sets: items of 64 to {} bytes", PAGE - SET_HEADER)));
        }
        let (page, seg) = (PAGE as u64, u64::from(cfg.segment_bytes));
        let superblocks = (SUPERBLOCK_PAGES * PAGE) as u64;
        let min_slots = u64::from(cfg.write_buffers) + 4;
        let slots = (region_bytes * u64::from(sc.log_percent) / 100 / seg).max(min_slots);
        if slots > u64::from(MAX_SLOTS) {
            return Err(LayoutError(format!("{slots} log segments per partition: use larger segments")));
        }
        let entries = slots * seg / u64::from(cfg.expected_item_bytes);
        let ways = Packing::for_log(slots as u32, seg as u32).ways() as u64;
        let mut buckets = (entries * 8).div_ceil(LOAD_EIGHTHS * ways * LOG_SPAN).max(1);
        let per_set_item = u64::from(cfg.expected_item_bytes).saturating_sub(16).max(SET_ITEM_HEADER as u64 + 8);
        // 32-bit steps: a set's filter is small, and 64-bit steps would cost a third more.
        let bloom = Bloom::sized_in(((page - SET_HEADER as u64) / per_set_item) as usize, sc.bloom_bits, 32);
        let index_snapshot = page
            + (slots * SLOT_RECORD as u64).next_multiple_of(page)
            + (buckets * LOG_SPAN * BUCKET_BYTES as u64).next_multiple_of(page);
        let avail = region_bytes.saturating_sub(superblocks + index_snapshot + slots * seg + 2 * page);
        let sets_fit = avail / (page + bloom.bytes() as u64 + super::SNAPSHOT_PER_SET);
        // A small region (the log is at least a few segments) has fewer sets than the log would
        // want buckets: one set per bucket then, and a smaller log index.
        buckets = buckets.min(sets_fit);
        if sets_fit == 0 || buckets * LOG_SPAN > u64::from(u32::MAX) || sets_fit > u64::from(u32::MAX) {
            return Err(LayoutError(format!(
                "a {region_bytes}-byte region per partition has room for {sets_fit} sets besides a log of \
                 {slots} segments of {seg} bytes; use a larger file"
            )));
        }
        let per_bucket = sets_fit / buckets;
        let sets = buckets * per_bucket;
        let snapshot_bytes = snapshot_section(sets, bloom);
        let snapshot = index_snapshot + snapshot_bytes.next_multiple_of(page);
        let offset = region_offset + superblocks + snapshot;
        let segments_offset = offset + sets * page;
        debug_assert!(segments_offset + slots * seg <= region_offset + region_bytes);
        Ok(RegionLayout {
            region_offset,
            region_bytes,
            snapshot_offset: region_offset + superblocks,
            snapshot_bytes: snapshot,
            segments_offset,
            segment_bytes: seg as u32,
            slots: slots as u32,
            buckets: (buckets * LOG_SPAN) as u32,
            cascade: None,
            sets: Some(SetsLayout {
                offset,
                sets: sets as u32,
                per_bucket: per_bucket as u32,
                bloom,
                snapshot_bytes,
                threshold: sc.threshold,
                max_item_bytes: sc.max_item_bytes,
                max_moves: sc.max_moves,
                log_ways: if sc.log_pressure { buckets * LOG_SPAN * ways } else { 0 },
            }),
        })
    }
}
