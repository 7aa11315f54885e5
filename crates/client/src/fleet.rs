//! A fleet of servers: its configuration, and the state every client of it keeps (who is
//! ejected until when, the ketama ring over the rest, each server's partitions). No I/O here;
//! the blocking and the async client do the talking and report back.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::codec::{Expect, Op, Reply};
use crate::error::Error;
use crate::error::Failure;
use crate::ketama::{Ring, ServerSpec};
use crate::plan::{Group, Place};
use crate::Topology;

/// Credentials.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Auth {
    /// memcached's ASCII authentication (`-Y`): a `set` whose data is `user password`.
    Ascii {
        /// User.
        user: String,
        /// Password.
        password: String,
    },
    /// Binary SASL PLAIN (`-S`); the connection then speaks the binary protocol.
    SaslPlain {
        /// User.
        user: String,
        /// Password.
        password: String,
    },
}

/// The exchange that authenticates a new connection: what to send, the reply to expect (for
/// request 0 of `LOGIN_OPS`), and the reply that means success.
pub(crate) fn login(auth: &Auth) -> (Vec<u8>, Expect, Reply) {
    let mut bytes = Vec::new();
    match auth {
        Auth::Ascii { user, password } => {
            let data = format!("{user} {password}");
            bytes.extend_from_slice(format!("set auth 0 0 {}\r\n{data}\r\n", data.len()).as_bytes());
            (bytes, Expect::Line { op: 0 }, Reply::Stored)
        }
        Auth::SaslPlain { user, password } => {
            crate::binary::sasl_plain(&mut bytes, user, password);
            // Read as the answer to a delete: success is status 0, "Deleted".
            (bytes, Expect::Binary { op: 0 }, Reply::Deleted)
        }
    }
}

/// The request `login`'s expectation is read against.
pub(crate) const LOGIN_OPS: [Op<'static>; 1] = [Op::Delete(b"auth")];

/// A `stats` request for `group`, in the protocol the fleet speaks.
pub(crate) fn stats_request(binary: bool, group: &str) -> Vec<u8> {
    let mut bytes = Vec::new();
    match binary {
        true => crate::binary::stats(&mut bytes, group),
        false => bytes.extend_from_slice(format!("stats {group}\r\n").as_bytes()),
    }
    bytes
}

/// TLS to every server: rustls's client configuration and the name the certificates must carry.
#[derive(Clone)]
pub struct Tls {
    /// rustls configuration (roots, client certificate if any).
    pub config: Arc<rustls::ClientConfig>,
    /// The server name to verify, for every server of the fleet.
    pub server_name: rustls::pki_types::ServerName<'static>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tls({:?})", self.server_name)
    }
}

/// How a client talks to its fleet. `Config::new(servers)` gives libmemcached's defaults
/// where it has them.
#[derive(Clone, Debug)]
pub struct Config {
    /// The servers, in order (the order matters only for ties on the ring).
    pub servers: Vec<ServerSpec>,
    /// Consecutive failures after which a server is ejected (libmemcached's
    /// `server_failure_limit`, twemproxy's `server_failure_limit`). 0 never ejects.
    pub failure_limit: u32,
    /// How long an ejected server stays out before it is tried again (`retry_timeout`).
    pub retry_interval: Duration,
    /// Connecting gives up after this long.
    pub connect_timeout: Duration,
    /// A read or write gives up after this long (None: never).
    pub io_timeout: Option<Duration>,
    /// Idle connections kept per place (server or direct port).
    pub pool_size: usize,
    /// Send each key to its partition's direct port when the server publishes them.
    pub direct: bool,
    /// Ask a server for its partitions again this often (they are also asked for when a
    /// direct port refuses or closes).
    pub topology_refresh: Duration,
    /// TLS, if the servers require it.
    pub tls: Option<Tls>,
    /// Credentials, if the servers require them.
    pub auth: Option<Auth>,
}

impl Config {
    /// A fleet of these servers with the defaults: ejection after 2 failures for 2 seconds,
    /// 1 s to connect, 5 s per read or write, 8 idle connections per place, direct ports on,
    /// partitions asked for again every 30 s.
    pub fn new(servers: Vec<ServerSpec>) -> Config {
        Config {
            servers,
            failure_limit: 2,
            retry_interval: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(1),
            io_timeout: Some(Duration::from_secs(5)),
            pool_size: 8,
            direct: true,
            topology_refresh: Duration::from_secs(30),
            tls: None,
            auth: None,
        }
    }

    /// The servers speak only the binary protocol (SASL).
    pub(crate) fn binary(&self) -> bool {
        matches!(self.auth, Some(Auth::SaslPlain { .. }))
    }

