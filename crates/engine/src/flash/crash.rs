//! Crash recovery (Cascade Mapping's recovery from the FIFO order of the segments): after a run
//! that did not close cleanly, the region's segments are read back and the index rebuilt from
//! their records. A segment counts only if its header is intact and carries the file's
//! identity, this partition, its own slot and a sequence number at or above the superblock's
//! watermark (`durable`: a retired segment is below it). Each record's checksum is seeded with
//! its segment's sequence number, so bytes of an earlier segment in the same slot never pass.
//! Of the records of one group (first index bucket and tag) the newest item wins unless a mark
//! of that group, or a flush mark, is newer; expired items are skipped.
//!
//! It blocks (it runs inside `open`) and never trusts what it reads: a bad record is skipped.

use super::errors::RecoveryError;
use std::collections::HashMap;

use super::durable::STREAM_GROUP;
use super::gc::walk_records;
use super::index::Entry;
use super::io::{AlignedBuf, IoKind};
use super::layout::{MarkKind, Record, SegmentHeader, Superblock, ITEM_ALIGN, PAGE};
use super::ring::{Slot, SlotState};
use super::{FlashStore, Now};
use crate::hash::KeyHash;
use crate::time::is_expired;

/// The newest item of a group found so far.
#[derive(Clone, Copy)]
struct Candidate {
    seq: u64,
    hash: KeyHash,
    slot: u32,
    at: usize,
    pages: u32,
    expiry: u32,
    /// An item the sets index keeps in a set (not a large one left in the log).
    small: bool,
}

/// What the scan of every segment found.
#[derive(Default)]
struct Found {
    items: HashMap<u64, Candidate>,
    marks: HashMap<u64, u64>,
    /// The newest stream mark of each cascade-index stream.
    streams: HashMap<u64, u64>,
    flush: u64,
    max_record: u64,
    max_cas: u64,
    /// (slot, seq, bytes up to the last record) of every valid segment.
    segments: Vec<(u32, u64, usize)>,
}

/// Whether a segment's records resume after a record that fails its checks: valid records
/// form a prefix of a segment (a write torn by a crash is its last; a commit pads with zeros to
/// a page), so a valid record anywhere after a bad one (records are `ITEM_ALIGN`-aligned) means
/// damage, not an end. A bit flipped in the middle of a large item must not hide the marks
/// after it.
fn damaged_mid_way(segment: &[u8], seed: u64) -> bool {
    let mut at = super::layout::SEGMENT_HEADER;
    while at + super::layout::ITEM_HEADER <= segment.len() {
        match super::layout::decode_record(&segment[at..], seed) {
            Ok(record) => at += record.bytes(),
            Err(_) => {
                let next = (at + 1).next_multiple_of(PAGE).min(segment.len());
                if segment[at..next].iter().all(|&b| b == 0) {
                    // A commit's padding: the next record starts on a fresh page.
                    at = next;
                    continue;
                }
                return (at + ITEM_ALIGN..segment.len())
                    .step_by(ITEM_ALIGN)
                    .any(|later| super::layout::decode_record(&segment[later..], seed).is_ok());
            }
        }
    }
    false
}

