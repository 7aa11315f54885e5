//! How a partition's flash store is sized and where its region lies in the flash file.

use super::admission::AdmissionPolicy;
use super::index::{BUCKET_BYTES, MAX_PAGES, MAX_SLOTS, WAYS};
use super::layout::{FORMAT_VERSION, PAGE, SEGMENT_HEADER, SLOT_RECORD, SUPERBLOCK_PAGES, VALUE_LEN_MASK};
use super::mapblock::{Bloom, ENTRY_BYTES, PER_BLOCK};
use super::sets::SetsConfig;

/// The segment size unless told otherwise.
pub const DEFAULT_SEGMENT_BYTES: u32 = 1 << 20;
/// The smallest segment.
pub const MIN_SEGMENT_BYTES: u32 = 64 << 10;
/// Index offsets are 18 bits of 16-byte units.
pub const MAX_SEGMENT_BYTES: u32 = 4 << 20;
const _: () = assert!(MAX_SEGMENT_BYTES <= VALUE_LEN_MASK, "an item's value length fits 24 bits");
/// The item size the index is sized for: one entry per this many bytes of segment space.
pub const DEFAULT_EXPECTED_ITEM_BYTES: u32 = 128;
/// The key + value bytes of an item that takes `DEFAULT_EXPECTED_ITEM_BYTES` on flash.
pub const DEFAULT_ITEM_BYTES: u32 = DEFAULT_EXPECTED_ITEM_BYTES - super::layout::ITEM_HEADER as u32;
const _: () = assert!(on_flash_item_bytes(DEFAULT_ITEM_BYTES) == DEFAULT_EXPECTED_ITEM_BYTES);

/// The bytes an item of `key_value` bytes of key and value takes in a segment (header and
/// padding included): what `FlashConfig::expected_item_bytes` is for items of that size.
pub const fn on_flash_item_bytes(key_value: u32) -> u32 {
    (super::layout::ITEM_HEADER as u32 + key_value).next_multiple_of(super::layout::ITEM_ALIGN as u32)
}

/// One partition's flash store settings.
#[derive(Clone, Debug)]
pub struct FlashConfig {
    /// This partition's number.
    pub partition: u32,
    /// Partitions sharing the file.
    pub partitions: u32,
    /// The flash file's size; each partition gets an equal, page-aligned share.
    pub file_bytes: u64,
    /// A power of two in MIN_SEGMENT_BYTES..=MAX_SEGMENT_BYTES.
    pub segment_bytes: u32,
    /// The item size the index is sized for.
    pub expected_item_bytes: u32,
    /// DRAM write buffers of one segment each (at least 2: one fills while one is written).
    pub write_buffers: u32,
    /// A partly filled buffer is written after this long.
    pub flush_delay_ns: u64,
    /// Reads (and waits on a buffer being written) in flight at most; more lookups get `Busy`.
    pub max_reads: u32,
    /// Which evicted items are written to flash.
    pub admission: AdmissionPolicy,
    /// None: the full DRAM index of #11 (8 bytes per item). Some: the cascade index.
    pub cascade: Option<CascadeConfig>,
    /// Some: the sets index (Kangaroo: small items in set-associative pages behind a small log).
    /// At most one of `cascade` and `sets`.
    pub sets: Option<SetsConfig>,
    /// The file's identity (`flash::claim_file`): a region written under another is not used.
    pub identity: u64,
    /// A commit of marks is followed by a device flush (fdatasync) before the changes it
    /// guards run: they then survive power loss, not only the process's death.
    pub sync_commits: bool,
}

