//! A simulated flash device in memory, in TigerBeetle's tradition: deterministic from a seed, it
//! completes requests in a random order, can fail any request, flip bits in what a read returns,
//! and on `crash` tears every write still in flight at a random byte (or drops or keeps it whole).
//! Tests hold a `SimDisk` handle to steer faults and crashes while the store owns a `SimDevice`.

use std::sync::{Arc, Mutex, MutexGuard};

use super::{Completion, IoEngine, IoKind, IoOp};

/// A deterministic generator (splitmix64) for fault decisions.
#[derive(Clone, Debug)]
pub struct SimRng(u64);

impl SimRng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> SimRng {
        SimRng(seed)
    }

    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in 0..n (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// True with probability `per_million` / 1e6.
    pub fn chance(&mut self, per_million: u32) -> bool {
        self.below(1_000_000) < u64::from(per_million)
    }
}

/// Faults the device injects, as chances per million requests.
#[derive(Clone, Copy, Debug, Default)]
pub struct Faults {
    /// A request fails with EIO (a failed write leaves the device unchanged).
    pub fail_per_million: u32,
    /// A read returns its data with one bit flipped.
    pub flip_per_million: u32,
}

/// Counters of what the device did, for tests to assert that faults happened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimCounters {
    /// Reads served.
    pub reads: u64,
    /// Writes served.
    pub writes: u64,
    /// Operations failed on purpose.
    pub failed: u64,
    /// Bits flipped on purpose.
    pub flipped: u64,
    /// Writes torn on purpose.
    pub torn: u64,
    /// Writes lost at a simulated crash.
    pub dropped: u64,
}

struct Disk {
    data: Vec<u8>,
    /// Requests not yet complete, each with the device handle that submitted it (several stores
    /// may share one disk, each region through its own handle, as the server's partitions do).
    pending: Vec<(u64, IoOp)>,
    devices: u64,
    /// Requests left before the process "dies" (`crash_after`); then writes stop reaching the
    /// device (the first one torn) while the store, unaware, carries on.
    fuse: Option<u64>,
    dead: bool,
    rng: SimRng,
    faults: Faults,
    /// Every write fails with EIO (a device whose writes fail for good, or for a while); half
    /// of them reach the media all the same.
    fail_writes: bool,
    /// Nothing completes (a stalled device): requests wait until this is lifted.
    stalled: bool,
    /// No flush (`IoKind::Sync`) completes: a device whose cache flush hangs.
    syncs_stalled: bool,
    counters: SimCounters,
}

/// The device's contents and fault controls, shared between a test and the store's `SimDevice`.
#[derive(Clone)]
pub struct SimDisk(Arc<Mutex<Disk>>);

impl SimDisk {
    /// A blank disk of `bytes`, its faults drawn from `seed`.
    pub fn new(bytes: usize, seed: u64) -> SimDisk {
        let disk = Disk {
            data: vec![0; bytes],
            pending: Vec::new(),
            devices: 0,
            fuse: None,
            dead: false,
            rng: SimRng::new(seed),
            faults: Faults::default(),
            fail_writes: false,
            stalled: false,
            syncs_stalled: false,
            counters: SimCounters::default(),
        };
        SimDisk(Arc::new(Mutex::new(disk)))
    }

    fn lock(&self) -> MutexGuard<'_, Disk> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A device handle for a store to own.
    pub fn device(&self) -> SimDevice {
        let id = {
            let mut disk = self.lock();
            disk.devices += 1;
            disk.devices
        };
        SimDevice { disk: self.clone(), id, in_flight: 0 }
    }

    /// Faults from now on.
    pub fn set_faults(&self, faults: Faults) {
        self.lock().faults = faults;
    }

    /// Every write fails (true) or none does on purpose (false) from now on; reads still work.
    pub fn fail_writes(&self, fail: bool) {
        self.lock().fail_writes = fail;
    }

    /// Stalls the device (true: nothing completes) or lets it go on (false).
    pub fn stall(&self, stalled: bool) {
        self.lock().stalled = stalled;
    }

    /// Flushes stop completing (or complete again); reads and writes go on.
    pub fn stall_syncs(&self, stalled: bool) {
        self.lock().syncs_stalled = stalled;
    }

    /// What it has done so far.
    pub fn counters(&self) -> SimCounters {
        self.lock().counters
    }

