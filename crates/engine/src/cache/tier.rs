//! The flash tier behind a cache partition (Toshiba's flash KVS behind MICA's log). Items the
//! log is about to overwrite that are still current move to the partition's `FlashStore`; a key
//! found only on flash is read without blocking and promoted back into the log, keeping its CAS
//! and its flash copy, so evicting it again unmodified writes nothing (CacheLib's clean items).
//!
//! The one rule that keeps flash from ever serving a stale value: every change of a key in DRAM
//! (write, remove, rewrite, new expiry, stale or token state) drops the key's flash copy, and
//! flush_all forgets the whole store. So a flash copy the store's index still names is always
//! the key's latest value, and a read that completes after a change finds its entry gone (the
//! store checks) and promotes nothing.
//!
//! Across a crash the same rule needs the device's help (`flash::durable`): before a change of a
//! key with a flash copy runs, `flash_guard_write` has an invalidation mark written, and the
//! change waits for it; an item whose key waits so is not spilled meanwhile.
//!
//! It must not block (but in `close` and flush_all), and must never let a flash copy outlive a
//! newer write.

use super::copies::{Copies, FlashCopy};
use super::Partition;
use crate::flash::{Closed, StoreError};
use crate::flash::{FlashStore, InsertOutcome, ItemMeta, Lookup, Now, ReadDone};
use crate::hash::KeyHash;
use crate::item::{ItemHeader, STATE_MASK};
use crate::tiering::{AttachError, FlashProbe, FlashReport, FlashTier, TierStats, FLASH_FAILED};
use crate::time::is_expired;
use crate::types::{Item, ItemDebug};
use std::time::Instant;

/// A change waiting for its invalidation mark's write.
struct Committing {
    ticket: u64,
    hash: KeyHash,
    token: u64,
    key: Vec<u8>,
}

/// A lookup waiting for its read: the key to promote and the caller's token.
struct Waiting {
    key: Vec<u8>,
    hash: KeyHash,
    token: u64,
    /// A plain read: its item may be answered from the read's copy.
    copy: bool,
}

pub(crate) struct Tier {
    store: FlashStore,
    /// Virtual log position of the oldest item the eviction walk has not looked at.
    cursor: u64,
    now: Now,
    started: Instant,
    waiting: Vec<Option<Waiting>>,
    free: Vec<usize>,
    done: Vec<ReadDone>,
    committing: Vec<Committing>,
    commits: Vec<(u64, bool)>,
    stats: TierStats,
    /// Flash hits this turn answered without promotion.
    copies: Copies,
}

impl Tier {
    /// Starts loading the flash index entries of `hash` (see `FlashStore::prefetch`).
    #[inline]
    pub(super) fn prefetch(&self, hash: KeyHash) {
        self.store.prefetch(hash);
    }

    /// The copy the running request reads, as an item.
    #[inline]
    pub(super) fn copy_item(&self, key: &[u8], hash: KeyHash) -> Option<Item<'_>> {
        let copy = self.copies.serving(key, hash)?;
        let state = copy.meta.state;
        Some(Item {
            value: &copy.value,
            flags: copy.meta.flags,
            cas: copy.meta.cas,
            expiry: copy.meta.expiry,
            fetched: state & crate::item::FETCHED != 0,
            stale: state & crate::item::STALE != 0,
            token_sent: state & crate::item::TOKEN_SENT != 0,
        })
    }

    fn meta(header: &ItemHeader, cas: u64) -> ItemMeta {
        ItemMeta { flags: header.flags, expiry: header.expiry, cas, state: header.state & STATE_MASK }
    }
}

impl Partition {
    /// Puts `store` behind this partition (which must be new: nothing written yet). The log
    /// starts past every CAS the store has seen and past the clock in nanoseconds, so every CAS
    /// issued from now on is larger than any issued before a restart; a delayed flush_all
    /// pending at the last clean close is scheduled again.
    pub fn attach_flash(&mut self, store: FlashStore) -> Result<(), AttachError> {
        if self.log.tail() != 0 || self.tier.is_some() {
            return Err(AttachError::NotNew);
        }
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let start = (store.max_cas() + 1).max(u64::try_from(nanos).unwrap_or(u64::MAX / 2));
        self.log.start_at(start);
        // Readers on other threads leave a key DRAM does not hold to the owner from now on.
        self.published.set_flash(true);
        self.sweep_next_at = start + self.sweep_stride;
        self.origin = start;
        self.clean_cursor = start;
        if store.flush_at() != 0 {
            self.flush.resume(store.flush_at());
        }
        let now = Now { unix: self.now, nanos: 0 };
        let tier = Tier {
            store,
            cursor: start,
            now,
            started: Instant::now(),
            waiting: Vec::new(),
            free: Vec::new(),
            done: Vec::new(),
            committing: Vec::new(),
            commits: Vec::new(),
            stats: TierStats::default(),
            copies: Copies::default(),
        };
        self.tier = Some(Box::new(tier));
        Ok(())
    }

