//! The server's counters and memcached's `stats` groups built from them, for the text and the
//! binary protocol alike. Names and meanings follow memcached 1.6.18; a name is reported only
//! when it means the same thing in tierkv.

mod keys;

use crate::config::Settings;
use std::sync::atomic::{AtomicU32, AtomicUsize};
use std::sync::Arc;
use tierkv_engine::Engine;
use tierkv_engine::{AnyPartition as Partition, ClassFigures, EngineStats, SIZE_CLASSES};

/// Declares `Counters` with the given fields and its conversions to and from a flat array
/// (how a worker sends its counters to the one answering `stats`).
macro_rules! counters {
    ($($name:ident),* $(,)?) => {
        /// Counters of one worker, named as memcached's `stats` names them.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub(crate) struct Counters {
            $(pub(crate) $name: u64,)*
        }

        impl Counters {
            pub(crate) const FIELDS: usize = [$(stringify!($name)),*].len();
            /// The counters' names, in `words` order.
            pub(crate) const NAMES: [&'static str; Self::FIELDS] = [$(stringify!($name)),*];

            pub(crate) fn words(&self) -> [u64; Self::FIELDS] {
                [$(self.$name),*]
            }

            fn from_words(words: &[u64]) -> Counters {
                let mut iter = words.iter().copied();
                Counters { $($name: iter.next().unwrap_or(0),)* }
            }
        }
    };
}

counters!(
    cmd_get,
    cmd_set,
    cmd_flush,
    cmd_touch,
    cmd_meta,
    get_hits,
    get_misses,
    delete_hits,
    delete_misses,
    incr_hits,
    incr_misses,
    decr_hits,
    decr_misses,
    cas_hits,
    cas_misses,
    cas_badval,
    touch_hits,
    touch_misses,
    store_too_large,
    bytes_read,
    bytes_written,
    total_connections,
    rejected_connections,
    idle_kicks,
    slow_request_kicks,
    forwarded_requests,
    crew_reads,
    locked_requests,
    idle_yields,
    slow_yields,
    lock_waits,
    store_no_memory,
    cmd_atomic,
    atomic_hits,
    atomic_misses,
    atomic_lookups_saved,
    atomic_writes_saved,
    cmd_vector,
    auth_cmds,
    auth_errors,
    flash_parked,
);

impl Counters {
    /// One SASL request's outcome.
    pub(crate) fn sasl(&mut self, outcome: crate::auth::SaslOutcome) {
        use crate::auth::SaslOutcome;
        self.auth_cmds += u64::from(outcome != SaslOutcome::Listed);
        self.auth_errors += u64::from(outcome == SaslOutcome::Refused);
    }

    /// One key read, as memcached counts it: a get-and-touch is a touch, not a get.
    pub(crate) fn read(&mut self, touch: bool, hit: bool) {
        let (commands, hits, misses) = if touch {
            (&mut self.cmd_touch, &mut self.touch_hits, &mut self.touch_misses)
        } else {
            (&mut self.cmd_get, &mut self.get_hits, &mut self.get_misses)
        };
        *commands += 1;
        *(if hit { hits } else { misses }) += 1;
    }
}

/// What every worker's `State` shares: the settings, what a command on any worker changes for
/// all (verbosity, the memory limit, `stats detail`, watchers), and what is set up once at
/// start (TLS, the users of `-Y`). Built once; each worker holds it through an `Arc`.
#[derive(Debug)]
pub(crate) struct ServerState {
    pub settings: Settings,
    /// The `verbosity` level (the command reaches only one worker).
    pub verbosity: Arc<AtomicU32>,
    /// The item memory `cache_memlimit` last set (bytes, all partitions); each worker applies
    /// its share at its next loop turn.
    pub memory_limit: Arc<AtomicUsize>,
    /// `stats detail`'s table.
    pub detail: crate::detail::Detail,
    /// memcached's watchers.
    pub watchers: crate::watch::Watchers,
    /// `-Z`: the TLS context (`refresh_certs`, the ssl stats).
    pub tls: Option<Arc<crate::net::tls::TlsContext>>,
    /// `-Y`: the users allowed in.
    pub auth: Option<Arc<crate::auth::AuthTable>>,
    /// What became of the flash file's path under the running server (`TierFile::path_check`),
    /// looked at once a second by worker 0; None while it names the file the tier writes.
    pub flash_file_problem: std::sync::Mutex<Option<&'static str>>,
    /// Whether the CPUs are shared with other busy work now (the workers' yields say).
    pub contention: crate::contention::Contention,
}

