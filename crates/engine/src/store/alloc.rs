//! The store-mode allocator (MICA's segregated fits): one fixed arena, carved into blocks on
//! demand, freed blocks merged with free neighbours at once, free blocks kept in lists by size
//! class so that an allocation takes the smallest block that fits.
//!
//! ```text
//!  block (8-byte granularity, at least 16 bytes):
//!    used:  [ header u32 | payload ........................................ ]
//!    free:  [ header u32 | next u32 | prev u32 | .......... | footer u32 ]
//!
//!  header: bits 31..2 = block size in 8-byte units, bit 1 = the block before is in use,
//!          bit 0 = this block is in use
//!  next/prev: free-list links, as (block offset / 8) + 1 (0 = none)
//!  footer: the block size in units, so the block after can find the start of a free block
//!          before it and merge with it
//! ```
//!
//! A used block costs 4 bytes of header plus the padding to a multiple of 8. Classes: one per
//! block size from 16 bytes to 1 KiB, then four per power of two up to the largest block
//! (2^30 units = 8 GiB). A bitmap of non-empty classes finds the next class with a free block in
//! a few instructions. The arena's last 8 bytes are a permanent used block, so nothing merges
//! past the end.

use crate::region::Region;

/// Bytes of a used block's header.
pub(crate) const BLOCK_HEADER_BYTES: usize = 4;
/// Allocation granularity in bytes.
const UNIT: usize = 8;
/// Smallest block, in units: a free block needs its header, two links and a footer.
const MIN_UNITS: usize = 2;
/// Largest block, in units (30 bits of size in the header).
const MAX_UNITS: usize = (1 << 30) - 1;
/// Block sizes up to this many units have a class each.
const EXACT_UNITS: usize = 128;
/// Size classes: 127 exact ones (2..=128 units), then 4 per power of two from 2^7 to 2^29.
const CLASSES: usize = (EXACT_UNITS - 1) + 4 * 23;
/// Blocks of a range class examined for one that fits before a larger class is used.
const FIT_SCAN: usize = 8;

const USED: u32 = 1;
const PREV_USED: u32 = 2;

/// The size class of a block of `units` units.
fn class_of(units: usize) -> usize {
    debug_assert!((MIN_UNITS..=MAX_UNITS).contains(&units));
    if units <= EXACT_UNITS {
        return units - MIN_UNITS;
    }
    let power = usize::BITS as usize - 1 - units.leading_zeros() as usize; // >= 7
    let quarter = (units >> (power - 2)) & 3;
    (EXACT_UNITS - 1) + (power - 7) * 4 + quarter
}

/// Where the arena's space is, for reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct AllocatorStats {
    /// Bytes the allocator hands out blocks from (the arena less its end marker).
    pub managed_bytes: usize,
    /// Bytes in used blocks (headers and padding included).
    pub used_bytes: usize,
    /// Bytes in free blocks.
    pub free_bytes: usize,
    /// Blocks in use.
    pub used_blocks: usize,
    /// The largest block an allocation could get now, in bytes of payload.
    pub largest_free_payload: usize,
}

/// A segregated-fits allocator over one arena. Addresses are payload offsets into the arena.
pub(crate) struct Allocator {
    arena: Region,
    /// Head of each class's free list, as block offset / 8 + 1 (0 = empty).
    heads: [u32; CLASSES],
    /// Bit c set when class c's list is non-empty.
    nonempty: [u64; CLASSES.div_ceil(64)],
    stats: AllocatorStats,
}

impl Allocator {
    /// An allocator over `bytes` of fresh memory (rounded down to 8 bytes; at most 32 GiB).
    /// None if the operating system refuses the memory or `bytes` is out of range.
    pub(crate) fn new(bytes: usize) -> Option<Allocator> {
        let bytes = bytes / UNIT * UNIT;
        if bytes < 4 * UNIT || bytes / UNIT > u32::MAX as usize - 1 {
            return None;
        }
        let arena = Region::new(bytes)?;
        let managed_bytes = bytes - UNIT;
        let mut allocator = Allocator {
            arena,
            heads: [0; CLASSES],
            nonempty: [0; CLASSES.div_ceil(64)],
            stats: AllocatorStats { managed_bytes, ..AllocatorStats::default() },
        };
        // The end marker (a used block of one unit that nothing ever frees), then free blocks.
        allocator.format();
        Some(allocator)
    }

    /// Frees every block at once: the arena is one free space again.
    pub(crate) fn reset(&mut self) {
        let managed_bytes = self.stats.managed_bytes;
        self.heads = [0; CLASSES];
        self.nonempty = [0; CLASSES.div_ceil(64)];
        self.stats = AllocatorStats { managed_bytes, ..AllocatorStats::default() };
        self.format();
    }