    /// The tier's clock follows the partition's (called from `set_clock`).
    pub(super) fn tier_clock(&mut self) {
        if let Some(tier) = self.tier.as_mut() {
            tier.now = Now { unix: self.now, nanos: tier.started.elapsed().as_nanos() as u64 };
        }
    }

    /// Drops `key`'s flash copy: DRAM is about to hold (or has removed) a newer version.
    #[inline]
    pub(super) fn invalidate_flash(&mut self, hash: KeyHash) {
        if let Some(tier) = self.tier.as_mut() {
            tier.copies.drop_hash(hash);
            if tier.store.delete(hash) {
                tier.stats.invalidations += 1;
            }
        }
    }

    /// `invalidate_flash` for an item found in the log (its key hashed again): a key that was
    /// in both tiers is in one now.
    pub(super) fn invalidate_found(&mut self, found: &super::Found) {
        if let Some(tier) = self.tier.as_mut() {
            let start = found.payload_start();
            let hash = KeyHash::of(&self.log.bytes_from(start)[..found.header.key_len]);
            tier.copies.drop_hash(hash);
            if tier.store.delete(hash) {
                tier.stats.invalidations += 1;
                tier.stats.in_both = tier.stats.in_both.saturating_sub(1);
            }
        }
    }

    /// flush_all reached the tier: every flash copy is forgotten (a flush mark on the device
    /// says so before this returns).
    pub(super) fn flush_tier(&mut self) {
        if let Some(tier) = self.tier.as_mut() {
            tier.copies.clear();
            tier.store.clear();
            tier.cursor = self.log.tail();
        }
        self.persist_flush_deadline();
    }

    /// A delayed flush_all's deadline (or none) goes to the device at once: a crash before it
    /// must not forget it, nor keep one already done.
    pub(super) fn persist_flush_deadline(&mut self) {
        let pending = self.flush.pending().unwrap_or(0);
        if let Some(tier) = self.tier.as_mut() {
            tier.store.persist_flush_at(pending);
        }
    }

    /// Before the log writes `size` bytes: every item that write overwrites and that is still
    /// its key's current, live version goes to flash (unless its flash copy is current).
    #[inline]
    pub(super) fn spill_before(&mut self, size: usize) {
        let Some(tier) = self.tier.as_ref() else { return };
        let until = self.log.survivors_from(size);
        if tier.cursor < until {
            self.spill_until(until, false);
        }
    }

    /// Walks the log from the tier's cursor up to `until`, spilling current items (with
    /// `always`, past the admission policy, waiting for a write buffer when all are busy).
    fn spill_until(&mut self, until: u64, always: bool) {
        let Some(mut tier) = self.tier.take() else { return };
        let tail = self.log.tail();
        while tier.cursor < until.min(tail) {
            if let Some(to) = self.log.skip_at(tier.cursor) {
                tier.cursor = to;
                continue;
            }
            if tail - tier.cursor > self.log.live_span() {
                // Overwritten unseen (never expected): whatever lay between is lost.
                tier.stats.spill_dropped += 1;
                tier.cursor = tail;
                break;
            }
            let position = tier.cursor;
            tier.cursor += self.spill_item(&mut tier, position, always);
        }
        self.tier = Some(tier);
    }

    /// An item the index pushes out of a full pair (items smaller than the index was sized
    /// for): with a flash tier it goes to flash now, as it would when the log overwrote it.
    /// Called while its entry is still in the index.
    pub(super) fn spill_pushed_out(&mut self, position: u64) {
        let Some(mut tier) = self.tier.take() else { return };
        self.spill_item(&mut tier, position, false);
        self.tier = Some(tier);
    }

