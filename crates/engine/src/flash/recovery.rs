//! Opening and closing a region: the superblock, the index snapshot, and the rules that keep a
//! restart from ever serving a torn, corrupt or stale item.
//!
//! - Open reads the superblock. Only a superblock that is intact, marked clean and records this
//!   very layout lets the snapshot be loaded (and the snapshot must pass its checksum); anything
//!   else starts the tier empty and says why. Then, before any write, open marks the superblock
//!   "open" under a new epoch and waits for that write and an fdatasync: if the process dies from
//!   here on, the next open finds "open" and starts empty, so no item written since is shadowed
//!   by an old snapshot.
//! - Close writes the active buffer, waits for every request, writes the snapshot (header, slot
//!   table, index), syncs, then writes the superblock "clean" with the snapshot's checksum and
//!   syncs again. A crash anywhere before that last write leaves "open" on the device.
//! - Segment headers carry the epoch and a sequence number that starts at `epoch << 32`, so a
//!   segment from an older life never matches the slot table's record of what a slot holds, and
//!   GC never takes items from it.

use super::errors::{DeviceError, RecoveryError, StoreError};
use xxhash_rust::xxh3::Xxh3;

use super::admission::admission_for;
use super::index::FlashIndex;
use super::io::{AlignedBuf, IoEngine, IoKind, IoOp};
use super::layout::{
    SegmentHeader, SnapshotHeader, Superblock, MARKS_WRITTEN, PAGE, SLOT_RECORD, STATE_CLEAN, STATE_OPEN,
    SUPERBLOCK_PAGES,
};
use super::ring::{Slot, SlotState, WriteBuf};
use super::{gc, FlashConfig, FlashStats, FlashStore, Now, RegionLayout, TOKEN_META};

/// Rounds of writing the drop marks at close (each after a reclaim freed room for them).
const WRITE_DOWN_TRIES: usize = 4;
/// The longest a close (or a blocking read or write of the store's own pages) waits for the
/// device to finish its requests; then the close fails (the next start is cold) and the log
/// says the device did not answer.
pub(super) const DEVICE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(5);
/// Snapshot I/O moves this many bytes per request.
const SNAPSHOT_CHUNK: usize = 4 << 20;
const BUCKETS_PER_PAGE: usize = PAGE / super::index::BUCKET_BYTES;
const SLOTS_PER_PAGE: usize = PAGE / SLOT_RECORD;

/// `OpenReport::reason` for a region whose superblock page is blank: a new file (not worth
/// a line at start-up, unlike every other reason to start empty).
pub const NEW_FILE: &str = "a new file (its superblock page is blank)";

/// How a clean close went.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Closed {
    /// The marks of entries the index dropped could not all be written, so no segment or set
    /// page written so far may be adopted after a crash: the next clean start serves everything
    /// from the snapshot, but a crash in that run recovers none of it.
    pub crash_unsafe: bool,
    /// Items the close could not keep (the sets index: too large for a set and not hit when
    /// the log needed their room for the DRAM items written out, or pushed out of a full set).
    pub dropped: u64,
    /// The largest item a set holds (key, value and header bytes; 0 without the sets index).
    pub set_item_limit: u32,
}

/// What open found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenReport {
    /// The snapshot of a clean close was loaded.
    pub restored: bool,
    /// Items served again.
    pub items: u64,
    /// The epoch the store goes on from.
    pub epoch: u64,
    /// Why the tier starts empty (or "restored").
    pub reason: String,
}

