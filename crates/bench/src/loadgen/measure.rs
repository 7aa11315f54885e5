//! Measuring a run: the load generator's result with the server's and its own CPU time
//! per request, and the small system helpers that needs (CPU time from /proc, pinning).
//!
//! It must not drive load itself: `run` does.

use super::{preload, run_threads, RunConfig};

/// User + system CPU seconds of process `pid` so far, from /proc.
pub fn process_cpu_seconds(pid: u32) -> Result<f64, String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(|e| format!("cannot read /proc/{pid}/stat: {e}"))?;
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').map(|(_, rest)| rest).ok_or("malformed /proc stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).ok_or("malformed /proc stat");
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 after the name.
    let total = ticks(11)? + ticks(12)?;
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    Ok(total as f64 / hz.max(1) as f64)
}

/// One measured run, as reported.
#[derive(Clone, Debug)]
pub struct Measurement {
    /// Requests answered per second.
    pub ops_per_sec: f64,
    /// Requests answered.
    pub operations: u64,
    /// The share of gets that found their key.
    pub get_hit_ratio: f64,
    /// Median latency (microseconds).
    pub latency_us_p50: f64,
    /// 99th percentile latency (microseconds).
    pub latency_us_p99: f64,
    /// 99.9th percentile latency (microseconds).
    pub latency_us_p999: f64,
    /// The server's CPU time per request (microseconds; None without its pid).
    pub server_cpu_us_per_op: Option<f64>,
    /// The load generator's CPU time per request (microseconds).
    pub client_cpu_us_per_op: f64,
    /// SETs the server refused for lack of memory (answered, not failures of the run).
    pub refused_sets: u64,
    /// UDP requests without a reply in time (not counted as operations).
    pub lost: u64,
}

/// Runs `config` (after its preload, if any) and measures it, with the server's CPU time when
/// `server_pid` is given. CPU is bracketed around the measured interval only.
pub fn measure(config: &RunConfig, server_pid: Option<u32>) -> Result<Measurement, String> {
    if config.preload {
        preload(config).map_err(|e| format!("preload failed: {e}"))?;
    }
    let server_before = server_pid.map(process_cpu_seconds).transpose()?;
    let client_before = process_cpu_seconds(std::process::id())?;
    let result = run_threads(config)?;
    let ops = result.operations.max(1) as f64;
    let server_cpu_us_per_op = match (server_pid, server_before) {
        (Some(pid), Some(before)) => Some((process_cpu_seconds(pid)? - before) * 1e6 / ops),
        _ => None,
    };
    let client_cpu_us_per_op = (process_cpu_seconds(std::process::id())? - client_before) * 1e6 / ops;
    let us = |q: f64| result.latency_ns.value_at_quantile(q) as f64 / 1000.0;
    Ok(Measurement {
        ops_per_sec: result.operations as f64 / result.elapsed.as_secs_f64(),
        operations: result.operations,
        get_hit_ratio: if result.gets == 0 { 1.0 } else { result.get_hits as f64 / result.gets as f64 },
        latency_us_p50: us(0.5),
        latency_us_p99: us(0.99),
        latency_us_p999: us(0.999),
        server_cpu_us_per_op,
        client_cpu_us_per_op,
        refused_sets: result.refused_sets,
        lost: result.lost,
    })
}

impl Measurement {
    /// The compact JSON object `run --json` prints (`extra` holds more `"key":value` pairs).
    pub fn json(&self, extra: &str) -> String {
        let server = self.server_cpu_us_per_op.map_or("null".to_string(), |c| format!("{c:.4}"));
        format!(
            "{{\"ops_per_sec\":{:.1},\"operations\":{},\"get_hit_ratio\":{:.5},\"latency_us\":{{\"p50\":{:.2},\"p99\":{:.2},\"p999\":{:.2}}},\"server_cpu_us_per_op\":{server},\"client_cpu_us_per_op\":{:.4},\"errors\":0,\"refused_sets\":{},\"lost\":{}{}{extra}}}",
            self.ops_per_sec,
            self.operations,
            self.get_hit_ratio,
            self.latency_us_p50,
            self.latency_us_p99,
            self.latency_us_p999,
            self.client_cpu_us_per_op,
            self.refused_sets,
            self.lost,
            if extra.is_empty() { "" } else { "," },
        )
    }

    /// One readable line.
    pub fn summary(&self) -> String {
        format!(
            "{:.0} ops/s, hit ratio {:.4}, p50 {:.1} us, p99 {:.1} us, p99.9 {:.1} us, server CPU {} us/op, bench CPU {:.3} us/op, refused sets {}, lost {}",
            self.ops_per_sec,
            self.get_hit_ratio,
            self.latency_us_p50,
            self.latency_us_p99,
            self.latency_us_p999,
            self.server_cpu_us_per_op.map_or("n/a".to_string(), |c| format!("{c:.3}")),
            self.client_cpu_us_per_op,
            self.refused_sets,
            self.lost,
        )
    }
}

/// Pins the calling thread to `cpu` (best effort: false if the CPU is not allowed).
pub fn pin_to_cpu(cpu: usize) -> bool {
    // SAFETY: cpu_set_t is plain data; CPU_ZERO/CPU_SET write inside it; sched_setaffinity reads
    // it for the calling thread (pid 0).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}
