//! Requests whose key is only on flash (KV-Direct's out-of-order execution with in-order
//! replies). Before a request that must see its key's item runs, the partition is asked where
//! the item is (`Engine::flash_probe`); if a flash read is needed, the request is parked here
//! with its read in flight and its reply holds a numbered part of its connection's reply order,
//! as a forwarded request does; the connection and the worker go on. When the read completes
//! (the item is then in DRAM, or known absent), the request runs and its reply fills the part.
//! A request forwarded from another worker is parked the same way and its reply goes back as a
//! late message. When too many reads are in flight, parked requests wait their turn in order:
//! nothing is dropped.
//!
//! It must not read or write sockets (replies reach connections through `lifecycle`).

use super::*;
use std::collections::VecDeque;
use tierkv_engine::{Engine, FlashProbe};
use tierkv_protocol::StoreMode;

/// A request waiting for its key's flash read.
struct Parked {
    /// Its reply's place (slot, generation, sequence) and kind, as for a forwarded request.
    entry: Entry,
    /// The worker that forwarded it (None: a connection of this worker).
    from: Option<usize>,
    request: Vec<u8>,
    hash: KeyHash,
    /// Its read is in flight (else it waits in `unissued` for room).
    issued: bool,
}

/// This worker's parked requests.
#[derive(Default)]
pub(super) struct Parking {
    /// The partition has a flash tier.
    pub(super) enabled: bool,
    parked: Vec<Option<Parked>>,
    free: Vec<usize>,
    /// Parked requests whose read found no room, oldest first.
    unissued: VecDeque<usize>,
    tokens: Vec<u64>,
    /// Connections a flash turn answered (reused).
    touched: Vec<usize>,
    /// The last flash turn finished some requests.
    busy: bool,
    /// Reads that must go back to other workers, per worker.
    late: Vec<Option<Box<Batch>>>,
}

impl Parking {
    pub(super) fn new(enabled: bool) -> Parking {
        Parking { enabled, ..Parking::default() }
    }
}

/// Whether a request must see its key's item wherever it is: everything keyed but a plain
/// set (which only replaces, and drops the flash copy as it does).
pub(super) fn needs_item(request: &Request<'_>) -> bool {
    match request.command {
        Command::Store { mode: StoreMode::Set, cas: 0, .. } => matches!(request.style, ReplyStyle::Meta(_)),
        Command::Get { .. }
        | Command::Store { .. }
        | Command::Delete { .. }
        | Command::Arith { .. }
        | Command::Atomic { .. }
        | Command::Vector { .. }
        | Command::Touch { .. }
        | Command::MetaDebug { .. } => true,
        _ => false,
    }
}

/// The one key of a request (`buffer` holds a base64 key decoded).
fn request_key<'b>(request: &Request<'b>, buffer: &'b mut [u8; 256]) -> Option<&'b [u8]> {
    request.command.key()?.decode_into(buffer)
}

impl Core {
    /// Parks `raw` (the request decoded as `request`) if its key's item must be read from
    /// flash first: true if parked (its reply comes later), false if it may run now (the item
    /// is in DRAM, or on neither tier). `entry` says where its reply goes, `from` which worker
    /// forwarded it.
    pub(super) fn park(&mut self, request: &Request<'_>, raw: &[u8], entry: Entry, from: Option<usize>) -> bool {
        if !self.parking.enabled || !needs_item(request) {
            return false;
        }
        let mut buffer = [0u8; 256];
        let Some(key) = request_key(request, &mut buffer) else { return false };
        let hash = KeyHash::of(key);
        let parking = &mut self.parking;
        let id = parking.free.pop().unwrap_or_else(|| {
            parking.parked.push(None);
            parking.parked.len() - 1
        });
        // Parked requests may finish in any order: each runs on what DRAM holds when its read
        // is done, and a read that a newer write overtook promotes nothing.
        let probe = self.partition.flash_probe(key, hash, id as u64);
        let parking = &mut self.parking;
        if probe == FlashProbe::Ready {
            parking.free.push(id);
            return false;
        }
        let issued = probe == FlashProbe::Pending;
        if !issued {
            parking.unissued.push_back(id);
        }
        parking.parked[id] = Some(Parked { entry, from, request: raw.to_vec(), hash, issued });
        self.state.counters.flash_parked += 1;
        true
    }

