//! The sets after a crash: every set page is read back (in large sequential reads), and its
//! header tells how far the log's small records bound for the set are covered:
//!
//! - A page of this region, written in the current life (epoch at or above the floor): its
//!   sequence number is the set's floor. A small log record below it was moved into the page or
//!   dropped before the page was bound, so it is not adopted. Its items are used if they check
//!   out and the page is above the floors of flushes and I/O errors; an item of a group with a
//!   newer record or mark is killed (a tombstone, unless a newer log item shadows it).
//! - A page whose magic is a set page's but whose header does not check out (a write torn
//!   inside the header, or damage): the floor is unknown, so no small record bound for the set
//!   is adopted.
//! - Anything else (blank, another file's, an older layout's, an earlier life's): floor 0.

use super::super::io::{AlignedBuf, IoKind};
use super::super::layout::PAGE;
use super::super::{FlashStore, RecoveryError};
use super::page::{self, Probe};
use crate::hash::KeyHash;

/// Pages per read of the scan, and reads in flight.
const SCAN_PAGES: u32 = 256;
const SCAN_DEPTH: usize = 8;

/// What the scan found.
pub(in crate::flash) struct SetsScan {
    floors: Vec<u64>,
    /// Page items a newer record or mark killed.
    pub killed: Vec<KeyHash>,
    /// The largest page sequence number of the current life.
    pub max_seq: u64,
}

impl SetsScan {
    /// Small log records bound for set `s` at or below this are not adopted.
    pub(in crate::flash) fn floor(&self, s: u32) -> u64 {
        self.floors[s as usize]
    }
}

impl FlashStore {
    /// Reads every set page back and rebuilds the sets' DRAM state (see the module comment).
    /// `newest(group)`: the sequence number of the group's newest record or mark in the log (0:
    /// none); `flush`: the newest flush mark's.
    pub(in crate::flash) fn scan_sets(
        &mut self,
        newest: &dyn Fn(u64) -> u64,
        flush: u64,
    ) -> Result<SetsScan, RecoveryError> {
        let geo = self.sets.as_deref().expect("the sets index").geo;
        let mut scan = SetsScan { floors: vec![0; geo.sets as usize], killed: Vec::new(), max_seq: 0 };
        let firsts: Vec<u32> = (0..geo.sets).step_by(SCAN_PAGES as usize).collect();
        let len = |first: u32| (geo.sets - first).min(SCAN_PAGES) as usize * PAGE;
        let mut bufs: Vec<AlignedBuf> = (0..SCAN_DEPTH).map(|_| AlignedBuf::new(SCAN_PAGES as usize * PAGE)).collect();
        for group in firsts.chunks(SCAN_DEPTH) {
            let reads: Vec<(u64, usize)> = group.iter().map(|&first| (geo.set_offset(first), len(first))).collect();
            let results = self.sync_batch(IoKind::Read, &reads, &mut bufs);
            for (j, &first) in group.iter().enumerate() {
                let mut buf = std::mem::replace(&mut bufs[j], AlignedBuf::new(0));
                let mut result = results[j];
                // A read that fails is tried alone a few more times.
                for _ in 0..4 {
                    if result.is_ok() {
                        break;
                    }
                    let (back, again) = self.sync_io(IoKind::Read, geo.set_offset(first), buf, len(first));
                    (buf, result) = (back, again);
                }
                if result.is_err() {
                    return Err(RecoveryError::SetsUnreadable { set: first });
                }
                self.scan_chunk(first, &mut buf, newest, flush, &mut scan);
                bufs[j] = buf;
            }
        }
        Ok(scan)
    }

