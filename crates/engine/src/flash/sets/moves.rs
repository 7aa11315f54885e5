//! Moving log items into their sets when the ring reclaims its oldest segment (Kangaroo's
//! threshold admission). For each set the segment's current small items are bound for, the
//! one-choice bucket walk counts every log item bound for it; at `threshold` or more they all go
//! in one page write: the set's page and the log items outside the segment are read, merged with
//! RRIP (`page::merge`), written, and their log entries dropped. The segment is retired when
//! its moves are done; until then it stays readable and the ring takes no new segment past it.
//!
//! Changes made while a move is in flight win: an item whose log entry changed is not dropped
//! from the log, a tombstone put down meanwhile is kept, and a set voided meanwhile stays void.

use std::collections::{HashMap, VecDeque};

use super::super::gc::walk_items;
use super::super::index::{is_tombstone, Entry};
use super::super::io::{AlignedBuf, Completion, IoKind, IoOp};
use super::super::layout::{decode_item, ITEM_ALIGN, PAGE};
use super::super::ring::SlotState;
use super::super::{FlashStore, Now, TOKEN_MOVE};
use super::page::{self, set_item_bytes, SetItem, RRPV_INSERT};
use crate::hash::KeyHash;
use crate::time::is_expired;

/// Token sub-numbers of a move's set page read and write (below: the index of a log item read).
const SUB_PAGE: u64 = 0xFFFF;
const SUB_WRITE: u64 = 0xFFFE;

/// An item on its way from the log into its set.
pub(super) struct Moving {
    hash: KeyHash,
    entry: Entry,
    item: SetItem,
}

/// One set's move.
pub(super) struct Move {
    set: u32,
    incoming: Vec<Moving>,
    /// Log entries of the set outside the reclaimed segment, to be read.
    others: Vec<Entry>,
    page: Option<AlignedBuf>,
    page_ok: bool,
    waiting: u32,
    /// After the merge: the page's fingerprints, the tombstones it applied, its sequence, RRIP
    /// evictions.
    fps: Vec<(u32, u16)>,
    applied: Vec<u16>,
    seq: u64,
    evicted: u32,
}

/// What happened to a set since its move in flight merged (one move of a set runs at a time).
#[derive(Default)]
struct Mark {
    /// Tags buried meanwhile.
    touched: Vec<u16>,
    /// Voided meanwhile: the page written holds what was merged before.
    voided: bool,
    /// Moves of the set queued or in flight.
    moves: u32,
}

/// The moves of the segment being reclaimed.
pub(in super::super) struct Moves {
    slots: Vec<Option<Move>>,
    queue: VecDeque<Move>,
    marks: HashMap<u32, Mark>,
    /// A reclaimed segment waits for these moves before it is retired.
    pub holding: bool,
}

impl Moves {
    pub(super) fn new(max: usize) -> Moves {
        Moves { slots: (0..max).map(|_| None).collect(), queue: VecDeque::new(), marks: HashMap::new(), holding: false }
    }

    /// A tag of set `s` was buried (a move of `s` must keep its tombstone).
    pub(super) fn touched(&mut self, s: u32, tag: u16) {
        if let Some(m) = self.marks.get_mut(&s) {
            m.touched.push(tag);
        }
    }

    /// Set `s` was voided: a move of it must not write what it merged.
    pub(super) fn voided(&mut self, s: u32) {
        if let Some(m) = self.marks.get_mut(&s) {
            m.voided = true;
        }
    }

    pub(super) fn abort_all(&mut self) {
        for m in self.marks.values_mut() {
            m.voided = true;
        }
    }

    pub(super) fn heap_bytes(&self) -> u64 {
        let one = |m: &Move| {
            m.incoming.iter().map(|i| i.item.key.capacity() + i.item.value.capacity() + 64).sum::<usize>()
                + m.others.capacity() * 8
                + m.fps.capacity() * 8
                + m.page.as_ref().map_or(0, |p| p.len())
        };
        let moving: usize = self.slots.iter().flatten().chain(self.queue.iter()).map(one).sum();
        (moving + self.slots.capacity() * std::mem::size_of::<Option<Move>>()) as u64
    }