    /// Lays the arena out as its end marker and free blocks.
    fn format(&mut self) {
        let managed_bytes = self.stats.managed_bytes;
        self.write_u32(managed_bytes, (1 << 2) | USED);
        let mut at = 0;
        let mut prev_used = true;
        while at < managed_bytes {
            let mut units = ((managed_bytes - at) / UNIT).min(MAX_UNITS);
            if (managed_bytes - at) / UNIT - units == 1 {
                units -= 1; // never leave a one-unit remainder
            }
            self.make_free(at, units, prev_used);
            prev_used = false;
            at += units * UNIT;
        }
        self.clear_prev_used(managed_bytes);
    }

    /// Copies `len` bytes inside the arena (between payloads of live blocks).
    pub(crate) fn copy_within(&mut self, from: usize, to: usize, len: usize) {
        self.arena.bytes_mut().copy_within(from..from + len, to);
    }

    /// Payload bytes usable in a block for a request of `payload` bytes, or None if too large.
    pub(crate) fn units_for(payload: usize) -> Option<usize> {
        let units = (payload + BLOCK_HEADER_BYTES).div_ceil(UNIT).max(MIN_UNITS);
        (units <= MAX_UNITS).then_some(units)
    }

    /// A block with room for `payload` bytes; returns the payload's offset. None when no free
    /// block is large enough (nothing changes).
    pub(crate) fn alloc(&mut self, payload: usize) -> Option<usize> {
        let need = Allocator::units_for(payload)?;
        let block = self.take_fitting(need)?;
        let units = self.units_at(block);
        let prev_used = self.read_u32(block) & PREV_USED;
        let used_units = if units - need >= MIN_UNITS { need } else { units };
        // The block leaves the free lists whole; a remainder goes back as a free block.
        self.stats.free_bytes -= units * UNIT;
        self.write_u32(block, (used_units as u32) << 2 | prev_used | USED);
        if used_units < units {
            self.make_free(block + used_units * UNIT, units - used_units, true);
        } else {
            self.set_prev_used(block + units * UNIT);
        }
        self.stats.used_bytes += used_units * UNIT;
        self.stats.used_blocks += 1;
        Some(block + BLOCK_HEADER_BYTES)
    }

    /// Frees the block whose payload starts at `payload` (from `alloc`, not freed since),
    /// merging it with free neighbours.
    pub(crate) fn free(&mut self, payload: usize) {
        let mut block = payload - BLOCK_HEADER_BYTES;
        let header = self.read_u32(block);
        assert!(header & USED != 0, "double free of block at {block}");
        let mut units = (header >> 2) as usize;
        self.stats.used_bytes -= units * UNIT;
        self.stats.free_bytes += units * UNIT;
        self.stats.used_blocks -= 1;
        let mut prev_used = header & PREV_USED != 0;
        let next = block + units * UNIT;
        let next_header = self.read_u32(next);
        if next_header & USED == 0 && units + (next_header >> 2) as usize <= MAX_UNITS {
            self.unlink(next);
            units += (next_header >> 2) as usize;
        }
        if !prev_used {
            let prev_units = self.read_u32(block - 4) as usize;
            if prev_units + units <= MAX_UNITS {
                block -= prev_units * UNIT;
                self.unlink(block);
                units += prev_units;
                prev_used = true; // free blocks never follow free blocks
            }
        }
        // Free space only counts in make_free; undo the double count of merged neighbours.
        self.stats.free_bytes -= units * UNIT;
        self.make_free(block, units, prev_used);
        self.clear_prev_used(block + units * UNIT);
    }

    /// The payload of the block at `payload` (its whole usable length).
    #[cfg(test)]
    pub(crate) fn payload(&self, payload: usize) -> &[u8] {
        let units = self.units_at(payload - BLOCK_HEADER_BYTES);
        &self.arena.bytes()[payload..payload - BLOCK_HEADER_BYTES + units * UNIT]
    }

    /// Mutable `payload`.
    pub(crate) fn payload_mut(&mut self, payload: usize) -> &mut [u8] {
        let units = self.units_at(payload - BLOCK_HEADER_BYTES);
        &mut self.arena.bytes_mut()[payload..payload - BLOCK_HEADER_BYTES + units * UNIT]
    }

    /// The arena from `payload` to its end: a read of an item whose lengths the caller knows,
    /// without looking up the block's size.
    #[inline]
    pub(crate) fn bytes_from(&self, payload: usize) -> &[u8] {
        &self.arena.bytes()[payload..]
    }

    /// Bytes of the block holding `payload` (header and padding included).
    pub(crate) fn block_bytes(&self, payload: usize) -> usize {
        self.units_at(payload - BLOCK_HEADER_BYTES) * UNIT
    }

