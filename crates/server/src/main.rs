//! tierkv: the memcached-compatible server (configuration, one worker per core, sockets,
//! dispatch to the partition that owns each key, replies, stats, signals).
//!
//! It must never parse protocol bytes itself (that is `tierkv-protocol`) nor reach into the
//! engine's storage layout (that is `tierkv-engine`). The server arrives with issue 5; until
//! then this binary says so and exits with an error, so nobody mistakes it for a running cache.

fn main() {
    eprintln!(
        "tierkv {}: the network server is not built yet (it arrives with issue 5); \
         the engine and its benchmark are ready: see README.md",
        env!("CARGO_PKG_VERSION")
    );
    std::process::exit(2);
}
