//! Tag twins on flash, counted. The index keeps one entry per tag in a key's pair of buckets
//! (`index.rs`), so writing, deleting or invalidating a key removes whatever entry holds its tag
//! there; about once in ten thousand such removals the entry was another key's (a twin), which
//! is then lost. The index cannot tell (it holds no keys), so each valid entry removed that way
//! is read back afterwards, off the request's path: the record names its key, and a key whose
//! hash is not the remover's is counted in `twin_drops`. So is a key that leaves DRAM unwritten
//! because its tag says flash has it (`check_clean`) when the entry is a twin's. Checks that
//! cannot be made (more than `MAX_TWIN_CHECKS` waiting, the segment gone or rewritten before
//! the read, a failed or damaged read) are counted in `twin_unchecked`.
//!
//! It must not change the index or answer lookups: it only reads and counts.

use super::index::Entry;
use super::io::{AlignedBuf, Completion, IoKind, IoOp};
use super::layout::{self, decode_item, PAGE};
use super::{FlashStore, SlotState, TOKEN_TWIN};
use crate::hash::KeyHash;

/// Removed entries waiting for their check or being read, at most (24 bytes each).
pub(super) const MAX_TWIN_CHECKS: usize = 1024;
/// Their reads in flight, at most (a page or more each).
const MAX_TWIN_READS: usize = 16;

/// A removed entry to check: the entry, the hash of the key that removed it, and its segment's
/// sequence number when it was removed (a slot written again since holds other records).
#[derive(Clone, Copy)]
struct Check {
    entry: Entry,
    remover: KeyHash,
    seq: u64,
}

/// Checks waiting and in flight.
#[derive(Default)]
pub(super) struct Twins {
    waiting: Vec<Check>,
    reading: Vec<Option<Check>>,
}

impl Twins {
    fn in_flight(&self) -> usize {
        self.reading.iter().filter(|check| check.is_some()).count()
    }

    fn waiting_or_reading(&self) -> usize {
        self.waiting.len() + self.in_flight()
    }
}

impl FlashStore {
    /// `old` left the index to make way for (or to forget) the key hashed `remover`: if it
    /// named a live item, whose it was is checked later.
    pub(super) fn check_twin(&mut self, remover: KeyHash, old: Option<Entry>) {
        let Some(entry) = old.filter(|&e| Self::valid(&self.slots, e)) else { return };
        if self.twins.waiting_or_reading() >= MAX_TWIN_CHECKS {
            self.stats.twin_unchecked += 1;
            return;
        }
        let seq = self.slots[entry.slot() as usize].seq;
        self.twins.waiting.push(Check { entry, remover, seq });
    }

    /// `hash`'s key leaves DRAM unwritten as a clean copy of what flash holds (`may_contain`
    /// said so by its tag): the entry is read back as a removed one is, and if it names another
    /// key (a twin's item took the tag after this key's copy was dropped) the key is lost,
    /// counted with the twin drops.
    pub fn check_clean(&mut self, hash: KeyHash) {
        let entry = self.index.find(hash);
        self.check_twin(hash, entry);
    }

    /// Makes the waiting checks: at once for records still in a write buffer, with a read for
    /// written ones while fewer than `MAX_TWIN_READS` are in flight (a buffer being written, or
    /// a read with none free, waits for the next time).
    pub(super) fn start_twin_checks(&mut self) {
        let mut reads = self.twins.in_flight();
        let mut i = 0;
        while i < self.twins.waiting.len() {
            let check = self.twins.waiting[i];
            let slot = &self.slots[check.entry.slot() as usize];
            if slot.seq != check.seq || slot.state == SlotState::Free {
                self.stats.twin_unchecked += 1;
                self.twins.waiting.swap_remove(i);
                continue;
            }
            match slot.state {
                SlotState::Buffer(b) => {
                    let Some(data) = self.bufs[b].data.take() else {
                        i += 1;
                        continue;
                    };
                    let at = check.entry.offset_units() as usize * layout::ITEM_ALIGN;
                    self.judge_twin(check, Some(&data[at..]));
                    self.bufs[b].data = Some(data);
                }
                _ if reads >= MAX_TWIN_READS => {
                    i += 1;
                    continue;
                }
                _ => {
                    self.read_twin(check);
                    reads += 1;
                }
            }
            self.twins.waiting.swap_remove(i);
        }
    }

    /// Reads the record `check` names.
    fn read_twin(&mut self, check: Check) {
        let number = match self.twins.reading.iter().position(Option::is_none) {
            Some(free) => free,
            None => {
                self.twins.reading.push(None);
                self.twins.reading.len() - 1
            }
        };
        self.twins.reading[number] = Some(check);
        let len = check.entry.pages() as usize * PAGE;
        let first_page = check.entry.offset_units() as u64 * layout::ITEM_ALIGN as u64 / PAGE as u64;
        let offset = self.layout.segment_offset(check.entry.slot()) + first_page * PAGE as u64;
        let buf = AlignedBuf::new(len);
        self.io.submit(IoOp { kind: IoKind::Read, offset, buf, len, at: 0, token: TOKEN_TWIN | number as u64 });
        self.stats.twin_reads += 1;
    }