    /// The raw arena, for prefetching.
    pub(crate) fn arena_ptr(&self, offset: usize) -> *const u8 {
        self.arena.bytes()[offset..].as_ptr()
    }

    /// Bytes of memory the allocator holds (arena).
    pub(crate) fn arena_bytes(&self) -> usize {
        self.arena.len()
    }

    pub(crate) fn stats(&self) -> AllocatorStats {
        AllocatorStats { largest_free_payload: self.largest_free_payload(), ..self.stats }
    }

    fn largest_free_payload(&self) -> usize {
        let Some(class) = (0..CLASSES).rev().find(|&c| self.heads[c] != 0) else { return 0 };
        let mut largest = 0;
        let mut link = self.heads[class];
        while link != 0 {
            let block = (link as usize - 1) * UNIT;
            largest = largest.max(self.units_at(block));
            link = self.read_u32(block + 4);
        }
        largest * UNIT - BLOCK_HEADER_BYTES
    }

    // ----- blocks and lists -----

    /// Removes and returns a free block of at least `need` units: the head of the smallest
    /// exact class that fits, a fitting block among the first few of a range class, or the
    /// head of the next larger non-empty class.
    fn take_fitting(&mut self, need: usize) -> Option<usize> {
        let class = class_of(need);
        if need > EXACT_UNITS {
            let mut link = self.heads[class];
            for _ in 0..FIT_SCAN {
                if link == 0 {
                    break;
                }
                let block = (link as usize - 1) * UNIT;
                if self.units_at(block) >= need {
                    self.unlink(block);
                    return Some(block);
                }
                link = self.read_u32(block + 4);
            }
        } else if self.heads[class] != 0 {
            let block = (self.heads[class] as usize - 1) * UNIT;
            self.unlink(block);
            return Some(block);
        }
        let larger = self.next_nonempty(class + 1)?;
        let block = (self.heads[larger] as usize - 1) * UNIT;
        self.unlink(block);
        Some(block)
    }

    /// The first non-empty class at or after `from`.
    fn next_nonempty(&self, from: usize) -> Option<usize> {
        let mut word = from / 64;
        if word >= self.nonempty.len() {
            return None;
        }
        let mut bits = self.nonempty[word] & (u64::MAX << (from % 64));
        loop {
            if bits != 0 {
                return Some(word * 64 + bits.trailing_zeros() as usize);
            }
            word += 1;
            if word == self.nonempty.len() {
                return None;
            }
            bits = self.nonempty[word];
        }
    }

    /// Writes a free block of `units` at `block` and puts it on its class's list.
    fn make_free(&mut self, block: usize, units: usize, prev_used: bool) {
        let class = class_of(units);
        let head = self.heads[class];
        self.write_u32(block, (units as u32) << 2 | if prev_used { PREV_USED } else { 0 });
        self.write_u32(block + 4, head);
        self.write_u32(block + 8, 0);
        self.write_u32(block + units * UNIT - 4, units as u32);
        let link = (block / UNIT + 1) as u32;
        if head != 0 {
            self.write_u32((head as usize - 1) * UNIT + 8, link);
        }
        self.heads[class] = link;
        self.nonempty[class / 64] |= 1 << (class % 64);
        self.stats.free_bytes += units * UNIT;
    }

    /// Takes a free block off its class's list (its bytes stay counted as free).
    fn unlink(&mut self, block: usize) {
        let class = class_of(self.units_at(block));
        let (next, prev) = (self.read_u32(block + 4), self.read_u32(block + 8));
        if prev == 0 {
            self.heads[class] = next;
            if next == 0 {
                self.nonempty[class / 64] &= !(1 << (class % 64));
            }
        } else {
            self.write_u32((prev as usize - 1) * UNIT + 4, next);
        }
        if next != 0 {
            self.write_u32((next as usize - 1) * UNIT + 8, prev);
        }
    }

    fn units_at(&self, block: usize) -> usize {
        (self.read_u32(block) >> 2) as usize
    }

    fn set_prev_used(&mut self, block: usize) {
        let header = self.read_u32(block);
        self.write_u32(block, header | PREV_USED);
    }

    fn clear_prev_used(&mut self, block: usize) {
        let header = self.read_u32(block);
        self.write_u32(block, header & !PREV_USED);
    }

    fn read_u32(&self, at: usize) -> u32 {
        u32::from_le_bytes(self.arena.bytes()[at..at + 4].try_into().expect("4 bytes"))
    }