impl FlashStore {
    /// Opens partition `cfg.partition`'s region through `io`: restores it after a clean close,
    /// else starts empty. Fails only if the region cannot be laid out or marked open.
    pub fn open(io: Box<dyn IoEngine>, cfg: FlashConfig, now: Now) -> Result<(FlashStore, OpenReport), StoreError> {
        let layout = RegionLayout::new(&cfg).map_err(StoreError::Layout)?;
        let mut store = FlashStore::empty(io, cfg, layout, now);
        let sb = store.read_superblock();
        let expected = store.superblock(STATE_CLEAN, 0, 0);
        let same_layout = |sb: &Superblock| {
            (sb.partition, sb.partitions, sb.region_bytes, sb.segment_bytes, sb.buckets)
                == (
                    expected.partition,
                    expected.partitions,
                    expected.region_bytes,
                    expected.segment_bytes,
                    expected.buckets,
                )
        };
        let (restored, reason) = match &sb {
            Err(true) => (false, NEW_FILE.to_string()),
            Err(false) => (
                false,
                "no valid superblock: its page is neither blank nor tierkv's (damaged, unreadable, or \
                 written by something else)"
                    .to_string(),
            ),
            Ok(sb) if sb.identity != store.cfg.identity => (
                false,
                "written under an earlier layout of the file (another identity): nothing of it is used".to_string(),
            ),
            Ok(sb) if !same_layout(sb) => (
                false,
                format!(
                    "the layout changed (was {} partitions, {}-byte regions, {}-byte segments, {} buckets)",
                    sb.partitions, sb.region_bytes, sb.segment_bytes, sb.buckets
                ),
            ),
            Ok(sb) if sb.state != STATE_CLEAN => store.open_after_crash(sb, now),
            Ok(sb) => match store.load_snapshot(sb) {
                Ok(()) => (true, "restored".to_string()),
                Err(why) => {
                    store.reset();
                    store.open_without_snapshot(sb, why, now)
                }
            },
        };
        // Without a readable superblock the clock alone could repeat an earlier run's epoch, and
        // that run's segments would pass the new watermark after a crash.
        let floor = if sb == Err(false) { store.highest_epoch_written() + 1 } else { 0 };
        store.epoch = sb.as_ref().ok().map_or(u64::from(now.unix.max(1)).max(floor), |sb| sb.epoch + 1);
        store.next_seq = store.epoch << 32;
        if let Some(c) = store.cascade.as_deref_mut() {
            c.next_seq = c.next_seq.max(store.epoch << 32);
        }
        if let Some(s) = store.sets.as_deref_mut() {
            match sb.as_ref().ok().filter(|_| restored) {
                Some(sb) => {
                    s.floor_seq = s.floor_seq.max(sb.sets_floor_seq);
                    s.floor_epoch = s.floor_epoch.max(sb.sets_floor_epoch);
                }
                // Nothing any earlier run wrote to a set page is used again.
                None => (s.floor_seq, s.floor_epoch) = (0, store.epoch),
            }
        }
        store.watermark = store.next_seq;
        if let Some(sb) = sb.as_ref().ok().filter(|sb| sb.identity == store.cfg.identity) {
            store.durable.sb_generation = sb.generation;
            store.durable.record_seq = store.durable.record_seq.max(sb.record_seq);
        }
        if let Some(sb) = sb.ok().filter(|_| restored) {
            store.max_cas = store.max_cas.max(sb.last_cas);
            store.watermark = sb.watermark;
            store.flush_at = sb.flush_at;
        }
        // A region that starts empty writes both superblock pages: an older page (damaged, of
        // another identity, or of a higher generation than we could read) must not outrank ours.
        for _ in 0..if restored { 1 } else { SUPERBLOCK_PAGES } {
            store
                .write_superblock(STATE_OPEN, 0, 0)
                .map_err(|errno| StoreError::Device(DeviceError { what: "marking the flash region open", errno }))?;
        }
        let report = OpenReport { restored, items: store.stats().items, epoch: store.epoch, reason };
        Ok((store, report))
    }

    /// A clean close whose snapshot cannot be used (damaged, unreadable): recovery from the
    /// segments as after a crash, if that close wrote every drop mark (`MARKS_WRITTEN`: no
    /// deleted or overwritten item can come back), else an empty start.
    fn open_without_snapshot(&mut self, sb: &Superblock, why: RecoveryError, now: Now) -> (bool, String) {
        if sb.flags & MARKS_WRITTEN == 0 {
            return (false, why.to_string());
        }
        self.stats.snapshot_fallbacks += 1;
        let (restored, how) = self.open_after_crash(sb, now);
        (restored, format!("{why}; {}", how.replace(" after a crash", " instead")))
    }

