//! One flash index entry: where an item lies in the segment ring (8 bytes; `packing.rs` stores
//! it in 6 when the layout allows).
//!
//! ```text
//!   63        48 47        30 29  27  26  25           8 7        0
//!  +------------+------------+------+---+--------------+----------+
//!  |    tag     | slot (18)  | gen  |hit| offset (18)  | pages(8) |
//!  +------------+------------+------+---+--------------+----------+
//!   slot: the segment's place in the region's ring; gen: the slot's generation when written
//!   (a reclaimed slot's generation moves on, which invalidates every entry into it with no
//!   I/O: Cascade Mapping's zero-I/O demapping); hit: read while on flash (GC keeps it);
//!   offset: in 16-byte units inside the segment; pages: 4 KiB pages a read of the item spans,
//!   1..=255, so an entry is never 0 and 0 marks an empty way.
//! ```
//!
//! It must not know how entries are stored in buckets (`index.rs`, `packing.rs`).

pub(super) const MAX_SLOTS: u32 = 1 << 18;
pub(super) const GENERATIONS: u8 = 8;
pub(super) const MAX_OFFSET_UNITS: u32 = 1 << 18;
pub(super) const MAX_PAGES: u32 = 255;

/// One index entry (see the module drawing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Entry(pub u64);

impl Entry {
    pub(super) fn new(tag: u16, slot: u32, gen: u8, offset_units: u32, pages: u32) -> Entry {
        debug_assert!((1..=MAX_PAGES).contains(&pages));
        Entry::from_parts(tag, slot, gen, false, offset_units, pages)
    }
    /// Any entry, tombstones (pages 0) included, from its fields.
    pub(super) fn from_parts(tag: u16, slot: u32, gen: u8, hit: bool, offset_units: u32, pages: u32) -> Entry {
        debug_assert!(slot < MAX_SLOTS && gen < GENERATIONS && offset_units < MAX_OFFSET_UNITS && pages <= MAX_PAGES);
        Entry(
            u64::from(tag) << 48
                | u64::from(slot) << 30
                | u64::from(gen) << 27
                | u64::from(hit) << 26
                | u64::from(offset_units) << 8
                | u64::from(pages),
        )
    }
    pub(super) fn tag(self) -> u16 {
        (self.0 >> 48) as u16
    }
    pub(super) fn slot(self) -> u32 {
        ((self.0 >> 30) & (MAX_SLOTS as u64 - 1)) as u32
    }
    pub(super) fn gen(self) -> u8 {
        ((self.0 >> 27) & 7) as u8
    }
    pub(super) fn hit(self) -> bool {
        self.0 & (1 << 26) != 0
    }
    pub(super) fn with_hit(self) -> Entry {
        Entry(self.0 | 1 << 26)
    }
    pub(super) fn without_hit(self) -> Entry {
        Entry(self.0 & !(1 << 26))
    }
    pub(super) fn offset_units(self) -> u32 {
        ((self.0 >> 8) & (MAX_OFFSET_UNITS as u64 - 1)) as u32
    }
    pub(super) fn pages(self) -> u32 {
        (self.0 & 0xFF) as u32
    }
    /// Whether two entries name the same place (the hit bit aside).
    pub(super) fn same_place(self, other: Entry) -> bool {
        (self.0 ^ other.0) & !(1 << 26) == 0
    }
}

/// A tombstone: the key's tag with pages 0 (never a real entry, never 0). The cascade index
/// pushes them below tier 1; the sets index keeps them in the log index, shadowing a set.
pub(super) fn tombstone(tag: u16) -> Entry {
    Entry::from_parts(tag, 0, 0, false, 0xFF, 0)
}

pub(super) fn is_tombstone(e: Entry) -> bool {
    e.pages() == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_fields_round_trip_at_their_limits() {
        let e = Entry::new(0xFFFF, MAX_SLOTS - 1, 7, MAX_OFFSET_UNITS - 1, 255);
        assert_eq!(
            (e.tag(), e.slot(), e.gen(), e.offset_units(), e.pages(), e.hit()),
            (0xFFFF, MAX_SLOTS - 1, 7, MAX_OFFSET_UNITS - 1, 255, false)
        );
        let h = e.with_hit();
        assert!(h.hit() && h.same_place(e) && h != e);
        let small = Entry::new(1, 0, 0, 0, 1);
        assert_eq!((small.tag(), small.slot(), small.gen(), small.offset_units(), small.pages()), (1, 0, 0, 0, 1));
        assert_ne!(small.0, 0);
    }
}
