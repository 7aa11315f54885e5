//! The region's ring of segments and the DRAM write buffers that fill them: placing records,
//! writing a buffer's pages (a commit writes what is filled so far, `durable`; sealing writes the
//! rest), taking the next slot, and retiring the oldest slot when none is free.
//!
//! Every page of a segment is written once: a commit pads the buffer to a page boundary, so the
//! next record starts on a fresh page, and a buffer has at most one write in flight. A failed
//! write is tried again from the same pages; the buffer stays in DRAM (and serves reads) until
//! its last page is on the device.

use super::index::{Entry, GENERATIONS};
use super::io::{AlignedBuf, Completion, IoKind, IoOp};
use super::layout::{encode_item, item_bytes, ItemMeta, SegmentHeader, ITEM_ALIGN, PAGE, SEGMENT_HEADER};
use super::layout::{encode_mark, MarkKind, MARK_BYTES};
use super::{FlashStore, Now, ReadDone, TOKEN_SYNC, TOKEN_WRITE};
use crate::hash::KeyHash;

/// What a ring slot holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SlotState {
    Free,
    /// Filling (or being written) from write buffer `.0`.
    Buffer(usize),
    /// On flash.
    Sealed,
}

/// A ring slot's DRAM record (the segment table).
#[derive(Clone, Copy, Debug)]
pub(super) struct Slot {
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
    pub(super) const EMPTY: Slot = Slot { gen: 0, state: SlotState::Free, seq: 0, used: 0, live: 0 };
}

/// A segment-sized DRAM buffer; `data` is None while the device writes it whole.
pub(super) struct WriteBuf {
    pub data: Option<AlignedBuf>,
    pub slot: u32,
    pub used: usize,
    pub opened_ns: u64,
    /// Lookups waiting for this buffer's write to finish.
    pub waiters: Vec<usize>,
    /// Bytes from the segment's start already on the device (whole pages).
    pub committed: usize,
    /// The write in flight, if any.
    pub write: Option<BufWrite>,
    /// Filled (or closing): its last pages go to the device once the write in flight is done.
    pub seal_pending: bool,
    /// Holds the slot's segment until its last page is on the device.
    pub in_use: bool,
    /// The ticket the next write of this buffer reports, once a mark asked for one.
    pub open_ticket: Option<u64>,
    /// When that ticket was handed out (the store's clock, ns).
    pub open_ticket_ns: u64,
    /// Groups of marks appended since the last write, and of those in the write in flight.
    pub marks_unwritten: Vec<u64>,
    pub marks_in_flight: Vec<u64>,
    /// Failed writes in a row (`faults`).
    pub failures: u32,
    /// A failed write is tried again at this time (the store's clock, ns).
    pub retry_at: Option<u64>,
}

/// One write of a buffer's pages up to `end`; `last` seals the segment.
#[derive(Clone, Copy, Debug)]
pub(super) struct BufWrite {
    pub end: usize,
    pub last: bool,
    /// The ticket its end reports (None once reported failed for taking too long).
    pub ticket: Option<u64>,
    /// When it went to the device (the store's clock, ns).
    pub started_ns: u64,
    /// When its ticket was handed out: a change waits from then.
    pub ticket_ns: u64,
}