    /// Open's way after a run that did not close: the segments (and set pages) are read back.
    fn open_after_crash(&mut self, sb: &Superblock, now: Now) -> (bool, String) {
        self.epoch = sb.epoch + 1;
        self.durable.record_seq = sb.record_seq;
        // Mapping blocks the rebuild writes carry seqs no block of the crashed run has.
        if let Some(c) = self.cascade.as_deref_mut() {
            c.next_seq = self.epoch << 32;
        }
        if let Some(s) = self.sets.as_deref_mut() {
            (s.floor_seq, s.floor_epoch) = (sb.sets_floor_seq, sb.sets_floor_epoch);
        }
        match self.recover(sb, now) {
            Ok(items) => {
                match self.sets.as_deref() {
                    Some(sets) => {
                        let in_sets = sets.items();
                        (true, format!("recovered {items} items from the segments and {in_sets} from the set pages after a crash"))
                    }
                    None => (true, format!("recovered {items} items from the segments after a crash")),
                }
            }
            Err(why) => {
                self.reset();
                (false, why.to_string())
            }
        }
    }

    fn empty(io: Box<dyn IoEngine>, cfg: FlashConfig, layout: RegionLayout, now: Now) -> FlashStore {
        let segment = layout.segment_bytes as usize;
        let seed = u64::from(cfg.partition) ^ now.nanos;
        FlashStore {
            admission: admission_for(cfg.admission, cfg.partitions, seed, now.nanos),
            index: match (layout.cascade, layout.sets) {
                (Some(_), _) => FlashIndex::new_clock(layout.buckets),
                (None, Some(_)) => {
                    let span = super::sets::LOG_SPAN as u32;
                    let packing = super::packing::Packing::for_log(layout.slots, layout.segment_bytes);
                    FlashIndex::new_one_choice(layout.buckets / span, span as usize, packing)
                }
                (None, None) => FlashIndex::new(layout.buckets),
            },
            cascade: layout.cascade.map(|geo| Box::new(super::cascade::Cascade::new(geo))),
            sets: layout.sets.map(|geo| Box::new(super::sets::Sets::new(geo))),
            slots: vec![Slot::EMPTY; layout.slots as usize],
            head: 0,
            used_slots: 0,
            bufs: (0..cfg.write_buffers).map(|_| WriteBuf::new(segment)).collect(),
            active: None,
            copy: None,
            copy_out: false,
            reads: Vec::new(),
            free_reads: Vec::new(),
            page_pool: Vec::new(),
            gc: gc::Gc::new(segment),
            epoch: 0,
            next_seq: 0,
            watermark: 0,
            pending_watermark: 0,
            durable: super::durable::Durable::default(),
            early: Vec::new(),
            max_cas: 0,
            flush_at: 0,
            submit_at_once: true,
            stats: FlashStats::default(),
            completions: Vec::new(),
            deferred: Vec::new(),
            relieving: false,
            last_now: now,
            degraded: Default::default(),
            watermark_retry: Default::default(),
            device_stuck: false,
            close_by: None,
            twins: Default::default(),
            io,
            cfg,
            layout,
        }
    }

    fn reset(&mut self) {
        self.index.clear();
        if let Some(geo) = self.layout.cascade {
            self.cascade = Some(Box::new(super::cascade::Cascade::new(geo)));
        }
        if let Some(geo) = self.layout.sets {
            self.sets = Some(Box::new(super::sets::Sets::new(geo)));
        }
        self.slots.fill(Slot::EMPTY);
        self.head = 0;
        self.used_slots = 0;
    }