    /// Parks a request of `connection` with a part of its reply order waiting for it; true if
    /// parked (`kind` is Read or GetKey for reads, which the connection bounds).
    pub(super) fn park_local(
        &mut self,
        connection: &mut Connection,
        slot: usize,
        request: &Request<'_>,
        raw: &[u8],
        kind: Kind,
    ) -> bool {
        let seq = connection.order.next_seq();
        let entry = Entry { slot, generation: connection.generation, seq, kind, hash: 0, request_end: 0, reply_end: 0 };
        if !self.park(request, raw, entry, None) {
            return false;
        }
        connection.order.push_waiting(self.pool.pop().unwrap_or_default(), 1);
        // Reads count against the connection's bound (delivery takes them off again).
        connection.remote_reads += usize::from(kind != Kind::Request);
        true
    }

    /// Runs a request that waited for flash; its reply goes to `replies`.
    fn run_parked(&mut self, parked: &Parked, replies: &mut Vec<u8>) {
        self.state.fd = -1;
        self.run_entry(parked.entry.kind, &parked.request, replies);
    }

    /// Runs one forwarded (or parked) request of `kind`.
    pub(super) fn run_entry(&mut self, kind: Kind, request: &[u8], replies: &mut Vec<u8>) {
        let Decoded::Request { request, .. } = decode_request(request, &self.limits) else { return };
        match request.command {
            // A split get's key: its VALUE only; the connection's worker ends the line.
            Command::Get { keys, return_cas, touch, .. } if kind == Kind::GetKey => {
                for key in keys.iter() {
                    get_value(&mut self.partition, key, return_cas, touch, replies, &mut self.state);
                }
            }
            _ => {
                execute(&mut self.partition, &request, replies, &mut self.state, &mut Progress::whole());
            }
        }
    }
}

impl Worker {
    /// Consumes finished flash I/O: the requests whose reads completed run now, in the order
    /// they were parked, and requests waiting for room get their reads.
    pub(super) fn flash_turn(&mut self, poll: &Poll) {
        if !self.core.parking.enabled {
            return;
        }
        let mut tokens = std::mem::take(&mut self.core.parking.tokens);
        self.core.partition.flash_poll(false, &mut tokens);
        let mut touched = std::mem::take(&mut self.core.parking.touched);
        self.core.parking.busy = !tokens.is_empty();
        for token in tokens.drain(..) {
            self.finish_parked(token as usize, &mut touched);
        }
        self.core.parking.tokens = tokens;
        while let Some(&id) = self.core.parking.unissued.front() {
            let core = &mut self.core;
            let Some(parked) = core.parking.parked[id].as_ref() else {
                core.parking.unissued.pop_front();
                continue;
            };
            // Decoded in place (the request stays in its slot; only the partition changes).
            let probe = match decode_request(&parked.request, &core.limits) {
                Decoded::Request { request, .. } => {
                    let mut buffer = [0u8; 256];
                    let key = request_key(&request, &mut buffer).unwrap_or_default();
                    core.partition.flash_probe(key, parked.hash, id as u64)
                }
                // Not expected (it decoded when it was parked): it runs and answers now.
                _ => FlashProbe::Ready,
            };
            match probe {
                FlashProbe::Busy => break,
                FlashProbe::Pending => {
                    self.core.parking.unissued.pop_front();
                    if let Some(parked) = self.core.parking.parked[id].as_mut() {
                        parked.issued = true;
                    }
                }
                FlashProbe::Ready => {
                    self.core.parking.unissued.pop_front();
                    self.finish_parked(id, &mut touched);
                }
            }
        }
        // One write per connection for all the replies this turn completed.
        touched.sort_unstable();
        touched.dedup();
        self.settle(&touched, poll);
        touched.clear();
        self.core.parking.touched = touched;
        self.core.partition.flash_submit();
        self.send_late();
    }

