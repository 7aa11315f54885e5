//! How index entries are stored in a 64-byte bucket: eight as they are (8 bytes each), or, for
//! the sets index's log index, ten packed into 6 bytes each, a fifth less DRAM for the same
//! ways. A packed entry keeps every field of `Entry` that the region's layout can produce
//! (the tag whole, so lookups and tag twins behave exactly as unpacked), with the slot and
//! offset in as many bits as the log has segments and a segment has 16-byte units:
//!
//! ```text
//!   47        32 31 29  28  27                                      0
//!  +------------+-----+---+------------------------------------------+
//!  |    tag     | gen |hit| slot (S) | offset (U) | pages code (P)    |
//!  +------------+-----+---+------------------------------------------+
//!   S + U + P = 28; pages code 0: a tombstone (pages 0); 1..2^P-2: that many pages;
//!   2^P-1: more, read to the end of the segment (at most MAX_PAGES).
//! ```
//!
//! It must not change what an entry means: `unpack(pack(e)) == e` for every entry whose
//! pages fit the code, and for one whose pages do not, only `pages` grows (a longer read).

use super::entry::{Entry, MAX_PAGES};
use super::layout::{ITEM_ALIGN, PAGE};

/// Bytes of a bucket.
pub(super) const BUCKET_BYTES: usize = 64;
/// Ways of a bucket at most (packed).
pub(super) const MAX_WAYS: usize = 10;

/// An entry width and, when packed, its field widths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Packing {
    /// Bytes per way: 8 (as is) or 6 (packed).
    width: usize,
    slot_bits: u32,
    offset_bits: u32,
    pages_bits: u32,
    /// Pages in a segment (a read never goes past its end).
    segment_pages: u32,
}

/// Bits that hold every value below `n` (at least 1).
fn bits_below(n: u64) -> u32 {
    (64 - n.saturating_sub(1).leading_zeros()).max(1)
}

const LOW_BITS: u32 = 28;
const MASK48: u64 = (1 << 48) - 1;

impl Packing {
    /// Entries as they are.
    pub(super) const PLAIN: Packing =
        Packing { width: 8, slot_bits: 0, offset_bits: 0, pages_bits: 0, segment_pages: 0 };

    /// The packing for a log of `slots` segments of `segment_bytes`: packed when the slot,
    /// the offset and a pages code of at least 2 bits fit in 28 bits, else plain.
    pub(super) fn for_log(slots: u32, segment_bytes: u32) -> Packing {
        let slot_bits = bits_below(u64::from(slots));
        let offset_bits = bits_below(u64::from(segment_bytes).div_ceil(ITEM_ALIGN as u64)).max(8);
        match LOW_BITS.checked_sub(slot_bits + offset_bits) {
            Some(pages_bits) if pages_bits >= 2 => Packing {
                width: 6,
                slot_bits,
                offset_bits,
                pages_bits: pages_bits.min(8),
                segment_pages: segment_bytes / PAGE as u32,
            },
            _ => Packing::PLAIN,
        }
    }

    /// Ways per bucket.
    pub(super) fn ways(&self) -> usize {
        BUCKET_BYTES / self.width
    }

    /// Whether entries are packed.
    pub(super) fn packed(&self) -> bool {
        self.width != 8
    }

    /// The stored form of way `w` (0: empty).
    #[inline]
    pub(super) fn load(&self, bucket: &[u8; BUCKET_BYTES], w: usize) -> u64 {
        let at = w * self.width;
        if self.width == 8 {
            u64::from_le_bytes(bucket[at..at + 8].try_into().expect("8 bytes"))
        } else {
            // Ten 6-byte ways end at byte 60: an 8-byte load at way 9 still ends inside.
            u64::from_le_bytes(bucket[at..at + 8].try_into().expect("8 bytes")) & MASK48
        }
    }

    /// Stores `raw` (a stored form) in way `w`.
    #[inline]
    pub(super) fn store(&self, bucket: &mut [u8; BUCKET_BYTES], w: usize, raw: u64) {
        let at = w * self.width;
        if self.width == 8 {
            bucket[at..at + 8].copy_from_slice(&raw.to_le_bytes());
        } else {
            bucket[at..at + 6].copy_from_slice(&raw.to_le_bytes()[..6]);
        }
    }

    /// The tag of a stored form.
    #[inline]
    pub(super) fn tag(&self, raw: u64) -> u16 {
        if self.width == 8 {
            (raw >> 48) as u16
        } else {
            (raw >> 32) as u16
        }
    }

    /// The tag in way `w`, read straight from its two bytes (0: empty, as no key's tag is 0).
    #[inline]
    pub(super) fn tag_at(&self, bucket: &[u8; BUCKET_BYTES], w: usize) -> u16 {
        let at = w * self.width + self.width - 2;
        u16::from_le_bytes([bucket[at], bucket[at + 1]])
    }

