//! What the flash tier writes, byte for byte. Every structure starts with a magic number and ends
//! with (or carries) an xxh3-64 checksum that is verified on every read; all integers are
//! little-endian. Nothing here does I/O.
//!
//! ```text
//! the flash file: a header page, then one region per partition, regions of equal size, each
//! aligned to PAGE
//!
//!   | file header | region 0 | region 1 | ... | region n-1 | (tail smaller than a region: unused)
//!
//! file header (FILE_HEADER_BYTES used of its page): the file's identity, drawn anew whenever the
//! layout changes; a region or segment written under another identity is never used
//!   0 magic u64 "TKVFLASH" | 8 version u32 | 12 partitions u32 | 16 file_bytes u64
//!  24 segment_bytes u32 | 28 index u32 (0 full, 1 cascade) | 32 layout_key u64 (xxh3 of every
//!  setting that shapes the regions) | 40 identity u64 | 48 checksum u64 (xxh3 of bytes 0..48)
//!  56 item bytes u32 (on flash, the index's sizing) | 60 sets log percent u32 (0: no sets index)
//!  64 checksum u64 (xxh3 of bytes 56..64; files of earlier runs have zeros: these are unknown)
//!
//! a region
//!
//!   +-------------+---------------------------+------+------+-----+------+
//!   | superblocks | index snapshot area       | seg0 | seg1 | ... | segN |
//!   | (two PAGEs) | (written only on close)   |      |      |     |      |
//!   +-------------+---------------------------+------+------+-----+------+
//!
//! superblock (SUPERBLOCK_BYTES used of its page)
//!   0 magic u64 "TKVSUPER" | 8 version u32 | 12 state u32 (1 clean, 2 open)
//!  16 partition u32 | 20 partitions u32 | 24 region_bytes u64 | 32 segment_bytes u32
//!  36 buckets u32 | 40 epoch u64 | 48 last_seq u64 | 56 snapshot_bytes u64
//!  64 snapshot_checksum u64 | 72 last_cas u64 | 80 flush_at u32 (Unix seconds of a pending
//!  delayed flush_all, 0 = none) | 84 flags u32 (`MARKS_WRITTEN`: the clean close wrote every
//!  drop mark, so recovery from the segments may stand in for a damaged snapshot; zero in
//!  superblocks written before it) | 88 identity u64 (the file's, see above)
//!  96 watermark u64 (the lowest segment sequence number still valid) | 104 generation u64
//!  112 record_seq u64 (the last record sequence number handed out) | 120 checksum u64 (xxh3
//!  of bytes 0..120) | 128 sets_floor_seq u64 | 136 sets_floor_epoch u64 (the sets index: set
//!  pages below either hold nothing valid) | 144 checksum u64 (xxh3 of bytes 0..144; bytes
//!  128..152 all zero in a superblock written before they were added)
//!
//! A region has two superblock pages, written in turn (generation even: the first, odd: the
//! second); open takes the valid one of the larger generation, so a torn write of one leaves the
//! other.
//!
//! segment: written whole and in order from one aligned buffer
//!   +----------------+----------------------------------------------+---------+
//!   | segment header | items, each 16-byte aligned; an item of at    | zeroes  |
//!   | SEGMENT_HEADER | most one PAGE never crosses a PAGE boundary   |         |
//!   +----------------+----------------------------------------------+---------+
//!   0 magic u64 "TKVSEGMT" | 8 version u32 | 12 partition u32 | 16 epoch u64
//!  24 seq u64 | 32 slot u32 | 36 used u32 (bytes, header included) | 40 identity u64
//!  48 checksum u64 (of 0..48) | 56 zero u64
//!
//! item
//!   0 magic u16 0x5EA1 | 2 key_len u8 | 3 version u8 | 4 value_len u24 | 7 state u8 (the
//!  DRAM item's meta state bits: fetched, stale, token sent) | 8 flags u32
//!  12 expiry u32 (Unix seconds, 0 = never) | 16 cas u64 | 24 seq u64 (the record's sequence
//!  number: of two records for one key, the larger is newer) | 32 checksum u64 (xxh3 seeded
//!  with the segment's sequence number, of bytes 0..32, the key and the value) | 40 key | value
//!  | zero padding to 16 bytes
//!
//! mark (a record that kills older records, see `recovery`)
//!   0 magic u16 0x5EA2 | 2 kind u8 (1 invalidate, 2 flush) | 3 version u8 | 4 zero u32
//!   8 group u64 (which keys: `FlashStore::group`) | 16 zero u64 | 24 seq u64 | 32 checksum u64
//!  (seeded as an item's, of bytes 0..32) | 40 zero padding to 48
//!
//! The seeded checksums mean bytes left in a slot by an earlier segment never pass as records
//! of the segment written there now.
//! ```

