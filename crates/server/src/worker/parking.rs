//! Requests that wait for flash (KV-Direct's out-of-order execution with in-order replies).
//! Before a request on a key runs, the partition is asked whether it must wait: for a read of
//! the key's item from flash (`Engine::flash_probe`, for requests that must see the item) and,
//! for a change of the key, for an invalidation of its flash copy to reach the device
//! (`Engine::flash_guard_write`: a change acknowledged before that could be undone by a crash).
//! A request that must wait is parked here and its reply holds a numbered part of its
//! connection's reply order, as a forwarded request does; the connection and the worker go on.
//! A request forwarded from another worker is parked the same way and its reply goes back as a
//! late message.
//!
//! Requests on one key run in the order they arrived: each key with parked requests has a
//! queue, only its head waits for flash, and a request for a key with a queue joins its back
//! (so a read after a write sees the write, and a write after a read does not overtake it).
//! When too many reads are in flight, heads wait their turn in `unissued`: nothing is dropped.
//!
//! It must not read or write sockets (replies reach connections through `lifecycle`).

use super::connection::Connection;
use super::{Core, Worker, FLASH_EVENT};
use crate::error::ServeError;
use crate::execute::{execute, get_value, Progress};
use crate::forward::Batch;
use crate::limits::{FLASH_POLL_MOST_READS, POOL_BUFFERS, POOL_BUFFER_BYTES};
use crate::pending::{Kind, Learned, Pending};
use mio::{Interest, Poll};
use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::time::Duration;
use tierkv_engine::KeyHash;
use tierkv_engine::{Engine, FlashProbe, FLASH_FAILED};
use tierkv_protocol::{binary, decode_request, reply, Decoded, ErrorReply};
use tierkv_protocol::{Needs, ReplyStyle, Request};

/// A request waiting for flash: the pending work and its own copy of the request bytes
/// (for a base64 key, its decoded key follows them, where `pending.learned.key` points).
struct Parked {
    /// Its reply's place, its kind and what decoding learned (`needs.item`: its item is still
    /// to be read).
    pending: Pending,
    /// The worker that forwarded it (None: a connection of this worker).
    from: Option<usize>,
    request: Vec<u8>,
    /// What it waits for: its change's invalidation (else its item's read); once that is
    /// done, `guarded` (it is not asked for again).
    awaiting_guard: bool,
    guarded: bool,
}

/// This worker's parked requests.
#[derive(Default)]
pub(super) struct Parking {
    /// The partition has a flash tier.
    pub(super) enabled: bool,
    /// How long an idle worker looks for completions before it sleeps (`--flash-poll-us`).
    poll: Duration,
    parked: Vec<Option<Parked>>,
    free: Vec<usize>,
    /// Per key (hash) with parked requests, their ids in arrival order; the head waits for
    /// flash, the others for the head.
    queues: HashMap<u64, VecDeque<usize>, BuildHasherDefault<HashIsKey>>,
    /// Emptied queues kept for the next keys (at most `SPARE_QUEUES`): most keys park one
    /// request, and a queue per read would be an allocation per read.
    spare: Vec<VecDeque<usize>>,
    /// Heads that found no room for their read or mark, oldest first.
    unissued: VecDeque<usize>,
    tokens: Vec<u64>,
    /// Connections a flash turn answered (reused).
    touched: Vec<usize>,
    /// The last flash turn finished some requests.
    busy: bool,
    /// Reads that must go back to other workers, per worker.
    late: Vec<Option<Box<Batch>>>,
}

/// Emptied key queues kept for reuse, at most.
const SPARE_QUEUES: usize = 1024;

/// The hasher of maps keyed by a key's hash (`KeyHash`, already xxh3): the number as it is,
/// instead of hashing it again.
#[derive(Default)]
struct HashIsKey(u64);