    /// A check's read finished.
    pub(super) fn twin_read_done(&mut self, number: usize, c: Completion) {
        let Some(check) = self.twins.reading.get_mut(number).and_then(Option::take) else { return };
        let at = check.entry.offset_units() as usize * layout::ITEM_ALIGN % PAGE;
        let still = self.slots[check.entry.slot() as usize].seq == check.seq;
        let bytes = c.result.ok().filter(|_| still).map(|_| &c.buf[at..]);
        self.judge_twin(check, bytes);
    }

    /// Counts what the record `bytes` (None: unreadable) says of the removed entry.
    fn judge_twin(&mut self, check: Check, bytes: Option<&[u8]>) {
        match bytes.map(|bytes| decode_item(bytes, check.seq)) {
            Some(Ok(item)) if KeyHash::of(item.key).0 != check.remover.0 => self.stats.twin_drops += 1,
            Some(Ok(_)) => {}
            _ => self.stats.twin_unchecked += 1,
        }
    }

    /// Checks still waiting or reading.
    pub(super) fn twin_checks(&self) -> usize {
        self.twins.waiting_or_reading()
    }
}

#[cfg(test)]
mod tests {
    use super::super::io::sim::Faults;
    use super::super::tests::{key, Harness};
    use super::super::FlashStats;
    use super::*;

    /// Two of the harness's keys (`key(k)`) with one tag and one first bucket: one group.
    fn twins(h: &mut Harness) -> (u32, u32) {
        let mut seen = std::collections::HashMap::new();
        for k in 0..10_000_000 {
            let hash = KeyHash::of(&key(k));
            let group = (h.store().index.bucket_of(hash), hash.tag());
            if let Some(&other) = seen.get(&group) {
                return (other, k);
            }
            seen.insert(group, k);
        }
        panic!("no twins among ten million keys")
    }

    /// Polls until no check waits or reads.
    fn checked(h: &mut Harness) -> FlashStats {
        h.now.nanos += 2_000_000_000;
        h.poll();
        while h.store().in_flight() > 0 || h.store().twin_checks() > 0 {
            let (now, mut done) = (h.now, Vec::new());
            h.store().wait(now, &mut done);
            h.poll();
        }
        h.store().stats()
    }

    #[test]
    fn a_twin_removed_by_a_write_or_a_delete_is_counted_and_the_same_key_is_not() {
        let mut h = Harness::new(11, Faults::default());
        let (a, b) = twins(&mut h);
        // The same key written again, from a buffer and from the device: not a twin.
        h.insert(a, 100, None);
        h.insert(a, 100, None);
        checked(&mut h);
        h.insert(a, 100, None);
        let s = checked(&mut h);
        assert_eq!((s.twin_drops, s.twin_unchecked, s.twin_reads), (0, 0, 1), "{s:?}");
        // Its twin's write removes it: a lost item, counted (read back from the device).
        h.insert(b, 100, None);
        let s = checked(&mut h);
        assert_eq!((s.twin_drops, s.twin_unchecked, s.twin_reads), (1, 0, 2), "{s:?}");
        // Deleting the first key removes the twin's entry: counted again.
        h.delete(a);
        let s = checked(&mut h);
        assert_eq!((s.twin_drops, s.twin_unchecked), (2, 0), "{s:?}");
        // Deleting a key whose own item is there is no twin drop.
        h.insert(b, 100, None);
        checked(&mut h);
        h.delete(b);
        let s = checked(&mut h);
        assert_eq!((s.twin_drops, s.twin_unchecked), (2, 0), "{s:?}");
    }

    #[test]
    fn a_key_left_unwritten_as_clean_is_counted_when_flash_held_its_twin() {
        let mut h = Harness::new(12, Faults::default());
        let (a, b) = twins(&mut h);
        h.insert(b, 100, None);
        checked(&mut h);
        // Flash holds b; a leaves DRAM believed clean (its tag matches): a is lost, counted.
        assert!(h.store().may_contain(KeyHash::of(&key(a))));
        h.store().check_clean(KeyHash::of(&key(a)));
        let s = checked(&mut h);
        assert_eq!((s.twin_drops, s.twin_unchecked), (1, 0), "{s:?}");
        // b leaving DRAM as clean is: no count.
        h.store().check_clean(KeyHash::of(&key(b)));
        let s = checked(&mut h);
        assert_eq!((s.twin_drops, s.twin_unchecked), (1, 0), "{s:?}");
    }
}