    pub(super) fn superblock(&self, state: u32, snapshot_bytes: u64, snapshot_checksum: u64) -> Superblock {
        Superblock {
            state,
            partition: self.cfg.partition,
            partitions: self.cfg.partitions,
            region_bytes: self.layout.region_bytes,
            segment_bytes: self.layout.segment_bytes,
            buckets: self.layout.buckets,
            epoch: self.epoch,
            last_seq: self.next_seq,
            snapshot_bytes,
            snapshot_checksum,
            last_cas: self.max_cas,
            flush_at: self.flush_at,
            flags: if state == STATE_CLEAN && self.durable.marks_written { MARKS_WRITTEN } else { 0 },
            identity: self.cfg.identity,
            // A retirement in flight: its watermark already (a superblock written meanwhile
            // must not carry an older one past the slot's freeing).
            watermark: if self.durable.retiring.is_some() {
                self.watermark.max(self.pending_watermark)
            } else {
                self.watermark
            },
            generation: self.durable.sb_generation,
            record_seq: self.durable.record_seq,
            sets_floor_seq: self.sets.as_deref().map_or(0, |s| s.floor_seq),
            sets_floor_epoch: self.sets.as_deref().map_or(0, |s| s.floor_epoch),
        }
    }

    /// One request, waited for. Other completions (only at close) are handled as usual.
    pub(super) fn sync_io(
        &mut self,
        kind: IoKind,
        offset: u64,
        buf: AlignedBuf,
        len: usize,
    ) -> (AlignedBuf, Result<usize, i32>) {
        let mut bufs = [buf];
        let result = self.sync_batch(kind, &[(offset, len)], &mut bufs)[0];
        let [buf] = bufs;
        (buf, result)
    }

    /// Requests (offset, length) submitted at once into `bufs` (one each, in order), all waited
    /// for; their results in order. Other completions (only at close) are handled as usual.
    pub(super) fn sync_batch(
        &mut self,
        kind: IoKind,
        ops: &[(u64, usize)],
        bufs: &mut [AlignedBuf],
    ) -> Vec<Result<usize, i32>> {
        for (i, &(offset, len)) in ops.iter().enumerate() {
            let buf = std::mem::replace(&mut bufs[i], AlignedBuf::new(0));
            self.io.submit(IoOp { kind, offset, buf, len, at: 0, token: TOKEN_META | (i as u64 + 1) });
        }
        self.io.flush();
        let mut results = vec![Err(libc::ETIMEDOUT); ops.len()];
        let (mut waiting, mut done, mut sink) = (ops.len(), Vec::new(), Vec::new());
        let deadline = std::time::Instant::now() + DEVICE_PATIENCE;
        while waiting > 0 && std::time::Instant::now() < deadline {
            self.io.wait(&mut done);
            for c in done.drain(..) {
                let i = (c.token & !(0xFF << 56)) as usize;
                if c.token & (0xFF << 56) == TOKEN_META && (1..=ops.len()).contains(&i) {
                    results[i - 1] = c.result;
                    bufs[i - 1] = c.buf;
                    waiting -= 1;
                } else {
                    self.complete(c, Now::default(), &mut sink);
                }
            }
        }
        results
    }