impl Hasher for HashIsKey {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only u64 keys are hashed here; anything else still gets a usable hash.
        for &byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(byte);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

impl Parking {
    pub(super) fn new(enabled: bool, poll: Duration) -> Parking {
        Parking { enabled, poll, ..Parking::default() }
    }
}

/// memcached-style answer to a change whose invalidation the device failed: nothing changed.
fn failed_reply(request: &Request<'_>, out: &mut Vec<u8>) {
    match request.style {
        ReplyStyle::Binary(info) => binary::write_error(out, &info, binary::status::EINTERNAL),
        ReplyStyle::Text { noreply: true } => {}
        _ => reply::error(out, &ErrorReply::Server("flash write failed; nothing changed")),
    }
}

impl Core {
    /// Parks `pending` (its request bytes `raw`) if it must wait for flash: true if parked
    /// (its reply comes later), false if it may run now. `from`: the worker that forwarded it.
    pub(super) fn park(&mut self, mut pending: Pending, raw: &[u8], from: Option<usize>) -> bool {
        let needs = pending.learned.needs;
        if !self.parking.enabled || !(needs.item || needs.write) {
            return false;
        }
        // A base64 key is decoded here (the request's bytes do not hold it as it is used).
        let decoded = match pending.learned.key_in(raw) {
            Some(_) => None,
            None => match self.decoded_key(raw) {
                Some(key) => Some(key),
                None => return false,
            },
        };
        let key = decoded.as_deref().or_else(|| pending.learned.key_in(raw)).unwrap_or_default();
        // The hash decoding learned (routing hashed the key as it is used); none learned: now.
        let hash = match pending.learned.hash {
            0 => KeyHash::of(key),
            learned => KeyHash(learned),
        };
        pending.learned.hash = hash.0;
        let parking = &mut self.parking;
        let id = parking.free.pop().unwrap_or_else(|| {
            parking.parked.push(None);
            parking.parked.len() - 1
        });
        let behind = parking.queues.get(&hash.0).is_some_and(|queue| !queue.is_empty());
        let mut awaiting_guard = false;
        if !behind {
            let probe;
            (probe, awaiting_guard) = self.probe(key, hash, needs, needs.write, id);
            match probe {
                FlashProbe::Ready => {
                    self.parking.free.push(id);
                    return false;
                }
                FlashProbe::Busy => self.parking.unissued.push_back(id),
                FlashProbe::Pending => {}
            }
        }
        // It waits: its bytes are copied (a decoded key after them, where its span points),
        // into a pooled buffer (`run_one` gives it back).
        let mut request = self.pool.pop().unwrap_or_default();
        request.clear();
        request.extend_from_slice(raw);
        if let Some(key) = &decoded {
            pending.learned.key = (request.len() as u32, key.len() as u32);
            request.extend_from_slice(key);
        }
        let parking = &mut self.parking;
        match parking.queues.entry(hash.0) {
            Entry::Occupied(queue) => queue.into_mut().push_back(id),
            Entry::Vacant(place) => {
                let mut queue = parking.spare.pop().unwrap_or_default();
                queue.push_back(id);
                place.insert(queue);
            }
        }
        parking.parked[id] = Some(Parked { pending, from, request, awaiting_guard, guarded: false });
        self.state.counters.flash_parked += 1;
        true
    }

    /// The key of a request whose bytes do not hold it as it is used (base64), decoded; None
    /// if it has no valid key.
    #[cold]
    fn decoded_key(&self, raw: &[u8]) -> Option<Vec<u8>> {
        let mut buffer = [0u8; 256];
        match decode_request(raw, &self.limits) {
            Decoded::Request { request, .. } => {
                request.command.key().and_then(|key| key.decode_into(&mut buffer)).map(<[u8]>::to_vec)
            }
            _ => None,
        }
    }

    /// What the head of a key's queue waits for now: its item's read, then (`guard`) its
    /// change's invalidation; `Ready` when it may run. The bool: it waits for the invalidation.
    fn probe(&mut self, key: &[u8], hash: KeyHash, needs: Needs, guard: bool, id: usize) -> (FlashProbe, bool) {
        if needs.item {
            let Some(tier) = self.partition.flash() else { return (FlashProbe::Ready, false) };
            let probe = tier.flash_probe(key, hash, id as u64, needs.copy);
            if probe != FlashProbe::Ready {
                return (probe, false);
            }
        }
        if guard {
            let Some(tier) = self.partition.flash() else { return (FlashProbe::Ready, false) };
            return (tier.flash_guard_write(key, hash, id as u64), true);
        }
        (FlashProbe::Ready, false)
    }

    /// `probe` for parked request `id` (its key is where decoding found it: no decode).
    fn probe_parked(&mut self, id: usize) -> FlashProbe {
        let Some(parked) = self.parking.parked[id].take() else { return FlashProbe::Ready };
        let learned = parked.pending.learned;
        let guard = learned.needs.write && !parked.guarded;
        let key = learned.key_in(&parked.request).unwrap_or_default();
        let (probe, awaiting_guard) = self.probe(key, KeyHash(learned.hash), learned.needs, guard, id);
        self.parking.parked[id] = Some(Parked { awaiting_guard, ..parked });
        probe
    }

    /// Parks a request of `connection` with a part of its reply order waiting for it; true if
    /// parked (`kind` is Read or GetKey for reads, which the connection bounds).
    pub(super) fn park_local(
        &mut self,
        connection: &mut Connection,
        slot: usize,
        learned: Learned,
        raw: &[u8],
        kind: Kind,
    ) -> bool {
        let seq = connection.order.next_seq();
        let pending = Pending::new(slot, connection.generation, connection.fd, seq, kind, learned);
        if !self.park(pending, raw, None) {
            return false;
        }
        connection.order.push_waiting(self.pool.pop().unwrap_or_default(), 1);
        // Reads count against the connection's bound (delivery takes them off again).
        connection.remote_reads += usize::from(kind.reads());
        true
    }