    /// A fleet from `HOST:PORT[:WEIGHT][ LABEL]` strings.
    pub fn parse(servers: &[&str]) -> Result<Config, Error> {
        let specs = servers.iter().map(|s| ServerSpec::parse(s)).collect::<Result<Vec<_>, _>>();
        Ok(Config::new(specs.map_err(Error::Config)?))
    }
}

/// What is known of a server's partitions.
#[derive(Clone, Debug)]
pub(crate) enum Partitions {
    /// Not asked yet, or to be asked again.
    Unknown,
    /// Asked at this time.
    Known(Option<Topology>, Instant),
}

pub(crate) struct Node {
    pub(crate) spec: ServerSpec,
    pub(crate) addr: SocketAddr,
    failures: u32,
    ejected_until: Option<Instant>,
    pub(crate) partitions: Partitions,
}

/// The shared state of a fleet.
pub(crate) struct Fleet {
    pub(crate) config: Config,
    pub(crate) nodes: Vec<Node>,
    ring: Ring,
    next_rebuild: Option<Instant>,
}

impl Fleet {
    pub(crate) fn new(config: Config) -> Result<Fleet, Error> {
        if config.servers.is_empty() {
            return Err(Error::Config("no servers".to_string()));
        }
        let mut nodes = Vec::new();
        for spec in &config.servers {
            let addr = (spec.host.as_str(), spec.port)
                .to_socket_addrs()
                .map_err(|e| Error::Config(format!("{spec}: {e}")))?
                .next()
                .ok_or_else(|| Error::Config(format!("{spec}: no address")))?;
            nodes.push(Node {
                spec: spec.clone(),
                addr,
                failures: 0,
                ejected_until: None,
                partitions: Partitions::Unknown,
            });
        }
        let mut fleet = Fleet { config, nodes, ring: Ring::default(), next_rebuild: None };
        fleet.rebuild(Instant::now());
        Ok(fleet)
    }

    fn rebuild(&mut self, now: Instant) {
        self.next_rebuild = None;
        for node in &mut self.nodes {
            match node.ejected_until {
                Some(until) if until > now => {
                    self.next_rebuild = Some(self.next_rebuild.map_or(until, |next| next.min(until)));
                }
                _ => node.ejected_until = None,
            }
        }
        let live = self.nodes.iter().enumerate().filter(|(_, n)| n.ejected_until.is_none()).map(|(i, n)| (i, &n.spec));
        self.ring = Ring::build(live);
    }

    /// Brings ejected servers whose time is up back onto the ring.
    pub(crate) fn refresh(&mut self, now: Instant) {
        if self.next_rebuild.is_some_and(|next| now >= next) {
            self.rebuild(now);
        }
    }

    /// The server that owns `key`.
    pub(crate) fn server_for(&self, key: &[u8]) -> Result<usize, Error> {
        if self.nodes.len() == 1 {
            // As libmemcached: one server takes every key, unless it is ejected.
            return if self.ring.is_empty() { Err(Error::NoServer) } else { Ok(0) };
        }
        self.ring.server_for(key).ok_or(Error::NoServer)
    }

    /// Where to send `key`: its server, and the direct port of its partition when known.
    pub(crate) fn place(&self, key: &[u8]) -> Result<Place, Error> {
        let server = self.server_for(key)?;
        let node = &self.nodes[server];
        let addr = match &node.partitions {
            Partitions::Known(Some(topology), _) if self.config.direct => topology.address_of(topology.partition(key)),
            _ => node.addr,
        };
        Ok(Place { server, addr })
    }