    fn write_u32(&mut self, at: usize, value: u32) {
        self.arena.bytes_mut()[at..at + 4].copy_from_slice(&value.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Walks every block: headers, footers, flags and lists agree, and the counts add up.
    fn check(allocator: &Allocator) {
        let stats = allocator.stats;
        let (mut at, mut prev_used, mut used, mut free, mut blocks, mut free_blocks) = (0, true, 0, 0, 0, 0);
        while at < stats.managed_bytes {
            let header = allocator.read_u32(at);
            let units = (header >> 2) as usize;
            assert!(units >= MIN_UNITS, "block at {at} has {units} units");
            assert_eq!(header & PREV_USED != 0, prev_used, "prev-used bit of block at {at}");
            if header & USED != 0 {
                used += units * UNIT;
                blocks += 1;
            } else {
                assert!(prev_used, "two free blocks in a row at {at}");
                assert_eq!(allocator.read_u32(at + units * UNIT - 4) as usize, units, "footer of {at}");
                free += units * UNIT;
                free_blocks += 1;
            }
            prev_used = header & USED != 0;
            at += units * UNIT;
        }
        assert_eq!(at, stats.managed_bytes);
        assert_eq!(allocator.read_u32(at) & PREV_USED != 0, prev_used, "end marker's prev-used bit");
        assert_eq!((used, free, blocks), (stats.used_bytes, stats.free_bytes, stats.used_blocks));
        let mut listed = 0;
        for class in 0..CLASSES {
            assert_eq!(allocator.heads[class] != 0, allocator.nonempty[class / 64] & (1 << (class % 64)) != 0);
            let (mut link, mut prev) = (allocator.heads[class], 0);
            while link != 0 {
                let block = (link as usize - 1) * UNIT;
                assert_eq!(allocator.read_u32(block) & USED, 0);
                assert_eq!(class_of(allocator.units_at(block)), class);
                assert_eq!(allocator.read_u32(block + 8), prev);
                listed += 1;
                prev = link;
                link = allocator.read_u32(block + 4);
            }
        }
        assert_eq!(listed, free_blocks);
    }

    #[test]
    fn classes_cover_every_size_in_order() {
        let mut last = 0;
        for units in MIN_UNITS..=4096 {
            let class = class_of(units);
            assert!(class >= last && class < CLASSES);
            last = class;
        }
        assert_eq!(class_of(MAX_UNITS), CLASSES - 1);
    }

    #[test]
    fn blocks_split_merge_and_fill_the_arena() {
        let mut allocator = Allocator::new(1 << 16).unwrap();
        check(&allocator);
        let a = allocator.alloc(10).unwrap();
        let b = allocator.alloc(1000).unwrap();
        let c = allocator.alloc(12).unwrap();
        assert_eq!(allocator.block_bytes(a), 16);
        assert!(allocator.payload(a).len() >= 10 && allocator.payload(b).len() >= 1000);
        allocator.payload_mut(b)[..4].copy_from_slice(b"data");
        check(&allocator);
        allocator.free(b);
        check(&allocator);
        // The hole is reused for a request that fits it.
        let d = allocator.alloc(900).unwrap();
        assert_eq!(d, b);
        allocator.free(a);
        allocator.free(c);
        allocator.free(d);
        check(&allocator);
        // Everything merged back: one allocation can take (almost) the whole arena.
        assert_eq!(allocator.stats().used_bytes, 0);
        let whole = allocator.stats().largest_free_payload;
        assert_eq!(whole, (1 << 16) - 8 - 4);
        let all = allocator.alloc(whole).unwrap();
        assert!(allocator.alloc(1).is_none(), "the arena is full");
        allocator.free(all);
        check(&allocator);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Random allocations and frees: blocks never overlap, contents survive, the structure
        /// stays consistent, and when everything is freed the arena is one block again.
        #[test]
        fn random_churn_keeps_every_block_intact(ops in prop::collection::vec((any::<bool>(), 1usize..3000, any::<u8>()), 1..400)) {
            let mut allocator = Allocator::new(256 << 10).unwrap();
            let mut live: Vec<(usize, usize, u8)> = Vec::new();
            for (allocate, size, fill) in ops {
                if allocate || live.is_empty() {
                    if let Some(at) = allocator.alloc(size) {
                        allocator.payload_mut(at)[..size].fill(fill);
                        live.push((at, size, fill));
                    } else {
                        prop_assert!(allocator.stats().largest_free_payload < size);
                    }
                } else {
                    let (at, size, fill) = live.swap_remove(size % live.len());
                    prop_assert!(allocator.payload(at)[..size].iter().all(|&b| b == fill));
                    allocator.free(at);
                }
            }
            check(&allocator);
            for &(at, size, fill) in &live {
                prop_assert!(allocator.payload(at)[..size].iter().all(|&b| b == fill));
            }
            for (at, _, _) in live {
                allocator.free(at);
            }
            check(&allocator);
            prop_assert_eq!(allocator.stats().largest_free_payload, (256 << 10) - 8 - 4);
        }
    }
}
