//! tierkv: the memcached-compatible server (configuration, worker event loop, dispatch of
//! decoded requests to the engine partition, replies).
//!
//! It must never parse protocol bytes itself (that is `tierkv-protocol`) nor reach into the
//! engine's storage layout (that is `tierkv-engine`). This is the first, single-worker version
//! (issue 5 in progress): the text, meta and binary protocols are served; full stats, the
//! config file, signals and the limits of issue 5 are not complete yet.

mod config;
mod execute;
mod stats;
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
    if let Err(message) = worker::serve(&settings) {
        eprintln!("tierkv: {message}");
        std::process::exit(1);
    }
}