    /// The process dies: every request still in flight is lost, except writes, each of which the
    /// device may have applied whole, torn at a random byte, or not at all.
    pub fn crash(&self) {
        let mut disk = self.lock();
        let pending = std::mem::take(&mut disk.pending);
        for (_, op) in pending {
            if !matches!(op.kind, IoKind::Write) {
                continue;
            }
            let keep = match disk.rng.below(3) {
                0 => 0,
                1 => op.len,
                _ => disk.rng.below(op.len as u64) as usize,
            };
            if keep == 0 {
                disk.counters.dropped += 1;
            } else if keep < op.len {
                disk.counters.torn += 1;
            }
            let at = op.offset as usize;
            disk.data[at..at + keep].copy_from_slice(&op.bytes()[..keep]);
        }
    }

    /// The process dies after `requests` more requests complete: from then on nothing reaches
    /// the device (the next write is torn at a random byte), though requests still "complete".
    /// `revive` starts a new process on what the device holds.
    pub fn crash_after(&self, requests: u64) {
        self.lock().fuse = Some(requests);
    }

    /// After a simulated crash: serves again, with what reached the disk.
    pub fn revive(&self) {
        let mut disk = self.lock();
        disk.fuse = None;
        disk.dead = false;
        disk.pending.clear();
    }

    /// Flips one bit at `offset` (for tests that corrupt a chosen place).
    pub fn flip(&self, offset: usize, bit: u8) {
        self.lock().data[offset] ^= 1 << (bit % 8);
    }

    /// Zeroes `len` bytes at `offset`, as a tool that lays a file out anew does.
    pub fn zero(&self, offset: usize, len: usize) {
        self.lock().data[offset..offset + len].fill(0);
    }
}

impl Disk {
    /// A request reaching a device whose process died: a write is torn once, then dropped.
    fn after_death(&mut self, op: IoOp) -> Completion {
        if matches!(op.kind, IoKind::Write) && !std::mem::replace(&mut self.dead, true) && op.len > 0 {
            let keep = self.rng.below(op.len as u64) as usize;
            let at = op.offset as usize;
            if at + keep <= self.data.len() {
                self.data[at..at + keep].copy_from_slice(&op.bytes()[..keep]);
                self.counters.torn += 1;
            }
        }
        Completion { token: op.token, buf: op.buf, result: Ok(op.len) }
    }

    /// Completes a random one of device `id`'s pending requests, if it has any.
    fn complete_one(&mut self, id: u64) -> Option<Completion> {
        if self.stalled {
            return None;
        }
        let mine = self.completable(id);
        if mine == 0 {
            return None;
        }
        let nth = self.rng.below(mine as u64) as usize;
        let syncs_stalled = self.syncs_stalled;
        let index = self
            .pending
            .iter()
            .enumerate()
            .filter(|(_, (d, op))| *d == id && !(syncs_stalled && op.kind == IoKind::Sync))
            .nth(nth)?
            .0;
        Some(self.complete(index))
    }

    /// Device `id`'s pending requests that may complete now.
    fn completable(&self, id: u64) -> usize {
        if self.stalled {
            return 0;
        }
        let held = |op: &IoOp| self.syncs_stalled && op.kind == IoKind::Sync;
        self.pending.iter().filter(|(d, op)| *d == id && !held(op)).count()
    }

    fn complete(&mut self, index: usize) -> Completion {
        let (_, mut op) = self.pending.swap_remove(index);
        match self.fuse {
            Some(0) => return self.after_death(op),
            Some(n) => self.fuse = Some(n - 1),
            None => {}
        }
        let (at, len) = (op.offset as usize, op.len);
        if at + len > self.data.len() || !op.fits() {
            return Completion { token: op.token, buf: op.buf, result: Err(libc::EINVAL) };
        }
        if self.fail_writes && op.kind == IoKind::Write {
            // A write reported failed may still have reached the media (half of them here).
            if self.rng.chance(500_000) {
                self.data[at..at + len].copy_from_slice(op.bytes());
            }
            self.counters.failed += 1;
            return Completion { token: op.token, buf: op.buf, result: Err(libc::EIO) };
        }
        if self.rng.chance(self.faults.fail_per_million) {
            self.counters.failed += 1;
            return Completion { token: op.token, buf: op.buf, result: Err(libc::EIO) };
        }
        match op.kind {
            IoKind::Read => {
                self.counters.reads += 1;
                op.bytes_mut().copy_from_slice(&self.data[at..at + len]);
                if len > 0 && self.rng.chance(self.faults.flip_per_million) {
                    self.counters.flipped += 1;
                    let bit = self.rng.below(len as u64 * 8) as usize;
                    op.bytes_mut()[bit / 8] ^= 1 << (bit % 8);
                }
            }
            IoKind::Write => {
                self.counters.writes += 1;
                self.data[at..at + len].copy_from_slice(op.bytes());
            }
            IoKind::Sync => {}
        }
        Completion { token: op.token, buf: op.buf, result: Ok(len) }
    }
}

