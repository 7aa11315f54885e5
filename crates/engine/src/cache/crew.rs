//! Concurrent reads of a cache partition from other threads (MICA's CREW: concurrent read,
//! exclusive write). The owner stays the only writer; a `CrewReader` on any thread reads a key
//! with no message to the owner and no lock, optimistically:
//!
//! 1. It takes a consistent snapshot of the log's geometry (tail, lap bounds, flush floor),
//!    which the owner publishes under a sequence lock before it writes any byte the new
//!    geometry gives up (`Published::publish`, then a Release fence).
//! 2. It loads the key's index entries (the owner stores them with Release after the item's
//!    bytes), maps the entry to a ring position and copies the item with atomic loads.
//! 3. It validates the copy: the geometry read again still holds the item's position intact
//!    (so the tail has not overwritten it), and no in-place change (a state bit, `touch`'s
//!    expiry) ran meanwhile (`in_place` is even and unchanged). Only then is the copy decoded
//!    and compared with the key.
//!
//! A hit on an item not yet fetched is served too, and the fetched bit is handed to the owner
//! as a notice (`Published::notice_fetched`), which the owner applies before it next executes
//! anything (`Partition::apply_crew_notices`), so no later request sees the bit unset.
//!
//! What needs the owner is left to it (`CrewGet::Owner`): an item stale or with a token out
//! (meta state), expired (the owner drops it), old enough to be copied forward, a miss when a
//! flash tier may hold the key, a key whose tag another entry of its pair shares or whose pair
//! has an overflow chain (the owner compares every candidate), a full notice queue, an item larger than `MAX_CREW_COPY`, and
//! a reader that keeps losing the race.
//! A reply is built only from a validated copy, never from the log.
//!
//! This module must not write partition memory.

use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::cache::index::{entry_offset, entry_tag, is_link, Index, ENTRIES_PER_BUCKET, LINK_SLOT, OFFSET_MASK};
use crate::hash::KeyHash;
use crate::item::{self, ItemHeader};
use crate::region::SharedBytes;
use crate::time::is_expired;

/// The log's geometry as a reader needs it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub(crate) tail: u64,
    pub(crate) lap_start: u64,
    pub(crate) prev_lap_len: u64,
    pub(crate) live_span: u64,
    pub(crate) floor: u64,
    pub(crate) reappend_age: u64,
}

impl Geometry {
    /// The position of the item an entry with these low 48 bits names, if it is live.
    fn position(&self, offset48: u64) -> Option<u64> {
        let age = self.tail.wrapping_sub(offset48) & OFFSET_MASK;
        (age <= self.live_span.min(self.tail - self.floor)).then(|| self.tail - age)
    }

    /// Whether an entry with these low 48 bits names an item below the flush floor whose bytes
    /// are still intact.
    fn hides_flushed(&self, offset48: u64) -> bool {
        let age = self.tail.wrapping_sub(offset48) & OFFSET_MASK;
        age > self.tail - self.floor && age <= self.live_span
    }

    /// True while the bytes at `position` are intact and not flushed.
    fn holds(&self, position: u64) -> bool {
        position >= self.floor && position <= self.tail && self.tail - position <= self.live_span
    }

    fn ring_index(&self, position: u64) -> usize {
        if position >= self.lap_start {
            (position - self.lap_start) as usize
        } else {
            (position + self.prev_lap_len - self.lap_start) as usize
        }
    }
}

/// Fetched-bit notices a partition holds at most (16 bytes each); a reader that finds the queue
/// full leaves its read to the owner.
pub(crate) const MAX_NOTICES: usize = 4096;

/// What the owner publishes for readers: the geometry under a sequence lock, a sequence number
/// around in-place changes, and whether a flash tier may hold keys DRAM does not. Readers hand
/// back fetched-bit notices: (key hash, item position).
pub(crate) struct Published {
    seq: AtomicU64,
    fields: [AtomicU64; 6],
    in_place: AtomicU64,
    flash: AtomicBool,
    notices: Mutex<Vec<(u64, u64)>>,
    noticed: AtomicUsize,
}

impl Default for Published {
    fn default() -> Published {
        Published {
            seq: AtomicU64::new(0),
            fields: Default::default(),
            in_place: AtomicU64::new(0),
            flash: AtomicBool::new(false),
            notices: Mutex::new(Vec::with_capacity(MAX_NOTICES)),
            noticed: AtomicUsize::new(0),
        }
    }
}

impl Published {
    /// A reader served a hit on the unfetched item at `position`: the owner sets its fetched
    /// bit. False if the queue is full (the read must go to the owner instead).
    fn notice_fetched(&self, hash: u64, position: u64) -> bool {
        let Ok(mut notices) = self.notices.lock() else { return false };
        if notices.len() >= MAX_NOTICES {
            return false;
        }
        notices.push((hash, position));
        self.noticed.store(notices.len(), Ordering::Release);
        true
    }

