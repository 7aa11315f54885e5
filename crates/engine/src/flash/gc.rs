//! Reclaiming the ring's oldest segment, locality-aware as Cascade Mapping's GC: when free slots
//! run low the tail segment is read back whole; items still indexed there that were read while on
//! flash (the entry's hit bit) are rewritten at the head, within the write budget; the rest die
//! with the slot's generation. A segment nobody points into is freed without any I/O, and when
//! the ring is full before the read is back the tail is dropped at once (`drop_tail`).
//!
//! A slot's generation has 3 bits, so an entry into a reclaimed slot must be gone before the
//! slot's generation comes round again: every reclaim sweeps a share of the index such that the
//! whole table is swept once per trip round the ring, long before a generation repeats.

use super::io::{AlignedBuf, Completion, IoKind, IoOp};
use super::layout::{decode_record, ItemMeta, Record, SegmentHeader, ITEM_ALIGN, ITEM_HEADER, PAGE, SEGMENT_HEADER};
use super::ring::SlotState;
use super::{FlashStore, Now, TOKEN_GC};
use crate::hash::KeyHash;
use crate::time::is_expired;

/// GC's state: one segment-sized buffer, the slot (and generation) being read, the sweep cursor.
pub(super) struct Gc {
    pub buf: Option<AlignedBuf>,
    pub reading: Option<(u32, u8)>,
    /// Rewriting the slot in `reading`: it must not be dropped under us.
    pub walking: bool,
    pub sweep_cursor: usize,
    /// Set while closing: no reclaim starts.
    pub paused: bool,
}

impl Gc {
    pub(super) fn new(segment_bytes: usize) -> Gc {
        Gc { buf: Some(AlignedBuf::new(segment_bytes)), reading: None, walking: false, sweep_cursor: 0, paused: false }
    }
}

impl FlashStore {
    /// Free slots below this start a reclaim.
    pub(super) fn reclaim_mark(&self) -> u32 {
        self.cfg.write_buffers + 1
    }

    /// Free slots are low, or the sets index's log holds more than its index's share.
    pub(super) fn reclaim_wanted(&self) -> bool {
        self.layout.slots - self.used_slots < self.reclaim_mark() || self.log_load() >= super::ring::RECLAIM_EIGHTHS
    }

    /// Starts reclaiming the tail if free slots are low (or the sets index's log is over its
    /// index's share): retires it at once if nothing points
    /// into it, else reads it back. One retirement at a time: the slot is freed when its
    /// watermark is on the device (`durable`).
    pub(super) fn maybe_reclaim(&mut self) {
        if self.reclaim_wanted() {
            self.reclaim_tail();
        }
    }

    /// Starts reclaiming the tail segment (wanted or not) unless a reclaim is under way.
    pub(super) fn reclaim_tail(&mut self) {
        if self.gc.paused || self.gc.reading.is_some() || self.used_slots == 0 || self.durable.retiring.is_some() {
            return;
        }
        let tail = self.tail();
        let slot = self.slots[tail as usize];
        if slot.state != SlotState::Sealed {
            return;
        }
        if self.degraded(self.last_now) || (self.writes_failing() && self.stuck_or_closing()) {
            // Writes fail: a rewrite would be refused and the segment read again and again.
            return;
        }
        if slot.live == 0 {
            // The sets index first rewrites the sets whose tombstones it grounds.
            if self.sets.is_none() || !self.purge_before_retire(tail, slot.gen, self.last_now) {
                self.retire_tail();
            }
            return;
        }
        let Some(buf) = self.gc.buf.take() else { return };
        let len = (slot.used as usize).next_multiple_of(PAGE);
        let offset = self.layout.segment_offset(tail);
        self.io.submit(IoOp { kind: IoKind::Read, offset, buf, len, at: 0, token: TOKEN_GC | u64::from(tail) });
        self.stats.gc_reads += 1;
        self.stats.read_bytes += len as u64;
        self.gc.reading = Some((tail, slot.gen));
    }

    /// The tail segment is back: rewrite its hit items, then free the slot.
    pub(super) fn gc_read_done(&mut self, slot: u32, c: Completion, now: Now) {
        let buf = c.buf;
        let current = self.gc.reading.take();
        let still_tail =
            self.used_slots > 0 && self.tail() == slot && self.slots[slot as usize].state == SlotState::Sealed;
        if current != Some((slot, self.slots[slot as usize].gen)) || !still_tail {
            // Dropped under pressure while the read was in flight.
            self.gc.buf = Some(buf);
            self.maybe_reclaim();
            return;
        }
        let s = self.slots[slot as usize];
        let header = SegmentHeader::decode(&buf).filter(|h| {
            h.seq == s.seq && h.slot == slot && h.partition == self.cfg.partition && h.identity == self.cfg.identity
        });
        match (c.result, header) {
            (Err(_), _) => {
                self.stats.gc_read_errors += 1;
                // The sets index cannot tell which sets the segment's records ground.
                self.raise_sets_floor();
            }
            (Ok(_), None) => {
                self.stats.gc_bad_segments += 1;
                self.raise_sets_floor();
            }
            (Ok(_), Some(_)) => {
                self.gc.reading = Some((slot, s.gen));
                self.gc.walking = true;
                if self.sets.is_some() {
                    self.move_segment(slot, s.gen, &buf[..s.used as usize], now);
                    if self.sets.as_deref().is_some_and(|s| s.moves.holding) {
                        // Retired when its moves are done (`finish_segment`).
                        self.gc.buf = Some(buf);
                        return;
                    }
                } else {
                    self.rewrite_hits(slot, s.gen, &buf[..s.used as usize], now);
                }
                self.gc.walking = false;
                self.gc.reading = None;
            }
        }
        self.gc.buf = Some(buf);
        self.retire_tail();
    }

