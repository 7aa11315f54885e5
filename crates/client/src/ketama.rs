//! Consistent hashing as libmemcached's weighted ketama (`MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED`)
//! and twemproxy's `distribution: ketama` with `hash: md5` build it, point for point, so this
//! client, PHP and pylibmc clients and a twemproxy pool send a key to the same server.
//!
//! Each live server gets `floor(weight / total * 40 * live)` groups of four points, computed in
//! single precision as both C sources do. Group `i` of a server named `name` is the MD5 of
//! `"{name}-{i}"`, cut into four little-endian u32 points. A key goes to the first point at or
//! above the first four bytes (little-endian) of its MD5, wrapping to the lowest point. A
//! server's name is its label when it has one (twemproxy's `host:port:weight label`), else its
//! host, followed by `:port` unless the port is 11211.

use md5::{Digest, Md5};

/// Points per server before weighting (libmemcached `MEMCACHED_POINTS_PER_SERVER_KETAMA`).
const POINTS_PER_SERVER: f32 = 160.0;
/// Points taken from one MD5.
const POINTS_PER_HASH: u32 = 4;
/// The port libmemcached and twemproxy leave out of a server's name.
pub const DEFAULT_PORT: u16 = 11211;

/// One server of a fleet: where it is, its weight and, optionally, the label twemproxy hashes
/// instead of its address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerSpec {
    /// Host name or IP address, as written (it is part of the hashed name).
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Relative weight, at least 1.
    pub weight: u32,
    /// The name hashed instead of the address (twemproxy's server name).
    pub label: Option<String>,
}

impl ServerSpec {
    /// A server of weight 1.
    pub fn new(host: &str, port: u16) -> ServerSpec {
        ServerSpec { host: host.to_string(), port, weight: 1, label: None }
    }

    /// Reads `HOST:PORT[:WEIGHT][ LABEL]` (an IPv6 host in brackets), the form of twemproxy's
    /// `servers:` lines.
    pub fn parse(text: &str) -> Result<ServerSpec, String> {
        let bad = |why: &str| format!("server {text:?}: {why} (expected HOST:PORT[:WEIGHT][ LABEL])");
        let mut words = text.split_whitespace();
        let address = words.next().ok_or_else(|| bad("empty"))?;
        let label = words.next().map(str::to_string);
        if words.next().is_some() {
            return Err(bad("more than an address and a label"));
        }
        let (host, rest) = match address.strip_prefix('[') {
            Some(v6) => {
                let (host, rest) = v6.split_once(']').ok_or_else(|| bad("no closing bracket"))?;
                (host, rest.strip_prefix(':').ok_or_else(|| bad("no port"))?)
            }
            None => address.split_once(':').ok_or_else(|| bad("no port"))?,
        };
        if host.is_empty() {
            return Err(bad("no host"));
        }
        let (port, weight) = match rest.split_once(':') {
            Some((port, weight)) => (port, Some(weight)),
            None => (rest, None),
        };
        let port: u16 = port.parse().ok().filter(|&p| p > 0).ok_or_else(|| bad("bad port"))?;
        let weight = match weight {
            Some(w) => w.parse().ok().filter(|&w| w > 0).ok_or_else(|| bad("bad weight"))?,
            None => 1,
        };
        Ok(ServerSpec { host: host.to_string(), port, weight, label })
    }

    /// The name its points are hashed from.
    pub fn ketama_name(&self) -> String {
        match (&self.label, self.port) {
            (Some(label), _) => label.clone(),
            (None, DEFAULT_PORT) => self.host.clone(),
            (None, port) => format!("{}:{port}", self.host),
        }
    }
}

impl std::fmt::Display for ServerSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// The MD5 hash of a key as both libraries take it: its first four bytes, little-endian.
pub fn key_hash(key: &[u8]) -> u32 {
    let digest = Md5::digest(key);
    u32::from_le_bytes([digest[0], digest[1], digest[2], digest[3]])
}

/// How many points a server of `weight` gets, as libmemcached and twemproxy compute it: in
/// single precision, so that three servers of equal weight get 160 points each.
pub fn points_for(weight: u32, total_weight: u64, live: usize) -> u32 {
    let share = weight as f32 / total_weight as f32;
    let groups = (share * POINTS_PER_SERVER / 4.0 * live as f32 + 0.000_000_000_1_f32).floor();
    (groups * 4.0) as u32
}

/// A continuum: sorted (point, server index) pairs.
#[derive(Clone, Debug, Default)]
pub struct Ring {
    points: Vec<(u32, u32)>,
}