    fn idle(&self) -> bool {
        self.queue.is_empty() && self.slots.iter().all(Option::is_none)
    }
}

impl FlashStore {
    /// The reclaimed segment's items: each small current one is bound for its set (moved with
    /// the set's other log items at the threshold, else written to the log again if it was
    /// hit there, else dropped, unless its set may hold an older copy); large ones follow the
    /// full index's rule. Queues the moves; `holding` says the segment waits for them.
    pub(in super::super) fn move_segment(&mut self, slot: u32, gen: u8, segment: &[u8], now: Now) {
        let seed = self.slots[slot as usize].seq;
        let max_item = self.layout.sets.expect("the sets index").max_item_bytes as usize;
        let mut bound: HashMap<u32, Vec<Moving>> = HashMap::new();
        let mut shadowed = Vec::new();
        walk_items(segment, seed, |at, item| {
            let hash = KeyHash::of(item.key);
            let Some(entry) = self.index.find(hash) else { return };
            if !super::super::gc::names(entry, slot, gen, at) || self.pending(hash) {
                return;
            }
            let small = set_item_bytes(item.key.len(), item.value.len()) <= max_item;
            let expired = is_expired(item.meta.expiry, now.unix);
            if expired || !small {
                if expired || !(entry.hit() && self.readmit(hash, item.key, item.value, item.meta, item.bytes, now)) {
                    if !expired && self.close_by.is_some() {
                        self.sets.as_deref_mut().expect("the sets index").stats.close_drops += 1;
                    }
                    self.drop_log(hash);
                } else if let Some(sets) = self.sets.as_deref().filter(|s| s.on_flash(self.fingerprint(hash))) {
                    // Its set may hold an older copy: purged before this segment is retired (a
                    // crash could lose the new copy after that, and the older one would answer).
                    shadowed.push(sets.set_of(self.fingerprint(hash)));
                }
                return;
            }
            let s = self.sets.as_deref().expect("the sets index").set_of(self.fingerprint(hash));
            let moving =
                SetItem { key: item.key.to_vec(), value: item.value.to_vec(), meta: item.meta, rrpv: RRPV_INSERT };
            bound.entry(s).or_default().push(Moving { hash, entry, item: moving });
        });
        let mut sets: Vec<(u32, Vec<Moving>)> = bound.into_iter().collect();
        sets.sort_unstable_by_key(|(s, _)| *s);
        for (s, items) in sets {
            self.bind(s, slot, items, now, false);
        }
        self.bind_purges(slot, shadowed, now);
        let sets = self.sets.as_deref_mut().expect("the sets index");
        sets.moves.holding = !sets.moves.idle();
        self.launch_moves();
    }

    /// Binds a move of every set holding a tombstone grounded in segment `slot` or an older
    /// one (or voided meanwhile), so that no page on flash holds a copy the tombstone kills once
    /// its ground is gone.
    /// `due`: sets to purge anyway (a large item written again at the head shadows a copy).
    fn bind_purges(&mut self, slot: u32, mut due: Vec<u32>, now: Now) {
        let limit = self.slots[slot as usize].seq;
        while let Some((_, bucket, tag)) = self.sets.as_deref_mut().expect("the sets index").buried.pop_due(limit) {
            if self.burial_due(bucket, tag) {
                due.push(self.sets.as_deref().expect("the sets index").set_of((bucket, tag)));
            }
        }
        self.sets.as_deref_mut().expect("the sets index").buried.trim();
        due.sort_unstable();
        due.dedup();
        for s in due {
            // A queued move has not merged yet: it applies every tombstone there is then.
            let queued = self.sets.as_deref().expect("sets").moves.queue.iter().any(|m| m.set == s);
            if !queued {
                self.sets.as_deref_mut().expect("sets").stats.purges += 1;
                self.bind(s, slot, Vec::new(), now, true);
            }
        }
    }

