//! Keeping the never-stale promise across a crash (`recovery` rebuilds the tier from the
//! segments). A flash copy may come back after a crash unless something on the device says it
//! is dead, so everything that makes a copy obsolete is written down before it is acknowledged:
//!
//! - A change of a key that has (or may have) a flash copy: the owner appends an invalidation
//!   mark (`invalidate`), commits once per loop turn (`commit`: the active buffer's new pages,
//!   padded to a page), and runs the change only once `take_commits` reports the mark's write done
//!   (`remove_invalidated` then drops the index entry). Writes of keys with no flash copy never
//!   wait. Until then the key's group counts as pending (`needs_durable`), GC does not rewrite
//!   it and the owner does not spill it: no newer record may overtake the mark.
//! - An index entry another key pushes out (bucket full, tag twin): a mark for each group the
//!   entry may belong to, pending until written, so a write of such a key waits for it.
//! - A segment GC or the ring's pressure retires: its slot is freed only once a superblock with
//!   a watermark above its sequence number is on the device (`retire_tail`); recovery adopts no
//!   segment below the watermark.
//! - The cascade index forgetting mappings it still had (a full tier-3 page, a stream under
//!   pressure or after a failed merge): a mark for each dropped mapping's group, or one stream
//!   mark for the whole stream, pending until written (`mark_cascade_drops`).
//! - flush_all: a flush mark, committed before `clear` returns.
//!
//! Records carry sequence numbers; of a group's records the newest wins, and a mark kills every
//! older record of its group (a stream mark every older record of its stream's keys, a flush
//! mark every older record).

use std::collections::HashMap;

use super::io::{AlignedBuf, Completion, IoKind, IoOp};
use super::layout::{MarkKind, Superblock, PAGE, STATE_OPEN};
use super::{FlashStore, Now, TOKEN_SUPER};
use crate::hash::KeyHash;

/// The durability state of one store.
#[derive(Default)]
pub(super) struct Durable {
    /// The next record's sequence number.
    pub record_seq: u64,
    /// The last ticket handed out.
    pub tickets: u64,
    /// Groups with marks not yet on the device, and how many.
    pub pending: HashMap<u64, u32>,
    /// Groups whose drop mark found no room yet (pending too): appended at the next commit.
    pub unrecorded: Vec<u64>,
    /// Finished writes that carried marks: (ticket, written).
    pub done: Vec<(u64, bool)>,
    /// The tail slot whose watermark write is in flight.
    pub retiring: Option<u32>,
    /// The generation of the last superblock written.
    pub sb_generation: u64,
    /// A clean close wrote every drop mark (its superblock says so: `MARKS_WRITTEN`).
    pub marks_written: bool,
    /// `--flash-sync`: tickets whose marks are written and whose flush is on the device, with
    /// when the ticket was opened (a stalled flush reports it failed at the deadline).
    pub syncing: Vec<(u64, u64)>,
    /// Keys whose invalidation waits for its write (ticket, key, sequence number of the segment the mark is in): their index entries go the
    /// moment it is done, before anything else (GC) could copy them past the mark.
    pub invalidated: Vec<(u64, KeyHash, u64)>,
    /// Keys whose entries that moment removed, and whether each named a live item (for
    /// `remove_invalidated`).
    pub removed: HashMap<u64, bool>,
}

impl Durable {
    /// One mark of `group` reached the device.
    pub(super) fn settle(&mut self, group: u64) {
        if let Some(n) = self.pending.get_mut(&group) {
            *n -= 1;
            if *n == 0 {
                self.pending.remove(&group);
            }
        }
    }
}

/// The group of a stream mark: the stream's number with this bit set (a key's group, its
/// tier-1 bucket and tag, stays below 2^48).
pub(super) const STREAM_GROUP: u64 = 1 << 63;

/// The kind of mark that drops `group`.
fn mark_kind(group: u64) -> MarkKind {
    if group & STREAM_GROUP != 0 {
        MarkKind::Stream
    } else {
        MarkKind::Invalidate
    }
}

/// Why an invalidation cannot be appended now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NoRoom;

impl FlashStore {
    pub(super) fn next_record_seq(&mut self) -> u64 {
        self.durable.record_seq += 1;
        self.durable.record_seq
    }

