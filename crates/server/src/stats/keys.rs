//! The lines of `stats` and `stats settings`: every key memcached 1.6.18 prints, in its order,
//! with tierkv's true value where it has the concept and memcached's own idle value where it
//! has not (a slab mover, an LRU crawler, libevent). The README's table lists which is which.
//!
//! It must not gather figures: the parent module sums the workers' snapshots and passes them in.

use super::{rusage, Snapshot, State};
use std::sync::atomic::Ordering;
use tierkv_engine::AnyPartition as Partition;
use tierkv_engine::Engine;

type Put<'a> = &'a mut dyn FnMut(&str, &dyn std::fmt::Display);

/// Keys tierkv has no mechanism behind, at the value memcached shows when the mechanism is idle.
const IDLE_SERVER: [&str; 20] = [
    "hash_is_expanding",
    "slab_reassign_rescues",
    "slab_reassign_chunk_rescues",
    "slab_reassign_evictions_nomem",
    "slab_reassign_inline_reclaim",
    "slab_reassign_busy_items",
    "slab_reassign_busy_deletes",
    "slab_reassign_running",
    "slabs_moved",
    "lru_crawler_running",
    "lru_crawler_starts",
    "lru_maintainer_juggles",
    "malloc_fails",
    "log_worker_dropped",
    "log_worker_written",
    "log_watcher_skipped",
    "log_watcher_sent",
    "log_watchers",
    "unexpected_napi_ids",
    "round_robin_fallback",
];

/// The same for the item figures after `evictions` (an LRU with hot, warm and cold segments).
const IDLE_LRU: [&str; 8] = [
    "crawler_reclaimed",
    "crawler_items_checked",
    "lrutail_reflocked",
    "moves_to_cold",
    "moves_to_warm",
    "moves_within_lru",
    "direct_reclaims",
    "lru_bumps_dropped",
];

pub(crate) fn general(state: &State, total: &Snapshot, partition: &Partition, put: Put<'_>) {
    let c = &total.counters;
    let now = partition.now();
    let (user, system) = rusage();
    put("pid", &std::process::id());
    put("uptime", &now.saturating_sub(state.started));
    put("time", &now);
    put("version", &crate::VERSION);
    put("libevent", &"none");
    put("pointer_size", &(usize::BITS));
    put("rusage_user", &user);
    put("rusage_system", &system);
    put("max_connections", &state.shared.settings.conn_limit);
    put("curr_connections", &total.curr_connections);
    put("total_connections", &c.total_connections);
    put("rejected_connections", &c.rejected_connections);
    put("connection_structures", &total.curr_connections);
    // memcached's response objects and read buffers: tierkv's connection buffers.
    put("response_obj_oom", &0);
    put("response_obj_count", &0);
    put("response_obj_bytes", &0);
    put("read_buf_count", &total.curr_connections);
    put("read_buf_bytes", &total.conn_buffer_bytes);
    put("read_buf_bytes_free", &0);
    put("read_buf_oom", &0);
    put("reserved_fds", &0);
    requests(total, put);
    if state.shared.settings.idle_timeout > 0 {
        put("idle_kicks", &c.idle_kicks);
    }
    put("bytes_read", &c.bytes_read);
    put("bytes_written", &c.bytes_written);
    put("limit_maxbytes", &state.shared.memory_limit.load(Ordering::Relaxed));
    put("accepting_conns", &1);
    put("listen_disabled_num", &0);
    put("time_in_listen_disabled_us", &0);
    put("threads", &state.shared.settings.threads);
    put("conn_yields", &0);
    put("hash_power_level", &(partition.index_bytes() / 8).trailing_zeros());
    put("hash_bytes", &total.hash_bytes);
    for name in IDLE_SERVER {
        match name {
            "log_watchers" => put(name, &state.shared.watchers.active()),
            // memcached's extstore and TLS figures come before these two.
            "unexpected_napi_ids" => {
                if let Some(flash) = &state.shared.settings.flash {
                    crate::flash_stats::report(&total.flash, flash.size, put);
                    let problem = *state.shared.flash_file_problem.lock().unwrap_or_else(|e| e.into_inner());
                    put("flash_file", &problem.unwrap_or("ok"));
                }
                tls_stats(state, put);
                put(name, &0);
            }
            _ => put(name, &0),
        }
    }
    put("bytes", &total.bytes);
    put("curr_items", &total.curr_items);
    put("total_items", &total.total_items);
    put("slab_global_page_pool", &0);
    put("expired_unfetched", &0);
    put("evicted_unfetched", &0);
    put("evicted_active", &0);
    put("evictions", &total.evictions);
    put("reclaimed", &total.reclaimed);
    for name in IDLE_LRU {
        put(name, &0);
    }
}