    /// Runs a request that waited for flash (or answers that its change failed); its reply
    /// goes to `replies`.
    fn run_parked(&mut self, parked: &Parked, failed: bool, replies: &mut Vec<u8>) {
        self.state.fd = parked.pending.fd;
        let request = &parked.request[..];
        let learned = parked.pending.learned;
        if learned.needs.copy && !failed {
            // Its read's copy, if the item was not promoted.
            if let (Some(key), Some(tier)) = (learned.key_in(request), self.partition.flash()) {
                tier.flash_serve_copy(key, KeyHash(learned.hash));
            }
        }
        if failed {
            if let Decoded::Request { request, .. } = decode_request(request, &self.limits) {
                failed_reply(&request, replies);
            }
            return;
        }
        self.run_entry(parked.pending.kind, request, replies);
    }

    /// Runs one forwarded (or parked) request of `kind`: decoded here once, or for a split
    /// get's key (the request is the key) not at all.
    pub(super) fn run_entry(&mut self, kind: Kind, request: &[u8], replies: &mut Vec<u8>) {
        if let Kind::GetKey { cas, touch } = kind {
            // Its VALUE only; the connection's worker ends the line.
            get_value(&mut self.partition, request, cas, touch, replies, &mut self.state);
            return;
        }
        let Decoded::Request { request, .. } = decode_request(request, &self.limits) else { return };
        execute(&mut self.partition, &request, replies, &mut self.state, &mut Progress::whole());
    }
}

impl Worker {
    /// Consumes finished flash I/O: heads whose read or invalidation finished go on (or run),
    /// the requests behind them follow in order, and heads waiting for room get it.
    pub(super) fn flash_turn(&mut self, poll: &Poll) {
        if !self.core.parking.enabled {
            return;
        }
        let mut tokens = std::mem::take(&mut self.core.parking.tokens);
        self.core.partition.apply_crew_notices();
        if let Some(tier) = self.core.partition.flash() {
            tier.flash_poll(false, &mut tokens);
        }
        let mut touched = std::mem::take(&mut self.core.parking.touched);
        self.core.parking.busy = !tokens.is_empty();
        for token in tokens.drain(..) {
            let id = (token & !FLASH_FAILED) as usize;
            if token & FLASH_FAILED != 0 {
                self.finish_parked(id, true, &mut touched);
            } else {
                self.advance(id, &mut touched);
            }
        }
        self.core.parking.tokens = tokens;
        while let Some(&id) = self.core.parking.unissued.front() {
            if self.core.parking.parked[id].is_none() {
                self.core.parking.unissued.pop_front();
                continue;
            }
            match self.core.probe_parked(id) {
                FlashProbe::Busy => break,
                FlashProbe::Pending => {
                    self.core.parking.unissued.pop_front();
                }
                FlashProbe::Ready => {
                    self.core.parking.unissued.pop_front();
                    self.finish_parked(id, false, &mut touched);
                }
            }
        }
        // One write per connection for all the replies this turn completed.
        touched.sort_unstable();
        touched.dedup();
        self.settle(&touched, poll);
        touched.clear();
        self.core.parking.touched = touched;
        if let Some(tier) = self.core.partition.flash() {
            tier.flash_submit();
        }
        self.send_late();
    }

    /// Head `id`'s wait is over: it runs, or waits for its next step (a write whose item was
    /// read then waits for its invalidation).
    fn advance(&mut self, id: usize, touched: &mut Vec<usize>) {
        let Some(parked) = self.core.parking.parked.get_mut(id).and_then(Option::as_mut) else { return };
        // What it waited for is done: its invalidation is on the device (a failed one comes back
        // as FLASH_FAILED), or its item is in DRAM or known absent (not read again).
        if parked.awaiting_guard {
            parked.guarded = true;
        } else {
            parked.pending.learned.needs.item = false;
        }
        match self.core.probe_parked(id) {
            FlashProbe::Ready => self.finish_parked(id, false, touched),
            FlashProbe::Pending => {}
            FlashProbe::Busy => self.core.parking.unissued.push_back(id),
        }
    }

    /// Runs parked request `id` (or answers that its change failed), then the requests queued
    /// behind it on its key that need not wait.
    fn finish_parked(&mut self, id: usize, failed: bool, touched: &mut Vec<usize>) {
        let Some(hash) = self.run_one(id, failed, touched) else { return };
        loop {
            let parking = &mut self.core.parking;
            let Some(&next) = parking.queues.get(&hash.0).and_then(VecDeque::front) else {
                if let Some(queue) = parking.queues.remove(&hash.0) {
                    if parking.spare.len() < SPARE_QUEUES {
                        parking.spare.push(queue);
                    }
                }
                return;
            };
            match self.core.probe_parked(next) {
                FlashProbe::Ready => {
                    self.run_one(next, false, touched);
                }
                FlashProbe::Pending => return,
                FlashProbe::Busy => {
                    self.core.parking.unissued.push_back(next);
                    return;
                }
            }
        }
    }