impl ServerState {
    /// The shared state of a server with `settings`, before TLS and users are loaded.
    pub(crate) fn new(settings: &Settings) -> ServerState {
        ServerState {
            settings: settings.clone(),
            verbosity: Arc::new(AtomicU32::new(u32::from(settings.verbose))),
            memory_limit: Arc::new(AtomicUsize::new(settings.memory_bytes)),
            detail: crate::detail::Detail::new(settings.admin.prefix_delimiter),
            watchers: crate::watch::Watchers::default(),
            tls: None,
            auth: None,
            flash_file_problem: std::sync::Mutex::new(None),
            contention: crate::contention::Contention::new(settings.threads, settings.test_contended),
        }
    }
}

/// One worker's own figures and scratch, beside the state all workers share (`shared`).
#[derive(Debug)]
pub(crate) struct State {
    pub counters: Counters,
    /// The engine's counters at the last `stats reset` (reported values are differences).
    engine_baseline: EngineStats,
    /// Connections this worker serves now.
    pub curr_connections: u64,
    /// Bytes this worker's connection buffers hold (its budget's count, kept current by the
    /// worker).
    pub conn_buffer_bytes: u64,
    /// What is observed (`watch::DETAIL`, `FETCHERS`, `MUTATIONS`), as this worker last read
    /// it (once a turn): the request path checks this one byte.
    pub observe: u8,
    /// The descriptor of the connection whose requests run now (-1: forwarded ones), for
    /// watch lines.
    pub fd: i32,
    /// Buffers the atomics reuse from run to run (`atomic_run`).
    pub atomic_scratch: AtomicScratch,
    pub(crate) started: u32,
    /// What all workers share.
    pub shared: Arc<ServerState>,
}

/// Buffers a run of atomics reuses for its engine requests and answers (`atomic_run`).
#[derive(Debug, Default)]
pub(crate) struct AtomicScratch {
    pub requests: Vec<tierkv_engine::AtomicRequest>,
    pub results: Vec<Result<tierkv_engine::AtomicOutcome, tierkv_engine::EngineError>>,
}

impl State {
    pub(crate) fn new(shared: Arc<ServerState>, now: u32) -> State {
        State {
            counters: Counters::default(),
            engine_baseline: EngineStats::default(),
            curr_connections: 0,
            conn_buffer_bytes: 0,
            observe: 0,
            fd: -1,
            atomic_scratch: Default::default(),
            started: now,
            shared,
        }
    }

    /// Reads again what is observed (once a turn, and when it changes here).
    pub(crate) fn refresh_observe(&mut self) {
        let detail = if self.shared.detail.enabled() { crate::watch::DETAIL } else { 0 };
        self.observe = detail | self.shared.watchers.active();
    }

    /// Counts `event` for `key` in `stats detail` when it is on.
    #[inline]
    pub(crate) fn detail(&self, key: &[u8], event: crate::detail::Event) {
        if self.observe & crate::watch::DETAIL != 0 {
            self.shared.detail.record(key, event);
        }
    }

    /// A key read (`size`: the value's length, None for a miss): counted in `stats detail`
    /// (text and binary reads, `detailed`) and logged to `watch fetchers`.
    #[inline]
    pub(crate) fn observe_get(&self, key: &[u8], size: Option<usize>, detailed: bool) {
        if self.observe != 0 {
            self.observed_get(key, size, detailed);
        }
    }

