//! The cascade index's on-flash mapping block and its DRAM Bloom filters. Nothing here does I/O.
//!
//! ```text
//! a mapping block: one PAGE, written whole
//!   0 magic u64 "TKVMAPBK" | 8 kind u8 (2: a tier-2 block, 3: a tier-3 bucket page)
//!   9 zero u8 | 10 count u16 | 12 owner u32 (the stream of a tier-2 block, the page number of
//!   a tier-3 page) | 16 seq u64 (what the DRAM record expects) | 24 checksum u64 (xxh3 of
//!   bytes 0..24 and the entries)
//!  32 entries, oldest first, ENTRY_BYTES each:
//!      0 t1_bucket u32 | 4 entry u64 (the tier-1 entry: tag, slot, generation, offset, pages;
//!      pages 0 is a tombstone)
//!   the rest of the page: zeroes
//! ```
//!
//! A key's mapping is known everywhere by its fingerprint, (tier-1 bucket, tag): the tier-1
//! bucket is the top bits of the key's hash, and every structure below tier 1 is chosen from
//! the fingerprint's own bits, so a mapping demoted from tier 1 knows where it goes without the
//! key.

use xxhash_rust::xxh3::Xxh3;

use super::index::Entry;
use super::layout::PAGE;

pub(super) const BLOCK_MAGIC: u64 = u64::from_le_bytes(*b"TKVMAPBK");
pub(super) const KIND_T2: u8 = 2;
pub(super) const KIND_T3: u8 = 3;
pub(super) const BLOCK_HEADER: usize = 32;
pub(super) const ENTRY_BYTES: usize = 12;
/// Mappings one block holds.
pub(super) const PER_BLOCK: usize = (PAGE - BLOCK_HEADER) / ENTRY_BYTES;
const _: () = assert!(PER_BLOCK == 338);

/// A mapping: the key's fingerprint and where its item is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Mapping {
    pub bucket: u32,
    pub entry: Entry,
}

impl Mapping {
    pub(super) fn fingerprint(self) -> (u32, u16) {
        (self.bucket, self.entry.tag())
    }
}

/// What a block's header says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct BlockHeader {
    pub kind: u8,
    pub count: u16,
    pub owner: u32,
    pub seq: u64,
}

fn checksum(page: &[u8], count: usize) -> u64 {
    let mut h = Xxh3::new();
    h.update(&page[..24]);
    h.update(&page[BLOCK_HEADER..BLOCK_HEADER + count * ENTRY_BYTES]);
    h.digest()
}

/// Writes `mappings` (at most PER_BLOCK) as a block into `page` (PAGE bytes).
pub(super) fn encode_block(page: &mut [u8], kind: u8, owner: u32, seq: u64, mappings: &[Mapping]) {
    assert!(mappings.len() <= PER_BLOCK && page.len() >= PAGE);
    page[..PAGE].fill(0);
    page[0..8].copy_from_slice(&BLOCK_MAGIC.to_le_bytes());
    page[8] = kind;
    page[10..12].copy_from_slice(&(mappings.len() as u16).to_le_bytes());
    page[12..16].copy_from_slice(&owner.to_le_bytes());
    page[16..24].copy_from_slice(&seq.to_le_bytes());
    for (i, m) in mappings.iter().enumerate() {
        let at = BLOCK_HEADER + i * ENTRY_BYTES;
        page[at..at + 4].copy_from_slice(&m.bucket.to_le_bytes());
        page[at + 4..at + 12].copy_from_slice(&m.entry.0.to_le_bytes());
    }
    let sum = checksum(page, mappings.len());
    page[24..32].copy_from_slice(&sum.to_le_bytes());
}

/// The header of a block that checks out (magic, count, checksum), else None.
pub(super) fn decode_header(page: &[u8]) -> Option<BlockHeader> {
    if page.len() < PAGE || page[0..8] != BLOCK_MAGIC.to_le_bytes() {
        return None;
    }
    let count = u16::from_le_bytes([page[10], page[11]]);
    if count as usize > PER_BLOCK {
        return None;
    }
    let sum = u64::from_le_bytes(page[24..32].try_into().expect("8 bytes"));
    if sum != checksum(page, count as usize) {
        return None;
    }
    Some(BlockHeader {
        kind: page[8],
        count,
        owner: u32::from_le_bytes(page[12..16].try_into().expect("4 bytes")),
        seq: u64::from_le_bytes(page[16..24].try_into().expect("8 bytes")),
    })
}

/// The `i`th mapping of a block whose header checked out.
pub(super) fn mapping_at(page: &[u8], i: usize) -> Mapping {
    let at = BLOCK_HEADER + i * ENTRY_BYTES;
    Mapping {
        bucket: u32::from_le_bytes(page[at..at + 4].try_into().expect("4 bytes")),
        entry: Entry(u64::from_le_bytes(page[at + 4..at + 12].try_into().expect("8 bytes"))),
    }
}