    /// Runs parked request `id` and puts its reply where it belongs (a connection of this
    /// worker goes to `touched`).
    fn finish_parked(&mut self, id: usize, touched: &mut Vec<usize>) {
        let Some(parked) = self.core.parking.parked.get_mut(id).and_then(Option::take) else { return };
        self.core.parking.free.push(id);
        debug_assert!(parked.issued || !self.core.parking.unissued.contains(&id));
        match parked.from {
            Some(from) => {
                let parking = &mut self.core.parking;
                if parking.late.len() <= from {
                    parking.late.resize_with(from + 1, || None);
                }
                let mut batch = parking.late[from].take().unwrap_or_default();
                self.core.run_parked(&parked, &mut batch.replies);
                let mut entry = parked.entry;
                entry.reply_end = batch.replies.len();
                entry.request_end = 0;
                batch.entries.push(entry);
                self.core.parking.late[from] = Some(batch);
            }
            None => {
                let mut replies = self.core.pool.pop().unwrap_or_default();
                replies.clear();
                self.core.run_parked(&parked, &mut replies);
                if self.deliver_one(parked.entry, &replies) {
                    touched.push(parked.entry.slot);
                }
                replies.clear();
                self.core.pool.push(replies);
            }
        }
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
        let in_flight = self.core.partition.flash_in_flight() > 0 || parking.free.len() < parking.parked.len();
        // With an eventfd, the worker still polls on while completions keep coming (under load
        // that keeps up the depth: measured ~80k against ~95k flash reads/s sleeping between
        // them), and sleeps once a turn finds none.
        parking.enabled && (!parking.unissued.is_empty() || (in_flight && (self.flash_fd.is_none() || parking.busy)))
    }

