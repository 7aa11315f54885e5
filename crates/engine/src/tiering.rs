//! The flash tier as its callers see it: `FlashTier`, which a partition with a flash tier
//! hands out (`Engine::flash`), and the types its calls return. Every flash call is declared
//! here once and implemented once (`cache/tier.rs`); a partition without a tier hands out none.
//!
//! It must not hold state: it is the seam, not the tier.

use crate::flash::{CascadeStats, Closed, FlashMemory, FlashStats, StoreError, TierCounts};
use crate::hash::KeyHash;
use crate::types::ItemDebug;

/// What a key needs before an operation may run on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlashProbe {
    /// In DRAM, or on neither tier: run the operation now.
    Ready,
    /// A flash read is in flight; `flash_poll` hands back the token once the key is in DRAM,
    /// or its read's copy waits for a plain read (`FlashTier::flash_serve_copy`), or it is
    /// known to be on neither tier. Then run the operation.
    Pending,
    /// Too many reads in flight: ask again after `flash_poll` has handed something back.
    Busy,
}

/// The tier's own counters (the store's are in `FlashStats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TierStats {
    /// Items written to flash as the log overwrote them (or at a clean close).
    pub spilled: u64,
    /// Their bytes.
    pub spilled_bytes: u64,
    /// Evicted items whose flash copy was still current: nothing written.
    pub spill_clean: u64,
    /// Evicted items the admission policy turned away.
    pub spill_rejected: u64,
    /// Evicted items lost because every write buffer was busy, or too large for a segment.
    pub spill_dropped: u64,
    /// Lookups that found the key only on flash and waited for a read.
    pub reads_started: u64,
    /// Items read back from flash into DRAM.
    pub promoted: u64,
    /// Flash hits of plain reads answered from the read's copy, not promoted (a first hit).
    pub copies_served: u64,
    /// Reads that found nothing current (another key's tag, superseded, corrupt, I/O error).
    pub read_misses: u64,
    /// Flash copies dropped because DRAM changed the key.
    pub invalidations: u64,
    /// Changes that waited for their invalidation to reach the device, and those the device
    /// failed (answered with an error, nothing changed).
    pub durable_waits: u64,
    /// Changes whose invalidation the device failed.
    pub durable_failures: u64,
    /// Evicted items not written because their key's invalidation was on its way (a newer
    /// version is about to replace them).
    pub spill_held: u64,
    /// Keys now both in DRAM and on flash (promoted, not changed since): `curr_items` counts
    /// them once. An estimate: a flash copy GC drops under a DRAM item still counts until
    /// that item leaves DRAM.
    pub in_both: u64,
}

/// Set in a token `flash_poll` hands back when the device failed the write that a change was
/// waiting for (`flash_guard_write`).
pub const FLASH_FAILED: u64 = 1 << 63;

/// Everything `stats` shows about a partition's flash tier.
#[derive(Clone, Copy, Debug)]
pub struct FlashReport {
    /// The store's counters.
    pub store: FlashStats,
    /// The tier's counters.
    pub tier: TierStats,
    /// The DRAM it holds.
    pub memory: FlashMemory,
    /// The I/O engine's name.
    pub io: &'static str,
    /// The cascade index's counters (None: the full index).
    pub cascade: Option<CascadeStats>,
    /// Mappings per index tier (the full index is all tier 1).
    pub tiers: TierCounts,
    /// The sets index's counters (None: another index).
    pub sets: Option<crate::flash::SetsStats>,
}

/// Why a flash store cannot be put behind a partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachError {
    /// Store mode evicts nothing, so nothing would reach flash.
    StoreMode,
    /// The partition has been written to (or has a tier already).
    NotNew,
}

impl std::fmt::Display for AttachError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AttachError::StoreMode => "a flash tier needs cache mode (store mode evicts nothing)",
            AttachError::NotNew => "a flash store joins a partition before its first write",
        })
    }
}

impl std::error::Error for AttachError {}

/// The flash tier behind a partition: requests that must see a key's item, or change a key
/// with a flash copy, ask first (`flash_probe`, `flash_guard_write`) and run when `flash_poll`
/// hands their token back. Calls never block but `flash_poll` with `wait` and `close_flash`.
pub trait FlashTier {
    /// Before an operation that must see `key`'s item runs: `Ready` when DRAM has it or flash
    /// cannot; `Pending` while it is read (`flash_poll` then hands back `token`); `Busy`: ask
    /// again after `flash_poll`. `copy`: the operation is a plain read (`Engine::get`), which
    /// may be answered from the read's copy instead of a promotion into DRAM.
    fn flash_probe(&mut self, key: &[u8], hash: KeyHash, token: u64, copy: bool) -> FlashProbe;
    /// A plain read whose `flash_probe` was `Pending` is about to run after `flash_poll` handed
    /// its token back: its `get` sees the read's copy if the item was not promoted. Copies
    /// last until `flash_submit`, and any change of their key drops them.
    fn flash_serve_copy(&mut self, key: &[u8], hash: KeyHash);
    /// Before a change of `key` runs (a write, delete, touch, ...): `Pending` while an
    /// invalidation of its flash copy goes to the device (the change must not run before:
    /// after a crash the copy would come back); `flash_poll` then hands back `token`, with
    /// `FLASH_FAILED` set if the device failed the write (answer an error, change nothing).
    /// `Ready` when the key has no flash copy; `Busy`: ask again after `flash_poll`.
    fn flash_guard_write(&mut self, key: &[u8], hash: KeyHash, token: u64) -> FlashProbe;
    /// Consumes finished flash I/O (with `wait`, blocking until some finishes): promoted keys'
    /// tokens go to `tokens`.
    fn flash_poll(&mut self, wait: bool, tokens: &mut Vec<u64>);
    /// Hands the flash reads queued since the last call to the device: callers that call this
    /// once per batch of requests get one system call per batch.
    fn flash_submit(&mut self);
    /// An eventfd that becomes readable when flash requests finish (None: poll while any are
    /// in flight).
    fn flash_notify_fd(&self) -> Option<std::os::fd::RawFd>;
    /// Flash requests in flight (poll while there are any).
    fn flash_in_flight(&self) -> usize;
    /// How soon a failed flash write is due to be tried again (poll by then), if one waits.
    fn flash_retry_in(&self) -> Option<std::time::Duration>;
    /// The tier's figures.
    fn flash_report(&self) -> Option<FlashReport>;
    /// A clean shutdown of the tier: DRAM items written to flash, the store closed.
    fn close_flash(&mut self) -> Result<Closed, StoreError>;
    /// The items of the `n`th flash segment (oldest first) not also in DRAM, for a dump; false
    /// past the last segment.
    fn dump_flash(&mut self, n: usize, f: &mut dyn FnMut(&[u8], &ItemDebug)) -> bool;
}