    /// Segment `slot` is to be retired without a walk (nothing in it is live): binds the purges
    /// it needs; true if they hold it (it is retired when they are done).
    pub(in super::super) fn purge_before_retire(&mut self, slot: u32, gen: u8, now: Now) -> bool {
        self.bind_purges(slot, Vec::new(), now);
        let sets = self.sets.as_deref_mut().expect("the sets index");
        if sets.moves.idle() {
            return false;
        }
        sets.moves.holding = true;
        self.gc.reading = Some((slot, gen));
        self.gc.walking = true;
        self.launch_moves();
        true
    }

    /// Decides set `s`'s share of the reclaimed segment `slot` (see `move_segment`).
    /// With `force`, the set is written even with nothing to bring in (a purge).
    fn bind(&mut self, s: u32, slot: u32, items: Vec<Moving>, now: Now, force: bool) {
        // The page holds the set's state as of this record sequence number: what is written
        // to the log from here on (re-admissions below too) is newer than it.
        let seq = self.next_record_seq();
        let sets = self.sets.as_deref().expect("the sets index");
        let bucket = s / sets.geo.per_bucket;
        let others: Vec<Entry> = self
            .index
            .bucket_entries(bucket as usize)
            .filter(|&e| {
                !is_tombstone(e)
                    && e.slot() != slot
                    && Self::valid(&self.slots, e)
                    && sets.set_of((bucket, e.tag())) == s
            })
            .collect();
        // A clean close moves every small item: a warm restart serves what was served before it.
        let threshold = if self.close_by.is_some() { 1 } else { sets.geo.threshold as usize };
        // A page write carrying a quarter page is worth it whatever the count (large items).
        let carried: usize = items.iter().map(|m| set_item_bytes(m.item.key.len(), m.item.value.len())).sum();
        let worth = items.len() + others.len() >= threshold || carried >= PAGE / 4;
        let (go, stay): (Vec<Moving>, Vec<Moving>) = if force || worth {
            (items, Vec::new())
        } else {
            // Below the threshold an item goes to its set anyway if the set may hold an older
            // copy (hit or not: written again at the head instead, a crash could lose the new
            // copy after this segment is retired, and the older one would answer).
            items.into_iter().partition(|m| sets.on_flash(self.fingerprint(m.hash)))
        };
        for m in stay {
            self.sets.as_deref_mut().expect("sets").stats.threshold_drops += 1;
            let (key, value, meta) = (&m.item.key, &m.item.value, m.item.meta);
            let bytes = super::super::layout::item_bytes(key.len(), value.len());
            if !(m.entry.hit() && self.readmit(m.hash, key, value, meta, bytes, now)) {
                self.drop_log(m.hash);
            }
        }
        if go.is_empty() && !force {
            return;
        }
        let sets = self.sets.as_deref_mut().expect("the sets index");
        if !force && !worth {
            sets.stats.shadow_moves += go.len() as u64;
        }
        for m in &go {
            let fp = (bucket, m.hash.tag());
            sets.add(fp);
        }
        sets.moves.marks.entry(s).or_default().moves += 1;
        let mv = Move {
            set: s,
            incoming: go,
            others,
            page: None,
            page_ok: false,
            waiting: 0,
            fps: Vec::new(),
            applied: Vec::new(),
            seq,
            evicted: 0,
        };
        sets.moves.queue.push_back(mv);
    }

    /// Writes an item hit in the log to the log's head again; false if it could not be.
    fn readmit(
        &mut self,
        hash: KeyHash,
        key: &[u8],
        value: &[u8],
        meta: super::super::ItemMeta,
        bytes: usize,
        now: Now,
    ) -> bool {
        if !self.rewrite(hash, key, value, meta, bytes, now) {
            return false;
        }
        if let Some(sets) = self.sets.as_deref_mut() {
            sets.stats.readmitted += 1;
        }
        true
    }