use xxhash_rust::xxh3::{xxh3_64, Xxh3};

/// The I/O unit: every read and write is a whole number of pages at a page-aligned offset.
pub(super) const PAGE: usize = 4096;
/// Item alignment inside a segment; index entries count offsets in these units.
pub(super) const ITEM_ALIGN: usize = 16;
/// On-flash format version, in every header.
pub(super) const FORMAT_VERSION: u32 = 3;

pub(super) const FILE_MAGIC: u64 = u64::from_le_bytes(*b"TKVFLASH");
pub(super) const SUPERBLOCK_MAGIC: u64 = u64::from_le_bytes(*b"TKVSUPER");
pub(super) const SEGMENT_MAGIC: u64 = u64::from_le_bytes(*b"TKVSEGMT");
// "TKVSNAP2" since the full index's second bucket is `index::partner`: a snapshot of the
// buckets as placed before is not loaded (its partition is recovered from its segments).
pub(super) const SNAPSHOT_MAGIC: u64 = u64::from_le_bytes(*b"TKVSNAP2");
pub(super) const ITEM_MAGIC: u16 = 0x5EA1;
pub(super) const MARK_MAGIC: u16 = 0x5EA2;

pub(super) const FILE_HEADER_BYTES: usize = 56;
/// The header's second part (bytes 56..72): settings named when the layout changes.
const FILE_HEADER_SETTINGS: usize = 72;
pub(super) const SUPERBLOCK_BYTES: usize = 152;
/// Superblock pages at the start of a region.
pub(super) const SUPERBLOCK_PAGES: usize = 2;
pub(super) const SEGMENT_HEADER: usize = 64;
pub(super) const ITEM_HEADER: usize = 40;
/// A mark's bytes on flash.
pub(super) const MARK_BYTES: usize = 48;
/// The snapshot header, at the start of its own page:
///   0 magic u64 "TKVSNAPS" | 8 version u32 | 12 partition u32 | 16 epoch u64 | 24 slots u32
///  28 buckets u32 | 32 head u32 | 36 used_slots u32 | 40 checksum u64 (of 0..40)
/// then, from the next page: a SLOT_RECORD per slot, zero-padded to a page, then the index
/// buckets (64 bytes each), zero-padded to a page.
pub(super) const SNAPSHOT_HEADER: usize = 48;

const _: () =
    assert!(FILE_HEADER_SETTINGS <= PAGE && SUPERBLOCK_BYTES <= PAGE && SEGMENT_HEADER.is_multiple_of(ITEM_ALIGN));
const _: () = assert!(MARK_BYTES.is_multiple_of(ITEM_ALIGN) && MARK_BYTES >= ITEM_HEADER);
const _: () = assert!(PAGE.is_multiple_of(ITEM_ALIGN));
const _: () = assert!(SNAPSHOT_HEADER <= PAGE);

/// A slot's record in the snapshot: 0 seq u64 | 8 used u32 | 12 gen u8 | 13 sealed u8 | 14 zero
/// padding. 128 records fill a page, so no record crosses one.
pub(super) const SLOT_RECORD: usize = 32;
const _: () = assert!(PAGE.is_multiple_of(SLOT_RECORD));

