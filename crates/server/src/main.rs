//! tierkv: the memcached-compatible server (configuration, worker event loop, dispatch of
//! decoded requests to the engine partition, replies).
//!
//! It must not decode or encode requests itself (that is `tierkv-protocol`, which also encodes
//! the single-key get lines of a split multi-get; the server only reads the administrative
//! lines the decoder hands over whole) nor reach into the engine's storage layout (that is
//! `tierkv-engine`, behind its `Engine` trait). One worker thread per partition; TCP requests
//! and replies take no lock: workers share bounded forwarding queues and a few counters and
//! flags read once a loop turn; a worker takes another's partition lock only by trying it
//! (`--concurrency crcw`).

mod admin;
mod after;
#[cfg(test)]
mod alloc_tests;
mod atomic_run;
mod auth;
mod auth_throttle;
mod config;
mod conns;
mod contention;
mod detail;
mod dump;
mod error;
mod execute;
mod flash_stats;
mod forward;
mod limits;
mod metrics;
mod metrics_http;
mod net;
mod outcome;
mod pending;
mod stats;
mod sys;
mod watch;
mod worker;

/// What `version` and `stats` report: memcached's version, then tierkv's.
pub const VERSION: &str = concat!("1.6.18-tierkv-", env!("CARGO_PKG_VERSION"));

fn main() {
    let settings = match config::load(std::env::args_os()).and_then(config::Config::settings) {
        Ok(settings) => settings,
        // clap prints usage errors, help and the version itself, with its own exit code.
        Err(config::ConfigError::Usage(error)) => error.exit(),
        Err(error) => {
            eprintln!("tierkv: {error}");
            std::process::exit(64);
        }
    };
    for note in &settings.notes {
        eprintln!("tierkv: {note}");
    }
    if let Some(path) = &settings.pidfile {
        if let Err(e) = std::fs::write(path, format!("{}\n", std::process::id())) {
            eprintln!("tierkv: -P/--pidfile {}: {e}", path.display());
            std::process::exit(64);
        }
    }
    let result = worker::serve(&settings);
    if let Some(path) = &settings.pidfile {
        let _ = std::fs::remove_file(path);
    }
    if let Err(message) = result {
        eprintln!("tierkv: {message}");
        std::process::exit(1);
    }
}
