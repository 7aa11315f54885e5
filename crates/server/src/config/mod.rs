//! Start-up settings, defined once: the `Config` struct below is the command line (memcached
//! 1.6's flags, short and long, plus tierkv's own), and through `file.rs` the TOML file too
//! (its keys are the long flag names; a flag under a help heading may also be written in that
//! heading's section, e.g. `[udp] port` for `--udp-port`). The command line overrides the
//! file, the file overrides the defaults, and `settings` checks every value into `Settings`
//! (from which `stats settings` reports). Every bad value stops start-up with an error that
//! names its flag.

mod cpus;
mod extended;
mod file;
mod flash;
mod listen;
mod requests;
mod settings;
pub(crate) use flash::FlashSettings;
pub(crate) use listen::MAX_ADDRESSES;
pub(crate) use requests::RequestSettings;
pub(crate) use settings::{AdminSettings, Concurrency, Settings, Spread};
#[cfg(test)]
mod tests;

use crate::limits::{
    DEFAULT_IDLE_YIELDS, DEFAULT_UDP_AMPLIFICATION, MAX_IDLE_YIELDS, MAX_THREADS, MAX_UDP_AMPLIFICATION,
};
use clap::Parser;
use std::fmt;
use std::path::PathBuf;

use extended::{extended_options, Extended};
pub(crate) use file::load;

