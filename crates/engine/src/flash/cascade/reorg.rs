//! Reorganization: a stream's tier-2 blocks merged into its tier-3 pages. One merge at a time
//! per store, as a state machine: read the stream's pages (one request for the run) and its
//! blocks on flash, merge newest-wins (tombstones and mappings into reclaimed segments drop out,
//! and so do mappings tier 1 holds), write the run back with a new seq, then free the blocks and
//! rebuild the pages' Bloom filters. A failed read or write makes the stream forget its mappings
//! below tier 1 (counted): never an older mapping served over a newer one.

use super::super::index::FlashIndex;
use super::super::io::{AlignedBuf, Completion, IoKind, IoOp};
use super::super::layout::PAGE;
use super::super::mapblock::{decode_header, encode_block, mapping_at, Mapping, KIND_T2, KIND_T3};
use super::super::ring::Slot;
use super::super::{FlashStore, TOKEN_REORG};
use super::{is_tombstone, Cascade, Reorg};

/// The write's number among the merge's requests (reads are 0 for the pages, 1.. for blocks).
const WRITE: u64 = 0xFFFF;

impl FlashStore {
    /// Starts the next queued merge if none is running (not while closing).
    pub(in super::super) fn maybe_reorg(&mut self) {
        if self.gc.paused {
            return;
        }
        let Some(c) = self.cascade.as_deref_mut() else { return };
        if c.reorg.is_some() {
            return;
        }
        while let Some(s) = c.queue.pop_front() {
            let stream = &mut c.streams[s as usize];
            stream.queued = false;
            if stream.blocks.len() >= c.geo.reorg_at as usize {
                self.start_reorg(s);
                return;
            }
        }
    }

    fn start_reorg(&mut self, s: u32) {
        let c = self.cascade.as_deref_mut().expect("cascade");
        let per = c.pages_per_stream();
        let stream = &c.streams[s as usize];
        let mut reads = Vec::new();
        if stream.t3_seq != 0 {
            let buf = c.t3_buf.take().unwrap_or_else(|| AlignedBuf::new(per * PAGE));
            let offset = c.geo.t3_offset + (u64::from(s) * per as u64) * PAGE as u64;
            reads.push(IoOp { kind: IoKind::Read, offset, buf, len: per * PAGE, at: 0, token: TOKEN_REORG });
        }
        for (j, b) in stream.blocks.iter().enumerate() {
            if b.dram.is_none() {
                let offset =
                    c.geo.t2_offset + (u64::from(s) * u64::from(c.geo.t2_per_stream) + u64::from(b.pos)) * PAGE as u64;
                let buf = self.page_pool.pop().unwrap_or_else(|| AlignedBuf::new(PAGE));
                reads.push(IoOp {
                    kind: IoKind::Read,
                    offset,
                    buf,
                    len: PAGE,
                    at: 0,
                    token: TOKEN_REORG | (1 + j as u64),
                });
            }
        }
        let blocks = stream.blocks.len();
        // Blocks still being written are merged from DRAM (their write may finish first).
        let dram = stream.blocks.iter().map(|b| b.dram.clone()).collect();
        c.reorg = Some(Reorg {
            dram,
            stream: s,
            blocks,
            left: reads.len() as u32,
            failed: false,
            aborted: false,
            t3: None,
            t2: (0..blocks).map(|_| None).collect(),
            merged: None,
            seq: 0,
            overflowed: false,
        });
        c.stats.reorgs += 1;
        c.stats.reorg_read_bytes += reads.iter().map(|op| op.len as u64).sum::<u64>();
        self.stats.read_bytes += reads.iter().map(|op| op.len as u64).sum::<u64>();
        let none = reads.is_empty();
        for op in reads {
            self.io.submit(op);
        }
        if none {
            self.merge();
        }
    }

    /// One of the merge's requests finished.
    pub(in super::super) fn reorg_done(&mut self, number: u64, c: Completion) {
        let Some(r) = self.cascade.as_deref_mut().and_then(|c| c.reorg.as_mut()) else { return };
        r.failed |= c.result.is_err();
        if number == WRITE {
            return self.reorg_written(c.buf);
        }
        if number == 0 {
            r.t3 = Some(c.buf);
        } else if let Some(place) = r.t2.get_mut(number as usize - 1) {
            *place = Some(c.buf);
        }
        r.left -= 1;
        if r.left == 0 {
            self.merge();
        }
    }

    /// Everything is read: merge and write the stream's pages.
    fn merge(&mut self) {
        let c = self.cascade.as_deref_mut().expect("cascade");
        let mut r = c.reorg.take().expect("a merge");
        let (s, per) = (r.stream as usize, c.pages_per_stream());
        let pages = if r.aborted || r.failed { None } else { c.merged_pages(&mut r, &self.slots, &self.index) };
        let Some(pages) = pages else {
            if !r.aborted {
                c.stats.reorg_errors += 1;
                c.forget_stream(s);
            }
            c.reorg = Some(r);
            return self.end_reorg();
        };
        let seq = c.next_seq;
        c.next_seq += 1;
        let base = s * per;
        let mut buf = r.t3.take().or_else(|| c.t3_buf.take()).unwrap_or_else(|| AlignedBuf::new(per * PAGE));
        for (p, page) in pages.iter().enumerate() {
            encode_block(&mut buf[p * PAGE..(p + 1) * PAGE], KIND_T3, (base + p) as u32, seq, page);
        }
        r.seq = seq;
        r.merged = Some(pages);
        r.left = 1;
        c.reorg = Some(r);
        let offset = c.geo.t3_offset + (base * PAGE) as u64;
        c.stats.reorg_write_bytes += (per * PAGE) as u64;
        self.stats.write_bytes += (per * PAGE) as u64;
        self.io.submit(IoOp { kind: IoKind::Write, offset, buf, len: per * PAGE, at: 0, token: TOKEN_REORG | WRITE });
        self.mark_cascade_drops();
    }