    #[inline(never)]
    fn observed_get(&self, key: &[u8], size: Option<usize>, detailed: bool) {
        if detailed {
            self.detail(key, crate::detail::Event::Get { hit: size.is_some() });
        }
        if self.observe & crate::watch::FETCHERS != 0 {
            let fd = self.fd;
            self.shared.watchers.log(crate::watch::FETCHERS, |gid| {
                crate::watch::item_get_line(gid, key, size.is_some(), size.unwrap_or(0), fd)
            });
        }
    }

    /// A store logged to `watch mutations`.
    pub(crate) fn observe_store(&self, key: &[u8], status: &str, command: &str, exptime: i64, size: usize) {
        if self.observe & crate::watch::MUTATIONS != 0 {
            let fd = self.fd;
            self.shared.watchers.log(crate::watch::MUTATIONS, |gid| {
                crate::watch::item_store_line(gid, key, status, command, exptime, size, fd)
            });
        }
    }

    /// `stats reset`: counters start again from zero; gauges (items, bytes, connections) stay.
    pub(crate) fn reset(&mut self, partition: &Partition) {
        self.counters = Counters::default();
        self.engine_baseline = partition.stats();
        self.shared.detail.clear();
    }

    /// This worker's share of the figures `stats` sums over workers.
    pub(crate) fn snapshot(&self, partition: &Partition) -> Snapshot {
        let engine = partition.stats();
        let flash = crate::flash_stats::figures(partition);
        Snapshot {
            flash,
            counters: self.counters,
            curr_connections: self.curr_connections,
            conn_buffer_bytes: self.conn_buffer_bytes,
            curr_items: engine.live_items + crate::flash_stats::items(&flash),
            total_items: engine.items_stored - self.engine_baseline.items_stored,
            evictions: engine.evictions - self.engine_baseline.evictions,
            // memcached's `bytes`: the live items, each with its header.
            bytes: engine.live_bytes,
            // Log bytes in use: live items plus dead copies not yet overwritten.
            log_used: engine.log_bytes_written.min(partition.log_bytes() as u64),
            copied_items: engine.items_copied_forward - self.engine_baseline.items_copied_forward,
            copied_bytes: engine.bytes_copied_forward - self.engine_baseline.bytes_copied_forward,
            index_evictions: engine.index_evictions - self.engine_baseline.index_evictions,
            overflow_buckets: engine.overflow_buckets,
            expired_reads: engine.expired_reads - self.engine_baseline.expired_reads,
            reclaimed: engine.reclaimed - self.engine_baseline.reclaimed,
            flushed_reads: engine.flushed_reads - self.engine_baseline.flushed_reads,
            free_bytes: partition.store_stats().map_or(0, |store| store.free_bytes),
            spare_buckets: partition.store_stats().map_or(0, |store| store.spare_buckets),
            spare_buckets_free: partition.store_stats().map_or(0, |store| store.spare_buckets_free),
            hash_bytes: partition.index_bytes() as u64,
            allocated_bytes: partition.allocated_bytes() as u64,
            // Store mode has no classes: its items are counted in the first.
            classes: partition.size_classes().unwrap_or_else(|| {
                let mut classes = [ClassFigures::default(); SIZE_CLASSES];
                classes[0] = ClassFigures {
                    items: engine.live_items,
                    requested_bytes: engine.live_bytes,
                    ..ClassFigures::default()
                };
                classes
            }),
        }
    }
}