/// tierkv: a memcached-compatible cache server.
#[derive(Parser, Debug, Default)]
// As memcached's getopt: the last value of a flag given twice wins (`-o` and `-l` accumulate,
// `-v` counts).
#[command(name = "tierkv", version, about = "A memcached-compatible cache server (MICA-style engine)")]
#[command(args_override_self = true)]
pub(crate) struct Config {
    /// TCP port to listen on [default: 11211].
    #[arg(short = 'p', long = "port")]
    pub port: Option<u16>,
    /// Interfaces to listen on [default: 127.0.0.1]. As memcached's: a list separated by commas
    /// or semicolons, repeatable; each an IP, [IPv6], host name or * (all), with an optional
    /// :port.
    #[arg(short = 'l', long = "listen", action = clap::ArgAction::Append)]
    pub listen: Vec<String>,
    /// Worker threads, each owning one partition of the keys [default: one per CPU the process
    /// may run on, at most its cgroup's CPU quota rounded up].
    #[arg(short = 't', long = "threads")]
    pub threads: Option<usize>,
    /// Worker i also listens on BASE + i, so a partition-aware client can send each key straight
    /// to its owner (MICA's request direction) [default: off].
    #[arg(long = "direct-ports", value_name = "BASE")]
    pub direct_ports: Option<u16>,
    /// How a worker serves a key another worker owns: `crcw` reads it itself with no lock
    /// (MICA's concurrent reads; cache mode) and executes anything else under the owner's
    /// partition lock when it is free (forwarded when it is not, or with a flash tier); `crew`
    /// reads concurrently and forwards the rest; `erew` forwards everything [default: crcw].
    #[arg(long = "concurrency", value_name = "erew|crew|crcw")]
    pub concurrency: Option<String>,
    /// Times an idle worker yields its CPU, looking for work after each, before it blocks: a
    /// client that shares the worker's CPU often sends the next request during the yield, which
    /// costs less than blocking and being woken (0 blocks at once) [default: 2 with several
    /// workers, 0 with one; at most 64].
    #[arg(long = "idle-yields", value_name = "N")]
    pub idle_yields: Option<usize>,
    /// Pins worker i to the i-th CPU the process may run on. Pays on a machine that runs
    /// nothing else; beside other busy processes a pinned worker cannot move to a CPU that is
    /// free and waits for its own [default: off: the scheduler places the workers, as
    /// memcached's threads].
    #[arg(long = "pin-workers")]
    pub pin_workers: bool,
    /// How connections on the shared port are dealt to the workers: `cpu` gives each to the
    /// worker of the CPU its packets arrive on (SO_INCOMING_CPU), so the connections of one
    /// client thread share a worker and the scheduler keeps the two on one CPU (a worker
    /// holding more than half again its share passes it to the one with the fewest);
    /// `round-robin` deals them in turn, as memcached does [default: cpu].
    #[arg(long = "spread", value_name = "cpu|round-robin")]
    pub spread: Option<String>,
    /// How items are kept: `cache` (evict the oldest when memory is full) or `store` (never
    /// evict; refuse writes when memory is full) [default: cache].
    #[arg(long = "mode", value_name = "cache|store", help_heading = "Memory")]
    pub mode: Option<String>,
    /// memcached's -M: return an error when memory is exhausted instead of evicting (the same
    /// as --mode store).
    #[arg(short = 'M', long = "disable-evictions", help_heading = "Memory")]
    pub disable_evictions: bool,
    /// Item memory in megabytes [default: 1024].
    #[arg(short = 'm', long = "memory-limit", help_heading = "Memory")]
    pub memory_limit: Option<usize>,
    /// The most item memory `cache_memlimit` may grow to, in megabytes: address space is
    /// reserved for it, memory is used only as the cache grows (the index grows by overflow
    /// buckets) [default: the machine's memory, or -m if that is more].
    #[arg(long = "memory-max", value_name = "MB", help_heading = "Memory")]
    pub memory_max: Option<usize>,
    /// memcached's -b: the listen backlog, connections waiting to be accepted [default: 1024].
    #[arg(short = 'b', long = "listen-backlog", value_name = "N", help_heading = "Connections")]
    pub listen_backlog: Option<u32>,
    /// memcached's -R: accepted for memcached.conf compatibility; tierkv bounds a connection's
    /// turn by its batches and output instead (see the README).
    #[arg(short = 'R', long = "max-reqs-per-event", value_name = "N", help_heading = "Connections")]
    pub max_reqs_per_event: Option<u32>,
    /// Most simultaneous connections [default: 1024].
    #[arg(short = 'c', long = "conn-limit", help_heading = "Connections")]
    pub conn_limit: Option<usize>,
    /// Memory for all connections' buffers (requests read, replies not yet sent), in
    /// megabytes; past it, connections with replies waiting stop being read [default: 4 + -m/64].
    #[arg(long = "conn-memory", value_name = "MB", help_heading = "Connections")]
    pub conn_memory: Option<usize>,
    #[command(flatten)]
    pub requests: requests::RequestFlags,
    /// memcached's -s: listen on this Unix domain socket instead of TCP and UDP (a stale
    /// socket file there is replaced) [default: off].
    #[arg(short = 's', long = "unix-socket", value_name = "PATH", help_heading = "Connections")]
    pub unix_socket: Option<PathBuf>,
    /// memcached's -a: the Unix socket's permissions, in octal [default: 0700].
    #[arg(short = 'a', long = "unix-mask", value_name = "MASK", help_heading = "Connections")]
    pub unix_mask: Option<String>,
    /// Close connections idle this many seconds; 0 = never [default: 0].
    #[arg(long = "idle-timeout", value_name = "SECONDS", help_heading = "Connections")]
    pub idle_timeout: Option<u32>,
    /// memcached's extended options, comma separated: `idle_timeout=SECONDS` is
    /// --idle-timeout, `ssl_chain_cert`, `ssl_key`, `ssl_ca_cert` and `ssl_verify_mode` are
    /// the --tls-* flags; tierkv knows no other.
    #[arg(short = 'o', long = "extended", value_name = "OPTIONS")]
    pub extended: Vec<String>,
    /// Largest item: bytes, or a number with k or m (memcached's -I) [default: 1m].
    #[arg(short = 'I', long = "max-item-size", help_heading = "Memory")]
    pub max_item_size: Option<String>,
    /// Verbose logging to stderr (repeat for more).
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// UDP port (memcached's UDP protocol); 0 turns UDP off [default: 0].
    #[arg(short = 'U', long = "udp-port", help_heading = "UDP")]
    pub udp_port: Option<u16>,
    /// The replies to a UDP datagram total at most this many times its size (a larger reply is
    /// refused with SERVER_ERROR), whatever the sender: a source address can be forged. Raise
    /// it only where it cannot [default: 10, at most 100000].
    #[arg(long = "udp-amplification", value_name = "FACTOR", help_heading = "UDP")]
    pub udp_amplification: Option<usize>,
    /// Write the process id to this file (removed again on a clean stop).
    #[arg(short = 'P', long = "pidfile")]
    pub pidfile: Option<PathBuf>,
    /// Accepted for memcached.conf compatibility; tierkv does not change its user.
    #[arg(short = 'u', long = "user")]
    pub user: Option<String>,
    /// Accepted for memcached.conf compatibility; tierkv stays in the foreground.
    #[arg(short = 'd', long = "daemon")]
    pub daemon: bool,
    /// memcached's -A: allow the `shutdown` command.
    #[arg(short = 'A', long = "enable-shutdown", help_heading = "Admin commands")]
    pub enable_shutdown: bool,
    /// memcached's -X: refuse `stats cachedump` and `lru_crawler metadump`.
    #[arg(short = 'X', long = "disable-dumping", help_heading = "Admin commands")]
    pub disable_dumping: bool,
    /// memcached's -W: refuse `watch`.
    #[arg(short = 'W', long = "disable-watch", help_heading = "Admin commands")]
    pub disable_watch: bool,
    /// memcached's -F: refuse `flush_all`.
    #[arg(short = 'F', long = "disable-flush-all", help_heading = "Admin commands")]
    pub disable_flush_all: bool,
    /// Apply pipelined atomics on one key separately instead of combining them (KV-Direct's
    /// hot-key combining is on by default; this switch is for measuring it).
    #[arg(long = "no-atomic-combining", help_heading = "Memory")]
    pub no_atomic_combining: bool,
    /// memcached's -D: the character that ends a key's prefix for `stats detail` [default: :].
    #[arg(short = 'D', long = "prefix-delimiter", help_heading = "Admin commands")]
    pub prefix_delimiter: Option<String>,
    /// memcached's -Y: clients must authenticate first with `set <any key> 0 0 <bytes>` whose
    /// data is `<user> <password>`, checked against this file of `user:password` lines; the
    /// binary protocol is off.
    #[arg(short = 'Y', long = "auth-file", value_name = "FILE", help_heading = "Connections")]
    pub auth_file: Option<PathBuf>,
    /// memcached's -S: binary protocol only, and clients must authenticate with SASL PLAIN
    /// against the `user:password` file of --sasl-pwdb (or of $MEMCACHED_SASL_PWDB, as
    /// memcached built with sasl-pwdb reads it).
    #[arg(short = 'S', long = "enable-sasl", help_heading = "Connections")]
    pub enable_sasl: bool,
    /// With -Y or -S: a connection is closed after this many failed authentication attempts
    /// (memcached never closes one: 0) [default: 3].
    #[arg(long = "auth-max-failures", value_name = "N", help_heading = "Connections")]
    pub auth_max_failures: Option<u32>,
    /// The `user:password` file for -S [default: $MEMCACHED_SASL_PWDB].
    #[arg(long = "sasl-pwdb", value_name = "FILE", help_heading = "Connections")]
    pub sasl_pwdb: Option<PathBuf>,
    /// Serve Prometheus metrics on this TCP port at /metrics [default: off].
    #[arg(long = "metrics-port", value_name = "PORT", help_heading = "Metrics")]
    pub metrics_port: Option<u16>,
    /// The interface the metrics port listens on [default: 127.0.0.1].
    #[arg(long = "metrics-listen", value_name = "IP", help_heading = "Metrics")]
    pub metrics_listen: Option<String>,
    /// memcached's -Z: serve every connection over TLS (needs a certificate and its key).
    #[arg(short = 'Z', long = "enable-ssl", help_heading = "TLS")]
    pub enable_ssl: bool,
    /// The server's certificate chain, PEM (memcached's -o ssl_chain_cert).
    #[arg(long = "tls-cert", value_name = "FILE", help_heading = "TLS")]
    pub tls_cert: Option<PathBuf>,
    /// The certificate's private key, PEM (memcached's -o ssl_key).
    #[arg(long = "tls-key", value_name = "FILE", help_heading = "TLS")]
    pub tls_key: Option<PathBuf>,
    /// CA certificates that client certificates are checked against, PEM (-o ssl_ca_cert).
    #[arg(long = "tls-ca", value_name = "FILE", help_heading = "TLS")]
    pub tls_ca: Option<PathBuf>,
    /// Client certificates (-o ssl_verify_mode): 0 not asked for, 1 checked when sent, 2 and 3
    /// required [default: 0].
    #[arg(long = "tls-verify-mode", value_name = "0-3", help_heading = "TLS")]
    pub tls_verify_mode: Option<String>,
    /// A flash file behind the DRAM log (created if missing): items the log evicts move
    /// there, and a clean stop keeps every item for the next start [default: off].
    #[arg(long = "flash-path", value_name = "PATH", help_heading = "Flash")]
    pub flash_path: Option<PathBuf>,
    /// The flash file's size: bytes or a number with k, m, g or t (memcached's -o
    /// ext_path=PATH:SIZE sets both).
    #[arg(long = "flash-size", value_name = "SIZE", help_heading = "Flash")]
    pub flash_size: Option<String>,
    /// The flash I/O engine: uring (io_uring, falling back to threads where the kernel
    /// refuses it) or threads (a pread/pwrite pool) [default: uring].
    #[arg(long = "flash-io", value_name = "ENGINE", help_heading = "Flash")]
    pub flash_io: Option<String>,
    /// At most this many MB/s of evicted items are written to flash (the rest are dropped);
    /// the same as --flash-admission mbps:N [default: no limit].
    #[arg(long = "flash-write-mbps", value_name = "MB/S", help_heading = "Flash")]
    pub flash_write_mbps: Option<u32>,
    /// Which evicted items go to flash: all, p:<0..1> (each with that probability) or
    /// mbps:<MB/s> [default: all].
    #[arg(long = "flash-admission", value_name = "POLICY", help_heading = "Flash")]
    pub flash_admission: Option<String>,
    /// The flash segment (write and GC unit): a power of two from 64k to 4m [default: 1m].
    #[arg(long = "flash-segment-size", value_name = "SIZE", help_heading = "Flash")]
    pub flash_segment_size: Option<String>,
    /// The flash index: full (8 bytes of DRAM per flash item, one read per hit), cascade
    /// (Cascade Mapping: hot mappings in DRAM, the rest on flash; about a byte per item), sets
    /// (Kangaroo: small items in 4 KiB sets behind a small log; one read per hit, a Bloom filter
    /// per set) or auto (full while its DRAM fits in -m, else cascade) [default: auto].
    #[arg(long = "flash-index", value_name = "KIND", help_heading = "Flash")]
    pub flash_index: Option<String>,
    /// The cascade index's DRAM for hot mappings (tier 1) in MiB, shared by the workers
    /// [default: the flash size / 512].
    #[arg(long = "flash-index-mib", value_name = "MIB", help_heading = "Flash")]
    pub flash_index_mib: Option<u64>,
    /// The sets index: percent of the flash file its log takes (small items pass through it
    /// into the sets; items too large for a 4 KiB set live there) [default: 5].
    #[arg(long = "flash-sets-log-percent", value_name = "PERCENT", help_heading = "Flash")]
    pub flash_sets_log_percent: Option<u32>,
    /// The key + value bytes of a typical item: the flash tier sizes its DRAM index (and the
    /// sets index its Bloom filters) for items of this size [default: 88].
    #[arg(long = "flash-item-bytes", value_name = "BYTES", help_heading = "Flash")]
    pub flash_item_bytes: Option<u32>,
    /// Take over a --flash-path file that holds something other than tierkv's flash data
    /// (without it such a file is refused at start-up, untouched).
    #[arg(long = "flash-force", help_heading = "Flash")]
    pub flash_force: bool,
    /// Flush the device (fdatasync) after each commit of flash invalidations, so an
    /// acknowledged change of a flash-resident key survives power loss, not only a crash of
    /// the process [default: off].
    #[arg(long = "flash-sync", help_heading = "Flash")]
    pub flash_sync: bool,
    /// Microseconds an idle worker with flash reads in flight keeps looking for their
    /// completions (and for requests) before it sleeps: a read that finishes within it is
    /// answered without the wake-up of a sleeping worker (0 sleeps at once) [default: 100; at
    /// most 1000].
    #[arg(long = "flash-poll-us", value_name = "US", help_heading = "Flash")]
    pub flash_poll_us: Option<u64>,
    /// All the DRAM the flash tier may hold, in MiB (its index, Bloom filters, write and GC
    /// buffers, read pages), on top of -m. With --flash-index auto the full index is used
    /// while it fits, else the cascade index with the largest tier 1 that fits [default: what
    /// the index chosen needs; `stats settings` shows it].
    #[arg(long = "flash-memory-mib", value_name = "MIB", help_heading = "Flash")]
    pub flash_memory_mib: Option<u64>,
    /// Tests only: the cascade index's tier 1 in KiB, all workers together (below the 1 MiB the
    /// flag above allows, so that tests demote constantly).
    #[arg(long = "flash-test-index-kib", hide = true, help_heading = "Flash")]
    pub flash_test_index_kib: Option<u64>,
    /// Tests only: every flash write fails (with either I/O engine) while this file exists.
    #[arg(long = "flash-test-fail-writes-while", hide = true, help_heading = "Flash")]
    pub flash_test_fail_writes_while: Option<PathBuf>,
    /// Tests only: every flash read (with either I/O engine) answered this many milliseconds later.
    #[arg(long = "flash-test-read-delay-ms", hide = true, help_heading = "Flash")]
    pub flash_test_read_delay_ms: Option<u64>,
    /// Tests only: how a worker takes another worker's partition lock (`crcw`): `try` (the
    /// default), `never` (every request forwarded: the contended path) or `wait`.
    #[arg(long = "test-guest-lock", hide = true)]
    pub test_guest_lock: Option<String>,
    /// Tests only: the CPUs always count as shared with other busy work (`contention.rs`).
    #[arg(long = "test-contended", hide = true)]
    pub test_contended: bool,
    /// Read settings from a TOML file whose keys are the long flag names (or, for a flag
    /// under a heading, its name in that heading's section: `[udp] port`).
    #[arg(long = "config")]
    pub config: Option<PathBuf>,
}