/// Superblock states.
pub(super) const STATE_CLEAN: u32 = 1;
pub(super) const STATE_OPEN: u32 = 2;

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// A region's first page.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(super) struct Superblock {
    pub state: u32,
    pub partition: u32,
    pub partitions: u32,
    pub region_bytes: u64,
    pub segment_bytes: u32,
    pub buckets: u32,
    pub epoch: u64,
    pub last_seq: u64,
    pub snapshot_bytes: u64,
    pub snapshot_checksum: u64,
    pub last_cas: u64,
    pub flush_at: u32,
    /// `MARKS_WRITTEN` or 0.
    pub flags: u32,
    /// The file identity the region was written under.
    pub identity: u64,
    /// The lowest segment sequence number still valid (raised when the region starts empty).
    pub watermark: u64,
    /// Counts superblock writes; its parity names the page.
    pub generation: u64,
    /// The last record sequence number handed out.
    pub record_seq: u64,
    /// Sets index: set pages of a lower record sequence number hold nothing valid (a flush, an
    /// I/O error on the way to a page or a log segment).
    pub sets_floor_seq: u64,
    /// Sets index: set pages written in a lower epoch hold nothing valid (the region started
    /// empty since).
    pub sets_floor_epoch: u64,
}

/// `Superblock::flags`: the clean close that wrote this superblock first wrote the marks of
/// every item its index dropped, so the records on the device bring back no deleted or
/// overwritten item: recovery from the segments is as safe as after a crash.
pub(super) const MARKS_WRITTEN: u32 = 1;

impl Superblock {
    pub(super) fn encode(&self, out: &mut [u8]) {
        out[..SUPERBLOCK_BYTES].fill(0);
        put64(out, 0, SUPERBLOCK_MAGIC);
        put32(out, 8, FORMAT_VERSION);
        put32(out, 12, self.state);
        put32(out, 16, self.partition);
        put32(out, 20, self.partitions);
        put64(out, 24, self.region_bytes);
        put32(out, 32, self.segment_bytes);
        put32(out, 36, self.buckets);
        put64(out, 40, self.epoch);
        put64(out, 48, self.last_seq);
        put64(out, 56, self.snapshot_bytes);
        put64(out, 64, self.snapshot_checksum);
        put64(out, 72, self.last_cas);
        put32(out, 80, self.flush_at);
        put32(out, 84, self.flags);
        put64(out, 88, self.identity);
        put64(out, 96, self.watermark);
        put64(out, 104, self.generation);
        put64(out, 112, self.record_seq);
        let sum = xxh3_64(&out[..120]);
        put64(out, 120, sum);
        put64(out, 128, self.sets_floor_seq);
        put64(out, 136, self.sets_floor_epoch);
        let sum = xxh3_64(&out[..144]);
        put64(out, 144, sum);
    }

    /// The superblock in `page`, or None if its magic, version or checksum is wrong.
    pub(super) fn decode(page: &[u8]) -> Option<Superblock> {
        if page.len() < SUPERBLOCK_BYTES
            || u64_at(page, 0) != SUPERBLOCK_MAGIC
            || u32_at(page, 8) != FORMAT_VERSION
            || u64_at(page, 120) != xxh3_64(&page[..120])
        {
            return None;
        }
        // Bytes 128..152 came later: all zeros in a superblock written before them.
        let sets_floors = if u64_at(page, 144) == xxh3_64(&page[..144]) {
            (u64_at(page, 128), u64_at(page, 136))
        } else if page[128..152].iter().all(|&b| b == 0) {
            (0, 0)
        } else {
            return None;
        };
        Some(Superblock {
            state: u32_at(page, 12),
            partition: u32_at(page, 16),
            partitions: u32_at(page, 20),
            region_bytes: u64_at(page, 24),
            segment_bytes: u32_at(page, 32),
            buckets: u32_at(page, 36),
            epoch: u64_at(page, 40),
            last_seq: u64_at(page, 48),
            snapshot_bytes: u64_at(page, 56),
            snapshot_checksum: u64_at(page, 64),
            last_cas: u64_at(page, 72),
            flush_at: u32_at(page, 80),
            flags: u32_at(page, 84),
            identity: u64_at(page, 88),
            watermark: u64_at(page, 96),
            generation: u64_at(page, 104),
            record_seq: u64_at(page, 112),
            sets_floor_seq: sets_floors.0,
            sets_floor_epoch: sets_floors.1,
        })
    }
}

