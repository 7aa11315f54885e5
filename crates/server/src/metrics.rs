//! Prometheus metrics (`--metrics-port`): every worker publishes its `stats` figures and its
//! request latency histograms once a second into a shared slot; a thread of its own
//! (`metrics_http`) serves `GET /metrics` in Prometheus's text format (version 0.0.4) from those slots. Latency is
//! measured per connection turn (two clock reads a turn, none per request) and shared out over
//! the turn's requests.
//!
//! It must not touch partitions or connections: it only reads what workers published.

use crate::stats::{Counters, Snapshot};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

/// Upper bounds of the latency buckets, in seconds (+Inf is implied).
pub(crate) const BUCKETS: [f64; 12] = [1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 1e-2, 1e-1];
/// The command classes latency is kept for.
pub(crate) const CLASSES: [&str; 2] = ["get", "set"];

/// One command class's latency histogram (cumulative counts are made when rendering).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Histogram {
    /// Requests per bucket (the last one is +Inf).
    pub counts: [u64; BUCKETS.len() + 1],
    pub sum_seconds: f64,
    pub count: u64,
}

impl Histogram {
    /// `requests` requests that took `seconds` in all, each counted at the mean.
    pub(crate) fn record(&mut self, requests: u64, seconds: f64) {
        if requests == 0 {
            return;
        }
        let each = seconds / requests as f64;
        let bucket = BUCKETS.iter().position(|&bound| each <= bound).unwrap_or(BUCKETS.len());
        self.counts[bucket] += requests;
        self.sum_seconds += seconds;
        self.count += requests;
    }
}

/// What one worker last published.
#[derive(Clone, Debug, Default)]
pub(crate) struct WorkerFigures {
    pub snapshot: Snapshot,
    pub latency: [Histogram; CLASSES.len()],
}

/// The slots the workers publish into, and what the whole server reports besides.
#[derive(Debug)]
pub(crate) struct Published {
    pub workers: Mutex<Vec<WorkerFigures>>,
    pub started: std::time::Instant,
    pub limit_maxbytes: Arc<std::sync::atomic::AtomicUsize>,
    pub tls: Option<Arc<crate::net::tls::TlsContext>>,
}

impl Published {
    pub(crate) fn new(
        workers: usize,
        limit_maxbytes: Arc<std::sync::atomic::AtomicUsize>,
        tls: Option<Arc<crate::net::tls::TlsContext>>,
    ) -> Published {
        Published {
            workers: Mutex::new(vec![WorkerFigures::default(); workers]),
            started: std::time::Instant::now(),
            limit_maxbytes,
            tls,
        }
    }

    /// Worker `id`'s figures now.
    pub(crate) fn publish(&self, id: usize, figures: WorkerFigures) {
        if let Ok(mut workers) = self.workers.lock() {
            if let Some(slot) = workers.get_mut(id) {
                *slot = figures;
            }
        }
    }
}

/// The help text of a `stats` counter.
fn help(name: &str) -> &'static str {
    match name {
        "cmd_get" => "Keys requested by retrieval commands (get, gets, mg, binary GET).",
        "cmd_set" => "Storage commands (set, add, replace, append, prepend, cas, ms).",
        "cmd_flush" => "flush_all commands.",
        "cmd_touch" => "Touch and get-and-touch commands.",
        "cmd_meta" => "Meta commands.",
        "get_hits" | "get_misses" => "Retrieved keys found / not found.",
        "bytes_read" | "bytes_written" => "Bytes read from / written to clients.",
        "total_connections" => "Connections accepted.",
        "rejected_connections" => "Connections refused at the connection limit.",
        "forwarded_requests" => "Requests sent to the worker owning their key.",
        "slow_request_kicks" => "Connections closed for sending a large request slower than --request-min-rate.",
        "auth_cmds" | "auth_errors" => "Authentication attempts / failed attempts.",
        _ => "memcached's stats counter of the same name.",
    }
}