    /// Runs parked request `id` (or answers that its change failed), puts its reply where it
    /// belongs (a connection of this worker goes to `touched`) and takes it off its key's
    /// queue; returns its key.
    fn run_one(&mut self, id: usize, failed: bool, touched: &mut Vec<usize>) -> Option<KeyHash> {
        let parked = self.core.parking.parked.get_mut(id).and_then(Option::take)?;
        self.core.parking.free.push(id);
        if let Some(queue) = self.core.parking.queues.get_mut(&parked.pending.learned.hash) {
            debug_assert_eq!(queue.front(), Some(&id), "only a key's head runs");
            queue.retain(|&queued| queued != id);
        }
        match parked.from {
            Some(from) => {
                let parking = &mut self.core.parking;
                if parking.late.len() <= from {
                    parking.late.resize_with(from + 1, || None);
                }
                let mut batch = parking.late[from].take().unwrap_or_default();
                self.core.run_parked(&parked, failed, &mut batch.replies);
                let mut entry = parked.pending;
                entry.reply_end = batch.replies.len();
                entry.request_end = 0;
                batch.entries.push(entry);
                self.core.parking.late[from] = Some(batch);
            }
            None => {
                let mut replies = self.core.pool.pop().unwrap_or_default();
                replies.clear();
                self.core.run_parked(&parked, failed, &mut replies);
                if self.deliver_one(parked.pending, &replies) {
                    touched.push(parked.pending.slot);
                }
                replies.clear();
                self.core.pool.push(replies);
            }
        }
        // Pooled buffers are empty (takers append to them).
        let mut request = parked.request;
        if self.core.pool.len() < POOL_BUFFERS && request.capacity() <= POOL_BUFFER_BYTES {
            request.clear();
            self.core.pool.push(request);
        }
        Some(KeyHash(parked.pending.learned.hash))
    }

    /// Sends the replies of other workers' parked requests back to them.
    fn send_late(&mut self) {
        for from in 0..self.core.parking.late.len() {
            if let Some(batch) = self.core.parking.late[from].take() {
                self.core.links.send_late(from, batch);
            }
        }
    }

    /// Whether the loop must poll again without sleeping: requests wait for room to start
    /// their reads, or the I/O engine has no eventfd to wake the worker with.
    pub(super) fn flash_waiting(&self) -> bool {
        let parking = &self.core.parking;
        let in_flight = self.core.partition.flash_ref().is_some_and(|tier| tier.flash_in_flight() > 0)
            || parking.free.len() < parking.parked.len();
        // With an eventfd, the worker still polls on while completions keep coming (under load
        // that keeps up the depth: measured ~80k against ~95k flash reads/s sleeping between
        // them), and sleeps once a turn finds none.
        parking.enabled && (!parking.unissued.is_empty() || (in_flight && (self.flash_fd.is_none() || parking.busy)))
    }

    /// How long the idle worker should look for work before it sleeps: `--flash-poll-us` while
    /// a few flash reads are in flight (a read that finishes within it wakes no sleeping
    /// worker), else nothing: with more, completions come often enough that a wake-up finds
    /// several, and looking would keep the CPU from the device's own work on a virtual machine
    /// (`FLASH_POLL_MOST_READS`).
    pub(super) fn flash_poll(&self) -> Duration {
        let in_flight = self.core.partition.flash_ref().map_or(0, |tier| tier.flash_in_flight());
        if self.core.parking.enabled && (1..=FLASH_POLL_MOST_READS).contains(&in_flight) {
            self.core.parking.poll
        } else {
            Duration::ZERO
        }
    }

    /// Registers the flash engine's completion eventfd with the poll, so the worker sleeps
    /// while flash reads are in flight and wakes when they finish.
    pub(super) fn watch_flash(&mut self, poll: &Poll) -> Result<(), ServeError> {
        let Some(fd) = self.core.partition.flash_ref().and_then(|tier| tier.flash_notify_fd()) else { return Ok(()) };
        poll.registry()
            .register(&mut mio::unix::SourceFd(&fd), FLASH_EVENT, Interest::READABLE)
            .map_err(ServeError::system("watch the flash completion eventfd"))?;
        self.flash_fd = Some(fd);
        Ok(())
    }

    /// The eventfd said completions wait: empty its counter (`flash_turn` takes them).
    pub(super) fn flash_event(&mut self) {
        if let Some(fd) = self.flash_fd {
            crate::sys::drain_eventfd(fd);
        }
    }
}