/// The cascade index's settings (Cascade Mapping: hot mappings in DRAM, the rest on flash).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CascadeConfig {
    /// Tier 1's DRAM budget (rounded down to a power of two of 64-byte buckets).
    pub t1_bytes: u64,
    /// A stream's tier-2 blocks that start its reorganization into tier 3.
    pub reorg_at: u32,
    /// At most this many demotion streams (each a DRAM block).
    pub max_streams: u32,
    /// Bloom bits per mapping: tier-3 pages (sized by the expected item count) and tier-2 blocks.
    pub t3_bloom_bits: u32,
    /// Bloom bits per mapping of a tier-2 block.
    pub t2_bloom_bits: u32,
    /// Tier-3 pages a stream owns (fewer streams when the table is small).
    pub pages_per_stream: u32,
    /// Mappings per tier-2 block and per tier-3 page (at most the page's 338; tests use a few
    /// so that blocks fill and pages overflow constantly).
    pub block_entries: u32,
}

impl CascadeConfig {
    /// The defaults, with this tier-1 budget.
    pub fn with_t1_bytes(t1_bytes: u64) -> CascadeConfig {
        CascadeConfig {
            t1_bytes,
            reorg_at: 16,
            max_streams: 1024,
            t3_bloom_bits: 5,
            t2_bloom_bits: 12,
            pages_per_stream: 256,
            block_entries: PER_BLOCK as u32,
        }
    }
}

/// Where the cascade index lies and how its structures are sized (see `flash/cascade`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CascadeLayout {
    /// log2 of tier 1's buckets, tier 3's pages and the demotion streams.
    pub t1_bits: u32,
    pub t3_bits: u32,
    pub stream_bits: u32,
    /// Tier-2 block places per stream, and the count that starts a reorganization.
    pub t2_per_stream: u32,
    pub reorg_at: u32,
    pub block_entries: u32,
    pub t3_bloom: Bloom,
    pub t2_bloom: Bloom,
    /// File offsets of the tier-3 table (page after page) and the tier-2 area (stream after
    /// stream, `t2_per_stream` pages each).
    pub t3_offset: u64,
    pub t2_offset: u64,
    /// Bytes of the snapshot the cascade state may take at most.
    pub snapshot_bytes: u64,
}

impl CascadeLayout {
    fn new(c: &CascadeConfig, expected_entries: u64) -> Result<CascadeLayout, LayoutError> {
        if c.reorg_at == 0 || c.max_streams == 0 || c.t3_bloom_bits == 0 || c.t2_bloom_bits == 0 {
            return Err(LayoutError("cascade: reorganize at 1+ blocks, 1+ streams, 1+ Bloom bits".into()));
        }
        if c.reorg_at > 80 || c.max_streams > 4096 {
            return Err(LayoutError("cascade: at most 80 blocks per merge and 4096 streams".into()));
        }
        if !(1..=PER_BLOCK as u32).contains(&c.block_entries) {
            return Err(LayoutError(format!("cascade: 1 to {PER_BLOCK} mappings per block")));
        }
        let per_block = c.block_entries as u64;
        let t1_buckets = (c.t1_bytes / BUCKET_BYTES as u64).max(1);
        let t1_bits = 63 - t1_buckets.leading_zeros();
        if t1_bits > 31 {
            return Err(LayoutError("cascade: tier 1 over 128 GiB".into()));
        }
        // Pages fill to 43-85% on average (a power of two of them): the fuller end still leaves
        // room for a page's share to vary.
        let pages = expected_entries.div_ceil((per_block * 85 / 100).max(1)).max(1).next_power_of_two();
        let t3_bits = (63 - pages.leading_zeros()).min(t1_bits + 16);
        let streams =
            (1u64 << t3_bits).div_ceil(u64::from(c.pages_per_stream.max(1))).min(u64::from(c.max_streams)).max(1);
        let stream_bits = (63 - streams.leading_zeros()).min(t3_bits);
        let t2_per_stream = c.reorg_at * 3 / 2 + 2;
        let per_page = (expected_entries >> t3_bits).max(1) as usize;
        let t3_bloom = Bloom::sized(per_page, c.t3_bloom_bits);
        let t2_bloom = Bloom::sized(c.block_entries as usize, c.t2_bloom_bits);
        let (s, w) = (1u64 << stream_bits, u64::from(t2_per_stream));
        let snapshot_bytes = 64
            + s * (24 + w * 16 + per_block * ENTRY_BYTES as u64)
            + s * w * t2_bloom.bytes() as u64
            + (1u64 << t3_bits) * t3_bloom.bytes() as u64;
        Ok(CascadeLayout {
            t1_bits,
            t3_bits,
            stream_bits,
            t2_per_stream,
            reorg_at: c.reorg_at,
            block_entries: c.block_entries,
            t3_bloom,
            t2_bloom,
            t3_offset: 0,
            t2_offset: 0,
            snapshot_bytes,
        })
    }

