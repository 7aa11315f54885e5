//! Opening the flash file and putting each partition's region behind it; a clean stop's
//! close. Requests that wait for flash are in `parking`.
//!
//! It must not read or write sockets.

use super::Worker;
use crate::error::{FlashStartError, ServeError};
use tierkv_engine::flash::{Now, TierFile, NEW_FILE};
use tierkv_engine::Engine;
use tierkv_engine::{unix_now, AnyPartition as Partition};

/// Opens the flash file of `--flash-path` for `workers` partitions (`TierFile::open`), saying
/// on stderr what the user should know (buffered I/O, a new identity).
pub(super) fn open_file(flash: &crate::config::FlashSettings, workers: usize) -> Result<TierFile, ServeError> {
    let file = TierFile::open(&flash.path, &flash.tier(), workers, flash.force).map_err(|error| ServeError::Flash {
        path: flash.path.clone(),
        size: flash.size,
        error: FlashStartError::Open(error),
    })?;
    if file.buffered {
        eprintln!(
            "tierkv: --flash-path {}: the file system refuses O_DIRECT; flash I/O goes through the page cache",
            flash.path.display()
        );
    }
    if let Some(why) = &file.changed {
        eprintln!("tierkv: --flash-path {}: {why}", flash.path.display());
    }
    Ok(file)
}

/// Puts partition `id`'s region of the flash file behind `partition`: restored after a clean
/// stop, else empty (and why is said).
pub(super) fn attach(
    partition: &mut Partition,
    flash: &crate::config::FlashSettings,
    file: &TierFile,
    id: usize,
    workers: usize,
    verbose: u8,
) -> Result<(), ServeError> {
    let fail = |error: FlashStartError| ServeError::Flash { path: flash.path.clone(), size: flash.size, error };
    let started = std::time::Instant::now();
    let now = Now { unix: unix_now(), nanos: 1 };
    let (store, report, note) =
        file.open_partition(&flash.tier(), id, workers, now).map_err(|error| fail(FlashStartError::Open(error)))?;
    if let Some(note) = note.filter(|_| id == 0) {
        eprintln!("tierkv: --flash-io: {note}");
    }
    if report.restored {
        let how = match (report.reason.strip_prefix("recovered"), report.reason.split_once("; recovered")) {
            (_, Some((why, _))) => {
                format!(" (its index snapshot could not be used: {why}; recovered from the segments instead)")
            }
            (Some(r), _) if r.contains("set pages") => " (after a crash, from the segments and the set pages)".into(),
            (Some(_), _) => " (after a crash, from the segments)".into(),
            (None, _) => String::new(),
        };
        eprintln!(
            "tierkv: flash partition {id}: restored {} items in {} ms{how}",
            report.items,
            started.elapsed().as_millis()
        );
    } else if verbose > 0 || report.reason != NEW_FILE {
        eprintln!("tierkv: flash partition {id}: starts empty: {}", report.reason);
    }
    partition.attach_flash(store).map_err(|error| fail(FlashStartError::Attach(error)))
}

impl Worker {
    /// Says in the log when this partition's flash writes start failing for good (a segment
    /// given up: new items stay in DRAM, `flash_degraded_partitions` in `stats`) and when they
    /// reach the device again.
    pub(super) fn note_flash_health(&mut self) {
        let Some(report) = self.core.partition.flash_ref().and_then(|tier| tier.flash_report()) else { return };
        let degraded = report.store.degraded > 0;
        if degraded == self.flash_degraded {
            return;
        }
        self.flash_degraded = degraded;
        let id = self.core.id;
        if degraded {
            eprintln!(
                "tierkv: flash partition {id}: writes fail ({} failed, {} segments given up, their items lost); \
                 new items stay in DRAM until a write reaches the device again",
                report.store.write_errors, report.store.segments_given_up
            );
        } else {
            eprintln!("tierkv: flash partition {id}: writes reach the device again");
        }
    }

    /// Says once, in the log and in `stats` (`flash_file`), when the flash file's path stops
    /// naming the file the tier writes (deleted, moved, replaced), and when it names it again.
    pub(super) fn check_flash_path(&mut self) {
        let Some(file) = &self.shared.flash_file else { return };
        let problem = file.path_check();
        let server = &self.core.state.shared;
        let mut noted = server.flash_file_problem.lock().unwrap_or_else(|e| e.into_inner());
        if *noted == problem {
            return;
        }
        let path =
            server.settings.flash.as_ref().map_or_else(Default::default, |flash| flash.path.display().to_string());
        match problem {
            Some(what) => eprintln!(
                "tierkv: --flash-path {path}: the flash file was {what} while the server runs; the tier keeps \
                 writing the file it opened, which a restart will not find"
            ),
            None => eprintln!("tierkv: --flash-path {path}: names the flash file again"),
        }
        *noted = problem;
    }

    /// A clean stop: this partition's DRAM items go to flash and its region closes cleanly.
    pub(super) fn close_flash(&mut self) {
        if !self.core.parking.enabled {
            return;
        }
        let started = std::time::Instant::now();
        let id = self.core.id;
        let Some(tier) = self.core.partition.flash() else { return };
        match tier.close_flash() {
            Ok(closed) => {
                eprintln!("tierkv: flash partition {id}: closed cleanly in {} ms", started.elapsed().as_millis());
                if closed.dropped > 0 {
                    eprintln!(
                        "tierkv: flash partition {id}: {} items could not be kept: the sets index keeps items \
                         over {} bytes only in its log (--flash-sets-log-percent), whose room the close needed \
                         for the items in DRAM, and a full set lets its least used items go for the ones the \
                         close moves in (a larger --flash-size keeps more)",
                        closed.dropped, closed.set_item_limit
                    );
                }
                if closed.crash_unsafe {
                    eprintln!(
                        "tierkv: flash partition {id}: the marks of items its index dropped could not be written \
                         (the flash log stayed full): the next start serves everything, but a crash before \
                         the next clean stop recovers nothing of this partition's flash items"
                    );
                }
            }
            Err(error) => {
                eprintln!("tierkv: flash partition {id}: the clean close failed ({error}); the next start is cold")
            }
        }
    }
}
