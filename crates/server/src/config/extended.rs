//! memcached's `-o` options: the ones tierkv knows, each standing for one of its flags
//! (`idle_timeout`, the `ssl_` files, `ext_path`), and memcached's extstore and tuning options,
//! accepted without effect and noted at start-up; any other stops start-up naming it.
//!
//! It must not check the values it stands for: the flags' own checks in `mod.rs` do.

use super::{flash, ConfigError};
use std::path::PathBuf;

/// memcached's `-o` options tierkv knows, each standing for one of its flags.
#[derive(Default)]
pub(super) struct Extended {
    pub(super) idle_timeout: Option<u32>,
    pub(super) ssl_chain_cert: Option<PathBuf>,
    pub(super) ssl_key: Option<PathBuf>,
    pub(super) ssl_ca_cert: Option<PathBuf>,
    pub(super) ssl_verify_mode: Option<String>,
    /// `ext_path=PATH:SIZE`.
    pub(super) ext_path: Option<(PathBuf, String)>,
    /// memcached's other extstore options given (accepted, without effect).
    pub(super) ext_noted: Vec<String>,
    /// memcached's tuning options given (accepted, without effect: `MEMCACHED_TUNING`).
    pub(super) tuning_noted: Vec<String>,
}

/// memcached 1.6's `-o` options that tune its own machinery (slab classes and their mover, the
/// segmented LRU and its crawler, the hash table, logging buffers, privileges), common in
/// existing command lines (`-o modern`, `-o slab_reassign,slab_automove`): accepted, with a line
/// saying they do nothing here, so such a command line starts tierkv.
const MEMCACHED_TUNING: [&str; 38] = [
    "maxconns_fast",
    "no_maxconns_fast",
    "hashpower",
    "no_hashexpand",
    "hash_algorithm",
    "slab_reassign",
    "no_slab_reassign",
    "slab_automove",
    "no_slab_automove",
    "slab_automove_ratio",
    "slab_automove_window",
    "slab_sizes",
    "slab_chunk_max",
    "no_chunked_items",
    "tail_repair_time",
    "lru_crawler",
    "no_lru_crawler",
    "lru_crawler_sleep",
    "lru_crawler_tocrawl",
    "lru_maintainer",
    "no_lru_maintainer",
    "hot_lru_pct",
    "warm_lru_pct",
    "hot_max_factor",
    "warm_max_factor",
    "temporary_ttl",
    "watcher_logbuf_size",
    "worker_logbuf_size",
    "track_sizes",
    "inline_ascii_resp",
    "no_inline_ascii_resp",
    "modern",
    "no_modern",
    "drop_privileges",
    "no_drop_privileges",
    "relaxed_privileges",
    "read_buf_mem_limit",
    "resp_obj_mem_limit",
];

/// Reads the `-o` lists (several `-o`, each a comma-separated list).
pub(super) fn extended_options(options: &[String]) -> Result<Extended, ConfigError> {
    let mut extended = Extended::default();
    for option in options.iter().flat_map(|options| options.split(',')).filter(|option| !option.is_empty()) {
        match option.split_once('=') {
            Some(("idle_timeout", seconds)) => {
                let seconds = seconds.parse().map_err(|_| {
                    ConfigError::flag("-o idle_timeout", format!("{seconds:?} must be a number of seconds"))
                })?;
                extended.idle_timeout = Some(seconds);
            }
            Some(("ssl_chain_cert", path)) => extended.ssl_chain_cert = Some(path.into()),
            Some(("ssl_key", path)) => extended.ssl_key = Some(path.into()),
            Some(("ssl_ca_cert", path)) => extended.ssl_ca_cert = Some(path.into()),
            Some(("ssl_verify_mode", mode)) => extended.ssl_verify_mode = Some(mode.to_string()),
            Some(("ext_path", spec)) => {
                let (path, size) = spec.rsplit_once(':').filter(|(path, _)| !path.is_empty()).ok_or_else(|| {
                    ConfigError::flag("-o ext_path", format!("{spec:?} must be PATH:SIZE, like /var/tierkv.flash:8g"))
                })?;
                extended.ext_path = Some((path.into(), size.to_string()));
            }
            Some((name, _)) if flash::EXTSTORE_NOTED.contains(&name) => extended.ext_noted.push(option.to_string()),
            _ if MEMCACHED_TUNING.contains(&option.split('=').next().unwrap_or_default()) => {
                extended.tuning_noted.push(option.to_string());
            }
            _ => {
                let message = "unknown option (tierkv knows idle_timeout, ssl_chain_cert, ssl_key, ssl_ca_cert, \
                               ssl_verify_mode, ext_path, memcached's other ext_ options, and accepts its \
                               tuning options such as modern, hashpower and slab_reassign without effect)";
                return Err(ConfigError::flag(format!("-o {option:?}"), message));
            }
        }
    }
    Ok(extended)
}

impl Extended {
    /// The start-up lines for the options accepted without effect.
    pub(super) fn notes(&self) -> impl Iterator<Item = String> + '_ {
        let ext = self
            .ext_noted
            .iter()
            .map(|option| format!("-o {option}: ignored; tierkv's flash tier sizes its own buffers, depth and GC"));
        let tuning = self.tuning_noted.iter().map(|option| {
            format!(
                "-o {option}: ignored; it tunes memcached's slabs, LRU, hash table or logs, and tierkv has one log \
                 and index per worker (connection memory: --conn-memory)"
            )
        });
        ext.chain(tuning)
    }
}
