//! The region's ring of segments and the DRAM write buffers that fill them: placing items,
//! sealing a buffer into a segment write, taking the next slot, and dropping the oldest slot
//! when none is free.

use super::index::{Entry, GENERATIONS};
use super::io::{AlignedBuf, Completion, IoKind, IoOp};
use super::layout::{encode_item, item_bytes, ItemMeta, SegmentHeader, ITEM_ALIGN, PAGE, SEGMENT_HEADER};
use super::{FlashStore, Now, ReadDone, TOKEN_WRITE};
use crate::hash::KeyHash;

/// What a ring slot holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotState {
    Free,
    /// Filling (or being written) from write buffer `.0`.
    Buffer(usize),
    /// On flash.
    Sealed,
}

/// A ring slot's DRAM record (the segment table).
#[derive(Clone, Copy, Debug)]
pub struct Slot {
    /// Bumped whenever the slot's contents die: entries of an older generation are invalid.
    pub gen: u8,
    pub state: SlotState,
    /// The sequence number of the segment written in it (epoch in the top bits).
    pub seq: u64,
    /// Bytes used, the segment header included.
    pub used: u32,
    /// Index entries that name this slot at its current generation.
    pub live: u32,
}

impl Slot {
    pub const EMPTY: Slot = Slot { gen: 0, state: SlotState::Free, seq: 0, used: 0, live: 0 };
}

/// A segment-sized DRAM buffer; `data` is None while the device writes it.
pub struct WriteBuf {
    pub data: Option<AlignedBuf>,
    pub slot: u32,
    pub used: usize,
    pub opened_ns: u64,
    /// Lookups waiting for this buffer's write to finish.
    pub waiters: Vec<usize>,
}

impl WriteBuf {
    pub fn new(bytes: usize) -> WriteBuf {
        WriteBuf { data: Some(AlignedBuf::new(bytes)), slot: 0, used: 0, opened_ns: 0, waiters: Vec::new() }
    }
}

/// Where an item of `bytes` bytes goes in a buffer with `used` bytes filled: small items never
/// cross a page, so a hit is one page read. None if the segment cannot take it.
fn place(used: usize, bytes: usize, segment: usize) -> Option<(usize, u32)> {
    let mut at = used;
    if bytes <= PAGE && at % PAGE + bytes > PAGE {
        at = at.next_multiple_of(PAGE);
    }
    let end = at + bytes;
    let pages = (end - 1) / PAGE - at / PAGE + 1;
    (end <= segment && pages <= super::index::MAX_PAGES as usize).then_some((at, pages as u32))
}

impl FlashStore {
    /// Appends an item to the active buffer (opening one if needed) and indexes it.
    pub(super) fn append(
        &mut self,
        hash: KeyHash,
        key: &[u8],
        value: &[u8],
        meta: ItemMeta,
        now: Now,
    ) -> Option<Entry> {
        let bytes = item_bytes(key.len(), value.len());
        let segment = self.layout.segment_bytes as usize;
        let mut spot = self.active.and_then(|b| place(self.bufs[b].used, bytes, segment).map(|p| (b, p)));
        if spot.is_none() {
            if let Some(b) = self.active {
                self.seal(b);
            }
            let b = self.open_buffer(now)?;
            spot = place(self.bufs[b].used, bytes, segment).map(|p| (b, p));
        }
        let (b, (at, pages)) = spot?;
        let buf = &mut self.bufs[b];
        let data = buf.data.as_mut().expect("the active buffer is in DRAM");
        data[buf.used..at].fill(0);
        encode_item(&mut data[at..], key, value, meta);
        buf.used = at + bytes;
        let slot = buf.slot;
        let entry = Entry::new(hash.tag(), slot, self.slots[slot as usize].gen, (at / ITEM_ALIGN) as u32, pages);
        self.t1_insert(hash, entry);
        Some(entry)
    }

    /// Puts `entry` in the (tier-1) index: the key's previous entry is forgotten; an entry a full
    /// bucket pushes out is dropped (full index) or demoted (cascade index).
    pub(super) fn t1_insert(&mut self, hash: KeyHash, entry: Entry) {
        let slots = &self.slots;
        let displaced = if self.cascade.is_some() {
            // CLOCK: the oldest entry not read since the hand passed goes first.
            let age = |e: Entry| u64::from(e.hit()) << 63 | slots[e.slot() as usize].seq;
            self.index.insert(hash, entry, |_| true, age)
        } else {
            self.index.insert(hash, entry, |e| Self::valid(slots, e), |e| slots[e.slot() as usize].seq)
        };
        self.forget(displaced.replaced);
        if let Some(evicted) = displaced.evicted {
            if Self::valid(&self.slots, evicted) {
                self.stats.index_evictions += 1;
            }
            if self.cascade.is_some() {
                self.demote(self.index.bucket_of(hash) as u32, evicted);
            } else {
                self.forget(Some(evicted));
            }
        }
        if Self::valid(&self.slots, entry) {
            self.slots[entry.slot() as usize].live += 1;
        }
    }

