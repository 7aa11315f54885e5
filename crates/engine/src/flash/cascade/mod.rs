//! The cascade index (Cascade Mapping, SlickCache): about a byte of DRAM per flash item instead
//! of eight. Only hot mappings stay in DRAM; the rest live on flash, apart from the data.
//!
//! - **Tier 1**, hot mappings in DRAM: the store's `FlashIndex` with one bucket per key (a power
//!   of two of them, sized by a DRAM budget) and CLOCK: a full bucket evicts its oldest entry
//!   not read since the hand last passed (the entry's hit bit), and the eviction is a demotion.
//! - **Tier 2**, warm mappings on flash: demoted mappings are batched per demotion stream (a
//!   hash partition of the fingerprints) in a DRAM block; a full block is written to the stream's
//!   place in the tier-2 area with a DRAM Bloom filter. A stream's blocks are in FIFO order, so the
//!   newest version of a key is in its newest block; a lookup reads every block whose filter says
//!   maybe, all at once, and takes the newest match.
//! - **Tier 3**, cold mappings on flash: a hash table of one-page buckets, each with a DRAM Bloom
//!   filter. A stream owns a run of pages; when it has `reorg_at` tier-2 blocks they are merged
//!   into its pages (read, merge newest-wins, write back: the dual mode, tier 2 being the active
//!   list and tier 3 the inactive table), and the blocks are freed.
//! - **Zero-I/O demapping**: a mapping names its data segment's slot and generation, so a
//!   reclaimed segment invalidates every mapping into it without I/O; the merge drops them.
//! - **Never stale**: lookups go tier 1, then the stream's DRAM block, then tier-2 blocks newest
//!   first, then tier 3, and stop at the first mapping found. A delete, an overwrite that did not
//!   store, or a dead tier-1 entry pushes a tombstone into the stream when a lower tier may hold
//!   the key; the merge applies tombstones. A stream that cannot take a demotion (its tier-2 area
//!   full while another stream is being merged) forgets all its mappings rather than lose order.
//! - **GC** keeps the items tier 1 names (the hot ones) and drops the rest.
//! - **Crash recovery** (`crash.rs`) rebuilds the index from the data segments through tier 1
//!   and the demotions. What this index forgets on purpose (a stream's mappings, a full page's
//!   extra mappings) is noted (`dropped_streams`, `dropped_fps`) and written down as marks
//!   (`mark_cascade_drops`), so recovery cannot bring those items back over a later change.
//!
//! This module holds the DRAM state and the decisions; `lookup.rs` the store's lookups below
//! tier 1, `reorg.rs` the merge, `persist.rs` the snapshot form.

pub(super) mod lookup;
mod persist;
mod reorg;

use std::collections::VecDeque;

use super::mapblock::{encode_block, Mapping, KIND_T2};

use super::config::CascadeLayout;
use super::index::Entry;
use super::io::{AlignedBuf, Completion, IoKind, IoOp};
use super::layout::PAGE;
use super::{FlashStore, TOKEN_MAP_WRITE};

pub(super) use lookup::Below;

pub(super) use super::index::{is_tombstone, tombstone};

/// One tier-2 block of a stream.
pub(super) struct T2Block {
    /// Its place in the stream's run of the tier-2 area.
    pub pos: u32,
    pub seq: u64,
    pub bloom: Box<[u8]>,
    /// The mappings while the write is in flight (or after it failed): searched in DRAM.
    pub dram: Option<Vec<Mapping>>,
    pub count: u16,
}

/// See `Stream::version`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Seen {
    pub flushes: u64,
    pub drops: u64,
}

/// A demotion stream.
#[derive(Default)]
pub(super) struct Stream {
    /// The DRAM block being filled, oldest first.
    pub buffer: Vec<Mapping>,
    /// Tier-2 blocks, oldest first.
    pub blocks: VecDeque<T2Block>,
    /// The seq its tier-3 pages were written with; 0: they hold nothing.
    pub t3_seq: u64,
    /// Mappings in its tier-3 pages at the last merge.
    pub t3_count: u32,
    /// Tier-2 blocks ever added and times the stream forgot everything: a lookup remembers
    /// both, and when its data is back only the blocks added since can hold a newer mapping
    /// (a merge moves mappings without changing which is newest).
    pub version: Seen,
    pub queued: bool,
    /// Places with a write in flight (never reused until it is back), and where the next block
    /// goes.
    pub writing: u128,
    pub next_pos: u32,
}