    /// Bytes of flash the two mapping areas take.
    fn area_bytes(&self) -> u64 {
        ((1u64 << self.t3_bits) + (u64::from(self.t2_per_stream) << self.stream_bits)) * PAGE as u64
    }

    pub fn t1_buckets(&self) -> u32 {
        1 << self.t1_bits
    }
}

impl FlashConfig {
    /// Defaults for partition `partition` of `partitions` sharing a file of `file_bytes`.
    pub fn new(file_bytes: u64, partition: u32, partitions: u32) -> FlashConfig {
        FlashConfig {
            partition,
            partitions,
            file_bytes,
            segment_bytes: DEFAULT_SEGMENT_BYTES,
            expected_item_bytes: DEFAULT_EXPECTED_ITEM_BYTES,
            write_buffers: 2,
            flush_delay_ns: 1_000_000_000,
            max_reads: 256,
            admission: AdmissionPolicy::All,
            cascade: None,
            sets: None,
            identity: 1,
            sync_commits: false,
        }
    }

    /// The most heap bytes one partition's store of this configuration holds: its index (the
    /// full index, or the cascade index's tier 1 with its demotion blocks, Bloom filters and
    /// merge buffers), segment table, write buffers, commit copy, GC buffer and pooled read pages. What
    /// `FlashStore::memory` reports stays within it (tested); the server sizes the tier by it.
    pub fn dram_bytes(&self) -> Result<u64, LayoutError> {
        let layout = RegionLayout::new(self)?;
        let (page, segment) = (PAGE as u64, u64::from(layout.segment_bytes));
        let index = u64::from(layout.buckets) * BUCKET_BYTES as u64;
        let table = u64::from(layout.slots) * 32;
        // The write buffers, the commit copy and the GC buffer.
        let buffers = (u64::from(self.write_buffers) + 2) * segment;
        let reads = u64::from(self.max_reads) * (page + 128);
        let cascade = layout.cascade.map_or(0, |c| {
            // The snapshot's size is the state below tier 1: stream blocks, filters.
            let pages_per_stream = 1u64 << (c.t3_bits - c.stream_bits);
            c.snapshot_bytes + (2 * pages_per_stream + u64::from(c.reorg_at) + 2) * page
        });
        // The sets' DRAM state, the pages and items of the moves in flight and queued (a
        // reclaimed segment's small items, copied: twice its bytes with their records), the
        // snapshot section.
        let sets = layout.sets.map_or(0, |s| {
            u64::from(s.sets) * s.dram_per_set()
                + u64::from(s.max_moves) * (2 * page + 1024)
                + 2 * segment
                + s.snapshot_bytes
        });
        Ok(index + table + buffers + reads + cascade + sets)
    }

