//! A device that fails writes. A failed write of a buffer is tried again after a pause that
//! doubles (`FIRST_RETRY_NS`), at most `WRITE_TRIES` times; the lookups that waited for it are
//! answered from the buffer at once (its bytes came back with the failure). Then its segment is
//! given up: its items die with it (a later lookup is a miss, never a wrong value), its marks go
//! to the next commit (they stay pending until written), and new items stay out of the tier
//! for a pause that doubles while segments keep being given up (`MAX_DEGRADED_NS` at most). The
//! first segment written after the pause is the probe; a write that reaches the device ends it.
//! At close, retries are due at once, so a close on a failing device ends too.
//!
//! It must not wait, and must not submit anything but the retries of `ring::write_pages`.

use super::ring::SlotState;
use super::{FlashStore, Lookup, Now, ReadDone};
use crate::hash::KeyHash;

/// A lookup that waited this long for the device (a stalled device: its read, or the write it
/// waits for, never ends) is answered as a miss; its I/O keeps its slot until it ends.
pub(super) const READ_DEADLINE_NS: u64 = 2_000_000_000;

/// Tries of one write before its segment is given up.
pub(super) const WRITE_TRIES: u32 = 6;
/// The pause before the first retry of a failed write; each later one is twice as long (10, 20,
/// 40, 80, 160 ms: a segment is given up about 0.3 s after its first failure).
const FIRST_RETRY_NS: u64 = 10_000_000;
/// How long new items stay out of the tier after a segment is given up, at first.
const FIRST_DEGRADED_NS: u64 = 1_000_000_000;
/// The longest such pause while segments keep being given up.
const MAX_DEGRADED_NS: u64 = 60_000_000_000;

/// Whether the tier takes new items, after segments were given up.
#[derive(Clone, Copy, Debug)]
pub(super) struct Degraded {
    /// New items stay out of the tier until then (the store's clock, ns).
    pub until_ns: Option<u64>,
    /// The next pause.
    pub pause_ns: u64,
}

impl Default for Degraded {
    fn default() -> Degraded {
        Degraded { until_ns: None, pause_ns: FIRST_DEGRADED_NS }
    }
}

/// Superblock (watermark) writes that failed in a row, and when the next may go: retiring the
/// tail waits for one, and a device that fails it is asked again after a pause that doubles up
/// to `MAX_WATERMARK_PAUSE_NS`, not at every turn.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct WatermarkRetry {
    pub failures: u32,
    pub not_before_ns: u64,
}

/// The longest pause between two tries of a failing watermark write.
const MAX_WATERMARK_PAUSE_NS: u64 = 1_000_000_000;

impl FlashStore {
    /// True while new items stay out of the tier (a segment was given up a moment ago).
    pub fn degraded(&self, now: Now) -> bool {
        self.degraded.until_ns.is_some_and(|until| now.nanos < until)
    }

    /// Whether a watermark write may go now.
    pub(super) fn watermark_may_go(&self) -> bool {
        self.last_now.nanos >= self.watermark_retry.not_before_ns
    }

    /// A watermark write finished: failed ones pause the next.
    pub(super) fn watermark_written(&mut self, ok: bool) {
        let retry = &mut self.watermark_retry;
        if ok {
            *retry = WatermarkRetry::default();
            return;
        }
        retry.failures = (retry.failures + 1).min(30);
        let pause = (FIRST_RETRY_NS << (retry.failures - 1).min(20)).min(MAX_WATERMARK_PAUSE_NS);
        retry.not_before_ns = self.last_now.nanos.saturating_add(pause);
    }

    /// A clean stop begins: from now on waits for the device end after
    /// `recovery::DEVICE_PATIENCE` (the close then fails; the next start is cold).
    pub fn begin_close(&mut self) {
        self.close_by.get_or_insert_with(|| std::time::Instant::now() + super::recovery::DEVICE_PATIENCE);
    }

    /// True once a close began (its waits are bounded) or gave up on the device.
    pub(super) fn stuck_or_closing(&self) -> bool {
        self.device_stuck || self.close_by.is_some()
    }

    /// True once a close has waited for the device longer than it may.
    pub fn stuck(&self) -> bool {
        self.device_stuck || self.close_by.is_some_and(|by| std::time::Instant::now() >= by)
    }