/// The store's end of a `SimDisk`: requests complete, in a random order, when polled.
pub struct SimDevice {
    disk: SimDisk,
    id: u64,
    in_flight: usize,
}

impl IoEngine for SimDevice {
    fn submit(&mut self, op: IoOp) {
        self.in_flight += 1;
        self.disk.lock().pending.push((self.id, op));
    }

    fn flush(&mut self) {}

    fn poll(&mut self, out: &mut Vec<Completion>) {
        let mut disk = self.disk.lock();
        // Some of what is pending finishes, in a random order: completions arrive out of order.
        let n = disk.completable(self.id);
        let finished = if n == 0 { 0 } else { disk.rng.below(n as u64 + 1) as usize };
        for _ in 0..finished {
            out.extend(disk.complete_one(self.id));
        }
        self.in_flight -= finished;
    }

    fn wait(&mut self, out: &mut Vec<Completion>) {
        let before = out.len();
        self.poll(out);
        if out.len() == before {
            let mut disk = self.disk.lock();
            if let Some(c) = disk.complete_one(self.id) {
                out.push(c);
                self.in_flight -= 1;
            }
        }
    }

    fn in_flight(&self) -> usize {
        self.in_flight
    }

    fn name(&self) -> &'static str {
        "sim"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flash::io::AlignedBuf;
    use crate::flash::layout::PAGE;

    fn write(dev: &mut SimDevice, offset: u64, byte: u8, token: u64) {
        let mut buf = AlignedBuf::new(PAGE);
        buf.fill(byte);
        dev.submit(IoOp { kind: IoKind::Write, offset, buf, len: PAGE, at: 0, token });
    }

    fn drain(dev: &mut SimDevice) -> Vec<Completion> {
        let mut out = Vec::new();
        while dev.in_flight() > 0 {
            dev.wait(&mut out);
        }
        out
    }

    #[test]
    fn writes_then_reads_return_the_data_in_some_order() {
        let disk = SimDisk::new(4 * PAGE, 1);
        let mut dev = disk.device();
        for i in 0..4 {
            write(&mut dev, (i * PAGE) as u64, i as u8 + 1, i as u64);
        }
        let done = drain(&mut dev);
        assert_eq!(done.len(), 4);
        dev.submit(IoOp {
            kind: IoKind::Read,
            offset: 2 * PAGE as u64,
            buf: AlignedBuf::new(PAGE),
            at: 0,
            len: PAGE,
            token: 9,
        });
        let done = drain(&mut dev);
        assert_eq!(done[0].token, 9);
        assert!(done[0].buf.iter().all(|&b| b == 3));
    }

    #[test]
    fn a_crash_keeps_completed_writes_and_tears_or_drops_in_flight_ones() {
        let disk = SimDisk::new(64 * PAGE, 7);
        let mut dev = disk.device();
        write(&mut dev, 0, 1, 0);
        drain(&mut dev);
        for i in 1..64 {
            write(&mut dev, (i * PAGE) as u64, 2, i as u64);
        }
        disk.crash();
        let c = disk.counters();
        assert!(c.torn > 0 && c.dropped > 0, "{c:?}");
        let mut dev = disk.device();
        dev.submit(IoOp { kind: IoKind::Read, offset: 0, buf: AlignedBuf::new(PAGE), len: PAGE, at: 0, token: 0 });
        assert!(drain(&mut dev)[0].buf.iter().all(|&b| b == 1));
    }

    #[test]
    fn faults_fail_requests_and_flip_bits() {
        let disk = SimDisk::new(PAGE, 3);
        disk.set_faults(Faults { fail_per_million: 300_000, flip_per_million: 500_000 });
        let mut dev = disk.device();
        for t in 0..200 {
            dev.submit(IoOp { kind: IoKind::Read, offset: 0, buf: AlignedBuf::new(PAGE), len: PAGE, at: 0, token: t });
        }
        let done = drain(&mut dev);
        let failed = done.iter().filter(|c| c.result == Err(libc::EIO)).count();
        let flipped = done.iter().filter(|c| c.result.is_ok() && c.buf.iter().any(|&b| b != 0)).count();
        assert!(failed > 20 && flipped > 20, "{failed} {flipped}");
        assert_eq!(disk.counters().failed as usize, failed);
    }
}