/// memcached's flags tierkv does not take, each with why (short, long, reason).
const MEMCACHED_ONLY: [(char, &str, &str); 10] = [
    ('r', "enable-coredumps", "core dumps follow the system's settings (ulimit -c, systemd's LimitCORE)"),
    ('k', "lock-memory", "tierkv does not lock its memory; keep the host from swapping instead"),
    ('i', "license", "tierkv's license is MIT OR Apache-2.0 (Cargo.toml)"),
    ('f', "slab-growth-factor", "tierkv has no slab classes: each worker's items live in one log"),
    ('n', "slab-min-size", "tierkv has no slab classes: each worker's items live in one log"),
    ('L', "enable-largepages", "tierkv asks for transparent huge pages for its logs by itself"),
    ('C', "disable-cas", "tierkv always keeps a CAS value in each item's header"),
    ('B', "protocol", "tierkv takes each request in the protocol it arrives in; -Y and -S choose one"),
    ('e', "memory-file", "tierkv keeps items across restarts with its flash tier, not a memory file"),
    ('N', "napi_ids", "tierkv deals connections out to its workers round-robin"),
];

/// A command line clap refused: when it holds a memcached flag tierkv does not take, an error
/// that names the flag and says why, instead of clap's "unexpected argument".
pub(crate) fn memcached_only(error: clap::Error, args: &[std::ffi::OsString]) -> ConfigError {
    if error.kind() != clap::error::ErrorKind::UnknownArgument {
        return ConfigError::Usage(error);
    }
    for arg in args.iter().skip(1).filter_map(|arg| arg.to_str()) {
        let found = MEMCACHED_ONLY.iter().find(|(short, long, _)| {
            let short_form =
                arg.strip_prefix('-').is_some_and(|rest| rest.starts_with(*short) && !rest.starts_with('-'));
            let long_form =
                arg.strip_prefix("--").is_some_and(|rest| rest == *long || rest.starts_with(&format!("{long}=")));
            short_form || long_form
        });
        if let Some((short, long, reason)) = found {
            return ConfigError::flag(format!("-{short}/--{long}"), format!("is memcached's, not tierkv's: {reason}"));
        }
    }
    ConfigError::Usage(error)
}