    /// The region's superblock (of its two pages, the valid one of the larger generation), or
    /// why there is none: `Err(true)` when both pages are blank (a new file), `Err(false)` when
    /// neither holds a valid superblock. A page that does not check out is read again (a read
    /// can fail or flip a bit); if it stays damaged while the other says "clean", nothing is
    /// trusted: a damaged page may be the newer one, and a clean close older than a run that
    /// crashed must never be restored.
    fn read_superblock(&mut self) -> Result<Superblock, bool> {
        let mut best: Option<Superblock> = None;
        let (mut blank, mut damaged) = (true, false);
        for page in 0..SUPERBLOCK_PAGES as u64 {
            let offset = self.layout.region_offset + page * PAGE as u64;
            let mut outcome = None;
            for _ in 0..3 {
                let (buf, result) = self.sync_io(IoKind::Read, offset, AlignedBuf::new(PAGE), PAGE);
                outcome = match (result, Superblock::decode(&buf)) {
                    (Ok(_), Some(sb)) => Some(Ok(sb)),
                    (Ok(_), None) if buf[..PAGE].iter().all(|&b| b == 0) => Some(Err(true)),
                    _ => Some(Err(false)),
                };
                if outcome != Some(Err(false)) {
                    break;
                }
            }
            match outcome.expect("read at least once") {
                Ok(sb) => {
                    blank = false;
                    if best.is_none_or(|b| sb.generation > b.generation) {
                        best = Some(sb);
                    }
                }
                Err(true) => {}
                Err(false) => (blank, damaged) = (false, true),
            }
        }
        match best {
            Some(sb) if damaged && sb.state == STATE_CLEAN => Err(false),
            Some(sb) => Ok(sb),
            None => Err(blank),
        }
    }

    /// The highest epoch of any segment header in the region (each read tried a few times; 0 if
    /// none is readable). Only when the superblock is damaged.
    fn highest_epoch_written(&mut self) -> u64 {
        let mut highest = 0;
        for slot in 0..self.layout.slots {
            let offset = self.layout.segment_offset(slot);
            for _ in 0..5 {
                let (buf, result) = self.sync_io(IoKind::Read, offset, AlignedBuf::new(PAGE), PAGE);
                if result.is_ok() {
                    if let Some(h) = SegmentHeader::decode(&buf) {
                        highest = highest.max(h.seq >> 32);
                        break;
                    }
                    if buf[..PAGE].iter().all(|&b| b == 0) {
                        break;
                    }
                }
            }
        }
        highest
    }

    /// Writes the superblock (to the page its generation names) and syncs.
    pub(super) fn write_superblock(&mut self, state: u32, snapshot_bytes: u64, checksum: u64) -> Result<(), i32> {
        self.durable.sb_generation += 1;
        let mut buf = AlignedBuf::new(PAGE);
        self.superblock(state, snapshot_bytes, checksum).encode(&mut buf);
        let offset = self.layout.region_offset + (self.durable.sb_generation % 2) * PAGE as u64;
        self.sync_io(IoKind::Write, offset, buf, PAGE).1?;
        self.sync_io(IoKind::Sync, 0, AlignedBuf::new(0), 0).1.map(|_| ())
    }

    fn snapshot_pages(&self) -> (usize, usize, usize) {
        let slot_pages = self.slots.len().div_ceil(SLOTS_PER_PAGE);
        let bucket_pages = (self.layout.buckets as usize).div_ceil(BUCKETS_PER_PAGE);
        let extra = self.layout.cascade.map(|c| c.snapshot_bytes).or(self.layout.sets.map(|s| s.snapshot_bytes));
        let cascade_pages = extra.map_or(0, |bytes| bytes.div_ceil(PAGE as u64) as usize);
        (slot_pages, bucket_pages, 1 + slot_pages + bucket_pages + cascade_pages)
    }

    /// Page `p` of the snapshot; `extra` is the cascade index's section.
    fn snapshot_page(&self, p: usize, out: &mut [u8], extra: &[u8]) {
        out.fill(0);
        let (slot_pages, bucket_pages, _) = self.snapshot_pages();
        if p > slot_pages + bucket_pages {
            let from = (p - 1 - slot_pages - bucket_pages) * PAGE;
            let part = extra.get(from..).unwrap_or_default();
            let n = part.len().min(PAGE);
            out[..n].copy_from_slice(&part[..n]);
        } else if p == 0 {
            let header = SnapshotHeader {
                partition: self.cfg.partition,
                epoch: self.epoch,
                slots: self.layout.slots,
                buckets: self.layout.buckets,
                head: self.head,
                used_slots: self.used_slots,
            };
            header.encode(out);
        } else if p <= slot_pages {
            let first = (p - 1) * SLOTS_PER_PAGE;
            for (i, slot) in self.slots.iter().enumerate().skip(first).take(SLOTS_PER_PAGE) {
                let r = &mut out[(i - first) * SLOT_RECORD..][..SLOT_RECORD];
                r[0..8].copy_from_slice(&slot.seq.to_le_bytes());
                r[8..12].copy_from_slice(&slot.used.to_le_bytes());
                r[12] = slot.gen;
                r[13] = u8::from(slot.state == SlotState::Sealed);
            }
        } else {
            let first = (p - 1 - slot_pages) * BUCKETS_PER_PAGE;
            let last = (first + BUCKETS_PER_PAGE).min(self.layout.buckets as usize);
            for b in first..last {
                self.index.bucket_bytes(b, &mut out[(b - first) * 64..][..64]);
            }
        }
    }