    /// Makes a free buffer active on the next free slot, dropping the oldest segment if the
    /// ring is full (GC could not keep up: the pressure path).
    fn open_buffer(&mut self, now: Now) -> Option<usize> {
        debug_assert!(self.active.is_none());
        let b = self.bufs.iter().position(|buf| buf.data.is_some())?;
        if self.used_slots == self.layout.slots && !self.drop_tail() {
            return None;
        }
        let slot = self.head;
        self.head = (self.head + 1) % self.layout.slots;
        self.used_slots += 1;
        let seq = self.next_seq;
        self.next_seq += 1;
        let s = &mut self.slots[slot as usize];
        debug_assert_eq!(s.state, SlotState::Free);
        *s = super::ring::Slot { gen: s.gen, state: SlotState::Buffer(b), seq, used: 0, live: 0 };
        let buf = &mut self.bufs[b];
        buf.slot = slot;
        buf.used = SEGMENT_HEADER;
        buf.opened_ns = now.nanos;
        self.active = Some(b);
        Some(b)
    }

    /// Writes buffer `b` as its slot's segment (only the pages in use).
    pub(super) fn seal(&mut self, b: usize) {
        if self.active == Some(b) {
            self.active = None;
        }
        let buf = &mut self.bufs[b];
        let mut data = buf.data.take().expect("sealing a buffer in DRAM");
        let len = buf.used.next_multiple_of(PAGE);
        data[buf.used..len].fill(0);
        let slot = &mut self.slots[buf.slot as usize];
        slot.used = buf.used as u32;
        let header = SegmentHeader {
            partition: self.cfg.partition,
            epoch: self.epoch,
            seq: slot.seq,
            slot: buf.slot,
            used: buf.used as u32,
            identity: self.cfg.identity,
        };
        header.encode(&mut data[..SEGMENT_HEADER]);
        let offset = self.layout.segment_offset(buf.slot);
        self.io.submit(IoOp { kind: IoKind::Write, offset, buf: data, len, token: TOKEN_WRITE | b as u64 });
        self.stats.segments_written += 1;
        self.stats.write_bytes += len as u64;
        self.maybe_reclaim();
    }

    /// A segment write finished: the slot is on flash (or, if the write failed, dead), and the
    /// lookups that waited on it are answered from the buffer.
    pub(super) fn write_done(&mut self, b: usize, c: Completion, now: Now, out: &mut Vec<ReadDone>) {
        let slot = self.bufs[b].slot as usize;
        if c.result.is_err() {
            self.stats.write_errors += 1;
            self.kill_slot(slot as u32);
        }
        if self.slots[slot].state == SlotState::Buffer(b) {
            self.slots[slot].state = SlotState::Sealed;
        }
        let waiters = std::mem::take(&mut self.bufs[b].waiters);
        for &i in &waiters {
            let entry = self.reads[i].as_ref().expect("a waiting lookup").entry;
            let at = entry.offset_units() as usize * ITEM_ALIGN;
            let bytes = if c.result.is_ok() { Ok(&c.buf[at..]) } else { Err(libc::EIO) };
            self.finish_read(i, bytes, now, out);
        }
        let buf = &mut self.bufs[b];
        buf.waiters = waiters;
        buf.waiters.clear();
        buf.data = Some(c.buf);
    }

    /// Invalidates everything in `slot` at once (no I/O): its generation moves on.
    pub(super) fn kill_slot(&mut self, slot: u32) {
        let s = &mut self.slots[slot as usize];
        self.stats.dropped_items += u64::from(s.live);
        s.live = 0;
        s.gen = (s.gen + 1) % GENERATIONS;
    }

    /// Frees the oldest slot without reading it; false if it is still being written.
    pub(super) fn drop_tail(&mut self) -> bool {
        let tail = self.tail();
        let walking = self.gc.walking && self.gc.reading.is_some_and(|(slot, _)| slot == tail);
        if self.used_slots == 0 || self.slots[tail as usize].state != SlotState::Sealed || walking {
            return false;
        }
        self.stats.pressure_drops += 1;
        self.free_tail();
        true
    }

    /// Retires the tail slot: its entries die with its generation.
    pub(super) fn free_tail(&mut self) {
        let tail = self.tail();
        self.kill_slot(tail);
        self.slots[tail as usize].state = super::ring::SlotState::Free;
        self.used_slots -= 1;
        self.stats.reclaims += 1;
        self.sweep_some();
    }

    /// Writes the active buffer once it has waited `flush_delay_ns`, and drives GC.
    pub(super) fn tick(&mut self, now: Now) {
        if let Some(b) = self.active {
            let buf = &self.bufs[b];
            if buf.used > SEGMENT_HEADER && now.nanos.saturating_sub(buf.opened_ns) >= self.cfg.flush_delay_ns {
                self.seal(b);
            }
        }
        self.maybe_reclaim();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_items_never_cross_a_page_and_large_ones_count_their_pages() {
        assert_eq!(place(48, 100, 1 << 20), Some((48, 1)));
        assert_eq!(place(4000, 100, 1 << 20), Some((4096, 1)), "pushed to the next page");
        assert_eq!(place(4096 - 96, 96, 1 << 20), Some((4000, 1)), "fits exactly");
        assert_eq!(place(4000, 5000, 1 << 20), Some((4000, 3)), "a large item spans pages in place");
        assert_eq!(place((1 << 20) - 64, 100, 1 << 20), None);
        assert_eq!(place(0, 256 * 4096, 4 << 20), None, "at most 255 pages");
    }
}