    /// Set pages `first..` (as many as `buf` holds, up to the last set) checked and taken.
    fn scan_chunk(&mut self, first: u32, buf: &mut [u8], newest: &dyn Fn(u64) -> u64, flush: u64, scan: &mut SetsScan) {
        let sets = self.sets.as_deref().expect("the sets index");
        let (geo, floor_seq, floor_epoch) = (sets.geo, sets.floor_seq, sets.floor_epoch);
        let n = (geo.sets - first).min(SCAN_PAGES) as usize;
        for i in 0..n {
            let s = first + i as u32;
            let page = &mut buf[i * PAGE..(i + 1) * PAGE];
            match self.probe_set(s, page) {
                Probe::Foreign => {}
                Probe::Damaged => scan.floors[s as usize] = u64::MAX,
                Probe::Ours { epoch, .. } if epoch < floor_epoch => {}
                Probe::Ours { seq, items_ok, .. } => {
                    scan.floors[s as usize] = seq;
                    scan.max_seq = scan.max_seq.max(seq);
                    if items_ok && seq >= floor_seq && seq > flush {
                        self.take_page(s, page, newest, scan);
                    }
                }
            }
        }
    }

    /// How set `s`'s page in `bytes` probes; a page with a set page's magic that does not check
    /// out is read twice more (a read may flip a bit), and the best read kept in `bytes`.
    fn probe_set(&mut self, s: u32, bytes: &mut [u8]) -> Probe {
        let (partition, seed) = (self.cfg.partition, self.set_seed());
        let rank = |p: Probe| match p {
            Probe::Ours { items_ok: true, .. } => 3,
            Probe::Ours { .. } => 2,
            Probe::Damaged => 1,
            Probe::Foreign => 0,
        };
        let mut probe = page::probe_page(bytes, s, partition, seed);
        if rank(probe) == 3 || bytes[..4] != *b"TKVS" {
            return probe;
        }
        let offset = self.sets.as_deref().expect("the sets index").geo.set_offset(s);
        for _ in 0..2 {
            let (again, result) = self.sync_io(IoKind::Read, offset, AlignedBuf::new(PAGE), PAGE);
            let p = page::probe_page(&again[..PAGE], s, partition, seed);
            if result.is_ok() && rank(p) > rank(probe) {
                probe = p;
                bytes[..PAGE].copy_from_slice(&again[..PAGE]);
            }
            if rank(probe) == 3 {
                break;
            }
        }
        probe
    }

    /// Set `s`'s page (it checked out) answers again: its filter, version and count; its items
    /// a newer record or mark killed are listed.
    fn take_page(&mut self, s: u32, bytes: &[u8], newest: &dyn Fn(u64) -> u64, scan: &mut SetsScan) {
        let (partition, seed) = (self.cfg.partition, self.set_seed());
        let Ok(page) = page::decode_page(bytes, s, partition, seed) else { return };
        let bucket = s / self.sets.as_deref().expect("the sets index").geo.per_bucket;
        let mut fps = Vec::with_capacity(usize::from(page.count));
        for (_, item) in page.iter() {
            let hash = KeyHash::of(item.key);
            fps.push((bucket, hash.tag()));
            if newest(self.group(hash)) > page.seq {
                scan.killed.push(hash);
            }
        }
        let sets = self.sets.as_deref_mut().expect("the sets index");
        sets.written(s, page.seq, &fps);
        sets.stats.recovered_sets += 1;
    }
}

impl FlashStore {
    /// The set a key is bound for.
    pub(in crate::flash) fn set_of_hash(&self, hash: KeyHash) -> u32 {
        self.sets.as_deref().expect("the sets index").set_of(self.fingerprint(hash))
    }

    /// After the log's items are adopted: a tombstone for every page item the scan found
    /// killed that no adopted item shadows (grounded by the records the log still holds).
    pub(in crate::flash) fn bury_killed(&mut self, scan: Option<SetsScan>) {
        let Some(scan) = scan else { return };
        let sets = self.sets.as_deref_mut().expect("the sets index");
        sets.stats.recovered_killed += scan.killed.len() as u64;
        for hash in scan.killed {
            if self.index.find(hash).is_none() {
                self.bury_set(self.fingerprint(hash), 0);
            }
        }
    }
}