/// The gauges of a snapshot: name, help, value.
fn gauges(s: &Snapshot) -> [(&'static str, &'static str, u64); 11] {
    [
        ("total_items", "Items stored since the last stats reset.", s.total_items),
        ("allocated_bytes", "Bytes of memory the partition has allocated.", s.allocated_bytes),
        ("free_bytes", "Store mode: free arena bytes.", s.free_bytes),
        ("spare_buckets", "Store mode: spare index buckets.", s.spare_buckets),
        ("spare_buckets_free", "Store mode: spare index buckets not in use.", s.spare_buckets_free),
        ("curr_connections", "Open client connections.", s.curr_connections),
        ("curr_items", "Items stored now.", s.curr_items),
        ("bytes", "Bytes of item memory in use.", s.bytes),
        ("hash_bytes", "Bytes of the hash index.", s.hash_bytes),
        ("evictions", "Items evicted to make room (since the last stats reset).", s.evictions),
        ("conn_buffer_bytes", "Bytes held by connection buffers.", s.conn_buffer_bytes),
    ]
}

/// The whole `/metrics` page.
pub(crate) fn render(published: &Published) -> String {
    let workers = published.workers.lock().map(|w| w.clone()).unwrap_or_default();
    let mut text = String::new();
    let mut head = |text: &mut String, name: &str, kind: &str, help: &str| {
        text.push_str(&format!("# HELP tierkv_{name} {help}\n# TYPE tierkv_{name} {kind}\n"));
    };
    head(&mut text, "uptime_seconds", "gauge", "Seconds since the server started.");
    text.push_str(&format!("tierkv_uptime_seconds {}\n", published.started.elapsed().as_secs()));
    let ((user_s, user_us), (system_s, system_us)) = crate::sys::cpu_time();
    for (name, help, seconds) in [
        ("rusage_user_seconds_total", "CPU time in user mode.", user_s as f64 + user_us as f64 / 1e6),
        ("rusage_system_seconds_total", "CPU time in the kernel.", system_s as f64 + system_us as f64 / 1e6),
    ] {
        head(&mut text, name, "counter", help);
        text.push_str(&format!("tierkv_{name} {seconds}\n"));
    }
    head(&mut text, "threads", "gauge", "Worker threads (-t).");
    text.push_str(&format!("tierkv_threads {}\n", workers.len()));
    head(&mut text, "limit_maxbytes", "gauge", "Item memory limit in bytes (-m, cache_memlimit).");
    let limit = published.limit_maxbytes.load(std::sync::atomic::Ordering::Relaxed);
    text.push_str(&format!("tierkv_limit_maxbytes {limit}\n"));
    let counters: Vec<_> = workers.iter().map(|w| w.snapshot.counters.words()).collect();
    for (index, name) in Counters::NAMES.iter().enumerate() {
        head(&mut text, &format!("{name}_total"), "counter", help(name));
        for (id, words) in counters.iter().enumerate() {
            text.push_str(&format!("tierkv_{name}_total{{worker=\"{id}\"}} {}\n", words[index]));
        }
    }
    let gauge_rows: Vec<_> = workers.iter().map(|w| gauges(&w.snapshot)).collect();
    for g in 0..gauge_rows.first().map_or(0, |row| row.len()) {
        let (name, help, _) = gauge_rows[0][g];
        head(&mut text, name, "gauge", help);
        for (id, row) in gauge_rows.iter().enumerate() {
            text.push_str(&format!("tierkv_{name}{{worker=\"{id}\"}} {}\n", row[g].2));
        }
    }
    flash_lines(&mut text, &workers, &mut head);
    histograms(&mut text, &workers, &mut head);
    if let Some(tls) = &published.tls {
        tls_lines(&mut text, tls, &mut head);
    }
    text
}

type Head<'a> = dyn FnMut(&mut String, &str, &str, &str) + 'a;

/// With a flash tier: each worker's flash figures, as `stats` names them (among them
/// `flash_degraded_partitions`, 1 while this worker's region's writes fail, and the counts of
/// failed writes, given-up segments and reads past the deadline). Nothing without one.
fn flash_lines(text: &mut String, workers: &[WorkerFigures], head: &mut Head<'_>) {
    if workers.iter().all(|w| w.snapshot.flash.iter().all(|&v| v == 0)) {
        return;
    }
    for (index, name) in crate::flash_stats::NAMES.iter().enumerate() {
        head(
            text,
            name,
            "gauge",
            "The flash tier's figure of the same name in `stats` (there summed over the workers).",
        );
        for (id, w) in workers.iter().enumerate() {
            text.push_str(&format!("tierkv_{name}{{worker=\"{id}\"}} {}\n", w.snapshot.flash[index]));
        }
    }
}