/// The flash file's first page: who wrote the file, in which layout, under which identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct FileHeader {
    pub partitions: u32,
    pub file_bytes: u64,
    pub segment_bytes: u32,
    /// 0: the full index, 1: the cascade index.
    pub index: u32,
    /// A hash of every setting that shapes the regions (`FlashConfig::layout_key`).
    pub layout_key: u64,
    pub identity: u64,
    /// The bytes an item is expected to take on flash (0: not recorded, an earlier run's file).
    pub item_bytes: u32,
    /// The sets index's log share of each region, in percent (0: none, or not recorded).
    pub log_percent: u32,
}

/// What a file's first page holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum FirstPage {
    /// All zeroes: a new (or zeroed) file.
    Blank,
    /// A valid file header of this format.
    Ours(FileHeader),
    /// tierkv's, but not readable as this format's header: an earlier format (a region
    /// superblock at the start of the file) or a header that fails its checksum.
    OursOther,
    /// Anything else: another program's data.
    Foreign,
}

impl FileHeader {
    pub(super) fn encode(&self, out: &mut [u8]) {
        out[..FILE_HEADER_BYTES].fill(0);
        put64(out, 0, FILE_MAGIC);
        put32(out, 8, FORMAT_VERSION);
        put32(out, 12, self.partitions);
        put64(out, 16, self.file_bytes);
        put32(out, 24, self.segment_bytes);
        put32(out, 28, self.index);
        put64(out, 32, self.layout_key);
        put64(out, 40, self.identity);
        let sum = xxh3_64(&out[..48]);
        put64(out, 48, sum);
        out[FILE_HEADER_BYTES..FILE_HEADER_SETTINGS].fill(0);
        put32(out, 56, self.item_bytes);
        put32(out, 60, self.log_percent);
        let sum = xxh3_64(&out[56..64]);
        put64(out, 64, sum);
    }

    /// Classifies a file's first page.
    pub(super) fn classify(page: &[u8]) -> FirstPage {
        if page.iter().all(|&b| b == 0) {
            return FirstPage::Blank;
        }
        if page.len() < FILE_HEADER_BYTES {
            return FirstPage::Foreign;
        }
        let magic = u64_at(page, 0);
        if magic == SUPERBLOCK_MAGIC {
            return FirstPage::OursOther;
        }
        if magic != FILE_MAGIC {
            return FirstPage::Foreign;
        }
        if u32_at(page, 8) != FORMAT_VERSION || u64_at(page, 48) != xxh3_64(&page[..48]) {
            return FirstPage::OursOther;
        }
        let settings_ok = page.len() >= FILE_HEADER_SETTINGS && u64_at(page, 64) == xxh3_64(&page[56..64]);
        FirstPage::Ours(FileHeader {
            partitions: u32_at(page, 12),
            file_bytes: u64_at(page, 16),
            segment_bytes: u32_at(page, 24),
            index: u32_at(page, 28),
            layout_key: u64_at(page, 32),
            identity: u64_at(page, 40),
            // Not checked out (zeros before these were written, or damage): unknown.
            item_bytes: if settings_ok { u32_at(page, 56) } else { 0 },
            log_percent: if settings_ok { u32_at(page, 60) } else { 0 },
        })
    }
}

/// A segment's first bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct SegmentHeader {
    pub partition: u32,
    pub epoch: u64,
    pub seq: u64,
    pub slot: u32,
    pub used: u32,
    pub identity: u64,
}

