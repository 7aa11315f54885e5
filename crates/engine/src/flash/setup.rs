//! Building the flash tier from what a user chooses: the flash file opened, sized and claimed
//! once for all partitions (`TierFile::open`), and each partition's store over its region
//! (`TierFile::open_partition`). The tuning that is the engine's business (write buffers, the
//! flush policy, I/O depth, cascade geometry) is decided here, not by the caller.
//!
//! It must not print: what happened is returned (notes, `OpenReport`, `OpenError`).

use super::config::{CascadeConfig, FlashConfig, LayoutError, RegionLayout};
use super::identity::{claim_file, ClaimError};
use super::io::{engine_for, faulty::FaultLayer, open_file, threads::ThreadsEngine, FlashIo};
use super::recovery::OpenReport;
use super::{AdmissionPolicy, FlashStore, Now, SetsConfig, StoreError};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// DRAM write buffers of one segment each, per partition: evictions keep filling one while
/// others are written.
pub(super) const WRITE_BUFFERS: u32 = 4;

/// What a user chooses for the flash tier, all partitions together.
#[derive(Clone, Debug, PartialEq)]
pub struct TierSettings {
    /// The flash file's size; each partition gets an equal share.
    pub file_bytes: u64,
    /// Bytes per segment (a power of two, 64 KiB to 4 MiB).
    pub segment_bytes: u32,
    /// Which evicted items are written to flash.
    pub admission: AdmissionPolicy,
    /// A device flush after each commit of invalidations.
    pub sync_commits: bool,
    /// How I/O reaches the device.
    pub io: FlashIo,
    /// The cascade index with this many bytes of tier 1 for all partitions; None: the full
    /// index.
    pub cascade_t1_bytes: Option<u64>,
    /// The sets index (Kangaroo) with this percent of the file as its log, instead of the full
    /// or cascade index.
    pub sets: Option<u32>,
    /// The key + value bytes of a typical item: the index (and the sets' filters) are sized
    /// for items of this size; None: `DEFAULT_EXPECTED_ITEM_BYTES` on flash.
    pub item_bytes: Option<u32>,
    /// Tests only: small mapping blocks and early merges, so they happen constantly.
    pub small_index: bool,
    /// Tests only: I/O (through either engine) with slower reads or failing writes.
    pub test_io: Option<TestIo>,
}

/// Tests only: how the I/O engine misbehaves (`io::faulty::FaultLayer`).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct TestIo {
    /// Every read this much slower.
    pub read_delay: Duration,
    /// Every write fails while this file exists.
    pub fail_writes_while: Option<PathBuf>,
}

impl FlashConfig {
    /// Partition `partition`'s store settings (of `partitions`), before the file's identity is
    /// known.
    pub fn for_partition(settings: &TierSettings, partition: usize, partitions: usize) -> FlashConfig {
        let mut cfg = FlashConfig::new(settings.file_bytes, partition as u32, partitions as u32);
        cfg.segment_bytes = settings.segment_bytes;
        cfg.admission = settings.admission;
        cfg.sync_commits = settings.sync_commits;
        cfg.write_buffers = WRITE_BUFFERS;
        // A buffer is written when full (or at a clean stop, or for a commit), never on a
        // timer: a part-filled segment would take a whole slot of the ring.
        cfg.flush_delay_ns = u64::MAX;
        cfg.cascade = settings.cascade_t1_bytes.map(|bytes| {
            let mut c = CascadeConfig::with_t1_bytes((bytes / partitions as u64).max(1 << 10));
            if settings.small_index {
                (c.block_entries, c.reorg_at, c.pages_per_stream) = (16, 4, 16);
            }
            c
        });
        if let Some(bytes) = settings.item_bytes {
            cfg.expected_item_bytes = super::config::on_flash_item_bytes(bytes);
        }
        if settings.small_index {
            cfg.expected_item_bytes = 2048;
        }
        if let Some(log_percent) = settings.sets {
            cfg.sets = Some(SetsConfig { log_percent, ..SetsConfig::default() });
        }
        cfg
    }

    /// Requests the store may have at the device at once: its reads (a cascade lookup may read
    /// a few mapping blocks before its item, and merges read too), its write buffers, and a
    /// few for commits.
    pub fn io_depth(&self) -> u32 {
        let moves = self.sets.map_or(0, |s| s.max_moves * 2);
        self.max_reads * if self.cascade.is_some() { 2 } else { 1 } + self.write_buffers + 8 + moves
    }
}

impl TierSettings {
    /// The DRAM all `partitions` stores hold at most; None if a region cannot be laid out.
    pub fn dram_bytes(&self, partitions: usize) -> Option<u64> {
        (0..partitions).map(|id| FlashConfig::for_partition(self, id, partitions).dram_bytes().ok()).sum()
    }
}