impl Ring {
    /// The ring over `servers` (index, spec) that are live; the indices are what `server_for`
    /// returns.
    pub fn build<'a>(servers: impl Iterator<Item = (usize, &'a ServerSpec)> + Clone) -> Ring {
        let live = servers.clone().count();
        let total: u64 = servers.clone().map(|(_, s)| u64::from(s.weight)).sum();
        let mut points = Vec::new();
        for (index, server) in servers {
            let name = server.ketama_name();
            for group in 0..points_for(server.weight, total, live) / POINTS_PER_HASH {
                let digest = Md5::digest(format!("{name}-{group}").as_bytes());
                for quarter in digest.chunks_exact(4) {
                    let point = u32::from_le_bytes([quarter[0], quarter[1], quarter[2], quarter[3]]);
                    points.push((point, index as u32));
                }
            }
        }
        // Stable, as glibc's qsort (a merge sort) is for these sizes: equal points keep the
        // order the servers were listed in.
        points.sort_by_key(|&(point, _)| point);
        Ring { points }
    }

    /// No live server.
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// The points on the ring.
    pub fn len(&self) -> usize {
        self.points.len()
    }

    /// The server a key hash goes to: the first point at or above it, else the first point.
    pub fn server_for_hash(&self, hash: u32) -> Option<usize> {
        let at = self.points.partition_point(|&(point, _)| point < hash);
        self.points.get(at).or(self.points.first()).map(|&(_, index)| index as usize)
    }

    /// The server `key` goes to. With one live server, that one (libmemcached skips the hash).
    pub fn server_for(&self, key: &[u8]) -> Option<usize> {
        self.server_for_hash(key_hash(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_as_twemproxy_writes_them() {
        let s = ServerSpec::parse("127.0.0.1:11212:3 cache-a").unwrap();
        assert_eq!((s.host.as_str(), s.port, s.weight, s.label.as_deref()), ("127.0.0.1", 11212, 3, Some("cache-a")));
        assert_eq!(s.ketama_name(), "cache-a");
        assert_eq!(ServerSpec::parse("10.0.0.1:11211").unwrap().ketama_name(), "10.0.0.1");
        assert_eq!(ServerSpec::parse("10.0.0.1:7000:2").unwrap().ketama_name(), "10.0.0.1:7000");
        let v6 = ServerSpec::parse("[::1]:7000").unwrap();
        assert_eq!((v6.host.as_str(), v6.to_string()), ("::1", "[::1]:7000".to_string()));
        for bad in ["", "host", ":80", "h:0", "h:80:0", "h:x", "h:80:1 a b", "[::1:80"] {
            assert!(ServerSpec::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn single_precision_gives_equal_servers_160_points() {
        // In double precision 1/3 * 40 * 3 is just under 40, and a server would get 156.
        assert_eq!(points_for(1, 3, 3), 160);
        assert_eq!(points_for(1, 1, 1), 160);
        assert_eq!(points_for(1, 4, 3), 120);
        assert_eq!(points_for(2, 4, 3), 240);
        assert_eq!(points_for(1, 1000, 3), 0);
    }

    #[test]
    fn known_md5_points() {
        // RFC 1321's test vector for "abc": 900150983cd24fb0d6963f7d28e17f72.
        assert_eq!(key_hash(b"abc"), u32::from_le_bytes([0x90, 0x01, 0x50, 0x98]));
    }

    #[test]
    fn a_ring_spreads_keys_by_weight_and_moves_few_when_a_server_leaves() {
        let servers: Vec<ServerSpec> =
            ["a:1:1", "b:1:2", "c:1:1"].iter().map(|s| ServerSpec::parse(s).unwrap()).collect();
        let ring = Ring::build(servers.iter().enumerate());
        assert_eq!(ring.len(), 120 + 240 + 120);
        let mut counts = [0usize; 3];
        let keys: Vec<String> = (0..40_000).map(|i| format!("key:{i}")).collect();
        let before: Vec<usize> = keys.iter().map(|k| ring.server_for(k.as_bytes()).unwrap()).collect();
        before.iter().for_each(|&s| counts[s] += 1);
        assert!(counts[1] > counts[0] * 3 / 2 && counts[1] > counts[2] * 3 / 2, "{counts:?}");
        let without_c = Ring::build(servers.iter().enumerate().filter(|&(i, _)| i != 2));
        for key in &keys {
            assert_ne!(without_c.server_for(key.as_bytes()), Some(2));
        }
        // Points are recomputed for two live servers, so a few keys move between a and b; most
        // stay where they were.
        let stayed = keys
            .iter()
            .zip(&before)
            .filter(|(k, &was)| was != 2 && without_c.server_for(k.as_bytes()) == Some(was))
            .count();
        assert!(stayed * 10 > (counts[0] + counts[1]) * 8, "{stayed}");
        assert_eq!(Ring::build(std::iter::empty()).server_for(b"k"), None);
    }
}
