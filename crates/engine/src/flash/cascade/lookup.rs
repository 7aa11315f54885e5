//! Lookups below tier 1: which mapping blocks may hold the key (DRAM Bloom filters), reading
//! the newest candidate first and the older ones (all at once) only if it does not hold the
//! key, taking the newest match, then the data read; and the promotion of a mapping found below
//! into tier 1.

use super::super::io::{AlignedBuf, Completion, IoKind, IoOp};
use super::super::layout::PAGE;
use super::super::mapblock::{decode_header, find_in_block, Mapping, KIND_T2, KIND_T3};
use super::super::{FlashStore, Lookup, Now, PendingRead, ReadDone, TOKEN_MAP_READ};
use super::{find_in, is_tombstone, Cascade, Seen};
use crate::hash::KeyHash;

/// Where a lookup's mapping came from below tier 1, to check it is still current when its data
/// read completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Below {
    pub stream: u32,
    pub version: Seen,
    /// 2 or 3.
    pub tier: u8,
}

/// One place a lookup looks below tier 1, newest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cand {
    /// Found in DRAM (a block not yet on flash, or tier-3 pages being written).
    Known(Mapping, u8),
    T2 {
        pos: u32,
        seq: u64,
    },
    T3 {
        page: u32,
        seq: u64,
    },
}

/// What a candidate's read found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Found {
    /// Not asked for yet: a newer candidate is read first.
    Unread,
    Waiting,
    Bad,
    No,
    Yes(Mapping),
}

/// A lookup reading mapping blocks.
#[derive(Debug)]
pub(crate) struct MapRead {
    pub cands: Vec<Cand>,
    pub found: Vec<Found>,
    pub left: u32,
    pub stream: u32,
    pub version: Seen,
}

/// What the DRAM structures say of a key below tier 1.
pub(crate) enum Probe {
    Miss,
    Found(Mapping, u8),
    Read(Vec<Cand>),
}

impl Cascade {
    /// The places below tier 1 that may hold `fp`, newest first, up to the first found in DRAM.
    pub(crate) fn probe(&self, fp: (u32, u16)) -> Probe {
        let s = self.stream_of(fp);
        let stream = &self.streams[s];
        if let Some(m) = find_in(&stream.buffer, fp) {
            return Probe::Found(m, 2);
        }
        let mut cands = Vec::new();
        for b in stream.blocks.iter().rev() {
            match &b.dram {
                Some(ms) => {
                    if let Some(m) = find_in(ms, fp) {
                        cands.push(Cand::Known(m, 2));
                        return finish_probe(cands);
                    }
                }
                None if self.geo.t2_bloom.may_contain(&b.bloom, fp) => cands.push(Cand::T2 { pos: b.pos, seq: b.seq }),
                None => {}
            }
        }
        let page = self.t3_page(fp);
        match self.reorg.as_ref().filter(|r| r.stream as usize == s).and_then(|r| r.merged.as_ref()) {
            Some(merged) => {
                if let Some(m) = find_in(&merged[page - s * self.pages_per_stream()], fp) {
                    cands.push(Cand::Known(m, 3));
                }
            }
            None if stream.t3_seq != 0 && self.geo.t3_bloom.may_contain(self.t3_filter(page), fp) => {
                cands.push(Cand::T3 { page: page as u32, seq: stream.t3_seq });
            }
            None => {}
        }
        finish_probe(cands)
    }

    fn cand_offset(&self, stream: u32, cand: Cand) -> Option<u64> {
        match cand {
            Cand::Known(..) => None,
            Cand::T2 { pos, .. } => Some(
                self.geo.t2_offset
                    + (u64::from(stream) * u64::from(self.geo.t2_per_stream) + u64::from(pos)) * PAGE as u64,
            ),
            Cand::T3 { page, .. } => Some(self.geo.t3_offset + u64::from(page) * PAGE as u64),
        }
    }

    /// What a candidate's page says of `fp`.
    fn check_page(&self, stream: u32, cand: Cand, page: &[u8], fp: (u32, u16)) -> Found {
        let expect = match cand {
            Cand::Known(m, _) => return Found::Yes(m),
            Cand::T2 { seq, .. } => (KIND_T2, stream, seq),
            Cand::T3 { page, seq } => (KIND_T3, page, seq),
        };
        match decode_header(page) {
            Some(h) if (h.kind, h.owner, h.seq) == expect => match find_in_block(page, h.count as usize, fp) {
                Some(m) => Found::Yes(m),
                None => Found::No,
            },
            _ => Found::Bad,
        }
    }
}