    /// The stored form of `e` (never 0: an entry is never 0).
    pub(super) fn pack(&self, e: Entry) -> u64 {
        if !self.packed() {
            return e.0;
        }
        let (u, p) = (self.offset_bits, self.pages_bits);
        let top = (1u32 << p) - 1;
        let code = if e.pages() >= top { top } else { e.pages() };
        debug_assert!(e.slot() < 1 << self.slot_bits && e.offset_units() < 1 << u);
        u64::from(e.tag()) << 32
            | u64::from(e.gen()) << 29
            | u64::from(e.hit()) << 28
            | u64::from(e.slot()) << (u + p)
            | u64::from(e.offset_units()) << p
            | u64::from(code)
    }

    /// The entry a stored form holds.
    pub(super) fn unpack(&self, raw: u64) -> Entry {
        if !self.packed() {
            return Entry(raw);
        }
        let (u, p) = (self.offset_bits, self.pages_bits);
        let top = (1u32 << p) - 1;
        let slot = ((raw >> (u + p)) & ((1 << self.slot_bits) - 1)) as u32;
        let offset = ((raw >> p) & ((1 << u) - 1)) as u32;
        let code = (raw & u64::from(top)) as u32;
        let pages = if code == top {
            let first = offset * ITEM_ALIGN as u32 / PAGE as u32;
            self.segment_pages.saturating_sub(first).clamp(1, MAX_PAGES)
        } else {
            code
        };
        Entry::from_parts(self.tag(raw), slot, ((raw >> 29) & 7) as u8, raw >> 28 & 1 == 1, offset, pages)
    }
}

#[cfg(test)]
mod tests {
    use super::super::entry::tombstone;
    use super::*;

    #[test]
    fn a_log_of_8_gib_packs_and_a_huge_one_does_not() {
        let p = Packing::for_log(410, 1 << 20);
        assert!(p.packed() && p.ways() == 10);
        assert_eq!((p.slot_bits, p.offset_bits, p.pages_bits), (9, 16, 3));
        assert!(!Packing::for_log(1 << 17, 1 << 20).packed(), "17 + 16 bits leave no pages code");
        assert_eq!(Packing::PLAIN.ways(), 8);
    }

    #[test]
    fn every_field_round_trips_and_long_items_read_to_the_segment_end() {
        let p = Packing::for_log(410, 1 << 20);
        for e in [
            Entry::new(0xFFFF, 409, 7, (1 << 16) - 1, 1),
            Entry::new(1, 0, 0, 0, 1),
            Entry::new(0x1234, 200, 3, 4096, 6).with_hit(),
            tombstone(0),
            tombstone(0xFFFF),
        ] {
            let raw = p.pack(e);
            assert!(raw != 0 && raw >> 48 == 0, "{e:?}");
            assert_eq!(p.unpack(raw), e);
            assert_eq!(p.tag(raw), e.tag());
        }
        // 7 pages and more: read to the segment's end (256 pages), never past it.
        let long = Entry::new(9, 5, 1, 0, 40);
        assert_eq!(p.unpack(p.pack(long)).pages(), 255, "at most MAX_PAGES");
        let near_end = Entry::new(9, 5, 1, (248 * PAGE / ITEM_ALIGN) as u32, 8);
        assert_eq!(p.unpack(p.pack(near_end)), near_end, "the segment's last 8 pages");
        let mid = Entry::new(9, 5, 1, (200 * PAGE / ITEM_ALIGN) as u32, 7);
        let back = p.unpack(p.pack(mid));
        assert_eq!((back.pages(), back.offset_units()), (56, mid.offset_units()));
        assert!(!back.same_place(mid) && back.tag() == mid.tag(), "only pages differ");
    }

    #[test]
    fn ways_load_and_store_without_touching_their_neighbours() {
        let p = Packing::for_log(410, 1 << 20);
        let mut bucket = [0u8; BUCKET_BYTES];
        let entries: Vec<Entry> = (0..10).map(|w| Entry::new(w as u16 + 1, w, 1, w * 3, 1)).collect();
        for (w, e) in entries.iter().enumerate() {
            p.store(&mut bucket, w, p.pack(*e));
        }
        for (w, e) in entries.iter().enumerate() {
            assert_eq!(p.unpack(p.load(&bucket, w)), *e);
        }
        assert!((0..10).all(|w| p.tag_at(&bucket, w) == entries[w].tag()));
        p.store(&mut bucket, 9, 0);
        assert_eq!((p.load(&bucket, 9), p.unpack(p.load(&bucket, 8))), (0, entries[8]));
        assert_eq!(&bucket[60..], &[0; 4], "the last 4 bytes stay unused");
    }
}