fn histograms(text: &mut String, workers: &[WorkerFigures], head: &mut Head<'_>) {
    let name = "request_duration_seconds";
    head(text, name, "histogram", "Server time per request (a connection turn shared out over its requests).");
    for (id, worker) in workers.iter().enumerate() {
        for (class, histogram) in CLASSES.iter().zip(&worker.latency) {
            let labels = format!("worker=\"{id}\",command=\"{class}\"");
            let mut cumulative = 0;
            for (bound, count) in
                BUCKETS.iter().map(|b| format!("{b:e}")).chain(["+Inf".to_string()]).zip(histogram.counts)
            {
                cumulative += count;
                text.push_str(&format!("tierkv_{name}_bucket{{{labels},le=\"{bound}\"}} {cumulative}\n"));
            }
            text.push_str(&format!("tierkv_{name}_sum{{{labels}}} {}\n", histogram.sum_seconds));
            text.push_str(&format!("tierkv_{name}_count{{{labels}}} {}\n", histogram.count));
        }
    }
}

fn tls_lines(text: &mut String, tls: &crate::net::tls::TlsContext, head: &mut Head<'_>) {
    use std::sync::atomic::Ordering::Relaxed;
    for (name, help, value) in [
        ("ssl_handshake_errors", "TLS handshakes that failed.", tls.handshake_errors.load(Relaxed)),
        ("ssl_new_sessions", "TLS handshakes completed.", tls.new_sessions.load(Relaxed)),
        ("ssl_proto_errors", "TLS errors after the handshake.", tls.proto_errors.load(Relaxed)),
    ] {
        head(text, &format!("{name}_total"), "counter", help);
        text.push_str(&format!("tierkv_{name}_total {value}\n"));
    }
}

/// Serves `/metrics` on `address` from a thread of its own (the listener is bound before this
/// returns, so a bad address stops start-up).
pub(crate) fn serve(address: SocketAddr, published: Arc<Published>) -> std::io::Result<()> {
    crate::metrics_http::serve(address, move || render(&published))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_is_shared_out_over_its_requests() {
        let mut h = Histogram::default();
        h.record(4, 8e-6);
        h.record(1, 1.0);
        h.record(0, 1.0);
        assert_eq!(h.counts[1], 4, "2 µs each falls in the 2.5 µs bucket");
        assert_eq!(h.counts[BUCKETS.len()], 1, "a second is beyond the last bound");
        assert_eq!(h.count, 5);
        assert!((h.sum_seconds - 1.000008).abs() < 1e-12);
    }

    #[test]
    fn the_page_has_a_family_per_counter_and_a_series_per_worker() {
        let published = Published::new(2, Arc::new(std::sync::atomic::AtomicUsize::new(64 << 20)), None);
        let mut figures = WorkerFigures::default();
        figures.snapshot.counters.cmd_get = 7;
        figures.latency[0].record(7, 14e-6);
        published.publish(1, figures);
        let page = render(&published);
        assert!(page.contains("# TYPE tierkv_cmd_get_total counter\n"));
        assert!(page.contains("tierkv_cmd_get_total{worker=\"0\"} 0\ntierkv_cmd_get_total{worker=\"1\"} 7\n"));
        assert!(page.contains("tierkv_request_duration_seconds_bucket{worker=\"1\",command=\"get\",le=\"1e-6\"} 0\n"));
        assert!(page.contains("tierkv_request_duration_seconds_bucket{worker=\"1\",command=\"get\",le=\"+Inf\"} 7\n"));
        assert!(page.contains("tierkv_limit_maxbytes 67108864\n"));
        assert_eq!(page.matches("# HELP").count(), page.matches("# TYPE").count());
    }
}