/// Why start-up stopped: a flag (or file key) with a bad value, the file itself, or the
/// command line's syntax (clap's own message and exit code, help and version included).
#[derive(Debug)]
pub(crate) enum ConfigError {
    /// `flag` (as the user would write it) has a bad value.
    Flag {
        flag: String,
        message: String,
    },
    /// The `--config` file cannot be read or holds a key no flag has.
    File {
        path: PathBuf,
        message: String,
    },
    Usage(clap::Error),
}

impl ConfigError {
    fn flag(flag: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError::Flag { flag: flag.into(), message: message.into() }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Flag { flag, message } => write!(f, "{flag} {message}"),
            ConfigError::File { path, message } => write!(f, "--config {}: {message}", path.display()),
            ConfigError::Usage(error) => write!(f, "{error}"),
        }
    }
}

impl std::error::Error for ConfigError {}

use crate::sys::partition_lock::GuestLock;

/// memcached's -I forms: bytes, or a number with k or m.
pub(crate) fn parse_size(text: &str) -> Option<usize> {
    let lower = text.trim().to_ascii_lowercase();
    let (digits, multiplier) = match lower.strip_suffix('k') {
        Some(d) => (d, 1024),
        None => match lower.strip_suffix('m') {
            Some(d) => (d, 1024 * 1024),
            None => (lower.as_str(), 1),
        },
    };
    digits.parse::<usize>().ok()?.checked_mul(multiplier)
}