    /// Takes page `p` of a snapshot being loaded (the cascade section's pages go to `extra`).
    fn absorb_page(&mut self, p: usize, page: &[u8], extra: &mut Vec<u8>) -> Result<(), RecoveryError> {
        let (slot_pages, bucket_pages, _) = self.snapshot_pages();
        if p > slot_pages + bucket_pages {
            extra.extend_from_slice(page);
        } else if p == 0 {
            let h = SnapshotHeader::decode(page).ok_or(RecoveryError::SnapshotHeader)?;
            if (h.partition, h.slots, h.buckets) != (self.cfg.partition, self.layout.slots, self.layout.buckets)
                || h.head >= h.slots
                || h.used_slots > h.slots
            {
                return Err(RecoveryError::SnapshotLayout);
            }
            (self.head, self.used_slots) = (h.head, h.used_slots);
        } else if p <= slot_pages {
            let first = (p - 1) * SLOTS_PER_PAGE;
            let n = self.slots.len();
            for (i, slot) in self.slots.iter_mut().enumerate().take(n).skip(first).take(SLOTS_PER_PAGE) {
                let r = &page[(i - first) * SLOT_RECORD..][..SLOT_RECORD];
                let sealed = r[13] == 1;
                *slot = Slot {
                    seq: u64::from_le_bytes(r[0..8].try_into().expect("8 bytes")),
                    used: u32::from_le_bytes(r[8..12].try_into().expect("4 bytes")),
                    gen: r[12] % super::index::GENERATIONS,
                    state: if sealed { SlotState::Sealed } else { SlotState::Free },
                    live: 0,
                };
            }
        } else {
            let first = (p - 1 - slot_pages) * BUCKETS_PER_PAGE;
            let last = (first + BUCKETS_PER_PAGE).min(self.layout.buckets as usize);
            for b in first..last {
                self.index.load_bucket(b, &page[(b - first) * 64..][..64]);
            }
        }
        Ok(())
    }

    /// Loads the snapshot named by a clean superblock; on error the caller resets.
    fn load_snapshot(&mut self, sb: &Superblock) -> Result<(), RecoveryError> {
        let (_, _, pages) = self.snapshot_pages();
        if sb.snapshot_bytes != (pages * PAGE) as u64 {
            return Err(RecoveryError::SnapshotSize);
        }
        let mut hasher = Xxh3::new();
        let mut buf = AlignedBuf::new(SNAPSHOT_CHUNK);
        let mut extra = Vec::new();
        for first in (0..pages).step_by(SNAPSHOT_CHUNK / PAGE) {
            let n = (pages - first).min(SNAPSHOT_CHUNK / PAGE);
            let offset = self.layout.snapshot_offset + (first * PAGE) as u64;
            let (back, result) = self.sync_io(IoKind::Read, offset, buf, n * PAGE);
            buf = back;
            result.map_err(|errno| RecoveryError::SnapshotRead { errno })?;
            hasher.update(&buf[..n * PAGE]);
            for p in 0..n {
                self.absorb_page(first + p, &buf[p * PAGE..(p + 1) * PAGE], &mut extra)?;
            }
        }
        if hasher.digest() != sb.snapshot_checksum {
            return Err(RecoveryError::SnapshotChecksum);
        }
        if let Some(c) = self.cascade.as_deref_mut() {
            c.load(&extra)?;
        }
        if let Some(s) = self.sets.as_deref_mut() {
            s.load(&extra)?;
            // Their grounds are not in the snapshot: the sets are purged before the next
            // retirement.
            for b in 0..self.index.buckets() as usize {
                for e in self.index.bucket_entries(b).filter(|&e| super::cascade::is_tombstone(e)) {
                    s.buried.push(0, b as u32, e.tag());
                }
            }
        }
        self.check_ring()
    }

