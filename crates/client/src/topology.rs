//! What a tierkv server says about its partitions (`stats tierkv`), and the partition
//! function its workers split keys by. Used to send each key straight to the worker that owns
//! it (MICA's client-assisted request direction).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};
use xxhash_rust::xxh3::xxh3_64;

/// The partition hash this client implements; a server reporting another one is refused.
pub const PARTITION_HASH: &str = "xxh3-64-seed0-mica";

/// The partition (0..partitions) that owns `key`: xxh3-64 with seed 0, and MICA's split of
/// its top 16 bits, `((h >> 48) * partitions) >> 16`.
pub fn partition_of(key: &[u8], partitions: usize) -> usize {
    assert!((1..=1 << 16).contains(&partitions), "1 to 65536 partitions");
    (((xxh3_64(key) >> 48) * partitions as u64) >> 16) as usize
}

/// How a server splits its keys, from its `stats tierkv`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    /// The address asked.
    pub server: SocketAddr,
    /// Partitions (workers) the server has.
    pub partitions: usize,
    /// Partition i listens on this port + i; None when the server has no direct ports.
    pub direct_port_base: Option<u16>,
    /// Requests the server has forwarded between its workers so far.
    pub forwarded_requests: u64,
}

/// Why a server's topology could not be learned.
#[derive(Debug)]
pub enum TopologyError {
    /// Connecting, writing or reading failed.
    Io {
        /// The server asked.
        server: SocketAddr,
        /// What failed.
        error: std::io::Error,
    },
    /// No complete reply within the timeout (or a reply too long to be one).
    NoAnswer {
        /// The server asked.
        server: SocketAddr,
    },
    /// The server closed the connection before replying.
    Closed {
        /// The server asked.
        server: SocketAddr,
    },
    /// The reply has no `partitions`: not a tierkv server.
    NotTierkv {
        /// The server asked.
        server: SocketAddr,
    },
    /// The server partitions keys with another hash than `PARTITION_HASH`.
    OtherHash {
        /// The server asked.
        server: SocketAddr,
        /// The hash it names.
        hash: String,
    },
    /// A stat is missing, not a number or out of range.
    BadStat {
        /// The server asked.
        server: SocketAddr,
        /// The stat.
        name: &'static str,
        /// What it said.
        value: String,
    },
}

impl std::fmt::Display for TopologyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TopologyError::Io { server, error } => write!(f, "{server}: {error}"),
            TopologyError::NoAnswer { server } => write!(f, "{server} did not answer stats tierkv"),
            TopologyError::Closed { server } => write!(f, "{server} closed the connection"),
            TopologyError::NotTierkv { server } => write!(f, "{server} is not a tierkv server (no stats tierkv)"),
            TopologyError::OtherHash { server, hash } => {
                write!(f, "{server} partitions keys with {hash:?}, not {PARTITION_HASH}")
            }
            TopologyError::BadStat { server, name, value } => write!(f, "{server}: bad stat {name} {value:?}"),
        }
    }
}

impl std::error::Error for TopologyError {}

impl Topology {
    /// Asks `server` with `stats tierkv`.
    pub fn fetch(server: SocketAddr, timeout: Duration) -> Result<Topology, TopologyError> {
        let io = |error| TopologyError::Io { server, error };
        let mut stream = TcpStream::connect_timeout(&server, timeout).map_err(io)?;
        stream.set_read_timeout(Some(timeout)).map_err(io)?;
        stream.write_all(b"stats tierkv\r\n").map_err(io)?;
        let deadline = Instant::now() + timeout;
        let mut reply = Vec::new();
        let mut chunk = [0u8; 4096];
        while !(reply.ends_with(b"END\r\n") || reply.ends_with(b"ERROR\r\n")) {
            if Instant::now() > deadline || reply.len() > 64 << 10 {
                return Err(TopologyError::NoAnswer { server });
            }
            match stream.read(&mut chunk) {
                Ok(0) => return Err(TopologyError::Closed { server }),
                Ok(n) => reply.extend_from_slice(&chunk[..n]),
                Err(error) => return Err(io(error)),
            }
        }
        Topology::parse(server, &String::from_utf8_lossy(&reply))
    }