impl Config {
    /// Checks every flag (the file's values already in, see `load`); the error names the bad
    /// one.
    pub(crate) fn settings(self) -> Result<Settings, ConfigError> {
        let threads = self.threads.unwrap_or_else(cpus::usable_cpus);
        if threads == 0 || threads > MAX_THREADS {
            return Err(ConfigError::flag("-t/--threads", format!("{threads} must be 1 to {MAX_THREADS}")));
        }
        let addresses = self.addresses()?;
        let (memory_bytes, memory_max_bytes, max_item_bytes) = self.memory(threads)?;
        let conn_limit = self.conn_limit.unwrap_or(1024);
        if conn_limit == 0 || conn_limit > 1 << 20 {
            return Err(ConfigError::flag("-c/--conn-limit", format!("{conn_limit} must be 1 to 1048576")));
        }
        let conn_memory_mib = self.conn_memory.unwrap_or(4 + (memory_bytes >> 20) / 64);
        if conn_memory_mib == 0 || conn_memory_mib > 1 << 20 {
            return Err(ConfigError::flag(
                "--conn-memory",
                format!("{conn_memory_mib} must be 1 to 1048576 megabytes"),
            ));
        }
        // memcached's -o options stand for tierkv's flags (and win over the file's).
        let extended = extended_options(&self.extended)?;
        let idle_timeout = extended.idle_timeout.or(self.idle_timeout).unwrap_or(0);
        let flash = self.flash(&extended, threads)?;
        let mut notes = self.notes();
        notes.extend(extended.notes());
        let tls = self.tls(extended)?;
        self.check_direct_ports(threads, &addresses)?;
        let unix_socket = self.unix_socket()?;
        let auth_file = self.auth_file()?;
        let metrics = self.metrics()?;
        let backlog = self.listen_backlog.unwrap_or(1024);
        if backlog == 0 || backlog > 65535 {
            return Err(ConfigError::flag("-b/--listen-backlog", format!("{backlog} must be 1 to 65535")));
        }
        if self.max_reqs_per_event == Some(0) {
            return Err(ConfigError::flag("-R/--max-reqs-per-event", "must be at least 1"));
        }
        Ok(Settings {
            backlog,
            metrics,
            auth_file,
            sasl: self.enable_sasl,
            auth_max_failures: self.auth_max_failures.unwrap_or(crate::limits::DEFAULT_AUTH_MAX_FAILURES),
            unix_socket,
            tls,
            addresses,
            threads,
            direct_ports: self.direct_ports,
            concurrency: match self.concurrency.as_deref() {
                None | Some("crcw") => Concurrency::Crcw,
                Some("crew") => Concurrency::Crew,
                Some("erew") => Concurrency::Erew,
                Some(other) => {
                    return Err(ConfigError::flag("--concurrency", format!("{other:?} must be erew, crew or crcw")))
                }
            },
            idle_yields: match self.idle_yields {
                // One worker leaves the other CPUs to the clients, and its yields only cost.
                None if threads == 1 => 0,
                None => DEFAULT_IDLE_YIELDS,
                Some(yields) if yields <= MAX_IDLE_YIELDS => yields,
                Some(_) => {
                    return Err(ConfigError::flag("--idle-yields", format!("must be at most {MAX_IDLE_YIELDS}")))
                }
            },
            pin_workers: self.pin_workers,
            spread: spread(self.spread.as_deref())?,
            guest_lock: guest_lock(self.test_guest_lock.as_deref())?,
            test_contended: self.test_contended,
            udp_port: self.udp_port.filter(|&port| port != 0),
            udp_amplification: match self.udp_amplification {
                None => DEFAULT_UDP_AMPLIFICATION,
                Some(factor) if (1..=MAX_UDP_AMPLIFICATION).contains(&factor) => factor,
                Some(_) => {
                    let message = format!("must be from 1 to {MAX_UDP_AMPLIFICATION}");
                    return Err(ConfigError::flag("--udp-amplification", message));
                }
            },
            mode: self.mode()?,
            memory_bytes,
            memory_max_bytes,
            conn_limit,
            conn_memory_bytes: conn_memory_mib << 20,
            requests: self.requests.settings()?,
            idle_timeout,
            max_item_bytes,
            verbose: self.verbose,
            notes,
            flash,
            admin: self.admin()?,
            atomic_combining: !self.no_atomic_combining,
            pidfile: self.pidfile,
        })
    }