/// Counters of the cascade index.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CascadeStats {
    /// Mappings moved from tier 1 to tier 2.
    pub demotions: u64,
    /// Deletions recorded on flash.
    pub tombstones: u64,
    /// Mappings moved back to tier 1.
    pub promotions: u64,
    /// Tier-2 blocks written.
    pub t2_blocks_written: u64,
    /// Tier-2 block writes the device failed.
    pub t2_write_errors: u64,
    /// Mapping blocks read for lookups.
    pub map_reads: u64,
    /// Mapping blocks that failed their checks or their read.
    pub map_bad: u64,
    /// Reorganizations of a stream into tier 3.
    pub reorgs: u64,
    /// Bytes they read.
    pub reorg_read_bytes: u64,
    /// Bytes they wrote.
    pub reorg_write_bytes: u64,
    /// Reorganizations the device failed.
    pub reorg_errors: u64,
    /// Mappings a full tier-3 page could not keep (their items are lost).
    pub t3_overflow_drops: u64,
    /// Streams that forgot everything because their tier-2 area was full.
    pub stream_drops: u64,
    /// Lookups by where their mapping was found, and the flash reads each kind took.
    pub hits_t1: u64,
    /// Lookups answered from tier 1.
    pub reads_t1: u64,
    /// Lookups found in tier 2.
    pub hits_t2: u64,
    /// Tier-2 blocks read for lookups.
    pub reads_t2: u64,
    /// Lookups found in tier 3.
    pub hits_t3: u64,
    /// Tier-3 pages read for lookups.
    pub reads_t3: u64,
    /// Lookups found in no tier.
    pub misses: u64,
    /// Mapping reads that found nothing.
    pub reads_miss: u64,
}

/// Mappings per tier, for the stats.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TierCounts {
    /// Mappings in tier 1 (DRAM).
    pub t1: u64,
    /// Mappings in tier 2 (recent blocks on flash).
    pub t2: u64,
    /// Mappings in tier 3 (the hashed page table on flash).
    pub t3: u64,
}

/// An in-flight merge of one stream's first `blocks` tier-2 blocks into its tier-3 pages.
pub(super) struct Reorg {
    pub stream: u32,
    pub blocks: usize,
    pub left: u32,
    pub failed: bool,
    /// Cleared or dropped meanwhile: finish without applying.
    pub aborted: bool,
    pub t3: Option<AlignedBuf>,
    pub t2: Vec<Option<AlignedBuf>>,
    /// The blocks' mappings that were still in DRAM when the merge started.
    pub dram: Vec<Option<Vec<Mapping>>>,
    /// The merged pages, while they are written (lookups search them in DRAM).
    pub merged: Option<Vec<Vec<Mapping>>>,
    pub seq: u64,
    /// A full page dropped live mappings in this merge.
    pub overflowed: bool,
}

pub(super) struct Cascade {
    pub geo: CascadeLayout,
    pub streams: Vec<Stream>,
    pub t3_blooms: Vec<u8>,
    pub queue: VecDeque<u32>,
    pub reorg: Option<Reorg>,
    /// The reorganization's page buffer, kept between merges.
    pub t3_buf: Option<AlignedBuf>,
    pub next_seq: u64,
    pub stats: CascadeStats,
    /// Streams that forgot their mappings, and fingerprints whose mappings a full tier-3 page
    /// dropped, since `FlashStore::mark_cascade_drops` last wrote them down.
    pub dropped_streams: Vec<u32>,
    pub dropped_fps: Vec<(u32, u16)>,
}