/// memcached's TLS figures (and tierkv's `ssl_proto_errors`).
fn tls_stats(state: &State, put: Put<'_>) {
    if let Some(tls) = &state.shared.tls {
        put("ssl_new_sessions", &tls.new_sessions.load(Ordering::Relaxed));
        put("ssl_handshake_errors", &tls.handshake_errors.load(Ordering::Relaxed));
        put("ssl_proto_errors", &tls.proto_errors.load(Ordering::Relaxed));
        let since = u64::from(tierkv_engine::unix_now()).saturating_sub(tls.loaded_at.load(Ordering::Relaxed));
        put("time_since_server_cert_refresh", &since);
    }
}

/// The request counters, from `cmd_get` to `auth_errors` (and the TLS ones memcached adds).
fn requests(total: &Snapshot, put: Put<'_>) {
    let c = &total.counters;
    let counters = [
        ("cmd_get", c.cmd_get),
        ("cmd_set", c.cmd_set),
        ("cmd_flush", c.cmd_flush),
        ("cmd_touch", c.cmd_touch),
        ("cmd_meta", c.cmd_meta),
        ("get_hits", c.get_hits),
        ("get_misses", c.get_misses),
        ("get_expired", total.expired_reads),
        ("get_flushed", total.flushed_reads),
        ("delete_misses", c.delete_misses),
        ("delete_hits", c.delete_hits),
        ("incr_misses", c.incr_misses),
        ("incr_hits", c.incr_hits),
        ("decr_misses", c.decr_misses),
        ("decr_hits", c.decr_hits),
        ("cas_misses", c.cas_misses),
        ("cas_hits", c.cas_hits),
        ("cas_badval", c.cas_badval),
        ("touch_hits", c.touch_hits),
        ("touch_misses", c.touch_misses),
        ("store_too_large", c.store_too_large),
        ("store_no_memory", c.store_no_memory),
        ("auth_cmds", c.auth_cmds),
        ("auth_errors", c.auth_errors),
    ];
    for (name, value) in counters {
        put(name, &value);
    }
}

fn yes_no(on: bool) -> &'static str {
    if on {
        "yes"
    } else {
        "no"
    }
}