    fn addresses(&self) -> Result<Vec<std::net::SocketAddr>, ConfigError> {
        listen::addresses(&self.listen, self.port.unwrap_or(11211))
            .map_err(|message| ConfigError::flag("-l/--listen", message))
    }

    /// Item memory, its maximum and the largest item, in bytes.
    fn memory(&self, threads: usize) -> Result<(usize, usize, usize), ConfigError> {
        let max_item_text = self.max_item_size.as_deref().unwrap_or("1m");
        let max_item_bytes = parse_size(max_item_text)
            .filter(|&n| (tierkv_engine::MIN_ITEM_BYTES..=tierkv_engine::MAX_ITEM_BYTES_CEILING).contains(&n))
            .ok_or_else(|| {
                ConfigError::flag("-I/--max-item-size", format!("{max_item_text:?} must be 512 bytes to 1024m"))
            })?;
        let memory_mib = self.memory_limit.unwrap_or(1024);
        if memory_mib == 0 || memory_mib > 1 << 20 {
            return Err(ConfigError::flag("-m/--memory-limit", format!("{memory_mib} must be 1 to 1048576 megabytes")));
        }
        let machine_mib = (crate::sys::physical_memory_bytes() >> 20).min(1 << 20);
        let memory_max_mib = self.memory_max.unwrap_or(memory_mib.max(machine_mib));
        if memory_max_mib < memory_mib || memory_max_mib > 1 << 20 {
            let message = format!(
                "{memory_max_mib} must be at least -m/--memory-limit ({memory_mib}) and at most 1048576 megabytes"
            );
            return Err(ConfigError::flag("--memory-max", message));
        }
        if max_item_bytes > memory_mib * (1 << 20) / threads / 2 {
            let message = format!(
                "cannot be more than half of -m/--memory-limit per worker ({} MiB each for -t {threads})",
                memory_mib / threads
            );
            return Err(ConfigError::flag("-I/--max-item-size", message));
        }
        Ok((memory_mib << 20, memory_max_mib << 20, max_item_bytes))
    }