    /// The group of `hash`: its first index bucket and tag (what marks name).
    pub fn group(&self, hash: KeyHash) -> u64 {
        (self.index.bucket_of(hash) as u64) << 16 | u64::from(hash.tag())
    }

    /// Whether a change of `key` must wait for an invalidation mark: the key has or may have
    /// a flash copy (with the cascade index: tier 1 names it, or a lower tier's DRAM block or
    /// Bloom filter says maybe; with the sets index: the log or the set's filter), or a mark of its group (or of its demotion stream) is not on
    /// the device yet.
    pub fn needs_durable(&self, hash: KeyHash) -> bool {
        self.may_hold(hash)
            || (!self.durable.pending.is_empty()
                && (self.durable.pending.contains_key(&self.group(hash))
                    || self.cascade.as_deref().is_some_and(|c| {
                        let stream = c.stream_of(self.fingerprint(hash)) as u64;
                        self.durable.pending.contains_key(&(STREAM_GROUP | stream))
                    })))
    }

    /// Whether marks of `hash`'s group are still on their way to the device, or a change of it
    /// still waits for its invalidation's ticket (with `--flash-sync`, until the flush).
    pub fn pending(&self, hash: KeyHash) -> bool {
        (!self.durable.pending.is_empty() && self.durable.pending.contains_key(&self.group(hash)))
            || self.durable.invalidated.iter().any(|&(_, h, _)| h.0 == hash.0)
    }

    /// Appends an invalidation mark for `key`; the change may run once `take_commits` reports
    /// the returned ticket written. Nothing else changes until then.
    pub fn invalidate(&mut self, hash: KeyHash, now: Now) -> Result<u64, NoRoom> {
        self.last_now = now;
        let group = self.group(hash);
        let ticket = match self.append_mark(MarkKind::Invalidate, group, now) {
            Some(ticket) => ticket,
            // Writes fail (or a write has taken past the deadline) and no buffer or slot is free:
            // the change is refused now (its ticket reported not written) instead of waiting for
            // a device that may never come back.
            None if self.writes_failing() || self.device_late(now) => {
                self.durable.tickets += 1;
                self.durable.done.push((self.durable.tickets, false));
                return Ok(self.durable.tickets);
            }
            None => return Err(NoRoom),
        };
        // The segment the mark is in grounds the tombstone its change may leave (sets index).
        let ground = self.head_ground();
        self.durable.invalidated.push((ticket, hash, ground));
        Ok(ticket)
    }

    /// After a durable invalidation (`take_commits` reported its ticket written): whether the
    /// key's index entry, dropped when the write finished, named a live item.
    pub fn remove_invalidated(&mut self, hash: KeyHash) -> bool {
        self.durable.removed.remove(&hash.0).unwrap_or(false)
    }

    /// A write that carried marks finished: the keys its invalidations guard leave the index
    /// now (if it was written), and its ticket is reported.
    pub(super) fn ticket_done(&mut self, ticket: u64, written: bool) {
        let mut i = 0;
        while i < self.durable.invalidated.len() {
            let (t, hash, ground) = self.durable.invalidated[i];
            if t != ticket {
                i += 1;
                continue;
            }
            self.durable.invalidated.swap_remove(i);
            if written {
                let old = self.index.remove(hash);
                let found = old.is_some_and(|e| Self::valid(&self.slots, e));
                self.check_twin(hash, old);
                self.forget(old);
                self.bury(self.fingerprint(hash), ground);
                self.stats.deletes += u64::from(found);
                *self.durable.removed.entry(hash.0).or_insert(false) |= found;
            }
        }
        self.durable.done.push((ticket, written));
    }

    /// Marks `group` dropped from the index (see the module comment): pending until written.
    /// A group with `STREAM_GROUP` set is a cascade-index stream that forgot its mappings.
    pub(super) fn drop_group(&mut self, group: u64) {
        if self.active.is_none() || self.relieving || self.append_mark(mark_kind(group), group, self.last_now).is_none()
        {
            self.defer_drop(group);
        }
    }

    /// `drop_group` at the next commit; pending from now on.
    pub(super) fn defer_drop(&mut self, group: u64) {
        *self.durable.pending.entry(group).or_insert(0) += 1;
        self.durable.unrecorded.push(group);
    }