impl Cascade {
    pub(super) fn new(geo: CascadeLayout) -> Cascade {
        let pages = 1usize << geo.t3_bits;
        Cascade {
            streams: (0..1u32 << geo.stream_bits).map(|_| Stream::default()).collect(),
            t3_blooms: vec![0; pages * geo.t3_bloom.bytes()],
            queue: VecDeque::new(),
            reorg: None,
            t3_buf: None,
            next_seq: 1,
            stats: CascadeStats::default(),
            dropped_streams: Vec::new(),
            dropped_fps: Vec::new(),
            geo,
        }
    }

    /// The fingerprint's bits: tier-1 bucket above the tag (the key's group, see `durable`).
    pub(super) fn g(&self, fp: (u32, u16)) -> u64 {
        u64::from(fp.0) << 16 | u64::from(fp.1)
    }

    pub(super) fn t3_page(&self, fp: (u32, u16)) -> usize {
        (self.g(fp) >> (self.geo.t1_bits + 16 - self.geo.t3_bits)) as usize
    }

    pub(super) fn stream_of(&self, fp: (u32, u16)) -> usize {
        (self.g(fp) >> (self.geo.t1_bits + 16 - self.geo.stream_bits)) as usize
    }

    pub(super) fn pages_per_stream(&self) -> usize {
        1 << (self.geo.t3_bits - self.geo.stream_bits)
    }

    fn t3_filter(&self, page: usize) -> &[u8] {
        let n = self.geo.t3_bloom.bytes();
        &self.t3_blooms[page * n..(page + 1) * n]
    }

    /// Whether tier 2 or 3 (or the stream's DRAM block) may hold a mapping for `fp` (no I/O).
    pub(super) fn below_may_contain(&self, fp: (u32, u16)) -> bool {
        let stream = &self.streams[self.stream_of(fp)];
        stream.buffer.iter().any(|m| m.fingerprint() == fp)
            || stream.blocks.iter().any(|b| match &b.dram {
                Some(ms) => ms.iter().any(|m| m.fingerprint() == fp),
                None => self.geo.t2_bloom.may_contain(&b.bloom, fp),
            })
            || (stream.t3_seq != 0 && self.geo.t3_bloom.may_contain(self.t3_filter(self.t3_page(fp)), fp))
            || self.reorg.as_ref().is_some_and(|r| r.stream as usize == self.stream_of(fp) && r.merged.is_some())
    }

    /// A place for stream `s`'s next tier-2 block: not in its list, no write in flight there.
    pub(super) fn free_place(&self, s: usize) -> Option<u32> {
        let (st, w) = (&self.streams[s], self.geo.t2_per_stream);
        if st.blocks.len() >= w as usize {
            return None;
        }
        (0..w)
            .map(|i| (st.next_pos + i) % w)
            .find(|&p| st.writing & (1 << p) == 0 && st.blocks.iter().all(|b| b.pos != p))
    }

    /// Whether a mapping of `fp` other than `entry`, newer than what a lookup saw at `seen`, may
    /// have reached the stream's blocks since (no I/O).
    pub(super) fn changed_since(&self, s: usize, seen: Seen, fp: (u32, u16), entry: Entry) -> bool {
        let stream = &self.streams[s];
        if stream.version.drops != seen.drops {
            return true;
        }
        let added = (stream.version.flushes - seen.flushes) as usize;
        added > stream.blocks.len()
            || stream.blocks.iter().rev().take(added).any(|b| match &b.dram {
                Some(ms) => find_in(ms, fp).is_some_and(|m| !m.entry.same_place(entry)),
                None => self.geo.t2_bloom.may_contain(&b.bloom, fp),
            })
    }

    pub(super) fn counts(&self) -> (u64, u64) {
        let t2 = self
            .streams
            .iter()
            .map(|s| s.buffer.len() as u64 + s.blocks.iter().map(|b| u64::from(b.count)).sum::<u64>())
            .sum();
        let t3 = self.streams.iter().map(|s| u64::from(s.t3_count)).sum();
        (t2, t3)
    }

