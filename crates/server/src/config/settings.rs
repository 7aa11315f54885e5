//! The validated settings (`Settings`) that `Config::settings` checks the flags into, and the
//! small types their values take. Every worker reads them; `stats settings` reports them.
//!
//! It must not parse or check anything: that is `mod.rs`'s (and its siblings') work.

use super::{FlashSettings, RequestSettings};
use std::path::PathBuf;

/// What a worker does itself with a key another worker owns (`--concurrency`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Concurrency {
    /// Everything is forwarded to the owner (MICA's exclusive read, exclusive write).
    Erew,
    /// Reads are done here through the owner's `CrewReader`; the rest is forwarded.
    Crew,
    /// As `Crew`, and the rest is executed here under the owner's partition lock when it is
    /// free.
    Crcw,
}

impl Concurrency {
    /// Its name on the command line and in `stats tierkv`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Concurrency::Erew => "erew",
            Concurrency::Crew => "crew",
            Concurrency::Crcw => "crcw",
        }
    }
}

/// Validated settings.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    /// The TCP port's addresses (`-l`, `-p`), at least one; UDP and the direct ports listen on
    /// each one's IP.
    pub addresses: Vec<std::net::SocketAddr>,
    /// Worker threads = partitions.
    pub threads: usize,
    /// Worker i also listens on this port + i (TCP, and UDP when UDP is on).
    pub direct_ports: Option<u16>,
    /// `--concurrency`: what a worker does itself with keys other workers own.
    pub concurrency: Concurrency,
    /// `--idle-yields`: yields of an idle worker before it blocks in its poll.
    pub idle_yields: usize,
    /// `--pin-workers`: each worker pinned to one CPU.
    pub pin_workers: bool,
    /// `--spread`: how connections on the shared port are dealt to the workers.
    pub spread: Spread,
    /// `--test-guest-lock`: how workers take each other's partition locks.
    pub guest_lock: crate::sys::partition_lock::GuestLock,
    /// `--test-contended`: the CPUs always count as shared.
    pub test_contended: bool,
    /// memcached's UDP protocol on this port (None: off).
    pub udp_port: Option<u16>,
    /// `--udp-amplification`: the replies to a datagram total at most this many times its size.
    pub udp_amplification: usize,
    /// `-s`: the Unix socket to serve instead of TCP and UDP, and its permissions (`-a`).
    pub unix_socket: Option<(PathBuf, u32)>,
    /// `-b`: the listen backlog.
    pub backlog: u32,
    /// `-Y`: the ASCII authentication file; with `-S`, the SASL password file.
    pub auth_file: Option<PathBuf>,
    /// `-S`: binary SASL authentication (the users are in `auth_file`).
    pub sasl: bool,
    /// `--auth-max-failures`: failed attempts before the connection is closed (0: never).
    pub auth_max_failures: u32,
    /// `--metrics-port`: where Prometheus scrapes /metrics.
    pub metrics: Option<std::net::SocketAddr>,
    /// `-Z`: every connection is TLS.
    pub tls: Option<crate::net::tls::TlsSettings>,
    /// `--flash-path`: the flash tier.
    pub flash: Option<FlashSettings>,
    /// Cache (evicting) or store (refusing writes when full).
    pub mode: tierkv_engine::Mode,
    /// The whole item memory (`-m`) at start; each partition gets an equal share.
    /// `cache_memlimit` changes it later (`State::memory_limit`).
    pub memory_bytes: usize,
    /// The most `cache_memlimit` may set (`--memory-max`).
    pub memory_max_bytes: usize,
    pub conn_limit: usize,
    /// Bytes all connections' buffers may hold before connections with replies waiting stop
    /// being read (`--conn-memory`).
    pub conn_memory_bytes: usize,
    /// How fast a large request must arrive and what incomplete requests may hold.
    pub requests: RequestSettings,
    /// Close connections idle this many seconds (0: never; memcached's `-o idle_timeout`).
    pub idle_timeout: u32,
    pub max_item_bytes: usize,
    pub verbose: u8,
    pub pidfile: Option<PathBuf>,
    /// Flags accepted but without effect, with why; logged at start-up.
    pub notes: Vec<String>,
    /// Which administrative commands are allowed (memcached's -A, -X, -W, -F, -D).
    pub admin: AdminSettings,
    /// Consecutive atomics on one key in a connection's batch share one lookup and one write.
    pub atomic_combining: bool,
}

/// memcached's switches for its administrative commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AdminSettings {
    /// `shutdown` is allowed (-A).
    pub shutdown: bool,
    /// `stats cachedump` and `lru_crawler metadump` are allowed (not -X).
    pub dump: bool,
    /// `watch` is allowed (not -W).
    pub watch: bool,
    /// `flush_all` is allowed (not -F).
    pub flush: bool,
    /// What ends a key's prefix for `stats detail` (-D).
    pub prefix_delimiter: u8,
}

impl Default for AdminSettings {
    fn default() -> AdminSettings {
        AdminSettings { shutdown: false, dump: true, watch: true, flush: true, prefix_delimiter: b':' }
    }
}

/// `--spread`: how connections accepted on the shared port are dealt to the workers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Spread {
    /// To the worker of the CPU the connection's packets arrive on, within a bound.
    Cpu,
    /// In turn, as memcached's listener thread deals them.
    RoundRobin,
}
