//! Start-up settings: memcached 1.6's flags (short and long names), an optional TOML file whose
//! keys are the long flag names, and the embedded defaults. The command line overrides the
//! file, the file overrides the defaults. Every bad value stops start-up with a message that
//! names its flag.

use clap::Parser;
use serde::Deserialize;
use std::path::PathBuf;

/// tierkv: a memcached-compatible cache server.
#[derive(Parser, Debug, Default)]
#[command(name = "tierkv", version, about = "A memcached-compatible cache server (MICA-style engine)")]
pub struct Config {
    /// TCP port to listen on [default: 11211].
    #[arg(short = 'p', long = "port")]
    pub port: Option<u16>,
    /// Interface to listen on [default: 127.0.0.1].
    #[arg(short = 'l', long = "listen")]
    pub listen: Option<String>,
    /// Worker threads, each pinned to a CPU and owning one partition of the keys [default: one
    /// per CPU the process may run on].
    #[arg(short = 't', long = "threads")]
    pub threads: Option<usize>,
    /// Worker i also listens on BASE + i, so a partition-aware client can send each key straight
    /// to its owner (MICA's request direction) [default: off].
    #[arg(long = "direct-ports", value_name = "BASE")]
    pub direct_ports: Option<u16>,
    /// How items are kept: `cache` (evict the oldest when memory is full) or `store` (never
    /// evict; refuse writes when memory is full) [default: cache].
    #[arg(long = "mode", value_name = "cache|store")]
    pub mode: Option<String>,
    /// memcached's -M: return an error when memory is exhausted instead of evicting (the same
    /// as --mode store).
    #[arg(short = 'M', long = "disable-evictions")]
    pub disable_evictions: bool,
    /// Item memory in megabytes [default: 1024].
    #[arg(short = 'm', long = "memory-limit")]
    pub memory_limit: Option<usize>,
    /// The most item memory `cache_memlimit` may grow to, in megabytes: the index is sized and
    /// address space reserved for it (memory is used only as the log grows) [default: -m].
    #[arg(long = "memory-max", value_name = "MB")]
    pub memory_max: Option<usize>,
    /// Most simultaneous connections [default: 1024].
    #[arg(short = 'c', long = "conn-limit")]
    pub conn_limit: Option<usize>,
    /// Memory for all connections' buffers (requests read, replies not yet sent), in
    /// megabytes; past it, connections with replies waiting stop being read [default: 4 + -m/64].
    #[arg(long = "conn-memory", value_name = "MB")]
    pub conn_memory: Option<usize>,
    /// memcached's extended options, comma separated; tierkv knows `idle_timeout=SECONDS`
    /// (close connections idle that long; 0 = never) [default: idle_timeout=0].
    #[arg(short = 'o', long = "extended", value_name = "OPTIONS")]
    pub extended: Vec<String>,
    /// Largest item: bytes, or a number with k or m (memcached's -I) [default: 1m].
    #[arg(short = 'I', long = "max-item-size")]
    pub max_item_size: Option<String>,
    /// Verbose logging to stderr (repeat for more).
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// UDP port (memcached's UDP protocol); 0 turns UDP off [default: 0].
    #[arg(short = 'U', long = "udp-port")]
    pub udp_port: Option<u16>,
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
    #[arg(short = 'A', long = "enable-shutdown")]
    pub enable_shutdown: bool,
    /// memcached's -X: refuse `stats cachedump` and `lru_crawler metadump`.
    #[arg(short = 'X', long = "disable-dumping")]
    pub disable_dumping: bool,
    /// memcached's -W: refuse `watch`.
    #[arg(short = 'W', long = "disable-watch")]
    pub disable_watch: bool,
    /// memcached's -F: refuse `flush_all`.
    #[arg(short = 'F', long = "disable-flush-all")]
    pub disable_flush_all: bool,
    /// memcached's -D: the character that ends a key's prefix for `stats detail` [default: :].
    #[arg(short = 'D', long = "prefix-delimiter")]
    pub prefix_delimiter: Option<String>,
    /// Read settings from a TOML file whose keys are the long flag names.
    #[arg(long = "config")]
    pub config: Option<PathBuf>,
}