pub(crate) fn settings(state: &State, partition: &Partition, put: Put<'_>) {
    let s = &state.shared.settings;
    put("maxbytes", &state.shared.memory_limit.load(Ordering::Relaxed));
    put("maxconns", &s.conn_limit);
    put("tcpport", &s.addresses[0].port());
    put("udpport", &s.udp_port.unwrap_or(0));
    let inter: Vec<String> = s.addresses.iter().map(|address| address.ip().to_string()).collect();
    put("inter", &inter.join(","));
    put("verbosity", &state.shared.verbosity.load(Ordering::Relaxed));
    put("oldest", &0);
    put("evictions", &if partition.mode() == tierkv_engine::Mode::Store { "off" } else { "on" });
    match &s.unix_socket {
        Some((path, _)) => put("domain_socket", &path.display()),
        None => put("domain_socket", &"NULL"),
    }
    put("umask", &format!("{:o}", s.unix_socket.as_ref().map_or(0o700, |(_, mask)| *mask)));
    put("shutdown_command", &yes_no(s.admin.shutdown));
    // memcached's slab class sizes, which `stats items` and `stats slabs` number by.
    put("growth_factor", &"1.25");
    put("chunk_size", &48);
    put("num_threads", &s.threads);
    put("num_threads_per_udp", &s.threads);
    put("stat_key_prefix", &char::from(s.admin.prefix_delimiter));
    put("detail_enabled", &yes_no(state.shared.detail.enabled()));
    put("reqs_per_event", &20);
    put("cas_enabled", &"yes");
    put("tcp_backlog", &s.backlog);
    let binding = match (&s.auth_file, s.sasl) {
        (_, true) => "binary",
        (Some(_), false) => "ascii",
        (None, false) => "auto-negotiate",
    };
    put("binding_protocol", &binding);
    put("auth_enabled_sasl", &yes_no(s.sasl));
    match &s.auth_file {
        Some(path) if !s.sasl => put("auth_enabled_ascii", &path.display()),
        _ => put("auth_enabled_ascii", &"no"),
    }
    put("item_size_max", &partition.max_item_bytes());
    put("maxconns_fast", &"yes");
    put("hashpower_init", &0);
    for (name, value) in IDLE_SLABS {
        put(name, &value);
    }
    put("slab_chunk_max", &(partition.max_item_bytes() / 2));
    put("lru_crawler", &"yes");
    put("lru_crawler_sleep", &100);
    put("lru_crawler_tocrawl", &0);
    put("tail_repair_time", &0);
    put("flush_enabled", &yes_no(s.admin.flush));
    put("dump_enabled", &yes_no(s.admin.dump));
    put("hash_algorithm", &"xxh3");
    for (name, value) in IDLE_LRU_SETTINGS {
        put(name, &value);
    }
    put("idle_timeout", &state.shared.settings.idle_timeout);
    put("watcher_logbuf_size", &262144);
    put("worker_logbuf_size", &65536);
    put("read_buf_mem_limit", &(s.conn_memory_bytes >> 20));
    put("track_sizes", &"no");
    put("inline_ascii_response", &"no");
    for (name, value) in EXTSTORE_SETTINGS {
        put(name, &value);
    }
    ssl_settings(s.tls.as_ref(), put);
    put("num_napi_ids", &"(null)");
    put("memory_file", &"(null)");
    crate::flash_stats::settings(s.flash.as_ref(), put);
}

/// memcached's slab mover settings, at its defaults (tierkv has no slabs to move).
const IDLE_SLABS: [(&str, &str); 4] =
    [("slab_reassign", "yes"), ("slab_automove", "1"), ("slab_automove_ratio", "0.80"), ("slab_automove_window", "30")];

/// memcached's segmented LRU settings, at its defaults (tierkv's log is one FIFO with reads
/// near eviction copied forward).
const IDLE_LRU_SETTINGS: [(&str, &str); 8] = [
    ("lru_maintainer_thread", "yes"),
    ("lru_segmented", "yes"),
    ("hot_lru_pct", "20"),
    ("warm_lru_pct", "40"),
    ("hot_max_factor", "0.20"),
    ("warm_max_factor", "2.00"),
    ("temp_lru", "no"),
    ("temporary_ttl", "61"),
];

/// memcached's extstore settings, at its defaults (tierkv's flash tier has its own, listed
/// after these as `flash_*`).
const EXTSTORE_SETTINGS: [(&str, &str); 11] = [
    ("ext_item_size", "512"),
    ("ext_item_age", "4294967295"),
    ("ext_low_ttl", "0"),
    ("ext_recache_rate", "2000"),
    ("ext_wbuf_size", "4194304"),
    ("ext_compact_under", "0"),
    ("ext_drop_under", "0"),
    ("ext_max_sleep", "1000000"),
    ("ext_max_frag", "0.80"),
    ("slab_automove_freeratio", "0.010"),
    ("ext_drop_unread", "no"),
];

