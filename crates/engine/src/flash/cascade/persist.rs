//! The cascade index's DRAM state in the snapshot a clean close writes: per stream its tier-3
//! seq and count, its tier-2 blocks (place, seq, count, Bloom filter) and its DRAM block, then
//! every tier-3 page's Bloom filter. Tier 1 is the snapshot's index section; the mapping blocks
//! themselves stay on flash.
//!
//! ```text
//!   0 magic u64 "TKVCASC1" | 8 length u64 (bytes of this section) | 16 t1_bits u32
//!  20 t3_bits u32 | 24 stream_bits u32 | 28 t2_per_stream u32 | 32 next_seq u64
//!  then per stream: t3_seq u64 | t3_count u32 | blocks u32 | buffered u32
//!                   blocks x (pos u32 | seq u64 | count u32) | buffered x (bucket u32 | entry u64)
//!                   blocks x the block's Bloom filter
//!  then every tier-3 page's Bloom filter
//! ```

use super::super::index::Entry;
use super::super::mapblock::Mapping;
use super::{Cascade, T2Block};
use crate::flash::RecoveryError;

const MAGIC: u64 = u64::from_le_bytes(*b"TKVCASC1");

impl Cascade {
    /// Before a clean close: streams holding a block whose write failed, or a DRAM block that
    /// could not be written, forget their mappings (those exist only in DRAM, and the snapshot
    /// keeps at most a block's worth per stream). The close writes their stream marks.
    pub(crate) fn forget_unsaveable(&mut self) {
        let cap = self.geo.block_entries as usize;
        for s in 0..self.streams.len() {
            let overfull = self.streams[s].buffer.len() >= cap;
            if overfull || self.streams[s].blocks.iter().any(|b| b.dram.is_some()) {
                self.forget_stream(s);
                self.stats.stream_drops += 1;
            }
        }
    }

    /// The section's bytes (after `forget_unsaveable`).
    pub(crate) fn save(&mut self) -> Vec<u8> {
        self.forget_unsaveable();
        let g = self.geo;
        let mut out = Vec::new();
        out.extend_from_slice(&MAGIC.to_le_bytes());
        out.extend_from_slice(&0u64.to_le_bytes());
        for v in [g.t1_bits, g.t3_bits, g.stream_bits, g.t2_per_stream] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&self.next_seq.to_le_bytes());
        for s in &self.streams {
            out.extend_from_slice(&s.t3_seq.to_le_bytes());
            out.extend_from_slice(&s.t3_count.to_le_bytes());
            out.extend_from_slice(&(s.blocks.len() as u32).to_le_bytes());
            out.extend_from_slice(&(s.buffer.len() as u32).to_le_bytes());
            for b in &s.blocks {
                out.extend_from_slice(&b.pos.to_le_bytes());
                out.extend_from_slice(&b.seq.to_le_bytes());
                out.extend_from_slice(&u32::from(b.count).to_le_bytes());
            }
            for m in &s.buffer {
                out.extend_from_slice(&m.bucket.to_le_bytes());
                out.extend_from_slice(&m.entry.0.to_le_bytes());
            }
            for b in &s.blocks {
                out.extend_from_slice(&b.bloom);
            }
        }
        out.extend_from_slice(&self.t3_blooms);
        let len = out.len() as u64;
        out[8..16].copy_from_slice(&len.to_le_bytes());
        out
    }

    /// Restores the section written by `save` for this very geometry.
    pub(crate) fn load(&mut self, bytes: &[u8]) -> Result<(), RecoveryError> {
        let bad = || RecoveryError::CascadeSnapshot;
        let mut r = Reader { bytes, at: 0 };
        if r.u64().ok_or_else(bad)? != MAGIC {
            return Err(bad());
        }
        let len = r.u64().ok_or_else(bad)? as usize;
        let g = self.geo;
        let mut geo = [0u32; 4];
        for v in &mut geo {
            *v = r.u32().ok_or_else(bad)?;
        }
        if len > bytes.len() || geo != [g.t1_bits, g.t3_bits, g.stream_bits, g.t2_per_stream] {
            return Err(bad());
        }
        self.next_seq = r.u64().ok_or_else(bad)?;
        let t3_pages = 1usize << g.t3_bits;
        let per = self.pages_per_stream();
        let cap = g.block_entries as usize;
        for s in 0..self.streams.len() {
            let t3_seq = r.u64().ok_or_else(bad)?;
            let t3_count = r.u32().ok_or_else(bad)?;
            let blocks = r.u32().ok_or_else(bad)? as usize;
            let buffered = r.u32().ok_or_else(bad)? as usize;
            if blocks > g.t2_per_stream as usize || buffered >= cap || t3_count as usize > per * cap {
                return Err(bad());
            }
            let mut list = Vec::with_capacity(blocks);
            for _ in 0..blocks {
                let (pos, seq, count) = (r.u32().ok_or_else(bad)?, r.u64().ok_or_else(bad)?, r.u32().ok_or_else(bad)?);
                if pos >= g.t2_per_stream || count as usize > cap || seq >= self.next_seq {
                    return Err(bad());
                }
                list.push((pos, seq, count as u16));
            }
            let mut buffer = Vec::with_capacity(cap);
            for _ in 0..buffered {
                let m = Mapping { bucket: r.u32().ok_or_else(bad)?, entry: Entry(r.u64().ok_or_else(bad)?) };
                if self.stream_of(m.fingerprint()) != s {
                    return Err(bad());
                }
                buffer.push(m);
            }
            let stream = &mut self.streams[s];
            (stream.t3_seq, stream.t3_count, stream.buffer) = (t3_seq, t3_count, buffer);
            for (pos, seq, count) in list {
                let bloom = r.take(g.t2_bloom.bytes()).ok_or_else(bad)?.to_vec().into_boxed_slice();
                stream.blocks.push_back(T2Block { pos, seq, bloom, dram: None, count });
            }
            if stream.blocks.len() >= g.reorg_at as usize {
                stream.queued = true;
                self.queue.push_back(s as u32);
            }
        }
        let filters = r.take(t3_pages * g.t3_bloom.bytes()).ok_or_else(bad)?;
        self.t3_blooms.copy_from_slice(filters);
        if r.at != len {
            return Err(bad());
        }
        Ok(())
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let out = self.bytes.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(out)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4).map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
    }
    fn u64(&mut self) -> Option<u64> {
        self.take(8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }
}
