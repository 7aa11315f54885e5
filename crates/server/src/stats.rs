//! The server's counters and memcached's `stats` groups built from them, for the text and the
//! binary protocol alike. Names and meanings follow memcached 1.6.18; a name is reported only
//! when it means the same thing in tierkv.

use crate::config::Settings;
use tierkv_engine::{EngineStats, Partition};

/// Counters of one worker, named as memcached's `stats` names them.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counters {
    pub cmd_get: u64,
    pub cmd_set: u64,
    pub cmd_flush: u64,
    pub cmd_touch: u64,
    pub cmd_meta: u64,
    pub get_hits: u64,
    pub get_misses: u64,
    pub delete_hits: u64,
    pub delete_misses: u64,
    pub incr_hits: u64,
    pub incr_misses: u64,
    pub decr_hits: u64,
    pub decr_misses: u64,
    pub cas_hits: u64,
    pub cas_misses: u64,
    pub cas_badval: u64,
    pub touch_hits: u64,
    pub touch_misses: u64,
    pub store_too_large: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub total_connections: u64,
    pub rejected_connections: u64,
}

impl Counters {
    /// One key read, as memcached counts it: a get-and-touch is a touch, not a get.
    pub fn read(&mut self, touch: bool, hit: bool) {
        let (commands, hits, misses) = if touch {
            (&mut self.cmd_touch, &mut self.touch_hits, &mut self.touch_misses)
        } else {
            (&mut self.cmd_get, &mut self.get_hits, &mut self.get_misses)
        };
        *commands += 1;
        *(if hit { hits } else { misses }) += 1;
    }
}

/// Everything `stats` reports that is not in the partition.
#[derive(Debug)]
pub struct State {
    pub counters: Counters,
    /// The engine's counters at the last `stats reset` (reported values are differences).
    engine_baseline: EngineStats,
    pub settings: Settings,
    pub verbosity: u32,
    pub curr_connections: u64,
    started: u32,
}

impl State {
    pub fn new(settings: &Settings, now: u32) -> State {
        State {
            counters: Counters::default(),
            engine_baseline: EngineStats::default(),
            settings: settings.clone(),
            verbosity: u32::from(settings.verbose),
            curr_connections: 0,
            started: now,
        }
    }

    /// `stats reset`: counters start again from zero; gauges (items, bytes, connections) stay.
    pub fn reset(&mut self, partition: &Partition) {
        self.counters = Counters::default();
        self.engine_baseline = partition.stats();
    }
}

/// The groups `stats <group>` answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Group {
    General,
    Settings,
    /// Groups of memcached's slab allocator, which tierkv does not have: answered empty.
    Items,
    Slabs,
    Sizes,
    Reset,
}

impl Group {
    /// The group named by the first word of `args`; None for one memcached does not know
    /// or tierkv cannot answer with the same meaning.
    pub fn parse(args: &[u8]) -> Option<Group> {
        let first = args.split(|&b| b == b' ').find(|word| !word.is_empty()).unwrap_or_default();
        Some(match first {
            b"" => Group::General,
            b"settings" => Group::Settings,
            b"items" => Group::Items,
            b"slabs" => Group::Slabs,
            b"sizes" => Group::Sizes,
            b"reset" => Group::Reset,
            _ => return None,
        })
    }
}

/// CPU seconds of this process, user and system, as "seconds.microseconds".
fn rusage() -> (String, String) {
    // SAFETY: getrusage fills the zero-initialised plain-data struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let format = |t: libc::timeval| format!("{}.{:06}", t.tv_sec, t.tv_usec);
    (format(usage.ru_utime), format(usage.ru_stime))
}