    /// Reports failed the tickets of marks whose write has taken `READ_DEADLINE_NS` (a stalled
    /// device): the changes they guard are refused (`SERVER_ERROR`) instead of waiting; the write
    /// goes on, and its end reports nothing more.
    pub(super) fn expire_late_tickets(&mut self, now: Now) {
        for b in 0..self.bufs.len() {
            // Marks that could not even go to the device yet (the commit copy is out).
            let buf = &mut self.bufs[b];
            if buf.open_ticket.is_some() && now.nanos.saturating_sub(buf.open_ticket_ns) >= READ_DEADLINE_NS {
                let ticket = buf.open_ticket.take().expect("checked");
                self.stats.read_timeouts += 1;
                self.ticket_done(ticket, false);
            }
            let Some(write) = self.bufs[b].write.as_mut() else { continue };
            if write.ticket.is_some() && now.nanos.saturating_sub(write.ticket_ns) >= READ_DEADLINE_NS {
                let ticket = write.ticket.take().expect("checked");
                self.stats.read_timeouts += 1;
                self.ticket_done(ticket, false);
            }
        }
        // `--flash-sync`: marks written, their flush stalled.
        while let Some(i) =
            self.durable.syncing.iter().position(|&(_, since)| now.nanos.saturating_sub(since) >= READ_DEADLINE_NS)
        {
            let (ticket, _) = self.durable.syncing.swap_remove(i);
            self.stats.read_timeouts += 1;
            self.ticket_done(ticket, false);
        }
    }

    /// Answers as misses the lookups that have waited past `READ_DEADLINE_NS`.
    pub(super) fn abandon_late_reads(&mut self, now: Now, out: &mut Vec<ReadDone>) {
        self.expire_late_tickets(now);
        if self.reads.len() == self.free_reads.len() {
            return;
        }
        for pending in self.reads.iter_mut().flatten() {
            if !pending.abandoned && now.nanos.saturating_sub(pending.started_ns) >= READ_DEADLINE_NS {
                pending.abandoned = true;
                self.stats.read_timeouts += 1;
                out.push(ReadDone { token: pending.token, item: None });
            }
        }
    }

    /// True while a write has been on the device for `READ_DEADLINE_NS` or more (it stalls).
    pub(super) fn device_late(&self, now: Now) -> bool {
        let late = |started: u64| now.nanos.saturating_sub(started) >= READ_DEADLINE_NS;
        self.bufs.iter().any(|buf| buf.write.is_some_and(|write| late(write.started_ns)))
    }

    /// What a lookup that finds every read slot taken gets: Busy (ask again soon), or a miss
    /// while reads the device never finished hold slots (asking again would not help).
    pub(super) fn no_read_slot(&mut self) -> Lookup {
        if self.reads.iter().flatten().any(|pending| pending.abandoned) {
            self.stats.read_timeouts += 1;
            return Lookup::Miss;
        }
        Lookup::Busy
    }

    /// True from a segment's give-up until a write reaches the device again.
    pub(super) fn writes_failing(&self) -> bool {
        self.degraded.until_ns.is_some()
    }

    /// A write of buffer `b` failed (its pages and marks are back in the buffer): the lookups
    /// waiting for it are answered from DRAM, and it is tried again later or given up.
    pub(super) fn write_failed(&mut self, b: usize, now: Now, out: &mut Vec<ReadDone>) {
        self.answer_waiters(b, now, out);
        self.bufs[b].failures += 1;
        let failures = self.bufs[b].failures;
        if failures >= WRITE_TRIES {
            self.give_up(b, now);
        } else {
            self.bufs[b].retry_at = Some(now.nanos.saturating_add(FIRST_RETRY_NS << (failures - 1)));
        }
    }

    /// A write reached the device: the device works, the next give-up pauses afresh.
    pub(super) fn write_succeeded(&mut self, b: usize) {
        self.bufs[b].failures = 0;
        self.degraded = Degraded::default();
    }

    /// Whether buffer `b` may be written now (no write of it in flight or waiting to be tried
    /// again).
    pub(super) fn may_write(&self, b: usize) -> bool {
        self.bufs[b].write.is_none() && self.bufs[b].retry_at.is_none()
    }