    /// Servers on the ring whose partitions should be asked for now.
    pub(crate) fn stale_partitions(&self, now: Instant) -> Vec<usize> {
        if !self.config.direct {
            return Vec::new();
        }
        let refresh = self.config.topology_refresh;
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].ejected_until.is_none())
            .filter(|&i| match self.nodes[i].partitions {
                Partitions::Unknown => true,
                Partitions::Known(_, at) => now.duration_since(at) >= refresh,
            })
            .collect()
    }

    /// The reply to `stats tierkv` (or the failure to get one) from `server`.
    pub(crate) fn learned(&mut self, server: usize, fetched: Result<String, Error>, now: Instant) {
        match fetched {
            Ok(reply) => {
                let topology = Topology::parse(self.nodes[server].addr, &reply).ok();
                self.nodes[server].partitions = Partitions::Known(topology, now);
            }
            Err(error) if error.is_server_failure() => self.failed(server, now),
            Err(_) => self.nodes[server].partitions = Partitions::Known(None, now),
        }
    }

    /// What is known of each server's partitions (None: not tierkv, or not asked yet).
    pub(crate) fn topologies(&self) -> Vec<Option<Topology>> {
        let known = |n: &Node| match &n.partitions {
            Partitions::Known(t, _) => t.clone(),
            Partitions::Unknown => None,
        };
        self.nodes.iter().map(known).collect()
    }

    /// A server answered.
    pub(crate) fn succeeded(&mut self, server: usize) {
        self.nodes[server].failures = 0;
    }

    /// A server failed; after `failure_limit` failures in a row it leaves the ring for
    /// `retry_interval`. Its partitions are asked for again when it is next used.
    pub(crate) fn failed(&mut self, server: usize, now: Instant) {
        let limit = self.config.failure_limit;
        let node = &mut self.nodes[server];
        node.partitions = Partitions::Unknown;
        node.failures += 1;
        if limit > 0 && node.failures >= limit && node.ejected_until.is_none() {
            node.failures = 0;
            node.ejected_until = Some(now + self.config.retry_interval);
            self.rebuild(now);
        }
    }

    /// A direct port failed: the partitions are asked for again before the next use.
    pub(crate) fn forget_partitions(&mut self, server: usize) {
        self.nodes[server].partitions = Partitions::Unknown;
    }

    /// Whether a server is on the ring.
    #[cfg(test)]
    pub(crate) fn is_live(&self, server: usize) -> bool {
        self.nodes[server].ejected_until.is_none()
    }

    /// After a call: tells the fleet which servers answered and which failed, and gives each
    /// unanswered request its error. Returns the requests to send once more: those a direct port
    /// failed before anything was sent, or that only read (the partitions are asked for again
    /// first, and a direct port's failure is not the server's).
    pub(crate) fn settle(
        &mut self,
        groups: &[Group],
        failures: Vec<Option<Failure>>,
        ops: &[Op<'_>],
        replies: &[Option<Reply>],
        errors: &mut [Option<Error>],
        retry: bool,
    ) -> Vec<usize> {
        let mut again = Vec::new();
        let now = Instant::now();
        for (group, failure) in groups.iter().zip(failures) {
            let place = group.place;
            let Some(failure) = failure else {
                self.succeeded(place.server);
                continue;
            };
            let direct = place.addr != self.nodes[place.server].addr;
            if direct {
                self.forget_partitions(place.server);
            } else if failure.error.is_server_failure() {
                // Refused credentials or TLS settings are the caller's to fix, not a reason to
                // move the server's keys elsewhere.
                self.failed(place.server, now);
            }
            for &op in group.rounds.iter().flat_map(|r| r.expects.iter()).flat_map(|e| e.ops()) {
                if replies[op].is_some() {
                    continue;
                }
                let safe = !failure.sent || matches!(ops[op], Op::Get(_) | Op::Gets(_) | Op::VectorGet { .. });
                if retry && direct && safe {
                    again.push(op);
                } else {
                    errors[op] = Some(failure.error.clone());
                }
            }
        }
        again
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_server_leaves_the_ring_and_comes_back() {
        let mut config = Config::parse(&["127.0.0.1:1:1", "127.0.0.1:2:1", "127.0.0.1:3:1"]).unwrap();
        config.direct = false;
        config.retry_interval = Duration::from_secs(10);
        let mut fleet = Fleet::new(config).unwrap();
        let keys: Vec<String> = (0..3000).map(|i| format!("k{i}")).collect();
        let owner =
            |fleet: &Fleet| -> Vec<usize> { keys.iter().map(|k| fleet.server_for(k.as_bytes()).unwrap()).collect() };
        let before = owner(&fleet);
        assert!(before.contains(&1));
        let t0 = Instant::now();
        fleet.failed(1, t0);
        assert_eq!(owner(&fleet), before, "one failure is under the limit");
        fleet.succeeded(1);
        fleet.failed(1, t0);
        assert_eq!(owner(&fleet), before, "success resets the count");
        fleet.failed(1, t0);
        assert!(!fleet.is_live(1) && !owner(&fleet).contains(&1));
        fleet.refresh(t0 + Duration::from_secs(9));
        assert!(!fleet.is_live(1));
        fleet.refresh(t0 + Duration::from_secs(10));
        assert_eq!(owner(&fleet), before, "back after the retry interval");
    }

    #[test]
    fn a_lone_server_takes_every_key_until_ejected() {
        let mut fleet = Fleet::new(Config::parse(&["127.0.0.1:9:5"]).unwrap()).unwrap();
        assert_eq!(fleet.server_for(b"x"), Ok(0));
        let now = Instant::now();
        fleet.failed(0, now);
        fleet.failed(0, now);
        assert_eq!(fleet.server_for(b"x"), Err(Error::NoServer));
        assert!(Fleet::new(Config::new(Vec::new())).is_err());
    }
}