    /// Spills the item at `position` if it is still its key's current, live version and flash
    /// has no current copy; returns its length in the log.
    fn spill_item(&mut self, tier: &mut Tier, position: u64, always: bool) -> u64 {
        let ring_index = self.log.ring_index(position);
        let (header, header_len) = ItemHeader::decode(self.log.bytes_from(ring_index));
        let bytes = &self.log.bytes_from(ring_index + header_len)[..header.key_len + header.value_len];
        let (key, value) = bytes.split_at(header.key_len);
        let hash = KeyHash::of(key);
        let current = self.find(key, hash).is_some_and(|found| found.position == position);
        if !current || is_expired(header.expiry, self.now) {
            return header.total_len() as u64;
        }
        if tier.store.may_contain(hash) {
            // The tag said so: whether it was this key's item is checked (and a twin counted).
            tier.store.check_clean(hash);
            tier.stats.spill_clean += 1;
            tier.stats.in_both = tier.stats.in_both.saturating_sub(1);
        } else if tier.store.pending(hash) {
            tier.stats.spill_held += 1;
        } else {
            let meta = Tier::meta(&header, header.cas.unwrap_or(position + 1));
            tier.spill(hash, key, value, meta, always);
        }
        header.total_len() as u64
    }

    /// Writes an item read from flash into the log, unless DRAM already has the key (a newer
    /// version). Its flash copy stays: it is identical.
    fn promote(&mut self, key: &[u8], hash: KeyHash, value: &[u8], meta: ItemMeta) {
        if self.find_live(key, hash).is_some() {
            return;
        }
        let header = ItemHeader {
            key_len: key.len(),
            value_len: value.len(),
            flags: meta.flags,
            expiry: meta.expiry,
            cas: Some(meta.cas),
            state: meta.state & STATE_MASK,
        };
        if header.total_len() > self.max_item_bytes {
            return;
        }
        self.write_item(hash, &header, key, [value, &[]]);
        if let Some(tier) = self.tier.as_mut() {
            tier.stats.promoted += 1;
            tier.stats.in_both += 1;
        }
    }
}

impl FlashTier for Partition {
    /// Where a key must be before an operation runs on it: `Ready` when DRAM has it or flash
    /// cannot (no I/O); an item still in a flash write buffer is promoted at once. A copy of
    /// this turn's reads is served to a plain read (`copy`) and promoted for anything else.
    fn flash_probe(&mut self, key: &[u8], hash: KeyHash, token: u64, copy: bool) -> FlashProbe {
        let Some(tier) = self.tier.as_mut() else { return FlashProbe::Ready };
        tier.copies.stop_serving();
        if !tier.store.may_hold(hash) || self.find_live(key, hash).is_some() {
            return FlashProbe::Ready;
        }
        let mut tier = self.tier.take().expect("checked above");
        if copy && tier.copies.serve(key, hash) {
            self.tier = Some(tier);
            return FlashProbe::Ready;
        }
        if let Some(read) = tier.copies.take(key, hash) {
            self.tier = Some(tier);
            self.promote(key, hash, &read.value, read.meta);
            return FlashProbe::Ready;
        }
        let i = tier.free.pop().unwrap_or_else(|| {
            tier.waiting.push(None);
            tier.waiting.len() - 1
        });
        let probe = match tier.store.lookup(hash, key, i as u64, tier.now) {
            Lookup::Miss => FlashProbe::Ready,
            Lookup::Hit(item) => {
                self.tier = Some(tier);
                self.promote(key, hash, &item.value, item.meta);
                tier = self.tier.take().expect("put back above");
                FlashProbe::Ready
            }
            Lookup::Pending => {
                tier.stats.reads_started += 1;
                tier.waiting[i] = Some(Waiting { key: key.to_vec(), hash, token, copy });
                FlashProbe::Pending
            }
            Lookup::Busy => FlashProbe::Busy,
        };
        if probe != FlashProbe::Pending {
            tier.free.push(i);
        }
        self.tier = Some(tier);
        probe
    }

    /// A request whose read finished is about to run: a plain read sees its copy.
    fn flash_serve_copy(&mut self, key: &[u8], hash: KeyHash) {
        if let Some(tier) = self.tier.as_mut() {
            tier.copies.serve(key, hash);
        }
    }

