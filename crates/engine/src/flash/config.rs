//! How a partition's flash store is sized and where its region lies in the flash file.

use super::admission::AdmissionPolicy;
use super::index::{BUCKET_BYTES, MAX_PAGES, MAX_SLOTS, WAYS};
use super::layout::{PAGE, SEGMENT_HEADER, SLOT_RECORD, VALUE_LEN_MASK};

pub const DEFAULT_SEGMENT_BYTES: u32 = 1 << 20;
pub const MIN_SEGMENT_BYTES: u32 = 64 << 10;
/// Index offsets are 18 bits of 16-byte units.
pub const MAX_SEGMENT_BYTES: u32 = 4 << 20;
const _: () = assert!(MAX_SEGMENT_BYTES <= VALUE_LEN_MASK, "an item's value length fits 24 bits");
/// The item size the index is sized for: one entry per this many bytes of segment space.
pub const DEFAULT_EXPECTED_ITEM_BYTES: u32 = 128;

/// One partition's flash store settings.
#[derive(Clone, Debug)]
pub struct FlashConfig {
    pub partition: u32,
    pub partitions: u32,
    /// The flash file's size; each partition gets an equal, page-aligned share.
    pub file_bytes: u64,
    /// A power of two in MIN_SEGMENT_BYTES..=MAX_SEGMENT_BYTES.
    pub segment_bytes: u32,
    pub expected_item_bytes: u32,
    /// DRAM write buffers of one segment each (at least 2: one fills while one is written).
    pub write_buffers: u32,
    /// A partly filled buffer is written after this long.
    pub flush_delay_ns: u64,
    /// Reads (and waits on a buffer being written) in flight at most; more lookups get `Busy`.
    pub max_reads: u32,
    pub admission: AdmissionPolicy,
}

impl FlashConfig {
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
        }
    }
}

/// Where one partition's structures lie, in bytes from the start of the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionLayout {
    pub region_offset: u64,
    pub region_bytes: u64,
    pub snapshot_offset: u64,
    pub snapshot_bytes: u64,
    pub segments_offset: u64,
    pub segment_bytes: u32,
    pub slots: u32,
    pub buckets: u32,
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
        let region_bytes = (cfg.file_bytes / u64::from(cfg.partitions)) / PAGE as u64 * PAGE as u64;
        let region_offset = region_bytes * u64::from(cfg.partition);
        let seg = u64::from(seg);
        let rough_slots = region_bytes.saturating_sub(PAGE as u64) / seg;
        let entries = rough_slots * seg / u64::from(cfg.expected_item_bytes);
        let buckets = entries.div_ceil(WAYS as u64).max(1);
        let page = PAGE as u64;
        let snapshot = |slots: u64| {
            page + (slots * SLOT_RECORD as u64).next_multiple_of(page)
                + (buckets * BUCKET_BYTES as u64).next_multiple_of(page)
        };
        let slots = region_bytes.saturating_sub(PAGE as u64 + snapshot(rough_slots)) / seg;
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
            snapshot_offset: region_offset + PAGE as u64,
            snapshot_bytes: snapshot(slots),
            segments_offset: region_offset + PAGE as u64 + snapshot(rough_slots),
            segment_bytes: seg as u32,
            slots: slots as u32,
            buckets: buckets as u32,
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
        assert_eq!(b.region_offset, a.region_bytes);
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
