//! The flash tier's DRAM index (Toshiba's bucketized hashing with 2-byte tags): 8 bytes per
//! item, eight to a 64-byte bucket. A key may live in either of two buckets (the second derived
//! from the first and the tag, as in partial-key cuckoo hashing, and the same pair seen from
//! either end: `partner`) and goes to the emptier one, so
//! the table fills to ~90% before buckets overflow instead of ~60% with one choice. A lookup
//! touches two cache lines and a miss costs no flash read unless one of the 16 entries has the
//! same tag (16 in 65536 at worst).
//!
//! Entries (`entry.rs`) sit eight to a bucket as they are, or ten packed (`packing.rs`) in the
//! sets index's log index.
//!
//! A key's two buckets hold at most one entry with its tag: writing a key drops any entry with its
//! tag, so a lookup has one candidate and an older version of a key can never be found again.

pub(super) use super::packing::BUCKET_BYTES;
use super::packing::{Packing, MAX_WAYS};
use crate::hash::KeyHash;

pub(super) use super::entry::{is_tombstone, tombstone, Entry, GENERATIONS, MAX_PAGES, MAX_SLOTS};

pub(super) const WAYS: usize = 8;

const _: () = assert!(std::mem::size_of::<Bucket>() == 64);

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Bucket([u8; BUCKET_BYTES]);

impl Default for Bucket {
    fn default() -> Bucket {
        Bucket([0; BUCKET_BYTES])
    }
}

/// What an insert displaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(super) struct Displaced {
    /// The key's previous entry (or a tag twin's), now gone.
    pub replaced: Option<Entry>,
    /// The bucket the replaced entry sat in.
    pub replaced_bucket: usize,
    /// A valid entry of another key pushed out because the bucket was full.
    pub evicted: Option<Entry>,
    /// The bucket the evicted entry sat in.
    pub evicted_bucket: usize,
}

pub(super) struct FlashIndex {
    buckets: Vec<Bucket>,
    /// The cascade index's tier 1: one bucket per key (a power of two of them, so the bucket is
    /// the hash's top bits) and CLOCK eviction (`clock_insert`).
    clock: bool,
    /// The sets index's log index: one bucket per key (the bucket names the key's run of sets),
    /// eviction by the caller's age.
    one_choice: bool,
    /// Physical (64-byte) buckets per bucket: 1, or more for the sets index's log index, whose
    /// one choice of bucket leaves each bucket's share of a full log to chance: a wider bucket
    /// overflows far less often at the same DRAM (an overflow loses an item).
    span: usize,
    /// How entries sit in a bucket's bytes (packed in the sets index's log index).
    packing: Packing,
    /// Ways per physical bucket (`packing.ways()`).
    ways: usize,
}

/// Physical buckets a bucket spans at most.
pub(super) const MAX_SPAN: usize = 8;
/// Ways a key may sit in at most: its two buckets, or its one bucket of `MAX_SPAN`.
pub(super) const MAX_KEY_WAYS: usize = MAX_SPAN * MAX_WAYS;

/// The physical buckets a key may sit in (`len` of them).
#[derive(Clone, Copy)]
struct Candidates {
    at: [usize; MAX_SPAN],
    len: usize,
}

impl Candidates {
    fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.at[..self.len].iter().copied()
    }
}

impl FlashIndex {
    fn with(physical: usize, clock: bool, one_choice: bool, span: usize, packing: Packing) -> FlashIndex {
        FlashIndex {
            buckets: vec![Bucket::default(); physical.max(1)],
            clock,
            one_choice,
            span,
            packing,
            ways: packing.ways(),
        }
    }

    /// A table of `buckets` buckets (at least one).
    pub(super) fn new(buckets: u32) -> FlashIndex {
        FlashIndex::with(buckets as usize, false, false, 1, Packing::PLAIN)
    }

    /// The sets index's log index: `buckets` one-choice buckets of `span` physical ones each,
    /// entries stored as `packing` says.
    pub(super) fn new_one_choice(buckets: u32, span: usize, packing: Packing) -> FlashIndex {
        assert!((1..=MAX_SPAN).contains(&span));
        FlashIndex::with(buckets.max(1) as usize * span, false, true, span, packing)
    }

    /// The cascade index's tier 1: `buckets` (a power of two) one-choice CLOCK buckets.
    pub(super) fn new_clock(buckets: u32) -> FlashIndex {
        debug_assert!(buckets.is_power_of_two());
        FlashIndex::with(buckets as usize, true, false, 1, Packing::PLAIN)
    }