fn finish_probe(cands: Vec<Cand>) -> Probe {
    match cands.as_slice() {
        [] => Probe::Miss,
        [Cand::Known(m, tier)] => Probe::Found(*m, *tier),
        _ => Probe::Read(cands),
    }
}

impl FlashStore {
    /// A key tier 1 does not hold: found in DRAM below, read from the candidate blocks, or a
    /// miss with no I/O.
    pub(in super::super) fn lookup_below(&mut self, hash: KeyHash, key: &[u8], token: u64, now: Now) -> Lookup {
        let fp = self.fingerprint(hash);
        let c = self.cascade.as_deref().expect("cascade");
        let stream = c.stream_of(fp) as u32;
        let version = c.streams[stream as usize].version;
        let mut pending = PendingRead::new(token, hash, key);
        match c.probe(fp) {
            Probe::Miss => {
                self.stats.miss_index += 1;
                self.count_outcome(0, false, 0);
                Lookup::Miss
            }
            Probe::Found(m, tier) => {
                if is_tombstone(m.entry) || !Self::valid(&self.slots, m.entry) {
                    self.stats.miss_index += 1;
                    self.count_outcome(0, false, 0);
                    return Lookup::Miss;
                }
                pending.entry = m.entry;
                pending.below = Some(Below { stream, version, tier });
                self.fetch_new(pending, now)
            }
            Probe::Read(cands) => {
                debug_assert!(cands.len() < 256);
                let found = cands
                    .iter()
                    .map(|c| if let Cand::Known(m, _) = c { Found::Yes(*m) } else { Found::Unread })
                    .collect();
                pending.map = Some(Box::new(MapRead { cands, found, left: 0, stream, version }));
                let Some(i) = self.take_read_slot(pending) else { return self.no_read_slot() };
                // The newest candidate is first, and a probe yields at least one to read.
                self.read_candidates(i, 1);
                Lookup::Pending
            }
        }
    }

    /// Reads up to `most` of lookup `i`'s unread candidates, newest first.
    fn read_candidates(&mut self, i: usize, most: usize) {
        let Some(map) = self.reads[i].as_mut().and_then(|p| p.map.as_mut()) else { return };
        let c = self.cascade.as_deref_mut().expect("cascade");
        let mut issued = 0u32;
        for (ci, found) in map.found.iter_mut().enumerate() {
            if issued as usize == most {
                break;
            }
            if *found != Found::Unread {
                continue;
            }
            let Some(offset) = c.cand_offset(map.stream, map.cands[ci]) else { continue };
            *found = Found::Waiting;
            let buf = self.page_pool.pop().unwrap_or_else(|| AlignedBuf::new(PAGE));
            let token = TOKEN_MAP_READ | (i as u64) << 8 | ci as u64;
            self.io.submit(IoOp { kind: IoKind::Read, offset, buf, len: PAGE, at: 0, token });
            issued += 1;
        }
        map.left += issued;
        c.stats.map_reads += u64::from(issued);
        self.stats.reads += u64::from(issued);
        self.stats.read_bytes += u64::from(issued) * PAGE as u64;
        if let Some(p) = self.reads[i].as_mut() {
            p.reads += issued;
        }
        if self.submit_at_once {
            self.io.flush();
        }
    }

    /// A mapping block read for lookup `i` came back; when the last one has, the newest match
    /// decides.
    pub(in super::super) fn map_read_done(&mut self, number: u64, c: Completion, now: Now, out: &mut Vec<ReadDone>) {
        let (i, ci) = ((number >> 8) as usize, (number & 0xFF) as usize);
        let Some(p) = self.reads[i].as_ref() else { return };
        let fp = self.fingerprint(p.hash);
        let map = p.map.as_ref().expect("a lookup reading mappings");
        let cas = self.cascade.as_deref().expect("cascade");
        let found = match c.result {
            Ok(_) => cas.check_page(map.stream, map.cands[ci], &c.buf, fp),
            Err(_) => Found::Bad,
        };
        if self.page_pool.len() < self.cfg.max_reads as usize {
            self.page_pool.push(c.buf);
        }
        let map = self.reads[i].as_mut().and_then(|p| p.map.as_mut()).expect("a lookup reading mappings");
        map.found[ci] = found;
        map.left -= 1;
        if map.left > 0 {
            return;
        }
        // Newest first: a match (or a damaged block) decides before any older candidate is
        // read; only if every candidate read so far holds nothing are the older ones read, all
        // at once.
        let undecided = map.found.iter().find(|f| !matches!(f, Found::No)).is_some_and(|f| *f == Found::Unread);
        if undecided {
            self.read_candidates(i, usize::MAX);
        } else {
            self.decide(i, now, out);
        }
    }