    /// The ring restored must be whole: slots from tail to head sealed, the rest free. Live
    /// counts are recounted from the index.
    fn check_ring(&mut self) -> Result<(), RecoveryError> {
        let tail = self.tail();
        for (i, slot) in self.slots.iter().enumerate() {
            let in_ring = (i as u32 + self.layout.slots - tail) % self.layout.slots < self.used_slots;
            if in_ring != (slot.state == SlotState::Sealed) {
                return Err(RecoveryError::SnapshotRing);
            }
        }
        let (slot_count, segment) = (self.layout.slots, self.layout.segment_bytes as usize);
        let sane = |e: super::index::Entry| {
            let at = e.offset_units() as usize * super::layout::ITEM_ALIGN;
            e.slot() < slot_count && at < segment && at / PAGE + e.pages() as usize <= segment / PAGE
        };
        if !self.index.entries().all(sane) {
            return Err(RecoveryError::SnapshotPlaces);
        }
        let slots = &mut self.slots;
        for e in self.index.entries().filter(|&e| !super::cascade::is_tombstone(e)) {
            let slot = &mut slots[e.slot() as usize];
            if slot.gen == e.gen() && slot.state == SlotState::Sealed {
                slot.live += 1;
            }
        }
        Ok(())
    }

    fn save_snapshot(&mut self) -> Result<(u64, u64), i32> {
        let (_, _, pages) = self.snapshot_pages();
        let extra = match (self.cascade.as_deref_mut(), self.sets.as_deref()) {
            (Some(c), _) => c.save(),
            (None, Some(s)) => s.save(),
            (None, None) => Vec::new(),
        };
        let mut hasher = Xxh3::new();
        let mut buf = AlignedBuf::new(SNAPSHOT_CHUNK);
        for first in (0..pages).step_by(SNAPSHOT_CHUNK / PAGE) {
            let n = (pages - first).min(SNAPSHOT_CHUNK / PAGE);
            for p in 0..n {
                self.snapshot_page(first + p, &mut buf[p * PAGE..(p + 1) * PAGE], &extra);
            }
            hasher.update(&buf[..n * PAGE]);
            let offset = self.layout.snapshot_offset + (first * PAGE) as u64;
            let (back, result) = self.sync_io(IoKind::Write, offset, buf, n * PAGE);
            buf = back;
            result?;
        }
        Ok(((pages * PAGE) as u64, hasher.digest()))
    }

    /// Writes what is buffered and waits for every request; lookups still in flight end as
    /// misses.
    fn drain(&mut self, now: Now) {
        self.gc.paused = true;
        self.settle_all(now);
    }

    /// Seals the active buffer and waits until every request is done (GC, if not paused, goes
    /// on meanwhile: what it writes is sealed too).
    fn settle_all(&mut self, now: Now) {
        let mut sink = Vec::new();
        self.begin_close();
        loop {
            if self.stuck() {
                return;
            }
            for c in std::mem::take(&mut self.deferred) {
                self.complete(c, now, &mut sink);
            }
            if let Some(b) = self.active {
                self.seal(b);
            }
            // A failed write is tried again at once: `WRITE_TRIES` bound the wait.
            self.retry_writes(now, true);
            let idle = self.io.in_flight() == 0 && !self.retries_pending();
            if idle && self.active.is_none() && self.deferred.is_empty() {
                return;
            }
            self.wait(now, &mut sink);
        }
    }