    /// Registers the flash engine's completion eventfd with the poll, so the worker sleeps
    /// while flash reads are in flight and wakes when they finish.
    pub(super) fn watch_flash(&mut self, poll: &Poll) -> Result<(), ServeError> {
        let Some(fd) = self.core.partition.flash_notify_fd() else { return Ok(()) };
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

/// The flash file, opened, sized and claimed (`tierkv_engine::flash::claim_file`) once for all
/// workers.
pub(super) struct FlashFile {
    pub(super) file: std::fs::File,
    /// The identity every region must carry to be used.
    pub(super) identity: u64,
}

/// Partition `id`'s flash settings (of `workers`), before the file's identity is known.
fn flash_config(flash: &crate::config::FlashSettings, id: usize, workers: usize) -> tierkv_engine::flash::FlashConfig {
    let mut cfg = tierkv_engine::flash::FlashConfig::new(flash.size, id as u32, workers as u32);
    cfg.segment_bytes = flash.segment_bytes;
    cfg.admission = flash.admission;
    cfg.write_buffers = FLASH_WRITE_BUFFERS;
    // A buffer is written when full (or at a clean stop), never early: a part-filled segment
    // would take a whole slot of the ring, and early writes protect nothing here (after a
    // crash the tier starts empty anyway).
    cfg.flush_delay_ns = u64::MAX;
    cfg.cascade = flash.cascade_t1_bytes.map(|bytes| {
        let mut c = tierkv_engine::flash::CascadeConfig::with_t1_bytes((bytes / workers as u64).max(1 << 10));
        if flash.cascade_small {
            (c.block_entries, c.reorg_at, c.pages_per_stream) = (16, 4, 16);
        }
        c
    });
    if flash.cascade_small {
        cfg.expected_item_bytes = 2048;
    }
    cfg
}

/// Opens the flash file of `--flash-path` for `workers` partitions: checks that every region can
/// be laid out, creates and sizes the file, and claims it (a file that is not tierkv's is
/// refused unless `--flash-force`). If any step fails, a file this start created is removed
/// and one it lengthened gets its old length back.
pub(super) fn open_file(flash: &crate::config::FlashSettings, workers: usize) -> Result<FlashFile, ServeError> {
    let fail = |message: String| ServeError::Flash { path: flash.path.clone(), message };
    if flash.path.is_dir() {
        return Err(fail("is a directory; name a file in it".into()));
    }
    for id in 0..workers {
        tierkv_engine::flash::RegionLayout::new(&flash_config(flash, id, workers))
            .map_err(|e| fail(format!("--flash-size {} cannot be laid out: {e}", flash.size)))?;
    }
    let before = std::fs::metadata(&flash.path).ok().map(|m| m.len());
    let undo = |error: ServeError| {
        match before {
            None => {
                let _ = std::fs::remove_file(&flash.path);
            }
            Some(len) => {
                if let Ok(file) = std::fs::OpenOptions::new().write(true).open(&flash.path) {
                    if file.metadata().is_ok_and(|m| m.len() > len) {
                        let _ = file.set_len(len);
                    }
                }
            }
        }
        error
    };
    let (file, direct) = tierkv_engine::flash::open_file(&flash.path, flash.size)
        .map_err(|error| undo(fail(format!("cannot open or size it to {} bytes: {error}", flash.size))))?;
    if !direct {
        eprintln!(
            "tierkv: --flash-path {}: the file system refuses O_DIRECT; flash I/O goes through the page cache",
            flash.path.display()
        );
    }
    let claim = file
        .try_clone()
        .map_err(|e| e.to_string())
        .and_then(|clone| {
            let mut io = tierkv_engine::flash::io::threads::ThreadsEngine::new(clone, 1);
            tierkv_engine::flash::claim_file(&mut io, &flash_config(flash, 0, workers), flash.force)
                .map_err(|e| e.to_string())
        })
        .map_err(|message| undo(fail(message)))?;
    if let Some(why) = &claim.changed {
        eprintln!("tierkv: --flash-path {}: {why}", flash.path.display());
    }
    Ok(FlashFile { file, identity: claim.identity })
}

/// Puts partition `id`'s region of the flash file behind `partition`: restored after a clean
/// stop, else empty (and why is said).
pub(super) fn attach(
    partition: &mut Partition,
    flash: &crate::config::FlashSettings,
    file: &FlashFile,
    id: usize,
    workers: usize,
    verbose: u8,
) -> Result<(), ServeError> {
    use tierkv_engine::flash::{engine_for, FlashStore, Now};
    debug_assert!(workers > 0);
    let fail = |message: String| ServeError::Flash { path: flash.path.clone(), message };
    let mut cfg = flash_config(flash, id, workers);
    cfg.identity = file.identity;
    // A cascade lookup may read a few mapping blocks before its item, and merges read too.
    let depth = cfg.max_reads * if cfg.cascade.is_some() { 2 } else { 1 } + cfg.write_buffers + 8;
    let (io, note) = if flash.read_delay_ms > 0 {
        let file = file.file.try_clone().map_err(|e| fail(format!("cannot start flash I/O: {e}")))?;
        let delay = std::time::Duration::from_millis(flash.read_delay_ms);
        let io: Box<dyn tierkv_engine::flash::IoEngine> =
            Box::new(tierkv_engine::flash::io::threads::ThreadsEngine::with_read_delay(file, 8, delay));
        (io, None)
    } else {
        engine_for(flash.io, &file.file, depth).map_err(|e| fail(format!("cannot start flash I/O: {e}")))?
    };
    if let Some(note) = note.filter(|_| id == 0) {
        eprintln!("tierkv: --flash-io: {note}");
    }
    let started = std::time::Instant::now();
    let now = Now { unix: unix_now(), nanos: 1 };
    let (store, report) = FlashStore::open(io, cfg, now).map_err(|e| fail(format!("partition {id}: {e}")))?;
    if report.restored {
        eprintln!(
            "tierkv: flash partition {id}: restored {} items in {} ms",
            report.items,
            started.elapsed().as_millis()
        );
    } else if verbose > 0 || report.reason != tierkv_engine::flash::NEW_FILE {
        eprintln!("tierkv: flash partition {id}: starts empty: {}", report.reason);
    }
    partition.attach_flash(store).map_err(fail)
}

/// DRAM write buffers of one segment each, per partition: evictions keep filling one while
/// others are written.
const FLASH_WRITE_BUFFERS: u32 = 4;

impl Worker {
    /// A clean stop: this partition's DRAM items go to flash and its region closes cleanly.
    pub(super) fn close_flash(&mut self) {
        if !self.core.parking.enabled {
            return;
        }
        let started = std::time::Instant::now();
        let id = self.core.id;
        match self.core.partition.close_flash() {
            Ok(()) => eprintln!("tierkv: flash partition {id}: closed cleanly in {} ms", started.elapsed().as_millis()),
            Err(error) => {
                eprintln!("tierkv: flash partition {id}: the clean close failed ({error}); the next start is cold")
            }
        }
    }
}