/// Calls `emit(name, value)` for every stat of `group` (nothing for `Reset`).
pub fn report(group: Group, state: &State, partition: &Partition, emit: &mut dyn FnMut(&str, &str)) {
    let mut put = |name: &str, value: &dyn std::fmt::Display| emit(name, &value.to_string());
    match group {
        Group::General => general(state, partition, &mut put),
        Group::Settings => settings(state, partition, &mut put),
        Group::Sizes => put("sizes_status", &"disabled"),
        Group::Slabs => {
            put("active_slabs", &0);
            put("total_malloced", &partition.allocated_bytes());
        }
        Group::Items | Group::Reset => {}
    }
}

fn general(state: &State, partition: &Partition, put: &mut dyn FnMut(&str, &dyn std::fmt::Display)) {
    let c = &state.counters;
    let engine = partition.stats();
    let base = &state.engine_baseline;
    let now = partition.now();
    let (user, system) = rusage();
    put("pid", &std::process::id());
    put("uptime", &now.saturating_sub(state.started));
    put("time", &now);
    put("version", &crate::execute::VERSION);
    put("pointer_size", &(usize::BITS));
    put("rusage_user", &user);
    put("rusage_system", &system);
    put("max_connections", &state.settings.conn_limit);
    put("curr_connections", &state.curr_connections);
    put("total_connections", &c.total_connections);
    put("rejected_connections", &c.rejected_connections);
    put("connection_structures", &state.curr_connections);
    put("cmd_get", &c.cmd_get);
    put("cmd_set", &c.cmd_set);
    put("cmd_flush", &c.cmd_flush);
    put("cmd_touch", &c.cmd_touch);
    put("cmd_meta", &c.cmd_meta);
    put("get_hits", &c.get_hits);
    put("get_misses", &c.get_misses);
    put("delete_misses", &c.delete_misses);
    put("delete_hits", &c.delete_hits);
    put("incr_misses", &c.incr_misses);
    put("incr_hits", &c.incr_hits);
    put("decr_misses", &c.decr_misses);
    put("decr_hits", &c.decr_hits);
    put("cas_misses", &c.cas_misses);
    put("cas_hits", &c.cas_hits);
    put("cas_badval", &c.cas_badval);
    put("touch_hits", &c.touch_hits);
    put("touch_misses", &c.touch_misses);
    put("store_too_large", &c.store_too_large);
    put("store_no_memory", &0);
    put("auth_cmds", &0);
    put("auth_errors", &0);
    put("bytes_read", &c.bytes_read);
    put("bytes_written", &c.bytes_written);
    put("limit_maxbytes", &state.settings.memory_bytes);
    put("accepting_conns", &1);
    put("listen_disabled_num", &0);
    put("threads", &1);
    put("hash_power_level", &(partition.index_bytes() / 8).trailing_zeros());
    put("hash_bytes", &partition.index_bytes());
    // Log bytes in use: live items plus dead copies not yet overwritten.
    put("bytes", &engine.log_bytes_written.min(partition.log_bytes() as u64));
    put("curr_items", &engine.live_items);
    put("total_items", &(engine.items_stored - base.items_stored));
    put("evictions", &(engine.evictions - base.evictions));
}

fn settings(state: &State, partition: &Partition, put: &mut dyn FnMut(&str, &dyn std::fmt::Display)) {
    let s = &state.settings;
    put("maxbytes", &s.memory_bytes);
    put("maxconns", &s.conn_limit);
    put("tcpport", &s.address.port());
    put("udpport", &0);
    put("inter", &s.address.ip());
    put("verbosity", &state.verbosity);
    put("evictions", &"on");
    put("domain_socket", &"NULL");
    put("num_threads", &1);
    put("detail_enabled", &"no");
    put("cas_enabled", &"yes");
    put("tcp_backlog", &1024);
    put("binding_protocol", &"auto-negotiate");
    put("auth_enabled_sasl", &"no");
    put("auth_enabled_ascii", &"no");
    put("item_size_max", &partition.max_item_bytes());
    put("maxconns_fast", &"yes");
    put("flush_enabled", &"yes");
    put("hash_algorithm", &"xxh3");
    put("idle_timeout", &0);
    put("ssl_enabled", &"no");
}