    /// Before the snapshot: the marks of what the index dropped and not yet wrote down (and the
    /// cascade index's streams the snapshot cannot keep) reach the device, so a crash in a later
    /// run cannot bring those items back. A mark that finds the log full (GC lagged behind the
    /// writes) waits for a reclaim to free a slot. If they still cannot be written, no segment
    /// or set page written so far is adopted by a later recovery (the watermark rises instead:
    /// the next clean restart serves them from the snapshot, a crash in that run loses them).
    /// False if they could not be written (the watermark rose).
    fn write_down_drops(&mut self, now: Now) -> bool {
        if let Some(c) = self.cascade.as_deref_mut() {
            c.forget_unsaveable();
        }
        self.mark_cascade_drops();
        for _ in 0..WRITE_DOWN_TRIES {
            if self.durable.unrecorded.is_empty() && self.durable.pending.is_empty() {
                return true;
            }
            self.commit();
            self.drain(now);
            if !self.durable.unrecorded.is_empty() && !self.reclaim_for_close(now) {
                break;
            }
        }
        if !self.durable.unrecorded.is_empty() || !self.durable.pending.is_empty() {
            self.raise_watermark_now();
            return false;
        }
        true
    }

    /// The sets index: the close leaves its log below the level that starts a reclaim, so the
    /// next run does not begin with reclaims that drop small items below the threshold (those
    /// run now, while a close moves every small item into its set).
    fn ease_sets_log(&mut self, now: Now) {
        if self.sets.is_none() {
            return;
        }
        // What the close still writes (the active buffer sealed, the marks) takes slots too.
        let margin = self.cfg.write_buffers + 1;
        for _ in 0..self.layout.slots {
            let low = self.layout.slots - self.used_slots < self.reclaim_mark() + margin;
            if !(low || self.reclaim_wanted()) || self.stuck() {
                return;
            }
            let used = self.used_slots;
            self.reclaim_for_close(now);
            if self.used_slots >= used {
                return;
            }
        }
    }

    /// At close, with the log full: lets GC reclaim (it is paused while draining) until it
    /// stops, every request done and what GC rewrote sealed. Whether a slot is free now.
    fn reclaim_for_close(&mut self, now: Now) -> bool {
        self.gc.paused = false;
        self.reclaim_tail();
        self.settle_all(now);
        self.gc.paused = true;
        self.used_slots < self.layout.slots
    }

    /// Closes cleanly: everything buffered and the index reach the device, and the next open
    /// serves every live item. An error leaves the region marked open (the next open starts
    /// empty).
    pub fn close(mut self, now: Now) -> Result<Closed, StoreError> {
        self.drain(now);
        if self.stuck() {
            let what = "waiting for the device to finish its requests";
            return Err(StoreError::Device(DeviceError { what, errno: libc::ETIMEDOUT }));
        }
        self.ease_sets_log(now);
        let marks_written = self.write_down_drops(now);
        fn errno(what: &'static str) -> impl Fn(i32) -> StoreError {
            move |errno| StoreError::Device(DeviceError { what, errno })
        }
        self.durable.marks_written = marks_written;
        let (bytes, checksum) = self.save_snapshot().map_err(errno("writing the index snapshot"))?;
        self.sync_io(IoKind::Sync, 0, AlignedBuf::new(0), 0).1.map_err(errno("syncing the flash file"))?;
        self.write_superblock(STATE_CLEAN, bytes, checksum).map_err(errno("writing the clean superblock"))?;
        let dropped = self.sets.as_deref().map_or(0, |s| s.stats.close_drops);
        let set_item_limit = self.layout.sets.map_or(0, |s| s.max_item_bytes);
        Ok(Closed { crash_unsafe: !marks_written, dropped, set_item_limit })
    }
}