/// The newest mapping with fingerprint `fp` in a block that checked out.
pub(super) fn find_in_block(page: &[u8], count: usize, fp: (u32, u16)) -> Option<Mapping> {
    (0..count).rev().map(|i| mapping_at(page, i)).find(|m| m.fingerprint() == fp)
}

/// A Bloom filter over fingerprints in `bits` bits (a multiple of 64) of a caller's slice, with
/// `k` probes by double hashing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bloom {
    pub bits: u32,
    pub k: u32,
}

impl Bloom {
    /// A filter for `entries` mappings at `bits_per_entry` bits each (at least 64 bits), with the
    /// probe count that minimises false positives.
    pub fn sized(entries: usize, bits_per_entry: u32) -> Bloom {
        Bloom::sized_in(entries, bits_per_entry, 64)
    }

    /// `sized` in whole multiples of `granule` bits (32 or 64).
    pub fn sized_in(entries: usize, bits_per_entry: u32, granule: u64) -> Bloom {
        let bits =
            (entries as u64 * u64::from(bits_per_entry)).next_multiple_of(granule).clamp(granule, 1 << 31) as u32;
        let k = ((f64::from(bits) / entries.max(1) as f64) * std::f64::consts::LN_2).round().clamp(1.0, 12.0) as u32;
        Bloom { bits, k }
    }

    pub fn bytes(self) -> usize {
        self.bits as usize / 8
    }

    fn probes(self, fp: (u32, u16)) -> impl Iterator<Item = u32> {
        let x = (u64::from(fp.0) << 16 | u64::from(fp.1)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let x = x ^ (x >> 29);
        let (h1, h2) = (x as u32, ((x >> 32) as u32) | 1);
        let bits = self.bits;
        (0..self.k).map(move |i| h1.wrapping_add(i.wrapping_mul(h2)) % bits)
    }

    pub fn add(self, filter: &mut [u8], fp: (u32, u16)) {
        for bit in self.probes(fp) {
            filter[bit as usize / 8] |= 1 << (bit % 8);
        }
    }

    pub fn may_contain(self, filter: &[u8], fp: (u32, u16)) -> bool {
        self.probes(fp).all(|bit| filter[bit as usize / 8] & (1 << (bit % 8)) != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(bucket: u32, tag: u16, slot: u32) -> Mapping {
        Mapping { bucket, entry: Entry::new(tag, slot, 1, 7, 1) }
    }

    #[test]
    fn a_block_reads_back_as_written_and_damage_is_refused() {
        let mut page = vec![0u8; PAGE];
        let ms: Vec<Mapping> = (0..PER_BLOCK as u32).map(|i| m(i * 3, i as u16 + 1, i)).collect();
        encode_block(&mut page, KIND_T2, 9, 77, &ms);
        let h = decode_header(&page).expect("a good block");
        assert_eq!(h, BlockHeader { kind: KIND_T2, count: PER_BLOCK as u16, owner: 9, seq: 77 });
        for (i, want) in ms.iter().enumerate() {
            assert_eq!(mapping_at(&page, i), *want);
        }
        // Byte positions, as drawn: the first entry's bucket at 32, its entry at 36.
        assert_eq!(page[32..36], 0u32.to_le_bytes());
        assert_eq!(page[36..44], ms[0].entry.0.to_le_bytes());
        assert_eq!(page[10..12], (PER_BLOCK as u16).to_le_bytes());
        for at in [0, 10, 20, 40, PAGE - 20] {
            let mut bad = page.clone();
            bad[at] ^= 4;
            let tail_padding = at >= BLOCK_HEADER + PER_BLOCK * ENTRY_BYTES;
            assert_eq!(decode_header(&bad).is_some(), tail_padding, "byte {at}");
        }
    }

    #[test]
    fn the_newest_mapping_of_a_fingerprint_wins_in_a_block() {
        let mut page = vec![0u8; PAGE];
        let ms = [m(5, 9, 1), m(6, 9, 2), m(5, 9, 3), m(5, 8, 4)];
        encode_block(&mut page, KIND_T3, 1, 2, &ms);
        assert_eq!(find_in_block(&page, 4, (5, 9)).map(|m| m.entry.slot()), Some(3));
        assert_eq!(find_in_block(&page, 4, (6, 9)).map(|m| m.entry.slot()), Some(2));
        assert_eq!(find_in_block(&page, 4, (7, 9)), None);
    }

    #[test]
    fn bloom_filters_never_forget_and_rarely_lie() {
        let bloom = Bloom::sized(1000, 10);
        assert_eq!((bloom.bits, bloom.k), (10_048, 7));
        let mut filter = vec![0u8; bloom.bytes()];
        for i in 0..1000u32 {
            bloom.add(&mut filter, (i, (i * 7) as u16));
        }
        assert!((0..1000u32).all(|i| bloom.may_contain(&filter, (i, (i * 7) as u16))));
        let false_hits = (1000..101_000u32).filter(|&i| bloom.may_contain(&filter, (i, 3))).count();
        assert!(false_hits < 1_500, "about 0.8% expected, got {false_hits} in 100000");
        let tiny = Bloom::sized(3, 5);
        assert_eq!(tiny.bits, 64);
    }
}