/// The figures of one worker (or the sum over workers) that `stats` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Snapshot {
    pub counters: Counters,
    pub curr_connections: u64,
    pub curr_items: u64,
    pub total_items: u64,
    pub evictions: u64,
    pub bytes: u64,
    /// Memory in use: in cache mode the log bytes (live items and dead ones not yet
    /// overwritten), in store mode the allocated chunks.
    pub log_used: u64,
    /// Cache mode: live items (and their bytes) the log's cleaner copied forward.
    pub copied_items: u64,
    pub copied_bytes: u64,
    /// Cache mode: items dropped because their index pair and every overflow bucket were
    /// full (also in `evictions`), and overflow buckets in use.
    pub index_evictions: u64,
    pub overflow_buckets: u64,
    /// Lookups that found their item expired, and expired items the cleaner dropped.
    pub expired_reads: u64,
    pub reclaimed: u64,
    /// Lookups that found their item flushed.
    pub flushed_reads: u64,
    pub hash_bytes: u64,
    pub allocated_bytes: u64,
    /// Store mode: free arena bytes and spare index buckets (0 in cache mode).
    pub free_bytes: u64,
    pub spare_buckets: u64,
    pub spare_buckets_free: u64,
    /// Bytes held by connection buffers (`--conn-memory` counts these).
    pub conn_buffer_bytes: u64,
    /// The flash tier's figures (`flash_stats::NAMES`).
    pub flash: [u64; crate::flash_stats::FIGURES],
    /// DRAM items by memcached's size classes (`stats items`, `stats slabs`).
    pub classes: [ClassFigures; SIZE_CLASSES],
}

impl Default for Snapshot {
    fn default() -> Snapshot {
        Snapshot {
            counters: Counters::default(),
            curr_connections: 0,
            curr_items: 0,
            total_items: 0,
            evictions: 0,
            bytes: 0,
            log_used: 0,
            copied_items: 0,
            copied_bytes: 0,
            index_evictions: 0,
            overflow_buckets: 0,
            expired_reads: 0,
            reclaimed: 0,
            flushed_reads: 0,
            hash_bytes: 0,
            allocated_bytes: 0,
            free_bytes: 0,
            spare_buckets: 0,
            spare_buckets_free: 0,
            conn_buffer_bytes: 0,
            flash: [0; crate::flash_stats::FIGURES],
            classes: [ClassFigures::default(); SIZE_CLASSES],
        }
    }
}

impl Snapshot {
    const GAUGES: usize = 19;
    /// Bytes of the flat form `write_to` appends.
    pub(crate) const ENCODED_BYTES: usize =
        (Counters::FIELDS + Self::GAUGES + crate::flash_stats::FIGURES + 4 * SIZE_CLASSES) * 8;

    fn gauges(&self) -> [u64; Self::GAUGES] {
        [
            self.curr_connections,
            self.curr_items,
            self.total_items,
            self.evictions,
            self.bytes,
            self.hash_bytes,
            self.allocated_bytes,
            self.free_bytes,
            self.spare_buckets,
            self.spare_buckets_free,
            self.conn_buffer_bytes,
            self.log_used,
            self.copied_items,
            self.copied_bytes,
            self.expired_reads,
            self.reclaimed,
            self.flushed_reads,
            self.index_evictions,
            self.overflow_buckets,
        ]
    }

    /// Appends the snapshot as little-endian words (it crosses threads, never the network).
    pub(crate) fn write_to(&self, out: &mut Vec<u8>) {
        for word in self.counters.words().iter().chain(self.gauges().iter()).chain(self.flash.iter()) {
            out.extend_from_slice(&word.to_le_bytes());
        }
        for class in &self.classes {
            for word in [class.items, class.requested_bytes, class.evicted, class.reclaimed] {
                out.extend_from_slice(&word.to_le_bytes());
            }
        }
    }