    /// The owner takes the notices (swapped with `into`, which must be empty and hold
    /// `MAX_NOTICES`, so nothing allocates). One atomic load when there are none.
    pub(crate) fn take_notices(&self, into: &mut Vec<(u64, u64)>) {
        if self.noticed.load(Ordering::Acquire) == 0 {
            return;
        }
        if let Ok(mut notices) = self.notices.lock() {
            std::mem::swap(&mut *notices, into);
            self.noticed.store(0, Ordering::Release);
        }
    }

    /// The owner's new geometry. Called after the log's fields change and before any byte the
    /// change gives up is written: the closing Release fence orders these stores before the
    /// owner's later writes, so a reader that copied an overwritten byte sees this geometry.
    pub(crate) fn publish(&self, g: &Geometry) {
        let seq = self.seq.load(Ordering::Relaxed);
        self.seq.store(seq + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        let values = [g.tail, g.lap_start, g.prev_lap_len, g.live_span, g.floor, g.reappend_age];
        for (field, value) in self.fields.iter().zip(values) {
            field.store(value, Ordering::Relaxed);
        }
        self.seq.store(seq + 2, Ordering::Release);
        fence(Ordering::Release);
    }

    /// A consistent snapshot of the geometry, or None if the owner stays mid-publish (a
    /// handful of stores, unless it lost its CPU there) for `GEOMETRY_LOOKS` looks: the reader
    /// then leaves its read to the owner instead of spinning through the owner's absence.
    pub(crate) fn geometry(&self) -> Option<Geometry> {
        for _ in 0..GEOMETRY_LOOKS {
            let before = self.seq.load(Ordering::Acquire);
            if before % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let v: [u64; 6] = std::array::from_fn(|i| self.fields[i].load(Ordering::Relaxed));
            fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == before {
                let [tail, lap_start, prev_lap_len, live_span, floor, reappend_age] = v;
                return Some(Geometry { tail, lap_start, prev_lap_len, live_span, floor, reappend_age });
            }
        }
        None
    }

    /// Test hook: the owner stopped half-way through a publish (as when it loses its CPU
    /// there): the sequence stays odd until `resume_publish`.
    #[cfg(test)]
    pub(crate) fn stall_publish(&self) {
        self.seq.fetch_add(1, Ordering::AcqRel);
    }

    #[cfg(test)]
    pub(crate) fn resume_publish(&self) {
        self.seq.fetch_add(1, Ordering::AcqRel);
    }

    /// Brackets an in-place change of an item's bytes (`end_in_place` after it).
    pub(crate) fn begin_in_place(&self) {
        let seq = self.in_place.load(Ordering::Relaxed);
        self.in_place.store(seq + 1, Ordering::Relaxed);
        fence(Ordering::Release);
    }

    pub(crate) fn end_in_place(&self) {
        let seq = self.in_place.load(Ordering::Relaxed);
        self.in_place.store(seq + 1, Ordering::Release);
    }

    pub(crate) fn set_flash(&self, on: bool) {
        self.flash.store(on, Ordering::Release);
    }
}

/// The answer of a concurrent read.
#[derive(Debug, PartialEq, Eq)]
pub enum CrewGet {
    /// The value was copied to the caller's buffer.
    Hit {
        /// memcached's client flags.
        flags: u32,
        /// The item's CAS.
        cas: u64,
    },
    /// No such key (or it expired).
    Miss,
    /// Only the owner can answer (see the module comment).
    Owner,
}

/// Tries before a read that keeps meeting the owner's writes goes to the owner.
const TRIES: usize = 4;
/// Looks at the geometry's sequence lock before a reader gives up on it (a publish is a
/// handful of stores; an owner descheduled mid-publish is away for a scheduler slice).
pub(crate) const GEOMETRY_LOOKS: usize = 256;
/// Bytes copied to decode a header (the longest is 22).
const HEADER_COPY: usize = 24;
/// The largest item a reader copies (header, key and value). A larger one is left to the owner
/// (or, with `--concurrency crcw`, read under the owner's lock): its word-by-word atomic copy,
/// made before the reply's own copy, would cost more than the owner's one plain copy saves, and
/// a worker busy copying large values for one client would hold up its others.
pub(crate) const MAX_CREW_COPY: usize = 16 << 10;

/// A partition's read-only view for other threads (clone one per thread).
#[derive(Clone)]
pub struct CrewReader {
    published: Arc<Published>,
    index: SharedBytes,
    ring: SharedBytes,
    buckets: usize,
    max_item_bytes: usize,
}

impl CrewReader {
    pub(crate) fn new(
        published: Arc<Published>,
        index: SharedBytes,
        ring: SharedBytes,
        buckets: usize,
        max_item_bytes: usize,
    ) -> CrewReader {
        CrewReader { published, index, ring, buckets, max_item_bytes }
    }

