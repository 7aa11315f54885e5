//! tierkv: the memcached-compatible server (configuration, worker event loop, dispatch of
//! decoded requests to the engine partition, replies).
//!
//! It must never parse protocol bytes itself (that is `tierkv-protocol`) nor reach into the
//! engine's storage layout (that is `tierkv-engine`). One worker thread per partition, no locks
//! on the data path: workers share nothing but bounded forwarding queues.

mod admin;
#[cfg(test)]
mod alloc_tests;
mod config;
mod conns;
mod detail;
mod dump;
mod execute;
mod forward;
mod signals;
mod stats;
mod udp;
mod watch;
mod worker;

use clap::Parser;

fn main() {
    let config = config::Config::parse();
    let settings = match config.settings() {
        Ok(settings) => settings,
        Err(message) => {
            eprintln!("tierkv: {message}");
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