    /// Tries again the failed writes whose pause is over (every one with `all`, at close).
    pub(super) fn retry_writes(&mut self, now: Now, all: bool) {
        for b in 0..self.bufs.len() {
            let Some(at) = self.bufs[b].retry_at else { continue };
            // A commit's retry needs the commit copy; the seal's does not.
            let ready = self.bufs[b].seal_pending || self.copy_free();
            if (all || now.nanos >= at) && self.bufs[b].write.is_none() && ready {
                self.bufs[b].retry_at = None;
                self.write_pages(b);
                self.io.flush();
            }
        }
    }

    /// When the earliest failed write (or watermark write) is due to be tried again, or the
    /// earliest lookup's deadline ends, if one waits (the store's clock, ns).
    pub fn next_retry_ns(&self) -> Option<u64> {
        // A watermark write goes when a retirement asks for it: only a pause still running waits.
        let retry = self.watermark_retry;
        let watermark =
            (retry.failures > 0 && retry.not_before_ns > self.last_now.nanos).then_some(retry.not_before_ns);
        // A lookup still waiting for the device ends at its deadline.
        let reads = self.reads.iter().flatten().filter(|p| !p.abandoned).map(|p| p.started_ns + READ_DEADLINE_NS);
        // So does a change waiting for its marks' write or flush.
        let open = self.bufs.iter().filter(|b| b.open_ticket.is_some()).map(|b| b.open_ticket_ns);
        let writing = self.bufs.iter().filter_map(|b| b.write.filter(|w| w.ticket.is_some()).map(|w| w.ticket_ns));
        let syncing = self.durable.syncing.iter().map(|&(_, since)| since);
        let tickets = open.chain(writing).chain(syncing).map(|since| since + READ_DEADLINE_NS);
        self.bufs.iter().filter_map(|buf| buf.retry_at).chain(watermark).chain(reads).chain(tickets).min()
    }

    /// Whether a failed write waits for its retry.
    pub(super) fn retries_pending(&self) -> bool {
        self.bufs.iter().any(|buf| buf.retry_at.is_some())
    }

    /// Gives up buffer `b`'s segment after `WRITE_TRIES` failed writes; new items stay out of
    /// the tier for a while.
    fn give_up(&mut self, b: usize, now: Now) {
        if self.active == Some(b) {
            self.active = None;
        }
        let slot = self.bufs[b].slot;
        // A write reported failed may still have reached the device: its records must not come
        // back after a crash once their keys change, so each key's group stays pending until a
        // mark for it is written (a change of such a key waits for that mark, as for any key
        // with a flash copy, and is refused while writes fail).
        let mut groups = Vec::new();
        if let Some(data) = self.bufs[b].data.as_ref() {
            let (seed, used) = (self.slots[slot as usize].seq, self.bufs[b].used.min(data.len()));
            super::gc::walk_items(&data[..used], seed, |_, item| groups.push(self.group(KeyHash::of(item.key))));
        }
        groups.sort_unstable();
        groups.dedup();
        for group in groups {
            self.defer_drop(group);
        }
        self.kill_slot(slot);
        // A dead segment, retired from the tail like any other (nothing in it is read again).
        if self.slots[slot as usize].state == SlotState::Buffer(b) {
            self.slots[slot as usize].state = SlotState::Sealed;
        }
        // Each group is still counted pending once: the next commit writes its mark again.
        let marks = std::mem::take(&mut self.bufs[b].marks_unwritten);
        self.durable.unrecorded.extend(marks);
        if let Some(ticket) = self.bufs[b].open_ticket.take() {
            self.ticket_done(ticket, false);
        }
        let buf = &mut self.bufs[b];
        (buf.seal_pending, buf.in_use, buf.failures, buf.retry_at) = (false, false, 0, None);
        self.stats.segments_given_up += 1;
        let pause = self.degraded.pause_ns;
        self.degraded = Degraded {
            until_ns: Some(now.nanos.saturating_add(pause)),
            pause_ns: pause.saturating_mul(2).min(MAX_DEGRADED_NS),
        };
    }
}