impl SegmentHeader {
    pub(super) fn encode(&self, out: &mut [u8]) {
        put64(out, 0, SEGMENT_MAGIC);
        put32(out, 8, FORMAT_VERSION);
        put32(out, 12, self.partition);
        put64(out, 16, self.epoch);
        put64(out, 24, self.seq);
        put32(out, 32, self.slot);
        put32(out, 36, self.used);
        put64(out, 40, self.identity);
        let sum = xxh3_64(&out[..48]);
        put64(out, 48, sum);
        put64(out, 56, 0);
    }

    pub(super) fn decode(b: &[u8]) -> Option<SegmentHeader> {
        if b.len() < SEGMENT_HEADER
            || u64_at(b, 0) != SEGMENT_MAGIC
            || u32_at(b, 8) != FORMAT_VERSION
            || u64_at(b, 48) != xxh3_64(&b[..48])
        {
            return None;
        }
        Some(SegmentHeader {
            partition: u32_at(b, 12),
            epoch: u64_at(b, 16),
            seq: u64_at(b, 24),
            slot: u32_at(b, 32),
            used: u32_at(b, 36),
            identity: u64_at(b, 40),
        })
    }
}

/// An item's metadata, as stored in its header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ItemMeta {
    /// memcached's client flags.
    pub flags: u32,
    /// Absolute Unix seconds, 0 = never.
    pub expiry: u32,
    /// The item's CAS.
    pub cas: u64,
    /// The meta state bits (`crate::item::STATE_MASK`) the item had in DRAM.
    pub state: u8,
}

/// Value lengths fit 24 bits (segments are at most 4 MiB, asserted in `config`); the byte
/// above holds the state.
pub(super) const VALUE_LEN_MASK: u32 = 0x00FF_FFFF;

/// Bytes an item takes in a segment, padding included.
pub(super) fn item_bytes(key_len: usize, value_len: usize) -> usize {
    (ITEM_HEADER + key_len + value_len).next_multiple_of(ITEM_ALIGN)
}

/// Writes an item (header, key, value, zero padding) at the start of `out`, which must hold
/// `item_bytes(key.len(), value.len())` bytes; `seq` is the record's sequence number and `seed`
/// the segment's. Returns the bytes written.
pub(super) fn encode_item(out: &mut [u8], key: &[u8], value: &[u8], meta: ItemMeta, seq: u64, seed: u64) -> usize {
    let total = item_bytes(key.len(), value.len());
    let key_len = u8::try_from(key.len()).expect("keys are at most 250 bytes");
    let value_len = u32::try_from(value.len()).ok().filter(|&len| len <= VALUE_LEN_MASK).expect("values fit a segment");
    out[0..2].copy_from_slice(&ITEM_MAGIC.to_le_bytes());
    out[2] = key_len;
    out[3] = FORMAT_VERSION as u8;
    put32(out, 4, value_len | u32::from(meta.state) << 24);
    put32(out, 8, meta.flags);
    put32(out, 12, meta.expiry);
    put64(out, 16, meta.cas);
    put64(out, 24, seq);
    let body = ITEM_HEADER + key.len();
    out[ITEM_HEADER..body].copy_from_slice(key);
    out[body..body + value.len()].copy_from_slice(value);
    out[body + value.len()..total].fill(0);
    let mut hasher = Xxh3::with_seed(seed);
    hasher.update(&out[..32]);
    hasher.update(&out[ITEM_HEADER..body + value.len()]);
    put64(out, 32, hasher.digest());
    total
}

/// What a mark kills.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum MarkKind {
    /// Every older record of the keys in its group.
    Invalidate,
    /// Every older record (flush_all).
    Flush,
    /// Every older record of the keys of one cascade-index demotion stream (the stream forgot
    /// its mappings below tier 1).
    Stream,
}