    /// Writes the marks appended since the last commit (one write of the active buffer's new
    /// pages); the owner calls this once per loop turn. No-op when nothing waits.
    pub fn commit(&mut self) {
        for group in std::mem::take(&mut self.durable.unrecorded) {
            match self.append_mark(mark_kind(group), group, self.last_now) {
                // The first count was taken when it was put aside.
                Some(_) => self.durable.settle(group),
                None => self.durable.unrecorded.push(group),
            }
        }
        self.commit_pages();
    }

    /// Writes the active buffer's marks not yet written, unless a write of it (or the commit
    /// copy) is out: that write's completion calls this again.
    pub(super) fn commit_pages(&mut self) {
        let Some(b) = self.active else { return };
        if self.may_write(b) && !self.bufs[b].marks_unwritten.is_empty() && self.copy_free() {
            self.write_pages(b);
            self.io.flush();
        }
    }

    /// Finished commits since the last call: (ticket, written). A ticket reported false was
    /// not written (the change it guards must not run); its mark is written again later.
    pub fn take_commits(&mut self, out: &mut Vec<(u64, bool)>) {
        out.append(&mut self.durable.done);
    }

    /// Appends a flush mark and waits until it is on the device (flush_all is rare).
    pub(super) fn flush_mark(&mut self) {
        let now = self.last_now;
        let Some(ticket) = self.append_mark(MarkKind::Flush, 0, now) else {
            // No room for it: nothing may come back from before, so the ring is given up.
            self.raise_watermark_now();
            return;
        };
        let mut done = Vec::new();
        for _ in 0..10_000 {
            self.commit();
            if let Some(at) = self.durable.done.iter().position(|&(t, _)| t == ticket) {
                done.push(self.durable.done.swap_remove(at));
                break;
            }
            let mut completions = Vec::new();
            self.io.wait(&mut completions);
            let mut finished = std::mem::take(&mut self.early);
            for c in completions {
                self.complete(c, now, &mut finished);
            }
            self.early = finished;
        }
        if !done.first().is_some_and(|&(_, ok)| ok) {
            self.raise_watermark_now();
        }
    }

    /// Makes every segment written so far invalid for recovery (a blocking superblock write).
    /// With the sets index, so is every set page (their tombstones' grounds go with the
    /// segments).
    pub(super) fn raise_watermark_now(&mut self) {
        self.watermark = self.next_seq;
        self.raise_sets_floor();
        let _ = self.write_superblock(STATE_OPEN, 0, 0);
    }

    /// Starts retiring the tail slot: a superblock whose watermark is above its segment goes to
    /// the device, and the slot is freed when that write is done. False if a retirement is
    /// already under way.
    pub(super) fn retire_tail(&mut self) -> bool {
        if self.durable.retiring.is_some() || self.used_slots == 0 || !self.watermark_may_go() {
            return false;
        }
        let tail = self.tail();
        let next = (tail + 1) % self.layout.slots;
        let watermark = if self.used_slots > 1 { self.slots[next as usize].seq } else { self.next_seq };
        self.durable.retiring = Some(tail);
        self.durable.sb_generation += 1;
        let generation = self.durable.sb_generation;
        let sb = Superblock { watermark, generation, ..self.superblock(STATE_OPEN, 0, 0) };
        let mut buf = AlignedBuf::new(PAGE);
        sb.encode(&mut buf);
        let offset = self.layout.region_offset + (generation % 2) * PAGE as u64;
        self.io.submit(IoOp {
            kind: IoKind::Write,
            offset,
            buf,
            len: PAGE,
            at: 0,
            token: TOKEN_SUPER | u64::from(tail),
        });
        self.io.flush();
        self.pending_watermark = watermark;
        self.stats.watermark_writes += 1;
        true
    }

    /// A watermark write finished: the tail it retires is freed (or, if it failed, kept until
    /// the next try).
    pub(super) fn watermark_done(&mut self, tail: u32, c: Completion) {
        debug_assert_eq!(self.durable.retiring, Some(tail));
        self.durable.retiring = None;
        self.watermark_written(c.result.is_ok());
        if c.result.is_err() {
            self.stats.write_errors += 1;
            return;
        }
        self.watermark = self.watermark.max(self.pending_watermark);
        // Closing: the slot stays (its items go into the snapshot; recovery would skip it).
        if self.used_slots > 0 && self.tail() == tail && !self.gc.paused {
            self.free_tail();
        }
        self.maybe_reclaim();
    }
}