    /// `-s` and `-a`: the path and the octal mask. A Unix socket replaces TCP and UDP (as in
    /// memcached), so the flags that only mean something for those are refused beside it.
    fn unix_socket(&self) -> Result<Option<(PathBuf, u32)>, ConfigError> {
        let Some(path) = &self.unix_socket else {
            return match &self.unix_mask {
                Some(_) => Err(ConfigError::flag("-a/--unix-mask", "needs -s/--unix-socket")),
                None => Ok(None),
            };
        };
        let text = self.unix_mask.as_deref().unwrap_or("0700");
        let mask = u32::from_str_radix(text, 8).ok().filter(|&mask| mask <= 0o777).ok_or_else(|| {
            ConfigError::flag("-a/--unix-mask", format!("{text:?} must be octal permissions, 0 to 777"))
        })?;
        let beside = |flag: &str| ConfigError::flag(flag, "cannot be used with -s/--unix-socket (no TCP or UDP then)");
        if self.direct_ports.is_some() {
            return Err(beside("--direct-ports"));
        }
        if self.udp_port.is_some_and(|port| port != 0) {
            return Err(beside("-U/--udp-port"));
        }
        if path.as_os_str().is_empty() || path.as_os_str().len() > 107 {
            return Err(ConfigError::flag("-s/--unix-socket", format!("{:?} must be 1 to 107 bytes", path)));
        }
        Ok(Some((path.clone(), mask)))
    }

    /// The users file of `-Y` or `-S` (from `--sasl-pwdb` or `$MEMCACHED_SASL_PWDB`), with
    /// memcached's refusals: not both, and no UDP beside either.
    fn auth_file(&self) -> Result<Option<PathBuf>, ConfigError> {
        if self.sasl_pwdb.is_some() && !self.enable_sasl {
            return Err(ConfigError::flag("--sasl-pwdb", "needs -S/--enable-sasl"));
        }
        let missing = || {
            ConfigError::flag("-S/--enable-sasl", "needs a user:password file (--sasl-pwdb or $MEMCACHED_SASL_PWDB)")
        };
        let file = match (self.enable_sasl, &self.auth_file) {
            (true, Some(_)) => return Err(ConfigError::flag("-S/--enable-sasl", "cannot be used with -Y/--auth-file")),
            (true, None) => Some(
                self.sasl_pwdb
                    .clone()
                    .or_else(|| std::env::var_os("MEMCACHED_SASL_PWDB").map(PathBuf::from))
                    .ok_or_else(missing)?,
            ),
            (false, file) => file.clone(),
        };
        if file.is_some() && self.udp_port.is_some_and(|port| port != 0) {
            let flag = if self.enable_sasl { "-S/--enable-sasl" } else { "-Y/--auth-file" };
            let message = format!("cannot be used with {flag} (UDP has no authentication)");
            return Err(ConfigError::flag("-U/--udp-port", message));
        }
        Ok(file)
    }

    /// `--metrics-port` and `--metrics-listen`.
    fn metrics(&self) -> Result<Option<std::net::SocketAddr>, ConfigError> {
        let Some(port) = self.metrics_port else {
            return match &self.metrics_listen {
                Some(_) => Err(ConfigError::flag("--metrics-listen", "needs --metrics-port")),
                None => Ok(None),
            };
        };
        let listen = self.metrics_listen.as_deref().unwrap_or("127.0.0.1");
        let ip: std::net::IpAddr = listen
            .parse()
            .map_err(|_| ConfigError::flag("--metrics-listen", format!("{listen:?} is not an IP address")))?;
        if port == 0 {
            return Err(ConfigError::flag("--metrics-port", "must be 1 to 65535"));
        }
        Ok(Some(std::net::SocketAddr::new(ip, port)))
    }