/// Writes a mark at the start of `out` (MARK_BYTES); seeded as `encode_item`.
pub(super) fn encode_mark(out: &mut [u8], kind: MarkKind, group: u64, seq: u64, seed: u64) -> usize {
    out[..MARK_BYTES].fill(0);
    out[0..2].copy_from_slice(&MARK_MAGIC.to_le_bytes());
    out[2] = match kind {
        MarkKind::Invalidate => 1,
        MarkKind::Flush => 2,
        MarkKind::Stream => 3,
    };
    out[3] = FORMAT_VERSION as u8;
    put64(out, 8, group);
    put64(out, 24, seq);
    put64(out, 32, xxhash_rust::xxh3::xxh3_64_with_seed(&out[..32], seed));
    MARK_BYTES
}

/// A record found in a segment.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Record<'a> {
    Item(ItemRef<'a>),
    Mark { kind: MarkKind, group: u64, seq: u64 },
}

impl Record<'_> {
    /// Bytes the record takes, padding included.
    pub(super) fn bytes(&self) -> usize {
        match self {
            Record::Item(item) => item.bytes,
            Record::Mark { .. } => MARK_BYTES,
        }
    }
}

/// Decodes and verifies the record at the start of `b` (written under `seed`).
pub(super) fn decode_record(b: &[u8], seed: u64) -> Result<Record<'_>, Corrupt> {
    if b.len() >= MARK_BYTES && u16::from_le_bytes([b[0], b[1]]) == MARK_MAGIC {
        let kind = match b[2] {
            1 => MarkKind::Invalidate,
            2 => MarkKind::Flush,
            3 => MarkKind::Stream,
            _ => return Err(Corrupt::Magic),
        };
        if u32::from(b[3]) != FORMAT_VERSION || u64_at(b, 32) != xxhash_rust::xxh3::xxh3_64_with_seed(&b[..32], seed) {
            return Err(Corrupt::Checksum);
        }
        return Ok(Record::Mark { kind, group: u64_at(b, 8), seq: u64_at(b, 24) });
    }
    decode_item(b, seed).map(Record::Item)
}

/// An item found in a page: its key and value borrowed from the buffer.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct ItemRef<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub meta: ItemMeta,
    /// The record's sequence number.
    pub seq: u64,
    /// Bytes the item takes, padding included.
    pub bytes: usize,
}

/// Why bytes read from flash were not served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Corrupt {
    Magic,
    Length,
    Checksum,
}

/// Decodes and verifies the item at the start of `b` (written under `seed`).
pub(super) fn decode_item(b: &[u8], seed: u64) -> Result<ItemRef<'_>, Corrupt> {
    if b.len() < ITEM_HEADER || u16::from_le_bytes([b[0], b[1]]) != ITEM_MAGIC || u32::from(b[3]) != FORMAT_VERSION {
        return Err(Corrupt::Magic);
    }
    let key_len = usize::from(b[2]);
    let value_len = (u32_at(b, 4) & VALUE_LEN_MASK) as usize;
    let end = ITEM_HEADER + key_len + value_len;
    if key_len == 0 || end > b.len() {
        return Err(Corrupt::Length);
    }
    let mut hasher = Xxh3::with_seed(seed);
    hasher.update(&b[..32]);
    hasher.update(&b[ITEM_HEADER..end]);
    if hasher.digest() != u64_at(b, 32) {
        return Err(Corrupt::Checksum);
    }
    let meta = ItemMeta { flags: u32_at(b, 8), expiry: u32_at(b, 12), cas: u64_at(b, 16), state: b[7] };
    let key = &b[ITEM_HEADER..ITEM_HEADER + key_len];
    Ok(ItemRef {
        key,
        value: &b[ITEM_HEADER + key_len..end],
        meta,
        seq: u64_at(b, 24),
        bytes: item_bytes(key_len, value_len),
    })
}

