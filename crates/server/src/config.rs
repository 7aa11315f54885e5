//! Command-line flags, named as memcached 1.6 names them.

use clap::Parser;

/// tierkv: a memcached-compatible cache server.
#[derive(Parser, Debug)]
#[command(name = "tierkv", version, about = "A memcached-compatible cache server (MICA-style engine)")]
pub struct Config {
    /// TCP port to listen on.
    #[arg(short = 'p', long = "port", default_value_t = 11211)]
    pub port: u16,
    /// Interface to listen on.
    #[arg(short = 'l', long = "listen", default_value = "127.0.0.1")]
    pub listen: String,
    /// Worker threads (one for now).
    #[arg(short = 't', long = "threads", default_value_t = 1)]
    pub threads: usize,
    /// Item memory in megabytes.
    #[arg(short = 'm', long = "memory-limit", default_value_t = 1024)]
    pub memory_mib: usize,
    /// Most simultaneous connections.
    #[arg(short = 'c', long = "conn-limit", default_value_t = 1024)]
    pub conn_limit: usize,
    /// Largest item: bytes, or with a k/m suffix (memcached's -I).
    #[arg(short = 'I', long = "max-item-size", default_value = "1m")]
    pub max_item_size: String,
    /// Verbose logging (repeat for more).
    #[arg(short = 'v', action = clap::ArgAction::Count)]
    pub verbose: u8,
}

/// Validated settings.
#[derive(Clone, Debug)]
pub struct Settings {
    pub address: std::net::SocketAddr,
    pub memory_bytes: usize,
    pub conn_limit: usize,
    pub max_item_bytes: usize,
    pub verbose: u8,
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
    /// Checks every flag; the error names the bad one.
    pub fn settings(&self) -> Result<Settings, String> {
        if self.threads != 1 {
            return Err(format!("-t/--threads {}: only one worker is supported so far", self.threads));
        }
        let address = format!("{}:{}", self.listen, self.port)
            .parse()
            .map_err(|_| format!("-l/--listen {:?} is not an IP address", self.listen))?;
        let max_item_bytes = parse_size(&self.max_item_size)
            .filter(|&n| (tierkv_engine::MIN_ITEM_BYTES..=tierkv_engine::MAX_ITEM_BYTES_CEILING).contains(&n))
            .ok_or_else(|| format!("-I/--max-item-size {:?} must be 512 bytes to 1024m", self.max_item_size))?;
        if self.memory_mib == 0 || self.memory_mib > 1 << 20 {
            return Err(format!("-m/--memory-limit {} must be 1 to 1048576 megabytes", self.memory_mib));
        }
        if max_item_bytes > self.memory_mib * (1 << 20) / 2 {
            return Err("-I/--max-item-size cannot be more than half of -m/--memory-limit".to_string());
        }
        if self.conn_limit == 0 || self.conn_limit > 1 << 20 {
            return Err(format!("-c/--conn-limit {} must be 1 to 1048576", self.conn_limit));
        }
        Ok(Settings {
            address,
            memory_bytes: self.memory_mib << 20,
            conn_limit: self.conn_limit,
            max_item_bytes,
            verbose: self.verbose,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_in_memcached_forms() {
        assert_eq!(parse_size("1m"), Some(1 << 20));
        assert_eq!(parse_size("512k"), Some(512 << 10));
        assert_eq!(parse_size("2048"), Some(2048));
        assert_eq!(parse_size("1M"), Some(1 << 20));
        assert_eq!(parse_size("x"), None);
    }

    #[test]
    fn bad_flags_are_named() {
        let parse = |args: &[&str]| Config::try_parse_from(std::iter::once("tierkv").chain(args.iter().copied()));
        assert!(parse(&["-p", "x"]).is_err());
        let error = parse(&["-I", "5g"]).unwrap().settings().unwrap_err();
        assert!(error.contains("-I/--max-item-size"), "{error}");
        let error = parse(&["-l", "nowhere"]).unwrap().settings().unwrap_err();
        assert!(error.contains("-l/--listen"), "{error}");
        let error = parse(&["-m", "0"]).unwrap().settings().unwrap_err();
        assert!(error.contains("-m/--memory-limit"), "{error}");
        assert!(parse(&["-m", "64", "-I", "2m"]).unwrap().settings().is_ok());
    }
}