    /// The snapshot `write_to` wrote; None if `bytes` is not one.
    pub(crate) fn read_from(bytes: &[u8]) -> Option<Snapshot> {
        if bytes.len() != Self::ENCODED_BYTES {
            return None;
        }
        let words: Vec<u64> =
            bytes.chunks_exact(8).map(|w| u64::from_le_bytes(w.try_into().expect("8-byte chunk"))).collect();
        let (counters, gauges) = words.split_at(Counters::FIELDS);
        let (gauges, rest) = gauges.split_at(Self::GAUGES);
        let (flash, classes) = rest.split_at(crate::flash_stats::FIGURES);
        let mut figures = [ClassFigures::default(); SIZE_CLASSES];
        for (class, words) in figures.iter_mut().zip(classes.chunks_exact(4)) {
            *class =
                ClassFigures { items: words[0], requested_bytes: words[1], evicted: words[2], reclaimed: words[3] };
        }
        Some(Snapshot {
            classes: figures,
            flash: flash.try_into().ok()?,
            counters: Counters::from_words(counters),
            curr_connections: gauges[0],
            curr_items: gauges[1],
            total_items: gauges[2],
            evictions: gauges[3],
            bytes: gauges[4],
            hash_bytes: gauges[5],
            allocated_bytes: gauges[6],
            free_bytes: gauges[7],
            spare_buckets: gauges[8],
            spare_buckets_free: gauges[9],
            conn_buffer_bytes: gauges[10],
            log_used: gauges[11],
            copied_items: gauges[12],
            copied_bytes: gauges[13],
            expired_reads: gauges[14],
            reclaimed: gauges[15],
            flushed_reads: gauges[16],
            index_evictions: gauges[17],
            overflow_buckets: gauges[18],
        })
    }

    /// Adds another worker's figures.
    pub(crate) fn add(&mut self, other: &Snapshot) {
        let mine = self.counters.words();
        let theirs = other.counters.words();
        let sum: Vec<u64> = mine.iter().zip(theirs.iter()).map(|(a, b)| a + b).collect();
        self.counters = Counters::from_words(&sum);
        self.curr_connections += other.curr_connections;
        self.curr_items += other.curr_items;
        self.total_items += other.total_items;
        self.evictions += other.evictions;
        self.bytes += other.bytes;
        self.hash_bytes += other.hash_bytes;
        self.allocated_bytes += other.allocated_bytes;
        self.free_bytes += other.free_bytes;
        self.spare_buckets += other.spare_buckets;
        self.spare_buckets_free += other.spare_buckets_free;
        self.conn_buffer_bytes += other.conn_buffer_bytes;
        self.log_used += other.log_used;
        self.copied_items += other.copied_items;
        self.copied_bytes += other.copied_bytes;
        self.expired_reads += other.expired_reads;
        self.reclaimed += other.reclaimed;
        self.flushed_reads += other.flushed_reads;
        self.index_evictions += other.index_evictions;
        self.overflow_buckets += other.overflow_buckets;
        for (mine, theirs) in self.flash.iter_mut().zip(other.flash) {
            *mine += theirs;
        }
        for (mine, theirs) in self.classes.iter_mut().zip(other.classes) {
            mine.items += theirs.items;
            mine.requested_bytes += theirs.requested_bytes;
            mine.evicted += theirs.evicted;
            mine.reclaimed += theirs.reclaimed;
        }
    }
}

/// The groups `stats <group>` answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Group {
    General,
    Settings,
    /// Groups of memcached's slab allocator, which tierkv does not have: answered empty.
    Items,
    Slabs,
    Sizes,
    Reset,
    /// tierkv's own: what a partition-aware client needs to steer keys.
    Tierkv,
}

impl Group {
    /// The group named by the first word of `args`; None for one memcached does not know
    /// or tierkv cannot answer with the same meaning.
    pub(crate) fn parse(args: &[u8]) -> Option<Group> {
        let first = subcommand(args);
        Some(match first {
            b"" => Group::General,
            b"settings" => Group::Settings,
            b"items" => Group::Items,
            b"slabs" => Group::Slabs,
            b"sizes" => Group::Sizes,
            b"reset" => Group::Reset,
            b"tierkv" => Group::Tierkv,
            _ => return None,
        })
    }
}

/// The first word of `stats`' arguments (memcached's subcommand), empty for plain `stats`.
pub(crate) fn subcommand(args: &[u8]) -> &[u8] {
    args.split(|&b| b == b' ').find(|word| !word.is_empty()).unwrap_or_default()
}