/// memcached's `ssl_*` settings lines (1.6.18, built with TLS).
fn ssl_settings(tls: Option<&crate::net::tls::TlsSettings>, put: Put<'_>) {
    let path = |p: Option<&std::path::PathBuf>| p.map_or("(null)".to_string(), |p| p.display().to_string());
    put("ssl_enabled", &yes_no(tls.is_some()));
    put("ssl_chain_cert", &path(tls.map(|t| &t.chain_cert)));
    put("ssl_key", &path(tls.map(|t| &t.key)));
    put("ssl_verify_mode", &tls.map_or(0, |t| t.verify_mode));
    put("ssl_keyformat", &1);
    put("ssl_ciphers", &"NULL");
    put("ssl_ca_cert", &tls.and_then(|t| t.ca_cert.as_ref()).map_or("NULL".to_string(), |p| p.display().to_string()));
    put("ssl_wbuf_size", &16384);
    put("ssl_session_cache", &"no");
    put("ssl_kernel_tls", &"no");
    put("ssl_min_version", &"tlsv1.2");
}

/// `stats items`: memcached's per-class lines for each class that holds items (or lost some),
/// classes numbered by memcached's sizes for tierkv's items (`ClassFigures`). LRU segment
/// figures are 0 (one FIFO log); every hit is a hit to "cold".
pub(crate) fn items(total: &Snapshot, put: Put<'_>) {
    for (index, class) in total.classes.iter().enumerate() {
        if class.items == 0 && class.evicted == 0 {
            continue;
        }
        let figures: [(&str, u64); 28] = [
            ("number", class.items),
            ("number_hot", 0),
            ("number_warm", 0),
            ("number_cold", class.items),
            ("age_hot", 0),
            ("age_warm", 0),
            ("age", 0),
            ("mem_requested", class.requested_bytes),
            ("evicted", class.evicted),
            ("evicted_nonzero", 0),
            ("evicted_time", 0),
            ("outofmemory", 0),
            ("tailrepairs", 0),
            ("reclaimed", class.reclaimed),
            ("expired_unfetched", 0),
            ("evicted_unfetched", 0),
            ("evicted_active", 0),
            ("crawler_reclaimed", 0),
            ("crawler_items_checked", 0),
            ("lrutail_reflocked", 0),
            ("moves_to_cold", 0),
            ("moves_to_warm", 0),
            ("moves_within_lru", 0),
            ("direct_reclaims", 0),
            ("hits_to_hot", 0),
            ("hits_to_warm", 0),
            ("hits_to_cold", 0),
            ("hits_to_temp", 0),
        ];
        for (name, value) in figures {
            put(&format!("items:{}:{name}", index + 1), &value);
        }
    }
}

/// `stats slabs`: the classes `stats items` lists, as if memcached held the same items (its
/// chunk size, 1 MiB pages); per-class command counters are 0 (tierkv counts them per server).
pub(crate) fn slabs(total: &Snapshot, put: Put<'_>) {
    let mut active = 0u64;
    for (index, class) in total.classes.iter().enumerate() {
        if class.items == 0 && class.evicted == 0 {
            continue;
        }
        let chunk = u64::from(tierkv_engine::CLASS_CHUNK_BYTES[index]);
        let per_page = ((1 << 20) / chunk).max(1);
        let pages = class.items.div_ceil(per_page).max(1);
        let figures: [(&str, u64); 15] = [
            ("chunk_size", chunk),
            ("chunks_per_page", per_page),
            ("total_pages", pages),
            ("total_chunks", pages * per_page),
            ("used_chunks", class.items),
            ("free_chunks", pages * per_page - class.items),
            ("free_chunks_end", 0),
            ("get_hits", 0),
            ("cmd_set", 0),
            ("delete_hits", 0),
            ("incr_hits", 0),
            ("decr_hits", 0),
            ("cas_hits", 0),
            ("cas_badval", 0),
            ("touch_hits", 0),
        ];
        for (name, value) in figures {
            put(&format!("{}:{name}", index + 1), &value);
        }
        active += 1;
    }
    put("active_slabs", &active);
    // As memcached reports it with its memory reserved up front (-L): the budget itself, index
    // and log, which tierkv maps at start and does not grow as items come and go.
    put("total_malloced", &total.allocated_bytes);
}