    /// The pages are written: they replace the merged blocks.
    fn reorg_written(&mut self, buf: AlignedBuf) {
        let c = self.cascade.as_deref_mut().expect("cascade");
        c.t3_buf = Some(buf);
        let mut r = c.reorg.take().expect("a merge");
        let s = r.stream as usize;
        if r.aborted || r.failed {
            if !r.aborted {
                c.stats.reorg_errors += 1;
                c.forget_stream(s);
            }
            c.reorg = Some(r);
            return self.end_reorg();
        }
        let merged = r.merged.take().expect("merged pages");
        let (per, bloom, n) = (c.pages_per_stream(), c.geo.t3_bloom, c.geo.t3_bloom.bytes());
        for (p, page) in merged.iter().enumerate() {
            let filter = &mut c.t3_blooms[(s * per + p) * n..(s * per + p + 1) * n];
            filter.fill(0);
            for m in page {
                bloom.add(filter, m.fingerprint());
            }
        }
        let blocks = r.blocks;
        let stream = &mut c.streams[s];
        stream.t3_seq = r.seq;
        stream.t3_count = merged.iter().map(|p| p.len() as u32).sum();
        stream.blocks.drain(..blocks);
        if r.overflowed {
            // Live mappings were dropped: a lookup that read one before must not serve it now
            // (a delete since found no lower tier to bury it in).
            stream.version.drops += 1;
        }
        if stream.blocks.len() >= c.geo.reorg_at as usize && !stream.queued {
            stream.queued = true;
            c.queue.push_back(s as u32);
        }
        c.reorg = Some(r);
        self.end_reorg();
    }

    fn end_reorg(&mut self) {
        let Some(c) = self.cascade.as_deref_mut() else { return };
        if let Some(mut r) = c.reorg.take() {
            if let Some(buf) = r.t3.take() {
                c.t3_buf = Some(buf);
            }
            for buf in r.t2.drain(..).flatten() {
                if self.page_pool.len() < self.cfg.max_reads as usize {
                    self.page_pool.push(buf);
                }
            }
        }
        self.mark_cascade_drops();
        self.maybe_reorg();
    }
}

impl Cascade {
    /// The stream's pages after merging its first `r.blocks` blocks in (None: something read
    /// failed its checks).
    fn merged_pages(&mut self, r: &mut Reorg, slots: &[Slot], index: &FlashIndex) -> Option<Vec<Vec<Mapping>>> {
        let mut overflowed = false;
        let (s, per) = (r.stream as usize, self.pages_per_stream());
        let base = s * per;
        let mut pages: Vec<Vec<Mapping>> = vec![Vec::new(); per];
        if let Some(buf) = r.t3.as_ref() {
            for (p, page) in pages.iter_mut().enumerate() {
                let bytes = &buf[p * PAGE..(p + 1) * PAGE];
                let h = decode_header(bytes)?;
                if (h.kind, h.owner, h.seq) != (KIND_T3, (base + p) as u32, self.streams[s].t3_seq) {
                    return None;
                }
                page.extend((0..h.count as usize).map(|i| mapping_at(bytes, i)));
            }
        }
        for (j, b) in self.streams[s].blocks.iter().take(r.blocks).enumerate() {
            debug_assert!(j < r.dram.len());
            let ms: Vec<Mapping> = match (r.dram[j].take(), r.t2[j].as_ref()) {
                (Some(ms), _) => ms,
                (None, Some(buf)) => {
                    let h = decode_header(buf)?;
                    if (h.kind, h.owner, h.seq) != (KIND_T2, s as u32, b.seq) {
                        return None;
                    }
                    (0..h.count as usize).map(|i| mapping_at(buf, i)).collect()
                }
                (None, None) => return None,
            };
            for m in ms {
                let page = &mut pages[self.t3_page(m.fingerprint()) - base];
                match page.iter().position(|old| old.fingerprint() == m.fingerprint()) {
                    Some(at) => page[at] = m,
                    None => page.push(m),
                }
            }
        }
        for page in &mut pages {
            page.retain(|m| {
                !is_tombstone(m.entry)
                    && FlashStore::valid(slots, m.entry)
                    && index.find_fingerprint(m.bucket, m.entry.tag()).is_none()
            });
            let cap = self.geo.block_entries as usize;
            if page.len() > cap {
                page.sort_by_key(|m| std::cmp::Reverse(slots[m.entry.slot() as usize].seq));
                self.stats.t3_overflow_drops += (page.len() - cap) as u64;
                overflowed = true;
                self.dropped_fps.extend(page[cap..].iter().map(|m| m.fingerprint()));
                page.truncate(cap);
            }
        }
        r.overflowed = overflowed;
        Some(pages)
    }
}