    /// Before a change of `key` runs: see `Engine::flash_guard_write`.
    fn flash_guard_write(&mut self, key: &[u8], hash: KeyHash, token: u64) -> FlashProbe {
        let Some(tier) = self.tier.as_mut() else { return FlashProbe::Ready };
        if !tier.store.needs_durable(hash) {
            return FlashProbe::Ready;
        }
        match tier.store.invalidate(hash, tier.now) {
            Ok(ticket) => {
                tier.committing.push(Committing { ticket, hash, token, key: key.to_vec() });
                tier.stats.durable_waits += 1;
                FlashProbe::Pending
            }
            Err(_) => FlashProbe::Busy,
        }
    }

    /// Consumes finished flash I/O (blocking for some with `wait`): items read are promoted and
    /// their tokens go to `tokens`. Also writes buffers that waited long enough and runs GC.
    fn flash_poll(&mut self, wait: bool, tokens: &mut Vec<u64>) {
        let Some(mut tier) = self.tier.take() else { return };
        let mut done = std::mem::take(&mut tier.done);
        tier.copies.clear();
        if wait {
            tier.store.wait(tier.now, &mut done);
        } else {
            tier.store.poll(tier.now, &mut done);
        }
        self.tier = Some(tier);
        for read in done.drain(..) {
            let tier = self.tier.as_mut().expect("put back above");
            let Some(waiting) = tier.waiting.get_mut(read.token as usize).and_then(Option::take) else { continue };
            tier.free.push(read.token as usize);
            match read.item {
                // A first hit of a plain read: answered from this copy, not promoted.
                Some(item) if waiting.copy && !tier.copies.hit_again(waiting.hash) => {
                    tier.stats.copies_served += 1;
                    let copy = FlashCopy { hash: waiting.hash, key: waiting.key, value: item.value, meta: item.meta };
                    tier.copies.push(copy);
                }
                Some(item) => self.promote(&waiting.key, waiting.hash, &item.value, item.meta),
                None => tier.stats.read_misses += 1,
            }
            tokens.push(waiting.token);
        }
        if let Some(tier) = self.tier.as_mut() {
            // Reads a spill's poll finished meanwhile stay for the next call.
            done.append(&mut tier.done);
            tier.done = done;
            let mut removed = Vec::new();
            tier.settle_commits(tokens, &mut removed);
            // A key whose flash copy just went that DRAM also holds is in one tier now.
            let in_dram = removed.iter().filter(|(key, hash)| self.find_live(key, *hash).is_some()).count();
            if let Some(tier) = self.tier.as_mut() {
                tier.stats.in_both = tier.stats.in_both.saturating_sub(in_dram as u64);
            }
        }
    }

    /// Queued flash reads go to the device now (the owner calls this once per batch of
    /// requests; without it each read is submitted as it is queued).
    fn flash_submit(&mut self) {
        if let Some(tier) = self.tier.as_mut() {
            // This turn's requests have run: its copies are not answers for later ones.
            tier.copies.clear();
            tier.store.set_submit_at_once(false);
            tier.store.commit();
            tier.store.submit();
        }
    }

    /// An eventfd that becomes readable when flash requests finish (None: poll while any are
    /// in flight).
    fn flash_notify_fd(&self) -> Option<std::os::fd::RawFd> {
        self.tier.as_ref().and_then(|tier| tier.store.notify_fd())
    }

    /// Lists the items of the `n`th flash segment (oldest first) that DRAM does not also hold,
    /// as `lru_crawler metadump` lists extstore items; false past the last segment. Reads the
    /// segment with one blocking read: for dumps, never for requests.
    fn dump_flash(&mut self, n: usize, f: &mut dyn FnMut(&[u8], &ItemDebug)) -> bool {
        let Some(mut tier) = self.tier.take() else { return false };
        let now = self.now;
        let mut found: Vec<(Vec<u8>, ItemDebug)> = Vec::new();
        let more =
            tier.store.dump_slot(u32::try_from(n).unwrap_or(u32::MAX), tier.now, &mut |key, value, meta, bytes| {
                let ttl = if meta.expiry == 0 { -1 } else { i64::from(meta.expiry) - i64::from(now) };
                let fetched = meta.state & crate::item::FETCHED != 0;
                let debug =
                    ItemDebug { ttl, last_access: 0, cas: meta.cas, fetched, size: bytes, value_len: value.len() };
                found.push((key.to_vec(), debug));
            });
        self.tier = Some(tier);
        for (key, debug) in found {
            // Listed with DRAM's items already.
            if self.find_live(&key, KeyHash::of(&key)).is_none() {
                f(&key, &debug);
            }
        }
        more
    }

