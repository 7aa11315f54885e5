//! The flash tier's settings: `--flash-*` (the `[flash]` TOML section) and memcached's
//! `-o ext_path=PATH:SIZE`, checked into `FlashSettings`.

use super::{Config, ConfigError, Extended};
use std::path::PathBuf;
use tierkv_engine::flash::{
    on_flash_item_bytes, AdmissionPolicy, FlashIo, TestIo, TierSettings, DEFAULT_ITEM_BYTES, DEFAULT_SEGMENT_BYTES,
    MAX_SEGMENT_BYTES, MIN_SEGMENT_BYTES,
};

/// A flash file behind the DRAM log.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct FlashSettings {
    pub path: PathBuf,
    /// The file's size in bytes; each partition gets an equal share.
    pub size: u64,
    pub io: FlashIo,
    pub admission: AdmissionPolicy,
    pub segment_bytes: u32,
    /// Tests only: every read this much slower (on the thread pool).
    pub read_delay_ms: u64,
    /// Tests only: every write fails while this file exists (on the thread pool).
    pub fail_writes_while: Option<PathBuf>,
    /// The cascade index with this many bytes of tier 1 (all workers together); None: the full
    /// index.
    pub cascade_t1_bytes: Option<u64>,
    /// Tests only (`--flash-test-index-kib`): small mapping blocks and early merges too.
    pub cascade_small: bool,
    /// `--flash-index sets`: small items in set-associative pages behind a small log.
    pub sets: bool,
    /// `--flash-sets-log-percent`: the sets index's log share of the file.
    pub sets_log_percent: u32,
    /// `--flash-item-bytes`: the key + value bytes the flash tier's DRAM is sized for.
    pub item_bytes: u32,
    /// `--flash-force`: take over a file that is not tierkv's.
    pub force: bool,
    /// `--flash-sync`: a device flush after each commit of invalidations.
    pub sync: bool,
    /// `--flash-poll-us`: how long an idle worker looks for flash completions before sleeping.
    pub poll: std::time::Duration,
    /// The flash tier's DRAM budget, all workers together (`--flash-memory-mib`, or what the
    /// index chosen needs).
    pub memory_bytes: u64,
}

impl FlashSettings {
    /// What the engine is asked to build (`tierkv_engine::flash::TierFile`).
    pub(crate) fn tier(&self) -> TierSettings {
        let test_io = (self.read_delay_ms > 0 || self.fail_writes_while.is_some()).then(|| TestIo {
            read_delay: std::time::Duration::from_millis(self.read_delay_ms),
            fail_writes_while: self.fail_writes_while.clone(),
        });
        TierSettings {
            file_bytes: self.size,
            segment_bytes: self.segment_bytes,
            admission: self.admission,
            sync_commits: self.sync,
            io: self.io,
            cascade_t1_bytes: self.cascade_t1_bytes,
            small_index: self.cascade_small,
            sets: self.sets.then_some(self.sets_log_percent),
            item_bytes: Some(self.item_bytes),
            test_io,
        }
    }

    /// The DRAM all `workers` partitions' stores hold at most; None if a region cannot be
    /// laid out.
    pub(crate) fn dram_bytes(&self, workers: usize) -> Option<u64> {
        self.tier().dram_bytes(workers)
    }
}

/// `--flash-poll-us` by default and at most. At pipeline 1 a flash read takes 60-150 us on
/// the machines measured (docs/benchmarks.md, "Pipeline 1"); looking that long costs about what
/// sleeping and being woken costs there, and answers sooner.
pub(crate) const DEFAULT_FLASH_POLL_US: u64 = 100;
/// `--flash-item-bytes` at most (memcached's default item size limit).
pub(crate) const MAX_ITEM_BYTES: u32 = 1 << 20;
pub(crate) const MAX_FLASH_POLL_US: u64 = 1000;

/// memcached's sizes with k, m, g or t (powers of 1024), or plain bytes.
pub(super) fn parse_bytes(text: &str) -> Option<u64> {
    let lower = text.trim().to_ascii_lowercase();
    let (digits, shift) = match lower.char_indices().last()? {
        (at, 'k') => (&lower[..at], 10),
        (at, 'm') => (&lower[..at], 20),
        (at, 'g') => (&lower[..at], 30),
        (at, 't') => (&lower[..at], 40),
        _ => (lower.as_str(), 0),
    };
    digits.parse::<u64>().ok()?.checked_mul(1 << shift)
}

/// memcached's extstore options that tierkv accepts but that have no counterpart.
pub(super) const EXTSTORE_NOTED: [&str; 12] = [
    "ext_page_size",
    "ext_wbuf_size",
    "ext_threads",
    "ext_io_depth",
    "ext_item_size",
    "ext_item_age",
    "ext_low_ttl",
    "ext_recache_rate",
    "ext_compact_under",
    "ext_drop_under",
    "ext_max_frag",
    "ext_drop_unread",
];