    /// Drops a key's log entry (its item left the log without reaching its set).
    fn drop_log(&mut self, hash: KeyHash) {
        let old = self.index.remove(hash);
        // Its record stays on the device until the segment is retired, after the moves: a drop
        // mark (at the next commit; this runs inside completions) keeps a crash before then from
        // bringing it back over a change of the key made meanwhile, which waits for the mark.
        if old.is_some_and(|e| Self::valid(&self.slots, e)) {
            self.defer_drop(self.group(hash));
        }
        self.forget(old);
        // Grounded in the segment being reclaimed: its set is purged before it is retired.
        self.bury_set(self.fingerprint(hash), 0);
    }

    /// Starts queued moves while there is room, one per set at a time.
    fn launch_moves(&mut self) {
        let mut later = Vec::new();
        loop {
            let sets = self.sets.as_deref_mut().expect("the sets index");
            let Some(id) = sets.moves.slots.iter().position(Option::is_none) else { break };
            let Some(mv) = sets.moves.queue.pop_front() else { break };
            if sets.moves.slots.iter().flatten().any(|m| m.set == mv.set) {
                later.push(mv);
                continue;
            }
            sets.moves.slots[id] = Some(mv);
            self.start_move(id);
        }
        let moves = &mut self.sets.as_deref_mut().expect("the sets index").moves;
        for mv in later.into_iter().rev() {
            moves.queue.push_front(mv);
        }
        self.finish_segment();
    }

    /// Reads what move `id` needs: the set's page (unless the set is void or was never
    /// written: the merge would not use it) and its log items outside the segment (those still
    /// in a write buffer are taken from it). With nothing to read, the move writes at once.
    fn start_move(&mut self, id: usize) {
        let sets = self.sets.as_deref_mut().expect("the sets index");
        let set = sets.moves.slots[id].as_ref().expect("a move").set;
        let page_read = sets.version(set) != 0;
        let mv = sets.moves.slots[id].as_mut().expect("a move");
        let offset = sets.geo.set_offset(mv.set);
        let token = TOKEN_MOVE | (id as u64) << 16;
        let mut reads = if page_read { vec![(offset, PAGE, token | SUB_PAGE)] } else { Vec::new() };
        let mut buffered = Vec::new();
        for (n, e) in mv.others.iter().enumerate() {
            let first_page = e.offset_units() as usize * ITEM_ALIGN / PAGE;
            match self.slots[e.slot() as usize].state {
                SlotState::Sealed => {
                    let at = self.layout.segment_offset(e.slot()) + (first_page * PAGE) as u64;
                    reads.push((at, e.pages() as usize * PAGE, token | n as u64));
                }
                SlotState::Buffer(b) => buffered.push((n, b, first_page * PAGE)),
                SlotState::Free => {}
            }
        }
        mv.waiting = reads.len() as u32;
        sets.stats.move_reads += (reads.len() - usize::from(page_read)) as u64;
        for (n, b, from) in buffered {
            let moving = self.bufs[b].data.as_ref().and_then(|data| self.read_moving(id, n, data.get(from..)?));
            if let Some(m) = moving {
                let sets = self.sets.as_deref_mut().expect("the sets index");
                sets.moves.slots[id].as_mut().expect("a move").incoming.push(m);
            }
        }
        if reads.is_empty() {
            return self.write_move(id, self.last_now);
        }
        for (offset, len, token) in reads {
            self.io.submit(IoOp { kind: IoKind::Read, offset, buf: AlignedBuf::new(len), len, at: 0, token });
            self.stats.reads += 1;
            self.stats.read_bytes += len as u64;
        }
        self.io.flush();
    }