/// CPU seconds of this process, user and system, as "seconds.microseconds".
pub(crate) fn rusage() -> (String, String) {
    let (user, system) = crate::sys::cpu_time();
    let format = |(seconds, micros): (i64, i64)| format!("{seconds}.{micros:06}");
    (format(user), format(system))
}

/// The hash clients use to compute a key's partition (see `tierkv_engine::KeyHash`).
pub(crate) const PARTITION_HASH: &str = "xxh3-64-seed0-mica";

/// Calls `emit(name, value)` for every stat of `group` (nothing for `Reset`), from the sum of
/// every worker's snapshot and this worker's partition (for the settings all share).
pub(crate) fn report(
    group: Group,
    state: &State,
    total: &Snapshot,
    partition: &Partition,
    emit: &mut dyn FnMut(&str, &str),
) {
    let mut put = |name: &str, value: &dyn std::fmt::Display| emit(name, &value.to_string());
    match group {
        Group::General => keys::general(state, total, partition, &mut put),
        Group::Settings => keys::settings(state, partition, &mut put),
        Group::Sizes => put("sizes_status", &"disabled"),
        Group::Slabs => keys::slabs(total, &mut put),
        Group::Items => keys::items(total, &mut put),
        Group::Tierkv => {
            put("partitions", &state.shared.settings.threads);
            put("hash", &PARTITION_HASH);
            put("direct_port_base", &state.shared.settings.direct_ports.unwrap_or(0));
            put("forwarded_requests", &total.counters.forwarded_requests);
            put("crew_reads", &total.counters.crew_reads);
            put("locked_requests", &total.counters.locked_requests);
            put("idle_yields", &total.counters.idle_yields);
            put("slow_yields", &total.counters.slow_yields);
            put("cpu_contended", &u8::from(state.shared.contention.holds()));
            put("workers_contended", &state.shared.contention.workers_contended());
            put("lock_waits", &total.counters.lock_waits);
            put("slow_request_kicks", &total.counters.slow_request_kicks);
            put("concurrency", &state.shared.settings.concurrency.name());
            put("mode", &partition.mode().name());
            put("bytes_used", &total.log_used);
            put("log_items_copied_forward", &total.copied_items);
            put("log_bytes_copied_forward", &total.copied_bytes);
            put("index_overflow_buckets", &total.overflow_buckets);
            put("index_full_evictions", &total.index_evictions);
            put("bytes_free", &total.free_bytes);
            put("spare_buckets", &total.spare_buckets);
            put("spare_buckets_free", &total.spare_buckets_free);
            put("conn_buffer_bytes", &total.conn_buffer_bytes);
            put("cmd_atomic", &total.counters.cmd_atomic);
            put("atomic_hits", &total.counters.atomic_hits);
            put("atomic_misses", &total.counters.atomic_misses);
            put("atomic_combining", &if state.shared.settings.atomic_combining { "yes" } else { "no" });
            put("atomic_lookups_saved", &total.counters.atomic_lookups_saved);
            put("atomic_writes_saved", &total.counters.atomic_writes_saved);
            put("cmd_vector", &total.counters.cmd_vector);
        }
        Group::Reset => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_cross_threads_intact_and_add_up() {
        let mut one = Snapshot { curr_items: 3, bytes: 100, ..Snapshot::default() };
        one.counters.cmd_get = 7;
        one.counters.forwarded_requests = 2;
        let mut encoded = Vec::new();
        one.write_to(&mut encoded);
        assert_eq!(encoded.len(), Snapshot::ENCODED_BYTES);
        let back = Snapshot::read_from(&encoded).unwrap();
        assert_eq!(back, one);
        assert_eq!(Snapshot::read_from(&encoded[1..]), None);
        let mut sum = back;
        sum.add(&one);
        assert_eq!((sum.counters.cmd_get, sum.counters.forwarded_requests, sum.curr_items, sum.bytes), (14, 4, 6, 200));
        assert_eq!(sum.counters.cmd_set, 0);
    }
}