impl Config {
    pub(super) fn flash(&self, extended: &Extended, threads: usize) -> Result<Option<FlashSettings>, ConfigError> {
        let (path, size) = match (&extended.ext_path, &self.flash_path) {
            (Some((path, size)), _) => (path.clone(), Some(size.clone())),
            (None, Some(path)) => (path.clone(), self.flash_size.clone()),
            (None, None) => {
                let stray = [
                    ("--flash-size", self.flash_size.is_some()),
                    ("--flash-io", self.flash_io.is_some()),
                    ("--flash-write-mbps", self.flash_write_mbps.is_some()),
                    ("--flash-admission", self.flash_admission.is_some()),
                    ("--flash-segment-size", self.flash_segment_size.is_some()),
                    ("--flash-index", self.flash_index.is_some()),
                    ("--flash-index-mib", self.flash_index_mib.is_some()),
                    ("--flash-sets-log-percent", self.flash_sets_log_percent.is_some()),
                    ("--flash-item-bytes", self.flash_item_bytes.is_some()),
                    ("--flash-force", self.flash_force),
                    ("--flash-sync", self.flash_sync),
                    ("--flash-poll-us", self.flash_poll_us.is_some()),
                    ("--flash-memory-mib", self.flash_memory_mib.is_some()),
                ];
                return match stray.iter().find(|(_, given)| *given) {
                    Some((flag, _)) => Err(ConfigError::flag(*flag, "needs --flash-path (or -o ext_path=PATH:SIZE)")),
                    None => Ok(None),
                };
            }
        };
        let size_flag = if extended.ext_path.is_some() { "-o ext_path" } else { "--flash-size" };
        let size = size.ok_or_else(|| ConfigError::flag("--flash-size", "is needed with --flash-path"))?;
        let size = parse_bytes(&size)
            .filter(|&bytes| bytes > 0)
            .ok_or_else(|| ConfigError::flag(size_flag, format!("{size:?} must be a size like 8g, 512m or bytes")))?;
        let io = match self.flash_io.as_deref() {
            None => FlashIo::Uring,
            Some(text) => text.parse().map_err(|e: String| ConfigError::flag("--flash-io", e))?,
        };
        let admission = match (self.flash_admission.as_deref(), self.flash_write_mbps) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::flag("--flash-write-mbps", "contradicts --flash-admission (give one)"))
            }
            (None, Some(0)) => return Err(ConfigError::flag("--flash-write-mbps", "must be at least 1")),
            (None, Some(mbps)) => AdmissionPolicy::RateMbps(f64::from(mbps)),
            (Some(text), None) => text.parse().map_err(|e: String| ConfigError::flag("--flash-admission", e))?,
            (None, None) => AdmissionPolicy::All,
        };
        let segment = self.flash_segment_size.as_deref().unwrap_or("1m");
        let segment_bytes = parse_bytes(segment)
            .and_then(|bytes| u32::try_from(bytes).ok())
            .filter(|b| b.is_power_of_two() && (MIN_SEGMENT_BYTES..=MAX_SEGMENT_BYTES).contains(b))
            .ok_or_else(|| {
                ConfigError::flag("--flash-segment-size", format!("{segment:?} must be a power of two, 64k to 4m"))
            })?;
        debug_assert!((MIN_SEGMENT_BYTES..=MAX_SEGMENT_BYTES).contains(&DEFAULT_SEGMENT_BYTES));
        if self.mode()? != tierkv_engine::Mode::Cache {
            return Err(ConfigError::flag("--flash-path", "needs cache mode (store mode evicts nothing to flash)"));
        }
        let read_delay_ms = self.flash_test_read_delay_ms.unwrap_or(0);
        let fail_writes_while = self.flash_test_fail_writes_while.clone();
        let item_bytes = match self.flash_item_bytes {
            None => DEFAULT_ITEM_BYTES,
            Some(b) if (1..=MAX_ITEM_BYTES).contains(&b) => b,
            Some(_) => {
                return Err(ConfigError::flag("--flash-item-bytes", format!("must be 1 to {MAX_ITEM_BYTES} (bytes)")))
            }
        };
        let cascade_t1_bytes = self.flash_index_kind(size, item_bytes)?;
        let cascade_small = self.flash_test_index_kib.is_some();
        let sets = self.flash_index.as_deref() == Some("sets");
        let sets_log_percent = match (sets, self.flash_sets_log_percent) {
            (_, None) => tierkv_engine::flash::SetsConfig::default().log_percent,
            (false, Some(_)) => return Err(ConfigError::flag("--flash-sets-log-percent", "needs --flash-index sets")),
            (true, Some(p)) if (1..=50).contains(&p) => p,
            (true, Some(_)) => return Err(ConfigError::flag("--flash-sets-log-percent", "must be 1 to 50")),
        };
        let poll_us = self.flash_poll_us.unwrap_or(DEFAULT_FLASH_POLL_US);
        if poll_us > MAX_FLASH_POLL_US {
            return Err(ConfigError::flag("--flash-poll-us", format!("must be at most {MAX_FLASH_POLL_US}")));
        }
        let settings = FlashSettings {
            path,
            size,
            io,
            admission,
            segment_bytes,
            read_delay_ms,
            fail_writes_while,
            cascade_t1_bytes,
            cascade_small,
            sets,
            sets_log_percent,
            item_bytes,
            force: self.flash_force,
            sync: self.flash_sync,
            poll: std::time::Duration::from_micros(poll_us),
            memory_bytes: 0,
        };
        self.flash_budget(settings, threads).map(Some)
    }

    /// `--flash-memory-mib`: the index that fits the budget (or a clear error); without it the
    /// budget is what the index chosen needs.
    fn flash_budget(&self, mut settings: FlashSettings, threads: usize) -> Result<FlashSettings, ConfigError> {
        let laid_out = |s: &FlashSettings| s.dram_bytes(threads);
        let Some(mib) = self.flash_memory_mib else {
            // Unplaceable layouts are reported (naming --flash-size) when the file is opened.
            settings.memory_bytes = laid_out(&settings).unwrap_or(0);
            return Ok(settings);
        };
        let budget = mib.checked_mul(1 << 20).filter(|&b| b > 0);
        let budget = budget.ok_or_else(|| ConfigError::flag("--flash-memory-mib", "must be 1 or more MiB"))?;
        settings.memory_bytes = budget;
        let chosen =
            self.flash_index.is_some() || self.flash_index_mib.is_some() || self.flash_test_index_kib.is_some();
        let fits = |s: &FlashSettings| laid_out(s).is_some_and(|bytes| bytes <= budget);
        if chosen || fits(&FlashSettings { cascade_t1_bytes: None, ..settings.clone() }) {
            if !chosen {
                settings.cascade_t1_bytes = None;
            }
            return match laid_out(&settings) {
                Some(bytes) if bytes > budget => Err(ConfigError::flag(
                    "--flash-memory-mib",
                    format!(
                        "{mib} MiB cannot hold the flash tier as configured ({} MiB needed)",
                        bytes.div_ceil(1 << 20)
                    ),
                )),
                _ => Ok(settings),
            };
        }
        // The cascade index with the largest tier 1 that fits (halving from the whole budget).
        let mut t1 = budget;
        while t1 >= (64 << 10) * threads as u64 {
            let candidate = FlashSettings { cascade_t1_bytes: Some(t1), ..settings.clone() };
            if fits(&candidate) {
                return Ok(candidate);
            }
            t1 /= 2;
        }
        let least = laid_out(&FlashSettings { cascade_t1_bytes: Some((64 << 10) * threads as u64), ..settings })
            .map_or("more".to_string(), |bytes| format!("{} MiB", bytes.div_ceil(1 << 20)));
        Err(ConfigError::flag(
            "--flash-memory-mib",
            format!("{mib} MiB cannot hold a flash tier of this size (the smallest cascade index needs {least})"),
        ))
    }

    /// `--flash-index` and `--flash-index-mib`: the cascade index's tier-1 bytes, or None (the
    /// full index, or the sets index, which `flash` reads from `--flash-index` itself). With
    /// neither given (`auto`), the full index (for items of `item_bytes`) while it fits in the
    /// memory limit (`-m`), else the
    /// cascade index: a big flash file never brings a DRAM index larger than the DRAM budget.
    fn flash_index_kind(&self, size: u64, item_bytes: u32) -> Result<Option<u64>, ConfigError> {
        if let (Some("cascade"), Some(kib)) = (self.flash_index.as_deref(), self.flash_test_index_kib) {
            return Ok(Some(kib.max(1) << 10));
        }
        let full_index_bytes = size / u64::from(on_flash_item_bytes(item_bytes)) * 8;
        let memory_bytes = (self.memory_limit.unwrap_or(64) as u64) << 20;
        let auto = if full_index_bytes <= memory_bytes { "full" } else { "cascade" };
        let kind = match (self.flash_index.as_deref(), self.flash_index_mib) {
            (None, Some(_)) => "cascade",
            (None | Some("auto"), _) => auto,
            (Some(kind), _) => kind,
        };
        match (kind, self.flash_index_mib) {
            ("full", None) => Ok(None),
            ("full" | "sets", Some(_)) => Err(ConfigError::flag("--flash-index-mib", "needs --flash-index cascade")),
            ("sets", None) => Ok(None),
            ("cascade", None) => Ok(Some((size / 512).max(1 << 20))),
            ("cascade", Some(0)) => Err(ConfigError::flag("--flash-index-mib", "must be at least 1")),
            ("cascade", Some(mib)) => {
                mib.checked_mul(1 << 20).map(Some).ok_or_else(|| ConfigError::flag("--flash-index-mib", "is too large"))
            }
            (other, _) => {
                Err(ConfigError::flag("--flash-index", format!("{other:?} must be auto, full, cascade or sets")))
            }
        }
    }
}