impl WriteBuf {
    pub(super) fn new(bytes: usize) -> WriteBuf {
        WriteBuf {
            data: Some(AlignedBuf::new(bytes)),
            slot: 0,
            used: 0,
            opened_ns: 0,
            waiters: Vec::new(),
            committed: 0,
            write: None,
            seal_pending: false,
            in_use: false,
            open_ticket: None,
            open_ticket_ns: 0,
            marks_unwritten: Vec::new(),
            marks_in_flight: Vec::new(),
            failures: 0,
            retry_at: None,
        }
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

/// The sets log's load (eighths of its index's ways) that starts a reclaim with free slots left.
pub(super) const RECLAIM_EIGHTHS: u64 = 5;
/// The sets log's load at which items wait for the moves.
const FULL_EIGHTHS: u64 = 6;

impl FlashStore {
    /// The sets index: eighths of its log index's ways that the log's live items take (0
    /// without the sets index). Items smaller than the layout expected fill the index before
    /// the ring: past `RECLAIM_EIGHTHS` the oldest segment moves into the sets before the ring
    /// is full, past `FULL_EIGHTHS` items wait until moves bring it down
    /// (one-choice buckets that full would overflow and lose items: at 2 GiB with the index
    /// sized for twice the item size, `flash-bench` lost 73% of 10M inserts).
    pub(super) fn log_load(&self) -> u64 {
        let Some(sets) = self.sets.as_deref().filter(|s| s.geo.log_ways > 0) else { return 0 };
        let live: u64 = self.slots.iter().map(|s| u64::from(s.live)).sum();
        live * 8 / sets.geo.log_ways
    }

    /// The active buffer with room for `bytes` more (opening one if needed): (buffer, offset,
    /// pages), or None if no buffer or slot is free.
    fn room(&mut self, bytes: usize, now: Now) -> Option<(usize, usize, u32)> {
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
        Some((b, at, pages))
    }

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
        if !self.gc.paused && self.log_load() >= FULL_EIGHTHS {
            // The sets log holds what its index can keep: items wait for the moves, which
            // start at the tail, so a tail still being filled is sealed first.
            if let Some(b) = self.active.filter(|&b| self.bufs[b].slot == self.tail()) {
                self.seal(b);
            }
            self.maybe_reclaim();
            return None;
        }
        let (b, at, pages) = self.room(bytes, now)?;
        let seq = self.next_record_seq();
        let buf = &mut self.bufs[b];
        let seed = self.slots[buf.slot as usize].seq;
        let data = buf.data.as_mut().expect("the active buffer is in DRAM");
        encode_item(&mut data[at..], key, value, meta, seq, seed);
        buf.used = at + bytes;
        let slot = buf.slot;
        let entry = Entry::new(hash.tag(), slot, self.slots[slot as usize].gen, (at / ITEM_ALIGN) as u32, pages);
        self.t1_insert(hash, entry);
        Some(entry)
    }

    /// Appends a mark for `group` to the active buffer; returns the ticket of the write that
    /// will carry it (reported by `take_commits`), or None if no buffer or slot is free.
    pub(super) fn append_mark(&mut self, kind: MarkKind, group: u64, now: Now) -> Option<u64> {
        let (b, at, _) = self.room(MARK_BYTES, now)?;
        let seq = self.next_record_seq();
        let ticket = match self.bufs[b].open_ticket {
            Some(ticket) => ticket,
            None => {
                self.durable.tickets += 1;
                self.bufs[b].open_ticket_ns = now.nanos;
                self.durable.tickets
            }
        };
        let buf = &mut self.bufs[b];
        buf.open_ticket = Some(ticket);
        let seed = self.slots[buf.slot as usize].seq;
        let data = buf.data.as_mut().expect("the active buffer is in DRAM");
        encode_mark(&mut data[at..], kind, group, seq, seed);
        buf.used = at + MARK_BYTES;
        buf.marks_unwritten.push(group);
        *self.durable.pending.entry(group).or_insert(0) += 1;
        self.stats.marks += 1;
        Some(ticket)
    }

    /// Puts `entry` in the (tier-1) index: the key's previous entry is forgotten; an entry a full
    /// bucket pushes out is dropped (full index) or demoted (cascade index).
    pub(super) fn t1_insert(&mut self, hash: KeyHash, entry: Entry) {
        if self.sets.is_some() {
            return self.set_log_insert(hash, entry);
        }
        let slots = &self.slots;
        let displaced = if self.cascade.is_some() {
            // CLOCK: the oldest entry not read since the hand passed goes first.
            let age = |e: Entry| u64::from(e.hit()) << 63 | slots[e.slot() as usize].seq;
            self.index.insert(hash, entry, |_| true, age)
        } else {
            self.index.insert(hash, entry, |e| Self::valid(slots, e), |e| slots[e.slot() as usize].seq)
        };
        self.dropped_entry(hash, displaced.replaced.map(|e| (displaced.replaced_bucket, e)));
        self.forget(displaced.replaced);
        if let Some(evicted) = displaced.evicted {
            if Self::valid(&self.slots, evicted) {
                self.stats.index_evictions += 1;
            }
            if self.cascade.is_some() {
                self.demote(self.index.bucket_of(hash) as u32, evicted);
            } else {
                self.dropped_entry(hash, Some((displaced.evicted_bucket, evicted)));
                self.forget(Some(evicted));
            }
        }
        if Self::valid(&self.slots, entry) {
            self.slots[entry.slot() as usize].live += 1;
        }
    }

    /// `t1_insert` for the sets index's log index: one bucket, what a full bucket lets go of
    /// ranked by `set_age`, and a set that may hold the key of an entry let go of is voided.
    fn set_log_insert(&mut self, hash: KeyHash, entry: Entry) {
        let bucket = self.index.bucket_of(hash);
        // The ranks are taken before the insert borrows the index (no allocation: one bucket),
        // and only when it is full (each costs a look at its set's filter).
        let mut ranked = [(Entry(0), 0u64); super::index::MAX_KEY_WAYS];
        if !self.index.has_room(hash) {
            for (r, e) in ranked.iter_mut().zip(self.index.bucket_entries(bucket)) {
                *r = (e, self.set_age(bucket, e));
            }
        }
        let age = |e: Entry| ranked.iter().find(|(r, _)| *r == e).map_or(0, |&(_, a)| a);
        let displaced = self.index.insert(hash, entry, |_| true, age);
        self.dropped_entry(hash, displaced.replaced.map(|e| (displaced.replaced_bucket, e)));
        self.forget(displaced.replaced);
        if let Some(evicted) = displaced.evicted {
            if Self::valid(&self.slots, evicted) {
                self.stats.index_evictions += 1;
            }
            // Its drop mark waits for the next commit: this runs inside completions (a
            // tombstone put down when a write finishes) and must not start a write.
            if Self::valid(&self.slots, evicted) {
                self.defer_drop(u64::from(displaced.evicted_bucket as u32) << 16 | u64::from(evicted.tag()));
            }
            self.forget(Some(evicted));
            self.lost_entry(displaced.evicted_bucket, evicted);
        }
        if Self::valid(&self.slots, entry) {
            self.slots[entry.slot() as usize].live += 1;
        }
    }

    /// An entry removed from bucket `b` to make way for `hash` (full index): if it was valid and
    /// may be another key's, a mark of its groups makes the drop durable (see `durable`).
    pub(super) fn dropped_entry(&mut self, hash: KeyHash, removed: Option<(usize, Entry)>) {
        let Some((b, e)) = removed.filter(|&(_, e)| self.cascade.is_none() && Self::valid(&self.slots, e)) else {
            return;
        };
        let own = self.group(hash);
        for group in self.index.groups_of(b, e.tag()) {
            if group != own {
                self.drop_group(group);
            }
        }
    }

    /// Makes a free buffer active on the next free slot, retiring the oldest segment if the
    /// ring is full (GC could not keep up: the pressure path); None until that is done.
    fn open_buffer(&mut self, now: Now) -> Option<usize> {
        debug_assert!(self.active.is_none());
        let b = self.bufs.iter().position(|buf| !buf.in_use && buf.data.is_some())?;
        if self.used_slots == self.layout.slots {
            self.drop_tail();
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
        buf.committed = 0;
        buf.in_use = true;
        buf.opened_ns = now.nanos;
        debug_assert!(buf.write.is_none() && buf.marks_unwritten.is_empty());
        self.active = Some(b);
        Some(b)
    }

    /// Buffer `b` is full (or closing): its remaining pages go to the device as its slot's
    /// segment, after the write in flight if there is one.
    pub(super) fn seal(&mut self, b: usize) {
        if self.active == Some(b) {
            self.active = None;
        }
        self.bufs[b].seal_pending = true;
        if self.may_write(b) {
            self.write_pages(b);
        }
        self.maybe_reclaim();
    }

    /// Writes buffer `b`'s pages from `committed` to the end of what it holds (padded to a
    /// page); the last write (after `seal`) makes the slot sealed. The last write moves the
    /// buffer to the device (lookups of its items wait for it); a commit before it copies its
    /// pages into the one commit copy, so the buffer keeps filling and serving reads. A commit
    /// waits while the copy is out (`copy_free`); its return starts the commit held back.
    pub(super) fn write_pages(&mut self, b: usize) {
        let slot_seq = self.slots[self.bufs[b].slot as usize].seq;
        let (partition, identity) = (self.cfg.partition, self.cfg.identity);
        let segment = self.layout.segment_bytes as usize;
        let last = self.bufs[b].seal_pending;
        let (start, end) = (self.bufs[b].committed, self.bufs[b].used.next_multiple_of(PAGE));
        let mut copy = None;
        if !last && start != end {
            debug_assert!(self.copy_free());
            self.copy_out = true;
            copy = Some(self.copy.take().unwrap_or_else(|| AlignedBuf::new(segment)));
        }
        let buf = &mut self.bufs[b];
        debug_assert!(buf.write.is_none());
        let data = buf.data.as_mut().expect("a buffer being written is in DRAM");
        data[buf.used..end].fill(0);
        if start == 0 {
            let header = SegmentHeader { partition, epoch: 0, seq: slot_seq, slot: buf.slot, used: 0, identity };
            header.encode(&mut data[..SEGMENT_HEADER]);
        }
        buf.used = end;
        buf.marks_in_flight.append(&mut buf.marks_unwritten);
        let ticket = buf.open_ticket.take();
        let (started_ns, ticket_ns) = (self.last_now.nanos, buf.open_ticket_ns);
        buf.write = Some(BufWrite { end, last, ticket, started_ns, ticket_ns });
        let slot = buf.slot;
        let (op_buf, at) = match copy {
            _ if start == end => (AlignedBuf::new(0), 0),
            Some(mut part) => {
                part[..end - start].copy_from_slice(&data[start..end]);
                (part, 0)
            }
            None => (buf.data.take().expect("checked above"), start),
        };
        self.slots[slot as usize].used = end as u32;
        if start == end {
            // Nothing new (a commit filled the segment exactly): done with no I/O.
            let completion = Completion { token: TOKEN_WRITE | b as u64, buf: op_buf, result: Ok(0) };
            self.deferred.push(completion);
            return;
        }
        let offset = self.layout.segment_offset(slot) + start as u64;
        let len = end - start;
        self.io.submit(IoOp { kind: IoKind::Write, offset, buf: op_buf, at, len, token: TOKEN_WRITE | b as u64 });
        self.stats.segments_written += u64::from(last);
        self.stats.commits += u64::from(!last);
        self.stats.write_bytes += len as u64;
    }

    /// True if a commit may write now: the commit copy is not out.
    pub(super) fn copy_free(&self) -> bool {
        !self.copy_out
    }

    /// A write of buffer `b` finished. On success its marks are durable (its ticket reported),
    /// and after the last write the slot is on flash and the lookups that waited on it are
    /// answered. On failure the ticket is reported failed, the lookups are answered from the
    /// buffer, and the same pages are written again later, or given up (`faults`).
    /// A commit copy coming back starts the commit that waited for it.
    pub(super) fn write_done(&mut self, b: usize, mut c: Completion, now: Now, out: &mut Vec<ReadDone>) {
        let copy_back = self.bufs[b].data.is_some() && !c.buf.is_empty();
        if self.bufs[b].data.is_none() {
            self.bufs[b].data = Some(std::mem::replace(&mut c.buf, AlignedBuf::new(0)));
        } else if copy_back {
            self.copy = Some(std::mem::replace(&mut c.buf, AlignedBuf::new(0)));
            self.copy_out = false;
        }
        self.write_finished(b, c, now, out);
        if copy_back {
            self.commit_pages();
        }
    }

    fn write_finished(&mut self, b: usize, c: Completion, now: Now, out: &mut Vec<ReadDone>) {
        let write = self.bufs[b].write.take().expect("a write in flight");
        match write.ticket {
            // Its ticket is reported once the device has flushed it.
            Some(ticket) if c.result.is_ok() && self.cfg.sync_commits => {
                let op = IoOp {
                    kind: IoKind::Sync,
                    offset: 0,
                    buf: AlignedBuf::new(0),
                    len: 0,
                    at: 0,
                    token: TOKEN_SYNC | ticket,
                };
                self.io.submit(op);
                self.io.flush();
                self.durable.syncing.push((ticket, write.ticket_ns));
            }
            Some(ticket) => self.ticket_done(ticket, c.result.is_ok()),
            None => {}
        }
        let buf = &mut self.bufs[b];
        if c.result.is_err() {
            self.stats.write_errors += 1;
            buf.marks_unwritten.append(&mut buf.marks_in_flight);
            buf.used = buf.used.max(write.end);
            self.write_failed(b, now, out);
            return;
        }
        buf.committed = write.end;
        for group in std::mem::take(&mut buf.marks_in_flight) {
            self.durable.settle(group);
        }
        self.write_succeeded(b);
        if !write.last {
            if self.bufs[b].seal_pending {
                self.write_pages(b);
            }
            return;
        }
        let slot = self.bufs[b].slot as usize;
        if self.slots[slot].state == SlotState::Buffer(b) {
            self.slots[slot].state = SlotState::Sealed;
        }
        self.answer_waiters(b, now, out);
        let buf = &mut self.bufs[b];
        buf.seal_pending = false;
        buf.in_use = false;
    }

    /// Answers the lookups waiting for buffer `b`'s write from the buffer (back in DRAM).
    pub(super) fn answer_waiters(&mut self, b: usize, now: Now, out: &mut Vec<ReadDone>) {
        if self.bufs[b].waiters.is_empty() {
            return;
        }
        let waiters = std::mem::take(&mut self.bufs[b].waiters);
        let data = self.bufs[b].data.take().expect("back in DRAM after its write");
        for &i in &waiters {
            let entry = self.reads[i].as_ref().expect("a waiting lookup").entry;
            let at = entry.offset_units() as usize * ITEM_ALIGN;
            self.finish_read(i, Ok(&data[at..]), now, out);
        }
        let buf = &mut self.bufs[b];
        buf.data = Some(data);
        buf.waiters = waiters;
        buf.waiters.clear();
    }

    /// Invalidates everything in `slot` at once (no I/O): its generation moves on.
    pub(super) fn kill_slot(&mut self, slot: u32) {
        let s = &mut self.slots[slot as usize];
        self.stats.dropped_items += u64::from(s.live);
        s.live = 0;
        s.gen = (s.gen + 1) % GENERATIONS;
    }

    /// Retires the oldest slot without reading it (the ring is full); false if it is still being
    /// written or read, or a retirement is already under way.
    pub(super) fn drop_tail(&mut self) -> bool {
        let tail = self.tail();
        let walking = self.gc.walking && self.gc.reading.is_some_and(|(slot, _)| slot == tail);
        // The sets index retires a segment only once its items and tombstones reached their
        // sets (a reclaim): writes wait for it.
        if self.sets.is_some()
            || self.used_slots == 0
            || self.slots[tail as usize].state != SlotState::Sealed
            || walking
        {
            return false;
        }
        if self.retire_tail() {
            self.stats.pressure_drops += 1;
            return true;
        }
        false
    }

    /// Frees the tail slot (its watermark is durable): its entries die with its generation.
    pub(super) fn free_tail(&mut self) {
        let tail = self.tail();
        self.kill_slot(tail);
        self.slots[tail as usize].state = super::ring::SlotState::Free;
        self.used_slots -= 1;
        self.stats.reclaims += 1;
        self.sweep_some();
    }

    /// Writes the active buffer once it has waited `flush_delay_ns`, tries failed writes again
    /// once their pause is over, and drives GC.
    pub(super) fn tick(&mut self, now: Now) {
        self.retry_writes(now, false);
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