    /// Every candidate of lookup `i` is known: take the newest mapping (a damaged newer block
    /// makes it a miss: an older mapping must never be served over it), then read the data.
    fn decide(&mut self, i: usize, now: Now, out: &mut Vec<ReadDone>) {
        let p = self.reads[i].as_mut().expect("a lookup");
        let map = p.map.take().expect("a lookup reading mappings");
        let hash = p.hash;
        let cas = self.cascade.as_deref_mut().expect("cascade");
        let stream = &cas.streams[map.stream as usize];
        let fp = (self.index.bucket_of(hash) as u32, hash.tag());
        if cas.changed_since(map.stream as usize, map.version, fp, super::super::index::Entry(0))
            || find_in(&stream.buffer, fp).is_some()
            || self.index.find(hash).is_some()
        {
            self.stats.miss_superseded += 1;
            return self.finish_miss(i, out);
        }
        let mut chosen = None;
        for (cand, found) in map.cands.iter().zip(&map.found) {
            match found {
                Found::Yes(m) => {
                    let tier = match cand {
                        Cand::Known(_, t) => *t,
                        Cand::T2 { .. } => 2,
                        Cand::T3 { .. } => 3,
                    };
                    chosen = Some((*m, tier));
                    break;
                }
                Found::Bad | Found::Waiting | Found::Unread => {
                    debug_assert_eq!(*found, Found::Bad, "decided before a newer candidate was read");
                    cas.stats.map_bad += 1;
                    self.stats.miss_corrupt += 1;
                    return self.finish_miss(i, out);
                }
                Found::No => {}
            }
        }
        match chosen {
            Some((m, tier)) if !is_tombstone(m.entry) && Self::valid(&self.slots, m.entry) => {
                let p = self.reads[i].as_mut().expect("a lookup");
                p.entry = m.entry;
                p.below = Some(Below { stream: map.stream, version: map.version, tier });
                self.fetch_existing(i, now, out);
            }
            _ => {
                self.stats.miss_index += 1;
                self.finish_miss(i, out);
            }
        }
    }

    /// Whether lookup `p`'s mapping is still the key's newest when its data is back: tier 1
    /// holds it, or (cascade) it was demoted into the stream's DRAM block meanwhile, or it was
    /// found below and nothing below changed.
    pub(in super::super) fn still_current(&self, p: &PendingRead) -> bool {
        if !Self::valid(&self.slots, p.entry) {
            return false;
        }
        if let Some(e) = self.index.find(p.hash) {
            return e.same_place(p.entry);
        }
        let Some(c) = self.cascade.as_deref() else { return false };
        let fp = self.fingerprint(p.hash);
        match find_in(&c.streams[c.stream_of(fp)].buffer, fp) {
            Some(m) => m.entry.same_place(p.entry),
            None => p.below.is_some_and(|b| !c.changed_since(b.stream as usize, b.version, fp, p.entry)),
        }
    }

    /// A hit found below tier 1 moves its mapping into tier 1, without its hit bit (CLOCK's
    /// reference bit): only a second hit while there protects it, so keys read once (the long
    /// tail of a skewed load) leave before the hot ones. A hit in tier 1 sets the bit.
    pub(in super::super) fn promote(&mut self, p: &PendingRead) {
        if let Some(e) = self.index.find(p.hash) {
            self.index.replace_if(p.hash, e, e.with_hit());
            return;
        }
        if let Some(c) = self.cascade.as_deref_mut() {
            c.stats.promotions += 1;
        }
        self.t1_insert(p.hash, p.entry.without_hit());
    }

    /// Counts a finished lookup by the tier that answered (0: a miss) and its flash reads.
    pub(in super::super) fn count_outcome(&mut self, tier: u8, hit: bool, reads: u32) {
        if let Some(s) = self.sets.as_deref_mut() {
            let s = &mut s.stats;
            if hit {
                s.hits_log += 1;
                s.reads_hit += u64::from(reads);
            } else {
                s.misses += 1;
                s.reads_miss += u64::from(reads);
            }
            return;
        }
        let Some(c) = self.cascade.as_deref_mut() else { return };
        let s = &mut c.stats;
        let reads = u64::from(reads);
        match (hit, tier) {
            (false, _) => {
                s.misses += 1;
                s.reads_miss += reads;
            }
            (true, 2) => {
                s.hits_t2 += 1;
                s.reads_t2 += reads;
            }
            (true, 3) => {
                s.hits_t3 += 1;
                s.reads_t3 += reads;
            }
            (true, _) => {
                s.hits_t1 += 1;
                s.reads_t1 += reads;
            }
        }
    }
}