/// Why the flash tier could not be opened.
#[derive(Debug)]
pub enum OpenError {
    /// The path names a directory.
    Directory,
    /// The file cannot hold a region per partition as asked.
    Layout(LayoutError),
    /// The file cannot be opened or given its size.
    File(std::io::Error),
    /// Another process (another tierkv) holds the file's lock.
    InUse,
    /// The file is another program's, or its first page cannot be read or written.
    Claim(ClaimError),
    /// The I/O engine cannot start.
    Io(std::io::Error),
    /// A partition's region cannot be opened.
    Region {
        /// The partition.
        partition: usize,
        /// What was wrong.
        why: StoreError,
    },
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::Directory => f.write_str("is a directory; name a file in it"),
            OpenError::Layout(error) => write!(f, "cannot be laid out: {}", error.0),
            OpenError::File(error) => write!(f, "cannot open or size it: {error}"),
            OpenError::InUse => {
                f.write_str("is in use: another process (another tierkv?) holds its lock; stop it or name another file")
            }
            OpenError::Claim(error) => write!(f, "{error}"),
            OpenError::Io(error) => write!(f, "cannot start flash I/O: {error}"),
            OpenError::Region { partition, why } => write!(f, "partition {partition}: {why}"),
        }
    }
}

impl std::error::Error for OpenError {}

/// The flash file, opened, sized and claimed once for all partitions.
#[derive(Debug)]
pub struct TierFile {
    file: File,
    /// Where it was opened, and the file system's (device, inode) of what was opened there.
    path: std::path::PathBuf,
    opened: (u64, u64),
    /// The identity every region must carry to be used.
    identity: u64,
    /// The file system refused O_DIRECT: I/O goes through the page cache.
    pub buffered: bool,
    /// The file's identity changed, and why (a new file, another layout, a takeover).
    pub changed: Option<String>,
}

/// The file system's (device, inode) of a file.
fn file_id(metadata: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (metadata.dev(), metadata.ino())
}

impl TierFile {
    /// Opens the flash file at `path` for `partitions` partitions: checks that every region can
    /// be laid out, creates and sizes the file, and claims it (a file that is not tierkv's is
    /// refused unless `force`). If any step fails, a file this call created is removed and one
    /// it lengthened gets its old length back.
    pub fn open(path: &Path, settings: &TierSettings, partitions: usize, force: bool) -> Result<TierFile, OpenError> {
        if path.is_dir() {
            return Err(OpenError::Directory);
        }
        for id in 0..partitions {
            RegionLayout::new(&FlashConfig::for_partition(settings, id, partitions)).map_err(OpenError::Layout)?;
        }
        let before = std::fs::metadata(path).ok().map(|m| m.len());
        let undo = |error: OpenError| {
            match before {
                None => {
                    let _ = std::fs::remove_file(path);
                }
                Some(len) => {
                    if let Ok(file) = std::fs::OpenOptions::new().write(true).open(path) {
                        if file.metadata().is_ok_and(|m| m.len() > len) {
                            let _ = file.set_len(len);
                        }
                    }
                }
            }
            error
        };
        let (file, direct) = open_file(path, settings.file_bytes).map_err(|error| match error.kind() {
            // Another process's file: left as it is.
            std::io::ErrorKind::WouldBlock => OpenError::InUse,
            _ => undo(OpenError::File(error)),
        })?;
        let clone = file.try_clone().map_err(|error| undo(OpenError::Io(error)))?;
        let mut io = ThreadsEngine::new(clone, 1);
        let claim = claim_file(&mut io, &FlashConfig::for_partition(settings, 0, partitions), force)
            .map_err(|error| undo(OpenError::Claim(error)))?;
        let opened = file_id(&file.metadata().map_err(OpenError::File)?);
        let path = path.to_path_buf();
        Ok(TierFile { file, path, opened, identity: claim.identity, buffered: !direct, changed: claim.changed })
    }

    /// None while the path still names the file the tier writes; else what became of it: the
    /// file was deleted (the tier writes into a file nobody can open again, and a restart
    /// starts empty), moved to another name, or moved with another file now at its name.
    pub fn path_check(&self) -> Option<&'static str> {
        use std::os::unix::fs::MetadataExt;
        if self.file.metadata().is_ok_and(|m| m.nlink() == 0) {
            return Some("deleted");
        }
        match std::fs::metadata(&self.path) {
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Some("moved to another name"),
            Ok(metadata) if file_id(&metadata) != self.opened => Some("replaced by another file"),
            _ => None,
        }
    }

    /// Partition `partition`'s store over its region: restored after a clean stop (or
    /// recovered after a crash), else empty (the report says why). The string is a note on the
    /// I/O engine chosen (io_uring refused, the thread pool used).
    pub fn open_partition(
        &self,
        settings: &TierSettings,
        partition: usize,
        partitions: usize,
        now: Now,
    ) -> Result<(FlashStore, OpenReport, Option<String>), OpenError> {
        let mut cfg = FlashConfig::for_partition(settings, partition, partitions);
        cfg.identity = self.identity;
        let (mut io, note) = engine_for(settings.io, &self.file, cfg.io_depth()).map_err(OpenError::Io)?;
        if let Some(test) = &settings.test_io {
            io = Box::new(FaultLayer::new(io, test.fail_writes_while.clone(), test.read_delay));
        }
        let (store, report) = FlashStore::open(io, cfg, now).map_err(|why| OpenError::Region { partition, why })?;
        Ok((store, report, note))
    }
}