    /// A hash of every setting that shapes the regions (partitions, file size, segment size,
    /// index kind and sizes, format version): equal keys lay the file out identically.
    pub fn layout_key(&self) -> u64 {
        let c = self.cascade.map(|c| {
            [
                c.t1_bytes,
                u64::from(c.reorg_at),
                u64::from(c.max_streams),
                u64::from(c.t3_bloom_bits),
                u64::from(c.t2_bloom_bits),
                u64::from(c.pages_per_stream),
                u64::from(c.block_entries),
            ]
        });
        let sets = self.sets.map(|s| {
            [
                u64::from(s.log_percent),
                u64::from(s.threshold),
                u64::from(s.max_item_bytes),
                u64::from(s.bloom_bits),
                u64::from(s.max_moves),
                // The sets' format: 3 since log-index buckets span `LOG_SPAN` physical ones, 4
                // since their entries are packed (`packing.rs`).
                4,
                0,
            ]
        });
        let fields = [
            u64::from(FORMAT_VERSION),
            u64::from(self.partitions),
            self.file_bytes,
            u64::from(self.segment_bytes),
            u64::from(self.expected_item_bytes),
            u64::from(c.is_some()),
        ];
        let mut bytes = Vec::with_capacity(20 * 8);
        for v in fields.iter().chain(c.iter().flatten()).chain(sets.iter().flatten()) {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        xxhash_rust::xxh3::xxh3_64(&bytes)
    }
}

/// Where one partition's structures lie, in bytes from the start of the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionLayout {
    /// Where the region starts in the file.
    pub region_offset: u64,
    /// The region's bytes.
    pub region_bytes: u64,
    /// Where the index snapshot goes.
    pub snapshot_offset: u64,
    /// The bytes the snapshot may take.
    pub snapshot_bytes: u64,
    /// Where the segment ring starts.
    pub segments_offset: u64,
    /// Bytes per segment.
    pub segment_bytes: u32,
    /// Segments in the ring.
    pub slots: u32,
    /// Buckets of the full index.
    pub buckets: u32,
    /// The cascade index's places (None: the full index).
    pub cascade: Option<CascadeLayout>,
    /// The sets index's places (Some only with `FlashConfig::sets`).
    pub sets: Option<super::sets::SetsLayout>,
}

/// Why a configuration cannot be laid out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayoutError(pub String);

impl std::fmt::Display for LayoutError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl RegionLayout {
    /// Lays out the region `cfg` describes, or says why it cannot be.
    pub fn new(cfg: &FlashConfig) -> Result<RegionLayout, LayoutError> {
        let seg = cfg.segment_bytes;
        if !seg.is_power_of_two() || !(MIN_SEGMENT_BYTES..=MAX_SEGMENT_BYTES).contains(&seg) {
            return Err(LayoutError(format!("segment size {seg} must be a power of two from 64 KiB to 4 MiB")));
        }
        if cfg.partitions == 0 || cfg.partition >= cfg.partitions {
            return Err(LayoutError(format!("partition {} of {}", cfg.partition, cfg.partitions)));
        }
        if cfg.write_buffers < 2 || cfg.max_reads == 0 || cfg.expected_item_bytes < 32 {
            return Err(LayoutError("need 2+ write buffers, 1+ reads and an expected item of 32+ bytes".into()));
        }
        // The file's first page is its header (`layout::FileHeader`).
        let region_bytes =
            (cfg.file_bytes.saturating_sub(PAGE as u64) / u64::from(cfg.partitions)) / PAGE as u64 * PAGE as u64;
        let region_offset = PAGE as u64 + region_bytes * u64::from(cfg.partition);
        if let Some(sc) = &cfg.sets {
            if cfg.cascade.is_some() {
                return Err(LayoutError("one index: the cascade index or the sets index".into()));
            }
            return RegionLayout::with_sets(cfg, sc, region_offset, region_bytes);
        }
        let seg = u64::from(seg);
        let superblocks = (SUPERBLOCK_PAGES * PAGE) as u64;
        let rough_slots = region_bytes.saturating_sub(superblocks) / seg;
        let entries = rough_slots * seg / u64::from(cfg.expected_item_bytes);
        let mut cascade = cfg.cascade.as_ref().map(|c| CascadeLayout::new(c, entries)).transpose()?;
        if let (Some(c), Some(first)) = (cfg.cascade.as_ref(), cascade) {
            // Sized again for the items the ring holds once the mapping areas and their snapshot
            // are taken out (the Bloom filters are sized by it).
            let taken = first.area_bytes() + first.snapshot_bytes;
            let ring = region_bytes.saturating_sub(superblocks + taken) / seg * seg;
            cascade = Some(CascadeLayout::new(c, ring / u64::from(cfg.expected_item_bytes))?);
        }
        let buckets = match &cascade {
            Some(c) => u64::from(c.t1_buckets()),
            None => entries.div_ceil(WAYS as u64).max(1),
        };
        let page = PAGE as u64;
        let extra = cascade.map_or(0, |c| c.snapshot_bytes.next_multiple_of(page));
        let snapshot = |slots: u64| {
            page + (slots * SLOT_RECORD as u64).next_multiple_of(page)
                + (buckets * BUCKET_BYTES as u64).next_multiple_of(page)
                + extra
        };
        let maps = cascade.map_or(0, |c| c.area_bytes());
        let before_segments = superblocks + snapshot(rough_slots) + maps;
        if let Some(c) = &mut cascade {
            c.t3_offset = region_offset + superblocks + snapshot(rough_slots);
            c.t2_offset = c.t3_offset + (page << c.t3_bits);
        }
        let slots = region_bytes.saturating_sub(before_segments) / seg;
        let min_slots = u64::from(cfg.write_buffers) + 4;
        if slots < min_slots {
            return Err(LayoutError(format!(
                "a {region_bytes}-byte region per partition holds {slots} segments of {seg} bytes; at least {min_slots} are needed"
            )));
        }
        if slots > u64::from(MAX_SLOTS) || buckets > u64::from(u32::MAX) {
            return Err(LayoutError(format!(
                "{slots} segments per partition: more than {MAX_SLOTS}; use larger segments"
            )));
        }
        Ok(RegionLayout {
            region_offset,
            region_bytes,
            snapshot_offset: region_offset + superblocks,
            snapshot_bytes: snapshot(slots),
            segments_offset: region_offset + before_segments,
            segment_bytes: seg as u32,
            slots: slots as u32,
            buckets: buckets as u32,
            cascade,
            sets: None,
        })
    }