/// The TOML file's keys: the long flag names.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct FileConfig {
    port: Option<u16>,
    listen: Option<String>,
    threads: Option<usize>,
    direct_ports: Option<u16>,
    mode: Option<String>,
    disable_evictions: Option<bool>,
    memory_limit: Option<usize>,
    memory_max: Option<usize>,
    conn_limit: Option<usize>,
    conn_memory: Option<usize>,
    idle_timeout: Option<u32>,
    max_item_size: Option<SizeValue>,
    verbose: Option<u8>,
    udp_port: Option<u16>,
    pidfile: Option<PathBuf>,
    user: Option<String>,
    daemon: Option<bool>,
    enable_shutdown: Option<bool>,
    disable_dumping: Option<bool>,
    disable_watch: Option<bool>,
    disable_flush_all: Option<bool>,
    prefix_delimiter: Option<String>,
}

/// memcached's `-o` options tierkv knows: `idle_timeout=N` (returned; 0 when absent).
fn extended_options(options: &[String]) -> Result<u32, String> {
    let mut idle_timeout = 0;
    for option in options.iter().flat_map(|options| options.split(',')).filter(|option| !option.is_empty()) {
        match option.split_once('=') {
            Some(("idle_timeout", seconds)) => {
                idle_timeout =
                    seconds.parse().map_err(|_| format!("-o idle_timeout={seconds:?} must be a number of seconds"))?;
            }
            _ => return Err(format!("-o {option:?}: unknown option (tierkv knows idle_timeout=SECONDS)")),
        }
    }
    Ok(idle_timeout)
}

/// `max-item-size = 1048576` or `max-item-size = "1m"`.
#[derive(Deserialize, Debug)]
#[serde(untagged)]
enum SizeValue {
    Bytes(u64),
    Text(String),
}

/// Validated settings.
#[derive(Clone, Debug)]
pub struct Settings {
    pub address: std::net::SocketAddr,
    /// Worker threads = partitions.
    pub threads: usize,
    /// Worker i also listens on this port + i (TCP, and UDP when UDP is on).
    pub direct_ports: Option<u16>,
    /// memcached's UDP protocol on this port (None: off).
    pub udp_port: Option<u16>,
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
    /// Close connections idle this many seconds (0: never; memcached's `-o idle_timeout`).
    pub idle_timeout: u32,
    pub max_item_bytes: usize,
    pub verbose: u8,
    pub pidfile: Option<PathBuf>,
    /// Flags accepted but without effect, with why; logged at start-up.
    pub notes: Vec<String>,
    /// Which administrative commands are allowed (memcached's -A, -X, -W, -F, -D).
    pub admin: AdminSettings,
}

/// memcached's switches for its administrative commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdminSettings {
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

/// The most workers (and partitions) a server runs.
pub const MAX_THREADS: usize = 256;

/// CPUs this process may run on (its affinity mask), at least 1.
pub fn allowed_cpus() -> usize {
    cpu_list().len().max(1)
}

/// The CPUs this process may run on, in order.
pub fn cpu_list() -> Vec<usize> {
    crate::sys::allowed_cpus()
}

