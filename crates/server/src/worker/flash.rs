//! Opening the flash file and putting each partition's region behind it; a clean stop's
//! close. Requests that wait for flash are in `parking`.
//!
//! It must not read or write sockets.

use super::Worker;
use crate::error::ServeError;
use tierkv_engine::Engine;
use tierkv_engine::{unix_now, AnyPartition as Partition};

/// The flash file, opened, sized and claimed (`tierkv_engine::flash::claim_file`) once for all
/// workers.
pub(super) struct FlashFile {
    pub(super) file: std::fs::File,
    /// The identity every region must carry to be used.
    pub(super) identity: u64,
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
        tierkv_engine::flash::RegionLayout::new(&flash.store_config(id, workers))
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
            tierkv_engine::flash::claim_file(&mut io, &flash.store_config(0, workers), flash.force)
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
    let mut cfg = flash.store_config(id, workers);
    cfg.identity = file.identity;
    // A cascade lookup may read a few mapping blocks before its item, and merges read too.
    let depth = cfg.max_reads * if cfg.cascade.is_some() { 2 } else { 1 } + cfg.write_buffers + 8;
    let (io, note) = if flash.read_delay_ms > 0 || flash.fail_writes_while.is_some() {
        let file = file.file.try_clone().map_err(|e| fail(format!("cannot start flash I/O: {e}")))?;
        let delay = std::time::Duration::from_millis(flash.read_delay_ms);
        let failing = flash.fail_writes_while.clone();
        let io: Box<dyn tierkv_engine::flash::IoEngine> =
            Box::new(tierkv_engine::flash::io::threads::ThreadsEngine::for_tests(file, 8, delay, failing));
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
        let how = if report.reason.starts_with("recovered") { " (after a crash, from the segments)" } else { "" };
        eprintln!(
            "tierkv: flash partition {id}: restored {} items in {} ms{how}",
            report.items,
            started.elapsed().as_millis()
        );
    } else if verbose > 0 || report.reason != tierkv_engine::flash::NEW_FILE {
        eprintln!("tierkv: flash partition {id}: starts empty: {}", report.reason);
    }
    partition.attach_flash(store).map_err(fail)
}

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