impl FlashStore {
    /// Rebuilds the ring and the index from the segments after a crash; returns the items
    /// adopted. The caller has set the epoch; `now` decides expiry.
    pub(super) fn recover(&mut self, sb: &Superblock, now: Now) -> Result<u64, RecoveryError> {
        let mut found = Found::default();
        let segment = self.layout.segment_bytes as usize;
        let mut buf = AlignedBuf::new(segment);
        for slot in 0..self.layout.slots {
            let offset = self.layout.segment_offset(slot);
            // A read that fails, comes back damaged mid-way, or whose header and last records do
            // not read back the same a second time is tried again: a mark missed (a bit flipped
            // in the last record looks like the end of the segment) could let an older copy
            // come back.
            let mut tries = 0;
            let header = loop {
                tries += 1;
                let (back, result) = self.sync_io(IoKind::Read, offset, buf, segment);
                buf = back;
                let header = SegmentHeader::decode(&buf);
                let clean = result.is_ok()
                    && header.is_none_or(|h| !damaged_mid_way(&buf[..segment], h.seq))
                    && self.reads_back_the_same(offset, &buf[..segment], header.map(|h| h.seq));
                if clean {
                    break header;
                }
                if tries == 5 {
                    return Err(RecoveryError::SegmentDamaged { slot });
                }
            };
            let Some(header) = header.filter(|h| {
                h.identity == self.cfg.identity
                    && h.partition == self.cfg.partition
                    && h.slot == slot
                    && h.seq >= sb.watermark
            }) else {
                continue;
            };
            self.scan_segment(slot, header.seq, &buf[..segment], &mut found);
        }
        let sets = match self.sets.is_some() {
            true => {
                let newest = |group: u64| {
                    let mark = found.marks.get(&group).copied().unwrap_or(0);
                    mark.max(found.items.get(&group).map_or(0, |c| c.seq))
                };
                Some(self.scan_sets(&newest, found.flush)?)
            }
            false => None,
        };
        self.rebuild(found, sets, now)
    }

    /// Handles the finished writes and merges of mapping blocks the rebuild started (with the
    /// cascade index, demotions write tier-2 blocks and merge them); with `all`, until none is
    /// in flight.
    fn pump_mapping_io(&mut self, now: Now, all: bool) {
        let (mut completions, mut unused) = (Vec::new(), Vec::new());
        loop {
            if all && self.io.in_flight() > 0 {
                self.io.flush();
                self.io.wait(&mut completions);
            } else {
                self.io.poll(&mut completions);
            }
            let none = completions.is_empty();
            for c in completions.drain(..) {
                self.complete(c, now, &mut unused);
            }
            if !all || (none && self.io.in_flight() == 0) {
                break;
            }
        }
        debug_assert!(unused.is_empty());
    }

    /// Whether the header page, and everything from the page of the last valid record's end to
    /// the end of the segment, read the same again: the places where damage could pass for an
    /// end (a bit flipped in the last record, however large, must not hide it: a key whose copy
    /// recovery missed would get no mark when it changes, and a later recovery would find the
    /// copy again). Mostly a page or two: a sealed segment's records reach its end.
    fn reads_back_the_same(&mut self, offset: u64, segment: &[u8], seq: Option<u64>) -> bool {
        let mut ranges = vec![(0, PAGE)];
        if let Some(seq) = seq {
            let mut end = 0;
            walk_records(segment, seq, |at, record| end = at + record.bytes());
            let from = (end.saturating_sub(1) / PAGE * PAGE).max(PAGE);
            if from < segment.len() {
                ranges.push((from, segment.len()));
            }
        }
        for (a, b) in ranges {
            let (again, result) = self.sync_io(IoKind::Read, offset + a as u64, AlignedBuf::new(b - a), b - a);
            if result.is_err() || again[..b - a] != segment[a..b] {
                return false;
            }
        }
        true
    }

    fn scan_segment(&self, slot: u32, seq: u64, bytes: &[u8], found: &mut Found) {
        let mut end = 0;
        walk_records(bytes, seq, |at, record| {
            end = at + record.bytes();
            match record {
                Record::Mark { kind: MarkKind::Flush, seq, .. } => {
                    found.flush = found.flush.max(seq);
                    found.max_record = found.max_record.max(seq);
                }
                Record::Mark { kind, group, seq } => {
                    let marks = if kind == MarkKind::Stream { &mut found.streams } else { &mut found.marks };
                    let newest = marks.entry(group & !STREAM_GROUP).or_insert(0);
                    *newest = (*newest).max(seq);
                    found.max_record = found.max_record.max(seq);
                }
                Record::Item(item) => {
                    found.max_record = found.max_record.max(item.seq);
                    found.max_cas = found.max_cas.max(item.meta.cas);
                    let hash = KeyHash::of(item.key);
                    let pages = ((at + item.bytes - 1) / PAGE - at / PAGE + 1) as u32;
                    let small = self.layout.sets.is_some_and(|g| {
                        super::sets::page::set_item_bytes(item.key.len(), item.value.len()) <= g.max_item_bytes as usize
                    });
                    let candidate = Candidate { seq: item.seq, hash, slot, at, pages, expiry: item.meta.expiry, small };
                    let group = self.group(hash);
                    match found.items.get(&group) {
                        Some(older) if older.seq > item.seq => {}
                        _ => {
                            found.items.insert(group, candidate);
                        }
                    }
                }
            }
        });
        found.segments.push((slot, seq, end.next_multiple_of(PAGE)));
    }