/// memcached's -I forms: bytes, or a number with k or m.
pub fn parse_size(text: &str) -> Option<usize> {
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
    /// Fills every flag the command line left out from the `--config` file, if there is one.
    fn merged(self) -> Result<Config, String> {
        let Some(path) = &self.config else { return Ok(self) };
        let text = std::fs::read_to_string(path).map_err(|e| format!("--config {}: {e}", path.display()))?;
        let file: FileConfig = toml::from_str(&text).map_err(|e| format!("--config {}: {e}", path.display()))?;
        let max_item_size = file.max_item_size.map(|size| match size {
            SizeValue::Bytes(bytes) => bytes.to_string(),
            SizeValue::Text(text) => text,
        });
        Ok(Config {
            port: self.port.or(file.port),
            listen: self.listen.or(file.listen),
            threads: self.threads.or(file.threads),
            direct_ports: self.direct_ports.or(file.direct_ports),
            mode: self.mode.or(file.mode),
            disable_evictions: self.disable_evictions || file.disable_evictions.unwrap_or(false),
            memory_limit: self.memory_limit.or(file.memory_limit),
            memory_max: self.memory_max.or(file.memory_max),
            conn_limit: self.conn_limit.or(file.conn_limit),
            conn_memory: self.conn_memory.or(file.conn_memory),
            extended: match (self.extended.is_empty(), file.idle_timeout) {
                (true, Some(seconds)) => vec![format!("idle_timeout={seconds}")],
                _ => self.extended,
            },
            max_item_size: self.max_item_size.or(max_item_size),
            verbose: if self.verbose > 0 { self.verbose } else { file.verbose.unwrap_or(0) },
            udp_port: self.udp_port.or(file.udp_port),
            pidfile: self.pidfile.or(file.pidfile),
            user: self.user.or(file.user),
            daemon: self.daemon || file.daemon.unwrap_or(false),
            enable_shutdown: self.enable_shutdown || file.enable_shutdown.unwrap_or(false),
            disable_dumping: self.disable_dumping || file.disable_dumping.unwrap_or(false),
            disable_watch: self.disable_watch || file.disable_watch.unwrap_or(false),
            disable_flush_all: self.disable_flush_all || file.disable_flush_all.unwrap_or(false),
            prefix_delimiter: self.prefix_delimiter.or(file.prefix_delimiter),
            config: self.config,
        })
    }

    /// Checks every flag (after merging the file); the error names the bad one.
    pub fn settings(self) -> Result<Settings, String> {
        let config = self.merged()?;
        let threads = config.threads.unwrap_or_else(allowed_cpus);
        if threads == 0 || threads > MAX_THREADS {
            return Err(format!("-t/--threads {threads} must be 1 to {MAX_THREADS}"));
        }
        let listen = config.listen.as_deref().unwrap_or("127.0.0.1");
        let port = config.port.unwrap_or(11211);
        let ip: std::net::IpAddr =
            listen.parse().map_err(|_| format!("-l/--listen {listen:?} is not an IP address"))?;
        let address = std::net::SocketAddr::new(ip, port);
        let max_item_text = config.max_item_size.as_deref().unwrap_or("1m");
        let max_item_bytes = parse_size(max_item_text)
            .filter(|&n| (tierkv_engine::MIN_ITEM_BYTES..=tierkv_engine::MAX_ITEM_BYTES_CEILING).contains(&n))
            .ok_or_else(|| format!("-I/--max-item-size {max_item_text:?} must be 512 bytes to 1024m"))?;
        let memory_mib = config.memory_limit.unwrap_or(1024);
        if memory_mib == 0 || memory_mib > 1 << 20 {
            return Err(format!("-m/--memory-limit {memory_mib} must be 1 to 1048576 megabytes"));
        }
        let memory_max_mib = config.memory_max.unwrap_or(memory_mib);
        if memory_max_mib < memory_mib || memory_max_mib > 1 << 20 {
            return Err(format!(
                "--memory-max {memory_max_mib} must be at least -m/--memory-limit ({memory_mib}) and at most 1048576 megabytes"
            ));
        }
        if max_item_bytes > memory_mib * (1 << 20) / threads / 2 {
            return Err(format!(
                "-I/--max-item-size cannot be more than half of -m/--memory-limit per worker ({} MiB each for -t {threads})",
                memory_mib / threads
            ));
        }
        let conn_limit = config.conn_limit.unwrap_or(1024);
        if conn_limit == 0 || conn_limit > 1 << 20 {
            return Err(format!("-c/--conn-limit {conn_limit} must be 1 to 1048576"));
        }
        let conn_memory_mib = config.conn_memory.unwrap_or(4 + memory_mib / 64);
        if conn_memory_mib == 0 || conn_memory_mib > 1 << 20 {
            return Err(format!("--conn-memory {conn_memory_mib} must be 1 to 1048576 megabytes"));
        }
        let idle_timeout = extended_options(&config.extended)?;
        if let Some(base) = config.direct_ports {
            let last = usize::from(base) + threads - 1;
            if base == 0 || last > usize::from(u16::MAX) {
                return Err(format!("--direct-ports {base}: ports {base}..={last} must lie within 1..=65535"));
            }
            if (usize::from(base)..=last).contains(&usize::from(port)) {
                return Err(format!("--direct-ports {base}: ports {base}..={last} include -p/--port {port}"));
            }
            if let Some(udp) = config.udp_port.filter(|&udp| (usize::from(base)..=last).contains(&usize::from(udp))) {
                return Err(format!("--direct-ports {base}: ports {base}..={last} include -U/--udp-port {udp}"));
            }
        }
        let mode = match (config.mode.as_deref(), config.disable_evictions) {
            (None | Some("cache"), false) => tierkv_engine::Mode::Cache,
            (None | Some("store"), _) => tierkv_engine::Mode::Store,
            (Some("cache"), true) => {
                return Err("--mode cache contradicts -M/--disable-evictions (which selects store mode)".to_string())
            }
            (Some(other), _) => return Err(format!("--mode {other:?} must be cache or store")),
        };
        let prefix_delimiter = match config.prefix_delimiter.as_deref().map(str::as_bytes) {
            None => b':',
            Some(&[byte]) if byte.is_ascii_graphic() => byte,
            Some(_) => return Err("-D/--prefix-delimiter must be one printable character".to_string()),
        };
        let admin = AdminSettings {
            shutdown: config.enable_shutdown,
            dump: !config.disable_dumping,
            watch: !config.disable_watch,
            flush: !config.disable_flush_all,
            prefix_delimiter,
        };
        let mut notes = Vec::new();
        if let Some(user) = &config.user {
            notes.push(format!("-u/--user {user}: ignored; tierkv runs as the user that starts it"));
        }
        if config.daemon {
            notes.push("-d/--daemon: ignored; tierkv stays in the foreground (use a service manager)".to_string());
        }
        Ok(Settings {
            address,
            threads,
            direct_ports: config.direct_ports,
            udp_port: config.udp_port.filter(|&port| port != 0),
            mode,
            memory_bytes: memory_mib << 20,
            memory_max_bytes: memory_max_mib << 20,
            conn_limit,
            conn_memory_bytes: conn_memory_mib << 20,
            idle_timeout,
            max_item_bytes,
            verbose: config.verbose,
            pidfile: config.pidfile,
            notes,
            admin,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Config, clap::Error> {
        Config::try_parse_from(std::iter::once("tierkv").chain(args.iter().copied()))
    }

    #[test]
    fn sizes_in_memcached_forms() {
        assert_eq!(parse_size("1m"), Some(1 << 20));
        assert_eq!(parse_size("512k"), Some(512 << 10));
        assert_eq!(parse_size("2048"), Some(2048));
        assert_eq!(parse_size("1M"), Some(1 << 20));
        assert_eq!(parse_size("x"), None);
    }

    #[test]
    fn defaults_are_embedded() {
        let settings = parse(&[]).unwrap().settings().unwrap();
        assert_eq!(settings.address, "127.0.0.1:11211".parse().unwrap());
        assert_eq!((settings.memory_bytes, settings.conn_limit, settings.max_item_bytes), (1 << 30, 1024, 1 << 20));
    }

    #[test]
    fn long_names_work_like_short_ones() {
        let settings =
            parse(&["--port", "1234", "--memory-limit", "64", "--conn-limit", "10", "--max-item-size", "512k"])
                .unwrap()
                .settings()
                .unwrap();
        assert_eq!(settings.address.port(), 1234);
        assert_eq!((settings.memory_bytes, settings.conn_limit, settings.max_item_bytes), (64 << 20, 10, 512 << 10));
    }

    #[test]
    fn bad_flags_are_named() {
        assert!(parse(&["-p", "x"]).is_err());
        assert!(parse(&["--bogus"]).is_err());
        let named = |args: &[&str], flag: &str| {
            let error = parse(args).unwrap().settings().unwrap_err();
            assert!(error.contains(flag), "{error}");
        };
        named(&["-I", "5g"], "-I/--max-item-size");
        named(&["-l", "nowhere"], "-l/--listen");
        named(&["-m", "0"], "-m/--memory-limit");
        named(&["-m", "64", "--memory-max", "32"], "--memory-max");
        named(&["--conn-memory", "0"], "--conn-memory");
        named(&["-o", "idle_timeout=x"], "-o idle_timeout");
        named(&["-o", "hashpower=20"], "-o \"hashpower=20\"");
        named(&["-c", "0"], "-c/--conn-limit");
        named(&["-t", "0"], "-t/--threads");
        named(&["-t", "100000"], "-t/--threads");
        named(&["-t", "2", "--direct-ports", "65535"], "--direct-ports");
        named(&["-t", "2", "-p", "7001", "--direct-ports", "7000"], "--direct-ports");
        named(&["-t", "4", "-m", "2", "-I", "1m"], "-I/--max-item-size");
        named(&["--config", "/nonexistent/tierkv.toml"], "--config");
        named(&["--mode", "lru"], "--mode");
        named(&["--mode", "cache", "-M"], "-M/--disable-evictions");
        named(&["-D", "ab"], "-D/--prefix-delimiter");
        let admin = parse(&["-A", "-X", "-W", "-F", "-D", "/"]).unwrap().settings().unwrap().admin;
        assert_eq!(
            admin,
            AdminSettings { shutdown: true, dump: false, watch: false, flush: false, prefix_delimiter: b'/' }
        );
        assert_eq!(parse(&[]).unwrap().settings().unwrap().admin, AdminSettings::default());
        assert!(parse(&["-m", "64", "-I", "2m", "-U", "0"]).unwrap().settings().unwrap().udp_port.is_none());
        assert_eq!(parse(&["-U", "11311"]).unwrap().settings().unwrap().udp_port, Some(11311));
        let mode = |args: &[&str]| parse(args).unwrap().settings().unwrap().mode;
        assert_eq!(mode(&[]), tierkv_engine::Mode::Cache);
        assert_eq!(mode(&["--mode", "store"]), tierkv_engine::Mode::Store);
        assert_eq!(mode(&["-M"]), tierkv_engine::Mode::Store);
    }

    #[test]
    fn memcached_conf_flags_are_accepted_and_explained() {
        let settings = parse(&["-d", "-u", "memcache", "-P", "/tmp/x.pid", "-m", "64"]).unwrap().settings().unwrap();
        assert_eq!(settings.notes.len(), 2);
        assert!(settings.notes[0].contains("-u/--user") && settings.notes[1].contains("-d/--daemon"));
        assert_eq!(settings.pidfile.as_deref(), Some(std::path::Path::new("/tmp/x.pid")));
    }

    #[test]
    fn the_file_fills_what_the_command_line_leaves_out() {
        let dir = std::env::temp_dir().join(format!("tierkv-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("tierkv.toml");
        std::fs::write(&file, "port = 2000\nmemory-limit = 64\nmax-item-size = \"512k\"\nconn-limit = 7\n").unwrap();
        let path = file.to_str().unwrap();
        let settings = parse(&["--config", path, "-p", "3000"]).unwrap().settings().unwrap();
        assert_eq!(settings.address.port(), 3000, "the command line wins");
        assert_eq!((settings.memory_bytes, settings.conn_limit, settings.max_item_bytes), (64 << 20, 7, 512 << 10));
        std::fs::write(&file, "max-item-size = 2048\n").unwrap();
        assert_eq!(parse(&["--config", path]).unwrap().settings().unwrap().max_item_bytes, 2048);
        std::fs::write(&file, "prot = 1\n").unwrap();
        let error = parse(&["--config", path]).unwrap().settings().unwrap_err();
        assert!(error.contains("--config") && error.contains("prot"), "{error}");
        std::fs::write(&file, "memory-limit = 0\n").unwrap();
        assert!(parse(&["--config", path]).unwrap().settings().unwrap_err().contains("-m/--memory-limit"));
        std::fs::write(&file, "idle-timeout = 30\nconn-memory = 9\nmemory-max = 2048\n").unwrap();
        let settings = parse(&["--config", path]).unwrap().settings().unwrap();
        assert_eq!(
            (settings.idle_timeout, settings.conn_memory_bytes, settings.memory_max_bytes),
            (30, 9 << 20, 2 << 30)
        );
        let settings = parse(&["--config", path, "-o", "idle_timeout=5"]).unwrap().settings().unwrap();
        assert_eq!(settings.idle_timeout, 5, "the command line wins");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn budgets_and_extended_options_have_defaults() {
        let settings = parse(&["-m", "640"]).unwrap().settings().unwrap();
        assert_eq!(
            (settings.conn_memory_bytes, settings.idle_timeout, settings.memory_max_bytes),
            (14 << 20, 0, 640 << 20)
        );
        let settings = parse(&["-o", "idle_timeout=7,", "--conn-memory", "3"]).unwrap().settings().unwrap();
        assert_eq!((settings.idle_timeout, settings.conn_memory_bytes), (7, 3 << 20));
    }
}