    /// Heap bytes: (demotion buffers and stream records, tier-2 filters, tier-3 filters, merge
    /// buffers).
    pub(super) fn heap_bytes(&self) -> (u64, u64, u64, u64) {
        let mut buffers = (self.streams.capacity() * std::mem::size_of::<Stream>()) as u64;
        let mut t2 = 0;
        for s in &self.streams {
            buffers += (s.buffer.capacity() * std::mem::size_of::<Mapping>()) as u64;
            buffers += (s.blocks.capacity() * std::mem::size_of::<T2Block>()) as u64;
            for b in &s.blocks {
                t2 += b.bloom.len() as u64;
                buffers += b.dram.as_ref().map_or(0, |d| (d.capacity() * std::mem::size_of::<Mapping>()) as u64);
            }
        }
        let mut merge = self.t3_buf.as_ref().map_or(0, |b| b.len() as u64);
        if let Some(r) = &self.reorg {
            merge += r.t3.as_ref().map_or(0, |b| b.len() as u64) + (r.t2.len() * PAGE) as u64;
            merge += r.merged.as_ref().map_or(0, |m| (m.iter().map(Vec::capacity).sum::<usize>() * 12) as u64);
        }
        (buffers, t2, self.t3_blooms.capacity() as u64, merge)
    }

    /// Forgets every mapping below tier 1 (flush_all: its flush mark kills every record).
    pub(super) fn clear(&mut self) {
        for s in 0..self.streams.len() {
            self.forget_stream(s);
        }
        self.dropped_streams.clear();
        self.dropped_fps.clear();
    }

    /// Forgets one stream's mappings below tier 1 (noted for a stream mark).
    pub(super) fn forget_stream(&mut self, s: usize) {
        self.dropped_streams.push(s as u32);
        let stream = &mut self.streams[s];
        stream.buffer.clear();
        stream.blocks.clear();
        stream.t3_seq = 0;
        stream.t3_count = 0;
        stream.version.drops += 1;
        let per = self.pages_per_stream();
        let n = self.geo.t3_bloom.bytes();
        self.t3_blooms[s * per * n..(s + 1) * per * n].fill(0);
        if let Some(r) = self.reorg.as_mut().filter(|r| r.stream as usize == s) {
            r.aborted = true;
        }
    }
}

impl FlashStore {
    /// A key's fingerprint: (tier-1 bucket, tag).
    pub(super) fn fingerprint(&self, hash: crate::hash::KeyHash) -> (u32, u16) {
        (self.index.bucket_of(hash) as u32, hash.tag())
    }

    /// A tier-1 entry leaves DRAM: a valid one (or a dead one that a lower tier may shadow, as a
    /// tombstone) joins its stream's demotion block.
    pub(super) fn demote(&mut self, bucket: u32, e: Entry) {
        let fp = (bucket, e.tag());
        let valid = Self::valid(&self.slots, e);
        self.forget(Some(e));
        let Some(c) = self.cascade.as_deref() else { return };
        let entry = if valid {
            e.without_hit()
        } else if is_tombstone(e) || c.below_may_contain(fp) {
            tombstone(e.tag())
        } else {
            return;
        };
        self.push_below(Mapping { bucket, entry });
    }

    /// Writes down what the cascade index forgot since the last call (see `durable`): a stream
    /// mark per stream that forgot its mappings, an invalidation mark per mapping a full page
    /// dropped. They are appended at the next commit (this runs deep inside inserts and
    /// completions); until they are on the device, changes of those keys wait for them.
    pub(super) fn mark_cascade_drops(&mut self) {
        let Some(c) = self.cascade.as_deref_mut() else { return };
        if c.dropped_streams.is_empty() && c.dropped_fps.is_empty() {
            return;
        }
        let streams = std::mem::take(&mut c.dropped_streams);
        let groups: Vec<u64> = std::mem::take(&mut c.dropped_fps).into_iter().map(|fp| c.g(fp)).collect();
        for group in streams.into_iter().map(|s| super::durable::STREAM_GROUP | u64::from(s)).chain(groups) {
            self.defer_drop(group);
        }
    }