/// The snapshot header at the start of a region's snapshot area; the payload that follows (the
/// segment table, then the index buckets) is covered by the superblock's `snapshot_checksum`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct SnapshotHeader {
    pub partition: u32,
    pub epoch: u64,
    pub slots: u32,
    pub buckets: u32,
    /// The ring: the next slot to fill and the oldest slot in use, and how many are in use.
    pub head: u32,
    pub used_slots: u32,
}

impl SnapshotHeader {
    pub(super) fn encode(&self, out: &mut [u8]) {
        out[..SNAPSHOT_HEADER].fill(0);
        put64(out, 0, SNAPSHOT_MAGIC);
        put32(out, 8, FORMAT_VERSION);
        put32(out, 12, self.partition);
        put64(out, 16, self.epoch);
        put32(out, 24, self.slots);
        put32(out, 28, self.buckets);
        put32(out, 32, self.head);
        put32(out, 36, self.used_slots);
        let sum = xxh3_64(&out[..40]);
        put64(out, 40, sum);
    }

    pub(super) fn decode(b: &[u8]) -> Option<SnapshotHeader> {
        if u64_at(b, 0) != SNAPSHOT_MAGIC || u32_at(b, 8) != FORMAT_VERSION || u64_at(b, 40) != xxh3_64(&b[..40]) {
            return None;
        }
        Some(SnapshotHeader {
            partition: u32_at(b, 12),
            epoch: u64_at(b, 16),
            slots: u32_at(b, 24),
            buckets: u32_at(b, 28),
            head: u32_at(b, 32),
            used_slots: u32_at(b, 36),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn superblock_round_trips_and_rejects_any_flipped_bit() {
        let sb = Superblock {
            state: STATE_CLEAN,
            partition: 3,
            partitions: 4,
            region_bytes: 1 << 30,
            segment_bytes: 1 << 20,
            buckets: 77,
            epoch: 9,
            last_seq: 1234,
            snapshot_bytes: 8192,
            snapshot_checksum: 55,
            last_cas: 99,
            flush_at: 1_900_000_000,
            flags: MARKS_WRITTEN,
            identity: 0xDEAD_BEEF,
            watermark: 77 << 32,
            generation: 12,
            record_seq: 1 << 40,
            sets_floor_seq: 5 << 40,
            sets_floor_epoch: 76,
        };
        let mut page = vec![0u8; PAGE];
        sb.encode(&mut page);
        assert_eq!(Superblock::decode(&page), Some(sb));
        for bit in 0..SUPERBLOCK_BYTES * 8 {
            let mut bad = page.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert_eq!(Superblock::decode(&bad), None, "bit {bit}");
        }
        // One written before the sets floors were added: read with floors of 0.
        page[120..152].fill(0);
        let old = Superblock { sets_floor_seq: 0, sets_floor_epoch: 0, ..sb };
        let sum = xxh3_64(&page[..120]);
        put64(&mut page, 120, sum);
        assert_eq!(Superblock::decode(&page), Some(old));
    }

    #[test]
    fn segment_header_round_trips_and_rejects_a_flipped_bit() {
        let h = SegmentHeader { partition: 1, epoch: 2, seq: 3, slot: 4, used: 5000, identity: 6 };
        let mut b = [0u8; SEGMENT_HEADER];
        h.encode(&mut b);
        assert_eq!(SegmentHeader::decode(&b), Some(h));
        b[30] ^= 4;
        assert_eq!(SegmentHeader::decode(&b), None);
    }

    #[test]
    fn item_round_trips_with_padding_and_every_flipped_bit_is_caught() {
        let meta = ItemMeta { flags: 7, expiry: 1_900_000_000, cas: 42, state: 0x40 };
        let mut b = vec![0xAAu8; 96];
        let n = encode_item(&mut b, b"key", b"value!", meta, 99, 5);
        assert_eq!(n, item_bytes(3, 6));
        assert_eq!(n, 64);
        assert!(b[ITEM_HEADER + 9..n].iter().all(|&x| x == 0), "padding is zeroed");
        let item = decode_item(&b, 5).unwrap();
        assert_eq!(
            (item.key, item.value, item.meta, item.seq, item.bytes),
            (&b"key"[..], &b"value!"[..], meta, 99, 64)
        );
        assert_eq!(decode_item(&b, 6), Err(Corrupt::Checksum), "another segment's seed");
        for bit in 0..(ITEM_HEADER + 9) * 8 {
            let mut bad = b.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(decode_item(&bad, 5).is_err(), "bit {bit}");
        }
        assert_eq!(decode_item(&b[..40], 5), Err(Corrupt::Length));
        assert_eq!(decode_item(&[0u8; 64], 5), Err(Corrupt::Magic));
    }

    #[test]
    fn marks_round_trip_and_fail_under_another_seed_or_a_flipped_bit() {
        let mut b = vec![0xAAu8; MARK_BYTES];
        assert_eq!(encode_mark(&mut b, MarkKind::Invalidate, 0xABCD, 1234, 9), MARK_BYTES);
        let mark = decode_record(&b, 9).unwrap();
        assert_eq!(mark, Record::Mark { kind: MarkKind::Invalidate, group: 0xABCD, seq: 1234 });
        assert_eq!(mark.bytes(), MARK_BYTES);
        assert!(decode_record(&b, 8).is_err());
        for bit in 0..32 * 8 {
            let mut bad = b.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(decode_record(&bad, 9).is_err(), "bit {bit}");
        }
        encode_mark(&mut b, MarkKind::Flush, 0, 7, 9);
        assert_eq!(decode_record(&b, 9), Ok(Record::Mark { kind: MarkKind::Flush, group: 0, seq: 7 }));
        encode_mark(&mut b, MarkKind::Stream, 5, 8, 9);
        assert_eq!(decode_record(&b, 9), Ok(Record::Mark { kind: MarkKind::Stream, group: 5, seq: 8 }));
    }

    #[test]
    fn file_header_round_trips_and_foreign_pages_are_told_apart() {
        let h = FileHeader {
            partitions: 2,
            file_bytes: 256 << 20,
            segment_bytes: 1 << 20,
            index: 1,
            layout_key: 42,
            identity: 0x1234_5678_9ABC,
            item_bytes: 128,
            log_percent: 5,
        };
        let mut page = vec![0u8; PAGE];
        assert_eq!(FileHeader::classify(&page), FirstPage::Blank);
        h.encode(&mut page);
        assert_eq!(FileHeader::classify(&page), FirstPage::Ours(h));
        for bit in 64..FILE_HEADER_BYTES * 8 {
            let mut bad = page.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert_eq!(FileHeader::classify(&bad), FirstPage::OursOther, "bit {bit}");
        }
        // The settings part damaged (or zeros, as an earlier run wrote it): the header still
        // holds, the settings are unknown.
        for bit in FILE_HEADER_BYTES * 8..FILE_HEADER_SETTINGS * 8 {
            let mut bad = page.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert_eq!(FileHeader::classify(&bad), FirstPage::Ours(FileHeader { item_bytes: 0, log_percent: 0, ..h }));
        }
        let mut text = vec![0u8; PAGE];
        text[..12].copy_from_slice(b"hello world\n");
        assert_eq!(FileHeader::classify(&text), FirstPage::Foreign);
        let mut old = vec![0u8; PAGE];
        old[..8].copy_from_slice(&SUPERBLOCK_MAGIC.to_le_bytes());
        assert_eq!(FileHeader::classify(&old), FirstPage::OursOther, "an earlier format's superblock");
    }

    #[test]
    fn snapshot_header_round_trips() {
        let h = SnapshotHeader { partition: 2, epoch: 5, slots: 100, buckets: 4096, head: 7, used_slots: 3 };
        let mut b = [0u8; SNAPSHOT_HEADER];
        h.encode(&mut b);
        assert_eq!(SnapshotHeader::decode(&b), Some(h));
        b[20] ^= 1;
        assert_eq!(SnapshotHeader::decode(&b), None);
    }
}