    /// Flash requests in flight (the owner polls while there are any).
    fn flash_in_flight(&self) -> usize {
        self.tier.as_ref().map_or(0, |tier| tier.store.in_flight())
    }

    fn flash_retry_in(&self) -> Option<std::time::Duration> {
        let tier = self.tier.as_ref()?;
        let at = tier.store.next_retry_ns()?;
        let now = tier.started.elapsed().as_nanos() as u64;
        Some(std::time::Duration::from_nanos(at.saturating_sub(now)))
    }

    /// The tier's figures, if the partition has one.
    fn flash_report(&self) -> Option<FlashReport> {
        let tier = self.tier.as_ref()?;
        Some(FlashReport {
            store: tier.store.stats(),
            tier: tier.stats,
            // The second-hit filter of reads answered from their copy counts with the reads.
            memory: {
                let mut memory = tier.store.memory();
                memory.reads += tier.copies.filter_bytes() as u64;
                memory
            },
            io: tier.store.io_name(),
            cascade: tier.store.cascade_stats(),
            sets: tier.store.sets_stats(),
            tiers: tier.store.tier_counts(),
        })
    }

    /// A clean shutdown: every live DRAM item goes to flash (past the admission policy), then
    /// the store closes cleanly, keeping the largest CAS issued and a pending delayed flush.
    /// Afterwards the partition has no tier.
    fn close_flash(&mut self) -> Result<Closed, StoreError> {
        if self.tier.is_none() {
            return Ok(Closed::default());
        }
        if let Some(tier) = self.tier.as_mut() {
            tier.store.begin_close();
        }
        self.spill_until(self.log.tail(), true);
        let Some(tier) = self.tier.take() else { return Ok(Closed::default()) };
        let mut store = tier.store;
        store.note_cas(self.log.tail() + 1);
        store.set_flush_at(self.flush.pending().unwrap_or(0));
        store.close(tier.now)
    }
}

impl Tier {
    /// Hands back the tokens of changes whose invalidation write finished (see `FLASH_FAILED`);
    /// a written one drops its key's flash copy now.
    fn settle_commits(&mut self, tokens: &mut Vec<u64>, removed: &mut Vec<(Vec<u8>, KeyHash)>) {
        self.store.take_commits(&mut self.commits);
        for (ticket, written) in self.commits.drain(..) {
            let store = &mut self.store;
            let stats = &mut self.stats;
            self.committing.retain_mut(|c| {
                if c.ticket != ticket {
                    return true;
                }
                if written {
                    if store.remove_invalidated(c.hash) {
                        removed.push((std::mem::take(&mut c.key), c.hash));
                    }
                    tokens.push(c.token);
                } else {
                    stats.durable_failures += 1;
                    tokens.push(c.token | FLASH_FAILED);
                }
                false
            });
        }
    }

    fn spill(&mut self, hash: KeyHash, key: &[u8], value: &[u8], meta: ItemMeta, always: bool) {
        let mut outcome = self.store.insert_admitted(hash, key, value, meta, self.now, always);
        // Every buffer busy: what has finished frees one (a clean close waits for it).
        for _ in 0..if always { 1000 } else { 1 } {
            // A close stops waiting for a device that answers nothing.
            if outcome != InsertOutcome::Busy || self.store.stuck() {
                break;
            }
            if always {
                self.store.wait(self.now, &mut self.done);
            } else {
                self.store.poll(self.now, &mut self.done);
            }
            outcome = self.store.insert_admitted(hash, key, value, meta, self.now, always);
        }
        match outcome {
            InsertOutcome::Stored => {
                self.stats.spilled += 1;
                self.stats.spilled_bytes += (key.len() + value.len()) as u64;
            }
            InsertOutcome::Rejected => self.stats.spill_rejected += 1,
            InsertOutcome::Busy | InsertOutcome::TooLarge => self.stats.spill_dropped += 1,
        }
    }
}