    /// Makes sure no lower tier serves `fp` again (a delete or an overwrite that stored nothing).
    /// `ground`: the sequence number of the segment holding (or about to hold) the record that
    /// says so, or an older one (0: none; the sets index purges before the next retirement).
    pub(super) fn bury(&mut self, fp: (u32, u16), ground: u64) {
        if self.sets.is_some() {
            return self.bury_set(fp, ground);
        }
        if self.cascade.as_deref().is_some_and(|c| c.below_may_contain(fp)) {
            self.push_below(Mapping { bucket: fp.0, entry: tombstone(fp.1) });
        }
    }

    fn push_below(&mut self, m: Mapping) {
        let Some(c) = self.cascade.as_deref_mut() else { return };
        let s = c.stream_of(m.fingerprint());
        c.stats.demotions += u64::from(!is_tombstone(m.entry));
        c.stats.tombstones += u64::from(is_tombstone(m.entry));
        c.streams[s].buffer.push(m);
        if c.streams[s].buffer.len() >= c.geo.block_entries as usize {
            self.write_t2(s);
        }
    }

    /// Writes stream `s`'s full DRAM block as its newest tier-2 block. With no place left in the
    /// stream's run the stream forgets everything below tier 1 (counted), so order is never lost.
    fn write_t2(&mut self, s: usize) {
        if self.cascade.as_deref().is_some_and(|c| c.free_place(s).is_none()) {
            self.relieve(s);
        }
        let c = self.cascade.as_deref_mut().expect("cascade");
        let pos = match c.free_place(s) {
            Some(pos) => pos,
            // Inside `relieve` (a completion demoted something): the DRAM block grows a little
            // past its size until the outer call writes it.
            None if self.relieving => return,
            None => {
                // The pressure path: everything the stream holds below tier 1 is forgotten; the
                // block that did not fit is newer than all of it, so it stays if it can.
                let keep = std::mem::take(&mut c.streams[s].buffer);
                c.forget_stream(s);
                c.stats.stream_drops += 1;
                match c.free_place(s) {
                    Some(pos) => {
                        c.streams[s].buffer = keep;
                        pos
                    }
                    None => return self.mark_cascade_drops(),
                }
            }
        };
        let stream = &mut c.streams[s];
        stream.next_pos = (pos + 1) % c.geo.t2_per_stream;
        stream.writing |= 1 << pos;
        // The oldest `block_entries` (a block nested demotions overfilled keeps the rest: they
        // are newer than the block, as the DRAM block always is).
        let take = stream.buffer.len().min(c.geo.block_entries as usize);
        let rest = stream.buffer.split_off(take);
        let mappings = std::mem::replace(&mut stream.buffer, rest);
        let seq = c.next_seq;
        c.next_seq += 1;
        let mut bloom = vec![0u8; c.geo.t2_bloom.bytes()].into_boxed_slice();
        for m in &mappings {
            c.geo.t2_bloom.add(&mut bloom, m.fingerprint());
        }
        let mut buf = AlignedBuf::new(PAGE);
        encode_block(&mut buf, KIND_T2, s as u32, seq, &mappings);
        let offset = c.geo.t2_offset + ((s as u64 * u64::from(c.geo.t2_per_stream) + u64::from(pos)) * PAGE as u64);
        let count = mappings.len() as u16;
        let stream = &mut c.streams[s];
        stream.blocks.push_back(T2Block { pos, seq, bloom, dram: Some(mappings), count });
        stream.version.flushes += 1;
        c.stats.t2_blocks_written += 1;
        if stream.blocks.len() >= c.geo.reorg_at as usize && !stream.queued {
            stream.queued = true;
            c.queue.push_back(s as u32);
        }
        let token = TOKEN_MAP_WRITE | t2_token(s, pos, seq);
        self.io.submit(IoOp { kind: IoKind::Write, offset, buf, len: PAGE, at: 0, token });
        self.stats.write_bytes += PAGE as u64;
        self.maybe_reorg();
        self.mark_cascade_drops();
    }