    /// `-Z` with its certificate, key, CA and verification mode (from `-o` or the flags).
    fn tls(&self, extended: Extended) -> Result<Option<crate::net::tls::TlsSettings>, ConfigError> {
        let chain_cert = extended.ssl_chain_cert.or_else(|| self.tls_cert.clone());
        let key = extended.ssl_key.or_else(|| self.tls_key.clone());
        let ca_cert = extended.ssl_ca_cert.or_else(|| self.tls_ca.clone());
        let mode_text = extended.ssl_verify_mode.or_else(|| self.tls_verify_mode.clone());
        if !self.enable_ssl {
            return match (&chain_cert, &key, &ca_cert, &mode_text) {
                (None, None, None, None) => Ok(None),
                _ => Err(ConfigError::flag("--tls-cert/--tls-key/--tls-ca/--tls-verify-mode", "need -Z/--enable-ssl")),
            };
        }
        let (Some(chain_cert), Some(key)) = (chain_cert, key) else {
            return Err(ConfigError::flag(
                "-Z/--enable-ssl",
                "needs a certificate and its key (--tls-cert and --tls-key, or -o ssl_chain_cert=FILE,ssl_key=FILE)",
            ));
        };
        let verify_mode = match mode_text.as_deref().unwrap_or("0").parse::<u8>() {
            Ok(mode @ 0..=3) => mode,
            _ => return Err(ConfigError::flag("--tls-verify-mode", format!("{mode_text:?} must be 0, 1, 2 or 3"))),
        };
        if verify_mode > 0 && ca_cert.is_none() {
            return Err(ConfigError::flag("--tls-verify-mode", format!("{verify_mode} needs --tls-ca (ssl_ca_cert)")));
        }
        if self.udp_port.is_some_and(|port| port != 0) {
            return Err(ConfigError::flag("-U/--udp-port", "cannot be used with -Z/--enable-ssl (UDP has no TLS)"));
        }
        Ok(Some(crate::net::tls::TlsSettings { chain_cert, key, ca_cert, verify_mode }))
    }

    /// Worker i's port (base + i) must exist and take no other port of the server.
    fn check_direct_ports(&self, threads: usize, addresses: &[std::net::SocketAddr]) -> Result<(), ConfigError> {
        let Some(base) = self.direct_ports else { return Ok(()) };
        let last = usize::from(base) + threads - 1;
        let range = usize::from(base)..=last;
        let refuse = |problem: String| {
            Err(ConfigError::flag("--direct-ports", format!("{base}: ports {base}..={last} {problem}")))
        };
        if base == 0 || last > usize::from(u16::MAX) {
            return refuse("must lie within 1..=65535".to_string());
        }
        if let Some(port) = addresses.iter().map(|a| a.port()).find(|&port| range.contains(&usize::from(port))) {
            return refuse(format!("include -p/--port {port}"));
        }
        if let Some(udp) = self.udp_port.filter(|&udp| range.contains(&usize::from(udp))) {
            return refuse(format!("include -U/--udp-port {udp}"));
        }
        Ok(())
    }

    fn mode(&self) -> Result<tierkv_engine::Mode, ConfigError> {
        match (self.mode.as_deref(), self.disable_evictions) {
            (None | Some("cache"), false) => Ok(tierkv_engine::Mode::Cache),
            (None | Some("store"), _) => Ok(tierkv_engine::Mode::Store),
            (Some("cache"), true) => {
                Err(ConfigError::flag("--mode", "cache contradicts -M/--disable-evictions (which selects store mode)"))
            }
            (Some(other), _) => Err(ConfigError::flag("--mode", format!("{other:?} must be cache or store"))),
        }
    }

    fn admin(&self) -> Result<AdminSettings, ConfigError> {
        let prefix_delimiter = match self.prefix_delimiter.as_deref().map(str::as_bytes) {
            None => b':',
            Some(&[byte]) if byte.is_ascii_graphic() => byte,
            Some(_) => return Err(ConfigError::flag("-D/--prefix-delimiter", "must be one printable character")),
        };
        Ok(AdminSettings {
            shutdown: self.enable_shutdown,
            dump: !self.disable_dumping,
            watch: !self.disable_watch,
            flush: !self.disable_flush_all,
            prefix_delimiter,
        })
    }

    /// Flags accepted without effect, with why.
    fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if let Some(user) = &self.user {
            notes.push(format!("-u/--user {user}: ignored; tierkv runs as the user that starts it"));
        }
        if let Some(n) = self.max_reqs_per_event {
            notes.push(format!(
                "-R/--max-reqs-per-event {n}: ignored; tierkv takes a connection's requests in batches of 16 and \
                 ends its turn at the output limit, so one client cannot starve the others"
            ));
        }
        if self.daemon {
            notes.push("-d/--daemon: ignored; tierkv stays in the foreground (use a service manager)".to_string());
        }
        notes
    }
}

/// `--test-guest-lock`'s value.
fn guest_lock(value: Option<&str>) -> Result<GuestLock, ConfigError> {
    match value {
        None | Some("try") => Ok(GuestLock::Try),
        Some("never") => Ok(GuestLock::Never),
        Some("wait") => Ok(GuestLock::Wait),
        Some(other) => Err(ConfigError::flag("--test-guest-lock", format!("{other:?} must be try, never or wait"))),
    }
}

/// `--spread`'s value.
fn spread(value: Option<&str>) -> Result<Spread, ConfigError> {
    match value {
        None | Some("cpu") => Ok(Spread::Cpu),
        Some("round-robin") => Ok(Spread::RoundRobin),
        Some(other) => Err(ConfigError::flag("--spread", format!("expected cpu or round-robin, got {other:?}"))),
    }
}