    /// A move's read or write is back.
    pub(in super::super) fn move_done(&mut self, number: u64, c: Completion, now: Now) {
        let (id, sub) = ((number >> 16) as usize, number & 0xFFFF);
        if sub == SUB_WRITE {
            return self.move_written(id, c.result.is_ok());
        }
        let item = if sub == SUB_PAGE || c.result.is_err() { None } else { self.read_moving(id, sub as usize, &c.buf) };
        let sets = self.sets.as_deref_mut().expect("the sets index");
        sets.stats.io_errors += u64::from(c.result.is_err());
        let mv = sets.moves.slots[id].as_mut().expect("a move");
        if sub == SUB_PAGE {
            mv.page_ok = c.result.is_ok();
            mv.page = Some(c.buf);
        } else if let Some(m) = item {
            mv.incoming.push(m);
        }
        mv.waiting -= 1;
        if mv.waiting == 0 {
            self.write_move(id, now);
        }
    }

    /// The log item a move read (entry `n` of its others), if it checks out and is still there.
    fn read_moving(&self, id: usize, n: usize, buf: &[u8]) -> Option<Moving> {
        let sets = self.sets.as_deref().expect("the sets index");
        let mv = sets.moves.slots[id].as_ref().expect("a move");
        let entry = *mv.others.get(n)?;
        let at = entry.offset_units() as usize * ITEM_ALIGN % PAGE;
        let item = decode_item(buf.get(at..)?, self.slots[entry.slot() as usize].seq).ok()?;
        let hash = KeyHash::of(item.key);
        let current = self.index.find(hash).is_some_and(|e| e.same_place(entry)) && Self::valid(&self.slots, entry);
        let fits = set_item_bytes(item.key.len(), item.value.len()) <= sets.geo.max_item_bytes as usize;
        if !current || !fits || sets.set_of(self.fingerprint(hash)) != mv.set {
            return None;
        }
        let moving = SetItem { key: item.key.to_vec(), value: item.value.to_vec(), meta: item.meta, rrpv: RRPV_INSERT };
        Some(Moving { hash, entry, item: moving })
    }
}

impl FlashStore {
    /// Everything move `id` read is back: merge the page with the incoming items and write it.
    fn write_move(&mut self, id: usize, now: Now) {
        let place = page::PagePlace { set: 0, partition: self.cfg.partition, epoch: self.epoch, seed: self.set_seed() };
        let sets = self.sets.as_deref_mut().expect("the sets index");
        let mut mv = sets.moves.slots[id].take().expect("a move");
        let s = mv.set;
        let bucket = s / sets.geo.per_bucket;
        // What happens from here on is checked when the write is back.
        if let Some(mark) = sets.moves.marks.get_mut(&s) {
            (mark.voided, mark.touched) = (false, Vec::new());
        }
        let mut buf = mv.page.take().unwrap_or_else(|| AlignedBuf::new(PAGE));
        let version = sets.version(s);
        let hits = sets.hits(s);
        let old: Vec<SetItem> = match page::decode_page(&buf[..PAGE], s, place.partition, place.seed) {
            Ok(p) if version != 0 && mv.page_ok && super::version_of(p.seq) == version => {
                // Items hit since the last write are predicted near (RRIP).
                let near = |pos: usize| pos < page::HIT_BITS && hits & (1 << pos) != 0;
                p.iter().map(|(pos, v)| SetItem { rrpv: if near(pos) { 0 } else { v.rrpv }, ..v.owned() }).collect()
            }
            Ok(_) => Vec::new(),
            Err(_) => {
                sets.stats.bad_pages += u64::from(version != 0);
                Vec::new()
            }
        };
        let tombs: Vec<u16> = self
            .index
            .bucket_entries(bucket as usize)
            .filter(|&e| is_tombstone(e) && sets.set_of((bucket, e.tag())) == s)
            .map(Entry::tag)
            .collect();
        // An old item the log index names (a tombstone, a newer copy, one moving in now) goes:
        // the page must hold nothing older than a log record it is newer than. So does an item
        // whose key has an invalidation on its way (its mark is older than this page's
        // sequence, so after a crash it would not kill the copy written here).
        let old: Vec<SetItem> = old
            .into_iter()
            .filter(|o| {
                let hash = KeyHash::of(&o.key);
                !is_expired(o.meta.expiry, now.unix) && self.index.find(hash).is_none() && !self.pending(hash)
            })
            .collect();
        // Items whose log entry changed while the move read, or whose key has an invalidation on
        // its way, are left to the log.
        mv.incoming.retain(|m| {
            self.index.find(m.hash).is_some_and(|e| e.same_place(m.entry))
                && !self.pending(m.hash)
                && !is_expired(m.item.meta.expiry, now.unix)
        });
        let incoming: Vec<SetItem> = mv.incoming.iter().map(|m| m.item.clone()).collect();
        let sets = self.sets.as_deref_mut().expect("the sets index");
        let (kept, evicted) = page::merge(old, 0, incoming);
        mv.fps = kept.iter().map(|i| (bucket, KeyHash::of(&i.key).tag())).collect();
        mv.applied = tombs;
        mv.evicted = evicted;
        page::encode_page(&mut buf, page::PagePlace { set: s, ..place }, mv.seq, &kept);
        let offset = sets.geo.set_offset(s);
        sets.moves.slots[id] = Some(mv);
        let token = TOKEN_MOVE | (id as u64) << 16 | SUB_WRITE;
        self.io.submit(IoOp { kind: IoKind::Write, offset, buf, len: PAGE, at: 0, token });
        self.stats.write_bytes += PAGE as u64;
        self.io.flush();
    }