    /// The stored form of way `w` of physical bucket `b` (0: empty).
    #[inline]
    fn raw(&self, b: usize, w: usize) -> u64 {
        self.packing.load(&self.buckets[b].0, w)
    }

    /// The entry in way `w` of physical bucket `b`, if any.
    #[inline]
    fn at(&self, b: usize, w: usize) -> Option<Entry> {
        let raw = self.raw(b, w);
        (raw != 0).then(|| self.packing.unpack(raw))
    }

    /// Sets way `w` of physical bucket `b` (None: empty).
    #[inline]
    fn put(&mut self, b: usize, w: usize, e: Option<Entry>) {
        let raw = e.map_or(0, |e| self.packing.pack(e));
        self.packing.store(&mut self.buckets[b].0, w, raw);
    }

    /// Empties way `w` of physical bucket `b`, returning its entry.
    fn take(&mut self, b: usize, w: usize) -> Option<Entry> {
        let e = self.at(b, w);
        self.put(b, w, None);
        e
    }

    /// The physical buckets of bucket `b`.
    fn span_of(&self, b: usize) -> std::ops::Range<usize> {
        b * self.span..(b + 1) * self.span
    }

    /// The entries of physical buckets `range`.
    fn entries_in(&self, range: std::ops::Range<usize>) -> impl Iterator<Item = Entry> + '_ {
        range.flat_map(move |p| (0..self.ways).filter_map(move |w| self.at(p, w)))
    }

    /// The entries in bucket `b`.
    pub(super) fn bucket_entries(&self, b: usize) -> impl Iterator<Item = Entry> + '_ {
        self.entries_in(self.span_of(b))
    }

    /// Removes the tombstone (pages 0) with `tag` from bucket `b`, if there is one.
    pub(super) fn remove_tombstone(&mut self, b: usize, tag: u16) -> bool {
        for p in self.span_of(b) {
            let found = (0..self.ways).find(|&w| self.at(p, w).is_some_and(|e| e.tag() == tag && e.pages() == 0));
            if let Some(w) = found {
                self.put(p, w, None);
                return true;
            }
        }
        false
    }

    /// The entry with `tag` in bucket `bucket`, if any (a fingerprint's tier-1 entry).
    pub(super) fn find_fingerprint(&self, bucket: u32, tag: u16) -> Option<Entry> {
        if bucket >= self.buckets() {
            return None;
        }
        self.bucket_entries(bucket as usize).find(|e| e.tag() == tag)
    }

    /// Buckets (of `span` physical ones each).
    pub(super) fn buckets(&self) -> u32 {
        (self.buckets.len() / self.span) as u32
    }

    pub(super) fn heap_bytes(&self) -> usize {
        self.buckets.capacity() * std::mem::size_of::<Bucket>()
    }

    pub(super) fn bucket_of(&self, hash: KeyHash) -> usize {
        ((((hash.0 >> 16) & 0xFFFF_FFFF) * u64::from(self.buckets())) >> 32) as usize
    }

    /// The physical buckets the key may sit in: its two (the full index), or its one bucket's.
    fn candidates(&self, hash: KeyHash) -> Candidates {
        let n = self.buckets.len();
        let first = self.bucket_of(hash);
        let mut c = Candidates { at: [first; MAX_SPAN], len: 1 };
        if self.one_choice {
            for (i, at) in self.span_of(first).enumerate() {
                c.at[i] = at;
            }
            c.len = self.span;
        } else if n > 1 && !self.clock {
            c.at[1] = partner(first, hash.tag(), n);
            c.len = if c.at[1] == first { 1 } else { 2 };
        }
        c
    }

    /// Starts loading the key's buckets (one line each): a lookup soon after finds them in
    /// cache instead of missing twice in a table far larger than the caches.
    #[inline]
    pub(super) fn prefetch(&self, hash: KeyHash) {
        for b in self.candidates(hash).iter() {
            crate::region::prefetch(&self.buckets[b]);
        }
    }

    /// (physical bucket, way) of the entry with this key's tag.
    fn position(&self, hash: KeyHash) -> Option<(usize, usize)> {
        let tag = hash.tag();
        debug_assert_ne!(tag, 0, "an empty way's tag reads 0");
        self.candidates(hash).iter().find_map(|b| {
            let bucket = &self.buckets[b].0;
            (0..self.ways).find(|&w| self.packing.tag_at(bucket, w) == tag).map(|w| (b, w))
        })
    }

    /// The entry with this key's tag, if any.
    pub(super) fn find(&self, hash: KeyHash) -> Option<Entry> {
        self.position(hash).and_then(|(b, w)| self.at(b, w))
    }

    /// Removes and returns the entry with this key's tag.
    pub(super) fn remove(&mut self, hash: KeyHash) -> Option<Entry> {
        self.remove_at(hash).map(|(_, e)| e)
    }

    /// `remove`, with the bucket the entry sat in.
    pub(super) fn remove_at(&mut self, hash: KeyHash) -> Option<(usize, Entry)> {
        let (b, w) = self.position(hash)?;
        self.take(b, w).map(|e| (b / self.span, e))
    }

    /// Empty ways of physical bucket `b`.
    fn empties(&self, b: usize) -> usize {
        (0..self.ways).filter(|&w| self.raw(b, w) == 0).count()
    }

    /// Whether an insert for this key would push nobody out: it has an entry to replace, or
    /// one of its buckets an empty way.
    pub(super) fn has_room(&self, hash: KeyHash) -> bool {
        self.candidates(hash).iter().any(|b| self.empties(b) > 0) || self.position(hash).is_some()
    }

    /// The groups (first bucket and tag, as `FlashStore::group`) an entry with `tag` found in
    /// bucket `b` may belong to: `b` is its key's first bucket or its second.
    pub(super) fn groups_of(&self, b: usize, tag: u16) -> [u64; 2] {
        let n = self.buckets() as usize;
        let first_if_second = if n == 1 || self.clock || self.one_choice { b } else { partner(b, tag, n) };
        [(b as u64) << 16 | u64::from(tag), (first_if_second as u64) << 16 | u64::from(tag)]
    }

    /// Puts `entry` in the emptiest of the key's buckets, dropping its tag's previous entry.
    /// With all full it reuses a way whose entry `valid` rejects, else evicts the one `age`
    /// ranks oldest.
    pub(super) fn insert(
        &mut self,
        hash: KeyHash,
        entry: Entry,
        valid: impl Fn(Entry) -> bool,
        age: impl Fn(Entry) -> u64,
    ) -> Displaced {
        debug_assert_eq!(entry.tag(), hash.tag());
        let removed = self.remove_at(hash);
        let mut displaced = Displaced {
            replaced: removed.map(|(_, e)| e),
            replaced_bucket: removed.map_or(0, |(b, _)| b),
            ..Displaced::default()
        };
        if self.clock {
            displaced.evicted_bucket = self.bucket_of(hash);
            displaced.evicted = self.clock_insert(self.bucket_of(hash), entry);
            return displaced;
        }
        let candidates = self.candidates(hash);
        // The emptiest; the first of equals (the key's first bucket, for the full index).
        let b = candidates.iter().min_by_key(|&b| self.ways - self.empties(b)).expect("a bucket");
        let spot = if self.empties(b) > 0 {
            (b, (0..self.ways).find(|&w| self.raw(b, w) == 0).expect("an empty way"))
        } else {
            let mut ways = [(0usize, 0usize); MAX_KEY_WAYS];
            let n = candidates.len * self.ways;
            for (i, way) in ways[..n].iter_mut().enumerate() {
                *way = (candidates.at[i / self.ways], i % self.ways);
            }
            let ways = &ways[..n];
            let entry_of = |(b, w): (usize, usize)| self.at(b, w).expect("a full bucket");
            match ways.iter().copied().find(|&spot| !valid(entry_of(spot))) {
                Some(spot) => spot,
                None => {
                    let oldest = ways.iter().copied().min_by_key(|&spot| age(entry_of(spot))).expect("ways");
                    displaced.evicted = Some(entry_of(oldest));
                    displaced.evicted_bucket = oldest.0 / self.span;
                    oldest
                }
            }
        };
        self.put(spot.0, spot.1, Some(entry));
        displaced
    }

    /// CLOCK in one bucket whose ways are kept in insertion order: an empty way takes `entry`;
    /// else the hand passes over the front, moving each entry with its reference (hit) bit to
    /// the back with the bit cleared, and evicts the first without; `entry` goes to the back.
    fn clock_insert(&mut self, b: usize, entry: Entry) -> Option<Entry> {
        debug_assert!(!self.packing.packed());
        let mut ways = [0u64; WAYS];
        for (w, way) in ways.iter_mut().enumerate() {
            *way = self.raw(b, w);
        }
        let victim = clock_step(&mut ways, entry);
        for (w, &way) in ways.iter().enumerate() {
            self.packing.store(&mut self.buckets[b].0, w, way);
        }
        victim
    }

    /// Replaces `old` with `new` if the key's entry is still `old` (same place); false otherwise.
    pub(super) fn replace_if(&mut self, hash: KeyHash, old: Entry, new: Entry) -> bool {
        match self.position(hash) {
            Some((b, w)) if self.at(b, w).is_some_and(|e| e.same_place(old)) => {
                self.put(b, w, Some(new));
                true
            }
            _ => false,
        }
    }

    /// Clears every entry `valid` rejects in buckets `from..to` (clamped); returns how many.
    pub(super) fn sweep(&mut self, from: usize, to: usize, valid: impl Fn(Entry) -> bool) -> usize {
        let mut out = Vec::new();
        self.sweep_into(from, to, valid, &mut out, false)
    }

    /// `sweep`, collecting what it cleared as (bucket, entry).
    pub(super) fn sweep_collect(
        &mut self,
        from: usize,
        to: usize,
        valid: impl Fn(Entry) -> bool,
        out: &mut Vec<(usize, Entry)>,
    ) -> usize {
        self.sweep_into(from, to, valid, out, true)
    }

    fn sweep_into(
        &mut self,
        from: usize,
        to: usize,
        valid: impl Fn(Entry) -> bool,
        out: &mut Vec<(usize, Entry)>,
        collect: bool,
    ) -> usize {
        let (span, to) = (self.span, to.min(self.buckets() as usize) * self.span);
        let mut cleared = 0;
        for p in (from * span).min(to)..to {
            for w in 0..self.ways {
                match self.at(p, w) {
                    Some(e) if !valid(e) => {
                        self.put(p, w, None);
                        cleared += 1;
                        if collect {
                            out.push((p / span, e));
                        }
                    }
                    _ => {}
                }
            }
        }
        cleared
    }

    /// Empties the table.
    pub(super) fn clear(&mut self) {
        self.buckets.fill(Bucket::default());
    }

    /// Physical bucket `bucket` as stored (the snapshot's unit: `layout.buckets` counts
    /// physical buckets); unpacked, its ways are little-endian entries.
    pub(super) fn bucket_bytes(&self, bucket: usize, out: &mut [u8]) {
        out[..BUCKET_BYTES].copy_from_slice(&self.buckets[bucket].0);
    }

    /// Loads physical bucket `bucket` from `bytes` (the snapshot's form).
    pub(super) fn load_bucket(&mut self, bucket: usize, bytes: &[u8]) {
        self.buckets[bucket].0.copy_from_slice(&bytes[..BUCKET_BYTES]);
    }

    /// Every non-empty entry (tests and the snapshot's accounting).
    pub(super) fn entries(&self) -> impl Iterator<Item = Entry> + '_ {
        self.entries_in(0..self.buckets.len())
    }
}