    /// Stream `s` has no place for a block: start its merge and wait for the device until one
    /// frees up (a pressure path, taken when inserts outrun the merges). Only the completions of
    /// tier-2 writes and merges are handled here; the rest wait for the next `poll`, so no
    /// lookup finishes (or promotes, or GC rewrites) inside an insert.
    fn relieve(&mut self, s: usize) {
        if self.relieving {
            return;
        }
        self.relieving = true;
        let now = self.last_now;
        let (mut unused, mut completions) = (Vec::new(), Vec::new());
        for _ in 0..64 {
            self.maybe_reorg();
            let Some(c) = self.cascade.as_deref() else { break };
            if c.free_place(s).is_some() || self.io.in_flight() == 0 {
                break;
            }
            self.io.flush();
            self.io.wait(&mut completions);
            for done in completions.drain(..) {
                match done.token & super::TOKEN_KIND {
                    TOKEN_MAP_WRITE | super::TOKEN_REORG => self.complete(done, now, &mut unused),
                    _ => self.deferred.push(done),
                }
            }
        }
        debug_assert!(unused.is_empty());
        self.relieving = false;
    }

    /// A tier-2 block write finished: the block is read from flash from now on (unless the
    /// write failed: then it stays in DRAM until its merge).
    pub(super) fn t2_written(&mut self, number: u64, c: Completion) {
        let (s, pos) = (((number >> 8) & 0xFFF) as usize, (number & 0xFF) as u32);
        let ok = c.result.is_ok();
        let Some(cas) = self.cascade.as_deref_mut() else { return };
        if let Some(st) = cas.streams.get_mut(s) {
            st.writing &= !(1 << pos);
        }
        if !ok {
            cas.stats.t2_write_errors += 1;
        }
        // A block of the same place in an older life of the stream (dropped since) is not it.
        let mine = |b: &&mut T2Block| t2_token(s, b.pos, b.seq) == number;
        if let Some(b) = cas.streams.get_mut(s).and_then(|st| st.blocks.iter_mut().find(mine)) {
            if ok {
                b.dram = None;
            }
        }
        if self.page_pool.len() < self.cfg.max_reads as usize {
            self.page_pool.push(c.buf);
        }
        self.maybe_reorg();
    }
}

/// A tier-2 block write's token number: the low 36 bits of its seq, its stream (12 bits) and its
/// place (8 bits).
fn t2_token(s: usize, pos: u32, seq: u64) -> u64 {
    (seq & 0xF_FFFF_FFFF) << 20 | (s as u64) << 8 | u64::from(pos)
}

/// The newest mapping of `fp` in a tier-2 block held in DRAM.
pub(super) fn find_in(ms: &[Mapping], fp: (u32, u16)) -> Option<Mapping> {
    ms.iter().rev().find(|m| m.fingerprint() == fp).copied()
}

impl FlashStore {
    /// The cascade index's counters, if the store has one.
    pub fn cascade_stats(&self) -> Option<CascadeStats> {
        self.cascade.as_deref().map(|c| c.stats)
    }

    /// Mappings per tier (tier 1 counts its valid entries; tiers 2 and 3 count what they hold,
    /// dead mappings not yet merged away included).
    pub fn tier_counts(&self) -> TierCounts {
        let t1 = self.index.entries().filter(|&e| Self::valid(&self.slots, e)).count() as u64;
        let (t2, t3) = self.cascade.as_deref().map_or((0, 0), Cascade::counts);
        TierCounts { t1, t2, t3 }
    }

    /// Clears dead tier-1 entries in `from..to`; with the cascade index a dead entry a lower tier
    /// may shadow leaves a tombstone.
    pub(super) fn sweep_range(&mut self, from: usize, to: usize) -> usize {
        let slots = &self.slots;
        if self.cascade.is_none() && self.sets.is_none() {
            return self.index.sweep(from, to, |e| Self::valid(slots, e));
        }
        let mut dead = Vec::new();
        // (The sets index keeps its tombstones: they shadow sets.)
        let keep = |e: Entry| Self::valid(slots, e) || (self.sets.is_some() && is_tombstone(e));
        let cleared = self.index.sweep_collect(from, to, keep, &mut dead);
        for (bucket, e) in dead {
            self.bury((bucket as u32, e.tag()), 0);
        }
        cleared
    }
}