    /// Walks a segment's items; the ones the index still points at and that were hit on flash
    /// move to the head.
    fn rewrite_hits(&mut self, slot: u32, gen: u8, segment: &[u8], now: Now) {
        let seed = self.slots[slot as usize].seq;
        walk_items(segment, seed, |at, item| {
            let hash = KeyHash::of(item.key);
            // A key whose invalidation is on its way must get no newer record (see `durable`).
            if let Some(entry) = self.index.find(hash).filter(|&e| names(e, slot, gen, at) && !self.pending(hash)) {
                // The cascade index keeps what tier 1 holds (its CLOCK clears hit bits).
                if (entry.hit() || self.cascade.is_some()) && !is_expired(item.meta.expiry, now.unix) {
                    self.rewrite(hash, item.key, item.value, item.meta, item.bytes, now);
                }
            }
        });
    }

    /// Writes an item GC keeps to the head again, within the write budget (`bytes` on flash);
    /// false if the budget or a full ring said no.
    pub(super) fn rewrite(
        &mut self,
        hash: KeyHash,
        key: &[u8],
        value: &[u8],
        meta: ItemMeta,
        bytes: usize,
        now: Now,
    ) -> bool {
        if !self.admission.admit_rewrite(bytes, now.nanos) || self.append(hash, key, value, meta, now).is_none() {
            return false;
        }
        self.stats.gc_rewrites += 1;
        self.stats.write_rewrite_bytes += bytes as u64;
        true
    }

    /// The `n`th slot of the ring (0: the oldest): calls `f` with every item in it that the
    /// index still names and that has not expired. A sealed segment is read with one blocking
    /// read (for `lru_crawler metadump`, not the request path); false when `n` is past the
    /// ring.
    pub fn dump_slot(&mut self, n: u32, now: Now, f: &mut DumpVisit<'_>) -> bool {
        if n >= self.used_slots {
            // The sets index: then its sets, one page each.
            return self.dump_set(n - self.used_slots, now, f);
        }
        let slot = (self.tail() + n) % self.layout.slots;
        let s = self.slots[slot as usize];
        let segment = match s.state {
            SlotState::Free => return true,
            // A buffer still filling: its own fill mark (the slot's is set when it is sealed).
            SlotState::Buffer(b) => match &self.bufs[b].data {
                Some(data) => data[..self.bufs[b].used.min(data.len())].to_vec(),
                None => return true,
            },
            SlotState::Sealed => {
                let len = (s.used as usize).next_multiple_of(PAGE);
                let (buf, result) =
                    self.sync_io(IoKind::Read, self.layout.segment_offset(slot), AlignedBuf::new(len), len);
                if result.is_err() {
                    self.stats.gc_read_errors += 1;
                    return true;
                }
                buf[..s.used as usize].to_vec()
            }
        };
        walk_items(&segment, s.seq, |at, item| {
            let current = self.index.find(KeyHash::of(item.key)).is_some_and(|e| names(e, slot, s.gen, at));
            if current && !is_expired(item.meta.expiry, now.unix) {
                f(item.key, item.value, item.meta, item.bytes);
            }
        });
        true
    }

    /// Clears index entries into dead slots, a share per reclaim (see the module comment).
    pub(super) fn sweep_some(&mut self) {
        let buckets = self.index.buckets() as usize;
        let share = buckets / self.layout.slots as usize + 1;
        let from = self.gc.sweep_cursor;
        self.stats.swept += self.sweep_range(from, from + share) as u64;
        self.gc.sweep_cursor = if from + share >= buckets { 0 } else { from + share };
    }
}

/// What `dump_slot` calls for each item: key, value, metadata, bytes on flash.
pub(super) type DumpVisit<'a> = dyn FnMut(&[u8], &[u8], ItemMeta, usize) + 'a;

/// Whether index entry `e` names the item at byte `at` of `slot` in generation `gen`.
pub(super) fn names(e: super::index::Entry, slot: u32, gen: u8, at: usize) -> bool {
    e.slot() == slot && e.gen() == gen && e.offset_units() as usize == at / ITEM_ALIGN
}

/// Calls `visit` with the offset and contents of every item that checks out in `segment` (the
/// segment header first).
pub(super) fn walk_items(segment: &[u8], seed: u64, mut visit: impl FnMut(usize, super::layout::ItemRef<'_>)) {
    walk_records(segment, seed, |at, record| {
        if let Record::Item(item) = record {
            visit(at, item);
        }
    });
}

/// Calls `visit` with the offset and contents of every record (items and marks) that checks
/// out in `segment` under `seed`. Padding (or damage) before a page boundary: records resume at
/// the next page.
pub(super) fn walk_records(segment: &[u8], seed: u64, mut visit: impl FnMut(usize, Record<'_>)) {
    let mut at = SEGMENT_HEADER;
    while at + ITEM_HEADER <= segment.len() {
        let Ok(record) = decode_record(&segment[at..], seed) else {
            at = (at + 1).next_multiple_of(PAGE);
            continue;
        };
        let bytes = record.bytes();
        visit(at, record);
        at += bytes;
    }
}