/// The other bucket of a key whose first bucket is `b` (the full index, `n` buckets): `s - b`
/// modulo `n` for a shift `s` drawn from the tag. It is its own inverse, so the pair of buckets
/// is the same from either end: two keys with one tag have the same pair or pairs that do not
/// meet, and a tag match in a key's buckets is its own entry or a twin's (same tag, same pair),
/// never that of a key whose pair merely overlaps (with the former `b + step`, a neighbour's
/// entry in the shared bucket hid the key's own entry in its other bucket).
fn partner(b: usize, tag: u16, n: usize) -> usize {
    let shift = (u64::from(tag).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize % n;
    (shift + n - b) % n
}

/// One CLOCK insert into a full-width bucket's ways (see `FlashIndex::clock_insert`).
fn clock_step(ways: &mut [u64; WAYS], entry: Entry) -> Option<Entry> {
    if let Some(w) = ways.iter().position(|&e| e == 0) {
        ways[w] = entry.0;
        return None;
    }
    for _ in 0..WAYS {
        let front = Entry(ways[0]);
        if !front.hit() {
            break;
        }
        ways.rotate_left(1);
        ways[WAYS - 1] = front.without_hit().0;
    }
    let victim = Entry(ways[0]);
    ways.rotate_left(1);
    ways[WAYS - 1] = entry.0;
    Some(victim)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(bucket_bits: u64, tag: u16) -> KeyHash {
        KeyHash(bucket_bits << 16 | u64::from(tag))
    }

    /// A hash whose first bucket of `n` is `b`.
    fn in_bucket(b: usize, tag: u16, n: usize) -> KeyHash {
        hash(((b as u64) << 32).div_ceil(n as u64), tag)
    }

    #[test]
    fn pairs_are_the_same_from_either_end() {
        for n in [2, 3, 1000, 1 << 12] {
            for tag in (1..=u16::MAX).step_by(97) {
                for b in 0..n {
                    assert_eq!(partner(partner(b, tag, n), tag, n), b, "n {n} tag {tag} bucket {b}");
                }
            }
        }
    }

    #[test]
    fn keys_of_other_pairs_with_the_same_tag_never_hide_or_replace_a_key() {
        let n = 1000;
        let mut index = FlashIndex::new(n as u32);
        let first = 17;
        // The key's first bucket is full, so it goes to its second.
        for t in 100..108u16 {
            index.insert(in_bucket(first, t, n), Entry::new(t, u32::from(t), 0, 0, 1), |_| true, |_| 0);
        }
        let key = in_bucket(first, 7, n);
        assert_eq!(index.bucket_of(key), first);
        let entry = Entry::new(7, 1, 0, 0, 1);
        assert_eq!(index.insert(key, entry, |_| true, |_| 0), Displaced::default());
        // A key with the same tag in every other bucket: none may take or shadow the key's entry
        // (with a second bucket of first + step, the key whose first bucket was the key's second
        // replaced it).
        // (One key per pair: keys whose first buckets are each other's second are twins.)
        let second = partner(first, 7, n);
        let others = move || (0..n).filter(move |&b| b != first && b != second && b <= partner(b, 7, n));
        for b in others() {
            let other = Entry::new(7, 2 + b as u32, 0, 0, 1);
            let d = index.insert(in_bucket(b, 7, n), other, |_| true, |_| 0);
            assert_eq!(d.replaced, None, "first bucket {b}: {d:?}");
            assert_eq!(index.find(key), Some(entry), "after first bucket {b}");
        }
        for b in others() {
            assert_eq!(index.find(in_bucket(b, 7, n)).map(|e| e.slot()), Some(2 + b as u32));
        }
    }

    #[test]
    fn one_entry_per_tag_and_full_buckets_evict_the_oldest() {
        let mut index = FlashIndex::new(1);
        let h = |t| hash(5, t);
        for t in 1..=8u16 {
            let d = index.insert(h(t), Entry::new(t, u32::from(t), 0, 0, 1), |_| true, |e| u64::from(e.slot()));
            assert_eq!(d, Displaced::default());
        }
        let d = index.insert(h(3), Entry::new(3, 30, 0, 0, 1), |_| true, |e| u64::from(e.slot()));
        assert_eq!(d.replaced.map(|e| e.slot()), Some(3));
        assert_eq!(index.find(h(3)).map(|e| e.slot()), Some(30));
        let d = index.insert(h(9), Entry::new(9, 90, 0, 0, 1), |_| true, |e| u64::from(e.slot()));
        assert_eq!(d.evicted.map(|e| e.slot()), Some(1), "slot 1 is the oldest");
        assert_eq!(index.find(h(1)), None);
        let d = index.insert(h(10), Entry::new(10, 100, 0, 0, 1), |e| e.slot() != 5, |e| u64::from(e.slot()));
        assert_eq!(d.evicted, None, "an invalid entry's way is reused before evicting");
        assert_eq!(index.entries().count(), 8);
    }

    #[test]
    fn a_wide_one_choice_bucket_fills_all_its_ways_before_evicting_the_oldest() {
        for packing in [Packing::PLAIN, Packing::for_log(410, 1 << 20)] {
            wide_bucket(packing);
        }
    }

    fn wide_bucket(packing: Packing) {
        let mut index = FlashIndex::new_one_choice(3, 4, packing);
        let all = 4 * packing.ways() as u16;
        assert_eq!((index.buckets(), index.heap_bytes()), (3, 12 * BUCKET_BYTES));
        // Bucket 1 of 3: the hash's top 32 bits in the middle third.
        let h = |t| hash(0x8000_0000, t);
        let b = index.bucket_of(h(1));
        assert_eq!(b, 1);
        let age = |e: Entry| u64::from(e.slot());
        for t in 1..=all {
            assert!(index.has_room(h(t)));
            let d = index.insert(h(t), Entry::new(t, u32::from(t), 0, 0, 1), |_| true, age);
            assert_eq!(d, Displaced::default(), "way {t} of {all} is free");
        }
        assert_eq!(index.bucket_entries(b).count(), usize::from(all));
        assert_eq!((index.bucket_entries(0).count(), index.bucket_entries(2).count()), (0, 0));
        assert!(!index.has_room(h(100)) && index.has_room(h(7)), "full, but a key's own entry is replaced");
        let d = index.insert(h(100), Entry::new(100, 100, 0, 0, 1), |_| true, age);
        assert_eq!((d.evicted.map(|e| e.tag()), d.evicted_bucket), (Some(1), 1), "the oldest of all ways");
        assert!(index.find(h(100)).is_some() && index.find(h(1)).is_none());
        // A tombstone in the last physical bucket is found from the bucket's number.
        index.insert(h(101), tombstone(101), |_| true, age);
        assert!(index.remove_tombstone(b, 101) && !index.remove_tombstone(b, 101));
        // Sweeps count in buckets and report them.
        let mut out = Vec::new();
        let kept = |e: Entry| e.slot() > u32::from(all) - 2;
        assert_eq!(index.sweep_collect(1, 2, kept, &mut out), usize::from(all) - 4, "3..={} (2 made way)", all - 2);
        assert!(out.iter().all(|&(bucket, _)| bucket == 1));
        assert_eq!(index.sweep(0, 1, |_| false), 0, "bucket 0 is empty");
        assert_eq!(index.sweep(2, 9, |_| false), 0);
        assert_eq!(index.bucket_entries(b).count(), 3);
        // The snapshot's bytes round-trip.
        let mut copy = FlashIndex::new_one_choice(3, 4, packing);
        let mut bytes = [0u8; BUCKET_BYTES];
        for p in 0..12 {
            index.bucket_bytes(p, &mut bytes);
            copy.load_bucket(p, &bytes);
        }
        assert_eq!(copy.entries().collect::<Vec<_>>(), index.entries().collect::<Vec<_>>());
    }

    #[test]
    fn clock_evicts_the_oldest_entry_not_read_since_the_hand_passed() {
        let mut index = FlashIndex::new_clock(1);
        let h = |t| hash(0, t);
        for t in 1..=8u16 {
            let d = index.insert(h(t), Entry::new(t, u32::from(t), 0, 0, 1), |_| true, |_| 0);
            assert_eq!(d.evicted, None);
        }
        // 1 and 3 are read: the hand passes them (clearing their bits) and takes 2.
        for t in [1, 3] {
            let e = index.find(h(t)).unwrap();
            assert!(index.replace_if(h(t), e, e.with_hit()));
        }
        let d = index.insert(h(9), Entry::new(9, 9, 0, 0, 1), |_| true, |_| 0);
        assert_eq!(d.evicted.map(|e| e.tag()), Some(2));
        assert!(!index.find(h(1)).unwrap().hit(), "the hand cleared it");
        // Then 4..8 in insertion order, then 1 (moved behind them), while nobody reads.
        let order: Vec<u16> = (10..17u16)
            .map(|t| index.insert(h(t), Entry::new(t, u32::from(t), 0, 0, 1), |_| true, |_| 0).evicted.unwrap().tag())
            .collect();
        // 3 kept its bit until the hand reached it, behind 9.
        assert_eq!(order, vec![4, 5, 6, 7, 8, 1, 9]);
        // A bucket where every entry was read: a full round, then the oldest goes.
        for t in (10..17u16).chain([3]) {
            let e = index.find(h(t)).unwrap();
            index.replace_if(h(t), e, e.with_hit());
        }
        assert_eq!(index.insert(h(20), Entry::new(20, 20, 0, 0, 1), |_| true, |_| 0).evicted.map(|e| e.tag()), Some(3));
    }

    #[test]
    fn replace_if_and_sweep_and_snapshot_bytes() {
        let mut index = FlashIndex::new(4);
        let h = hash(0xABCD, 77);
        let e = Entry::new(77, 2, 1, 10, 1);
        index.insert(h, e, |_| true, |_| 0);
        assert!(!index.replace_if(h, Entry::new(77, 2, 0, 10, 1), e.with_hit()));
        assert!(index.replace_if(h, e, e.with_hit()));
        assert!(index.find(h).unwrap().hit());
        let mut bytes = [0u8; BUCKET_BYTES];
        let b = index.bucket_of(h);
        index.bucket_bytes(b, &mut bytes);
        let mut copy = FlashIndex::new(4);
        copy.load_bucket(b, &bytes);
        assert_eq!(copy.find(h), index.find(h));
        assert_eq!(index.sweep(0, 99, |e| e.gen() != 1), 1);
        assert_eq!(index.find(h), None);
    }
}