    /// Reads the reply to `stats tierkv`.
    pub fn parse(server: SocketAddr, reply: &str) -> Result<Topology, TopologyError> {
        let stat = |name: &str| {
            reply.lines().find_map(|line| line.strip_prefix("STAT ")?.strip_prefix(name)?.strip_prefix(' '))
        };
        let Some(partitions) = stat("partitions") else { return Err(TopologyError::NotTierkv { server }) };
        let hash = stat("hash").unwrap_or_default();
        if hash != PARTITION_HASH {
            return Err(TopologyError::OtherHash { server, hash: hash.to_string() });
        }
        let bad = |name: &'static str, value: &str| TopologyError::BadStat { server, name, value: value.to_string() };
        let number = |name: &'static str, text: Option<&str>| {
            let text = text.unwrap_or_default();
            text.parse::<u64>().map_err(|_| bad(name, text))
        };
        let partitions = number("partitions", Some(partitions))? as usize;
        if !(1..=1 << 16).contains(&partitions) {
            return Err(bad("partitions", &partitions.to_string()));
        }
        let base = number("direct_port_base", stat("direct_port_base"))?;
        let forwarded_requests = number("forwarded_requests", stat("forwarded_requests"))?;
        let direct_port_base = match base {
            0 => None,
            base if base + partitions as u64 - 1 <= u64::from(u16::MAX) => Some(base as u16),
            _ => return Err(bad("direct_port_base", &base.to_string())),
        };
        Ok(Topology { server, partitions, direct_port_base, forwarded_requests })
    }

    /// The partition that owns `key`.
    pub fn partition(&self, key: &[u8]) -> usize {
        partition_of(key, self.partitions)
    }

    /// Where to send requests for partition `partition`: its direct port, or the server's
    /// main port when it has none.
    pub fn address_of(&self, partition: usize) -> SocketAddr {
        match self.direct_port_base {
            Some(base) => SocketAddr::new(self.server.ip(), base + partition as u16),
            None => self.server,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_partition_is_the_engines() {
        for n in [1usize, 2, 3, 4, 7, 64, 65536] {
            for i in 0..2000u32 {
                let key = format!("key:{i}");
                assert_eq!(
                    partition_of(key.as_bytes(), n),
                    tierkv_engine::partition_of(key.as_bytes(), n as u32) as usize
                );
            }
        }
    }

    #[test]
    fn stats_tierkv_is_read_and_checked() {
        let server: SocketAddr = "127.0.0.1:11211".parse().unwrap();
        let reply = "STAT partitions 2\r\nSTAT hash xxh3-64-seed0-mica\r\nSTAT direct_port_base 7000\r\nSTAT forwarded_requests 5\r\nEND\r\n";
        let topology = Topology::parse(server, reply).unwrap();
        assert_eq!((topology.partitions, topology.direct_port_base, topology.forwarded_requests), (2, Some(7000), 5));
        assert_eq!(topology.address_of(1), "127.0.0.1:7001".parse().unwrap());
        let off = Topology::parse(server, &reply.replace("7000", "0")).unwrap();
        assert_eq!(off.address_of(1), server);
        let other = Topology::parse(server, &reply.replace("mica", "other")).unwrap_err();
        assert!(matches!(&other, TopologyError::OtherHash { hash, .. } if hash.ends_with("other")), "{other}");
        let none = Topology::parse(server, "ERROR\r\n").unwrap_err();
        assert!(matches!(none, TopologyError::NotTierkv { .. }) && none.to_string().contains("not a tierkv server"));
        let ports = Topology::parse(server, &reply.replace("7000", "65535")).unwrap_err();
        assert!(matches!(ports, TopologyError::BadStat { name: "direct_port_base", .. }), "{ports}");
    }
}