    /// Reads `key` (whose hash is `hash`) as of `now` (Unix seconds). On a hit the value is in
    /// `value` (replaced).
    pub fn get(&self, key: &[u8], hash: KeyHash, now: u32, value: &mut Vec<u8>) -> CrewGet {
        for _ in 0..TRIES {
            match self.try_get(key, hash, now, value) {
                Some(answer) => return answer,
                None => std::hint::spin_loop(),
            }
        }
        CrewGet::Owner
    }

    /// One optimistic try; None if the owner's writes got in the way.
    fn try_get(&self, key: &[u8], hash: KeyHash, now: u32, value: &mut Vec<u8>) -> Option<CrewGet> {
        let in_place = self.published.in_place.load(Ordering::Acquire);
        if in_place % 2 == 1 {
            return None;
        }
        let Some((entry, others)) = self.candidate(hash) else { return Some(self.absent()) };
        if others {
            // A tag twin or an overflow chain: the owner compares every candidate.
            return Some(CrewGet::Owner);
        }
        // After the entry: the geometry the owner published before writing the entry's item.
        let g = self.published.geometry()?;
        let position = g.position(entry_offset(entry));
        let Some(position) = position else {
            // An item flush_all hid but the log still holds: the owner counts it (get_flushed).
            return Some(if g.hides_flushed(entry_offset(entry)) { CrewGet::Owner } else { self.absent() });
        };
        let at = g.ring_index(position);
        let mut head = [0u8; HEADER_COPY];
        let head_len = HEADER_COPY.min(self.ring.len().saturating_sub(at));
        self.ring.copy_to(at, &mut head[..head_len]);
        let key_len = usize::from(head[1]);
        if key_len != key.len() {
            return self.validated(position, in_place).then(|| self.absent());
        }
        let (header, header_len) = ItemHeader::decode_unchecked(&head);
        let total = header_len + header.key_len + header.value_len;
        if total > self.max_item_bytes + HEADER_COPY || at + total > self.ring.len() {
            // Torn bytes (the item was overwritten as we read): validation will fail.
            return self.validated(position, in_place).then_some(CrewGet::Owner);
        }
        if total > MAX_CREW_COPY {
            return Some(CrewGet::Owner);
        }
        value.clear();
        value.resize(total, 0);
        self.ring.copy_to(at, value);
        if !self.validated(position, in_place) {
            return None;
        }
        // The copy is what the owner wrote and had not changed while we read it.
        let (header, header_len) = ItemHeader::decode(value);
        if header.key_len != key.len() || &value[header_len..header_len + key.len()] != key {
            return Some(self.absent());
        }
        let needs_owner = header.state & (item::STALE | item::TOKEN_SENT) != 0
            || is_expired(header.expiry, now)
            || g.tail - position > g.reappend_age;
        if needs_owner || (header.state & item::FETCHED == 0 && !self.published.notice_fetched(hash.0, position)) {
            return Some(CrewGet::Owner);
        }
        value.drain(..header_len + header.key_len);
        Some(CrewGet::Hit { flags: header.flags, cas: header.cas.unwrap_or(position + 1) })
    }

    /// The first entry in the key's pair whose tag matches, and whether the key could be
    /// elsewhere too (another entry with its tag, or an overflow chain); None if it cannot be
    /// in the index at all.
    fn candidate(&self, hash: KeyHash) -> Option<(u64, bool)> {
        let tag = hash.tag();
        let home = hash.bucket(self.buckets);
        let mut first = None;
        for bucket in Index::pair_order(home) {
            for entry_no in 0..ENTRIES_PER_BUCKET {
                let entry = self.index.load_u64((bucket * ENTRIES_PER_BUCKET + entry_no) * 8);
                if entry_tag(entry) == tag {
                    if first.is_some() {
                        return Some((entry, true));
                    }
                    first = Some(entry);
                }
            }
        }
        let link = self.index.load_u64(((home | 1) * ENTRIES_PER_BUCKET + LINK_SLOT) * 8);
        match first {
            Some(entry) => Some((entry, is_link(link))),
            None if is_link(link) => Some((0, true)),
            None => None,
        }
    }

    /// No live entry for the key: a miss, unless a flash tier may hold it.
    fn absent(&self) -> CrewGet {
        if self.published.flash.load(Ordering::Acquire) {
            CrewGet::Owner
        } else {
            CrewGet::Miss
        }
    }

    /// True if the item at `position` was intact and unchanged for the whole copy.
    fn validated(&self, position: u64, in_place: u64) -> bool {
        fence(Ordering::Acquire);
        let Some(now) = self.published.geometry() else { return false };
        now.holds(position) && self.published.in_place.load(Ordering::Relaxed) == in_place
    }
}