    /// Lays the ring out as the valid segments say (oldest to newest, in slot order) and
    /// indexes every item no newer record killed.
    /// With the sets index, `sets` is what their scan found: a small item at or below its
    /// set's floor is not adopted, and page items it found killed get tombstones.
    fn rebuild(&mut self, found: Found, sets: Option<super::sets::SetsScan>, now: Now) -> Result<u64, RecoveryError> {
        if let Some(scan) = &sets {
            self.durable.record_seq = self.durable.record_seq.max(scan.max_seq);
        }
        let Some(&(newest, _, _)) = found.segments.iter().max_by_key(|s| s.1) else {
            self.bury_killed(sets);
            return Ok(0);
        };
        let &(oldest, _, _) = found.segments.iter().min_by_key(|s| s.1).expect("one at least");
        let slots = self.layout.slots;
        self.head = (newest + 1) % slots;
        self.used_slots = (self.head + slots - oldest - 1) % slots + 1;
        for (i, slot) in self.slots.iter_mut().enumerate() {
            let in_ring = (i as u32 + slots - oldest) % slots < self.used_slots;
            // A slot in the ring whose segment never landed: sealed and empty, GC frees it.
            let state = if in_ring { SlotState::Sealed } else { SlotState::Free };
            *slot = Slot { state, ..Slot::EMPTY };
        }
        for &(slot, seq, used) in &found.segments {
            let s = &mut self.slots[slot as usize];
            (s.seq, s.used) = (seq, used as u32);
        }
        self.durable.record_seq = self.durable.record_seq.max(found.max_record);
        self.max_cas = self.max_cas.max(found.max_cas);
        let stream_of = |hash: KeyHash| {
            let c = self.cascade.as_deref()?;
            Some(c.stream_of(self.fingerprint(hash)) as u64)
        };
        let mut adopted: Vec<Candidate> = found
            .items
            .into_iter()
            .filter(|(group, c)| {
                c.seq > found.flush
                    && found.marks.get(group).is_none_or(|&mark| c.seq > mark)
                    && stream_of(c.hash).is_none_or(|s| found.streams.get(&s).is_none_or(|&mark| c.seq > mark))
                    && !is_expired(c.expiry, now.unix)
                    && sets.as_ref().is_none_or(|scan| !c.small || c.seq > scan.floor(self.set_of_hash(c.hash)))
            })
            .map(|(_, c)| c)
            .collect();
        // Oldest first, so a full bucket keeps the newest, as it did before the crash (with the
        // cascade index, tier 1 keeps the newest and the rest is demoted as it was).
        adopted.sort_unstable_by_key(|c| c.seq);
        for (i, c) in adopted.iter().enumerate() {
            let gen = self.slots[c.slot as usize].gen;
            let entry = Entry::new(c.hash.tag(), c.slot, gen, (c.at / ITEM_ALIGN) as u32, c.pages);
            self.t1_insert(c.hash, entry);
            if i % 256 == 255 {
                self.pump_mapping_io(now, false);
            }
        }
        self.pump_mapping_io(now, true);
        self.bury_killed(sets);
        self.stats.recovered_segments = found.segments.len() as u64;
        // What is served back: the records the index kept and (sets index) the set pages' items.
        self.stats.recovered_items = self.stats().items;
        Ok(adopted.len() as u64)
    }
}