    /// Move `id`'s page write is back: the set now answers for what it holds, and its items
    /// leave the log.
    fn move_written(&mut self, id: usize, ok: bool) {
        let sets = self.sets.as_deref_mut().expect("the sets index");
        let mv = sets.moves.slots[id].take().expect("a move");
        let s = mv.set;
        let (voided, touched) = sets.moves.marks.get(&s).map_or((false, Vec::new()), |m| (m.voided, m.touched.clone()));
        if !ok {
            sets.stats.io_errors += 1;
            sets.void(s);
            // What the page holds now is unknown: after a crash no page may be trusted.
            self.raise_sets_floor();
        } else if !voided {
            sets.written(s, mv.seq, &mv.fps);
            sets.stats.set_writes += 1;
            sets.stats.items_moved += mv.incoming.len() as u64;
            sets.stats.rrip_evictions += u64::from(mv.evicted);
            if self.close_by.is_some() {
                sets.stats.close_drops += u64::from(mv.evicted);
            }
            let bucket = (s / sets.geo.per_bucket) as usize;
            for m in &mv.incoming {
                match self.index.find(m.hash) {
                    Some(e) if e.same_place(m.entry) => {
                        let old = self.index.remove(m.hash);
                        self.forget(old);
                    }
                    Some(_) => {}
                    // Deleted meanwhile (its entry gone, no tombstone): the page holds it.
                    None => self.bury_set(self.fingerprint(m.hash), 0),
                }
            }
            for tag in mv.applied.iter().filter(|t| !touched.contains(t)) {
                self.index.remove_tombstone(bucket, *tag);
            }
        }
        self.end_move(mv);
    }

    fn end_move(&mut self, mv: Move) {
        let marks = &mut self.sets.as_deref_mut().expect("the sets index").moves.marks;
        if let Some(mark) = marks.get_mut(&mv.set) {
            mark.moves -= 1;
            if mark.moves == 0 {
                marks.remove(&mv.set);
            }
        }
        self.launch_moves();
    }

    /// The reclaimed segment's moves are all done: it is retired.
    fn finish_segment(&mut self) {
        let sets = self.sets.as_deref_mut().expect("the sets index");
        if !sets.moves.holding || !sets.moves.idle() {
            return;
        }
        sets.moves.holding = false;
        self.gc.walking = false;
        self.gc.reading = None;
        self.retire_tail();
    }
}