    /// The file offset of a slot's segment.
    pub fn segment_offset(&self, slot: u32) -> u64 {
        self.segments_offset + u64::from(slot) * u64::from(self.segment_bytes)
    }

    /// The largest item (padded) a segment takes: it must fit after the header and span at most
    /// MAX_PAGES pages.
    pub fn max_item_bytes(&self) -> usize {
        (self.segment_bytes as usize - SEGMENT_HEADER).min((MAX_PAGES as usize - 1) * PAGE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_split_the_file_evenly_and_do_not_overlap() {
        let cfg = |p| FlashConfig::new(1 << 30, p, 3);
        let a = RegionLayout::new(&cfg(0)).unwrap();
        let b = RegionLayout::new(&cfg(1)).unwrap();
        assert_eq!(a.region_bytes, b.region_bytes);
        assert_eq!(a.region_offset, PAGE as u64, "after the file header");
        assert_eq!(b.region_offset, a.region_offset + a.region_bytes);
        assert!(a.segment_offset(a.slots) <= b.region_offset, "the last segment ends inside its region");
        assert!(a.snapshot_offset + a.snapshot_bytes <= a.segments_offset);
        assert_eq!(a.segments_offset % PAGE as u64, 0);
        let c = RegionLayout::new(&cfg(2)).unwrap();
        assert!(c.segment_offset(c.slots) <= 1 << 30);
        // 128-byte items: one entry per 128 bytes of segment space.
        assert!(u64::from(a.buckets) * 8 >= u64::from(a.slots) * (1 << 20) / 128);
    }

    #[test]
    fn bad_sizes_are_errors_that_say_why() {
        let mut cfg = FlashConfig::new(1 << 30, 0, 1);
        cfg.segment_bytes = 3 << 20;
        assert!(RegionLayout::new(&cfg).unwrap_err().0.contains("power of two"));
        let cfg = FlashConfig::new(4 << 20, 0, 1);
        assert!(RegionLayout::new(&cfg).unwrap_err().0.contains("at least"));
    }
}
